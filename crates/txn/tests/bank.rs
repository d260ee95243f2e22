//! FORD end to end under the adversarial simulator: transfers between accounts, read-only
//! audits of the whole bank, deletes; the money is conserved, every committed audit sees the
//! exact total, and the history checker finds the run serializable.

use dtxn_check::{check, Isolation, Options, Txn as HTxn};
use dtxn_fabric::sim::{Adversary, SimConfig, SimPool};
use dtxn_fabric::{Endpoint, Pool, Profile, Topology};
use dtxn_store::{Loader, Plan, PoolMap, PoolShape, TableSpec};
use dtxn_txn::{AbortReason, Access, Coordinator, FordOptions, Recorder, TxKind, TxnConfig};
use rand::Rng;
use std::cell::RefCell;
use std::rc::Rc;

const ACCOUNTS: u64 = 24;

thread_local! {
    /// The protocol `run` uses (each test runs on its own thread).
    static PROTOCOL: std::cell::Cell<dtxn_txn::Protocol> =
        const { std::cell::Cell::new(dtxn_txn::Protocol::Ford) };
    /// Scythe's takeout lock on (its CAS-lock ablation off).
    static TAKEOUT: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
    static OCC_TICKETS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Scythe's mode.
    static SCYTHE_MODE: std::cell::Cell<dtxn_txn::ScytheMode> =
        const { std::cell::Cell::new(dtxn_txn::ScytheMode::HotAware) };
}
const START: u64 = 1000;
const CHECKING: u32 = 1;

struct Collect(Rc<RefCell<Vec<HTxn>>>);

impl Recorder for Collect {
    fn record(&mut self, t: &HTxn) {
        self.0.borrow_mut().push(t.clone());
    }
}

fn bal(v: &[u8]) -> u64 {
    u64::from_le_bytes(v[..8].try_into().unwrap())
}

/// Value of an account: the balance, then padding so records span several cache lines (and
/// READs can tear).
fn account(balance: u64, size: usize) -> Vec<u8> {
    let mut v = vec![(balance % 251) as u8; size];
    v[..8].copy_from_slice(&balance.to_le_bytes());
    // The balance again in the last line: a READ torn across lines shows two balances.
    v[size - 8..].copy_from_slice(&balance.to_le_bytes());
    v
}

fn consistent(v: &[u8]) -> bool {
    v[..8] == v[v.len() - 8..]
}

struct Run {
    committed: u64,
    aborts: u64,
    total: u64,
    history: Vec<HTxn>,
    audits: u64,
    /// Committed single-account reads that returned a torn record.
    torn: u64,
    /// RPCs the coordinators sent (stages run as RPCs).
    rpcs: u64,
}

fn run(seed: u64, replicas: usize, value_size: usize, ford: FordOptions, profile: Profile) -> Run {
    run_with(seed, replicas, value_size, ford, profile, 400, false)
}

