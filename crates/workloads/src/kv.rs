//! kv: a YCSB-style transactional key-value micro-benchmark (FORD's and Motor's "micro").
//!
//! One table, KV (id 1), keys `0..keys`, values of `value_size` bytes (FORD: 1 M keys of
//! 40 B; Motor: 10 M). A transaction touches `items` distinct keys, drawn from a zipf
//! distribution of parameter `theta` over the keys (key 0 hottest; YCSB's default 0.99), or
//! uniformly with `theta = 0`, or (`hot_keys`, RCC's YCSB) from a hot set: each key with
//! probability `hot_pct`% uniformly among keys `0..hot_keys`, else among the others. It is read-only with probability `read_only_pct`% (FORD's
//! "read:write ratio" of transactions), and otherwise reads every item for update and writes
//! every one of them. All items are fetched in one batch.
//!
//! | transaction | % | items |
//! |---|---|---|
//! | ReadOnly | `read_only_pct` | read `items` keys |
//! | ReadWrite | rest | read for update and write `items` keys |
//!
//! Every value is self-describing, so `--verify` needs no copy of the data: the key, a write
//! count, and filler derived from both, closed by a checksum:
//!
//! ```text
//! 0 key u64 | 8 writes u64 | 16.. filler | last 8: checksum (values of 24 B and more)
//! ```
//!
//! A write increments `writes`. The checks: every record decodes with a good checksum and its
//! own key; its `writes` equals the committed writes of that key summed over all
//! coordinators; and no committed transaction read a value with a bad checksum.

use crate::rng::{mix, Zipfian};
use crate::{field, loader_error, WlRng, Workload, WorkloadError};
use dtxn_fabric::Pool;
use dtxn_store::{Loader, Plan, TableSpec};
use dtxn_txn::{Abort, Access, Coordinator, TxKind};
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

pub const KV: u32 = 1;
pub const TXN_TYPES: [&str; 2] = ["ReadOnly", "ReadWrite"];
/// Items per transaction are fetched with one batch from a stack array of this size.
pub const MAX_ITEMS: usize = 64;
const MIN_VALUE: usize = 24;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Options {
    pub keys: u64,
    pub value_size: usize,
    /// Zipf parameter; 0 means uniform.
    pub theta: f64,
    /// Percentage of read-only transactions.
    pub read_only_pct: u32,
    /// Keys per transaction.
    pub items: usize,
    /// Keys of the hot set (0: none; then `theta` draws the keys). RCC's YCSB: 0.1% of them.
    pub hot_keys: u64,
    /// With `hot_keys`: the percentage of draws on the hot set (RCC: 10, 90 at high
    /// contention).
    pub hot_pct: u32,
    /// CPU time each transaction spends between its reads and its commit, ns (charged in
    /// virtual time on sim; RCC's YCSB computes 5 us): what makes a late abort expensive.
    pub compute_ns: u64,
    /// Slots per bucket of the tables (the store's 4 unless given).
    #[serde(skip_serializing_if = "crate::Slots::is_default")]
    pub slots: crate::Slots,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            keys: 1_000_000,
            value_size: 40,
            theta: 0.99,
            read_only_pct: 75,
            items: 4,
            hot_keys: 0,
            hot_pct: 0,
            compute_ns: 0,
            slots: crate::Slots::default(),
        }
    }
}

/// The kv benchmark.
#[derive(Debug, Clone)]
pub struct Kv {
    o: Options,
    zipf: Option<Zipfian>,
}

impl Kv {
    pub fn new(o: Options) -> Result<Kv, WorkloadError> {
        let bad = |m: String| Err(WorkloadError::Options(m));
        if o.items == 0 || o.items > MAX_ITEMS {
            return bad(format!(
                "kv: --items must be 1 to {MAX_ITEMS}, got {}",
                o.items
            ));
        }
        if o.keys < o.items as u64 {
            return bad(format!(
                "kv: --keys ({}) must be at least --items ({})",
                o.keys, o.items
            ));
        }
        if o.value_size < MIN_VALUE {
            return bad(format!(
                "kv: --value-size must be at least {MIN_VALUE} bytes (key, write count, \
                 checksum), got {}",
                o.value_size
            ));
        }
        if o.read_only_pct > 100 {
            return bad(format!(
                "kv: --read-only-pct is a percentage, got {}",
                o.read_only_pct
            ));
        }
        if o.hot_keys > 0 && (o.hot_keys >= o.keys || o.hot_pct > 100) {
            return bad(format!(
                "kv: --hot-keys ({}) must be below --keys ({}) and --hot-pct ({}) at most 100",
                o.hot_keys, o.keys, o.hot_pct
            ));
        }
        let zipf = if o.hot_keys > 0 {
            None
        } else {
            Zipfian::new("kv: --theta", o.keys, o.theta)?
        };
        Ok(Kv { o, zipf })
    }

