//! The `shm` backend: real memory, real CPU atomics, real threads.
//!
//! Each memory node is a mapped region: anonymous memory for one process, or one file per node
//! (`node-{i}.dtxn` in [`ShmConfig::dir`], e.g. under `/dev/shm`) that several processes can map
//! at once. READ and WRITE are atomic per aligned 64-byte line through seqlocks, one per group
//! of 8 lines (a plain memcpy is not); FAA and a CAS that may swap take the group's seqlock
//! too, so a READ never sees a line half updated.
//!
//! # Region layout (anonymous and file-backed alike)
//!
//! ```text
//! offset 0      header, 4096 bytes: magic "DTXNSHM1" | layout version u64 | data size u64 |
//!               line count u64 | zeroes          (all little-endian)
//! offset 4096   one 8-byte sequence word per 512-byte group of data lines, rounded up to 4096
//!               bytes
//! offset D      the data (D = 4096 + that), `data size` bytes
//! ```
//!
//! [`ShmPool::open`] refuses a file whose magic, [`LAYOUT_VERSION`] or size does not match.
//!
//! One-sided ops execute at [`Fabric::submit`], in post order, on the posting thread. That is stronger than
//! the contract asks (every op is ordered after every earlier op of the batch, and the lines of a
//! READ are fetched in address order) and weaker in nothing. Completion is immediate unless
//! [`ShmConfig::delay_ns`] emulates a network round trip.
//!
//! [`ShmPool::run`] gives each worker thread of the topology an OS thread that polls its
//! coordinator coroutines round-robin; a coroutine that posts a batch lets the others run before
//! it resumes (when the thread has more than one), as if polling a completion queue.
//!
//! # Memory-node CPUs
//!
//! RPCs are served by server threads, [`ShmPool::set_memnode_threads`] per memory node (one by
//! default), started when a handler is installed ([`ShmPool::set_rpc_handler`]; a pool without
//! one has no threads) and stopped when the pool is dropped. A batch's RPC ops to one node are
//! packed into one message, queued on that node's request queue, and served in post order by
//! one thread; the batch completes once the responses are back, and the worker thread runs its
//! other coroutines meanwhile. Idle server threads block (after a short spin).
//!
//! # Limits
//!
//! - FLUSH orders but does not persist: files on a DAX mount would need `clwb` of the written
//!   lines for durability, which this backend does not issue.
//! - Across processes (`dir`), each process serves its own coordinators' RPCs with its own
//!   server threads and handler: a memory node's handlers then run in several processes at
//!   once (the contract allows it: handlers must be correct concurrently).
//! - A process that dies inside a WRITE, CAS or FAA leaves that 512-byte group locked for
//!   everyone (re-create the pool).

mod region;
mod rpc;
#[cfg(test)]
mod tests;

use crate::contract::{check_op, Fabric, LocalMem, RpcHandler};
use crate::dirty::Dirty;
use crate::runtime::{drive_thread, task, AbortOnPanic, RunReport, Task, Topology};
use crate::stats::Stats;
use crate::verbs::{Batch, OpKind};
use crate::{CoordId, Endpoint, FabricError, NodeId};
use region::Region;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

pub use region::LAYOUT_VERSION;

/// A shared-memory pool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShmConfig {
    /// Region size of each memory node, in bytes (a positive multiple of 64).
    pub node_sizes: Vec<u64>,
    /// `None`: anonymous memory, this process only. `Some(dir)`: one file per memory node in
    /// `dir` (e.g. under /dev/shm), shareable between processes.
    pub dir: Option<PathBuf>,
    /// Emulated network latency: each batch completes this long after it was posted.
    pub delay_ns: u64,
}

/// The file of memory node `node` in `dir`.
pub fn node_file(dir: &Path, node: usize) -> PathBuf {
    dir.join(format!("node-{node}.dtxn"))
}

/// What every coordinator's port shares.
struct Shared {
    regions: Vec<Region>,
    sizes: Vec<u64>,
    /// FLUSH, and the memory nodes' own stores for RPCs, write file-backed regions back to
    /// their files ([`ShmPool::set_persist`]).
    persist: AtomicBool,
    /// Bytes (whole pages) written back so far.
    persisted: AtomicU64,
}

