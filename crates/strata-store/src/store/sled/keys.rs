//! Key encodings of the sled trees.

use super::EmbedKey;
use crate::error::{Error, Result};
use crate::node::NodeId;

/// The key of a source: the scope's length (4 bytes, big-endian), the scope, the source id.
/// The length prefix makes the key unambiguous whatever bytes the two names hold (with a
/// separator, `kb\0x` + `a.md` and `kb` + `x\0a.md` were one key), and a scope's sources
/// are still one prefix range.
pub(crate) fn source_key(scope: &str, source: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + scope.len() + source.len());
    k.extend_from_slice(&(scope.len() as u32).to_be_bytes());
    k.extend_from_slice(scope.as_bytes());
    k.extend_from_slice(source.as_bytes());
    k
}

pub(super) fn embed_key(model: EmbedKey, id: &NodeId) -> [u8; 40] {
    let mut k = [0u8; 40];
    k[..8].copy_from_slice(&model.0);
    k[8..].copy_from_slice(&id.0);
    k
}

/// The bytes of a deadline in the `deadlines` tree (`u64::MAX`: never).
pub(super) fn deadline_of(v: &[u8], id: &NodeId) -> Result<u64> {
    let b: [u8; 8] = v
        .try_into()
        .map_err(|_| Error::DataCorruption(format!("deadline of {id} is not 8 bytes")))?;
    Ok(u64::from_be_bytes(b))
}

/// The count of losses as the deadlines tree keeps it (`tx::LOSSES`).
pub(super) fn losses_of(v: &[u8]) -> Result<u64> {
    let b: [u8; 8] = v
        .try_into()
        .map_err(|_| Error::DataCorruption("the count of node losses is not 8 bytes".into()))?;
    Ok(u64::from_be_bytes(b))
}

pub(super) fn expiry_key(at: u64, id: &NodeId) -> [u8; 40] {
    let mut k = [0u8; 40];
    k[..8].copy_from_slice(&at.to_be_bytes());
    k[8..].copy_from_slice(&id.0);
    k
}

pub(super) fn node_id(k: &[u8], what: &str) -> Result<NodeId> {
    let arr: [u8; 32] = k
        .try_into()
        .map_err(|_| Error::DataCorruption(format!("{what} key is not 32 bytes")))?;
    Ok(NodeId(arr))
}
