//! Motor's inserts: over a key's tombstone CVT (under its lock), or into a free slot of the
//! key's chain chosen under the chain's insert lock and claimed by the commit's mark round.

use super::execute::{run_stages, Stage};
use super::{start, Motor};
use crate::abort::{Abort, AbortReason};
use crate::item::NewValue;
use crate::mechanisms::insert::{accept_row, RowItem};
use crate::mechanisms::rpc::Via;
use crate::mechanisms::{abort, journal, table};
use crate::protocol::Row;
use crate::tx::Tx;
use dtxn_fabric::{NodeId, OpId};
use dtxn_store::{PoolMap, TableInfo};
use std::rc::Rc;

/// Inserts, any number at once. A key with a CVT (a tombstone) is inserted over it, under the
/// CVT's lock; the keys without one get free slots of their chains, chosen under the chains'
/// insert locks (CAS + READ of every home bucket, all in one round trip) and claimed with the
/// commit's mark round. The same as inserting them one by one, in order.
pub(crate) async fn insert_many(tx: &mut Tx<'_, Motor>, rows: &[Row<'_>]) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    // (item, row) of every key to insert.
    let mut todo = std::mem::take(&mut tx.s.todo);
    todo.clear();
    let mut lock_cvts = Vec::new();
    for (r, &row) in rows.iter().enumerate() {
        let queued = |i| todo.iter().any(|&(j, _)| j == i);
        let i = match accept_row(tx, &map, row, queued)? {
            RowItem::Place(i) => i,
            RowItem::Updated => continue,
        };
        let it = &tx.items[i];
        if let (Some(off), Some(_), false) = (it.offset, &it.ext, it.locked) {
            // Read absent through its CVT (a tombstone): lock it.
            lock_cvts.push((i, Stage::Cvt { off, lock: true }));
        }
        todo.push((i, r));
    }
    if todo.is_empty() {
        tx.s.todo = todo;
        return Ok(());
    }
    let first = abort(AbortReason::ReplicaFailure, &tx.items[todo[0].0]);
    start(tx).await.map_err(|()| first)?;
    if !lock_cvts.is_empty() {
        run_stages(tx, lock_cvts).await?;
    }
    let mut fresh = std::mem::take(&mut tx.s.fresh);
    fresh.clear();
    fresh.extend(
        todo.iter()
            .map(|&(i, _)| i)
            .filter(|&i| tx.items[i].ext.is_none()),
    );
    if !fresh.is_empty() {
        choose_slots(tx, &map, &fresh).await?;
    }
    tx.s.fresh = fresh;
    for &(i, r) in &todo {
        let it = &mut tx.items[i];
        if it.exists {
            return Err(abort(AbortReason::Exists, it));
        }
        it.value.copy_from_slice(rows[r].2);
        it.new = NewValue::Insert;
    }
    tx.s.todo = todo;
    Ok(())
}

/// A chain walk of [`choose_slots`]: (item, bucket to read next, hops so far, first free slot
/// seen).
type ChainWalk = (usize, u64, u64, Option<u64>);

/// What [`choose_slots`]' walks leave for after them.
#[derive(Default)]
struct Leftovers {
    /// Keys found with a CVT: locked and read through it.
    lock_cvts: Vec<(usize, Stage)>,
    /// Items whose chain has no free slot: a new overflow bucket each.
    slow: Vec<usize>,
}

