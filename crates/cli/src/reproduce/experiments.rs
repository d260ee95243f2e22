//! The papers' comparisons as data: which two `dtxn bench` runs, which metric, the paper's
//! claim and where it stands.

use super::{Claim, Paper};
use crate::bench::report::{thousands, BenchReport};

/// What a row compares between its two runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Metric {
    /// Committed transactions per second, every type together.
    Committed,
    /// Median latency of committed transactions.
    P50,
    /// 99th percentile latency of committed transactions.
    P99,
    /// Run a's abort rate of one transaction type, in percent of its attempts (run b is
    /// the same run: a share, not a ratio, since the paper's other end can be 0).
    AbortPct(&'static str),
}

impl Metric {
    pub fn of(self, r: &BenchReport) -> f64 {
        match self {
            Metric::Committed => r.all.committed_per_s,
            Metric::P50 => r.all.latency_us.p50,
            Metric::P99 => r.all.latency_us.p99,
            Metric::AbortPct(t) => r
                .per_type
                .iter()
                .find(|x| x.name == t)
                .map_or(f64::NAN, |x| 100.0 * x.abort_rate),
        }
    }

    pub fn name(self) -> String {
        match self {
            Metric::Committed => "committed/s".into(),
            Metric::P50 => "p50".into(),
            Metric::P99 => "p99".into(),
            Metric::AbortPct(t) => format!("a's {t} aborts, %"),
        }
    }
}

/// One comparison: run `a`'s metric over run `b`'s, against the paper's claim.
pub struct Experiment {
    pub what: &'static str,
    pub paper: Claim,
    /// Where the paper's number is.
    pub source: &'static str,
    /// Options of both runs (they replace the setup's where they overlap).
    pub workload: &'static [&'static str],
    pub a: &'static [&'static str],
    pub b: &'static [&'static str],
    pub metric: Metric,
    /// Why ours misses the paper's where it does (in the report only then).
    pub why: Option<Why>,
}

/// Why a row misses the paper: the mechanism in words, the numbers of the row's own runs
/// that show it, and a probe (the same two runs with one thing changed) that removes it.
pub struct Why {
    /// Markdown, one or more sentences.
    pub text: &'static str,
    /// From the row's runs a and b: the numbers the text points at.
    pub evidence: Option<fn(&BenchReport, &BenchReport) -> String>,
    pub probe: Option<Probe>,
}

/// Both runs again with `args` added: what changes, in words ("With links of unlimited
/// bandwidth").
pub struct Probe {
    pub what: &'static str,
    pub args: &'static [&'static str],
}

const fn why(e: Experiment, w: Why) -> Experiment {
    Experiment { why: Some(w), ..e }
}

const fn because(text: &'static str) -> Why {
    Why {
        text,
        evidence: None,
        probe: None,
    }
}

const fn shown_by(w: Why, evidence: fn(&BenchReport, &BenchReport) -> String) -> Why {
    Why {
        evidence: Some(evidence),
        ..w
    }
}

const fn probed(w: Why, what: &'static str, args: &'static [&'static str]) -> Why {
    Why {
        probe: Some(Probe { what, args }),
        ..w
    }
}

/// Bytes and verbs per committed transaction of both runs.
fn bytes(a: &BenchReport, b: &BenchReport) -> String {
    format!(
        "{} against {} bytes and {:.1} against {:.1} verbs per committed transaction",
        thousands(a.all.bytes),
        thousands(b.all.bytes),
        a.all.verbs,
        b.all.verbs
    )
}

/// Verbs per committed transaction and the op rate they add up to, against the compute
/// node's NIC (60 M ops/s in `cx5-100g-papers`).
fn verbs_rate(a: &BenchReport, b: &BenchReport) -> String {
    let rate = |r: &BenchReport| r.all.committed_per_s * r.all.verbs / 1e6;
    format!(
        "{:.1} against {:.1} verbs per committed transaction, {:.1} M against {:.1} M verbs/s \
         (committed/s x verbs; aborted attempts add theirs); {}",
        a.all.verbs,
        b.all.verbs,
        rate(a),
        rate(b),
        round_trips_by_type(a, b)
    )
}

/// What FaRM's bucket READs move: bytes per committed transaction, and how busy each memory
/// node's NIC was.
fn buckets_moved(a: &BenchReport, b: &BenchReport) -> String {
    format!("{}; {}", bytes(a, b), nic_busy(a, b))
}

/// The memory nodes' CPU serving RPCs: per committed transaction, and the cores it keeps
/// busy on average over the run (the profile gives each memory node 2).
fn mn_cpu(a: &BenchReport, b: &BenchReport) -> String {
    let busy = |r: &BenchReport| r.all.mn_cpu_us * r.all.committed_per_s / 1e6;
    format!(
        "memory-node CPU {:.1} against {:.1} us per committed transaction, {:.1} against {:.1} \
         cores busy on average across the {} memory nodes; {:.2} against {:.2} round trips \
         per committed transaction",
        a.all.mn_cpu_us,
        b.all.mn_cpu_us,
        busy(a),
        busy(b),
        a.config.memory_nodes,
        a.all.round_trips,
        b.all.round_trips
    )
}

/// Round trips per committed transaction, type by type.
fn round_trips_by_type(a: &BenchReport, b: &BenchReport) -> String {
    let each: Vec<String> = a
        .per_type
        .iter()
        .filter_map(|ta| {
            let tb = b.per_type.iter().find(|t| t.name == ta.name)?;
            Some(format!(
                "{} {:.2} against {:.2}",
                ta.name, ta.round_trips, tb.round_trips
            ))
        })
        .collect();
    format!("round trips per committed transaction: {}", each.join(", "))
}

/// How busy each memory node's NIC was, in both runs.
fn nic_busy(a: &BenchReport, b: &BenchReport) -> String {
    let show = |r: &BenchReport| {
        r.mn_nic_busy
            .iter()
            .map(|x| format!("{:.1}%", 100.0 * x))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "memory-node NICs busy {} of run a and {} of run b",
        show(a),
        show(b)
    )
}

/// Abort rates and round trips of both runs.
fn aborts(a: &BenchReport, b: &BenchReport) -> String {
    format!(
        "{:.1}% against {:.1}% of the attempts aborted, {:.2} against {:.2} round trips per committed transaction",
        100.0 * a.all.abort_rate,
        100.0 * b.all.abort_rate,
        a.all.round_trips,
        b.all.round_trips
    )
}

const fn x(
    what: &'static str,
    paper: Claim,
    source: &'static str,
    workload: &'static [&'static str],
    a: &'static [&'static str],
    b: &'static [&'static str],
) -> Experiment {
    Experiment {
        what,
        paper,
        source,
        workload,
        a,
        b,
        metric: Metric::Committed,
        why: None,
    }
}

