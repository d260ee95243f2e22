//! TPC-C (standard specification 5.11), all five transactions, on a hash-indexed store.
//!
//! Sizes: by default the papers' reduced ones (FORD's and Motor's JSON tables: 300 customers
//! per district, 10,000 items, 10,000 stock rows per warehouse; 10 districts per warehouse),
//! or the spec's with [`Options::spec`] (`--spec-sizes`: 3,000 customers, 100,000 items and
//! stock rows). The initial database follows the spec's population rules scaled to those
//! sizes: one order per customer, 5 to 15 lines each, the newest 30% undelivered and in
//! NEW_ORDER, one HISTORY row per customer, W_YTD 300,000.00 and D_YTD 30,000.00.
//!
//! Tables (money in cents, rates in 1/10,000; fixed-layout little-endian values, padded to
//! the spec's row sizes; FORD's 664-byte customer):
//!
//! | table | id | key | value bytes |
//! |---|---|---|---|
//! | WAREHOUSE | 1 | w | 96 |
//! | DISTRICT | 2 | (w, d) | 104 |
//! | CUSTOMER | 3 | (w, d, c) | 664 |
//! | HISTORY | 4 | unique per coordinator (the spec gives it no key) | 48 |
//! | NEW_ORDER | 5 | (w, d, o) | 8 |
//! | ORDER | 6 | (w, d, o) | 32 |
//! | ORDER_LINE | 7 | (w, d, o, number) | 56 |
//! | ITEM | 8 | i | 88 |
//! | STOCK | 9 | (w, i) | 312 |
//! | CUSTOMER_BY_NAME | 10 | (w, d, last name) | 128: the customer ids with that last name, sorted by C_FIRST |
//! | CUSTOMER_LAST_ORDER | 11 | (w, d, c) | 8: the customer's newest order id |
//! | DELIVERY_HEAD | 12 | (w, d) | 8: the oldest undelivered order id |
//!
//! The three index tables stand in for the range and secondary-index reads a hash store
//! cannot do, and are how the transactions stay whole (where FORD's code picks random order
//! ids, `tpcc_txn.cc`'s FIXMEs):
//! - Payment and OrderStatus select 60% of customers by last name through CUSTOMER_BY_NAME
//!   (the middle one of those sorted by first name, as the spec says). Run-time last names
//!   are drawn with NURand(255, 0, min(999, customers - 1)), so that with 300 customers per
//!   district every name drawn exists (the spec's range assumes 3,000).
//! - OrderStatus finds the customer's newest order through CUSTOMER_LAST_ORDER, which
//!   NewOrder updates.
//! - Delivery finds each district's oldest NEW_ORDER through DELIVERY_HEAD: NEW_ORDER rows of
//!   a district are always the contiguous range [head, D_NEXT_O_ID) (consistency condition
//!   3), so the head is its minimum.
//! - StockLevel reads the district's last 20 ORDER rows for their line counts, then those
//!   lines, then the distinct items' STOCK rows: point reads, four batches.
//!
//! The mix and what each transaction does, by batch (each batch is one round trip; NewOrder
//! inserts all its rows in one batch, Payment its HISTORY row in another):
//!
//! | transaction | % | batches |
//! |---|---|---|
//! | NewOrder | 45 | read WAREHOUSE, CUSTOMER, ITEMs; update DISTRICT, STOCKs, CUSTOMER_LAST_ORDER. Insert ORDER, NEW_ORDER, ORDER_LINEs. 1% roll back on an unused item id (reason `user`); 1% of lines from a remote warehouse |
//! | Payment | 43 | (by name: read CUSTOMER_BY_NAME); update WAREHOUSE, DISTRICT, CUSTOMER (15% of a remote warehouse; bad-credit customers get the payment prepended to C_DATA). Insert HISTORY |
//! | OrderStatus | 4 | read-only: (by name); CUSTOMER and CUSTOMER_LAST_ORDER; ORDER; its ORDER_LINEs |
//! | Delivery | 4 | for all 10 districts at once: update DELIVERY_HEADs; update the head NEW_ORDERs (and delete them); update the ORDERs (carrier); update their ORDER_LINEs (delivery date) and CUSTOMERs (balance, delivery count) |
//! | StockLevel | 4 | read-only: DISTRICT; the last 20 ORDERs; their ORDER_LINEs; the STOCK of their items |
//!
//! NewOrder's item ids are NURand(8191, 1, items), the spec's; with `theta` (`--theta`) they
//! are drawn from a zipf distribution of that parameter instead, item 1 the hottest (Scythe's
//! skew: "order items" at 0.99; 0 is uniform).
//!
//! Each coordinator is a terminal with a home warehouse (coordinator index mod warehouses, as
//! the spec binds terminals to warehouses), and runs the mix without keying or think times.
//!
//! Inserted rows need room: the run can insert [`Options::new_orders_per_district`] orders per
//! district (their lines and NEW_ORDER rows) and [`Options::payments_per_district`] HISTORY
//! rows; an insert into a full table aborts with reason `table-full` (raise
//! `--new-orders-per-district`, which sets both). [`Options::mix`] weighs the five types
//! (the spec's 45/43/4/4/4 by default).
//!
//! [`Options::variant`] (`--tpcc-variant dbx1000`) leaves out what DBx1000's TPC-C does not do
//! (every insert, the bad-credit C_DATA update, the 1% rollback, CUSTOMER_LAST_ORDER), for a
//! comparison of equal work with it ([`Variant::Dbx1000`]).
//!
//! `--verify` checks the spec's consistency conditions 1 to 4 for every warehouse and
//! district, the delivery head (it equals min(NO_O_ID), or D_NEXT_O_ID when no order is
//! pending), condition 6 (every order has O_OL_CNT lines), and that no lock is left behind.

use crate::rng::{mix, nurand, pick, Zipfian};
use crate::{field, loader_error, scan_table, LocalRecord, WlRng, Workload, WorkloadError};
use arrayvec::{ArrayString, ArrayVec};
use dtxn_fabric::Pool;
use dtxn_store::{Loader, Plan, StoreError, TableInfo, TableSpec};
use dtxn_txn::{Abort, AbortReason, Access, Coordinator, TxKind, Txn};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;

pub const WAREHOUSE: u32 = 1;
pub const DISTRICT: u32 = 2;
pub const CUSTOMER: u32 = 3;
pub const HISTORY: u32 = 4;
pub const NEW_ORDER: u32 = 5;
pub const ORDER: u32 = 6;
pub const ORDER_LINE: u32 = 7;
pub const ITEM: u32 = 8;
pub const STOCK: u32 = 9;
pub const CUSTOMER_BY_NAME: u32 = 10;
pub const CUSTOMER_LAST_ORDER: u32 = 11;
pub const DELIVERY_HEAD: u32 = 12;

pub const TXN_TYPES: [&str; 5] = [
    "NewOrder",
    "Payment",
    "OrderStatus",
    "Delivery",
    "StockLevel",
];
/// The spec's mix, in the order of [`TXN_TYPES`] (weights, percent).
pub const STANDARD_MIX: [u32; 5] = [45, 43, 4, 4, 4];
/// What each type costs against the others (FORD on shm, us per transaction): how much faster
/// than the standard mix another mix runs, for sizing the tables that grow.
const RELATIVE_COST: [u32; 5] = [21, 5, 6, 90, 88];

pub const DISTRICTS: u32 = 10;
const MAX_CUSTOMERS: u32 = 4095;
const MAX_ITEMS: u32 = (1 << 17) - 1;
const MAX_ORDERS: u64 = (1 << 24) - 1;
const MAX_WAREHOUSES: u32 = 1 << 16;
const MIN_LINES: u32 = 5;
const MAX_LINES: u32 = 15;
/// StockLevel looks at the district's last 20 orders.
const STOCK_LEVEL_ORDERS: u64 = 20;
/// Customers per last name kept in CUSTOMER_BY_NAME (the spec's 3,000 customers over 1,000
/// names give a handful each; more are dropped, the lookup picks among those kept).
const NAME_SLOTS: usize = 31;

