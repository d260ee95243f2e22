//! FORD (Zhang et al., FAST'22 and TOS'23): OCC on disaggregated memory; and, built from the
//! same mechanisms, the baselines FORD compares against, FaRM and DrTM+H, as FORD's paper
//! re-implemented them for disaggregated memory (all one-sided; section 3.1 of the digest).
//!
//! - **FaRM** (`--protocol farm`): execute (READ everything, unlocked), lock (CAS), validate
//!   (READ the version of everything read), commit backups, commit primaries: 5 RTs. (The
//!   unlock is the background release, as in FORD, so that recovery can tell a complete commit
//!   from a partial one.)
//! - **DrTM+H** (`--protocol drtmh`): execute, lock and validate in one round, commit backups,
//!   commit primaries and unlock: 4 RTs. The merged round alone admits write skew (each
//!   transaction's READs may run before the other's CAS), so dtxn validates the read-only items
//!   once more in the commit-backups round, when every lock is held, at no extra round trip
//!   (rolling the backups back if that fails).
//!
//! Phases, with their verbs and critical-path round trips (addresses cached):
//!
//! 1. **Execute** (1 RT per batch of reads). Read-write items: CAS(lock) + READ(record) on the
//!    primary in one doorbell batch (*hitchhiked locking*, G6); a failed CAS aborts at once
//!    (no-wait). Read-only items: READ(record) from the primary, or a backup with
//!    `backup_reads`. Cold items (address not cached) READ their bucket chain first; cold
//!    read-write items are locked at validation. Then the **undo log** (old images of the
//!    read-write set) goes to every replica's log slice in the background, while the
//!    application's logic runs.
//! 2. **Validate** (1 RT, skipped when there is nothing to validate). Cold read-write items:
//!    CAS(lock) + READ(header), version unchanged. Read-only items: READ(header) from the
//!    replica they were read from, version unchanged and not invisible. Read-only
//!    transactions are validated too, even with a single item.
//! 3. **Commit** (1 RT, *coalescent*). After the undo log's completion, every replica of every
//!    written record gets the new record in place in one batch, its lock word carrying the
//!    *invisible* bit (primary: owner | invisible; backups: invisible); with `flush`, each
//!    backup is flushed after its last WRITE (*selective remote flush*). A failed replica rolls
//!    the transaction back from its old images.
//! 4. **Release** (detached, off the critical path): lock words to 0 (unlock and make visible),
//!    the log entry to committed.
//!
//! So a read-write transaction without read-only items costs 2 RTs, with read-only items 3.
//!
//! **Localized validation** (with a [`crate::Vcache`]): read-only items whose version the
//! compute process's Vcache holds are validated locally, so validation costs no round trip on
//! a hit (read-write with read-only items: 2 RTs). See `vcache.rs` for what writers keep in it.
//!
//! Inserts lock the key's chain (the home bucket's insert lock) at execution and a free slot at
//! commit; reads of absent keys are validated by re-reading the chain (no phantoms). A deleted
//! record's slot keeps its key and version as a tombstone, reused only by an insert of the
//! same key: so a key's versions only grow, across deletes and re-inserts, and a read of an
//! absent key reports the version it observed. (The price: deleted keys keep their slots.)
//!
//! Where dtxn differs from the published FORD, and why (reference/ford.md section 9):
//! - A READ of a record is trusted only if its per-line version stamps agree (the store's
//!   torn-read detection): FORD's "invisible bit, then update in place" read in one READ is
//!   the sync paper's broken scheme S5. The invisible bit remains, for what it is right for:
//!   atomic visibility across items (a reader re-reads an invisible record, so it never sees
//!   one item of a committing transaction new and another old without validation noticing).
//! - Versions are `old + 1` under the lock: monotonic per key, never repeated, across any
//!   number of compute nodes.
//! - The commit writes lock word, version and data of a record in one WRITE: line 0 carries
//!   both, so no reader sees the new version without the invisible bit.

use crate::abort::{Abort, AbortReason};
use crate::config::Protocol;
use crate::txn::{Access, Item, NewValue, TxKind, Txn};
use crate::vcache::Check;
use dtxn_fabric::{NodeId, OpId};
use dtxn_store::cache::{check_slot, SlotCheck};
use dtxn_store::log::{encode_head, LogStatus, HEAD_BYTES, STATUS_OFF};
use dtxn_store::record::{RecordHeader, SingleVersion, HEADER_BYTES};
use dtxn_store::{PoolMap, TableInfo};

/// Bit 63 of a lock word: the record is being installed by a committing transaction.
pub(crate) const INVISIBLE: u64 = 1 << 63;

/// Vectors FORD's phases reuse across rounds and transactions (one set per coordinator), so
/// that a transaction's hot path allocates nothing once they have grown. A phase takes one with
/// `mem::take` and puts it back when it finishes; a rare abort just drops it. The phases where
/// most aborts happen under contention (execution's lock conflicts, validation) put theirs
/// back on an abort too: every aborted attempt would otherwise grow them again.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// Execution.
    execute: ExecuteScratch,
    /// Memory nodes: those the undo log goes to; at commit, the backups to flush.
    nodes: Vec<NodeId>,
    /// Commit: a written record, encoded once for all its replicas.
    record: Vec<u8>,
    /// Lock rounds: each item's (CAS, READ of its header).
    locks: Vec<(usize, Option<OpId>, Option<OpId>)>,
    /// Validation rounds: each item's READ of its header.
    checks: Vec<(usize, OpId)>,
    /// Validation of absent keys: the chains' walks, as (item, bucket being read, overflow
    /// hops, greatest tombstone version so far), and the READs of a round.
    absent: Vec<(usize, u64, u64, u64)>,
    absent_reads: Vec<OpId>,
    /// Inserts.
    insert: InsertScratch,
}

/// What [`execute`] keeps across calls (given back after an abort too).
#[derive(Debug, Default)]
struct ExecuteScratch {
    /// Execution rounds: (item, stage, version it must still have).
    work: Vec<(usize, Stage, Option<u64>)>,
    next: Vec<(usize, Stage, Option<u64>)>,
    /// Execution rounds: each item's (CAS, READ).
    ids: Vec<(Option<OpId>, OpId)>,
}