const fn on(e: Experiment, metric: Metric) -> Experiment {
    Experiment { metric, ..e }
}

pub fn of(paper: Paper) -> &'static [Experiment] {
    match paper {
        Paper::Ford => FORD_EXPERIMENTS,
        Paper::Motor => MOTOR_EXPERIMENTS,
        Paper::Rcc => RCC_EXPERIMENTS,
        Paper::Scythe => SCYTHE_EXPERIMENTS,
        Paper::Sync => &[],
    }
}

/// The workloads as FORD's code lays them out: 22 slots in every bucket of every table
/// (`ITEM_NUM_PER_NODE`); TPC-C's NewOrder locks the district first, then fetches line by
/// line.
const FORD_SMALLBANK: &[&str] = &["--workload", "smallbank", "--slots-per-bucket", "22"];
const FORD_TATP: &[&str] = &["--workload", "tatp", "--slots-per-bucket", "22"];
const FORD_TPCC: &[&str] = &[
    "--workload",
    "tpcc",
    "--warehouses",
    "8",
    "--tpcc-order",
    "ford",
    "--slots-per-bucket",
    "22",
];
/// The workloads as Motor's code lays them out: its slots per bucket per table, FORD's
/// NewOrder order.
const MOTOR_SMALLBANK: &[&str] = &["--workload", "smallbank", "--slots-per-bucket", "1"];
const MOTOR_TATP: &[&str] = &["--workload", "tatp", "--slots-per-bucket", "5,subscriber=1"];
const MOTOR_TPCC: &[&str] = &[
    "--workload",
    "tpcc",
    "--warehouses",
    "24",
    "--tpcc-order",
    "ford",
    "--slots-per-bucket",
    "1,customer=3,history=15,new_order=15,order=15,order_line=15,stock=4,customer_last_order=15",
];
/// FORD's flush experiment (Figs. 19-20): one coordinator, writes only, on persistent memory.
const FORD_FLUSH: &[&str] = &[
    "--workload",
    "kv",
    "--keys",
    "100000",
    "--items",
    "4",
    "--read-only-pct",
    "0",
    "--threads",
    "1",
    "--coroutines",
    "1",
    "--profile",
    "cx5-100g-papers-pm",
];
const FORD_SELECTIVE_FLUSH: &[&str] = &["--protocol", "ford", "--set", "flush=true"];
const FORD_FULL_FLUSH: &[&str] = &[
    "--protocol",
    "ford",
    "--set",
    "flush=true",
    "--set",
    "ford.full_flush=true",
];
const FORD: &[&str] = &["--protocol", "ford"];
/// FaRM as FORD's code ran it: without an address cache (every access READs its bucket).
const FARM: &[&str] = &["--protocol", "farm", "--set", "addr_cache_entries=0"];
const DRTMH: &[&str] = &["--protocol", "drtmh"];
/// Motor with its authors' timestamps (the compute process's own counter).
const MOTOR: &[&str] = &["--protocol", "motor", "--set", "motor.oracle=local"];

// Why rows miss: the mechanisms measured in the book's results chapter, each with the
// numbers of the row's own runs or a probe that shows it.

/// FaRM without an address cache READs whole buckets: the links and NICs moving them bind it.
const FARM_BUCKETS: Why = probed(
    shown_by(
        because(
            "Without an address cache (as FORD's code ran it) every FaRM access READs its \
             22-slot bucket, and moving those READs bounds FaRM at this load: the compute \
             node's 100 Gb/s link and the NIC of the memory node that holds the hot tables' \
             primaries. The paper states neither its links' load nor its NICs' effective \
             bandwidth; its ratio lies between this link-bound end and the link-free one \
             probed here.",
        ),
        buckets_moved,
    ),
    "With links of unlimited bandwidth",
    &["--profile-set", "link_gbps=0,cn_link_gbps=0"],
);

const CPU_BINDS: &str = "The compute node's CPU binds at this setup, so relieving the busier \
     memory node (CHECKING's primary) gains nothing; where the memory side binds, moving \
     CHECKING's reads gains a little. A read-only item read at the backup is still validated \
     at its primary, so only its data READ moves.";

/// Motor against dtxn's FORD on SmallBank: both 2 round trips; the compute NIC binds.
const VERBS_BIND: Why = probed(
    shown_by(
        because(
            "Both runs are bound by the compute node's NIC (60 M ops/s): the ratio follows \
             the verbs per transaction. dtxn's FORD commits a read-write transaction in 2 \
             round trips, as Motor does, its undo log riding the commit's batch (a WRITE per \
             replica, no round trip of its own), and neither blocks a reader here; so of the \
             gains the paper names (no undo log, reads not blocked, fewer read-only aborts) \
             what is left is FORD's log WRITEs, and the version READ that validates its \
             read-only Balance (Motor reads a consistent version in one READ).",
        ),
        verbs_rate,
    ),
    "With the compute node's NIC unlimited (the memory nodes' NICs bind instead)",
    &["--profile-set", "cn_nic_mops=0,cn_link_gbps=0"],
);

const ABORT_STORM: &str = "Both runs are abort storms on the warehouse and district rows at \
     280 coordinators, whose throughput moves with any shift in timing: the seeds' range \
     shows how far.";

