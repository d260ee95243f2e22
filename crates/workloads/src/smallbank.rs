//! SmallBank, as in FaSST, DrTM and FORD.
//!
//! Tables (keyed by account id, `0..accounts`), each value an 8-byte little-endian balance in
//! cents (FORD stores `{magic u32, float bal}`, also 8 bytes; integers make the checks exact):
//!
//! | table | id | value |
//! |---|---|---|
//! | SAVINGS | 1 | `i64` balance |
//! | CHECKING | 2 | `i64` balance |
//!
//! The mix (FORD's Table 2), with the records each transaction touches:
//!
//! | transaction | % | SAVINGS | CHECKING | logic |
//! |---|---|---|---|---|
//! | Amalgamate(a, b) | 15 | update a | update a, b | moves all of a's money to b's checking |
//! | Balance(a) | 15 | read a | read a | read-only |
//! | DepositChecking(a) | 15 | | update a | +1.30 |
//! | SendPayment(a, b) | 25 | | update a, b | 5.00 from a to b; rolled back if a has less |
//! | TransactSavings(a) | 15 | update a | | +20.20 |
//! | WriteCheck(a) | 15 | read a | update a | -5.00, -6.00 if savings + checking < 5.00 |
//!
//! Each transaction picks its accounts from the `hot` ones with probability `hot_pct`% (FORD's
//! `TX_HOT` 90 over 4,000 hot of 100,000 accounts: 90% of transactions on 4% of the accounts),
//! otherwise from all accounts; or, with `theta` (`--theta`), every account from a zipf
//! distribution of that parameter over all accounts, account 0 the hottest (Scythe's skew:
//! 0.99; 0 is uniform), the hot set unused. Every transaction's records are fetched in one
//! batch.
//!
//! [`Mix::Transfer`] runs only Amalgamate and SendPayment (60:40 of their standard weights,
//! 15:25), which move money without creating any: the total is then conserved, which
//! `--verify` checks on top of the per-account check (every balance equals its initial value
//! plus the deltas of the committed transactions that touched it).

use crate::rng::{mix, pick, Zipfian};
use crate::{field, loader_error, LocalRecord, WlRng, Workload, WorkloadError};
use dtxn_fabric::Pool;
use dtxn_store::{Loader, Plan, TableSpec};
use dtxn_txn::{Abort, Access, Coordinator, TxKind};
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

pub const SAVINGS: u32 = 1;
pub const CHECKING: u32 = 2;

pub const TXN_TYPES: [&str; 6] = [
    "Amalgamate",
    "Balance",
    "DepositChecking",
    "SendPayment",
    "TransactSavings",
    "WriteCheck",
];
const AMALGAMATE: usize = 0;
const BALANCE: usize = 1;
const DEPOSIT_CHECKING: usize = 2;
const SEND_PAYMENT: usize = 3;
const TRANSACT_SAVINGS: usize = 4;
const WRITE_CHECK: usize = 5;

const STANDARD: [u32; 6] = [15, 15, 15, 25, 15, 15];
const TRANSFER: [u32; 6] = [15, 0, 0, 25, 0, 0];

/// Amounts in cents (FORD's 1.3, 5.0, 20.20, 5.0).
const DEPOSIT: i64 = 130;
const PAYMENT: i64 = 500;
const SAVINGS_DEPOSIT: i64 = 2020;
const CHECK: i64 = 500;
const OVERDRAFT_PENALTY: i64 = 100;

/// Which transactions run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mix {
    /// The six transactions with FORD's frequencies.
    Standard,
    /// Amalgamate and SendPayment only: money is conserved.
    Transfer,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Options {
    pub accounts: u64,
    /// Hot accounts: ids `0..hot`.
    pub hot: u64,
    /// Percentage of transactions on hot accounts.
    pub hot_pct: u32,
    pub mix: Mix,
    /// Accounts drawn from zipf(theta) over all of them instead of the hot set (0: uniform);
    /// `None`: the hot set (and the options of runs before this one describe the same run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub theta: Option<f64>,
    /// Slots per bucket of the tables (the store's 4 unless given).
    #[serde(skip_serializing_if = "crate::Slots::is_default")]
    pub slots: crate::Slots,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            accounts: 100_000,
            hot: 4_000,
            hot_pct: 90,
            mix: Mix::Standard,
            theta: None,
            slots: crate::Slots::default(),
        }
    }
}