/// A memory pool in this process's (or this host's shared) memory. It outlives runs: load it,
/// run coordinators against it, inspect it, run again.
pub struct ShmPool {
    cfg: ShmConfig,
    /// Seeds the coordinators' RNGs. Kept out of [`ShmConfig`] so that its struct literals
    /// elsewhere in the workspace keep compiling.
    seed: u64,
    shared: Arc<Shared>,
    /// The memory nodes' server threads, while a handler is installed.
    rpc: Option<rpc::Servers>,
    /// Server threads per memory node for the next handler installed.
    memnode_threads: usize,
    runs: AtomicU64,
}

impl std::fmt::Debug for ShmPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmPool")
            .field("cfg", &self.cfg)
            .field("seed", &self.seed)
            .field("rpc", &self.rpc.is_some())
            .finish()
    }
}

impl ShmPool {
    /// Maps a fresh, zeroed pool. With [`ShmConfig::dir`], creates the directory if needed and
    /// creates, or truncates and re-initialises, `node-{i}.dtxn` for every node (removing files
    /// of nodes beyond the configured count, so that [`ShmPool::open`] sees this pool). A
    /// process that still maps an old file of a larger size gets SIGBUS on its next access:
    /// re-create only when nobody is attached.
    pub fn create(cfg: ShmConfig) -> Result<ShmPool, FabricError> {
        if cfg.node_sizes.is_empty() {
            return Err(FabricError::Setup(
                "a pool needs at least one memory node".into(),
            ));
        }
        for (i, &size) in cfg.node_sizes.iter().enumerate() {
            region::check_size(i, size)?;
        }
        let regions = match &cfg.dir {
            None => cfg
                .node_sizes
                .iter()
                .enumerate()
                .map(|(i, &size)| Region::anon(i, size))
                .collect::<Result<Vec<_>, _>>()?,
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| {
                    FabricError::Setup(format!("cannot create {}: {e}", dir.display()))
                })?;
                for stale in node_files(dir)?
                    .into_iter()
                    .filter(|&n| n >= cfg.node_sizes.len())
                {
                    let path = node_file(dir, stale);
                    std::fs::remove_file(&path).map_err(|e| {
                        FabricError::Setup(format!("cannot remove stale {}: {e}", path.display()))
                    })?;
                }
                cfg.node_sizes
                    .iter()
                    .enumerate()
                    .map(|(i, &size)| Region::create_file(i, &node_file(dir, i), size))
                    .collect::<Result<Vec<_>, _>>()?
            }
        };
        Ok(ShmPool::with_regions(cfg, regions))
    }

    /// Attaches to the pool another process created in `dir` (its files `node-0.dtxn`,
    /// `node-1.dtxn`, ...), checking each file's magic, layout version and size.
    pub fn open(dir: impl AsRef<Path>, delay_ns: u64) -> Result<ShmPool, FabricError> {
        let dir = dir.as_ref();
        let nodes = node_files(dir)?;
        if nodes.is_empty() {
            return Err(FabricError::Setup(format!(
                "{} holds no memory node files (node-0.dtxn, ...)",
                dir.display()
            )));
        }
        if let Some(missing) = (0..nodes.len()).find(|i| !nodes.contains(i)) {
            return Err(FabricError::Setup(format!(
                "memory node {missing} file {} is missing (the highest node file is node-{}.dtxn)",
                node_file(dir, missing).display(),
                nodes.iter().max().expect("not empty")
            )));
        }
        let regions = (0..nodes.len())
            .map(|i| Region::open_file(i, &node_file(dir, i)))
            .collect::<Result<Vec<_>, _>>()?;
        let cfg = ShmConfig {
            node_sizes: regions.iter().map(Region::size).collect(),
            dir: Some(dir.to_path_buf()),
            delay_ns,
        };
        Ok(ShmPool::with_regions(cfg, regions))
    }

    fn with_regions(cfg: ShmConfig, regions: Vec<Region>) -> ShmPool {
        let shared = Shared {
            sizes: regions.iter().map(Region::size).collect(),
            regions,
            persist: AtomicBool::new(false),
            persisted: AtomicU64::new(0),
        };
        ShmPool {
            cfg,
            seed: 0,
            shared: Arc::new(shared),
            rpc: None,
            memnode_threads: 1,
            runs: AtomicU64::new(0),
        }
    }

    pub fn config(&self) -> &ShmConfig {
        &self.cfg
    }

    /// Persist mode (for `--set flush=true`): a FLUSH writes the pages its QP wrote to that
    /// memory node back to the node's file and waits for the device (`msync`), and an RPC's
    /// stores are written back before it is answered, so that what a protocol flushed
    /// survives the host's crash, not only the processes'. Turning it on writes back the whole
    /// regions first (what was loaded). Anonymous regions (no [`ShmConfig::dir`]) have no
    /// file: refused.
    pub fn set_persist(&mut self, on: bool) -> Result<(), FabricError> {
        if on && self.cfg.dir.is_none() {
            return Err(FabricError::Setup(
                "persisting FLUSHes needs file-backed memory nodes (a --shm-dir): anonymous \
                 memory dies with the process"
                    .into(),
            ));
        }
        if on {
            // What is there already (a loaded workload: the loader's stores) is durable too.
            for (node, r) in self.shared.regions.iter().enumerate() {
                let n = r.persist(0, r.size()).map_err(|e| FabricError::Persist {
                    node: node as NodeId,
                    error: e.to_string(),
                })?;
                self.shared.persisted.fetch_add(n, Ordering::Relaxed);
            }
        }
        self.shared.persist.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// Bytes written back to the memory nodes' files so far (whole pages; persist mode).
    pub fn persisted_bytes(&self) -> u64 {
        self.shared.persisted.load(Ordering::Relaxed)
    }

    /// Seeds the coordinators' RNGs ([`Endpoint::rng`]) of later runs and endpoints; each run
    /// derives its own stream from it. A new pool's seed is 0.
    pub fn set_seed(&mut self, seed: u64) {
        self.seed = seed;
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn node_sizes(&self) -> Vec<u64> {
        self.shared.sizes.clone()
    }

    /// The memory node's own CPU view of its region (loading, inspection, checks). Each access
    /// is line-atomic like a verb, so this may run while coordinators do.
    ///
    /// # Panics
    ///
    /// If `node` does not exist, or an access of `f` falls outside the region.
    pub fn with_local<T>(&self, node: NodeId, f: impl FnOnce(&mut dyn LocalMem) -> T) -> T {
        let region = self.shared.regions.get(node as usize).unwrap_or_else(|| {
            panic!(
                "memory node {node} does not exist (the pool has {})",
                self.shared.regions.len()
            )
        });
        f(&mut RegionMem(region, None))
    }

    /// Installs the handler that serves RPC verbs (for the next runs and endpoints), and
    /// starts the memory nodes' server threads ([`ShmPool::set_memnode_threads`] per node).
    /// A handler installed before is replaced and its threads stopped: endpoints made before
    /// fail their later RPC posts.
    ///
    /// # Panics
    ///
    /// If the operating system refuses to start a thread.
    pub fn set_rpc_handler(&mut self, handler: Arc<dyn RpcHandler>) {
        // The old threads stop before the new ones start: never two services on one node.
        self.rpc = None;
        let servers = rpc::Servers::start(self.shared.clone(), handler, self.memnode_threads);
        self.rpc = Some(servers.unwrap_or_else(|e| panic!("RPC server threads: {e}")));
    }

    /// Server threads (cores) per memory node serving RPCs, for handlers installed from now
    /// on (at least 1; 1 by default). Kept out of [`ShmConfig`] so that its struct literals
    /// elsewhere keep compiling.
    pub fn set_memnode_threads(&mut self, n: usize) {
        self.memnode_threads = n.max(1);
    }

    pub fn memnode_threads(&self) -> usize {
        self.memnode_threads
    }

    fn port(
        &self,
        start: Instant,
        interleave: bool,
        progress: Rc<Cell<bool>>,
        dirty: Rc<RefCell<Dirty>>,
        abort: Arc<AtomicBool>,
    ) -> ShmPort {
        ShmPort {
            dirty,
            shared: self.shared.clone(),
            abort,
            rpc: self.rpc.as_ref().map(|s| s.service.clone()),
            msgs: Vec::new(),
            bg: Vec::new(),
            spare: Vec::new(),
            start,
            delay: Duration::from_nanos(self.cfg.delay_ns),
            interleave,
            pending: Completion::Done,
            progress,
        }
    }

    /// A coordinator endpoint outside of [`ShmPool::run`], driven by the caller (benchmarks,
    /// tools): its batches complete at once (or after [`ShmConfig::delay_ns`]), and its clock
    /// starts now.
    pub fn endpoint(&self, id: CoordId) -> Endpoint {
        let port = self.port(
            Instant::now(),
            false,
            Rc::default(),
            Rc::default(),
            Arc::default(),
        );
        Endpoint::new(id, self.seed, Box::new(port))
    }

    /// Runs `f` as every coordinator of `topo`: `topo.threads` OS threads, each polling its
    /// `topo.coroutines` coordinators round-robin, until all of them return. `stop_at_ns`, if
    /// given, ends the run after that much wall time, dropping the coordinators still running
    /// (their outputs are `None`; a coordinator is dropped only while it waits, never inside a
    /// poll).
    ///
    /// If a coordinator panics, the run ends with that panic rather than leaving the other
    /// threads' coordinators spinning on what it left behind (say, a lock it held): their later
    /// posts fail, and their threads drop them at their next wait.
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
        if topo.compute_nodes != 1 {
            return Err(FabricError::Setup(
                "shm runs one compute node; use threads and coroutines".into(),
            ));
        }
        let runs = self.runs.fetch_add(1, Ordering::Relaxed);
        let seed = self.seed ^ runs.wrapping_mul(0xa076_1d64_78bd_642f);
        let start = Instant::now();
        let stop = stop_at_ns.map(|ns| start + Duration::from_nanos(ns));
        let f = &f;
        let ctx = &RunCtx {
            topo,
            seed,
            start,
            stop,
            abort: Arc::new(AtomicBool::new(false)),
        };
        let joined = std::thread::scope(|s| {
            let mut handles = Vec::with_capacity(topo.threads as usize);
            for thread in 0..topo.threads {
                let h = std::thread::Builder::new()
                    .name(format!("shm-worker-{thread}"))
                    .spawn_scoped(s, move || {
                        let _guard = AbortOnPanic(&ctx.abort);
                        self.worker(ctx, thread, f)
                    })
                    .map_err(|e| {
                        FabricError::Setup(format!("cannot spawn worker thread {thread}: {e}"))
                    });
                // The threads already spawned finish their coordinators before the scope
                // returns; the run as a whole fails.
                handles.push(h?);
            }
            Ok(handles.into_iter().map(|h| h.join()).collect::<Vec<_>>())
        })?;
        let mut per_thread = Vec::with_capacity(joined.len());
        for j in joined {
            match j {
                Ok(out) => per_thread.push(out),
                Err(panic) => std::panic::resume_unwind(panic),
            }
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

    /// One worker thread: builds its coordinators and polls them round-robin. The futures are
    /// `!Send`; they live and die on this thread, and only their outputs leave it.
    fn worker<F, Fut, R>(&self, ctx: &RunCtx, thread: u32, f: &F) -> Vec<(Option<R>, Stats)>
    where
        F: Fn(Endpoint) -> Fut,
        Fut: Future<Output = R> + 'static,
        R: 'static,
    {
        let RunCtx {
            topo,
            seed,
            start,
            stop,
            ref abort,
        } = *ctx;
        let n = topo.coroutines as usize;
        let progress = Rc::new(Cell::new(false));
        let dirty = Rc::new(RefCell::new(Dirty::default()));
        let mut tasks: Vec<Option<Task<R>>> = Vec::with_capacity(n);
        let mut cells = Vec::with_capacity(n);
        for coroutine in 0..topo.coroutines {
            let id = CoordId {
                compute_node: 0,
                thread,
                coroutine,
                index: thread * topo.coroutines + coroutine,
            };
            let port = self.port(start, n > 1, progress.clone(), dirty.clone(), abort.clone());
            let ep = Endpoint::new(id, seed, Box::new(port));
            cells.push(ep.stats_cell());
            tasks.push(Some(task(f, ep)));
        }
        drive_thread(tasks, &progress, abort, stop, || {})
            .into_iter()
            .zip(cells.iter().map(|c| c.get()))
            .collect()
    }
}

/// What the worker threads of one run share.
struct RunCtx {
    topo: Topology,
    seed: u64,
    start: Instant,
    stop: Option<Instant>,
    /// Set when a worker thread unwinds.
    abort: Arc<AtomicBool>,
}

/// Names of the node files present in `dir`: the `i` of every `node-{i}.dtxn`.
fn node_files(dir: &Path) -> Result<Vec<usize>, FabricError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            return Err(FabricError::Setup(format!(
                "cannot list {}: {e}",
                dir.display()
            )))
        }
    };
    let mut nodes = Vec::new();
    for entry in entries {
        let entry =
            entry.map_err(|e| FabricError::Setup(format!("cannot list {}: {e}", dir.display())))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let index = name
            .strip_prefix("node-")
            .and_then(|r| r.strip_suffix(".dtxn"))
            .and_then(|i| i.parse::<usize>().ok());
        // `node-01.dtxn` parses too but is not ours: only the canonical spelling counts.
        if let Some(i) = index.filter(|i| format!("node-{i}.dtxn") == name) {
            nodes.push(i);
        }
    }
    nodes.sort_unstable();
    Ok(nodes)
}

