//! Memory-node failover under MVCC: readers raise a record's `rts` on its primary alone, so a
//! promoted backup holds none of the raises an older view made. A new-view writer must still
//! be ordered after every old-view reader: MVCC's timestamps carry the view's number above the
//! clock (with failover on), so every new-view timestamp is above every old one, whatever the
//! clocks' skew. Step by step, as `failover_leases.rs` (SUNDIAL's).

use dtxn_fabric::sim::{Adversary, MemoryCrash, SimConfig, SimPool};
use dtxn_fabric::{Endpoint, Pool, Profile, Topology};
use dtxn_store::layout::VIEW_OFF;
use dtxn_store::record::META_OFF;
use dtxn_store::{Loader, Plan, PoolMap, PoolShape, TableSpec, View};
use dtxn_txn::failover::{probe, repair_promoted};
use dtxn_txn::{Coordinator, Protocol, TxKind, TxnConfig};
use std::rc::Rc;

/// `A`'s primary is node 0, `B`'s node 1 (each backed up on the other).
const A: u32 = 1;
const B: u32 = 2;
const FAIL_NS: u64 = 5_000_000;
/// The writer starts then, once the reader's coordinator has failed over.
const WRITER_NS: u64 = 8_000_000;

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

/// A record's slot address and version (its `wts`) on memory node `n`.
async fn slot(ep: &mut Endpoint, map: &PoolMap, t: u32, k: u64, n: u16) -> (u64, u64) {
    let t = map.table(t).unwrap();
    let home = t.home_bucket(k);
    let r = ep.read(n, home, t.bucket_bytes as usize);
    ep.post().await.unwrap();
    let bytes = ep.bytes(r);
    let (s, _) = t.scan(home, bytes, k).found.expect("in its home bucket");
    let version = t.codec().header(t.slot_bytes(bytes, s)).version;
    (t.slot(home, s), version)
}

fn coordinator(ep: Endpoint, map: Rc<PoolMap>, failover: bool) -> Coordinator {
    let cfg = TxnConfig {
        protocol: Protocol::Mvcc,
        ..TxnConfig::default()
    };
    let mut c = Coordinator::new(ep, map, Rc::new(cfg));
    c.set_failover(failover);
    c
}

/// What each coordinator saw: `R`'s commit timestamp; `W`'s, and the value of `A`/0 it read.
#[derive(Debug, Default)]
struct Seen {
    ts: u64,
    a0: Option<Vec<u8>>,
}

/// Coordinator 0 (`R`) runs a clock one second ahead (it read a record whose `rts` a
/// fast-clocked reader raised), reads `B`/0 (its `rts` raised on node 1 alone) and writes
/// `A`/0. Node 1 fails; `R` fails over. Then coordinator 1 (`W`, its clock on time) reads
/// `A`/0 and writes `B`/0 on the promoted primary. Returns (`R`, `W`).
fn reader_then_writer(failover: bool) -> (Seen, Seen) {
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 2,
        log_slices: 4,
        log_slice_bytes: 4096,
        region_bytes: None,
    };
    let spec = |id, name| {
        TableSpec::new(id, name, 8, 64)
            .with_meta_words(1)
            .with_copies(4)
    };
    let plan = Plan::new(&[spec(A, "a"), spec(B, "b")], &shape).unwrap();
    let mut sim = sim(&plan);
    let two = Topology {
        compute_nodes: 1,
        threads: 1,
        coroutines: 2,
    };
    let r = sim
        .run(two, None, move |mut ep: Endpoint| async move {
            let mut seen = Seen::default();
            if ep.id().index == 1 {
                let now = ep.now_ns();
                ep.sleep(WRITER_NS - now.min(WRITER_NS)).await;
                let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
                assert_eq!(map.table(B).unwrap().replicas, [0]);
                let mut c = coordinator(ep, map.clone(), failover);
                let mut tx = c.begin(TxKind::ReadWrite);
                seen.a0 = tx.read(A, 0).await.unwrap().map(<[u8]>::to_vec);
                tx.read_for_update(B, 0).await.unwrap();
                tx.update(B, 0, &v(50)).await.unwrap();
                tx.commit().await.unwrap();
                seen.ts = slot(c.endpoint(), &map, B, 0, 0).await.1;
                return seen;
            }
            let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
            assert_eq!(map.table(B).unwrap().replicas, [1, 0]);
            // A reader with a clock a second fast raised `A`/1's `rts` there.
            let (a1, _) = slot(&mut ep, &map, A, 1, 0).await;
            let fast = (ep.now_ns() / 1_000 + 1_000_000) << 16;
            ep.write(0, a1 + META_OFF as u64, &fast.to_le_bytes());
            ep.post().await.unwrap();
            let mut c = coordinator(ep, map.clone(), failover);
            let mut tx = c.begin(TxKind::ReadOnly);
            tx.read(A, 1).await.unwrap();
            tx.commit().await.unwrap();
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.read(B, 0).await.unwrap();
            tx.read_for_update(A, 0).await.unwrap();
            tx.update(A, 0, &v(40)).await.unwrap();
            tx.commit().await.unwrap();
            seen.ts = slot(c.endpoint(), &map, A, 0, 0).await.1;
            assert!(seen.ts > fast, "R runs the fast clock");
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
            assert_eq!(
                repair_promoted(ep, &map, Protocol::Mvcc, None)
                    .await
                    .unwrap(),
                1
            );
            seen
        })
        .unwrap();
    let mut o = r.outputs.into_iter().map(Option::unwrap);
    (o.next().unwrap(), o.next().unwrap())
}

/// `R` read `B`/0's version before `W`'s write: `W` is ordered after `R`, and so reads
/// `R`'s `A`/0.
#[test]
fn a_new_view_writer_is_ordered_after_an_old_view_reader_whatever_its_clock() {
    let (r, w) = reader_then_writer(true);
    assert!(w.ts > r.ts, "W at {:#x}, R at {:#x}", w.ts, r.ts);
    assert_eq!(w.a0, Some(v(40)));
}

/// The negative control: with the clock alone (no view above it), `W`'s timestamp is below
/// `R`'s, and the promoted `rts` of `B`/0 (its backup's, which `R`'s raise never reached)
/// lets `W` write it below `R`, which read the version `W` replaced; `W` reads `A`/0 below
/// `R`'s write, from an older copy. Each missed the other's write: no serial order has both.
#[test]
fn without_the_view_in_the_timestamps_the_writer_commits_below_the_reader() {
    let (r, w) = reader_then_writer(false);
    assert!(w.ts < r.ts, "W at {:#x}, R at {:#x}", w.ts, r.ts);
    assert_eq!(w.a0, Some(v(0)));
}