thread_local! {
    /// RCC's hybrid code for `run_with` (RCC's protocols).
    static HYBRID: std::cell::Cell<u64> = const { std::cell::Cell::new(511) };
    /// A compute-node crash to inject into `run_with` (virtual ns after the start).
    static CRASH_AT: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
    /// Locks released and transactions settled by recovery, summed over runs.
    static RECOVERY_WORK: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn run_with(
    seed: u64,
    replicas: usize,
    value_size: usize,
    ford: FordOptions,
    profile: Profile,
    window_ns: u64,
    localized_validation: bool,
) -> Run {
    let shape = PoolShape {
        memory_nodes: 3,
        replicas,
        log_slices: 64,
        log_slice_bytes: 8192,
        region_bytes: None,
    };
    let plan = Plan::new(
        &[TableSpec::new(CHECKING, "checking", value_size, ACCOUNTS)
            .with_meta_words(PROTOCOL.with(|p| p.get()).meta_words())
            .with_copies(PROTOCOL.with(|p| p.get()).copies())],
        &shape,
    )
    .unwrap();
    let mut cfg = SimConfig::new(seed, 3, plan.region_bytes);
    cfg.profile = profile;
    cfg.adversary.window_ns = window_ns;
    let crash = CRASH_AT.with(|c| c.get());
    if let Some(at_ns) = crash {
        cfg.faults
            .compute_crashes
            .push(dtxn_fabric::sim::ComputeCrash {
                at_ns,
                compute_node: 1,
            });
    }
    let mut pool = Pool::Sim(SimPool::new(cfg).unwrap());
    pool.set_rpc_handler(std::sync::Arc::new(dtxn_txn::MemoryNodeHandlers));
    plan.format_pool(&pool).unwrap();
    let mut loader = Loader::new(plan.table(CHECKING).unwrap());
    for k in 0..ACCOUNTS {
        loader
            .insert(&pool, k, &account(START, value_size))
            .unwrap();
    }
    let history = Rc::new(RefCell::new(Vec::new()));
    let txn_cfg = Rc::new(TxnConfig {
        protocol: PROTOCOL.with(|p| p.get()),
        ford,
        rcc: dtxn_txn::RccOptions {
            hybrid: dtxn_txn::HybridCode::new(HYBRID.with(|h| h.get())).unwrap(),
        },
        scythe: dtxn_txn::ScytheOptions {
            takeout_lock: TAKEOUT.with(|t| t.get()),
            mode: SCYTHE_MODE.with(|m| m.get()),
            occ_tickets: OCC_TICKETS.with(|o| o.get()),
            ..Default::default()
        },
        ..TxnConfig::default()
    });
    // Localized validation needs every writer on one Vcache: one compute process.
    let topo = Topology {
        compute_nodes: if localized_validation { 1 } else { 2 },
        threads: 2,
        coroutines: if localized_validation { 6 } else { 3 },
    };
    let vcache = std::sync::Arc::new(dtxn_txn::Vcache::new(1 << 12));
    // The sim runs every coordinator on this thread, so they may share Rc state.
    let Pool::Sim(sim) = &mut pool else {
        unreachable!()
    };
    // Scythe: a TSO group per compute node (its batched oracle), as `dtxn bench` makes them.
    let groups: Vec<std::sync::Arc<dtxn_txn::TsoGroup>> = (0..topo.compute_nodes)
        .map(|_| std::sync::Arc::new(dtxn_txn::TsoGroup::new()))
        .collect();
    let r = sim
        .run(topo, None, |ep: Endpoint| {
            let history = history.clone();
            let txn_cfg = txn_cfg.clone();
            let vcache = vcache.clone();
            let group = groups[ep.id().compute_node as usize].clone();
            async move {
                let mut ep = ep;
                let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
                let batched =
                    txn_cfg.protocol == dtxn_txn::Protocol::Scythe && txn_cfg.scythe.batched_tso;
                let mut c = Coordinator::new(ep, map, txn_cfg);
                if localized_validation {
                    c.set_vcache(vcache);
                }
                if batched {
                    c.set_tso_group(group);
                }
                c.set_recorder(Box::new(Collect(history)));
                let mut audits = 0;
                let mut torn = 0;
                for _ in 0..40 {
                    if c.endpoint().rng().random_bool(0.3) {
                        // A one-account balance check: a read-only transaction of one item.
                        let k = c.endpoint().rng().random_range(0..ACCOUNTS);
                        let mut tx = c.begin(TxKind::ReadOnly);
                        let Ok(Some(v)) = tx.read(CHECKING, k).await else {
                            continue;
                        };
                        let ok = consistent(v);
                        if tx.commit().await.is_ok() && !ok {
                            torn += 1;
                        }
                        continue;
                    }
                    let audit = c.endpoint().rng().random_bool(0.2);
                    if audit {
                        // A whole-bank audit conflicts with any transfer: retry with backoff.
                        for attempt in 0..30u64 {
                            let done = {
                                let mut tx = c.begin(TxKind::ReadOnly);
                                let all: Vec<Access> =
                                    (0..ACCOUNTS).map(|k| Access::read(CHECKING, k)).collect();
                                if tx.fetch(&all).await.is_ok() {
                                    let sum: u64 = (0..ACCOUNTS)
                                        .map(|k| bal(tx.get(CHECKING, k).unwrap()))
                                        .sum();
                                    let ok = tx.commit().await.is_ok();
                                    if ok {
                                        assert_eq!(
                                            sum,
                                            ACCOUNTS * START,
                                            "a committed audit saw a wrong total"
                                        );
                                    }
                                    ok
                                } else {
                                    false
                                }
                            };
                            if done {
                                audits += 1;
                                break;
                            }
                            let wait = c.endpoint().rng().random_range(0..2_000 * (attempt + 1));
                            c.endpoint().sleep(wait).await;
                        }
                        continue;
                    }
                    let from = c.endpoint().rng().random_range(0..ACCOUNTS);
                    let to = (from + c.endpoint().rng().random_range(1..ACCOUNTS)) % ACCOUNTS;
                    let amount = c.endpoint().rng().random_range(1..50);
                    let mut tx = c.begin(TxKind::ReadWrite);
                    // One read-only item too, so validation runs.
                    let peek = c_peek(from, to);
                    if tx
                        .fetch(&[
                            Access::update(CHECKING, from),
                            Access::update(CHECKING, to),
                            Access::read(CHECKING, peek),
                        ])
                        .await
                        .is_err()
                    {
                        continue;
                    }
                    let (a, b) = (
                        bal(tx.get(CHECKING, from).unwrap()),
                        bal(tx.get(CHECKING, to).unwrap()),
                    );
                    if a < amount {
                        tx.rollback().await;
                        continue;
                    }
                    if tx
                        .update(CHECKING, from, &account(a - amount, value_size))
                        .await
                        .is_err()
                    {
                        continue;
                    }
                    if tx
                        .update(CHECKING, to, &account(b + amount, value_size))
                        .await
                        .is_err()
                    {
                        continue;
                    }
                    let _ = tx.commit().await;
                }
                c.retire().await;
                (c.stats.committed, c.stats.aborts(), audits, torn)
            }
        })
        .unwrap();
    // Recover the crashed compute node's coordinators (6..12), as a survivor would once their
    // leases expire: roll back or forward, release every lock they held.
    if crash.is_some() {
        let rec = sim
            .run(
                Topology {
                    compute_nodes: 1,
                    threads: 1,
                    coroutines: 1,
                },
                None,
                |mut ep: Endpoint| async move {
                    let map = PoolMap::bootstrap(&mut ep).await.unwrap();
                    let mut out = Vec::new();
                    for dead in 6..12 {
                        out.push(
                            dtxn_txn::recovery::recover(
                                &mut ep,
                                &map,
                                PROTOCOL.with(|p| p.get()),
                                dead,
                            )
                            .await
                            .unwrap(),
                        );
                    }
                    out
                },
            )
            .unwrap();
        let mut h = history.borrow_mut();
        for (outcome, released) in rec.outputs.into_iter().flatten().flatten() {
            RECOVERY_WORK.with(|w| {
                w.set(
                    w.get()
                        + u64::from(released)
                        + u64::from(outcome != dtxn_txn::recovery::Recovered::Nothing),
                )
            });
            if let dtxn_txn::recovery::Recovered::RolledForward(t) = outcome {
                // Only transactions their coordinator never got to record.
                if !h.iter().any(|x| x.txn == t.txn) {
                    h.push(t);
                }
            }
        }
    }
    let mut committed = 0;
    let mut aborts = 0;
    let mut audits = 0;
    let mut torn = 0;
    let rpcs = r.total_stats().verb(dtxn_fabric::OpKind::Rpc);
    // A word's atomics come from handlers or from verbs, never both (G11): with the lock
    // stage as RPCs, every CAS on a lock word is one.
    assert_eq!(r.g11_violations, 0, "a word got both CPU and NIC atomics");
    for (c, a, au, tn) in r.outputs.iter().flatten().copied() {
        committed += c;
        aborts += a;
        audits += au;
        torn += tn;
    }
    let t = plan.table(CHECKING).unwrap();
    let mut total = 0;
    let codec = t.codec();
    for k in 0..ACCOUNTS {
        let mut value = vec![0u8; value_size];
        let found = pool
            .run(
                Topology {
                    compute_nodes: 1,
                    threads: 1,
                    coroutines: 1,
                },
                None,
                |mut ep: Endpoint| {
                    let t = t.clone();
                    async move {
                        let mut v = vec![0u8; t.value_size as usize];
                        let f = dtxn_store::remote::lookup(&mut ep, &t, t.primary(), k, &mut v)
                            .await
                            .unwrap();
                        (f, v)
                    }
                },
            )
            .unwrap();
        let (f, v) = found.outputs[0].clone().unwrap();
        let f = f.expect("no account is lost");
        assert_eq!(f.header.lock, 0, "a lock was left behind");
        if PROTOCOL.with(|p| p.get()) == dtxn_txn::Protocol::Scythe {
            // Every ticket granted was released: the takeout queue is empty.
            let mut line = vec![0u8; 64];
            pool.with_local(t.primary(), |m| m.read(f.offset, &mut line));
            let word =
                |i: usize| u64::from_le_bytes(line[32 + 8 * i..40 + 8 * i].try_into().unwrap());
            let (grant, upper) = (word(0), word(1));
            assert_eq!(grant as u16, upper as u16, "a ticket was never released");
            SCYTHE_TICKETS.with(|s| s.set(s.get() + upper));
        }
        value.copy_from_slice(&v);
        total += bal(&value);
        // Every replica holds the same record.
        for &n in &t.replicas {
            let mut rec = vec![0u8; t.record_bytes as usize];
            pool.with_local(n, |m| m.read(f.offset, &mut rec));
            let mut v2 = vec![0u8; value_size];
            let h = codec.decode(&rec, &mut v2).unwrap();
            assert_eq!(
                (h.version, &v2),
                (f.header.version, &value),
                "replica {n} differs"
            );
        }
    }
    let history = history.borrow().clone();
    Run {
        committed,
        aborts,
        total,
        history,
        audits,
        torn,
        rpcs,
    }
}

fn c_peek(from: u64, to: u64) -> u64 {
    (0..ACCOUNTS)
        .find(|k| *k != from && *k != to && (k + from).is_multiple_of(5))
        .unwrap_or(0)
}

/// Serializable, and in real-time order too except under SUNDIAL (whose timestamps may order
/// a transaction before one that ended before it began).
fn assert_serializable(h: &[HTxn], what: &str) {
    use dtxn_txn::Protocol::{Mvcc, Sundial};
    let sundial = matches!(PROTOCOL.with(|p| p.get()), Sundial | Mvcc);
    let report = check(
        h,
        Options {
            isolation: Isolation::Serializable,
            real_time: !sundial,
        },
    )
    .unwrap();
    assert!(report.ok(), "{what}: {}", report.verdict());
}

#[test]
fn ford_conserves_money_and_is_serializable_under_the_adversary() {
    for seed in 1..=20 {
        for replicas in [1, 2] {
            let r = run(
                seed,
                replicas,
                200,
                FordOptions::default(),
                Profile::cx5_100g(),
            );
            let what = format!("seed {seed}, {replicas} replicas");
            assert_eq!(
                r.total,
                ACCOUNTS * START,
                "{what}: money created or destroyed"
            );
            assert!(r.committed > 40, "{what}: only {} commits", r.committed);
            assert!(r.audits > 0, "{what}");
            assert_eq!(r.torn, 0, "{what}: a committed read returned a torn record");
            assert_serializable(&r.history, &what);
            let _ = r.aborts;
        }
    }
}

#[test]
fn ford_without_hitchhiking_and_with_backup_reads_is_serializable_too() {
    let ford = FordOptions {
        hitchhiked_locking: false,
        backup_reads: true,
        ..FordOptions::default()
    };
    for seed in 1..=8 {
        let r = run(seed, 2, 120, ford.clone(), Profile::ideal());
        assert_eq!(r.total, ACCOUNTS * START, "seed {seed}");
        assert_serializable(&r.history, &format!("seed {seed}"));
    }
}

#[test]
fn abort_reasons_are_counted() {
    let r = run(3, 2, 64, FordOptions::default(), Profile::cx5_100g());
    assert!(
        r.aborts > 0,
        "contention on 24 accounts must abort some transactions"
    );
    let lock_conflicts = r
        .history
        .iter()
        .filter(|t| t.status == dtxn_check::Status::Aborted)
        .count();
    assert!(lock_conflicts as u64 >= r.aborts);
    let _ = AbortReason::LockConflict;
}

#[test]
fn localized_validation_is_serializable() {
    for seed in 1..=10 {
        let r = run_with(
            seed,
            2,
            200,
            FordOptions::default(),
            Profile::cx5_100g(),
            400,
            true,
        );
        let what = format!("seed {seed}, localized validation");
        assert_eq!(r.total, ACCOUNTS * START, "{what}");
        assert_eq!(r.torn, 0, "{what}");
        assert!(r.audits > 0, "{what}");
        assert_serializable(&r.history, &what);
    }
}

/// Negative control: the published FORD read path (trust the invisible bit, update in place,
/// one READ) accepts torn records under the adversary, and the harness sees it: money is
/// created or destroyed, or an audit sees a wrong total, or the checker finds a cycle.
/// Single-item read-only transactions racing one writer of the same multi-line record: how
/// many committed with a torn value (its first and last words disagree).
fn torn_single_reads(seed: u64, ford: FordOptions) -> u64 {
    torn_single_reads_recorded(seed, ford).0
}

/// [`torn_single_reads`], with the run's history.
fn torn_single_reads_recorded(seed: u64, ford: FordOptions) -> (u64, Vec<HTxn>) {
    let adversary = Adversary {
        window_ns: 3000,
        ..Adversary::hostile()
    };
    torn_single_reads_under(seed, ford, adversary)
}

/// [`torn_single_reads_recorded`] under `adversary`.
fn torn_single_reads_under(seed: u64, ford: FordOptions, adversary: Adversary) -> (u64, Vec<HTxn>) {
    let value_size = 1000;
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 2,
        log_slices: 8,
        log_slice_bytes: 8192,
        region_bytes: None,
    };
    let plan = Plan::new(
        &[TableSpec::new(CHECKING, "checking", value_size, 4)],
        &shape,
    )
    .unwrap();
    let mut cfg = SimConfig::new(seed, 2, plan.region_bytes);
    cfg.adversary = adversary;
    let mut pool = Pool::Sim(SimPool::new(cfg).unwrap());
    pool.set_rpc_handler(std::sync::Arc::new(dtxn_txn::MemoryNodeHandlers));
    plan.format_pool(&pool).unwrap();
    Loader::new(plan.table(CHECKING).unwrap())
        .insert(&pool, 0, &account(START, value_size))
        .unwrap();
    let txn_cfg = Rc::new(TxnConfig {
        ford,
        ..TxnConfig::default()
    });
    let Pool::Sim(sim) = &mut pool else {
        unreachable!()
    };
    let topo = Topology {
        compute_nodes: 1,
        threads: 2,
        coroutines: 1,
    };
    let history = Rc::new(RefCell::new(Vec::new()));
    let r = sim
        .run(topo, None, |mut ep: Endpoint| {
            let txn_cfg = txn_cfg.clone();
            let history = history.clone();
            async move {
                let writer = ep.id().thread == 0;
                let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
                let mut c = Coordinator::new(ep, map, txn_cfg);
                c.set_recorder(Box::new(Collect(history)));
                let mut torn = 0;
                for i in 0..1000u64 {
                    if writer {
                        let mut tx = c.begin(TxKind::ReadWrite);
                        if tx.read_for_update(CHECKING, 0).await.is_ok() {
                            let _ = tx
                                .update(CHECKING, 0, &account(START + i, value_size))
                                .await;
                            let _ = tx.commit().await;
                        }
                    } else {
                        let mut tx = c.begin(TxKind::ReadOnly);
                        let Ok(Some(v)) = tx.read(CHECKING, 0).await else {
                            continue;
                        };
                        let ok = consistent(v);
                        if tx.commit().await.is_ok() && !ok {
                            torn += 1;
                        }
                    }
                }
                torn
            }
        })
        .unwrap();
    let history = history.borrow().clone();
    (r.outputs.iter().flatten().sum(), history)
}

