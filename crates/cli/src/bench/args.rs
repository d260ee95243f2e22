//! `dtxn bench`'s options: flags, a TOML config file that can give any of them, protocol
//! switches (`--set key=value`), and the workload options.

use crate::backend::{Backend, BackendArgs};
use anyhow::{anyhow, bail, Context, Result};
use clap::builder::PossibleValuesParser;
use clap::{CommandFactory, FromArgMatches, Parser};
use dtxn_txn::{Isolation, Protocol, TxnConfig};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Which workload, with which options.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct WorkloadArgs {
    /// Benchmark (skew: pairs of accounts under 0 <= x + y <= 8, built to expose write skew
    /// and read skew).
    #[arg(long, default_value = "smallbank", value_parser = PossibleValuesParser::new(dtxn_workloads::NAMES))]
    pub workload: String,

    /// smallbank: accounts, 2 to 2^40 [default: 100000, FORD's].
    #[arg(long, help_heading = "SmallBank")]
    pub accounts: Option<u64>,
    /// smallbank: hot accounts, 2 to --accounts [default: 4% of --accounts, FORD's 4000 of
    /// 100000].
    #[arg(long, help_heading = "SmallBank")]
    pub hot_accounts: Option<u64>,
    /// smallbank: percentage of transactions on hot accounts [default: 90, FORD's]. kv, with
    /// --hot-keys: percentage of key draws on the hot keys [default: 10, RCC's].
    #[arg(long, help_heading = "SmallBank")]
    pub hot_pct: Option<u32>,
    /// smallbank: `standard` (all six) or `transfer` (money-conserving only). tpcc:
    /// `standard` (45,43,4,4,4) or five weights for NewOrder, Payment, OrderStatus, Delivery
    /// and StockLevel, e.g. `0,0,0,0,1` for StockLevel alone [default: standard].
    #[arg(long, help_heading = "SmallBank and TPC-C")]
    pub mix: Option<String>,

    /// kv: keys, at least --items [default: 1000000, FORD's].
    #[arg(long, help_heading = "kv")]
    pub keys: Option<u64>,
    /// kv: value size in bytes [default: 40, FORD's].
    #[arg(long, help_heading = "kv")]
    pub value_size: Option<usize>,
    /// kv: zipf theta of the keys, 0 (uniform) or more [default: 0.99, YCSB's]. smallbank:
    /// accounts drawn zipf(theta) instead of the hot set. tpcc: NewOrder's items drawn
    /// zipf(theta) instead of NURand (Scythe's skew: 0.99) [default: off].
    #[arg(long, help_heading = "kv, SmallBank and TPC-C")]
    pub theta: Option<f64>,
    /// kv: draw keys from a hot set of this many keys (`0..N`) instead of zipf: each key with
    /// probability --hot-pct among them, else among the others (RCC's YCSB: 0.1% of the keys).
    #[arg(long, help_heading = "kv")]
    pub hot_keys: Option<u64>,
    /// kv: percentage of read-only transactions [default: 75].
    #[arg(long, help_heading = "kv")]
    pub read_only_pct: Option<u32>,
    /// kv: keys per transaction [default: 4].
    #[arg(long, help_heading = "kv")]
    pub items: Option<usize>,
    /// kv, sim only: CPU time each transaction spends between its reads and its commit, in
    /// virtual time, e.g. `5us` (RCC's YCSB) [default: 0].
    #[arg(long, help_heading = "kv", value_name = "DURATION", value_parser = parse_duration)]
    pub compute: Option<u64>,

    /// tatp: subscribers, 1 to 2^40 [default: 100000, FORD's].
    #[arg(long, help_heading = "TATP")]
    pub subscribers: Option<u64>,

    /// skew: pairs of accounts (default 4).
    #[arg(long, help_heading = "Skew")]
    pub pairs: Option<u64>,
    /// skew: withdrawals and deposits also write the account they only read, unchanged
    /// (snapshot isolation, which admits write skew, then keeps the invariant too).
    #[arg(long, help_heading = "Skew")]
    pub promote: bool,

    /// tpcc: warehouses [default: 1].
    #[arg(long, help_heading = "TPC-C")]
    pub warehouses: Option<u32>,
    /// tpcc: the spec's sizes (3,000 customers per district, 100,000 items and stock per
    /// warehouse) instead of FORD's reduced ones (300, 10,000).
    #[arg(long, help_heading = "TPC-C")]
    pub spec_sizes: bool,
    /// tpcc: orders (and HISTORY rows) each district can take during the run (the tables' room
    /// for inserts; default: what the run needs at the rates FORD reaches on shm, for the mix).
    #[arg(long, help_heading = "TPC-C")]
    pub new_orders_per_district: Option<u64>,
    /// tpcc: how NewOrder fetches its rows: `batched` (all in one batch) or `ford` (FORD's and
    /// Motor's code: warehouse, district and customer first, then each order line's item and
    /// stock in a round trip of its own) [default: batched].
    #[arg(long, help_heading = "TPC-C", value_name = "ORDER", value_parser = ["batched", "ford"])]
    pub tpcc_order: Option<String>,
    /// tpcc: `spec` (every row the spec writes) or `dbx1000` (only what DBx1000's TPC-C
    /// writes, to compare equal work with it: NewOrder and Payment without their inserts,
    /// without the bad-credit C_DATA update and the 1% rollback; needs `--mix N,P,0,0,0`)
    /// [default: spec].
    #[arg(long, help_heading = "TPC-C", value_name = "VARIANT", value_parser = ["spec", "dbx1000"])]
    pub tpcc_variant: Option<String>,

    /// Slots per hash bucket: `N` for every table, `NAME=N,...` for some (names as `dtxn
    /// layout` prints them), or both, e.g. `22` (FORD's code: a bucket READ then returns 22
    /// records) [default: 4].
    #[arg(long, value_name = "N|NAME=N,...")]
    pub slots_per_bucket: Option<String>,
}

