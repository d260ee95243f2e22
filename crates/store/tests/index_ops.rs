//! Inserts and deletes over the fabric, concurrently, under the adversarial simulator: the index
//! never loses a key, never holds one twice, and replicas stay identical.

use dtxn_fabric::sim::{SimConfig, SimPool};
use dtxn_fabric::{Endpoint, Pool, Topology};
use dtxn_store::remote::{delete, insert, lookup, IndexOpError};
use dtxn_store::{Plan, PoolMap, PoolShape, TableInfo, TableSpec};
use rand::Rng;
use std::collections::BTreeMap;

fn pool(seed: u64) -> (Pool, Plan) {
    let mut spec = TableSpec::new(1, "kv", 100, 16);
    spec.slots_per_bucket = 2;
    spec.load_factor = 1.0;
    spec.overflow_fraction = 16.0;
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 2,
        log_slices: 1,
        log_slice_bytes: 64,
        region_bytes: None,
    };
    let plan = Plan::new(&[spec], &shape).unwrap();
    let pool = Pool::Sim(SimPool::new(SimConfig::new(seed, 2, plan.region_bytes)).unwrap());
    plan.format_pool(&pool).unwrap();
    (pool, plan)
}

fn val(key: u64, round: u64) -> Vec<u8> {
    (0..100).map(|i| (key * 13 + round * 7 + i) as u8).collect()
}

/// Every valid record of the table on one replica: key -> (version, value).
fn dump(pool: &Pool, t: &TableInfo, node: u16) -> BTreeMap<u64, (u64, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let codec = t.codec();
    let buckets = t.bucket_count + t.overflow_buckets;
    for b in 0..buckets {
        let base = t.table_off + 64 + b * t.bucket_bytes;
        for i in 0..t.slots_per_bucket {
            let mut rec = vec![0u8; t.record_bytes as usize];
            pool.with_local(node, |m| m.read(t.slot(base, i), &mut rec));
            let mut v = vec![0u8; t.value_size as usize];
            let h = codec
                .decode(&rec, &mut v)
                .expect("quiescent records are never torn");
            if h.valid {
                assert_eq!(h.lock, 0, "a lock was left behind");
                assert!(
                    out.insert(h.key, (h.version, v)).is_none(),
                    "key {} twice",
                    h.key
                );
            }
        }
    }
    out
}

#[test]
fn concurrent_inserts_deletes_and_lookups_keep_the_index_exact() {
    for seed in 1..=6 {
        let (mut pool, plan) = pool(seed);
        let topo = Topology {
            compute_nodes: 2,
            threads: 2,
            coroutines: 2,
        };
        let r = pool
            .run(topo, None, |mut ep: Endpoint| async move {
                let map = PoolMap::bootstrap(&mut ep).await.unwrap();
                let t = map.table(1).unwrap().clone();
                let me = u64::from(ep.id().index);
                let owner = me + 1;
                // Each coordinator owns keys me*100..me*100+12; all of them also race on the
                // shared keys 5000..5004.
                let mut mine: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
                let mut v = vec![0u8; 100];
                let mut won_shared = Vec::new();
                for round in 0..60u64 {
                    let key = if ep.rng().random_bool(0.2) {
                        5000 + ep.rng().random_range(0..4)
                    } else {
                        me * 100 + ep.rng().random_range(0..12)
                    };
                    let shared = key >= 5000;
                    let present = lookup(&mut ep, &t, t.primary(), key, &mut v).await.unwrap();
                    if !shared {
                        assert_eq!(present.is_some(), mine.contains_key(&key), "key {key}");
                        if present.is_some() {
                            assert_eq!(&v, &mine[&key]);
                        }
                    }
                    if present.is_none() || shared && round % 3 == 0 {
                        match insert(&mut ep, &t, key, &val(key, round), round + 1, owner).await {
                            Ok(_) if shared => won_shared.push(key),
                            Ok(_) => {
                                mine.insert(key, val(key, round));
                            }
                            Err(IndexOpError::Busy) | Err(IndexOpError::Exists { .. }) => {
                                assert!(shared || present.is_none(), "own key {key}");
                            }
                            Err(e) => panic!("{e}"),
                        }
                    } else if !shared {
                        match delete(&mut ep, &t, key, round + 1000, owner).await {
                            Ok(()) => {
                                mine.remove(&key);
                            }
                            Err(IndexOpError::Busy) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                (mine, won_shared)
            })
            .unwrap();
        let t = plan.table(1).unwrap();
        let primary = dump(&pool, t, 0);
        assert_eq!(primary, dump(&pool, t, 1), "seed {seed}: replicas differ");
        let mut expect: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        let mut shared_wins = 0;
        for (mine, won) in r.outputs.into_iter().flatten() {
            expect.extend(mine);
            shared_wins += won.len();
        }
        for (k, v) in &expect {
            assert_eq!(&primary[k].1, v, "seed {seed}: key {k}");
        }
        let shared_present = primary.keys().filter(|&&k| k >= 5000).count();
        assert_eq!(
            shared_present, shared_wins,
            "seed {seed}: each shared key inserted once"
        );
        assert_eq!(primary.len(), expect.len() + shared_present, "seed {seed}");
    }
}