const FORD_VALIDATES_ONE_ITEM: &str = "dtxn's FORD validates a read-only transaction of a \
     single item (its READ, then a READ of its version: a record of several lines may be read \
     torn, which the fabric contract allows), where FORD's code skips that validation; Motor \
     reads a consistent version in one round trip. GetSubscriberData and GetAccessData are \
     70% of TATP.";

/// StockLevel never short of a version at vnum 2 or 4 here; probed with one.
const STOCKLEVEL_ONE_VERSION: Why = probed(
    because(
        "In these 10 ms runs a StockLevel sees its records rewritten at most once, so two \
         versions always hold the one it needs; with one version it aborts for want of it. \
         The paper's StockLevel, longer or against hotter rows, sees two rewrites a third of \
         the time.",
    ),
    "With one version per record",
    &["--vnum", "1"],
);

const VNUM_ONLY_COSTS: &str = "With StockLevel never aborting at two versions here (above), \
     vnum 4's larger CVTs only cost bytes; the paper's peak at 4 comes from StockLevel's \
     aborts at 2.";

const O2N_MEDIAN: &str = "The paper's number is an average over read-write ratios (ours at \
     20% read-write is below). A read-write item's walk reads every node of its chain, but \
     most keys are cold at zipf 0.99 and hold one version, so the median transaction walks \
     one node where the tail walks four (the p99 column).";

/// RCC's RPC stages against the memory nodes' 2 cores.
const MN_CORES: Why = probed(
    shown_by(
        because(
            "The memory nodes serve RPCs on 2 cores at 500 ns a request (the profile's \
             guess: RCC's servers ran 10 worker threads), and their CPU binds the RPC runs.",
        ),
        mn_cpu,
    ),
    "With 10 memory-node cores",
    &["--profile-set", "mn_cores=10"],
);

/// RCC's hybrids against one-sided: dtxn's one-sided stages cost about the round trips of
/// their RPCs.
const FEW_ROUND_TRIPS_SAVED: Why = probed(
    shown_by(
        because(
            "In dtxn a one-sided stage costs about the round trips of its RPC (MVCC's raise \
             and SUNDIAL's renewal are one CAS each, the rts or lease word having come with \
             the fetch; RCC's one-sided read and renewal were a READ, then a CAS), so an RPC \
             stage saves few round trips (the runs' round trips) and costs the memory nodes' \
             CPU. With that CPU made free (the probe) the hybrid still trails: the RPC path \
             costs more in this model than the verbs it replaces, a difference this report \
             does not break down further.",
        ),
        mn_cpu,
    ),
    "With the memory nodes' RPC CPU free",
    &[
        "--profile-set",
        "mn_cores=0,rpc_cpu_ns=0,rpc_cpu_per_kib_ns=0",
    ],
);

/// RCC's RPC MVCC on TPC-C: round trips saved, memory-node CPU spent.
const RPC_SAVES_ROUND_TRIPS: Why = probed(
    shown_by(
        because(
            "RPC saves round trips here (the runs' round trips), but the memory nodes' 2 \
             cores at 500 ns a request bind the RPC run; with more cores (the probe) the gap \
             narrows but stays, and with their CPU made free too it stays (0.86 measured on \
             2026-11-29): the RPC path costs more in this model than the verbs it replaces, a \
             difference this report does not break down further.",
        ),
        mn_cpu,
    ),
    "With 10 memory-node cores",
    &["--profile-set", "mn_cores=10"],
);

const READ_SHARES: &str = "dtxn's 2PL takes read shares (a CAS in, a FAA and a CAS out, \
     retried from the count it finds), where RCC's locks reads exclusively: NO_WAIT's round \
     trips per commit grow with contention.";

const EPOCHS: &str = "A near miss: the paper puts CALVIN an order of magnitude below \
     NO_WAIT, which with the 5% margin a direction must clear means 10.5x; ours is about \
     10x (the committed/s column). CALVIN is bounded by its epoch \
     synchronization: every epoch holds one transaction per coordinator and closes when its \
     slowest member has dispatched; it aborts nothing for concurrency control.";

/// Scythe against FORD: how the clients retry decides it.
const RETRY_POLICY: Why = probed(
    shown_by(
        because(
            "How the clients retry decides it, and the paper does not say. Backing off (the \
             default), FORD does not livelock, and Scythe's queues cost more round trips than \
             the collisions they spare; retried at once, FORD all but livelocks.",
        ),
        aborts,
    ),
    "Retried at once",
    &["--retry-backoff", "0"],
);

/// Scythe's batched oracle: its FAAs queue only in a storm of attempts.
const TSO_QUEUES: Why = probed(
    because(
        "The paper's number is the timestamp's own latency, ours the transactions': backing \
         off, attempts are few and one FAA per timestamp seldom queues, so batching saves \
         little of a transaction's time.",
    ),
    "Retried at once",
    &["--retry-backoff", "0"],
);

/// Scythe's p99: censored by the run.
const TAIL_CENSORED: Why = probed(
    shown_by(
        because(
            "In 100 ms runs the tail is transactions retried for much of the run, so p99 \
             says how long the runs were more than how the protocols differ.",
        ),
        aborts,
    ),
    "Retried at once",
    &["--retry-backoff", "0"],
);