/// The SmallBank benchmark.
#[derive(Debug, Clone)]
pub struct SmallBank {
    o: Options,
    /// With `theta` above 0.
    zipf: Option<Zipfian>,
}

impl SmallBank {
    pub fn new(o: Options) -> Result<SmallBank, WorkloadError> {
        let bad = |m: String| Err(WorkloadError::Options(m));
        if o.accounts < 2 {
            return bad(format!(
                "smallbank needs at least 2 accounts (got {})",
                o.accounts
            ));
        }
        // With `theta` the hot set is unused.
        if o.theta.is_none() && (o.hot < 2 || o.hot > o.accounts) {
            return bad(format!(
                "smallbank: --hot-accounts must be 2 to --accounts ({}), got {}",
                o.accounts, o.hot
            ));
        }
        if o.hot_pct > 100 {
            return bad(format!(
                "smallbank: --hot-pct is a percentage, got {}",
                o.hot_pct
            ));
        }
        let zipf = match o.theta {
            Some(t) => Zipfian::new("smallbank: --theta", o.accounts, t)?,
            None => None,
        };
        Ok(SmallBank { o, zipf })
    }

    pub fn options(&self) -> &Options {
        &self.o
    }

    /// The balance account `a` of `table` is loaded with: 100.00 to 1,000.00, from the seed.
    pub fn initial(seed: u64, table: u32, a: u64) -> i64 {
        10_000 + (mix(seed ^ u64::from(table), a) % 90_000) as i64
    }

    fn two_accounts(&self, rng: &mut WlRng) -> (u64, u64) {
        if let Some(z) = &self.zipf {
            let a = z.sample(rng);
            // Distinct: drawn again (at most a handful of times: the hottest account has
            // about 8% of the draws at theta 0.99 over 100,000).
            let b = std::iter::repeat_with(|| z.sample(rng))
                .find(|&b| b != a)
                .expect("an endless iterator");
            return (a, b);
        }
        let range = self.range(rng);
        let a = rng.random_range(0..range);
        let mut b = rng.random_range(0..range - 1);
        if b >= a {
            b += 1;
        }
        (a, b)
    }

    fn range(&self, rng: &mut WlRng) -> u64 {
        if self.o.theta.is_some() {
            // Uniform over all (theta 0): the zipf case never gets here.
            return self.o.accounts;
        }
        if rng.random_range(0..100) < self.o.hot_pct {
            self.o.hot
        } else {
            self.o.accounts
        }
    }

    fn one_account(&self, rng: &mut WlRng) -> u64 {
        if let Some(z) = &self.zipf {
            return z.sample(rng);
        }
        let range = self.range(rng);
        rng.random_range(0..range)
    }
}

fn bal(v: Option<&[u8]>) -> i64 {
    v.map_or(0, |v| field::i64_at(v, 0))
}

/// The committed balance changes one coordinator saw, per account of each table. Serialized
/// as `{"deltas": [[[table, account], cents], ...]}` (accounts without a change left out).
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tally {
    #[serde(skip)]
    on: bool,
    #[serde(with = "crate::counts_serde")]
    deltas: HashMap<(u32, u64), i64>,
    /// The changes of the transaction committing now, counted once its commit returns (or
    /// recovery rolls it forward).
    #[serde(skip)]
    pending: Vec<(u32, u64, i64)>,
}

impl crate::Merge for Tally {
    /// Balance changes add up.
    fn merge(&mut self, other: Tally) {
        self.on |= other.on;
        crate::add_counts(&mut self.deltas, other.deltas);
    }
}

