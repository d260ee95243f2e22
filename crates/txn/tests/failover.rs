//! Memory-node failover, step by step on one coordinator: a memory node fails for good, the
//! probe finds it, the view changes, the backup of the table it was the primary of is
//! promoted and repaired, and transactions go on against it. (The whole protocol, with many
//! coordinators, leases and crashes, runs in `dtxn bench --faults memory=N`:
//! `crates/cli/tests/adversary.rs`.) The same script runs under FORD, Motor (its tables
//! laid out as CVTs), RCC's OCC and MVCC (its version slots), and Scythe (its takeout queues).

use dtxn_fabric::sim::{Adversary, MemoryCrash, SimConfig, SimPool};
use dtxn_fabric::{Endpoint, Pool, Profile, Topology};
use dtxn_store::layout::VIEW_OFF;
use dtxn_store::{Loader, Plan, PoolMap, PoolShape, TableSpec, View};
use dtxn_txn::failover::{probe, repair_promoted};
use dtxn_txn::{AbortReason, Coordinator, Protocol, ScytheMode, TxKind, TxnConfig};
use std::rc::Rc;

mod common;

/// Two tables, two replicas each on two memory nodes: `A`'s primary is node 0, `B`'s node 1.
const A: u32 = 1;
const B: u32 = 2;
/// Memory node 1 fails then (virtual time), for good.
const FAIL_NS: u64 = 5_000_000;
/// The script's one coordinator.
const ONE: Topology = Topology {
    compute_nodes: 1,
    threads: 1,
    coroutines: 1,
};
/// Keys inserted into `B` before the failure, and after it.
const BEFORE: u64 = 40;
const AFTER: u64 = 40;

fn v(x: u64) -> Vec<u8> {
    (x * 7).to_le_bytes().to_vec()
}

fn plan(p: Protocol) -> Plan {
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 2,
        log_slices: 4,
        log_slice_bytes: 4096,
        region_bytes: None,
    };
    // `B` is sized for a few rows and given a large overflow area: the inserts fill its
    // buckets and chain overflow buckets, claimed on its primary.
    let mut b = TableSpec::new(B, "b", 8, 8);
    b.overflow_fraction = 40.0;
    let a = TableSpec::new(A, "a", 8, 100);
    let (a, b) = (common::for_protocol(p, a), common::for_protocol(p, b));
    Plan::new(&[a, b], &shape).unwrap()
}

fn sim(plan: &Plan) -> SimPool {
    let mut cfg = SimConfig::new(1, 2, plan.region_bytes);
    cfg.profile = Profile::ideal();
    cfg.adversary = Adversary::off();
    cfg.faults.memory_crashes = vec![MemoryCrash {
        at_ns: FAIL_NS,
        node: 1,
        down_ns: MemoryCrash::FOREVER,
    }];
    let mut pool = Pool::Sim(SimPool::new(cfg).unwrap());
    pool.set_rpc_handler(std::sync::Arc::new(dtxn_txn::MemoryNodeHandlers));
    plan.format_pool(&pool).unwrap();
    let mut l = Loader::new(plan.table(A).unwrap());
    for k in 0..10 {
        l.insert(&pool, k, &v(k)).unwrap();
    }
    let Pool::Sim(s) = pool else { unreachable!() };
    s
}

async fn insert(c: &mut Coordinator, keys: std::ops::Range<u64>) -> Result<(), AbortReason> {
    for k in keys {
        let mut tx = c.begin(TxKind::ReadWrite);
        tx.insert(B, k, &v(k)).await.map_err(|a| a.reason)?;
        tx.commit().await.map_err(|a| a.reason)?;
    }
    Ok(())
}

/// What the script saw, for the assertions.
#[derive(Debug, Default)]
struct Seen {
    /// An insert into `B` once node 1 is down, before the view changes.
    failed_before_view: Option<AbortReason>,
    /// An update of `A`'s key 0 (primary node 0, backup node 1) once node 1 is down, before
    /// the view changes; and another in the new view.
    updated_before_view: Option<AbortReason>,
    updated_after: Option<AbortReason>,
    /// An update of `B`'s key 0 (written before the failure) on its promoted primary.
    updated_b0_after: Option<AbortReason>,
    down: Vec<u16>,
    promoted: Vec<u32>,
    repaired: u32,
    /// `B`'s overflow counter on its promoted primary, before and after the repair.
    counter: (u64, u64),
    inserted_after: Option<AbortReason>,
    /// Every key of `B` read back in the new view: (found with its value, missing or wrong).
    found: u64,
    wrong: Vec<u64>,
    /// A map bootstrapped afresh in the new view.
    bootstrapped: Option<(View, Vec<u16>)>,
}

