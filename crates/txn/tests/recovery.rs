//! Recovery's decisions, scripted: the pool is put in the state a crash leaves, then
//! `recovery::recover` runs.

use dtxn_fabric::sim::{Adversary, SimConfig, SimPool};
use dtxn_fabric::{Pool, Profile};
use dtxn_store::log::{ItemKind, LogEntry, LogItem, LogStatus};
use dtxn_store::{Loader, Plan, PoolMap, PoolShape, TableSpec};
use dtxn_txn::recovery::{recover, Recovered};
use dtxn_txn::{Access, Protocol, TxKind, TxnConfig};

mod common;

const T: u32 = 1;
const KEY: u64 = 7;
/// The crashed coordinator (its lock-owner id is `DEAD + 1`).
const DEAD: u32 = 3;

fn pool() -> Pool {
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 1,
        log_slices: 4,
        log_slice_bytes: 4096,
        region_bytes: None,
    };
    let plan = Plan::new(&[TableSpec::new(T, "t", 8, 100)], &shape).unwrap();
    let mut cfg = SimConfig::new(1, 2, plan.region_bytes);
    cfg.profile = Profile::ideal();
    cfg.adversary = Adversary::off();
    let pool = Pool::Sim(SimPool::new(cfg).unwrap());
    plan.format_pool(&pool).unwrap();
    let mut l = Loader::new(plan.table(T).unwrap());
    for k in 0..20u64 {
        l.insert(&pool, k, &k.to_le_bytes()).unwrap();
    }
    pool
}

/// A transaction read `KEY` cold, unlocked, and logged that image; another transaction
/// committed over it; the first then won its commit-time lock, saw the newer version and
/// aborted, and the crash cut off its release. Its pending entry's image is older than the
/// primary, which is not invisible: the dead coordinator never wrote it. Recovery must leave
/// the other's acknowledged commit in place and only free the lock (it once rolled the key
/// back to the stale image).
#[test]
fn recovery_never_rolls_back_over_another_transactions_commit() {
    let (value, version, lock, outcome) =
        common::with_coordinator(pool(), TxnConfig::default(), |mut c| async move {
            let map = PoolMap::bootstrap(c.endpoint()).await.unwrap();
            let t = map.table(T).unwrap().clone();
            let bytes = t.record_bytes as usize;
            // Where KEY lives, and its record as the dead transaction read and logged it.
            let home = t.home_bucket(KEY);
            let ep = c.endpoint();
            let r = ep.read(t.primary(), home, t.bucket_bytes as usize);
            ep.post().await.unwrap();
            let bucket = ep.bytes(r).to_vec();
            let slot = (0..t.slots_per_bucket)
                .find(|&s| t.codec().header(t.slot_bytes(&bucket, s)).key == KEY)
                .expect("KEY in its home bucket");
            let offset = t.slot(home, slot);
            let image = t.slot_bytes(&bucket, slot)[..bytes].to_vec();
            // Another transaction commits KEY = 700.
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.fetch(&[Access::update(T, KEY)]).await.unwrap();
            tx.update(T, KEY, &700u64.to_le_bytes()).await.unwrap();
            tx.commit().await.unwrap();
            // The dead coordinator's commit-time lock on it, and its pending undo entry.
            let ep = c.endpoint();
            let owner = u64::from(DEAD) + 1;
            let cas = ep.cas(t.primary(), offset, 0, owner);
            ep.post().await.unwrap();
            assert!(ep.cas_ok(cas));
            let entry = LogEntry {
                txn: 99,
                coordinator: DEAD,
                status: LogStatus::Pending,
                items: vec![LogItem {
                    table: T,
                    offset,
                    insert: false,
                    kind: ItemKind::Undo,
                    image,
                }],
            };
            let (slice, slice_bytes) = map.log_slice(DEAD).unwrap();
            let mut log = Vec::new();
            entry.encode(slice_bytes, &mut log).unwrap();
            for n in map.live_nodes() {
                ep.write(n, slice, &log);
            }
            ep.post().await.unwrap();
            let (outcome, _) = recover(ep, &map, Protocol::Ford, DEAD).await.unwrap();
            let r = ep.read(t.primary(), offset, bytes);
            ep.post().await.unwrap();
            let mut value = vec![0u8; t.value_size as usize];
            let h = t.codec().decode(ep.bytes(r), &mut value).unwrap();
            (value, h.version, h.lock, outcome)
        });
    assert_eq!(value, 700u64.to_le_bytes(), "the other's commit stays");
    assert_eq!(version, 1, "loaded at 0, committed once over");
    assert_eq!(lock, 0, "the dead coordinator's lock is freed");
    assert_eq!(outcome, Recovered::RolledBack(99));
}