const FORD_EXPERIMENTS: &[Experiment] = &[
    x(
        "FORD / FaRM, SmallBank",
        Claim::Ratio(1.6),
        "FORD Fig. 10",
        FORD_SMALLBANK,
        FORD,
        FARM,
    ),
    x(
        "FORD / DrTM+H, SmallBank",
        Claim::Ratio(1.3),
        "FORD Fig. 10",
        FORD_SMALLBANK,
        FORD,
        DRTMH,
    ),
    why(
        x(
            "FORD / FaRM, TATP",
            Claim::Ratio(1.3),
            "FORD Fig. 10",
            FORD_TATP,
            FORD,
            FARM,
        ),
        FARM_BUCKETS,
    ),
    why(
        x(
            "FORD / FaRM, TPC-C (8 warehouses)",
            Claim::Ratio(2.7),
            "FORD Fig. 10",
            FORD_TPCC,
            FORD,
            FARM,
        ),
        FARM_BUCKETS,
    ),
    x(
        "FORD / DrTM+H, TPC-C (8 warehouses)",
        Claim::Ratio(1.5),
        "FORD Fig. 10",
        FORD_TPCC,
        FORD,
        DRTMH,
    ),
    x(
        "FORD-LV / FaRM, SmallBank",
        Claim::Ratio(1.7),
        "FORD (TOS) localized validation",
        FORD_SMALLBANK,
        &["--protocol", "ford", "--localized-validation"],
        FARM,
    ),
    // Ablations.
    why(
        x(
            "FORD backup reads / none, SmallBank",
            Claim::Ratio(1.207),
            "FORD (TOS) Fig. 18: +20.7%",
            FORD_SMALLBANK,
            // FORD's case study (Table 4) reads CHECKING's read-only items from their backup.
            &[
                "--protocol",
                "ford",
                "--set",
                "ford.backup_reads=true",
                "--set",
                "ford.backup_read_tables=checking",
            ],
            FORD,
        ),
        probed(
            shown_by(because(CPU_BINDS), nic_busy),
            "On `cx5-100g` (60 ns of CPU per verb, not 300, and no compute-NIC limit: the memory \
             nodes' NICs bind)",
            &["--profile", "cx5-100g"],
        ),
    ),
    x(
        "FORD selective / full flush, kv 4 writes, 1 coordinator",
        Claim::Ratio(1.287),
        "FORD (TOS) Fig. 19: +28.7% (skewed)",
        FORD_FLUSH,
        FORD_SELECTIVE_FLUSH,
        FORD_FULL_FLUSH,
    ),
    on(
        x(
            "FORD selective / full flush p50, kv 4 writes, 1 coordinator",
            Claim::Ratio(0.775),
            "FORD (TOS) Fig. 20: p50 -22.5% (skewed)",
            FORD_FLUSH,
            FORD_SELECTIVE_FLUSH,
            FORD_FULL_FLUSH,
        ),
        Metric::P50,
    ),
    x(
        "FORD 11 / 1 coroutines per thread, SmallBank",
        Claim::Ratio(2.2),
        "FORD (TOS) Fig. 22: 2.2x",
        FORD_SMALLBANK,
        &["--protocol", "ford", "--coroutines", "11"],
        &["--protocol", "ford", "--coroutines", "1"],
    ),
    x(
        "FORD 11 / 1 coroutines per thread, TATP",
        Claim::Ratio(3.4),
        "FORD (TOS) Fig. 22: 3.4x",
        FORD_TATP,
        &["--protocol", "ford", "--coroutines", "11"],
        &["--protocol", "ford", "--coroutines", "1"],
    ),
];

const MOTOR_VNUM_2: &[&str] = &[
    "--protocol",
    "motor",
    "--set",
    "motor.oracle=local",
    "--vnum",
    "2",
];
const MOTOR_VNUM_4: &[&str] = &[
    "--protocol",
    "motor",
    "--set",
    "motor.oracle=local",
    "--vnum",
    "4",
];
const MOTOR_VNUM_8: &[&str] = &[
    "--protocol",
    "motor",
    "--set",
    "motor.oracle=local",
    "--vnum",
    "8",
];

/// Motor's KVS for its version-structure ablation (Fig. 10): one pair per transaction,
/// zipf 0.99 with 4 versions, 40-byte values, one slot per bucket (its code's), 80% or 20%
/// of transactions read-write. A million pairs, not the paper's ten: three replicas of ten
/// million CVTs do not fit this machine, and at zipf 0.99 the hot keys decide. One coroutine
/// per thread (40 coordinators): the paper gives no load for Fig. 10, and explains its gaps by
/// round trips, which decide only below saturation; at 280 coordinators the compute node's
/// NIC (80% read-write) or CPU binds, and a chain costs its verbs, not its round trips
/// (docs/src/results.md measures both).
const MOTOR_KVS_RW80: &[&str] = &[
    "--workload",
    "kv",
    "--keys",
    "1000000",
    "--items",
    "1",
    "--theta",
    "0.99",
    "--vnum",
    "4",
    "--slots-per-bucket",
    "1",
    "--read-only-pct",
    "20",
    "--coroutines",
    "1",
];
const MOTOR_KVS_RW20: &[&str] = &[
    "--workload",
    "kv",
    "--keys",
    "1000000",
    "--items",
    "1",
    "--theta",
    "0.99",
    "--vnum",
    "4",
    "--slots-per-bucket",
    "1",
    "--read-only-pct",
    "80",
    "--coroutines",
    "1",
];
const MOTOR_O2N: &[&str] = &[
    "--protocol",
    "motor",
    "--set",
    "motor.oracle=local",
    "--set",
    "motor.versions=o2n",
];
const MOTOR_N2O: &[&str] = &[
    "--protocol",
    "motor",
    "--set",
    "motor.oracle=local",
    "--set",
    "motor.versions=n2o",
];

/// FaRMv2-DM as Motor built it (its section 7.3): FaRMv2's MVCC over one-sided verbs, with
/// new-to-old version chains as long as Motor's CVTs, a dedicated lock round trip, and
/// commits to the backups, then the primaries. Motor's protocol with those three switched
/// (`motor.versions`, `motor.lock_at_commit`, `motor.coalescent_commit`).
const FARMV2_DM: &[&str] = &[
    "--protocol",
    "motor",
    "--set",
    "motor.oracle=local",
    "--set",
    "motor.versions=n2o",
    "--set",
    "motor.lock_at_commit=true",
    "--set",
    "motor.coalescent_commit=false",
];

