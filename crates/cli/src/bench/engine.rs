//! Running a workload's coordinators on a pool, and what they measure.
//!
//! Every coordinator runs transactions of the mix back to back (an abort is not retried: the
//! next transaction is drawn, as in FORD's driver; with `--retry` a conflict's abort runs the
//! same transaction again until it commits, as Scythe's clients do, and its latency runs from
//! its first attempt) until the run's end, and records each attempt that started after the
//! warm-up: its type, outcome, latency and fabric counters.
//! On `sim` all coordinators share one collector (they run on one OS thread); on `shm` each
//! has its own, merged at the end, so that worker threads never share a cache line per
//! transaction.

use dtxn_check::HistoryWriter;
use dtxn_fabric::FabricError;
use dtxn_fabric::{Endpoint, NodeSet, Pool, Topology};
use dtxn_store::{PoolMap, StoreError, View};
use dtxn_txn::membership::{self, JoinEvent, LeaseConfig, RecoveryEvent, Service, ViewEvent};
use dtxn_txn::Breakdown;
use dtxn_txn::{
    AbortReason, Coordinator, LocalOracle, Recorder, StartClock, TxnConfig, TxnOutcome, Vcache,
};
use dtxn_workloads::{rng::mix, WlRng, Workload};
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use rand::SeedableRng;
use std::cell::{Cell, RefCell};
use std::fs::File;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// When the coordinators stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Run for `warmup_ns` unmeasured, then `measure_ns` measured (virtual on sim).
    Duration { warmup_ns: u64, measure_ns: u64 },
    /// After `warmup_ns`, run `txns` measured attempts in all, split evenly.
    Txns { warmup_ns: u64, txns: u64 },
}

impl Stop {
    fn warmup_ns(&self) -> u64 {
        match *self {
            Stop::Duration { warmup_ns, .. } | Stop::Txns { warmup_ns, .. } => warmup_ns,
        }
    }
}

/// Per transaction type: attempts, outcomes, and the cost of the committed ones.
#[derive(Debug, Clone)]
pub struct TypeStats {
    pub attempts: u64,
    pub committed: u64,
    /// Aborts by reason, indexed like [`AbortReason::ALL`].
    pub aborts: [u64; AbortReason::ALL.len()],
    /// Latency of committed attempts, ns.
    pub latency: Histogram<u64>,
    /// Sums over committed attempts: critical-path round trips, verbs, payload bytes.
    pub round_trips: u64,
    pub verbs: u64,
    pub bytes: u64,
    /// Of the round trips, those spent on the timestamp oracle (multi-version protocols).
    pub oracle_round_trips: u64,
    /// Wall time spent executing the verbs (`--fabric-time`, else 0), ns.
    pub fabric_ns: u64,
    /// RPC requests, the messages they were packed into, and the memory nodes' CPU time
    /// serving them (ns: virtual on sim, measured on shm and ucx).
    pub rpcs: u64,
    pub rpc_messages: u64,
    pub mn_cpu_ns: u64,
    /// Time per phase, summed over committed attempts (`--breakdown`, else 0).
    pub breakdown: Breakdown,
}

/// An hour in ns: latencies above are clamped (a run that long is not a benchmark).
const MAX_LATENCY_NS: u64 = 3_600_000_000_000;

impl TypeStats {
    fn new() -> TypeStats {
        TypeStats {
            attempts: 0,
            committed: 0,
            aborts: [0; AbortReason::ALL.len()],
            // Two significant digits: 1% resolution, and a few tens of KiB per histogram.
            latency: Histogram::new_with_bounds(1, MAX_LATENCY_NS, 2).expect("valid bounds"),
            round_trips: 0,
            verbs: 0,
            bytes: 0,
            oracle_round_trips: 0,
            fabric_ns: 0,
            rpcs: 0,
            rpc_messages: 0,
            mn_cpu_ns: 0,
            breakdown: Breakdown::default(),
        }
    }

    pub fn add(&mut self, o: &TxnOutcome) {
        self.attempts += 1;
        match o.result {
            Ok(()) => {
                self.committed += 1;
                let lat = o.end_ns.saturating_sub(o.start_ns).clamp(1, MAX_LATENCY_NS);
                self.latency.saturating_record(lat);
                self.round_trips += o.fabric.round_trips;
                self.verbs += o.fabric.verbs_total();
                self.bytes += o.fabric.bytes();
                self.oracle_round_trips += o.oracle_round_trips;
                self.fabric_ns += o.fabric.fabric_ns;
                self.rpcs += o.fabric.verb(dtxn_fabric::OpKind::Rpc);
                self.rpc_messages += o.fabric.rpc_messages;
                self.mn_cpu_ns += o.fabric.mn_cpu_ns;
            }
            Err(a) => {
                let i = AbortReason::ALL
                    .iter()
                    .position(|&r| r == a.reason)
                    .unwrap_or(AbortReason::ALL.len() - 1);
                self.aborts[i] += 1;
            }
        }
    }