/// What [`insert`] keeps across calls (given back after an abort too, with the free slots'
/// images, which are pool buffers).
#[derive(Debug, Default)]
struct InsertScratch {
    /// The items to place, in row order.
    todo: Vec<usize>,
    /// One walk per item to place, and the READ of the bucket it is at.
    walks: Vec<Walk>,
    reads: Vec<OpId>,
    /// The chain locks to take, as (item, node, address, CAS).
    cas: Vec<(usize, NodeId, u64, OpId)>,
    /// The slots the transaction's items occupy already.
    taken: Vec<u64>,
    /// Per walk: how many rows share its chain.
    sharing: Vec<usize>,
    /// Free slots found, as (walk, slot, the slot's image in a buffer from the pool).
    free: Vec<(usize, u64, Vec<u8>)>,
    /// The slots given to rows so far.
    placed: Vec<u64>,
    /// Overflow buckets chained by this call: (chain, bucket, its next unused slot).
    fresh: Vec<((NodeId, u64), u64, u32)>,
}

/// What an execution round does for one item.
#[derive(Debug, Clone, Copy)]
enum Stage {
    /// READ the record at this offset, with CAS(lock) first if `lock`.
    Record { off: u64, lock: bool },
    /// READ a bucket of the item's chain, reached after `hops` overflow links.
    Bucket { at: u64, hops: u64 },
}

pub(crate) fn abort(reason: AbortReason, it: &Item) -> Abort {
    Abort {
        reason,
        table: it.table,
        key: it.key,
    }
}

#[inline]
pub(crate) fn table(map: &PoolMap, id: u32) -> &TableInfo {
    map.table(id).expect("checked when the item was added")
}

/// Execution: fetch `accesses` (new items, or read items now wanted for update).
pub(crate) async fn execute(tx: &mut Txn<'_>, accesses: &[Access]) -> Result<(), Abort> {
    let mut s = std::mem::take(&mut tx.c.scratch.execute);
    let r = execute_rounds(tx, accesses, &mut s).await;
    tx.c.scratch.execute = s;
    r?;
    log_undo(tx).await
}

/// [`execute`]'s rounds, with their vectors from the coordinator's scratch.
async fn execute_rounds(
    tx: &mut Txn<'_>,
    accesses: &[Access],
    s: &mut ExecuteScratch,
) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    // The baselines (FaRM, DrTM+H) read everything unlocked and lock at commit.
    let hitchhike = tx.c.cfg.protocol == Protocol::Ford && tx.c.cfg.ford.hitchhiked_locking;
    let trust_inv = tx.c.cfg.ford.trust_invisible_bit;
    // (item, stage, version it must still have: an upgraded read-only item)
    let ExecuteScratch { work, next, ids } = s;
    work.clear();
    if accesses.len() > 1 {
        for a in accesses {
            tx.c.cache.prefetch(a.table, a.key);
        }
    }
    for a in accesses {
        let bad = Abort {
            reason: AbortReason::BadRequest,
            table: a.table,
            key: a.key,
        };
        if a.for_update && tx.kind == TxKind::ReadOnly {
            return Err(bad);
        }
        if let Some(i) = tx.find(a.table, a.key) {
            let it = &mut tx.items[i];
            if a.for_update && !it.rw {
                it.rw = true;
                if it.image.capacity() == 0 {
                    // Read-only items have no image buffer: it is re-read now, under the lock.
                    let room = table(&map, a.table).record_bytes as usize;
                    it.image = tx.c.spare.take(0, room);
                }
                if let Some(off) = it.offset.filter(|_| it.exists) {
                    let v = it.version;
                    it.node = table(&map, a.table).primary();
                    work.push((i, Stage::Record { off, lock: true }, Some(v)));
                }
            }
            continue;
        }
        let Ok(t) = map.table(a.table) else {
            return Err(bad);
        };
        let node = if !a.for_update && tx.c.cfg.ford.backup_reads && t.replicas.len() > 1 {
            t.replicas[1]
        } else {
            t.primary()
        };
        let stage = match tx.c.cache.get(a.table, a.key) {
            Some(off) => Stage::Record {
                off,
                lock: a.for_update && hitchhike,
            },
            None => Stage::Bucket {
                at: t.home_bucket(a.key),
                hops: 0,
            },
        };
        let i = tx.push_new_item(t, a.key, a.for_update, node);
        work.push((i, stage, None));
    }
    let mut rereads = 0;
    while !work.is_empty() {
        ids.clear();
        for &(i, stage, _) in work.iter() {
            let it = &tx.items[i];
            let t = table(&map, it.table);
            let ep = &mut tx.c.ep;
            ids.push(match stage {
                Stage::Record { off, lock: true } => {
                    let c = ep.cas(t.primary(), off, 0, tx.c.owner);
                    (Some(c), ep.read(t.primary(), off, t.record_bytes as usize))
                }
                Stage::Record { off, lock: false } => {
                    (None, ep.read(it.node, off, t.record_bytes as usize))
                }
                Stage::Bucket { at, .. } => (None, ep.read(it.node, at, t.bucket_bytes as usize)),
            });
        }
        if tx.c.ep.post().await.is_err() {
            let first = abort(AbortReason::ReplicaFailure, &tx.items[work[0].0]);
            let cased: Vec<(NodeId, u64)> = work
                .iter()
                .filter_map(|&(i, stage, _)| match stage {
                    Stage::Record { off, lock: true } => {
                        Some((table(&map, tx.items[i].table).primary(), off))
                    }
                    _ => None,
                })
                .collect();
            give_back_after_failure(tx, &cased).await;
            return Err(first);
        }
        next.clear();
        let mut again = false;
        // Every completion of the round is looked at before an abort is reported, so that no
        // lock won in this round goes unrecorded (and unreleased).
        let mut failed = None;
        let mut give_back: Vec<(NodeId, u64)> = Vec::new();
        for (&(i, stage, expect), &(cas, read)) in work.iter().zip(ids.iter()) {
            let (table_id, key, rw) = (tx.items[i].table, tx.items[i].key, tx.items[i].rw);
            let t = table(&map, table_id);
            let codec = t.codec();
            match stage {
                Stage::Record { off, lock } => {
                    if let Some(c) = cas {
                        if !tx.c.ep.cas_ok(c) {
                            failed.get_or_insert(abort(AbortReason::LockConflict, &tx.items[i]));
                            continue;
                        }
                        tx.items[i].locked = true;
                        tx.items[i].offset = Some(off);
                    }
                    let it = &mut tx.items[i];
                    let bytes = tx.c.ep.bytes(read);
                    let decoded = if trust_inv {
                        Ok(codec.decode_unchecked(bytes, &mut it.value))
                    } else {
                        codec.decode(bytes, &mut it.value)
                    };
                    let Ok(h) = decoded else {
                        next.push((i, Stage::Record { off, lock: false }, expect));
                        again = true;
                        continue;
                    };
                    if check_slot(&h, table_id, key) == SlotCheck::Stale {
                        // The slot was freed or reused: drop the address, give back a lock
                        // taken through it, and find the record through its bucket.
                        tx.c.cache.invalidate(table_id, key);
                        if lock {
                            give_back.push((t.primary(), off));
                            it.locked = false;
                            it.offset = None;
                        }
                        let home = Stage::Bucket {
                            at: t.home_bucket(key),
                            hops: 0,
                        };
                        next.push((i, home, expect));
                        continue;
                    }
                    if !it.locked && h.lock & INVISIBLE != 0 {
                        next.push((i, Stage::Record { off, lock: false }, expect));
                        again = true;
                        continue;
                    }
                    if expect.is_some_and(|v| v != h.version) {
                        failed.get_or_insert(abort(AbortReason::Validation, it));
                        continue;
                    }
                    it.exists = true;
                    it.version = h.version;
                    it.offset = Some(off);
                    // The undo image, for items that may be written (a read-only item that
                    // is upgraded later is read again, under its lock).
                    it.image.clear();
                    if rw {
                        it.image.extend_from_slice(bytes);
                    }
                    // An item read for update without its lock (hitchhiking off) is locked at
                    // validation.
                    it.cold = rw && !it.locked;
                    if it.locked {
                        if let Some(v) = &tx.c.vcache {
                            v.lock(table_id, key, h.version, tx.c.owner);
                        }
                    }
                }
                Stage::Bucket { at: b, mut hops } => {
                    let bytes = tx.c.ep.bytes(read);
                    let scan = t.scan(b, bytes, key);
                    let it = &mut tx.items[i];
                    if b == t.home_bucket(key) {
                        it.version = 0;
                    }
                    // The key's tombstone may be in any bucket of the chain: the greatest seen
                    // is the version a read of the absent key observes.
                    if let Some((slot, _)) = scan.tombstone {
                        let v = codec.header(t.slot_bytes(bytes, slot)).version;
                        it.version = it.version.max(v);
                    }
                    if let Some((slot, off)) = scan.found {
                        tx.c.cache.insert(table_id, key, off);
                        let rec = t.slot_bytes(bytes, slot);
                        let decoded = if trust_inv {
                            Ok(codec.decode_unchecked(rec, &mut it.value))
                        } else {
                            codec.decode(rec, &mut it.value)
                        };
                        match decoded {
                            Ok(h) if h.lock & INVISIBLE == 0 => {
                                it.exists = true;
                                it.version = h.version;
                                it.offset = Some(off);
                                it.image.clear();
                                if rw {
                                    it.image.extend_from_slice(rec);
                                }
                                it.cold = rw;
                            }
                            _ => {
                                next.push((i, Stage::Record { off, lock: false }, expect));
                                again = true;
                            }
                        }
                    } else {
                        match next_bucket(t, scan.next, &mut hops) {
                            Ok(Some(at)) => next.push((i, Stage::Bucket { at, hops }, expect)),
                            Ok(None) => it.exists = false,
                            Err(()) => {
                                failed.get_or_insert(abort(AbortReason::CorruptChain, it));
                            }
                        }
                    }
                }
            }
        }
        if !give_back.is_empty() {
            for (n, off) in give_back {
                tx.c.ep.write(n, off, &0u64.to_le_bytes());
            }
            let _ = tx.c.ep.post_detached();
        }
        if let Some(a) = failed {
            return Err(a);
        }
        if again {
            rereads += 1;
            if rereads > tx.c.cfg.reread_limit {
                let (i, _, _) = next[0];
                return Err(abort(AbortReason::Invisible, &tx.items[i]));
            }
        }
        std::mem::swap(work, next);
    }
    Ok(())
}

