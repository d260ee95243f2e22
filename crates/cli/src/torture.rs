//! `dtxn torture`: every protocol x workload x seed on the adversarial simulator, each run's
//! history checked for strict serializability (snapshot isolation for `motor-si`, Motor under
//! `--isolation snapshot`; serializability without real time for SUNDIAL and MVCC, whose
//! timestamp order is not real-time order) and the workload's invariants verified. Stops at the first
//! failure and prints the commands that replay it.

use crate::bench;
use anyhow::{bail, Context, Result};
use dtxn_check::{check_file, Isolation, Options};
use dtxn_txn::Protocol;
use std::process::ExitCode;
use std::time::Instant;

pub const WORKLOADS: [&str; 5] = ["smallbank", "kv", "tatp", "tpcc", "skew"];

#[derive(Debug, clap::Args)]
pub struct TortureArgs {
    /// Seeds per protocol and workload. Every seed `3k + 1` retries an aborted transaction
    /// until it commits (`dtxn bench --retry`).
    #[arg(long, default_value_t = 20)]
    pub seeds: u64,
    /// The first seed (seeds run from it upwards).
    #[arg(long, default_value_t = 1)]
    pub first_seed: u64,
    /// Protocols, comma-separated (default: all, and `motor-si`: Motor with snapshot
    /// isolation, checked against SI; `motor-local`: Motor with its compute process's own
    /// timestamp oracle, one compute node; `farmv2-dm`: Motor's baseline FaRMv2-DM (new-to-old
    /// version chains, locks in a round trip of their own, backups committed before
    /// primaries); `ford-rpc`: FORD with its lock, validate and
    /// commit stages as RPCs served by the memory nodes; `nowait-rpc`: NO_WAIT with every
    /// stage as RPCs; `waitdie-hybrid`: WAIT_DIE with RCC's hybrid code 28; `sundial-hybrid`:
    /// SUNDIAL with RCC's hybrid code 21; `mvcc-hybrid`: MVCC with code 28; `calvin-rpc`:
    /// CALVIN with every stage as RPCs; `scythe-tocc`: Scythe with every read-write attempt in
    /// TOCC; `scythe-cas`: the same with the CAS lock instead of the takeout lock; sundial and
    /// mvcc are checked for serializability, not strict).
    #[arg(long, value_delimiter = ',')]
    pub protocols: Vec<String>,
    /// Workloads, comma-separated (default: smallbank,kv,tatp,tpcc,skew). Every even seed runs
    /// tiny tables (4 accounts, 8 keys, 10 subscribers; TPC-C has one warehouse always, skew 2
    /// pairs of accounts), where conflicts are the rule.
    #[arg(long, value_delimiter = ',')]
    pub workloads: Vec<String>,
    /// Transactions per run (attempts, all coordinators together).
    #[arg(long, default_value_t = 2000)]
    pub txns: u64,
    /// The simulated fabric's hostility, as `dtxn bench --adversary` takes it: a preset
    /// (`default`, `harsh`) and knobs, e.g. `harsh` or `harsh,stall_prob=0.1`.
    #[arg(long, value_name = "PRESET,KNOB=VALUE,...")]
    pub adversary: Option<String>,
    /// Crash a compute node in every run at an instant drawn from the seed, have the
    /// survivors' recovery service recover its coordinators online (leases), and check the run
    /// and the pool all the same (`dtxn bench --faults`; default
    /// `compute=1`). Not for `motor-local`, which runs one compute node (calvin and
    /// calvin-rpc finish a dead coordinator's transaction from its redo log and retire it
    /// from the epochs). `memory=N` (memory-node failover) strikes every variant but
    /// motor-local, with two replicas; the other
    /// protocols run the rest of the plan (no faults if nothing is left). `rejoin=DURATION`
    /// (the failed node comes back blank and is re-replicated) goes to those of them whose
    /// stages are one-sided (not ford-rpc, nowait-rpc, waitdie-hybrid, sundial-hybrid,
    /// mvcc-hybrid, calvin-rpc; calvin copies while its schedule holds every install).
    #[arg(long, value_name = "KNOB=VALUE,...", num_args = 0..=1, default_missing_value = "compute=1")]
    pub faults: Option<String>,
    /// Keep going after a failure, and report all of them at the end.
    #[arg(long)]
    pub keep_going: bool,
    /// Where run histories go (default: the system's temporary directory).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// No progress on stderr (it shows only on a terminal anyway).
    #[arg(long, short)]
    pub quiet: bool,
}