    pub fn merge(&mut self, o: &TypeStats) {
        self.attempts += o.attempts;
        self.committed += o.committed;
        for (a, b) in self.aborts.iter_mut().zip(o.aborts) {
            *a += b;
        }
        // Same bounds on both sides: cannot fail.
        let _ = self.latency.add(&o.latency);
        self.round_trips += o.round_trips;
        self.verbs += o.verbs;
        self.bytes += o.bytes;
        self.oracle_round_trips += o.oracle_round_trips;
        self.fabric_ns += o.fabric_ns;
        self.rpcs += o.rpcs;
        self.rpc_messages += o.rpc_messages;
        self.mn_cpu_ns += o.mn_cpu_ns;
        self.breakdown.merge(&o.breakdown);
    }
}

/// What coordinators measured: per type, and the measured window.
#[derive(Debug, Clone)]
pub struct Collector {
    pub types: Vec<TypeStats>,
    /// Earliest end of a warm-up and latest end of a measured attempt (fabric clock, ns).
    pub window_start: u64,
    pub window_end: u64,
}

impl Collector {
    pub fn new(types: usize) -> Collector {
        Collector {
            types: (0..types).map(|_| TypeStats::new()).collect(),
            window_start: u64::MAX,
            window_end: 0,
        }
    }

    pub fn merge(&mut self, o: &Collector) {
        for (a, b) in self.types.iter_mut().zip(&o.types) {
            a.merge(b);
        }
        self.window_start = self.window_start.min(o.window_start);
        self.window_end = self.window_end.max(o.window_end);
    }

    pub fn window_ns(&self) -> u64 {
        self.window_end.saturating_sub(self.window_start)
    }
}

/// Writes every transaction's history to one file shared by the coordinators, but for those
/// that ended before `from_ns` (the warm-up), and keeps the whole history in memory too with
/// `--faults` (the run's own check reads it).
struct FileRecorder {
    out: Option<Arc<Mutex<HistoryWriter<File>>>>,
    from_ns: u64,
    kept: Option<Arc<Mutex<Vec<dtxn_check::Txn>>>>,
    failed: Arc<AtomicBool>,
}

impl Recorder for FileRecorder {
    fn record(&mut self, txn: &dtxn_check::Txn) {
        if let Some(out) = self.out.as_ref().filter(|_| txn.end >= self.from_ns) {
            let mut w = match out.lock() {
                Ok(w) => w,
                Err(p) => p.into_inner(),
            };
            if w.write(txn).is_err() {
                self.failed.store(true, Ordering::Relaxed);
            }
        }
        if let Some(kept) = &self.kept {
            match kept.lock() {
                Ok(mut k) => k.push(txn.clone()),
                Err(p) => p.into_inner().push(txn.clone()),
            }
        }
    }
}

thread_local! {
    /// When the coordinators of this thread may next probe failed memory nodes for a rejoin
    /// (their endpoints' clock; [`Shared::rejoin_probe_every_ns`]): they share the thread's
    /// queue pairs, and a probe blocks them all.
    static NEXT_REJOIN_PROBE: Rc<Cell<u64>> = Rc::new(Cell::new(0));
}

