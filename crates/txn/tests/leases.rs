//! Leases and the online recovery service on the adversarial simulator: a survivor blocked on
//! a crashed coordinator's locks commits once the service has recovered it; a coordinator
//! whose lease expired (a zombie) cannot commit; recovery crashing half-way and running again
//! ends in the state one recovery leaves.

use dtxn_fabric::sim::{ComputeCrash, SimConfig, SimPool};
use dtxn_fabric::{Endpoint, Pool, Topology};
use dtxn_store::{Loader, Plan, PoolMap, PoolShape, TableSpec};
use dtxn_txn::membership::{self, LeaseConfig, RecoveryEvent, Service};
use dtxn_txn::{AbortReason, Access, Coordinator, Protocol, Recorder, TxKind, TxnConfig};
use rand::Rng;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

const T: u32 = 1;
const KEYS: u64 = 16;

fn value(v: u64) -> Vec<u8> {
    let mut b = vec![0u8; 64];
    b[..8].copy_from_slice(&v.to_le_bytes());
    b[56..].copy_from_slice(&v.to_le_bytes());
    b
}

fn num(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().unwrap())
}

/// A loaded pool (2 memory nodes, 2 replicas), every key holding 1000, with `crashes`.
fn pool(seed: u64, protocol: Protocol, crashes: Vec<ComputeCrash>) -> (Pool, Plan, SimConfig) {
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 2,
        log_slices: 16,
        log_slice_bytes: 4096,
        region_bytes: None,
    };
    let spec = TableSpec::new(T, "t", 64, KEYS).with_meta_words(protocol.meta_words());
    let plan = Plan::new(&[spec], &shape).unwrap();
    let mut cfg = SimConfig::new(seed, 2, plan.region_bytes);
    cfg.faults.compute_crashes = crashes;
    let pool = Pool::Sim(SimPool::new(cfg.clone()).unwrap());
    plan.format_pool(&pool).unwrap();
    let mut l = Loader::new(plan.table(T).unwrap());
    for k in 0..KEYS {
        l.insert(&pool, k, &value(1000)).unwrap();
    }
    (pool, plan, cfg)
}

fn terms(cfg: &SimConfig) -> LeaseConfig {
    let l = LeaseConfig::for_fabric(cfg.flight_bound_ns(), 0);
    l.check(cfg.flight_bound_ns(), 0).unwrap();
    l
}

fn txn_cfg(protocol: Protocol) -> Rc<TxnConfig> {
    Rc::new(TxnConfig {
        protocol,
        ..TxnConfig::default()
    })
}

/// One table of `KEYS` keys on `memory_nodes` nodes, 2 replicas, the control words on a chain
/// of two members (nodes 0 and 1).
fn control_plan(memory_nodes: u16) -> Plan {
    let shape = PoolShape {
        memory_nodes,
        replicas: 2,
        log_slices: 4,
        log_slice_bytes: 4096,
        region_bytes: None,
    };
    let spec = TableSpec::new(T, "t", 64, KEYS);
    Plan::new(&[spec], &shape)
        .unwrap()
        .with_control_replicas(2)
        .unwrap()
}

fn topo(compute_nodes: u32, coroutines: u32) -> Topology {
    Topology {
        compute_nodes,
        threads: 1,
        coroutines,
    }
}

/// Sets key `k` to `v` in one transaction; the abort if it does not commit.
async fn set(c: &mut Coordinator, k: u64, v: u64) -> Result<(), AbortReason> {
    let mut tx = c.begin(TxKind::ReadWrite);
    tx.fetch(&[Access::update(T, k)])
        .await
        .map_err(|a| a.reason)?;
    tx.update(T, k, &value(v)).await.map_err(|a| a.reason)?;
    tx.commit().await.map_err(|a| a.reason)
}

