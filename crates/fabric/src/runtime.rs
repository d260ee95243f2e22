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
    /// `sim` only: words updated atomically both by RPC handlers and by one-sided CAS/FAA
    /// during the run, each counted once: breaches of the contract's G11. Tracked only while
    /// an RPC handler is installed; 0 on the other backends.
    pub g11_violations: u64,
    /// `sim` only: the longest flight of a one-sided op of the run, from its post (the
    /// coordinator's clock) to the execution of its last line, ns: what a lease's guard must
    /// exceed ([`crate::Lease`]). 0 on the other backends.
    pub max_flight_ns: u64,
    /// `sim` only: per memory node, the time its NIC spent serving the run's ops (one-sided
    /// verbs and RPC messages, each at the profile's service time); empty on the other
    /// backends. How the load spreads over the memory nodes (FORD's Table 4).
    pub mn_nic_busy_ns: Vec<u64>,
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

/// The executor of one real worker thread (`shm`, `ucx`): polls its coroutines round-robin
/// until all have returned, a worker thread of the run unwinds (`abort`), or the wall-clock
/// `stop` passes; the coordinators still running then are dropped here, on their own thread.
/// `progress` is set by the ports when something completed, so that an idle round can spin a
/// little for precision and then yield the core. `after_round` runs after every round (the
/// `ucx` backend reaps detached batches there).
pub(crate) fn drive_thread<R>(
    mut tasks: Vec<Option<Task<R>>>,
    progress: &std::cell::Cell<bool>,
    abort: &std::sync::atomic::AtomicBool,
    stop: Option<std::time::Instant>,
    mut after_round: impl FnMut(),
) -> Vec<Option<R>> {
    let mut outputs: Vec<Option<R>> = (0..tasks.len()).map(|_| None).collect();
    let mut live = tasks.len();
    let mut idle_rounds = 0u32;
    let mut rounds = 0u32;
    while live > 0 {
        progress.set(false);
        for (slot, out) in tasks.iter_mut().zip(outputs.iter_mut()) {
            if let Some(t) = slot {
                if let Poll::Ready((r, _)) = poll_once(t) {
                    *out = Some(r);
                    *slot = None;
                    live -= 1;
                    progress.set(true);
                }
            }
        }
        after_round();
        if progress.get() {
            idle_rounds = 0;
        } else {
            // Everyone waits (a deadline, the network): spin a little, then let the other
            // threads (a memory node's progress thread, maybe) have the core.
            idle_rounds = idle_rounds.saturating_add(1);
            if idle_rounds < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        if abort.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        rounds = rounds.wrapping_add(1);
        // Reading the clock costs more than a round of immediate completions: look only now
        // and then (and whenever idle, where it costs nothing).
        if let Some(stop) = stop {
            if (rounds & 63 == 0 || idle_rounds > 0) && std::time::Instant::now() >= stop {
                break;
            }
        }
    }
    drop(tasks);
    outputs
}

/// Tells the other worker threads of a run that this one is unwinding.
pub(crate) struct AbortOnPanic<'a>(pub &'a std::sync::atomic::AtomicBool);

impl Drop for AbortOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}