/// What every coordinator shares (read-only, or atomics).
pub struct Shared {
    pub stop: Stop,
    pub seed: u64,
    pub verify: bool,
    /// `--fabric-time`: every endpoint times its batches' execution.
    pub fabric_time: bool,
    /// `--breakdown`: every coordinator times its transactions' phases.
    pub breakdown: bool,
    /// `--retry`: an aborted transaction is run again, the same one, until it commits.
    pub retry: bool,
    /// `--retry-backoff` (ns): the cap of the randomized exponential backoff before a retry.
    pub retry_backoff_ns: u64,
    /// `--rpc-pack-limit` (sim).
    pub rpc_pack_limit: Option<u32>,
    pub coordinators: u32,
    pub progress: ProgressBar,
    record: Option<Arc<Mutex<HistoryWriter<File>>>>,
    /// The history file leaves out the transactions that ended before this (fabric clock).
    record_from_ns: u64,
    /// `--faults`: the history, kept in memory for the run's own check.
    kept: Option<Arc<Mutex<Vec<dtxn_check::Txn>>>>,
    record_failed: Arc<AtomicBool>,
    /// FORD-LV: the version cache every coordinator of the (one) compute node shares.
    pub vcache: Option<Arc<Vcache>>,
    /// `--warm-caches`: every loaded record's address, behind each coordinator's cache.
    pub warm: Option<Arc<dtxn_store::WarmAddrs>>,
    /// Motor with `motor.start_clock_ns`: one start clock per compute node.
    pub start_clocks: Vec<Arc<StartClock>>,
    /// Motor with `motor.oracle=local`: the process's own timestamp counter.
    pub local_oracle: Option<Arc<LocalOracle>>,
    /// Scythe with `scythe.batched_tso`: one TSO group per compute node.
    pub tso_groups: Vec<Arc<dtxn_txn::TsoGroup>>,
    /// `--faults`: every coordinator holds a lease on these terms and serves recovery.
    pub lease: Option<LeaseConfig>,
    /// `--faults control=K`: the pool's control chain has `K` members (else 1).
    pub control_replicas: u8,
    /// What the control chain counted, over the coordinators that finished.
    control: Mutex<dtxn_txn::control::Counts>,
    /// What the coordinators' recovery service did.
    recoveries: Mutex<Vec<RecoveryEvent>>,
    /// Every coordinator's view changes (`--faults memory=N`), as they became active.
    views: Mutex<Vec<ViewEvent>>,
    /// `--faults rejoin=`: failed memory nodes come back blank and are re-replicated.
    pub rejoin: bool,
    /// Real backends: the coordinators of a thread probe failed memory nodes for a rejoin at
    /// most once per this many ns between them (a probe is a blocking bootstrap); 0 (sim):
    /// at every scan.
    pub rejoin_probe_every_ns: u64,
    /// The copies to rejoining memory nodes that completed.
    joins: Mutex<Vec<JoinEvent>>,
    /// `--progress-lines`: a line on stderr per 100 attempts of this process.
    pub progress_lines: bool,
    /// `--wait-memnodes`: a coordinator that finds a memory node down stops (fenced).
    pub fence_on_node_down: bool,
    attempts: AtomicU64,
}

/// What one run produced.
pub struct RunOutput<T> {
    pub collector: Collector,
    pub tallies: Vec<T>,
    pub virtual_time: bool,
    /// Wall time of the run itself (loading excluded).
    pub wall_ns: u64,
    /// Attempts of all coordinators, warm-up included (what the simulator computed).
    pub attempts_all: u64,
    /// `sim`: the hash of every executed op (same seed and configuration, same hash).
    pub trace_hash: Option<u64>,
    /// `sim` with faults: the coordinators whose compute node crashed (their tallies, up to
    /// the crash, are in `tallies` all the same).
    pub crashed: Vec<u32>,
    /// With leases: the coordinators that lost theirs and stopped (fenced), like crashed ones.
    pub fenced: Vec<u32>,
    /// Per coordinator, the id of the transaction it stopped in, when fenced: the only one
    /// whose staged changes a roll forward by recovery may add to its tally.
    pub in_flight: Vec<Option<u64>>,
    /// The longest flight of an op in the run (what a lease's guard must exceed): on `sim`
    /// the simulator's; elsewhere, with leases, the endpoints' measure (from the lease
    /// gate's clock read to the observed completion).
    pub max_flight_ns: u64,
    /// `sim`: per memory node, the share of the run (warm-up included) its NIC was busy.
    pub mn_nic_busy: Vec<f64>,
}

/// What a coordinator hands back.
struct CoordOut<T> {
    /// `shm`: its tally (on sim, tallies live outside the coordinators, to outlive a crash).
    tally: Option<T>,
    attempts_all: u64,
    /// `shm`: its own collector.
    collector: Option<Collector>,
    /// It lost its lease and stopped: its transaction in flight is recovery's.
    fenced: bool,
    /// Stopped: the id of its transaction in flight ([`CoordEnd::in_flight`]).
    in_flight: Option<u64>,
    /// Its endpoint's longest measured flight (with a lease).
    max_flight_ns: u64,
}

/// Mixed into the seed of [`Backoff`]'s generator.
const BACKOFF_SEED: u64 = 0xb0ff_b0ff;

/// `--retry`'s randomized exponential backoff: before the n-th retry of a transaction, a wait
/// drawn uniformly below `min(2^n us, cap)`. Retrying at once, hot transactions retried by
/// many coordinators meet each other's locks for ever: SmallBank on 50 accounts (90% of its
/// transactions on 2 of them) committed 150 transactions/s under NO_WAIT on sim, 139,600 with
/// the default cap of 100 us.
struct Backoff {
    cap_ns: u64,
    retries: u32,
    rng: WlRng,
}

