//! Skew: a few pairs of accounts under a cross-row invariant, built to expose write skew and
//! read skew (not a published benchmark).
//!
//! One table, ACCOUNTS (id 1), keyed `0..2 * pairs`: pair `p` is accounts `x = 2p` and
//! `y = 2p + 1`, and its invariant is **`0 <= x + y <= 8`** (either balance alone may go
//! negative). Accounts start at 4. A value is 72 bytes, two cache lines: the balance (`i64`,
//! little-endian) at the start and again at the end, so that a torn read shows two balances.
//!
//! | transaction | % | reads | writes | logic |
//! |---|---|---|---|---|
//! | Withdraw(p, side, n) | 50 | the other account | one account | takes up to `n` (1 to 8) from one account, as much as leaves the pair's sum `>= 0` (rolls back at 0) |
//! | Deposit(p, side) | 20 | the other account | one account | tops the pair's sum up to 8 (rolls back at 8) |
//! | Transfer(p, n) | 10 | | both accounts | moves `n` from one to the other (the sum unchanged) |
//! | Audit(p) | 20 | both accounts, one READ round each | | read-only: the sum must be within the bounds, each balance untorn |
//!
//! Two Withdraws of one pair that run side by side each see the other's account unchanged: a
//! protocol that lets both commit (write skew, G2) drives the sum below 0 whenever their
//! amounts add up to more than it; two Deposits side by side always take it above 8. An Audit
//! that reads `x` before a Transfer and `y` after it (read skew, G-single) sees a sum the pair
//! never had, out of bounds unless the amount is small.
//!
//! Snapshot isolation admits write skew: under it the invariant holds only with `promote`
//! (`--promote`), which makes Withdraw and Deposit write the account they read too
//! (unchanged).
//!
//! `--verify` checks every balance against its initial value plus the committed changes,
//! every pair's invariant on the pool, and that no committed Audit saw a sum out of bounds or
//! a torn balance. The history checker sees more: every write skew and read skew, also those
//! whose amounts happen to keep the sums in bounds.

use crate::rng::pick;
use crate::{field, loader_error, LocalRecord, WlRng, Workload, WorkloadError};
use dtxn_fabric::Pool;
use dtxn_store::{Loader, Plan, TableSpec};
use dtxn_txn::{Abort, AbortReason, Access, Coordinator, TxKind};
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

pub const ACCOUNTS: u32 = 1;

pub const TXN_TYPES: [&str; 4] = ["Withdraw", "Deposit", "Transfer", "Audit"];
const WITHDRAW: usize = 0;
const DEPOSIT: usize = 1;
const TRANSFER: usize = 2;
const AUDIT: usize = 3;
const MIX: [u32; 4] = [50, 20, 10, 20];

/// Every account's initial balance.
pub const INITIAL: i64 = 4;
/// The invariant's upper bound, to which a Deposit tops a pair up; Withdraw and Transfer
/// amounts are `1..=MAX_SUM`.
pub const MAX_SUM: i64 = 8;
/// Bytes per value: two cache lines, the balance at both ends.
pub const VALUE_SIZE: usize = 72;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Options {
    /// Pairs of accounts, each under `x + y >= 0`.
    pub pairs: u64,
    /// Withdraw and Deposit also write the account they only read (unchanged): the conflict
    /// materialized, which makes snapshot isolation (which admits write skew) keep the
    /// invariant too.
    pub promote: bool,
    /// Slots per bucket of the tables (the store's 4 unless given).
    #[serde(skip_serializing_if = "crate::Slots::is_default")]
    pub slots: crate::Slots,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            pairs: 4,
            promote: false,
            slots: crate::Slots::default(),
        }
    }
}

/// The Skew workload.
#[derive(Debug, Clone)]
pub struct Skew {
    o: Options,
}

impl Skew {
    pub fn new(o: Options) -> Result<Skew, WorkloadError> {
        if o.pairs == 0 {
            return Err(WorkloadError::Options(
                "skew needs at least 1 pair of accounts (--pairs)".into(),
            ));
        }
        Ok(Skew { o })
    }

    pub fn options(&self) -> &Options {
        &self.o
    }
}

