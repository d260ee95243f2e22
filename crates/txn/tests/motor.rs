//! Motor end to end under the adversarial simulator: transfers, whole-bank audits, one-account
//! reads and order inserts/deletes that move money in and out of a second table. Money is
//! conserved, every committed audit sees the exact total, every replica ends identical with no
//! lock left, and the history checker accepts the run: serializable mode against the
//! serializable checker, snapshot mode against the SI checker.

use dtxn_check::{check, Isolation as CheckIsolation, Options, Txn as HTxn};
use dtxn_fabric::sim::{SimConfig, SimPool};
use dtxn_fabric::{Endpoint, Pool, Profile, Topology};
use dtxn_store::cvt::local_lookup;
use dtxn_store::{Loader, Plan, PoolMap, PoolShape, TableSpec};
use dtxn_txn::{
    Access, Coordinator, Isolation, Protocol, Recorder, TxKind, TxnConfig, VersionLayout,
};
use rand::Rng;
use std::cell::RefCell;
use std::rc::Rc;

const ACCOUNTS: u64 = 16;
const ORDERS: u64 = 12;
const START: u64 = 1000;
const CHECKING: u32 = 1;
const ORDER: u32 = 2;

thread_local! {
    /// Commits that recovery finished for a crashed coordinator, summed over runs.
    static RECOVERED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Read-only transactions that committed with a start timestamp from the start clock.
    static CLOCKED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

struct Collect(Rc<RefCell<Vec<HTxn>>>);

impl Recorder for Collect {
    fn record(&mut self, t: &HTxn) {
        self.0.borrow_mut().push(t.clone());
    }
}

fn amount(v: &[u8]) -> u64 {
    u64::from_le_bytes(v[..8].try_into().unwrap())
}

/// An account or an order: the amount, a count of updates, filler that never changes, and the
/// amount again in the last line (a READ or rebuild mixing versions shows two amounts).
fn record(amount: u64, updates: u64, size: usize) -> Vec<u8> {
    let mut v = vec![0x5a; size];
    v[..8].copy_from_slice(&amount.to_le_bytes());
    v[8..16].copy_from_slice(&updates.to_le_bytes());
    v[size - 8..].copy_from_slice(&amount.to_le_bytes());
    v
}

fn consistent(v: &[u8]) -> bool {
    v[..8] == v[v.len() - 8..] && v[16..v.len() - 8].iter().all(|&b| b == 0x5a)
}

fn spec(id: u32, name: &str, size: usize, rows: u64, vnum: u8) -> TableSpec {
    let mut t = TableSpec::new(id, name, size, rows).multi_version(vnum);
    t.attributes = vec![8, 8, size as u32 - 24, 8];
    t.update_mix = vec![(24, 1.0)];
    t
}

#[derive(Debug, Clone, Copy)]
struct Setup {
    seed: u64,
    isolation: Isolation,
    vnum: u8,
    replicas: usize,
    value_size: usize,
    window_ns: u64,
    /// Crash compute node 1 at this virtual time, then recover its coordinators.
    crash_at_ns: Option<u64>,
    /// `motor.start_clock_ns`: start timestamps from each compute node's clock.
    start_clock_ns: u64,
    /// Timestamps from one counter all coordinators share (`motor.oracle=local`).
    local_oracle: bool,
    /// `motor.versions`: CVTs, or version chains walked node by node.
    versions: VersionLayout,
    /// FaRMv2-DM's lock round trip and two-round commit (`motor.lock_at_commit`,
    /// `motor.coalescent_commit=false`).
    farmv2: bool,
    /// Every lock journaled (`lock_journal`, as `--faults` runs): recovery releases a dead
    /// coordinator's locks from its journals, and scans for none.
    journal: bool,
}

#[derive(Debug, Default)]
struct Outcome {
    committed: u64,
    aborts: u64,
    audits: u64,
    version_gone: u64,
}

fn run(s: Setup) -> Outcome {
    let shape = PoolShape {
        memory_nodes: 3,
        replicas: s.replicas,
        log_slices: 64,
        // A journal takes the end of a slice (and Scythe's grant journal), 6 KiB.
        log_slice_bytes: if s.journal { 16 << 10 } else { 4096 },
        region_bytes: None,
    };
    let plan = Plan::new(
        &[
            spec(CHECKING, "checking", s.value_size, ACCOUNTS, s.vnum),
            spec(ORDER, "orders", s.value_size, ORDERS, s.vnum),
        ],
        &shape,
    )
    .unwrap();
    let mut cfg = SimConfig::new(s.seed, 3, plan.region_bytes);
    cfg.profile = Profile::cx5_100g();
    cfg.adversary.window_ns = s.window_ns;
    if let Some(at_ns) = s.crash_at_ns {
        cfg.faults
            .compute_crashes
            .push(dtxn_fabric::sim::ComputeCrash {
                at_ns,
                compute_node: 1,
            });
    }
    let mut pool = Pool::Sim(SimPool::new(cfg).unwrap());
    plan.format_pool(&pool).unwrap();
    let mut loader = Loader::new(plan.table(CHECKING).unwrap());
    for k in 0..ACCOUNTS {
        loader
            .insert(&pool, k, &record(START, 0, s.value_size))
            .unwrap();
    }
    let history = Rc::new(RefCell::new(Vec::new()));
    let mut txn_cfg = TxnConfig {
        protocol: Protocol::Motor,
        lock_journal: s.journal,
        ..TxnConfig::default()
    };
    txn_cfg.motor.isolation = s.isolation;
    txn_cfg.motor.start_clock_ns = s.start_clock_ns;
    txn_cfg.motor.versions = s.versions;
    txn_cfg.motor.lock_at_commit = s.farmv2;
    txn_cfg.motor.coalescent_commit = !s.farmv2;
    let txn_cfg = Rc::new(txn_cfg);
    let clocks: Vec<_> = (0..2)
        .map(|_| std::sync::Arc::new(dtxn_txn::StartClock::new(s.start_clock_ns)))
        .collect();
    // Blocks of 7 timestamps: the local oracle runs out of many during the run, and each
    // next block must still hand out timestamps above every one before.
    let oracle = std::sync::Arc::new(dtxn_txn::LocalOracle::with_block(12, 7));
    let topo = Topology {
        compute_nodes: 2,
        threads: 2,
        coroutines: 3,
    };
    let size = s.value_size;
    let Pool::Sim(sim) = &mut pool else {
        unreachable!()
    };
    let r = sim
        .run(topo, None, |ep: Endpoint| {
            let history = history.clone();
            let txn_cfg = txn_cfg.clone();
            let clock = clocks[ep.id().compute_node as usize].clone();
            let oracle = oracle.clone();
            async move {
                let mut ep = ep;
                let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
                let mut c = Coordinator::new(ep, map, txn_cfg);
                if s.start_clock_ns > 0 {
                    c.set_start_clock(clock);
                }
                if s.local_oracle {
                    assert!(c.set_local_oracle(oracle));
                }
                c.set_recorder(Box::new(Collect(history)));
                let mut audits = 0;
                for _ in 0..40 {
                    let dice = c.endpoint().rng().random_range(0..100);
                    if dice < 20 {
                        // One account, read-only: never torn, never a version that mixes two.
                        let k = c.endpoint().rng().random_range(0..ACCOUNTS);
                        let mut tx = c.begin(TxKind::ReadOnly);
                        if let Ok(Some(v)) = tx.read(CHECKING, k).await {
                            assert!(consistent(v), "a read-only read returned a torn value");
                            if tx.commit().await.is_ok()
                                && c.last_outcome().unwrap().oracle_round_trips == 0
                            {
                                CLOCKED.with(|n| n.set(n.get() + 1));
                            }
                        }
                    } else if dice < 35 {
                        // The whole bank, accounts and orders: a snapshot sees the exact total.
                        let mut tx = c.begin(TxKind::ReadOnly);
                        let all: Vec<Access> = (0..ACCOUNTS)
                            .map(|k| Access::read(CHECKING, k))
                            .chain((0..ORDERS).map(|k| Access::read(ORDER, k)))
                            .collect();
                        if tx.fetch(&all).await.is_ok() {
                            let mut sum = 0;
                            for k in 0..ACCOUNTS {
                                let v = tx.get(CHECKING, k).expect("accounts are never deleted");
                                assert!(consistent(v), "an audit read a torn account");
                                sum += amount(v);
                            }
                            for k in 0..ORDERS {
                                if let Some(v) = tx.get(ORDER, k) {
                                    assert!(consistent(v), "an audit read a torn order");
                                    sum += amount(v);
                                }
                            }
                            if tx.commit().await.is_ok() {
                                assert_eq!(sum, ACCOUNTS * START, "a committed audit's total");
                                audits += 1;
                            }
                        }
                    } else if dice < 75 {
                        transfer(&mut c, size).await;
                    } else {
                        order_churn(&mut c, size).await;
                    }
                }
                let gone = c.stats.aborted[dtxn_txn::AbortReason::ALL
                    .iter()
                    .position(|&r| r == dtxn_txn::AbortReason::VersionGone)
                    .unwrap()];
                (c.stats.committed, c.stats.aborts(), audits, gone)
            }
        })
        .unwrap();
    // Recover the crashed compute node's coordinators (6..12), as a survivor would once their
    // leases expire: finish the commits their op logs hold, release every lock they held.
    if s.crash_at_ns.is_some() {
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
                                dtxn_txn::Protocol::Motor,
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
        for (outcome, _released) in rec.outputs.into_iter().flatten().flatten() {
            if let dtxn_txn::recovery::Recovered::RolledForward(t) = outcome {
                // Only transactions their coordinator never got to record.
                if !h.iter().any(|x| x.txn == t.txn) {
                    RECOVERED.with(|c| c.set(c.get() + 1));
                    h.push(t);
                }
            }
        }
    }
    if s.local_oracle {
        // Every timestamp the oracle handed out, and the next it would, lies in a block the
        // pool's oracle word reserved: a later run's block (from the word on) repeats none.
        let mut word = [0u8; 8];
        pool.with_local(0, |m| m.read(dtxn_store::layout::ORACLE_OFF, &mut word));
        let word = u64::from_le_bytes(word);
        let next = oracle.next();
        assert!(
            next.is_none_or(|ts| ts <= word),
            "{next:?} past the word's {word}"
        );
    }
    let mut out = Outcome::default();
    for (c, a, au, g) in r.outputs.iter().flatten().copied() {
        out.committed += c;
        out.aborts += a;
        out.audits += au;
        out.version_gone += g;
    }
    // Every replica holds the same committed state, with no lock left; money is conserved.
    let mut total = 0;
    for (id, keys) in [(CHECKING, ACCOUNTS), (ORDER, ORDERS)] {
        let t = plan.table(id).unwrap();
        for k in 0..keys {
            let found: Vec<_> = t
                .replicas
                .iter()
                .map(|&n| pool.with_local(n, |m| local_lookup(t, m, k)).unwrap())
                .collect();
            let primary = found[0].clone();
            for other in &found[1..] {
                assert_eq!(other, &primary, "table {id} key {k}: replicas differ");
            }
            match primary {
                Some((_, cvt, value)) => {
                    assert_eq!(cvt.header.lock, 0, "table {id} key {k}: a lock was left");
                    if let Some(v) = value {
                        assert!(consistent(&v));
                        total += amount(&v);
                    } else {
                        assert_eq!(id, ORDER, "an account was deleted");
                    }
                }
                None => assert_eq!(id, ORDER, "account {k} vanished"),
            }
        }
    }
    assert_eq!(total, ACCOUNTS * START, "money is not conserved: {s:?}");
    let h = history.borrow();
    let report = check(
        h.iter(),
        Options {
            isolation: match s.isolation {
                Isolation::Serializable => CheckIsolation::Serializable,
                Isolation::Snapshot => CheckIsolation::Snapshot,
            },
            // A start clock trades real-time order for a round trip.
            real_time: s.start_clock_ns == 0,
        },
    )
    .unwrap();
    assert!(report.ok(), "{s:?}: {report}");
    out
}

/// Moves money between two accounts, peeking at a third (a read-only item to validate).
async fn transfer(c: &mut Coordinator, size: usize) {
    let rng = c.endpoint().rng();
    let from = rng.random_range(0..ACCOUNTS);
    let to = (from + rng.random_range(1..ACCOUNTS)) % ACCOUNTS;
    let peek = (to + 1) % ACCOUNTS;
    let x = rng.random_range(1..50);
    let mut tx = c.begin(TxKind::ReadWrite);
    let accesses = [
        Access::update(CHECKING, from),
        Access::update(CHECKING, to),
        Access::read(CHECKING, peek),
    ];
    if tx.fetch(&accesses).await.is_err() {
        return;
    }
    let (a, b) = (
        tx.get(CHECKING, from).unwrap(),
        tx.get(CHECKING, to).unwrap(),
    );
    assert!(consistent(a) && consistent(b));
    let (a, ua, b, ub) = (amount(a), amount(&a[8..]), amount(b), amount(&b[8..]));
    if a < x {
        tx.rollback().await;
        return;
    }
    if tx
        .update(CHECKING, from, &record(a - x, ua + 1, size))
        .await
        .is_err()
        || tx
            .update(CHECKING, to, &record(b + x, ub + 1, size))
            .await
            .is_err()
    {
        return;
    }
    let _ = tx.commit().await;
}

/// Places an order (money leaves an account into a new order record) or settles one (the
/// order is deleted, its money returns to an account).
async fn order_churn(c: &mut Coordinator, size: usize) {
    let rng = c.endpoint().rng();
    let acct = rng.random_range(0..ACCOUNTS);
    let order = rng.random_range(0..ORDERS);
    let x = rng.random_range(1..30);
    let mut tx = c.begin(TxKind::ReadWrite);
    let r = async {
        tx.fetch(&[Access::update(CHECKING, acct), Access::update(ORDER, order)])
            .await?;
        let a = amount(tx.get(CHECKING, acct).unwrap());
        let u = amount(&tx.get(CHECKING, acct).unwrap()[8..]);
        match tx.get(ORDER, order).map(amount) {
            Some(o) => {
                tx.delete(ORDER, order).await?;
                tx.update(CHECKING, acct, &record(a + o, u + 1, size))
                    .await?;
            }
            None if a >= x => {
                tx.insert(ORDER, order, &record(x, 0, size)).await?;
                tx.update(CHECKING, acct, &record(a - x, u + 1, size))
                    .await?;
            }
            None => {}
        }
        tx.commit().await
    }
    .await;
    let _ = r;
}

fn setup(seed: u64) -> Setup {
    Setup {
        seed,
        isolation: Isolation::Serializable,
        vnum: 4,
        replicas: 2,
        value_size: 136,
        window_ns: 400,
        crash_at_ns: None,
        start_clock_ns: 0,
        local_oracle: false,
        versions: VersionLayout::Cvt,
        farmv2: false,
        journal: false,
    }
}

/// FaRMv2-DM (new-to-old chains, written records locked in a round trip of their own before
/// the commit, the backups written before the primaries): the same guarantees, the bank's
/// money and the history checked, crashes recovered from the op logs.
#[test]
fn farmv2_dm_keeps_every_guarantee() {
    for seed in 0..8 {
        let o = run(Setup {
            versions: VersionLayout::N2o,
            farmv2: true,
            isolation: if seed % 2 == 0 {
                Isolation::Serializable
            } else {
                Isolation::Snapshot
            },
            replicas: 1 + (seed as usize % 3),
            ..setup(700 + seed)
        });
        assert!(o.audits > 0 && o.committed > 100, "seed {seed}: {o:?}");
    }
    // With the compute process's own oracle (how `dtxn reproduce` runs it), the locks taken
    // at commit carry no mark: the committing bit in process memory is set before them.
    for seed in 0..4 {
        let o = run(Setup {
            versions: VersionLayout::N2o,
            farmv2: true,
            local_oracle: true,
            isolation: if seed % 2 == 0 {
                Isolation::Serializable
            } else {
                Isolation::Snapshot
            },
            ..setup(750 + seed)
        });
        assert!(o.audits > 0 && o.committed > 100, "seed {seed}: {o:?}");
    }
    // Crashes, recovered from the lock journals (as `--faults` runs): a lock taken at commit
    // that its journal does not name would be left behind (recovery scans for none).
    RECOVERED.with(|c| c.set(0));
    for seed in 0..12 {
        run(Setup {
            farmv2: true,
            journal: true,
            crash_at_ns: Some(15_000 + seed * 7_919),
            replicas: 2 + (seed as usize % 2),
            ..setup(800 + seed)
        });
    }
    assert!(RECOVERED.with(|c| c.get()) > 0);
}

/// Version chains (Motor's Fig. 10 ablation) walk node by node, a READ each, while locks are
/// held: the same guarantees, with more time between a transaction's reads and its commit.
#[test]
fn version_chains_keep_every_guarantee() {
    for seed in 0..8 {
        let o = run(Setup {
            versions: if seed < 4 {
                VersionLayout::N2o
            } else {
                VersionLayout::O2n
            },
            isolation: if seed % 2 == 0 {
                Isolation::Serializable
            } else {
                Isolation::Snapshot
            },
            ..setup(600 + seed)
        });
        assert!(o.audits > 0 && o.committed > 100, "seed {seed}: {o:?}");
    }
}

/// Timestamps from a counter the coordinators share (the authors' single compute server):
/// no oracle round trips, same guarantees.
#[test]
fn a_local_oracle_keeps_every_guarantee() {
    for seed in 0..8 {
        let o = run(Setup {
            local_oracle: true,
            isolation: if seed % 2 == 0 {
                Isolation::Serializable
            } else {
                Isolation::Snapshot
            },
            ..setup(500 + seed)
        });
        assert!(o.audits > 0 && o.committed > 100, "{o:?}");
    }
}

/// Start timestamps from each compute node's clock (no oracle round trip while it is fresh):
/// still serializable (or SI), without the real-time order.
#[test]
fn start_clocks_keep_snapshots_consistent() {
    CLOCKED.with(|c| c.set(0));
    for seed in 0..8 {
        let o = run(Setup {
            start_clock_ns: 20_000,
            isolation: if seed % 2 == 0 {
                Isolation::Serializable
            } else {
                Isolation::Snapshot
            },
            ..setup(400 + seed)
        });
        assert!(o.audits > 0, "{o:?}");
    }
    assert!(CLOCKED.with(|c| c.get()) > 50, "the clock was hardly used");
}

/// A compute node crashes mid-run: its coordinators stop wherever they were, their ops in
/// flight land up to a random cut-off. Recovery from the op logs finishes the commits that
/// had begun installing and releases every lock: money conserved, replicas identical, no
/// lock left, the history serializable (or SI).
#[test]
fn a_crashed_compute_node_is_recovered_from_its_op_logs() {
    RECOVERED.with(|c| c.set(0));
    for seed in 0..24 {
        run(Setup {
            crash_at_ns: Some(15_000 + seed * 7_919),
            isolation: if seed % 2 == 0 {
                Isolation::Serializable
            } else {
                Isolation::Snapshot
            },
            replicas: 1 + (seed as usize % 3),
            ..setup(300 + seed)
        });
    }
    // Some crashes hit a commit mid-install, which only recovery could finish.
    assert!(RECOVERED.with(|c| c.get()) > 0);
}

#[test]
fn serializable_bank_under_the_adversary() {
    let mut committed = 0;
    for seed in 0..10 {
        let o = run(Setup {
            replicas: 1 + (seed as usize % 3),
            ..setup(seed)
        });
        assert!(o.audits > 0, "seed {seed}: no audit committed: {o:?}");
        committed += o.committed;
    }
    assert!(committed > 1000, "{committed}");
}

#[test]
fn snapshot_bank_under_the_adversary() {
    for seed in 0..10 {
        let o = run(Setup {
            isolation: Isolation::Snapshot,
            replicas: 1 + (seed as usize % 2),
            ..setup(100 + seed)
        });
        assert!(o.audits > 0, "seed {seed}: no audit committed: {o:?}");
    }
}

/// Few versions per record, small records, a tiny bar: garbage collection and bar wrap-around
/// at every turn.
#[test]
fn few_versions_and_small_bars_stay_correct() {
    for (i, vnum) in [1u8, 2, 3].into_iter().enumerate() {
        for iso in [Isolation::Serializable, Isolation::Snapshot] {
            let o = run(Setup {
                vnum,
                isolation: iso,
                value_size: 40,
                ..setup(200 + i as u64)
            });
            assert!(o.committed > 50, "{vnum} {iso:?}: {o:?}");
        }
    }
}