impl Backoff {
    fn new(cap_ns: u64, seed: u64) -> Backoff {
        Backoff {
            cap_ns,
            retries: 0,
            rng: WlRng::seed_from_u64(seed),
        }
    }

    /// The wait before the next retry (ns; 0 with no cap).
    fn next_wait(&mut self) -> u64 {
        self.retries = self.retries.saturating_add(1);
        let top = self.cap_ns.min(1_000u64 << self.retries.min(40));
        if top == 0 {
            return 0;
        }
        rand::Rng::random_range(&mut self.rng, 0..top)
    }

    /// The transaction committed, or a new one begins: the next retry waits little again.
    fn reset(&mut self) {
        self.retries = 0;
    }
}

/// `--retry`: the aborts a client retries (conflicts, which a retry may not meet again); not
/// the application's rollbacks, a full table, or a failure.
fn retried(o: &TxnOutcome) -> bool {
    matches!(
        o.result,
        Err(a) if matches!(
            a.reason,
            AbortReason::LockConflict
                | AbortReason::Validation
                | AbortReason::Invisible
                | AbortReason::NewerVersion
                | AbortReason::VersionGone
        )
    )
}

/// Attempts between two progress-bar updates (a shared atomic: not every transaction).
const PROGRESS_EVERY: u64 = 256;

// The tally's borrow is held across awaits on purpose: see the comment where it is taken.

