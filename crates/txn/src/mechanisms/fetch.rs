//! Execution's reads of single-version records: each item's record READ at its cached
//! address (its per-line stamps checked: a torn READ is read again), or its bucket chain
//! walked when the address is not cached; for a read-write item with *hitchhiked locking*,
//! CAS(lock) + READ(record) on the primary in one doorbell batch (the CAS executes first,
//! G6, so the READ sees the record under the lock).

use super::lock::give_back_after_failure;
use super::rpc::{CasRead, Read};
use super::{abort, next_bucket, table, INVISIBLE};
use crate::abort::{Abort, AbortReason};
use crate::item::Access;
use crate::protocol::Protocol;
use crate::stage::Stage as Step;
use crate::tx::Tx;
use crate::txn::TxKind;
use dtxn_fabric::{Endpoint, NodeId};
use dtxn_store::cache::{check_slot, SlotCheck};
use dtxn_store::record::{RecordHeader, SingleVersion, Torn};
use dtxn_store::PoolMap;

/// What an execution round does for one item.
#[derive(Debug, Clone, Copy)]
enum Stage {
    /// READ the record at this offset, with CAS(lock) first if `lock`.
    Record { off: u64, lock: bool },
    /// READ a bucket of the item's chain, reached after `hops` overflow links.
    Bucket { at: u64, hops: u64 },
}

/// What [`records`] keeps across calls (given back after an abort too).
#[derive(Debug, Default)]
pub(crate) struct ExecuteScratch {
    /// Execution rounds: (item, stage, version it must still have).
    work: Vec<(usize, Stage, Option<u64>)>,
    next: Vec<(usize, Stage, Option<u64>)>,
    /// Execution rounds: what each item's stage posted.
    ids: Vec<Fetched>,
}

/// What a round posted for one item: a hitchhiked lock (CAS, then the record READ after it),
/// or a READ (of a record or a bucket). One-sided or as RPCs, as the lock and fetch stages go.
#[derive(Debug, Clone, Copy)]
enum Fetched {
    Locked(CasRead),
    Read(Read),
}

impl Fetched {
    /// The bytes read: for a lock, only once its CAS swapped.
    #[inline]
    fn bytes<'e>(&self, ep: &'e Endpoint) -> &'e [u8] {
        match self {
            Fetched::Locked(c) => c.bytes(ep),
            Fetched::Read(r) => r.bytes(ep),
        }
    }
}

/// Fetches `accesses` (new items, or read items now wanted for update) into the
/// transaction's items, a round per batch of READs: read-write items with their lock taken
/// at once if `hitchhike` (and their address cached), else locked at commit (`cold`).
pub(crate) async fn records<P: Protocol>(
    tx: &mut Tx<'_, P>,
    accesses: &[Access],
    hitchhike: bool,
) -> Result<(), Abort> {
    let mut s = std::mem::take(&mut tx.c.mech.execute);
    let r = rounds(tx, accesses, hitchhike, &mut s).await;
    tx.c.mech.execute = s;
    r
}

/// [`records`]' rounds, with their vectors from the coordinator's scratch.
async fn rounds<P: Protocol>(
    tx: &mut Tx<'_, P>,
    accesses: &[Access],
    hitchhike: bool,
    s: &mut ExecuteScratch,
) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    // (item, stage, version it must still have: an upgraded read-only item)
    let ExecuteScratch { work, next, ids } = s;
    plan(tx, &map, accesses, hitchhike, work)?;
    let mut rereads = 0;
    while !work.is_empty() {
        post(tx, &map, work, ids);
        if tx.c.ep.post().await.is_err() {
            return Err(give_back_round(tx, &map, work).await);
        }
        next.clear();
        // Every completion of the round is looked at before an abort is reported, so that no
        // lock won in this round goes unrecorded (and unreleased).
        let mut out = Outcome {
            next: &mut *next,
            again: false,
            failed: None,
            give_back: Vec::new(),
        };
        for (&(i, stage, expect), &done) in work.iter().zip(ids.iter()) {
            match stage {
                Stage::Record { off, lock } => {
                    on_record(tx, &map, (i, expect), off, lock, done, &mut out)
                }
                Stage::Bucket { at, hops } => {
                    on_bucket(tx, &map, (i, expect), at, hops, done, &mut out)
                }
            }
        }
        let Outcome {
            next,
            again,
            failed,
            give_back,
        } = out;
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

/// What one round's completions leave for the next round.
struct Outcome<'a> {
    /// The items to read again, and how.
    next: &'a mut Vec<(usize, Stage, Option<u64>)>,
    /// Some item must be re-read (torn or invisible): the round counts against the limit.
    again: bool,
    /// The first abort seen.
    failed: Option<Abort>,
    /// Locks won through a stale address, to give back.
    give_back: Vec<(NodeId, u64)>,
}