/// Chooses slots for fresh inserts together: every chain's insert lock (one CAS per chain not
/// held yet) and home bucket in one batch, then the chains' overflow buckets a round per hop,
/// all chains at once. A key found in its chain after all is locked through its CVT; a chain
/// without a free slot gets a new overflow bucket from [`choose_slot`].
pub(crate) async fn choose_slots(
    tx: &mut Tx<'_, Motor>,
    map: &Rc<PoolMap>,
    items: &[usize],
) -> Result<(), Abort> {
    let scratch = &mut tx.s;
    let mut cas = std::mem::take(&mut scratch.chain_cas);
    // Per item: (item, bucket to read next, hops so far, first free slot seen).
    let mut walks = std::mem::take(&mut scratch.walks);
    let mut next = std::mem::take(&mut scratch.next_walks);
    let mut reads = std::mem::take(&mut scratch.ids);
    if let Err(a) = journal::ready_tx(tx).await {
        let scratch = &mut tx.s;
        (
            scratch.chain_cas,
            scratch.walks,
            scratch.next_walks,
            scratch.ids,
        ) = (cas, walks, next, reads);
        return Err(a);
    }
    lock_chains(tx, map, items, &mut cas, &mut walks);
    let mut left = Leftovers::default();
    let mut first_round = true;
    while !walks.is_empty() {
        reads.clear();
        for &(i, at, _, _) in &walks {
            let t = table(map, tx.items[i].table);
            reads.push(tx.c.ep.read(t.primary(), at, t.bucket_bytes as usize));
        }
        if tx.c.ep.post().await.is_err() {
            if first_round {
                let taken: Vec<(NodeId, u64, u64)> =
                    cas.iter().map(|&(_, n, a, _)| (n, a, 0)).collect();
                let owner = tx.c.owner;
                crate::mechanisms::lock::give_back_after_failure(tx, &taken, owner).await;
            }
            return Err(abort(AbortReason::ReplicaFailure, &tx.items[walks[0].0]));
        }
        if first_round {
            first_round = false;
            chain_locks_won(tx, &cas)?;
        }
        next.clear();
        for (&walk, &read) in walks.iter().zip(&reads) {
            on_bucket(tx, map, walk, read, &mut next, &mut left)?;
        }
        std::mem::swap(&mut walks, &mut next);
    }
    let scratch = &mut tx.s;
    (
        scratch.chain_cas,
        scratch.walks,
        scratch.next_walks,
        scratch.ids,
    ) = (cas, walks, next, reads);
    if !left.lock_cvts.is_empty() {
        run_stages(tx, left.lock_cvts).await?;
    }
    for i in left.slow {
        choose_slot(tx, map, i).await?;
    }
    Ok(())
}

/// Queues a CAS on every chain's insert lock not held yet (one per chain), and starts each
/// item's walk at its home bucket.
fn lock_chains(
    tx: &mut Tx<'_, Motor>,
    map: &PoolMap,
    items: &[usize],
    cas: &mut Vec<(usize, NodeId, u64, OpId)>,
    walks: &mut Vec<ChainWalk>,
) {
    let owner = tx.c.owner;
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
            journal::note(tx.c, Via::OneSided, lock.0, lock.1);
            cas.push((i, lock.0, lock.1, tx.c.ep.cas(lock.0, lock.1, 0, owner)));
        }
        walks.push((i, home, 0, None));
    }
}

/// The chain locks' CASes completed. Record every chain lock won before reporting one lost,
/// so that all are released.
fn chain_locks_won(
    tx: &mut Tx<'_, Motor>,
    cas: &[(usize, NodeId, u64, OpId)],
) -> Result<(), Abort> {
    let mut lost = None;
    for &(i, n, a, c) in cas {
        if tx.c.ep.cas_ok(c) {
            tx.items[i].chain_lock = Some((n, a));
        } else {
            lost.get_or_insert(abort(AbortReason::LockConflict, &tx.items[i]));
        }
    }
    lost.map_or(Ok(()), Err)
}

/// One bucket of a walk read (by `read`): the key found (lock its CVT), else the first free
/// slot noted, and the walk goes on to the next bucket or, at the chain's end, places the
/// item in its free slot (or leaves it for a new overflow bucket).
fn on_bucket(
    tx: &mut Tx<'_, Motor>,
    map: &PoolMap,
    (i, at, hops, mut free): ChainWalk,
    read: OpId,
    next: &mut Vec<ChainWalk>,
    left: &mut Leftovers,
) -> Result<(), Abort> {
    let bytes = tx.c.ep.bytes(read);
    let (table_id, key) = (tx.items[i].table, tx.items[i].key);
    let t = table(map, table_id);
    let scan = t.scan(at, bytes, key);
    if let Some((_, off)) = scan.found {
        // The key has a CVT (deleted, or inserted since we looked): lock and read it.
        tx.c.cache.insert(table_id, key, off);
        left.lock_cvts.push((i, Stage::Cvt { off, lock: true }));
        return Ok(());
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
            None => left.slow.push(i),
        },
    }
    Ok(())
}