/// Key `k`'s value on every replica, read by the memory nodes' own CPUs.
fn replicas_of(pool: &Pool, plan: &Plan, k: u64) -> Vec<u64> {
    let t = plan.table(T).unwrap();
    let codec = t.codec();
    t.replicas
        .iter()
        .map(|&n| {
            let mut found = None;
            let buckets = t.bucket_count + t.overflow_buckets;
            let mut b = vec![0u8; t.bucket_bytes as usize];
            for i in 0..buckets {
                pool.with_local(n, |m| m.read(t.table_off + 64 + i * t.bucket_bytes, &mut b));
                for s in 0..t.slots_per_bucket {
                    let mut v = vec![0u8; 64];
                    if let Ok(h) = codec.decode(t.slot_bytes(&b, s), &mut v) {
                        if h.valid && h.key == k {
                            // A backup's word is no lock: the last install's id, invisible.
                            let lock = match n == t.primary() {
                                true => h.lock,
                                false => h.lock & !(1 << 63 | 0xffff),
                            };
                            assert_eq!(lock, 0, "key {k}: a lock left on node {n}");
                            found = Some(num(&v));
                        }
                    }
                }
            }
            found.expect("the key exists")
        })
        .collect()
}

/// Coordinator 1 (compute node 1) locks key 0 and its compute node crashes; coordinator 0 is
/// blocked on that lock until its recovery service notices the expired lease and recovers
/// coordinator 1 online; then its transaction commits.
/// One of two FORD coordinators holding leases: its index, its recovery service, and it.
async fn ford_member(mut ep: Endpoint, lease: LeaseConfig) -> (u32, Service, Coordinator) {
    let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
    membership::join(&mut ep, lease, map.control_set())
        .await
        .unwrap();
    let me = ep.id().index;
    let service = Service::new(Protocol::Ford, lease, 2, map.clone());
    (
        me,
        service,
        Coordinator::new(ep, map, txn_cfg(Protocol::Ford)),
    )
}

#[test]
fn a_survivor_blocked_on_a_crashed_coordinators_lock_commits_after_online_recovery() {
    for seed in 1..=4 {
        let crash = ComputeCrash {
            at_ns: 60_000,
            compute_node: 1,
        };
        let (mut pool, plan, cfg) = pool(seed, Protocol::Ford, vec![crash]);
        let lease = terms(&cfg);
        let locked = Rc::new(Cell::new(false));
        let Pool::Sim(sim) = &mut pool else {
            unreachable!()
        };
        let r = sim
            .run(topo(2, 1), None, |ep: Endpoint| {
                let locked = locked.clone();
                async move {
                    let (me, mut service, mut c) = ford_member(ep, lease).await;
                    if me == 1 {
                        // A first transaction caches key 0's address: FORD then locks it at
                        // execution (a cold item would be locked at commit only).
                        set(&mut c, 0, 1000).await.unwrap();
                        // (The detached release of that commit's lock lands first.)
                        c.endpoint().sleep(10_000).await;
                        let mut tx = c.begin(TxKind::ReadWrite);
                        tx.fetch(&[Access::update(T, 0)]).await.unwrap();
                        locked.set(true);
                        // Holding the lock when its compute node crashes.
                        tx.endpoint().sleep(10_000_000).await;
                        unreachable!("its compute node crashed");
                    }
                    c.endpoint().sleep(40_000).await;
                    let mut blocked = 0;
                    loop {
                        service.tick(c.endpoint()).await.unwrap();
                        match set(&mut c, 0, 777).await {
                            Ok(()) => break,
                            Err(AbortReason::LockConflict) => blocked += 1,
                            Err(r) => panic!("seed {seed}: {r:?}"),
                        }
                        c.endpoint().sleep(20_000).await;
                    }
                    let committed_at = c.endpoint().now_ns();
                    service.drain(c.endpoint()).await.unwrap();
                    (blocked, committed_at, service.events.clone())
                }
            })
            .unwrap();
        assert!(
            locked.get(),
            "seed {seed}: the doomed coordinator locked nothing"
        );
        assert!(r.outputs[1].is_none(), "seed {seed}: coordinator 1 crashed");
        let (blocked, committed_at, events) = r.outputs[0].clone().unwrap();
        assert!(blocked > 10, "seed {seed}: blocked {blocked} times only");
        let e: &RecoveryEvent = &events[0];
        assert_eq!(events.len(), 1, "seed {seed}: {events:?}");
        assert_eq!((e.coordinator, e.by), (1, 0));
        assert_eq!(e.locks_released, 1, "seed {seed}: {e:?}");
        assert!(
            e.noticed_ns >= e.expired_ns && e.expired_ns > 60_000,
            "{e:?}"
        );
        assert!(
            committed_at > e.finished_ns,
            "seed {seed}: committed before recovery"
        );
        assert_eq!(replicas_of(&pool, &plan, 0), vec![777, 777]);
    }
}