    pub fn options(&self) -> &Options {
        &self.o
    }

    fn key(&self, rng: &mut WlRng) -> u64 {
        if self.o.hot_keys > 0 {
            return if rng.random_range(0..100) < self.o.hot_pct {
                rng.random_range(0..self.o.hot_keys)
            } else {
                rng.random_range(self.o.hot_keys..self.o.keys)
            };
        }
        match &self.zipf {
            Some(z) => z.sample(rng),
            None => rng.random_range(0..self.o.keys),
        }
    }

    /// The value of `key` after `writes` writes.
    pub fn value(&self, key: u64, writes: u64, out: &mut [u8]) {
        field::put_u64(out, 0, key);
        field::put_u64(out, 8, writes);
        let n = out.len();
        let fill = mix(key, writes).to_le_bytes();
        for (i, b) in out[16..n - 8].iter_mut().enumerate() {
            *b = fill[i % 8] ^ (i as u8);
        }
        let sum = checksum(&out[..n - 8]);
        field::put_u64(out, n - 8, sum);
    }
}

fn checksum(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3)
    })
}

/// A well-formed value of `key`: its write count.
fn decode(key: u64, v: &[u8]) -> Option<u64> {
    let n = v.len();
    (field::u64_at(v, 0) == key && checksum(&v[..n - 8]) == field::u64_at(v, n - 8))
        .then(|| field::u64_at(v, 8))
}

/// What one coordinator committed: writes per key, and committed reads of malformed values.
/// Serialized as `{"writes": [[key, count], ...], "bad_reads": n}`.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tally {
    #[serde(skip)]
    on: bool,
    #[serde(with = "crate::counts_serde")]
    writes: HashMap<u64, u64>,
    bad_reads: u64,
    /// The bad reads and written keys of the transaction committing now, counted once its
    /// commit returns (or recovery rolls it forward).
    #[serde(skip)]
    pending: Option<(u64, Vec<u64>)>,
}

impl Tally {
    /// Its commit returned: what it staged counts.
    fn confirm(&mut self) {
        if let Some((bad, keys)) = self.pending.take() {
            self.bad_reads += bad;
            if self.on {
                for k in keys {
                    *self.writes.entry(k).or_default() += 1;
                }
            }
        }
    }
}

impl crate::Merge for Tally {
    /// Write counts and bad reads add up.
    fn merge(&mut self, other: Tally) {
        self.on |= other.on;
        crate::add_counts(&mut self.writes, other.writes);
        self.bad_reads += other.bad_reads;
    }
}

impl Workload for Kv {
    type Tally = Tally;