/// Learns the pool. With failover (the run holds leases), a memory node found down that the
/// view still holds live is failed over here, as a coordinator's probe would (a CAS of the view
/// word), and the pool learnt again in the new view: a node that dies before a coordinator
/// starts is not an error then. The recovery service adopts that view (waits until it is
/// active) before the first transaction.
///
/// With a control chain of `control > 1` members, the committed view is read at its tail
/// ([`PoolMap::control_view`]) and changed down the chain; node 0 may then be the node down.
async fn bootstrap(ep: &mut Endpoint, failover: bool, control: u8) -> Result<PoolMap, StoreError> {
    let mut tries = 0;
    loop {
        match PoolMap::bootstrap(ep).await {
            Err(StoreError::Fabric(FabricError::NodeDown(n)))
                if failover && (n != 0 || control > 1) && tries < 8 =>
            {
                tries += 1;
                let (view, copies) = match control {
                    1 => {
                        let w = ep.read(0, dtxn_store::layout::VIEW_OFF, 8);
                        ep.post().await?;
                        (View::parse(ep.word(w, 0)), NodeSet::single(0))
                    }
                    _ => PoolMap::control_view(ep).await?,
                };
                let next = view
                    .without(&[n])
                    .filter(|v| !v.control_chain(control).is_empty());
                if let Some(next) = next {
                    // If another coordinator changed it first, its view is the one learnt.
                    membership::change_view(ep, copies, view, next).await?;
                }
            }
            r => return r,
        }
    }
}
#[allow(clippy::await_holding_refcell_ref)]
async fn coordinator<W: Workload>(
    mut ep: Endpoint,
    w: &W,
    cfg: Rc<TxnConfig>,
    sh: &Arc<Shared>,
    sink: Rc<RefCell<Collector>>,
    tally: Rc<RefCell<W::Tally>>,
) -> Result<CoordEnd, String> {
    let index = ep.id().index;
    ep.time_fabric(sh.fabric_time);
    ep.fence_on_node_down(sh.fence_on_node_down);
    ep.set_rpc_pack_limit(sh.rpc_pack_limit);
    let map = Rc::new(
        bootstrap(&mut ep, sh.lease.is_some(), sh.control_replicas)
            .await
            .map_err(|e| format!("coordinator {index}: bootstrap: {e}"))?,
    );
    let mut service = match sh.lease {
        Some(l) => {
            membership::join(&mut ep, l, map.control_set())
                .await
                .map_err(|e| format!("coordinator {index}: joining: {e}"))?;
            let sink = sh.clone();
            let report = move |e: &RecoveryEvent| {
                if sink.progress_lines {
                    eprintln!(
                        "recovered: coordinator {} by {} ({}, {} locks released)",
                        e.coordinator,
                        e.by,
                        e.outcome.name(),
                        e.locks_released
                    );
                }
                push(&sink.recoveries, e.clone());
            };
            let views = sh.clone();
            let view = move |e: &ViewEvent| push(&views.views, e.clone());
            let joins = sh.clone();
            let join = move |e: &JoinEvent| push(&joins.joins, e.clone());
            let service = Service::new(cfg.protocol, l, sh.coordinators, map.clone())
                .with_sink(Box::new(report))
                .with_view_sink(Box::new(view))
                .with_rejoin(sh.rejoin)
                .with_join_sink(Box::new(join));
            Some(if sh.rejoin_probe_every_ns > 0 {
                service
                    .with_probe_limit(NEXT_REJOIN_PROBE.with(Rc::clone), sh.rejoin_probe_every_ns)
            } else {
                service
            })
        }
        None => None,
    };
    let mut c = Coordinator::new(ep, map.clone(), cfg);
    c.set_breakdown(sh.breakdown);
    c.set_failover(service.is_some() && !sh.fence_on_node_down);
    if let Some(v) = &sh.vcache {
        c.set_vcache(v.clone());
    }
    if let Some(w) = &sh.warm {
        c.set_warm_addresses(w.clone());
    }
    if let Some(clock) = sh.start_clocks.get(c.endpoint().id().compute_node as usize) {
        c.set_start_clock(clock.clone());
    }
    if let Some(g) = sh.tso_groups.get(c.endpoint().id().compute_node as usize) {
        c.set_tso_group(g.clone());
    }
    if let Some(o) = &sh.local_oracle {
        if !c.set_local_oracle(o.clone()) {
            return Err(format!(
                "coordinator {index}: the local oracle does not track it"
            ));
        }
    }
    if sh.record.is_some() || sh.kept.is_some() {
        c.set_recorder(Box::new(FileRecorder {
            out: sh.record.clone(),
            from_ns: sh.record_from_ns,
            kept: sh.kept.clone(),
            failed: sh.record_failed.clone(),
        }));
    }
    let mut rng = WlRng::seed_from_u64(mix(sh.seed, u64::from(index)));
    // Held for the coordinator's whole life: the cell is its alone until the run is over, and
    // if its compute node crashes, dropping the coordinator releases it with what it
    // committed so far.
    let mut tally = tally.borrow_mut();
    let t0 = c.endpoint().now_ns();
    let warm_end = t0 + sh.stop.warmup_ns();
    {
        let mut s = sink.borrow_mut();
        s.window_start = s.window_start.min(warm_end);
    }
    let (end, quota) = match sh.stop {
        Stop::Duration { measure_ns, .. } => (warm_end + measure_ns, u64::MAX),
        Stop::Txns { txns, .. } => {
            let n = u64::from(sh.coordinators);
            let i = u64::from(index);
            (u64::MAX, txns / n + u64::from(i < txns % n))
        }
    };
    let mut measured = 0u64;
    let mut all = 0u64;
    let mut since_progress = 0u64;
    let mut fenced = false;
    // A fabric error of the recovery service other than fencing ends the run.
    let serve = |r: Result<(), dtxn_fabric::FabricError>| match r {
        Ok(()) => Ok(false),
        Err(dtxn_fabric::FabricError::LeaseExpired) => Ok(true),
        Err(e) => Err(format!("coordinator {index}: recovery service: {e}")),
    };
    // `--retry`: the generator as the transaction being retried drew from it (drawn again
    // from there, it is the same transaction), and when its first attempt started.
    let mut retrying: Option<(WlRng, u64)> = None;
    // The backoff's own generator: drawing from the workload's would change the retry.
    let mut backoff = Backoff::new(
        sh.retry_backoff_ns,
        mix(sh.seed ^ BACKOFF_SEED, index.into()),
    );
    loop {
        let now = c.endpoint().now_ns();
        if now >= end || measured >= quota {
            break;
        }
        if let Some(s) = &mut service {
            match s.tick(c.endpoint()).await {
                // A new view (memory nodes failed): its map from the next transaction on.
                Ok(Some(map)) => c.set_map(map),
                r => {
                    if serve(r.map(|_| ()))? {
                        fenced = true;
                        break;
                    }
                }
            }
        }
        w.forget_in_flight(&mut tally);
        let drawn_from = sh.retry.then(|| match &retrying {
            Some((r, _)) => r.clone(),
            None => rng.clone(),
        });
        if let Some((r, _)) = &retrying {
            rng = r.clone();
            c.retry_next();
            // Never past the run's end (the retry would stretch the measured window), nor
            // so long that the lease runs out unrenewed (renewals ride on posts and the
            // service's ticks, between attempts): a scan period at most.
            let now = c.endpoint().now_ns();
            let lease = c
                .endpoint()
                .lease()
                .map_or(u64::MAX, |(l, _)| l.lease_ns / 4);
            let wait = backoff.next_wait().min(lease);
            if wait > 0 {
                if now.saturating_add(wait) >= end {
                    break;
                }
                c.endpoint().sleep(wait).await;
            }
        } else {
            backoff.reset();
        }
        let (ty, _) = w.run_one(&mut c, &mut rng, &mut tally).await;
        all += 1;
        since_progress += 1;
        if sh.progress_lines {
            let n = sh.attempts.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_multiple_of(100) {
                eprintln!("progress: {n} attempts");
            }
        }
        if c.endpoint().fenced() {
            // Its transaction in flight stays staged in the tally: recovery decides it.
            fenced = true;
            break;
        }
        if let Some(mut o) = c.last_outcome() {
            // A memory node failed it: the recovery service probes them at its next tick.
            if let (Some(s), Err(a)) = (&mut service, o.result) {
                if a.reason == AbortReason::ReplicaFailure {
                    s.suspect();
                }
            }
            let first = retrying.take().map_or(o.start_ns, |(_, t)| t);
            if let Some(r) = drawn_from.filter(|_| retried(&o)) {
                retrying = Some((r, first));
            }
            // An attempt is measured by when it started: a retried transaction begun in the
            // warm-up counts from its first attempt after it (counted by when it began, one
            // that never commits would never fill the quota, and the run would never end).
            let measure = o.start_ns >= warm_end;
            // A committed transaction's latency runs from its first attempt (with --retry).
            o.start_ns = first;
            if measure {
                measured += 1;
                let mut s = sink.borrow_mut();
                s.types[ty].add(&o);
                if sh.breakdown && o.result.is_ok() {
                    s.types[ty].breakdown.merge(c.last_breakdown());
                }
                s.window_end = s.window_end.max(o.end_ns);
            }
        }
        if since_progress >= PROGRESS_EVERY {
            since_progress = 0;
            match sh.stop {
                Stop::Duration { .. } if index == 0 => {
                    let now = c.endpoint().now_ns();
                    sh.progress.set_position((now - t0) / 1_000_000);
                }
                Stop::Txns { .. } if measured > 0 => sh.progress.inc(PROGRESS_EVERY),
                _ => {}
            }
        }
    }
    if !fenced {
        c.retire().await;
    }
    if let Some(s) = &mut service {
        if !fenced {
            // The liveness phase: this coordinator is done; it serves recovery until every
            // other one is done or recovered.
            fenced = serve(s.drain(c.endpoint()).await)?;
        }
        if let Ok(mut counts) = sh.control.lock() {
            counts.add(&s.control);
        }
    }
    Ok(CoordEnd {
        all,
        // The transaction it stopped in (or the last it finished, if it stopped between two).
        in_flight: if fenced { c.last_begun() } else { None },
        fenced,
        max_flight_ns: c.endpoint().max_flight_ns(),
    })
}