/// NEGATIVE CONTROL: the published FORD's read path (trust the invisible bit, skip validating
/// one-item read-only transactions) commits torn reads under the adversarial simulator; dtxn's
/// (per-line stamps) never does, in the same runs.
#[test]
fn trusting_the_invisible_bit_is_caught() {
    let trusting = FordOptions {
        trust_invisible_bit: true,
        ..FordOptions::default()
    };
    let mut caught = 0;
    for seed in 1..=6 {
        caught += torn_single_reads(seed, trusting.clone());
        assert_eq!(
            torn_single_reads(seed, FordOptions::default()),
            0,
            "seed {seed}"
        );
    }
    assert!(
        caught >= 3,
        "the adversary tore only {caught} records the published scheme accepted"
    );
}

/// The torn reads of [`trusting_the_invisible_bit_is_caught`], seen by the history checker:
/// each torn reader read a version its writer did install, so the versions alone find the
/// run serializable; the values' hashes show each torn read as a torn value (also those
/// torn in lines the reader's own check does not look at).
#[test]
fn torn_reads_the_versions_miss_are_torn_values() {
    let trusting = FordOptions {
        trust_invisible_bit: true,
        ..FordOptions::default()
    };
    let mut caught = 0;
    for seed in 1..=6 {
        let (torn, history) = torn_single_reads_recorded(seed, trusting.clone());
        let mut versions_only = history.clone();
        for t in &mut versions_only {
            t.reads.iter_mut().for_each(|r| r.hash = None);
            t.writes.iter_mut().for_each(|w| w.hash = None);
        }
        let r = check(&versions_only, Options::default()).unwrap();
        assert!(r.ok(), "seed {seed}: versions alone: {r}");
        let r = check(&history, Options::default()).unwrap();
        let torn_values = r.counts().get("torn-value").copied().unwrap_or(0) as u64;
        // Every anomaly is a torn value; and there are at least as many as the reader saw
        // (it compares the first and last words only, the hash every byte).
        assert_eq!(r.anomalies.len() as u64, torn_values, "seed {seed}: {r}");
        assert!(
            torn_values >= torn,
            "seed {seed}: {torn_values} < {torn}: {r}"
        );
        caught += torn_values;
        // dtxn's read path, in the same runs: no torn value.
        let (torn, history) = torn_single_reads_recorded(seed, FordOptions::default());
        assert_eq!(torn, 0, "seed {seed}");
        assert_serializable(&history, &format!("seed {seed}, per-line stamps"));
    }
    assert!(caught >= 3, "only {caught} torn values");
}