const MOTOR_EXPERIMENTS: &[Experiment] = &[
    why(
        x(
            "Motor / FORD, TPC-C (24 warehouses)",
            Claim::Ratio(1.98),
            "Motor Fig. 11",
            MOTOR_TPCC,
            MOTOR,
            FORD,
        ),
        shown_by(because(ABORT_STORM), aborts),
    ),
    why(
        x(
            "Motor / FORD, SmallBank",
            Claim::Ratio(1.65),
            "Motor Fig. 11",
            MOTOR_SMALLBANK,
            MOTOR,
            FORD,
        ),
        VERBS_BIND,
    ),
    why(
        x(
            "Motor / FORD, TATP",
            Claim::Ratio(1.14),
            "Motor Fig. 11",
            MOTOR_TATP,
            MOTOR,
            FORD,
        ),
        shown_by(because(FORD_VALIDATES_ONE_ITEM), round_trips_by_type),
    ),
    x(
        "Motor / FaRMv2-DM, TPC-C (24 warehouses)",
        Claim::Ratio(1.443),
        "Motor Fig. 11: +44.3%",
        MOTOR_TPCC,
        MOTOR,
        FARMV2_DM,
    ),
    x(
        "Motor / FaRMv2-DM, SmallBank",
        Claim::Ratio(1.295),
        "Motor Fig. 11: +29.5%",
        MOTOR_SMALLBANK,
        MOTOR,
        FARMV2_DM,
    ),
    x(
        "Motor / FaRMv2-DM, TATP",
        Claim::Ratio(1.189),
        "Motor Fig. 11: +18.9%",
        MOTOR_TATP,
        MOTOR,
        FARMV2_DM,
    ),
    // Ablation: versions per record. TPC-C's default is 4, the paper's peak.
    why(
        on(
            x(
                "Motor vnum 2, StockLevel aborts %, TPC-C (24 warehouses)",
                Claim::Ratio(32.1),
                "Motor Fig. 9: 32.1%",
                MOTOR_TPCC,
                MOTOR_VNUM_2,
                MOTOR_VNUM_2,
            ),
            Metric::AbortPct("StockLevel"),
        ),
        STOCKLEVEL_ONE_VERSION,
    ),
    why(
        on(
            x(
                "Motor vnum 4, StockLevel aborts %, TPC-C (24 warehouses)",
                Claim::Ratio(3.8),
                "Motor Fig. 9: 3.8%",
                MOTOR_TPCC,
                MOTOR_VNUM_4,
                MOTOR_VNUM_4,
            ),
            Metric::AbortPct("StockLevel"),
        ),
        STOCKLEVEL_ONE_VERSION,
    ),
    why(
        x(
            "Motor vnum 4 / 2, TPC-C (24 warehouses)",
            Claim::Above(1.0),
            "Motor Fig. 8: TPC-C peaks at vnum 4",
            MOTOR_TPCC,
            MOTOR_VNUM_4,
            MOTOR_VNUM_2,
        ),
        shown_by(because(VNUM_ONLY_COSTS), bytes),
    ),
    x(
        "Motor vnum 4 / 8, TPC-C (24 warehouses)",
        Claim::Above(1.0),
        "Motor Fig. 8: TPC-C peaks at vnum 4",
        MOTOR_TPCC,
        MOTOR_VNUM_4,
        MOTOR_VNUM_8,
    ),
    // Ablation: CVTs against version chains walked a READ per node (`motor.versions`).
    x(
        "Motor CVT / O2N chains, KVS (zipf 0.99, 80% read-write)",
        Claim::Between(1.7, 2.4),
        "Motor Fig. 10: 1.7-2.4x over read-write 20-80%",
        MOTOR_KVS_RW80,
        MOTOR,
        MOTOR_O2N,
    ),
    x(
        "Motor CVT / N2O chains, KVS (zipf 0.99, 80% read-write)",
        Claim::Between(1.3, 1.6),
        "Motor Fig. 10: 1.3-1.6x over read-write 20-80%",
        MOTOR_KVS_RW80,
        MOTOR,
        MOTOR_N2O,
    ),
    x(
        "Motor CVT / O2N chains, KVS (zipf 0.99, 20% read-write)",
        Claim::Between(1.7, 2.4),
        "Motor Fig. 10: 1.7-2.4x over read-write 20-80%",
        MOTOR_KVS_RW20,
        MOTOR,
        MOTOR_O2N,
    ),
    x(
        "Motor CVT / N2O chains, KVS (zipf 0.99, 20% read-write)",
        Claim::Between(1.3, 1.6),
        "Motor Fig. 10: 1.3-1.6x over read-write 20-80%; the gap smallest here",
        MOTOR_KVS_RW20,
        MOTOR,
        MOTOR_N2O,
    ),
    why(
        on(
            x(
                "Motor CVT / O2N chains p50, KVS (zipf 0.99, 80% read-write)",
                Claim::Ratio(0.402),
                "Motor section 7.3: p50 -59.8% (zipf 0.99, average over read-write ratios)",
                MOTOR_KVS_RW80,
                MOTOR,
                MOTOR_O2N,
            ),
            Metric::P50,
        ),
        because(O2N_MEDIAN),
    ),
    on(
        x(
            "Motor CVT / N2O chains p50, KVS (zipf 0.99, 80% read-write)",
            Claim::Ratio(0.692),
            "Motor section 7.3: p50 -30.8% (zipf 0.99, average over read-write ratios)",
            MOTOR_KVS_RW80,
            MOTOR,
            MOTOR_N2O,
        ),
        Metric::P50,
    ),
    on(
        x(
            "Motor CVT / O2N chains p50, KVS (zipf 0.99, 20% read-write)",
            Claim::Ratio(0.402),
            "Motor section 7.3: p50 -59.8% (zipf 0.99, average over read-write ratios)",
            MOTOR_KVS_RW20,
            MOTOR,
            MOTOR_O2N,
        ),
        Metric::P50,
    ),
    on(
        x(
            "Motor CVT / N2O chains p50, KVS (zipf 0.99, 20% read-write)",
            Claim::Ratio(0.692),
            "Motor section 7.3: p50 -30.8% (zipf 0.99, average over read-write ratios)",
            MOTOR_KVS_RW20,
            MOTOR,
            MOTOR_N2O,
        ),
        Metric::P50,
    ),
];

