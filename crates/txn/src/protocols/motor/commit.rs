//! Motor's commit: the mark round, validation at the commit timestamp, the install of the
//! op log and the new CVTs on every replica, the release.

use super::execute::Stage;
use super::{chain, codec, committing, Motor, MvState, COMMITTING};
use crate::abort::{Abort, AbortReason};
use crate::item::{Item, NewValue};
use crate::mechanisms::rpc::Via;
use crate::mechanisms::{abort, journal, table};
use crate::tx::Tx;
use dtxn_fabric::{FabricError, NodeId, OpId};
use dtxn_store::cvt::{Cvt, MvCodec, Pick, Vcell, CREATED, FRESH, TOMBSTONE, VALID};
use dtxn_store::log::{encode_head, encode_item_as, ItemKind, LogStatus, HEAD_BYTES};
use dtxn_store::record::RecordHeader;
use dtxn_store::{PoolMap, TableInfo};
use std::ops::Range;

/// Marks the lock of every record we write as committing, and claims the free slots our
/// inserts chose (CAS + READ: still free), before the commit timestamp is taken (one round
/// trip: the marks must land before the FAA, which is on another QP).
///
/// With `motor.lock_at_commit` (FaRMv2-DM's dedicated lock round trip) the records we write,
/// read unlocked during execution, are locked in the same round trip: a CAS from 0 to our id
/// (and the mark, with the pool's oracle: with a local one our committing bit is set
/// already), the record's READ behind it on its QP, journaled as execution's locks are. The
/// version read must still be the newest (first-committer-wins); the record as read under
/// the lock replaces the one execution read, as the base of the new CVT.
pub(crate) async fn mark_committing(tx: &mut Tx<'_, Motor>, marks: bool) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    let value = tx.c.owner | COMMITTING;
    let lock_value = if marks { value } else { tx.c.owner };
    if tx
        .items
        .iter()
        .any(|it| it.new != NewValue::Keep && (it.cold || !it.locked))
    {
        journal::ready_tx(tx).await?;
    }
    let mut claims = std::mem::take(&mut tx.s.claims);
    claims.clear();
    // Locks taken now (`lock_at_commit`): (item, CAS, READ of the record).
    let mut late: Vec<(usize, OpId, OpId)> = Vec::new();
    let mut any = false;
    for (i, it) in tx.items.iter().enumerate() {
        if it.new == NewValue::Keep {
            continue;
        }
        let t = table(&map, it.table);
        let off = it.offset.expect("written items have a slot");
        if it.cold {
            journal::note(tx.c, Via::OneSided, t.primary(), off);
            let c = tx.c.ep.cas(t.primary(), off, 0, value);
            claims.push((i, c, tx.c.ep.read(t.primary(), off, 64)));
            any = true;
        } else if !it.locked {
            // Read unlocked: only with `lock_at_commit` (else every record we write was
            // locked with its first READ, or is an insert's claim).
            debug_assert!(tx.c.cfg.motor.lock_at_commit);
            journal::note(tx.c, Via::OneSided, t.primary(), off);
            let c = tx.c.ep.cas(t.primary(), off, 0, lock_value);
            late.push((
                i,
                c,
                tx.c.ep.read(t.primary(), off, t.record_bytes as usize),
            ));
            any = true;
        } else if marks {
            // Our own lock word: other coordinators only CAS it (and fail), so a WRITE is
            // safe.
            tx.c.ep.write(t.primary(), off, &value.to_le_bytes());
            any = true;
        }
    }
    if !any {
        tx.s.claims = claims;
        return Ok(());
    }
    let first = tx
        .items
        .iter()
        .find(|i| i.new != NewValue::Keep)
        .expect("a write");
    if tx.c.ep.post().await.is_err() {
        let fail = abort(AbortReason::ReplicaFailure, first);
        // A memory node failed: claims and locks on the live ones may have taken their
        // slots, which the abort would not know to give back (a CAS back from our word: on a
        // dead node, nothing of ours is left), once our earlier releases there have landed.
        let nodes: Vec<NodeId> = claims
            .iter()
            .chain(late.iter())
            .map(|&(i, _, _)| table(&map, tx.items[i].table).primary())
            .collect();
        crate::mechanisms::lock::await_releases(&mut tx.c.ep, nodes).await;
        for (&(i, _, _), word) in claims
            .iter()
            .map(|c| (c, value))
            .chain(late.iter().map(|c| (c, lock_value)))
        {
            let it = &tx.items[i];
            let p = table(&map, it.table).primary();
            let off = it.offset.expect("written items have a slot");
            tx.c.ep.cas(p, off, word, 0);
        }
        tx.s.claims = claims;
        let _ = tx.c.ep.post().await;
        return Err(fail);
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
    tx.s.claims = claims;
    for (i, c, r) in late {
        if !tx.c.ep.cas_ok(c) {
            failed.get_or_insert(abort(AbortReason::LockConflict, &tx.items[i]));
            continue;
        }
        let t = table(&map, tx.items[i].table);
        let it = &mut tx.items[i];
        it.locked = true;
        if let Err(e) = relock(it, codec(t), tx.c.ep.bytes(r)) {
            failed.get_or_insert(e);
        }
    }
    failed.map_or(Ok(()), Err)
}

/// A record we write, read unlocked during execution, as read again under the lock we just
/// took (`rec`): still the version read as its newest, whose CVT and value replace the item's.
fn relock(it: &mut Item<Option<Box<MvState>>>, k: MvCodec, rec: &[u8]) -> Result<(), Abort> {
    let version = it.version;
    let Some(st) = it.ext.as_mut() else {
        // Written without a CVT read: not a record this path locks (inserts are claims).
        return Err(abort(AbortReason::BadRequest, it));
    };
    let MvState { cvt, base, v0 } = &mut **st;
    let read = k.decode_into(rec, cvt, base);
    let h = cvt.header;
    if read.is_err()
        || !h.valid
        || h.table != it.table
        || h.key != it.key
        || seen_at(cvt, u64::MAX) != Some(version)
    {
        return Err(abort(AbortReason::Validation, it));
    }
    *v0 = (0..cvt.cells.len()).find(|&w| {
        let c = cvt.cells[w];
        c.valid() && !c.tombstone() && c.version == version
    });
    Ok(())
}

/// The items read without our lock still show, at the commit timestamp `tc`, the version
/// read: no other version up to `tc`, and no writer committing (which may commit below us).
pub(crate) async fn validate(tx: &mut Tx<'_, Motor>, tc: u64) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    let scratch = &mut tx.s;
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
    let scratch = &mut tx.s;
    (scratch.work, scratch.next, scratch.ids) = (work, next, ids);
    r
}

/// [`validate`]'s rounds, from the items in `work`, in the vectors it lends.
pub(crate) async fn validation_rounds(
    tx: &mut Tx<'_, Motor>,
    map: &PoolMap,
    tc: u64,
    work: &mut Vec<(usize, Stage)>,
    next: &mut Vec<(usize, Stage)>,
    ids: &mut Vec<OpId>,
) -> Result<(), Abort> {
    let mut rounds = 0;
    while !work.is_empty() {
        // A chain walk's next node is no reread.
        if work.iter().any(|w| !matches!(w.1, Stage::Hop { .. })) {
            rounds += 1;
        }
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
                Stage::Hop { off, .. } => tx.c.ep.read(t.primary(), off, chain::node_bytes(t)),
                Stage::Value { .. } => unreachable!("validation reads CVTs and chains"),
            });
        }
        if tx.c.ep.post().await.is_err() {
            return Err(abort(AbortReason::ReplicaFailure, &tx.items[work[0].0]));
        }
        next.clear();
        for (&(i, stage), &id) in work.iter().zip(ids.iter()) {
            match stage {
                Stage::Cvt { .. } => check_cvt(tx, map, (i, stage), id, tc, next)?,
                Stage::Bucket { at, hops, .. } => {
                    check_bucket(tx, map, (i, stage), id, (at, hops, tc), next)?
                }
                Stage::Hop { off, left, .. } if left > 1 => next.push((
                    i,
                    Stage::Hop {
                        off,
                        left: left - 1,
                        value: false,
                    },
                )),
                Stage::Hop { .. } => {}
                Stage::Value { .. } => unreachable!(),
            }
        }
        std::mem::swap(work, next);
    }
    Ok(())
}

