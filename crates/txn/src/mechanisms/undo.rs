//! The undo log: the old image of every read-write item, in the coordinator's log slice on
//! every replica of the tables it may write, ahead of the commit's in-place WRITEs on each
//! memory node's QP: in the next batch posted (the commit's at the latest), or, with `flush`
//! or when the log and commit stages travel different ways, in the background while the
//! application's logic runs, acknowledged before the commit writes anything in place.

use super::{abort, table};
use crate::abort::{Abort, AbortReason};
use crate::item::{Item, NewValue};
use crate::mechanisms::{install, rpc};
use crate::protocol::Protocol;
use crate::stage::Stage;
use crate::tx::Tx;
use dtxn_fabric::NodeId;
use dtxn_store::log::{encode_head, LogStatus, HEAD_BYTES, STATUS_OFF};

/// A transaction's undo log so far.
#[derive(Debug, Default)]
pub(crate) struct UndoLog {
    /// Items in the entry written so far.
    pub logged: usize,
    /// The entry's body so far (items are appended as they are locked), its running crc,
    /// and the memory nodes that hold it.
    pub body: Vec<u8>,
    pub crc: crc32fast::Hasher,
    pub nodes: Vec<NodeId>,
    /// The transaction's item index of each logged item, in the entry's order.
    pub order: Vec<usize>,
}

impl UndoLog {
    /// Empties it for the next transaction (keeping its buffers).
    pub fn clear(&mut self) {
        self.logged = 0;
        self.body.clear();
        self.crc = crc32fast::Hasher::new();
        self.nodes.clear();
        self.order.clear();
    }
}

/// Writes the undo log (the old image of every read-write item) to every replica of the
/// tables written, in the background. Items are appended as they are locked: the new items
/// after the body already written, then the entry's first line (WRITEs on one QP apply in
/// order, G4, so a torn append leaves the previous entry valid). A node that joins the log
/// (a newly touched table's replica) gets the whole entry. Waits first for the previous log
/// write, so that at most one is outstanding.
pub(crate) async fn log_undo<P: Protocol>(tx: &mut Tx<'_, P>) -> Result<(), Abort> {
    if !P::undo_logged(&tx.c.cfg) {
        return Ok(());
    }
    let logged = |i: &Item<P::Item>| i.rw && (i.exists || i.new == NewValue::Insert);
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
    let old_len = tx.undo.body.len();
    let map = tx.c.map.clone();
    for (i, it) in tx.items.iter_mut().enumerate() {
        if !logged(it) || it.in_log {
            continue;
        }
        let insert = it.new == NewValue::Insert;
        // For an insert, the free slot as it was (a tombstone keeps its key and version).
        // A record kept with older copies (MVCC's version slots): its copy 0 alone. A
        // roll-back from the log then leaves the older copy the commit overwrote as the
        // commit wrote it (the version it replaced, naming the rolled-back one as its
        // successor, or torn): readers follow only links from committed versions, and skip
        // torn copies.
        let copy = table(&map, it.table).copy_bytes();
        let image: &[u8] = &it.image[..it.image.len().min(copy)];
        let offset = it.offset.expect("exists");
        dtxn_store::log::encode_item(it.table, offset, insert, image, &mut tx.undo.body);
        it.in_log = true;
        tx.undo.logged += 1;
        tx.undo.order.push(i);
    }
    if (HEAD_BYTES + tx.undo.body.len()) as u64 > slice_bytes {
        return Err(abort(AbortReason::LogFull, &tx.items[first]));
    }
    tx.undo.crc.update(&tx.undo.body[old_len..]);
    let head = encode_head(
        tx.id,
        tx.c.ep.id().index,
        LogStatus::Pending,
        tx.undo.logged as u32,
        tx.undo.body.len() as u32,
        tx.undo.crc.clone().finalize(),
    );
    let flush = tx.c.cfg.flush;
    let via = tx.c.via(Stage::Log);
    let mut nodes = std::mem::take(&mut tx.c.mech.nodes);
    replica_nodes(tx, &mut nodes);
    for &n in &nodes {
        let ep = &mut tx.c.ep;
        if tx.undo.nodes.contains(&n) {
            let tail = &tx.undo.body[old_len..];
            rpc::write(ep, via, n, slice + (HEAD_BYTES + old_len) as u64, tail);
            // (FORD's full flush: a FLUSH after each WRITE; the FLUSH below follows the last.)
            install::full_flush(ep, tx.c.cfg.full_flush(), n);
            rpc::write(ep, via, n, slice, &head);
        } else {
            rpc::write_parts(ep, via, n, slice, &[&head, &tx.undo.body]);
            tx.undo.nodes.push(n);
        }
        if flush {
            tx.c.ep.flush(n);
        }
    }
    tx.c.mech.nodes = nodes;
    if !flush && via == tx.c.via(Stage::Commit) {
        // The entry rides the next batch posted (a later fetch, a validation, or the commit
        // itself): on each memory node's QP its WRITEs precede every in-place WRITE of the
        // commit (G4; or, as RPCs, they come first in the same node's message, served in
        // order), and a crash leaves a prefix of each QP's ops, so no record changes on a node
        // whose log did not land. It costs the commit no round trip of its own. A FLUSH orders
        // nothing after it, so with `flush` the log is written and awaited first.
        return Ok(());
    }
    if tx.c.ep.post_background().is_err() {
        return Err(fail);
    }
    Ok(())
}

/// The memory nodes that hold a replica of a table this transaction may write, into `nodes`.
fn replica_nodes<P: Protocol>(tx: &Tx<'_, P>, nodes: &mut Vec<NodeId>) {
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

/// Queues the WRITE of `status` to every copy of the transaction's log entry, the log stage's
/// way (nothing if it logged nothing).
pub(crate) fn queue_status<P: Protocol>(tx: &mut Tx<'_, P>, status: LogStatus) {
    queue_head_word(tx, STATUS_OFF, status as u64);
}

/// Queues the WRITE of `word` at `off` of the entry's first line (outside its crc) to every
/// copy of the entry, the log stage's way: after the entry's own WRITEs on each node (in
/// order on one QP). Nothing if the transaction logged nothing.
pub(crate) fn queue_head_word<P: Protocol>(tx: &mut Tx<'_, P>, off: u64, word: u64) {
    if tx.undo.logged == 0 {
        return;
    }
    if let Some((slice, _)) = tx.c.log_slice {
        let via = tx.c.via(Stage::Log);
        for &n in &tx.undo.nodes {
            rpc::write(&mut tx.c.ep, via, n, slice + off, &word.to_le_bytes());
        }
    }
}