/// The `dtxn bench` arguments of one run: small, contended, hostile, 1 or 2 replicas. Tables
/// are kept small (loading dominates a short run), which also makes conflicts frequent; on
/// even seeds they are tiny (a few accounts or keys), which makes them the rule: write skew
/// and read skew need two transactions on the same few rows at once. Seeds `3k + 1` retry an
/// aborted transaction until it commits (`--retry`).
fn bench_args(w: &str, p: &str, seed: u64, a: &TortureArgs, record: &str) -> Vec<String> {
    let txns = a.txns;
    let (seed, txns) = (seed.to_string(), txns.to_string());
    let mut v = vec![
        "bench",
        "--backend",
        "sim",
        "--workload",
        w,
        "--protocol",
        protocol_of(p),
        "--seed",
        &seed,
        "--txns",
        &txns,
        "--compute-nodes",
        "2",
        "--threads",
        "2",
        "--coroutines",
        "3",
        "--record",
        record,
        "--record-warmup",
        "--verify",
    ];
    // `--faults memory=N`: memory-node failover, for the protocols that have it (with two
    // replicas, so that a table survives); the others (CALVIN among them) run the rest of
    // the plan.
    let faults = a.faults.as_deref().filter(|_| p != LOCAL_MOTOR);
    let memory = faults.is_some_and(|f| f.split(',').any(|k| k.trim().starts_with("memory=")));
    let failover = memory && FAILOVER.contains(&p);
    // `rejoin=` (re-replication of a failed node that comes back) only where the copy works.
    let rejoin = failover && REJOIN.contains(&p);
    let faults: Option<String> = match faults {
        Some(f) if memory && !rejoin => {
            let rest: Vec<&str> = f
                .split(',')
                .filter(|k| {
                    let k = k.trim();
                    !k.starts_with("rejoin=") && (failover || !k.starts_with("memory="))
                })
                .collect();
            (!rest.is_empty()).then(|| rest.join(","))
        }
        f => f.map(str::to_string),
    };
    // Alternate the replication degree, and give SmallBank's transfer-only mix (whose verify
    // also checks that money is conserved) every third seed.
    v.extend_from_slice(if seed.ends_with(['1', '3', '5', '7', '9']) && !failover {
        &["--replicas", "1"]
    } else {
        &["--replicas", "2"]
    });
    if w == "smallbank" && seed.parse::<u64>().is_ok_and(|s| s % 3 == 0) {
        v.extend_from_slice(&["--mix", "transfer"]);
    }
    if seed.parse::<u64>().is_ok_and(|s| s % 3 == 1) {
        // The same transaction again until it commits (WAIT_DIE's keeps its age); every
        // third seed, so odd and even ones alike: one and two replicas, small and tiny tables.
        v.push("--retry");
    }
    if p == SNAPSHOT_MOTOR {
        v.extend_from_slice(&["--isolation", "snapshot"]);
        if w == "skew" {
            // Snapshot isolation admits write skew: the workload's invariant holds only with
            // the conflict materialized.
            v.push("--promote");
        }
    }
    if p == RPC_FORD {
        v.extend_from_slice(&["--set", "ford.rpc=lock,validate,commit"]);
    }
    if p == FARMV2_DM {
        v.extend_from_slice(&[
            "--set",
            "motor.versions=n2o",
            "--set",
            "motor.lock_at_commit=true",
            "--set",
            "motor.coalescent_commit=false",
        ]);
    }
    if p == RPC_NOWAIT {
        v.extend_from_slice(&["--set", "rcc.hybrid=0"]);
    }
    if p == HYBRID_WAITDIE {
        v.extend_from_slice(&["--set", "rcc.hybrid=28"]);
    }
    if p == HYBRID_SUNDIAL {
        v.extend_from_slice(&["--set", "rcc.hybrid=21"]);
    }
    if p == HYBRID_MVCC {
        v.extend_from_slice(&["--set", "rcc.hybrid=28"]);
    }
    if p == RPC_CALVIN {
        v.extend_from_slice(&["--set", "rcc.hybrid=0"]);
    }
    if p == TOCC_SCYTHE {
        v.extend_from_slice(&["--set", "scythe.mode=tocc"]);
    }
    if p == CAS_SCYTHE {
        v.extend_from_slice(&[
            "--set",
            "scythe.mode=tocc",
            "--set",
            "scythe.takeout_lock=false",
        ]);
    }
    if p == LOCAL_MOTOR {
        // The local oracle needs the pool alone: one compute node, as many coordinators.
        v.extend_from_slice(&["--set", "motor.oracle=local", "--compute-nodes", "1"]);
        v.extend_from_slice(&["--threads", "4"]);
    }
    if let Some(adv) = &a.adversary {
        v.extend_from_slice(&["--adversary", adv]);
    }
    if let Some(f) = &faults {
        v.extend_from_slice(&["--faults", f]);
    }
    let tiny = seed.parse::<u64>().is_ok_and(|s| s % 2 == 0);
    v.extend_from_slice(match (w, tiny) {
        ("smallbank", false) => &["--accounts", "2000"],
        ("smallbank", true) => &["--accounts", "4"],
        ("kv", false) => &["--keys", "5000"],
        ("kv", true) => &["--keys", "8"],
        ("tatp", false) => &["--subscribers", "2000"],
        ("tatp", true) => &["--subscribers", "10"],
        ("skew", _) => &["--pairs", "2"],
        _ => &[],
    });
    v.into_iter().map(String::from).collect()
}

