//! The coordinator runtime: T worker threads x C coroutines per compute process, each coroutine
//! an `async` coordinator driven by a small executor. The same coordinator code runs on every
//! backend: `sim` drives all coroutines of all compute nodes from its event loop in virtual time,
//! `shm` gives each worker thread a real OS thread that polls its coroutines round-robin.

use crate::stats::Stats;
use crate::Endpoint;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// How many coordinators run, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Topology {
    /// Compute nodes (processes). `shm` runs exactly one.
    pub compute_nodes: u32,
    /// Worker threads per compute node.
    pub threads: u32,
    /// Coordinator coroutines per worker thread.
    pub coroutines: u32,
}

impl Topology {
    pub fn coordinators(&self) -> u32 {
        self.compute_nodes * self.threads * self.coroutines
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.compute_nodes == 0 || self.threads == 0 || self.coroutines == 0 {
            return Err(format!(
                "compute nodes, threads and coroutines must all be at least 1 (got {} x {} x {})",
                self.compute_nodes, self.threads, self.coroutines
            ));
        }
        Ok(())
    }
}

/// What a run produced: each coordinator's output (`None` if its compute node crashed), the
/// counters of every coordinator, and the clock.
#[derive(Debug)]
pub struct RunReport<R> {
    pub outputs: Vec<Option<R>>,
    /// Counters per coordinator, including those whose compute node crashed.
    pub stats: Vec<Stats>,
    /// Virtual nanoseconds on `sim`, wall nanoseconds on `shm`.
    pub elapsed_ns: u64,
    /// Whether `elapsed_ns` is virtual time.
    pub virtual_time: bool,
    /// `sim` only: the hash of every executed op (time, coordinator, node, kind, address, data).
    pub trace_hash: u64,
    /// Verbs executed at memory nodes (`sim`: exact; `shm`: equals those posted).
    pub verbs_executed: u64,
}

impl<R> RunReport<R> {
    pub fn total_stats(&self) -> Stats {
        let mut t = Stats::default();
        for s in &self.stats {
            t += *s;
        }
        t
    }
}

pub(crate) type Task<R> = Pin<Box<dyn Future<Output = (R, Stats)>>>;

/// Wraps a coordinator so that the executor gets its counters back with its output.
pub(crate) fn task<F, Fut, R>(f: &F, ep: Endpoint) -> Task<R>
where
    F: Fn(Endpoint) -> Fut,
    Fut: Future<Output = R> + 'static,
    R: 'static,
{
    let stats = ep.stats_cell();
    let fut = f(ep);
    Box::pin(async move {
        let r = fut.await;
        (r, stats.get())
    })
}

/// Polls once with a no-op waker: the executors know by themselves when a coordinator can make
/// progress (its batch completed, its sleep ended), so wakers carry no information.
pub(crate) fn poll_once<T>(fut: &mut Pin<Box<dyn Future<Output = T>>>) -> Poll<T> {
    let mut cx = Context::from_waker(Waker::noop());
    fut.as_mut().poll(&mut cx)
}
