//! Inserts, deletes and reads of absent keys under the adversarial simulator: the history is
//! strictly serializable, no key is ever placed twice, and memory agrees with the history.

use dtxn_check::{check, Isolation, Options, Status, Txn as HTxn};
use dtxn_fabric::sim::{SimConfig, SimPool};
use dtxn_fabric::{Endpoint, Topology};
use dtxn_store::{Plan, PoolMap, PoolShape, TableSpec};
use dtxn_txn::{Abort, AbortReason, Access, Coordinator, Recorder, TxKind, TxnConfig};
use rand::Rng;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

const T: u32 = 7;
const KEYS: u64 = 40;
const VALUE: usize = 100;

struct Collect(Rc<RefCell<Vec<HTxn>>>);

impl Recorder for Collect {
    fn record(&mut self, t: &HTxn) {
        self.0.borrow_mut().push(t.clone());
    }
}

fn value(key: u64, n: u64) -> Vec<u8> {
    let mut v = vec![(n % 250) as u8; VALUE];
    v[..8].copy_from_slice(&key.to_le_bytes());
    v
}

/// A formatted pool (2 memory nodes, 2 replicas) of one table of 12 keys whose buckets hold
/// 2 slots, with room for many overflow buckets: chains grow long.
fn small_chains(seed: u64) -> (Plan, SimPool) {
    let mut spec = TableSpec::new(T, "kv", VALUE, 12);
    spec.slots_per_bucket = 2;
    spec.load_factor = 1.0;
    spec.overflow_fraction = 8.0;
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 2,
        log_slices: 32,
        log_slice_bytes: 4096,
        region_bytes: None,
    };
    let plan = Plan::new(&[spec], &shape).unwrap();
    let sim = SimPool::new(SimConfig::new(seed, 2, plan.region_bytes)).unwrap();
    let pool = dtxn_fabric::Pool::Sim(sim);
    plan.format_pool(&pool).unwrap();
    let dtxn_fabric::Pool::Sim(sim) = pool else {
        unreachable!()
    };
    (plan, sim)
}

#[test]
fn inserts_deletes_and_absent_reads_are_serializable() {
    for seed in 1..=12 {
        let (plan, mut sim) = small_chains(seed);
        let history = Rc::new(RefCell::new(Vec::new()));
        let cfg = Rc::new(TxnConfig::default());
        let topo = Topology {
            compute_nodes: 2,
            threads: 2,
            coroutines: 2,
        };
        let r = sim
            .run(topo, None, |mut ep: Endpoint| {
                let (history, cfg) = (history.clone(), cfg.clone());
                async move {
                    let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
                    let mut c = Coordinator::new(ep, map, cfg);
                    c.set_recorder(Box::new(Collect(history.clone())));
                    let mut exists_aborts = 0;
                    for n in 0..50u64 {
                        let key = c.endpoint().rng().random_range(0..KEYS);
                        let op = c.endpoint().rng().random_range(0..5);
                        let r: Result<(), Abort> = async {
                            match op {
                                0 => {
                                    let mut tx = c.begin(TxKind::ReadWrite);
                                    tx.insert(T, key, &value(key, n)).await?;
                                    tx.commit().await
                                }
                                1 => {
                                    let mut tx = c.begin(TxKind::ReadWrite);
                                    if tx.read_for_update(T, key).await?.is_some() {
                                        tx.delete(T, key).await?;
                                    }
                                    tx.commit().await
                                }
                                // Batched inserts, often into one chain.
                                3 => {
                                    let mut tx = c.begin(TxKind::ReadWrite);
                                    let vals: Vec<(u64, Vec<u8>)> = (0..3)
                                        .map(|i| (key + i) % KEYS)
                                        .map(|k| (k, value(k, n)))
                                        .collect();
                                    let rows: Vec<(u32, u64, &[u8])> =
                                        vals.iter().map(|(k, v)| (T, *k, &v[..])).collect();
                                    tx.insert_many(&rows).await?;
                                    tx.commit().await
                                }
                                // Delete (if present), then insert it again with another key
                                // in one batch: an update and an insert.
                                4 => {
                                    let mut tx = c.begin(TxKind::ReadWrite);
                                    if tx.read_for_update(T, key).await?.is_some() {
                                        tx.delete(T, key).await?;
                                    }
                                    let other = (key + 5) % KEYS;
                                    let (a, b) = (value(key, n), value(other, n));
                                    tx.insert_many(&[(T, key, &a[..]), (T, other, &b[..])])
                                        .await?;
                                    tx.commit().await
                                }
                                _ => {
                                    let mut tx = c.begin(TxKind::ReadOnly);
                                    let keys: Vec<Access> = (0..3)
                                        .map(|i| Access::read(T, (key + i * 7) % KEYS))
                                        .collect();
                                    tx.fetch(&keys).await?;
                                    for a in &keys {
                                        if let Some(v) = tx.get(T, a.key) {
                                            assert_eq!(
                                                &v[..8],
                                                &a.key.to_le_bytes(),
                                                "a record under the wrong key"
                                            );
                                        }
                                    }
                                    tx.commit().await
                                }
                            }
                        }
                        .await;
                        // What a crashed or fenced coordinator's caller knows of its
                        // transaction in flight is this id: the history's (and the log's).
                        if r.is_ok() {
                            let id = c.last_begun().expect("one begun");
                            assert!(history.borrow().iter().any(|t| t.txn == id));
                        }
                        if let Err(a) = r {
                            assert_ne!(a.reason, AbortReason::BadRequest, "{a}");
                            exists_aborts += u32::from(a.reason == AbortReason::Exists);
                        }
                    }
                    (c.stats.committed, exists_aborts)
                }
            })
            .unwrap();
        let committed: u64 = r.outputs.iter().flatten().map(|o| o.0).sum();
        let exists: u32 = r.outputs.iter().flatten().map(|o| o.1).sum();
        assert!(committed > 50, "seed {seed}: {committed}");
        assert!(
            exists > 0,
            "seed {seed}: inserts of present keys must abort"
        );
        let h = history.borrow().clone();
        let report = check(
            &h,
            Options {
                isolation: Isolation::Serializable,
                real_time: true,
            },
        )
        .unwrap();
        if !report.ok() {
            let lines: Vec<String> = h
                .iter()
                .map(|t| serde_json::to_string(t).unwrap())
                .collect();
            let path = std::env::temp_dir().join(format!("dtxn-inserts-seed{seed}.jsonl"));
            std::fs::write(&path, lines.join("\n")).unwrap();
            eprintln!("history written to {}", path.display());
        }
        assert!(report.ok(), "seed {seed}: {report}");
        // Memory agrees with the last committed write of every key.
        let mut last: BTreeMap<u64, (u64, bool)> = BTreeMap::new();
        for t in h.iter().filter(|t| t.status == Status::Committed) {
            for w in &t.writes {
                let e = last.entry(w.key).or_insert((0, true));
                if w.version > e.0 {
                    *e = (w.version, w.deleted);
                }
            }
        }
        let t = plan.table(T).unwrap();
        let codec = t.codec();
        let mut present = BTreeMap::new();
        for b in 0..t.bucket_count + t.overflow_buckets {
            let base = t.table_off + 64 + b * t.bucket_bytes;
            for s in 0..t.slots_per_bucket {
                let mut rec = vec![0u8; t.record_bytes as usize];
                sim.with_local(0, |m| m.read(t.slot(base, s), &mut rec));
                let mut v = vec![0u8; VALUE];
                let h = codec.decode(&rec, &mut v).unwrap();
                assert_eq!(h.lock, 0, "seed {seed}: a lock was left behind");
                if h.valid {
                    assert!(
                        present.insert(h.key, h.version).is_none(),
                        "seed {seed}: key {} twice",
                        h.key
                    );
                }
            }
        }
        for (k, (v, deleted)) in &last {
            assert_eq!(
                present.get(k).copied(),
                (!deleted).then_some(*v),
                "seed {seed}: key {k}"
            );
        }
        assert_eq!(
            present.len(),
            last.values().filter(|(_, d)| !d).count(),
            "seed {seed}"
        );
    }
}

