//! One-sided verbs to memory nodes: the fabric layer of dtxn.
//!
//! A coordinator reaches the memory pool through an [`Endpoint`]: it builds a doorbell batch of
//! READ/WRITE/CAS/FAA/FLUSH (and optionally RPC) ops, posts it, and awaits its completion, one
//! round trip. What the verbs promise, and what they do not, is the [`Fabric`] contract.
//! Backends: [`sim`] (deterministic, adversarial, virtual time), [`shm`] (real memory and
//! CPU atomics, one or several processes) and [`ucx`] (memory nodes in other processes or on
//! other hosts, over OpenUCX; present when built with UCX, see [`ucx::AVAILABLE`]).

mod contract;
mod dirty;
mod endpoint;
mod error;
mod nodeset;
mod pool;
mod profile;
mod runtime;
pub mod shm;
pub mod sim;
mod stats;
#[doc(hidden)]
pub mod testing;
pub mod ucx;
mod verbs;

pub use contract::{wall_clock_ns, Fabric, LocalMem, RpcHandler};
pub use endpoint::{CoordId, CoordRng, Endpoint, Lease, Post, Sleep, WaitBackground, LEASE_DONE};
pub use error::FabricError;
pub use nodeset::NodeSet;
pub use pool::Pool;
pub use profile::{Profile, ProfileError};
pub use runtime::{RunReport, Topology};
pub use stats::Stats;
pub use verbs::{lines_of, Batch, Op, OpId, OpKind, LINE};

/// Memory nodes are numbered from 0.
pub type NodeId = u16;