impl Tally {
    /// The changes the transaction about to commit makes.
    fn stage(&mut self, changes: &[(u32, u64, i64)]) {
        self.pending.clear();
        self.pending.extend_from_slice(changes);
    }

    /// Its commit returned: the staged changes count.
    fn confirm(&mut self) {
        let p = std::mem::take(&mut self.pending);
        self.add(&p);
    }

    fn add(&mut self, changes: &[(u32, u64, i64)]) {
        if self.on {
            for &(t, a, d) in changes {
                *self.deltas.entry((t, a)).or_default() += d;
            }
        }
    }
}

impl Workload for SmallBank {
    type Tally = Tally;

    fn name(&self) -> &'static str {
        "smallbank"
    }

    fn txn_types(&self) -> &'static [&'static str] {
        &TXN_TYPES
    }

    fn default_vnum(&self) -> u8 {
        3
    }

    fn slots(&self) -> &crate::Slots {
        &self.o.slots
    }

    fn tables(&self) -> Vec<TableSpec> {
        vec![
            crate::table(SAVINGS, "savings", 8, self.o.accounts),
            crate::table(CHECKING, "checking", 8, self.o.accounts),
        ]
    }

    fn load(&self, pool: &Pool, plan: &Plan, seed: u64) -> Result<(), WorkloadError> {
        for (id, name) in [(SAVINGS, "savings"), (CHECKING, "checking")] {
            let t =
                plan.table(id)
                    .ok_or(WorkloadError::Store(dtxn_store::StoreError::NoSuchTable(
                        id,
                    )))?;
            let mut l = Loader::new(t);
            for a in 0..self.o.accounts {
                l.insert(pool, a, &Self::initial(seed, id, a).to_le_bytes())
                    .map_err(loader_error(name))?;
            }
        }
        Ok(())
    }

    fn forget_in_flight(&self, tally: &mut Tally) {
        tally.pending.clear();
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
        let weights = match self.o.mix {
            Mix::Standard => &STANDARD,
            Mix::Transfer => &TRANSFER,
        };
        let ty = pick(rng, weights);
        let r = match ty {
            AMALGAMATE => {
                let (a, b) = self.two_accounts(rng);
                amalgamate(c, a, b, tally).await
            }
            BALANCE => {
                let a = self.one_account(rng);
                balance(c, a).await
            }
            DEPOSIT_CHECKING => {
                let a = self.one_account(rng);
                add_to(c, CHECKING, a, DEPOSIT, tally).await
            }
            SEND_PAYMENT => {
                let (a, b) = self.two_accounts(rng);
                send_payment(c, a, b, tally).await
            }
            TRANSACT_SAVINGS => {
                let a = self.one_account(rng);
                add_to(c, SAVINGS, a, SAVINGS_DEPOSIT, tally).await
            }
            _ => {
                debug_assert_eq!(ty, WRITE_CHECK);
                let a = self.one_account(rng);
                write_check(c, a, tally).await
            }
        };
        (ty, r)
    }

    fn verify(
        &self,
        pool: &Pool,
        plan: &Plan,
        seed: u64,
        tallies: &[Tally],
    ) -> Result<Vec<String>, WorkloadError> {
        let mut expected: HashMap<(u32, u64), i64> = HashMap::new();
        for t in tallies {
            for (&k, &d) in &t.deltas {
                *expected.entry(k).or_default() += d;
            }
        }
        let mut total = 0i64;
        let mut initial_total = 0i64;
        let mut checked = 0u64;
        for id in [SAVINGS, CHECKING] {
            let t =
                plan.table(id)
                    .ok_or(WorkloadError::Store(dtxn_store::StoreError::NoSuchTable(
                        id,
                    )))?;
            let records = crate::scan_table(pool, t);
            if records.len() as u64 != self.o.accounts {
                return Err(WorkloadError::Inconsistent(format!(
                    "{}: {} accounts, {} loaded",
                    t.name,
                    records.len(),
                    self.o.accounts
                )));
            }
            for LocalRecord {
                key, lock, value, ..
            } in &records
            {
                if *lock != 0 {
                    return Err(WorkloadError::Inconsistent(format!(
                        "{} account {key}: lock word {lock:#x} left behind",
                        t.name
                    )));
                }
                let got = field::i64_at(value, 0);
                let init = Self::initial(seed, id, *key);
                let want = init + expected.get(&(id, *key)).copied().unwrap_or(0);
                if got != want {
                    return Err(WorkloadError::Inconsistent(format!(
                        "{} account {key}: balance {got}, but loaded {init} plus committed \
                         changes {} make {want}",
                        t.name,
                        want - init
                    )));
                }
                total += got;
                initial_total += init;
                checked += 1;
            }
        }
        let mut passed = vec![format!(
            "every one of {checked} balances equals its initial value plus the committed \
             changes ({} accounts changed)",
            expected.values().filter(|&&d| d != 0).count()
        )];
        if self.o.mix == Mix::Transfer {
            if total != initial_total {
                return Err(WorkloadError::Inconsistent(format!(
                    "transfers only, yet the total is {total}, loaded {initial_total}"
                )));
            }
            passed.push(format!(
                "money is conserved: the total is {total} cents, as loaded"
            ));
        }
        Ok(passed)
    }
}