/// A region seen by its memory node's CPU. With `written` (persist mode, an RPC handler's
/// view), it notes the ranges its stores changed, to be written back before the answer.
struct RegionMem<'a>(&'a Region, Option<&'a mut Vec<(u64, u64)>>);

impl RegionMem<'_> {
    /// Writes back what the handler's stores changed; the bytes written back.
    fn persist(region: &Region, written: &mut Vec<(u64, u64)>) -> std::io::Result<u64> {
        let mut n = 0;
        for (addr, len) in written.drain(..) {
            n += region.persist(addr, len)?;
        }
        Ok(n)
    }
}

impl LocalMem for RegionMem<'_> {
    fn size(&self) -> u64 {
        self.0.size()
    }

    fn read(&mut self, addr: u64, buf: &mut [u8]) {
        self.0.read(addr, buf);
    }

    fn write(&mut self, addr: u64, data: &[u8]) {
        self.0.write(addr, data);
        if let Some(w) = &mut self.1 {
            w.push((addr, data.len() as u64));
        }
    }

    fn cas(&mut self, addr: u64, expect: u64, new: u64) -> u64 {
        self.0.cas(addr, expect, new)
    }

    fn faa(&mut self, addr: u64, add: u64) -> u64 {
        self.0.faa(addr, add)
    }
}

