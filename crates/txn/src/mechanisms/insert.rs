//! Inserts into single-version tables: the key's chain locked, the key found absent, a free
//! slot chosen (a new overflow bucket chained when there is none).

use super::{abort, next_bucket, table};
use crate::abort::{Abort, AbortReason};
use crate::item::NewValue;
use crate::mechanisms::lock::give_back_after_failure;
use crate::mechanisms::rpc::{CasRead, Read};
use crate::mechanisms::undo::log_undo;
use crate::protocol::{Protocol, Row};
use crate::stage::Stage;
use crate::tx::Tx;
use crate::txn::TxKind;
use dtxn_fabric::NodeId;
use dtxn_store::{PoolMap, RecordFormat, TableInfo};

/// What [`insert`] keeps across calls (given back after an abort too, with the free slots'
/// images, which are pool buffers).
#[derive(Debug, Default)]
pub(crate) struct InsertScratch {
    /// The items to place, in row order.
    todo: Vec<usize>,
    /// One walk per item to place, and the READ of the bucket it is at.
    walks: Vec<Walk>,
    reads: Vec<Read>,
    /// The chain locks to take, as (item, node, address, CAS).
    cas: Vec<(usize, NodeId, u64, CasRead)>,
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
pub(crate) async fn insert<P: Protocol>(tx: &mut Tx<'_, P>, rows: &[Row<'_>]) -> Result<(), Abort> {
    let mut s = std::mem::take(&mut tx.c.mech.insert);
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
    tx.c.mech.insert = s;
    r
}

/// [`insert`], with its vectors from the coordinator's scratch.
async fn insert_rows<P: Protocol>(
    tx: &mut Tx<'_, P>,
    rows: &[Row<'_>],
    s: &mut InsertScratch,
) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    collect_rows(tx, &map, rows, &mut s.todo)?;
    if s.todo.is_empty() {
        return Ok(());
    }
    lock_chains(tx, &map, s).await?;
    walk_chains(tx, &map, s).await?;
    place(tx, &map, s).await?;
    log_undo(tx).await
}

