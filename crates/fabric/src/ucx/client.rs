//! The compute side: bootstrap, per-thread queue pairs, coordinator ports, the run loop.

use super::bootstrap::{self, NodeInfo};
use super::server::{AM_RPC_REQ, AM_RPC_RESP, PERSIST, RPC_NO_HANDLER, RPC_OK};
use super::ucp::{post, AmHandle, Context, Ep, Req, Rkey, Worker};
use super::{MemNode, MemNodeConfig, UcxConfig, CHUNK};
use crate::contract::{check_op, Fabric, LocalMem, RpcHandler};
use crate::dirty::Dirty;
use crate::runtime::{drive_thread, task, AbortOnPanic, RunReport, Task, Topology};
use crate::stats::Stats;
use crate::verbs::{Batch, OpKind, LINE};
use crate::{CoordId, Endpoint, FabricError, NodeId};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::c_void;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

/// How long teardown and blocking (`with_local`) ops wait for UCX before giving up, unless
/// [`UcxConfig::blocking_timeout`] says otherwise.
const BLOCKING_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a reconnect ([`Fabric::reconnect`]), which blocks its worker thread, waits for a
/// memory node's bootstrap (the connection, each read and write), for the old endpoint's ops
/// to drain, and for its close.
const RECONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// What a reconnect needs of the pool: where each memory node's bootstrap listens, and the
/// token it asks for. Shared by the pool and the queue pairs of every thread. (No `Debug`:
/// the token stays out of logs.)
pub(crate) struct Boot {
    addrs: Vec<SocketAddr>,
    token: String,
}

/// A memory pool of UCX memory nodes, seen from a compute process.
pub struct UcxPool {
    cfg: UcxConfig,
    seed: u64,
    /// Which compute node of a run's topology this process is (see
    /// [`UcxPool::set_compute_node`]).
    compute_node: u32,
    runs: AtomicU64,
    /// The memory nodes' bootstrap addresses (node `i` is `addrs[i]`) and the token.
    boot: Arc<Boot>,
    /// Per memory node: what its bootstrap said, or `None` for a node found down
    /// ([`UcxConfig::allow_down`]).
    nodes: Vec<Option<NodeInfo>>,
    /// Region sizes; 0 for a node down.
    sizes: Vec<u64>,
    /// For [`UcxPool::try_with_local`] on memory nodes of other processes: blocking verbs on
    /// a worker of its own. Dropped before `ctx` and `local`.
    admin: Mutex<Admin>,
    ctx: Arc<Context>,
    /// Memory nodes served by this very process ([`UcxPool::spawn_local`]), by node number.
    local: Vec<MemNode>,
}

impl std::fmt::Debug for UcxPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UcxPool")
            .field("addrs", &self.boot.addrs)
            .field("sizes", &self.sizes)
            .field("cfg", &self.cfg)
            .finish()
    }
}

impl UcxPool {
    /// Bootstraps from the memory nodes at `addrs` (node `i` is `addrs[i]`), presenting
    /// `token`, and checks that this process can reach each of them with UCX.
    pub fn connect(
        addrs: &[SocketAddr],
        token: &str,
        cfg: UcxConfig,
    ) -> Result<UcxPool, FabricError> {
        if addrs.is_empty() {
            return Err(FabricError::Setup(
                "a pool needs at least one memory node".into(),
            ));
        }
        if addrs.len() > usize::from(NodeId::MAX) {
            return Err(FabricError::Setup(format!(
                "{} memory nodes are too many",
                addrs.len()
            )));
        }
        let mut nodes = Vec::with_capacity(addrs.len());
        for &a in addrs {
            match bootstrap::fetch(a, token) {
                Ok(n) => nodes.push(Some(n)),
                // Not listening (or not reachable) at all: down. A node that answers with
                // something else (a bad token, not a memory node) is still a setup error.
                Err(FabricError::Setup(_)) if cfg.allow_down && !bootstrap::reachable(a) => {
                    nodes.push(None)
                }
                Err(e) => return Err(e),
            }
        }
        let ctx = Context::new(&cfg.settings, false)?;
        let pool = UcxPool {
            seed: 0,
            compute_node: 0,
            runs: AtomicU64::new(0),
            boot: Arc::new(Boot {
                addrs: addrs.to_vec(),
                token: token.to_owned(),
            }),
            sizes: nodes
                .iter()
                .map(|n| n.as_ref().map_or(0, |n| n.size))
                .collect(),
            admin: Mutex::new(Admin {
                qps: None,
                nodes: nodes.clone(),
            }),
            nodes,
            ctx,
            local: Vec::new(),
            cfg,
        };
        // Fails now, with the reason, rather than in every worker thread of the first run.
        drop(pool.admin()?);
        Ok(pool)
    }