/// Options of `dtxn bench`. Every one can also come from `--config FILE.toml` (`threads = 4`,
/// `workload = "tpcc"`, a `[txn]` table of protocol switches); the command line wins.
/// Bench's default backend is shm (real memory).
#[derive(Debug, Clone, clap::Args)]
#[command(mut_arg("backend", |a| a.default_value("shm")))]
pub struct BenchArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,

    /// Concurrency-control protocol.
    #[arg(long, default_value = "ford", value_parser = PossibleValuesParser::new(Protocol::NAMES))]
    pub protocol: String,
    /// motor: isolation level [default: serializable].
    #[arg(long, value_parser = PossibleValuesParser::new(Isolation::NAMES))]
    pub isolation: Option<String>,
    /// motor: versions per record (1 to 15; default per workload: TPC-C 4, TATP 2,
    /// SmallBank 3, kv 4).
    #[arg(long)]
    pub vnum: Option<u8>,

    /// Where the pool lives and how to reach it, the seed, and (ucx) this process's compute
    /// node.
    #[command(flatten)]
    pub backend: BackendArgs,
    /// ucx: format and load the pool before running (one process, before the others start).
    /// Without it the pool must have been loaded with the same workload and pool options.
    #[arg(long)]
    pub load: bool,
    /// ucx: format and load the pool, then exit without running.
    #[arg(long, conflicts_with = "load")]
    pub load_only: bool,

    /// Memory nodes.
    #[arg(long, default_value_t = 2)]
    pub memory_nodes: u16,
    /// Copies of every table (primary + backups), on distinct memory nodes.
    #[arg(long, default_value_t = 2)]
    pub replicas: usize,
    /// Region size of each memory node (e.g. 512M, 4G); default: what the tables need.
    #[arg(long, value_parser = parse_size, allow_hyphen_values = true)]
    pub node_memory: Option<u64>,
    /// Undo-log slice of each coordinator, in bytes.
    #[arg(long, value_parser = parse_size, allow_hyphen_values = true)]
    pub log_slice_bytes: Option<u64>,
    /// sim: compute nodes; ucx: compute processes of the run (start one per --compute-node).
    #[arg(long, default_value_t = 1)]
    pub compute_nodes: u32,
    /// Worker threads per compute node (default: shm 2, sim 8).
    #[arg(long)]
    pub threads: Option<u32>,
    /// Coordinator coroutines per thread (default: shm 1, sim 4).
    #[arg(long)]
    pub coroutines: Option<u32>,

    /// Measured run time, e.g. 5s, 200ms (virtual on sim; default: shm 2s, sim 20ms).
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, conflicts_with = "txns")]
    pub duration: Option<u64>,
    /// Run this many measured transactions (attempts) in all instead of a duration.
    #[arg(long)]
    pub txns: Option<u64>,
    /// Unmeasured time before measuring (default: a tenth of the duration, or shm 0.2s and
    /// sim 2ms with --txns).
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true)]
    pub warmup: Option<u64>,

    /// ford: localized validation (FORD-LV): the coordinators share a version cache, so
    /// read-only items are validated locally on a hit (one compute node only).
    #[arg(long)]
    pub localized_validation: bool,

    /// Start every coordinator's address cache warm, holding every loaded record's address
    /// (the papers measure after a million transactions per thread; a run of milliseconds
    /// would otherwise pay bucket READs throughout). Not with --set addr_cache_entries=0,
    /// which stays without a cache. sim and shm.
    #[arg(long)]
    pub warm_caches: bool,

    /// Protocol switch, e.g. `--set ford.backup_reads=true` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// A TOML file giving any of these options (the command line wins).
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<PathBuf>,

    /// Check the workload's invariants on the pool after the run (one compute process; with
    /// several, give each --tally-out and run `dtxn verify` once all have finished).
    #[arg(long)]
    pub verify: bool,
    /// Write what this process committed (its workload tallies) to FILE (JSON) when it
    /// finishes, for `dtxn verify --tallies` over every compute process's file (ucx, or shm
    /// with --shm-dir).
    #[arg(long, value_name = "FILE")]
    pub tally_out: Option<PathBuf>,
    /// sim: crash compute nodes at instants drawn from the seed; every coordinator holds a
    /// lease, and the survivors' recovery service notices an expired one and recovers its
    /// coordinator's transactions from the logs during the run; a liveness phase ends it
    /// (every dead coordinator recovered). Then checks the history (with recovery's
    /// rolled-forward transactions), the workload's invariants (implies --verify) and the
    /// pool (no log slice pending, replicas identical, no record torn), and prints detection and repair
    /// times. Knobs: `compute=N` nodes crash (default 1, or 0 when `memory=` is given; never
    /// all), `memory=N` memory nodes fail for good (never node 0 unless `control=K` with K > 1;
    /// at most replicas - 1: the survivors change the view and promote backups; every
    /// protocol), `rejoin=DURATION`
    /// (each failed node comes back blank that long after its failure, joins and is
    /// re-replicated while transactions run; every protocol with one-sided stages, calvin's
    /// copy while its schedule holds every install), `within=DURATION` of the
    /// start (default: about the run's length), `delay_prob=P` and `delay=DURATION` (ops
    /// delayed on the way), `lease=DURATION` and `guard=DURATION` (default: from the fabric's
    /// longest op flight and the adversary's longest stall; checked against both),
    /// `control=K` (the pool's control chain on memory nodes 0..K, default 1: every lease and
    /// view acknowledgement has a copy on each, and a detector reads the latest; the leader,
    /// view, repaired and recovered words are CASed down the chain and read at its tail, a
    /// member behind helped forward; the report counts what the chain did; with K > 1 node 0
    /// may fail like any node, with at most K - 1 memory failures, except under motor,
    /// scythe and calvin, which keep a timestamp oracle or a schedule on node 0 alone).
    #[arg(long, value_name = "KNOB=VALUE,...", num_args = 0..=1, default_missing_value = "compute=1")]
    pub faults: Option<String>,
    /// shm, ucx: every coordinator holds a lease on the wall clock and serves the recovery
    /// service: a compute process that dies (ucx: `kill -9`) is noticed once its leases
    /// expire, and a survivor recovers its coordinators (pending transactions rolled forward
    /// or back, locks released, log slices closed) during the run; each process ends with a
    /// liveness phase until every other coordinator is done or recovered (a process that never
    /// started is not waited for). Knobs state what the hosts guarantee: `flight=DURATION` an
    /// op's flight plus a preemption between the clock read and the doorbell (default 50ms),
    /// `stall=DURATION` a live coordinator's longest pause between posts (default 200ms),
    /// `skew=DURATION` the hosts' clock skew (default 1ms); the terms `lease=`, `guard=`
    /// (default: guard twice flight plus skew, lease four times guard plus stall) are checked
    /// against them. The run measures every op's flight and fails if one reached guard - skew.
    /// `rejoin=true` (ucx, --replicas 2 or more): a failed memory node restarted blank at its
    /// address (`dtxn memnode`, no --path) is re-replicated during the run, probed at most
    /// every `probe=DURATION` per thread (default 1s, at least 10ms).
    #[arg(long, value_name = "KNOB=VALUE,...", num_args = 0..=1, default_missing_value = "")]
    pub leases: Option<String>,
    /// ucx: survive a memory node that dies and is restarted on its file (`memnode --path`,
    /// with `--set flush=true`): a coordinator that finds a memory node down stops where it
    /// is (it posts nothing more); once the run is over the process waits up to DURATION for
    /// every memory node to answer again, reconnects, and recovers those coordinators from
    /// their logs (each pending transaction rolled forward or back, locks released) before it
    /// verifies or writes its tally. Not with --leases.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub wait_memnodes: Option<u64>,
    /// Print `progress: N attempts` to stderr each time this process's coordinators have
    /// attempted another 100 transactions, and with --leases `recovered: coordinator I ...`
    /// as soon as this process has recovered a dead coordinator (for scripts watching a
    /// run; the bar is for terminals).
    #[arg(long)]
    pub progress_lines: bool,
    /// Record every transaction's history to FILE (JSON Lines, for `dtxn check`), from the
    /// end of the warm-up on (sim, shm): those that ended before it are left out, and the
    /// file's header says so.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// With --record: record the warm-up's transactions too (what `dtxn torture` checks).
    #[arg(long)]
    pub record_warmup: bool,
    /// shm: also measure the wall time spent executing each transaction's verbs (inside the
    /// backend's submit), reported per transaction type beside the latency: what is memory
    /// work and what the protocol's own CPU. Costs two clock reads per batch.
    #[arg(long)]
    pub fabric_time: bool,
    /// Measure where each transaction's time goes, phase by phase (read, insert, lock,
    /// validate, log, commit, release, abort; RCC's latency breakdown), and print it per
    /// transaction type: virtual time on sim, wall time on shm and ucx. Costs two clock reads
    /// per phase.
    #[arg(long)]
    pub breakdown: bool,
    /// Retry a transaction that aborted on a conflict, the same one (same type and inputs),
    /// until it commits, as the clients of Scythe's evaluation do (FORD's drive the next
    /// transaction instead); a committed transaction's latency then runs from its first
    /// attempt, and aborts count every failed attempt. WAIT_DIE's retry keeps its first
    /// attempt's age (it ages until it waits instead of dying).
    #[arg(long)]
    pub retry: bool,
    /// With --retry: before its n-th retry a transaction waits a random time below 2^n us or
    /// DURATION, whichever is less (randomized exponential backoff; DBx1000's abort penalty is
    /// a random wait below 100 us). 0: retry at once, which livelocks hot workloads (retries
    /// meet each other's locks again and again). Virtual time on sim [default: 100us].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub retry_backoff: Option<u64>,
    /// sim: RRPC's packing of RPC requests into messages: requests up to BYTES to one memory
    /// node share one message per batch (message batching), larger ones travel alone
    /// (doorbell batching); 512 is Scythe's threshold, 0 a message per request [default:
    /// every request shares its node's message]. Profiles charge `rpc_msg_cpu_ns` per
    /// message (0 in the presets).
    #[arg(long, value_name = "BYTES")]
    pub rpc_pack_limit: Option<u32>,
    /// Print the result as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// No progress on stderr (it shows only on a terminal anyway).
    #[arg(long, short)]
    pub quiet: bool,
    /// Also write the result as CSV (one row per transaction type, and `all`).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
}

