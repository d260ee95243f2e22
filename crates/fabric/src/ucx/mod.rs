//! The `ucx` backend: memory nodes in other processes or on other hosts, reached with OpenUCX's
//! UCP one-sided verbs (`ucp_put_nbx`, `ucp_get_nbx`, `ucp_atomic_op_nbx`) through the system
//! `libucx` (see the `dtxn-ucx-sys` crate).
//!
//! # Pieces
//!
//! - [`MemNode`]: a memory node. It maps a region with UCX (allocated by UCX, or a file it
//!   maps and registers), serves a tiny bootstrap protocol on a TCP listener (worker address,
//!   region base and size, packed rkey — only to a client that presents the node's token), and
//!   then only progresses UCX on its own thread: transports without hardware one-sided verbs
//!   (TCP, shared memory with registered memory) execute GET and atomics as active messages in
//!   that thread. It never writes the region by itself. It serves the RPC verb with its
//!   [`RpcHandler`] (UCP active messages, on the same progress thread, one message at a time:
//!   a memory node has one core serving RPCs), or answers [`FabricError::NoRpcHandler`]. The
//!   client packs a batch's RPC ops to one node into one message; the node serves them in
//!   order, measures the handler time ([`crate::Stats::mn_cpu_ns`]) and answers all of them
//!   in one message.
//! - [`UcxPool`]: the compute side. [`UcxPool::connect`] bootstraps from every memory node;
//!   [`UcxPool::run`] runs coordinators like [`crate::shm::ShmPool::run`]: one OS thread per
//!   worker thread, each with its own UCP worker and one endpoint per memory node (its queue
//!   pairs), polling its coroutines round-robin.
//!
//! # How the contract is met
//!
//! - Doorbell batch: the ops of a batch are posted back to back (non-blocking) and the batch
//!   completes when all of them have.
//! - G6, an atomic before every later op of its QP: UCP orders nothing by itself, so after an
//!   atomic the thread's next op is preceded by `ucp_worker_fence` (lazily: only if something
//!   follows). Likewise a WRITE after a WRITE (G4) is fenced. The fence is per worker, so it
//!   also orders other memory nodes' QPs of the thread: stronger than asked.
//! - Completion means executed: a PUT completes locally (its buffer is free) before it lands,
//!   so a batch with WRITEs also flushes each endpoint it wrote to (`ucp_ep_flush_nbx`) and
//!   completes only when the flush has. FLUSH is `ucp_ep_flush_nbx`; it does not persist
//!   (no remote persistent-memory commit is issued).
//! - Line atomicity of READ and WRITE: on TCP (and every transport without hardware RMA)
//!   UCX emulates GET and PUT with active messages executed by the memory node's single progress
//!   thread, one message at a time, so each message is atomic as a whole. A large GET or PUT is
//!   split by UCX into fragments, at boundaries that need not be line-aligned; so every READ and
//!   WRITE is posted as line-aligned pieces of at most [`CHUNK`] bytes, each of which fits one
//!   fragment. On RDMA NICs the NIC reads and writes PCIe-line-wise, as the contract assumes.
//! - **Shared-memory transports are refused**: with `posix`/`sysv`/`xpmem` (and UCX-allocated
//!   memory on the same host) the client maps the region and GET/PUT become `memcpy` by the
//!   client's CPU, racing with other clients' — not atomic per line. [`UcxPool::connect`]
//!   detects a directly mapped region (`ucp_rkey_ptr` succeeds) and fails unless
//!   [`UcxConfig::allow_direct`] is set (then READs may return torn lines: for measurements,
//!   never for protocols that rely on line atomicity). Restrict the transports instead, e.g.
//!   `UCX_TLS=tcp` or `rc,ud` on RDMA NICs.
//!
//! # Configuration
//!
//! UCX reads `UCX_*` environment variables; [`UcxConfig`] settings apply on top. On this kind
//! of host without RDMA NICs use [`UcxConfig::loopback_tcp`] (`TLS=tcp`, `NET_DEVICES=lo`):
//! without `NET_DEVICES`, UCX's TCP transport also uses every other interface.

#[cfg(ucx)]
mod bootstrap;
#[cfg(ucx)]
mod client;
#[cfg(ucx)]
mod server;
#[cfg(not(ucx))]
mod stub;
#[cfg(ucx)]
mod ucp;

#[cfg(ucx)]
pub use client::UcxPool;
#[cfg(ucx)]
pub use server::MemNode;
#[cfg(not(ucx))]
pub use stub::{MemNode, UcxPool};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Whether this build has the ucx backend (the `ucx` feature, and UCX found by pkg-config).
pub const AVAILABLE: bool = cfg!(ucx);

/// READs and WRITEs are posted as line-aligned pieces of at most this many bytes, so that UCX
/// never splits one of them across active-message fragments (its TCP segments are 8 KiB).
pub const CHUNK: usize = 4096;

/// UCX settings shared by memory nodes and compute processes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UcxConfig {
    /// UCX configuration keys without the `UCX_` prefix, applied over the environment, e.g.
    /// `("TLS", "tcp")`, `("NET_DEVICES", "lo")`.
    pub settings: Vec<(String, String)>,
    /// Accept memory nodes that this process can map directly (UCX shared-memory transports),
    /// although their READs are not atomic per line. See the module docs.
    pub allow_direct: bool,
    /// Take a memory node that does not answer (its bootstrap, or its endpoint's creation) as
    /// down rather than fail: every op to it then fails with [`FabricError::NodeDown`], as
    /// verbs to a node that dies during a run do. For pools whose view may mark nodes failed
    /// (memory-node failover): the store decides whether a down node is one it can do
    /// without. Off by default, where a node down is a setup error with its reason.
    pub allow_down: bool,
    /// How long a blocking access ([`UcxPool::try_with_local`]) and a thread's teardown wait
    /// for a memory node's answer before taking it as down (`None`: 10 s).
    pub blocking_timeout: Option<std::time::Duration>,
}

impl UcxConfig {
    /// TCP on the loopback interface only: every test and single-host run.
    pub fn loopback_tcp() -> UcxConfig {
        UcxConfig {
            settings: vec![
                ("TLS".into(), "tcp".into()),
                ("NET_DEVICES".into(), "lo".into()),
            ],
            allow_direct: false,
            allow_down: false,
            blocking_timeout: None,
        }
    }
}

/// A memory node's setup.
#[derive(Debug, Clone)]
pub struct MemNodeConfig {
    /// Region size in bytes (a positive multiple of 64).
    pub size: u64,
    /// Where the bootstrap listener listens (port 0: any free port, see [`MemNode::addr`]).
    pub listen: SocketAddr,
    /// What compute processes must present to get the region's rkey. Not empty.
    pub token: String,
    /// `None`: UCX allocates the region (zeroed). `Some(file)`: the region is this file, created
    /// or extended to `size` bytes, mapped shared and registered (its contents are kept).
    pub file: Option<PathBuf>,
    pub ucx: UcxConfig,
    /// How long the progress thread keeps polling after its last event before it sleeps on
    /// the worker's event fd ([`MemNodeConfig::DEFAULT_SPIN`]). Spinning keeps emulated verbs
    /// at TCP latency when the node has a core of its own; where memory nodes share cores with
    /// other busy threads (several nodes and compute processes on one small host) the spinning
    /// threads starve each other, and `ZERO` is much faster.
    pub spin: Duration,
}

impl MemNodeConfig {
    pub const DEFAULT_SPIN: Duration = Duration::from_micros(200);
}
