//! The benchmarks of the papers, written against the transaction API only: a workload never
//! knows which protocol or backend runs it.
//!
//! | workload | tables | transactions | source |
//! |---|---|---|---|
//! | [`smallbank`] | SAVINGS, CHECKING | 6 (85% read-write), 90% on 4% hot accounts | FaSST/DrTM/FORD |
//! | [`kv`] | one key-value table | read-only or read-write, zipf or uniform keys | YCSB, FORD and Motor micro |
//! | [`tatp`] | SUBSCRIBER (+ its secondary index), ACCESS_INFO, SPECIAL_FACILITY, CALL_FORWARDING | 7 (80% read-only) | TATP 1.0, FORD/FaSST |
//! | [`tpcc`] | the 9 of the spec (+ 2 index tables) | all 5 | TPC-C 5.11, reduced as FORD/Motor |
//! | [`skew`] | ACCOUNTS, in pairs under `x + y >= 0` | 4 (25% read-only audits) | dtxn's own: exposes write skew and read skew |
//!
//! Each workload implements [`Workload`]: its tables ([`TableSpec`]s sized from its options), a
//! loader that fills a formatted pool with the memory nodes' own CPUs (as the papers' loaders
//! do), a driver that runs one transaction of the mix on a [`Coordinator`], and a consistency
//! check run on the pool after a benchmark (`--verify`), fed by what each coordinator
//! committed (its [`Workload::Tally`]). Tallies [`Merge`] and serialize, so that the compute
//! processes of one run can each write theirs down and one check can read them all.

pub mod kv;
mod local;
pub mod rng;
pub mod skew;
pub mod smallbank;
pub mod tatp;
pub mod tpcc;

pub use local::{clear_read_shares, record_offsets, scan_replica, scan_table, LocalRecord};

use dtxn_fabric::Pool;
use dtxn_store::{Plan, StoreError, TableSpec};
use dtxn_txn::{Abort, Coordinator};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::HashMap;
use std::hash::Hash;

/// The random number generator of a coordinator's driver (seeded per coordinator, so sim
/// runs stay reproducible).
pub type WlRng = rand_pcg::Pcg64Mcg;

/// The workloads, by the names `dtxn bench --workload` takes.
pub const NAMES: [&str; 5] = ["smallbank", "kv", "tatp", "tpcc", "skew"];

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// A bad option value: the message says which and why.
    #[error("{0}")]
    Options(String),
    #[error("loading table '{table}': {source}")]
    Load { table: String, source: StoreError },
    #[error(transparent)]
    Store(#[from] StoreError),
    /// `--verify` found the database inconsistent.
    #[error("consistency check failed: {0}")]
    Inconsistent(String),
}

