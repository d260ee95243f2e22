//! Motor (Zhang et al., OSDI'24): multi-versioning with consecutive version tuples (CVT),
//! serializable or snapshot isolation, on the store's multi-version tables
//! ([`dtxn_store::cvt`]).
//!
//! Phases, with their verbs and critical-path round trips (addresses cached):
//!
//! 0. **Start timestamp** (1 RT): FAA on the oracle word. The paper leaves the timestamp
//!    service out of its round-trip counts; dtxn counts it, separately
//!    ([`crate::TxnOutcome::oracle_round_trips`]).
//! 1. **Execute** (1 RT per batch of reads, 2 when a version must be rebuilt or the address
//!    was not cached). Read-write items: CAS(lock) + READ(CVT) + READ(Vpkg) on the primary in
//!    one doorbell batch: the CAS executes before the READs (G6), so both are read under the
//!    lock, and the newest version is the one a writer builds on (Motor reads the Vpkg a round
//!    trip later). First-committer-wins: the newest version must be at most the start
//!    timestamp, under either isolation. Read-only items: READ(CVT) + READ(Vpkg) together;
//!    the version a snapshot at the start timestamp sees is selected from the CVT, and when it
//!    is not the Vpkg's version it is rebuilt from the Vpkg and the pre-images of every newer
//!    version, read in a second round trip. Serializable read-write transactions abort early
//!    when any item has a version newer than their start. A CVT locked by another coordinator
//!    is read again (its writer may hold a commit timestamp below our start and not have
//!    installed yet: the snapshot race of the digest's section 5.3).
//! 2. **Mark** (1 RT, read-write transactions that write): every written record's lock word
//!    gets the COMMITTING bit, before the commit timestamp exists.
//! 3. **Commit timestamp** (1 RT): FAA, after every lock is held and marked.
//! 4. **Validate** (serializable, 1 RT if any item was read without our lock): READ each
//!    such item's CVT: not being committed, and the version a snapshot at the commit
//!    timestamp sees is still the one read.
//! 5. **Commit** (1 RT): to every replica in one batch, in this order on each memory node
//!    (G4): the **op log** (the new records and pre-images, in the coordinator's log slice, for
//!    a recovery agent to finish the commit), then per written record its pre-image chunk and
//!    its whole CVT (the new Vcell and value, versions dropped by garbage collection). No undo
//!    log: old versions are the undo.
//! 6. **Release** (detached): lock words to 0, after every replica is written.
//!
//! Read-only transactions take a start timestamp and execute: no validation, no locks.
//!
//! Inserts of a key without a CVT lock the key's chain (CAS + READ of the home bucket), claim
//! a free slot (CAS on its lock word + READ), and install a CVT created at the commit
//! timestamp. A reader that finds no CVT for a key treats a claimed (locked, empty) slot in its
//! chain as a possible insert of that key: it reads again (snapshot) or fails validation.
//! A delete installs a tombstone version; an insert over a tombstone reuses the key's CVT.
//!
//! Where dtxn differs from the published Motor, and why:
//! - Stamps instead of one-byte anchors (see [`dtxn_store::cvt`]): anchors are the sync
//!   paper's broken bookend scheme when a READ's lines are fetched out of order.
//! - Locks are released after every replica is written, not with the primary's commit WRITE,
//!   so that "unlocked" always means "installed everywhere".
//! - Snapshot readers wait out locked CVTs, and read-write items obey first-committer-wins
//!   under snapshot isolation too (digest, section 5.3).

use crate::abort::{Abort, AbortReason};
use crate::config::Isolation;
use crate::protocols::ford::{abort, table};
use crate::txn::{Access, NewValue, TxKind, Txn, SPARE_BUFFERS};
use dtxn_fabric::{NodeId, OpId};
use dtxn_store::cvt::{Cvt, MvCodec, Pick, Vcell, CHUNK, CREATED, FRESH, TOMBSTONE, VALID};
use dtxn_store::layout::ORACLE_OFF;
use dtxn_store::log::{encode_head, encode_item_as, ItemKind, LogStatus, HEAD_BYTES};
use dtxn_store::record::{RecordHeader, Torn};
use dtxn_store::{PoolMap, TableInfo};
use std::ops::Range;
use std::rc::Rc;

/// Bit 62 of a lock word: its holder is committing. Set on every record a transaction writes
/// (and every slot it claims) before it takes its commit timestamp, so an unmarked lock seen
/// after a reader took its start timestamp belongs to a writer that will commit above it.
pub(crate) const COMMITTING: u64 = 1 << 62;

/// What Motor keeps of an item between phases.
#[derive(Debug, Clone, Default)]
pub(crate) struct MvState {
    /// The CVT as read (under our lock, for read-write items).
    cvt: Cvt,
    /// The Vcell of the version read, if it has a value.
    v0: Option<usize>,
    /// The newest value as read: what older versions are rebuilt from, and (read under our
    /// lock) the old value whose pre-images a commit keeps.
    base: Vec<u8>,
}

/// Vectors and item states Motor's phases reuse across rounds and transactions (one set per
/// coordinator), so that a transaction's hot path allocates nothing once they have grown. As
/// with FORD's scratch, a phase takes a vector with `mem::take` and puts it back when it
/// finishes; an abort may just drop it.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// Execution and validation rounds: (item, stage).
    work: Vec<(usize, Stage)>,
    next: Vec<(usize, Stage)>,
    /// Execution and validation rounds: the ops posted; each item's span of them.
    ids: Vec<OpId>,
    spans: Vec<(usize, usize)>,
    /// Items' states, handed back by finished transactions, taken by CVT reads. Boxed as the
    /// items hold them: a state changes hands without being boxed again.
    #[allow(clippy::vec_box)]
    states: Vec<Box<MvState>>,
    /// Commit: what each written record gets, pointing into `bytes` (its CVT and chunk).
    installs: Vec<Install>,
    bytes: Vec<u8>,
    /// Commit: the memory nodes that get the op log.
    nodes: Vec<NodeId>,
    /// Mark round: the slots claimed, as (item, CAS, READ).
    claims: Vec<(usize, OpId, OpId)>,
    /// Inserts: (item, row) of every key to insert; those of keys without a CVT.
    todo: Vec<(usize, usize)>,
    fresh: Vec<usize>,
    /// Inserts' slot choice: the chain locks to take, as (item, node, address, CAS), and the
    /// chains' walks, as (item, bucket to read next, hops so far, first free slot seen).
    chain_cas: Vec<(usize, NodeId, u64, OpId)>,
    walks: Vec<(usize, u64, u64, Option<u64>)>,
    next_walks: Vec<(usize, u64, u64, Option<u64>)>,
    /// The local oracle's committing bits, for the next transaction's copy.
    pub(crate) suspects: Vec<u64>,
}