// NURand constants: C for the load and for the run (C-Run - C-Load for C_LAST in [65, 119],
// not 96 or 112, spec 2.1.6.1).
const C_LAST_LOAD: u64 = 157;
const C_LAST_RUN: u64 = 223;
const C_ID: u64 = 259;
const C_ITEM: u64 = 7911;

// Value layouts: (offset) of each field the transactions use; the rest is the spec's
// columns as filler.
const W_BYTES: usize = 96;
const W_TAX: usize = 0;
const W_YTD: usize = 8;
const D_BYTES: usize = 104;
const D_TAX: usize = 0;
const D_YTD: usize = 8;
const D_NEXT_O_ID: usize = 16;
const C_BYTES: usize = 664;
const C_BALANCE: usize = 0;
const C_YTD_PAYMENT: usize = 8;
const C_PAYMENT_CNT: usize = 16;
const C_DELIVERY_CNT: usize = 20;
const C_DISCOUNT: usize = 24;
const C_CREDIT: usize = 28;
const C_NAME: usize = 32;
const C_FIRST: usize = 44;
const C_DATA: usize = 164;
const C_DATA_LEN: usize = 500;
const H_BYTES: usize = 48;
const NO_BYTES: usize = 8;
const O_BYTES: usize = 32;
const O_C_ID: usize = 0;
const O_CARRIER: usize = 4;
const O_OL_CNT: usize = 8;
const O_ALL_LOCAL: usize = 12;
const O_ENTRY_D: usize = 16;
const OL_BYTES: usize = 56;
const OL_I_ID: usize = 0;
const OL_SUPPLY_W: usize = 4;
const OL_DELIVERY_D: usize = 8;
const OL_QUANTITY: usize = 16;
const OL_AMOUNT: usize = 24;
const OL_DIST_INFO: usize = 32;
const I_BYTES: usize = 88;
const I_PRICE: usize = 8;
const S_BYTES: usize = 312;
const S_QUANTITY: usize = 0;
const S_YTD: usize = 8;
const S_ORDER_CNT: usize = 16;
const S_REMOTE_CNT: usize = 20;
const S_DIST: usize = 24;
const NAME_BYTES: usize = 4 + 4 * NAME_SLOTS;

/// NewOrder's fetch order ([`Options::fetch_order`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FetchOrder {
    /// Every row in one batch: one round trip (per protocol phase) for the whole order.
    #[default]
    Batched,
    /// FORD's code (`TxNewOrder`): warehouse, district and customer in the first round
    /// trip, then each line's item and stock in one of its own.
    Ford,
}

impl FetchOrder {
    pub fn is_batched(&self) -> bool {
        *self == FetchOrder::Batched
    }
}

/// What NewOrder and Payment write ([`Options::variant`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// The spec's: every row NewOrder and Payment insert or update.
    #[default]
    Spec,
    /// DBx1000's TPC-C (Yu et al., VLDB'14; the commit `shared/baselines` builds), for a
    /// side-by-side comparison of equal work: NewOrder and Payment only, neither inserting a
    /// row (its `insert_row` calls for ORDER, NEW_ORDER, ORDER_LINE and HISTORY are commented
    /// out), no bad-credit C_DATA update, no 1% rollback (its `rbk` is drawn, never used),
    /// and no CUSTOMER_LAST_ORDER update (dtxn's own index table for OrderStatus). What is
    /// left: NewOrder reads the warehouse, customer and items and updates the district and
    /// the stock rows; Payment updates warehouse, district and customer (by last name 60%).
    Dbx1000,
}

impl Variant {
    pub fn is_spec(&self) -> bool {
        *self == Variant::Spec
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Options {
    pub warehouses: u32,
    pub customers_per_district: u32,
    pub items: u32,
    /// Orders each district can take during the run (room for inserted rows).
    pub new_orders_per_district: u64,
    /// HISTORY rows (Payments) each district can take during the run; `None`: as many as
    /// orders (what runs before this option had, so that their options still describe the
    /// same pool).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payments_per_district: Option<u64>,
    /// Percentage of NewOrder lines supplied by a remote warehouse (spec: 1).
    pub remote_item_pct: u32,
    /// Percentage of Payments by a customer of a remote warehouse (spec: 15).
    pub remote_payment_pct: u32,
    /// Weights of the transaction types, in the order of [`TXN_TYPES`] ([`STANDARD_MIX`]
    /// by default; e.g. `[0, 0, 0, 0, 1]` runs StockLevel alone, to profile one type).
    pub mix: [u32; 5],
    /// NewOrder's item ids drawn from zipf(theta) instead of NURand (0: uniform); `None`:
    /// NURand (and the options of runs before this one describe the same run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub theta: Option<f64>,
    /// How NewOrder fetches its rows: all in one batch (dtxn's), or as FORD's and Motor's
    /// code does: the district first, then each order line's item and stock in a round trip
    /// of its own (an attempt that loses the district lock stops after one round trip).
    #[serde(skip_serializing_if = "FetchOrder::is_batched")]
    pub fetch_order: FetchOrder,
    /// What NewOrder and Payment write: the spec's rows, or only what DBx1000's TPC-C writes
    /// (for comparing equal work with it; NewOrder and Payment only).
    #[serde(skip_serializing_if = "Variant::is_spec")]
    pub variant: Variant,
    /// Slots per bucket of the tables (the store's 4 unless given).
    #[serde(skip_serializing_if = "crate::Slots::is_default")]
    pub slots: crate::Slots,
}

impl Default for Options {
    /// FORD's and Motor's reduced sizes.
    fn default() -> Options {
        Options {
            warehouses: 1,
            customers_per_district: 300,
            items: 10_000,
            new_orders_per_district: 2_000,
            payments_per_district: None,
            remote_item_pct: 1,
            remote_payment_pct: 15,
            mix: STANDARD_MIX,
            theta: None,
            fetch_order: FetchOrder::Batched,
            variant: Variant::Spec,
            slots: crate::Slots::default(),
        }
    }
}

impl Options {
    /// The spec's sizes.
    pub fn spec() -> Options {
        Options {
            customers_per_district: 3_000,
            items: 100_000,
            ..Options::default()
        }
    }

    /// HISTORY rows each district can take.
    pub fn payments(&self) -> u64 {
        self.payments_per_district
            .unwrap_or(self.new_orders_per_district)
    }

    /// Room per district for the orders and the HISTORY rows (NewOrders and Payments) that
    /// `txns` transactions of `mix` insert, with a quarter to spare. `txns` may be a guess of
    /// how many transactions of the standard mix a run's duration holds: a mix of cheaper
    /// transactions runs more of them in that time, so the count is scaled up by how much
    /// cheaper it is ([`RELATIVE_COST`]; Payments alone run four times as many per second),
    /// and never down (with `--txns` the count is exact, whatever the mix costs).
    pub fn room_for(txns: u64, warehouses: u32, mix: &[u32; 5]) -> (u64, u64) {
        let districts = u128::from(warehouses.max(1)) * u128::from(DISTRICTS);
        let sum = |m: &[u32; 5]| m.iter().map(|&w| u128::from(w)).sum::<u128>().max(1);
        let cost = |m: &[u32; 5]| -> u128 {
            m.iter()
                .zip(RELATIVE_COST)
                .map(|(&w, c)| u128::from(w) * u128::from(c))
                .sum::<u128>()
                .max(1)
        };
        // Per transaction the standard mix costs cost(S) / sum(S), this one cost(m) / sum(m):
        // the speed-up is their ratio, up / down, counted only when above 1.
        let up = cost(&STANDARD_MIX) * sum(mix);
        let down = sum(&STANDARD_MIX) * cost(mix);
        let room = |w: u32| {
            let share = u128::from(txns) * u128::from(w);
            let n = share * up.max(down) / (sum(mix) * down);
            let per = (n / districts) as u64;
            (per + per / 4 + 500).min(MAX_ORDERS / 2)
        };
        (room(mix[0]), room(mix[1]))
    }
}

/// The TPC-C benchmark.
#[derive(Debug, Clone)]
pub struct Tpcc {
    o: Options,
    /// NewOrder's item ranks, with `theta` above 0.
    items: Option<Zipfian>,
}

pub fn dkey(w: u32, d: u32) -> u64 {
    u64::from(w) * 16 + u64::from(d)
}

pub fn ckey(w: u32, d: u32, c: u32) -> u64 {
    dkey(w, d) * 4096 + u64::from(c)
}

pub fn okey(w: u32, d: u32, o: u64) -> u64 {
    (dkey(w, d) << 24) | o
}

pub fn olkey(w: u32, d: u32, o: u64, n: u32) -> u64 {
    okey(w, d, o) * 16 + u64::from(n)
}

pub fn skey(w: u32, i: u32) -> u64 {
    (u64::from(w) << 17) | u64::from(i)
}

pub fn name_key(w: u32, d: u32, name: u32) -> u64 {
    dkey(w, d) * 1024 + u64::from(name)
}

/// The (w, d) of a district key.
fn district_of(dk: u64) -> (u32, u32) {
    ((dk / 16) as u32, (dk % 16) as u32)
}

const SYLLABLES: [&str; 10] = [
    "BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING",
];

/// The spec's C_LAST for a name number 0..=999.
pub fn last_name(n: u32) -> String {
    let n = n as usize;
    [n / 100, (n / 10) % 10, n % 10]
        .iter()
        .map(|&i| SYLLABLES[i])
        .collect()
}

fn fill_alnum(rng: &mut WlRng, out: &mut [u8]) {
    const A: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    for b in out {
        *b = A[rng.random_range(0..A.len())];
    }
}

fn rollback_abort(table: u32, key: u64) -> Abort {
    Abort {
        reason: AbortReason::User,
        table,
        key,
    }
}

/// Per-coordinator state: the HISTORY key sequence (HISTORY rows need unique keys). TPC-C's
/// check reads the pool only (its consistency conditions relate tables to each other), so
/// there is nothing to carry to it: the tally serializes as `{}` and merging keeps `self`.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tally {
    #[serde(skip)]
    history_seq: u64,
}

impl crate::Merge for Tally {
    fn merge(&mut self, _other: Tally) {}
}

impl Tpcc {
    pub fn new(o: Options) -> Result<Tpcc, WorkloadError> {
        let bad = |m: String| Err(WorkloadError::Options(m));
        if o.warehouses == 0 || o.warehouses > MAX_WAREHOUSES {
            return bad(format!(
                "tpcc: --warehouses must be 1 to {MAX_WAREHOUSES}, got {}",
                o.warehouses
            ));
        }
        if !(10..=MAX_CUSTOMERS).contains(&o.customers_per_district) {
            return bad(format!(
                "tpcc: customers per district must be 10 to {MAX_CUSTOMERS}, got {}",
                o.customers_per_district
            ));
        }
        if !(100..=MAX_ITEMS - 1).contains(&o.items) {
            return bad(format!(
                "tpcc: items must be 100 to {}, got {}",
                MAX_ITEMS - 1,
                o.items
            ));
        }
        let most = o.new_orders_per_district.max(o.payments());
        if most + u64::from(o.customers_per_district) > MAX_ORDERS {
            return bad(format!(
                "tpcc: the orders and payments per district (--new-orders-per-district) must \
                 be below {}",
                MAX_ORDERS - u64::from(o.customers_per_district)
            ));
        }
        if o.remote_item_pct > 100 || o.remote_payment_pct > 100 {
            return bad("tpcc: remote percentages must be 0 to 100".into());
        }
        if o.mix.iter().all(|&w| w == 0) || o.mix.iter().any(|&w| w > 1_000_000) {
            return bad(format!(
                "tpcc: the mix's weights must be 0 to 1,000,000 and not all 0, got {:?}",
                o.mix
            ));
        }
        if o.variant == Variant::Dbx1000 && o.mix[2..].iter().any(|&w| w > 0) {
            return bad(format!(
                "tpcc: the dbx1000 variant runs NewOrder and Payment only (DBx1000's TPC-C has \
                 no other type): give a mix of the form N,P,0,0,0, got {:?}",
                o.mix
            ));
        }
        let items = match o.theta {
            Some(t) => Zipfian::new("tpcc: --theta", u64::from(o.items), t)?,
            None => None,
        };
        Ok(Tpcc { o, items })
    }