/// How the script runs.
#[derive(Debug, Clone, Copy)]
struct Script {
    protocol: Protocol,
    /// The promoted primary is repaired.
    repair: bool,
    /// With the protocol's own part of the repair (else the common part alone).
    own_repair: bool,
    /// The coordinator knows memory-node failover is on ([`Coordinator::set_failover`]).
    failover: bool,
}

const FORD: Script = Script {
    protocol: Protocol::Ford,
    repair: true,
    own_repair: true,
    failover: true,
};
const MOTOR: Script = Script {
    protocol: Protocol::Motor,
    ..FORD
};

/// The failover's view change: the probe finds the failed nodes, and the view word is CASed
/// to the view without them. Returns them, and the map in the new view.
async fn change_view(ep: &mut Endpoint, map: &PoolMap) -> (Vec<u16>, Rc<PoolMap>) {
    let down = probe(ep, map).await.unwrap();
    let next = View::default().without(&down).unwrap();
    let cas = ep.cas(0, VIEW_OFF, View::default().word(), next.word());
    ep.post().await.unwrap();
    assert!(ep.cas_ok(cas));
    (down, Rc::new(map.in_view(next)))
}

async fn update(c: &mut Coordinator, t: u32, k: u64, x: u64) -> Result<(), AbortReason> {
    let mut tx = c.begin(TxKind::ReadWrite);
    tx.read_for_update(t, k).await.map_err(|a| a.reason)?;
    tx.update(t, k, &v(x)).await.map_err(|a| a.reason)?;
    tx.commit().await.map_err(|a| a.reason)
}

async fn update_a(c: &mut Coordinator, x: u64) -> Result<(), AbortReason> {
    update(c, A, 0, x).await
}

/// Updates of `B`'s key 0 before the failure: under Scythe each takes a ticket, and the
/// backup's takeout words come to show a queue longer than any a ticket is granted behind.
const B0_UPDATES: u64 = 12;

/// Inserts into `B`, lets node 1 fail, fails over (or, with `repair` false, skips the
/// promoted primary's repair), inserts more and reads everything back.
fn fail_over(script: Script) -> Seen {
    let Script {
        protocol,
        repair,
        own_repair,
        failover,
    } = script;
    let plan = plan(protocol);
    let mut sim = sim(&plan);
    let r = sim
        .run(ONE, None, move |mut ep: Endpoint| async move {
            let mut seen = Seen::default();
            let old_map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
            let map = old_map.clone();
            assert_eq!(map.table(B).unwrap().replicas, [1, 0]);
            let mut cfg = TxnConfig {
                protocol,
                ..TxnConfig::default()
            };
            // Scythe's updates take tickets (TOCC), so that its takeout queues move.
            cfg.scythe.mode = ScytheMode::Tocc;
            let mut c = Coordinator::new(ep, map.clone(), Rc::new(cfg));
            c.set_failover(failover);
            insert(&mut c, 0..BEFORE).await.unwrap();
            for x in 0..B0_UPDATES {
                update(&mut c, B, 0, x).await.unwrap();
            }
            let now = c.endpoint().now_ns();
            c.endpoint().sleep(FAIL_NS + 1_000 - now.min(FAIL_NS)).await;
            seen.failed_before_view = insert(&mut c, BEFORE..BEFORE + 1).await.err();
            seen.updated_before_view = update_a(&mut c, 1000).await.err();
            // The failover: probe, change the view, promote, repair.
            let ep = c.endpoint();
            let map;
            (seen.down, map) = change_view(ep, &old_map).await;
            seen.promoted = map.promoted().map(|t| t.id).collect();
            let t = map.table(B).unwrap().clone();
            let r = ep.read(t.primary(), t.overflow_counter(), 8);
            ep.post().await.unwrap();
            seen.counter.0 = ep.word(r, 0);
            if repair {
                let p = if own_repair { protocol } else { Protocol::Ford };
                seen.repaired = repair_promoted(ep, &map, p, None).await.unwrap();
            }
            let r = ep.read(t.primary(), t.overflow_counter(), 8);
            ep.post().await.unwrap();
            seen.counter.1 = ep.word(r, 0);
            c.set_map(map.clone());
            seen.inserted_after = insert(&mut c, BEFORE + 1..BEFORE + 1 + AFTER).await.err();
            seen.updated_after = update_a(&mut c, 1001).await.err();
            seen.updated_b0_after = update(&mut c, B, 0, 0).await.err();
            for k in (0..BEFORE).chain(BEFORE + 1..BEFORE + 1 + AFTER) {
                let mut tx = c.begin(TxKind::ReadOnly);
                let read = tx.read(B, k).await.map(|x| x == Some(v(k).as_slice()));
                // (An aborted read ended the transaction.)
                let ok = read == Ok(true) && tx.commit().await.is_ok();
                if ok {
                    seen.found += 1;
                } else {
                    seen.wrong.push(k);
                }
            }
            let fresh = PoolMap::bootstrap(c.endpoint()).await.unwrap();
            seen.bootstrapped = Some((fresh.view(), fresh.table(B).unwrap().replicas.clone()));
            seen
        })
        .unwrap();
    r.outputs.into_iter().next().unwrap().unwrap()
}