async fn amalgamate(c: &mut Coordinator, a: u64, b: u64, tally: &mut Tally) -> Result<(), Abort> {
    let mut tx = c.begin(TxKind::ReadWrite);
    tx.fetch(&[
        Access::update(SAVINGS, a),
        Access::update(CHECKING, a),
        Access::update(CHECKING, b),
    ])
    .await?;
    let (sa, ca, cb) = (
        bal(tx.get(SAVINGS, a)),
        bal(tx.get(CHECKING, a)),
        bal(tx.get(CHECKING, b)),
    );
    tx.update(SAVINGS, a, &0i64.to_le_bytes()).await?;
    tx.update(CHECKING, a, &0i64.to_le_bytes()).await?;
    tx.update(CHECKING, b, &(cb + sa + ca).to_le_bytes())
        .await?;
    tally.stage(&[
        (SAVINGS, a, -sa),
        (CHECKING, a, -ca),
        (CHECKING, b, sa + ca),
    ]);
    tx.commit().await?;
    tally.confirm();
    Ok(())
}

async fn balance(c: &mut Coordinator, a: u64) -> Result<(), Abort> {
    let mut tx = c.begin(TxKind::ReadOnly);
    tx.fetch(&[Access::read(SAVINGS, a), Access::read(CHECKING, a)])
        .await?;
    let total = bal(tx.get(SAVINGS, a)) + bal(tx.get(CHECKING, a));
    std::hint::black_box(total);
    tx.commit().await
}

async fn add_to(
    c: &mut Coordinator,
    table: u32,
    a: u64,
    amount: i64,
    tally: &mut Tally,
) -> Result<(), Abort> {
    let mut tx = c.begin(TxKind::ReadWrite);
    tx.fetch(&[Access::update(table, a)]).await?;
    let v = bal(tx.get(table, a));
    tx.update(table, a, &(v + amount).to_le_bytes()).await?;
    tally.stage(&[(table, a, amount)]);
    tx.commit().await?;
    tally.confirm();
    Ok(())
}

async fn send_payment(c: &mut Coordinator, a: u64, b: u64, tally: &mut Tally) -> Result<(), Abort> {
    let mut tx = c.begin(TxKind::ReadWrite);
    tx.fetch(&[Access::update(CHECKING, a), Access::update(CHECKING, b)])
        .await?;
    let (ca, cb) = (bal(tx.get(CHECKING, a)), bal(tx.get(CHECKING, b)));
    if ca < PAYMENT {
        tx.rollback().await;
        return Err(user_abort(a));
    }
    tx.update(CHECKING, a, &(ca - PAYMENT).to_le_bytes())
        .await?;
    tx.update(CHECKING, b, &(cb + PAYMENT).to_le_bytes())
        .await?;
    tally.stage(&[(CHECKING, a, -PAYMENT), (CHECKING, b, PAYMENT)]);
    tx.commit().await?;
    tally.confirm();
    Ok(())
}