/// A benchmark: tables, loader, transaction mix and consistency check.
///
/// `run_one` is an `async fn` in a public trait: its future is never sent across threads (each
/// backend polls a coordinator on the thread that created it), so the missing `Send` bound
/// costs nothing.
#[allow(async_fn_in_trait)]
pub trait Workload: Send + Sync + 'static {
    /// What one coordinator saw commit, for [`verify`](Self::verify) (empty unless verifying).
    /// It serializes (a compute process writes its own down for a check that reads every
    /// process's) and [merges](Merge).
    type Tally: Merge + Serialize + DeserializeOwned + Send + 'static;

    fn name(&self) -> &'static str;

    /// The transaction types, in the order `run_one` reports them.
    fn txn_types(&self) -> &'static [&'static str];

    /// The tables, sized from the options (rows loaded plus rows the run may insert), with
    /// their attributes and update mix (what a multi-version layout keeps pre-images of).
    fn tables(&self) -> Vec<TableSpec>;

    /// Slots per bucket its options ask of the tables (applied by
    /// [`tables_for`](Self::tables_for)).
    fn slots(&self) -> &Slots;

    /// Versions per record under a multi-version protocol (Motor's paper: TPC-C 4, TATP 2,
    /// SmallBank 3, kv 4).
    fn default_vnum(&self) -> u8 {
        4
    }

    /// The tables as `protocol` needs them laid out: multi-version CVTs with `vnum` versions
    /// per record (default [`default_vnum`](Self::default_vnum)) for a multi-version protocol;
    /// for one that keeps version slots beside each record (RCC's MVCC), `vnum` slots (default
    /// the protocol's, [`dtxn_txn::TxnConfig::copies`] gives `mvcc.slots`).
    fn tables_for(&self, protocol: dtxn_txn::Protocol, vnum: Option<u8>) -> Vec<TableSpec> {
        let mut t = self.slots().apply(self.tables());
        let copies = match protocol.copies() {
            1 => 1,
            c => vnum.unwrap_or(c),
        };
        t.iter_mut().for_each(|s| {
            s.meta_words = protocol.meta_words();
            s.copies = copies;
        });
        if protocol.multi_version() {
            let v = vnum.unwrap_or_else(|| self.default_vnum());
            t = t.into_iter().map(|s| s.multi_version(v)).collect();
        }
        t
    }

    /// Undo-log room one transaction needs (the old images of everything it writes), for
    /// [`dtxn_store::PoolShape::log_slice_bytes`].
    fn log_slice_bytes(&self) -> u64 {
        16 << 10
    }

    /// Fills the tables of a pool formatted with `plan` (deterministically from `seed`).
    fn load(&self, pool: &Pool, plan: &Plan, seed: u64) -> Result<(), WorkloadError>;

    /// A coordinator's empty tally; `verify` false makes it record nothing (no overhead).
    fn tally(&self, verify: bool) -> Self::Tally;

    /// Runs one transaction of the mix: its type (an index into [`txn_types`](Self::txn_types))
    /// and its outcome. One attempt: an abort is not retried.
    async fn run_one(
        &self,
        c: &mut Coordinator,
        rng: &mut WlRng,
        tally: &mut Self::Tally,
    ) -> (usize, Result<(), Abort>);

    /// Forgets what the transaction in flight staged in `tally` (see
    /// [`count_in_flight`](Self::count_in_flight)): called before each transaction.
    fn forget_in_flight(&self, _tally: &mut Self::Tally) {}

    /// The coordinator of `tally` crashed in its transaction's commit, and recovery rolled
    /// that transaction forward: counts what it staged before committing, as if its commit
    /// had returned. (A workload whose tally counts committed changes stages them just before
    /// `commit`, and confirms them after.)
    fn count_in_flight(&self, _tally: &mut Self::Tally) {}

    /// Checks the pool after a run against the workload's invariants and what the
    /// coordinators committed. `Ok` lists the checks that passed.
    fn verify(
        &self,
        pool: &Pool,
        plan: &Plan,
        seed: u64,
        tallies: &[Self::Tally],
    ) -> Result<Vec<String>, WorkloadError>;
}

/// Tallies that combine: `a.merge(b)` is what `a`'s and `b`'s coordinators committed
/// together, in the form [`Workload::verify`] reads it, so that verifying `[a + b]` passes or
/// fails exactly as verifying `[a, b]` does. That lets each compute process of a run merge its
/// coordinators' tallies into one, write it down, and a later check merge every process's.
pub trait Merge {
    fn merge(&mut self, other: Self);
}

/// Merges every tally of `all` into `first` (or returns `None` for none).
pub fn merge_all<T: Merge>(all: impl IntoIterator<Item = T>) -> Option<T> {
    let mut it = all.into_iter();
    let mut acc = it.next()?;
    for t in it {
        acc.merge(t);
    }
    Some(acc)
}

/// Adds `other`'s counts into `into`, key by key.
pub(crate) fn add_counts<K: Eq + Hash, V: Copy + std::ops::AddAssign + Default>(
    into: &mut HashMap<K, V>,
    other: HashMap<K, V>,
) {
    for (k, v) in other {
        *into.entry(k).or_default() += v;
    }
}

/// A map serialized as a list of `[key, value]` pairs, in key order (stable files; JSON
/// objects take only string keys), skipping zero values. Reading sums repeated keys.
pub(crate) mod counts_serde {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::HashMap;
    use std::hash::Hash;

    pub fn serialize<K, V, S>(m: &HashMap<K, V>, s: S) -> Result<S::Ok, S::Error>
    where
        K: Serialize + Ord + Copy,
        V: Serialize + Copy + Default + PartialEq,
        S: Serializer,
    {
        let mut pairs: Vec<(K, V)> = m
            .iter()
            .filter(|(_, &v)| v != V::default())
            .map(|(&k, &v)| (k, v))
            .collect();
        pairs.sort_unstable_by_key(|p| p.0);
        pairs.serialize(s)
    }