/// One transaction inserts five keys of one chain whose buckets hold two slots: two go into
/// the home bucket, and the rest into overflow buckets this insert chains, two slots each,
/// then a second one. Each key is found afterwards, by a coordinator whose address cache is
/// cold, with its value (a row placed past its overflow bucket's slots would sit where no
/// chain leads: read absent).
#[test]
fn one_insert_of_many_keys_of_one_chain_chains_overflow_buckets_and_fills_them() {
    let (plan, mut sim) = small_chains(3);
    let t = plan.table(T).unwrap();
    let home = t.home_bucket(0);
    let keys: Vec<u64> = (0..10_000)
        .filter(|&k| t.home_bucket(k) == home)
        .take(5)
        .collect();
    assert_eq!(keys.len(), 5);
    // Coordinator 0 inserts; coordinator 1, whose address cache is cold, reads them
    // afterwards along the chain.
    let two = Topology {
        compute_nodes: 1,
        threads: 1,
        coroutines: 2,
    };
    let r = sim
        .run(two, None, |mut ep: Endpoint| {
            let keys = keys.clone();
            async move {
                let me = ep.id().index;
                let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
                let mut c = Coordinator::new(ep, map, Rc::new(TxnConfig::default()));
                let values: Vec<Vec<u8>> = keys.iter().map(|&k| value(k, k)).collect();
                if me == 0 {
                    let rows: Vec<(u32, u64, &[u8])> = keys
                        .iter()
                        .zip(&values)
                        .map(|(&k, v)| (T, k, v.as_slice()))
                        .collect();
                    let mut tx = c.begin(TxKind::ReadWrite);
                    tx.insert_many(&rows).await.unwrap();
                    tx.commit().await.unwrap();
                    return (values, Vec::new());
                }
                c.endpoint().sleep(1_000_000).await;
                let mut tx = c.begin(TxKind::ReadOnly);
                let reads: Vec<Access> = keys.iter().map(|&k| Access::read(T, k)).collect();
                tx.fetch(&reads).await.unwrap();
                let found: Vec<Option<Vec<u8>>> = keys
                    .iter()
                    .map(|&k| tx.get(T, k).map(<[u8]>::to_vec))
                    .collect();
                tx.commit().await.unwrap();
                (values, found)
            }
        })
        .unwrap();
    let (values, found) = r.outputs[1].clone().unwrap();
    let t = plan.table(T).unwrap();
    let claimed = sim.with_local(t.primary(), |m| m.read_u64(t.overflow_counter()));
    assert_eq!(claimed, 2, "overflow buckets chained");
    for (i, (v, f)) in values.iter().zip(&found).enumerate() {
        assert_eq!(f.as_ref(), Some(v), "key {} (row {i})", keys[i]);
    }
}