#[test]
fn the_backup_is_promoted_repaired_and_serves_inserts() {
    let s = fail_over(FORD);
    // FORD rolls the update back on the live replicas; it commits again in the new view.
    assert_eq!(s.updated_before_view, Some(AbortReason::ReplicaFailure));
    promoted_and_repaired(&s);
}

/// Motor's tables chain overflow buckets the same way: the repair raises their counters too.
/// An update whose install fails on the backup that died has no undo log to roll back by:
/// it finishes on the live replicas and commits.
#[test]
fn under_motor_the_backup_is_promoted_repaired_and_serves_inserts() {
    let s = fail_over(MOTOR);
    assert_eq!(s.updated_before_view, None);
    promoted_and_repaired(&s);
}

/// The negative control of the finish on the live replicas: without it (a coordinator that
/// does not know failover is on), the failed install keeps its lock for a recovery that
/// never comes to a live coordinator, and the record stays locked in the new view.
#[test]
fn under_motor_without_failover_a_failed_install_keeps_its_lock() {
    let s = fail_over(Script {
        failover: false,
        ..MOTOR
    });
    assert_eq!(s.updated_before_view, Some(AbortReason::ReplicaFailure));
    assert!(s.updated_after.is_some(), "{s:?}");
}

/// FaRMv2-DM locks the records it writes at commit, in one batch on their primaries. When
/// one of them has failed since execution read it, the batch fails, and the locks won on the
/// live primaries are given back (CAS back to 0): the transaction knows of no lock to release,
/// and nobody would recover a live coordinator's. Else `A`'s key stays locked in the next view.
#[test]
fn under_farmv2_dm_a_commit_lock_won_beside_a_failed_primary_is_given_back() {
    let plan = plan(Protocol::Motor);
    let mut sim = sim(&plan);
    let r = sim
        .run(ONE, None, move |mut ep: Endpoint| async move {
            let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
            let mut cfg = TxnConfig {
                protocol: Protocol::Motor,
                ..TxnConfig::default()
            };
            cfg.motor.lock_at_commit = true;
            let mut c = Coordinator::new(ep, map.clone(), Rc::new(cfg));
            c.set_failover(true);
            insert(&mut c, 0..1).await.unwrap();
            // Execution reads `A`'s key 0 (primary node 0) and `B`'s (primary node 1), unlocked;
            // node 1 fails before the commit.
            let mut tx = c.begin(TxKind::ReadWrite);
            for t in [A, B] {
                tx.read_for_update(t, 0).await.unwrap();
                tx.update(t, 0, &v(1)).await.unwrap();
            }
            let now = tx.endpoint().now_ns();
            assert!(now < FAIL_NS, "{now}");
            tx.endpoint().sleep(FAIL_NS + 1_000 - now).await;
            let failed = tx.commit().await.err().map(|a| a.reason);
            let ep = c.endpoint();
            let (down, map) = change_view(ep, &map).await;
            assert_eq!(down, [1]);
            repair_promoted(ep, &map, Protocol::Motor, None)
                .await
                .unwrap();
            c.set_map(map);
            (failed, update_a(&mut c, 2).await.err())
        })
        .unwrap();
    let (failed, after) = r.outputs.into_iter().next().unwrap().unwrap();
    assert_eq!(failed, Some(AbortReason::ReplicaFailure));
    // A lock left behind: `LockConflict`, for good.
    assert_eq!(after, None);
}

