//! TATP (Telecom Application Transaction Processing, v1.0), as FORD and FaSST run it.
//!
//! Tables (ids and keys; values are fixed-layout little-endian, at most 40 bytes as in
//! FaSST/FORD):
//!
//! | table | id | key | rows | value |
//! |---|---|---|---|---|
//! | SUBSCRIBER | 1 | `s_id` (1..=N) | N | sub_nbr, bit_1..10, hex_1..10, byte2_1..10, msc_location, vlr_location (40 B) |
//! | SECONDARY_SUBSCRIBER | 2 | `sub_nbr` | N | `s_id` (8 B): the index UpdateLocation and the call-forwarding transactions look up |
//! | ACCESS_INFO | 3 | `s_id*4 + ai_type-1` | 1-4 per subscriber | data1..4 (16 B) |
//! | SPECIAL_FACILITY | 4 | `s_id*4 + sf_type-1` | 1-4 per subscriber | is_active (85%), error_cntrl, data_a, data_b (8 B) |
//! | CALL_FORWARDING | 5 | `(s_id*4 + sf_type-1)*3 + start_time/8` | 0-3 per facility | end_time, numberx (16 B) |
//!
//! `sub_nbr` is `s_id` written as a 15-digit number, as in the spec; it is its own table so
//! the lookups cost what they cost in the papers (one more read).
//!
//! The mix (80% read-only), with `s_id` drawn by NURand (A = 65,535 up to 1 M subscribers,
//! 1,048,575 up to 10 M, 2,097,151 above):
//!
//! | transaction | % | records |
//! |---|---|---|
//! | GetSubscriberData | 35 | read SUBSCRIBER |
//! | GetNewDestination | 10 | read SPECIAL_FACILITY and the CALL_FORWARDING rows starting at or before the start time (one batch) |
//! | GetAccessData | 35 | read ACCESS_INFO |
//! | UpdateSubscriberData | 2 | update SUBSCRIBER.bit_1 and SPECIAL_FACILITY.data_a |
//! | UpdateLocation | 14 | read SECONDARY_SUBSCRIBER, then update SUBSCRIBER.vlr_location |
//! | InsertCallForwarding | 2 | read SECONDARY_SUBSCRIBER, read SPECIAL_FACILITY, insert CALL_FORWARDING |
//! | DeleteCallForwarding | 2 | read SECONDARY_SUBSCRIBER, delete CALL_FORWARDING |
//!
//! The spec's expected failures: a read of a row that does not exist (GetAccessData,
//! GetNewDestination) commits with nothing found; UpdateSubscriberData on a missing facility,
//! InsertCallForwarding on a missing facility and DeleteCallForwarding of a missing row roll
//! back (abort reason `user`); InsertCallForwarding of an existing row aborts with `exists`.
//!
//! `--verify` checks that no lock is left, that the subscriber and index tables are intact
//! (every `sub_nbr` maps back to its subscriber), that every CALL_FORWARDING row has its
//! SPECIAL_FACILITY, and that the CALL_FORWARDING rows number those loaded plus the committed
//! inserts minus the committed deletes.

use crate::rng::{mix, nurand, pick};
use crate::{field, loader_error, scan_table, WlRng, Workload, WorkloadError};
use dtxn_fabric::Pool;
use dtxn_store::{Loader, Plan, StoreError, TableSpec};
use dtxn_txn::{Abort, AbortReason, Access, Coordinator, TxKind};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

pub const SUBSCRIBER: u32 = 1;
pub const SEC_SUBSCRIBER: u32 = 2;
pub const ACCESS_INFO: u32 = 3;
pub const SPECIAL_FACILITY: u32 = 4;
pub const CALL_FORWARDING: u32 = 5;

pub const TXN_TYPES: [&str; 7] = [
    "GetSubscriberData",
    "GetNewDestination",
    "GetAccessData",
    "UpdateSubscriberData",
    "UpdateLocation",
    "InsertCallForwarding",
    "DeleteCallForwarding",
];
const MIX: [u32; 7] = [35, 10, 35, 2, 14, 2, 2];

