//! What `dtxn bench` reports: the configuration it ran with and what it measured, as a
//! terminal table, JSON, or CSV rows.

use super::args::BenchArgs;
use super::engine::{Collector, RunOutput, Stop, TypeStats};
use crate::backend::Backend;
use dtxn_fabric::Topology;
use dtxn_store::Plan;
use dtxn_txn::{AbortReason, Phase, TxnConfig};
use dtxn_workloads::{kv, skew, smallbank, tatp, tpcc, Workload};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

/// A workload's options, for the report.
pub trait Described {
    fn options_json(&self) -> serde_json::Value;
}

macro_rules! described {
    ($($t:ty),*) => {$(
        impl Described for $t {
            fn options_json(&self) -> serde_json::Value {
                serde_json::to_value(self.options()).unwrap_or(serde_json::Value::Null)
            }
        }
    )*};
}
described!(
    smallbank::SmallBank,
    kv::Kv,
    tatp::Tatp,
    tpcc::Tpcc,
    skew::Skew
);

#[derive(Debug, Clone, Serialize)]
pub struct ConfigReport {
    pub workload: String,
    pub workload_options: serde_json::Value,
    pub protocol: String,
    /// The protocol's switches as run.
    pub txn: TxnConfig,
    /// FORD-LV: a version cache shared by the coordinators.
    pub localized_validation: bool,
    pub backend: Backend,
    /// The backend in words (profile, adversary, seed; or the shm region).
    pub backend_detail: String,
    pub seed: u64,
    pub memory_nodes: u16,
    pub replicas: usize,
    /// Region size of every memory node.
    pub node_bytes: u64,
    pub compute_nodes: u32,
    pub threads: u32,
    pub coroutines: u32,
    pub coordinators: u32,
    pub duration_s: Option<f64>,
    pub txns: Option<u64>,
    pub warmup_s: f64,
    pub verify: bool,
    /// `--record FILE`: where the history went.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<std::path::PathBuf>,
    /// `--fabric-time`: verb execution was timed (the reports' `fabric_us`).
    pub fabric_time: bool,
    /// `--breakdown`: phases timed.
    pub breakdown: bool,
    /// `--retry`: an aborted transaction run again until it commits.
    pub retry: bool,
    /// With `--retry`, `--retry-backoff`: the cap of the random wait before a retry (us).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_backoff_us: Option<f64>,
}

