//! Motor's critical-path round trips per transaction, exact, on the `ideal` profile with one
//! coordinator, against the paper's table (digest section 3.9), which leaves the timestamp
//! oracle out: each row is checked both with and without the oracle's round trips.

use dtxn_fabric::sim::{Adversary, SimConfig, SimPool};
use dtxn_fabric::{Pool, Profile};
use dtxn_store::{Loader, Plan, PoolShape, TableSpec};
use dtxn_txn::{Access, Coordinator, Isolation, Protocol, TxKind, TxnConfig, VersionLayout};

mod common;

const T: u32 = 1;

/// (transaction, round trips, of which on the oracle)
type Row = (&'static str, u64, u64);

fn measure(isolation: Isolation, local_oracle: bool) -> Vec<Row> {
    measure_with(isolation, local_oracle, false)
}

/// Two memory nodes, two replicas, on `ideal` with no adversary: one table of 16-byte values
/// (two attributes, 4 versions), keys 0 to 99 loaded; room to spare, so that inserts find
/// free slots in their home buckets.
fn loaded_pool() -> Pool {
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 2,
        log_slices: 4,
        log_slice_bytes: 4096,
        region_bytes: None,
    };
    let mut spec = TableSpec::new(T, "t", 16, 1000).multi_version(4);
    spec.attributes = vec![8, 8];
    let plan = Plan::new(&[spec], &shape).unwrap();
    let mut cfg = SimConfig::new(1, 2, plan.region_bytes);
    cfg.profile = Profile::ideal();
    cfg.adversary = Adversary::off();
    let pool = Pool::Sim(SimPool::new(cfg).unwrap());
    plan.format_pool(&pool).unwrap();
    let mut l = Loader::new(plan.table(T).unwrap());
    for k in 0..100u64 {
        l.insert(&pool, k, &[k.to_le_bytes(), [0; 8]].concat())
            .unwrap();
    }
    pool
}

fn measure_with(isolation: Isolation, local_oracle: bool, flush: bool) -> Vec<Row> {
    measure_all(isolation, local_oracle, flush, |_| {})
}

fn measure_all(
    isolation: Isolation,
    local_oracle: bool,
    flush: bool,
    options: impl Fn(&mut dtxn_txn::MotorOptions),
) -> Vec<Row> {
    let pool = loaded_pool();
    let mut txn = TxnConfig {
        protocol: Protocol::Motor,
        flush,
        ..TxnConfig::default()
    };
    txn.motor.isolation = isolation;
    options(&mut txn.motor);
    common::with_coordinator(pool, txn, move |mut c| {
        async move {
            if local_oracle {
                assert!(c.set_local_oracle(std::sync::Arc::new(dtxn_txn::LocalOracle::new(1))));
            }
            let mut out: Vec<Row> = Vec::new();
            let mut row = |c: &Coordinator, name| {
                let o = c.last_outcome().unwrap();
                assert!(o.result.is_ok(), "{name}: {:?}", o.result);
                out.push((name, o.fabric.round_trips, o.oracle_round_trips));
            };
            let v = |x: u64| [x.to_le_bytes(), [1; 8]].concat();
            // Cold: nothing cached yet.
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.fetch(&[Access::update(T, 1), Access::update(T, 2)])
                .await
                .unwrap();
            tx.update(T, 1, &v(7)).await.unwrap();
            tx.commit().await.unwrap();
            row(&c, "cold read-write");
            let mut tx = c.begin(TxKind::ReadOnly);
            tx.fetch(&[Access::read(T, 3), Access::read(T, 4)])
                .await
                .unwrap();
            tx.commit().await.unwrap();
            row(&c, "cold read-only");
            // Warm: addresses cached.
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.fetch(&[Access::update(T, 1), Access::update(T, 2)])
                .await
                .unwrap();
            tx.update(T, 2, &v(8)).await.unwrap();
            tx.commit().await.unwrap();
            row(&c, "read-write");
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.fetch(&[Access::update(T, 1), Access::read(T, 3)])
                .await
                .unwrap();
            tx.update(T, 1, &v(9)).await.unwrap();
            tx.commit().await.unwrap();
            row(&c, "read-write + read-only");
            let mut tx = c.begin(TxKind::ReadOnly);
            tx.fetch(&[Access::read(T, 1), Access::read(T, 2)])
                .await
                .unwrap();
            tx.commit().await.unwrap();
            row(&c, "read-only");
            // An insert: the chain's insert lock and bucket in one round trip, the slot
            // claimed with the commit's mark round.
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.insert(T, 500, &v(5)).await.unwrap();
            tx.commit().await.unwrap();
            row(&c, "insert");
            // Three keys at once: every chain's insert lock and bucket in one batch.
            let (a, b, d) = (v(6), v(7), v(8));
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.insert_many(&[(T, 600, &a), (T, 601, &b), (T, 602, &d)])
                .await
                .unwrap();
            tx.commit().await.unwrap();
            row(&c, "insert x3");
            // A row this coordinator inserted: its slot is cached, as warm as any.
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.fetch(&[Access::update(T, 1), Access::update(T, 601)])
                .await
                .unwrap();
            tx.update(T, 601, &v(9)).await.unwrap();
            tx.commit().await.unwrap();
            row(&c, "read-write, inserted row");
            out
        }
    })
}

