//! The lock journal (issue #23): a coordinator that dies holding locks is recovered from its
//! journals in a few round trips, not by a scan of a large table; and a recovery cut short
//! and run again ends in the same state.

use dtxn_fabric::sim::{Adversary, ComputeCrash, SimConfig, SimPool};
use dtxn_fabric::{Endpoint, OpKind, Pool, Profile, Topology};
use dtxn_store::{Loader, Plan, PoolMap, PoolShape, TableSpec};
use dtxn_txn::recovery::recover;
use dtxn_txn::{Access, Coordinator, Protocol, TxKind, TxnConfig};
use std::rc::Rc;

const T: u32 = 1;
/// Records the table is laid out for: its scan takes hundreds of READs.
const CAPACITY: u64 = 200_000;
const LOCKED: u64 = 6;

/// The table, laid out as `protocol` needs it (Motor: CVTs).
fn plan_for(protocol: Protocol) -> Plan {
    let mut t = TableSpec::new(T, "t", 8, CAPACITY)
        .with_meta_words(protocol.meta_words())
        .with_copies(protocol.copies());
    if protocol == Protocol::Motor {
        t = t.multi_version(2);
    }
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 2,
        log_slices: 4,
        log_slice_bytes: 32 << 10,
        region_bytes: None,
    };
    Plan::new(&[t], &shape).unwrap()
}

fn pool() -> (Pool, Plan) {
    pool_for(Protocol::Ford)
}

fn pool_for(protocol: Protocol) -> (Pool, Plan) {
    let plan = plan_for(protocol);
    let mut cfg = SimConfig::new(1, 2, plan.region_bytes);
    cfg.profile = Profile::ideal();
    cfg.adversary = Adversary::off();
    let mut pool = Pool::Sim(SimPool::new(cfg).unwrap());
    pool.set_rpc_handler(std::sync::Arc::new(dtxn_txn::MemoryNodeHandlers));
    plan.format_pool(&pool).unwrap();
    let mut l = Loader::new(plan.table(T).unwrap());
    for k in 0..100u64 {
        l.insert(&pool, k, &k.to_le_bytes()).unwrap();
    }
    (pool, plan)
}

fn one() -> Topology {
    Topology {
        compute_nodes: 1,
        threads: 1,
        coroutines: 1,
    }
}

/// Coordinator 0 takes `LOCKED` locks (FORD's hitchhiked locks at execution)
/// then stops for good without releasing them: what a crash right after its lock
/// CASes leaves.
fn locked(pool: &mut Pool, journal: bool) {
    locked_by(pool, journal, Protocol::Ford)
}

/// [`locked`], the locks taken at execution under `protocol` (FORD hitchhiking, 2PL).
fn locked_by(pool: &mut Pool, journal: bool, protocol: Protocol) {
    let Pool::Sim(sim) = pool else { unreachable!() };
    sim.run(one(), None, move |mut ep: Endpoint| async move {
        let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
        let mut cfg = TxnConfig {
            protocol,
            lock_journal: journal,
            ..TxnConfig::default()
        };
        cfg.ford.hitchhiked_locking = true;
        // Scythe: every read-write attempt TOCC, which locks at execution (its CAS lock, the
        // takeout queue's tickets aside; timestamps from the pool's oracle).
        cfg.scythe.mode = dtxn_txn::ScytheMode::Tocc;
        cfg.scythe.takeout_lock = false;
        cfg.scythe.batched_tso = false;
        let mut c = Coordinator::new(ep, map, Rc::new(cfg));
        let keys: Vec<Access> = (0..LOCKED).map(|k| Access::update(T, k * 7)).collect();
        // Committed many times over (locks hitchhike on READs of cached addresses only): the
        // journal's ring wraps around several times before the crash.
        for _ in 0..300 {
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.fetch(&keys).await.unwrap();
            tx.commit().await.unwrap();
        }
        let mut tx = c.begin(TxKind::ReadWrite);
        tx.fetch(&keys).await.unwrap();
        // Dropped uncommitted: nothing is released.
        std::mem::forget(tx);
    })
    .unwrap();
}

/// Every lock word of the table's primary that is set.
fn set_locks(pool: &Pool, plan: &Plan) -> usize {
    let t = plan.table(T).unwrap();
    // The buckets, main and overflow (after the table's first line, its overflow counter).
    let mut b = vec![0u8; ((t.bucket_count + t.overflow_buckets) * t.bucket_bytes) as usize];
    pool.with_local(t.primary(), |m| m.read(t.bucket(0), &mut b));
    let bucket = t.bucket_bytes as usize;
    let mut n = 0;
    for chunk in b.chunks_exact(bucket) {
        n += usize::from(u64::from_le_bytes(chunk[8..16].try_into().unwrap()) != 0);
        for s in 0..t.slots_per_bucket {
            n += usize::from(t.codec().header(t.slot_bytes(chunk, s)).lock != 0);
        }
    }
    n
}