/// A value holding `balance`.
pub fn value(balance: i64) -> [u8; VALUE_SIZE] {
    let mut v = [0u8; VALUE_SIZE];
    field::put_i64(&mut v, 0, balance);
    field::put_i64(&mut v, VALUE_SIZE - 8, balance);
    v
}

/// The balance a value holds, or `None` if its two copies differ (a torn read).
pub fn balance(v: &[u8]) -> Option<i64> {
    let (a, b) = (field::i64_at(v, 0), field::i64_at(v, v.len() - 8));
    (a == b).then_some(a)
}

/// What one coordinator saw commit: the balance changes per account; the committed
/// transactions that read a pair whose sum was out of bounds, or a torn balance; and the
/// lowest and highest sums they read.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tally {
    #[serde(skip)]
    on: bool,
    #[serde(with = "crate::counts_serde")]
    deltas: HashMap<u64, i64>,
    out_of_bounds: u64,
    torn: u64,
    lowest: Option<i64>,
    highest: Option<i64>,
    /// What the transaction committing now saw and changes, counted once its commit returns
    /// (or recovery rolls it forward).
    #[serde(skip)]
    pending: Option<(Seen, Vec<(u64, i64)>)>,
}

impl crate::Merge for Tally {
    fn merge(&mut self, other: Tally) {
        self.on |= other.on;
        crate::add_counts(&mut self.deltas, other.deltas);
        self.out_of_bounds += other.out_of_bounds;
        self.torn += other.torn;
        self.lowest = extreme(self.lowest, other.lowest, i64::min);
        self.highest = extreme(self.highest, other.highest, i64::max);
    }
}

impl Tally {
    /// What the transaction about to commit saw and changes.
    fn stage(&mut self, seen: Seen, changes: &[(u64, i64)]) {
        self.pending = Some((seen, changes.to_vec()));
    }

    /// Its commit returned: what it staged counts.
    fn confirm(&mut self) {
        if let Some((seen, changes)) = self.pending.take() {
            self.saw(seen);
            self.add(&changes);
        }
    }

    fn add(&mut self, changes: &[(u64, i64)]) {
        if self.on {
            for &(k, d) in changes {
                *self.deltas.entry(k).or_default() += d;
            }
        }
    }

    /// A committed transaction read the pair as `seen`.
    fn saw(&mut self, seen: Seen) {
        if !self.on {
            return;
        }
        match seen {
            Seen::Torn => self.torn += 1,
            Seen::Sum(sum) => {
                self.lowest = extreme(self.lowest, Some(sum), i64::min);
                self.highest = extreme(self.highest, Some(sum), i64::max);
                if !in_bounds(sum) {
                    self.out_of_bounds += 1;
                }
            }
        }
    }
}

/// The lower (or higher) of two sums, either possibly none.
fn extreme(a: Option<i64>, b: Option<i64>, pick: fn(i64, i64) -> i64) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(pick(a, b)),
        (a, b) => a.or(b),
    }
}

fn in_bounds(sum: i64) -> bool {
    (0..=MAX_SUM).contains(&sum)
}

/// What a transaction read of a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Sum(i64),
    /// A balance whose two copies differ.
    Torn,
}

/// The pair's balances as `tx` read them: (`mine`, `other`) and what that says of the pair.
fn pair(tx: &dtxn_txn::Txn<'_>, mine: u64, other: u64) -> (i64, i64, Seen) {
    match (
        read_balance(tx.get(ACCOUNTS, mine)),
        read_balance(tx.get(ACCOUNTS, other)),
    ) {
        (Some(m), Some(o)) => (m, o, Seen::Sum(m + o)),
        _ => (0, 0, Seen::Torn),
    }
}

/// The access to the account a Withdraw or Deposit reads but does not change: for update if
/// `promote` (it is then written back unchanged).
fn read_other(other: u64, promote: bool) -> Access {
    if promote {
        Access::update(ACCOUNTS, other)
    } else {
        Access::read(ACCOUNTS, other)
    }
}

fn user_abort(key: u64) -> Abort {
    Abort {
        reason: AbortReason::User,
        table: ACCOUNTS,
        key,
    }
}