/// Writes the undo log (the old image of every read-write item) to every replica of the
/// tables written, in the background. Items are appended as they are locked: the new items
/// after the body already written, then the entry's first line (WRITEs on one QP apply in
/// order, G4, so a torn append leaves the previous entry valid). A node that joins the log
/// (a newly touched table's replica) gets the whole entry. Waits first for the previous log
/// write, so that at most one is outstanding.
async fn log_undo(tx: &mut Txn<'_>) -> Result<(), Abort> {
    let logged = |i: &Item| i.rw && (i.exists || i.new == NewValue::Insert);
    let Some(first) = tx.items.iter().position(|i| logged(i) && !i.in_log) else {
        return Ok(());
    };
    let fail = abort(AbortReason::ReplicaFailure, &tx.items[first]);
    if tx.c.ep.wait_background().await.is_err() {
        return Err(fail);
    }
    let Some((slice, slice_bytes)) = tx.c.log_slice else {
        // More coordinators than the pool has log slices.
        return Err(abort(AbortReason::LogFull, &tx.items[first]));
    };
    let old_len = tx.log_body.len();
    for it in tx.items.iter_mut().filter(|i| logged(i) && !i.in_log) {
        let insert = it.new == NewValue::Insert;
        // For an insert, the free slot as it was (a tombstone keeps its key and version).
        let image: &[u8] = &it.image;
        let offset = it.offset.expect("exists");
        dtxn_store::log::encode_item(it.table, offset, insert, image, &mut tx.log_body);
        it.in_log = true;
        tx.logged += 1;
    }
    if (HEAD_BYTES + tx.log_body.len()) as u64 > slice_bytes {
        return Err(abort(AbortReason::LogFull, &tx.items[first]));
    }
    tx.log_crc.update(&tx.log_body[old_len..]);
    let head = encode_head(
        tx.id,
        tx.c.ep.id().index,
        LogStatus::Pending,
        tx.logged as u32,
        tx.log_body.len() as u32,
        tx.log_crc.clone().finalize(),
    );
    let flush = tx.c.cfg.ford.flush;
    let mut nodes = std::mem::take(&mut tx.c.scratch.nodes);
    replica_nodes(tx, &mut nodes);
    for &n in &nodes {
        if tx.log_nodes.contains(&n) {
            let tail = &tx.log_body[old_len..];
            tx.c.ep
                .write(n, slice + (HEAD_BYTES + old_len) as u64, tail);
            tx.c.ep.write(n, slice, &head);
        } else {
            tx.c.ep.write_parts(n, slice, &[&head, &tx.log_body]);
            tx.log_nodes.push(n);
        }
        if flush {
            tx.c.ep.flush(n);
        }
    }
    tx.c.scratch.nodes = nodes;
    if tx.c.ep.post_background().is_err() {
        return Err(fail);
    }
    Ok(())
}

/// The memory nodes that hold a replica of a table this transaction may write, into `nodes`.
fn replica_nodes(tx: &Txn<'_>, nodes: &mut Vec<NodeId>) {
    nodes.clear();
    // Items of one table tend to be adjacent: look each run's table up once.
    let mut last = None;
    for it in tx.items.iter().filter(|i| i.rw) {
        if last != Some(it.table) {
            last = Some(it.table);
            nodes.extend_from_slice(&table(&tx.c.map, it.table).replicas);
        }
    }
    nodes.sort_unstable();
    nodes.dedup();
}