const SUB_BYTES: usize = 40;
const SUB_VLR: usize = 32;
const SUB_MSC: usize = 28;
const SUB_BITS: usize = 8;
const AI_BYTES: usize = 16;
const SF_BYTES: usize = 8;
const SF_ACTIVE: usize = 0;
const SF_DATA_A: usize = 2;
const CF_BYTES: usize = 16;
const CF_END: usize = 0;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Options {
    pub subscribers: u64,
    /// Slots per bucket of the tables (the store's 4 unless given).
    #[serde(skip_serializing_if = "crate::Slots::is_default")]
    pub slots: crate::Slots,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            subscribers: 100_000,
            slots: crate::Slots::default(),
        }
    }
}

/// The TATP benchmark.
#[derive(Debug, Clone)]
pub struct Tatp {
    o: Options,
    nurand_a: u64,
}

pub fn ai_key(s_id: u64, ai_type: u64) -> u64 {
    s_id * 4 + ai_type - 1
}

pub fn sf_key(s_id: u64, sf_type: u64) -> u64 {
    s_id * 4 + sf_type - 1
}

pub fn cf_key(s_id: u64, sf_type: u64, start_time: u64) -> u64 {
    sf_key(s_id, sf_type) * 3 + start_time / 8
}

/// What the loader puts in for one subscriber, from the seed alone (so `--verify` can count
/// the rows loaded without storing them).
struct SubscriberRows {
    ai_types: Vec<u64>,
    /// (sf_type, is_active, start times of its call forwardings)
    facilities: Vec<(u64, bool, Vec<u64>)>,
}

fn rows_of(seed: u64, s_id: u64) -> SubscriberRows {
    let mut rng = WlRng::seed_from_u64(mix(seed, s_id));
    let mut types = [1u64, 2, 3, 4];
    types.shuffle(&mut rng);
    let ai_types = types[..rng.random_range(1..=4)].to_vec();
    types.shuffle(&mut rng);
    let n_sf = rng.random_range(1..=4);
    let facilities = types[..n_sf]
        .iter()
        .map(|&t| {
            let active = rng.random_range(0..100) < 85;
            let mut starts = [0u64, 8, 16];
            starts.shuffle(&mut rng);
            let n = rng.random_range(0..=3);
            (t, active, starts[..n].to_vec())
        })
        .collect();
    SubscriberRows {
        ai_types,
        facilities,
    }
}

impl Tatp {
    pub fn new(o: Options) -> Result<Tatp, WorkloadError> {
        if o.subscribers == 0 || o.subscribers > 1 << 40 {
            return Err(WorkloadError::Options(format!(
                "tatp: --subscribers must be 1 to 2^40, got {}",
                o.subscribers
            )));
        }
        let nurand_a = match o.subscribers {
            0..=1_000_000 => 65_535,
            1_000_001..=10_000_000 => 1_048_575,
            _ => 2_097_151,
        };
        Ok(Tatp { o, nurand_a })
    }

    pub fn options(&self) -> &Options {
        &self.o
    }

    fn s_id(&self, rng: &mut WlRng) -> u64 {
        nurand(rng, self.nurand_a, 0, 1, self.o.subscribers)
    }
}

/// Committed call-forwarding inserts and deletes of one coordinator.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tally {
    inserted: u64,
    deleted: u64,
    /// The inserts and deletes of the transaction committing now, counted once its commit
    /// returns (or recovery rolls it forward).
    #[serde(skip)]
    pending: (u64, u64),
}

impl Tally {
    /// Its commit returned: what it staged counts.
    fn confirm(&mut self) {
        let (i, d) = std::mem::take(&mut self.pending);
        self.inserted += i;
        self.deleted += d;
    }
}

impl crate::Merge for Tally {
    /// Inserts and deletes add up.
    fn merge(&mut self, other: Tally) {
        self.inserted += other.inserted;
        self.deleted += other.deleted;
    }
}

fn rollback_abort(table: u32, key: u64) -> Abort {
    Abort {
        reason: AbortReason::User,
        table,
        key,
    }
}

impl Workload for Tatp {
    type Tally = Tally;