#[test]
fn motor_round_trips_match_the_paper_without_the_oracle() {
    // The paper (timestamps excluded): read-write 3; serializable with read-only items 4;
    // snapshot 3; read-only 2. dtxn: a cached read-write item's value comes with its CAS and
    // CVT READ (1 execution round trip, not 2), and the lock is marked committing before the
    // commit timestamp (1 round trip): the same totals; a read-only item whose newest version
    // is in the snapshot is read in 1.
    let sr = measure(Isolation::Serializable, false);
    let want_sr: [Row; 8] = [
        ("cold read-write", 6, 2),
        ("cold read-only", 2, 1),
        ("read-write", 5, 2),
        ("read-write + read-only", 6, 2),
        ("read-only", 2, 1),
        ("insert", 5, 2),
        ("insert x3", 5, 2),
        ("read-write, inserted row", 5, 2),
    ];
    assert_eq!(sr, want_sr);
    let without: Vec<u64> = sr.iter().map(|r| r.1 - r.2).collect();
    assert_eq!(without, [4, 1, 3, 4, 1, 3, 3, 3]);
    // Snapshot isolation skips validation.
    let si = measure(Isolation::Snapshot, false);
    let without: Vec<u64> = si.iter().map(|r| r.1 - r.2).collect();
    assert_eq!(without, [4, 1, 3, 3, 1, 3, 3, 3]);
}

/// With the compute process's own oracle (the authors' configuration) timestamps are free and
/// the committing mark is a bit in process memory: a read-write transaction costs what FORD's
/// does (2 round trips), one with read-only items 3 (serializable), a read-only one 1. The
/// first transaction reserves the process's block of timestamps (one FAA).
#[test]
fn with_a_local_oracle_timestamps_and_marks_cost_nothing() {
    let sr = measure(Isolation::Serializable, true);
    let want: [Row; 8] = [
        ("cold read-write", 4, 1),
        ("cold read-only", 1, 0),
        ("read-write", 2, 0),
        ("read-write + read-only", 3, 0),
        ("read-only", 1, 0),
        ("insert", 3, 0),
        ("insert x3", 3, 0),
        ("read-write, inserted row", 2, 0),
    ];
    assert_eq!(sr, want);
    let si = measure(Isolation::Snapshot, true);
    let rts: Vec<u64> = si.iter().map(|r| r.1).collect();
    assert_eq!(rts, [4, 1, 2, 2, 1, 3, 3, 2]);
}

/// Persistent memory (`flush`): the op log is flushed, and the FLUSH awaited, before any record
/// WRITE: one more round trip per read-write transaction, none for a read-only one (the
/// backups' FLUSHes ride with the commit WRITEs).
#[test]
fn with_flush_a_read_write_transaction_persists_its_op_log_first() {
    let plain = measure(Isolation::Serializable, true);
    let flushed = measure_with(Isolation::Serializable, true, true);
    let extra: Vec<(&str, u64)> = plain
        .iter()
        .zip(&flushed)
        .map(|(p, f)| (p.0, f.1 - p.1))
        .collect();
    assert_eq!(
        extra,
        [
            ("cold read-write", 1),
            ("cold read-only", 0),
            ("read-write", 1),
            ("read-write + read-only", 1),
            ("read-only", 0),
            ("insert", 1),
            ("insert x3", 1),
            ("read-write, inserted row", 1),
        ]
    );
}