/// The first round's work: each access's item added (or an item already read, upgraded for
/// update) with how it is to be read.
fn plan<P: Protocol>(
    tx: &mut Tx<'_, P>,
    map: &PoolMap,
    accesses: &[Access],
    hitchhike: bool,
    work: &mut Vec<(usize, Stage, Option<u64>)>,
) -> Result<(), Abort> {
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
                    let room = table(map, a.table).record_bytes as usize;
                    it.image = tx.c.spare.take(0, room);
                }
                if let Some(off) = it.offset.filter(|_| it.exists) {
                    let v = it.version;
                    it.node = table(map, a.table).primary();
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
    Ok(())
}

/// Posts a round: per item, CAS(lock) + READ(record), READ(record), or READ(bucket).
fn post<P: Protocol>(
    tx: &mut Tx<'_, P>,
    map: &PoolMap,
    work: &[(usize, Stage, Option<u64>)],
    ids: &mut Vec<Fetched>,
) {
    ids.clear();
    let (lock_via, fetch_via) = (tx.c.via(Step::Lock), tx.c.via(Step::Fetch));
    for &(i, stage, _) in work.iter() {
        let it = &tx.items[i];
        let t = table(map, it.table);
        let ep = &mut tx.c.ep;
        ids.push(match stage {
            Stage::Record { off, lock: true } => {
                let record = Some((off, t.record_bytes as usize));
                let owner = tx.c.owner;
                Fetched::Locked(CasRead::post(
                    ep,
                    lock_via,
                    t.primary(),
                    off,
                    (0, owner),
                    record,
                ))
            }
            Stage::Record { off, lock: false } => Fetched::Read(Read::post(
                ep,
                fetch_via,
                it.node,
                off,
                t.record_bytes as usize,
            )),
            Stage::Bucket { at, .. } => Fetched::Read(Read::post(
                ep,
                fetch_via,
                it.node,
                at,
                t.bucket_bytes as usize,
            )),
        });
    }
}

/// A round that failed to post: the locks its CASes may have won are given back.
async fn give_back_round<P: Protocol>(
    tx: &mut Tx<'_, P>,
    map: &PoolMap,
    work: &[(usize, Stage, Option<u64>)],
) -> Abort {
    let first = abort(AbortReason::ReplicaFailure, &tx.items[work[0].0]);
    let cased: Vec<(NodeId, u64)> = work
        .iter()
        .filter_map(|&(i, stage, _)| match stage {
            Stage::Record { off, lock: true } => {
                Some((table(map, tx.items[i].table).primary(), off))
            }
            _ => None,
        })
        .collect();
    give_back_after_failure(tx, &cased).await;
    first
}

