//! Motor's execution: CVT reads (with the lock for read-write items), the version a snapshot
//! sees selected and, when older than the newest, rebuilt from pre-images; bucket walks for
//! keys whose address is not cached.

use super::{chain, codec, committing, ended, start, Motor, MvState, COMMITTING};
use crate::abort::{Abort, AbortReason};
use crate::config::{Isolation, VersionLayout};
use crate::item::{Access, Item};
use crate::mechanisms::rpc::Via;
use crate::mechanisms::{abort, journal, table};
use crate::tx::Tx;
use crate::txn::TxKind;
use dtxn_fabric::{NodeId, OpId};
use dtxn_store::cvt::{Pick, CHUNK};
use dtxn_store::record::Torn;
use dtxn_store::{PoolMap, TableInfo};

#[derive(Debug, Clone, Copy)]
pub(crate) enum Stage {
    /// READ the CVT at `off` (with CAS(lock) first if `lock`).
    Cvt { off: u64, lock: bool },
    /// READ a bucket of the item's chain; `pending`: a claimed empty slot seen so far.
    Bucket { at: u64, hops: u64, pending: bool },
    /// READ the pre-image chunks that rebuild the version selected from the newest value.
    Value { off: u64 },
    /// Version chains (`motor.versions`): READ the next node of the record's chain, `left`
    /// nodes to go; then, if `value`, the version's value (which the walk's last node holds:
    /// the rebuild's READs stand in for that node).
    Hop { off: u64, left: u32, value: bool },
}

pub(crate) enum Next {
    Done,
    Again(Stage),
    /// Read again (a torn or locked record): counts against the reread limit.
    Reread(Stage),
    Fail(AbortReason),
}

/// Execution: fetch `accesses` (new items, or read-only items now wanted for update).
pub(crate) async fn execute(tx: &mut Tx<'_, Motor>, accesses: &[Access]) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    let mut work = std::mem::take(&mut tx.s.work);
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
            let early = locks_early(tx);
            let it = &mut tx.items[i];
            if a.for_update && !it.rw {
                it.rw = true;
                if !early {
                    // Locked at commit, if written, under the version already read.
                    continue;
                }
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
                lock: a.for_update && locks_early(tx),
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
        tx.s.work = work;
        return Ok(());
    }
    start(tx)
        .await
        .map_err(|()| abort(AbortReason::ReplicaFailure, &tx.items[work[0].0]))?;
    run_stages(tx, work).await
}

/// Runs items through their stages, one doorbell batch per round, until each is done.
pub(crate) async fn run_stages(
    tx: &mut Tx<'_, Motor>,
    mut work: Vec<(usize, Stage)>,
) -> Result<(), Abort> {
    let scratch = &mut tx.s;
    let mut next = std::mem::take(&mut scratch.next);
    let mut ids = std::mem::take(&mut scratch.ids);
    let mut spans = std::mem::take(&mut scratch.spans);
    let r = stage_rounds(tx, &mut work, &mut next, &mut ids, &mut spans).await;
    let scratch = &mut tx.s;
    // A caller's own `work` (not the scratch's) replaces the scratch's only if it is larger.
    if work.capacity() >= scratch.work.capacity() {
        scratch.work = work;
    }
    (scratch.next, scratch.ids, scratch.spans) = (next, ids, spans);
    r
}