    pub fn deserialize<'de, K, V, D>(d: D) -> Result<HashMap<K, V>, D::Error>
    where
        K: Deserialize<'de> + Eq + Hash,
        V: Deserialize<'de> + Copy + Default + std::ops::AddAssign,
        D: Deserializer<'de>,
    {
        let pairs = Vec::<(K, V)>::deserialize(d)?;
        let mut m = HashMap::with_capacity(pairs.len());
        for (k, v) in pairs {
            *m.entry(k).or_default() += v;
        }
        Ok(m)
    }
}

/// A table spec whose overflow area also covers the chance clustering of small tables: with
/// 4 slots per bucket at load factor 0.75, about a fifth of the buckets overflow, give or take
/// a few standard deviations when there are few buckets.
/// A table spec as [`table`], with its attributes' sizes and its update mix (see
/// [`TableSpec::update_mix`]).
pub(crate) fn table_with(
    id: u32,
    name: &str,
    value_size: usize,
    rows: u64,
    attributes: &[u32],
    update_mix: &[(u32, f64)],
) -> TableSpec {
    let mut t = table(id, name, value_size, rows);
    t.attributes = attributes.to_vec();
    t.update_mix = update_mix.to_vec();
    t
}

/// The update mix of a table that is never updated.
pub(crate) const NEVER_UPDATED: &[(u32, f64)] = &[(0, 1.0)];

pub(crate) fn table(id: u32, name: &str, value_size: usize, rows: u64) -> TableSpec {
    let mut t = TableSpec::new(id, name, value_size, rows.max(1));
    size_overflow(&mut t);
    t
}

/// Sizes `t`'s overflow area for its slots per bucket.
fn size_overflow(t: &mut TableSpec) {
    let buckets = (t.rows as f64 / (f64::from(t.slots_per_bucket) * t.load_factor)).max(1.0);
    t.overflow_fraction = 0.25 + (4.0 * buckets.sqrt() + 4.0) / buckets;
}

/// Slots per bucket, per table (`dtxn bench --slots-per-bucket`): every table's, and some
/// tables' by name. Default: the store's 4. FORD's code ran 22 (a bucket READ then returns
/// 22 records, 15.8 KB of TPC-C's). Part of a workload's options, so that a run's options
/// still describe its pool.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Slots {
    /// Every table's, unless named in `tables`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub all: Option<u32>,
    /// (table name, slots per bucket).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tables: Vec<(String, u32)>,
}

impl Slots {
    pub fn is_default(&self) -> bool {
        *self == Slots::default()
    }

    /// `N` (every table), `NAME=N,...` (those tables), or both, e.g. `22` or `22,item=4`.
    pub fn parse(text: &str) -> Result<Slots, WorkloadError> {
        let bad = |why: String| WorkloadError::Options(format!("--slots-per-bucket {text}: {why}"));
        let mut s = Slots::default();
        for part in text.split(',').map(str::trim) {
            let (name, n) = match part.split_once('=') {
                Some((name, n)) => (Some(name.trim()), n.trim()),
                None => (None, part),
            };
            let n: u32 = n
                .parse()
                .map_err(|_| bad(format!("'{part}' is not N or NAME=N")))?;
            if !(1..=64).contains(&n) {
                return Err(bad(format!("{n} slots: a bucket holds 1 to 64")));
            }
            match name {
                Some(name) => s.tables.push((name.to_string(), n)),
                None if s.all.is_some() => return Err(bad("two counts for every table".into())),
                None => s.all = Some(n),
            }
        }
        Ok(s)
    }