async fn write_check(c: &mut Coordinator, a: u64, tally: &mut Tally) -> Result<(), Abort> {
    let mut tx = c.begin(TxKind::ReadWrite);
    tx.fetch(&[Access::read(SAVINGS, a), Access::update(CHECKING, a)])
        .await?;
    let (sa, ca) = (bal(tx.get(SAVINGS, a)), bal(tx.get(CHECKING, a)));
    let debit = if sa + ca < CHECK {
        CHECK + OVERDRAFT_PENALTY
    } else {
        CHECK
    };
    tx.update(CHECKING, a, &(ca - debit).to_le_bytes()).await?;
    tally.stage(&[(CHECKING, a, -debit)]);
    tx.commit().await?;
    tally.confirm();
    Ok(())
}

/// The application's own rollback, as the coordinator counted it.
pub(crate) fn user_abort(key: u64) -> Abort {
    Abort {
        reason: dtxn_txn::AbortReason::User,
        table: CHECKING,
        key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Merge;

    #[test]
    fn options_are_checked() {
        assert!(SmallBank::new(Options::default()).is_ok());
        let e = SmallBank::new(Options {
            hot: 10,
            accounts: 5,
            ..Options::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("--hot-accounts"), "{e}");
        assert!(SmallBank::new(Options {
            accounts: 1,
            ..Options::default()
        })
        .is_err());
    }

    #[test]
    fn two_accounts_are_distinct_and_mostly_hot() {
        use rand::SeedableRng;
        let sb = SmallBank::new(Options::default()).unwrap();
        let mut rng = WlRng::seed_from_u64(3);
        let mut hot = 0;
        for _ in 0..10_000 {
            let (a, b) = sb.two_accounts(&mut rng);
            assert_ne!(a, b);
            assert!(a < 100_000 && b < 100_000);
            if a < 4_000 {
                hot += 1;
            }
        }
        // 90% chosen hot, plus the cold picks that land on hot ids by chance.
        assert!((8_900..9_300).contains(&hot), "{hot}");
    }

    #[test]
    fn without_theta_the_draws_are_the_hot_set_rule_unchanged() {
        use rand::SeedableRng;
        let sb = SmallBank::new(Options::default()).unwrap();
        let (mut mine, mut old) = (WlRng::seed_from_u64(5), WlRng::seed_from_u64(5));
        // The rule as it was before `theta`: the same calls on the generator, in order.
        let range = |rng: &mut WlRng| {
            if rng.random_range(0..100) < 90 {
                4_000
            } else {
                100_000
            }
        };
        for _ in 0..1_000 {
            let r = range(&mut old);
            assert_eq!(sb.one_account(&mut mine), old.random_range(0..r));
            let r = range(&mut old);
            let a = old.random_range(0..r);
            let mut b = old.random_range(0..r - 1);
            if b >= a {
                b += 1;
            }
            assert_eq!(sb.two_accounts(&mut mine), (a, b));
        }
    }

    #[test]
    fn with_theta_accounts_are_zipf_over_all_and_distinct() {
        use rand::SeedableRng;
        let sb = SmallBank::new(Options {
            theta: Some(0.99),
            ..Options::default()
        })
        .unwrap();
        let mut rng = WlRng::seed_from_u64(3);
        let (mut zero, mut hot_set) = (0, 0);
        for _ in 0..10_000 {
            let (a, b) = sb.two_accounts(&mut rng);
            assert_ne!(a, b);
            assert!(a < 100_000 && b < 100_000);
            zero += u32::from(a == 0);
            hot_set += u32::from(sb.one_account(&mut rng) < 4_000);
        }
        // Uniform would put account 0 first 0.1 times in 10,000; zipf 0.99 over 100,000
        // about 800 (its share, 1 / H(100000, 0.99), is about 8%).
        assert!((600..1_000).contains(&zero), "{zero}");
        // The hot set's 90% no longer applies: zipf puts about 70% of draws on ids below 4,000.
        assert!((6_000..8_000).contains(&hot_set), "{hot_set}");
        let uniform = SmallBank::new(Options {
            theta: Some(0.0),
            ..Options::default()
        })
        .unwrap();
        let hot = (0..10_000)
            .filter(|_| uniform.one_account(&mut rng) < 4_000)
            .count();
        assert!((300..500).contains(&hot), "theta 0 is uniform: {hot}");
        for bad in [-0.5, f64::NAN] {
            let e = SmallBank::new(Options {
                theta: Some(bad),
                ..Options::default()
            })
            .unwrap_err()
            .to_string();
            assert!(e.starts_with("smallbank: --theta must be 0"), "{e}");
        }
    }

    fn tally(deltas: &[(u32, u64, i64)]) -> Tally {
        let mut t = Tally {
            on: true,
            ..Tally::default()
        };
        t.add(deltas);
        t
    }

    #[test]
    fn tallies_merge_by_adding_balance_changes() {
        let mut a = tally(&[(CHECKING, 3, -500), (SAVINGS, 1, 2020)]);
        a.merge(tally(&[(CHECKING, 3, 130), (CHECKING, 4, 500)]));
        assert_eq!(a.deltas.get(&(CHECKING, 3)), Some(&-370));
        assert_eq!(a.deltas.get(&(CHECKING, 4)), Some(&500));
        assert_eq!(a.deltas.get(&(SAVINGS, 1)), Some(&2020));
        assert_eq!(a.deltas.len(), 3);
        let none = crate::merge_all(Vec::<Tally>::new());
        assert!(none.is_none());
    }

    #[test]
    fn tallies_round_trip_through_json_in_a_stable_order() {
        let t = tally(&[(CHECKING, 9, 5), (SAVINGS, 2, -7), (CHECKING, 1, 0)]);
        let json = serde_json::to_string(&t).unwrap();
        // Key order, zero changes left out.
        assert_eq!(json, r#"{"deltas":[[[1,2],-7],[[2,9],5]]}"#);
        let back: Tally = serde_json::from_str(&json).unwrap();
        assert_eq!(
            back.deltas,
            t.deltas.into_iter().filter(|&(_, d)| d != 0).collect()
        );
        let e = serde_json::from_str::<Tally>(r#"{"deltas":[],"extra":1}"#).unwrap_err();
        assert!(e.to_string().contains("extra"), "{e}");
    }

    /// Verifying the merge of two tallies passes or fails as verifying both does.
    #[test]
    fn verify_reads_merged_tallies_as_it_reads_separate_ones() {
        let sb = SmallBank::new(Options {
            accounts: 20,
            hot: 4,
            ..Options::default()
        })
        .unwrap();
        let (pool, plan) = crate::loaded_pool(&sb, 7);
        // Nothing was run: changes that cancel out pass, one of them alone does not.
        let a = || tally(&[(CHECKING, 3, -500)]);
        let b = || tally(&[(CHECKING, 3, 500)]);
        assert!(sb.verify(&pool, &plan, 7, &[a(), b()]).is_ok());
        let merged = crate::merge_all([a(), b()]).unwrap();
        assert!(sb.verify(&pool, &plan, 7, &[merged]).is_ok());
        let e = sb.verify(&pool, &plan, 7, &[a()]).unwrap_err().to_string();
        assert!(
            e.contains("checking account 3") && e.contains("committed changes"),
            "{e}"
        );
        // The seed matters: balances are loaded from it.
        assert!(sb.verify(&pool, &plan, 8, &[]).is_err());
    }
}