/// Where [`walk_chain`] ended.
enum Walked {
    /// The key has a CVT, at this slot.
    Found(u64),
    /// The chain's last bucket, and the first free slot seen.
    End { free: Option<u64>, chain_end: u64 },
}

/// A fresh insert: lock the chain (CAS + READ of the home bucket), find the key still absent
/// and choose a free slot, claimed later by the commit's mark round (so a reader of the
/// chain sees the claim before our commit timestamp exists). If the key has a CVT after all
/// (a tombstone), lock that instead.
pub(crate) async fn choose_slot(
    tx: &mut Tx<'_, Motor>,
    map: &Rc<PoolMap>,
    i: usize,
) -> Result<(), Abort> {
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
    if !held {
        journal::ready_tx(tx).await?;
        journal::note(tx.c, Via::OneSided, primary, lock_addr);
    }
    let cas = (!held).then(|| tx.c.ep.cas(primary, lock_addr, 0, owner));
    let read = tx.c.ep.read(primary, home, t.bucket_bytes as usize);
    if tx.c.ep.post().await.is_err() {
        return Err(bad(AbortReason::ReplicaFailure));
    }
    if let Some(c) = cas {
        if !tx.c.ep.cas_ok(c) {
            return Err(bad(AbortReason::LockConflict));
        }
        tx.items[i].chain_lock = Some((primary, lock_addr));
    }
    let (free, chain_end) = match walk_chain(tx, t, i, read).await? {
        Walked::Found(off) => {
            // The key has a CVT (deleted, or inserted since we looked): lock and read it.
            tx.c.cache.insert(table_id, key, off);
            return run_stages(tx, vec![(i, Stage::Cvt { off, lock: true })]).await;
        }
        Walked::End { free, chain_end } => (free, chain_end),
    };
    let slot = match free {
        Some(s) => s,
        None => new_overflow_slot(tx, t, i, chain_end).await?,
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

/// Walks item `i`'s chain from its home bucket (already read, by `read`), a round per
/// overflow bucket, to the key's CVT or the chain's end.
async fn walk_chain(
    tx: &mut Tx<'_, Motor>,
    t: &TableInfo,
    i: usize,
    mut read: OpId,
) -> Result<Walked, Abort> {
    let key = tx.items[i].key;
    let primary = t.primary();
    let codec = t.codec();
    let mut bucket = t.home_bucket(key);
    let mut free = None;
    let mut hops = 0;
    loop {
        let bytes = tx.c.ep.bytes(read);
        let scan = t.scan(bucket, bytes, key);
        if let Some((_, off)) = scan.found {
            return Ok(Walked::Found(off));
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
                    return Err(abort(AbortReason::BadRequest, &tx.items[i]));
                }
                bucket = n;
                read = tx.c.ep.read(primary, n, t.bucket_bytes as usize);
                if tx.c.ep.post().await.is_err() {
                    return Err(abort(AbortReason::ReplicaFailure, &tx.items[i]));
                }
            }
            None => {
                return Ok(Walked::End {
                    free,
                    chain_end: bucket,
                })
            }
        }
    }
}

/// Chain a new overflow bucket (we hold the chain's insert lock) after `chain_end`: claimed
/// on the primary, linked on every replica. Its first slot.
async fn new_overflow_slot(
    tx: &mut Tx<'_, Motor>,
    t: &TableInfo,
    i: usize,
    chain_end: u64,
) -> Result<u64, Abort> {
    let f = tx.c.ep.faa(t.primary(), t.overflow_counter(), 1);
    if tx.c.ep.post().await.is_err() {
        return Err(abort(AbortReason::ReplicaFailure, &tx.items[i]));
    }
    let index = tx.c.ep.old(f);
    if index >= t.overflow_buckets {
        return Err(abort(AbortReason::TableFull, &tx.items[i]));
    }
    for &n in &t.replicas {
        tx.c.ep.write(n, chain_end, &(index + 1).to_le_bytes());
    }
    if tx.c.ep.post().await.is_err() {
        return Err(abort(AbortReason::ReplicaFailure, &tx.items[i]));
    }
    Ok(t.slot(t.overflow_bucket(index), 0))
}