/// Where the awaited batch stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Completion {
    /// Complete (or nothing posted).
    Done,
    /// Complete, but the other coroutines of the thread get one turn first.
    YieldOnce,
    /// Complete at this instant (emulated latency).
    At(Instant),
}

/// A coordinator's queue pairs: direct access to the regions.
struct ShmPort {
    shared: Arc<Shared>,
    /// Set when a coordinator of the run panicked: posting fails from then on.
    abort: Arc<AtomicBool>,
    rpc: Option<Arc<rpc::RpcService>>,
    /// RPC messages of the awaited batch, and of the background batch, in flight.
    msgs: Vec<Arc<rpc::Slot>>,
    bg: Vec<Arc<rpc::Slot>>,
    /// Completed messages, for reuse (no allocation per message once grown).
    spare: Vec<Arc<rpc::Slot>>,
    start: Instant,
    delay: Duration,
    /// The thread runs other coroutines: yield to them after each post.
    interleave: bool,
    pending: Completion,
    /// Shared by the thread's ports and its executor: set whenever a coordinator moved on, so
    /// that the executor knows when a whole round only waited.
    progress: Rc<Cell<bool>>,
    /// What the thread's QPs wrote since their last FLUSH (persist mode).
    dirty: Rc<RefCell<Dirty>>,
}

