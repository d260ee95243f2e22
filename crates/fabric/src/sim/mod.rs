//! The `sim` backend: a deterministic, adversarial discrete-event simulation of a memory pool
//! and its compute nodes, in virtual time.
//!
//! One OS thread runs every coordinator of every simulated compute node. The executor repeats:
//! run the ready coordinators in seeded random order (each resumption costs its worker thread
//! `cpu_per_step_ns`; a thread runs one coroutine at a time), and when none is ready, jump the
//! clock to the next event and execute it. Same seed and configuration, same run, bit for bit:
//! [`crate::RunReport::trace_hash`] hashes every executed op to prove it.

mod config;
mod world;

pub use config::{
    Adversary, ComputeCrash, FaultRates, Faults, MemoryCrash, MemoryRejoin, SimConfig,
};
pub use world::TraceEntry;

use crate::contract::{Fabric, LocalMem, RpcHandler};
use crate::runtime::{poll_once, task, RunReport, Task, Topology};
use crate::stats::Stats;
use crate::{Batch, CoordId, Endpoint, FabricError, NodeId, NodeSet};
use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use world::World;

/// A simulated memory pool. It outlives runs: load it, run coordinators against it, inspect it,
/// run again.
pub struct SimPool {
    world: Rc<RefCell<World>>,
    cfg: SimConfig,
    runs: u64,
}

impl SimPool {
    pub fn new(cfg: SimConfig) -> Result<SimPool, FabricError> {
        let world = World::new(&cfg)?;
        Ok(SimPool {
            world: Rc::new(RefCell::new(world)),
            cfg,
            runs: 0,
        })
    }

    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    pub fn node_sizes(&self) -> Vec<u64> {
        self.world.borrow().sizes.clone()
    }

    /// The memory node's own CPU view of its region (loading, inspection). Not to be used while
    /// a run is in progress.
    pub fn with_local<T>(&self, node: NodeId, f: impl FnOnce(&mut dyn LocalMem) -> T) -> T {
        let mut w = self.world.borrow_mut();
        let mut mem = w.mem(node);
        f(&mut mem)
    }

    /// Replaces the faults injected into the next runs (each run schedules them afresh,
    /// relative to its own start).
    pub fn set_faults(&mut self, faults: Faults) {
        self.world.borrow_mut().set_delays(&faults);
        self.cfg.faults = faults;
    }

    pub fn set_rpc_handler(&mut self, handler: Arc<dyn RpcHandler>) {
        self.world.borrow_mut().rpc = Some(handler);
    }

    /// Every executed op so far, if the config keeps a trace.
    pub fn trace(&self) -> Vec<TraceEntry> {
        self.world.borrow().trace.clone().unwrap_or_default()
    }

    /// Every memory node loses power and restarts, between runs: in persistent-memory mode
    /// ([`SimConfig::persistent`]) each keeps its flushed lines and a random half of the rest
    /// (drawn from the seed), otherwise nothing. What a protocol's FLUSHes promised survives;
    /// tests check that it did.
    pub fn power_loss(&mut self) {
        self.world.borrow_mut().power_loss();
    }

    /// Virtual time now.
    pub fn now_ns(&self) -> u64 {
        self.world.borrow().now
    }