/// Validation, coalescent commit and background release.
pub(crate) async fn commit(tx: &mut Txn<'_>) -> Result<(), Abort> {
    let writes = tx.items.iter().any(|i| i.new != NewValue::Keep);
    match tx.c.cfg.protocol {
        Protocol::Ford => {
            validate(tx).await?;
            if writes {
                let coalescent = tx.c.cfg.ford.coalescent_commit;
                install(
                    tx,
                    if coalescent {
                        Install::Coalescent
                    } else {
                        Install::TwoPhase { revalidate: false }
                    },
                )
                .await?;
            }
        }
        Protocol::Farm => {
            // Lock (CAS only), validate (every read item's version), commit backups, commit
            // primaries: 5 round trips for a read-write transaction.
            lock_only(tx).await?;
            validate_all(tx).await?;
            if writes {
                install(tx, Install::TwoPhase { revalidate: false }).await?;
            }
        }
        Protocol::Drtmh => {
            // Lock and validate in one round, then commit backups (validating the read-only
            // items once more, now that every lock is held), then primaries: 4 round trips.
            lock_and_validate(tx).await?;
            validate_absent(tx).await?;
            if writes {
                install(tx, Install::TwoPhase { revalidate: true }).await?;
            } else if tx.items.iter().any(|i| i.rw) {
                // Read-write items but no writes: the merged round's read validation may have
                // run before another's lock; validate again now that ours are held.
                validate_reads(tx).await?;
            }
        }
        Protocol::Motor => unreachable!("Txn dispatches Motor to protocols::motor"),
    }
    release(tx, LogStatus::Committed);
    tx.cache_inserted_slots();
    Ok(())
}

/// How the new records reach the replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Install {
    /// FORD: every replica of every record in one round trip.
    Coalescent,
    /// FaRM and DrTM+H: the backups, then the primaries (which unlocks them). With
    /// `revalidate`, the read-only items are validated again in the backups' round.
    TwoPhase { revalidate: bool },
}

/// FaRM's lock phase: CAS every read-write item's lock on its primary, nothing else.
async fn lock_only(tx: &mut Txn<'_>) -> Result<(), Abort> {
    lock_round(tx, |it| {
        cold_rw(it).then_some(Want {
            lock: true,
            header: false,
        })
    })
    .await
}

/// FaRM's validation phase: every item read (read-write ones too: their lock was a bare CAS)
/// still has the version read; read-only items are not locked; absent keys still absent.
async fn validate_all(tx: &mut Txn<'_>) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    let owner = tx.c.owner;
    let mut checks = std::mem::take(&mut tx.c.scratch.checks);
    checks.clear();
    for (i, it) in tx.items.iter().enumerate() {
        let Some(off) = it
            .offset
            .filter(|_| it.exists || it.new == NewValue::Insert)
        else {
            continue;
        };
        let t = table(&map, it.table);
        checks.push((i, tx.c.ep.read(t.primary(), off, HEADER_BYTES)));
    }
    if !checks.is_empty() && tx.c.ep.post().await.is_err() {
        return Err(abort(AbortReason::ReplicaFailure, &tx.items[checks[0].0]));
    }
    let failed = checks.iter().find_map(|&(i, read)| {
        let it = &tx.items[i];
        let h = header(tx.c.ep.bytes(read));
        // FaRM's lock was a bare CAS: an insert's slot must also carry our lock.
        let bad = changed(it, &h) || it.new == NewValue::Insert && h.lock != owner;
        bad.then(|| abort(AbortReason::Validation, it))
    });
    tx.c.scratch.checks = checks;
    if let Some(a) = failed {
        return Err(a);
    }
    validate_absent(tx).await
}

/// DrTM+H's merged round: CAS + READ(header) of every read-write item, READ(header) of every
/// read-only item, in one batch.
async fn lock_and_validate(tx: &mut Txn<'_>) -> Result<(), Abort> {
    lock_round(tx, |it| {
        if cold_rw(it) {
            Some(Want {
                lock: true,
                header: true,
            })
        } else {
            let read = !it.rw && it.exists && it.offset.is_some();
            read.then_some(Want {
                lock: false,
                header: true,
            })
        }
    })
    .await
}

async fn validate(tx: &mut Txn<'_>) -> Result<(), Abort> {
    // Every lock before any validation READ: a read-only item checked while another
    // transaction's lock is still to come lets two transactions each miss the other's write
    // (write skew). So cold read-write items are locked in a round of their own.
    lock_cold(tx).await?;
    validate_reads(tx).await?;
    validate_absent(tx).await
}

/// Locks the read-write items read without their lock (cold, or hitchhiking off), checking
/// their versions: CAS + READ(header) on the primary.
async fn lock_cold(tx: &mut Txn<'_>) -> Result<(), Abort> {
    lock_round(tx, |it| {
        cold_rw(it).then_some(Want {
            lock: true,
            header: true,
        })
    })
    .await
}

/// A read-write item to lock at commit: read (or inserted) without its lock.
fn cold_rw(it: &Item) -> bool {
    it.rw && it.cold && (it.exists || it.new == NewValue::Insert) && it.offset.is_some()
}

/// What a lock round does for one item, on its primary.
#[derive(Debug, Clone, Copy)]
struct Want {
    /// CAS(0 -> owner) on its lock word.
    lock: bool,
    /// READ its header (after the CAS, G6), to check it is unchanged.
    header: bool,
}

/// Whether an item's header, read at validation, says the item changed since it was read: a
/// read-only item must still have its version and be unlocked; a locked one its version; an
/// insert's free slot must still be free, stamped below the version we install.
fn changed(it: &Item, h: &RecordHeader) -> bool {
    if it.new == NewValue::Insert {
        h.valid || h.version >= it.new_version()
    } else if it.rw {
        h.version != it.version || check_slot(h, it.table, it.key) == SlotCheck::Stale
    } else {
        h.version != it.version
            || h.lock != 0
            || check_slot(h, it.table, it.key) == SlotCheck::Stale
    }
}