/// The negative control under Motor: without the repair, the promoted primary hands out
/// overflow buckets already linked.
#[test]
fn under_motor_without_the_repair_inserts_after_the_promotion_fail() {
    let s = fail_over(Script {
        repair: false,
        ..MOTOR
    });
    repair_missed(&s);
}

/// Without the repair the backup's counter stays the load's and inserts go wrong.
fn repair_missed(s: &Seen) {
    assert_eq!(s.counter, (0, 0));
    assert!(
        !s.wrong.is_empty() || s.inserted_after.is_some(),
        "found {} of {}",
        s.found,
        BEFORE + AFTER
    );
}

fn promoted_and_repaired(s: &Seen) {
    assert_eq!(s.updated_after, None);
    assert_eq!(s.updated_b0_after, None);
    assert_eq!(s.failed_before_view, Some(AbortReason::ReplicaFailure));
    assert_eq!(s.down, [1]);
    assert_eq!(s.promoted, [B]);
    assert_eq!(s.repaired, 1);
    // The backup's counter is the load's; the repair raises it to the buckets linked.
    assert_eq!(s.counter.0, 0);
    assert!(s.counter.1 > 0, "{:?}", s.counter);
    assert_eq!(s.inserted_after, None);
    assert_eq!((s.found, &s.wrong), (BEFORE + AFTER, &vec![]));
    let v1 = View::default().without(&[1]).unwrap();
    assert_eq!(s.bootstrapped, Some((v1, vec![0])));
}

/// The negative control: without the repair, the promoted primary hands out overflow buckets
/// already linked, and keys inserted before the failure are lost.
#[test]
fn without_the_repair_inserts_after_the_promotion_lose_keys() {
    let s = fail_over(Script {
        repair: false,
        ..FORD
    });
    repair_missed(&s);
}

/// RCC's OCC is DrTM+H's code: the common repair is all it needs.
#[test]
fn under_occ_the_backup_is_promoted_repaired_and_serves_inserts() {
    let s = fail_over(Script {
        protocol: Protocol::Occ,
        ..FORD
    });
    assert_eq!(s.updated_before_view, Some(AbortReason::ReplicaFailure));
    promoted_and_repaired(&s);
}

/// MVCC's version slots are written to every replica (the displaced copy before the new
/// version), so the promoted backup serves reads and inserts as the primary did.
#[test]
fn under_mvcc_the_backup_is_promoted_repaired_and_serves_inserts() {
    let s = fail_over(Script {
        protocol: Protocol::Mvcc,
        ..FORD
    });
    assert_eq!(s.updated_before_view, Some(AbortReason::ReplicaFailure));
    promoted_and_repaired(&s);
}

/// Scythe (every update TOCC, ticketed): the promoted takeout queues start empty.
#[test]
fn under_scythe_the_backup_is_promoted_repaired_and_serves_inserts() {
    let s = fail_over(Script {
        protocol: Protocol::Scythe,
        ..FORD
    });
    assert_eq!(s.updated_before_view, Some(AbortReason::ReplicaFailure));
    promoted_and_repaired(&s);
}

/// The negative control under Scythe: without its part of the repair, the promoted takeout
/// words are the backup's, whose queue reads longer than the hot watermark: every ticket on
/// `B`/0 is refused, and its update aborts.
#[test]
fn under_scythe_without_the_queue_repair_updates_of_a_promoted_record_are_refused() {
    let s = fail_over(Script {
        protocol: Protocol::Scythe,
        own_repair: false,
        ..FORD
    });
    assert_eq!(s.updated_b0_after, Some(AbortReason::LockConflict));
    assert_eq!(s.updated_after, None);
}

/// CALVIN (issue #23): its install takes no lock and has no undo log to roll back by (its
/// schedule decided the transaction commits): an install that fails on the backup that died
/// is finished on the live replicas and commits, as Motor's; its successors, waiting for its
/// done word, find it on every replica they may read.
#[test]
fn under_calvin_the_backup_is_promoted_repaired_and_serves_inserts() {
    let s = fail_over(Script {
        protocol: Protocol::Calvin,
        ..FORD
    });
    assert_eq!(s.updated_before_view, None);
    promoted_and_repaired(&s);
}

/// Its negative control: a coordinator that does not know failover is on leaves the failed
/// install as it landed, and aborts (before, with no failover, what every CALVIN did).
#[test]
fn under_calvin_without_failover_a_failed_install_aborts() {
    let s = fail_over(Script {
        protocol: Protocol::Calvin,
        failover: false,
        ..FORD
    });
    assert_eq!(s.updated_before_view, Some(AbortReason::ReplicaFailure));
}