/// How a coordinator's run ended.
struct CoordEnd {
    /// Attempts, warm-up included.
    all: u64,
    /// It lost its lease (or a memory node) and stopped: its transaction in flight is
    /// recovery's.
    fenced: bool,
    /// Stopped: the id of the transaction begun last, whose changes its tally holds staged.
    in_flight: Option<u64>,
    max_flight_ns: u64,
}

/// Appends to a list the coordinators share (a coordinator that panicked holding it left
/// nothing half-written in a `Vec` push: its contents stand).
fn push<T>(list: &Mutex<Vec<T>>, x: T) {
    list.lock().unwrap_or_else(|p| p.into_inner()).push(x);
}

/// Takes a shared list's contents (see [`push`]).
fn take<T>(list: &Mutex<Vec<T>>) -> Vec<T> {
    std::mem::take(&mut *list.lock().unwrap_or_else(|p| p.into_inner()))
}

impl Shared {
    /// `record`: the history file, and the time (fabric clock) from which on it records: the
    /// transactions that ended before (the warm-up) are left out, and its header says so.
    pub fn new(
        stop: Stop,
        seed: u64,
        verify: bool,
        coordinators: u32,
        progress: ProgressBar,
        record: Option<(&std::path::Path, Option<u64>)>,
    ) -> anyhow::Result<Shared> {
        let record_from_ns = record.and_then(|(_, from)| from).unwrap_or(0);
        let record = match record {
            Some((p, from)) => {
                let w = match from {
                    Some(ns) => HistoryWriter::create_from(p, ns),
                    None => HistoryWriter::create(p),
                };
                Some(Arc::new(Mutex::new(w.map_err(|e| {
                    anyhow::anyhow!("cannot write the history to {}: {e}", p.display())
                })?)))
            }
            None => None,
        };
        Ok(Shared {
            stop,
            seed,
            verify,
            fabric_time: false,
            breakdown: false,
            retry: false,
            retry_backoff_ns: 0,
            rpc_pack_limit: None,
            coordinators,
            progress,
            record,
            record_from_ns,
            kept: None,
            record_failed: Arc::default(),
            vcache: None,
            warm: None,
            start_clocks: Vec::new(),
            tso_groups: Vec::new(),
            local_oracle: None,
            lease: None,
            control_replicas: 1,
            control: Mutex::default(),
            recoveries: Mutex::default(),
            views: Mutex::default(),
            rejoin: false,
            rejoin_probe_every_ns: 0,
            joins: Mutex::default(),
            progress_lines: false,
            fence_on_node_down: false,
            attempts: AtomicU64::new(0),
        })
    }

