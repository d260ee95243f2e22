//! Two memory nodes fail for good, the second while the view change for the first is under
//! way (issue #23): memory node 1, primary of table `B`, fails; the coordinators adopt the
//! view without it, in which node 2 is `B`'s primary; node 2 fails while they wait out the
//! lease guard, before anyone touched it in the new view. The first op of the new view on
//! node 2 is then the leader's repair of the promoted table. Before the fix the repair failed
//! on node 2, marked it suspect and was tried again at once, never probing: the view change
//! never completed and every coordinator waited for it forever (a livelock in virtual time;
//! `dtxn bench --faults memory=2` never ended). Now the repair's failure is probed, the view
//! changes again (nodes 1 and 2 failed, node 0 `B`'s primary), and the run ends with every
//! unit of money on node 0 and no lock left.

use dtxn_fabric::sim::{MemoryCrash, SimConfig, SimPool};
use dtxn_fabric::{Endpoint, Pool, Topology};
use dtxn_store::layout::VIEW_OFF;
use dtxn_store::{Loader, Plan, PoolMap, PoolShape, TableSpec, View};
use dtxn_txn::membership::{self, LeaseConfig, Service};
use dtxn_txn::{AbortReason, Access, Coordinator, Protocol, TxKind, TxnConfig};
use std::cell::RefCell;
use std::rc::Rc;

const A: u32 = 1;
const B: u32 = 2;
const ACCOUNTS: u64 = 16;
const BALANCE: u64 = 1000;
/// Node 1 fails then (virtual time); node 2 half a lease guard later.
const FAIL_1_NS: u64 = 1_000_000;
/// Coordinators stop starting transactions then.
const STOP_NS: u64 = 30_000_000;
/// The run is cut off then: far beyond what it needs (about 40 ms of virtual time).
const CUT_OFF_NS: u64 = 400_000_000;
const COORDINATORS: u32 = 4;

fn v(x: u64) -> Vec<u8> {
    x.to_le_bytes().to_vec()
}

fn num(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().unwrap())
}

fn pool(seed: u64) -> (SimPool, Plan, LeaseConfig) {
    let shape = PoolShape {
        memory_nodes: 3,
        replicas: 3,
        log_slices: 8,
        log_slice_bytes: 32 << 10,
        region_bytes: None,
    };
    let (a, b) = (TableSpec::new(A, "a", 8, 16), TableSpec::new(B, "b", 8, 64));
    let plan = Plan::new(&[a, b], &shape).unwrap();
    assert_eq!(plan.table(B).unwrap().replicas, [1, 2, 0]);
    let mut cfg = SimConfig::new(seed, 3, plan.region_bytes);
    let lease = LeaseConfig::for_fabric(cfg.flight_bound_ns(), 0);
    cfg.faults.memory_crashes = vec![
        MemoryCrash {
            at_ns: FAIL_1_NS,
            node: 1,
            down_ns: MemoryCrash::FOREVER,
        },
        MemoryCrash {
            at_ns: FAIL_1_NS + lease.guard_ns / 2,
            node: 2,
            down_ns: MemoryCrash::FOREVER,
        },
    ];
    let mut pool = Pool::Sim(SimPool::new(cfg).unwrap());
    pool.set_rpc_handler(std::sync::Arc::new(dtxn_txn::MemoryNodeHandlers));
    plan.format_pool(&pool).unwrap();
    let mut l = Loader::new(plan.table(B).unwrap());
    for k in 0..ACCOUNTS {
        l.insert(&pool, k, &v(BALANCE)).unwrap();
    }
    let Pool::Sim(s) = pool else { unreachable!() };
    (s, plan, lease)
}

#[derive(Default)]
struct Seen {
    /// Coordinators that ended (their liveness phase over).
    ended: u32,
    /// Transactions committed in the view where nodes 1 and 2 failed.
    committed_last_view: u64,
}

fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

