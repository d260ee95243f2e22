//! The release after a commit or an abort: unlock and make visible, close the log entry;
//! posted detached, off the critical path.

use super::lock::unshare;
use super::rpc;
use super::table;
use crate::protocol::Protocol;
use crate::stage::Stage;
use crate::tx::Tx;
use dtxn_store::log::LogStatus;

/// Unlock and make visible, give back read shares, and close the log entry: posted
/// detached, nobody waits. Unlocking is a WRITE of 0 by the holder (G8): the release stage's
/// way, one-sided or as RPCs (a memory node's store and a NIC's CAS on a held word never
/// race: every other CAS on it fails). Read shares go back the lock stage's way, with the
/// atomics they pair with (G11).
///
/// The backups' lock words are left as the install wrote them (our id, invisible): only a
/// primary's word is a lock. A WRITE clearing a backup's word travels on another queue pair
/// than the primary's unlock, so it could land after the next holder's install there and
/// erase that install's word, which is what recovery on a promoted backup tells a dead
/// coordinator's install by (`settle.rs`; the next install overwrites ours, and a promotion
/// clears what is left: `failover::repair_promoted`).
pub(crate) fn release<P: Protocol>(tx: &mut Tx<'_, P>, status: LogStatus) {
    let map = tx.c.map.clone();
    let zero = 0u64.to_le_bytes();
    let via = tx.c.via(Stage::Release);
    for i in 0..tx.items.len() {
        let it = &tx.items[i];
        let Some(off) = it.offset else { continue };
        let t = table(&map, it.table);
        if it.locked {
            rpc::write(&mut tx.c.ep, via, t.primary(), off, &zero);
            if let Some(v) = &tx.c.vcache {
                v.unlock(it.table, it.key, tx.c.owner);
            }
        } else if it.shared {
            unshare(tx, t.primary(), off, it.share_word);
        }
    }
    for it in &tx.items {
        if let Some((n, addr)) = it.chain_lock {
            rpc::write(&mut tx.c.ep, via, n, addr, &zero);
        }
    }
    super::undo::queue_status(tx, status);
    // A memory node that is down loses nothing here: its replica is rebuilt on recovery.
    let _ = tx.c.ep.post_detached();
    for it in &mut tx.items {
        it.locked = false;
        it.shared = false;
        it.chain_lock = None;
    }
}

/// An abort: wait for the undo log (so that the next transaction may log), release.
pub(crate) async fn release_on_abort<P: Protocol>(tx: &mut Tx<'_, P>) {
    let _ = tx.c.ep.wait_background().await;
    release(tx, LogStatus::Aborted);
}
