//! Lock words: CAS(0 -> our lock word) on a record's primary, in rounds of their own (the commit's
//! locks of items read without one), what a failed batch may have left locked, and giving
//! back a 2PL read share.

use super::{abort, share, table};
use crate::abort::{Abort, AbortReason};
use crate::item::{Item, NewValue};
use crate::mechanisms::rpc::{CasRead, Read};
use crate::mechanisms::validate::{changed, header_of};
use crate::protocol::Protocol;
use crate::stage::Stage;
use crate::tx::Tx;
use dtxn_fabric::{Endpoint, NodeId};
use dtxn_store::record::HEADER_BYTES;

/// A read-write item to lock at commit: read (or inserted) without its lock.
pub(crate) fn cold_rw<X>(it: &Item<X>) -> bool {
    it.rw && it.cold && (it.exists || it.new == NewValue::Insert) && it.offset.is_some()
}

/// What a lock round does for one item, on its primary.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Want {
    /// CAS(0 -> our lock word) on its lock word.
    pub lock: bool,
    /// READ its header (after the CAS, G6), to check it is unchanged.
    pub header: bool,
}

/// What a lock round posted for one item: a lock (with its header READ after the CAS, if
/// wanted), or a validation READ of the header alone.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Probe {
    Lock(CasRead),
    Header(Read),
}

/// One lock round (FORD's cold locks, FaRM's lock phase, DrTM+H's lock-and-validate): what
/// `want` asks for every item, in one batch. Every completion is looked at before an abort is
/// reported, so that no lock won goes unrecorded (and unreleased); a batch that fails (a memory
/// node down) gives back the CASes it may have won on the nodes still up.
pub(crate) async fn lock_round<P: Protocol>(
    tx: &mut Tx<'_, P>,
    want: impl Fn(&Item<P::Item>) -> Option<Want>,
) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    let (owner, word) = (tx.c.owner, tx.c.lock_word);
    super::journal::ready_tx(tx).await?;
    let mut checks = std::mem::take(&mut tx.c.mech.locks);
    checks.clear();
    for (i, it) in tx.items.iter().enumerate() {
        let (Some(w), Some(off)) = (want(it), it.offset) else {
            continue;
        };
        let p = table(&map, it.table).primary();
        let header = w.header.then_some((off, HEADER_BYTES));
        let probe = if w.lock {
            let via = tx.c.via(Stage::Lock);
            super::journal::note(tx.c, via, p, off);
            Probe::Lock(CasRead::post(&mut tx.c.ep, via, p, off, (0, word), header))
        } else if w.header {
            let via = tx.c.via(Stage::Validate);
            Probe::Header(Read::post(&mut tx.c.ep, via, p, off, HEADER_BYTES))
        } else {
            continue;
        };
        checks.push((i, probe, w.header));
    }
    if checks.is_empty() {
        tx.c.mech.locks = checks;
        return Ok(());
    }
    if tx.c.ep.post().await.is_err() {
        let first = abort(AbortReason::ReplicaFailure, &tx.items[checks[0].0]);
        let cased: Vec<(NodeId, u64, u64)> = checks
            .iter()
            .filter(|c| matches!(c.1, Probe::Lock(_)))
            .map(|&(i, _, _)| {
                let it = &tx.items[i];
                (
                    table(&map, it.table).primary(),
                    it.offset.expect("picked"),
                    0,
                )
            })
            .collect();
        give_back_after_failure(tx, &cased, word).await;
        return Err(first);
    }
    let mut failed = None;
    for &(i, probe, wants_header) in &checks {
        let it = &mut tx.items[i];
        let bytes = match probe {
            Probe::Lock(c) => {
                if !c.swapped(&tx.c.ep) {
                    failed.get_or_insert(abort(AbortReason::LockConflict, it));
                    continue;
                }
                it.locked = true;
                it.cold = false;
                c.bytes(&tx.c.ep)
            }
            Probe::Header(r) => r.bytes(&tx.c.ep),
        };
        if !wants_header {
            continue;
        }
        let Some(h) = header_of(bytes) else {
            // Only a malformed RPC reply is short: treat the memory node as failed.
            failed.get_or_insert(abort(AbortReason::ReplicaFailure, it));
            continue;
        };
        if let (Some(v), Probe::Lock(_)) = (&tx.c.vcache, probe) {
            // The version under the lock: if it differs from the one read, we abort below and
            // the entry must hold what memory holds.
            v.lock(it.table, it.key, h.version, owner);
        }
        if changed(it, &h) {
            failed.get_or_insert(abort(AbortReason::Validation, it));
        }
    }
    tx.c.mech.locks = checks;
    failed.map_or(Ok(()), Err)
}

/// Awaits a FLUSH to each of `nodes`, before CASes that give back words that may hold ours.
/// Such a word may instead be an earlier transaction's of ours whose release (a detached WRITE
/// of 0) has not landed yet: a CAS would free it ahead of that WRITE, another coordinator
/// could lock the record, and the late WRITE would free that lock. The contract orders no
/// atomic after an earlier WRITE on its QP; a FLUSH executes after every one, and completion
/// means executed (on a node still up a FLUSH completes even where another is down).
pub(crate) async fn await_releases(ep: &mut Endpoint, nodes: impl IntoIterator<Item = NodeId>) {
    let mut flushed: Vec<NodeId> = Vec::new();
    for n in nodes {
        if !flushed.contains(&n) {
            flushed.push(n);
            ep.flush(n);
        }
    }
    if !flushed.is_empty() {
        let _ = ep.post().await;
    }
}