    pub fn options(&self) -> &Options {
        &self.o
    }

    fn districts(&self) -> u64 {
        u64::from(self.o.warehouses) * u64::from(DISTRICTS)
    }

    /// Orders loaded per district (one per customer) and the first undelivered one.
    fn initial_orders(&self) -> (u64, u64) {
        let n = u64::from(self.o.customers_per_district);
        (n, n - n * 3 / 10 + 1)
    }

    fn customer_id(&self, rng: &mut WlRng) -> u32 {
        nurand(rng, 1023, C_ID, 1, u64::from(self.o.customers_per_district)) as u32
    }

    fn run_name(&self, rng: &mut WlRng) -> u32 {
        let top = u64::from(self.o.customers_per_district.min(1000) - 1);
        nurand(rng, 255, C_LAST_RUN, 0, top) as u32
    }

    fn other_warehouse(&self, rng: &mut WlRng, w: u32) -> u32 {
        let mut x = rng.random_range(1..self.o.warehouses);
        if x >= w {
            x += 1;
        }
        x
    }

    /// The customer by id (40%) or by last name (60%).
    fn customer_choice(&self, rng: &mut WlRng) -> CustomerBy {
        if rng.random_range(1..=100) <= 60 {
            CustomerBy::Name(self.run_name(rng))
        } else {
            CustomerBy::Id(self.customer_id(rng))
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum CustomerBy {
    Id(u32),
    Name(u32),
}

impl Workload for Tpcc {
    type Tally = Tally;

    fn name(&self) -> &'static str {
        "tpcc"
    }

    fn txn_types(&self) -> &'static [&'static str] {
        &TXN_TYPES
    }

    /// Delivery writes ten customers and up to 150 order lines.
    fn log_slice_bytes(&self) -> u64 {
        64 << 10
    }

    fn slots(&self) -> &crate::Slots {
        &self.o.slots
    }

    fn tables(&self) -> Vec<TableSpec> {
        let w = u64::from(self.o.warehouses);
        let dists = self.districts();
        let c = u64::from(self.o.customers_per_district);
        let orders = dists * (c + self.o.new_orders_per_district);
        let histories = dists * (c + self.o.payments());
        let mut lines = crate::table(ORDER_LINE, "order_line", OL_BYTES, orders * 10);
        lines.overflow_fraction = lines.overflow_fraction.max(0.3);
        use crate::{table_with, NEVER_UPDATED};
        // Attributes follow the field offsets above; update mixes follow the transactions
        // (Motor's ABS estimate: e.g. CUSTOMER, Payment's 20 bytes, 10% bad-credit Payments
        // rewriting C_DATA too, Delivery's 12 bytes).
        lines.attributes = vec![4, 4, 8, 8, 8, 24];
        lines.update_mix = vec![(8, 1.0)];
        vec![
            table_with(WAREHOUSE, "warehouse", W_BYTES, w, &[8, 8, 80], &[(8, 1.0)]),
            table_with(
                DISTRICT,
                "district",
                D_BYTES,
                dists,
                &[8, 8, 4, 84],
                &[(4, 0.5), (8, 0.5)],
            ),
            table_with(
                CUSTOMER,
                "customer",
                C_BYTES,
                dists * c,
                &[8, 8, 4, 4, 4, 4, 132, 500],
                &[(20, 0.47), (520, 0.05), (12, 0.48)],
            ),
            table_with(HISTORY, "history", H_BYTES, histories, &[], NEVER_UPDATED),
            crate::table(NEW_ORDER, "new_order", NO_BYTES, orders),
            table_with(
                ORDER,
                "order",
                O_BYTES,
                orders,
                &[4, 4, 4, 4, 16],
                &[(4, 1.0)],
            ),
            lines,
            table_with(
                ITEM,
                "item",
                I_BYTES,
                u64::from(self.o.items),
                &[],
                NEVER_UPDATED,
            ),
            table_with(
                STOCK,
                "stock",
                S_BYTES,
                w * u64::from(self.o.items),
                &[8, 8, 4, 4, 288],
                &[(24, 1.0)],
            ),
            table_with(
                CUSTOMER_BY_NAME,
                "customer_by_name",
                NAME_BYTES,
                dists * c.min(1000),
                &[],
                NEVER_UPDATED,
            ),
            crate::table(CUSTOMER_LAST_ORDER, "customer_last_order", 8, dists * c),
            crate::table(DELIVERY_HEAD, "delivery_head", 8, dists),
        ]
    }

    fn load(&self, pool: &Pool, plan: &Plan, seed: u64) -> Result<(), WorkloadError> {
        let t = |id| plan.table(id).ok_or(StoreError::NoSuchTable(id));
        let mut rng = WlRng::seed_from_u64(mix(seed, 0x79cc));
        let load = |l: &mut Loader, name: &str, key: u64, v: &[u8]| -> Result<(), WorkloadError> {
            l.insert(pool, key, v)
                .map(|_| ())
                .map_err(loader_error(name))
        };
        let mut items = Loader::new(t(ITEM)?);
        for i in 1..=self.o.items {
            let mut v = [0u8; I_BYTES];
            field::put_u32(&mut v, 0, rng.random_range(1..=10_000));
            field::put_i64(&mut v, I_PRICE, rng.random_range(100..=10_000));
            fill_alnum(&mut rng, &mut v[16..]);
            load(&mut items, "item", u64::from(i), &v)?;
        }
        let (orders, head) = self.initial_orders();
        let mut wl = Loader::new(t(WAREHOUSE)?);
        let mut dl = Loader::new(t(DISTRICT)?);
        let mut cl = Loader::new(t(CUSTOMER)?);
        let mut hl = Loader::new(t(HISTORY)?);
        let mut nol = Loader::new(t(NEW_ORDER)?);
        let mut ol = Loader::new(t(ORDER)?);
        let mut oll = Loader::new(t(ORDER_LINE)?);
        let mut sl = Loader::new(t(STOCK)?);
        let mut namel = Loader::new(t(CUSTOMER_BY_NAME)?);
        let mut lastl = Loader::new(t(CUSTOMER_LAST_ORDER)?);
        let mut headl = Loader::new(t(DELIVERY_HEAD)?);
        let mut history_key = 0u64;
        for w in 1..=self.o.warehouses {
            let mut v = [0u8; W_BYTES];
            field::put_u32(&mut v, W_TAX, rng.random_range(0..=2000));
            field::put_i64(&mut v, W_YTD, 30_000_000);
            fill_alnum(&mut rng, &mut v[16..]);
            load(&mut wl, "warehouse", u64::from(w), &v)?;
            for i in 1..=self.o.items {
                let mut v = [0u8; S_BYTES];
                field::put_i64(&mut v, S_QUANTITY, rng.random_range(10..=100));
                fill_alnum(&mut rng, &mut v[S_DIST..]);
                load(&mut sl, "stock", skey(w, i), &v)?;
            }
            for d in 1..=DISTRICTS {
                let mut v = [0u8; D_BYTES];
                field::put_u32(&mut v, D_TAX, rng.random_range(0..=2000));
                field::put_i64(&mut v, D_YTD, 3_000_000);
                field::put_u64(&mut v, D_NEXT_O_ID, orders + 1);
                fill_alnum(&mut rng, &mut v[24..]);
                load(&mut dl, "district", dkey(w, d), &v)?;
                load(&mut headl, "delivery_head", dkey(w, d), &head.to_le_bytes())?;
                let mut by_name: BTreeMap<u32, Vec<([u8; 16], u32)>> = BTreeMap::new();
                for c in 1..=self.o.customers_per_district {
                    let name = if c <= 1000 {
                        c - 1
                    } else {
                        nurand(&mut rng, 255, C_LAST_LOAD, 0, 999) as u32
                    };
                    let mut v = vec![0u8; C_BYTES];
                    field::put_i64(&mut v, C_BALANCE, -1000);
                    field::put_i64(&mut v, C_YTD_PAYMENT, 1000);
                    field::put_u32(&mut v, C_PAYMENT_CNT, 1);
                    field::put_u32(&mut v, C_DISCOUNT, rng.random_range(0..=5000));
                    let bad = rng.random_range(0..10) == 0;
                    v[C_CREDIT..C_CREDIT + 2].copy_from_slice(if bad { b"BC" } else { b"GC" });
                    field::put_u32(&mut v, C_NAME, name);
                    fill_alnum(&mut rng, &mut v[C_FIRST..C_FIRST + 16]);
                    let last = last_name(name);
                    v[C_FIRST + 16..C_FIRST + 16 + last.len()].copy_from_slice(last.as_bytes());
                    fill_alnum(&mut rng, &mut v[C_DATA..]);
                    let first: [u8; 16] = v[C_FIRST..C_FIRST + 16].try_into().expect("16");
                    by_name.entry(name).or_default().push((first, c));
                    load(&mut cl, "customer", ckey(w, d, c), &v)?;
                    let mut h = [0u8; H_BYTES];
                    for (i, x) in [c, d, w, d, w].into_iter().enumerate() {
                        field::put_u32(&mut h, 4 * i, x);
                    }
                    field::put_i64(&mut h, 24, 1000);
                    history_key += 1;
                    load(&mut hl, "history", history_key, &h)?;
                }
                for (name, mut ids) in by_name {
                    ids.sort();
                    let mut v = [0u8; NAME_BYTES];
                    let n = ids.len().min(NAME_SLOTS);
                    field::put_u32(&mut v, 0, n as u32);
                    for (i, (_, c)) in ids.iter().take(n).enumerate() {
                        field::put_u32(&mut v, 4 + 4 * i, *c);
                    }
                    load(&mut namel, "customer_by_name", name_key(w, d, name), &v)?;
                }
                // One order per customer, customers in a random permutation.
                let mut perm: Vec<u32> = (1..=self.o.customers_per_district).collect();
                perm.shuffle(&mut rng);
                for o in 1..=orders {
                    let c = perm[o as usize - 1];
                    let delivered = o < head;
                    let n = rng.random_range(MIN_LINES..=MAX_LINES);
                    let mut v = [0u8; O_BYTES];
                    field::put_u32(&mut v, O_C_ID, c);
                    let carrier = if delivered {
                        rng.random_range(1..=10)
                    } else {
                        0
                    };
                    field::put_u32(&mut v, O_CARRIER, carrier);
                    field::put_u32(&mut v, O_OL_CNT, n);
                    field::put_u32(&mut v, O_ALL_LOCAL, 1);
                    field::put_u64(&mut v, O_ENTRY_D, 1);
                    load(&mut ol, "order", okey(w, d, o), &v)?;
                    load(
                        &mut lastl,
                        "customer_last_order",
                        ckey(w, d, c),
                        &o.to_le_bytes(),
                    )?;
                    if !delivered {
                        load(&mut nol, "new_order", okey(w, d, o), &o.to_le_bytes())?;
                    }
                    for l in 1..=n {
                        let mut v = [0u8; OL_BYTES];
                        field::put_u32(&mut v, OL_I_ID, rng.random_range(1..=self.o.items));
                        field::put_u32(&mut v, OL_SUPPLY_W, w);
                        field::put_u64(&mut v, OL_DELIVERY_D, u64::from(delivered));
                        field::put_u32(&mut v, OL_QUANTITY, 5);
                        let amount = if delivered {
                            0
                        } else {
                            rng.random_range(1..=999_999)
                        };
                        field::put_i64(&mut v, OL_AMOUNT, amount);
                        fill_alnum(&mut rng, &mut v[OL_DIST_INFO..]);
                        load(&mut oll, "order_line", olkey(w, d, o, l), &v)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn tally(&self, _verify: bool) -> Tally {
        Tally::default()
    }

    async fn run_one(
        &self,
        c: &mut Coordinator,
        rng: &mut WlRng,
        tally: &mut Tally,
    ) -> (usize, Result<(), Abort>) {
        let index = c.endpoint().id().index;
        let w = index % self.o.warehouses + 1;
        let ty = pick(rng, &self.o.mix);
        let r = match ty {
            0 => self.new_order(c, rng, w).await,
            1 => self.payment(c, rng, w, index, tally).await,
            2 => self.order_status(c, rng, w).await,
            3 => self.delivery(c, rng, w).await,
            _ => self.stock_level(c, rng, w).await,
        };
        (ty, r)
    }

    fn verify(
        &self,
        pool: &Pool,
        plan: &Plan,
        _seed: u64,
        _tallies: &[Tally],
    ) -> Result<Vec<String>, WorkloadError> {
        verify(self, pool, plan)
    }
}

// Most of what a transaction collects is bounded by the spec (15 lines to an order, 10
// districts to a warehouse): fixed capacities keep it off the heap.
type PerLine<T> = ArrayVec<T, { MAX_LINES as usize }>;
type PerDistrict<T> = ArrayVec<T, { DISTRICTS as usize }>;

/// A fetched value as an array, to change and write back (every value of a table has the
/// table's size).
fn row<const N: usize>(v: &[u8]) -> [u8; N] {
    v.try_into().expect("a value of its table's size")
}

/// A line of a NewOrder being prepared.
#[derive(Debug, Clone, Copy)]
struct Line {
    item: u32,
    supply_w: u32,
    quantity: u32,
}

impl Tpcc {
    /// A NewOrder line's item id, `1..=items`.
    fn item_id(&self, rng: &mut WlRng) -> u32 {
        match (&self.items, self.o.theta) {
            (Some(z), _) => z.sample(rng) as u32 + 1,
            (None, Some(_)) => rng.random_range(1..=self.o.items),
            (None, None) => nurand(rng, 8191, C_ITEM, 1, u64::from(self.o.items)) as u32,
        }
    }

    async fn new_order(&self, c: &mut Coordinator, rng: &mut WlRng, w: u32) -> Result<(), Abort> {
        let d = rng.random_range(1..=DISTRICTS);
        let cid = self.customer_id(rng);
        let n = rng.random_range(MIN_LINES..=MAX_LINES) as usize;
        let spec = self.o.variant.is_spec();
        // (Drawn in either variant, so that both draw the same orders.)
        let rollback = rng.random_range(1..=100) == 1 && spec;
        let mut lines: PerLine<Line> = PerLine::new();
        while lines.len() < n {
            let item = self.item_id(rng);
            let supply_w =
                if self.o.warehouses > 1 && rng.random_range(0..100) < self.o.remote_item_pct {
                    self.other_warehouse(rng, w)
                } else {
                    w
                };
            if lines
                .iter()
                .any(|l| l.item == item && l.supply_w == supply_w)
            {
                continue;
            }
            lines.push(Line {
                item,
                supply_w,
                quantity: rng.random_range(1..=10),
            });
        }
        if rollback {
            // The spec's 1%: an unused item number, found missing, rolls the order back.
            if let Some(last) = lines.last_mut() {
                last.item = self.o.items + 1;
            }
        }
        let mut acc: ArrayVec<Access, { 4 + 2 * MAX_LINES as usize }> = ArrayVec::new();
        acc.push(Access::read(WAREHOUSE, u64::from(w)));
        acc.push(Access::update(DISTRICT, dkey(w, d)));
        acc.push(Access::read(CUSTOMER, ckey(w, d, cid)));
        if spec {
            acc.push(Access::update(CUSTOMER_LAST_ORDER, ckey(w, d, cid)));
        }
        let head = acc.len();
        for l in &lines {
            acc.push(Access::read(ITEM, u64::from(l.item)));
            acc.push(Access::update(STOCK, skey(l.supply_w, l.item)));
        }
        let mut tx = c.begin(TxKind::ReadWrite);
        match self.o.fetch_order {
            FetchOrder::Batched => tx.fetch(&acc).await?,
            FetchOrder::Ford => {
                // The order's head (warehouse, district, customer), then line by line: an
                // attempt that loses the district's lock stops after its first round trip.
                tx.fetch(&acc[..head]).await?;
                for pair in acc[head..].chunks(2) {
                    tx.fetch(pair).await?;
                    if tx.get(ITEM, pair[0].key).is_none() {
                        break; // the 1% rollback: found missing, nothing more to fetch
                    }
                }
            }
        }
        let mut prices: PerLine<i64> = PerLine::new();
        for l in &lines {
            match tx.get(ITEM, u64::from(l.item)) {
                Some(v) => prices.push(field::i64_at(v, I_PRICE)),
                None => {
                    tx.rollback().await;
                    return Err(rollback_abort(ITEM, u64::from(l.item)));
                }
            }
        }
        let (Some(mut dist), Some(_wh), Some(_cust)) = (
            tx.get(DISTRICT, dkey(w, d)).map(row::<D_BYTES>),
            tx.get(WAREHOUSE, u64::from(w)),
            tx.get(CUSTOMER, ckey(w, d, cid)),
        ) else {
            tx.rollback().await;
            return Err(rollback_abort(DISTRICT, dkey(w, d)));
        };
        let o = field::u64_at(&dist, D_NEXT_O_ID);
        field::put_u64(&mut dist, D_NEXT_O_ID, o + 1);
        tx.update(DISTRICT, dkey(w, d), &dist).await?;
        if spec {
            tx.update(CUSTOMER_LAST_ORDER, ckey(w, d, cid), &o.to_le_bytes())
                .await?;
        }
        let mut all_local = 1;
        let mut ols: PerLine<[u8; OL_BYTES]> = PerLine::new();
        for (l, price) in lines.iter().zip(&prices) {
            let sk = skey(l.supply_w, l.item);
            let Some(s) = tx.get(STOCK, sk) else {
                tx.rollback().await;
                return Err(rollback_abort(STOCK, sk));
            };
            let mut s: [u8; S_BYTES] = row(s);
            let q = field::i64_at(&s, S_QUANTITY);
            let qty = i64::from(l.quantity);
            field::put_i64(
                &mut s,
                S_QUANTITY,
                if q - qty >= 10 { q - qty } else { q - qty + 91 },
            );
            field::add_u64(&mut s, S_YTD, u64::from(l.quantity));
            field::add_u32(&mut s, S_ORDER_CNT, 1);
            if l.supply_w != w {
                all_local = 0;
                field::add_u32(&mut s, S_REMOTE_CNT, 1);
            }
            let dist_info = S_DIST + 24 * (d as usize - 1);
            let mut ol = [0u8; OL_BYTES];
            ol[OL_DIST_INFO..].copy_from_slice(&s[dist_info..dist_info + 24]);
            tx.update(STOCK, sk, &s).await?;
            if !spec {
                continue; // DBx1000's inserts no ORDER_LINE
            }
            field::put_u32(&mut ol, OL_I_ID, l.item);
            field::put_u32(&mut ol, OL_SUPPLY_W, l.supply_w);
            field::put_u32(&mut ol, OL_QUANTITY, l.quantity);
            field::put_i64(&mut ol, OL_AMOUNT, qty * price);
            ols.push(ol);
        }
        if !spec {
            return tx.commit().await; // nor the ORDER and NEW_ORDER rows
        }
        let mut ov = [0u8; O_BYTES];
        field::put_u32(&mut ov, O_C_ID, cid);
        field::put_u32(&mut ov, O_OL_CNT, n as u32);
        field::put_u32(&mut ov, O_ALL_LOCAL, all_local);
        field::put_u64(&mut ov, O_ENTRY_D, 2);
        let no = o.to_le_bytes();
        // Every row of the order in one batch (one round trip where no chain overflows).
        let mut rows: ArrayVec<(u32, u64, &[u8]), { MAX_LINES as usize + 2 }> = ArrayVec::new();
        rows.extend(
            ols.iter()
                .enumerate()
                .map(|(i, ol)| (ORDER_LINE, olkey(w, d, o, i as u32 + 1), &ol[..])),
        );
        rows.push((ORDER, okey(w, d, o), &ov));
        rows.push((NEW_ORDER, okey(w, d, o), &no));
        tx.insert_many(&rows).await?;
        tx.commit().await
    }

    /// The customer id a by-name selection resolves to (reading the name index as a
    /// read-only item of `tx`); `None` if no customer has that name.
    async fn resolve(
        tx: &mut Txn<'_>,
        w: u32,
        d: u32,
        by: CustomerBy,
    ) -> Result<Option<u32>, Abort> {
        match by {
            CustomerBy::Id(c) => Ok(Some(c)),
            CustomerBy::Name(name) => {
                let k = name_key(w, d, name);
                tx.fetch(&[Access::read(CUSTOMER_BY_NAME, k)]).await?;
                Ok(tx.get(CUSTOMER_BY_NAME, k).and_then(|v| {
                    let n = field::u32_at(v, 0) as usize;
                    // The spec's position ceil(n / 2), 1-based.
                    (n > 0).then(|| field::u32_at(v, 4 + 4 * ((n - 1) / 2)))
                }))
            }
        }
    }

    async fn payment(
        &self,
        c: &mut Coordinator,
        rng: &mut WlRng,
        w: u32,
        index: u32,
        tally: &mut Tally,
    ) -> Result<(), Abort> {
        let d = rng.random_range(1..=DISTRICTS);
        let (cw, cd) =
            if self.o.warehouses > 1 && rng.random_range(0..100) < self.o.remote_payment_pct {
                (
                    self.other_warehouse(rng, w),
                    rng.random_range(1..=DISTRICTS),
                )
            } else {
                (w, d)
            };
        let by = self.customer_choice(rng);
        let amount: i64 = rng.random_range(100..=500_000);
        tally.history_seq += 1;
        let hkey = (u64::from(index) + 1) << 40 | tally.history_seq;
        let mut tx = c.begin(TxKind::ReadWrite);
        let Some(cid) = Self::resolve(&mut tx, cw, cd, by).await? else {
            tx.rollback().await;
            return Err(rollback_abort(CUSTOMER_BY_NAME, 0));
        };
        let ck = ckey(cw, cd, cid);
        tx.fetch(&[
            Access::update(WAREHOUSE, u64::from(w)),
            Access::update(DISTRICT, dkey(w, d)),
            Access::update(CUSTOMER, ck),
        ])
        .await?;
        let (Some(mut wh), Some(mut dist), Some(mut cust)) = (
            tx.get(WAREHOUSE, u64::from(w)).map(row::<W_BYTES>),
            tx.get(DISTRICT, dkey(w, d)).map(row::<D_BYTES>),
            tx.get(CUSTOMER, ck).map(row::<C_BYTES>),
        ) else {
            tx.rollback().await;
            return Err(rollback_abort(CUSTOMER, ck));
        };
        field::add_i64(&mut wh, W_YTD, amount);
        field::add_i64(&mut dist, D_YTD, amount);
        field::add_i64(&mut cust, C_BALANCE, -amount);
        field::add_i64(&mut cust, C_YTD_PAYMENT, amount);
        field::add_u32(&mut cust, C_PAYMENT_CNT, 1);
        let spec = self.o.variant.is_spec();
        if spec && &cust[C_CREDIT..C_CREDIT + 2] == b"BC" {
            // Bad credit: the payment goes in front of C_DATA, which keeps 500 characters.
            // Five ids of at most 5 digits and an amount of at most 6: 37 characters at most.
            let mut entry = ArrayString::<40>::new();
            write!(entry, "{cid} {cd} {cw} {d} {w} {amount}|").expect("an entry fits");
            let data = &mut cust[C_DATA..C_DATA + C_DATA_LEN];
            let k = entry.len().min(C_DATA_LEN);
            data.copy_within(0..C_DATA_LEN - k, k);
            data[..k].copy_from_slice(&entry.as_bytes()[..k]);
        }
        tx.update(WAREHOUSE, u64::from(w), &wh).await?;
        tx.update(DISTRICT, dkey(w, d), &dist).await?;
        tx.update(CUSTOMER, ck, &cust).await?;
        if !spec {
            return tx.commit().await; // DBx1000's inserts no HISTORY row
        }
        let mut h = [0u8; H_BYTES];
        for (i, x) in [cid, cd, cw, d, w].into_iter().enumerate() {
            field::put_u32(&mut h, 4 * i, x);
        }
        field::put_i64(&mut h, 24, amount);
        h[40..48].copy_from_slice(&wh[16..24]);
        tx.insert(HISTORY, hkey, &h).await?;
        tx.commit().await
    }

    async fn order_status(
        &self,
        c: &mut Coordinator,
        rng: &mut WlRng,
        w: u32,
    ) -> Result<(), Abort> {
        let d = rng.random_range(1..=DISTRICTS);
        let by = self.customer_choice(rng);
        let mut tx = c.begin(TxKind::ReadOnly);
        let Some(cid) = Self::resolve(&mut tx, w, d, by).await? else {
            return tx.commit().await;
        };
        let ck = ckey(w, d, cid);
        tx.fetch(&[
            Access::read(CUSTOMER, ck),
            Access::read(CUSTOMER_LAST_ORDER, ck),
        ])
        .await?;
        let balance = tx.get(CUSTOMER, ck).map(|v| field::i64_at(v, C_BALANCE));
        let Some(o) = tx.get(CUSTOMER_LAST_ORDER, ck).map(|v| field::u64_at(v, 0)) else {
            return tx.commit().await;
        };
        let ok = okey(w, d, o);
        tx.fetch(&[Access::read(ORDER, ok)]).await?;
        let Some(n) = tx.get(ORDER, ok).map(|v| field::u32_at(v, O_OL_CNT)) else {
            return tx.commit().await;
        };
        // NewOrder writes 5 to 15; a corrupt count reads at most 15 lines (and `--verify`
        // reports the order) rather than overflowing the array.
        let acc: PerLine<Access> = (1..=n.min(MAX_LINES))
            .map(|l| Access::read(ORDER_LINE, olkey(w, d, o, l)))
            .collect();
        tx.fetch(&acc).await?;
        let total: i64 = acc
            .iter()
            .filter_map(|a| tx.get(a.table, a.key))
            .map(|v| field::i64_at(v, OL_AMOUNT))
            .sum();
        std::hint::black_box((balance, total));
        tx.commit().await
    }

    async fn delivery(&self, c: &mut Coordinator, rng: &mut WlRng, w: u32) -> Result<(), Abort> {
        let carrier = rng.random_range(1..=10u32);
        let mut tx = c.begin(TxKind::ReadWrite);
        let heads: PerDistrict<Access> = (1..=DISTRICTS)
            .map(|d| Access::update(DELIVERY_HEAD, dkey(w, d)))
            .collect();
        tx.fetch(&heads).await?;
        // (district, oldest undelivered order)
        let mut pending: PerDistrict<(u32, u64)> = PerDistrict::new();
        for d in 1..=DISTRICTS {
            if let Some(v) = tx.get(DELIVERY_HEAD, dkey(w, d)) {
                pending.push((d, field::u64_at(v, 0)));
            }
        }
        let acc: PerDistrict<Access> = pending
            .iter()
            .map(|&(d, o)| Access::update(NEW_ORDER, okey(w, d, o)))
            .collect();
        tx.fetch(&acc).await?;
        pending.retain(|&mut (d, o)| tx.get(NEW_ORDER, okey(w, d, o)).is_some());
        if pending.is_empty() {
            return tx.commit().await;
        }
        let acc: PerDistrict<Access> = pending
            .iter()
            .map(|&(d, o)| Access::update(ORDER, okey(w, d, o)))
            .collect();
        tx.fetch(&acc).await?;
        // (district, order, customer, lines)
        let mut orders: PerDistrict<(u32, u64, u32, u32)> = PerDistrict::new();
        for &(d, o) in &pending {
            let Some(v) = tx.get(ORDER, okey(w, d, o)) else {
                tx.rollback().await;
                return Err(rollback_abort(ORDER, okey(w, d, o)));
            };
            orders.push((d, o, field::u32_at(v, O_C_ID), field::u32_at(v, O_OL_CNT)));
        }
        let mut acc = Vec::with_capacity(orders.len() * 16);
        for &(d, o, cid, n) in &orders {
            acc.push(Access::update(CUSTOMER, ckey(w, d, cid)));
            acc.extend((1..=n).map(|l| Access::update(ORDER_LINE, olkey(w, d, o, l))));
        }
        tx.fetch(&acc).await?;
        for &(d, o, cid, n) in &orders {
            let ok = okey(w, d, o);
            tx.delete(NEW_ORDER, ok).await?;
            tx.update(DELIVERY_HEAD, dkey(w, d), &(o + 1).to_le_bytes())
                .await?;
            let mut ov: [u8; O_BYTES] = tx.get(ORDER, ok).map(row).unwrap_or([0; O_BYTES]);
            field::put_u32(&mut ov, O_CARRIER, carrier);
            tx.update(ORDER, ok, &ov).await?;
            let mut total = 0i64;
            for l in 1..=n {
                let k = olkey(w, d, o, l);
                let Some(v) = tx.get(ORDER_LINE, k) else {
                    tx.rollback().await;
                    return Err(rollback_abort(ORDER_LINE, k));
                };
                let mut v: [u8; OL_BYTES] = row(v);
                total += field::i64_at(&v, OL_AMOUNT);
                field::put_u64(&mut v, OL_DELIVERY_D, 3);
                tx.update(ORDER_LINE, k, &v).await?;
            }
            let ck = ckey(w, d, cid);
            let Some(mut cust) = tx.get(CUSTOMER, ck).map(row::<C_BYTES>) else {
                tx.rollback().await;
                return Err(rollback_abort(CUSTOMER, ck));
            };
            field::add_i64(&mut cust, C_BALANCE, total);
            field::add_u32(&mut cust, C_DELIVERY_CNT, 1);
            tx.update(CUSTOMER, ck, &cust).await?;
        }
        tx.commit().await
    }

    async fn stock_level(&self, c: &mut Coordinator, rng: &mut WlRng, w: u32) -> Result<(), Abort> {
        let d = rng.random_range(1..=DISTRICTS);
        let threshold = rng.random_range(10..=20i64);
        let mut tx = c.begin(TxKind::ReadOnly);
        tx.fetch(&[Access::read(DISTRICT, dkey(w, d))]).await?;
        let Some(next) = tx
            .get(DISTRICT, dkey(w, d))
            .map(|v| field::u64_at(v, D_NEXT_O_ID))
        else {
            return tx.commit().await;
        };
        let first = next.saturating_sub(STOCK_LEVEL_ORDERS).max(1);
        let acc: ArrayVec<Access, { STOCK_LEVEL_ORDERS as usize }> = (first..next)
            .map(|o| Access::read(ORDER, okey(w, d, o)))
            .collect();
        tx.fetch(&acc).await?;
        let mut acc_lines = Vec::with_capacity(acc.len() * 15);
        for o in first..next {
            if let Some(n) = tx
                .get(ORDER, okey(w, d, o))
                .map(|v| field::u32_at(v, O_OL_CNT))
            {
                acc_lines.extend((1..=n).map(|l| Access::read(ORDER_LINE, olkey(w, d, o, l))));
            }
        }
        tx.fetch(&acc_lines).await?;
        // The distinct items, in item order (STOCK keys of one warehouse sort as its items).
        let mut acc_stock: Vec<Access> = acc_lines
            .iter()
            .filter_map(|a| tx.get(a.table, a.key))
            .map(|v| Access::read(STOCK, skey(w, field::u32_at(v, OL_I_ID))))
            .collect();
        acc_stock.sort_unstable_by_key(|a| a.key);
        acc_stock.dedup();
        tx.fetch(&acc_stock).await?;
        let low = acc_stock
            .iter()
            .filter_map(|a| tx.get(a.table, a.key))
            .filter(|v| field::i64_at(v, S_QUANTITY) < threshold)
            .count();
        std::hint::black_box(low);
        tx.commit().await
    }
}

/// The rows of `id`, by key.
fn rows(pool: &Pool, plan: &Plan, id: u32) -> Result<(TableInfo, Vec<LocalRecord>), WorkloadError> {
    let t = plan.table(id).ok_or(StoreError::NoSuchTable(id))?;
    let r = scan_table(pool, t);
    if let Some(x) = r.iter().find(|x| x.lock != 0 || x.version == u64::MAX) {
        return Err(WorkloadError::Inconsistent(format!(
            "{} key {}: lock word {:#x} left behind or record torn",
            t.name, x.key, x.lock
        )));
    }
    Ok((t.clone(), r))
}

fn verify(tp: &Tpcc, pool: &Pool, plan: &Plan) -> Result<Vec<String>, WorkloadError> {
    let bad = |m: String| Err(WorkloadError::Inconsistent(m));
    let (_, warehouses) = rows(pool, plan, WAREHOUSE)?;
    let (_, districts) = rows(pool, plan, DISTRICT)?;
    let (_, new_orders) = rows(pool, plan, NEW_ORDER)?;
    let (_, orders) = rows(pool, plan, ORDER)?;
    let (_, lines) = rows(pool, plan, ORDER_LINE)?;
    let (_, heads) = rows(pool, plan, DELIVERY_HEAD)?;
    for id in [
        CUSTOMER,
        HISTORY,
        ITEM,
        STOCK,
        CUSTOMER_BY_NAME,
        CUSTOMER_LAST_ORDER,
    ] {
        rows(pool, plan, id)?;
    }
    if districts.len() as u64 != tp.districts() || warehouses.len() as u32 != tp.o.warehouses {
        return bad(format!(
            "{} warehouses and {} districts, {} and {} loaded",
            warehouses.len(),
            districts.len(),
            tp.o.warehouses,
            tp.districts()
        ));
    }
    // Condition 1: W_YTD = sum(D_YTD).
    let mut d_ytd: HashMap<u32, i64> = HashMap::new();
    for r in &districts {
        *d_ytd.entry(district_of(r.key).0).or_default() += field::i64_at(&r.value, D_YTD);
    }
    for r in &warehouses {
        let w = r.key as u32;
        let (wy, dy) = (field::i64_at(&r.value, W_YTD), d_ytd[&w]);
        if wy != dy {
            return bad(format!(
                "condition 1: warehouse {w}: W_YTD {wy} but its districts' D_YTD sum to {dy}"
            ));
        }
    }
    if !tp.o.variant.is_spec() {
        // DBx1000's variant inserts no order: the conditions on orders hold of the loaded
        // ones only, and D_NEXT_O_ID has moved past them.
        return Ok(vec![
            format!(
                "condition 1: W_YTD = sum(D_YTD) for all {} warehouses",
                warehouses.len()
            ),
            "conditions 2 to 6 not checked: the dbx1000 variant inserts no orders".into(),
            "no lock left".into(),
        ]);
    }
    // Per district: max(O_ID), NEW_ORDER ids, sum(O_OL_CNT), order-line count.
    #[derive(Default)]
    struct Dist {
        max_o: u64,
        no_min: Option<u64>,
        no_max: u64,
        no_count: u64,
        ol_cnt_sum: u64,
        lines: u64,
    }
    let mut per: HashMap<u64, Dist> = HashMap::new();
    let mut ol_cnt: HashMap<u64, u32> = HashMap::with_capacity(orders.len());
    for r in &orders {
        let (dk, o) = (r.key >> 24, r.key & MAX_ORDERS);
        let e = per.entry(dk).or_default();
        e.max_o = e.max_o.max(o);
        let n = field::u32_at(&r.value, O_OL_CNT);
        e.ol_cnt_sum += u64::from(n);
        ol_cnt.insert(r.key, n);
    }
    for r in &new_orders {
        let (dk, o) = (r.key >> 24, r.key & MAX_ORDERS);
        let e = per.entry(dk).or_default();
        e.no_min = Some(e.no_min.map_or(o, |m| m.min(o)));
        e.no_max = e.no_max.max(o);
        e.no_count += 1;
    }
    let mut lines_of: HashMap<u64, u32> = HashMap::with_capacity(orders.len());
    for r in &lines {
        let order = r.key / 16;
        per.entry(order >> 24).or_default().lines += 1;
        *lines_of.entry(order).or_default() += 1;
    }
    let head_of: HashMap<u64, u64> = heads
        .iter()
        .map(|r| (r.key, field::u64_at(&r.value, 0)))
        .collect();
    for r in &districts {
        let (w, d) = district_of(r.key);
        let next = field::u64_at(&r.value, D_NEXT_O_ID);
        let e = per.remove(&r.key).unwrap_or_default();
        if next - 1 != e.max_o {
            return bad(format!(
                "condition 2: district ({w}, {d}): D_NEXT_O_ID - 1 = {} but max(O_ID) = {}",
                next - 1,
                e.max_o
            ));
        }
        if let Some(min) = e.no_min {
            if e.no_max != next - 1 {
                return bad(format!(
                    "condition 2: district ({w}, {d}): D_NEXT_O_ID - 1 = {} but max(NO_O_ID) = \
                     {}",
                    next - 1,
                    e.no_max
                ));
            }
            if e.no_max - min + 1 != e.no_count {
                return bad(format!(
                    "condition 3: district ({w}, {d}): NEW_ORDER ids {min}..={} but {} rows",
                    e.no_max, e.no_count
                ));
            }
        }
        if e.ol_cnt_sum != e.lines {
            return bad(format!(
                "condition 4: district ({w}, {d}): sum(O_OL_CNT) = {} but {} ORDER_LINE rows",
                e.ol_cnt_sum, e.lines
            ));
        }
        let head = head_of.get(&r.key).copied().unwrap_or(0);
        let want = e.no_min.unwrap_or(next);
        if head != want {
            return bad(format!(
                "district ({w}, {d}): delivery head {head}, but the oldest undelivered order is \
                 {want}"
            ));
        }
    }
    if let Some((dk, _)) = per.iter().next() {
        return bad(format!(
            "orders of a district that does not exist (key {dk})"
        ));
    }
    for (order, n) in &ol_cnt {
        let have = lines_of.get(order).copied().unwrap_or(0);
        if have != *n {
            let (w, d) = district_of(order >> 24);
            return bad(format!(
                "condition 6: order {} of district ({w}, {d}) has O_OL_CNT {n} but {have} lines",
                order & MAX_ORDERS
            ));
        }
    }
    let orphan: HashSet<u64> = lines_of
        .keys()
        .filter(|o| !ol_cnt.contains_key(o))
        .copied()
        .collect();
    if !orphan.is_empty() {
        return bad(format!("{} order-line groups have no order", orphan.len()));
    }
    Ok(vec![
        format!(
            "condition 1: W_YTD = sum(D_YTD) for all {} warehouses",
            warehouses.len()
        ),
        format!(
            "condition 2: D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID) for all {} districts",
            districts.len()
        ),
        format!(
            "condition 3: NEW_ORDER ids contiguous ({} undelivered orders)",
            new_orders.len()
        ),
        format!(
            "condition 4: sum(O_OL_CNT) = ORDER_LINE rows ({} orders, {} lines); condition 6 \
             per order",
            orders.len(),
            lines.len()
        ),
        "every delivery head is the oldest undelivered order; no lock left".into(),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_distinct_and_decodable() {
        let k = okey(7, 3, 12345);
        assert_eq!(k >> 24, dkey(7, 3));
        assert_eq!(k & MAX_ORDERS, 12345);
        assert_eq!(olkey(7, 3, 12345, 15) / 16, k);
        assert_eq!(district_of(dkey(65536, 10)), (65536, 10));
        assert_ne!(ckey(1, 2, 4095), ckey(1, 3, 0));
        assert_ne!(skey(1, MAX_ITEMS), skey(2, 0));
    }

    #[test]
    fn item_ids_are_nurand_by_default_and_zipf_with_theta() {
        use rand::SeedableRng;
        let count = |t: &Tpcc, seed| {
            let mut rng = WlRng::seed_from_u64(seed);
            let mut hits = vec![0u32; 10_001];
            for _ in 0..100_000 {
                let i = t.item_id(&mut rng);
                assert!((1..=10_000).contains(&i), "{i}");
                hits[i as usize] += 1;
            }
            hits
        };
        // Without theta, the spec's NURand, drawn exactly as before the option existed.
        let d = Tpcc::new(Options::default()).unwrap();
        let (mut a, mut b) = (WlRng::seed_from_u64(9), WlRng::seed_from_u64(9));
        for _ in 0..1_000 {
            assert_eq!(
                d.item_id(&mut a) as u64,
                nurand(&mut b, 8191, C_ITEM, 1, 10_000)
            );
        }
        let z = Tpcc::new(Options {
            theta: Some(0.99),
            ..Options::default()
        })
        .unwrap();
        let (nu, zi) = (count(&d, 1), count(&z, 1));
        // Uniform would give each item 10 draws; zipf 0.99 over 10,000 gives item 1 about 10%,
        // NURand's hottest item about 2%.
        assert!(zi[1] > 8_000, "{}", zi[1]);
        let nu_max = *nu.iter().max().unwrap();
        assert!(nu_max < 3_000, "NURand hottest: {nu_max}");
        let u = Tpcc::new(Options {
            theta: Some(0.0),
            ..Options::default()
        })
        .unwrap();
        assert!(
            *count(&u, 1).iter().max().unwrap() < 40,
            "theta 0 is uniform"
        );
        let e = Tpcc::new(Options {
            theta: Some(-1.0),
            ..Options::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("tpcc: --theta must be 0"), "{e}");
    }

    #[test]
    fn last_names_follow_the_spec() {
        assert_eq!(last_name(0), "BARBARBAR");
        assert_eq!(last_name(371), "PRICALLYOUGHT");
        assert_eq!(last_name(999), "EINGEINGEING");
    }

    #[test]
    fn sizes_and_options() {
        let t = Tpcc::new(Options::default()).unwrap();
        assert_eq!(t.initial_orders(), (300, 211));
        let s = Tpcc::new(Options::spec()).unwrap();
        assert_eq!(s.initial_orders(), (3000, 2101));
        assert!(Tpcc::new(Options {
            warehouses: 0,
            ..Options::default()
        })
        .unwrap_err()
        .to_string()
        .contains("--warehouses"));
        // 45% of a million in 20 districts, and a quarter more.
        let (orders, payments) = Options::room_for(1_000_000, 2, &STANDARD_MIX);
        assert_eq!(orders, 22_500 + 22_500 / 4 + 500);
        assert_eq!(payments, 21_500 + 21_500 / 4 + 500);
        // Payments alone run about 4 times as fast, and insert a HISTORY row each.
        let (orders, payments) = Options::room_for(1_000_000, 2, &[0, 1, 0, 0, 0]);
        assert_eq!(orders, 500);
        assert!(payments > 4 * 50_000, "{payments}");
        // A dearer mix runs fewer per second, but --txns counts them exactly: never less
        // room than its share of the count (half of a million, in 20 districts).
        let (orders, payments) = Options::room_for(1_000_000, 2, &[1, 0, 0, 0, 1]);
        assert_eq!(orders, 25_000 + 25_000 / 4 + 500);
        assert_eq!(payments, 500);
        // Options from before `payments_per_district` describe the same tables as then.
        let old: Options = serde_json::from_str(
            r#"{"customers_per_district":300,"items":10000,"new_orders_per_district":3593,
                "remote_item_pct":1,"remote_payment_pct":15,"warehouses":2}"#,
        )
        .unwrap();
        assert_eq!(old.payments(), 3593);
        assert_eq!(old.mix, STANDARD_MIX);
        assert!(Tpcc::new(Options {
            mix: [0; 5],
            ..Options::default()
        })
        .is_err());
    }
}
