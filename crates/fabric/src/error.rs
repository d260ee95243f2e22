//! Fabric errors: faults and misuse, never transaction outcomes.

use crate::NodeId;

/// A verb could not be carried out. Aborts are not errors: a failed CAS is a result
/// ([`crate::Endpoint::old`]), and only broken hardware or bad programs end up here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FabricError {
    /// The memory node is down (crashed, or not yet restarted); the op was not executed, or its
    /// effect is unknown (a WRITE may have been applied in part).
    #[error("memory node {0} is down")]
    NodeDown(NodeId),
    /// The batch names a memory node that does not exist.
    #[error("memory node {node} does not exist (the pool has {nodes})")]
    NoSuchNode { node: NodeId, nodes: usize },
    /// The op reaches outside the memory node's region.
    #[error("op on memory node {node} at {addr:#x}+{len} is outside its {size}-byte region")]
    OutOfBounds {
        node: NodeId,
        addr: u64,
        len: u64,
        size: u64,
    },
    /// CAS and FAA work on aligned 8-byte words only (G3 of the sync paper).
    #[error("atomic on memory node {node} at {addr:#x} is not 8-byte aligned")]
    Misaligned { node: NodeId, addr: u64 },
    /// No RPC handler is installed on this pool.
    #[error("memory node {0} serves no RPC handler")]
    NoRpcHandler(NodeId),
    /// The op does not fit the batch's 32-bit length fields.
    #[error("op of {0} bytes is too large for one verb")]
    TooLarge(u64),
    /// This coordinator's lease may have expired ([`crate::Lease`]): it is fenced, and posts
    /// nothing more (its successor may be recovering it).
    #[error("this coordinator's lease may have expired: it is fenced and posts nothing more")]
    LeaseExpired,
    /// A FLUSH could not write the memory node's file back (an I/O error of the device that
    /// holds it): what it was to persist may not be durable.
    #[error("memory node {node}: cannot persist its file: {error}")]
    Persist { node: NodeId, error: String },
    /// Setting up a backend failed (an I/O or configuration problem).
    #[error("{0}")]
    Setup(String),
}