/// The items to place, in row order: each row checked, its item added (or an item of the
/// transaction's reused), its value copied in.
fn collect_rows<P: Protocol>(
    tx: &mut Tx<'_, P>,
    map: &PoolMap,
    rows: &[Row<'_>],
    todo: &mut Vec<usize>,
) -> Result<(), Abort> {
    todo.clear();
    for &row in rows {
        let i = match accept_row(tx, map, row, |i| todo.contains(&i))? {
            RowItem::Place(i) => i,
            RowItem::Updated => continue,
        };
        // Placed or not, the transaction aborts if this call fails: the value may go in now.
        tx.items[i].value.copy_from_slice(row.2);
        todo.push(i);
    }
    Ok(())
}

/// What an insert does with a row's item.
pub(crate) enum RowItem {
    /// Place the row in item `i` (new, or read before and found absent).
    Place(usize),
    /// The key was deleted earlier in the transaction: the insert became an update of it.
    Updated,
}

/// Checks an insert's row and finds or adds its item, marked read-write. `Exists` if the key
/// is present, or already queued by this call (`queued`: the same key twice); `BadRequest`
/// for a read-only transaction, an unknown table, a value of the wrong size, or (for a
/// multi-version protocol) a table not laid out as CVTs.
pub(crate) fn accept_row<P: Protocol>(
    tx: &mut Tx<'_, P>,
    map: &PoolMap,
    (table_id, key, value): Row<'_>,
    queued: impl Fn(usize) -> bool,
) -> Result<RowItem, Abort> {
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
    let wrong_format = P::RECORDS == RecordFormat::Cvt && t.mv.is_none();
    if value.len() != t.value_size as usize || wrong_format {
        return Err(bad(AbortReason::BadRequest));
    }
    let Some(i) = tx.find(table_id, key) else {
        return Ok(RowItem::Place(tx.push_new_item(t, key, true, t.primary())));
    };
    let it = &mut tx.items[i];
    match (&it.new, it.exists) {
        (NewValue::Insert, _) | (NewValue::Keep | NewValue::Update, true) => {
            Err(bad(AbortReason::Exists))
        }
        (NewValue::Delete, true) => {
            // Deleted, then inserted again by the same transaction: an update.
            it.value.copy_from_slice(value);
            it.new = NewValue::Update;
            Ok(RowItem::Updated)
        }
        _ if queued(i) => Err(bad(AbortReason::Exists)),
        _ => {
            it.rw = true;
            Ok(RowItem::Place(i))
        }
    }
}

/// Lock every chain not yet ours and read every home bucket, in one batch.
async fn lock_chains<P: Protocol>(
    tx: &mut Tx<'_, P>,
    map: &PoolMap,
    s: &mut InsertScratch,
) -> Result<(), Abort> {
    let InsertScratch {
        todo,
        walks,
        reads,
        cas,
        free,
        ..
    } = s;
    super::journal::ready_tx(tx).await?;
    // Chain locks hold this attempt's word, whatever the protocol puts in its record locks
    // (a timestamp, which may change during the attempt): the give-back and the release
    // know what to undo.
    let word = tx.c.attempt_word;
    // The home buckets are read after the chain locks' CASes: one-sided, a READ posted after
    // an atomic on its QP executes after it (G6); as RPCs, a node's requests of one batch are
    // served in post order. So the READs go the locks' way.
    let via = tx.c.via(Stage::Lock);
    walks.clear();
    cas.clear();
    reads.clear();
    free.clear();
    for &i in todo.iter() {
        let it = &tx.items[i];
        let t = table(map, it.table);
        let (primary, home) = (t.primary(), t.home_bucket(it.key));
        let lock = (primary, t.insert_lock(home));
        let held = tx.items.iter().any(|o| o.chain_lock == Some(lock))
            || cas.iter().any(|&(_, n, a, _)| (n, a) == lock);
        if !held {
            super::journal::note(tx.c, via, lock.0, lock.1);
            let c = CasRead::post(&mut tx.c.ep, via, lock.0, lock.1, (0, word), None);
            cas.push((i, lock.0, lock.1, c));
        }
        reads.push(Read::post(
            &mut tx.c.ep,
            via,
            primary,
            home,
            t.bucket_bytes as usize,
        ));
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
        let chains: Vec<(NodeId, u64, u64)> = cas.iter().map(|&(_, n, a, _)| (n, a, 0)).collect();
        give_back_after_failure(tx, &chains, word).await;
        return Err(abort(AbortReason::ReplicaFailure, &tx.items[todo[0]]));
    }
    let mut failed = None;
    for &(i, n, a, c) in cas.iter() {
        if c.swapped(&tx.c.ep) {
            tx.items[i].chain_lock = Some((n, a));
        } else {
            failed.get_or_insert(abort(AbortReason::LockConflict, &tx.items[i]));
        }
    }
    match failed {
        Some(a) => Err(a),
        None => Ok(()),
    }
}

/// Walk the chains: look for the key, its tombstones, and free slots. A chain shared by
/// several rows keeps as many free slots as rows (the rows place themselves one by one).
async fn walk_chains<P: Protocol>(
    tx: &mut Tx<'_, P>,
    map: &PoolMap,
    s: &mut InsertScratch,
) -> Result<(), Abort> {
    let InsertScratch {
        todo,
        walks,
        reads,
        taken,
        sharing,
        free,
        ..
    } = s;
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
            more |= on_bucket(tx, map, w, reads[k], (k, sharing[k]), taken, free)?;
        }
        if !more {
            return Ok(());
        }
        let via = tx.c.via(Stage::Fetch);
        for (k, w) in walks.iter().enumerate() {
            if w.end.is_none() {
                let t = table(map, tx.items[w.item].table);
                let len = t.bucket_bytes as usize;
                reads[k] = Read::post(&mut tx.c.ep, via, w.chain.0, w.bucket, len);
            }
        }
        if tx.c.ep.post().await.is_err() {
            return Err(abort(AbortReason::ReplicaFailure, &tx.items[todo[0]]));
        }
    }
}