/// What a coordinator's recorder saw.
struct Collect(Rc<RefCell<Vec<dtxn_check::Txn>>>);

impl Recorder for Collect {
    fn record(&mut self, t: &dtxn_check::Txn) {
        self.0.borrow_mut().push(t.clone());
    }
}

/// Coordinator 1 locks key 1, stages a write, and stalls past its lease; coordinator 0,
/// blocked on that lock, recovers it (releases the lock; nothing was written) and commits
/// over key 1.
/// When coordinator 1 resumes, its commit is refused (`LeaseExpired`), it posts nothing
/// more, and its transaction is left out of the history: key 1 holds coordinator 0's value.
#[test]
fn a_zombie_whose_lease_expired_cannot_commit() {
    for seed in 1..=4 {
        let (mut pool, plan, cfg) = pool(seed, Protocol::Ford, Vec::new());
        let lease = terms(&cfg);
        let history = Rc::new(RefCell::new(Vec::new()));
        let Pool::Sim(sim) = &mut pool else {
            unreachable!()
        };
        let r = sim
            .run(topo(2, 1), None, |ep: Endpoint| {
                let history = history.clone();
                async move {
                    let (me, mut service, mut c) = ford_member(ep, lease).await;
                    if me == 1 {
                        set(&mut c, 1, 1000).await.unwrap();
                        c.set_recorder(Box::new(Collect(history)));
                        // (The detached release of that commit's lock lands first.)
                        c.endpoint().sleep(10_000).await;
                        let mut tx = c.begin(TxKind::ReadWrite);
                        tx.fetch(&[Access::update(T, 1)]).await.unwrap();
                        tx.update(T, 1, &value(555)).await.unwrap();
                        // A stall three leases long: the lease expires meanwhile.
                        tx.endpoint().sleep(3 * lease.lease_ns).await;
                        let refused = tx.commit().await.map_err(|a| a.reason);
                        let fenced = c.endpoint().fenced();
                        // Nothing gets out any more: not even a read.
                        let after = set(&mut c, 2, 1).await;
                        return Err((refused, fenced, after));
                    }
                    c.endpoint().sleep(40_000).await;
                    loop {
                        service.tick(c.endpoint()).await.unwrap();
                        if set(&mut c, 1, 999).await.is_ok() {
                            break;
                        }
                        c.endpoint().sleep(20_000).await;
                    }
                    service.drain(c.endpoint()).await.unwrap();
                    Ok(service.events.clone())
                }
            })
            .unwrap();
        let Some(Err((refused, fenced, after))) = r.outputs[1].clone() else {
            panic!("seed {seed}: the zombie did not finish");
        };
        assert_eq!(refused, Err(AbortReason::LeaseExpired), "seed {seed}");
        assert!(fenced, "seed {seed}");
        assert_eq!(after, Err(AbortReason::LeaseExpired), "seed {seed}");
        let Some(Ok(events)) = r.outputs[0].clone() else {
            panic!("seed {seed}: the survivor did not finish");
        };
        assert_eq!(events.len(), 1, "seed {seed}: {events:?}");
        assert_eq!(events[0].coordinator, 1);
        assert_eq!(
            events[0].locks_released, 1,
            "seed {seed}: the zombie's lock"
        );
        assert!(
            history.borrow().is_empty(),
            "seed {seed}: the zombie recorded"
        );
        assert_eq!(replicas_of(&pool, &plan, 1), vec![999, 999], "seed {seed}");
        assert_eq!(
            replicas_of(&pool, &plan, 2),
            vec![1000, 1000],
            "seed {seed}"
        );
    }
}