/// One lock round (FORD's cold locks, FaRM's lock phase, DrTM+H's lock-and-validate): what
/// `want` asks for every item, in one batch. Every completion is looked at before an abort is
/// reported, so that no lock won goes unrecorded (and unreleased); a batch that fails (a memory
/// node down) gives back the CASes it may have won on the nodes still up.
async fn lock_round(tx: &mut Txn<'_>, want: impl Fn(&Item) -> Option<Want>) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    let owner = tx.c.owner;
    let mut checks = std::mem::take(&mut tx.c.scratch.locks);
    checks.clear();
    for (i, it) in tx.items.iter().enumerate() {
        let (Some(w), Some(off)) = (want(it), it.offset) else {
            continue;
        };
        let p = table(&map, it.table).primary();
        let cas = w.lock.then(|| tx.c.ep.cas(p, off, 0, owner));
        let read = w.header.then(|| tx.c.ep.read(p, off, HEADER_BYTES));
        checks.push((i, cas, read));
    }
    if checks.is_empty() {
        tx.c.scratch.locks = checks;
        return Ok(());
    }
    if tx.c.ep.post().await.is_err() {
        let first = abort(AbortReason::ReplicaFailure, &tx.items[checks[0].0]);
        let cased: Vec<(NodeId, u64)> = checks
            .iter()
            .filter(|c| c.1.is_some())
            .map(|&(i, _, _)| {
                let it = &tx.items[i];
                (table(&map, it.table).primary(), it.offset.expect("picked"))
            })
            .collect();
        give_back_after_failure(tx, &cased).await;
        return Err(first);
    }
    let mut failed = None;
    for &(i, cas, read) in &checks {
        let it = &mut tx.items[i];
        if let Some(c) = cas {
            if !tx.c.ep.cas_ok(c) {
                failed.get_or_insert(abort(AbortReason::LockConflict, it));
                continue;
            }
            it.locked = true;
            it.cold = false;
        }
        let Some(r) = read else { continue };
        let h = header(tx.c.ep.bytes(r));
        if let (Some(v), true) = (&tx.c.vcache, cas.is_some()) {
            // The version under the lock: if it differs from the one read, we abort below and
            // the entry must hold what memory holds.
            v.lock(it.table, it.key, h.version, owner);
        }
        if changed(it, &h) {
            failed.get_or_insert(abort(AbortReason::Validation, it));
        }
    }
    tx.c.scratch.locks = checks;
    failed.map_or(Ok(()), Err)
}

/// Validates the read-only items: each still has the version read and is not locked (a
/// locked item may be about to change under a transaction already serialized before us).
/// The header is read from the primary even for items read from a backup: the primary's lock
/// word is the only one writers take, and the commit installs every replica before it
/// unlocks, so an unlocked primary at version v means every replica is at v.
async fn validate_reads(tx: &mut Txn<'_>) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    if tx.c.cfg.ford.trust_invisible_bit && tx.kind == TxKind::ReadOnly && tx.items.len() == 1 {
        // The published code's shortcut (negative control only): one item, no validation.
        return Ok(());
    }
    let mut checks = std::mem::take(&mut tx.c.scratch.checks);
    checks.clear();
    let owner = tx.c.owner;
    for (i, it) in tx.items.iter().enumerate() {
        let Some(off) = it.offset.filter(|_| it.exists && !it.rw) else {
            // Absent keys are validated by `validate_absent`.
            continue;
        };
        // Localized validation: a hit decides without a round trip.
        if let Some(v) = &tx.c.vcache {
            match v.check(it.table, it.key, it.version, owner) {
                Check::Valid => continue,
                Check::Invalid => {
                    let a = abort(AbortReason::Validation, it);
                    tx.c.scratch.checks = checks;
                    return Err(a);
                }
                Check::Miss => {}
            }
        }
        let t = table(&map, it.table);
        checks.push((i, tx.c.ep.read(t.primary(), off, HEADER_BYTES)));
    }
    if checks.is_empty() {
        tx.c.scratch.checks = checks;
        return Ok(());
    }
    if tx.c.ep.post().await.is_err() {
        return Err(abort(AbortReason::ReplicaFailure, &tx.items[checks[0].0]));
    }
    let mut failed = None;
    for &(i, read) in &checks {
        let it = &tx.items[i];
        let h = header(tx.c.ep.bytes(read));
        if changed(it, &h) {
            failed = Some(abort(AbortReason::Validation, it));
            break;
        }
        if let Some(v) = &tx.c.vcache {
            v.fill(it.table, it.key, it.version);
        }
    }
    tx.c.scratch.checks = checks;
    failed.map_or(Ok(()), Err)
}

fn header(line0: &[u8]) -> RecordHeader {
    dtxn_store::SingleVersion::new(0).header(line0)
}

/// The coalescent commit: every replica of every written record in one round trip.
async fn install(tx: &mut Txn<'_>, mode: Install) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    let first = tx
        .items
        .iter()
        .find(|i| i.new != NewValue::Keep)
        .expect("a write");
    let fail = abort(AbortReason::ReplicaFailure, first);
    if tx.c.ep.wait_background().await.is_err() {
        return Err(fail);
    }
    let owner = tx.c.owner;
    let flush = tx.c.cfg.ford.flush;
    let mut flushed = std::mem::take(&mut tx.c.scratch.nodes);
    flushed.clear();
    for i in 0..tx.items.len() {
        let it = &tx.items[i];
        if it.new == NewValue::Keep {
            continue;
        }
        let t = table(&map, it.table);
        let codec = t.codec();
        let off = it.offset.expect("written items exist");
        let h = RecordHeader {
            lock: INVISIBLE,
            version: it.new_version(),
            key: it.key,
            table: it.table,
            valid: it.new != NewValue::Delete,
        };
        // Encoded once; the replicas' copies differ only in the lock word (line 0's first).
        let record = &mut tx.c.scratch.record;
        record.resize(t.record_bytes as usize, 0);
        codec.encode(&h, &it.value, record);
        for &n in t.backups() {
            tx.c.ep.write(n, off, record);
            if flush && !flushed.contains(&n) {
                flushed.push(n);
            }
        }
        if mode == Install::Coalescent {
            SingleVersion::set_lock(record, owner | INVISIBLE);
            tx.c.ep.write(t.primary(), off, record);
        }
    }
    // Localized validation: the new versions go into the Vcache before the remote commit,
    // so that a validator never passes against a version the memory already replaced.
    if let Some(v) = &tx.c.vcache {
        for it in tx.items.iter().filter(|i| i.new != NewValue::Keep) {
            v.set_version(it.table, it.key, it.new_version(), owner);
        }
    }
    // Selective remote flush: each backup once, after its last WRITE (FLUSH follows every
    // earlier WRITE on its QP). The primary is never flushed: a lost primary is rebuilt from
    // its backups.
    for &n in &flushed {
        tx.c.ep.flush(n);
    }
    tx.c.scratch.nodes = flushed;
    // DrTM+H: validate the read-only items again, now that every lock is held.
    let mut reads = std::mem::take(&mut tx.c.scratch.checks);
    reads.clear();
    if let Install::TwoPhase { revalidate: true } = mode {
        for (i, it) in tx.items.iter().enumerate() {
            if let Some(off) = it.offset.filter(|_| it.exists && !it.rw) {
                let t = table(&map, it.table);
                reads.push((i, tx.c.ep.read(t.primary(), off, HEADER_BYTES)));
            }
        }
    }
    tx.installed = true;
    if tx.c.ep.post().await.is_err() {
        roll_back(tx).await;
        return Err(fail);
    }
    for &(i, read) in &reads {
        let it = &tx.items[i];
        let h = header(tx.c.ep.bytes(read));
        if changed(it, &h) {
            let a = abort(AbortReason::Validation, it);
            roll_back(tx).await;
            return Err(a);
        }
    }
    tx.c.scratch.checks = reads;
    if mode == Install::Coalescent {
        return Ok(());
    }
    // The primaries, under our lock and invisible. They are unlocked by the release, after
    // every primary has its new record: a recovery agent that finds any of our locks released
    // then knows the commit is complete everywhere (see recovery.rs).
    for i in 0..tx.items.len() {
        let it = &tx.items[i];
        if it.new == NewValue::Keep {
            continue;
        }
        let t = table(&map, it.table);
        let codec = t.codec();
        let off = it.offset.expect("written items exist");
        let h = RecordHeader {
            lock: owner | INVISIBLE,
            version: it.new_version(),
            key: it.key,
            table: it.table,
            valid: it.new != NewValue::Delete,
        };
        let record = &mut tx.c.scratch.record;
        record.resize(t.record_bytes as usize, 0);
        codec.encode(&h, &it.value, record);
        tx.c.ep.write(t.primary(), off, record);
    }
    if tx.c.ep.post().await.is_err() {
        roll_back(tx).await;
        return Err(fail);
    }
    Ok(())
}