impl ConfigReport {
    pub fn new<W: Workload + Described>(
        a: &BenchArgs,
        w: &W,
        cfg: &TxnConfig,
        topo: Topology,
        plan: &Plan,
        stop: Stop,
    ) -> ConfigReport {
        let (duration_s, txns, warmup_ns) = match stop {
            Stop::Duration {
                warmup_ns,
                measure_ns,
            } => (Some(measure_ns as f64 / 1e9), None, warmup_ns),
            Stop::Txns { warmup_ns, txns } => (None, Some(txns), warmup_ns),
        };
        ConfigReport {
            workload: w.name().to_string(),
            workload_options: w.options_json(),
            protocol: cfg.protocol.name().to_string(),
            txn: cfg.clone(),
            localized_validation: a.localized_validation,
            backend: a.kind(),
            backend_detail: a.backend.describe(),
            seed: a.backend.seed,
            memory_nodes: a.memory_nodes,
            replicas: a.replicas,
            node_bytes: plan.region_bytes,
            compute_nodes: topo.compute_nodes,
            threads: topo.threads,
            coroutines: topo.coroutines,
            coordinators: topo.coordinators(),
            duration_s,
            txns,
            warmup_s: warmup_ns as f64 / 1e9,
            verify: a.verify,
            record: a.record.clone(),
            fabric_time: a.fabric_time,
            breakdown: a.breakdown,
            retry: a.retry,
            retry_backoff_us: a
                .retry
                .then(|| a.retry_backoff.unwrap_or(super::RETRY_BACKOFF_NS) as f64 / 1e3),
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Default, PartialEq)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub mean: f64,
    pub max: f64,
}

/// One transaction type (or `all`).
#[derive(Debug, Clone, Serialize)]
pub struct TypeReport {
    pub name: String,
    pub attempts: u64,
    pub committed: u64,
    pub committed_per_s: f64,
    pub attempts_per_s: f64,
    pub abort_rate: f64,
    /// Aborts by reason (only reasons that occurred).
    pub aborts: BTreeMap<&'static str, u64>,
    /// Of committed attempts, in microseconds.
    pub latency_us: Latency,
    /// Means over committed attempts: critical-path round trips, verbs, payload bytes.
    pub round_trips: f64,
    pub verbs: f64,
    pub bytes: f64,
    /// Of `round_trips`, the mean spent on the timestamp oracle (multi-version protocols;
    /// the papers leave timestamps out of their round-trip counts).
    pub oracle_round_trips: f64,
    /// With `--fabric-time` (shm): the mean wall time a committed transaction spent executing
    /// its verbs, in microseconds; the rest of its latency is the protocol's and the
    /// workload's CPU work (and, with coroutines, waiting for the others).
    pub fabric_us: Option<f64>,
    /// Means per committed transaction: RPC requests (stages run as RPCs), the messages they
    /// were packed into (one per memory node per batch), and the memory nodes' CPU time
    /// serving them in microseconds (virtual on sim, measured on shm and ucx).
    pub rpcs: f64,
    pub rpc_messages: f64,
    pub mn_cpu_us: f64,
    /// `--breakdown`: microseconds per committed transaction in each phase, and `other`: the
    /// rest of its latency (the application's logic, waiting for the coroutine's turn).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breakdown_us: Option<BTreeMap<&'static str, f64>>,
}

impl TypeReport {
    fn new(name: &str, s: &TypeStats, secs: f64, timed: bool, phases: bool) -> TypeReport {
        let per_s = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        let mean = |n: u64| {
            if s.committed > 0 {
                n as f64 / s.committed as f64
            } else {
                0.0
            }
        };
        let h = &s.latency;
        let us = |ns: u64| ns as f64 / 1e3;
        let latency_us = if h.is_empty() {
            Latency::default()
        } else {
            Latency {
                p50: us(h.value_at_quantile(0.5)),
                p99: us(h.value_at_quantile(0.99)),
                p999: us(h.value_at_quantile(0.999)),
                mean: h.mean() / 1e3,
                max: us(h.max()),
            }
        };
        let lat_mean = latency_us.mean;
        TypeReport {
            name: name.to_string(),
            attempts: s.attempts,
            committed: s.committed,
            committed_per_s: per_s(s.committed),
            attempts_per_s: per_s(s.attempts),
            abort_rate: if s.attempts > 0 {
                (s.attempts - s.committed) as f64 / s.attempts as f64
            } else {
                0.0
            },
            aborts: AbortReason::ALL
                .iter()
                .zip(s.aborts)
                .filter(|(_, n)| *n > 0)
                .map(|(r, n)| (r.name(), n))
                .collect(),
            latency_us,
            round_trips: mean(s.round_trips),
            verbs: mean(s.verbs),
            bytes: mean(s.bytes),
            oracle_round_trips: mean(s.oracle_round_trips),
            fabric_us: timed.then(|| mean(s.fabric_ns) / 1e3),
            rpcs: mean(s.rpcs),
            rpc_messages: mean(s.rpc_messages),
            mn_cpu_us: mean(s.mn_cpu_ns) / 1e3,
            breakdown_us: phases.then(|| breakdown_us(s, lat_mean)),
        }
    }
}

/// Microseconds per committed transaction in each phase, and `other` (up to `latency_us`).
fn breakdown_us(s: &TypeStats, latency_us: f64) -> BTreeMap<&'static str, f64> {
    let per = |ns: u64| {
        if s.committed > 0 {
            ns as f64 / s.committed as f64 / 1e3
        } else {
            0.0
        }
    };
    let mut m: BTreeMap<&'static str, f64> = Phase::ALL
        .iter()
        .map(|&p| (p.name(), per(s.breakdown.get(p))))
        .collect();
    let other = latency_us - per(s.breakdown.total());
    m.insert("other", other.max(0.0));
    m
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Verdict {
    pub ok: bool,
    /// The checks that passed, or what failed.
    pub checks: Vec<String>,
}

/// What simulating cost in wall time.
#[derive(Debug, Clone, Serialize)]
pub struct SimCost {
    /// Transactions simulated, warm-up included.
    pub txns: u64,
    pub wall_s: f64,
    pub txns_per_wall_s: f64,
    /// The hash of every op the simulator executed (time, coordinator, node, kind, address,
    /// data): the same seed and configuration give the same hash, so two builds can be
    /// compared run for run.
    pub trace_hash: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub config: ConfigReport,
    /// "virtual" on sim (simulated time), "wall" on shm.
    pub time: &'static str,
    pub measured_s: f64,
    /// Every transaction type together.
    pub all: TypeReport,
    pub per_type: Vec<TypeReport>,
    pub verify: Option<Verdict>,
    pub load_s: f64,
    pub sim: Option<SimCost>,
    /// `sim`: per memory node, the share of the run (virtual time, warm-up included) its NIC
    /// was busy serving ops: how the load spreads over the memory nodes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mn_nic_busy: Vec<f64>,
    /// `--faults`: what crashed, what recovery did, and the check of the history.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults: Option<FaultReport>,
    /// `--leases` (shm, ucx): the terms, the flights measured, what this process recovered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leases: Option<LeaseReport>,
    /// `--wait-memnodes`, when a memory node went down: what stopped and its recovery.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memnode_outage: Option<OutageReport>,
}

/// A memory node went down during a `--wait-memnodes` run (ucx).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct OutageReport {
    /// This process's coordinators that found it down and stopped.
    pub coordinators_stopped: u32,
    /// From the run's end to their recovery's (waiting for the memory nodes included).
    pub recovered_after_s: f64,
    pub rolled_forward: u32,
    pub rolled_back: u32,
    pub locks_released: u64,
}