/// A balance as the transaction read it (`None`: torn, or absent, which a loaded account
/// never is).
fn read_balance(v: Option<&[u8]>) -> Option<i64> {
    v.and_then(balance)
}

impl Workload for Skew {
    type Tally = Tally;

    fn name(&self) -> &'static str {
        "skew"
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
        vec![crate::table(
            ACCOUNTS,
            "accounts",
            VALUE_SIZE,
            2 * self.o.pairs,
        )]
    }

    fn load(&self, pool: &Pool, plan: &Plan, _seed: u64) -> Result<(), WorkloadError> {
        let t = plan.table(ACCOUNTS).ok_or(WorkloadError::Store(
            dtxn_store::StoreError::NoSuchTable(ACCOUNTS),
        ))?;
        let mut l = Loader::new(t);
        for a in 0..2 * self.o.pairs {
            l.insert(pool, a, &value(INITIAL))
                .map_err(loader_error("accounts"))?;
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
        let ty = pick(rng, &MIX);
        let p = rng.random_range(0..self.o.pairs);
        let (x, y) = (2 * p, 2 * p + 1);
        let (mine, other) = if rng.random_bool(0.5) { (x, y) } else { (y, x) };
        let n = rng.random_range(1..=MAX_SUM);
        let r = match ty {
            WITHDRAW => withdraw(c, mine, other, n, self.o.promote, tally).await,
            DEPOSIT => deposit(c, mine, other, self.o.promote, tally).await,
            TRANSFER => transfer(c, mine, other, n, tally).await,
            _ => {
                debug_assert_eq!(ty, AUDIT);
                audit(c, x, y, tally).await
            }
        };
        (ty, r)
    }

    fn verify(
        &self,
        pool: &Pool,
        plan: &Plan,
        _seed: u64,
        tallies: &[Tally],
    ) -> Result<Vec<String>, WorkloadError> {
        let bad = |m: String| Err(WorkloadError::Inconsistent(m));
        let mut all = self.tally(true);
        for t in tallies {
            crate::Merge::merge(&mut all, round_trip(t));
        }
        let balances = self.balances(pool, plan, &all)?;
        for p in 0..self.o.pairs {
            let (x, y) = (balances[&(2 * p)], balances[&(2 * p + 1)]);
            if !in_bounds(x + y) {
                return bad(format!(
                    "pair {p}: accounts {} and {} hold {x} + {y} = {}, outside 0..={MAX_SUM} \
                     (write skew: two withdrawals, or two deposits, each saw the other's account \
                     unchanged)",
                    2 * p,
                    2 * p + 1,
                    x + y
                ));
            }
        }
        if all.torn > 0 {
            return bad(format!(
                "{} committed transactions read a torn balance",
                all.torn
            ));
        }
        if all.out_of_bounds > 0 {
            return bad(format!(
                "{} committed transactions read a pair's sum outside 0..={MAX_SUM} (lowest {}, \
                 highest {}): write skew left it there, or read skew showed a sum the pair \
                 never had",
                all.out_of_bounds,
                all.lowest.unwrap_or(0),
                all.highest.unwrap_or(0)
            ));
        }
        Ok(vec![
            format!(
                "every one of {} balances equals its initial value plus the committed changes",
                balances.len()
            ),
            format!(
                "every one of {} pairs holds 0 <= x + y <= {MAX_SUM}, and so did every pair a \
                 committed transaction read",
                self.o.pairs
            ),
        ])
    }
}