/// Recovers coordinator 0 on a coordinator of its own, crashed `crash_at` ns into the run if
/// given: (locks released, READs posted, round trips), or None if it crashed, and the run's
/// length.
fn recovered(pool: &mut Pool, crash_at: Option<u64>) -> (Option<(u32, u64, u64)>, u64) {
    recovered_by(pool, crash_at, Protocol::Ford)
}

/// Faults that crash compute node 0 `crash_at` ns into the run, if given.
fn crashing(crash_at: Option<u64>) -> dtxn_fabric::sim::Faults {
    let mut f = dtxn_fabric::sim::Faults::default();
    if let Some(at_ns) = crash_at {
        f.compute_crashes.push(ComputeCrash {
            at_ns,
            compute_node: 0,
        });
    }
    f
}

/// [`recovered`], of a coordinator that ran `protocol`.
fn recovered_by(
    pool: &mut Pool,
    crash_at: Option<u64>,
    protocol: Protocol,
) -> (Option<(u32, u64, u64)>, u64) {
    let Pool::Sim(sim) = pool else { unreachable!() };
    sim.set_faults(crashing(crash_at));
    let two = Topology {
        compute_nodes: 2,
        ..one()
    };
    let r = sim
        .run(two, None, move |mut ep: Endpoint| async move {
            if ep.id().index != 0 {
                return None;
            }
            let map = PoolMap::bootstrap(&mut ep).await.unwrap();
            let before = ep.stats();
            let (_, n) = recover(&mut ep, &map, protocol, 0).await.unwrap();
            let after = ep.stats();
            let reads = after.verbs[OpKind::Read as usize] - before.verbs[OpKind::Read as usize];
            Some((n, reads, after.round_trips - before.round_trips))
        })
        .unwrap();
    sim.set_faults(Default::default());
    (r.outputs[0].flatten(), r.elapsed_ns)
}

#[test]
fn a_journaled_coordinators_locks_are_released_without_a_scan() {
    let (mut pool, plan) = pool();
    locked(&mut pool, true);
    assert_eq!(set_locks(&pool, &plan), LOCKED as usize);
    let (r, _) = recovered(&mut pool, None);
    let (released, reads, round_trips) = r.unwrap();
    assert_eq!(released, LOCKED as u32);
    assert_eq!(set_locks(&pool, &plan), 0);
    // The log slice and the journal on both nodes, then each named word on both replicas.
    assert!(reads <= 4 + 2 * LOCKED, "{reads} READs");
    assert!(round_trips <= 4, "{round_trips} round trips");
}

#[test]
fn without_the_journal_recovery_scans_the_table() {
    let (mut pool, plan) = pool();
    locked(&mut pool, false);
    assert_eq!(set_locks(&pool, &plan), LOCKED as usize);
    let (r, _) = recovered(&mut pool, None);
    let (released, reads, _) = r.unwrap();
    assert_eq!(released, LOCKED as u32);
    assert_eq!(set_locks(&pool, &plan), 0);
    let t = plan.table(T).unwrap();
    let buckets = t.bucket_count + t.overflow_buckets;
    assert!(
        reads >= buckets * t.bucket_bytes / (16 << 10),
        "{reads} READs for {buckets} buckets"
    );
}

#[test]
fn a_journaled_recovery_cut_short_and_run_again_frees_every_lock() {
    let (mut reference, _) = pool();
    locked(&mut reference, true);
    let (_, took) = recovered(&mut reference, None);
    let mut cut = 0;
    for tenth in 1..10 {
        let (mut pool, plan) = pool();
        locked(&mut pool, true);
        let (first, _) = recovered(&mut pool, Some(took * tenth / 10));
        cut += u32::from(first.is_none());
        let (again, _) = recovered(&mut pool, None);
        let (released, _, _) = again.unwrap();
        let first = first.map_or(0, |f| f.0);
        assert!(
            first + released <= LOCKED as u32,
            "{tenth}/10: released twice"
        );
        assert_eq!(set_locks(&pool, &plan), 0, "{tenth}/10");
    }
    assert!(cut > 3, "only {cut} recoveries were cut short");
}

#[test]
fn every_journaled_protocols_locks_are_released_from_its_journal() {
    for p in [
        Protocol::NoWait,
        Protocol::WaitDie,
        Protocol::Motor,
        Protocol::Sundial,
        Protocol::Mvcc,
        Protocol::Scythe,
    ] {
        let (mut pool, plan) = pool_for(p);
        locked_by(&mut pool, true, p);
        assert_eq!(set_locks(&pool, &plan), LOCKED as usize, "{}", p.name());
        let (r, _) = recovered_by(&mut pool, None, p);
        let (released, reads, _) = r.unwrap();
        assert_eq!(released, LOCKED as u32, "{}", p.name());
        assert_eq!(set_locks(&pool, &plan), 0, "{}", p.name());
        // Scythe's recovery also reads its grant journals, one per node.
        let grants = if p == Protocol::Scythe { 2 } else { 0 };
        assert!(
            reads <= 4 + grants + 2 * LOCKED,
            "{}: {reads} READs",
            p.name()
        );
    }
}