/// `--leases` on a real host, for this process (wall clock).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LeaseReport {
    pub lease_ns: u64,
    pub guard_ns: u64,
    pub skew_ns: u64,
    /// The longest time from a batch's lease check to its observed completion, over this
    /// process's coordinators: must stay below `guard - skew` (`flights_ok`, else exit 1).
    pub max_flight_ns: u64,
    pub flights_ok: bool,
    /// This process's coordinators that lost their lease and stopped.
    pub fenced: u32,
    /// Coordinators (of any process) this process's recovery service recovered.
    pub coordinators_recovered: u32,
    pub rolled_forward: u32,
    pub rolled_back: u32,
    pub locks_released: u64,
    /// `expired_us` from this process's run start; detection from the expiry.
    pub recoveries: Vec<RecoveryLine>,
    /// The run's only compute process: its coordinators fenced with nobody left to recover
    /// them, recovered after the run.
    pub recovered_after_run: u32,
    /// Memory-node failover: the pool's view after the run, and each view change this
    /// process's coordinators adopted (wall-clock us from this process's run start).
    pub final_view: String,
    pub views: Vec<ViewLine>,
    /// `--leases rejoin=true`: the re-replications this process's coordinators completed
    /// (wall-clock us from this process's run start; when the node came back is not known).
    pub joins: Vec<JoinLine>,
}

/// A replacement memory node re-replicated (virtual us from the run's start).
#[derive(Debug, Clone, Default, Serialize)]
pub struct JoinLine {
    pub nodes: Vec<u16>,
    /// When it came back (blank), by the plan.
    pub back_us: Option<f64>,
    /// When the first coordinator adopted the view where it joins, and when that view was
    /// active for every coordinator (the copy may start).
    pub joining_us: Option<f64>,
    pub joining_active_us: Option<f64>,
    /// The copy: its start, its length, slots copied, passes, and the coordinator that did it.
    pub copy_started_us: f64,
    pub copy_us: f64,
    pub slots: u64,
    pub passes: u32,
    pub by: u32,
    /// When the view that made it a full replica was active for every coordinator.
    pub full_us: Option<f64>,
}

/// What `--faults` injected and what came of it.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FaultReport {
    /// The plan drawn from the seed: (compute node, virtual instant from the start in ns).
    pub planned_crashes: Vec<(u32, u64)>,
    /// The run's length (ns, virtual, with its liveness phase): a fault planned at or after
    /// it never struck (the fault plan ends with the run).
    pub run_ns: u64,
    pub coordinators_crashed: u32,
    pub coordinators_recovered: u32,
    /// Pending transactions recovery rolled forward (of which the coordinator never learnt
    /// of its commit, so that recovery recorded them) and rolled back.
    pub rolled_forward: u32,
    pub rolled_forward_unrecorded: u32,
    pub rolled_back: u32,
    pub locks_released: u64,
    /// The history (with recovery's transactions) checked: its verdict.
    pub history_ok: bool,
    pub history: String,
    /// Coordinators that lost their lease and stopped (fenced), recovered like crashed ones.
    pub fenced: u32,
    /// Recovered by the survivors' recovery service during the run, and by the fallback
    /// after it (coordinators the service could not know of).
    pub recovered_online: u32,
    pub recovered_after_run: u32,
    /// The lease terms, and the longest op flight the run saw (ns, virtual).
    pub lease_ns: u64,
    pub guard_ns: u64,
    pub max_flight_ns: u64,
    /// Per coordinator the service recovered: detection and repair times.
    pub recoveries: Vec<RecoveryLine>,
    /// The pool after the liveness phase: log slices, replicas, op flights against the guard.
    pub pool_checks: Verdict,
    /// After the faults settled, every surviving coordinator that kept trying committed.
    pub liveness: Verdict,
    /// Memory nodes planned to fail for good: (node, virtual instant from the start in ns).
    pub planned_memory_failures: Vec<(u16, u64)>,
    /// The pool's view after the run, and each view change.
    pub final_view: String,
    pub views: Vec<ViewLine>,
    /// Failed memory nodes that came back and were re-replicated (`rejoin=`).
    pub joins: Vec<JoinLine>,
    /// `control=K` with K > 1: what the control chain did (`dtxn_txn::control`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control: Option<ControlLine>,
}

/// The control chain's work over a run, summed over the coordinators that finished.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ControlLine {
    pub members: u8,
    /// Members behind their predecessor that a read carried forward (a write under way, or
    /// one whose writer died half-way down the chain).
    pub helped: u64,
    /// Writes whose head died before they were seen past it while a later write was:
    /// resolved from the committed word.
    pub unknown: u64,
    /// Members dropped, found down, and reads started again.
    pub dropped: u64,
    pub reread: u64,
}

impl FaultReport {
    /// A note for a fault planned at `at_ns` that fell after the run's end.
    fn late(&self, at_ns: u64) -> String {
        if self.run_ns > 0 && at_ns >= self.run_ns {
            format!(
                " (after the run's end at {:.1} us: never struck)",
                self.run_ns as f64 / 1e3
            )
        } else {
            String::new()
        }
    }
}

/// One view change (memory nodes failed), as the coordinators saw it (virtual us from the
/// run's start).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ViewLine {
    pub view: String,
    /// When its newest failed node failed (sim; unknown on a real host, where it dies outside
    /// of the run).
    pub failed_us: Option<f64>,
    /// When the first coordinator adopted it (a survivor's probe found the node down and
    /// changed the view).
    pub changed_us: Option<f64>,
    /// From the failure to the view change (the first coordinator adopting the view: a
    /// survivor's probe found the node down and changed it, and adopted it at once).
    pub detection_us: Option<f64>,
    /// From the view change until the last coordinator saw the view active (every
    /// coordinator agreed, the promoted primaries repaired).
    pub repair_us: Option<f64>,
    pub active_us: f64,
    /// Coordinators that adopted it.
    pub coordinators: u32,
    /// Tables whose backup was promoted (and so repaired).
    pub promoted_tables: u32,
}