    fn name(&self) -> &'static str {
        "kv"
    }

    fn txn_types(&self) -> &'static [&'static str] {
        &TXN_TYPES
    }

    fn slots(&self) -> &crate::Slots {
        &self.o.slots
    }

    fn tables(&self) -> Vec<TableSpec> {
        // key, write count, fill, checksum: an update rewrites all but the key.
        let size = self.o.value_size as u32;
        let attrs: Vec<u32> = if size >= 24 {
            vec![8, 8, size - 24, 8]
        } else {
            Vec::new()
        };
        vec![crate::table_with(
            KV,
            "kv",
            self.o.value_size,
            self.o.keys,
            &attrs,
            &[(size.saturating_sub(8), 1.0)],
        )]
    }

    fn load(&self, pool: &Pool, plan: &Plan, _seed: u64) -> Result<(), WorkloadError> {
        let t = plan
            .table(KV)
            .ok_or(WorkloadError::Store(dtxn_store::StoreError::NoSuchTable(
                KV,
            )))?;
        let mut l = Loader::new(t);
        let mut v = vec![0u8; self.o.value_size];
        for k in 0..self.o.keys {
            self.value(k, 0, &mut v);
            l.insert(pool, k, &v).map_err(loader_error("kv"))?;
        }
        Ok(())
    }

    fn forget_in_flight(&self, tally: &mut Tally) {
        tally.pending = None;
    }

    fn count_in_flight(&self, tally: &mut Tally) {
        tally.confirm();
    }

    fn tally(&self, verify: bool) -> Tally {
        Tally {
            on: verify,
            ..Tally::default()
        }
    }

    async fn run_one(
        &self,
        c: &mut Coordinator,
        rng: &mut WlRng,
        tally: &mut Tally,
    ) -> (usize, Result<(), Abort>) {
        let n = self.o.items;
        let mut keys = [0u64; MAX_ITEMS];
        let mut i = 0;
        while i < n {
            let k = self.key(rng);
            if !keys[..i].contains(&k) {
                keys[i] = k;
                i += 1;
            }
        }
        let keys = &keys[..n];
        let read_only = rng.random_range(0..100) < self.o.read_only_pct;
        if read_only {
            (0, self.read_only(c, keys, tally).await)
        } else {
            (1, self.read_write(c, keys, tally).await)
        }
    }

    fn verify(
        &self,
        pool: &Pool,
        plan: &Plan,
        _seed: u64,
        tallies: &[Tally],
    ) -> Result<Vec<String>, WorkloadError> {
        let bad_reads: u64 = tallies.iter().map(|t| t.bad_reads).sum();
        if bad_reads > 0 {
            return Err(WorkloadError::Inconsistent(format!(
                "{bad_reads} committed transactions read a malformed value"
            )));
        }
        let mut want: HashMap<u64, u64> = HashMap::new();
        for t in tallies {
            for (&k, &w) in &t.writes {
                *want.entry(k).or_default() += w;
            }
        }
        let t = plan
            .table(KV)
            .ok_or(WorkloadError::Store(dtxn_store::StoreError::NoSuchTable(
                KV,
            )))?;
        let records = crate::scan_table(pool, t);
        if records.len() as u64 != self.o.keys {
            return Err(WorkloadError::Inconsistent(format!(
                "kv holds {} keys, {} were loaded",
                records.len(),
                self.o.keys
            )));
        }
        let mut total = 0;
        for r in &records {
            let Some(writes) = decode(r.key, &r.value) else {
                return Err(WorkloadError::Inconsistent(format!(
                    "key {}: the value's checksum or key is wrong",
                    r.key
                )));
            };
            if r.lock != 0 {
                return Err(WorkloadError::Inconsistent(format!(
                    "key {}: lock word {:#x} left behind",
                    r.key, r.lock
                )));
            }
            let expect = want.get(&r.key).copied().unwrap_or(0);
            if writes != expect {
                return Err(WorkloadError::Inconsistent(format!(
                    "key {}: written {writes} times, committed transactions wrote it {expect} \
                     times",
                    r.key
                )));
            }
            total += writes;
        }
        Ok(vec![
            format!("all {} values have good checksums", records.len()),
            format!(
                "each key's write count equals its committed writes ({total} in all); no \
                 committed read saw a malformed value"
            ),
        ])
    }
}

impl Kv {
    async fn read_only(
        &self,
        c: &mut Coordinator,
        keys: &[u64],
        tally: &mut Tally,
    ) -> Result<(), Abort> {
        let mut acc = [Access::read(KV, 0); MAX_ITEMS];
        for (a, &k) in acc.iter_mut().zip(keys) {
            *a = Access::read(KV, k);
        }
        let mut tx = c.begin(TxKind::ReadOnly);
        tx.fetch(&acc[..keys.len()]).await?;
        tx.endpoint().compute(self.o.compute_ns);
        let bad = keys
            .iter()
            .filter(|&&k| tx.get(KV, k).and_then(|v| decode(k, v)).is_none())
            .count() as u64;
        tx.commit().await?;
        tally.bad_reads += bad;
        Ok(())
    }