impl BenchArgs {
    pub fn threads(&self) -> u32 {
        self.threads.unwrap_or(match self.kind() {
            Backend::Shm | Backend::Ucx => 2,
            Backend::Sim => 8,
        })
    }

    pub fn coroutines(&self) -> u32 {
        self.coroutines.unwrap_or(match self.kind() {
            Backend::Shm => 1,
            // Coroutines hide the network's round trips (tens of us over TCP).
            Backend::Ucx => 4,
            Backend::Sim => 4,
        })
    }

    pub fn duration_ns(&self) -> u64 {
        self.duration.unwrap_or(match self.kind() {
            Backend::Shm | Backend::Ucx => 2_000_000_000,
            Backend::Sim => 20_000_000,
        })
    }

    pub fn warmup_ns(&self) -> u64 {
        self.warmup.unwrap_or(match (self.txns, self.kind()) {
            (None, _) => self.duration_ns() / 10,
            (Some(_), Backend::Shm | Backend::Ucx) => 200_000_000,
            (Some(_), Backend::Sim) => 2_000_000,
        })
    }

    /// The backend.
    pub fn kind(&self) -> Backend {
        self.backend.kind()
    }

    /// The protocol and its switches.
    pub fn txn_config(&self) -> Result<TxnConfig> {
        let protocol = Protocol::from_name(&self.protocol).ok_or_else(|| {
            anyhow!(
                "unknown protocol '{}' (valid: {})",
                self.protocol,
                Protocol::NAMES.join(", ")
            )
        })?;
        let mut cfg = TxnConfig {
            protocol,
            ..TxnConfig::default()
        };
        for s in &self.set {
            apply_set(&mut cfg, s)?;
            let key = s.split_once('=').map_or(s.as_str(), |(k, _)| k.trim());
            if key.starts_with("motor.") && !protocol.multi_version() {
                bail!(
                    "--set {}: a switch of motor (--protocol motor); this run's protocol is {}",
                    s.trim(),
                    protocol.name()
                );
            }
        }
        // Where a coordinator can be recovered, its locks are journaled (recovery then reads
        // the journals rather than scanning every bucket).
        cfg.lock_journal = self.faults.is_some() || self.leases.is_some();
        if let Some(i) = &self.isolation {
            if !protocol.multi_version() {
                bail!(
                    "--isolation is for multi-version protocols (motor); {} is serializable",
                    protocol.name()
                );
            }
            cfg.motor.isolation = Isolation::from_name(i).ok_or_else(|| {
                anyhow!(
                    "unknown isolation '{i}' (valid: {})",
                    Isolation::NAMES.join(", ")
                )
            })?;
        }
        if let Some(v) = self.vnum {
            if !protocol.multi_version() {
                bail!("--vnum is for multi-version protocols (motor)");
            }
            if !(1..=dtxn_store::cvt::MAX_VNUM).contains(&usize::from(v)) {
                bail!(
                    "--vnum {v}: versions per record must be 1 to {}",
                    dtxn_store::cvt::MAX_VNUM
                );
            }
        }
        if cfg.addr_cache_entries > MAX_ADDR_CACHE {
            bail!(
                "--set addr_cache_entries={}: at most {MAX_ADDR_CACHE} per coordinator",
                cfg.addr_cache_entries
            );
        }
        if cfg.flush && self.replicas < 2 {
            bail!(
                "--set flush=true persists the backups (a lost primary is rebuilt from them): \
                 it needs --replicas 2 or more, not {}",
                self.replicas
            );
        }
        cfg.validate().map_err(|e| anyhow!(e))?;
        Ok(cfg)
    }
}