/// Bytes of each op a batch prefetches before it executes (see `Region::prefetch`).
const PREFETCH_MAX: u64 = 1024;

impl ShmPort {
    // Inlined into `submit`, as before RPCs had their own path: a call per batch showed.
    #[inline(always)]
    fn execute(&self, batch: &mut Batch) -> Result<(), FabricError> {
        let persist = self.shared.persist.load(Ordering::Relaxed);
        let Batch {
            ops, buf, words, ..
        } = batch;
        if ops.len() > 1 {
            for op in ops.iter() {
                if matches!(
                    op.kind,
                    OpKind::Read | OpKind::Write | OpKind::Cas | OpKind::Faa
                ) {
                    let region = &self.shared.regions[op.node as usize];
                    region.prefetch(op.addr, u64::from(op.len).min(PREFETCH_MAX));
                }
            }
        }
        for (i, op) in ops.iter().enumerate() {
            let region = &self.shared.regions[op.node as usize];
            let span = op.data as usize..op.data as usize + op.len as usize;
            match op.kind {
                OpKind::Read => region.read(op.addr, &mut buf[span]),
                OpKind::Write => {
                    region.write(op.addr, &buf[span]);
                    if persist {
                        self.dirty
                            .borrow_mut()
                            .add(op.node, op.addr, u64::from(op.len));
                    }
                }
                OpKind::Cas => words[i] = region.cas(op.addr, op.arg0, op.arg1),
                OpKind::Faa => words[i] = region.faa(op.addr, op.arg0),
                // Every store above is already visible to every thread and process mapping the
                // region. In persist mode the pages this thread's QP wrote go back to the file
                // (msync); otherwise there is nothing to flush for DRAM or /dev/shm (a file on
                // a DAX mount would need clwb of the written lines instead), and the fence
                // only keeps the ordering promise explicit.
                OpKind::Flush => {
                    std::sync::atomic::fence(Ordering::SeqCst);
                    if persist {
                        let ranges = self.dirty.borrow_mut().take(op.node);
                        for (from, to) in ranges {
                            let n = region.persist(from, to.min(region.size()) - from).map_err(
                                |e| FabricError::Persist {
                                    node: op.node,
                                    error: e.to_string(),
                                },
                            )?;
                            self.shared.persisted.fetch_add(n, Ordering::Relaxed);
                        }
                    }
                }
                // Served by the memory node's server threads: see `post_rpcs`.
                OpKind::Rpc => {}
            }
        }
        Ok(())
    }
}