/// A pool whose compute node 1 (coordinators 3, 4, 5) crashed amid transfers, unrecovered.
fn crashed_pool(seed: u64, protocol: Protocol) -> (Pool, Plan) {
    let crash = ComputeCrash {
        at_ns: 30_000 + seed * 7_919,
        compute_node: 1,
    };
    let (mut pool, plan, _) = pool(seed, protocol, vec![crash]);
    let Pool::Sim(sim) = &mut pool else {
        unreachable!()
    };
    sim.run(topo(2, 3), None, |mut ep: Endpoint| async move {
        let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
        let mut c = Coordinator::new(ep, map, txn_cfg(protocol));
        for _ in 0..60 {
            let a = c.endpoint().rng().random_range(0..KEYS);
            let b = (a + c.endpoint().rng().random_range(1..KEYS)) % KEYS;
            let mut tx = c.begin(TxKind::ReadWrite);
            if tx
                .fetch(&[Access::update(T, a), Access::update(T, b)])
                .await
                .is_err()
            {
                continue;
            }
            let (x, y) = (num(tx.get(T, a).unwrap()), num(tx.get(T, b).unwrap()));
            if tx.update(T, a, &value(x - 1)).await.is_err() {
                continue;
            }
            if tx.update(T, b, &value(y + 1)).await.is_err() {
                continue;
            }
            let _ = tx.commit().await;
        }
    })
    .unwrap();
    let Pool::Sim(sim) = &mut pool else {
        unreachable!()
    };
    sim.set_faults(Default::default());
    (pool, plan)
}

/// Runs `recover_all` for coordinators 3..6 on a coordinator of its own, whose compute node
/// crashes `crash_at` ns into the run if given. Its results (none if it crashed) and the run's
/// length.
fn recover(
    pool: &mut Pool,
    protocol: Protocol,
    crash_at: Option<u64>,
) -> (Option<Vec<(dtxn_txn::recovery::Recovered, u32)>>, u64) {
    let Pool::Sim(sim) = pool else { unreachable!() };
    let mut f = dtxn_fabric::sim::Faults::default();
    if let Some(at_ns) = crash_at {
        f.compute_crashes.push(ComputeCrash {
            at_ns,
            compute_node: 0,
        });
    }
    // Two compute nodes: one must survive the crash (the plan never crashes them all); the
    // second has nothing to do.
    sim.set_faults(f);
    let r = sim
        .run(topo(2, 1), None, |mut ep: Endpoint| async move {
            if ep.id().index != 0 {
                return None;
            }
            let map = PoolMap::bootstrap(&mut ep).await.unwrap();
            Some(
                dtxn_txn::recovery::recover_all(&mut ep, &map, protocol, &[3, 4, 5])
                    .await
                    .unwrap(),
            )
        })
        .unwrap();
    sim.set_faults(Default::default());
    (r.outputs[0].clone().flatten(), r.elapsed_ns)
}

/// Every byte of the table on every replica, and every log slice's newest status.
fn state(pool: &Pool, plan: &Plan) -> Vec<u8> {
    let t = plan.table(T).unwrap();
    let mut out = Vec::new();
    for &n in &t.replicas {
        let mut b = vec![0u8; t.bytes() as usize];
        pool.with_local(n, |m| m.read(t.table_off, &mut b));
        out.extend_from_slice(&b);
    }
    let slice = plan.shape.log_slice_bytes;
    for n in 0..plan.shape.memory_nodes {
        for s in 0..plan.shape.log_slices {
            let mut b = vec![0u8; slice as usize];
            pool.with_local(n, |m| m.read(plan.log_off + u64::from(s) * slice, &mut b));
            let e = dtxn_store::log::LogEntry::decode(&b).ok().flatten();
            out.push(e.map_or(0, |e| e.status as u8 + 1));
        }
    }
    out
}