/// RCC's SmallBank as its code sets it: 100,000 accounts per partition (4), 100 hot per
/// partition, 10% of transactions on them.
const RCC_SMALLBANK: &[&str] = &[
    "--workload",
    "smallbank",
    "--accounts",
    "400000",
    "--hot-accounts",
    "400",
    "--hot-pct",
    "10",
];
/// RCC's YCSB: 10 operations, 5 us of computation, 64-byte records, 20% of the operations
/// writes (here: 20% of the transactions write all ten keys, the others only read); its hot
/// area, 0.1% of the records, takes 10% of the accesses.
const RCC_YCSB: &[&str] = &[
    "--workload",
    "kv",
    "--items",
    "10",
    "--compute",
    "5us",
    "--value-size",
    "64",
    "--read-only-pct",
    "80",
    "--hot-keys",
    "1000",
    "--hot-pct",
    "10",
];
/// The same at high contention (its Fig. 8 and 10: 90% of the accesses on the hot area), 10
/// coroutines per thread.
const RCC_YCSB_HOT: &[&str] = &[
    "--workload",
    "kv",
    "--items",
    "10",
    "--compute",
    "5us",
    "--value-size",
    "64",
    "--read-only-pct",
    "80",
    "--hot-keys",
    "1000",
    "--hot-pct",
    "90",
    "--coroutines",
    "10",
];
/// RCC's TPC-C: NewOrder alone; its warehouse count is not given.
const RCC_TPCC: &[&str] = &[
    "--workload",
    "tpcc",
    "--warehouses",
    "4",
    "--mix",
    "1,0,0,0,0",
];
const NOWAIT: &[&str] = &["--protocol", "nowait"];
const NOWAIT_RPC: &[&str] = &["--protocol", "nowait", "--set", "rcc.hybrid=0"];
const OCC: &[&str] = &["--protocol", "occ"];
const OCC_RPC: &[&str] = &["--protocol", "occ", "--set", "rcc.hybrid=0"];
const MVCC: &[&str] = &["--protocol", "mvcc"];
const MVCC_RPC: &[&str] = &["--protocol", "mvcc", "--set", "rcc.hybrid=0"];
/// RCC's best MVCC hybrid on SmallBank: RPC read and lock; one-sided log, release, commit.
const MVCC_28: &[&str] = &["--protocol", "mvcc", "--set", "rcc.hybrid=28"];
const SUNDIAL: &[&str] = &["--protocol", "sundial"];
const SUNDIAL_RPC: &[&str] = &["--protocol", "sundial", "--set", "rcc.hybrid=0"];
/// RCC's best SUNDIAL hybrid on SmallBank: RPC read and renew; one-sided lock, log, commit.
const SUNDIAL_21: &[&str] = &["--protocol", "sundial", "--set", "rcc.hybrid=21"];
const CALVIN: &[&str] = &["--protocol", "calvin"];

const RCC_EXPERIMENTS: &[Experiment] = &[
    x(
        "one-sided / RPC, NO_WAIT, SmallBank",
        Claim::Above(1.0),
        "RCC Fig. 5",
        RCC_SMALLBANK,
        NOWAIT,
        NOWAIT_RPC,
    ),
    x(
        "one-sided / RPC, OCC, YCSB",
        Claim::Above(1.0),
        "RCC Fig. 5",
        RCC_YCSB,
        OCC,
        OCC_RPC,
    ),
    why(
        x(
            "RPC / one-sided, MVCC, TPC-C NewOrder (4 warehouses)",
            Claim::Above(1.0),
            "RCC Fig. 5: the exception",
            RCC_TPCC,
            MVCC_RPC,
            MVCC,
        ),
        RPC_SAVES_ROUND_TRIPS,
    ),
    x(
        "NO_WAIT / OCC, one-sided, SmallBank",
        Claim::Above(1.0),
        "RCC Fig. 5",
        RCC_SMALLBANK,
        NOWAIT,
        OCC,
    ),
    x(
        "OCC / NO_WAIT, one-sided, YCSB",
        Claim::Above(1.0),
        "RCC Fig. 5",
        RCC_YCSB,
        OCC,
        NOWAIT,
    ),
    why(
        x(
            "MVCC hybrid 28 / RPC, SmallBank",
            Claim::Ratio(1.178),
            "RCC Fig. 5: +17.8%",
            RCC_SMALLBANK,
            MVCC_28,
            MVCC_RPC,
        ),
        MN_CORES,
    ),
    why(
        x(
            "MVCC hybrid 28 / one-sided, SmallBank",
            Claim::Ratio(1.217),
            "RCC Fig. 5: +21.7%",
            RCC_SMALLBANK,
            MVCC_28,
            MVCC,
        ),
        FEW_ROUND_TRIPS_SAVED,
    ),
    why(
        x(
            "SUNDIAL hybrid 21 / RPC, SmallBank",
            Claim::Ratio(1.148),
            "RCC Fig. 5: +14.8%",
            RCC_SMALLBANK,
            SUNDIAL_21,
            SUNDIAL_RPC,
        ),
        MN_CORES,
    ),
    why(
        x(
            "SUNDIAL hybrid 21 / one-sided, SmallBank",
            Claim::Ratio(1.086),
            "RCC Fig. 5: +8.6%",
            RCC_SMALLBANK,
            SUNDIAL_21,
            SUNDIAL,
        ),
        FEW_ROUND_TRIPS_SAVED,
    ),
    why(
        x(
            "SUNDIAL hybrid 21 / RPC, YCSB",
            Claim::Ratio(1.516),
            "RCC Fig. 5: +51.6%",
            RCC_YCSB,
            SUNDIAL_21,
            SUNDIAL_RPC,
        ),
        MN_CORES,
    ),
    why(
        x(
            "SUNDIAL hybrid 21 / one-sided, YCSB",
            Claim::Ratio(1.045),
            "RCC Fig. 5: +4.5%",
            RCC_YCSB,
            SUNDIAL_21,
            SUNDIAL,
        ),
        FEW_ROUND_TRIPS_SAVED,
    ),
    why(
        x(
            "OCC / NO_WAIT, one-sided, YCSB high contention",
            Claim::Below(1.0),
            "RCC Fig. 8: OCC the worst at high contention",
            RCC_YCSB_HOT,
            OCC,
            NOWAIT,
        ),
        shown_by(because(READ_SHARES), aborts),
    ),
    x(
        "SUNDIAL / OCC, one-sided, YCSB high contention",
        Claim::Above(1.0),
        "RCC Fig. 8: SUNDIAL and MVCC least affected",
        RCC_YCSB_HOT,
        SUNDIAL,
        OCC,
    ),
    x(
        "MVCC / OCC, one-sided, YCSB high contention",
        Claim::Above(1.0),
        "RCC Fig. 8: SUNDIAL and MVCC least affected",
        RCC_YCSB_HOT,
        MVCC,
        OCC,
    ),
    why(
        x(
            "CALVIN / NO_WAIT, one-sided, SmallBank",
            Claim::Below(0.1),
            "RCC Fig. 7 against Fig. 5: K against M txns/s",
            RCC_SMALLBANK,
            CALVIN,
            NOWAIT,
        ),
        shown_by(because(EPOCHS), aborts),
    ),
];