impl Skew {
    /// Every account's balance on the pool, each checked against its initial value plus the
    /// committed changes `all` tallied (and for a lock left behind or a torn value).
    fn balances(
        &self,
        pool: &Pool,
        plan: &Plan,
        all: &Tally,
    ) -> Result<HashMap<u64, i64>, WorkloadError> {
        let bad = |m: String| Err(WorkloadError::Inconsistent(m));
        let t = plan.table(ACCOUNTS).ok_or(WorkloadError::Store(
            dtxn_store::StoreError::NoSuchTable(ACCOUNTS),
        ))?;
        let records = crate::scan_table(pool, t);
        if records.len() as u64 != 2 * self.o.pairs {
            return bad(format!(
                "accounts: {} records, {} loaded",
                records.len(),
                2 * self.o.pairs
            ));
        }
        let mut balances = HashMap::new();
        for LocalRecord {
            key, lock, value, ..
        } in &records
        {
            if *lock != 0 {
                return bad(format!("account {key}: lock word {lock:#x} left behind"));
            }
            let Some(got) = balance(value) else {
                return bad(format!("account {key}: its two balances differ (torn)"));
            };
            let want = INITIAL + all.deltas.get(key).copied().unwrap_or(0);
            if got != want {
                return bad(format!(
                    "account {key}: balance {got}, but loaded {INITIAL} plus committed changes \
                     {} make {want}",
                    want - INITIAL
                ));
            }
            balances.insert(*key, got);
        }
        Ok(balances)
    }
}

/// A copy of a tally (tallies are not `Clone`: what a file would hold).
fn round_trip(t: &Tally) -> Tally {
    let mut c = Tally {
        on: true,
        deltas: t.deltas.clone(),
        ..Tally::default()
    };
    (c.out_of_bounds, c.torn, c.lowest, c.highest) = (t.out_of_bounds, t.torn, t.lowest, t.highest);
    c
}

/// A transaction that read the pair out of bounds (or torn) commits without writing, so that
/// what it read is validated; it counts only if it commits.
async fn commit_unchanged(
    tx: dtxn_txn::Txn<'_>,
    seen: Seen,
    tally: &mut Tally,
) -> Result<(), Abort> {
    tally.stage(seen, &[]);
    tx.commit().await?;
    tally.confirm();
    Ok(())
}

async fn withdraw(
    c: &mut Coordinator,
    mine: u64,
    other: u64,
    n: i64,
    promote: bool,
    tally: &mut Tally,
) -> Result<(), Abort> {
    let mut tx = c.begin(TxKind::ReadWrite);
    tx.fetch(&[read_other(other, promote), Access::update(ACCOUNTS, mine)])
        .await?;
    let (m, o, seen) = pair(&tx, mine, other);
    if seen != Seen::Sum(m + o) || !in_bounds(m + o) {
        return commit_unchanged(tx, seen, tally).await;
    }
    // Up to `n`: as much as keeps the sum at 0 or above.
    let n = n.min(m + o);
    if n == 0 {
        tx.rollback().await;
        return Err(user_abort(mine));
    }
    tx.update(ACCOUNTS, mine, &value(m - n)).await?;
    if promote {
        tx.update(ACCOUNTS, other, &value(o)).await?;
    }
    tally.stage(seen, &[(mine, -n)]);
    tx.commit().await?;
    tally.confirm();
    Ok(())
}

/// Tops the pair up to [`MAX_SUM`], into one account (rolls back if it is full).
async fn deposit(
    c: &mut Coordinator,
    mine: u64,
    other: u64,
    promote: bool,
    tally: &mut Tally,
) -> Result<(), Abort> {
    let mut tx = c.begin(TxKind::ReadWrite);
    tx.fetch(&[read_other(other, promote), Access::update(ACCOUNTS, mine)])
        .await?;
    let (m, o, seen) = pair(&tx, mine, other);
    if seen != Seen::Sum(m + o) || !in_bounds(m + o) {
        return commit_unchanged(tx, seen, tally).await;
    }
    let n = MAX_SUM - (m + o);
    if n == 0 {
        tx.rollback().await;
        return Err(user_abort(mine));
    }
    tx.update(ACCOUNTS, mine, &value(m + n)).await?;
    if promote {
        tx.update(ACCOUNTS, other, &value(o)).await?;
    }
    tally.stage(seen, &[(mine, n)]);
    tx.commit().await?;
    tally.confirm();
    Ok(())
}

/// Moves `n` from one account to the other: the sum unchanged.
async fn transfer(
    c: &mut Coordinator,
    from: u64,
    to: u64,
    n: i64,
    tally: &mut Tally,
) -> Result<(), Abort> {
    let mut tx = c.begin(TxKind::ReadWrite);
    tx.fetch(&[Access::update(ACCOUNTS, from), Access::update(ACCOUNTS, to)])
        .await?;
    let (f, t, seen) = pair(&tx, from, to);
    if seen != Seen::Sum(f + t) || !in_bounds(f + t) {
        return commit_unchanged(tx, seen, tally).await;
    }
    tx.update(ACCOUNTS, from, &value(f - n)).await?;
    tx.update(ACCOUNTS, to, &value(t + n)).await?;
    tally.stage(seen, &[(from, -n), (to, n)]);
    tx.commit().await?;
    tally.confirm();
    Ok(())
}