/// Recovery crashing at many instants, then run again, leaves the pool as one recovery does,
/// byte for byte (images, versions, locks) and log status for log status.
#[test]
fn recovery_crashing_half_way_and_running_again_ends_in_the_same_state() {
    let mut interrupted = 0;
    for protocol in [Protocol::Ford, Protocol::Farm, Protocol::Sundial] {
        for seed in 1..=3 {
            let what = format!("{}: seed {seed}", protocol.name());
            let (mut reference, plan) = crashed_pool(seed, protocol);
            let before = state(&reference, &plan);
            let (once, took) = recover(&mut reference, protocol, None);
            let once = once.expect("a recovery without a crash finishes");
            let want = state(&reference, &plan);
            let settled = once
                .iter()
                .any(|(o, _)| *o != dtxn_txn::recovery::Recovered::Nothing);
            assert!(
                settled || once.iter().any(|(_, n)| *n > 0),
                "{what}: the crash left nothing to recover"
            );
            for tenth in 1..10 {
                let (mut pool, _) = crashed_pool(seed, protocol);
                assert_eq!(state(&pool, &plan), before, "{what}: not deterministic");
                let (first, _) = recover(&mut pool, protocol, Some(took * tenth / 10));
                interrupted += u32::from(first.is_none());
                let (again, _) = recover(&mut pool, protocol, None);
                again.expect("finishes");
                assert_eq!(state(&pool, &plan), want, "{what}: crashed at {tenth}/10");
                for k in 0..KEYS {
                    replicas_of(&pool, &plan, k);
                }
            }
        }
    }
    assert!(
        interrupted > 20,
        "only {interrupted} recoveries were cut short"
    );
}

/// The same on `shm`, on the wall clock: coordinator 1 (a thread of its own) locks key 0 and
/// stops (its future ends: it never renews, it is never done); coordinator 0, blocked on that
/// lock, recovers it once its lease expired and commits.
#[test]
fn on_shm_a_coordinator_that_stops_holding_a_lock_is_recovered_online() {
    use dtxn_fabric::shm::{ShmConfig, ShmPool};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 2,
        log_slices: 16,
        log_slice_bytes: 4096,
        region_bytes: None,
    };
    let spec = TableSpec::new(T, "t", 64, KEYS).with_meta_words(Protocol::Ford.meta_words());
    let plan = Plan::new(&[spec], &shape).unwrap();
    let shm = ShmPool::create(ShmConfig {
        node_sizes: vec![plan.region_bytes; 2],
        dir: None,
        delay_ns: 0,
    })
    .unwrap();
    let pool = Pool::Shm(shm);
    plan.format_pool(&pool).unwrap();
    let mut l = Loader::new(plan.table(T).unwrap());
    for k in 0..KEYS {
        l.insert(&pool, k, &value(1000)).unwrap();
    }
    // Generous for a busy machine: a renewal survives a stall of up to 250 ms.
    let lease = LeaseConfig {
        lease_ns: 400_000_000,
        guard_ns: 50_000_000,
    };
    let locked = Arc::new(AtomicBool::new(false));
    let two = Topology {
        compute_nodes: 1,
        threads: 2,
        coroutines: 1,
    };
    let Pool::Shm(shm) = &pool else {
        unreachable!()
    };
    let r = shm
        .run(two, None, |ep: Endpoint| {
            let locked = locked.clone();
            async move {
                let (me, mut service, mut c) = ford_member(ep, lease).await;
                if me == 1 {
                    set(&mut c, 0, 1000).await.unwrap();
                    let mut tx = c.begin(TxKind::ReadWrite);
                    loop {
                        // (Until the detached release of the first commit's lock landed.)
                        match tx.fetch(&[Access::update(T, 0)]).await {
                            Ok(_) => break,
                            Err(a) => assert_eq!(a.reason, AbortReason::LockConflict),
                        }
                        tx = c.begin(TxKind::ReadWrite);
                    }
                    locked.store(true, Ordering::Release);
                    // Gone, holding the lock: nothing of it runs again.
                    std::mem::forget(tx);
                    return None;
                }
                while !locked.load(Ordering::Acquire) {
                    c.endpoint().sleep(100_000).await;
                }
                let start = c.endpoint().now_ns();
                let mut blocked = 0;
                loop {
                    service.tick(c.endpoint()).await.unwrap();
                    match set(&mut c, 0, 777).await {
                        Ok(()) => break,
                        Err(AbortReason::LockConflict) => blocked += 1,
                        Err(r) => panic!("{r:?}"),
                    }
                    assert!(
                        c.endpoint().now_ns() - start < 20_000_000_000,
                        "still blocked after 20 s"
                    );
                    c.endpoint().sleep(5_000_000).await;
                }
                service.drain(c.endpoint()).await.unwrap();
                Some((blocked, service.events.clone()))
            }
        })
        .unwrap();
    let (blocked, events) = r.outputs[0].clone().unwrap().unwrap();
    assert!(blocked > 0, "never blocked");
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!((e.coordinator, e.by, e.locks_released), (1, 0, 1), "{e:?}");
    // On the wall clock: the expiry is about now, not a run-relative instant.
    let now = dtxn_fabric::wall_clock_ns();
    assert!(
        e.expired_ns < now && now - e.expired_ns < 60_000_000_000,
        "{e:?}"
    );
    assert!(e.noticed_ns >= e.expired_ns, "{e:?}");
    assert_eq!(replicas_of(&pool, &plan, 0), vec![777, 777]);
}