    /// What the recovery service did, in the order the coordinators finished.
    pub fn take_views(&self) -> Vec<ViewEvent> {
        take(&self.views)
    }

    /// The copies to rejoining memory nodes that completed.
    pub fn take_joins(&self) -> Vec<JoinEvent> {
        take(&self.joins)
    }

    /// What the control chain counted, over the coordinators that finished (crashed ones'
    /// counts are lost with them).
    pub fn control_counts(&self) -> dtxn_txn::control::Counts {
        self.control
            .lock()
            .map_or_else(|_| Default::default(), |c| *c)
    }

    pub fn take_recoveries(&self) -> Vec<RecoveryEvent> {
        take(&self.recoveries)
    }

    /// `--faults`: keep the history in memory too.
    pub fn keep_history(&mut self) {
        self.kept = Some(Arc::default());
    }

    /// The history kept in memory (`--faults`), so far.
    pub fn kept_history(&self) -> Vec<dtxn_check::Txn> {
        self.kept.as_ref().map_or(Vec::new(), |k| match k.lock() {
            Ok(k) => k.clone(),
            Err(p) => p.into_inner().clone(),
        })
    }

    /// Records a transaction no coordinator did: one that recovery rolled forward.
    pub fn record_recovered(&self, txn: &dtxn_check::Txn) {
        FileRecorder {
            out: self.record.clone(),
            from_ns: 0,
            kept: self.kept.clone(),
            failed: self.record_failed.clone(),
        }
        .record(txn);
    }

    /// Flushes the history file, if any.
    pub fn finish_record(self) -> anyhow::Result<()> {
        if let Some(out) = self.record {
            let failed = self.record_failed.load(Ordering::Relaxed);
            let w = Arc::try_unwrap(out)
                .map_err(|_| anyhow::anyhow!("the history is still in use"))?
                .into_inner()
                .map_err(|_| anyhow::anyhow!("a coordinator panicked while recording"))?;
            if failed || w.finish().is_err() {
                anyhow::bail!("writing the history failed (disk full?)");
            }
        }
        Ok(())
    }
}