/// A replica failed during the commit: put the old images back wherever we can reach.
async fn roll_back(tx: &mut Txn<'_>) {
    let map = tx.c.map.clone();
    let owner = tx.c.owner;
    for it in tx.items.iter().filter(|i| i.new != NewValue::Keep) {
        let t = table(&map, it.table);
        let off = it.offset.expect("written items exist");
        for (rank, &n) in t.replicas.iter().enumerate() {
            let lock = if rank == 0 { owner } else { 0 };
            tx.c.ep.write_with(n, off, it.image.len(), |b| {
                b.copy_from_slice(&it.image);
                b[..8].copy_from_slice(&lock.to_le_bytes());
            });
        }
    }
    // Best effort: the failed node's copy is rebuilt when it is replaced.
    let _ = tx.c.ep.post().await;
    tx.installed = false;
    if let Some(v) = &tx.c.vcache {
        for it in tx.items.iter().filter(|i| i.new != NewValue::Keep) {
            v.set_version(it.table, it.key, it.version, owner);
        }
    }
}

/// Unlock and make visible, and close the log entry: posted detached, nobody waits.
fn release(tx: &mut Txn<'_>, status: LogStatus) {
    let map = tx.c.map.clone();
    let zero = 0u64.to_le_bytes();
    for i in 0..tx.items.len() {
        let it = &tx.items[i];
        let Some(off) = it.offset else { continue };
        let t = table(&map, it.table);
        if it.new != NewValue::Keep && tx.installed {
            for &n in t.backups() {
                tx.c.ep.write(n, off, &zero);
            }
        }
        if it.locked {
            tx.c.ep.write(t.primary(), off, &zero);
            if let Some(v) = &tx.c.vcache {
                v.unlock(it.table, it.key, tx.c.owner);
            }
        }
    }
    for it in &tx.items {
        if let Some((n, addr)) = it.chain_lock {
            tx.c.ep.write(n, addr, &zero);
        }
    }
    if tx.logged > 0 {
        if let Some((slice, _)) = tx.c.log_slice {
            for &n in &tx.log_nodes {
                tx.c.ep
                    .write(n, slice + STATUS_OFF, &(status as u64).to_le_bytes());
            }
        }
    }
    // A memory node that is down loses nothing here: its replica is rebuilt on recovery.
    let _ = tx.c.ep.post_detached();
    for it in &mut tx.items {
        it.locked = false;
        it.chain_lock = None;
    }
}

/// An abort: wait for the undo log (so that the next transaction may log), release.
pub(crate) async fn release_on_abort(tx: &mut Txn<'_>) {
    let _ = tx.c.ep.wait_background().await;
    release(tx, LogStatus::Aborted);
}

/// Inserts, any number in one batch: lock each key's chain (CAS on the home bucket's insert
/// lock + READ of the bucket, G6; one CAS per chain, and none for a chain whose lock we hold
/// already), every chain in the same doorbell batch; make sure each key is absent (walking
/// the chains' overflow buckets together, a round per bucket); pick a free slot for each
/// (chaining a new overflow bucket if a chain has none), and lock the slots with the other
/// cold items at commit. Holding the chain lock until release keeps every other insert of
/// the chain out, so a key is never placed twice, and lets readers validate absence.
///
/// So `n` inserts into chains without overflow cost one round trip, not `n`. Any failure
/// aborts the whole transaction (as the same inserts made one at a time would).
pub(crate) async fn insert(tx: &mut Txn<'_>, rows: &[(u32, u64, &[u8])]) -> Result<(), Abort> {
    let mut s = std::mem::take(&mut tx.c.scratch.insert);
    let r = insert_rows(tx, rows, &mut s).await;
    // The images of the free slots no row took (or all of them, after an abort) go back to
    // the pool: dropped, each would cost a later item an allocation.
    for w in s.walks.drain(..) {
        if let Some((_, image)) = w.own {
            tx.c.spare.give(image);
        }
    }
    for (_, _, image) in s.free.drain(..) {
        tx.c.spare.give(image);
    }
    tx.c.scratch.insert = s;
    r
}

