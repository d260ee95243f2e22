//! The release after a commit or an abort: unlock and make visible, close the log entry;
//! posted detached, off the critical path.

use super::table;
use crate::item::NewValue;
use crate::protocol::Protocol;
use crate::tx::Tx;
use dtxn_store::log::{LogStatus, STATUS_OFF};

/// Unlock and make visible, and close the log entry: posted detached, nobody waits.
pub(crate) fn release<P: Protocol>(tx: &mut Tx<'_, P>, status: LogStatus) {
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
    if tx.undo.logged > 0 {
        if let Some((slice, _)) = tx.c.log_slice {
            for &n in &tx.undo.nodes {
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
pub(crate) async fn release_on_abort<P: Protocol>(tx: &mut Tx<'_, P>) {
    let _ = tx.c.ep.wait_background().await;
    release(tx, LogStatus::Aborted);
}
