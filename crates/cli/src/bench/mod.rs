//! `dtxn bench`: one workload, one protocol, one backend; throughput, aborts, latency and
//! per-transaction costs, as a table, JSON or CSV.

pub mod args;
pub mod engine;
pub mod report;

use crate::backend::Backend;
use anyhow::{anyhow, bail, Context, Result};
pub use args::{BenchArgs, WorkloadArgs};
use dtxn_fabric::sim::{FaultRates, Faults};
use dtxn_fabric::Topology;
use dtxn_store::{Plan, PoolShape, TableSpec};
use dtxn_txn::membership::LeaseConfig;
use dtxn_txn::{Protocol, TxnConfig, Vcache};
use dtxn_workloads::{kv, skew, smallbank, tatp, tpcc, Workload};
use engine::{Shared, Stop};
use indicatif::{ProgressBar, ProgressStyle};
use report::{BenchReport, ConfigReport};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

/// A workload chosen by name, with its options.
pub enum Chosen {
    SmallBank(smallbank::SmallBank),
    Kv(kv::Kv),
    Tatp(tatp::Tatp),
    Tpcc(tpcc::Tpcc),
    Skew(skew::Skew),
}

impl Chosen {
    /// The tables, laid out for `protocol` (multi-version with `vnum` versions for Motor).
    pub fn tables(&self, protocol: Protocol, vnum: Option<u8>) -> Vec<TableSpec> {
        match self {
            Chosen::SmallBank(w) => w.tables_for(protocol, vnum),
            Chosen::Kv(w) => w.tables_for(protocol, vnum),
            Chosen::Tatp(w) => w.tables_for(protocol, vnum),
            Chosen::Tpcc(w) => w.tables_for(protocol, vnum),
            Chosen::Skew(w) => w.tables_for(protocol, vnum),
        }
    }

    pub fn options_json(&self) -> serde_json::Value {
        use report::Described;
        match self {
            Chosen::SmallBank(w) => w.options_json(),
            Chosen::Kv(w) => w.options_json(),
            Chosen::Tatp(w) => w.options_json(),
            Chosen::Tpcc(w) => w.options_json(),
            Chosen::Skew(w) => w.options_json(),
        }
    }

    pub fn log_slice_bytes(&self) -> u64 {
        match self {
            Chosen::SmallBank(w) => w.log_slice_bytes(),
            Chosen::Kv(w) => w.log_slice_bytes(),
            Chosen::Tatp(w) => w.log_slice_bytes(),
            Chosen::Tpcc(w) => w.log_slice_bytes(),
            Chosen::Skew(w) => w.log_slice_bytes(),
        }
    }
}

/// Builds the workload `a.workload` names, refusing options of other workloads.
/// `txns_hint`: about how many transactions the run will attempt (tables that grow are sized
/// for it).
pub fn choose(a: &WorkloadArgs, txns_hint: u64) -> Result<Chosen> {
    // (flag, given, the workloads it belongs to)
    let given: Vec<(&str, bool, &[&str])> = vec![
        ("--accounts", a.accounts.is_some(), &["smallbank"]),
        ("--hot-accounts", a.hot_accounts.is_some(), &["smallbank"]),
        ("--hot-pct", a.hot_pct.is_some(), &["smallbank", "kv"]),
        ("--hot-keys", a.hot_keys.is_some(), &["kv"]),
        ("--mix", a.mix.is_some(), &["smallbank", "tpcc"]),
        ("--keys", a.keys.is_some(), &["kv"]),
        ("--value-size", a.value_size.is_some(), &["kv"]),
        ("--theta", a.theta.is_some(), &["kv", "smallbank", "tpcc"]),
        ("--read-only-pct", a.read_only_pct.is_some(), &["kv"]),
        ("--items", a.items.is_some(), &["kv"]),
        ("--compute", a.compute.is_some(), &["kv"]),
        ("--subscribers", a.subscribers.is_some(), &["tatp"]),
        ("--pairs", a.pairs.is_some(), &["skew"]),
        ("--promote", a.promote, &["skew"]),
        ("--warehouses", a.warehouses.is_some(), &["tpcc"]),
        ("--spec-sizes", a.spec_sizes, &["tpcc"]),
        ("--tpcc-order", a.tpcc_order.is_some(), &["tpcc"]),
        ("--tpcc-variant", a.tpcc_variant.is_some(), &["tpcc"]),
        (
            "--new-orders-per-district",
            a.new_orders_per_district.is_some(),
            &["tpcc"],
        ),
    ];
    for (flag, v) in [
        ("--accounts", a.accounts),
        ("--hot-accounts", a.hot_accounts),
        ("--keys", a.keys),
    ] {
        at_most(flag, v.unwrap_or(0), MAX_ROWS)?;
    }
    if !dtxn_workloads::NAMES.contains(&a.workload.as_str()) {
        bail!(
            "unknown workload '{}' (valid: {})",
            a.workload,
            dtxn_workloads::NAMES.join(", ")
        );
    }
    if let Some((flag, _, owners)) = given
        .iter()
        .find(|(_, set, owners)| *set && !owners.contains(&a.workload.as_str()))
    {
        bail!(
            "{flag} is an option of {}, not of {}",
            owners.join(" and "),
            a.workload
        );
    }
    let slots = match &a.slots_per_bucket {
        Some(text) => dtxn_workloads::Slots::parse(text)?,
        None => dtxn_workloads::Slots::default(),
    };
    let chosen = match a.workload.as_str() {
        "smallbank" => {
            if a.theta.is_some() && (a.hot_accounts.is_some() || a.hot_pct.is_some()) {
                bail!("smallbank: --theta replaces the hot set (--hot-accounts, --hot-pct)");
            }
            let d = smallbank::Options::default();
            let accounts = a.accounts.unwrap_or(d.accounts);
            let mix = match a.mix.as_deref() {
                None | Some("standard") => smallbank::Mix::Standard,
                Some("transfer") => smallbank::Mix::Transfer,
                Some(other) => {
                    bail!("unknown smallbank mix '{other}' (valid: standard, transfer)")
                }
            };
            Chosen::SmallBank(smallbank::SmallBank::new(smallbank::Options {
                accounts,
                // FORD's proportion (4,000 of 100,000) when only the accounts are given. (Too
                // few accounts are refused by `SmallBank::new`, with one line: no clamp
                // whose bounds cross, which panicked.)
                hot: a
                    .hot_accounts
                    .unwrap_or((accounts * d.hot / d.accounts).max(2).min(accounts)),
                hot_pct: a.hot_pct.unwrap_or(d.hot_pct),
                mix,
                theta: a.theta,
                slots: slots.clone(),
            })?)
        }
        "kv" => {
            if a.theta.is_some() && a.hot_keys.is_some() {
                bail!("kv: --hot-keys replaces zipf (--theta)");
            }
            if a.hot_pct.is_some() && a.hot_keys.is_none() {
                bail!("kv: --hot-pct needs --hot-keys");
            }
            let d = kv::Options::default();
            Chosen::Kv(kv::Kv::new(kv::Options {
                keys: a.keys.unwrap_or(d.keys),
                value_size: a.value_size.unwrap_or(d.value_size),
                theta: a.theta.unwrap_or(d.theta),
                read_only_pct: a.read_only_pct.unwrap_or(d.read_only_pct),
                items: a.items.unwrap_or(d.items),
                compute_ns: a.compute.unwrap_or(d.compute_ns),
                hot_keys: a.hot_keys.unwrap_or(0),
                hot_pct: a.hot_pct.unwrap_or(10),
                slots: slots.clone(),
            })?)
        }
        "skew" => Chosen::Skew(skew::Skew::new(skew::Options {
            pairs: a.pairs.unwrap_or(skew::Options::default().pairs),
            promote: a.promote,
            slots: slots.clone(),
        })?),
        "tatp" => {
            let d = tatp::Options::default();
            Chosen::Tatp(tatp::Tatp::new(tatp::Options {
                subscribers: a.subscribers.unwrap_or(d.subscribers),
                slots: slots.clone(),
            })?)
        }
        _ => {
            let mut o = if a.spec_sizes {
                tpcc::Options::spec()
            } else {
                tpcc::Options::default()
            };
            if let Some(w) = a.warehouses {
                o.warehouses = w;
            }
            if let Some(m) = a.mix.as_deref() {
                o.mix = tpcc_mix(m)?;
            }
            o.theta = a.theta;
            let (orders, payments) = tpcc::Options::room_for(txns_hint, o.warehouses, &o.mix);
            o.new_orders_per_district = a.new_orders_per_district.unwrap_or(orders);
            // Given, the room is the same for both (as it was before there were two).
            o.payments_per_district = a.new_orders_per_district.map_or(Some(payments), |_| None);
            o.slots = slots.clone();
            if a.tpcc_order.as_deref() == Some("ford") {
                o.fetch_order = tpcc::FetchOrder::Ford;
            }
            if a.tpcc_variant.as_deref() == Some("dbx1000") {
                o.variant = tpcc::Variant::Dbx1000;
            }
            Chosen::Tpcc(tpcc::Tpcc::new(o)?)
        }
    };
    slots.check(&chosen.tables(Protocol::Ford, None))?;
    Ok(chosen)
}

/// The most rows a table option (`--accounts`, `--keys`) takes: far more than any machine's
/// memory holds, and little enough that the layout's arithmetic cannot overflow.
pub const MAX_ROWS: u64 = 1 << 40;
/// The most `--txns` takes.
pub const MAX_TXNS: u64 = 1_000_000_000_000;
/// The most coordinators a run has (compute nodes x threads x coroutines).
pub const MAX_COORDINATORS: u64 = 4096;
/// `--log-slice-bytes`' range: a page to a GiB.
pub const LOG_SLICE_BYTES: std::ops::RangeInclusive<u64> = 4096..=1 << 30;
/// The most `--duration` and `--warmup` take: a day.
const MAX_DURATION_NS: u64 = 86_400_000_000_000;

/// Refuses `value` above `max`, in one line naming the option.
pub fn at_most(flag: &str, value: u64, max: u64) -> Result<()> {
    if value > max {
        bail!("{flag} {value}: at most {}", report::thousands(max as f64));
    }
    Ok(())
}

/// `--log-slice-bytes`, if given, in its range.
pub fn check_log_slice(bytes: Option<u64>) -> Result<()> {
    match bytes {
        Some(b) if !LOG_SLICE_BYTES.contains(&b) => bail!(
            "--log-slice-bytes {b}: {} to {} bytes (4K to 1G)",
            LOG_SLICE_BYTES.start(),
            LOG_SLICE_BYTES.end()
        ),
        _ => Ok(()),
    }
}

/// The machine's memory in bytes (Linux: /proc/meminfo), if it can be read.
fn machine_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Refuses a run on this machine (sim, or shm in anonymous memory) whose pool and address
/// caches would not fit in its memory: it would be killed, or swap, long after it started.
pub fn check_fits(a: &BenchArgs, plan: &Plan, coordinators: u32, cfg: &TxnConfig) -> Result<()> {
    let local = match a.kind() {
        Backend::Sim => true,
        Backend::Shm => a.backend.pool.shm_dir.is_none(),
        Backend::Ucx => false,
    };
    let Some(have) = machine_memory().filter(|_| local) else {
        return Ok(());
    };
    let pool = plan.region_bytes.saturating_mul(u64::from(a.memory_nodes));
    // An address-cache entry is a few words; 32 bytes is generous.
    let caches = (cfg.addr_cache_entries as u64)
        .saturating_mul(32)
        .saturating_mul(u64::from(coordinators));
    let need = pool.saturating_add(caches);
    if need > have {
        bail!(
            "this run needs {} of memory ({} memory node(s) x {} of pool{}); this machine has \
             {}: use smaller tables, fewer memory nodes or a smaller --node-memory",
            gib(need),
            a.memory_nodes,
            gib(plan.region_bytes),
            if caches > have / 4 {
                format!(", and {} of address caches", gib(caches))
            } else {
                String::new()
            },
            gib(have)
        );
    }
    Ok(())
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}