/// [`insert`], with its vectors from the coordinator's scratch.
async fn insert_rows(
    tx: &mut Txn<'_>,
    rows: &[(u32, u64, &[u8])],
    s: &mut InsertScratch,
) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    let InsertScratch {
        todo,
        walks,
        reads,
        cas,
        taken,
        sharing,
        free,
        placed,
        fresh,
    } = s;
    // The items to place, in row order.
    todo.clear();
    for &(table_id, key, value) in rows {
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
        if value.len() != t.value_size as usize {
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
                    // The same key twice in this batch.
                    _ if todo.contains(&i) => return Err(bad(AbortReason::Exists)),
                    _ => {
                        it.rw = true;
                        i
                    }
                }
            }
            None => tx.push_new_item(t, key, true, t.primary()),
        };
        // Placed or not, the transaction aborts if this call fails: the value may go in now.
        tx.items[i].value.copy_from_slice(value);
        todo.push(i);
    }
    if todo.is_empty() {
        return Ok(());
    }

    // Lock every chain not yet ours and read every home bucket, in one batch.
    let owner = tx.c.owner;
    walks.clear();
    cas.clear();
    reads.clear();
    free.clear();
    for &i in todo.iter() {
        let it = &tx.items[i];
        let t = table(&map, it.table);
        let (primary, home) = (t.primary(), t.home_bucket(it.key));
        let lock = (primary, t.insert_lock(home));
        let held = tx.items.iter().any(|o| o.chain_lock == Some(lock))
            || cas.iter().any(|&(_, n, a, _)| (n, a) == lock);
        if !held {
            cas.push((i, lock.0, lock.1, tx.c.ep.cas(lock.0, lock.1, 0, owner)));
        }
        reads.push(tx.c.ep.read(primary, home, t.bucket_bytes as usize));
        walks.push(Walk {
            item: i,
            chain: lock,
            bucket: home,
            hops: 0,
            tombstone: 0,
            own: None,
            free: 0,
            end: None,
        });
    }
    if tx.c.ep.post().await.is_err() {
        let chains: Vec<(NodeId, u64)> = cas.iter().map(|&(_, n, a, _)| (n, a)).collect();
        give_back_after_failure(tx, &chains).await;
        return Err(abort(AbortReason::ReplicaFailure, &tx.items[todo[0]]));
    }
    let mut failed = None;
    for &(i, n, a, c) in cas.iter() {
        if tx.c.ep.cas_ok(c) {
            tx.items[i].chain_lock = Some((n, a));
        } else {
            failed.get_or_insert(abort(AbortReason::LockConflict, &tx.items[i]));
        }
    }
    if let Some(a) = failed {
        return Err(a);
    }

    // Walk the chains: look for the key, its tombstones, and free slots. A chain shared by
    // several rows keeps as many free slots as rows (the rows place themselves one by one).
    taken.clear();
    taken.extend(tx.items.iter().filter_map(|o| o.offset));
    sharing.clear();
    sharing.extend(
        walks
            .iter()
            .map(|w| walks.iter().filter(|o| o.chain == w.chain).count()),
    );
    loop {
        let mut more = false;
        for (k, w) in walks.iter_mut().enumerate() {
            if w.end.is_some() {
                continue;
            }
            let it = &tx.items[w.item];
            let t = table(&map, it.table);
            let codec = t.codec();
            let (table_id, key) = (it.table, it.key);
            let bytes = tx.c.ep.bytes(reads[k]);
            let scan = t.scan(w.bucket, bytes, key);
            if scan.found.is_some() {
                return Err(abort(AbortReason::Exists, it));
            }
            if let Some((slot, _)) = scan.tombstone {
                let v = codec.header(t.slot_bytes(bytes, slot)).version;
                w.tombstone = w.tombstone.max(v);
            }
            // A free slot is one never used, or our key's own tombstone: another key's
            // tombstone stays, because it carries that key's last version (a later insert of
            // it must install above, and reads of it absent report it).
            for s in 0..t.slots_per_bucket {
                let off = t.slot(w.bucket, s);
                let rec = t.slot_bytes(bytes, s);
                let h = codec.header(rec);
                let own = h.key == key && h.table == table_id;
                if h.valid || !(h.version == 0 || own) || taken.contains(&off) {
                    continue;
                }
                // The slot's image (the insert's undo image), in a buffer from the pool.
                if own {
                    w.own = Some((off, tx.c.spare.take_copy(rec)));
                } else if w.free < sharing[k] {
                    w.free += 1;
                    free.push((k, off, tx.c.spare.take_copy(rec)));
                }
            }
            match next_bucket(t, scan.next, &mut w.hops) {
                Err(()) => return Err(abort(AbortReason::CorruptChain, it)),
                Ok(Some(n)) => {
                    w.bucket = n;
                    more = true;
                }
                Ok(None) => w.end = Some(w.bucket),
            }
        }
        if !more {
            break;
        }
        for (k, w) in walks.iter().enumerate() {
            if w.end.is_none() {
                let t = table(&map, tx.items[w.item].table);
                reads[k] = tx.c.ep.read(w.chain.0, w.bucket, t.bucket_bytes as usize);
            }
        }
        if tx.c.ep.post().await.is_err() {
            return Err(abort(AbortReason::ReplicaFailure, &tx.items[todo[0]]));
        }
    }

    // Place the rows, one by one.
    placed.clear();
    fresh.clear();
    for (k, w) in walks.iter_mut().enumerate() {
        let t = table(&map, tx.items[w.item].table);
        let pick = w.own.take().or_else(|| {
            free.iter_mut()
                .find(|(j, off, _)| *j == k && !placed.contains(off))
                .map(|(_, off, image)| (*off, std::mem::take(image)))
        });
        let (slot, image) = match pick {
            Some(p) => p,
            None => {
                let f = fresh.iter_mut().find(|f| f.0 == w.chain);
                let slot = match f {
                    Some(f) if f.2 < t.slots_per_bucket => {
                        f.2 += 1;
                        t.slot(f.1, f.2 - 1)
                    }
                    f => {
                        // Chain a new overflow bucket (we hold the chain's insert lock, so
                        // nobody else links one here): claim it on the primary, link it on
                        // every replica after the chain's last bucket.
                        let end = f.as_ref().map_or(w.end.expect("walked"), |f| f.1);
                        let it = &tx.items[w.item];
                        let fail = abort(AbortReason::ReplicaFailure, it);
                        let full = abort(AbortReason::TableFull, it);
                        let faa = tx.c.ep.faa(w.chain.0, t.overflow_counter(), 1);
                        if tx.c.ep.post().await.is_err() {
                            return Err(fail);
                        }
                        let index = tx.c.ep.old(faa);
                        if index >= t.overflow_buckets {
                            return Err(full);
                        }
                        for &n in &t.replicas {
                            tx.c.ep.write(n, end, &(index + 1).to_le_bytes());
                        }
                        if tx.c.ep.post().await.is_err() {
                            return Err(fail);
                        }
                        let bucket = t.overflow_bucket(index);
                        match f {
                            Some(f) => *f = (w.chain, bucket, 1),
                            None => fresh.push((w.chain, bucket, 1)),
                        }
                        t.slot(bucket, 0)
                    }
                };
                let len = t.record_bytes as usize;
                (slot, tx.c.spare.take(len, len))
            }
        };
        placed.push(slot);
        let stamp = t.codec().header(&image).version;
        let it = &mut tx.items[w.item];
        it.offset = Some(slot);
        it.node = w.chain.0;
        it.version = w.tombstone;
        it.install = Some(stamp.max(w.tombstone) + 1);
        let pooled = std::mem::replace(&mut it.image, image);
        it.new = NewValue::Insert;
        it.cold = true;
        tx.c.spare.give(pooled);
    }
    log_undo(tx).await
}