    /// Starts one memory node per entry of `sizes` in this process (on 127.0.0.1, any free
    /// port) and connects to them: tests and single-process runs. The pool owns the nodes, so
    /// [`UcxPool::try_with_local`] and [`UcxPool::set_rpc_handler`] reach them directly.
    pub fn spawn_local(sizes: &[u64], cfg: UcxConfig) -> Result<UcxPool, FabricError> {
        let token = format!("local-{}-{:x}", std::process::id(), rand::random::<u64>());
        let local = sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| {
                MemNode::start(
                    MemNodeConfig {
                        size,
                        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
                        token: token.clone(),
                        file: None,
                        ucx: cfg.clone(),
                        spin: MemNodeConfig::DEFAULT_SPIN,
                    },
                    i as NodeId,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let addrs: Vec<_> = local.iter().map(MemNode::addr).collect();
        let mut pool = UcxPool::connect(&addrs, &token, cfg)?;
        pool.local = local;
        Ok(pool)
    }

    pub fn addrs(&self) -> &[SocketAddr] {
        &self.boot.addrs
    }

    /// Seeds the coordinators' RNGs of later runs and endpoints. A new pool's seed is 0.
    pub fn set_seed(&mut self, seed: u64) {
        self.seed = seed;
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Makes this process compute node `k` of the topologies it runs: several compute
    /// processes share one pool, each running its own share of `topo.compute_nodes`, and their
    /// coordinators must differ (ids are lock owners, transaction ids and log slices). A new
    /// pool is compute node 0.
    pub fn set_compute_node(&mut self, k: u32) {
        self.compute_node = k;
    }

    pub fn compute_node(&self) -> u32 {
        self.compute_node
    }

    pub fn node_sizes(&self) -> Vec<u64> {
        self.sizes.clone()
    }

    /// Whether memory node `node` was found down when this pool connected
    /// ([`UcxConfig::allow_down`]). A node that dies later is not counted here: its verbs fail.
    /// Nor is a reconnect ([`Endpoint::reconnect`]): it connects one thread's queue pairs.
    pub fn node_down(&self, node: NodeId) -> bool {
        self.nodes.get(node as usize).is_some_and(Option::is_none)
    }

    /// Installs `handler` on the memory nodes this process serves. Memory nodes of other
    /// processes serve their own handlers (or answer [`FabricError::NoRpcHandler`]).
    pub fn set_rpc_handler(&mut self, handler: Arc<dyn RpcHandler>) {
        for n in &self.local {
            n.set_rpc_handler(handler.clone());
        }
    }

    fn admin(&self) -> Result<std::sync::MutexGuard<'_, Admin>, FabricError> {
        let mut g = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        if g.qps.is_none() {
            let q = Qps::connect(&self.ctx, &g.nodes, &self.boot, &self.cfg, true)?;
            g.qps = Some(AdminQps(q));
        }
        Ok(g)
    }

    /// Re-bootstraps memory node `node` for this pool's blocking accesses
    /// ([`UcxPool::try_with_local`]), as [`Endpoint::reconnect`] does for a thread's queue
    /// pairs: if the node was restarted at its address (a new incarnation, e.g. re-replicated
    /// during a run), the admin queue pairs connect to it; a healthy endpoint to its current
    /// incarnation is kept, and a node still down changes nothing. Returns whether the
    /// endpoint was replaced. Blocks for the bootstrap (up to a second per step for a node
    /// that does not answer).
    pub fn reconnect(&self, node: NodeId) -> Result<bool, FabricError> {
        if self.local.get(node as usize).is_some() || node as usize >= self.sizes.len() {
            return Ok(false);
        }
        let mut g = self.admin()?;
        let Admin { qps, nodes } = &mut *g;
        let q = &mut qps.as_mut().expect("connected by admin()").0;
        let replaced = q.reconnect(node);
        nodes[node as usize] = q.infos[node as usize].clone();
        Ok(replaced)
    }

    /// Memory node `node`'s region, accessed by this process: directly if it serves the node
    /// (the node's own CPU, excluding remote ops meanwhile), otherwise with blocking one-sided
    /// verbs (each access line-atomic like a verb, one round trip each). The first failed
    /// access makes the later ones no-ops (reads see zeroes) and is returned after `f`.
    pub fn try_with_local<T>(
        &self,
        node: NodeId,
        f: impl FnOnce(&mut dyn LocalMem) -> T,
    ) -> Result<T, FabricError> {
        self.sizes
            .get(node as usize)
            .ok_or(FabricError::NoSuchNode {
                node,
                nodes: self.sizes.len(),
            })?;
        if let Some(n) = self.local.get(node as usize) {
            return Ok(n.with_local(f));
        }
        let mut g = self.admin()?;
        let Admin { qps, nodes } = &mut *g;
        let q = &mut qps.as_mut().expect("connected by admin()").0;
        let ni = node as usize;
        if q.eps[ni].is_some() && q.failed[ni].load(Ordering::Acquire) != 0 {
            // Its endpoint failed since: the node may have been restarted at its address (a
            // rejoin). One bootstrap (refused at once by a live host with nothing listening).
            // A node down when the admin last connected is reached again only by an explicit
            // [`UcxPool::reconnect`]: no bootstrap per access to a node gone for good.
            q.reconnect(node);
            nodes[ni] = q.infos[ni].clone();
        }
        if q.eps[ni].is_none() {
            return Err(FabricError::NodeDown(node));
        }
        let size = q.sizes[ni];
        let mut mem = RemoteMem {
            q,
            node,
            size,
            err: None,
            scratch: Vec::new(),
            word: Box::new([0; 2]),
        };
        let out = f(&mut mem);
        match mem.err.take() {
            None => Ok(out),
            Some(e) => {
                // Its worker may hold abandoned requests: start afresh next time.
                drop(mem);
                g.qps = None;
                Err(e)
            }
        }
    }

    /// A coordinator endpoint outside of [`UcxPool::run`], driven by the caller on this
    /// thread (benchmarks, tools), with queue pairs of its own.
    pub fn endpoint(&self, id: CoordId) -> Result<Endpoint, FabricError> {
        let qps = Rc::new(RefCell::new(Qps::connect(
            &self.ctx,
            &self.nodes,
            &self.boot,
            &self.cfg,
            false,
        )?));
        let port = UcxPort::new(qps, Instant::now(), Rc::default(), Arc::default());
        Ok(Endpoint::new(id, self.seed, Box::new(port)))
    }

    /// Runs `f` as every coordinator of `topo` like [`crate::shm::ShmPool::run`]:
    /// `topo.threads` OS threads, each with its own UCP worker and one endpoint per memory node
    /// (its queue pairs), polling its `topo.coroutines` coordinators round-robin. `stop_at_ns`
    /// ends the run after that much wall time, dropping the coordinators still running.
    ///
    /// `topo.compute_nodes` counts every compute process of the run; this one runs only the
    /// coordinators of its own compute node ([`UcxPool::set_compute_node`]), numbered
    /// `k * threads * coroutines + ...` as on `sim`, and the report holds only theirs.
    pub fn run<F, Fut, R>(
        &self,
        topo: Topology,
        stop_at_ns: Option<u64>,
        f: F,
    ) -> Result<RunReport<R>, FabricError>
    where
        F: Fn(Endpoint) -> Fut + Sync,
        Fut: Future<Output = R> + 'static,
        R: Send + 'static,
    {
        topo.validate().map_err(FabricError::Setup)?;
        if self.compute_node >= topo.compute_nodes {
            return Err(FabricError::Setup(format!(
                "this process is compute node {} but the run has {} compute node(s): a ucx \
                 process runs one compute node's coordinators; start one per compute node",
                self.compute_node, topo.compute_nodes
            )));
        }
        let runs = self.runs.fetch_add(1, Ordering::Relaxed);
        let seed = self.seed ^ runs.wrapping_mul(0xa076_1d64_78bd_642f);
        let start = Instant::now();
        let stop = stop_at_ns.map(|ns| start + Duration::from_nanos(ns));
        let abort = Arc::new(AtomicBool::new(false));
        let f = &f;
        let abort_ref = &abort;
        let joined = std::thread::scope(|s| {
            let mut handles = Vec::with_capacity(topo.threads as usize);
            for thread in 0..topo.threads {
                let h = std::thread::Builder::new()
                    .name(format!("ucx-worker-{thread}"))
                    .spawn_scoped(s, move || {
                        let _guard = AbortOnPanic(abort_ref);
                        let r = self.worker(topo, seed, start, stop, abort_ref, thread, f);
                        if r.is_err() {
                            abort_ref.store(true, Ordering::Relaxed);
                        }
                        r
                    })
                    .map_err(|e| {
                        FabricError::Setup(format!("cannot spawn worker thread {thread}: {e}"))
                    });
                match h {
                    Ok(h) => handles.push(h),
                    Err(e) => {
                        abort_ref.store(true, Ordering::Relaxed);
                        return Err(e);
                    }
                }
            }
            Ok(handles.into_iter().map(|h| h.join()).collect::<Vec<_>>())
        })?;
        let mut per_thread = Vec::with_capacity(joined.len());
        let mut first_err = None;
        for j in joined {
            match j {
                Ok(Ok(out)) => per_thread.push(out),
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        let elapsed_ns = start.elapsed().as_nanos() as u64;
        let mut outputs = Vec::with_capacity(topo.coordinators() as usize);
        let mut stats = Vec::with_capacity(topo.coordinators() as usize);
        for (o, s) in per_thread.into_iter().flatten() {
            outputs.push(o);
            stats.push(s);
        }
        let verbs_executed = stats.iter().map(Stats::verbs_total).sum();
        Ok(RunReport {
            outputs,
            stats,
            elapsed_ns,
            virtual_time: false,
            trace_hash: 0,
            verbs_executed,
            g11_violations: 0,
            max_flight_ns: 0,
            mn_nic_busy_ns: Vec::new(),
        })
    }

    /// One worker thread: connects its queue pairs, builds its coordinators, polls them.
    #[allow(clippy::too_many_arguments)]
    fn worker<F, Fut, R>(
        &self,
        topo: Topology,
        seed: u64,
        start: Instant,
        stop: Option<Instant>,
        abort: &Arc<AtomicBool>,
        thread: u32,
        f: &F,
    ) -> Result<Vec<(Option<R>, Stats)>, FabricError>
    where
        F: Fn(Endpoint) -> Fut,
        Fut: Future<Output = R> + 'static,
        R: 'static,
    {
        let qps = Rc::new(RefCell::new(Qps::connect(
            &self.ctx,
            &self.nodes,
            &self.boot,
            &self.cfg,
            false,
        )?));
        let n = topo.coroutines as usize;
        let progress = Rc::new(Cell::new(false));
        let mut tasks: Vec<Option<Task<R>>> = Vec::with_capacity(n);
        let mut cells = Vec::with_capacity(n);
        for coroutine in 0..topo.coroutines {
            let per_node = topo.threads * topo.coroutines;
            let id = CoordId {
                compute_node: self.compute_node,
                thread,
                coroutine,
                index: self.compute_node * per_node + thread * topo.coroutines + coroutine,
            };
            let port = UcxPort::new(qps.clone(), start, progress.clone(), abort.clone());
            let ep = Endpoint::new(id, seed, Box::new(port));
            cells.push(ep.stats_cell());
            tasks.push(Some(task(f, ep)));
        }
        // Detached batches complete after each round (the ports progress the worker when
        // polled). Coordinators still running at the end are dropped in `drive_thread`: their
        // ports hand in-flight batches to the queue pairs, which wait for them before closing.
        let outputs = drive_thread(tasks, &progress, abort, stop, || qps.borrow_mut().reap());
        Ok(outputs
            .into_iter()
            .zip(cells.iter().map(|c| c.get()))
            .collect())
    }
}

/// RPC response messages, by message id: `(status, memory-node CPU ns, bytes)`. Filled by the
/// message callback.
type Inbox = RefCell<HashMap<u64, (u8, u64, Vec<u8>)>>;

/// A batch in flight and the buffers UCX reads from and writes into until it completes.
#[derive(Default)]
struct InFlight {
    /// The caller's batch, copied: WRITE sources, READ destinations.
    batch: Batch,
    /// Per op: CAS `[expect, new -> old]`, FAA `[add, old]`.
    amo: Vec<[u64; 2]>,
    reqs: Vec<(NodeId, Req)>,
    /// RPC messages awaiting their response: `(node, id)`, one per memory node.
    rpcs: Vec<(NodeId, u64)>,
    /// The RPC messages as sent: per message a header `[id, sender's now_ns]` and the
    /// requests, each as a little-endian u32 length and its bytes (see `server::on_rpc`).
    rpc_out: Vec<u8>,
    /// Per message: `(node, start, header end, end)` in `rpc_out`.
    rpc_spans: Vec<(NodeId, usize, usize, usize)>,
    /// FLUSHes to file-backed memory nodes: per node, the ranges to write back, asked for
    /// once the batch's endpoint flushes have completed (so after every earlier PUT landed).
    persist: Vec<(NodeId, Vec<(u64, u64)>)>,
    /// The write-back requests as sent (a header and ranges each), and their ids.
    persist_out: Vec<u8>,
    persist_ids: Vec<(NodeId, u64)>,
    /// Nodes whose op UCX refused: their later ops of the batch are not posted.
    down: Vec<NodeId>,
    error: Option<FabricError>,
    /// [`Qps::generation`] when the batch was posted: an endpoint replaced since
    /// ([`Qps::replaced_at`]) will not answer its RPCs.
    gen: u64,
}

impl InFlight {
    /// Gives up on the batch for good: its buffers are leaked (UCX may still write into them)
    /// and its requests released, so that UCX frees each when it completes, or when its
    /// worker is destroyed, which finds none unreleased (one kept only warned, "not returned
    /// to mpool", but an unreleased request on a closing endpoint has aborted the process).
    fn abandon(mut self) {
        for (_, r) in self.reqs.drain(..) {
            r.release();
        }
        std::mem::forget(self);
    }

    /// Fails the batch with `e`. Every node it failed on is noted in the batch; an error other
    /// than `NodeDown` takes precedence, so that a `NodeDown` returned means only nodes
    /// failed (the endpoint may then mask a failure that hit lease renewals alone).
    fn fail(&mut self, e: FabricError) {
        match e {
            FabricError::NodeDown(n) => {
                self.batch.failed = self.batch.failed.with(n);
                self.error.get_or_insert(e);
            }
            e => {
                if matches!(self.error, None | Some(FabricError::NodeDown(_))) {
                    self.error = Some(e);
                }
            }
        }
    }

    /// Polls the requests; true when none is left.
    fn poll_reqs(&mut self) -> bool {
        let mut failed = Vec::new();
        self.reqs.retain_mut(|(node, r)| match r.poll() {
            None => true,
            Some(st) => {
                if st < 0 {
                    failed.push(*node);
                }
                false
            }
        });
        for node in failed {
            self.fail(FabricError::NodeDown(node));
        }
        self.reqs.is_empty()
    }
}

/// One thread's queue pairs: a UCP worker and an endpoint (with the region's rkey) per memory
/// node.
pub(crate) struct Qps {
    worker: ManuallyDrop<Worker>,
    /// Per memory node: its endpoint and region key, `None` for a node down when these queue
    /// pairs connected ([`UcxConfig::allow_down`]) or last reconnected: every op to it fails.
    eps: Vec<Option<Ep>>,
    rkeys: Vec<Option<Rkey>>,
    bases: Vec<u64>,
    /// Per memory node: its region size (0 for a node down), as its last bootstrap said.
    sizes: Vec<u64>,
    /// Per memory node: what the bootstrap of the incarnation `eps` reaches said (`None` for
    /// a node down): a reconnect compares it with what the node says now.
    infos: Vec<Option<NodeInfo>>,
    /// Where to bootstrap from again ([`Qps::reconnect`]).
    boot: Arc<Boot>,
    /// [`UcxConfig::allow_direct`], for reconnects.
    allow_direct: bool,
    /// [`UcxConfig::blocking_timeout`], or [`BLOCKING_TIMEOUT`].
    blocking_timeout: Duration,
    /// Counts endpoint replacements by [`Qps::reconnect`].
    generation: u64,
    /// Per memory node: the [`Qps::generation`] its endpoint was last replaced at (0: the
    /// one `connect` made). A coordinator's port uses a node only once it has reconnected
    /// to this replacement itself, and a batch posted before it waits for no answer from it.
    replaced_at: Vec<u64>,
    /// An atomic was posted since the last fence: fence before the next op (G6).
    after_atomic: bool,
    /// A WRITE was posted since the last fence: fence before the next WRITE (G4).
    after_write: bool,
    /// Batches nobody waits for (detached, or abandoned by a dropped coordinator) whose
    /// buffers must live until UCX is done with them.
    orphans: Vec<InFlight>,
    /// From `Box::into_raw`; the RPC response callback's argument. Freed after the worker.
    inbox: *mut Inbox,
    am: Option<AmHandle>,
    next_rpc: u64,
    /// Per memory node: its region is a file, which a FLUSH writes back.
    file_backed: Vec<bool>,
    /// What this thread's QPs wrote to file-backed nodes since their last FLUSH.
    dirty: Dirty,
    /// Per memory node: UCX found it dead (set by the endpoint's error callback): a response
    /// awaited from it will never come. One box per endpoint: a reconnect gives the new
    /// endpoint a new flag and keeps the old one in `retired_flags`, so that a late error
    /// callback of the old endpoint cannot mark the new one failed. Each box outlives its
    /// endpoint (both fields are dropped after `Drop::drop` destroyed the worker).
    // Boxed: UCX holds each flag's address, which must not move when the vector does.
    #[allow(clippy::vec_box)]
    failed: Vec<Box<AtomicI32>>,
    #[allow(clippy::vec_box)]
    retired_flags: Vec<Box<AtomicI32>>,
}

/// The admin queue pairs behind [`UcxPool`]'s mutex.
struct AdminQps(Qps);

/// [`UcxPool`]'s blocking access: its queue pairs (connected on first use, and again after
/// a failed access), and what it knows of each memory node (as at connect, then as its last
/// reconnect found it: a new connection reaches the node's current incarnation).
struct Admin {
    qps: Option<AdminQps>,
    nodes: Vec<Option<NodeInfo>>,
}

// SAFETY: the admin worker is created serialized (UCS_THREAD_MODE_SERIALIZED) and used only
// under `UcxPool::admin`'s mutex; its inbox pointer is owned by it and touched by that worker's
// callbacks only, under the same mutex.
unsafe impl Send for AdminQps {}

impl Qps {
    fn connect(
        ctx: &Arc<Context>,
        nodes: &[Option<NodeInfo>],
        boot: &Arc<Boot>,
        cfg: &UcxConfig,
        serialized: bool,
    ) -> Result<Qps, FabricError> {
        let worker = Worker::new(ctx, serialized)?;
        let inbox = Box::into_raw(Box::new(Inbox::default()));
        let mut q = Qps {
            worker: ManuallyDrop::new(worker),
            eps: Vec::with_capacity(nodes.len()),
            rkeys: Vec::with_capacity(nodes.len()),
            bases: nodes
                .iter()
                .map(|n| n.as_ref().map_or(0, |n| n.base))
                .collect(),
            sizes: nodes
                .iter()
                .map(|n| n.as_ref().map_or(0, |n| n.size))
                .collect(),
            infos: nodes.to_vec(),
            boot: boot.clone(),
            allow_direct: cfg.allow_direct,
            blocking_timeout: cfg.blocking_timeout.unwrap_or(BLOCKING_TIMEOUT),
            generation: 0,
            replaced_at: vec![0; nodes.len()],
            after_atomic: false,
            after_write: false,
            orphans: Vec::new(),
            inbox,
            am: None,
            next_rpc: 1,
            file_backed: nodes
                .iter()
                .map(|n| n.as_ref().is_some_and(|n| n.file_backed))
                .collect(),
            dirty: Dirty::default(),
            failed: nodes.iter().map(|_| Box::new(AtomicI32::new(0))).collect(),
            retired_flags: Vec::new(),
        };
        // SAFETY: `inbox` lives until `Qps::drop` frees it after destroying the worker, the
        // only caller of the handler.
        q.am = Some(unsafe {
            q.worker
                .set_am_handler(AM_RPC_RESP, on_resp, inbox as *mut c_void)?
        });
        for (i, n) in nodes.iter().enumerate() {
            let Some(n) = n else {
                q.failed[i].store(1, Ordering::Release);
                q.eps.push(None);
                q.rkeys.push(None);
                continue;
            };
            // SAFETY: the box `q.failed[i]` is freed only after the worker is destroyed (see
            // the field), so it outlives the endpoint.
            let ep = match unsafe { q.worker.connect(&n.worker, &q.failed[i]) } {
                Ok(ep) => ep,
                // It answered the bootstrap and died since.
                Err(_) if cfg.allow_down => {
                    q.failed[i].store(1, Ordering::Release);
                    q.infos[i] = None;
                    q.eps.push(None);
                    q.rkeys.push(None);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let rkey = match ep.unpack_rkey(&n.rkey) {
                Ok(r) => r,
                Err(e) => {
                    q.eps.push(Some(ep));
                    return Err(e);
                }
            };
            let direct = rkey.directly_mapped(n.base);
            q.eps.push(Some(ep));
            q.rkeys.push(Some(rkey));
            if direct && !cfg.allow_direct {
                return Err(FabricError::Setup(format!(
                    "memory node {i} is mapped into this process by a UCX shared-memory \
                     transport (posix/sysv/xpmem): READs would be plain memcpy, not atomic per \
                     64-byte line as the fabric contract requires. Restrict the transports \
                     (UCX_TLS=tcp, or rc/ud/dc on RDMA NICs), or allow it knowingly \
                     (UcxConfig::allow_direct) for measurements only"
                )));
            }
        }
        Ok(q)
    }

    /// Memory node `node`'s endpoint, or `NodeDown` for a node down when these queue pairs
    /// connected.
    fn ep(&self, node: NodeId) -> Result<&Ep, FabricError> {
        self.eps[node as usize]
            .as_ref()
            .ok_or(FabricError::NodeDown(node))
    }

    /// Connects again to memory node `node` if it came back as a replacement: bootstraps from
    /// its address (at most [`RECONNECT_TIMEOUT`] per step: a node still down costs one refused
    /// or timed-out TCP connection, and changes nothing), and if what it says differs from
    /// what these queue pairs hold, retires the old endpoint ([`Qps::retire`]) and connects a
    /// new one. Returns whether the endpoint was replaced.
    ///
    /// **Healthy endpoints stay.** The coordinators of a thread share these queue pairs, and
    /// each of them reconnects on its own (a probe, a view where the node joins): an endpoint
    /// that UCX has not found failed and that reaches the node's current incarnation (the
    /// same worker address, rkey, base and size as its bootstrap says now; a restarted node
    /// has a new worker, whose address UCX makes unique) is kept, with its ops in flight. A
    /// failed endpoint, a missing one, or one to an earlier incarnation is replaced.
    fn reconnect(&mut self, node: NodeId) -> bool {
        let ni = node as usize;
        if ni >= self.eps.len() {
            return false;
        }
        let Some(&addr) = self.boot.addrs.get(ni) else {
            return false;
        };
        // Still down (or answering with something else than its region: a bad token, not a
        // memory node): nothing changes, its ops keep failing with NodeDown.
        let Ok(info) = bootstrap::fetch_within(addr, &self.boot.token, RECONNECT_TIMEOUT) else {
            return false;
        };
        if info.size == 0 || !info.size.is_multiple_of(LINE) {
            return false;
        }
        let healthy = self.eps[ni].is_some() && self.failed[ni].load(Ordering::Acquire) == 0;
        if healthy && self.infos[ni].as_ref() == Some(&info) {
            return false;
        }
        self.retire(ni);
        // The old endpoint's error callback, if UCX still calls it, sets the retired flag.
        let old = std::mem::replace(&mut self.failed[ni], Box::new(AtomicI32::new(0)));
        self.retired_flags.push(old);
        self.generation += 1;
        self.replaced_at[ni] = self.generation;
        // What this thread wrote to the earlier incarnation is gone with it.
        drop(self.dirty.take(node));
        match self.attach(ni, &info) {
            Ok(()) => {
                self.bases[ni] = info.base;
                self.sizes[ni] = info.size;
                self.file_backed[ni] = info.file_backed;
                self.infos[ni] = Some(info);
            }
            Err(_) => {
                // Answered its bootstrap but cannot be reached (or is mapped directly, which
                // is refused as at connection): down, until a later reconnect.
                self.failed[ni].store(1, Ordering::Release);
                self.sizes[ni] = 0;
                self.infos[ni] = None;
            }
        }
        true
    }

    /// Takes memory node `ni`'s endpoint and rkey out of service. UCX wants an rkey destroyed
    /// after the ops using it have completed and before its endpoint closes: so first a flush
    /// of the endpoint, awaited for at most [`RECONNECT_TIMEOUT`] (on an endpoint UCX found
    /// failed, it has completed every request already, with an error, and the flush fails at
    /// once); then the rkey is destroyed (leaked instead if the flush did not complete: an op
    /// may still use it); then the endpoint is closed forcibly (its peer is gone: no flush
    /// handshake), which completes whatever was left with an error. The requests' buffers are
    /// not freed here: they belong to their batches (a port's, or [`Qps::orphans`]), which
    /// poll the requests to completion (an error: `NodeDown`) before reusing them.
    fn retire(&mut self, ni: usize) {
        let rkey = self.rkeys[ni].take();
        let Some(ep) = self.eps[ni].take() else {
            drop(rkey);
            return;
        };
        let mut left = None;
        let drained = match post::flush(&ep) {
            Ok(None) | Err(_) => true,
            Ok(Some(mut req)) => {
                let deadline = Instant::now() + RECONNECT_TIMEOUT;
                loop {
                    self.worker.progress();
                    if req.poll().is_some() {
                        break true;
                    }
                    if Instant::now() > deadline {
                        left = Some(req);
                        break false;
                    }
                }
            }
        };
        match rkey {
            Some(r) if !drained => std::mem::forget(r),
            r => drop(r),
        }
        self.worker.close(ep, true, RECONNECT_TIMEOUT.as_secs_f64());
        if let Some(req) = left {
            // Completed by the forced close, or released to complete (and be freed) later.
            req.release();
        }
    }

    /// Connects a new endpoint to memory node `ni` as `info` describes it, with its rkey.
    fn attach(&mut self, ni: usize, info: &NodeInfo) -> Result<(), FabricError> {
        // SAFETY: the box `self.failed[ni]` is freed only after the worker is destroyed
        // (replaced boxes move to `retired_flags`, dropped after `Drop::drop`), so it
        // outlives the endpoint.
        let ep = unsafe { self.worker.connect(&info.worker, &self.failed[ni]) }?;
        let rkey = match ep.unpack_rkey(&info.rkey) {
            Ok(r) => r,
            Err(e) => {
                self.worker.close(ep, true, RECONNECT_TIMEOUT.as_secs_f64());
                return Err(e);
            }
        };
        if rkey.directly_mapped(info.base) && !self.allow_direct {
            drop(rkey);
            self.worker.close(ep, true, RECONNECT_TIMEOUT.as_secs_f64());
            return Err(FabricError::Setup(format!(
                "memory node {ni} is mapped into this process by a UCX shared-memory transport"
            )));
        }
        self.eps[ni] = Some(ep);
        self.rkeys[ni] = Some(rkey);
        Ok(())
    }

    /// Whether `f`'s answers from `node` will never come: UCX found the node dead, or its
    /// endpoint was replaced since `f` was posted.
    fn lost(&self, f: &InFlight, node: NodeId) -> bool {
        let ni = node as usize;
        self.failed[ni].load(Ordering::Acquire) != 0 || self.replaced_at[ni] > f.gen
    }

    /// Progresses the worker and completes what orphans it can.
    fn reap(&mut self) {
        self.worker.progress();
        if self.orphans.is_empty() {
            return;
        }
        let inbox = self.inbox;
        self.orphans.retain_mut(|f| {
            if !f.poll_reqs() {
                return true;
            }
            // SAFETY: `inbox` is live (freed only in drop); single-threaded use, and the
            // message callback (which also borrows it) runs only inside `progress`.
            let mut ib = unsafe { &*inbox }.borrow_mut();
            for &(_, id) in &f.rpcs {
                ib.remove(&id);
            }
            false
        });
    }

    /// Fences before posting an op of `kind` if the contract's ordering needs it.
    fn order_before(&mut self, kind: OpKind) -> Result<(), FabricError> {
        if self.after_atomic || (kind == OpKind::Write && self.after_write) {
            self.worker.fence()?;
            self.after_atomic = false;
            self.after_write = false;
        }
        Ok(())
    }

    /// Posts the ops of `f.batch`. An op UCX refuses fails the batch with `NodeDown` of its
    /// node, and that node's later ops are not posted (as a queue pair in error executes
    /// nothing more); the ops to other nodes still go, as on RDMA, where each node is reached
    /// by a queue pair of its own (a roll-back's WRITEs to the live replicas must land
    /// although the failed one's cannot). The RPC ops to each memory node go as one message,
    /// stamped with `now_ns`. The ops to the nodes of `refused` (replaced since the posting
    /// coordinator connected to them) are not posted: they fail the batch with `NodeDown`.
    fn post_batch(
        &mut self,
        f: &mut InFlight,
        flush_writes: bool,
        now_ns: u64,
        refused: &[NodeId],
    ) {
        let n = f.batch.ops.len();
        f.amo.clear();
        f.amo.resize(n, [0; 2]);
        f.down.clear();
        f.gen = self.generation;
        for &node in refused {
            f.fail(FabricError::NodeDown(node));
            f.down.push(node);
        }
        let mut wrote: u64 = 0;
        let mut wrote_more: Vec<NodeId> = Vec::new();
        for i in 0..n {
            let op = f.batch.ops[i];
            let node = op.node;
            if op.kind == OpKind::Rpc || f.down.contains(&node) {
                // RPCs: another channel, not ordered with the QP's verbs: posted below,
                // packed.
                continue;
            }
            if let Err(e) = self.order_before(op.kind) {
                f.fail(e);
                return;
            }
            let ni = node as usize;
            let raddr = self.bases[ni] + op.addr;
            let (Some(ep), Some(rkey)) = (&self.eps[ni], &self.rkeys[ni]) else {
                f.fail(FabricError::NodeDown(node));
                f.down.push(node);
                continue;
            };
            let span = op.data as usize..op.data as usize + op.len as usize;
            let posted = |r: Result<Option<Req>, i32>, f: &mut InFlight| match r {
                Ok(Some(req)) => {
                    f.reqs.push((node, req));
                    true
                }
                Ok(None) => true,
                Err(_) => {
                    f.fail(FabricError::NodeDown(node));
                    false
                }
            };
            let ok = match op.kind {
                OpKind::Read => {
                    let base = f.batch.buf[span.clone()].as_mut_ptr();
                    let mut ok = true;
                    for (off, len) in chunks(op.addr, op.len as usize) {
                        // SAFETY: `base + off .. + len` lies in `f.batch.buf`, which is not
                        // touched or resized until this request completes (the batch stays in
                        // its `InFlight`, handed to `orphans` if abandoned); rkey of `ep`;
                        // in bounds (check_op).
                        let r =
                            unsafe { post::get(ep, rkey, raddr + off as u64, base.add(off), len) };
                        if !posted(r, f) {
                            ok = false;
                            break;
                        }
                    }
                    ok
                }
                OpKind::Write => {
                    let src = &f.batch.buf[span.clone()];
                    let src: *const [u8] = src;
                    let mut ok = true;
                    for (off, len) in chunks(op.addr, op.len as usize) {
                        // SAFETY: as for READ; the source is only read, by UCX and nobody else.
                        let r = unsafe {
                            post::put(ep, rkey, raddr + off as u64, &(&*src)[off..off + len])
                        };
                        if !posted(r, f) {
                            ok = false;
                            break;
                        }
                    }
                    self.after_write = true;
                    if self.file_backed[ni] {
                        self.dirty.add(node, op.addr, u64::from(op.len));
                    }
                    if ni < 64 {
                        wrote |= 1 << ni;
                    } else if !wrote_more.contains(&node) {
                        wrote_more.push(node);
                    }
                    ok
                }
                OpKind::Cas | OpKind::Faa => {
                    let cswap = op.kind == OpKind::Cas;
                    f.amo[i] = if cswap {
                        [op.arg0, op.arg1]
                    } else {
                        [op.arg0, 0]
                    };
                    let slot = f.amo[i].as_mut_ptr();
                    // SAFETY: `slot` points into `f.amo`, not resized or touched until the
                    // request completes (see READ); 8-byte aligned word (check_op).
                    let r = unsafe { post::amo(ep, rkey, raddr, cswap, slot, slot.add(1)) };
                    self.after_atomic = true;
                    posted(r, f)
                }
                OpKind::Flush => {
                    // A detached batch is not waited for: its write-back is left to the next
                    // awaited FLUSH to this node, which covers these pages too.
                    if self.file_backed[ni] && flush_writes {
                        let ranges = self.dirty.take(node);
                        match f.persist.iter_mut().find(|(n, _)| *n == node) {
                            Some((_, r)) => r.extend(ranges),
                            None => f.persist.push((node, ranges)),
                        }
                    }
                    posted(post::flush(ep), f)
                }
                OpKind::Rpc => unreachable!("skipped above"),
            };
            if !ok {
                f.down.push(node);
            }
        }
        self.post_rpcs(f, now_ns);
        if flush_writes {
            // A PUT completes when its buffer is free, not when it has landed; the flush
            // completes when it has, so that completion means executed.
            let wrote_to = (0..64)
                .filter(|b| wrote & (1 << b) != 0)
                .map(|b| b as NodeId)
                .chain(wrote_more);
            for node in wrote_to {
                if f.down.contains(&node) {
                    continue;
                }
                let r = self.ep(node).map(post::flush);
                if let Err(e) = r.and_then(|r| collect(r, node, f)) {
                    f.fail(e);
                    f.down.push(node);
                }
            }
        }
    }

    /// Packs `f.batch`'s RPC ops into one active message per memory node and posts them (a
    /// node's message that UCX refuses fails the batch, see `post_messages`).
    fn post_rpcs(&mut self, f: &mut InFlight, now_ns: u64) {
        f.rpc_out.clear();
        f.rpc_spans.clear();
        for node in f.batch.rpc_nodes() {
            if f.down.contains(&node) {
                continue;
            }
            let id = self.next_rpc;
            self.next_rpc += 1;
            let start = f.rpc_out.len();
            f.rpc_out.extend_from_slice(&id.to_le_bytes());
            f.rpc_out.extend_from_slice(&now_ns.to_le_bytes());
            let hdr_end = f.rpc_out.len();
            for op in f.batch.ops.iter() {
                if op.kind == OpKind::Rpc && op.node == node {
                    f.rpc_out.extend_from_slice(&op.len.to_le_bytes());
                    f.rpc_out.extend_from_slice(f.batch.data(op));
                }
            }
            f.rpc_spans.push((node, start, hdr_end, f.rpc_out.len()));
            f.rpcs.push((node, id));
        }
        let spans = std::mem::take(&mut f.rpc_spans);
        let out: *const [u8] = &f.rpc_out[..];
        // SAFETY: `out` is `f.rpc_out`, which is not touched or resized until the requests
        // complete (the batch stays in its `InFlight`, handed to `orphans` if abandoned).
        unsafe { self.post_messages(f, out, &spans) };
        f.rpc_spans = spans;
    }

    /// Posts one active message per span `(node, start, header end, end)` of `out`. One that
    /// UCX refuses fails the batch with `NodeDown` of its node, and its response is not
    /// awaited; the other nodes' messages still go.
    ///
    /// # Safety
    ///
    /// `out` must stay valid and unchanged until `f`'s requests complete (a buffer of `f`).
    unsafe fn post_messages(
        &self,
        f: &mut InFlight,
        out: *const [u8],
        spans: &[(NodeId, usize, usize, usize)],
    ) {
        for &(node, start, hdr_end, end) in spans {
            // SAFETY: the caller keeps `out` valid and unchanged until the request completes.
            let r = self.ep(node).and_then(|ep| unsafe {
                let out = &*out;
                collect(
                    post::am(ep, AM_RPC_REQ, &out[start..hdr_end], &out[hdr_end..end]),
                    node,
                    f,
                )
            });
            if let Err(e) = r {
                // Its response never comes: not awaited. The other nodes' messages still go.
                f.fail(e);
                f.down.push(node);
                f.rpcs.retain(|&(n, _)| n != node);
                f.persist_ids.retain(|&(n, _)| n != node);
            }
        }
    }

    /// Asks each file-backed node a FLUSH of `f` reached to write its ranges back (one message
    /// per node, answered when its `msync` is done), of the nodes not down.
    fn post_persist(&mut self, f: &mut InFlight, now_ns: u64) {
        f.persist_out.clear();
        f.persist_ids.clear();
        let persist = std::mem::take(&mut f.persist);
        let mut spans = Vec::with_capacity(persist.len());
        for (node, _) in &persist {
            if self.replaced_at[*node as usize] > f.gen && !f.down.contains(node) {
                // Its endpoint was replaced since the batch's WRITEs: the region they reached
                // is gone, and the replacement is not asked to write back what it never got.
                f.fail(FabricError::NodeDown(*node));
                f.down.push(*node);
            }
        }
        for (node, ranges) in persist.iter().filter(|(n, _)| !f.down.contains(n)) {
            let id = self.next_rpc;
            self.next_rpc += 1;
            let start = f.persist_out.len();
            f.persist_out.extend_from_slice(&id.to_le_bytes());
            f.persist_out.extend_from_slice(&now_ns.to_le_bytes());
            f.persist_out.push(PERSIST);
            let hdr_end = f.persist_out.len();
            for &(from, to) in ranges {
                f.persist_out.extend_from_slice(&from.to_le_bytes());
                f.persist_out.extend_from_slice(&(to - from).to_le_bytes());
            }
            spans.push((*node, start, hdr_end, f.persist_out.len()));
            f.persist_ids.push((*node, id));
        }
        // Emptied (its buffer kept): the write-backs are asked once.
        f.persist = persist;
        f.persist.clear();
        let out: *const [u8] = &f.persist_out[..];
        // SAFETY: `out` is `f.persist_out`, untouched until the requests complete (as
        // `f.rpc_out` in `post_rpcs`).
        unsafe { self.post_messages(f, out, &spans) }
    }

    /// Blocks until `f`'s requests complete (progressing), for at most the blocking timeout.
    fn wait(&mut self, f: &mut InFlight) -> bool {
        let deadline = Instant::now() + self.blocking_timeout;
        loop {
            self.worker.progress();
            if f.poll_reqs() {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
        }
    }
}

fn collect(r: Result<Option<Req>, i32>, node: NodeId, f: &mut InFlight) -> Result<(), FabricError> {
    match r {
        Ok(Some(req)) => {
            f.reqs.push((node, req));
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(_) => Err(FabricError::NodeDown(node)),
    }
}

/// The pieces `(offset, len)` of an access at `addr` of `len` bytes: cut at line-aligned
/// addresses, each at most CHUNK bytes, so that UCX never splits a line across messages.
fn chunks(addr: u64, len: usize) -> impl Iterator<Item = (usize, usize)> {
    let mut off = 0usize;
    std::iter::from_fn(move || {
        if off >= len {
            return None;
        }
        let at = addr + off as u64;
        // The first piece ends on a line boundary, so the later ones start on one.
        let to_boundary = CHUNK - (at % LINE) as usize;
        let n = to_boundary.min(len - off);
        let piece = (off, n);
        off += n;
        Some(piece)
    })
}

impl Drop for Qps {
    fn drop(&mut self) {
        // Abandoned batches' buffers must outlive their requests: wait, or leak them.
        let deadline = Instant::now() + self.blocking_timeout;
        while !self.orphans.is_empty() && Instant::now() < deadline {
            self.reap();
        }
        for f in self.orphans.drain(..) {
            f.abandon();
        }
        self.rkeys.clear();
        for ep in self.eps.drain(..).flatten() {
            // A peer that is gone makes this time out; the worker's destruction cleans up.
            self.worker.close(ep, false, 2.0);
        }
        // SAFETY: dropped once, here; nothing uses the worker afterwards.
        unsafe { ManuallyDrop::drop(&mut self.worker) };
        if let Some(am) = self.am.take() {
            // SAFETY: the worker that could call the handler is destroyed.
            unsafe { am.free() };
        }
        // SAFETY: from `Box::into_raw` in `connect`, unused now that the worker is gone.
        drop(unsafe { Box::from_raw(self.inbox) });
    }
}

/// The RPC response callback: `arg` is the thread's inbox.
unsafe extern "C" fn on_resp(
    arg: *mut c_void,
    hdr: *const c_void,
    hlen: usize,
    data: *const c_void,
    len: usize,
    _reply_ep: dtxn_ucx_sys::ucp_ep_h,
) {
    if hlen < 17 {
        return;
    }
    // SAFETY: UCX passes `hlen` header bytes and `len` data bytes valid for this call.
    let (hdr, body) = unsafe {
        (
            std::slice::from_raw_parts(hdr as *const u8, hlen),
            if len == 0 {
                &[][..]
            } else {
                std::slice::from_raw_parts(data as *const u8, len)
            },
        )
    };
    let id = u64::from_le_bytes(hdr[..8].try_into().expect("8 bytes"));
    // SAFETY: `arg` is the inbox of the worker running this callback (see `Qps::connect`);
    // nothing else borrows it while `progress` runs.
    let inbox = unsafe { &*(arg as *const Inbox) };
    let cpu_ns = u64::from_le_bytes(hdr[9..17].try_into().expect("8 bytes"));
    inbox
        .borrow_mut()
        .insert(id, (hdr[8], cpu_ns, body.to_vec()));
}

/// Hands the responses of one message from `node` (each a little-endian u32 length and its
/// bytes, in post order) to `batch`'s RPC ops to `node`; false if they do not match.
fn unpack_responses(batch: &mut Batch, node: NodeId, body: &[u8]) -> bool {
    let mut pos = 0;
    for i in 0..batch.ops.len() {
        let op = batch.ops[i];
        if op.kind != OpKind::Rpc || op.node != node {
            continue;
        }
        let Some(len) = body.get(pos..pos + 4) else {
            return false;
        };
        let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        let Some(resp) = body.get(pos + 4..pos + 4 + len) else {
            return false;
        };
        let off = batch.resp.len();
        batch.resp.extend_from_slice(resp);
        batch.words[i] = ((off as u64) << 32) | len as u64;
        pos += 4 + len;
    }
    pos == body.len()
}

/// A coordinator's port: its thread's queue pairs, and its batch in flight.
struct UcxPort {
    qps: Rc<RefCell<Qps>>,
    /// Region sizes, as of this coordinator's (re)connection to each node.
    sizes: Vec<u64>,
    /// Per memory node: the [`Qps::replaced_at`] of the endpoint this coordinator connected
    /// to. The queue pairs are the thread's, but reconnecting is each coordinator's: an
    /// endpoint another coordinator of the thread replaced since is, for this one, a
    /// replacement it has not reconnected to, and its ops to it fail with `NodeDown` (as on
    /// `sim`, where connections are per coordinator) until it does.
    connected: Vec<u64>,
    /// Scratch: the nodes of the batch being submitted that `connected` refuses.
    refused: Vec<NodeId>,
    start: Instant,
    cur: Option<InFlight>,
    spare: InFlight,
    progress: Rc<Cell<bool>>,
    abort: Arc<AtomicBool>,
}

impl UcxPort {
    fn new(
        qps: Rc<RefCell<Qps>>,
        start: Instant,
        progress: Rc<Cell<bool>>,
        abort: Arc<AtomicBool>,
    ) -> UcxPort {
        let (sizes, connected) = {
            let q = qps.borrow();
            (q.sizes.clone(), q.replaced_at.clone())
        };
        UcxPort {
            qps,
            sizes,
            connected,
            refused: Vec::new(),
            start,
            cur: None,
            spare: InFlight::default(),
            progress,
            abort,
        }
    }
}

impl Fabric for UcxPort {
    fn submit(&mut self, batch: &mut Batch, detached: bool) -> Result<(), FabricError> {
        if self.abort.load(Ordering::Relaxed) {
            return Err(FabricError::Setup(
                "the run is aborting: another worker thread failed".into(),
            ));
        }
        let mut q = self.qps.borrow_mut();
        self.refused.clear();
        for op in &batch.ops {
            let ni = op.node as usize;
            // A replacement this coordinator has not reconnected to: its ops fail.
            if q.replaced_at
                .get(ni)
                .is_some_and(|&g| g != self.connected[ni])
            {
                if !self.refused.contains(&op.node) {
                    self.refused.push(op.node);
                }
                continue;
            }
            // A node down has no size to check against: its op fails when posted.
            if q.eps.get(ni).is_some_and(Option::is_none) {
                continue;
            }
            // Whether a node serves RPCs is its business: it answers NoRpcHandler if not.
            check_op(op, &self.sizes, true)?;
        }
        if let Some(old) = self.cur.take() {
            q.orphans.push(old);
        }
        let mut f = std::mem::take(&mut self.spare);
        f.batch.assign(batch);
        f.reqs.clear();
        f.rpcs.clear();
        f.persist.clear();
        f.persist_ids.clear();
        f.error = None;
        let now_ns = self.now_ns();
        q.post_batch(&mut f, !detached, now_ns, &self.refused);
        self.progress.set(true);
        if detached {
            q.orphans.push(f);
            Ok(())
        } else {
            self.cur = Some(f);
            Ok(())
        }
    }

    fn poll_complete(&mut self, batch: &mut Batch) -> Poll<Result<(), FabricError>> {
        let Some(f) = self.cur.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let q = self.qps.borrow();
        q.worker.progress();
        if !f.poll_reqs() {
            return Poll::Pending;
        }
        // SAFETY: the inbox is live while `q` is; the callback that fills it runs only inside
        // `progress`, which is not running now.
        let inbox = unsafe { &*q.inbox };
        {
            // A response from a node UCX found dead never comes: the batch fails. The live
            // nodes' responses are still awaited, so that a failed batch too completes only
            // once what it asked of the live nodes is done.
            let (mut waiting, mut dead) = (false, Vec::new());
            for &(node, id) in f.rpcs.iter().chain(&f.persist_ids) {
                if !inbox.borrow().contains_key(&id) {
                    if q.lost(f, node) {
                        dead.push(node);
                    } else {
                        waiting = true;
                    }
                }
            }
            for node in dead {
                f.fail(FabricError::NodeDown(node));
            }
            if waiting {
                return Poll::Pending;
            }
        }
        if !f.persist.is_empty() {
            // Every PUT before the FLUSHes has landed: now the write-backs (asked once: of
            // the live nodes only, where a node failed).
            drop(q);
            let now_ns = self.now_ns();
            let mut q = self.qps.borrow_mut();
            let f = self.cur.as_mut().expect("checked above");
            q.post_persist(f, now_ns);
            return Poll::Pending;
        }
        drop(q);
        let mut f = self.cur.take().expect("checked above");
        f.batch.resp.clear();
        f.batch.mn_cpu_ns = 0;
        for (i, op) in f.batch.ops.iter().enumerate() {
            if op.kind.is_atomic() {
                f.batch.words[i] = f.amo[i][1];
            }
        }
        {
            let mut ib = inbox.borrow_mut();
            let rpcs = std::mem::take(&mut f.rpcs);
            for &(node, id) in &rpcs {
                let Some((status, cpu_ns, body)) = ib.remove(&id) else {
                    continue;
                };
                match status {
                    RPC_OK => {
                        f.batch.mn_cpu_ns += cpu_ns;
                        if !unpack_responses(&mut f.batch, node, &body) {
                            f.fail(FabricError::Setup(format!(
                                "memory node {node} sent a malformed RPC response"
                            )));
                        }
                    }
                    RPC_NO_HANDLER => f.fail(FabricError::NoRpcHandler(node)),
                    _ => f.fail(FabricError::Setup(format!(
                        "the RPC handler of memory node {node} panicked"
                    ))),
                }
            }
            f.rpcs = rpcs;
            let persist_ids = std::mem::take(&mut f.persist_ids);
            for &(node, id) in &persist_ids {
                match ib.remove(&id) {
                    Some((RPC_OK, cpu_ns, _)) => f.batch.mn_cpu_ns += cpu_ns,
                    Some(_) => f.fail(FabricError::Persist {
                        node,
                        error: "msync failed on the memory node".into(),
                    }),
                    None => {}
                }
            }
            f.persist_ids = persist_ids;
        }
        batch.take_results(&f.batch);
        let r = match f.error.take() {
            None => Ok(()),
            Some(e) => Err(e),
        };
        self.spare = f;
        self.progress.set(true);
        Poll::Ready(r)
    }

    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn lease_now_ns(&self) -> u64 {
        crate::contract::wall_clock_ns()
    }

    fn poll_sleep(&mut self, deadline_ns: u64, first: bool) -> Poll<()> {
        if !first && self.now_ns() >= deadline_ns {
            self.progress.set(true);
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    fn charge_cpu(&mut self, _ns: u64) {}

    /// Re-bootstraps memory node `node` from its address and, if it is a replacement (or this
    /// thread's endpoint to it failed or is missing), connects the thread's queue pairs to it
    /// ([`Qps::reconnect`]: a healthy endpoint to the node's current incarnation is kept);
    /// then this coordinator uses the thread's current endpoint to it, with its size. A node
    /// still down changes nothing for the queue pairs: its ops keep failing with `NodeDown`.
    /// Blocks the thread for the bootstrap: a round trip, or up to [`RECONNECT_TIMEOUT`] per
    /// step for a node that does not answer.
    fn reconnect(&mut self, node: NodeId) {
        let ni = node as usize;
        // Called between this coordinator's polls, when no other port borrows the queue
        // pairs; if one did, there would be nothing sound to do but to skip.
        let Ok(mut q) = self.qps.try_borrow_mut() else {
            return;
        };
        if ni >= q.eps.len() {
            return;
        }
        q.reconnect(node);
        self.connected[ni] = q.replaced_at[ni];
        self.sizes[ni] = q.sizes[ni];
    }

    fn node_sizes(&self) -> &[u64] {
        &self.sizes
    }
}

impl Drop for UcxPort {
    fn drop(&mut self) {
        if let Some(f) = self.cur.take() {
            // Its buffers must outlive its requests.
            if let Ok(mut q) = self.qps.try_borrow_mut() {
                q.orphans.push(f);
            } else {
                f.abandon();
            }
        }
    }
}

/// Why a [`RemoteMem`] op may take its node's endpoint: `ok` refused a node down.
const UP: &str = "RemoteMem::ok checked that the node is up";

/// Blocking verbs for [`UcxPool::try_with_local`] on a remote memory node.
struct RemoteMem<'a> {
    q: &'a mut Qps,
    node: NodeId,
    size: u64,
    err: Option<FabricError>,
    /// READ destinations and WRITE sources, owned here so that a timed-out request can be
    /// abandoned with them (leaked) rather than write into freed memory.
    scratch: Vec<u8>,
    word: Box<[u64; 2]>,
}

impl RemoteMem<'_> {
    fn ok(&mut self, addr: u64, len: u64, atomic: bool) -> bool {
        if self.err.is_some() {
            return false;
        }
        if self.q.eps[self.node as usize].is_none() {
            self.err = Some(FabricError::NodeDown(self.node));
            return false;
        }
        if atomic && !addr.is_multiple_of(8) {
            self.err = Some(FabricError::Misaligned {
                node: self.node,
                addr,
            });
            return false;
        }
        if addr.checked_add(len).is_none_or(|e| e > self.size) {
            self.err = Some(FabricError::OutOfBounds {
                node: self.node,
                addr,
                len,
                size: self.size,
            });
            return false;
        }
        true
    }

    /// Posts one op (built by `post`) and waits for it; on a timeout the buffers are leaked.
    fn run(&mut self, post: impl FnOnce(&mut Qps, &mut InFlight)) -> bool {
        let mut f = InFlight::default();
        post(self.q, &mut f);
        let done = self.q.wait(&mut f);
        if !done {
            std::mem::forget(std::mem::take(&mut self.scratch));
            std::mem::forget(std::mem::replace(&mut self.word, Box::new([0; 2])));
            f.abandon();
            self.err = Some(FabricError::NodeDown(self.node));
            return false;
        }
        if let Some(e) = f.error.take() {
            self.err = Some(e);
            return false;
        }
        true
    }
}

impl LocalMem for RemoteMem<'_> {
    fn size(&self) -> u64 {
        self.size
    }

    fn read(&mut self, addr: u64, buf: &mut [u8]) {
        buf.fill(0);
        if !self.ok(addr, buf.len() as u64, false) {
            return;
        }
        self.scratch.clear();
        self.scratch.resize(buf.len(), 0);
        let (node, dst, len) = (self.node, self.scratch.as_mut_ptr(), buf.len());
        let ok = self.run(|q, f| {
            let ni = node as usize;
            let raddr = q.bases[ni] + addr;
            for (off, n) in chunks(addr, len) {
                // SAFETY: `dst + off .. + n` lies in `scratch`, untouched until the request
                // completes or is abandoned with `scratch` leaked (`run`); bounds checked.
                let r = unsafe {
                    post::get(
                        q.eps[ni].as_ref().expect(UP),
                        q.rkeys[ni].as_ref().expect(UP),
                        raddr + off as u64,
                        dst.add(off),
                        n,
                    )
                };
                if let Err(e) = collect(r, node, f) {
                    f.fail(e);
                    return;
                }
            }
        });
        if ok {
            buf.copy_from_slice(&self.scratch);
        }
    }

    fn write(&mut self, addr: u64, data: &[u8]) {
        if !self.ok(addr, data.len() as u64, false) {
            return;
        }
        self.scratch.clear();
        self.scratch.extend_from_slice(data);
        let (node, src) = (self.node, &self.scratch[..] as *const [u8]);
        self.run(|q, f| {
            let ni = node as usize;
            let raddr = q.bases[ni] + addr;
            // SAFETY: `src` is `scratch`, kept (or leaked) until the requests complete.
            let src = unsafe { &*src };
            for (off, n) in chunks(addr, src.len()) {
                // SAFETY: as above; bounds checked.
                let r = unsafe {
                    post::put(
                        q.eps[ni].as_ref().expect(UP),
                        q.rkeys[ni].as_ref().expect(UP),
                        raddr + off as u64,
                        &src[off..off + n],
                    )
                };
                if let Err(e) = collect(r, node, f) {
                    f.fail(e);
                    return;
                }
            }
            if let Err(e) = collect(post::flush(q.eps[ni].as_ref().expect(UP)), node, f) {
                f.fail(e);
            }
        });
    }

    fn cas(&mut self, addr: u64, expect: u64, new: u64) -> u64 {
        self.amo(addr, true, expect, new)
    }

    fn faa(&mut self, addr: u64, add: u64) -> u64 {
        self.amo(addr, false, add, 0)
    }
}

impl RemoteMem<'_> {
    fn amo(&mut self, addr: u64, cswap: bool, a: u64, b: u64) -> u64 {
        if !self.ok(addr, 8, true) {
            return 0;
        }
        *self.word = [a, b];
        let (node, slot) = (self.node, self.word.as_mut_ptr());
        let ok = self.run(|q, f| {
            let ni = node as usize;
            // SAFETY: `slot` is `word`, kept (or leaked) until the request completes; aligned
            // and in bounds (checked).
            let r = unsafe {
                post::amo(
                    q.eps[ni].as_ref().expect(UP),
                    q.rkeys[ni].as_ref().expect(UP),
                    q.bases[ni] + addr,
                    cswap,
                    slot,
                    slot.add(1),
                )
            };
            if let Err(e) = collect(r, node, f) {
                f.fail(e);
            }
        });
        if ok {
            self.word[1]
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::chunks;

    #[test]
    fn chunks_cut_at_lines_and_cap() {
        let v: Vec<_> = chunks(0, 10_000).collect();
        assert_eq!(v, vec![(0, 4096), (4096, 4096), (8192, 1808)]);
        let v: Vec<_> = chunks(100, 8200).collect();
        // First piece ends on a line boundary: 100 + 4060 = 4160 = 65 lines.
        assert_eq!(v[0], (0, 4060));
        assert!(v.iter().skip(1).all(|&(o, _)| (100 + o) % 64 == 0));
        assert_eq!(v.iter().map(|p| p.1).sum::<usize>(), 8200);
        assert_eq!(chunks(5, 0).count(), 0);
    }
}
