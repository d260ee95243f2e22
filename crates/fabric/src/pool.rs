//! A memory pool on any backend, chosen at run time.

use crate::contract::{LocalMem, RpcHandler};
use crate::runtime::{RunReport, Topology};
use crate::shm::ShmPool;
use crate::sim::SimPool;
use crate::ucx::UcxPool;
use crate::{Endpoint, FabricError, NodeId};
use std::future::Future;
use std::sync::Arc;

/// The backends, behind one interface: what the CLI, the store and the tests hold.
// One pool per run, never moved in a loop: its size does not matter, and which variant is
// the largest depends on whether UCX is installed (without it `UcxPool` is a stub).
#[allow(clippy::large_enum_variant)]
pub enum Pool {
    Sim(SimPool),
    Shm(ShmPool),
    /// Memory nodes reached over UCX (in a build without UCX, no such pool can be made).
    Ucx(UcxPool),
}

impl Pool {
    pub const BACKENDS: [&'static str; 3] = ["sim", "shm", "ucx"];

    pub fn backend(&self) -> &'static str {
        match self {
            Pool::Sim(_) => "sim",
            Pool::Shm(_) => "shm",
            Pool::Ucx(_) => "ucx",
        }
    }

    pub fn node_sizes(&self) -> Vec<u64> {
        match self {
            Pool::Sim(p) => p.node_sizes(),
            Pool::Shm(p) => p.node_sizes(),
            Pool::Ucx(p) => p.node_sizes(),
        }
    }

    /// Re-bootstraps memory node `node` for [`Pool::try_with_local`]'s blocking accesses, if
    /// it was restarted at its address since (ucx: [`UcxPool::reconnect`]; sim and shm: the
    /// nodes live in this process, nothing to do). Returns whether it connected anew.
    pub fn reconnect(&self, node: NodeId) -> Result<bool, FabricError> {
        match self {
            Pool::Ucx(p) => p.reconnect(node),
            _ => Ok(false),
        }
    }

    /// Whether memory node `node` was down when this pool connected (ucx with
    /// `UcxConfig::allow_down`; never on sim and shm, whose nodes live in this process).
    pub fn node_down(&self, node: NodeId) -> bool {
        match self {
            Pool::Ucx(p) => p.node_down(node),
            _ => false,
        }
    }

    /// The memory node's own CPU view of its region: loading before a run, checking after.
    ///
    /// # Panics
    ///
    /// If `node` does not exist, an access falls outside the region, or (ucx, memory node of
    /// another process) a verb fails: use [`Pool::try_with_local`] where that can happen.
    pub fn with_local<T>(&self, node: NodeId, f: impl FnOnce(&mut dyn LocalMem) -> T) -> T {
        match self {
            Pool::Sim(p) => p.with_local(node, f),
            Pool::Shm(p) => p.with_local(node, f),
            Pool::Ucx(p) => p
                .try_with_local(node, f)
                .unwrap_or_else(|e| panic!("with_local on memory node {node}: {e}")),
        }
    }

    /// [`Pool::with_local`], with the failures of a remote memory node as errors. On `ucx`,
    /// a memory node served by another process is reached with blocking verbs (one round trip
    /// per access); after the first failed access the others are skipped (reads see zeroes),
    /// and that failure is returned.
    pub fn try_with_local<T>(
        &self,
        node: NodeId,
        f: impl FnOnce(&mut dyn LocalMem) -> T,
    ) -> Result<T, FabricError> {
        let nodes = self.node_sizes().len();
        if node as usize >= nodes {
            return Err(FabricError::NoSuchNode { node, nodes });
        }
        match self {
            Pool::Sim(p) => Ok(p.with_local(node, f)),
            Pool::Shm(p) => Ok(p.with_local(node, f)),
            Pool::Ucx(p) => p.try_with_local(node, f),
        }
    }

    pub fn set_rpc_handler(&mut self, handler: Arc<dyn RpcHandler>) {
        match self {
            Pool::Sim(p) => p.set_rpc_handler(handler),
            Pool::Shm(p) => p.set_rpc_handler(handler),
            // Reaches the memory nodes this process serves only.
            Pool::Ucx(p) => p.set_rpc_handler(handler),
        }
    }

    /// Runs `f` as every coordinator of `topo` (see [`SimPool::run`], [`ShmPool::run`] and
    /// [`UcxPool::run`]).
    pub fn run<F, Fut, R>(
        &mut self,
        topo: Topology,
        stop_at_ns: Option<u64>,
        f: F,
    ) -> Result<RunReport<R>, FabricError>
    where
        F: Fn(Endpoint) -> Fut + Sync,
        Fut: Future<Output = R> + 'static,
        R: Send + 'static,
    {
        match self {
            Pool::Sim(p) => p.run(topo, stop_at_ns, f),
            Pool::Shm(p) => p.run(topo, stop_at_ns, f),
            Pool::Ucx(p) => p.run(topo, stop_at_ns, f),
        }
    }
}