/// `--mix` for TPC-C: `standard`, or one weight per transaction type, separated by commas
/// or slashes (`dtxn sweep --vary mix=45/43/4/4/4,1/0/0/0/0`: the sweep splits on commas).
fn tpcc_mix(s: &str) -> Result<[u32; 5]> {
    if s == "standard" {
        return Ok(tpcc::STANDARD_MIX);
    }
    let bad = || {
        anyhow::anyhow!(
            "--mix {s}: a tpcc mix is `standard` or five weights for {} (e.g. 45,43,4,4,4 \
             or 45/43/4/4/4)",
            tpcc::TXN_TYPES.join(", ")
        )
    };
    let w: Vec<u32> = s
        .split([',', '/'])
        .map(|x| x.trim().parse().map_err(|_| bad()))
        .collect::<Result<_>>()?;
    w.try_into().map_err(|_| bad())
}

/// A generous guess of the attempts a run makes: exact with --txns; with a duration, from
/// rates above what FORD reaches here (shm: 100,000 per thread per second; sim: one
/// transaction per 10 us of virtual time per coordinator).
pub fn expected_txns(a: &BenchArgs, topo: Topology) -> u64 {
    let warm = a.warmup_ns();
    match (a.txns, a.kind()) {
        (Some(t), Backend::Shm) => t + (warm as f64 * 1e-4 * f64::from(topo.threads)) as u64,
        (Some(t), Backend::Sim) => t + warm / 10_000 * u64::from(topo.coordinators()),
        (None, Backend::Shm) => {
            ((a.duration_ns() + warm) as f64 * 1e-4 * f64::from(topo.threads)) as u64
        }
        (None, Backend::Sim) => (a.duration_ns() + warm) / 10_000 * u64::from(topo.coordinators()),
        // Every compute process of the run, at shm's generous rate: every process must compute
        // the same plan, so this depends on the shared options only.
        (Some(t), Backend::Ucx) => {
            t + (warm as f64 * 1e-4 * f64::from(topo.threads * topo.compute_nodes)) as u64
        }
        (None, Backend::Ucx) => {
            ((a.duration_ns() + warm) as f64 * 1e-4 * f64::from(topo.threads * topo.compute_nodes))
                as u64
        }
    }
}

/// The pool's shape for these options and this many coordinators.
pub fn shape(a: &BenchArgs, coordinators: u32, log_bytes: u64) -> Result<PoolShape> {
    if a.memory_nodes == 0 {
        bail!("--memory-nodes must be at least 1");
    }
    if a.replicas == 0 {
        bail!("--replicas must be at least 1");
    }
    if a.replicas > usize::from(a.memory_nodes) {
        bail!(
            "--replicas {} needs as many memory nodes; --memory-nodes is {}",
            a.replicas,
            a.memory_nodes
        );
    }
    Ok(PoolShape {
        memory_nodes: a.memory_nodes,
        replicas: a.replicas,
        log_slices: coordinators,
        // A simulated crash's recovery reads the lock journals, which the log slice lends
        // (the log keeps the room it had). Not with --leases: a pool loaded apart
        // (`--load-only`) must have the shape the runs compute.
        log_slice_bytes: a.log_slice_bytes.unwrap_or(if a.faults.is_some() {
            log_bytes + dtxn_txn::LOCK_JOURNAL_TAIL
        } else {
            log_bytes
        }),
        region_bytes: a.node_memory,
    })
}

pub fn topology(a: &BenchArgs) -> Result<Topology> {
    let topo = Topology {
        compute_nodes: a.compute_nodes,
        threads: a.threads(),
        coroutines: a.coroutines(),
    };
    if topo.threads == 0 {
        bail!("--threads must be at least 1");
    }
    if topo.coroutines == 0 {
        bail!("--coroutines must be at least 1");
    }
    if topo.compute_nodes == 0 {
        bail!("--compute-nodes must be at least 1");
    }
    let all = u64::from(topo.compute_nodes) * u64::from(topo.threads) * u64::from(topo.coroutines);
    if all > MAX_COORDINATORS {
        bail!(
            "--compute-nodes {} x --threads {} x --coroutines {} make {all} coordinators; at \
             most {MAX_COORDINATORS}",
            topo.compute_nodes,
            topo.threads,
            topo.coroutines
        );
    }
    if a.kind() == Backend::Ucx && a.backend.compute_node >= topo.compute_nodes {
        bail!(
            "--compute-node {} must be less than --compute-nodes {}",
            a.backend.compute_node,
            topo.compute_nodes
        );
    }
    if a.kind() == Backend::Shm && topo.compute_nodes != 1 {
        bail!("--compute-nodes is a sim option: shm runs one compute node (use --threads)");
    }
    Ok(topo)
}

/// `--retry-backoff`'s default: DBx1000's abort penalty (a random wait below 100 us).
const RETRY_BACKOFF_NS: u64 = 100_000;

/// Runs `dtxn bench` and prints its report.
pub fn main(a: BenchArgs) -> Result<ExitCode> {
    let a = args::with_config(a, "bench")?;
    check_tally_out(&a)?;
    if a.record_warmup && a.record.is_none() {
        bail!("--record-warmup is an option of --record FILE");
    }
    if a.rpc_pack_limit.is_some() && a.kind() != Backend::Sim {
        bail!("--rpc-pack-limit is an option of --backend sim (shm and ucx pack per node)");
    }
    if a.warm_caches && a.kind() == Backend::Ucx {
        bail!("--warm-caches is an option of --backend sim and shm (it reads the loaded pool)");
    }
    for (flag, path) in [
        ("--csv", &a.csv),
        ("--record", &a.record),
        ("--tally-out", &a.tally_out),
    ] {
        if let Some(p) = path {
            check_writable(flag, p)?;
        }
    }
    if a.load_only {
        return load_only(&a);
    }
    let r = run(&a, !a.quiet)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", r.table());
    }
    if let Some(p) = &a.csv {
        std::fs::write(p, r.csv(&[])).with_context(|| format!("cannot write {}", p.display()))?;
    }
    match (&r.verify, &r.faults, &r.leases) {
        (Some(v), _, _) if !v.ok => Ok(ExitCode::from(1)),
        (_, Some(f), _) if !f.history_ok || !f.pool_checks.ok || !f.liveness.ok => {
            Ok(ExitCode::from(1))
        }
        (_, _, Some(l)) if !l.flights_ok => Ok(ExitCode::from(1)),
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// Refuses an output file that cannot be written, before the run rather than after it: a
/// directory, a file without write permission, a directory that does not exist. Leaves no
/// file behind that was not there.
pub fn check_writable(flag: &str, path: &std::path::Path) -> Result<()> {
    let p = path.display();
    if path.is_dir() {
        bail!("{flag} {p}: a directory, not a file");
    }
    if path.exists() {
        std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .with_context(|| format!("{flag} {p}: cannot write"))?;
        return Ok(());
    }
    let parent = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    if !parent.is_dir() {
        bail!("{flag} {p}: directory {} does not exist", parent.display());
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("{flag} {p}: cannot write"))?;
    std::fs::remove_file(path).with_context(|| format!("{flag} {p}: cannot remove the probe"))
}

/// Refuses options that the backend would ignore, and runs that cannot be right.
fn check_backend_options(a: &BenchArgs, topo: Topology) -> Result<()> {
    a.backend.check_options()?;
    if a.kind() != Backend::Ucx {
        if a.load || a.load_only {
            bail!(
                "--load{} is an option of --backend ucx",
                if a.load_only { "-only" } else { "" }
            );
        }
        return Ok(());
    }
    if a.verify && topo.compute_nodes > 1 {
        bail!(
            "--verify needs what every compute process committed, but this process sees only \
             its own: give each compute process --tally-out FILE, then run dtxn verify \
             --tallies FILE,... once all have finished"
        );
    }
    Ok(())
}

/// `--tally-out` is for pools that outlive the process: ucx, or shm in files.
fn check_tally_out(a: &BenchArgs) -> Result<()> {
    if a.tally_out.is_none() {
        return Ok(());
    }
    if a.load_only {
        bail!("--tally-out needs a run: not with --load-only");
    }
    match a.kind() {
        Backend::Ucx => Ok(()),
        Backend::Shm if a.backend.pool.shm_dir.is_some() => Ok(()),
        _ => bail!(
            "--tally-out is for pools that outlive this process (--backend ucx, or shm with \
             --shm-dir): here use --verify"
        ),
    }
}

/// How to load the pool, for errors of compute processes that find it unloaded.
fn load_hint(a: &BenchArgs) -> String {
    format!(
        "run this command once with --load-only, or one compute process with --load, against \
         --memnodes {}",
        a.backend.pool.memnodes.join(",")
    )
}

/// Formats and loads the pool of `plan` on the remote memory nodes.
fn load_remote(a: &BenchArgs, w: &Chosen, plan: &Plan, pool: &dtxn_fabric::Pool) -> Result<()> {
    let fill = |p: &dtxn_fabric::Pool| -> Result<()> {
        match w {
            Chosen::SmallBank(x) => x.load(p, plan, a.backend.seed)?,
            Chosen::Kv(x) => x.load(p, plan, a.backend.seed)?,
            Chosen::Tatp(x) => x.load(p, plan, a.backend.seed)?,
            Chosen::Tpcc(x) => x.load(p, plan, a.backend.seed)?,
            Chosen::Skew(x) => x.load(p, plan, a.backend.seed)?,
        }
        Ok(())
    };
    crate::remote::load(pool, plan, &a.backend.pool.memnodes, fill)
}

/// Versions per record the tables are laid out with: Motor's `--vnum`, or MVCC's version
/// slots (`--set mvcc.slots=K`).
fn versions(a: &BenchArgs, cfg: &TxnConfig) -> Option<u8> {
    if cfg.protocol.copies() > 1 {
        Some(cfg.copies())
    } else {
        a.vnum
    }
}

/// `--load-only`: formats and loads the pool on the memory nodes, and exits.
fn load_only(a: &BenchArgs) -> Result<ExitCode> {
    let topo = topology(a)?;
    check_backend_options(a, topo)?;
    check_numbers(a)?;
    let w = choose(&a.workload, expected_txns(a, topo))?;
    let shape = shape(a, topo.coordinators(), w.log_slice_bytes())?;
    let cfg = a.txn_config()?;
    let plan = Plan::new(&w.tables(cfg.protocol, versions(a, &cfg)), &shape)
        .map_err(|e| anyhow!("{e}"))?;
    let start = Instant::now();
    let pool = a
        .backend
        .pool(usize::from(a.memory_nodes), plan.region_bytes)?;
    let loading = crate::progress::spinner(
        !a.quiet,
        format!("loading {} on the memory nodes", a.workload.workload),
    );
    load_remote(a, &w, &plan, &pool)?;
    loading.finish_and_clear();
    println!(
        "dtxn bench: loaded {} on {} memory node(s) ({} bytes each) in {:.2} s",
        a.workload.workload,
        a.memory_nodes,
        plan.region_bytes,
        start.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

/// The numeric options without a check of their own elsewhere, in their ranges.
fn check_numbers(a: &BenchArgs) -> Result<()> {
    at_most("--txns", a.txns.unwrap_or(0), MAX_TXNS)?;
    for (flag, ns) in [("--duration", a.duration), ("--warmup", a.warmup)] {
        if ns.is_some_and(|ns| ns > MAX_DURATION_NS) {
            bail!("{flag}: at most a day (24h)");
        }
    }
    at_most("--memory-nodes", u64::from(a.memory_nodes), 256)?;
    check_log_slice(a.log_slice_bytes)?;
    Ok(())
}

/// Builds the pool, loads it, runs, verifies: everything but the printing.
pub fn run(a: &BenchArgs, progress: bool) -> Result<BenchReport> {
    let cfg = a.txn_config()?;
    let topo = topology(a)?;
    check_backend_options(a, topo)?;
    if a.duration == Some(0) {
        bail!("--duration must be more than 0");
    }
    if a.txns == Some(0) {
        bail!("--txns must be at least 1");
    }
    if a.retry_backoff.is_some() && !a.retry {
        bail!("--retry-backoff is an option of --retry");
    }
    check_numbers(a)?;
    let faults = match &a.faults {
        Some(spec) => {
            if a.kind() != Backend::Sim {
                bail!("--faults is for --backend sim (crashes are simulated, and replay from the seed)");
            }
            check_recoverable("--faults", &cfg, topo, a.localized_validation)?;
            let (plan, knobs) = faults(spec, a, topo, cfg.protocol)?;
            // Every protocol fails over (`--faults memory=N`): CALVIN since its batches
            // moved to node 0 and its installs finish on the live replicas.
            if !plan.memory_rejoins.is_empty() {
                check_rejoin("--faults rejoin=", &cfg)?;
            }
            Some((plan, knobs))
        }
        None => None,
    };
    let host_leases = match &a.leases {
        Some(spec) => {
            if a.kind() == Backend::Sim {
                bail!("--leases is for shm and ucx (on sim, --faults holds leases and crashes compute nodes)");
            }
            check_recoverable("--leases", &cfg, topo, a.localized_validation)?;
            let h = host_lease_terms(spec)?;
            if h.rejoin {
                if a.kind() != Backend::Ucx {
                    bail!("--leases rejoin=true is for --backend ucx (a memory node restarted blank at its address)");
                }
                if a.replicas < 2 {
                    bail!("--leases rejoin=true: needs --replicas 2 or more (with one replica a memory node down loses its tables: nothing to copy from)");
                }
                check_rejoin("--leases rejoin=true", &cfg)?;
            }
            Some(h)
        }
        None => None,
    };
    if a.wait_memnodes.is_some() {
        if a.kind() != Backend::Ucx {
            bail!("--wait-memnodes is for --backend ucx (memory-node daemons restarted on their files)");
        }
        if a.leases.is_some() {
            bail!("--wait-memnodes: not with --leases (a memory node down outlives the leases it holds: every coordinator would be fenced)");
        }
    }
    let local_oracle = cfg.motor.oracle == "local";
    if !["pool", "local"].contains(&cfg.motor.oracle.as_str()) {
        bail!(
            "--set motor.oracle={}: expected pool or local",
            cfg.motor.oracle
        );
    }
    if local_oracle && (cfg.protocol != Protocol::Motor || topo.compute_nodes != 1) {
        bail!("motor.oracle=local is Motor's, with one compute node (it holds the pool alone)");
    }
    if a.workload.compute.is_some_and(|ns| ns > 0) && a.kind() != Backend::Sim {
        bail!(
            "--compute is for the sim backend, which charges it in virtual time (elsewhere the \
             transaction logic takes what it takes)"
        );
    }
    if a.fabric_time && a.kind() != Backend::Shm {
        bail!(
            "--fabric-time is for the shm backend, which executes the verbs on the calling \
             thread (sim's time is virtual; on ucx the verbs execute on the NIC or memory node)"
        );
    }
    if cfg.flush && a.kind() == Backend::Shm && a.backend.pool.shm_dir.is_none() {
        bail!(
            "--set flush=true on shm needs --shm-dir DIR (the memory nodes' files, written back \
             at each FLUSH): anonymous memory dies with the process"
        );
    }
    if a.localized_validation && (cfg.protocol != Protocol::Ford || topo.compute_nodes != 1) {
        bail!("--localized-validation is FORD's, with one compute node");
    }
    let w = choose(&a.workload, expected_txns(a, topo))?;
    let shape = shape(a, topo.coordinators(), w.log_slice_bytes())?;
    let mut plan = Plan::new(&w.tables(cfg.protocol, versions(a, &cfg)), &shape)
        .map_err(|e| anyhow!("{e}"))?;
    if let Some(k) = faults.as_ref().and_then(|(_, knobs)| knobs.control) {
        plan = plan
            .with_control_replicas(k)
            .map_err(|e| anyhow!("--faults control={k}: {e}"))?;
    }
    check_fits(a, &plan, topo.coordinators(), &cfg)?;
    for name in cfg
        .ford
        .backup_read_tables
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        if !plan.tables.iter().any(|t| t.name == name) {
            let names: Vec<&str> = plan.tables.iter().map(|t| t.name.as_str()).collect();
            bail!(
                "--set ford.backup_read_tables: {} has no table '{name}' (its tables: {})",
                a.workload.workload,
                names.join(", ")
            );
        }
    }
    let remote_loaded = if a.kind() == Backend::Ucx && a.load {
        let pool = a
            .backend
            .pool(usize::from(a.memory_nodes), plan.region_bytes)?;
        let start = Instant::now();
        let loading = crate::progress::spinner(
            progress,
            format!("loading {} on the memory nodes", a.workload.workload),
        );
        load_remote(a, &w, &plan, &pool)?;
        loading.finish_and_clear();
        Some((pool, start.elapsed().as_nanos() as u64))
    } else {
        None
    };
    let ctx = Go {
        a,
        plan: &plan,
        topo,
        cfg,
        progress,
        remote_loaded,
        faults,
        host_leases,
    };
    match w {
        Chosen::SmallBank(x) => go(ctx, x),
        Chosen::Kv(x) => go(ctx, x),
        Chosen::Tatp(x) => go(ctx, x),
        Chosen::Tpcc(x) => go(ctx, x),
        Chosen::Skew(x) => go(ctx, x),
    }
}

/// What `go` runs with.
struct Go<'a> {
    a: &'a BenchArgs,
    plan: &'a Plan,
    topo: Topology,
    cfg: dtxn_txn::TxnConfig,
    progress: bool,
    /// ucx with --load: the pool, loaded, and the time that took.
    remote_loaded: Option<(dtxn_fabric::Pool, u64)>,
    /// `--faults`: the plan drawn from the seed, and the lease terms asked for.
    faults: Option<(Faults, LeaseKnobs)>,
    /// `--leases` (shm, ucx): the terms, checked against the hosts' stated bounds.
    host_leases: Option<HostLeases>,
}

/// `--leases` on a real host: the terms, and the clock skew the guard must also cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostLeases {
    pub terms: LeaseConfig,
    pub skew_ns: u64,
    /// `rejoin=true`: a failed memory node restarted blank at its address is re-replicated.
    pub rejoin: bool,
    /// `probe=DURATION` (with `rejoin=true`): the coordinators of a thread ask the failed
    /// memory nodes whether they are back at most this often between them.
    pub probe_ns: u64,
}

