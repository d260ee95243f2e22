//! Memory-node failover under SUNDIAL: the leases a reader renewed on the failed primary are
//! not on the promoted backup (renewals go to the primary alone), so the repair raises every
//! promoted lease past every timestamp an older view committed at. Step by step on one
//! coordinator, as `failover.rs`.

use dtxn_fabric::sim::{Adversary, MemoryCrash, SimConfig, SimPool};
use dtxn_fabric::{Endpoint, Pool, Profile, Topology};
use dtxn_store::layout::VIEW_OFF;
use dtxn_store::{Loader, Plan, PoolMap, PoolShape, TableSpec, View};
use dtxn_txn::failover::{probe, repair_promoted};
use dtxn_txn::{Coordinator, Protocol, TxKind, TxnConfig};
use std::rc::Rc;

/// `A`'s primary is node 0, `B`'s node 1 (each backed up on the other).
const A: u32 = 1;
const B: u32 = 2;
const FAIL_NS: u64 = 5_000_000;

fn v(x: u64) -> Vec<u8> {
    (x * 7).to_le_bytes().to_vec()
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
    let pool = Pool::Sim(SimPool::new(cfg).unwrap());
    plan.format_pool(&pool).unwrap();
    for t in [A, B] {
        let mut l = Loader::new(plan.table(t).unwrap());
        for k in 0..4 {
            l.insert(&pool, k, &v(k)).unwrap();
        }
    }
    let Pool::Sim(s) = pool else { unreachable!() };
    s
}

async fn update(c: &mut Coordinator, reads: &[(u32, u64)], write: (u32, u64), x: u64) {
    let mut tx = c.begin(TxKind::ReadWrite);
    for &(t, k) in reads {
        tx.read(t, k).await.unwrap();
    }
    tx.read_for_update(write.0, write.1).await.unwrap();
    tx.update(write.0, write.1, &v(x)).await.unwrap();
    tx.commit().await.unwrap();
}

/// A record's version (its `wts`) on memory node `n`.
async fn version(ep: &mut Endpoint, map: &PoolMap, t: u32, k: u64, n: u16) -> u64 {
    let t = map.table(t).unwrap();
    let home = t.home_bucket(k);
    let r = ep.read(n, home, t.bucket_bytes as usize);
    ep.post().await.unwrap();
    let bytes = ep.bytes(r);
    let (s, _) = t.scan(home, bytes, k).found.expect("in its home bucket");
    t.codec().header(t.slot_bytes(bytes, s)).version
}

/// `R` reads `B`'s key 0 and writes `A`'s key 0, whose lease ends later: `R` commits above
/// `B`/0's `wts` and renews its lease on node 1. Node 1 fails; `W` then updates `B`/0 on the
/// promoted primary. Returns (`R`'s timestamp, `W`'s).
fn reader_then_writer(repair: bool) -> (u64, u64) {
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 2,
        log_slices: 4,
        log_slice_bytes: 4096,
        region_bytes: None,
    };
    let spec = |id, name| TableSpec::new(id, name, 8, 64).with_meta_words(1);
    let plan = Plan::new(&[spec(A, "a"), spec(B, "b")], &shape).unwrap();
    let mut sim = sim(&plan);
    let one = Topology {
        compute_nodes: 1,
        threads: 1,
        coroutines: 1,
    };
    let r = sim
        .run(one, None, move |mut ep: Endpoint| async move {
            let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
            assert_eq!(map.table(B).unwrap().replicas, [1, 0]);
            let cfg = TxnConfig {
                protocol: Protocol::Sundial,
                ..TxnConfig::default()
            };
            let mut c = Coordinator::new(ep, map.clone(), Rc::new(cfg));
            c.set_failover(true);
            // `A`/0 written twice: its `wts` is above `B`/0's.
            update(&mut c, &[], (A, 0), 1).await;
            update(&mut c, &[], (A, 0), 2).await;
            update(&mut c, &[(B, 0)], (A, 0), 3).await;
            let ts_r = version(c.endpoint(), &map, A, 0, 0).await;
            let b0 = version(c.endpoint(), &map, B, 0, 1).await;
            assert!(ts_r > b0, "R commits above B/0's wts: {ts_r} vs {b0}");
            let now = c.endpoint().now_ns();
            c.endpoint().sleep(FAIL_NS + 1_000 - now.min(FAIL_NS)).await;
            let ep = c.endpoint();
            let down = probe(ep, &map).await.unwrap();
            assert_eq!(down, [1]);
            let next = View::default().without(&down).unwrap();
            let cas = ep.cas(0, VIEW_OFF, View::default().word(), next.word());
            ep.post().await.unwrap();
            assert!(ep.cas_ok(cas));
            let map = Rc::new(map.in_view(next));
            let p = if repair {
                Protocol::Sundial
            } else {
                Protocol::Ford
            };
            assert_eq!(repair_promoted(ep, &map, p, None).await.unwrap(), 1);
            c.set_map(map.clone());
            update(&mut c, &[], (B, 0), 4).await;
            let ts_w = version(c.endpoint(), &map, B, 0, 0).await;
            (ts_r, ts_w)
        })
        .unwrap();
    r.outputs.into_iter().next().unwrap().unwrap()
}

/// `R` read `B`/0's version before `W`'s, so `W` must be ordered after `R`.
#[test]
fn a_writer_on_the_promoted_primary_commits_above_an_old_view_reader() {
    let (r, w) = reader_then_writer(true);
    assert!(w > r, "W at {w}, R at {r}");
}

/// The negative control: without SUNDIAL's part of the repair (the common repair alone), the
/// promoted lease ends at `B`/0's `wts`, and `W` commits below `R`, which did not see it.
#[test]
fn without_the_lease_repair_the_writer_commits_below_the_reader() {
    let (r, w) = reader_then_writer(false);
    assert!(w < r, "W at {w}, R at {r}");
}