/// FORD's own read path keeps its per-line stamp checks (a torn READ is read again) under the
/// harsh adversary, whose windows outlast a writer's install-to-release gap: there a single
/// header check is defeated, so this is the test that fails if the stamps are not checked
/// (the gentler runs above, and the bank runs, pass without them for FORD: mutation testing).
#[test]
fn ford_commits_no_torn_read_under_the_harsh_adversary() {
    for seed in 1..=3 {
        let (torn, history) =
            torn_single_reads_under(seed, FordOptions::default(), Adversary::harsh(20_000));
        assert_eq!(torn, 0, "seed {seed}");
        assert_serializable(&history, &format!("seed {seed}, harsh"));
    }
}

#[test]
fn the_baselines_conserve_money_and_are_serializable() {
    for protocol in [dtxn_txn::Protocol::Farm, dtxn_txn::Protocol::Drtmh] {
        PROTOCOL.with(|p| p.set(protocol));
        for seed in 1..=8 {
            for replicas in [1, 2] {
                let r = run(
                    seed,
                    replicas,
                    200,
                    FordOptions::default(),
                    Profile::cx5_100g(),
                );
                let what = format!("{}: seed {seed}, {replicas} replicas", protocol.name());
                assert_eq!(r.total, ACCOUNTS * START, "{what}");
                assert_eq!(r.torn, 0, "{what}");
                assert!(r.committed > 20, "{what}: {}", r.committed);
                assert_serializable(&r.history, &what);
            }
        }
    }
}