/// `--leases rejoin=true` (ucx): unless `probe=` says otherwise, the coordinators of a thread
/// ask the failed memory nodes whether they are back at most once a second between them.
/// Each ask is a bootstrap: instant when refused (loopback, a live host), up to a second on
/// an unreachable host, blocking the thread's coroutines meanwhile: a shorter interval finds
/// a replacement sooner and costs an unreachable host's threads more of their time.
const UCX_REJOIN_PROBE_NS: u64 = 1_000_000_000;
/// `probe=`'s floor: an ask more often than this would be most of a thread's time when the
/// host is unreachable.
const MIN_REJOIN_PROBE_NS: u64 = 10_000_000;

/// What `--leases` assumes of the hosts unless told: an op's flight plus a preemption between
/// the clock read and the doorbell within 50 ms (threads not pinned, a busy host), a live
/// coordinator never 200 ms without a post, clocks within 1 ms (NTP on a LAN). A deployment
/// with pinned threads and PTP states less and gets FaRM's terms (`flight=1ms,stall=1ms,
/// skew=10us`: a guard of 2 ms, a lease of 12 ms).
const HOST_FLIGHT_NS: u64 = 50_000_000;
const HOST_STALL_NS: u64 = 200_000_000;
const HOST_SKEW_NS: u64 = 1_000_000;

/// The knobs `--leases` takes.
const LEASE_KNOBS: [&str; 7] = [
    "lease", "guard", "flight", "stall", "skew", "rejoin", "probe",
];

/// Parses `--leases KNOB=VALUE,...`: the hosts' bounds, the terms derived from them
/// ([`LeaseConfig::for_fabric`] with the skew added to the flight) or given, and checked
/// against them ([`LeaseConfig::check`]).
pub fn host_lease_terms(spec: &str) -> Result<HostLeases> {
    let (mut flight, mut stall, mut skew) = (HOST_FLIGHT_NS, HOST_STALL_NS, HOST_SKEW_NS);
    let (mut lease, mut guard) = (None, None);
    let mut rejoin = false;
    let mut probe = None;
    for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((knob, value)) = item.split_once('=') else {
            bail!(
                "--leases {spec}: '{item}' is not KNOB=VALUE (knobs: {})",
                LEASE_KNOBS.join(", ")
            );
        };
        if !LEASE_KNOBS.contains(&knob) {
            bail!(
                "--leases: unknown knob '{knob}' (knobs: {})",
                LEASE_KNOBS.join(", ")
            );
        }
        if knob == "rejoin" {
            rejoin = match value {
                "true" => true,
                "false" => false,
                _ => bail!("--leases rejoin={value}: expected true or false"),
            };
            continue;
        }
        let ns = crate::units::parse_duration(value)
            .map_err(|e| anyhow!("--leases {knob}={value}: {e}"))?;
        if ns > MAX_DURATION_NS {
            bail!("--leases {knob}={value}: at most a day (24h)");
        }
        match knob {
            "lease" => lease = Some(ns.max(1)),
            "guard" => guard = Some(ns),
            "flight" => flight = ns,
            "stall" => stall = ns,
            "skew" => skew = ns,
            "probe" => {
                if ns < MIN_REJOIN_PROBE_NS {
                    bail!("--leases probe={value}: at least 10ms (each ask may block the thread for up to a second on an unreachable host)");
                }
                probe = Some(ns);
            }
            _ => bail!(
                "--leases: unknown knob '{knob}' (knobs: {})",
                LEASE_KNOBS.join(", ")
            ),
        }
    }
    let mut l = LeaseConfig::for_fabric(flight + skew, stall);
    if let Some(g) = guard {
        l.guard_ns = g;
        l.lease_ns = l.lease_ns.max(4 * (g + stall));
    }
    if let Some(ns) = lease {
        l.lease_ns = ns;
    }
    l.check(flight + skew, stall)
        .map_err(|e| anyhow!("--leases: {e} (flight {flight} ns plus skew {skew} ns)"))?;
    if probe.is_some() && !rejoin {
        bail!("--leases probe=: how often to ask a failed memory node whether it is back, so only with rejoin=true");
    }
    Ok(HostLeases {
        terms: l,
        skew_ns: skew,
        rejoin,
        probe_ns: probe.unwrap_or(UCX_REJOIN_PROBE_NS),
    })
}

/// `--faults lease=..,guard=..`: lease terms instead of those derived from the fabric.
#[derive(Debug, Clone, Copy, Default)]
struct LeaseKnobs {
    lease_ns: Option<u64>,
    guard_ns: Option<u64>,
    /// `control=K`: the pool's control chain has `K` members.
    control: Option<u8>,
}

/// The lease terms of a `--faults` run on `pool` (sim): derived from the fabric's longest op
/// flight and the adversary's longest stall, or asked for, and checked against both.
fn lease_terms(
    pool: &dtxn_fabric::Pool,
    plan: &Faults,
    knobs: LeaseKnobs,
) -> Result<Option<LeaseConfig>> {
    let dtxn_fabric::Pool::Sim(sim) = pool else {
        return Ok(None);
    };
    let mut c = sim.config().clone();
    c.faults = plan.clone();
    let flight = c.flight_bound_ns();
    let stall = if c.adversary.stall_prob > 0.0 {
        c.adversary.stall_max_ns
    } else {
        0
    };
    let mut l = LeaseConfig::for_fabric(flight, stall);
    if let Some(g) = knobs.guard_ns {
        l.guard_ns = g;
        l.lease_ns = l.lease_ns.max(4 * (g + stall));
    }
    if let Some(ns) = knobs.lease_ns {
        l.lease_ns = ns;
    }
    l.check(flight, stall)
        .map_err(|e| anyhow!("--faults: {e}"))?;
    Ok(Some(l))
}