impl Scratch {
    /// A spare state whose `base` is `len` bytes long (their content is left over).
    fn state(&mut self, len: usize) -> Box<MvState> {
        let mut st = self.states.pop().unwrap_or_default();
        st.base.resize(len, 0);
        st
    }

    /// Keeps `st` for a later CVT read (up to [`SPARE_BUFFERS`] states).
    pub(crate) fn give_state(&mut self, st: Box<MvState>) {
        if self.states.len() < SPARE_BUFFERS {
            self.states.push(st);
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Stage {
    /// READ the CVT at `off` (with CAS(lock) first if `lock`).
    Cvt { off: u64, lock: bool },
    /// READ a bucket of the item's chain; `pending`: a claimed empty slot seen so far.
    Bucket { at: u64, hops: u64, pending: bool },
    /// READ the pre-image chunks that rebuild the version selected from the newest value.
    Value { off: u64 },
}

enum Next {
    Done,
    Again(Stage),
    /// Read again (a torn or locked record): counts against the reread limit.
    Reread(Stage),
    Fail(AbortReason),
}

fn codec(t: &TableInfo) -> MvCodec {
    MvCodec::new(t).expect("motor runs on multi-version tables (checked at fetch)")
}

/// A timestamp from the oracle: FAA on memory node 0, one round trip; or the compute
/// process's own counter (no round trip once its block is reserved).
async fn timestamp(tx: &mut Txn<'_>) -> Result<u64, ()> {
    if let Some(o) = tx.c.local_oracle.clone() {
        if let Some(ts) = o.next() {
            return Ok(ts);
        }
        let f = tx.c.ep.faa(0, ORACLE_OFF, crate::LOCAL_ORACLE_BLOCK);
        tx.oracle_round_trips += 1;
        if tx.c.ep.post().await.is_err() {
            return Err(());
        }
        o.start_at(tx.c.ep.old(f) + 1);
        return o.next().ok_or(());
    }
    let f = tx.c.ep.faa(0, ORACLE_OFF, 1);
    tx.oracle_round_trips += 1;
    if tx.c.ep.post().await.is_err() {
        return Err(());
    }
    let ts = tx.c.ep.old(f) + 1;
    if let Some(c) = &tx.c.start_clock {
        c.observe(ts, tx.c.ep.now_ns());
    }
    Ok(ts)
}

/// The start timestamp: the compute node's start clock while it is fresh (see
/// [`crate::StartClock`]), else the oracle.
async fn start(tx: &mut Txn<'_>) -> Result<(), ()> {
    if tx.ts_start != 0 {
        return Ok(());
    }
    let cached = match (&tx.c.start_clock, tx.c.cfg.motor.start_clock_ns) {
        (Some(c), n) if n > 0 => c.start(tx.c.ep.now_ns()),
        _ => None,
    };
    tx.ts_start = match cached {
        Some(ts) => ts,
        None => timestamp(tx).await?,
    };
    copy_committing(tx);
    Ok(())
}

/// With a local oracle: which coordinators are committing, copied right after a timestamp
/// was taken (see [`crate::LocalOracle`]).
fn copy_committing(tx: &mut Txn<'_>) {
    if let Some(o) = &tx.c.local_oracle {
        o.committing(&mut tx.suspects);
    }
}

/// Whether a lock word belongs to a writer that may be committing below our timestamp: its
/// mark in the pool, or (local oracle) its bit when we took the timestamp.
fn committing(tx: &Txn<'_>, lock: u64) -> bool {
    lock & COMMITTING != 0
        || (lock != 0
            && tx.c.local_oracle.is_some()
            && crate::LocalOracle::is_set(&tx.suspects, lock))
}

/// Execution: fetch `accesses` (new items, or read-only items now wanted for update).
pub(crate) async fn execute(tx: &mut Txn<'_>, accesses: &[Access]) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    let mut work = std::mem::take(&mut tx.c.motor.work);
    work.clear();
    for a in accesses {
        let bad = Abort {
            reason: AbortReason::BadRequest,
            table: a.table,
            key: a.key,
        };
        if a.for_update && tx.kind == TxKind::ReadOnly {
            return Err(bad);
        }
        let Ok(t) = map.table(a.table) else {
            return Err(bad);
        };
        if t.mv.is_none() {
            // A single-version table: the pool was laid out for another protocol.
            return Err(bad);
        }
        if let Some(i) = tx.find(a.table, a.key) {
            let it = &mut tx.items[i];
            if a.for_update && !it.rw {
                it.rw = true;
                // Named read-only earlier in this same call: its stage, not yet posted, locks
                // it instead (a bucket read of a read-write item goes on to CAS + READ).
                if let Some((_, st)) = work.iter_mut().find(|(j, _)| *j == i) {
                    if let Stage::Cvt { lock, .. } = st {
                        *lock = true;
                    }
                    continue;
                }
                let stage = match it.offset {
                    Some(off) => Stage::Cvt { off, lock: true },
                    None => Stage::Bucket {
                        at: t.home_bucket(a.key),
                        hops: 0,
                        pending: false,
                    },
                };
                work.push((i, stage));
            }
            continue;
        }
        let stage = match tx.c.cache.get(a.table, a.key) {
            Some(off) => Stage::Cvt {
                off,
                lock: a.for_update,
            },
            None => Stage::Bucket {
                at: t.home_bucket(a.key),
                hops: 0,
                pending: false,
            },
        };
        let i = tx.push_new_item(t, a.key, a.for_update, t.primary());
        work.push((i, stage));
    }
    if work.is_empty() {
        tx.c.motor.work = work;
        return Ok(());
    }
    start(tx)
        .await
        .map_err(|()| abort(AbortReason::ReplicaFailure, &tx.items[work[0].0]))?;
    run_stages(tx, work).await
}

/// Runs items through their stages, one doorbell batch per round, until each is done.
async fn run_stages(tx: &mut Txn<'_>, mut work: Vec<(usize, Stage)>) -> Result<(), Abort> {
    let scratch = &mut tx.c.motor;
    let mut next = std::mem::take(&mut scratch.next);
    let mut ids = std::mem::take(&mut scratch.ids);
    let mut spans = std::mem::take(&mut scratch.spans);
    let r = stage_rounds(tx, &mut work, &mut next, &mut ids, &mut spans).await;
    let scratch = &mut tx.c.motor;
    // A caller's own `work` (not the scratch's) replaces the scratch's only if it is larger.
    if work.capacity() >= scratch.work.capacity() {
        scratch.work = work;
    }
    (scratch.next, scratch.ids, scratch.spans) = (next, ids, spans);
    r
}

/// [`run_stages`]' rounds, in the vectors it lends.
async fn stage_rounds(
    tx: &mut Txn<'_>,
    work: &mut Vec<(usize, Stage)>,
    next: &mut Vec<(usize, Stage)>,
    ids: &mut Vec<OpId>,
    spans: &mut Vec<(usize, usize)>,
) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    let mut rereads = 0u32;
    while !work.is_empty() {
        ids.clear();
        spans.clear();
        for &(i, stage) in work.iter() {
            let start = ids.len();
            post_stage(tx, &map, i, stage, ids);
            spans.push((start, ids.len()));
        }
        if tx.c.ep.post().await.is_err() {
            return Err(abort(AbortReason::ReplicaFailure, &tx.items[work[0].0]));
        }
        next.clear();
        let mut failed = None;
        let mut again = false;
        for (&(i, stage), &(s, e)) in work.iter().zip(spans.iter()) {
            match on_stage(tx, &map, i, stage, &ids[s..e]) {
                Next::Done => {}
                Next::Again(st) => next.push((i, st)),
                Next::Reread(st) => {
                    again = true;
                    next.push((i, st));
                }
                Next::Fail(r) => {
                    failed.get_or_insert(abort(r, &tx.items[i]));
                }
            }
        }
        if !tx.give_back.is_empty() {
            let z = 0u64.to_le_bytes();
            for (n, off) in tx.give_back.drain(..) {
                tx.c.ep.write(n, off, &z);
            }
            // A lost release leaves the lock to recovery; nothing to tell this transaction.
            let _ = tx.c.ep.post_detached();
        }
        if let Some(a) = failed {
            return Err(a);
        }
        if again {
            rereads += 1;
            if rereads > tx.c.cfg.reread_limit {
                return Err(abort(AbortReason::Invisible, &tx.items[next[0].0]));
            }
        }
        std::mem::swap(work, next);
    }
    Ok(())
}

fn post_stage(tx: &mut Txn<'_>, map: &PoolMap, i: usize, stage: Stage, ids: &mut Vec<OpId>) {
    let it = &tx.items[i];
    let t = table(map, it.table);
    let p = t.primary();
    let ep = &mut tx.c.ep;
    match stage {
        Stage::Cvt { off, lock } => {
            if lock {
                ids.push(ep.cas(p, off, 0, tx.c.owner));
            }
            ids.push(ep.read(p, off, t.record_bytes as usize));
        }
        Stage::Bucket { at, .. } => ids.push(ep.read(p, at, t.bucket_bytes as usize)),
        Stage::Value { off } => {
            let k = codec(t);
            let st = it.mv.as_ref().expect("selected");
            let (v0, newest) = (
                st.v0.expect("a value version"),
                st.cvt.newest_value().expect("a value version"),
            );
            for (w, _) in k.rebuild_plan(&st.cvt, v0, newest).unwrap_or_default() {
                let c = st.cvt.cells[w];
                if c.flags & CHUNK != 0 {
                    let lines = k.chunk_lines(c.bitmap) as usize;
                    ids.push(ep.read(
                        p,
                        t.bar_line_off(off, u32::from(c.start)),
                        lines * dtxn_store::record::LINE,
                    ));
                }
            }
        }
    }
}

fn on_stage(tx: &mut Txn<'_>, map: &PoolMap, i: usize, stage: Stage, ops: &[OpId]) -> Next {
    let t = table(map, tx.items[i].table);
    match stage {
        Stage::Cvt { off, lock } => {
            let mut ops = ops.iter();
            if lock {
                let c = *ops.next().expect("cas");
                if !tx.c.ep.cas_ok(c) {
                    return Next::Fail(AbortReason::LockConflict);
                }
                tx.items[i].locked = true;
                tx.items[i].offset = Some(off);
            }
            let mut st = tx.c.motor.state(t.value_size as usize);
            let rec = tx.c.ep.bytes(*ops.next().expect("cvt"));
            let MvState { cvt, base, .. } = &mut *st;
            let read = codec(t).decode_into(rec, cvt, base);
            on_cvt(tx, t, i, off, st, read)
        }
        Stage::Bucket { at, hops, pending } => on_bucket(tx, t, i, at, hops, pending, ops[0]),
        Stage::Value { off } => {
            let k = codec(t);
            let it = &mut tx.items[i];
            let st = it.mv.as_ref().expect("selected");
            let (v0, newest) = (
                st.v0.expect("a value version"),
                st.cvt.newest_value().expect("a value version"),
            );
            let Some(plan) = k.rebuild_plan(&st.cvt, v0, newest) else {
                return Next::Fail(AbortReason::VersionGone);
            };
            it.value.copy_from_slice(&st.base);
            let mut n = 0;
            for &(w, take) in &plan {
                let c = st.cvt.cells[w];
                if c.flags & CHUNK == 0 {
                    k.apply_inline(&c, take, &mut it.value);
                    continue;
                }
                let chunk = tx.c.ep.bytes(ops[n]);
                n += 1;
                if k.apply_chunk(chunk, c.bitmap, c.version, take, &mut it.value)
                    .is_err()
                {
                    // The bar wrapped over it since the CVT was read: read both again.
                    return Next::Reread(Stage::Cvt { off, lock: false });
                }
            }
            it.exists = true;
            Next::Done
        }
    }
}

/// A CVT (with its newest value) was read for item `i`: `read` is its decode, into `st` (a
/// spare state), which becomes the item's state if the item keeps what was read and otherwise
/// goes back to the coordinator's spares.
fn on_cvt(
    tx: &mut Txn<'_>,
    t: &TableInfo,
    i: usize,
    off: u64,
    mut st: Box<MvState>,
    read: Result<(), Torn>,
) -> Next {
    match on_decoded(tx, t, i, off, &st, read) {
        Ok((next, v0)) => {
            st.v0 = v0;
            if let Some(old) = tx.items[i].mv.replace(st) {
                tx.c.motor.give_state(old);
            }
            next
        }
        Err(next) => {
            tx.c.motor.give_state(st);
            next
        }
    }
}

/// [`on_cvt`] for the CVT and newest value in `st` (if `read` is not torn): `Ok` with the
/// cell of the version read (if it has a value) when the item keeps them, `Err` when it keeps
/// nothing of this read.
fn on_decoded(
    tx: &mut Txn<'_>,
    t: &TableInfo,
    i: usize,
    off: u64,
    st: &MvState,
    read: Result<(), Torn>,
) -> Result<(Next, Option<usize>), Next> {
    let k = codec(t);
    let (table_id, key, rw, locked) = {
        let it = &tx.items[i];
        (it.table, it.key, it.rw, it.locked)
    };
    let ours = locked && tx.items[i].offset == Some(off);
    let again = Stage::Cvt {
        off,
        lock: rw && !ours,
    };
    if read.is_err() {
        return Err(Next::Reread(again));
    }
    let (cvt, base) = (&st.cvt, &st.base);
    let h = cvt.header;
    if !h.valid || h.table != table_id || h.key != key {
        // A stale cache entry (or a slot that lost a race): look the key up in its chain.
        tx.c.cache.invalidate(table_id, key);
        if ours {
            // Give the wrong slot's lock back, once this round's results are read.
            tx.give_back.push((t.primary(), off));
            let it = &mut tx.items[i];
            it.locked = false;
            it.offset = None;
        }
        return Err(Next::Again(Stage::Bucket {
            at: t.home_bucket(key),
            hops: 0,
            pending: false,
        }));
    }
    tx.c.cache.insert(table_id, key, off);
    tx.items[i].offset = Some(off);
    if !ours && committing(tx, h.lock) {
        // Someone is committing: its commit timestamp may be below our start and its versions
        // not installed yet. Read again until it is done. (A lock without the mark is a
        // writer still executing: it will take its commit timestamp after this READ, above
        // our start, so the versions we may see are all there.)
        return Err(Next::Reread(Stage::Cvt { off, lock: false }));
    }
    let ts = tx.ts_start;
    let serializable = tx.c.cfg.motor.isolation == Isolation::Serializable;
    let newest = cvt.newest().map(|n| cvt.cells[n]);
    let newest_version = newest.map_or(0, |c| c.version);
    if ours {
        // First-committer-wins (both isolation levels): we build on the newest version, so
        // it must be in our snapshot.
        if newest_version > ts {
            return Err(Next::Fail(AbortReason::NewerVersion));
        }
    } else if serializable && tx.kind == TxKind::ReadWrite && newest_version > ts {
        // Early abort: validation at the commit timestamp would fail.
        return Err(Next::Fail(AbortReason::NewerVersion));
    }
    let pick = if ours {
        match cvt.newest() {
            Some(n) if cvt.cells[n].tombstone() => Pick::Absent {
                version: cvt.cells[n].version,
            },
            Some(n) => Pick::Version(n),
            None => Pick::Gone,
        }
    } else {
        cvt.select(ts)
    };
    let it = &mut tx.items[i];
    match pick {
        Pick::Gone => Err(Next::Fail(AbortReason::VersionGone)),
        Pick::Absent { version } => {
            it.exists = false;
            it.version = version;
            Ok((Next::Done, None))
        }
        Pick::Version(v0) => {
            it.version = cvt.cells[v0].version;
            if cvt.newest_value() == Some(v0) {
                it.value.copy_from_slice(base);
                it.exists = true;
                return Ok((Next::Done, Some(v0)));
            }
            if ours {
                // Under our lock the version picked is the newest, which holds the value: a
                // CVT that says otherwise is read again.
                return Err(Next::Reread(Stage::Cvt { off, lock: false }));
            }
            // Older: rebuild from the newest value and the pre-images of newer versions.
            let plan = k.rebuild_plan(cvt, v0, cvt.newest_value().expect("v0 has one"));
            let Some(plan) = plan else {
                return Err(Next::Fail(AbortReason::VersionGone));
            };
            if plan.iter().all(|&(w, _)| cvt.cells[w].flags & CHUNK == 0) {
                it.value.copy_from_slice(base);
                for &(w, take) in &plan {
                    k.apply_inline(&cvt.cells[w], take, &mut it.value);
                }
                it.exists = true;
                return Ok((Next::Done, Some(v0)));
            }
            Ok((Next::Again(Stage::Value { off }), Some(v0)))
        }
    }
}

/// A bucket of item `i`'s chain was read (by `read`).
fn on_bucket(
    tx: &mut Txn<'_>,
    t: &TableInfo,
    i: usize,
    at: u64,
    hops: u64,
    pending: bool,
    read: OpId,
) -> Next {
    let (table_id, key, rw) = (tx.items[i].table, tx.items[i].key, tx.items[i].rw);
    let sv = t.codec();
    let bytes = tx.c.ep.bytes(read);
    let scan = t.scan(at, bytes, key);
    if let Some((s, off)) = scan.found {
        tx.c.cache.insert(table_id, key, off);
        if rw {
            return Next::Again(Stage::Cvt { off, lock: true });
        }
        let mut st = tx.c.motor.state(t.value_size as usize);
        let MvState { cvt, base, .. } = &mut *st;
        let read = codec(t).decode_into(t.slot_bytes(bytes, s), cvt, base);
        return on_cvt(tx, t, i, off, st, read);
    }
    let claimed = (0..t.slots_per_bucket).any(|s| {
        let h = sv.header(t.slot_bytes(bytes, s));
        !h.valid && h.lock & COMMITTING != 0
    });
    let pending = pending || claimed;
    if let Some(n) = scan.next {
        if hops >= t.overflow_buckets {
            // A chain longer than the overflow area: corrupt memory, not a transaction's fault.
            return Next::Fail(AbortReason::BadRequest);
        }
        return Next::Again(Stage::Bucket {
            at: n,
            hops: hops + 1,
            pending,
        });
    }
    if pending {
        // An insert has claimed a slot of this chain: it may be our key's, committed below
        // our start. Read the chain again.
        return Next::Reread(Stage::Bucket {
            at: t.home_bucket(key),
            hops: 0,
            pending: false,
        });
    }
    let it = &mut tx.items[i];
    it.exists = false;
    it.version = 0;
    it.offset = None;
    it.mv = None;
    Next::Done
}

/// Inserts, any number at once. A key with a CVT (a tombstone) is inserted over it, under the
/// CVT's lock; the keys without one get free slots of their chains, chosen under the chains'
/// insert locks (CAS + READ of every home bucket, all in one round trip) and claimed with the
/// commit's mark round. The same as inserting them one by one, in order.
pub(crate) async fn insert_many(tx: &mut Txn<'_>, rows: &[(u32, u64, &[u8])]) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    // (item, row) of every key to insert.
    let mut todo = std::mem::take(&mut tx.c.motor.todo);
    todo.clear();
    let mut lock_cvts = Vec::new();
    for (r, &(table_id, key, value)) in rows.iter().enumerate() {
        let bad = |reason| Abort {
            reason,
            table: table_id,
            key,
        };
        if tx.kind == TxKind::ReadOnly {
            return Err(bad(AbortReason::BadRequest));
        }
        let Ok(t) = map.table(table_id) else {
            return Err(bad(AbortReason::BadRequest));
        };
        if value.len() != t.value_size as usize || t.mv.is_none() {
            return Err(bad(AbortReason::BadRequest));
        }
        let i = match tx.find(table_id, key) {
            Some(i) => {
                let it = &mut tx.items[i];
                match (&it.new, it.exists) {
                    (NewValue::Insert, _) | (NewValue::Keep | NewValue::Update, true) => {
                        return Err(bad(AbortReason::Exists))
                    }
                    (NewValue::Delete, true) => {
                        // Deleted, then inserted again by the same transaction: an update.
                        it.value.copy_from_slice(value);
                        it.new = NewValue::Update;
                        continue;
                    }
                    _ if todo.iter().any(|&(j, _)| j == i) => return Err(bad(AbortReason::Exists)),
                    _ => {}
                }
                it.rw = true;
                if let (Some(off), Some(_), false) = (it.offset, &it.mv, it.locked) {
                    // Read absent through its CVT (a tombstone): lock it.
                    lock_cvts.push((i, Stage::Cvt { off, lock: true }));
                }
                i
            }
            None => tx.push_new_item(t, key, true, t.primary()),
        };
        todo.push((i, r));
    }
    if todo.is_empty() {
        tx.c.motor.todo = todo;
        return Ok(());
    }
    let first = abort(AbortReason::ReplicaFailure, &tx.items[todo[0].0]);
    start(tx).await.map_err(|()| first)?;
    if !lock_cvts.is_empty() {
        run_stages(tx, lock_cvts).await?;
    }
    let mut fresh = std::mem::take(&mut tx.c.motor.fresh);
    fresh.clear();
    fresh.extend(
        todo.iter()
            .map(|&(i, _)| i)
            .filter(|&i| tx.items[i].mv.is_none()),
    );
    if !fresh.is_empty() {
        choose_slots(tx, &map, &fresh).await?;
    }
    tx.c.motor.fresh = fresh;
    for &(i, r) in &todo {
        let it = &mut tx.items[i];
        if it.exists {
            return Err(abort(AbortReason::Exists, it));
        }
        it.value.copy_from_slice(rows[r].2);
        it.new = NewValue::Insert;
    }
    tx.c.motor.todo = todo;
    Ok(())
}

/// Chooses slots for fresh inserts together: every chain's insert lock (one CAS per chain not
/// held yet) and home bucket in one batch, then the chains' overflow buckets a round per hop,
/// all chains at once. A key found in its chain after all is locked through its CVT; a chain
/// without a free slot gets a new overflow bucket from [`choose_slot`].
async fn choose_slots(tx: &mut Txn<'_>, map: &Rc<PoolMap>, items: &[usize]) -> Result<(), Abort> {
    let owner = tx.c.owner;
    let scratch = &mut tx.c.motor;
    let mut cas = std::mem::take(&mut scratch.chain_cas);
    // Per item: (item, bucket to read next, hops so far, first free slot seen).
    let mut walks = std::mem::take(&mut scratch.walks);
    let mut next = std::mem::take(&mut scratch.next_walks);
    let mut reads = std::mem::take(&mut scratch.ids);
    cas.clear();
    walks.clear();
    for &i in items {
        let it = &tx.items[i];
        let t = table(map, it.table);
        let (p, home) = (t.primary(), t.home_bucket(it.key));
        let lock = (p, t.insert_lock(home));
        let held = tx.items.iter().any(|o| o.chain_lock == Some(lock))
            || cas.iter().any(|&(_, n, a, _)| (n, a) == lock);
        if !held {
            cas.push((i, lock.0, lock.1, tx.c.ep.cas(lock.0, lock.1, 0, owner)));
        }
        walks.push((i, home, 0, None));
    }
    let mut lock_cvts = Vec::new();
    let mut slow = Vec::new();
    let mut first_round = true;
    while !walks.is_empty() {
        reads.clear();
        for &(i, at, _, _) in &walks {
            let t = table(map, tx.items[i].table);
            reads.push(tx.c.ep.read(t.primary(), at, t.bucket_bytes as usize));
        }
        if tx.c.ep.post().await.is_err() {
            if first_round {
                let taken: Vec<(NodeId, u64)> = cas.iter().map(|&(_, n, a, _)| (n, a)).collect();
                crate::protocols::ford::give_back_after_failure(tx, &taken).await;
            }
            return Err(abort(AbortReason::ReplicaFailure, &tx.items[walks[0].0]));
        }
        if first_round {
            first_round = false;
            // Record every chain lock won before reporting one lost, so that all are
            // released.
            let mut lost = None;
            for &(i, n, a, c) in &cas {
                if tx.c.ep.cas_ok(c) {
                    tx.items[i].chain_lock = Some((n, a));
                } else {
                    lost.get_or_insert(abort(AbortReason::LockConflict, &tx.items[i]));
                }
            }
            if let Some(a) = lost {
                return Err(a);
            }
        }
        next.clear();
        for (&(i, at, hops, mut free), &read) in walks.iter().zip(&reads) {
            let bytes = tx.c.ep.bytes(read);
            let (table_id, key) = (tx.items[i].table, tx.items[i].key);
            let t = table(map, table_id);
            let scan = t.scan(at, bytes, key);
            if let Some((_, off)) = scan.found {
                // The key has a CVT (deleted, or inserted since we looked): lock and read it.
                tx.c.cache.insert(table_id, key, off);
                lock_cvts.push((i, Stage::Cvt { off, lock: true }));
                continue;
            }
            if free.is_none() {
                let sv = t.codec();
                free = (0..t.slots_per_bucket)
                    .map(|s| (t.slot(at, s), sv.header(t.slot_bytes(bytes, s))))
                    .find(|(off, h)| {
                        !h.valid
                            && h.lock == 0
                            && !tx.items.iter().any(|o| o.offset == Some(*off))
                            && !next.iter().any(|&(_, _, _, f)| f == Some(*off))
                    })
                    .map(|(off, _)| off);
            }
            match scan.next {
                Some(n) if hops < t.overflow_buckets => next.push((i, n, hops + 1, free)),
                Some(_) => return Err(abort(AbortReason::CorruptChain, &tx.items[i])),
                None => match free {
                    Some(slot) => {
                        let it = &mut tx.items[i];
                        it.offset = Some(slot);
                        it.node = t.primary();
                        it.exists = false;
                        it.version = 0;
                        // Claimed at the mark round.
                        it.cold = true;
                    }
                    // No free slot: chain a new overflow bucket.
                    None => slow.push(i),
                },
            }
        }
        std::mem::swap(&mut walks, &mut next);
    }
    let scratch = &mut tx.c.motor;
    (
        scratch.chain_cas,
        scratch.walks,
        scratch.next_walks,
        scratch.ids,
    ) = (cas, walks, next, reads);
    if !lock_cvts.is_empty() {
        run_stages(tx, lock_cvts).await?;
    }
    for i in slow {
        choose_slot(tx, map, i).await?;
    }
    Ok(())
}

/// A fresh insert: lock the chain (CAS + READ of the home bucket), find the key still absent
/// and choose a free slot, claimed later by the commit's mark round (so a reader of the
/// chain sees the claim before our commit timestamp exists). If the key has a CVT after all
/// (a tombstone), lock that instead.
async fn choose_slot(tx: &mut Txn<'_>, map: &Rc<PoolMap>, i: usize) -> Result<(), Abort> {
    let (table_id, key) = (tx.items[i].table, tx.items[i].key);
    let bad = |reason| Abort {
        reason,
        table: table_id,
        key,
    };
    let t = table(map, table_id);
    let owner = tx.c.owner;
    let primary = t.primary();
    let home = t.home_bucket(key);
    let lock_addr = t.insert_lock(home);
    let held = tx
        .items
        .iter()
        .any(|o| o.chain_lock == Some((primary, lock_addr)));
    let cas = (!held).then(|| tx.c.ep.cas(primary, lock_addr, 0, owner));
    let mut read = tx.c.ep.read(primary, home, t.bucket_bytes as usize);
    if tx.c.ep.post().await.is_err() {
        return Err(bad(AbortReason::ReplicaFailure));
    }
    if let Some(c) = cas {
        if !tx.c.ep.cas_ok(c) {
            return Err(bad(AbortReason::LockConflict));
        }
        tx.items[i].chain_lock = Some((primary, lock_addr));
    }
    let codec = t.codec();
    let mut bucket = home;
    let mut free = None;
    let mut hops = 0;
    let chain_end;
    loop {
        let bytes = tx.c.ep.bytes(read);
        let scan = t.scan(bucket, bytes, key);
        if let Some((_, off)) = scan.found {
            // The key has a CVT (deleted, or inserted since we looked): lock and read it.
            tx.c.cache.insert(table_id, key, off);
            return run_stages(tx, vec![(i, Stage::Cvt { off, lock: true })]).await;
        }
        if free.is_none() {
            free = (0..t.slots_per_bucket)
                .map(|s| (t.slot(bucket, s), codec.header(t.slot_bytes(bytes, s))))
                .find(|(off, h)| {
                    // Not a slot another of our items holds.
                    !h.valid && h.lock == 0 && !tx.items.iter().any(|o| o.offset == Some(*off))
                })
                .map(|(off, _)| off);
        }
        match scan.next {
            Some(n) => {
                hops += 1;
                if hops > t.overflow_buckets {
                    return Err(bad(AbortReason::BadRequest));
                }
                bucket = n;
                read = tx.c.ep.read(primary, n, t.bucket_bytes as usize);
                if tx.c.ep.post().await.is_err() {
                    return Err(bad(AbortReason::ReplicaFailure));
                }
            }
            None => {
                chain_end = bucket;
                break;
            }
        }
    }
    let slot = match free {
        Some(s) => s,
        None => {
            // Chain a new overflow bucket (we hold the chain's insert lock).
            let f = tx.c.ep.faa(primary, t.overflow_counter(), 1);
            if tx.c.ep.post().await.is_err() {
                return Err(bad(AbortReason::ReplicaFailure));
            }
            let index = tx.c.ep.old(f);
            if index >= t.overflow_buckets {
                return Err(bad(AbortReason::TableFull));
            }
            for &n in &t.replicas {
                tx.c.ep.write(n, chain_end, &(index + 1).to_le_bytes());
            }
            if tx.c.ep.post().await.is_err() {
                return Err(bad(AbortReason::ReplicaFailure));
            }
            t.slot(t.overflow_bucket(index), 0)
        }
    };
    let it = &mut tx.items[i];
    it.offset = Some(slot);
    it.node = primary;
    it.exists = false;
    it.version = 0;
    // Claimed at the mark round.
    it.cold = true;
    Ok(())
}

/// Validation (serializable), commit, release.
pub(crate) async fn commit(tx: &mut Txn<'_>) -> Result<(), Abort> {
    let writes = tx.items.iter().any(|i| i.new != NewValue::Keep);
    if !writes {
        // Read-only (or nothing written): the snapshot at the start timestamp is the
        // serialization point; locks of read-for-update items just go.
        release(tx);
        return Ok(());
    }
    let first = tx
        .items
        .iter()
        .find(|i| i.new != NewValue::Keep)
        .expect("a write");
    let fail = abort(AbortReason::ReplicaFailure, first);
    // With a local oracle, the committing mark is our bit in it, not a round trip.
    let local = tx.c.local_oracle.clone();
    let owner = tx.c.owner;
    if let Some(o) = &local {
        o.set_committing(owner, true);
    }
    let r = async {
        mark_committing(tx, local.is_none()).await?;
        let tc = timestamp(tx).await.map_err(|()| fail)?;
        copy_committing(tx);
        if tx.c.cfg.motor.isolation == Isolation::Serializable {
            validate(tx, tc).await?;
        }
        install(tx, tc).await
    }
    .await;
    if let Some(o) = &local {
        // Installed everywhere, or never: either way no reader need wait for us. (After a
        // failed install the locks stay, and so does the bit: some records may be new.)
        if !tx.keep_locks {
            o.set_committing(owner, false);
        }
    }
    r?;
    release(tx);
    tx.cache_inserted_slots();
    Ok(())
}

/// Marks the lock of every record we write as committing, and claims the free slots our
/// inserts chose (CAS + READ: still free), before the commit timestamp is taken (one round
/// trip: the marks must land before the FAA, which is on another QP).
async fn mark_committing(tx: &mut Txn<'_>, marks: bool) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    let value = tx.c.owner | COMMITTING;
    let mut claims = std::mem::take(&mut tx.c.motor.claims);
    claims.clear();
    let mut any = false;
    for (i, it) in tx.items.iter().enumerate() {
        if it.new == NewValue::Keep {
            continue;
        }
        let t = table(&map, it.table);
        let off = it.offset.expect("written items have a slot");
        if it.cold {
            let c = tx.c.ep.cas(t.primary(), off, 0, value);
            claims.push((i, c, tx.c.ep.read(t.primary(), off, 64)));
            any = true;
        } else if marks {
            // Our own lock word: other coordinators only CAS it (and fail), so a WRITE is
            // safe.
            tx.c.ep.write(t.primary(), off, &value.to_le_bytes());
            any = true;
        }
    }
    if !any {
        tx.c.motor.claims = claims;
        return Ok(());
    }
    let first = tx
        .items
        .iter()
        .find(|i| i.new != NewValue::Keep)
        .expect("a write");
    if tx.c.ep.post().await.is_err() {
        return Err(abort(AbortReason::ReplicaFailure, first));
    }
    let mut failed = None;
    for &(i, c, r) in &claims {
        if !tx.c.ep.cas_ok(c) {
            failed.get_or_insert(abort(AbortReason::LockConflict, &tx.items[i]));
            continue;
        }
        let it = &mut tx.items[i];
        it.locked = true;
        it.cold = false;
        // Filled since we chose it (only a corrupt chain lock allows that): give it up.
        let sv = table(&map, it.table).codec();
        if sv.header(tx.c.ep.bytes(r)).valid {
            failed.get_or_insert(abort(AbortReason::LockConflict, it));
        }
    }
    tx.c.motor.claims = claims;
    failed.map_or(Ok(()), Err)
}

/// The items read without our lock still show, at the commit timestamp `tc`, the version
/// read: no other version up to `tc`, and no writer committing (which may commit below us).
async fn validate(tx: &mut Txn<'_>, tc: u64) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    let scratch = &mut tx.c.motor;
    let mut work = std::mem::take(&mut scratch.work);
    let mut next = std::mem::take(&mut scratch.next);
    let mut ids = std::mem::take(&mut scratch.ids);
    // Everything read without our lock: read-only items, and keys found absent for update
    // but never inserted.
    work.clear();
    for (i, it) in tx.items.iter().enumerate().filter(|(_, it)| !it.locked) {
        let t = table(&map, it.table);
        let stage = match it.offset {
            Some(off) => Stage::Cvt { off, lock: false },
            None => Stage::Bucket {
                at: t.home_bucket(it.key),
                hops: 0,
                pending: false,
            },
        };
        work.push((i, stage));
    }
    let r = validation_rounds(tx, &map, tc, &mut work, &mut next, &mut ids).await;
    let scratch = &mut tx.c.motor;
    (scratch.work, scratch.next, scratch.ids) = (work, next, ids);
    r
}

/// [`validate`]'s rounds, from the items in `work`, in the vectors it lends.
async fn validation_rounds(
    tx: &mut Txn<'_>,
    map: &PoolMap,
    tc: u64,
    work: &mut Vec<(usize, Stage)>,
    next: &mut Vec<(usize, Stage)>,
    ids: &mut Vec<OpId>,
) -> Result<(), Abort> {
    let owner = tx.c.owner;
    let mut rounds = 0;
    while !work.is_empty() {
        rounds += 1;
        if rounds > tx.c.cfg.reread_limit {
            return Err(abort(AbortReason::Invisible, &tx.items[work[0].0]));
        }
        ids.clear();
        for &(i, stage) in work.iter() {
            let it = &tx.items[i];
            let t = table(map, it.table);
            ids.push(match stage {
                Stage::Cvt { off, .. } => tx.c.ep.read(t.primary(), off, t.record_bytes as usize),
                Stage::Bucket { at, .. } => tx.c.ep.read(t.primary(), at, t.bucket_bytes as usize),
                Stage::Value { .. } => unreachable!("validation reads CVTs and chains"),
            });
        }
        if tx.c.ep.post().await.is_err() {
            return Err(abort(AbortReason::ReplicaFailure, &tx.items[work[0].0]));
        }
        next.clear();
        for (&(i, stage), &id) in work.iter().zip(ids.iter()) {
            let it = &tx.items[i];
            let t = table(map, it.table);
            let fail = abort(AbortReason::Validation, it);
            let bytes = tx.c.ep.bytes(id);
            match stage {
                Stage::Cvt { .. } => {
                    let Ok(cvt) = codec(t).decode_cvt(bytes) else {
                        next.push((i, stage));
                        continue;
                    };
                    let h = cvt.header;
                    if committing(tx, h.lock)
                        || !h.valid
                        || h.key != it.key
                        || h.table != it.table
                        || seen_at(&cvt, tc) != Some(it.version)
                    {
                        return Err(fail);
                    }
                }
                Stage::Bucket { at, hops, .. } => {
                    let scan = t.scan(at, bytes, it.key);
                    let sv = t.codec();
                    // Another writer's insert committing (not a slot we claimed ourselves).
                    let claimed = (0..t.slots_per_bucket).any(|s| {
                        let h = sv.header(t.slot_bytes(bytes, s));
                        !h.valid && h.lock & COMMITTING != 0 && h.lock != owner | COMMITTING
                    });
                    if claimed {
                        return Err(fail);
                    }
                    if let Some((s, _)) = scan.found {
                        // Inserted since: fine only if above our commit timestamp.
                        match codec(t).decode_cvt(t.slot_bytes(bytes, s)) {
                            Ok(cvt)
                                if !committing(tx, cvt.header.lock)
                                    && seen_at(&cvt, tc) == Some(it.version) => {}
                            Ok(_) => return Err(fail),
                            Err(_) => {
                                next.push((i, stage));
                                continue;
                            }
                        }
                    }
                    if let Some(n) = scan.next {
                        if hops >= t.overflow_buckets {
                            return Err(abort(AbortReason::BadRequest, it));
                        }
                        next.push((
                            i,
                            Stage::Bucket {
                                at: n,
                                hops: hops + 1,
                                pending: false,
                            },
                        ));
                    }
                }
                Stage::Value { .. } => unreachable!(),
            }
        }
        std::mem::swap(work, next);
    }
    Ok(())
}

/// The version a snapshot at `ts` reads in `cvt` (a tombstone's or 0 when absent); `None` if
/// gone.
fn seen_at(cvt: &Cvt, ts: u64) -> Option<u64> {
    match cvt.select(ts) {
        Pick::Version(i) => Some(cvt.cells[i].version),
        Pick::Absent { version } => Some(version),
        Pick::Gone => None,
    }
}

/// What a commit writes for one record, on every replica; the bytes are ranges of the
/// buffer [`prepare`] fills.
#[derive(Debug)]
struct Install {
    table: u32,
    off: u64,
    /// The CVT with the new version, as backups get it (lock word 0).
    record: Range<usize>,
    /// Pre-image bar lines: (address, bytes).
    chunk: Option<(u64, Range<usize>)>,
}

/// The new CVT (and pre-image chunk) of every written item, into `out`, their bytes into
/// `bytes`.
fn prepare(tx: &Txn<'_>, map: &PoolMap, tc: u64, out: &mut Vec<Install>, bytes: &mut Vec<u8>) {
    out.clear();
    bytes.clear();
    // One CVT, rebuilt in place for each item: it is large enough that moving it shows.
    let mut cvt = Cvt::default();
    for it in tx.items.iter().filter(|i| i.new != NewValue::Keep) {
        let t = table(map, it.table);
        let k = codec(t);
        let off = it.offset.expect("written items have a slot");
        cvt.header = RecordHeader {
            lock: 0,
            version: tc,
            key: it.key,
            table: it.table,
            valid: true,
        };
        match &it.mv {
            Some(st) => cvt.cells.clone_from(&st.cvt.cells),
            None => k.free_cells(&mut cvt.cells),
        }
        let mut chunk = None;
        // The value the CVT holds: the new one, or for a delete the newest as it was.
        let mut value = &it.value;
        match it.new {
            NewValue::Update => {
                let st = it.mv.as_ref().expect("read before update");
                // The old value: the newest, as read under our lock.
                let old = &st.base;
                debug_assert!(st.v0.is_some() && old.len() == it.value.len());
                let at = bytes.len();
                let (cell, start) = k.update_cell(&cvt, old, &it.value, tc, bytes);
                chunk = start.map(|line| (t.bar_line_off(off, line), at..bytes.len()));
                k.push(&mut cvt, cell);
            }
            NewValue::Delete => {
                value = &it.mv.as_ref().expect("read before delete").base;
                k.push(
                    &mut cvt,
                    Vcell {
                        version: tc,
                        flags: VALID | TOMBSTONE,
                        ..Vcell::default()
                    },
                );
            }
            NewValue::Insert => {
                let flags = if it.mv.is_some() {
                    // Over a tombstone: versions before it cannot be rebuilt from the new
                    // value; the tombstone stays, so snapshots after it still see the key
                    // absent.
                    let tomb = cvt.newest().map_or(0, |n| cvt.cells[n].version);
                    MvCodec::drop_through(&mut cvt, tomb.saturating_sub(1));
                    VALID | CREATED
                } else {
                    VALID | CREATED | FRESH
                };
                k.push(
                    &mut cvt,
                    Vcell {
                        version: tc,
                        flags,
                        ..Vcell::default()
                    },
                );
            }
            NewValue::Keep => unreachable!("filtered"),
        }
        let at = bytes.len();
        bytes.resize(at + k.cvt_bytes(), 0);
        k.encode(&cvt, value, &mut bytes[at..]);
        out.push(Install {
            table: it.table,
            off,
            record: at..bytes.len(),
            chunk,
        });
    }
}

/// Every replica of every written record in one round trip: on each memory node, first the
/// op log (the new records, for a recovery agent to finish the commit), then each record's
/// pre-images, then its CVT. WRITEs on one QP apply in order (G4), and a crash leaves a
/// prefix of each QP's ops: a node that received any new record holds the whole log entry.
async fn install(tx: &mut Txn<'_>, tc: u64) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    let owner = tx.c.owner;
    let first = tx
        .items
        .iter()
        .find(|i| i.new != NewValue::Keep)
        .expect("a write");
    let (fail, full) = (
        abort(AbortReason::ReplicaFailure, first),
        abort(AbortReason::LogFull, first),
    );
    let mut installs = std::mem::take(&mut tx.c.motor.installs);
    let mut bytes = std::mem::take(&mut tx.c.motor.bytes);
    prepare(tx, &map, tc, &mut installs, &mut bytes);
    // More coordinators than log slices, or an entry too big: a sizing problem, refused
    // before anything is written.
    let Some((slice, slice_bytes)) = tx.c.log_slice else {
        return Err(full);
    };
    // The entry, encoded in place (the layout of `LogEntry::encode`): the new records, each
    // followed by its pre-image lines.
    let mut log = std::mem::take(&mut tx.log_body);
    log.clear();
    log.resize(HEAD_BYTES, 0);
    let mut items = 0u32;
    for w in &installs {
        encode_item_as(
            ItemKind::RedoRecord,
            w.table,
            w.off,
            false,
            &bytes[w.record.clone()],
            &mut log,
        );
        items += 1;
        if let Some((at, chunk)) = &w.chunk {
            let chunk = &bytes[chunk.clone()];
            encode_item_as(ItemKind::RedoBar, w.table, *at, false, chunk, &mut log);
            items += 1;
        }
    }
    if log.len() as u64 > slice_bytes {
        tx.log_body = log;
        return Err(full);
    }
    let crc = crc32fast::hash(&log[HEAD_BYTES..]);
    let body = (log.len() - HEAD_BYTES) as u32;
    let head = encode_head(
        tx.id,
        tx.c.ep.id().index,
        LogStatus::Pending,
        items,
        body,
        crc,
    );
    log[..HEAD_BYTES].copy_from_slice(&head);
    let mut nodes = std::mem::take(&mut tx.c.motor.nodes);
    nodes.clear();
    nodes.extend(
        installs
            .iter()
            .flat_map(|w| table(&map, w.table).replicas.iter().copied()),
    );
    nodes.sort_unstable();
    nodes.dedup();
    for &n in &nodes {
        tx.c.ep.write(n, slice, &log);
    }
    tx.log_body = log;
    for w in &installs {
        let t = table(&map, w.table);
        let record = &bytes[w.record.clone()];
        for (rank, &n) in t.replicas.iter().enumerate() {
            if let Some((at, chunk)) = &w.chunk {
                tx.c.ep.write(n, *at, &bytes[chunk.clone()]);
            }
            // Only the primary's lock word is ever taken; it stays ours until the release.
            if rank == 0 {
                let lock = (owner | COMMITTING).to_le_bytes();
                tx.c.ep
                    .write_parts(n, w.off, &[&lock, &record[lock.len()..]]);
            } else {
                tx.c.ep.write(n, w.off, record);
            }
        }
    }
    let scratch = &mut tx.c.motor;
    (scratch.installs, scratch.bytes, scratch.nodes) = (installs, bytes, nodes);
    tx.installed = true;
    for it in tx.items.iter_mut().filter(|i| i.new != NewValue::Keep) {
        it.install = Some(tc);
    }
    if tx.c.ep.post().await.is_err() {
        // Some replicas may hold the new versions: the locks stay held (no reader trusts a
        // committing CVT), for recovery to finish the commit from the op log.
        tx.keep_locks = true;
        return Err(fail);
    }
    Ok(())
}

/// Unlock, after every replica is written: posted detached, nobody waits.
fn release(tx: &mut Txn<'_>) {
    if tx.keep_locks {
        return;
    }
    let map = tx.c.map.clone();
    let zero = 0u64.to_le_bytes();
    let mut any = false;
    for it in &tx.items {
        if let (true, Some(off)) = (it.locked, it.offset) {
            let t = table(&map, it.table);
            tx.c.ep.write(t.primary(), off, &zero);
            any = true;
        }
        if let Some((n, addr)) = it.chain_lock {
            tx.c.ep.write(n, addr, &zero);
            any = true;
        }
    }
    if any {
        // A failed release leaves locks for recovery; nothing to report to this transaction.
        let _ = tx.c.ep.post_detached();
    }
}

pub(crate) async fn release_on_abort(tx: &mut Txn<'_>) {
    release(tx);
}