/// Validation of an item read at its CVT (READ `id`): still our version at `tc`, nobody
/// committing. A torn READ goes to `next`, to be read again.
fn check_cvt(
    tx: &Tx<'_, Motor>,
    map: &PoolMap,
    (i, stage): (usize, Stage),
    id: OpId,
    tc: u64,
    next: &mut Vec<(usize, Stage)>,
) -> Result<(), Abort> {
    let it = &tx.items[i];
    let t = table(map, it.table);
    let fail = abort(AbortReason::Validation, it);
    let bytes = tx.c.ep.bytes(id);
    let Ok(cvt) = codec(t).decode_cvt(bytes) else {
        next.push((i, stage));
        return Ok(());
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
    // Version chains: a walk to the version seen at `tc` (the answer known from the CVT, a
    // chain would read its nodes to find it).
    let left = chain::nodes(&cvt, tc, tx.c.cfg.motor.versions);
    if left > 0 {
        let Stage::Cvt { off, .. } = stage else {
            unreachable!("a CVT's check")
        };
        next.push((
            i,
            Stage::Hop {
                off,
                left,
                value: false,
            },
        ));
    }
    Ok(())
}

/// Validation of a key read absent, one bucket of its chain (READ `id`, bucket `at` after
/// `hops` overflow links): no insert of it committing or committed up to `tc`. The walk's
/// next bucket, or a torn READ again, goes to `next`.
fn check_bucket(
    tx: &Tx<'_, Motor>,
    map: &PoolMap,
    (i, stage): (usize, Stage),
    id: OpId,
    (at, hops, tc): (u64, u64, u64),
    next: &mut Vec<(usize, Stage)>,
) -> Result<(), Abort> {
    let owner = tx.c.owner;
    let it = &tx.items[i];
    let t = table(map, it.table);
    let fail = abort(AbortReason::Validation, it);
    let bytes = tx.c.ep.bytes(id);
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
                if !committing(tx, cvt.header.lock) && seen_at(&cvt, tc) == Some(it.version) => {}
            Ok(_) => return Err(fail),
            Err(_) => {
                next.push((i, stage));
                return Ok(());
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
    Ok(())
}

/// The version a snapshot at `ts` reads in `cvt` (a tombstone's or 0 when absent); `None` if
/// gone.
pub(crate) fn seen_at(cvt: &Cvt, ts: u64) -> Option<u64> {
    match cvt.select(ts) {
        Pick::Version(i) => Some(cvt.cells[i].version),
        Pick::Absent { version } => Some(version),
        Pick::Gone => None,
    }
}

/// What a commit writes for one record, on every replica; the bytes are ranges of the
/// buffer [`prepare`] fills.
#[derive(Debug)]
pub(crate) struct Install {
    table: u32,
    off: u64,
    /// The CVT with the new version, as backups get it (lock word 0).
    record: Range<usize>,
    /// Pre-image bar lines: (address, bytes).
    chunk: Option<(u64, Range<usize>)>,
}

/// The new CVT (and pre-image chunk) of every written item, into `out`, their bytes into
/// `bytes`.
pub(crate) fn prepare(
    tx: &Tx<'_, Motor>,
    map: &PoolMap,
    tc: u64,
    out: &mut Vec<Install>,
    bytes: &mut Vec<u8>,
) {
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
            restores: 0,
        };
        match &it.ext {
            Some(st) => cvt.cells.clone_from(&st.cvt.cells),
            None => k.free_cells(&mut cvt.cells),
        }
        let (chunk, value) = push_new_cell(it, &k, t, off, tc, &mut cvt, bytes);
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

/// The new version's cell pushed into the item's `cvt` (an update's pre-image lines into
/// `bytes`): returns the pre-image chunk, and the value the CVT holds.
fn push_new_cell<'a>(
    it: &'a Item<Option<Box<MvState>>>,
    k: &MvCodec,
    t: &TableInfo,
    off: u64,
    tc: u64,
    cvt: &mut Cvt,
    bytes: &mut Vec<u8>,
) -> (Option<(u64, Range<usize>)>, &'a Vec<u8>) {
    let mut chunk = None;
    // The value the CVT holds: the new one, or for a delete the newest as it was.
    let mut value = &it.value;
    match it.new {
        NewValue::Update => {
            let st = it.ext.as_ref().expect("read before update");
            // The old value: the newest, as read under our lock.
            let old = &st.base;
            debug_assert!(st.v0.is_some() && old.len() == it.value.len());
            let at = bytes.len();
            let (cell, start) = k.update_cell(cvt, old, &it.value, tc, bytes);
            chunk = start.map(|line| (t.bar_line_off(off, line), at..bytes.len()));
            k.push(cvt, cell);
        }
        NewValue::Delete => {
            value = &it.ext.as_ref().expect("read before delete").base;
            k.push(
                cvt,
                Vcell {
                    version: tc,
                    flags: VALID | TOMBSTONE,
                    ..Vcell::default()
                },
            );
        }
        NewValue::Insert => {
            let flags = if it.ext.is_some() {
                // Over a tombstone: versions before it cannot be rebuilt from the new
                // value; the tombstone stays, so snapshots after it still see the key
                // absent.
                let tomb = cvt.newest().map_or(0, |n| cvt.cells[n].version);
                MvCodec::drop_through(cvt, tomb.saturating_sub(1));
                VALID | CREATED
            } else {
                VALID | CREATED | FRESH
            };
            k.push(
                cvt,
                Vcell {
                    version: tc,
                    flags,
                    ..Vcell::default()
                },
            );
        }
        NewValue::Keep => unreachable!("filtered"),
    }
    (chunk, value)
}

/// Every replica of every written record in one round trip: on each memory node, first the
/// op log (the new records, for a recovery agent to finish the commit), then each record's
/// pre-images, then its CVT. WRITEs on one QP apply in order (G4), and a crash leaves a
/// prefix of each QP's ops: a node that received any new record holds the whole log entry.
pub(crate) async fn install(tx: &mut Tx<'_, Motor>, tc: u64) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    let first = tx
        .items
        .iter()
        .find(|i| i.new != NewValue::Keep)
        .expect("a write");
    let (fail, full) = (
        abort(AbortReason::ReplicaFailure, first),
        abort(AbortReason::LogFull, first),
    );
    let mut installs = std::mem::take(&mut tx.s.installs);
    let mut bytes = std::mem::take(&mut tx.s.bytes);
    prepare(tx, &map, tc, &mut installs, &mut bytes);
    // More coordinators than log slices, or an entry too big: a sizing problem, refused
    // before anything is written.
    let Some((slice, slice_bytes)) = tx.c.log_slice else {
        return Err(full);
    };
    // The entry, encoded in place (the layout of `LogEntry::encode`): the new records, each
    // followed by its pre-image lines.
    let mut log = std::mem::take(&mut tx.st.log);
    log.clear();
    log.resize(HEAD_BYTES, 0);
    let items = encode_redo_items(&installs, &bytes, &mut log);
    if log.len() as u64 > slice_bytes {
        tx.st.log = log;
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
    let mut nodes = std::mem::take(&mut tx.s.nodes);
    // Memory nodes found down for good (failover): the commit finishes on the live replicas.
    let mut down: Vec<NodeId> = Vec::new();
    let r = loop {
        let args = (&installs[..], &bytes[..], slice, &log[..], &down[..]);
        match post_install(tx, &map, &mut nodes, args).await {
            // With failover a node down never comes back into this view, and no undo log
            // could roll the records back: validated and logged, the commit is finished on
            // every live replica (the same WRITEs again; we hold every primary's lock, so
            // nobody else writes these records). The promoted backup's record is then
            // installed before the view that promotes it is active (our acknowledgement
            // waits for these ops to land), and our release clears the live primaries.
            Err((FabricError::NodeDown(n), _))
                if tx.c.failover && !map.holds_control_alone(n) && !down.contains(&n) =>
            {
                down.push(n)
            }
            r => break r,
        }
    };
    tx.st.log = log;
    let scratch = &mut tx.s;
    (scratch.installs, scratch.bytes, scratch.nodes) = (installs, bytes, nodes);
    let records_posted = !matches!(r, Err((_, false)));
    if records_posted {
        tx.installed = true;
        for it in tx.items.iter_mut().filter(|i| i.new != NewValue::Keep) {
            it.install = Some(tc);
        }
    }
    if r.is_err() {
        // Some replicas may hold the new versions (or, with `flush`, the op log only):
        // validated, logged somewhere, so recovery may roll it forward from the log; the
        // locks stay held for it (no reader trusts a committing CVT).
        tx.st.keep_locks = true;
        return Err(fail);
    }
    Ok(())
}

/// The commit's verbs, on every replica but those `down`, awaited: the op log, (`flush`: made
/// durable first), the records. An error says whether the records' WRITEs were posted.
async fn post_install(
    tx: &mut Tx<'_, Motor>,
    map: &PoolMap,
    nodes: &mut Vec<NodeId>,
    (installs, bytes, slice, log, down): (&[Install], &[u8], u64, &[u8], &[NodeId]),
) -> Result<(), (FabricError, bool)> {
    write_log(tx, map, installs, nodes, slice, log, down);
    if tx.c.cfg.flush {
        // Persistent memory: the op log is durable before any record WRITE can be (a FLUSH
        // orders nothing after it, so it is awaited: one more round trip, as Motor's
        // READ-after-WRITE persist of its op log).
        for &n in nodes.iter() {
            tx.c.ep.flush(n);
        }
        tx.c.ep.post().await.map_err(|e| (e, false))?;
    }
    if tx.c.cfg.motor.coalescent_commit {
        write_records(tx, map, installs, bytes, down, 0..usize::MAX);
    } else {
        // FaRMv2-DM: the backups, awaited, then the primaries (the op log is everywhere
        // already: recovery rolls either half forward).
        write_records(tx, map, installs, bytes, down, 1..usize::MAX);
        tx.c.ep.post().await.map_err(|e| (e, true))?;
        write_records(tx, map, installs, bytes, down, 0..1);
    }
    if tx.c.cfg.flush {
        // Each backup once, after its last WRITE (FORD's selective remote flush: a lost
        // primary is rebuilt from its backups).
        for &n in nodes.iter() {
            if installs
                .iter()
                .any(|w| table(map, w.table).backups().contains(&n))
            {
                tx.c.ep.flush(n);
            }
        }
    }
    tx.c.ep.post().await.map_err(|e| (e, true))
}

/// The op log's items, after its head in `log`: the new records, each followed by its
/// pre-image lines. Returns how many.
fn encode_redo_items(installs: &[Install], bytes: &[u8], log: &mut Vec<u8>) -> u32 {
    let mut items = 0u32;
    for w in installs {
        encode_item_as(
            ItemKind::RedoRecord,
            w.table,
            w.off,
            false,
            &bytes[w.record.clone()],
            log,
        );
        items += 1;
        if let Some((at, chunk)) = &w.chunk {
            let chunk = &bytes[chunk.clone()];
            encode_item_as(ItemKind::RedoBar, w.table, *at, false, chunk, log);
            items += 1;
        }
    }
    items
}

/// The op log's WRITE to every memory node that holds a replica of a written record (into
/// `nodes`; but those `down`), to the coordinator's log `slice`.
fn write_log(
    tx: &mut Tx<'_, Motor>,
    map: &PoolMap,
    installs: &[Install],
    nodes: &mut Vec<NodeId>,
    slice: u64,
    log: &[u8],
    down: &[NodeId],
) {
    nodes.clear();
    nodes.extend(
        installs
            .iter()
            .flat_map(|w| table(map, w.table).replicas.iter().copied())
            .filter(|n| !down.contains(n)),
    );
    nodes.sort_unstable();
    nodes.dedup();
    for &n in nodes.iter() {
        tx.c.ep.write(n, slice, log);
    }
}

/// Each record's WRITEs on the replicas whose rank is in `ranks` (0: the primary): its
/// pre-image lines, then its CVT (the primary's under our lock, marked committing); none to
/// the nodes `down`.
fn write_records(
    tx: &mut Tx<'_, Motor>,
    map: &PoolMap,
    installs: &[Install],
    bytes: &[u8],
    down: &[NodeId],
    ranks: Range<usize>,
) {
    let owner = tx.c.owner;
    for w in installs {
        let t = table(map, w.table);
        let record = &bytes[w.record.clone()];
        for (rank, &n) in t.replicas.iter().enumerate() {
            if down.contains(&n) || !ranks.contains(&rank) {
                continue;
            }
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
}

/// Unlock, after every replica is written: posted detached, nobody waits.
pub(crate) fn release(tx: &mut Tx<'_, Motor>) {
    if tx.st.keep_locks {
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
