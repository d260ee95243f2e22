//! FORD's phases (and FaRM's and DrTM+H's, built from the same ones) allocate nothing per
//! transaction once a coordinator's vectors and buffers have grown: reads, updates, reads of
//! absent keys, inserts (into free slots, and over the key's own tombstone), deletes and
//! rollbacks, on the sim with one coordinator.

use dtxn_fabric::sim::{SimConfig, SimPool};
use dtxn_fabric::testing::{allocs, CountingAlloc};
use dtxn_fabric::Pool;
use dtxn_store::{Loader, Plan, PoolShape, TableSpec};
use dtxn_txn::{Access, Coordinator, Protocol, TxKind, TxnConfig};

mod common;

#[global_allocator]
static A: CountingAlloc = CountingAlloc;

const T: u32 = 1;
const VALUE: usize = 40;
/// Keys loaded: 0..LOADED.
const LOADED: u64 = 100;
/// Never inserted: read as absent.
const ABSENT: u64 = 1_000_000;

fn value(n: u64) -> [u8; VALUE] {
    let mut v = [0; VALUE];
    v[..8].copy_from_slice(&n.to_le_bytes());
    v
}

/// The keys round `r` inserts for the first time.
fn fresh(r: u64) -> [u64; 3] {
    let k = 10_000 + 3 * r;
    [k, k + 1, k + 2]
}

fn pool() -> Pool {
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 2,
        log_slices: 4,
        log_slice_bytes: 16 << 10,
        region_bytes: None,
    };
    let plan = Plan::new(&[TableSpec::new(T, "t", VALUE, 2_000)], &shape).unwrap();
    let pool = Pool::Sim(SimPool::new(SimConfig::new(1, 2, plan.region_bytes)).unwrap());
    plan.format_pool(&pool).unwrap();
    let mut l = Loader::new(plan.table(T).unwrap());
    for k in 0..LOADED {
        l.insert(&pool, k, &value(k)).unwrap();
    }
    pool
}

/// Transactions larger than any of a round's, so that every vector has grown past what the
/// rounds need.
async fn grow(c: &mut Coordinator) {
    let mut tx = c.begin(TxKind::ReadOnly);
    let mut acc: Vec<Access> = (0..32).map(|k| Access::read(T, k)).collect();
    acc.extend((0..8).map(|k| Access::read(T, ABSENT + k)));
    tx.fetch(&acc).await.unwrap();
    tx.commit().await.unwrap();
    let mut tx = c.begin(TxKind::ReadWrite);
    let acc: Vec<Access> = (32..48).map(|k| Access::update(T, k)).collect();
    tx.fetch(&acc).await.unwrap();
    for k in 32..48 {
        tx.update(T, k, &value(k + 1)).await.unwrap();
    }
    let rows: Vec<(u32, u64, [u8; VALUE])> = (0..16).map(|k| (T, 5_000 + k, value(k))).collect();
    let rows: Vec<(u32, u64, &[u8])> = rows.iter().map(|(t, k, v)| (*t, *k, &v[..])).collect();
    tx.insert_many(&rows).await.unwrap();
    tx.commit().await.unwrap();
}

/// One round of the mix: a read-only transaction, a read-write one with an absent key, one
/// that inserts round `r`'s keys and re-inserts a key deleted by the round before, one that
/// deletes the keys round `r - 1` inserted, and a rollback.
async fn round(c: &mut Coordinator, r: u64) {
    let (a, b) = (r % LOADED, (r * 7 + 3) % LOADED);
    let mut tx = c.begin(TxKind::ReadOnly);
    tx.fetch(&[Access::read(T, a), Access::read(T, b)])
        .await
        .unwrap();
    assert!(tx.get(T, a).is_some());
    tx.commit().await.unwrap();

    let mut tx = c.begin(TxKind::ReadWrite);
    let acc = [
        Access::update(T, a),
        Access::read(T, b),
        Access::read(T, ABSENT + r % 4),
    ];
    tx.fetch(&acc).await.unwrap();
    tx.update(T, a, &value(r)).await.unwrap();
    tx.commit().await.unwrap();

    let mut tx = c.begin(TxKind::ReadWrite);
    let [x, y, z] = fresh(r);
    let (v, again) = (value(r), fresh(r - 2)[0]);
    tx.insert_many(&[(T, x, &v), (T, y, &v), (T, z, &v), (T, again, &v)])
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let mut tx = c.begin(TxKind::ReadWrite);
    let [x, y, z] = fresh(r - 1);
    let acc = [
        Access::update(T, x),
        Access::update(T, y),
        Access::update(T, z),
    ];
    tx.fetch(&acc).await.unwrap();
    for k in [x, y, z] {
        tx.delete(T, k).await.unwrap();
    }
    tx.commit().await.unwrap();

    let mut tx = c.begin(TxKind::ReadWrite);
    tx.read_for_update(T, b).await.unwrap();
    tx.update(T, b, &value(r)).await.unwrap();
    tx.rollback().await;
}

/// Allocations of `rounds` rounds after a warm-up, under `cfg`.
fn allocations(cfg: TxnConfig, rounds: u64) -> u64 {
    common::with_coordinator(pool(), cfg, move |mut c| async move {
        // Round r deletes round r - 1's keys.
        let mut tx = c.begin(TxKind::ReadWrite);
        let v = value(0);
        let rows = fresh(1).map(|k| (T, k, &v[..]));
        tx.insert_many(&rows).await.unwrap();
        tx.commit().await.unwrap();
        for r in 2..10 {
            round(&mut c, r).await;
        }
        grow(&mut c).await;
        for r in 10..12 {
            round(&mut c, r).await;
        }
        let before = allocs();
        for r in 12..12 + rounds {
            round(&mut c, r).await;
        }
        let n = allocs() - before;
        assert_eq!(c.stats.aborts(), rounds + 10, "only the rollbacks abort");
        n
    })
}

#[test]
fn ford_farm_and_drtmh_transactions_allocate_nothing_after_warm_up() {
    let configs = [
        ("ford", Protocol::Ford, false),
        ("ford with flush", Protocol::Ford, true),
        ("farm", Protocol::Farm, false),
        ("drtmh", Protocol::Drtmh, false),
    ];
    for (name, protocol, flush) in configs {
        let cfg = TxnConfig {
            protocol,
            flush,
            ..TxnConfig::default()
        };
        assert_eq!(allocations(cfg, 50), 0, "{name}: allocations in 50 rounds");
    }
}