/// One bucket of walk `k` read: the key must not be there; its tombstones and the free slots
/// are noted. True if the chain goes on (the walk moved to its next bucket).
fn on_bucket<P: Protocol>(
    tx: &mut Tx<'_, P>,
    map: &PoolMap,
    w: &mut Walk,
    read: Read,
    (k, sharing): (usize, usize),
    taken: &[u64],
    free: &mut Vec<(usize, u64, Vec<u8>)>,
) -> Result<bool, Abort> {
    let it = &tx.items[w.item];
    let t = table(map, it.table);
    let codec = t.codec();
    let (table_id, key) = (it.table, it.key);
    let bytes = read.bytes(&tx.c.ep);
    if bytes.len() < t.bucket_bytes as usize {
        // Only a malformed RPC reply is short: treat the memory node as failed.
        return Err(abort(AbortReason::ReplicaFailure, it));
    }
    let scan = t.scan(w.bucket, bytes, key);
    if scan.found.is_some() {
        return Err(abort(AbortReason::Exists, it));
    }
    // The home bucket, read under the chain lock: its metadata word as a protocol will
    // update it (SUNDIAL freezes its chain lease).
    let home = (w.hops == 0).then(|| super::fetch::chain_meta(bytes));
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
        } else if w.free < sharing {
            w.free += 1;
            free.push((k, off, tx.c.spare.take_copy(rec)));
        }
    }
    if let Some(m) = home {
        tx.items[w.item].meta = m;
    }
    let it = &tx.items[w.item];
    match next_bucket(t, scan.next, &mut w.hops) {
        Err(()) => Err(abort(AbortReason::CorruptChain, it)),
        Ok(Some(n)) => {
            w.bucket = n;
            Ok(true)
        }
        Ok(None) => {
            w.end = Some(w.bucket);
            Ok(false)
        }
    }
}

/// Place the rows, one by one: each in its key's own tombstone, a free slot of its chain, or
/// a slot of an overflow bucket chained for it.
async fn place<P: Protocol>(
    tx: &mut Tx<'_, P>,
    map: &PoolMap,
    s: &mut InsertScratch,
) -> Result<(), Abort> {
    let InsertScratch {
        walks,
        free,
        placed,
        fresh,
        ..
    } = s;
    placed.clear();
    fresh.clear();
    for (k, w) in walks.iter_mut().enumerate() {
        let t = table(map, tx.items[w.item].table);
        let pick = w.own.take().or_else(|| {
            free.iter_mut()
                .find(|(j, off, _)| *j == k && !placed.contains(off))
                .map(|(_, off, image)| (*off, std::mem::take(image)))
        });
        let (slot, image) = match pick {
            Some(p) => p,
            None => {
                let slot = fresh_slot(tx, t, w, fresh).await?;
                let len = t.record_bytes as usize;
                (slot, tx.c.spare.take(len, len))
            }
        };
        placed.push(slot);
        let h = t.codec().header(&image);
        let it = &mut tx.items[w.item];
        it.offset = Some(slot);
        it.node = w.chain.0;
        it.version = w.tombstone;
        it.install = Some(h.version.max(w.tombstone) + 1);
        // The slot's roll-back count, carried by the install: a slot whose last insert was
        // rolled back is stamped one version below that insert's, which this one installs.
        it.restores = h.restores;
        let pooled = std::mem::replace(&mut it.image, image);
        it.new = NewValue::Insert;
        it.cold = true;
        tx.c.spare.give(pooled);
    }
    Ok(())
}

/// A slot for a row whose chain has no free one: the next of an overflow bucket this call
/// chained already, or the first of a new one.
async fn fresh_slot<P: Protocol>(
    tx: &mut Tx<'_, P>,
    t: &TableInfo,
    w: &Walk,
    fresh: &mut Vec<((NodeId, u64), u64, u32)>,
) -> Result<u64, Abort> {
    let f = fresh.iter_mut().find(|f| f.0 == w.chain);
    Ok(match f {
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
    })
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
