//! `NodeTx`: the one place a node is written or removed, with its deadline, expiry entry,
//! pending-index mark and fallback mark, inside one sled transaction.

use super::keys::{deadline_of, expiry_key, losses_of};
use crate::error::Error;
use crate::node::{Node, NodeId};
use sled::transaction::{ConflictableTransactionError, TransactionError, TransactionalTree};

/// A sled transaction's error as ours (no transaction of ours aborts on purpose).
pub(super) fn txn_err(what: &str) -> impl FnOnce(TransactionError<()>) -> Error + '_ {
    move |e| match e {
        TransactionError::Storage(e) => super::sled_error(e),
        TransactionError::Abort(()) => Error::DataCorruption(format!("{what} aborted")),
    }
}

/// The node trees inside one transaction: a node, its deadline, its expiry entry, its
/// pending-index mark and its fallback mark always change together.
pub(super) struct NodeTx<'a> {
    pub(super) nodes: &'a TransactionalTree,
    pub(super) expiry: &'a TransactionalTree,
    pub(super) deadlines: &'a TransactionalTree,
    pub(super) unindexed: &'a TransactionalTree,
    pub(super) fallbacks: &'a TransactionalTree,
}

/// Where the deadlines tree keeps the count of losses.
pub(super) const LOSSES: &[u8] = b"losses";

pub(super) type TxResult<T> = std::result::Result<T, ConflictableTransactionError<()>>;

impl NodeTx<'_> {
    pub(super) fn old_deadline(&self, id: &NodeId) -> TxResult<Option<u64>> {
        match self.deadlines.get(id.0)? {
            Some(v) => Ok(Some(
                deadline_of(&v, id).map_err(|_| ConflictableTransactionError::Abort(()))?,
            )),
            None => Ok(None),
        }
    }

    pub(super) fn mark_pending(&self, id: &NodeId) -> TxResult<()> {
        let g = self.unindexed.generate_id()?;
        self.unindexed.insert(&id.0[..], &g.to_be_bytes()[..])?;
        Ok(())
    }

    /// Counts a loss ([`crate::store::NodeStore::losses`]), kept in the deadlines tree under
    /// a key no node id has (ids are 32 bytes).
    pub(super) fn lose(&self) -> TxResult<()> {
        let n = match self.deadlines.get(LOSSES)? {
            Some(v) => losses_of(&v).map_err(|_| ConflictableTransactionError::Abort(()))?,
            None => 0,
        };
        self.deadlines.insert(LOSSES, &(n + 1).to_be_bytes()[..])?;
        Ok(())
    }

    pub(super) fn put(&self, node: &Node, value: &[u8], mark: Option<&[u8]>) -> TxResult<()> {
        let deadline = node.expires_at.unwrap_or(u64::MAX);
        if let Some(old_at) = self.old_deadline(&node.id)? {
            if old_at > deadline {
                self.lose()?;
            }
            if old_at != u64::MAX {
                self.expiry.remove(&expiry_key(old_at, &node.id)[..])?;
            }
        }
        self.nodes.insert(&node.id.0[..], value)?;
        self.deadlines
            .insert(&node.id.0[..], &deadline.to_be_bytes()[..])?;
        if let Some(at) = node.expires_at {
            self.expiry.insert(&expiry_key(at, &node.id)[..], &[][..])?;
        }
        match mark {
            Some(m) => self.fallbacks.insert(&node.id.0[..], m)?,
            None => self.fallbacks.remove(&node.id.0[..])?,
        };
        self.mark_pending(&node.id)
    }

    pub(super) fn remove(&self, id: &NodeId) -> TxResult<bool> {
        if let Some(at) = self.old_deadline(id)?
            && at != u64::MAX
        {
            self.expiry.remove(&expiry_key(at, id)[..])?;
        }
        self.deadlines.remove(&id.0[..])?;
        self.fallbacks.remove(&id.0[..])?;
        let existed = self.nodes.remove(&id.0[..])?.is_some();
        if existed {
            self.lose()?;
            self.mark_pending(id)?;
        }
        Ok(existed)
    }
}