/// [`run_stages`]' rounds, in the vectors it lends.
pub(crate) async fn stage_rounds(
    tx: &mut Tx<'_, Motor>,
    work: &mut Vec<(usize, Stage)>,
    next: &mut Vec<(usize, Stage)>,
    ids: &mut Vec<OpId>,
    spans: &mut Vec<(usize, usize)>,
) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    let mut rereads = 0u32;
    while !work.is_empty() {
        // Commits seen ended while the last round was judged: this round's READs come after.
        tx.st.suspects.forget_ended();
        ids.clear();
        spans.clear();
        if work
            .iter()
            .any(|w| matches!(w.1, Stage::Cvt { lock: true, .. }))
        {
            journal::ready_tx(tx).await?;
        }
        for &(i, stage) in work.iter() {
            let start = ids.len();
            post_stage(tx, &map, i, stage, ids);
            spans.push((start, ids.len()));
        }
        if tx.c.ep.post().await.is_err() {
            // A memory node failed: this round's lock CASes on the live ones may have taken
            // their locks, which the abort would not know to give back.
            let cased: Vec<(NodeId, u64, u64)> = work
                .iter()
                .filter_map(|&(i, stage)| match stage {
                    Stage::Cvt { off, lock: true } => {
                        Some((table(&map, tx.items[i].table).primary(), off, 0))
                    }
                    _ => None,
                })
                .collect();
            let owner = tx.c.owner;
            crate::mechanisms::lock::give_back_after_failure(tx, &cased, owner).await;
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
        if !tx.st.give_back.is_empty() {
            let z = 0u64.to_le_bytes();
            for (n, off) in tx.st.give_back.drain(..) {
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

pub(crate) fn post_stage(
    tx: &mut Tx<'_, Motor>,
    map: &PoolMap,
    i: usize,
    stage: Stage,
    ids: &mut Vec<OpId>,
) {
    let it = &tx.items[i];
    let t = table(map, it.table);
    let p = t.primary();
    if let Stage::Cvt { off, lock: true } = stage {
        journal::note(tx.c, Via::OneSided, p, off);
    }
    let ep = &mut tx.c.ep;
    match stage {
        Stage::Cvt { off, lock } => {
            if lock {
                ids.push(ep.cas(p, off, 0, tx.c.owner));
            }
            ids.push(ep.read(p, off, t.record_bytes as usize));
        }
        Stage::Bucket { at, .. } => ids.push(ep.read(p, at, t.bucket_bytes as usize)),
        Stage::Hop { off, .. } => ids.push(ep.read(p, off, chain::node_bytes(t))),
        Stage::Value { off } => {
            let k = codec(t);
            let st = it.ext.as_ref().expect("selected");
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

pub(crate) fn on_stage(
    tx: &mut Tx<'_, Motor>,
    map: &PoolMap,
    i: usize,
    stage: Stage,
    ops: &[OpId],
) -> Next {
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
            let mut st = tx.s.state(t.value_size as usize);
            let rec = tx.c.ep.bytes(*ops.next().expect("cvt"));
            let MvState { cvt, base, .. } = &mut *st;
            let read = codec(t).decode_into(rec, cvt, base);
            on_cvt(tx, t, i, off, st, read)
        }
        Stage::Bucket { at, hops, pending } => on_bucket(tx, t, i, at, hops, pending, ops[0]),
        Stage::Hop { off, left, value } => chain_walk(off, left - 1, value),
        Stage::Value { off } => {
            let k = codec(t);
            let it = &mut tx.items[i];
            let st = it.ext.as_ref().expect("selected");
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
pub(crate) fn on_cvt(
    tx: &mut Tx<'_, Motor>,
    t: &TableInfo,
    i: usize,
    off: u64,
    mut st: Box<MvState>,
    read: Result<(), Torn>,
) -> Next {
    match on_decoded(tx, t, i, off, &st, read) {
        Ok((next, v0)) => {
            st.v0 = v0;
            let next = walk_chain(tx, i, off, &st, next);
            if let Some(old) = tx.items[i].ext.replace(st) {
                tx.s.give_state(old);
            }
            next
        }
        Err(next) => {
            tx.s.give_state(st);
            next
        }
    }
}

/// Whether read-write items are locked with their first READ (Motor), not at commit
/// (`motor.lock_at_commit`, FaRMv2-DM's dedicated lock round trip).
pub(crate) fn locks_early(tx: &Tx<'_, Motor>) -> bool {
    !tx.c.cfg.motor.lock_at_commit
}

/// Version chains: the walk to the version item `i` chose in `st`, read as a CVT, before
/// `next` (done, or the rebuild's READs, which stand in for the walk's last node).
fn walk_chain(tx: &Tx<'_, Motor>, i: usize, off: u64, st: &MvState, next: Next) -> Next {
    let layout = tx.c.cfg.motor.versions;
    if layout == VersionLayout::Cvt {
        return next;
    }
    let it = &tx.items[i];
    // Under our lock the newest version is the one read; else our snapshot's.
    let ts = if it.locked && it.offset == Some(off) {
        u64::MAX
    } else {
        tx.st.ts_start
    };
    let nodes = chain::nodes(&st.cvt, ts, layout);
    match next {
        Next::Done => chain_walk(off, nodes, false),
        Next::Again(Stage::Value { .. }) => chain_walk(off, nodes.saturating_sub(1), true),
        other => other,
    }
}

/// The rest of a chain walk: `left` nodes, then the version's value if `value`.
fn chain_walk(off: u64, left: u32, value: bool) -> Next {
    match (left, value) {
        (0, false) => Next::Done,
        (0, true) => Next::Again(Stage::Value { off }),
        _ => Next::Again(Stage::Hop { off, left, value }),
    }
}

/// [`on_cvt`] for the CVT and newest value in `st` (if `read` is not torn): `Ok` with the
/// cell of the version read (if it has a value) when the item keeps them, `Err` when it keeps
/// nothing of this read.
pub(crate) fn on_decoded(
    tx: &mut Tx<'_, Motor>,
    t: &TableInfo,
    i: usize,
    off: u64,
    st: &MvState,
    read: Result<(), Torn>,
) -> Result<(Next, Option<usize>), Next> {
    let (table_id, key, rw, locked) = {
        let it = &tx.items[i];
        (it.table, it.key, it.rw, it.locked)
    };
    let ours = locked && tx.items[i].offset == Some(off);
    let again = Stage::Cvt {
        off,
        lock: rw && !ours && locks_early(tx),
    };
    if read.is_err() {
        return Err(Next::Reread(again));
    }
    let h = st.cvt.header;
    if !h.valid || h.table != table_id || h.key != key {
        return Err(on_stale(tx, t, i, off, ours));
    }
    tx.c.cache.insert(table_id, key, off);
    tx.items[i].offset = Some(off);
    if !ours && committing(tx, h.lock) {
        // Someone is committing: its commit timestamp may be below our start and its versions
        // not installed yet. Read again until it is done. (A lock without the mark is a
        // writer still executing: it will take its commit timestamp after this READ, above
        // our start, so the versions we may see are all there.) With a local oracle, a
        // coordinator whose commit has ended since we copied its bit is forgotten from the
        // next round on: a READ posted then sees that commit installed, and a lock the
        // coordinator holds then is a later transaction's.
        ended(tx, h.lock);
        return Err(Next::Reread(Stage::Cvt { off, lock: false }));
    }
    choose_version(tx, t, i, off, ours, st)
}

/// A stale cache entry (or a slot that lost a race): look the key up in its chain.
fn on_stale(tx: &mut Tx<'_, Motor>, t: &TableInfo, i: usize, off: u64, ours: bool) -> Next {
    let (table_id, key) = (tx.items[i].table, tx.items[i].key);
    tx.c.cache.invalidate(table_id, key);
    if ours {
        // Give the wrong slot's lock back, once this round's results are read.
        tx.st.give_back.push((t.primary(), off));
        let it = &mut tx.items[i];
        it.locked = false;
        it.offset = None;
    }
    Next::Again(Stage::Bucket {
        at: t.home_bucket(key),
        hops: 0,
        pending: false,
    })
}

/// The version item `i` reads in the CVT of `st`: the newest under our lock
/// (first-committer-wins), else the one of our snapshot.
fn choose_version(
    tx: &mut Tx<'_, Motor>,
    t: &TableInfo,
    i: usize,
    off: u64,
    ours: bool,
    st: &MvState,
) -> Result<(Next, Option<usize>), Next> {
    let cvt = &st.cvt;
    let ts = tx.st.ts_start;
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
        Pick::Version(v0) => read_version(it, t, off, ours, st, v0),
    }
}

/// Version `v0` of the CVT in `st` into the item: the newest value as read, or an older one
/// rebuilt from it and the inline pre-images (or, with pre-image chunks, a READ of them).
fn read_version(
    it: &mut Item<Option<Box<MvState>>>,
    t: &TableInfo,
    off: u64,
    ours: bool,
    st: &MvState,
    v0: usize,
) -> Result<(Next, Option<usize>), Next> {
    let k = codec(t);
    let (cvt, base) = (&st.cvt, &st.base);
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

/// A bucket of item `i`'s chain was read (by `read`).
pub(crate) fn on_bucket(
    tx: &mut Tx<'_, Motor>,
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
        if rw && locks_early(tx) {
            return Next::Again(Stage::Cvt { off, lock: true });
        }
        let mut st = tx.s.state(t.value_size as usize);
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
    it.ext = None;
    Next::Done
}
