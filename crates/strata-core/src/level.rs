//! The five abstraction levels.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Index, IndexMut};
use std::str::FromStr;

/// An abstraction level. The numeric value is part of every node id and of the index.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// The source text of one chunk, verbatim. Ground truth; never expires.
    Full = 0,
    /// One node per chunk: the chunk with every fact kept, ~50 %.
    Detailed = 1,
    /// One node per group of chunks (a debate round, a document section), ~20 %.
    Summary = 2,
    /// One node per scope, ~5 %.
    Abstract = 3,
    /// Tags only (speakers, rounds, entities, numbers, dates, keywords), one per derived node.
    Metadata = 4,
}

impl Level {
    pub const ALL: [Level; 5] = [
        Level::Full,
        Level::Detailed,
        Level::Summary,
        Level::Abstract,
        Level::Metadata,
    ];

    pub fn as_u8(self) -> u8 {
        self as u8
    }

    pub fn from_u8(v: u8) -> Option<Level> {
        Level::ALL.get(v as usize).copied()
    }

    pub fn name(self) -> &'static str {
        match self {
            Level::Full => "full",
            Level::Detailed => "detailed",
            Level::Summary => "summary",
            Level::Abstract => "abstract",
            Level::Metadata => "metadata",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Level {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Level> {
        let mut l = s.trim().to_ascii_lowercase();
        // aragora's name for the source text.
        if l == "raw" {
            l = "full".into();
        }
        Level::ALL
            .into_iter()
            .find(|lv| lv.name() == l || lv.as_u8().to_string() == l)
            .ok_or_else(|| {
                crate::Error::invalid(format!(
                    "unknown level `{s}`: expected full (or raw), detailed, summary, abstract or metadata (or 0-4)"
                ))
            })
    }
}

/// One value per level, indexed by [`Level`] (no `as usize` at the call sites). Serialised as
/// an array of five in level order (full, detailed, summary, abstract, metadata), the shape
/// the JSON output has always had.
///
/// ```
/// use strata_core::{Level, PerLevel};
/// let counts: PerLevel<usize> = [Level::Detailed, Level::Summary, Level::Detailed]
///     .into_iter()
///     .collect();
/// assert_eq!(counts[Level::Detailed], 2);
/// assert_eq!(serde_json::to_string(&counts).unwrap(), "[0,2,1,0,0]");
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PerLevel<T>([T; 5]);

impl<T> PerLevel<T> {
    /// Each level with its value, in level order.
    pub fn iter(&self) -> impl Iterator<Item = (Level, &T)> {
        Level::ALL.into_iter().zip(self.0.iter())
    }
}

impl<T> Index<Level> for PerLevel<T> {
    type Output = T;
    fn index(&self, level: Level) -> &T {
        &self.0[level as usize]
    }
}

impl<T> IndexMut<Level> for PerLevel<T> {
    fn index_mut(&mut self, level: Level) -> &mut T {
        &mut self.0[level as usize]
    }
}

/// Counts the levels.
impl FromIterator<Level> for PerLevel<usize> {
    fn from_iter<I: IntoIterator<Item = Level>>(levels: I) -> Self {
        let mut counts = PerLevel::default();
        for l in levels {
            counts[l] += 1;
        }
        counts
    }
}

/// Prints as the array it serialises to.
impl<T: fmt::Debug> fmt::Debug for PerLevel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.0).finish()
    }
}