/// One coordinator the recovery service recovered (virtual us from the run's start).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RecoveryLine {
    pub coordinator: u32,
    /// The coordinator whose service recovered it.
    pub by: u32,
    /// When its compute node crashed (none: it was fenced, its lease lost to a stall).
    pub crashed_us: Option<f64>,
    pub expired_us: f64,
    /// From the crash (or the lease's expiry) to the READ that found the lease expired.
    pub detection_us: f64,
    /// `recover`'s duration: settle the log, release the locks, close the entry.
    pub repair_us: f64,
    pub outcome: String,
    pub locks_released: u32,
}

impl RecoveryLine {
    /// The line of recovery event `e`, whose coordinator's compute node crashed at
    /// `crashed_ns` (none: it was fenced, or the crash is unknown); times from `run_start_ns`.
    /// Detection runs from the crash, or else from the lease's expiry.
    pub fn of(
        e: &dtxn_txn::membership::RecoveryEvent,
        crashed_ns: Option<u64>,
        run_start_ns: u64,
    ) -> RecoveryLine {
        let from = crashed_ns.unwrap_or(e.expired_ns);
        RecoveryLine {
            coordinator: e.coordinator,
            by: e.by,
            crashed_us: crashed_ns.map(|c| c.saturating_sub(run_start_ns) as f64 / 1e3),
            expired_us: e.expired_ns.saturating_sub(run_start_ns) as f64 / 1e3,
            detection_us: e.noticed_ns.saturating_sub(from) as f64 / 1e3,
            repair_us: e.finished_ns.saturating_sub(e.started_ns) as f64 / 1e3,
            outcome: e.outcome.name().to_string(),
            locks_released: e.locks_released,
        }
    }
}

impl BenchReport {
    pub fn new<W: Workload, T>(
        config: ConfigReport,
        w: &W,
        out: &RunOutput<T>,
        verify: Option<Verdict>,
        load_ns: u64,
    ) -> BenchReport {
        let c: &Collector = &out.collector;
        let (timed, phases) = (config.fabric_time, config.breakdown);
        let secs = c.window_ns() as f64 / 1e9;
        let mut all = TypeStats::clone(&c.types[0]);
        for t in &c.types[1..] {
            all.merge(t);
        }
        let per_type = w
            .txn_types()
            .iter()
            .zip(&c.types)
            .map(|(n, s)| TypeReport::new(n, s, secs, timed, phases))
            .collect();
        let wall_s = out.wall_ns as f64 / 1e9;
        BenchReport {
            config,
            time: if out.virtual_time { "virtual" } else { "wall" },
            measured_s: secs,
            all: TypeReport::new("all", &all, secs, timed, phases),
            per_type,
            verify,
            faults: None,
            leases: None,
            memnode_outage: None,
            load_s: load_ns as f64 / 1e9,
            mn_nic_busy: out.mn_nic_busy.clone(),
            sim: out.virtual_time.then(|| SimCost {
                txns: out.attempts_all,
                wall_s,
                txns_per_wall_s: if wall_s > 0.0 {
                    out.attempts_all as f64 / wall_s
                } else {
                    0.0
                },
                trace_hash: format!("{:016x}", out.trace_hash.unwrap_or(0)),
            }),
        }
    }