async fn transfer(c: &mut Coordinator, from: u64, to: u64) -> Result<(), AbortReason> {
    let mut tx = c.begin(TxKind::ReadWrite);
    tx.fetch(&[Access::update(B, from), Access::update(B, to)])
        .await
        .map_err(|a| a.reason)?;
    let (a, b) = (num(tx.get(B, from).unwrap()), num(tx.get(B, to).unwrap()));
    if a == 0 {
        tx.rollback().await;
        return Ok(());
    }
    tx.update(B, from, &v(a - 1)).await.map_err(|a| a.reason)?;
    tx.update(B, to, &v(b + 1)).await.map_err(|a| a.reason)?;
    tx.commit().await.map_err(|a| a.reason)
}

async fn member(mut ep: Endpoint, protocol: Protocol, lease: LeaseConfig, seen: Rc<RefCell<Seen>>) {
    let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
    membership::join(&mut ep, lease, map.control_set())
        .await
        .unwrap();
    let me = ep.id().index;
    let mut service = Service::new(protocol, lease, COORDINATORS, map.clone());
    let cfg = TxnConfig {
        protocol,
        lock_journal: true,
        ..TxnConfig::default()
    };
    let mut c = Coordinator::new(ep, map, Rc::new(cfg));
    c.set_failover(true);
    let mut rng = 0x9e37_79b9_7f4a_7c15 ^ ((u64::from(me) + 1) * 0x1234_5678);
    while c.endpoint().now_ns() < STOP_NS {
        if let Some(map) = service.tick(c.endpoint()).await.unwrap() {
            c.set_map(map);
        }
        let last_view = service.map().view().failed_nodes().count() == 2;
        let from = next(&mut rng) % ACCOUNTS;
        let to = (from + 1 + next(&mut rng) % (ACCOUNTS - 1)) % ACCOUNTS;
        match transfer(&mut c, from, to).await {
            Ok(()) if last_view => seen.borrow_mut().committed_last_view += 1,
            Err(AbortReason::ReplicaFailure) => service.suspect(),
            _ => {}
        }
    }
    c.retire().await;
    service.drain(c.endpoint()).await.unwrap();
    seen.borrow_mut().ended += 1;
}

/// Runs the scenario (cut off at `CUT_OFF_NS`); returns what the coordinators saw, the final
/// view and the money in `B` on node 0, every lock word there checked clear.
fn run(seed: u64, protocol: Protocol) -> (Seen, View, u64) {
    let (mut sim, plan, lease) = pool(seed);
    let seen = Rc::new(RefCell::new(Seen::default()));
    let s = seen.clone();
    let topo = Topology {
        compute_nodes: 2,
        threads: 1,
        coroutines: COORDINATORS / 2,
    };
    sim.run(topo, Some(CUT_OFF_NS), move |ep| {
        member(ep, protocol, lease, s.clone())
    })
    .unwrap();
    let pool = Pool::Sim(sim);
    let view = View::parse(pool.with_local(0, |m| m.read_u64(VIEW_OFF)));
    let t = plan.table(B).unwrap();
    let codec = t.codec();
    let mut money = 0;
    let mut bytes = vec![0u8; t.bucket_bytes as usize];
    for i in 0..t.bucket_count + t.overflow_buckets {
        pool.with_local(0, |m| m.read(t.bucket(i), &mut bytes));
        for s in 0..t.slots_per_bucket {
            let mut val = vec![0u8; 8];
            if let Ok(h) = codec.decode(t.slot_bytes(&bytes, s), &mut val) {
                if h.valid {
                    assert_eq!(h.lock, 0, "a lock word left on node 0");
                    money += num(&val);
                }
            }
        }
    }
    let seen = Rc::try_unwrap(seen).ok().unwrap().into_inner();
    (seen, view, money)
}

#[test]
fn a_second_memory_node_failing_during_the_view_change_is_failed_over_too() {
    for seed in 1..=3 {
        let (seen, view, money) = run(seed, Protocol::Ford);
        assert_eq!(
            seen.ended, COORDINATORS,
            "seed {seed}: the run did not end (view {view:?})"
        );
        assert_eq!(
            view.failed_nodes().collect::<Vec<_>>(),
            [1, 2],
            "seed {seed}"
        );
        assert!(
            seen.committed_last_view > 0,
            "seed {seed}: nothing committed in the last view"
        );
        assert_eq!(money, ACCOUNTS * BALANCE, "seed {seed}: money on node 0");
    }
}
