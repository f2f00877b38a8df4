//! What of a scope's current tree is built: per level, the nodes the plan has, how many of
//! them are live and their tokens. What a compress request answers with (aragora's
//! `compressed_tokens`, `compression_ratios`, `levels_created`) and what a level that can be
//! served without a build (a cached context) means.

use crate::error::Result;
use crate::level::{Level, PerLevel};
use crate::plan::Plan;
use crate::store::Store;
use serde::Serialize;

/// One level of a tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct LevelTally {
    /// Distinct nodes the plan has at this level.
    pub planned: usize,
    /// Of those, the ones stored and not expired.
    pub live: usize,
    /// cl100k tokens of the live ones.
    pub tokens: u64,
}

impl LevelTally {
    /// Every node of the level is live (and there is at least one).
    pub(crate) fn complete(&self) -> bool {
        self.planned > 0 && self.live == self.planned
    }
}

/// A scope's tree as built at `now`.
#[derive(Clone, Debug, Serialize)]
pub struct Built {
    /// Tokens of the source text (the FULL level).
    pub full_tokens: u64,
    pub levels: PerLevel<LevelTally>,
}

impl Built {
    /// The levels whose every node is live, in level order.
    pub fn complete_levels(&self) -> Vec<Level> {
        self.levels
            .iter()
            .filter(|(_, t)| t.complete())
            .map(|(l, _)| l)
            .collect()
    }
}

/// Counts what of `plan` is live in `store` at `now` (reads every node of the tree once).
pub(crate) fn tally(store: &Store, plan: &Plan, now: u64) -> Result<Built> {
    let mut levels = PerLevel::<LevelTally>::default();
    for level in Level::ALL {
        let t = &mut levels[level];
        for id in plan.ids_at(level) {
            t.planned += 1;
            if let Some(n) = store.get_live(&id, now)? {
                t.live += 1;
                t.tokens += n.tokens as u64;
            }
        }
    }
    Ok(Built {
        full_tokens: plan.full_tokens,
        levels,
    })
}