    /// The terminal report.
    pub fn table(&self) -> String {
        let c = &self.config;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "dtxn bench: {} on {}{}, {}",
            c.workload,
            c.protocol,
            if c.localized_validation { "-lv" } else { "" },
            c.backend_detail
        );
        let _ = writeln!(
            s,
            "pool: {} memory nodes x {} MiB, {} replicas; {} compute node(s) x {} threads x {} \
             coroutines = {} coordinators",
            c.memory_nodes,
            c.node_bytes >> 20,
            c.replicas,
            c.compute_nodes,
            c.threads,
            c.coroutines,
            c.coordinators
        );
        let _ = writeln!(s, "workload options: {}", c.workload_options);
        if let Some(us) = c.retry_backoff_us {
            let _ = writeln!(
                s,
                "retrying an aborted transaction until it commits, after a random wait below \
                 2^n us (at most {us} us) before the n-th retry"
            );
        }
        let clock = if self.time == "virtual" {
            "VIRTUAL time (simulated; not this machine's speed)"
        } else {
            "wall time"
        };
        let _ = writeln!(
            s,
            "measured {} of {clock}, after {} s of warm-up; seed {}",
            secs(self.measured_s),
            c.warmup_s,
            c.seed
        );
        if let Some(sim) = &self.sim {
            let _ = writeln!(
                s,
                "simulation cost: {} transactions in {} wall = {:.0} simulated transactions per \
                 wall second",
                sim.txns,
                secs(sim.wall_s),
                sim.txns_per_wall_s
            );
        }
        let a = &self.all;
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "committed/s {}   attempts/s {}   abort rate {:.2}%{}",
            thousands(a.committed_per_s),
            thousands(a.attempts_per_s),
            100.0 * a.abort_rate,
            reasons(&a.aborts, a.attempts)
        );
        let meanings: Vec<String> = a
            .aborts
            .keys()
            .filter_map(|r| meaning(r).map(|m| format!("{r}: {m}")))
            .collect();
        if !meanings.is_empty() {
            let _ = writeln!(s, "  ({})", meanings.join("; "));
        }
        let _ = writeln!(
            s,
            "latency of committed (us): p50 {}   p99 {}   p99.9 {}",
            us(a.latency_us.p50),
            us(a.latency_us.p99),
            us(a.latency_us.p999)
        );
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{:<22} {:>10} {:>10} {:>12} {:>7} {:>8} {:>8} {:>8} {:>6} {:>6} {:>7}",
            "transaction",
            "attempts",
            "committed",
            "committed/s",
            "abort%",
            "p50 us",
            "p99 us",
            "p99.9 us",
            "RTs",
            "verbs",
            "bytes"
        );
        for t in self.per_type.iter().chain(std::iter::once(&self.all)) {
            let _ = writeln!(
                s,
                "{:<22} {:>10} {:>10} {:>12} {:>7.2} {:>8} {:>8} {:>8} {:>6.2} {:>6.1} {:>7.0}",
                t.name,
                t.attempts,
                t.committed,
                thousands(t.committed_per_s),
                100.0 * t.abort_rate,
                us(t.latency_us.p50),
                us(t.latency_us.p99),
                us(t.latency_us.p999),
                t.round_trips,
                t.verbs,
                t.bytes
            );
        }
        let _ = writeln!(
            s,
            "(RTs, verbs, bytes: means per committed transaction; RTs are critical-path round \
             trips)"
        );
        if !self.mn_nic_busy.is_empty() {
            let per: Vec<String> = self
                .mn_nic_busy
                .iter()
                .enumerate()
                .map(|(n, b)| format!("node {n} {:.1}%", 100.0 * b))
                .collect();
            let _ = writeln!(
                s,
                "memory-node NICs busy (share of the run, warm-up included): {}",
                per.join(", ")
            );
        }
        if self.all.rpcs > 0.0 {
            let per: Vec<String> = self
                .per_type
                .iter()
                .chain(std::iter::once(&self.all))
                .filter(|t| t.committed > 0)
                .map(|t| {
                    format!(
                        "{} {:.2} in {:.2} messages, {:.2} us",
                        t.name, t.rpcs, t.rpc_messages, t.mn_cpu_us
                    )
                })
                .collect();
            let _ = writeln!(
                s,
                "RPCs per committed transaction (requests, messages, memory-node CPU): {}",
                per.join("; ")
            );
        }
        if self.all.oracle_round_trips > 0.0 {
            let per: Vec<String> = self
                .per_type
                .iter()
                .map(|t| format!("{} {:.2}", t.name, t.oracle_round_trips))
                .collect();
            let _ = writeln!(
                s,
                "(of the RTs, on the timestamp oracle: {}; the papers' counts leave these out)",
                per.join(", ")
            );
        }
        if self.all.fabric_us.is_some() {
            let per: Vec<String> = self
                .per_type
                .iter()
                .chain(std::iter::once(&self.all))
                .filter_map(|t| {
                    let (f, mean) = (t.fabric_us?, t.latency_us.mean);
                    (t.committed > 0).then(|| {
                        format!(
                            "{} {:.1} of {:.1} us ({:.0}%)",
                            t.name,
                            f,
                            mean,
                            pct(f, mean)
                        )
                    })
                })
                .collect();
            let _ = writeln!(
                s,
                "executing verbs (--fabric-time), per committed transaction: {}",
                per.join(", ")
            );
        }
        self.write_breakdown(&mut s);
        if let Some(n) = a.aborts.get("log-full") {
            let _ = writeln!(
                s,
                "note: {n} aborts because an undo log did not fit its slice (raise \
                 --log-slice-bytes)"
            );
        }
        if let Some(n) = a.aborts.get("table-full") {
            let _ = writeln!(
                s,
                "note: {n} aborts because a table had no room for an insert (raise \
                 --new-orders-per-district, or give the table more rows)"
            );
        }
        if let Some(w) = self.crowded_warehouses() {
            let _ = writeln!(
                s,
                "note: {} coordinators share {w} warehouse(s), and every Payment updates its \
                 warehouse's row and every NewOrder its district's: most attempts conflict. \
                 The spec gives each terminal a warehouse: --warehouses {} spreads them.",
                self.config.coordinators, self.config.coordinators
            );
        }
        if let Some(n) = a.aborts.get("bad-request") {
            let _ = writeln!(
                s,
                "note: {n} aborts for a bad request (a workload asked for something the \
                 protocol refuses: a bug)"
            );
        }
        let _ = writeln!(s);
        if let Some(o) = &self.memnode_outage {
            let _ = writeln!(
                s,
                "memory node down: {} coordinator(s) stopped; reconnected and recovered them \
                 {:.2} s after the run ({} rolled forward, {} rolled back; {} locks released)",
                o.coordinators_stopped,
                o.recovered_after_s,
                o.rolled_forward,
                o.rolled_back,
                o.locks_released
            );
        }
        if let Some(l) = &self.leases {
            let ms = |ns: u64| ns as f64 / 1e6;
            let _ = writeln!(
                s,
                "leases (wall clock): {:.1} ms, guard {:.1} ms, skew {:.1} ms; longest op \
                 flight {:.2} ms ({}); {} coordinator(s) of this process fenced",
                ms(l.lease_ns),
                ms(l.guard_ns),
                ms(l.skew_ns),
                ms(l.max_flight_ns),
                if l.flights_ok {
                    "within guard - skew"
                } else {
                    "NOT within guard - skew: the lease argument does not hold for this run"
                },
                l.fenced
            );
            let _ = writeln!(
                s,
                "recovered online by this process: {} coordinator(s) ({} rolled forward, {} \
                 rolled back; {} locks released); {} fenced recovered after the run",
                l.coordinators_recovered,
                l.rolled_forward,
                l.rolled_back,
                l.locks_released,
                l.recovered_after_run
            );
            for r in &l.recoveries {
                let _ = writeln!(
                    s,
                    "  coordinator {:>3}: lease expired {:.1} ms into the run; detected {:.1} ms \
                     later, repaired by {} in {:.1} ms ({}, {} locks)",
                    r.coordinator,
                    r.expired_us / 1e3,
                    r.detection_us / 1e3,
                    r.by,
                    r.repair_us / 1e3,
                    r.outcome,
                    r.locks_released
                );
            }
            if !l.views.is_empty() {
                let _ = writeln!(s, "memory-node failover: the pool ends in {}", l.final_view);
                for v in &l.views {
                    let _ = writeln!(
                        s,
                        "  {}: changed {:.1} ms into the run ({}); active for every coordinator \
                         {:.1} ms later (repair); {} coordinator(s) of this process adopted it, \
                         {} promoted table(s) repaired here",
                        v.view,
                        v.changed_us.unwrap_or(0.0) / 1e3,
                        if v.view.contains("joining") {
                            "a coordinator found a failed memory node back, blank"
                        } else if v.view.contains("rejoined") {
                            "the copy to the joining node finished"
                        } else {
                            "a coordinator found a memory node down"
                        },
                        v.repair_us.unwrap_or(0.0) / 1e3,
                        v.coordinators,
                        v.promoted_tables
                    );
                }
                for j in &l.joins {
                    let nodes: Vec<String> = j.nodes.iter().map(|n| n.to_string()).collect();
                    let at = |x: Option<f64>| {
                        x.map_or("-".to_string(), |v| format!("{:.1} ms", v / 1e3))
                    };
                    let _ = writeln!(
                        s,
                        "  memory node {} rejoined: joining from {} (active at {}); copy by \
                         coordinator {} from {:.1} ms for {:.1} ms ({} slots, {} passes); a full \
                         replica at {}",
                        nodes.join(", "),
                        at(j.joining_us),
                        at(j.joining_active_us),
                        j.by,
                        j.copy_started_us / 1e3,
                        j.copy_us / 1e3,
                        j.slots,
                        j.passes,
                        at(j.full_us)
                    );
                }
            }
        }
        if let Some(f) = &self.faults {
            let plan: Vec<String> = f
                .planned_crashes
                .iter()
                .map(|&(cn, at)| {
                    format!(
                        "compute node {cn} at {:.1} us{}",
                        at as f64 / 1e3,
                        f.late(at)
                    )
                })
                .collect();
            let _ = writeln!(
                s,
                "faults: {} (virtual); {} coordinators crashed, {} recovered ({} rolled \
                 forward, {} of them unrecorded; {} rolled back; {} locks released)",
                if plan.is_empty() {
                    "no compute crash planned".to_string()
                } else {
                    plan.join(", ")
                },
                f.coordinators_crashed,
                f.coordinators_recovered,
                f.rolled_forward,
                f.rolled_forward_unrecorded,
                f.rolled_back,
                f.locks_released
            );
            if f.lease_ns > 0 {
                let _ = writeln!(
                    s,
                    "leases: {:.0} us, guard {:.1} us (longest op flight {:.1} us); {} recovered \
                     online, {} after the run, {} fenced",
                    f.lease_ns as f64 / 1e3,
                    f.guard_ns as f64 / 1e3,
                    f.max_flight_ns as f64 / 1e3,
                    f.recovered_online,
                    f.recovered_after_run,
                    f.fenced
                );
            }
            if !f.recoveries.is_empty() {
                let n = f.recoveries.len() as f64;
                let mean =
                    |g: &dyn Fn(&RecoveryLine) -> f64| f.recoveries.iter().map(g).sum::<f64>() / n;
                let max = |g: &dyn Fn(&RecoveryLine) -> f64| {
                    f.recoveries.iter().map(g).fold(0.0, f64::max)
                };
                let _ = writeln!(
                    s,
                    "recovery (virtual): detection mean {:.1} us, max {:.1} us; repair mean {:.1} \
                     us, max {:.1} us",
                    mean(&|r| r.detection_us),
                    max(&|r| r.detection_us),
                    mean(&|r| r.repair_us),
                    max(&|r| r.repair_us)
                );
                const LISTED: usize = 8;
                for r in f.recoveries.iter().take(LISTED) {
                    let _ = writeln!(
                        s,
                        "  coordinator {:>3}: {}, lease expired {:.1} us; detected in {:.1} us, \
                         repaired by {} in {:.1} us ({}, {} locks)",
                        r.coordinator,
                        match r.crashed_us {
                            Some(c) => format!("crashed {c:.1} us"),
                            None => "fenced".to_string(),
                        },
                        r.expired_us,
                        r.detection_us,
                        r.by,
                        r.repair_us,
                        r.outcome,
                        r.locks_released
                    );
                }
                if f.recoveries.len() > LISTED {
                    let _ = writeln!(
                        s,
                        "  ... and {} more coordinators (--json lists them all)",
                        f.recoveries.len() - LISTED
                    );
                }
            }
            if !f.planned_memory_failures.is_empty() {
                let plan: Vec<String> = f
                    .planned_memory_failures
                    .iter()
                    .map(|&(n, at)| {
                        format!("memory node {n} at {:.1} us{}", at as f64 / 1e3, f.late(at))
                    })
                    .collect();
                let _ = writeln!(
                    s,
                    "memory-node failures: {} (virtual, for good); the pool ends in {}",
                    plan.join(", "),
                    f.final_view
                );
                let opt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.1} us"));
                if let Some(c) = &f.control {
                    let _ = writeln!(
                        s,
                        "  control chain of {} members: {} words helped forward, {} writes \
                         unknown, {} members dropped, {} reads again",
                        c.members, c.helped, c.unknown, c.dropped, c.reread
                    );
                }
                for v in &f.views {
                    let _ = writeln!(
                        s,
                        "  {}: failed at {}; view changed {} later (detection), active \
                         for every coordinator {} after that (repair), at {:.1} us; {} \
                         coordinators adopted it, {} promoted tables repaired",
                        v.view,
                        opt(v.failed_us),
                        opt(v.detection_us),
                        opt(v.repair_us),
                        v.active_us,
                        v.coordinators,
                        v.promoted_tables
                    );
                }
                for j in &f.joins {
                    let nodes: Vec<String> = j.nodes.iter().map(|n| n.to_string()).collect();
                    let at = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.1} us"));
                    let _ = writeln!(
                        s,
                        "  memory node {} rejoined: back (blank) at {}, joining from {} (active at \
                         {}); copy by coordinator {} from {:.1} us for {:.1} us ({} slots, {} \
                         passes); a full replica at {}",
                        nodes.join(", "),
                        at(j.back_us),
                        at(j.joining_us),
                        at(j.joining_active_us),
                        j.by,
                        j.copy_started_us,
                        j.copy_us,
                        j.slots,
                        j.passes,
                        at(j.full_us)
                    );
                }
            }
            let _ = writeln!(s, "history (with recovery's transactions): {}", f.history);
            let _ = writeln!(
                s,
                "pool after the liveness phase: {}",
                if f.pool_checks.ok {
                    "consistent"
                } else {
                    "INCONSISTENT"
                }
            );
            for c in &f.pool_checks.checks {
                let _ = writeln!(s, "  - {c}");
            }
            let _ = writeln!(
                s,
                "liveness after the faults: {}",
                if f.liveness.ok { "ok" } else { "SHUT OUT" }
            );
            for c in &f.liveness.checks {
                let _ = writeln!(s, "  - {c}");
            }
        }
        match (&self.verify, &self.config.record) {
            (Some(v), _) => {
                let _ = writeln!(
                    s,
                    "verify: {}",
                    if v.ok { "consistent" } else { "INCONSISTENT" }
                );
                for c in &v.checks {
                    let _ = writeln!(s, "  - {c}");
                }
            }
            (None, Some(h)) => {
                let _ = writeln!(
                    s,
                    "not checked here: the history is in {h} (dtxn check {h}); --verify also \
                     checks the workload's invariants",
                    h = h.display()
                );
            }
            (None, None) => {
                let _ = writeln!(
                    s,
                    "not checked: add --verify to check the workload's invariants, or --record \
                     FILE and dtxn check FILE for the isolation level"
                );
            }
        }
        s
    }

    /// TPC-C with more coordinators than warehouses, aborting most attempts on conflicts:
    /// the warehouses, for a note that says why.
    /// `--breakdown`: a table of microseconds per committed transaction in each phase.
    fn write_breakdown(&self, s: &mut String) {
        let Some(all) = &self.all.breakdown_us else {
            return;
        };
        let cols: Vec<&str> = all.keys().copied().collect();
        // Committed transactions spend nothing in `abort`: the column is left out.
        let order: Vec<&str> = Phase::ALL
            .iter()
            .map(|p| p.name())
            .chain(["other"])
            .filter(|c| cols.contains(c) && *c != "abort")
            .collect();
        let _ = writeln!(
            s,
            "\nwhere the time goes (--breakdown), us per committed transaction ({} time):",
            self.time
        );
        let _ = write!(s, "{:<20}", "type");
        for c in &order {
            let _ = write!(s, " {c:>9}");
        }
        let _ = writeln!(s, " {:>9}", "latency");
        for t in self.per_type.iter().chain(std::iter::once(&self.all)) {
            let Some(b) = t.breakdown_us.as_ref().filter(|_| t.committed > 0) else {
                continue;
            };
            let _ = write!(s, "{:<20}", t.name);
            for c in &order {
                let _ = write!(s, " {:>9.2}", b[c]);
            }
            let _ = writeln!(s, " {:>9.2}", t.latency_us.mean);
        }
        let _ = writeln!(
            s,
            "(other: the application's logic between phases, and waiting for the coroutine's turn)"
        );
    }

    fn crowded_warehouses(&self) -> Option<u64> {
        let w = self.config.workload_options["warehouses"].as_u64()?;
        let a = &self.all;
        let conflicts: u64 = ["lock-conflict", "validation"]
            .iter()
            .filter_map(|r| a.aborts.get(r))
            .sum();
        let crowded = self.config.workload == "tpcc"
            && u64::from(self.config.coordinators) > w
            && 2 * conflicts > a.attempts;
        crowded.then_some(w)
    }

    /// CSV: a header, then one row per transaction type and `all`. `extra` columns (a
    /// sweep's varied parameters) come first.
    pub fn csv(&self, extra: &[(String, String)]) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{}", csv_header(extra));
        s.push_str(&self.csv_rows(extra));
        s
    }

    pub fn csv_rows(&self, extra: &[(String, String)]) -> String {
        let c = &self.config;
        let mut s = String::new();
        for t in self.per_type.iter().chain(std::iter::once(&self.all)) {
            let mut row: Vec<String> = extra.iter().map(|(_, v)| csv_field(v)).collect();
            row.extend([
                c.workload.clone(),
                c.protocol.clone(),
                format!("{:?}", c.backend).to_lowercase(),
                self.time.to_string(),
                c.memory_nodes.to_string(),
                c.replicas.to_string(),
                c.compute_nodes.to_string(),
                c.threads.to_string(),
                c.coroutines.to_string(),
                c.coordinators.to_string(),
                c.seed.to_string(),
                csv_field(&t.name),
                t.attempts.to_string(),
                t.committed.to_string(),
                format!("{:.1}", t.committed_per_s),
                format!("{:.1}", t.attempts_per_s),
                format!("{:.5}", t.abort_rate),
                format!("{:.2}", t.latency_us.p50),
                format!("{:.2}", t.latency_us.p99),
                format!("{:.2}", t.latency_us.p999),
                format!("{:.3}", t.round_trips),
                format!("{:.3}", t.verbs),
                format!("{:.1}", t.bytes),
                format!("{:.3}", t.oracle_round_trips),
                t.fabric_us.map(|f| format!("{f:.3}")).unwrap_or_default(),
                format!("{:.3}", t.rpcs),
                format!("{:.3}", t.rpc_messages),
                format!("{:.3}", t.mn_cpu_us),
            ]);
            let _ = writeln!(s, "{}", row.join(","));
        }
        s
    }
}

