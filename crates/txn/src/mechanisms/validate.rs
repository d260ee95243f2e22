//! Validation of what was read without a lock: a header READ per item (on the primary, whose
//! lock word is the only one writers take), the version unchanged and nobody holding it.

use super::{abort, table};
use crate::abort::{Abort, AbortReason};
use crate::item::{Item, NewValue};
use crate::mechanisms::rpc::Read;
use crate::protocol::Protocol;
use crate::stage::Stage;
use crate::tx::Tx;
use crate::txn::TxKind;
use crate::vcache::Check;
use dtxn_store::cache::{check_slot, SlotCheck};
use dtxn_store::record::{RecordHeader, HEADER_BYTES};

/// Whether an item's header, read at validation, says the item changed since it was read: a
/// read-only item must still have its version and be unlocked; a locked one its version; an
/// insert's free slot must still be free, stamped below the version we install (and not
/// rolled back since: see below).
///
/// A record rolled back since it was read is back at the version read, with one more restore
/// (`dtxn_store::record`): changed too. Its value is the one read, but a commit that went on
/// would install the restore count it read, stamping its lines like the install that was
/// rolled back, at the same version, with other bytes.
pub(crate) fn changed<X>(it: &Item<X>, h: &RecordHeader) -> bool {
    if it.new == NewValue::Insert {
        h.valid || h.version >= it.new_version() || h.restores != it.restores
    } else if it.rw {
        h.version != it.version
            || h.restores != it.restores
            || check_slot(h, it.table, it.key) == SlotCheck::Stale
    } else {
        h.version != it.version
            || h.restores != it.restores
            || h.lock != 0
            || check_slot(h, it.table, it.key) == SlotCheck::Stale
    }
}

/// Validates the read-only items: each still has the version read and is not locked (a
/// locked item may be about to change under a transaction already serialized before us).
/// The header is read from the primary even for items read from a backup: the primary's lock
/// word is the only one writers take, and the commit installs every replica before it
/// unlocks, so an unlocked primary at version v means every replica is at v.
pub(crate) async fn validate_reads<P: Protocol>(tx: &mut Tx<'_, P>) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    if tx.c.cfg.ford.trust_invisible_bit && tx.kind == TxKind::ReadOnly && tx.items.len() == 1 {
        // The published code's shortcut (negative control only): one item, no validation.
        return Ok(());
    }
    let mut checks = std::mem::take(&mut tx.c.mech.reads);
    checks.clear();
    let owner = tx.c.owner;
    let via = tx.c.via(Stage::Validate);
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
                    tx.c.mech.reads = checks;
                    return Err(a);
                }
                Check::Miss => {}
            }
        }
        let t = table(&map, it.table);
        checks.push((
            i,
            Read::post(&mut tx.c.ep, via, t.primary(), off, HEADER_BYTES),
        ));
    }
    if checks.is_empty() {
        tx.c.mech.reads = checks;
        return Ok(());
    }
    if tx.c.ep.post().await.is_err() {
        return Err(abort(AbortReason::ReplicaFailure, &tx.items[checks[0].0]));
    }
    let mut failed = None;
    for &(i, read) in &checks {
        let it = &tx.items[i];
        let Some(h) = header_of(read.bytes(&tx.c.ep)) else {
            // Only a malformed RPC reply is short: treat the memory node as failed.
            failed = Some(abort(AbortReason::ReplicaFailure, it));
            break;
        };
        if changed(it, &h) {
            failed = Some(abort(AbortReason::Validation, it));
            break;
        }
        if let Some(v) = &tx.c.vcache {
            v.fill(it.table, it.key, it.version);
        }
    }
    tx.c.mech.reads = checks;
    failed.map_or(Ok(()), Err)
}

#[inline]
pub(crate) fn header(line0: &[u8]) -> RecordHeader {
    dtxn_store::SingleVersion::new(0).header(line0)
}

/// The header at the start of `bytes`, if they hold one.
#[inline]
pub(crate) fn header_of(bytes: &[u8]) -> Option<RecordHeader> {
    (bytes.len() >= HEADER_BYTES).then(|| header(bytes))
}