/// The most address-cache entries a coordinator takes (`--set addr_cache_entries`).
const MAX_ADDR_CACHE: usize = 1 << 24;

/// `dtxn bench` parsed alone, to re-parse it with a config file's options in front.
#[derive(Debug, Parser)]
#[command(name = "dtxn bench", args_override_self = true)]
struct BenchOnly {
    #[command(flatten)]
    args: BenchArgs,
}

/// The `dtxn bench` command, for its list of options.
pub fn bench_command() -> clap::Command {
    crate::negatives_as_values(BenchOnly::command())
}

/// If `--config` was given, parses the command again with the file's options first, so that
/// the command line overrides them.
pub fn with_config(a: BenchArgs, subcommand: &str) -> Result<BenchArgs> {
    let Some(path) = a.config.clone() else {
        return Ok(a);
    };
    let mut argv: Vec<OsString> = std::env::args_os().collect();
    let at = argv
        .iter()
        .position(|x| x == subcommand)
        .ok_or_else(|| anyhow!("cannot find '{subcommand}' on the command line"))?;
    let rest = argv.split_off(at + 1);
    let mut full: Vec<OsString> = vec![subcommand.into()];
    full.extend(config_argv(&path)?.into_iter().map(OsString::from));
    full.extend(rest);
    parse_bench(full)
}