/// Reads the pair in two rounds (x, then y), which leaves a writer of both time to commit in
/// between: only validation keeps the audit from seeing half of it.
async fn audit(c: &mut Coordinator, x: u64, y: u64, tally: &mut Tally) -> Result<(), Abort> {
    let mut tx = c.begin(TxKind::ReadOnly);
    tx.fetch(&[Access::read(ACCOUNTS, x)]).await?;
    tx.fetch(&[Access::read(ACCOUNTS, y)]).await?;
    let (_, _, seen) = pair(&tx, x, y);
    commit_unchanged(tx, seen, tally).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Merge;

    #[test]
    fn values_hold_the_balance_twice_and_a_mismatch_reads_as_torn() {
        let v = value(-7);
        assert_eq!(v.len(), VALUE_SIZE);
        assert_eq!(balance(&v), Some(-7));
        let mut torn = v;
        torn[VALUE_SIZE - 8..].copy_from_slice(&value(3)[..8]);
        assert_eq!(balance(&torn), None);
        assert!(Skew::new(Options {
            pairs: 0,
            ..Options::default()
        })
        .is_err());
    }

    #[test]
    fn tallies_merge_and_round_trip() {
        let w = Skew::new(Options::default()).unwrap();
        let mut a = w.tally(true);
        a.add(&[(1, -3), (2, 5)]);
        a.saw(Seen::Sum(4));
        let mut b = w.tally(true);
        b.add(&[(1, 3)]);
        b.saw(Seen::Sum(-1));
        b.saw(Seen::Sum(9));
        b.saw(Seen::Torn);
        a.merge(b);
        assert_eq!((a.deltas.get(&1), a.deltas.get(&2)), (Some(&0), Some(&5)));
        assert_eq!((a.out_of_bounds, a.torn), (2, 1));
        assert_eq!((a.lowest, a.highest), (Some(-1), Some(9)));
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(
            json,
            r#"{"deltas":[[2,5]],"out_of_bounds":2,"torn":1,"lowest":-1,"highest":9}"#
        );
        let back: Tally = serde_json::from_str(&json).unwrap();
        assert_eq!((back.out_of_bounds, back.highest), (2, Some(9)));
        // A tally that records nothing stays empty.
        let mut off = w.tally(false);
        off.saw(Seen::Sum(-5));
        off.add(&[(1, 1)]);
        assert_eq!((off.out_of_bounds, off.deltas.len()), (0, 0));
    }

    #[test]
    fn verify_catches_a_wrong_balance_and_what_transactions_saw() {
        let w = Skew::new(Options {
            pairs: 3,
            ..Options::default()
        })
        .unwrap();
        let (pool, plan) = crate::loaded_pool(&w, 1);
        let ok = w.verify(&pool, &plan, 1, &[]).unwrap();
        assert_eq!(ok.len(), 2, "{ok:?}");
        // Committed changes that the pool does not show.
        let mut t = w.tally(true);
        t.add(&[(4, -25)]);
        let e = w.verify(&pool, &plan, 1, &[t]).unwrap_err().to_string();
        assert!(
            e.contains("account 4: balance 4") && e.contains("make -21"),
            "{e}"
        );
        let mut t = w.tally(true);
        t.saw(Seen::Sum(-3));
        let e = w.verify(&pool, &plan, 1, &[t]).unwrap_err().to_string();
        assert!(
            e.contains("1 committed transactions read a pair's sum outside 0..=8")
                && e.contains("lowest -3"),
            "{e}"
        );
        let mut t = w.tally(true);
        t.saw(Seen::Torn);
        let e = w.verify(&pool, &plan, 1, &[t]).unwrap_err().to_string();
        assert!(e.contains("read a torn balance"), "{e}");
    }
}