/// Scythe's workloads at zipf 0.99, its clients retrying an aborted transaction until it
/// commits (latency from the first attempt).
const SCYTHE_SMALLBANK: &[&str] = &["--workload", "smallbank", "--theta", "0.99", "--retry"];
const SCYTHE_TPCC: &[&str] = &[
    "--workload",
    "tpcc",
    "--warehouses",
    "10",
    "--theta",
    "0.99",
    "--retry",
];
/// YCSB on 1 M pairs of 40-byte values; read:write 3:7 as 30% read-only transactions.
const SCYTHE_YCSB: &[&str] = &[
    "--workload",
    "kv",
    "--theta",
    "0.99",
    "--read-only-pct",
    "30",
    "--retry",
];
const SCYTHE_YCSB_W: &[&str] = &[
    "--workload",
    "kv",
    "--theta",
    "0.99",
    "--read-only-pct",
    "0",
    "--retry",
];
const SCYTHE: &[&str] = &["--protocol", "scythe"];

const SCYTHE_EXPERIMENTS: &[Experiment] = &[
    why(
        x(
            "Scythe / FORD, SmallBank",
            Claim::Ratio(1.15),
            "Scythe Fig. 22(c): +10-20%",
            SCYTHE_SMALLBANK,
            SCYTHE,
            FORD,
        ),
        RETRY_POLICY,
    ),
    why(
        on(
            x(
                "Scythe / FORD p99, SmallBank",
                Claim::Ratio(0.70),
                "Scythe Fig. 22(a): -30%",
                SCYTHE_SMALLBANK,
                SCYTHE,
                FORD,
            ),
            Metric::P99,
        ),
        RETRY_POLICY,
    ),
    why(
        x(
            "Scythe / FORD, TPC-C (10 warehouses)",
            Claim::Ratio(1.15),
            "Scythe Fig. 23(c): +10-20%",
            SCYTHE_TPCC,
            SCYTHE,
            FORD,
        ),
        RETRY_POLICY,
    ),
    why(
        on(
            x(
                "Scythe / FORD p99, TPC-C (10 warehouses)",
                Claim::Ratio(0.55),
                "Scythe Fig. 23(a): -45%",
                SCYTHE_TPCC,
                SCYTHE,
                FORD,
            ),
            Metric::P99,
        ),
        TAIL_CENSORED,
    ),
    why(
        x(
            "Scythe / FORD, YCSB 3:7",
            Claim::Ratio(1.3),
            "Scythe Fig. 24: +20-40%",
            SCYTHE_YCSB,
            SCYTHE,
            FORD,
        ),
        RETRY_POLICY,
    ),
    why(
        x(
            "Scythe / FORD, YCSB write-only",
            Claim::Ratio(1.65),
            "Scythe Fig. 25: +50-80%",
            SCYTHE_YCSB_W,
            SCYTHE,
            FORD,
        ),
        RETRY_POLICY,
    ),
    why(
        on(
            x(
                "Scythe / FORD p50, YCSB write-only",
                Claim::Ratio(0.54),
                "Scythe Fig. 25: up to -46%",
                SCYTHE_YCSB_W,
                SCYTHE,
                FORD,
            ),
            Metric::P50,
        ),
        RETRY_POLICY,
    ),
    // Ablations. The hot-aware policy's two halves: no figure measures them apart, so only
    // the directions its design states (section 4.2).
    x(
        "hot-aware / OCC only, YCSB write-only",
        Claim::Above(1.0),
        "Scythe section 4.2: TOCC for hot records (no figure)",
        SCYTHE_YCSB_W,
        SCYTHE,
        &["--protocol", "scythe", "--set", "scythe.mode=occ"],
    ),
    x(
        "hot-aware / TOCC only, SmallBank uniform",
        Claim::Above(1.0),
        "Scythe section 4.2: OCC for cold records (no figure)",
        &["--workload", "smallbank", "--theta", "0", "--retry"],
        SCYTHE,
        &["--protocol", "scythe", "--set", "scythe.mode=tocc"],
    ),
    on(
        x(
            "takeout lock / CAS lock p50, YCSB write-only",
            Claim::Ratio(0.76),
            "Scythe Fig. 27: -17% to -32% (its lock micro-benchmark)",
            SCYTHE_YCSB_W,
            SCYTHE,
            &["--protocol", "scythe", "--set", "scythe.takeout_lock=false"],
        ),
        Metric::P50,
    ),
    why(
        on(
            x(
                "batched TSO / one FAA per timestamp p50, SmallBank",
                Claim::Below(1.0),
                "Scythe Fig. 28: ~50% lower timestamp latency",
                SCYTHE_SMALLBANK,
                SCYTHE,
                &["--protocol", "scythe", "--set", "scythe.batched_tso=false"],
            ),
            Metric::P50,
        ),
        TSO_QUEUES,
    ),
];