/// Motor with snapshot isolation, as torture names it.
const SNAPSHOT_MOTOR: &str = "motor-si";
/// Motor with a local timestamp oracle, as torture names it.
const LOCAL_MOTOR: &str = "motor-local";
/// FaRMv2-DM, Motor's baseline: Motor's protocol over new-to-old version chains, its
/// written records locked in a round trip of their own, its backups committed before its
/// primaries.
const FARMV2_DM: &str = "farmv2-dm";
/// FORD with its lock, validate and commit stages as RPCs to the memory nodes.
const RPC_FORD: &str = "ford-rpc";
/// The variants with memory-node failover (`--faults memory=N`).
const FAILOVER: [&str; 21] = [
    "ford",
    "farm",
    "drtmh",
    RPC_FORD,
    "motor",
    SNAPSHOT_MOTOR,
    FARMV2_DM,
    "sundial",
    HYBRID_SUNDIAL,
    "nowait",
    "waitdie",
    RPC_NOWAIT,
    HYBRID_WAITDIE,
    "occ",
    "mvcc",
    HYBRID_MVCC,
    "scythe",
    TOCC_SCYTHE,
    CAS_SCYTHE,
    "calvin",
    RPC_CALVIN,
];
/// The variants that re-replicate a failed memory node that comes back (`rejoin=`).
const REJOIN: [&str; 15] = [
    "calvin",
    "ford",
    "farm",
    "drtmh",
    "motor",
    "motor-si",
    FARMV2_DM,
    "sundial",
    "nowait",
    "waitdie",
    "occ",
    "mvcc",
    "scythe",
    TOCC_SCYTHE,
    CAS_SCYTHE,
];
/// NO_WAIT with every stage as RPCs (RCC's hybrid code 0).
const RPC_NOWAIT: &str = "nowait-rpc";
/// WAIT_DIE with fetch and lock as RPCs, log, release and commit one-sided (hybrid code 28:
/// read shares taken by the memory nodes' CPUs, exclusive locks released by the NICs).
const HYBRID_WAITDIE: &str = "waitdie-hybrid";
/// SUNDIAL as RCC's best hybrid on SmallBank ran it (code 21): fetch, validate, renew and
/// release as RPCs, lock, log and commit one-sided.
const HYBRID_SUNDIAL: &str = "sundial-hybrid";
/// MVCC as RCC's best hybrid on SmallBank ran it (code 28): fetch and lock as RPCs, log,
/// release and commit one-sided.
const HYBRID_MVCC: &str = "mvcc-hybrid";

/// Whether runs of `p` are checked in real-time order too (SUNDIAL and MVCC order by
/// timestamps, not real time: a transaction may be ordered before one that ended before it
/// began).
fn strict(p: &str) -> bool {
    !matches!(protocol_of(p), "sundial" | "mvcc")
}
/// CALVIN with its dispatch, polls and done words as RPCs (hybrid code 0).
const RPC_CALVIN: &str = "calvin-rpc";

/// Scythe with every read-write attempt in TOCC (its takeout queues always in use).
const TOCC_SCYTHE: &str = "scythe-tocc";
/// Scythe's TOCC with the CAS lock instead of the takeout lock (the paper's ablation).
const CAS_SCYTHE: &str = "scythe-cas";