    /// Runs `f` as every coordinator of `topo` until all of them return (or their compute node
    /// crashes), injecting the config's faults. `stop_at_ns`, if given, ends the run at that
    /// virtual time (relative to its start), dropping whatever is still running.
    pub fn run<F, Fut, R>(
        &mut self,
        topo: Topology,
        stop_at_ns: Option<u64>,
        f: F,
    ) -> Result<RunReport<R>, FabricError>
    where
        F: Fn(Endpoint) -> Fut,
        Fut: Future<Output = R> + 'static,
        R: 'static,
    {
        topo.validate().map_err(FabricError::Setup)?;
        let mut thread_cn = Vec::new();
        let mut coord_thread = Vec::new();
        let mut ids = Vec::new();
        for cn in 0..topo.compute_nodes {
            for t in 0..topo.threads {
                let thread = thread_cn.len() as u32;
                thread_cn.push(cn);
                for c in 0..topo.coroutines {
                    ids.push(CoordId {
                        compute_node: cn,
                        thread: t,
                        coroutine: c,
                        index: coord_thread.len() as u32,
                    });
                    coord_thread.push(thread);
                }
            }
        }
        let start = {
            let mut w = self.world.borrow_mut();
            w.start_run(topo.compute_nodes, &thread_cn, &coord_thread);
            w.schedule_faults(&self.cfg.faults);
            w.now
        };
        let seed = self.cfg.seed ^ self.runs.wrapping_mul(0xa076_1d64_78bd_642f);
        self.runs += 1;
        let sizes = self.node_sizes();
        let mut tasks: Vec<Option<Task<R>>> = Vec::with_capacity(ids.len());
        let mut cells = Vec::with_capacity(ids.len());
        for id in &ids {
            let port = SimPort {
                world: self.world.clone(),
                coord: id.index,
                sizes: sizes.clone(),
                background_failed: NodeSet::default(),
            };
            let ep = Endpoint::new(*id, seed, Box::new(port));
            cells.push(ep.stats_cell());
            tasks.push(Some(task(&f, ep)));
        }
        let mut outputs: Vec<Option<R>> = (0..ids.len()).map(|_| None).collect();
        let mut live = ids.len();
        let stop = stop_at_ns.map(|s| start + s);
        let mut drained = false;
        loop {
            let next = self.world.borrow_mut().next_ready();
            if let Some(c) = next {
                // A finished coordinator can still be woken by its last ops' completions.
                let Some(t) = tasks[c as usize].as_mut() else {
                    continue;
                };
                if let Poll::Ready((r, _)) = poll_once(t) {
                    outputs[c as usize] = Some(r);
                    tasks[c as usize] = None;
                    live -= 1;
                }
                continue;
            }
            // With every coordinator done, ops still on the wire (detached releases) land;
            // the run ends when nothing is left in flight (and no fault strikes after it).
            let (more, killed) = {
                let mut w = self.world.borrow_mut();
                if live == 0 && !drained {
                    w.drop_pending_faults();
                    drained = true;
                }
                if let (Some(stop), Some(t)) = (stop, w.next_event_time()) {
                    if t > stop {
                        w.now = stop;
                        break;
                    }
                }
                let more = w.step();
                (more, std::mem::take(&mut w.killed))
            };
            // Dropped outside the borrow: a coordinator's destructors may touch the world.
            for c in killed {
                if tasks[c as usize].take().is_some() {
                    live -= 1;
                }
            }
            if !more {
                if live > 0 {
                    return Err(FabricError::Setup(format!(
                        "{live} coordinators are blocked with nothing left to wake them \
                         (seed {}): a coordinator awaited something other than its Endpoint",
                        self.cfg.seed
                    )));
                }
                break;
            }
        }
        drop(tasks);
        let mut w = self.world.borrow_mut();
        w.end_run();
        Ok(RunReport {
            outputs,
            stats: cells.iter().map(|c| c.get()).collect::<Vec<Stats>>(),
            elapsed_ns: w.now - start,
            virtual_time: true,
            trace_hash: w.hash,
            verbs_executed: w.verbs_executed,
            g11_violations: w.g11_violations,
            max_flight_ns: w.max_flight_ns,
            mn_nic_busy_ns: w.nic_busy_ns(),
        })
    }
}

/// A coordinator's queue pairs on the simulated fabric.
struct SimPort {
    world: Rc<RefCell<World>>,
    coord: u32,
    sizes: Vec<u64>,
    /// The nodes the last background batch failed on.
    background_failed: NodeSet,
}

impl Fabric for SimPort {
    fn submit(&mut self, batch: &mut Batch, detached: bool) -> Result<(), FabricError> {
        let mode = if detached {
            world::Mode::Detached
        } else {
            world::Mode::Awaited
        };
        self.world.borrow_mut().submit(self.coord, batch, mode)
    }

    fn submit_background(&mut self, batch: &mut Batch) -> Result<(), FabricError> {
        self.world
            .borrow_mut()
            .submit(self.coord, batch, world::Mode::Background)
    }

    fn poll_background(&mut self) -> Poll<Result<(), FabricError>> {
        let taken = self.world.borrow_mut().take_background(self.coord);
        match taken {
            Some((r, failed)) => {
                self.background_failed = failed;
                Poll::Ready(r)
            }
            None => Poll::Pending,
        }
    }

    fn background_failed(&self) -> NodeSet {
        self.background_failed
    }

    fn poll_complete(&mut self, batch: &mut Batch) -> Poll<Result<(), FabricError>> {
        match self.world.borrow_mut().take_completion(self.coord, batch) {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }

    fn now_ns(&self) -> u64 {
        self.world.borrow().coord_now(self.coord)
    }

    fn poll_sleep(&mut self, deadline_ns: u64, first: bool) -> Poll<()> {
        let mut w = self.world.borrow_mut();
        if !first && w.coord_now(self.coord) >= deadline_ns {
            return Poll::Ready(());
        }
        w.register_sleep(self.coord, deadline_ns);
        Poll::Pending
    }

    fn charge_cpu(&mut self, ns: u64) {
        self.world.borrow_mut().charge_cpu(self.coord, ns);
    }

    fn reconnect(&mut self, node: NodeId) {
        self.world.borrow_mut().reconnect(self.coord, node);
    }

    fn logic_cpu_ns(&self) -> (u64, u64) {
        let w = self.world.borrow();
        (w.profile.cpu_per_txn_ns, w.profile.cpu_per_item_ns)
    }

    fn node_sizes(&self) -> &[u64] {
        &self.sizes
    }
}