    async fn read_write(
        &self,
        c: &mut Coordinator,
        keys: &[u64],
        tally: &mut Tally,
    ) -> Result<(), Abort> {
        let mut acc = [Access::read(KV, 0); MAX_ITEMS];
        for (a, &k) in acc.iter_mut().zip(keys) {
            *a = Access::update(KV, k);
        }
        let mut tx = c.begin(TxKind::ReadWrite);
        tx.fetch(&acc[..keys.len()]).await?;
        tx.endpoint().compute(self.o.compute_ns);
        let mut buf = [0u8; 4096];
        let mut heap = Vec::new();
        let v: &mut [u8] = if self.o.value_size <= buf.len() {
            &mut buf[..self.o.value_size]
        } else {
            heap.resize(self.o.value_size, 0);
            &mut heap
        };
        let mut bad = 0;
        for &k in keys {
            let writes = match tx.get(KV, k).and_then(|old| decode(k, old)) {
                Some(w) => w,
                None => {
                    bad += 1;
                    0
                }
            };
            self.value(k, writes + 1, v);
            tx.update(KV, k, v).await?;
        }
        tally.pending = Some((bad, if tally.on { keys.to_vec() } else { Vec::new() }));
        tx.commit().await?;
        tally.confirm();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Merge;
    use rand::SeedableRng;

    #[test]
    fn values_are_self_checking() {
        let kv = Kv::new(Options {
            keys: 100,
            ..Options::default()
        })
        .unwrap();
        let mut v = vec![0u8; 40];
        kv.value(7, 3, &mut v);
        assert_eq!(decode(7, &v), Some(3));
        assert_eq!(decode(8, &v), None);
        v[20] ^= 1;
        assert_eq!(decode(7, &v), None);
    }

    #[test]
    fn zipf_keys_are_skewed_to_key_zero_and_uniform_ones_are_not() {
        let mut rng = WlRng::seed_from_u64(1);
        let skewed = Kv::new(Options {
            keys: 1000,
            ..Options::default()
        })
        .unwrap();
        let uniform = Kv::new(Options {
            keys: 1000,
            theta: 0.0,
            ..Options::default()
        })
        .unwrap();
        let zeros = |kv: &Kv, rng: &mut WlRng| (0..10_000).filter(|_| kv.key(rng) == 0).count();
        assert!(zeros(&skewed, &mut rng) > 1000);
        assert!(zeros(&uniform, &mut rng) < 50);
        for _ in 0..10_000 {
            assert!(skewed.key(&mut rng) < 1000);
        }
    }

    #[test]
    fn a_hot_set_takes_its_share_of_the_draws() {
        let mut rng = WlRng::seed_from_u64(1);
        let kv = Kv::new(Options {
            keys: 10_000,
            hot_keys: 10,
            hot_pct: 90,
            ..Options::default()
        })
        .unwrap();
        let hot = (0..10_000).filter(|_| kv.key(&mut rng) < 10).count();
        assert!((8_800..=9_200).contains(&hot), "{hot}");
        for _ in 0..10_000 {
            assert!(kv.key(&mut rng) < 10_000);
        }
        let e = Kv::new(Options {
            keys: 100,
            hot_keys: 100,
            hot_pct: 10,
            ..Options::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("--hot-keys"), "{e}");
    }

    #[test]
    fn bad_options_are_named() {
        for (o, want) in [
            (
                Options {
                    items: 0,
                    ..Options::default()
                },
                "--items",
            ),
            (
                Options {
                    value_size: 8,
                    ..Options::default()
                },
                "--value-size",
            ),
            (
                Options {
                    theta: -1.0,
                    ..Options::default()
                },
                "--theta",
            ),
            (
                Options {
                    keys: 2,
                    items: 4,
                    ..Options::default()
                },
                "--keys",
            ),
        ] {
            let e = Kv::new(o).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn tallies_merge_by_adding_writes_and_bad_reads() {
        let t = |writes: &[(u64, u64)], bad_reads| Tally {
            on: true,
            writes: writes.iter().copied().collect(),
            bad_reads,
            ..Tally::default()
        };
        let mut a = t(&[(1, 2), (5, 1)], 0);
        a.merge(t(&[(1, 3), (7, 1)], 2));
        assert_eq!(a.writes, [(1, 5), (5, 1), (7, 1)].into_iter().collect());
        assert_eq!(a.bad_reads, 2);
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(json, r#"{"writes":[[1,5],[5,1],[7,1]],"bad_reads":2}"#);
        let back: Tally = serde_json::from_str(&json).unwrap();
        assert_eq!((back.writes, back.bad_reads), (a.writes, 2));
    }

    #[test]
    fn verify_reads_merged_tallies_as_it_reads_separate_ones() {
        let kv = Kv::new(Options {
            keys: 50,
            ..Options::default()
        })
        .unwrap();
        let (pool, plan) = crate::loaded_pool(&kv, 1);
        let t = |bad_reads| Tally {
            bad_reads,
            ..Tally::default()
        };
        assert!(kv.verify(&pool, &plan, 1, &[t(0), t(0)]).is_ok());
        let merged = crate::merge_all([t(0), t(1)]).unwrap();
        let e = kv
            .verify(&pool, &plan, 1, &[merged])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("1 committed transactions read a malformed value"),
            "{e}"
        );
        let mut w = Tally::default();
        w.writes.insert(4, 1);
        let e = kv.verify(&pool, &plan, 1, &[w]).unwrap_err().to_string();
        assert!(e.contains("key 4: written 0 times"), "{e}");
    }
}
