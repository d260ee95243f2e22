//! A memory pool on any backend, chosen at run time.

use crate::contract::{LocalMem, RpcHandler};
use crate::runtime::{RunReport, Topology};
use crate::shm::ShmPool;
use crate::sim::SimPool;
use crate::{Endpoint, FabricError, NodeId};
use std::future::Future;
use std::sync::Arc;

/// The backends, behind one interface: what the CLI, the store and the tests hold.
pub enum Pool {
    Sim(SimPool),
    Shm(ShmPool),
}

impl Pool {
    pub const BACKENDS: [&'static str; 2] = ["sim", "shm"];

    pub fn backend(&self) -> &'static str {
        match self {
            Pool::Sim(_) => "sim",
            Pool::Shm(_) => "shm",
        }
    }

    pub fn node_sizes(&self) -> Vec<u64> {
        match self {
            Pool::Sim(p) => p.node_sizes(),
            Pool::Shm(p) => p.node_sizes(),
        }
    }

    /// The memory node's own CPU view of its region: loading before a run, checking after.
    pub fn with_local<T>(&self, node: NodeId, f: impl FnOnce(&mut dyn LocalMem) -> T) -> T {
        match self {
            Pool::Sim(p) => p.with_local(node, f),
            Pool::Shm(p) => p.with_local(node, f),
        }
    }

    pub fn set_rpc_handler(&mut self, handler: Arc<dyn RpcHandler>) {
        match self {
            Pool::Sim(p) => p.set_rpc_handler(handler),
            Pool::Shm(p) => p.set_rpc_handler(handler),
        }
    }

    /// Runs `f` as every coordinator of `topo` (see [`SimPool::run`] and [`ShmPool::run`]).
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
        }
    }
}