impl ShmPort {
    /// Packs the batch's RPC ops into one message per memory node and queues them; the
    /// messages go to `msgs` (`None`: detached, nobody waits).
    fn post_rpcs(
        &mut self,
        batch: &Batch,
        mut msgs: Option<&mut Vec<Arc<rpc::Slot>>>,
    ) -> Result<(), FabricError> {
        let svc = self.rpc.clone().expect("checked by check_op");
        for node in batch.rpc_nodes() {
            let slot = match self.spare.pop() {
                // Only a slot no server thread still holds is reused.
                Some(s) if Arc::strong_count(&s) == 1 => s,
                _ => Arc::new(rpc::Slot::new()),
            };
            {
                let mut m = slot.lock();
                m.node = node;
                m.start = self.start;
                m.req.clear();
                m.reqs.clear();
                for op in batch
                    .ops
                    .iter()
                    .filter(|o| o.kind == OpKind::Rpc && o.node == node)
                {
                    let off = m.req.len() as u32;
                    m.req.extend_from_slice(batch.data(op));
                    m.reqs.push((off, op.len));
                }
            }
            slot.done.store(false, Ordering::Relaxed);
            svc.post(node, slot.clone())?;
            if let Some(msgs) = msgs.as_deref_mut() {
                msgs.push(slot);
            }
        }
        Ok(())
    }

    /// Whether every message of `msgs` has been served.
    fn served(msgs: &[Arc<rpc::Slot>]) -> bool {
        msgs.iter().all(|s| s.done.load(Ordering::Acquire))
    }

