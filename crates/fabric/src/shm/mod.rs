//! The `shm` backend: real memory, real CPU atomics. (Stub: being written.)

use crate::contract::{LocalMem, RpcHandler};
use crate::runtime::{RunReport, Topology};
use crate::{Endpoint, FabricError, NodeId};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

/// A shared-memory pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShmConfig {
    /// Region size of each memory node, in bytes (a multiple of 64).
    pub node_sizes: Vec<u64>,
    /// `None`: anonymous memory, this process only. `Some(dir)`: one file per memory node in
    /// `dir` (e.g. under /dev/shm, or a DAX mount for durability), shareable between processes.
    pub dir: Option<PathBuf>,
    /// Emulated network latency: each batch completes this long after it was posted.
    pub delay_ns: u64,
}

pub struct ShmPool {
    _cfg: ShmConfig,
}

impl ShmPool {
    pub fn create(cfg: ShmConfig) -> Result<ShmPool, FabricError> {
        Err(FabricError::Setup(format!("shm is not implemented yet ({cfg:?})")))
    }

    pub fn node_sizes(&self) -> Vec<u64> {
        Vec::new()
    }

    pub fn with_local<T>(&self, _node: NodeId, _f: impl FnOnce(&mut dyn LocalMem) -> T) -> T {
        unimplemented!()
    }

    pub fn set_rpc_handler(&mut self, _handler: Arc<dyn RpcHandler>) {}

    pub fn run<F, Fut, R>(
        &self,
        _topo: Topology,
        _stop_at_ns: Option<u64>,
        _f: F,
    ) -> Result<RunReport<R>, FabricError>
    where
        F: Fn(Endpoint) -> Fut + Sync,
        Fut: Future<Output = R> + 'static,
        R: Send + 'static,
    {
        Err(FabricError::Setup("shm is not implemented yet".into()))
    }
}