/// Every stage that has an RPC form, run as RPCs to the memory nodes (alone and together),
/// keeps FORD and its baselines correct under the adversary: the RPC forms keep the
/// one-sided forms' ordering (a lock's READ follows its CAS in the handler) and never mix CPU
/// and NIC atomics on a lock word (G11).
#[test]
fn stages_run_as_rpcs_conserve_money_and_are_serializable() {
    use dtxn_txn::{Protocol, Stages};
    for protocol in [Protocol::Ford, Protocol::Farm, Protocol::Drtmh] {
        PROTOCOL.with(|p| p.set(protocol));
        for (k, stages) in ["lock", "validate", "commit", "fetch,lock,validate,commit"]
            .into_iter()
            .enumerate()
        {
            for seed in 1..=3 {
                let ford = FordOptions {
                    rpc: Stages::parse(stages).unwrap(),
                    ..FordOptions::default()
                };
                let replicas = 1 + (seed as usize + k) % 2;
                let r = run(seed, replicas, 200, ford, Profile::cx5_100g());
                let what = format!("{} rpc={stages}: seed {seed}", protocol.name());
                assert_eq!(
                    r.total,
                    ACCOUNTS * START,
                    "{what}: money created or destroyed"
                );
                assert_eq!(r.torn, 0, "{what}");
                assert!(r.committed > 20, "{what}: {}", r.committed);
                // Every stage named sends RPCs (all of them: every transaction does).
                let least = if k == 3 { r.committed } else { 20 };
                assert!(r.rpcs > least, "{what}: only {} RPCs", r.rpcs);
                assert_serializable(&r.history, &what);
            }
        }
    }
}