fn protocol_of(p: &str) -> &str {
    match p {
        TOCC_SCYTHE | CAS_SCYTHE => "scythe",
        SNAPSHOT_MOTOR | LOCAL_MOTOR | FARMV2_DM => "motor",
        RPC_FORD => "ford",
        RPC_NOWAIT => "nowait",
        HYBRID_WAITDIE => "waitdie",
        HYBRID_SUNDIAL => "sundial",
        HYBRID_MVCC => "mvcc",
        RPC_CALVIN => "calvin",
        _ => p,
    }
}

pub fn run(a: TortureArgs) -> Result<ExitCode> {
    let known: Vec<&str> = Protocol::NAMES
        .iter()
        .copied()
        .chain([
            SNAPSHOT_MOTOR,
            LOCAL_MOTOR,
            FARMV2_DM,
            RPC_FORD,
            RPC_NOWAIT,
            HYBRID_WAITDIE,
            HYBRID_SUNDIAL,
            TOCC_SCYTHE,
            CAS_SCYTHE,
            HYBRID_MVCC,
            RPC_CALVIN,
        ])
        .collect();
    let protocols: Vec<String> = if a.protocols.is_empty() {
        known.iter().map(|s| s.to_string()).collect()
    } else {
        a.protocols.clone()
    };
    for p in &protocols {
        if !known.contains(&p.as_str()) {
            bail!("unknown protocol '{p}' (known: {})", known.join(", "));
        }
    }
    let workloads: Vec<String> = if a.workloads.is_empty() {
        WORKLOADS.iter().map(|s| s.to_string()).collect()
    } else {
        a.workloads.clone()
    };
    for w in &workloads {
        if !WORKLOADS.contains(&w.as_str()) {
            bail!("unknown workload '{w}' (known: {})", WORKLOADS.join(", "));
        }
    }
    if a.seeds == 0 || a.txns == 0 {
        bail!("--seeds and --txns must be at least 1");
    }
    bench::at_most("--seeds", a.seeds, 1_000_000)?;
    bench::at_most("--txns", a.txns, 100_000_000)?;
    if a.first_seed.checked_add(a.seeds).is_none() {
        bail!(
            "--first-seed {} + --seeds {} is past the last seed ({})",
            a.first_seed,
            a.seeds,
            u64::MAX
        );
    }
    if let Some(spec) = &a.adversary {
        crate::backend::adversary(spec, 0)?;
    }
    let dir = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    crate::backend::check_new_dir("--dir", &dir)?;
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let started = Instant::now();
    let mut runs = 0;
    let mut failures = Vec::new();
    'all: for p in &protocols {
        for w in &workloads {
            let t0 = Instant::now();
            let mut committed = 0;
            // With --faults: coordinators crashed and recovered, transactions rolled forward.
            let (mut crashed, mut recovered, mut forward, mut online) = (0, 0, 0, 0);
            // With --faults memory=N: view changes (memory nodes failed over), tables promoted.
            let (mut views, mut promoted) = (0, 0);
            let bar = crate::progress::bar(!a.quiet, a.seeds);
            for seed in a.first_seed..a.first_seed + a.seeds {
                bar.set_message(format!("{p} / {w}: seed {seed}"));
                let record = dir.join(format!("dtxn-torture-{p}-{w}-{seed}.jsonl"));
                let record_s = record.display().to_string();
                let argv = bench_args(w, p, seed, &a, &record_s);
                let args = bench::args::parse_bench(argv.iter().map(Into::into).collect())?;
                // A run that panics (a bug of ours) fails like any other, with its replay
                // command, instead of ending the campaign without naming its seed. Unwind
                // safe: each run builds its pool and state afresh, and nothing of a run that
                // panicked is looked at again.
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    bench::run(&args, false)
                }));
                let failure = match run {
                    Err(panic) => Some(format!("the run panicked: {}", panic_message(&*panic))),
                    Ok(Err(e)) => Some(format!("the run failed: {e:#}")),
                    Ok(Ok(r)) => {
                        committed += r.all.committed;
                        if let Some(f) = &r.faults {
                            crashed += f.coordinators_crashed;
                            recovered += f.coordinators_recovered;
                            forward += f.rolled_forward;
                            online += f.recovered_online;
                            views += f.views.len();
                            promoted += f.views.iter().map(|v| v.promoted_tables).sum::<u32>();
                        }
                        let pool = r.faults.as_ref().and_then(|f| {
                            let failed: Vec<String> = [
                                ("pool inconsistent", &f.pool_checks),
                                ("survivors shut out", &f.liveness),
                            ]
                            .iter()
                            .filter(|(_, v)| !v.ok)
                            .map(|(what, v)| format!("{what}: {}", v.checks.join("; ")))
                            .collect();
                            (!failed.is_empty()).then(|| failed.join("; "))
                        });
                        let verify = r
                            .verify
                            .as_ref()
                            .filter(|v| !v.ok)
                            .map(|v| format!("invariants broken: {}", v.checks.join("; ")));
                        let opts = Options {
                            isolation: if p == SNAPSHOT_MOTOR {
                                Isolation::Snapshot
                            } else {
                                Isolation::Serializable
                            },
                            real_time: strict(p),
                        };
                        let report = check_file(&record, opts)
                            .with_context(|| format!("cannot read {record_s}"))?;
                        if !report.ok() {
                            Some(format!("{}\n{report}", report.verdict()))
                        } else {
                            verify.or(pool)
                        }
                    }
                };
                runs += 1;
                bar.inc(1);
                match failure {
                    None => {
                        let _ = std::fs::remove_file(&record);
                    }
                    Some(what) => {
                        bar.suspend(|| {
                            eprintln!("FAILED: {p} / {w} / seed {seed}: {what}");
                            eprintln!(
                                "replay: dtxn {} && dtxn check {record_s}{}{}",
                                argv.join(" "),
                                if p == SNAPSHOT_MOTOR {
                                    " --isolation snapshot"
                                } else {
                                    ""
                                },
                                if !strict(p) { "" } else { " --real-time" }
                            );
                        });
                        failures.push(format!("{p}/{w}/seed {seed}"));
                        if !a.keep_going {
                            break 'all;
                        }
                    }
                }
            }
            bar.finish_and_clear();
            let faults = if a.faults.is_some() {
                let failover = if views > 0 {
                    format!(", {views} view changes ({promoted} tables promoted)")
                } else {
                    String::new()
                };
                format!(
                    ", {crashed} coordinators crashed, {recovered} recovered ({online} online; \
                     {forward} transactions rolled forward){failover}"
                )
            } else {
                String::new()
            };
            println!(
                "{p:<11} {w:<10} seeds {}..{}: {committed} transactions committed{faults}, {:.1} s",
                a.first_seed,
                a.first_seed + a.seeds - 1,
                t0.elapsed().as_secs_f64()
            );
        }
    }
    let secs = started.elapsed().as_secs_f64();
    if failures.is_empty() {
        println!(
            "{runs} passed, 0 failed ({secs:.1} s): every history strict serializable (motor-si: \
             strong snapshot isolation; sundial, mvcc: serializable), every invariant held"
        );
        Ok(ExitCode::SUCCESS)
    } else {
        println!(
            "{} passed, {} failed ({secs:.1} s): {}",
            runs - failures.len(),
            failures.len(),
            failures.join(", ")
        );
        Ok(ExitCode::from(1))
    }
}