/// Every loaded record's address, for `--warm-caches`: read from the primaries with the
/// memory nodes' own CPU (the pool is this process's, sim or shm).
fn warm_addresses(pool: &dtxn_fabric::Pool, plan: &dtxn_store::Plan) -> dtxn_store::WarmAddrs {
    let mut warm = dtxn_store::WarmAddrs::new();
    for t in &plan.tables {
        warm.add_table(t.id, dtxn_workloads::record_offsets(pool, t));
    }
    warm
}

fn go<W: Workload + report::Described>(ctx: Go<'_>, w: W) -> Result<BenchReport> {
    let Go {
        a,
        plan,
        topo,
        cfg,
        progress,
        remote_loaded,
        faults,
        host_leases,
    } = ctx;
    let (faults, lease_knobs) = match faults {
        Some((f, k)) => (Some(f), k),
        None => (None, LeaseKnobs::default()),
    };
    // Crashes are checked, not refused: the workload's invariants always.
    let verify = a.verify || faults.is_some();
    let load_start = Instant::now();
    let (mut pool, load_ns) = match remote_loaded {
        Some(loaded) => loaded,
        None => {
            let loading = crate::progress::spinner(
                progress,
                format!(
                    "loading {} ({} MiB on each of {} memory node(s))",
                    w.name(),
                    plan.region_bytes >> 20,
                    a.memory_nodes
                ),
            );
            // A memory node down is for the pool's view to allow (failover), except where
            // the run waits for every node to come back (--wait-memnodes).
            let pool = if a.wait_memnodes.is_some() {
                a.backend
                    .pool(usize::from(a.memory_nodes), plan.region_bytes)?
            } else {
                a.backend
                    .pool_allowing_down(usize::from(a.memory_nodes), plan.region_bytes)?
            };
            if a.kind() == Backend::Ucx {
                // Loaded by another process: only check it is the pool these options describe.
                crate::remote::check_loaded(&pool, plan, &a.backend.pool.memnodes, &load_hint(a))?;
            } else {
                plan.format_pool(&pool)?;
                w.load(&pool, plan, a.backend.seed)?;
            }
            loading.finish_and_clear();
            (pool, load_start.elapsed().as_nanos() as u64)
        }
    };
    if let (true, dtxn_fabric::Pool::Shm(s)) = (cfg.flush, &mut pool) {
        // Persistent memory on shm: FLUSHes msync the memory nodes' files.
        s.set_persist(true)?;
    }
    if cfg.protocol.needs_handlers(&cfg) {
        // Stages that run as RPCs need the memory nodes to serve them (on ucx, the `dtxn
        // memnode` daemons always do).
        pool.set_rpc_handler(std::sync::Arc::new(dtxn_txn::MemoryNodeHandlers));
    }
    let stop = match a.txns {
        Some(txns) => Stop::Txns {
            warmup_ns: a.warmup_ns(),
            txns,
        },
        None => Stop::Duration {
            warmup_ns: a.warmup_ns(),
            measure_ns: a.duration_ns(),
        },
    };
    let bar = if progress {
        progress_bar(stop, a.kind())
    } else {
        ProgressBar::hidden()
    };
    // The history leaves out the warm-up: the transactions that ended before it ended, on a
    // clock every coordinator of the run shares (sim: virtual time from now; shm: the run's
    // start). A ucx compute process records its whole run.
    let record_from = match &pool {
        _ if a.warmup_ns() == 0 || a.record_warmup => None,
        dtxn_fabric::Pool::Sim(sim) => Some(sim.now_ns() + a.warmup_ns()),
        dtxn_fabric::Pool::Shm(_) => Some(a.warmup_ns()),
        _ => None,
    };
    let mut sh = Shared::new(
        stop,
        a.backend.seed,
        verify || a.tally_out.is_some(),
        topo.coordinators(),
        bar.clone(),
        a.record.as_deref().map(|p| (p, record_from)),
    )?;
    sh.fabric_time = a.fabric_time;
    if faults.is_some() {
        sh.keep_history();
    }
    sh.breakdown = a.breakdown;
    let lease = match &faults {
        Some(f) => lease_terms(&pool, f, lease_knobs)?,
        None => None,
    };
    sh.lease = lease.or(host_leases.map(|h| h.terms));
    sh.control_replicas = lease_knobs.control.unwrap_or(1);
    sh.rejoin = faults
        .as_ref()
        .is_some_and(|f| !f.memory_rejoins.is_empty())
        || host_leases.is_some_and(|h| h.rejoin);
    if host_leases.is_some_and(|h| h.rejoin) {
        sh.rejoin_probe_every_ns = host_leases.map_or(UCX_REJOIN_PROBE_NS, |h| h.probe_ns);
    }
    sh.progress_lines = a.progress_lines;
    sh.fence_on_node_down = a.wait_memnodes.is_some();
    sh.retry = a.retry;
    sh.retry_backoff_ns = a.retry_backoff.unwrap_or(RETRY_BACKOFF_NS);
    sh.rpc_pack_limit = a.rpc_pack_limit;
    if a.localized_validation {
        // The pool is this process's alone, which localized validation requires.
        sh.vcache = Some(Arc::new(Vcache::new(1 << 20)));
    }
    if a.warm_caches {
        sh.warm = Some(Arc::new(warm_addresses(&pool, plan)));
    }
    if cfg.motor.oracle == "local" {
        sh.local_oracle = Some(Arc::new(dtxn_txn::LocalOracle::new(topo.coordinators())));
    }
    if cfg.protocol == Protocol::Motor && cfg.motor.start_clock_ns > 0 {
        sh.start_clocks = (0..topo.compute_nodes)
            .map(|_| Arc::new(dtxn_txn::StartClock::new(cfg.motor.start_clock_ns)))
            .collect();
    }
    if cfg.protocol == Protocol::Scythe && cfg.scythe.batched_tso {
        sh.tso_groups = (0..topo.compute_nodes)
            .map(|_| Arc::new(dtxn_txn::TsoGroup::new()))
            .collect();
    }
    let sh = Arc::new(sh);
    let w = Arc::new(w);
    // Register with the pool: alone for localized validation (every writer must share this
    // process's Vcache), shared otherwise. Matters when other processes use the pool (ucx).
    // ucx: this process is one compute node of several; elsewhere one claim is enough.
    let claim_nodes = if a.kind() == Backend::Ucx {
        topo.compute_nodes
    } else {
        1
    };
    // Alone also for a local timestamp oracle: another process's timestamps would collide.
    let alone = a.localized_validation || cfg.motor.oracle == "local";
    let attachment = claim(&mut pool, alone, claim_nodes)?;
    // The faults strike the run only: not the claim, nor recovery after it.
    set_faults(&mut pool, faults.clone().unwrap_or_default());
    let run_start_ns = match &pool {
        dtxn_fabric::Pool::Sim(sim) => sim.now_ns(),
        _ => dtxn_fabric::wall_clock_ns(),
    };
    let out = engine::run(&mut pool, &w, topo, &cfg, &sh);
    set_faults(&mut pool, Faults::default());
    // The fault plan ends with the run (the sim drops what falls after it).
    let run_ns = match &pool {
        dtxn_fabric::Pool::Sim(sim) => sim.now_ns().saturating_sub(run_start_ns),
        _ => 0,
    };
    // Online, the survivors' recovery service recovered the dead coordinators during the run
    // (and its liveness phase). After the run, as a fallback, only those it did not know of:
    // a coordinator that died before its lease was written, or one done before it died.
    let mut online = sh.take_recoveries();
    let views = sh.take_views();
    let joins = sh.take_joins();
    let control = (sh.control_replicas > 1).then(|| (sh.control_replicas, sh.control_counts()));
    if host_leases.is_some_and(|h| h.rejoin) {
        // A memory node re-replicated during the run (here or by another process) is a new
        // incarnation: the checks below reach it by a new connection.
        for n in 0..a.memory_nodes {
            pool.reconnect(n)
                .map_err(|e| anyhow!("reconnecting to memory node {n} after the run: {e}"))?;
        }
    }
    // The pool as the run left it: with failed memory nodes, each table's live replicas
    // (every check below reads those).
    let final_view = committed_view(&pool, control.map_or(1, |(k, _)| k));
    let plan = &plan.in_view(final_view)?;
    let recovered = match (&out, &faults) {
        (Ok(out), Some(_)) => {
            let known: std::collections::HashSet<u32> =
                online.iter().map(|e| e.coordinator).collect();
            let left: Vec<u32> = out
                .crashed
                .iter()
                .chain(&out.fenced)
                .copied()
                .filter(|d| !known.contains(d))
                .collect();
            Some(recover(&mut pool, cfg.protocol, &left).map(|r| (left, r)))
        }
        _ => None,
    };
    // --leases, the run's only compute process: coordinators fenced when no other one of the
    // run was left to recover them (all of them fenced) are recovered here, after the run,
    // and marked recovered, so that the next run's coordinators can join their slots.
    let host_left = match (&out, host_leases) {
        (Ok(out), Some(_)) if topo.compute_nodes == 1 => {
            let known: std::collections::HashSet<u32> =
                online.iter().map(|e| e.coordinator).collect();
            let left: Vec<u32> = out
                .fenced
                .iter()
                .copied()
                .filter(|d| !known.contains(d))
                .collect();
            Some(recover_and_mark(
                &mut pool,
                cfg.protocol,
                &left,
                topo.coordinators(),
            ))
        }
        _ => None,
    };
    // --wait-memnodes: coordinators that found a memory node down stopped there; once the
    // memory nodes answer again, reconnect and recover them from their logs.
    let mut outage = None;
    if let (Some(wait_ns), Ok(o)) = (a.wait_memnodes, &out) {
        if !o.fenced.is_empty() {
            let started = Instant::now();
            pool = reconnect(a, plan, wait_ns)?;
            let first = a.backend.compute_node * topo.threads * topo.coroutines;
            let dead: Vec<u32> = o.fenced.iter().map(|&i| first + i).collect();
            let settled = recover(&mut pool, cfg.protocol, &dead)?;
            outage = Some((o.fenced.clone(), settled, started.elapsed()));
        }
    }
    // The claim word is node 0's alone (the control chain's increment 6): it went with node 0
    // if node 0 failed (a replacement that rejoined holds a blank one).
    if !(final_view.is_failed(0) || final_view.is_joining(0) || final_view.is_rejoined(0)) {
        release_claim(&mut pool, attachment, claim_nodes)?;
    }
    let mut out = out?;
    let mut outage_report = None;
    if let Some((local, settled, waited)) = outage {
        use dtxn_txn::recovery::Recovered;
        let mut r = report::OutageReport {
            coordinators_stopped: local.len() as u32,
            recovered_after_s: waited.as_secs_f64(),
            ..Default::default()
        };
        for (&i, (outcome, locks)) in local.iter().zip(&settled) {
            r.locks_released += u64::from(*locks);
            if commits_in_flight(outcome, out.in_flight[i as usize]) {
                w.count_in_flight(&mut out.tallies[i as usize]);
            }
            match outcome {
                Recovered::RolledForward(_) => r.rolled_forward += 1,
                Recovered::RolledBack(_) => r.rolled_back += 1,
                Recovered::Nothing => {}
            }
        }
        outage_report = Some(r);
    }
    let mut host_after_run = 0;
    if let Some(r) = host_left {
        let r = r?;
        host_after_run = r.len() as u32;
        for (d, (outcome, _)) in r {
            if commits_in_flight(&outcome, out.in_flight[d as usize]) {
                w.count_in_flight(&mut out.tallies[d as usize]);
            }
        }
    }
    let recovered = recovered.transpose()?;
    let mut unrecorded = 0;
    if let Some((left, r)) = &recovered {
        // Recovery's rolled-forward transactions that no coordinator recorded (it crashed
        // before its commit returned) join the history, and what they changed the tallies.
        let mut seen: std::collections::HashSet<u64> =
            sh.kept_history().iter().map(|t| t.txn).collect();
        let settled = online
            .iter()
            .map(|e| (e.coordinator, &e.outcome))
            .chain(left.iter().zip(r).map(|(&d, (o, _))| (d, o)));
        for (dead, outcome) in settled {
            if let dtxn_txn::recovery::Recovered::RolledForward(t) = outcome {
                // (A leader that crashed after reporting is followed by one reporting again.)
                if seen.insert(t.txn) {
                    sh.record_recovered(t);
                    unrecorded += 1;
                    w.count_in_flight(&mut out.tallies[dead as usize]);
                }
            }
        }
    }
    // For the report, a coordinator once: the recovery that marked it (the last), with what
    // an earlier one settled and released (Scythe: a recovery whose tickets still waited
    // their turn runs again, and finds the entry closed and the locks free).
    let mut last = std::collections::HashMap::new();
    let mut locks = std::collections::HashMap::new();
    let mut settled = std::collections::HashMap::new();
    for (k, e) in online.iter().enumerate() {
        last.insert(e.coordinator, k);
        *locks.entry(e.coordinator).or_insert(0) += e.locks_released;
        if e.outcome != dtxn_txn::recovery::Recovered::Nothing {
            settled.insert(e.coordinator, e.outcome.clone());
        }
    }
    let mut k = 0;
    online.retain(|e| {
        k += 1;
        last[&e.coordinator] == k - 1
    });
    for e in &mut online {
        e.locks_released = locks[&e.coordinator];
        if let Some(o) = settled.remove(&e.coordinator) {
            e.outcome = o;
        }
    }
    if host_leases.is_some() {
        // This process's coordinators that were fenced and recovered here: a transaction
        // recovery rolled forward is committed, and joins their tally. (One recovered by
        // another process is that process's to know: see docs/src/recovery.md.)
        let per_node = topo.threads * topo.coroutines;
        let first = a.backend.compute_node * per_node;
        for e in &online {
            let Some(i) = e.coordinator.checked_sub(first).map(|i| i as usize) else {
                continue;
            };
            let in_flight = out.in_flight.get(i).copied().flatten();
            if commits_in_flight(&e.outcome, in_flight) {
                if let Some(t) = out.tallies.get_mut(i) {
                    w.count_in_flight(t);
                }
            }
        }
    }
    let history = sh.kept_history();
    bar.finish_and_clear();
    Arc::try_unwrap(sh)
        .map_err(|_| anyhow!("a coordinator outlived the run"))?
        .finish_record()?;
    let mut tallies = std::mem::take(&mut out.tallies);
    let held_leases = faults.is_some() || host_leases.is_some();
    if let Some(path) = &a.tally_out {
        // One tally for the process: what `dtxn verify` merges with the other processes'.
        let merged =
            dtxn_workloads::merge_all(tallies).ok_or_else(|| anyhow!("no coordinator ran"))?;
        let run = crate::verify::RunId {
            workload: w.name().to_string(),
            options: w.options_json(),
            seed: a.backend.seed,
            protocol: cfg.protocol.name().to_string(),
            vnum: versions(a, &cfg),
            pool: (&plan.shape).into(),
            compute_nodes: topo.compute_nodes,
            threads: topo.threads,
            coroutines: topo.coroutines,
            leases: held_leases,
        };
        crate::verify::TallyFile::new::<W>(run, a.backend.compute_node, &merged)?.write(path)?;
        tallies = vec![merged];
    }
    let verify = if verify {
        // Under leases, 2PL's void read shares stay counted in their words: cleared first.
        let shares = crate::verify::clear_void_shares(&pool, plan, cfg.protocol, held_leases);
        Some(match w.verify(&pool, plan, a.backend.seed, &tallies) {
            Ok(mut checks) => {
                checks.extend(shares);
                match host_leases.filter(|h| h.rejoin) {
                    // Re-replication: every backup (a rejoined node too) holds what its
                    // primary holds, no log slice is pending.
                    Some(h) => {
                        let p = pool_checks(
                            &pool,
                            plan,
                            final_view,
                            cfg.protocol,
                            out.max_flight_ns,
                            Some(h.terms),
                        );
                        checks.extend(p.checks);
                        report::Verdict { ok: p.ok, checks }
                    }
                    None => report::Verdict { ok: true, checks },
                }
            }
            Err(e) => report::Verdict {
                ok: false,
                checks: vec![e.to_string()],
            },
        })
    } else {
        None
    };
    let config = ConfigReport::new(a, &*w, &cfg, topo, plan, stop);
    let mut report = BenchReport::new(config, &*w, &out, verify, load_ns);
    if let (Some(fplan), Some((left, r))) = (&faults, &recovered) {
        let mut f = fault_report(fplan, &out.crashed, (r, unrecorded), &history, &cfg)?;
        online_report(
            &mut f,
            fplan,
            &online,
            left.len() as u32,
            run_start_ns,
            topo,
        );
        f.fenced = out.fenced.len() as u32;
        f.run_ns = run_ns;
        if let Some(l) = lease {
            f.lease_ns = l.lease_ns;
            f.guard_ns = l.guard_ns;
        }
        f.max_flight_ns = out.max_flight_ns;
        f.pool_checks = pool_checks(
            &pool,
            plan,
            final_view,
            cfg.protocol,
            out.max_flight_ns,
            lease,
        );
        view_report(&mut f, fplan, &views, final_view, run_start_ns);
        f.joins = join_lines(Some(fplan), &joins, &views, run_start_ns);
        if let Some((members, c)) = control {
            f.control = Some(report::ControlLine {
                members,
                helped: c.helped,
                unknown: c.unknown,
                dropped: c.dropped,
                reread: c.reread,
            });
        }
        let gone: Vec<u32> = out.crashed.iter().chain(&out.fenced).copied().collect();
        f.liveness = survivors_commit(&f, &history, &gone);
        report.faults = Some(f);
    }
    report.memnode_outage = outage_report;
    if let Some(h) = host_leases {
        let mut l = lease_report(h, &out, &online, run_start_ns);
        l.recovered_after_run = host_after_run;
        l.final_view = final_view.to_string();
        // The coordinators' clock on a real host runs from the run's start.
        l.views = view_lines(&views, 0, |_| None);
        l.joins = join_lines(None, &joins, &views, 0);
        report.leases = Some(l);
    }
    Ok(report)
}