/// A record READ (after its CAS, if `lock`) completed: the lock recorded, the stamps and the
/// slot checked, the item filled in.
fn on_record<P: Protocol>(
    tx: &mut Tx<'_, P>,
    map: &PoolMap,
    (i, expect): (usize, Option<u64>),
    off: u64,
    lock: bool,
    done: Fetched,
    out: &mut Outcome<'_>,
) {
    let trust_inv = tx.c.cfg.ford.trust_invisible_bit;
    let (table_id, key, rw) = (tx.items[i].table, tx.items[i].key, tx.items[i].rw);
    let t = table(map, table_id);
    let codec = t.codec();
    if !locked_and_read(tx, i, off, done, t.record_bytes as usize, out) {
        return;
    }
    let it = &mut tx.items[i];
    let bytes = done.bytes(&tx.c.ep);
    let decoded = decode(codec, bytes, &mut it.value, trust_inv);
    let Ok(h) = decoded else {
        out.next
            .push((i, Stage::Record { off, lock: false }, expect));
        out.again = true;
        return;
    };
    if check_slot(&h, table_id, key) == SlotCheck::Stale {
        // The slot was freed or reused: drop the address, give back a lock
        // taken through it, and find the record through its bucket.
        tx.c.cache.invalidate(table_id, key);
        if lock {
            out.give_back.push((t.primary(), off));
            it.locked = false;
            it.offset = None;
        }
        let home = Stage::Bucket {
            at: t.home_bucket(key),
            hops: 0,
        };
        out.next.push((i, home, expect));
        return;
    }
    if !it.locked && h.lock & INVISIBLE != 0 {
        out.next
            .push((i, Stage::Record { off, lock: false }, expect));
        out.again = true;
        return;
    }
    if expect.is_some_and(|v| v != h.version) {
        out.failed.get_or_insert(abort(AbortReason::Validation, it));
        return;
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

/// A record's header and value, its stamps checked, unless `trust_invisible_bit` (the
/// negative control: the published FORD's read path).
#[inline]
fn decode(
    codec: SingleVersion,
    rec: &[u8],
    value: &mut [u8],
    trust_invisible_bit: bool,
) -> Result<RecordHeader, Torn> {
    if trust_invisible_bit {
        Ok(codec.decode_unchecked(rec, value))
    } else {
        codec.decode(rec, value)
    }
}

/// Whether a record's fetch for item `i` went through: its lock recorded if the fetch took
/// one (false, the abort noted, if the CAS failed), and `len` bytes read (false, the memory
/// node counted as failed, if they are short: only a malformed RPC reply is).
fn locked_and_read<P: Protocol>(
    tx: &mut Tx<'_, P>,
    i: usize,
    off: u64,
    done: Fetched,
    len: usize,
    out: &mut Outcome<'_>,
) -> bool {
    if let Fetched::Locked(c) = done {
        if !c.swapped(&tx.c.ep) {
            out.failed
                .get_or_insert(abort(AbortReason::LockConflict, &tx.items[i]));
            return false;
        }
        tx.items[i].locked = true;
        tx.items[i].offset = Some(off);
    }
    if done.bytes(&tx.c.ep).len() < len {
        out.failed
            .get_or_insert(abort(AbortReason::ReplicaFailure, &tx.items[i]));
        return false;
    }
    true
}

/// A bucket READ of the item's chain completed: the key's tombstones noted, the record taken
/// from its slot if found, else the walk goes on to the next bucket (or ends: absent).
fn on_bucket<P: Protocol>(
    tx: &mut Tx<'_, P>,
    map: &PoolMap,
    (i, expect): (usize, Option<u64>),
    b: u64,
    mut hops: u64,
    read: Fetched,
    out: &mut Outcome<'_>,
) {
    let trust_inv = tx.c.cfg.ford.trust_invisible_bit;
    let (table_id, key, rw) = (tx.items[i].table, tx.items[i].key, tx.items[i].rw);
    let t = table(map, table_id);
    let codec = t.codec();
    let bytes = read.bytes(&tx.c.ep);
    if bytes.len() < t.bucket_bytes as usize {
        // Only a malformed RPC reply is short: treat the memory node as failed.
        out.failed
            .get_or_insert(abort(AbortReason::ReplicaFailure, &tx.items[i]));
        return;
    }
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
        let decoded = decode(codec, rec, &mut it.value, trust_inv);
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
                out.next
                    .push((i, Stage::Record { off, lock: false }, expect));
                out.again = true;
            }
        }
    } else {
        match next_bucket(t, scan.next, &mut hops) {
            Ok(Some(at)) => out.next.push((i, Stage::Bucket { at, hops }, expect)),
            Ok(None) => it.exists = false,
            Err(()) => {
                out.failed
                    .get_or_insert(abort(AbortReason::CorruptChain, it));
            }
        }
    }
}