/// RCC's protocols (NO_WAIT and WAIT_DIE with their read shares, OCC, SUNDIAL with its
/// leases), all one-sided, all as RPCs, and mixed as RCC's best hybrids mixed them, keep the
/// money and the history right, and leave no lock word behind (every read share given back,
/// to the last). Mixing ways never puts CPU and NIC atomics on one word (G11: `run_with`
/// asserts it): read shares go the lock stage's way whatever the release stage does, lease
/// words the renew stage's.
#[test]
fn rccs_protocols_conserve_money_and_are_serializable_one_sided_as_rpcs_and_mixed() {
    use dtxn_txn::Protocol;
    // 511: all one-sided; 0: all RPCs; 28: RPC fetch and lock, one-sided log, release and
    // commit (MVCC's best on SmallBank); 21: RPC fetch and release; 9: RPC fetch, log, commit.
    for protocol in [
        Protocol::NoWait,
        Protocol::WaitDie,
        Protocol::Occ,
        Protocol::Sundial,
        Protocol::Mvcc,
    ] {
        PROTOCOL.with(|p| p.set(protocol));
        for (k, code) in [511, 0, 28, 21, 9].into_iter().enumerate() {
            HYBRID.with(|h| h.set(code));
            for seed in 1..=2 {
                let replicas = 1 + (seed as usize + k) % 2;
                let r = run(
                    seed,
                    replicas,
                    200,
                    FordOptions::default(),
                    Profile::cx5_100g(),
                );
                let what = format!("{} hybrid {code}: seed {seed}", protocol.name());
                assert_eq!(
                    r.total,
                    ACCOUNTS * START,
                    "{what}: money created or destroyed"
                );
                assert_eq!(r.torn, 0, "{what}");
                assert!(r.committed > 20, "{what}: {}", r.committed);
                assert!((code == 511) == (r.rpcs == 0), "{what}: {} RPCs", r.rpcs);
                assert_serializable(&r.history, &what);
            }
        }
    }
    HYBRID.with(|h| h.set(511));
}