/// Runs `w` on `pool` (formatted and loaded) with `topo`'s coordinators.
pub fn run<W: Workload>(
    pool: &mut Pool,
    w: &Arc<W>,
    topo: Topology,
    cfg: &TxnConfig,
    sh: &Arc<Shared>,
) -> anyhow::Result<RunOutput<W::Tally>> {
    let types = w.txn_types().len();
    let started = Instant::now();
    let mut crashed = Vec::new();
    let mut max_flight_ns = 0;
    let mut mn_nic_busy = Vec::new();
    let (outs, virtual_time, trace_hash) = match pool {
        Pool::Sim(sim) => {
            // One OS thread: coordinators share the collector and the configuration.
            let sink = Rc::new(RefCell::new(Collector::new(types)));
            let cfg = Rc::new(cfg.clone());
            let faults = !sim.config().faults.compute_crashes.is_empty();
            let cells: Vec<Rc<RefCell<W::Tally>>> = (0..topo.coordinators())
                .map(|_| Rc::new(RefCell::new(w.tally(sh.verify))))
                .collect();
            let r = sim.run(topo, None, |ep| {
                let (w, sh, cfg, sink) = (w.clone(), sh.clone(), cfg.clone(), sink.clone());
                let tally = cells[ep.id().index as usize].clone();
                async move {
                    coordinator(ep, &*w, cfg, &sh, sink, tally)
                        .await
                        .map(|e| CoordOut {
                            tally: None,
                            attempts_all: e.all,
                            collector: None,
                            fenced: e.fenced,
                            in_flight: e.in_flight,
                            max_flight_ns: 0,
                        })
                }
            })?;
            let mut outputs = r.outputs;
            if faults {
                // A coordinator whose compute node crashed has no output: what it committed
                // is in its tally cell, what it was committing is recovery's to settle.
                for (i, o) in outputs.iter_mut().enumerate() {
                    if o.is_none() {
                        crashed.push(i as u32);
                        *o = Some(Ok(CoordOut {
                            tally: None,
                            attempts_all: 0,
                            collector: None,
                            fenced: false,
                            in_flight: None,
                            max_flight_ns: 0,
                        }));
                    }
                }
            }
            let mut outs = collect(outputs)?;
            for (o, cell) in outs.iter_mut().zip(cells) {
                o.tally = Some(
                    Rc::try_unwrap(cell)
                        .map_err(|_| anyhow::anyhow!("a coordinator outlived the run"))?
                        .into_inner(),
                );
            }
            if let Some(first) = outs.first_mut() {
                first.collector = Some(sink.borrow().clone());
            }
            max_flight_ns = r.max_flight_ns;
            mn_nic_busy = r
                .mn_nic_busy_ns
                .iter()
                .map(|&b| b as f64 / r.elapsed_ns.max(1) as f64)
                .collect();
            (outs, true, Some(r.trace_hash))
        }
        // shm (and ucx): real threads, so each coordinator has its own collector.
        other => {
            let r = other.run(topo, None, |ep| {
                let (w, sh, cfg) = (w.clone(), sh.clone(), Rc::new(cfg.clone()));
                async move {
                    let sink = Rc::new(RefCell::new(Collector::new(w.txn_types().len())));
                    let tally = Rc::new(RefCell::new(w.tally(sh.verify)));
                    let out = coordinator(ep, &*w, cfg, &sh, sink.clone(), tally.clone()).await;
                    let collector = sink.borrow().clone();
                    let tally = Rc::try_unwrap(tally)
                        .map_err(|_| "a coordinator's tally outlived it".to_string())?
                        .into_inner();
                    out.map(|e| CoordOut {
                        tally: Some(tally),
                        attempts_all: e.all,
                        collector: Some(collector),
                        fenced: e.fenced,
                        in_flight: e.in_flight,
                        max_flight_ns: e.max_flight_ns,
                    })
                }
            })?;
            let virtual_time = r.virtual_time;
            (collect(r.outputs)?, virtual_time, None)
        }
    };
    let wall_ns = started.elapsed().as_nanos() as u64;
    let mut collector = Collector::new(types);
    let mut tallies = Vec::with_capacity(outs.len());
    let mut attempts_all = 0;
    let mut fenced = Vec::new();
    let mut in_flight = Vec::with_capacity(outs.len());
    for (i, o) in outs.into_iter().enumerate() {
        if o.fenced {
            fenced.push(i as u32);
        }
        in_flight.push(o.in_flight);
        max_flight_ns = max_flight_ns.max(o.max_flight_ns);
        if let Some(c) = &o.collector {
            collector.merge(c);
        }
        attempts_all += o.attempts_all;
        tallies.push(
            o.tally
                .ok_or_else(|| anyhow::anyhow!("a coordinator lost its tally"))?,
        );
    }
    Ok(RunOutput {
        collector,
        tallies,
        virtual_time,
        wall_ns,
        attempts_all,
        trace_hash,
        crashed,
        fenced,
        in_flight,
        max_flight_ns,
        mn_nic_busy,
    })
}

fn collect<T>(outputs: Vec<Option<Result<T, String>>>) -> anyhow::Result<Vec<T>> {
    let mut v = Vec::with_capacity(outputs.len());
    for (i, o) in outputs.into_iter().enumerate() {
        match o {
            Some(Ok(x)) => v.push(x),
            Some(Err(e)) => anyhow::bail!("{e}"),
            None => anyhow::bail!("coordinator {i} did not finish (its compute node crashed)"),
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::Backoff;

    #[test]
    fn a_retry_waits_below_a_doubling_bound_up_to_the_cap() {
        let mut b = Backoff::new(100_000, 7);
        let mut most = [0u64; 12];
        for _ in 0..2_000 {
            b.reset();
            for m in &mut most {
                *m = (*m).max(b.next_wait());
            }
        }
        // Below 2^n us before the n-th retry, then below the cap; and near each bound (2,000
        // draws each), so the bound grows.
        for (n, &m) in most.iter().enumerate() {
            let bound = 100_000u64.min(1_000 << (n + 1));
            assert!(
                m < bound && m >= bound * 9 / 10,
                "retry {}: {m} of {bound}",
                n + 1
            );
        }
        // Reset: the next retry's bound is 2 us again.
        b.reset();
        assert!(b.next_wait() < 2_000);
    }

    #[test]
    fn no_cap_no_wait_and_the_same_seed_the_same_waits() {
        let mut b = Backoff::new(0, 7);
        assert!((0..50).all(|_| b.next_wait() == 0));
        let waits = |seed| {
            let mut b = Backoff::new(100_000, seed);
            (0..20).map(|_| b.next_wait()).collect::<Vec<_>>()
        };
        assert_eq!(waits(3), waits(3));
        assert_ne!(waits(3), waits(4));
    }
}