/// What re-replication (`--faults rejoin=`, `--leases rejoin=true`: `option`) needs of the
/// protocol. Every protocol with failover re-replicates. The copy locks records with
/// one-sided CASes (as a writer would: from 0, or from a 2PL share word whose shares are
/// gone; CALVIN, whose installs take no lock, copies while its schedule holds them) and takes
/// the slot bytes for the whole record (and a CVT's attribute bar). What a primary keeps
/// alone beside them (leases, rts words, takeout queues) is rebuilt by the repair when the
/// joined node is promoted, as for any backup.
fn check_rejoin(option: &str, cfg: &TxnConfig) -> Result<()> {
    if !cfg.protocol.rpc_stages(cfg).is_empty() {
        bail!("{option}: not with stages as RPCs (the copy's one-sided lock CASes would not compose with the memory nodes' CPUs')");
    }
    Ok(())
}

/// What `--faults` and `--leases` (`option`) both need: a configuration whose dead
/// coordinators recovery can settle (every protocol's, CALVIN's too), and a membership slot
/// for every coordinator. Not backup reads under localized validation (`lv`): the version
/// cache validates by version alone, so a backup's install that a failure rolled back
/// (restored one count up) validates against the next commit of that version.
fn check_recoverable(option: &str, cfg: &TxnConfig, topo: Topology, lv: bool) -> Result<()> {
    if cfg.ford.backup_reads && lv {
        bail!("{option}: not with --set ford.backup_reads=true and --localized-validation (the version cache validates a backup's read by its version alone, so an install a failure rolled back would validate against the next commit at its version; see docs/src/ford.md)");
    }
    if topo.coordinators() > dtxn_store::layout::MAX_MEMBERS {
        bail!(
            "{option}: at most {} coordinators in the run (the slots of the pool's membership area)",
            dtxn_store::layout::MAX_MEMBERS
        );
    }
    Ok(())
}

/// The fault plan `--faults SPEC` draws from the seed, and the lease terms it asks for.
fn faults(
    spec: &str,
    a: &BenchArgs,
    topo: Topology,
    protocol: dtxn_txn::Protocol,
) -> Result<(Faults, LeaseKnobs)> {
    let mut knobs = LeaseKnobs::default();
    let mut rates = FaultRates {
        compute_crashes: 1,
        ..FaultRates::default()
    };
    // About the run's length in virtual time (at the rate `expected_txns` assumes).
    let mut within = a.warmup_ns()
        + match a.txns {
            Some(t) => t / u64::from(topo.coordinators()).max(1) * 10_000,
            None => a.duration_ns(),
        };
    for item in spec.split(',').map(str::trim) {
        let Some((knob, value)) = item.split_once('=') else {
            bail!(
                "--faults {spec}: '{item}' is not KNOB=VALUE (knobs: {})",
                FAULT_KNOBS.join(", ")
            );
        };
        let bad = |what: &str| anyhow!("--faults {knob}={value}: {what}");
        let duration = || -> Result<u64> {
            let ns = crate::units::parse_duration(value).map_err(|e| bad(&e))?;
            if ns > MAX_DURATION_NS {
                return Err(bad("at most a day (24h)"));
            }
            Ok(ns)
        };
        match knob {
            "compute" => {
                let n: u32 = value
                    .parse()
                    .map_err(|_| bad("a number of compute nodes"))?;
                if n >= topo.compute_nodes {
                    return Err(bad(&format!(
                        "at most {} (--compute-nodes {}: one must survive to recover the others)",
                        topo.compute_nodes - 1,
                        topo.compute_nodes
                    )));
                }
                rates.compute_crashes = n;
            }
            "memory" => {
                let n: u32 = value.parse().map_err(|_| bad("a number of memory nodes"))?;
                if n as usize >= a.replicas {
                    return Err(bad(&format!(
                        "at most {} (--replicas {}: a table whose every replica failed is lost)",
                        a.replicas - 1,
                        a.replicas
                    )));
                }
                if n >= u32::from(a.memory_nodes) {
                    return Err(bad(&format!(
                        "at most {} (--memory-nodes {}: one must hold the pool's control words)",
                        a.memory_nodes - 1,
                        a.memory_nodes
                    )));
                }
                if n > 0 && usize::from(a.memory_nodes) > dtxn_store::view::MAX_VIEW_NODES {
                    return Err(bad(&format!(
                        "at most {} memory nodes (what the pool's view word names), not {}",
                        dtxn_store::view::MAX_VIEW_NODES,
                        a.memory_nodes
                    )));
                }
                rates.memory_failures = n;
                if !spec.contains("compute=") {
                    rates.compute_crashes = 0;
                }
            }
            "rejoin" => rates.memory_rejoin_ns = duration()?.max(1),
            "within" => within = duration()?.max(1),
            "delay_prob" => {
                rates.delay_prob = match value.parse::<f64>() {
                    Ok(p) if (0.0..=1.0).contains(&p) => p,
                    _ => return Err(bad("a probability from 0 to 1")),
                }
            }
            "delay" => rates.delay_max_ns = duration()?,
            "lease" => knobs.lease_ns = Some(duration()?.max(1)),
            "guard" => knobs.guard_ns = Some(duration()?),
            "control" => {
                let max = a.memory_nodes.min(dtxn_store::layout::MAX_REPLICAS as u16);
                knobs.control = match value.parse::<u8>() {
                    Ok(k) if k >= 1 && u16::from(k) <= max => Some(k),
                    _ => {
                        return Err(bad(&format!(
                            "the control chain's members: 1 to {max} (--memory-nodes {})",
                            a.memory_nodes
                        )))
                    }
                };
            }
            _ => bail!(
                "--faults: unknown knob '{knob}' (knobs: {})",
                FAULT_KNOBS.join(", ")
            ),
        }
    }
    if rates.memory_rejoin_ns > 0 && rates.memory_failures == 0 {
        bail!("--faults {spec}: rejoin= brings failed memory nodes back: it needs memory=N");
    }
    // With the control words on K > 1 members, node 0 may fail like any node, unless the
    // protocol keeps state of its own there alone (the timestamp oracle, CALVIN's schedule);
    // and at least one member must survive.
    if let Some(k) = knobs.control.filter(|&k| k > 1) {
        if !protocol.on_node0() {
            rates.node0 = true;
            if rates.memory_failures >= u32::from(k) {
                bail!(
                    "--faults {spec}: memory={} with control={k}: at most {} (node 0 may \
                     fail too, and one of the control chain's members must survive)",
                    rates.memory_failures,
                    k - 1
                );
            }
        }
    }
    let plan = Faults::draw(
        a.backend.seed,
        within,
        topo.compute_nodes,
        a.memory_nodes,
        rates,
    );
    Ok((plan, knobs))
}

