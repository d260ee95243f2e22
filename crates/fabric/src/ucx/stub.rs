//! The ucx backend's interface in a build without UCX: nothing can be constructed, and the
//! constructors say why.

use super::{MemNodeConfig, UcxConfig};
use crate::contract::{LocalMem, RpcHandler};
use crate::runtime::{RunReport, Topology};
use crate::{CoordId, Endpoint, FabricError, NodeId};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

fn unavailable() -> FabricError {
    FabricError::Setup(
        "this build of dtxn has no ucx backend: install UCX (Debian: libucx-dev, found with \
         pkg-config) and build with the `ucx` feature (on by default)"
            .into(),
    )
}

/// Uninhabited: no value of the stub types exists.
#[derive(Debug)]
enum Never {}

/// See the real `MemNode` (built with UCX).
#[derive(Debug)]
pub struct MemNode(Never);

impl MemNode {
    pub fn start(_cfg: MemNodeConfig, _node: NodeId) -> Result<MemNode, FabricError> {
        Err(unavailable())
    }

    pub fn addr(&self) -> SocketAddr {
        match self.0 {}
    }

    pub fn size(&self) -> u64 {
        match self.0 {}
    }

    pub fn node(&self) -> NodeId {
        match self.0 {}
    }

    pub fn persisted_bytes(&self) -> u64 {
        match self.0 {}
    }

    pub fn set_rpc_handler(&self, _handler: Arc<dyn RpcHandler>) {
        match self.0 {}
    }

    pub fn with_local<T>(&self, _f: impl FnOnce(&mut dyn LocalMem) -> T) -> T {
        match self.0 {}
    }

    pub fn shutdown(self) {}
}

/// See the real `UcxPool` (built with UCX).
#[derive(Debug)]
pub struct UcxPool(Never);

impl UcxPool {
    pub fn connect(
        _addrs: &[SocketAddr],
        _token: &str,
        _cfg: UcxConfig,
    ) -> Result<UcxPool, FabricError> {
        Err(unavailable())
    }

    pub fn spawn_local(_sizes: &[u64], _cfg: UcxConfig) -> Result<UcxPool, FabricError> {
        Err(unavailable())
    }

    pub fn addrs(&self) -> &[SocketAddr] {
        match self.0 {}
    }

    pub fn set_seed(&mut self, _seed: u64) {
        match self.0 {}
    }

    pub fn seed(&self) -> u64 {
        match self.0 {}
    }

    pub fn set_compute_node(&mut self, _k: u32) {
        match self.0 {}
    }

    pub fn compute_node(&self) -> u32 {
        match self.0 {}
    }

    pub fn node_sizes(&self) -> Vec<u64> {
        match self.0 {}
    }

    pub fn node_down(&self, _node: NodeId) -> bool {
        false
    }

    pub fn set_rpc_handler(&mut self, _handler: Arc<dyn RpcHandler>) {
        match self.0 {}
    }

    pub fn reconnect(&self, _node: NodeId) -> Result<bool, FabricError> {
        match self.0 {}
    }

    pub fn try_with_local<T>(
        &self,
        _node: NodeId,
        _f: impl FnOnce(&mut dyn LocalMem) -> T,
    ) -> Result<T, FabricError> {
        match self.0 {}
    }

    pub fn endpoint(&self, _id: CoordId) -> Result<Endpoint, FabricError> {
        match self.0 {}
    }

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
        match self.0 {}
    }
}