/// A batch with lock CASes failed (a memory node down): the CASes on the nodes still up may
/// have succeeded, and the transaction never learned which. Give back every one of those lock
/// words that still holds our lock word (CAS ours -> what it held before our CAS: 0, or the
/// read share an upgrade expected; a word another holds is left alone), except those we hold
/// through an earlier round (they are released with the rest), once our earlier releases on
/// those nodes have landed (one round trip more, on this path only). `word` is what the CASes
/// put there: the lock word for record locks, the attempt's word for chain locks (Motor: its
/// owner id, for both). Each of `addrs` is (node, address, the word before).
///
/// The shared mechanisms' words are mostly unique per attempt ([`super::attempt_word`]), so
/// ours never matches an earlier attempt's lock whose release has not landed, whichever way
/// that release travels. The FLUSHes first stay for what is not: Motor's words and Scythe's
/// OCC words are the owner id alone (their releases are one-sided WRITEs, which a FLUSH
/// orders), and within one attempt a lock taken through a stale address is released by a
/// WRITE of 0 (`fetch.rs`) that a later failed batch's CAS on the same word must follow.
pub(crate) async fn give_back_after_failure<P: Protocol>(
    tx: &mut Tx<'_, P>,
    addrs: &[(NodeId, u64, u64)],
    word: u64,
) {
    let map = tx.c.map.clone();
    let held = |tx: &Tx<'_, P>, (n, a): (NodeId, u64)| {
        tx.items.iter().any(|it| {
            it.chain_lock == Some((n, a))
                || it.locked && it.offset == Some(a) && table(&map, it.table).primary() == n
        })
    };
    let via = tx.c.via(Stage::Lock);
    let give: Vec<(NodeId, u64, u64)> = addrs
        .iter()
        .copied()
        .filter(|&(n, a, _)| !held(tx, (n, a)))
        .collect();
    if give.is_empty() {
        return;
    }
    await_releases(&mut tx.c.ep, give.iter().map(|&(n, _, _)| n)).await;
    for &(n, a, before) in &give {
        CasRead::post(&mut tx.c.ep, via, n, a, (word, before), None);
    }
    // A node that is down keeps nothing of ours: its locks go with its memory.
    let _ = tx.c.ep.post().await;
}

/// Locks the read-write items read without their lock (cold, or hitchhiking off), checking
/// their versions: CAS + READ(header) on the primary.
pub(crate) async fn lock_cold<P: Protocol>(tx: &mut Tx<'_, P>) -> Result<(), Abort> {
    lock_round(tx, |it| {
        cold_rw(it).then_some(Want {
            lock: true,
            header: true,
        })
    })
    .await
}

/// Gives back a read share of the lock word at `off` on `node`, taken as `held` (posted, not
/// waited for): the lock stage's way, since its atomics must all go one way (G11). Not once
/// the share may be void by the time it lands ([`share::usable`]): it is left to expire, so
/// that it never decrements a count started since.
pub(crate) fn unshare<P: Protocol>(tx: &mut Tx<'_, P>, node: NodeId, off: u64, held: u64) {
    if !share::usable(held, share::Terms::of(&tx.c.ep)) {
        return;
    }
    let via = tx.c.via(Stage::Lock);
    super::rpc::unshare(&mut tx.c.ep, via, node, off, held);
}

/// Before the install: each chain word the transaction froze (an insert's; a record's word
/// is rewritten by the install itself) is rewritten, still frozen, to what the release will
/// leave there unfrozen: `seal` says, per item, where and what (updating the item's own note
/// of its frozen word, for the abort's unfreeze), and the WRITE rides the install's first
/// batch (`Protocol::before_install`: once the undo log has landed, so that no abort leaves
/// it queued behind the unfreeze's CAS, which nothing orders after it), the commit's way, on
/// the primary's queue pair ahead of the install's WRITEs (G4). So a coordinator that
/// dies once its install landed leaves recovery a freeze that thaws to the commit's
/// timestamp, which its own absent reads of the chain rest on, not to the word before the
/// freeze, which would let a later insert of a key it read absent commit beneath it. (An
/// abort after this unfreezes to the sealed word: a chain word too high costs an inserter
/// an abort, never a read its guarantee.)
pub(crate) fn seal_chain_freezes<P: Protocol>(
    tx: &mut Tx<'_, P>,
    seal: impl Fn(&mut P::Item, Option<u64>) -> Option<(NodeId, u64, u64)>,
) {
    let via = tx.c.via(Stage::Commit);
    for it in &mut tx.items {
        if let Some((n, at, w)) = seal(&mut it.ext, it.offset) {
            super::rpc::write(&mut tx.c.ep, via, n, at, &w.to_le_bytes());
        }
    }
}

/// After an abort: every metadata word the transaction froze (bit 63: SUNDIAL's leases,
/// MVCC's read timestamps) is unfrozen, CAS(frozen -> as it was), so that a word someone else
/// froze is left alone; and that is waited for before the locks are given back, so a lock's
/// next holder never finds a freeze left by a live coordinator. `frozen` gives an item's
/// (frozen word, its address) if the transaction may have frozen one.
pub(crate) async fn unfreeze<P: Protocol>(
    tx: &mut Tx<'_, P>,
    stage: Stage,
    frozen: impl Fn(&P::Item) -> Option<(u64, (NodeId, u64))>,
) {
    const FROZEN: u64 = 1 << 63;
    let via = tx.c.via(stage);
    let mut any = false;
    for it in &tx.items {
        if let Some((f, (n, at))) = frozen(&it.ext) {
            CasRead::post(&mut tx.c.ep, via, n, at, (f, f & !FROZEN), None);
            any = true;
        }
    }
    if any {
        let _ = tx.c.ep.post().await;
    }
}