/// Version chains (`motor.versions`, the paper's Fig. 10 ablation): after the record's READ
/// (its lock word and the link to its chain), a round trip per node the walk reads. The reads
/// here want the newest version: new-to-old, the first node; old-to-new, every node. Key 1
/// has 2 versions at "read-write" and "read-write + read-only" and 3 after; key 2 has 2 at
/// "read-only"; the rest have 1. "read-write + read-only" walks twice: at execution, and at
/// validation (the read-only key at the commit timestamp). New keys' inserts read no chain.
#[test]
fn a_chain_walk_is_a_round_trip_per_node() {
    let cvt = measure(Isolation::Serializable, true);
    let extra = |versions| -> Vec<u64> {
        let chain = measure_all(Isolation::Serializable, true, false, |m| {
            m.versions = versions
        });
        cvt.iter().zip(&chain).map(|(a, b)| b.1 - a.1).collect()
    };
    assert_eq!(extra(VersionLayout::N2o), [1, 1, 1, 2, 1, 0, 0, 1]);
    assert_eq!(extra(VersionLayout::O2n), [1, 1, 2, 3, 3, 0, 0, 3]);
}

/// FaRMv2-DM's two other round trips (Motor section 7.4), each a switch of its own, against
/// Motor with a local oracle. `motor.lock_at_commit`: the written records are locked in a
/// round trip before the commit (+1 where a transaction writes a record it read), and a
/// read-for-update key left unwritten is validated like a read (+1: "read-write" and
/// "read-write, inserted row" write one of their two keys, and so does "cold read-write",
/// whose bucket READ now returns the record it locked in a second round trip: -1); inserts
/// of new keys claim their slots as before. `motor.coalescent_commit=false`: the backups'
/// records, then the primaries' (+1 for every transaction that writes).
#[test]
fn farmv2_dm_locks_in_a_round_trip_of_its_own_and_commits_in_two() {
    let motor = measure(Isolation::Serializable, true);
    let extra = |options: fn(&mut dtxn_txn::MotorOptions)| -> Vec<u64> {
        let other = measure_all(Isolation::Serializable, true, false, options);
        motor.iter().zip(&other).map(|(a, b)| b.1 - a.1).collect()
    };
    assert_eq!(extra(|m| m.lock_at_commit = true), [1, 0, 2, 1, 0, 0, 0, 2]);
    assert_eq!(
        extra(|m| m.coalescent_commit = false),
        [1, 0, 1, 1, 0, 1, 1, 1]
    );
}

/// A transaction that updates a record and inserts a new key: the lock taken at commit goes in
/// the round trip that claims the insert's slot, so FaRMv2-DM's lock round trip is the one
/// Motor spends on the claim (4 round trips both, with a local oracle: execution, the insert's
/// chain, the claim and lock, the commit).
#[test]
fn a_lock_at_commit_shares_the_round_trip_of_an_inserts_claim() {
    let rts = |late: bool| -> Vec<u64> {
        let pool = loaded_pool();
        let mut txn = TxnConfig {
            protocol: Protocol::Motor,
            ..TxnConfig::default()
        };
        txn.motor.lock_at_commit = late;
        common::with_coordinator(pool, txn, move |mut c| async move {
            assert!(c.set_local_oracle(std::sync::Arc::new(dtxn_txn::LocalOracle::new(1))));
            let v = |x: u64| [x.to_le_bytes(), [1; 8]].concat();
            let mut out = Vec::new();
            for k in 0..3u64 {
                let mut tx = c.begin(TxKind::ReadWrite);
                tx.read_for_update(T, 1).await.unwrap();
                tx.update(T, 1, &v(9 + k)).await.unwrap();
                tx.insert(T, 700 + k, &v(5)).await.unwrap();
                tx.commit().await.unwrap();
                out.push(c.last_outcome().unwrap().fabric.round_trips);
            }
            out
        })
    };
    // The first transaction is cold (key 1's bucket READ, and the oracle's block).
    assert_eq!(rts(false), [6, 4, 4]);
    assert_eq!(rts(true), [5, 4, 4]);
}