pub fn csv_header(extra: &[(String, String)]) -> String {
    let mut h: Vec<String> = extra.iter().map(|(k, _)| csv_field(k)).collect();
    h.extend(
        [
            "workload",
            "protocol",
            "backend",
            "time",
            "memory_nodes",
            "replicas",
            "compute_nodes",
            "threads",
            "coroutines",
            "coordinators",
            "seed",
            "txn_type",
            "attempts",
            "committed",
            "committed_per_s",
            "attempts_per_s",
            "abort_rate",
            "p50_us",
            "p99_us",
            "p999_us",
            "round_trips",
            "verbs",
            "bytes",
            "oracle_round_trips",
            "fabric_us",
            "rpcs",
            "rpc_messages",
            "mn_cpu_us",
        ]
        .map(String::from),
    );
    h.join(",")
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// What an abort reason means, in a few words, for the line under the abort rate.
fn meaning(reason: &str) -> Option<&'static str> {
    Some(match reason {
        "lock-conflict" => "another transaction held a lock (no waiting)",
        "validation" => "an item read changed before commit",
        "invisible" => "a record stayed locked for commit or kept reading torn",
        "replica-failure" => "a memory node failed",
        "exists" => "insert of a key that exists",
        "missing" => "update or delete of a key that does not exist",
        "user" => {
            "the workload rolled back by its own rules (TPC-C's 1% of NewOrders, SmallBank's \
             overdrafts, TATP's missing rows)"
        }
        "log-full" => "an undo log did not fit its slice",
        "table-full" => "a table had no room for an insert",
        "newer-version" => "a record had a version newer than the transaction's start",
        "version-gone" => "the version a snapshot needs was overwritten (raise --vnum)",
        "no-slot" => "no version slot held the version a read needs (raise --set mvcc.slots)",
        "bad-request" => "the workload asked for something the protocol refuses (a bug)",
        "corrupt-chain" => "a hash chain in memory was corrupt (a bug)",
        _ => return None,
    })
}

fn reasons(aborts: &BTreeMap<&'static str, u64>, attempts: u64) -> String {
    if aborts.is_empty() || attempts == 0 {
        return String::new();
    }
    let parts: Vec<String> = aborts
        .iter()
        .map(|(r, n)| format!("{r} {:.2}%", 100.0 * *n as f64 / attempts as f64))
        .collect();
    format!(" ({})", parts.join(", "))
}

/// `part` as a percentage of `whole` (0 for an empty whole).
fn pct(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        100.0 * part / whole
    } else {
        0.0
    }
}

fn secs(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else {
        format!("{:.2} ms", s * 1e3)
    }
}

fn us(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// 1234567.8 as "1,234,568".
pub fn thousands(x: f64) -> String {
    let n = x.round() as u64;
    let digits = n.to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(thousands(1234567.8), "1,234,568");
        assert_eq!(thousands(12.0), "12");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(us(1.234), "1.2");
        assert_eq!(us(1234.0), "1234");
    }
}