/// A panic's message (what `panic!` was given), for the failure report.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".into()
    }
}

#[cfg(test)]
mod tests {
    use super::{bench_args, panic_message, TortureArgs};
    use std::panic::{catch_unwind, panic_any};

    /// Every third seed retries aborted transactions (`--retry`), odd and even ones alike;
    /// the others draw anew.
    #[test]
    fn one_seed_in_three_retries() {
        let a = TortureArgs {
            seeds: 1,
            first_seed: 0,
            protocols: vec![],
            workloads: vec![],
            txns: 2000,
            adversary: None,
            faults: None,
            keep_going: false,
            dir: None,
            quiet: true,
        };
        let retries = |seed| bench_args("kv", "waitdie", seed, &a, "r").contains(&"--retry".into());
        let which: Vec<u64> = (0..9).filter(|&s| retries(s)).collect();
        assert_eq!(which, [1, 4, 7]);
    }

    #[test]
    fn a_panics_message_is_reported_whatever_its_payload() {
        let formatted = catch_unwind(|| panic!("the index is {}", 2)).unwrap_err();
        assert_eq!(panic_message(&*formatted), "the index is 2");
        let literal = catch_unwind(|| panic!("out of bounds")).unwrap_err();
        assert_eq!(panic_message(&*literal), "out of bounds");
        let other = catch_unwind(|| panic_any(7u32)).unwrap_err();
        assert_eq!(panic_message(&*other), "(no message)");
    }
}