    fn name(&self) -> &'static str {
        "tatp"
    }

    fn txn_types(&self) -> &'static [&'static str] {
        &TXN_TYPES
    }

    fn default_vnum(&self) -> u8 {
        2
    }

    fn slots(&self) -> &crate::Slots {
        &self.o.slots
    }

    fn tables(&self) -> Vec<TableSpec> {
        use crate::{table_with, NEVER_UPDATED};
        let n = self.o.subscribers;
        vec![
            // sub_nbr, bits, hex and byte2 fields, msc_location, vlr_location, padding:
            // UpdateLocation (14%) writes vlr_location, UpdateSubscriberData (2%) bit_1.
            table_with(
                SUBSCRIBER,
                "subscriber",
                SUB_BYTES,
                n,
                &[8, 2, 18, 4, 4, 4],
                &[(4, 0.875), (2, 0.125)],
            ),
            table_with(SEC_SUBSCRIBER, "sec_subscriber", 8, n, &[], NEVER_UPDATED),
            table_with(
                ACCESS_INFO,
                "access_info",
                AI_BYTES,
                n * 5 / 2,
                &[],
                NEVER_UPDATED,
            ),
            crate::table(SPECIAL_FACILITY, "special_facility", SF_BYTES, n * 5 / 2),
            // 3.75 rows per subscriber on average at load; inserts and deletes keep it there,
            // and a deleted row's slot is reused by its own key only: room for 5.
            crate::table(CALL_FORWARDING, "call_forwarding", CF_BYTES, n * 5),
        ]
    }

    fn load(&self, pool: &Pool, plan: &Plan, seed: u64) -> Result<(), WorkloadError> {
        let t = |id| plan.table(id).ok_or(StoreError::NoSuchTable(id));
        let (sub_t, sec_t, ai_t, sf_t, cf_t) = (
            t(SUBSCRIBER)?,
            t(SEC_SUBSCRIBER)?,
            t(ACCESS_INFO)?,
            t(SPECIAL_FACILITY)?,
            t(CALL_FORWARDING)?,
        );
        let (mut sub, mut sec, mut ai, mut sf, mut cf) = (
            Loader::new(sub_t),
            Loader::new(sec_t),
            Loader::new(ai_t),
            Loader::new(sf_t),
            Loader::new(cf_t),
        );
        for s_id in 1..=self.o.subscribers {
            let mut rng = WlRng::seed_from_u64(mix(seed ^ 0x7a7, s_id));
            let mut v = [0u8; SUB_BYTES];
            field::put_u64(&mut v, 0, s_id);
            v[SUB_BITS..SUB_BITS + 20].fill_with(|| rng.random());
            field::put_u32(&mut v, SUB_MSC, rng.random());
            field::put_u32(&mut v, SUB_VLR, rng.random());
            sub.insert(pool, s_id, &v)
                .map_err(loader_error("subscriber"))?;
            sec.insert(pool, s_id, &s_id.to_le_bytes())
                .map_err(loader_error("sec_subscriber"))?;
            let rows = rows_of(seed, s_id);
            for &a in &rows.ai_types {
                let mut v = [0u8; AI_BYTES];
                v.fill_with(|| rng.random());
                ai.insert(pool, ai_key(s_id, a), &v)
                    .map_err(loader_error("access_info"))?;
            }
            for (f, active, starts) in &rows.facilities {
                let mut v = [0u8; SF_BYTES];
                v.fill_with(|| rng.random());
                v[SF_ACTIVE] = u8::from(*active);
                sf.insert(pool, sf_key(s_id, *f), &v)
                    .map_err(loader_error("special_facility"))?;
                for &st in starts {
                    let mut v = [0u8; CF_BYTES];
                    v.fill_with(|| rng.random());
                    v[CF_END] = (st + rng.random_range(1..=8)) as u8;
                    cf.insert(pool, cf_key(s_id, *f, st), &v)
                        .map_err(loader_error("call_forwarding"))?;
                }
            }
        }
        Ok(())
    }

    fn forget_in_flight(&self, tally: &mut Tally) {
        tally.pending = (0, 0);
    }

    fn count_in_flight(&self, tally: &mut Tally) {
        tally.confirm();
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
        let ty = pick(rng, &MIX);
        let s_id = self.s_id(rng);
        let r = match ty {
            0 => get_subscriber_data(c, s_id).await,
            1 => {
                let sf_type = rng.random_range(1..=4);
                let start = [0, 8, 16][rng.random_range(0..3)];
                let end = rng.random_range(1..=24);
                get_new_destination(c, s_id, sf_type, start, end).await
            }
            2 => get_access_data(c, s_id, rng.random_range(1..=4)).await,
            3 => {
                let bit = rng.random_range(0..2u8);
                let sf_type = rng.random_range(1..=4);
                let data_a = rng.random();
                update_subscriber_data(c, s_id, bit, sf_type, data_a).await
            }
            4 => update_location(c, s_id, rng.random()).await,
            5 => {
                let sf_type = rng.random_range(1..=4);
                let start = [0, 8, 16][rng.random_range(0..3)];
                let end = start + rng.random_range(1..=8);
                let mut number = [0u8; 15];
                number.fill_with(|| rng.random_range(b'0'..=b'9'));
                insert_call_forwarding(c, s_id, sf_type, start, end, &number, tally).await
            }
            _ => {
                let sf_type = rng.random_range(1..=4);
                let start = [0, 8, 16][rng.random_range(0..3)];
                delete_call_forwarding(c, s_id, sf_type, start, tally).await
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
        let bad = |m: String| Err(WorkloadError::Inconsistent(m));
        let n = self.o.subscribers;
        let mut tables = Vec::new();
        for id in [
            SUBSCRIBER,
            SEC_SUBSCRIBER,
            ACCESS_INFO,
            SPECIAL_FACILITY,
            CALL_FORWARDING,
        ] {
            let t = plan.table(id).ok_or(StoreError::NoSuchTable(id))?;
            let rows = scan_table(pool, t);
            if let Some(r) = rows.iter().find(|r| r.lock != 0 || r.version == u64::MAX) {
                return bad(format!(
                    "{} key {}: lock word {:#x} left behind or record torn",
                    t.name, r.key, r.lock
                ));
            }
            tables.push(rows);
        }
        let (subs, secs, sfs, cfs) = (&tables[0], &tables[1], &tables[3], &tables[4]);
        if subs.len() as u64 != n || secs.len() as u64 != n {
            return bad(format!(
                "{} subscribers and {} index rows, {n} loaded",
                subs.len(),
                secs.len()
            ));
        }
        if let Some(r) = secs.iter().find(|r| field::u64_at(&r.value, 0) != r.key) {
            return bad(format!(
                "sub_nbr {} maps to subscriber {}",
                r.key,
                field::u64_at(&r.value, 0)
            ));
        }
        if let Some(r) = subs.iter().find(|r| field::u64_at(&r.value, 0) != r.key) {
            return bad(format!("subscriber {} holds sub_nbr of another", r.key));
        }
        let facilities: HashSet<u64> = sfs.iter().map(|r| r.key).collect();
        if let Some(r) = cfs.iter().find(|r| !facilities.contains(&(r.key / 3))) {
            return bad(format!(
                "call forwarding {} has no special facility {}",
                r.key,
                r.key / 3
            ));
        }
        let loaded: u64 = (1..=n)
            .map(|s| {
                rows_of(seed, s)
                    .facilities
                    .iter()
                    .map(|f| f.2.len() as u64)
                    .sum::<u64>()
            })
            .sum();
        let inserted: u64 = tallies.iter().map(|t| t.inserted).sum();
        let deleted: u64 = tallies.iter().map(|t| t.deleted).sum();
        if loaded + inserted != cfs.len() as u64 + deleted {
            return bad(format!(
                "{} call-forwarding rows, but {loaded} loaded + {inserted} inserted - {deleted} \
                 deleted make {}",
                cfs.len(),
                (loaded + inserted).saturating_sub(deleted)
            ));
        }
        Ok(vec![
            "no lock left; subscribers and their sub_nbr index intact".into(),
            format!(
                "every one of {} call-forwarding rows has its special facility",
                cfs.len()
            ),
            format!(
                "call-forwarding rows: {loaded} loaded + {inserted} inserted - {deleted} deleted \
                 = {}",
                cfs.len()
            ),
        ])
    }
}

async fn get_subscriber_data(c: &mut Coordinator, s_id: u64) -> Result<(), Abort> {
    let mut tx = c.begin(TxKind::ReadOnly);
    tx.fetch(&[Access::read(SUBSCRIBER, s_id)]).await?;
    std::hint::black_box(tx.get(SUBSCRIBER, s_id).map(|v| v[SUB_VLR]));
    tx.commit().await
}

async fn get_new_destination(
    c: &mut Coordinator,
    s_id: u64,
    sf_type: u64,
    start: u64,
    end: u64,
) -> Result<(), Abort> {
    let mut tx = c.begin(TxKind::ReadOnly);
    let mut acc = [Access::read(SPECIAL_FACILITY, sf_key(s_id, sf_type)); 4];
    let mut n = 1;
    for st in [0u64, 8, 16] {
        if st <= start {
            acc[n] = Access::read(CALL_FORWARDING, cf_key(s_id, sf_type, st));
            n += 1;
        }
    }
    tx.fetch(&acc[..n]).await?;
    let active = tx
        .get(SPECIAL_FACILITY, sf_key(s_id, sf_type))
        .is_some_and(|v| v[SF_ACTIVE] == 1);
    let found = active
        && acc[1..n].iter().any(|a| {
            tx.get(a.table, a.key)
                .is_some_and(|v| u64::from(v[CF_END]) > end)
        });
    std::hint::black_box(found);
    tx.commit().await
}

async fn get_access_data(c: &mut Coordinator, s_id: u64, ai_type: u64) -> Result<(), Abort> {
    let mut tx = c.begin(TxKind::ReadOnly);
    tx.fetch(&[Access::read(ACCESS_INFO, ai_key(s_id, ai_type))])
        .await?;
    std::hint::black_box(tx.get(ACCESS_INFO, ai_key(s_id, ai_type)).map(|v| v[0]));
    tx.commit().await
}

async fn update_subscriber_data(
    c: &mut Coordinator,
    s_id: u64,
    bit: u8,
    sf_type: u64,
    data_a: u8,
) -> Result<(), Abort> {
    let sf = sf_key(s_id, sf_type);
    let mut tx = c.begin(TxKind::ReadWrite);
    tx.fetch(&[
        Access::update(SUBSCRIBER, s_id),
        Access::update(SPECIAL_FACILITY, sf),
    ])
    .await?;
    let (Some(sub), Some(fac)) = (tx.get(SUBSCRIBER, s_id), tx.get(SPECIAL_FACILITY, sf)) else {
        tx.rollback().await;
        return Err(rollback_abort(SPECIAL_FACILITY, sf));
    };
    let mut sub: [u8; SUB_BYTES] = sub.try_into().unwrap_or([0; SUB_BYTES]);
    let mut fac: [u8; SF_BYTES] = fac.try_into().unwrap_or([0; SF_BYTES]);
    sub[SUB_BITS] = (sub[SUB_BITS] & !1) | bit;
    fac[SF_DATA_A] = data_a;
    tx.update(SUBSCRIBER, s_id, &sub).await?;
    tx.update(SPECIAL_FACILITY, sf, &fac).await?;
    tx.commit().await
}

/// The subscriber of `sub_nbr`, looked up in the index (as a read-only item of `tx`).
async fn lookup(tx: &mut dtxn_txn::Txn<'_>, sub_nbr: u64) -> Result<Option<u64>, Abort> {
    tx.fetch(&[Access::read(SEC_SUBSCRIBER, sub_nbr)]).await?;
    Ok(tx.get(SEC_SUBSCRIBER, sub_nbr).map(|v| field::u64_at(v, 0)))
}

async fn update_location(c: &mut Coordinator, sub_nbr: u64, vlr: u32) -> Result<(), Abort> {
    let mut tx = c.begin(TxKind::ReadWrite);
    let Some(s_id) = lookup(&mut tx, sub_nbr).await? else {
        tx.rollback().await;
        return Err(rollback_abort(SEC_SUBSCRIBER, sub_nbr));
    };
    tx.fetch(&[Access::update(SUBSCRIBER, s_id)]).await?;
    let Some(sub) = tx.get(SUBSCRIBER, s_id) else {
        tx.rollback().await;
        return Err(rollback_abort(SUBSCRIBER, s_id));
    };
    let mut sub: [u8; SUB_BYTES] = sub.try_into().unwrap_or([0; SUB_BYTES]);
    field::put_u32(&mut sub, SUB_VLR, vlr);
    tx.update(SUBSCRIBER, s_id, &sub).await?;
    tx.commit().await
}

async fn insert_call_forwarding(
    c: &mut Coordinator,
    sub_nbr: u64,
    sf_type: u64,
    start: u64,
    end: u64,
    number: &[u8; 15],
    tally: &mut Tally,
) -> Result<(), Abort> {
    let mut tx = c.begin(TxKind::ReadWrite);
    let Some(s_id) = lookup(&mut tx, sub_nbr).await? else {
        tx.rollback().await;
        return Err(rollback_abort(SEC_SUBSCRIBER, sub_nbr));
    };
    let sf = sf_key(s_id, sf_type);
    tx.fetch(&[Access::read(SPECIAL_FACILITY, sf)]).await?;
    if tx.get(SPECIAL_FACILITY, sf).is_none() {
        tx.rollback().await;
        return Err(rollback_abort(SPECIAL_FACILITY, sf));
    }
    let mut v = [0u8; CF_BYTES];
    v[CF_END] = end as u8;
    v[1..16].copy_from_slice(number);
    tx.insert(CALL_FORWARDING, cf_key(s_id, sf_type, start), &v)
        .await?;
    tally.pending = (1, 0);
    tx.commit().await?;
    tally.confirm();
    Ok(())
}

async fn delete_call_forwarding(
    c: &mut Coordinator,
    sub_nbr: u64,
    sf_type: u64,
    start: u64,
    tally: &mut Tally,
) -> Result<(), Abort> {
    let mut tx = c.begin(TxKind::ReadWrite);
    let Some(s_id) = lookup(&mut tx, sub_nbr).await? else {
        tx.rollback().await;
        return Err(rollback_abort(SEC_SUBSCRIBER, sub_nbr));
    };
    let cf = cf_key(s_id, sf_type, start);
    tx.fetch(&[Access::update(CALL_FORWARDING, cf)]).await?;
    if tx.get(CALL_FORWARDING, cf).is_none() {
        tx.rollback().await;
        return Err(rollback_abort(CALL_FORWARDING, cf));
    }
    tx.delete(CALL_FORWARDING, cf).await?;
    tally.pending = (0, 1);
    tx.commit().await?;
    tally.confirm();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Merge;

    #[test]
    fn keys_do_not_collide() {
        let mut seen = HashSet::new();
        for s in 1..50 {
            for f in 1..=4 {
                for st in [0, 8, 16] {
                    assert!(seen.insert(cf_key(s, f, st)));
                    assert_eq!(cf_key(s, f, st) / 3, sf_key(s, f));
                }
            }
        }
    }

    #[test]
    fn loaded_rows_follow_the_spec() {
        let mut ai = 0;
        let mut sf = 0;
        let mut cf = 0;
        for s in 1..=2000 {
            let r = rows_of(9, s);
            assert!((1..=4).contains(&r.ai_types.len()));
            assert!((1..=4).contains(&r.facilities.len()));
            ai += r.ai_types.len();
            sf += r.facilities.len();
            cf += r.facilities.iter().map(|f| f.2.len()).sum::<usize>();
        }
        // Means 2.5, 2.5 and 3.75 per subscriber.
        assert!((4500..5500).contains(&ai), "{ai}");
        assert!((4500..5500).contains(&sf), "{sf}");
        assert!((6800..8200).contains(&cf), "{cf}");
    }

    #[test]
    fn tallies_merge_by_adding_inserts_and_deletes() {
        let mut a = Tally {
            inserted: 3,
            deleted: 1,
            ..Tally::default()
        };
        a.merge(Tally {
            inserted: 2,
            deleted: 4,
            ..Tally::default()
        });
        assert_eq!((a.inserted, a.deleted), (5, 5));
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(json, r#"{"inserted":5,"deleted":5}"#);
        let back: Tally = serde_json::from_str(&json).unwrap();
        assert_eq!((back.inserted, back.deleted), (5, 5));
    }

    #[test]
    fn verify_reads_merged_tallies_as_it_reads_separate_ones() {
        let w = Tatp::new(Options {
            subscribers: 40,
            ..Options::default()
        })
        .unwrap();
        let (pool, plan) = crate::loaded_pool(&w, 2);
        let t = |inserted, deleted| Tally {
            inserted,
            deleted,
            ..Tally::default()
        };
        assert!(w.verify(&pool, &plan, 2, &[t(2, 0), t(0, 2)]).is_ok());
        let merged = crate::merge_all([t(2, 0), t(0, 2)]).unwrap();
        assert!(w.verify(&pool, &plan, 2, &[merged]).is_ok());
        assert!(w.verify(&pool, &plan, 2, &[t(2, 0)]).is_err());
    }
}