/// Parses `dtxn bench` options from `argv` (its first element is the command name).
pub fn parse_bench(argv: Vec<OsString>) -> Result<BenchArgs> {
    let m = bench_command()
        .try_get_matches_from(argv)
        .map_err(|e| anyhow!("{}", crate::one_line(&e)))?;
    let b = BenchOnly::from_arg_matches(&m).map_err(|e| anyhow!("{}", crate::one_line(&e)))?;
    Ok(b.args)
}

/// Turns a config file into command-line options: `key = value` becomes `--key value`
/// (`true` becomes `--key`, arrays repeat the option), and a `[txn]` table becomes
/// `--set` switches.
pub fn config_argv(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].lines().count().max(1));
        let msg = e.message().replace('\n', " ");
        match line {
            Some(l) => anyhow!("{}: line {l}: {}", path.display(), msg.trim()),
            None => anyhow!("{}: {}", path.display(), msg.trim()),
        }
    })?;
    let cmd = BenchOnly::command();
    let mut argv = Vec::new();
    for (key, value) in &table {
        let at = |what: String| {
            let line = text
                .lines()
                .position(|l| {
                    let l = l.trim_start();
                    l.strip_prefix(key.as_str()).is_some_and(|r| {
                        r.trim_start().starts_with('=') || r.trim_start().starts_with(']')
                    }) || l.starts_with(&format!("[{key}]"))
                })
                .map_or(String::new(), |i| format!("line {}: ", i + 1));
            anyhow!("{}: {line}{what}", path.display())
        };
        if key == "txn" {
            let toml::Value::Table(t) = value else {
                return Err(at("[txn] must be a table of protocol switches".into()));
            };
            let mut leaves = Vec::new();
            flatten("", t, &mut leaves);
            for (k, v) in leaves {
                let set = format!("{k}={v}");
                // Checked here, to name the file and line (the key's, else the table's).
                if let Err(e) = apply_set(&mut TxnConfig::default(), &set) {
                    let last = k.rsplit('.').next().unwrap_or(&k);
                    let line = text.lines().position(|l| {
                        let l = l.trim_start();
                        [k.as_str(), last].iter().any(|key| {
                            l.strip_prefix(key)
                                .is_some_and(|r| r.trim_start().starts_with('='))
                        })
                    });
                    return Err(match line {
                        Some(i) => anyhow!("{}: line {}: [txn] {e}", path.display(), i + 1),
                        None => at(format!("[txn] {e}")),
                    });
                }
                argv.push("--set".into());
                argv.push(set);
            }
            continue;
        }
        if key == "config" {
            return Err(at("a config file cannot name another".into()));
        }
        let long = key.replace('_', "-");
        let Some(arg) = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()))
        else {
            let mut valid: Vec<&str> = cmd.get_arguments().filter_map(|a| a.get_long()).collect();
            valid.retain(|v| *v != "config" && *v != "help");
            return Err(at(format!(
                "unknown option '{key}' (valid: {}, and a [txn] table)",
                valid.join(", ")
            )));
        };
        let flag = format!("--{long}");
        let takes_value = arg.get_action().takes_values();
        let mut mine = Vec::new();
        match value {
            toml::Value::Boolean(b) if !takes_value => {
                if *b {
                    mine.push(flag);
                }
            }
            toml::Value::Array(items) => {
                for v in items {
                    mine.push(flag.clone());
                    mine.push(scalar(v).map_err(|w| at(format!("'{key}': {w}")))?);
                }
            }
            v => {
                if !takes_value {
                    return Err(at(format!("'{key}' is a switch: true or false")));
                }
                mine.push(flag);
                mine.push(scalar(v).map_err(|w| at(format!("'{key}': {w}")))?);
            }
        }
        // Each option's value parsed here, alone, so that a bad one names the file and line.
        let alone = std::iter::once("bench".to_string()).chain(mine.iter().cloned());
        if let Err(e) = bench_command().try_get_matches_from(alone) {
            return Err(at(format!("'{key}': {}", crate::one_line(&e))));
        }
        argv.extend(mine);
    }
    Ok(argv)
}