/// With the control chain on nodes 0 and 1 (`Plan::with_control_replicas(2)`), a lease word
/// and a view acknowledgement have a copy on each, and a detector takes the latest copy: the
/// greatest expiry (with its word's done bit and incarnation), the greatest acknowledgement.
/// Once node 1 died, a READ of the area leaves its copies out (posted again without them),
/// and reads node 0's.
#[test]
fn a_detector_takes_the_latest_copy_of_each_lease_and_leaves_a_dead_members_out() {
    use dtxn_fabric::sim::MemoryCrash;
    use dtxn_fabric::Lease;
    use dtxn_store::layout::{ACK_OFF, LEASE_OFF};
    let plan = control_plan(2);
    let mut cfg = SimConfig::new(5, 2, plan.region_bytes);
    cfg.faults.memory_crashes.push(MemoryCrash {
        at_ns: 50_000,
        node: 1,
        down_ns: MemoryCrash::FOREVER,
    });
    let pool = Pool::Sim(SimPool::new(cfg).unwrap());
    plan.format_pool(&pool).unwrap();
    let Pool::Sim(mut sim) = pool else {
        unreachable!()
    };
    // Slot 0: node 1's copy is the later one (node 0's missed a renewal); slot 1: node 0's;
    // slot 2: the acknowledgements differ the other way.
    let at = |slot: u64| LEASE_OFF + 8 * slot;
    sim.with_local(0, |m| {
        m.write(at(0), &Lease::word(100_000, false, 3).to_le_bytes());
        m.write(at(1), &Lease::word(900_000, true, 2).to_le_bytes());
        m.write(ACK_OFF + 16, &7u64.to_le_bytes());
    });
    sim.with_local(1, |m| {
        m.write(at(0), &Lease::word(400_000, true, 4).to_le_bytes());
        m.write(at(1), &Lease::word(200_000, false, 1).to_le_bytes());
        m.write(ACK_OFF + 16, &5u64.to_le_bytes());
        m.write(ACK_OFF, &9u64.to_le_bytes());
    });
    let r = sim
        .run(topo(1, 1), None, |mut ep: Endpoint| async move {
            let map = PoolMap::bootstrap(&mut ep).await.unwrap();
            let copies = map.control_set();
            let before = membership::read_members(&mut ep, 3, copies).await.unwrap();
            // Past node 1's death, which this endpoint has not seen yet.
            ep.sleep(100_000).await;
            let seen = ep.seen_down();
            let after = membership::read_members(&mut ep, 3, copies).await.unwrap();
            (copies, before.members, seen, after.members, ep.seen_down())
        })
        .unwrap();
    let (copies, before, seen, after, seen_after) = r.outputs[0].clone().unwrap();
    assert_eq!(copies, dtxn_fabric::NodeSet::first(2));
    let lease = |m: &membership::Member| (m.expiry_ns, m.done, m.incarnation);
    assert_eq!(lease(&before[0]), (400_000, true, 4));
    assert_eq!(lease(&before[1]), (900_000, true, 2));
    assert_eq!((before[0].ack, before[2].ack), (9, 7));
    assert!(seen.is_empty());
    // Node 0's copies alone.
    assert_eq!(lease(&after[0]), (100_000, false, 3));
    assert_eq!((after[0].ack, after[2].ack), (0, 7));
    assert_eq!(seen_after, dtxn_fabric::NodeSet::single(1));
}