    /// Takes the responses of the served `msgs` (all of `batch`'s RPCs) into `batch`, in op
    /// order, and recycles the messages.
    fn take_responses(
        spare: &mut Vec<Arc<rpc::Slot>>,
        msgs: &mut Vec<Arc<rpc::Slot>>,
        batch: &mut Batch,
    ) -> Result<(), FabricError> {
        batch.resp.clear();
        batch.mn_cpu_ns = 0;
        let mut failed = None;
        for slot in msgs.iter() {
            let m = slot.lock();
            batch.mn_cpu_ns += m.cpu_ns;
            if m.failed {
                failed.get_or_insert(m.node);
                continue;
            }
            let mut next = 0;
            for (i, op) in batch.ops.iter().enumerate() {
                if op.kind != OpKind::Rpc || op.node != m.node {
                    continue;
                }
                let (off, len) = m.resps[next];
                next += 1;
                let at = batch.resp.len();
                batch
                    .resp
                    .extend_from_slice(&m.resp[off as usize..(off + len) as usize]);
                batch.words[i] = ((at as u64) << 32) | u64::from(len);
            }
        }
        spare.append(msgs);
        match failed {
            Some(node) => Err(FabricError::Setup(format!(
                "the RPC handler of memory node {node} panicked"
            ))),
            None => Ok(()),
        }
    }

    fn check(&self, batch: &Batch) -> Result<(), FabricError> {
        if self.abort.load(Ordering::Relaxed) {
            return Err(FabricError::Setup(
                "the run is aborting: a coordinator on another worker thread panicked".into(),
            ));
        }
        let has_rpc = self.rpc.is_some();
        for op in &batch.ops {
            check_op(op, &self.shared.sizes, has_rpc)?;
        }
        Ok(())
    }
}

impl Fabric for ShmPort {
    fn submit(&mut self, batch: &mut Batch, detached: bool) -> Result<(), FabricError> {
        self.check(batch)?;
        let has_rpc = self.rpc.is_some() && batch.ops.iter().any(|o| o.kind == OpKind::Rpc);
        self.execute(batch)?;
        if has_rpc {
            let mut msgs = std::mem::take(&mut self.msgs);
            msgs.clear();
            let r = self.post_rpcs(batch, (!detached).then_some(&mut msgs));
            self.msgs = msgs;
            r?;
        }
        self.progress.set(true);
        if !detached {
            self.pending = if !self.delay.is_zero() {
                Completion::At(Instant::now() + self.delay)
            } else if self.interleave {
                Completion::YieldOnce
            } else {
                Completion::Done
            };
        }
        Ok(())
    }

    fn submit_background(&mut self, batch: &mut Batch) -> Result<(), FabricError> {
        self.check(batch)?;
        self.execute(batch)?;
        if self.rpc.is_some() && batch.ops.iter().any(|o| o.kind == OpKind::Rpc) {
            let mut bg = std::mem::take(&mut self.bg);
            let r = self.post_rpcs(batch, Some(&mut bg));
            self.bg = bg;
            r?;
        }
        self.progress.set(true);
        Ok(())
    }

    fn poll_background(&mut self) -> Poll<Result<(), FabricError>> {
        if self.bg.is_empty() {
            return Poll::Ready(Ok(()));
        }
        if !Self::served(&self.bg) {
            return Poll::Pending;
        }
        self.progress.set(true);
        let failed = self.bg.iter().find_map(|s| {
            let m = s.lock();
            m.failed.then_some(m.node)
        });
        self.spare.append(&mut self.bg);
        Poll::Ready(match failed {
            Some(node) => Err(FabricError::Setup(format!(
                "the RPC handler of memory node {node} panicked"
            ))),
            None => Ok(()),
        })
    }

    #[inline]
    fn poll_complete(&mut self, batch: &mut Batch) -> Poll<Result<(), FabricError>> {
        let mut rpc_result = Ok(());
        if !self.msgs.is_empty() {
            if !Self::served(&self.msgs) {
                return Poll::Pending;
            }
            rpc_result = Self::take_responses(&mut self.spare, &mut self.msgs, batch);
            if self.pending == Completion::YieldOnce {
                // Waiting for the responses let the other coroutines run already.
                self.pending = Completion::Done;
            }
        }
        match self.pending {
            Completion::Done => {}
            Completion::YieldOnce => {
                self.pending = Completion::Done;
                return Poll::Pending;
            }
            Completion::At(t) => {
                if Instant::now() < t {
                    return Poll::Pending;
                }
                self.pending = Completion::Done;
            }
        }
        self.progress.set(true);
        Poll::Ready(rpc_result)
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

    fn node_sizes(&self) -> &[u64] {
        &self.shared.sizes
    }
}