fn scalar(v: &toml::Value) -> Result<String, String> {
    match v {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(i) => Ok(i.to_string()),
        toml::Value::Float(f) => Ok(f.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        other => Err(format!("expected a string, number or boolean, got {other}")),
    }
}

fn flatten(prefix: &str, t: &toml::Table, out: &mut Vec<(String, String)>) {
    for (k, v) in t {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(inner) => flatten(&key, inner, out),
            toml::Value::String(s) => out.push((key, s.clone())),
            other => out.push((key, other.to_string())),
        }
    }
}

/// Every switch `--set` accepts, as dotted paths.
pub fn switches() -> Vec<String> {
    let v = toml::Value::try_from(TxnConfig::default()).expect("the config serializes");
    let mut out = Vec::new();
    if let toml::Value::Table(t) = v {
        let mut leaves = Vec::new();
        flatten("", &t, &mut leaves);
        out = leaves
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| k != "protocol")
            .collect();
    }
    out
}

/// Applies one `key=value` protocol switch.
fn apply_set(cfg: &mut TxnConfig, kv: &str) -> Result<()> {
    let (key, value) = kv
        .split_once('=')
        .ok_or_else(|| anyhow!("--set '{kv}': expected KEY=VALUE"))?;
    let (key, value) = (key.trim(), value.trim());
    // FORD's name for the persistent-memory switch, which every protocol now obeys.
    let path = if key == "ford.flush" { "flush" } else { key };
    if key == "protocol" {
        bail!("--set protocol: use --protocol");
    }
    let unknown = || {
        anyhow!(
            "unknown protocol switch '{key}' (valid: {})",
            switches().join(", ")
        )
    };
    let mut root = toml::Value::try_from(&*cfg)?;
    let mut cur = &mut root;
    let parts: Vec<&str> = path.split('.').collect();
    for (i, p) in parts.iter().enumerate() {
        let t = cur.as_table_mut().ok_or_else(unknown)?;
        let slot = t.get_mut(*p).ok_or_else(unknown)?;
        if i + 1 < parts.len() {
            cur = slot;
            continue;
        }
        let bad = |want: &str| anyhow!("--set {key}={value}: expected {want}");
        *slot = match slot {
            toml::Value::Boolean(_) => {
                toml::Value::Boolean(value.parse().map_err(|_| bad("true or false"))?)
            }
            toml::Value::Integer(_) => {
                toml::Value::Integer(value.parse().map_err(|_| bad("an integer"))?)
            }
            toml::Value::Float(_) => {
                toml::Value::Float(value.parse().map_err(|_| bad("a number"))?)
            }
            toml::Value::String(_) => toml::Value::String(value.trim_matches('"').to_string()),
            _ => return Err(unknown()),
        };
        break;
    }
    *cfg = root
        .try_into()
        .map_err(|e: toml::de::Error| anyhow!("--set {kv}: {}", e.message().trim()))?;
    Ok(())
}