thread_local! {
    /// Scythe: the tickets released on the accounts at the end of the last run.
    static SCYTHE_TICKETS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Scythe, with its takeout lock and with the CAS-lock ablation, one or two replicas: money
/// conserved, the history serializable, no header lock left, every takeout queue drained (as
/// many tickets released as granted); and the contention (24 accounts, 8 coordinators) sends
/// retries to TOCC, whose tickets the run counts.
#[test]
fn scythe_conserves_money_and_is_serializable_and_drains_its_queues() {
    PROTOCOL.with(|p| p.set(dtxn_txn::Protocol::Scythe));
    for (takeout, mode, occ_tickets) in [
        (true, dtxn_txn::ScytheMode::HotAware, false),
        (false, dtxn_txn::ScytheMode::HotAware, false),
        (true, dtxn_txn::ScytheMode::Tocc, false),
        (true, dtxn_txn::ScytheMode::HotAware, true),
        (true, dtxn_txn::ScytheMode::Occ, true),
    ] {
        TAKEOUT.with(|t| t.set(takeout));
        SCYTHE_MODE.with(|m| m.set(mode));
        OCC_TICKETS.with(|o| o.set(occ_tickets));
        let mut tickets = 0;
        for seed in 1..=4 {
            let replicas = 1 + seed as usize % 2;
            SCYTHE_TICKETS.with(|s| s.set(0));
            let r = run(
                seed,
                replicas,
                200,
                FordOptions::default(),
                Profile::cx5_100g(),
            );
            let what = format!(
                "scythe ({mode:?}, takeout lock {takeout}, occ tickets {occ_tickets}): seed {seed}"
            );
            assert_eq!(
                r.total,
                ACCOUNTS * START,
                "{what}: money created or destroyed"
            );
            assert_eq!(r.torn, 0, "{what}");
            assert!(r.committed > 20, "{what}: {}", r.committed);
            assert_serializable(&r.history, &what);
            tickets += SCYTHE_TICKETS.with(|s| s.get());
        }
        assert_eq!(
            tickets > 0,
            takeout,
            "takeout lock {takeout}: {tickets} tickets"
        );
    }
    TAKEOUT.with(|t| t.set(true));
    OCC_TICKETS.with(|o| o.set(false));
    SCYTHE_MODE.with(|m| m.set(dtxn_txn::ScytheMode::HotAware));
}

/// A compute node crashes mid-run: its coordinators stop at whatever await point they were
/// on, ops in flight land up to a random cut-off. Recovery from the logs then restores every
/// invariant: money conserved, replicas identical, no lock left, the history serializable.
#[test]
fn a_crashed_compute_node_is_recovered_from_its_logs() {
    for seed in 1..=40 {
        for protocol in [
            dtxn_txn::Protocol::Ford,
            dtxn_txn::Protocol::Farm,
            dtxn_txn::Protocol::Sundial,
            dtxn_txn::Protocol::Mvcc,
        ] {
            PROTOCOL.with(|p| p.set(protocol));
            CRASH_AT.with(|c| c.set(Some(20_000 + seed * 7_919)));
            let r = run(seed, 2, 200, FordOptions::default(), Profile::cx5_100g());
            CRASH_AT.with(|c| c.set(None));
            let what = format!("{}: seed {seed}", protocol.name());
            assert_eq!(
                r.total,
                ACCOUNTS * START,
                "{what}: money created or destroyed"
            );
            assert_eq!(r.torn, 0, "{what}");
            assert_serializable(&r.history, &what);
        }
    }
}

/// CALVIN (deterministic scheduling of epochs), one-sided, as RPCs and mixed: the money is
/// conserved, the history serializable in real-time order, and concurrency control aborts
/// nothing (every abort is a transfer's own rollback).
#[test]
fn calvin_conserves_money_and_is_serializable() {
    PROTOCOL.with(|p| p.set(dtxn_txn::Protocol::Calvin));
    // 383: dispatch as RPCs; 255: the done words as RPCs; 499: log and release as RPCs, bits
    // CALVIN ignores (its dispatch and forwarding bits stand for them).
    for (k, code) in [511, 0, 28, 21, 9, 383, 255, 511 - 12]
        .into_iter()
        .enumerate()
    {
        HYBRID.with(|h| h.set(code));
        for seed in 1..=3 {
            let replicas = 1 + (seed as usize + k) % 2;
            let r = run(
                seed,
                replicas,
                200,
                FordOptions::default(),
                Profile::cx5_100g(),
            );
            let what = format!("calvin hybrid {code}: seed {seed}");
            assert_eq!(
                r.total,
                ACCOUNTS * START,
                "{what}: money created or destroyed"
            );
            assert_eq!(r.torn, 0, "{what}");
            assert!(r.committed > 150, "{what}: {}", r.committed);
            let one_sided = code | 12 == 511;
            assert!(one_sided == (r.rpcs == 0), "{what}: {} RPCs", r.rpcs);
            assert_serializable(&r.history, &what);
        }
    }
    HYBRID.with(|h| h.set(511));
}