    /// Refuses names that are none of `tables`' (a typo would otherwise change nothing).
    pub fn check(&self, tables: &[TableSpec]) -> Result<(), WorkloadError> {
        for (name, _) in &self.tables {
            if !tables.iter().any(|t| &t.name == name) {
                let names: Vec<&str> = tables.iter().map(|t| t.name.as_str()).collect();
                return Err(WorkloadError::Options(format!(
                    "--slots-per-bucket: no table '{name}' (tables: {})",
                    names.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// `tables` with these slots per bucket (and overflow areas sized for them).
    pub(crate) fn apply(&self, mut tables: Vec<TableSpec>) -> Vec<TableSpec> {
        if self.is_default() {
            return tables;
        }
        for t in &mut tables {
            let named = self.tables.iter().find(|(n, _)| *n == t.name).map(|x| x.1);
            if let Some(n) = named.or(self.all) {
                t.slots_per_bucket = n;
                size_overflow(t);
            }
        }
        tables
    }
}

/// Loads one table through the store's loader, naming the table in errors.
pub(crate) fn loader_error(table: &str) -> impl Fn(StoreError) -> WorkloadError + '_ {
    move |source| WorkloadError::Load {
        table: table.to_string(),
        source,
    }
}

/// Little-endian field access in fixed-layout values.
pub(crate) mod field {
    pub fn u64_at(v: &[u8], off: usize) -> u64 {
        u64::from_le_bytes(v[off..off + 8].try_into().expect("8 bytes"))
    }

    pub fn i64_at(v: &[u8], off: usize) -> i64 {
        i64::from_le_bytes(v[off..off + 8].try_into().expect("8 bytes"))
    }

    pub fn u32_at(v: &[u8], off: usize) -> u32 {
        u32::from_le_bytes(v[off..off + 4].try_into().expect("4 bytes"))
    }

    pub fn put_u64(v: &mut [u8], off: usize, x: u64) {
        v[off..off + 8].copy_from_slice(&x.to_le_bytes());
    }

    pub fn put_i64(v: &mut [u8], off: usize, x: i64) {
        v[off..off + 8].copy_from_slice(&x.to_le_bytes());
    }

    pub fn put_u32(v: &mut [u8], off: usize, x: u32) {
        v[off..off + 4].copy_from_slice(&x.to_le_bytes());
    }

    pub fn add_i64(v: &mut [u8], off: usize, d: i64) {
        let x = i64_at(v, off).wrapping_add(d);
        put_i64(v, off, x);
    }

    pub fn add_u64(v: &mut [u8], off: usize, d: u64) {
        let x = u64_at(v, off).wrapping_add(d);
        put_u64(v, off, x);
    }

    pub fn add_u32(v: &mut [u8], off: usize, d: u32) {
        let x = u32_at(v, off).wrapping_add(d);
        put_u32(v, off, x);
    }
}

/// A workload loaded into a fresh shm pool (one memory node), for unit tests of `verify`.
#[cfg(test)]
pub(crate) fn loaded_pool<W: Workload>(w: &W, seed: u64) -> (Pool, Plan) {
    use dtxn_fabric::shm::{ShmConfig, ShmPool};
    let shape = dtxn_store::PoolShape {
        memory_nodes: 1,
        replicas: 1,
        log_slices: 1,
        log_slice_bytes: w.log_slice_bytes(),
        region_bytes: None,
    };
    let plan = Plan::new(&w.tables(), &shape).expect("a plan");
    let pool = Pool::Shm(
        ShmPool::create(ShmConfig {
            node_sizes: vec![plan.region_bytes],
            dir: None,
            delay_ns: 0,
        })
        .expect("a pool"),
    );
    plan.format_pool(&pool).expect("formatted");
    w.load(&pool, &plan, seed).expect("loaded");
    (pool, plan)
}

#[cfg(test)]
mod slots_tests {
    use super::*;

    #[test]
    fn slots_parse_apply_and_refuse_with_reasons() {
        let s = Slots::parse("22, stock=4").unwrap();
        assert_eq!(s.all, Some(22));
        assert_eq!(s.tables, vec![("stock".to_string(), 4)]);
        let t = s.apply(vec![
            table(1, "stock", 100, 1000),
            table(2, "item", 100, 1000),
        ]);
        assert_eq!((t[0].slots_per_bucket, t[1].slots_per_bucket), (4, 22));
        // Bigger buckets, fewer of them: the overflow area is sized for their count.
        assert!(t[1].overflow_fraction > table(2, "item", 100, 1000).overflow_fraction);
        assert!(s.check(&t).is_ok());
        assert!(Slots::parse("item=1").unwrap().check(&t).is_ok());
        let e = Slots::parse("itm=1").unwrap().check(&t).unwrap_err();
        assert!(e.to_string().contains("no table 'itm'"), "{e}");
        for bad in ["0", "65", "x", "4,5", "stock=", ""] {
            assert!(Slots::parse(bad).is_err(), "{bad}");
        }
        assert!(Slots::default().is_default());
        assert_eq!(Slots::default().apply(t.clone()), t);
    }
}
