//! Absence validation: a key read absent must still be absent at commit (no phantoms).

use super::rpc::Read;
use super::{abort, next_bucket, table};
use crate::abort::{Abort, AbortReason};
use crate::item::NewValue;
use crate::protocol::Protocol;
use crate::stage::Stage;
use crate::tx::Tx;
use dtxn_store::PoolMap;

/// Absent keys read by the transaction must still be absent at validation: their chain holds
/// no valid record of the key, and nobody holds the chain's insert lock (an insert in
/// progress). One READ per bucket of each chain, the chains walked together.
pub(crate) async fn validate_absent<P: Protocol>(tx: &mut Tx<'_, P>) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    // (item, bucket being read, overflow hops, greatest tombstone version so far)
    let mut walks = std::mem::take(&mut tx.c.mech.absent);
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
        tx.c.mech.absent = walks;
        return Ok(());
    }
    let mut reads = std::mem::take(&mut tx.c.mech.absent_reads);
    insert_locks_free(tx, &map, &walks, &mut reads).await?;
    // Then every chain, all of them together, a round per bucket.
    let via = tx.c.via(Stage::Validate);
    while !walks.is_empty() {
        reads.clear();
        for &(i, bucket, _, _) in &walks {
            let t = table(&map, tx.items[i].table);
            let len = t.bucket_bytes as usize;
            reads.push(Read::post(&mut tx.c.ep, via, t.primary(), bucket, len));
        }
        if tx.c.ep.post().await.is_err() {
            return Err(abort(AbortReason::ReplicaFailure, &tx.items[walks[0].0]));
        }
        let mut k = 0;
        let mut failed = None;
        walks.retain_mut(|walk| {
            let r = reads[k];
            k += 1;
            on_bucket(tx, &map, walk, r, &mut failed)
        });
        if let Some(a) = failed {
            return Err(a);
        }
    }
    (tx.c.mech.absent, tx.c.mech.absent_reads) = (walks, reads);
    Ok(())
}

/// First the chains' insert locks, alone: a lock word fetched in the same multi-line READ
/// as the slots may be fetched after them (G2), and miss an insert that landed and
/// released in between. Read after every lock of ours is held, a free insert lock then
/// means no insert of the key is in progress or can be serialized before us unseen.
async fn insert_locks_free<P: Protocol>(
    tx: &mut Tx<'_, P>,
    map: &PoolMap,
    walks: &[(usize, u64, u64, u64)],
    reads: &mut Vec<Read>,
) -> Result<(), Abort> {
    // Our chain locks hold this attempt's word.
    let ours = tx.c.attempt_word;
    let via = tx.c.via(Stage::Validate);
    reads.clear();
    for &(i, home, _, _) in walks {
        let t = table(map, tx.items[i].table);
        reads.push(Read::post(&mut tx.c.ep, via, t.primary(), home, 64));
    }
    if tx.c.ep.post().await.is_err() {
        return Err(abort(AbortReason::ReplicaFailure, &tx.items[walks[0].0]));
    }
    for (&(i, _, _, _), r) in walks.iter().zip(reads.iter()) {
        let Some(lock) = r.bytes(&tx.c.ep).get(8..16) else {
            // Only a malformed RPC reply is short: treat the memory node as failed.
            return Err(abort(AbortReason::ReplicaFailure, &tx.items[i]));
        };
        let lock = u64::from_le_bytes(lock.try_into().expect("8 bytes"));
        if lock != 0 && lock != ours {
            return Err(abort(AbortReason::Validation, &tx.items[i]));
        }
    }
    Ok(())
}

/// One bucket of a chain read (`r`): the key must not be in it; its tombstones are
/// noted. True if the walk goes on to the chain's next bucket.
fn on_bucket<P: Protocol>(
    tx: &Tx<'_, P>,
    map: &PoolMap,
    (i, bucket, hops, tombstone): &mut (usize, u64, u64, u64),
    r: Read,
    failed: &mut Option<Abort>,
) -> bool {
    let it = &tx.items[*i];
    let t = table(map, it.table);
    let bytes = r.bytes(&tx.c.ep);
    if bytes.len() < t.bucket_bytes as usize {
        // Only a malformed RPC reply is short: treat the memory node as failed.
        failed.get_or_insert(abort(AbortReason::ReplicaFailure, it));
        return false;
    }
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
}