pub use crate::units::{parse_duration, parse_size};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backend_options_parse_into_one_struct_with_bench_defaults() {
        let argv = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        let a = parse_bench(argv(&["bench"])).unwrap();
        assert_eq!(a.kind(), Backend::Shm, "bench's default backend is shm");
        assert_eq!(a.backend.seed, 1);
        assert_eq!(a.backend.compute_node, 0);
        assert_eq!(a.backend.pool.profile(), "cx5-100g");
        let a = parse_bench(argv(&[
            "bench",
            "--backend",
            "ucx",
            "--memnodes",
            "h0:7000,h1:7000",
            "--token",
            "t",
            "--compute-node",
            "1",
            "--seed",
            "9",
        ]))
        .unwrap();
        assert_eq!(a.kind(), Backend::Ucx);
        assert_eq!(a.backend.pool.memnodes, ["h0:7000", "h1:7000"]);
        assert_eq!(a.backend.pool.token.as_deref(), Some("t"));
        assert_eq!((a.backend.compute_node, a.backend.seed), (1, 9));
        let e = parse_bench(argv(&["bench", "--backend", "tape"])).unwrap_err();
        assert!(e.to_string().contains("tape"), "{e}");
    }

    #[test]
    fn switches_set_the_protocol_config() {
        let mut c = TxnConfig::default();
        apply_set(&mut c, "ford.backup_reads=true").unwrap();
        assert!(c.ford.backup_reads);
        apply_set(&mut c, "reread_limit = 3").unwrap();
        assert_eq!(c.reread_limit, 3);
        let e = apply_set(&mut c, "ford.warp_drive=true").unwrap_err();
        assert!(e.to_string().contains("valid: "), "{e}");
        assert!(e.to_string().contains("ford.backup_reads"), "{e}");
        let e = apply_set(&mut c, "ford.flush=maybe").unwrap_err();
        assert!(e.to_string().contains("true or false"), "{e}");
        apply_set(&mut c, "ford.flush=true").unwrap();
        assert!(c.flush, "ford.flush is flush");
        assert!(apply_set(&mut c, "novalue").is_err());
    }

    #[test]
    fn a_config_file_becomes_options() {
        let dir = std::env::temp_dir().join(format!("dtxn-args-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("c.toml");
        std::fs::write(
            &p,
            "workload = \"kv\"\nthreads = 3\nverify = true\ntheta = 0.5\n\n[txn]\nford.backup_reads = true\n",
        )
        .unwrap();
        let argv = config_argv(&p).unwrap();
        let mut full = vec![OsString::from("bench")];
        full.extend(argv.into_iter().map(OsString::from));
        full.push("--threads".into());
        full.push("5".into());
        let a = parse_bench(full).unwrap();
        assert_eq!(a.workload.workload, "kv");
        assert_eq!(a.threads, Some(5), "the command line wins");
        assert!(a.verify);
        assert_eq!(a.workload.theta, Some(0.5));
        assert!(a.txn_config().unwrap().ford.backup_reads);

        std::fs::write(&p, "threads = 2\nwarp = 9\n").unwrap();
        let e = config_argv(&p).unwrap_err().to_string();
        assert!(e.contains("line 2: unknown option 'warp'"), "{e}");
        std::fs::write(&p, "threads = 2\nworkload = \n").unwrap();
        let e = config_argv(&p).unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
        std::fs::remove_dir_all(dir).ok();
    }
}