/// One insert's walk along its key's chain.
#[derive(Debug)]
struct Walk {
    item: usize,
    /// The chain's insert lock, as (node, address): it names the chain.
    chain: (NodeId, u64),
    /// The bucket being read.
    bucket: u64,
    /// Overflow buckets followed so far.
    hops: u64,
    /// The greatest version of the key's tombstones on the chain.
    tombstone: u64,
    /// The key's own tombstone (slot, image), reusable by it alone.
    own: Option<(u64, Vec<u8>)>,
    /// Free slots found (in [`InsertScratch::free`]): as many as rows share the chain.
    free: usize,
    /// The chain's last bucket, once reached.
    end: Option<u64>,
}

/// The next bucket of a chain, from a bucket's `next` link: `Err` if the link leaves the
/// table's overflow area or the walk has taken more hops than the table has overflow buckets
/// (a cycle): memory is corrupt, and following it would loop or read another table.
fn next_bucket(t: &TableInfo, next: Option<u64>, hops: &mut u64) -> Result<Option<u64>, ()> {
    let Some(n) = next else {
        return Ok(None);
    };
    *hops += 1;
    let first = t.overflow_bucket(0);
    let in_area = n >= first
        && n < t.overflow_bucket(t.overflow_buckets)
        && (n - first).is_multiple_of(t.bucket_bytes);
    if !in_area || *hops > t.overflow_buckets {
        return Err(());
    }
    Ok(Some(n))
}

/// A batch with lock CASes failed (a memory node down): the CASes on the nodes still up may
/// have succeeded, and the transaction never learned which. Give back every one of those lock
/// words that still holds our owner id (CAS owner -> 0, which leaves a word another holds
/// alone), except those we hold through an earlier round (they are released with the rest).
pub(crate) async fn give_back_after_failure(tx: &mut Txn<'_>, addrs: &[(NodeId, u64)]) {
    let map = tx.c.map.clone();
    let owner = tx.c.owner;
    let held = |tx: &Txn<'_>, (n, a): (NodeId, u64)| {
        tx.items.iter().any(|it| {
            it.chain_lock == Some((n, a))
                || it.locked && it.offset == Some(a) && table(&map, it.table).primary() == n
        })
    };
    let mut any = false;
    for &(n, a) in addrs {
        if !held(tx, (n, a)) {
            tx.c.ep.cas(n, a, owner, 0);
            any = true;
        }
    }
    if any {
        // A node that is down keeps nothing of ours: its locks go with its memory.
        let _ = tx.c.ep.post().await;
    }
}

/// Absent keys read by the transaction must still be absent at validation: their chain holds
/// no valid record of the key, and nobody holds the chain's insert lock (an insert in
/// progress). One READ per bucket of each chain, the chains walked together.
async fn validate_absent(tx: &mut Txn<'_>) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    let owner = tx.c.owner;
    // (item, bucket being read, overflow hops, greatest tombstone version so far)
    let mut walks = std::mem::take(&mut tx.c.scratch.absent);
    walks.clear();
    walks.extend(
        tx.items
            .iter()
            .enumerate()
            .filter(|(_, it)| {
                !(it.exists || it.new == NewValue::Insert || it.offset.is_some() && it.locked)
            })
            .map(|(i, it)| (i, table(&map, it.table).home_bucket(it.key), 0, 0)),
    );
    if walks.is_empty() {
        tx.c.scratch.absent = walks;
        return Ok(());
    }
    // First the chains' insert locks, alone: a lock word fetched in the same multi-line READ
    // as the slots may be fetched after them (G2), and miss an insert that landed and
    // released in between. Read after every lock of ours is held, a free insert lock then
    // means no insert of the key is in progress or can be serialized before us unseen.
    let mut reads = std::mem::take(&mut tx.c.scratch.absent_reads);
    reads.clear();
    for &(i, home, _, _) in &walks {
        let t = table(&map, tx.items[i].table);
        reads.push(tx.c.ep.read(t.primary(), home, 64));
    }
    if tx.c.ep.post().await.is_err() {
        return Err(abort(AbortReason::ReplicaFailure, &tx.items[walks[0].0]));
    }
    for (&(i, _, _, _), &r) in walks.iter().zip(&reads) {
        let lock = tx.c.ep.word(r, 8);
        if lock != 0 && lock != owner {
            return Err(abort(AbortReason::Validation, &tx.items[i]));
        }
    }
    // Then every chain, all of them together, a round per bucket.
    while !walks.is_empty() {
        reads.clear();
        for &(i, bucket, _, _) in &walks {
            let t = table(&map, tx.items[i].table);
            reads.push(tx.c.ep.read(t.primary(), bucket, t.bucket_bytes as usize));
        }
        if tx.c.ep.post().await.is_err() {
            return Err(abort(AbortReason::ReplicaFailure, &tx.items[walks[0].0]));
        }
        let mut k = 0;
        let mut failed = None;
        walks.retain_mut(|(i, bucket, hops, tombstone)| {
            let r = reads[k];
            k += 1;
            let it = &tx.items[*i];
            let t = table(&map, it.table);
            let bytes = tx.c.ep.bytes(r);
            let scan = t.scan(*bucket, bytes, it.key);
            if scan.found.is_some() {
                failed.get_or_insert(abort(AbortReason::Validation, it));
                return false;
            }
            if let Some((slot, _)) = scan.tombstone {
                let v = t.codec().header(t.slot_bytes(bytes, slot)).version;
                *tombstone = (*tombstone).max(v);
            }
            match next_bucket(t, scan.next, hops) {
                Ok(Some(n)) => {
                    *bucket = n;
                    true
                }
                Ok(None) => {
                    // Inserted and deleted again since the read: absent, but not the absence
                    // we saw.
                    if *tombstone != it.version {
                        failed.get_or_insert(abort(AbortReason::Validation, it));
                    }
                    false
                }
                Err(()) => {
                    failed.get_or_insert(abort(AbortReason::CorruptChain, it));
                    false
                }
            }
        });
        if let Some(a) = failed {
            return Err(a);
        }
    }
    (tx.c.scratch.absent, tx.c.scratch.absent_reads) = (walks, reads);
    Ok(())
}