/// What the report says of the setup and of the paper's experiments it leaves out.
pub fn notes(paper: Paper) -> &'static str {
    match paper {
        Paper::Ford => {
            "## Setup and what is left out\n\n\
             Each run as FORD's code ran it: address caches warm (`--warm-caches`), FaRM \
             without one, 22 slots per bucket, NewOrder in FORD's order. The ablations: backup \
             reads (`--set ford.backup_reads=true --set ford.backup_read_tables=checking`, \
             FORD's SmallBank case, Fig. 18, which moves CHECKING's reads to its backup) and \
             coroutines (11 against 1 per thread, Fig. 22, whose peaks are at 5-8), and \
             selective against full flush (Figs. 19-20: `--set flush=true` with and without \
             `--set ford.full_flush=true`, a FLUSH after every WRITE to every replica; one \
             coordinator writing 4 keys of kv on `cx5-100g-papers-pm`, whose FLUSH holds its \
             QP 2 us: the papers measure no flush, so that time is fitted to Fig. 19's \
             throughput, and Fig. 20's p50 row checks the fit).\n"
        }
        Paper::Motor => {
            "## Setup and what is left out\n\n\
             Each run as Motor's code ran it: address caches warm, Motor's slots per bucket \
             per table, NewOrder in FORD's order, Motor's timestamps from the compute \
             process (`--set motor.oracle=local`). The ablation: versions per record \
             (`--vnum`, Fig. 8-9), and CVTs against version chains (`--set \
             motor.versions=o2n|n2o`, Fig. 10: a cost model over the CVT, a READ round trip \
             per chain node walked; KVS with a million pairs, not ten, at one coroutine per \
             thread: the paper gives no load for Fig. 10). FaRMv2-DM (Fig. 11) is Motor's \
             protocol with the three differences the paper names switched on: new-to-old \
             chains as long as the CVTs, a dedicated lock round trip, and commits to the \
             backups before the primaries (`--set motor.versions=n2o --set \
             motor.lock_at_commit=true --set motor.coalescent_commit=false`).\n"
        }
        Paper::Rcc => {
            "## Setup and what is left out\n\n\
             RCC's cluster: 4 nodes x 10 threads x 1 coroutine (Fig. 5; 10 coroutines for \
             the high-contention rows, Fig. 8), 3-way replication; dtxn's memory is passive, \
             so 4 compute nodes and 3 memory nodes, whose CPUs (2 cores, 500 ns per RPC \
             request in the profile) serve the RPC stages. *One-sided* is hybrid code 511, \
             *RPC* code 0. SmallBank as RCC's code sets it (100,000 accounts per partition, \
             100 hot, 10% of transactions on them); YCSB as its paper (10 keys, 5 us of \
             computation, 64-byte values; 20% writes as 20% of transactions writing all ten \
             keys; its hot area, 0.1% of the records, taking 10% of the accesses, 90% at high \
             contention: `--hot-keys 1000 --hot-pct 10|90`); TPC-C NewOrder alone on 4 warehouses (RCC gives no count). \
             RCC's SUNDIAL hybrid for YCSB is not given: 21, its SmallBank one, is used. \
             **Not measured, for want of a switch**: the CAS + READ overlap of one-sided 2PL \
             (+25.1%, RCC section 4.2; dtxn always posts them in one batch), TCP, and the \
             emulated large clusters of Fig. 10 (several QPs per destination).\n"
        }
        Paper::Scythe => {
            "## Setup and what is left out\n\n\
             Scythe's cluster: one compute machine of 16 threads x 8 coroutines (its 128 \
             clients), 3 memory nodes, no replication; every workload at zipf 0.99, clients \
             retrying an aborted transaction with the same inputs until it commits \
             (`--retry`; latency from the first attempt), each retry after a random backoff \
             below 2^n us, up to 100 us (`--retry-backoff`: the paper does not say how its \
             clients retry; retried at once, FORD's retries livelock: each row that misses \
             gives that probe's ratio, above). TPC-C at dtxn's default sizes (300 \
             customers per district, 10,000 items; Scythe's 3,000 and 100,000 are \
             `--spec-sizes`). YCSB's 3:7 as 30% read-only transactions. **Not compared: \
             FaRMv2**, Scythe's other baseline (dtxn's `farm` is FaRM's first, \
             single-version protocol), and RRPC against FaRMv2's RPC (the model has no such \
             RPC baseline). The lock ablation's paper number is from its lock \
             micro-benchmark (64 threads, 25 us holds), ours from YCSB write-only; the TSO's \
             is the timestamp's own latency, ours the transactions'. The hot-aware rows \
             (`--set scythe.mode=occ|tocc`) check the directions its design states; the \
             paper measures no such ablation.\n"
        }
        Paper::Sync => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reproduce::FLAGS;

    /// Every run's options are pairs (an option and its value) but for the flags `merge`
    /// knows, so that `merge` can replace one: an unknown flag would swallow the next option.
    /// And no probe sets `--set`, which would take every `--set` of the run out with it.
    #[test]
    fn every_option_takes_its_value_and_no_probe_replaces_the_switches() {
        let pairs = |opts: &[&str], what: &str| {
            let mut i = 0;
            while i < opts.len() {
                assert!(opts[i].starts_with("--"), "{what}: {:?} at {i}", opts);
                if FLAGS.contains(&opts[i]) {
                    i += 1;
                } else {
                    assert!(
                        opts.get(i + 1).is_some_and(|v| !v.starts_with("--")),
                        "{what}: {} takes a value: {opts:?}",
                        opts[i]
                    );
                    i += 2;
                }
            }
        };
        for paper in [Paper::Ford, Paper::Motor, Paper::Rcc, Paper::Scythe] {
            for e in of(paper) {
                for opts in [e.workload, e.a, e.b] {
                    pairs(opts, e.what);
                }
                if let Some(p) = e.why.as_ref().and_then(|w| w.probe.as_ref()) {
                    pairs(p.args, e.what);
                    assert!(!p.args.contains(&"--set"), "{}", e.what);
                }
            }
        }
    }
}