/// The knobs `--faults` takes.
const FAULT_KNOBS: [&str; 9] = [
    "compute",
    "memory",
    "rejoin",
    "within",
    "delay_prob",
    "delay",
    "lease",
    "guard",
    "control",
];

fn set_faults(pool: &mut dtxn_fabric::Pool, f: Faults) {
    if let dtxn_fabric::Pool::Sim(sim) = pool {
        sim.set_faults(f);
    }
}

/// Recovers every crashed coordinator from its log, as one survivor would once their leases
/// expired: settles its pending transaction and releases its locks.
fn recover(
    pool: &mut dtxn_fabric::Pool,
    protocol: Protocol,
    dead: &[u32],
) -> Result<Vec<(dtxn_txn::recovery::Recovered, u32)>> {
    let dead = dead.to_vec();
    let r = pool.run(one_coordinator(1), None, move |mut ep| {
        let dead = dead.clone();
        async move {
            let map = dtxn_store::PoolMap::bootstrap(&mut ep)
                .await
                .map_err(|e| format!("recovery: bootstrap: {e}"))?;
            let mut out = Vec::new();
            for d in dead {
                out.push(
                    dtxn_txn::recovery::recover(&mut ep, &map, protocol, d)
                        .await
                        .map_err(|e| format!("recovering coordinator {d}: {e}"))?,
                );
            }
            Ok::<_, String>(out)
        }
    })?;
    r.outputs
        .into_iter()
        .next()
        .flatten()
        .ok_or_else(|| anyhow!("the recovering coordinator did not finish"))?
        .map_err(|e| anyhow!("{e}"))
}

/// `--wait-memnodes`: connects to the memory nodes again, retrying until every one answers
/// (a daemon restarted on its file) or `wait_ns` has passed.
fn reconnect(a: &BenchArgs, plan: &Plan, wait_ns: u64) -> Result<dtxn_fabric::Pool> {
    let deadline = Instant::now() + std::time::Duration::from_nanos(wait_ns);
    loop {
        match a
            .backend
            .pool(usize::from(a.memory_nodes), plan.region_bytes)
        {
            Ok(p) => {
                crate::remote::check_loaded(&p, plan, &a.backend.pool.memnodes, &load_hint(a))?;
                return Ok(p);
            }
            Err(e) if Instant::now() >= deadline => {
                bail!("--wait-memnodes: the memory nodes did not all answer again: {e}")
            }
            // Polls for the daemons' return, a bounded number of times.
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(100)),
        }
    }
}

/// Recovers the fenced coordinators `dead` that nobody recovered during the run (every
/// coordinator of the run fenced), and marks each recovered in the membership area, as the
/// recovery service would have: the run's only compute process, after its run.
fn recover_and_mark(
    pool: &mut dtxn_fabric::Pool,
    protocol: Protocol,
    dead: &[u32],
    members: u32,
) -> Result<Vec<(u32, (dtxn_txn::recovery::Recovered, u32))>> {
    if dead.is_empty() {
        return Ok(Vec::new());
    }
    let settled = recover(pool, protocol, dead)?;
    let marks = dead.to_vec();
    let r = pool.run(one_coordinator(1), None, move |mut ep| {
        let marks = marks.clone();
        async move {
            let copies = match dtxn_store::PoolMap::bootstrap(&mut ep).await {
                Ok(map) => map.control_set(),
                Err(e) => return Err(dtxn_fabric::FabricError::Setup(e.to_string())),
            };
            let m = dtxn_txn::membership::read_members(&mut ep, members, copies).await?;
            let mut counts = dtxn_txn::control::Counts::default();
            dtxn_txn::membership::mark_recovered(&mut ep, copies, &m, &marks, &mut counts).await?;
            Ok(())
        }
    })?;
    match r.outputs.into_iter().next().flatten() {
        Some(Ok(())) => Ok(dead.iter().copied().zip(settled).collect()),
        Some(Err(e)) => Err(anyhow!("marking the fenced coordinators recovered: {e}")),
        None => Err(anyhow!("the marking coordinator did not finish")),
    }
}

/// `--leases` (shm, ucx): the terms, the longest measured flight against `guard - skew`, and
/// what this process's recovery service did, on the wall clock (detection: from the dead
/// lease's expiry to the READ that found it expired; repair: `recover_all`'s run).
fn lease_report<T>(
    h: HostLeases,
    out: &engine::RunOutput<T>,
    online: &[dtxn_txn::membership::RecoveryEvent],
    run_start_ns: u64,
) -> report::LeaseReport {
    let recoveries: Vec<report::RecoveryLine> = online
        .iter()
        .map(|e| report::RecoveryLine::of(e, None, run_start_ns))
        .collect();
    let limit = h.terms.guard_ns.saturating_sub(h.skew_ns);
    report::LeaseReport {
        lease_ns: h.terms.lease_ns,
        guard_ns: h.terms.guard_ns,
        skew_ns: h.skew_ns,
        max_flight_ns: out.max_flight_ns,
        flights_ok: out.max_flight_ns < limit,
        fenced: out.fenced.len() as u32,
        coordinators_recovered: recoveries.len() as u32,
        rolled_forward: recoveries
            .iter()
            .filter(|r| r.outcome == "rolled forward")
            .count() as u32,
        rolled_back: recoveries
            .iter()
            .filter(|r| r.outcome == "rolled back")
            .count() as u32,
        locks_released: recoveries.iter().map(|r| u64::from(r.locks_released)).sum(),
        recoveries,
        recovered_after_run: 0,
        final_view: String::new(),
        views: Vec::new(),
        joins: Vec::new(),
    }
}

/// The recovery service's part of the report: per recovered coordinator, detection (its
/// crash, or its lease's expiry for a fenced one, to the READ that found it dead) and repair
/// (`recover`'s run), on the run's clock (virtual on sim); and their summary.
fn online_report(
    f: &mut report::FaultReport,
    fplan: &Faults,
    online: &[dtxn_txn::membership::RecoveryEvent],
    after_run: u32,
    run_start_ns: u64,
    topo: Topology,
) {
    use dtxn_txn::recovery::Recovered;
    let per_node = topo.threads * topo.coroutines;
    for e in online {
        let node = e.coordinator / per_node.max(1);
        let crashed_ns = fplan
            .compute_crashes
            .iter()
            .find(|c| c.compute_node == node)
            .map(|c| run_start_ns + c.at_ns)
            .filter(|&at| at <= e.expired_ns);
        f.recoveries
            .push(report::RecoveryLine::of(e, crashed_ns, run_start_ns));
    }
    f.recovered_online = online.len() as u32;
    f.recovered_after_run = after_run;
    f.coordinators_recovered += online.len() as u32;
    f.rolled_forward += online
        .iter()
        .filter(|e| matches!(e.outcome, Recovered::RolledForward(_)))
        .count() as u32;
    f.rolled_back += online
        .iter()
        .filter(|e| matches!(e.outcome, Recovered::RolledBack(_)))
        .count() as u32;
    f.locks_released += online
        .iter()
        .map(|e| u64::from(e.locks_released))
        .sum::<u64>();
}

/// Whether recovery's `outcome`, for a coordinator of this process that stopped (fenced) in
/// transaction `in_flight`, commits what that transaction staged in its tally: only a roll
/// forward of that very transaction does. The stop can also cut off the close of an earlier
/// transaction's log entry, one already acknowledged and counted (its release and close are
/// posted after its commit returns, and the next transaction stages its changes before it
/// logs): recovery may roll that one forward, and counting the next one's staged changes
/// then would add a transaction that never committed. (On `sim` the history, which holds
/// every acknowledged transaction, tells them apart instead.)
fn commits_in_flight(outcome: &dtxn_txn::recovery::Recovered, in_flight: Option<u64>) -> bool {
    matches!(outcome, dtxn_txn::recovery::Recovered::RolledForward(t) if Some(t.txn) == in_flight)
}

