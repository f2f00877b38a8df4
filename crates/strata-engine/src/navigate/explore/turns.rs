//! The debate's structure as the navigator walks it: a turn's round, the turns around
//! it, and reading them (the replies to a turn, the turn a reply answers).

use super::Explorer;
use crate::corpus::Place;
use crate::error::Result;
use crate::node::{Node, NodeId};

impl Explorer<'_> {
    /// The debate round of a FULL node (None for documents and other nodes).
    pub(crate) fn round_of(&self, id: &NodeId) -> Option<u32> {
        match self.place(id) {
            Some(Place::Full(pi, ci)) => {
                let p = &self.trees.plans[pi];
                p.sources[p.chunks[ci].source].round
            }
            _ => None,
        }
    }

    /// The turns around a debate turn, in order: up to `before` turns before it (nearest
    /// first) and `after` turns after it, as FULL node ids of the same scope. Empty for a
    /// document's chunks (no rounds) and for ids outside the explored trees.
    pub(crate) fn turns_around(
        &self,
        id: &NodeId,
        before: usize,
        after: usize,
    ) -> (Vec<NodeId>, Vec<NodeId>) {
        let Some(Place::Full(pi, ci)) = self.place(id) else {
            return (Vec::new(), Vec::new());
        };
        let p = &self.trees.plans[pi];
        if p.sources[p.chunks[ci].source].round.is_none() {
            return (Vec::new(), Vec::new());
        }
        // One id per turn: the first chunk of each source (where a reply sentence is).
        let (own, len) = (p.chunks[ci].source, p.chunks.len());
        let mut k = ci;
        while k > 0 && p.chunks[k - 1].source == own {
            k -= 1;
        }
        let mut back = Vec::new();
        while k > 0 && back.len() < before {
            let src = p.chunks[k - 1].source;
            let mut f = k - 1;
            while f > 0 && p.chunks[f - 1].source == src {
                f -= 1;
            }
            back.push(p.chunks[f].full);
            k = f;
        }
        let mut k = ci;
        while k + 1 < len && p.chunks[k + 1].source == own {
            k += 1;
        }
        k += 1;
        let mut fwd = Vec::new();
        while k < len && fwd.len() < after {
            fwd.push(p.chunks[k].full);
            let src = p.chunks[k].source;
            while k < len && p.chunks[k].source == src {
                k += 1;
            }
        }
        (back, fwd)
    }

    /// Reads turns that [`Explorer::turns_around`] named (the replies to a turn, or the
    /// turn a reply answers), within the token budget: the structure of the debate, like
    /// `descend` reads a node's children.
    pub(crate) fn read_turns(&mut self, ids: &[NodeId], why: &str) -> Result<Vec<Node>> {
        let mut out = Vec::new();
        let mut tokens = 0;
        for id in ids {
            if !matches!(self.place(id), Some(Place::Full(..))) {
                continue;
            }
            let n = self.corpus.node(id, self.now)?;
            if self.own_tokens() + n.tokens as u64 > self.cfg.max_tokens {
                break;
            }
            self.tokens += n.tokens as u64;
            tokens += n.tokens as u64;
            self.examine(*id);
            out.push(n);
        }
        if !out.is_empty() {
            self.step(
                "turns",
                format!("{why}: {} turn(s), {tokens} tokens", out.len()),
            );
        }
        Ok(out)
    }
}