/// The journal costs no round trip of its own: its entries ride in the locks' batches, and
/// the wait for the releases (a FLUSH to each memory node) comes once per half ring of
/// entries, not per transaction. Here each transaction journals 6 locks on one node's ring of
/// 511 slots: a FLUSH to each of the 2 nodes about every 43rd transaction (once more than 255
/// entries wait), 7 times in 300 transactions (a FLUSH per transaction, or none, fails).
#[test]
fn the_journal_waits_for_its_releases_once_per_half_ring() {
    let (flushes, round_trips) = three_hundred_commits(true);
    assert_eq!(flushes, 2 * 7);
    // The same transactions without the journal: the round trips but those 7 waits, and the
    // rings' first load.
    let (none, without) = three_hundred_commits(false);
    assert_eq!((none, round_trips), (0, without + 7 + 1));
}

/// 300 transactions that each lock `LOCKED` records at execution (FORD, hitchhiked locking),
/// the lock journal on or off: their FLUSHes and round trips.
fn three_hundred_commits(journal: bool) -> (u64, u64) {
    let (pool, _) = pool();
    let Pool::Sim(mut sim) = pool else {
        unreachable!()
    };
    let r = sim
        .run(one(), None, move |mut ep: Endpoint| async move {
            let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
            let mut cfg = TxnConfig {
                lock_journal: journal,
                ..TxnConfig::default()
            };
            cfg.ford.hitchhiked_locking = true;
            let mut c = Coordinator::new(ep, map, Rc::new(cfg));
            let keys: Vec<Access> = (0..LOCKED).map(|k| Access::update(T, k * 7)).collect();
            let before = c.endpoint().stats();
            for _ in 0..300 {
                let mut tx = c.begin(TxKind::ReadWrite);
                tx.fetch(&keys).await.unwrap();
                tx.commit().await.unwrap();
            }
            let s = c.endpoint().stats();
            (
                s.verbs[OpKind::Flush as usize] - before.verbs[OpKind::Flush as usize],
                s.round_trips - before.round_trips,
            )
        })
        .unwrap();
    r.outputs[0].unwrap()
}

/// The pool in a view where node 1 is joining (failed, then back): every table's backup on
/// it is one the copier writes (`failover::copy_to_joiners`).
fn joining(pool: &Pool) {
    let v = dtxn_store::View::default()
        .without(&[1])
        .and_then(|v| v.joining(1))
        .unwrap();
    pool.with_local(0, |m| m.write_u64(dtxn_store::layout::VIEW_OFF, v.word()));
}

/// Coordinator 0, its journal loaded in the joining view (active on both nodes: a
/// transaction of its own first), copies the table to the joiner; crashed `crash_at` ns
/// into the run if given. The run's length.
fn copied(pool: &mut Pool, crash_at: Option<u64>) -> u64 {
    let Pool::Sim(sim) = pool else { unreachable!() };
    sim.set_faults(crashing(crash_at));
    let r = sim
        .run(one(), None, move |mut ep: Endpoint| async move {
            let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
            let cfg = TxnConfig {
                protocol: Protocol::Ford,
                lock_journal: true,
                ..TxnConfig::default()
            };
            let mut c = Coordinator::new(ep, map.clone(), Rc::new(cfg));
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.fetch(&[Access::update(T, 3)]).await.unwrap();
            tx.commit().await.unwrap();
            let pass = dtxn_txn::failover::copy_to_joiners(
                c.endpoint(),
                &map,
                1,
                None,
                dtxn_txn::failover::CopyRules::SOUND,
                Default::default(),
            )
            .await
            .unwrap();
            assert!(pass.copied > 0 && pass.left.is_empty());
        })
        .unwrap();
    sim.set_faults(Default::default());
    r.elapsed_ns
}

/// The copier's slot locks are not journaled: it marks its journal overflowed first, so a
/// copier that dies holding some is recovered by the scan, which frees them (issue #17: with
/// the mark a no-op, recovery trusted the journal and left them set).
#[test]
fn a_copier_that_dies_holding_copy_locks_is_recovered_by_the_scan() {
    let (mut reference, _) = pool();
    joining(&reference);
    let took = copied(&mut reference, None);
    let mut held = 0;
    for tenth in 1..10 {
        let (mut pool, plan) = pool();
        joining(&pool);
        copied(&mut pool, Some(took * tenth / 10 + 137 * tenth));
        held += usize::from(set_locks(&pool, &plan) > 0);
        let (r, _) = recovered(&mut pool, None);
        assert!(r.is_some(), "{tenth}/10");
        let left = set_locks(&pool, &plan);
        assert_eq!(left, 0, "{tenth}/10: {left} copy locks left");
    }
    assert!(held > 3, "only {held} crashes held copy locks");
}