/// After a `--faults` run (its liveness phase over): no log slice pending (protocols whose
/// commit closes its undo-log entry; Motor's op logs stay pending by design), every replica
/// of every table holding what its primary holds (a multi-version table: each record's
/// newest version, Motor's CVTs keeping only the primary's version tuples in step with
/// its backups' at quiescence), and no op flew longer than
/// the lease's guard (the one assumption the lease argument adds to the fabric contract).
pub(crate) fn pool_checks(
    pool: &dtxn_fabric::Pool,
    plan: &Plan,
    view: dtxn_store::View,
    protocol: Protocol,
    max_flight_ns: u64,
    lease: Option<LeaseConfig>,
) -> report::Verdict {
    let mut fails = Vec::new();
    let mut checks = Vec::new();
    if let Some(l) = lease {
        if max_flight_ns >= l.guard_ns {
            fails.push(format!(
                "an op flew {max_flight_ns} ns, past the lease guard {} ns",
                l.guard_ns
            ));
        } else {
            checks.push(format!(
                "longest op flight {max_flight_ns} ns, within the lease guard {} ns",
                l.guard_ns
            ));
        }
    }
    if protocol != Protocol::Motor {
        let slice_bytes = plan.shape.log_slice_bytes.div_ceil(64) * 64;
        let mut buf = vec![0u8; plan.shape.log_slice_bytes as usize];
        // Per slice, the newest transaction on any node (the one recovery would settle; a
        // node the newest did not log to may keep an older entry whose closing WRITE died
        // with its coordinator, harmlessly).
        let mut pending = 0;
        for s in 0..plan.shape.log_slices {
            let off = plan.log_off + u64::from(s) * slice_bytes;
            let mut newest: Option<(u64, bool, u16)> = None;
            for n in (0..plan.shape.memory_nodes).filter(|&n| !view.is_failed(n)) {
                pool.with_local(n, |m| m.read(off, &mut buf));
                if let Ok(Some(e)) = dtxn_store::log::LogEntry::decode(&buf) {
                    let open = e.status.open();
                    newest = match newest {
                        Some((t, o, at)) if t == e.txn => Some((t, o || open, at)),
                        Some((t, o, at)) if t > e.txn => Some((t, o, at)),
                        _ => Some((e.txn, open, n)),
                    };
                }
            }
            if let Some((txn, true, n)) = newest {
                pending += 1;
                if pending <= 3 {
                    fails.push(format!(
                        "log slice {s}: transaction {txn:#x} pending (memory node {n})"
                    ));
                }
            }
        }
        if pending == 0 {
            checks.push("no log slice pending".into());
        }
    }
    let (mut differ, mut torn) = (0, 0);
    for t in plan.tables.iter().filter(|t| t.mv.is_none()) {
        let codec = t.codec();
        let buckets = t.bucket_count + t.overflow_buckets;
        let read = |n: dtxn_fabric::NodeId| {
            let mut b = vec![0u8; (buckets * t.bucket_bytes) as usize];
            pool.with_local(n, |m| m.read(t.table_off + 64, &mut b));
            b
        };
        // Once every transaction is over and every dead coordinator recovered, no record is
        // torn (lines stamped with different versions) on any replica: the comparison below
        // would find two torn copies equal, both unreadable.
        let mut torn_on = |n: dtxn_fabric::NodeId, bytes: &[u8]| {
            for (b, bucket) in bytes.chunks_exact(t.bucket_bytes as usize).enumerate() {
                for s in 0..t.slots_per_bucket {
                    let mut v = vec![0u8; t.value_size as usize];
                    if codec.decode(t.slot_bytes(bucket, s), &mut v).is_err() {
                        torn += 1;
                        if torn <= 3 {
                            fails.push(format!(
                                "{}: bucket {b} slot {s}: memory node {n} holds a torn record",
                                t.name
                            ));
                        }
                    }
                }
            }
        };
        let primary = read(t.primary());
        torn_on(t.primary(), &primary);
        let backups: Vec<_> = t.backups().iter().map(|&n| (n, read(n))).collect();
        for (n, backup) in &backups {
            torn_on(*n, backup);
        }
        let decode = |bytes: &[u8]| {
            let mut v = vec![0u8; t.value_size as usize];
            codec
                .decode(bytes, &mut v)
                .ok()
                .filter(|h| h.valid)
                .map(|h| (h.key, h.version, v))
        };
        for (n, backup) in backups {
            for b in 0..buckets as usize {
                let at = b * t.bucket_bytes as usize;
                let (pb, bb) = (
                    &primary[at..at + t.bucket_bytes as usize],
                    &backup[at..at + t.bucket_bytes as usize],
                );
                for s in 0..t.slots_per_bucket {
                    let (p, q) = (decode(t.slot_bytes(pb, s)), decode(t.slot_bytes(bb, s)));
                    if p != q {
                        differ += 1;
                        if differ <= 3 {
                            fails.push(format!(
                                "{}: bucket {b} slot {s}: memory node {n} holds {:?}, the \
                                 primary {:?}",
                                t.name,
                                q.map(|x| (x.0, x.1)),
                                p.map(|x| (x.0, x.1))
                            ));
                        }
                    }
                }
            }
        }
    }
    // Multi-version tables: each record's newest version (key, version, value), primary
    // against every backup.
    for t in plan
        .tables
        .iter()
        .filter(|t| t.mv.is_some() && t.replicas.len() > 1)
    {
        let newest = |n| {
            dtxn_workloads::scan_replica(pool, t, n)
                .into_iter()
                .map(|r| (r.key, (r.version, r.value)))
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        let primary = newest(t.primary());
        for &n in t.backups() {
            let backup = newest(n);
            let keys = primary.keys().chain(backup.keys());
            for k in keys.collect::<std::collections::BTreeSet<_>>() {
                let (p, q) = (primary.get(k), backup.get(k));
                if p != q {
                    differ += 1;
                    if differ <= 3 {
                        fails.push(format!(
                            "{} key {k}: memory node {n} holds version {:?}, the primary {:?}",
                            t.name,
                            q.map(|x| x.0),
                            p.map(|x| x.0)
                        ));
                    }
                }
            }
        }
    }
    if differ == 0 {
        checks.push("every backup holds what its primary holds".into());
    }
    if torn == 0 {
        checks.push("no record torn on any replica".into());
    }
    if fails.is_empty() {
        report::Verdict { ok: true, checks }
    } else {
        report::Verdict {
            ok: false,
            checks: fails,
        }
    }
}

/// Attempts begun after the faults settled, none committed, and the virtual time spent in
/// them (at least, and at least half a lease), that make a surviving coordinator shut out
/// ([`survivors_commit`]).
const SHUT_OUT: usize = 8;
const SHUT_OUT_NS: u64 = 5_000_000;

/// Liveness after faults: every coordinator that survived them (not crashed, not fenced)
/// commits once they have settled (every dead coordinator recovered, the first view change
/// active for every coordinator). A survivor that waits on something that will not come
/// keeps trying, each attempt ending at a wait's limit or aborting at once, and never
/// commits: a Scythe ticket owed on a failed node judged alive once the node was back had
/// five of six survivors wait out a quarter lease in each of 160 attempts, aborting all to
/// the end of the run, and history, invariants and pool all passed. So the check fails a
/// survivor whose attempts after the settling commit none, number [`SHUT_OUT`] or more, and
/// take half a lease or more inside them, [`SHUT_OUT_NS`] at least: by then its recovery
/// service has scanned twice. Contention alone loses shorter streaks: NO_WAIT, WAIT_DIE and
/// MVCC on 4 accounts 50 to 170 attempts within a millisecond at times, OCC's NewOrder on
/// TPC-C's one warehouse under the harsh preset 81 attempts in 6 ms, WAIT_DIE there 77 in
/// 5.2 ms (its lease 495 ms): a count alone, and a count with a fixed 5 ms, cried wolf.
fn survivors_commit(
    f: &report::FaultReport,
    history: &[dtxn_check::Txn],
    gone: &[u32],
) -> report::Verdict {
    let recovered = f
        .recoveries
        .iter()
        .map(|r| r.crashed_us.unwrap_or(r.expired_us) + r.detection_us + r.repair_us);
    let failover = f.views.first().map(|v| v.active_us);
    let settled_us = recovered.chain(failover).fold(0.0, f64::max);
    let settled_ns = (settled_us * 1e3) as u64;
    // Per coordinator: attempts, commits, and the time inside the attempts.
    let mut after: std::collections::BTreeMap<u64, (usize, usize, u64)> = Default::default();
    for t in history.iter().filter(|t| t.start >= settled_ns) {
        let e = after.entry(t.session).or_default();
        e.0 += 1;
        e.1 += usize::from(t.status == dtxn_check::Status::Committed);
        e.2 += t.end.saturating_sub(t.start);
    }
    let long = SHUT_OUT_NS.max(f.lease_ns / 2);
    let shut_out: Vec<String> = after
        .iter()
        .filter(|(s, &(tries, commits, inside))| {
            !gone.iter().any(|&g| u64::from(g) == **s)
                && tries >= SHUT_OUT
                && inside >= long
                && commits == 0
        })
        .map(|(s, (tries, _, inside))| {
            format!(
                "coordinator {s}: {tries} attempts begun after the faults settled at \
                 {settled_us:.1} us, {:.1} ms inside them, none committed (shut out)",
                *inside as f64 / 1e6
            )
        })
        .collect();
    if shut_out.is_empty() {
        let mut line = format!(
            "no surviving coordinator shut out after the faults settled ({settled_us:.1} us)"
        );
        // A run that ends before a survivor could spend `long` in attempts cannot show a
        // shut-out whose attempts end fast: say so rather than pass in silence.
        let watched_ns = f.run_ns.saturating_sub(settled_ns);
        if f.run_ns > 0 && watched_ns < long {
            line.push_str(&format!(
                "; but the run ended {:.1} ms after, short of the {:.1} ms a shut-out needs \
                 to be judged",
                watched_ns as f64 / 1e6,
                long as f64 / 1e6
            ));
        }
        report::Verdict {
            ok: true,
            checks: vec![line],
        }
    } else {
        report::Verdict {
            ok: false,
            checks: shut_out,
        }
    }
}

/// Memory-node failover's part of the fault report: per view change, when its node failed,
/// when a survivor changed the view (detection) and when the last coordinator saw it active
/// (repair: every coordinator agreed, the promoted primaries repaired).
fn view_report(
    f: &mut report::FaultReport,
    fplan: &Faults,
    views: &[dtxn_txn::membership::ViewEvent],
    final_view: dtxn_store::View,
    run_start_ns: u64,
) {
    f.planned_memory_failures = fplan
        .memory_crashes
        .iter()
        .filter(|c| c.is_failure())
        .map(|c| (c.node, c.at_ns))
        .collect();
    f.final_view = final_view.to_string();
    f.views = view_lines(views, run_start_ns, |view| {
        fplan
            .memory_crashes
            .iter()
            .filter(|c| c.is_failure() && view.is_failed(c.node))
            .map(|c| run_start_ns + c.at_ns)
            .max()
    });
}

/// Re-replication's part of the fault report: per completed copy, when its node came back
/// (the plan's instant), when the view made it join, the copy, and when the view that made it
/// a full replica was active for every coordinator.
fn join_lines(
    fplan: Option<&Faults>,
    joins: &[dtxn_txn::membership::JoinEvent],
    views: &[dtxn_txn::membership::ViewEvent],
    run_start_ns: u64,
) -> Vec<report::JoinLine> {
    let us = |ns: u64| ns.saturating_sub(run_start_ns) as f64 / 1e3;
    let first_adopted = |v: dtxn_store::View| {
        views
            .iter()
            .filter(|e| e.view == v)
            .map(|e| e.adopted_ns)
            .min()
    };
    let last_active = |v: dtxn_store::View| {
        views
            .iter()
            .filter(|e| e.view == v)
            .map(|e| e.active_ns)
            .max()
    };
    joins
        .iter()
        .map(|j| {
            let nodes: Vec<u16> = j.joining.joining_nodes().collect();
            let back = fplan
                .into_iter()
                .flat_map(|f| &f.memory_rejoins)
                .filter(|r| nodes.contains(&r.node))
                .map(|r| r.at_ns as f64 / 1e3)
                .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
            report::JoinLine {
                nodes,
                back_us: back,
                joining_us: first_adopted(j.joining).map(us),
                joining_active_us: last_active(j.joining).map(us),
                copy_started_us: us(j.copy_started_ns),
                copy_us: j.copy_finished_ns.saturating_sub(j.copy_started_ns) as f64 / 1e3,
                slots: j.copied,
                passes: j.passes,
                by: j.by,
                full_us: last_active(j.joined).map(us),
            }
        })
        .collect()
}

/// One line per view change the coordinators saw: `failed_ns(view)` is when its newest failed
/// node failed, where the run knows it (sim's planned failures; on a real host a memory node
/// dies outside of the run, and detection is not known).
fn view_lines(
    views: &[dtxn_txn::membership::ViewEvent],
    run_start_ns: u64,
    failed_ns: impl Fn(dtxn_store::View) -> Option<u64>,
) -> Vec<report::ViewLine> {
    let us = |ns: u64| ns.saturating_sub(run_start_ns) as f64 / 1e3;
    let mut numbers: Vec<u16> = views.iter().map(|e| e.view.number).collect();
    numbers.sort_unstable();
    numbers.dedup();
    numbers
        .into_iter()
        .map(|n| {
            let of: Vec<_> = views.iter().filter(|e| e.view.number == n).collect();
            let view = of[0].view;
            let failed = failed_ns(view);
            // The first adoption: the changer adopts its view at once (and may have crashed
            // before reporting it).
            let adopted_ns = of.iter().map(|e| e.adopted_ns).min();
            let active_ns = of.iter().map(|e| e.active_ns).max().unwrap_or(0);
            report::ViewLine {
                view: view.to_string(),
                failed_us: failed.map(us),
                changed_us: adopted_ns.map(us),
                detection_us: adopted_ns
                    .zip(failed)
                    .map(|(c, f)| c.saturating_sub(f) as f64 / 1e3),
                repair_us: adopted_ns.map(|c| active_ns.saturating_sub(c) as f64 / 1e3),
                active_us: us(active_ns),
                coordinators: of.len() as u32,
                promoted_tables: of.iter().map(|e| e.repaired).sum(),
            }
        })
        .collect()
}

/// The faults' part of the report: the plan, recovery's work, the history's verdict.
fn fault_report(
    plan: &Faults,
    crashed: &[u32],
    (recovered, unrecorded): (&[(dtxn_txn::recovery::Recovered, u32)], u32),
    history: &[dtxn_check::Txn],
    cfg: &TxnConfig,
) -> Result<report::FaultReport> {
    use dtxn_txn::recovery::Recovered;
    let snapshot =
        cfg.protocol == Protocol::Motor && cfg.motor.isolation == dtxn_txn::Isolation::Snapshot;
    let opts = dtxn_check::Options {
        isolation: if snapshot {
            dtxn_check::Isolation::Snapshot
        } else {
            dtxn_check::Isolation::Serializable
        },
        // SUNDIAL and MVCC serialize in timestamp order, not in real time (as torture
        // checks them).
        real_time: !matches!(cfg.protocol, Protocol::Sundial | Protocol::Mvcc),
    };
    let checked = dtxn_check::check(history, opts).map_err(|e| anyhow!("the history: {e}"))?;
    let count =
        |f: &dyn Fn(&Recovered) -> bool| recovered.iter().filter(|(o, _)| f(o)).count() as u32;
    Ok(report::FaultReport {
        planned_crashes: plan
            .compute_crashes
            .iter()
            .map(|c| (c.compute_node, c.at_ns))
            .collect(),
        coordinators_crashed: crashed.len() as u32,
        coordinators_recovered: recovered.len() as u32,
        rolled_forward: count(&|o| matches!(o, Recovered::RolledForward(_))),
        rolled_forward_unrecorded: unrecorded,
        rolled_back: count(&|o| matches!(o, Recovered::RolledBack(_))),
        locks_released: recovered.iter().map(|(_, n)| u64::from(*n)).sum(),
        history_ok: checked.ok(),
        history: checked.verdict(),
        ..Default::default()
    })
}

fn progress_bar(stop: Stop, backend: Backend) -> ProgressBar {
    let (len, unit) = match stop {
        Stop::Duration {
            warmup_ns,
            measure_ns,
        } => ((warmup_ns + measure_ns) / 1_000_000, "ms"),
        Stop::Txns { txns, .. } => (txns, "txns"),
    };
    let clock = if backend == Backend::Sim && unit == "ms" {
        " (virtual)"
    } else {
        ""
    };
    let bar = ProgressBar::new(len);
    let style = ProgressStyle::with_template(&format!(
        "{{spinner}} {{bar:40}} {{pos}}/{{len}} {unit}{clock} [{{elapsed}}]"
    ));
    if let Ok(s) = style {
        bar.set_style(s);
    }
    bar
}

/// One coordinator on this process's compute node (ucx: `--compute-node K` of
/// `compute_nodes`, which `UcxPool::run` requires; elsewhere 1).
pub(crate) fn one_coordinator(compute_nodes: u32) -> Topology {
    Topology {
        compute_nodes,
        threads: 1,
        coroutines: 1,
    }
}

/// The pool's view after a run (sim, read in place): with `k = 1`, node 0's; else the word at
/// the control chain's tail in the newest view any member holds (a member that failed may
/// read back with its old superblock and view: in persistent-memory mode it keeps what it
/// persisted, and the newest view has it failed).
fn committed_view(pool: &dtxn_fabric::Pool, k: u8) -> dtxn_store::View {
    use dtxn_store::layout::{Superblock, SUPERBLOCK_BYTES, VIEW_OFF};
    use dtxn_store::View;
    let view_at = |n: u16| View::parse(pool.with_local(n, |m| m.read_u64(VIEW_OFF)));
    let member = |n: u16| {
        let mut b = [0u8; SUPERBLOCK_BYTES];
        pool.with_local(n, |m| m.read(0, &mut b));
        Superblock::decode(n, &b).is_ok_and(|sb| sb.control_member)
    };
    let members: Vec<u16> = (0..u16::from(k)).filter(|&n| member(n)).collect();
    let Some(newest) = members.iter().map(|&n| view_at(n)).max_by_key(|v| v.number) else {
        return view_at(0);
    };
    let chain = newest.control_chain(k);
    match chain.iter().rev().find(|n| members.contains(n)) {
        Some(&tail) => view_at(tail),
        None => newest,
    }
}

/// Attaches this process to the pool (see `dtxn_txn::attach`).
fn claim(
    pool: &mut dtxn_fabric::Pool,
    exclusive: bool,
    compute_nodes: u32,
) -> Result<dtxn_txn::Attachment> {
    let r = pool.run(
        one_coordinator(compute_nodes),
        None,
        move |mut ep| async move { dtxn_txn::attach(&mut ep, exclusive).await },
    )?;
    let out = r.outputs.into_iter().next().flatten();
    out.ok_or_else(|| anyhow!("the attaching coordinator did not finish"))?
        .map_err(|e| anyhow!("{e}"))
}

pub(crate) fn release_claim(
    pool: &mut dtxn_fabric::Pool,
    a: dtxn_txn::Attachment,
    compute_nodes: u32,
) -> Result<()> {
    let r = pool.run(
        one_coordinator(compute_nodes),
        None,
        move |mut ep| async move { dtxn_txn::detach(&mut ep, a).await },
    )?;
    match r.outputs.into_iter().next().flatten() {
        Some(Ok(())) => Ok(()),
        Some(Err(e)) => Err(anyhow!("cannot detach from the pool: {e}")),
        None => Err(anyhow!("the detaching coordinator did not finish")),
    }
}

#[cfg(test)]
mod tests {
    use super::pool_checks;
    use dtxn_fabric::sim::{SimConfig, SimPool};
    use dtxn_fabric::Pool;
    use dtxn_store::record::RecordHeader;
    use dtxn_store::{Loader, Plan, PoolShape, TableSpec, View};
    use dtxn_txn::Protocol;

    /// A record whose lines are stamped with two versions, on every replica alike, fails the
    /// pool check (comparing the replicas alone, both unreadable, it passed).
    #[test]
    fn a_torn_record_on_every_replica_fails_the_pool_check() {
        let shape = PoolShape {
            memory_nodes: 2,
            replicas: 2,
            log_slices: 2,
            log_slice_bytes: 4096,
            region_bytes: None,
        };
        let plan = Plan::new(&[TableSpec::new(1, "t", 100, 16)], &shape).unwrap();
        let pool = Pool::Sim(SimPool::new(SimConfig::new(1, 2, plan.region_bytes)).unwrap());
        plan.format_pool(&pool).unwrap();
        let t = plan.table(1).unwrap();
        let mut l = Loader::new(t);
        for k in 0..4u64 {
            l.insert(&pool, k, &[k as u8; 100]).unwrap();
        }
        let check =
            |pool: &Pool| pool_checks(pool, &plan, View::default(), Protocol::Ford, 0, None);
        let clean = check(&pool);
        assert!(clean.ok, "{:?}", clean.checks);
        assert!(clean
            .checks
            .contains(&"no record torn on any replica".to_string()));
        // Key 0's record: line 0 at version 1, line 1 (and on) at version 2.
        let off = dtxn_workloads::record_offsets(&pool, t)
            .into_iter()
            .find(|&(k, _)| k == 0)
            .unwrap()
            .1;
        let mut rec = vec![0u8; t.record_bytes as usize];
        pool.with_local(0, |m| m.read(off, &mut rec));
        let h = t.codec().header(&rec);
        let (mut v1, mut v2) = (rec.clone(), rec.clone());
        let at = |version| RecordHeader { version, ..h };
        t.codec().encode(&at(1), &[1; 100], &mut v1);
        t.codec().encode(&at(2), &[2; 100], &mut v2);
        let mut torn = v2;
        torn[..64].copy_from_slice(&v1[..64]);
        for n in [0, 1] {
            pool.with_local(n, |m| m.write(off, &torn));
        }
        let r = check(&pool);
        assert!(!r.ok);
        assert!(
            r.checks.iter().any(|c| c.contains("holds a torn record")),
            "{:?}",
            r.checks
        );
    }
}

#[cfg(test)]
mod in_flight {
    use super::commits_in_flight;
    use dtxn_txn::recovery::Recovered;

    fn forward(txn: u64) -> Recovered {
        Recovered::RolledForward(dtxn_check::Txn {
            txn,
            session: 0,
            status: dtxn_check::Status::Committed,
            start: 0,
            end: 1,
            reads: Vec::new(),
            writes: Vec::new(),
        })
    }

    /// A coordinator stopped in its transaction 8 (staged, not logged) after transaction 7's
    /// commit returned and before 7's log entry was closed: recovery rolls 7 forward, and 8's
    /// staged changes must not be counted as committed (7's already were).
    #[test]
    fn only_a_roll_forward_of_the_transaction_in_flight_counts_its_staged_changes() {
        assert!(commits_in_flight(&forward(8), Some(8)));
        assert!(!commits_in_flight(&forward(7), Some(8)));
        assert!(!commits_in_flight(&forward(8), None));
        assert!(!commits_in_flight(&Recovered::RolledBack(8), Some(8)));
        assert!(!commits_in_flight(&Recovered::Nothing, Some(8)));
    }
}

#[cfg(test)]
mod liveness {
    use super::{report, survivors_commit, SHUT_OUT, SHUT_OUT_NS};
    use dtxn_check::{Status, Txn};

    /// `n` attempts of coordinator `session` from `start_ns` on, each `each_ns` long (back to
    /// back), `commits` of them committed.
    fn attempts(session: u64, start_ns: u64, n: usize, commits: usize, each_ns: u64) -> Vec<Txn> {
        (0..n as u64)
            .map(|i| Txn {
                txn: session << 32 | i,
                session,
                status: if i < commits as u64 {
                    Status::Committed
                } else {
                    Status::Aborted
                },
                start: start_ns + i * each_ns,
                end: start_ns + (i + 1) * each_ns,
                reads: Vec::new(),
                writes: Vec::new(),
            })
            .collect()
    }

    /// A survivor that begins `SHUT_OUT` attempts after the faults settled, spends half a
    /// lease inside them (here `SHUT_OUT_NS`) and commits none fails the check, named; one
    /// that commits, one with fewer attempts, one whose many attempts abort in a burst
    /// (contention), one just short of the time, one that crashed, and attempts before the
    /// settling (a failover's aborts) pass. Under the harsh preset's lease the same streaks
    /// are all short of half of it; under a lease below 10 ms the time asked is still
    /// `SHUT_OUT_NS`.
    #[test]
    fn a_survivor_that_never_commits_after_the_faults_settled_fails_the_check() {
        let mut f = report::FaultReport {
            recoveries: vec![report::RecoveryLine {
                coordinator: 3,
                crashed_us: Some(100.0),
                detection_us: 50.0,
                repair_us: 10.0,
                ..Default::default()
            }],
            views: vec![report::ViewLine {
                active_us: 1000.0,
                ..Default::default()
            }],
            lease_ns: 2 * SHUT_OUT_NS,
            ..Default::default()
        };
        let at = 1_000_000;
        let slow = SHUT_OUT_NS / SHUT_OUT as u64;
        let mut h = attempts(0, at, 80, 1, slow);
        h.extend(attempts(1, 0, 500, 0, 300)); // all before the view was active
        h.extend(attempts(2, at, SHUT_OUT - 1, 0, 2 * slow));
        h.extend(attempts(3, at, 90, 0, slow)); // crashed
        h.extend(attempts(5, at, 170, 0, 4_000)); // a burst of contention
        h.extend(attempts(6, at, 2 * SHUT_OUT, 0, slow / 2 - 1)); // just short of 5 ms
        let v = survivors_commit(&f, &h, &[3]);
        assert!(v.ok, "{v:?}");
        assert_eq!(
            v.checks,
            ["no surviving coordinator shut out after the faults settled (1000.0 us)"]
        );
        // A run that ended too soon after the settling says so.
        f.run_ns = at + SHUT_OUT_NS / 2;
        assert_eq!(
            survivors_commit(&f, &h, &[3]).checks,
            [
                "no surviving coordinator shut out after the faults settled (1000.0 us); but \
              the run ended 2.5 ms after, short of the 5.0 ms a shut-out needs to be judged"
            ]
        );
        f.run_ns = at + SHUT_OUT_NS;
        assert!(!survivors_commit(&f, &h, &[3]).checks[0].contains("short of"));
        f.run_ns = 0;
        h.extend(attempts(4, at - slow, SHUT_OUT + 1, 0, slow));
        let shut_out = [format!(
            "coordinator 4: {SHUT_OUT} attempts begun after the faults settled at 1000.0 us, \
             5.0 ms inside them, none committed (shut out)"
        )];
        let v = survivors_commit(&f, &h, &[3]);
        assert!(!v.ok);
        assert_eq!(v.checks, shut_out);
        f.lease_ns = 495_000_000;
        assert!(survivors_commit(&f, &h, &[3]).ok);
        f.lease_ns = SHUT_OUT_NS / 5;
        assert_eq!(survivors_commit(&f, &h, &[3]).checks, shut_out);
    }
}