/// The CAS words on a control chain of two members (issue #23, increment 4): a writer that
/// crashed after its head CAS left its leader word, view and recovered mark on node 0 alone.
/// A read of the membership area returns them (committed: the head never fails here) and
/// carries them to node 1; writes then go down the chain (both hold them), and one whose
/// tail died mid-way is done on the head alone.
#[test]
fn a_read_carries_a_dead_writers_control_words_down_the_chain() {
    use dtxn_fabric::sim::MemoryCrash;
    use dtxn_store::layout::{LeaderWord, RecoveredWord, LEADER_OFF, RECOVERED_OFF, VIEW_OFF};
    use dtxn_store::View;
    use dtxn_txn::control::Write;
    let plan = control_plan(3);
    const FAIL_NS: u64 = 500_000;
    let mut cfg = SimConfig::new(7, 3, plan.region_bytes);
    cfg.faults.memory_crashes.push(MemoryCrash {
        at_ns: FAIL_NS,
        node: 1,
        down_ns: MemoryCrash::FOREVER,
    });
    let pool = Pool::Sim(SimPool::new(cfg).unwrap());
    plan.format_pool(&pool).unwrap();
    let Pool::Sim(mut sim) = pool else {
        unreachable!()
    };
    let leader = LeaderWord { seq: 1, owner: 3 }.word();
    let v1 = View::default().without(&[2]).unwrap();
    let mark = RecoveredWord {
        seq: 1,
        writer: 3,
        incarnation: 1,
    }
    .word();
    sim.with_local(0, |m| {
        m.write(LEADER_OFF, &leader.to_le_bytes());
        m.write(VIEW_OFF, &v1.word().to_le_bytes());
        m.write(RECOVERED_OFF + 16, &mark.to_le_bytes());
    });
    let words = |sim: &SimPool, n: u16| {
        sim.with_local(n, |m| {
            (
                m.read_u64(LEADER_OFF),
                m.read_u64(VIEW_OFF),
                m.read_u64(RECOVERED_OFF + 16),
            )
        })
    };
    assert_eq!(words(&sim, 1), (0, 0, 0), "node 1 behind");
    let v2 = v1.joining(2).unwrap();
    let v3 = v2.without(&[1]).unwrap();
    let r = sim
        .run(topo(1, 1), None, move |mut ep: Endpoint| async move {
            let map = PoolMap::bootstrap(&mut ep).await.unwrap();
            let copies = map.control_set();
            let m = membership::read_members(&mut ep, 3, copies).await.unwrap();
            let read = (
                m.leader,
                m.view,
                m.members[2].recovered,
                m.members[2].recovered_word,
            );
            let changed = membership::change_view(&mut ep, copies, v1, v2).await;
            let marked =
                membership::mark_recovered(&mut ep, copies, &m, &[2], &mut Default::default())
                    .await;
            // What the tail holds now.
            let tail = [LEADER_OFF, VIEW_OFF, RECOVERED_OFF + 16].map(|off| ep.read(1, off, 8));
            ep.post().await.unwrap();
            let tail = tail.map(|op| ep.word(op, 0));
            // Past node 1's death, which this endpoint has not seen: the tail's CAS fails.
            ep.sleep(FAIL_NS).await;
            let alone = membership::change_view(&mut ep, copies, v2, v3).await;
            let after = membership::read_view(&mut ep, copies).await;
            (copies, read, changed, marked, tail, alone, after)
        })
        .unwrap();
    let (copies, read, changed, marked, tail, alone, after) = r.outputs[0].clone().unwrap();
    assert_eq!(copies, dtxn_fabric::NodeSet::first(2));
    assert_eq!(read, (leader, v1, 1, mark), "the head's words, committed");
    assert_eq!(changed, Ok(Write::Done));
    assert_eq!(marked, Ok(vec![Write::Done]));
    assert_eq!(alone, Ok(Write::Done), "done on the head alone");
    assert_eq!(after, Ok(v3));
    // Node 2's mark went from the dead writer's (carried to node 1 by the read) to ours.
    let ours = RecoveredWord::parse(mark).then(1, 0).word();
    assert_eq!(tail, [leader, v2.word(), ours]);
    assert_eq!(words(&sim, 0), (leader, v3.word(), ours));
}
