//! The lock journal: where a coordinator tells recovery which lock words it may hold, so
//! that recovery releases a dead coordinator's locks in a few round trips instead of a scan
//! of every bucket (issue #23).
//!
//! Each coordinator has a journal on every memory node, [`BYTES`] just before Scythe's grant
//! journal at the end of its log slice: a header word, then a ring of slots, each the
//! address of a lock word on that node (a record's, or a chain's insert lock). Before each
//! lock CAS, in the same batch and the same way (one-sided or RPC), the coordinator CASes the
//! ring's next slot from the value it knows is there to the lock word's address. A one-sided
//! atomic executes before every later op of its QP (G6), and a node serves one batch's RPCs in
//! post order: the entry is in the pool no later than the lock, with no round trip of its own.
//! A WRITE would not do: an atomic is not ordered after an earlier WRITE.
//!
//! **Never overwritten while its lock may be held.** A slot is reused [`SLOTS`] entries later.
//! The coordinator counts the entries of each ring written since it last knew its releases
//! executed (they go detached, never awaited), and once half a ring is used, before a locking
//! phase, awaits a FLUSH on every memory node (it executes after every earlier WRITE on its
//! QP: the releases' included); a transaction that alone fills a ring marks the header
//! *overflowed* (a CAS before the lock, as an entry), and recovery then scans. Releases sent
//! as RPCs are not ordered with a FLUSH: with the release stage as RPCs, no journal.
//!
//! **The header** is 0 until the coordinator first loads its rings (one round trip, awaited
//! before its first lock: a CAS makes the header *active*, a READ takes the ring's contents),
//! *active* while every lock it takes is journaled, *overflowed* once one is not. Recovery
//! trusts a journal only when the header is active on every live memory node; otherwise (the
//! journal off in the run, or never loaded, or overflowed) it scans as before. A stale entry
//! is harmless: recovery clears a word only if it still holds the dead owner's id.
//!
//! On only where a coordinator can be recovered (`TxnConfig::lock_journal`, which the bench
//! sets with `--faults` and `--leases`): it costs a verb per lock, in the lock's batch.

use crate::abort::{Abort, AbortReason};
use crate::coord::Core;
use crate::mechanisms::rpc::{CasRead, Via};
use crate::protocol::Protocol;
use crate::tx::Tx;
use dtxn_fabric::{Endpoint, FabricError, NodeId};
use dtxn_store::PoolMap;

/// Bytes of a coordinator's journal on one memory node.
pub(crate) const BYTES: u64 = 4096;
/// Entries of the ring (the header takes the first word).
pub(crate) const SLOTS: u64 = BYTES / 8 - 1;
const ACTIVE: u64 = 1;
const OVERFLOWED: u64 = 2;

/// What a log slice lends the journals (this one, and Scythe's grant journal after it).
pub const TAIL: u64 = super::takeout::JOURNAL_BYTES + BYTES;

/// Where coordinator `index`'s journal is on each memory node: before the grant journal of
/// Scythe's takeout tickets, if the log slice is big enough to lend both (the rest stays the
/// log's).
pub(crate) fn at(map: &PoolMap, index: u32) -> Option<u64> {
    in_slice(map.log_slice(index)?)
}

/// Where the journal is in the log slice `(offset, bytes)`: its tail, if the log keeps at
/// least as much (else none: the log needs the room more).
fn in_slice((off, len): (u64, u64)) -> Option<u64> {
    (len >= 2 * TAIL).then(|| off + len - TAIL)
}

/// The log slice left to the log when the journal is on.
pub(crate) fn log_room(slice: (u64, u64)) -> (u64, u64) {
    (slice.0, slice.1 - TAIL)
}

/// One memory node's ring, as the coordinator knows it.
#[derive(Debug, Default)]
struct Ring {
    /// What each slot holds (known once loaded).
    slots: Vec<u64>,
    head: u64,
    next: u64,
    /// Entries written since the coordinator last waited for its detached batches.
    pending: u64,
    /// Of those, the current transaction's.
    current: u64,
}

/// A coordinator's journals.
#[derive(Debug)]
pub(crate) struct Journal {
    at: u64,
    loaded: bool,
    rings: Vec<Ring>,
}

impl Journal {
    pub(crate) fn new(at: u64, nodes: usize) -> Journal {
        Journal {
            at,
            loaded: false,
            rings: (0..nodes).map(|_| Ring::default()).collect(),
        }
    }

    /// A new transaction: its entries start from none.
    pub(crate) fn begin(&mut self) {
        for r in &mut self.rings {
            r.current = 0;
        }
    }
}

/// Before a locking phase: loads the rings the first time, and waits for the detached
/// batches once half a ring may hold locks of earlier transactions. Err: a memory node did
/// not answer (the transaction aborts as on any failed batch).
pub(crate) async fn ready(c: &mut Core) -> Result<(), FabricError> {
    let Some(j) = c.journal.as_mut() else {
        return Ok(());
    };
    // Every atomic on a journal's words goes the lock stage's way (G11).
    let via = Via::rpc(c.rpc.has(crate::stage::Stage::Lock));
    let ep = &mut c.ep;
    if !j.loaded {
        let nodes: Vec<NodeId> = c.map.live_nodes().collect();
        let mut reads = Vec::with_capacity(nodes.len());
        for &n in &nodes {
            // This coordinator holds no lock yet, and an earlier incarnation of it was
            // recovered before it could join: the header may be made active whatever it says.
            CasRead::post(ep, via, n, j.at, (0, ACTIVE), None);
            CasRead::post(ep, via, n, j.at, (OVERFLOWED, ACTIVE), None);
            reads.push((n, ep.read(n, j.at, BYTES as usize)));
        }
        ep.post().await?;
        for (n, r) in reads {
            let ring = &mut j.rings[usize::from(n)];
            let b = ep.bytes(r);
            ring.head = ACTIVE;
            ring.slots = b[8..]
                .chunks_exact(8)
                .map(|w| u64::from_le_bytes(w.try_into().expect("word")))
                .collect();
        }
        j.loaded = true;
    }
    if j.rings.iter().any(|r| r.pending > SLOTS / 2) {
        // The releases of earlier transactions went detached, never awaited: a FLUSH executes
        // after every earlier WRITE on its QP, so once one has completed on every node, they
        // have all executed (backups' invisible words included), and so have their locks'
        // entries' releases. Releases as RPCs would not be ordered so: the journal is off then.
        for n in c.map.live_nodes() {
            ep.flush(n);
        }
        ep.post().await?;
        for r in &mut j.rings {
            r.pending = r.current;
        }
    }
    Ok(())
}

/// [`ready`] for a transaction: a memory node that does not answer aborts it.
pub(crate) async fn ready_tx<P: Protocol>(tx: &mut Tx<'_, P>) -> Result<(), Abort> {
    if tx.c.journal.is_none() || ready(tx.c).await.is_ok() {
        return Ok(());
    }
    let (table, key) = tx.items.first().map_or((0, 0), |it| (it.table, it.key));
    Err(Abort {
        reason: AbortReason::ReplicaFailure,
        table,
        key,
    })
}

/// Journals the lock word at `addr` on `node`, to be CASed next in this batch, `via` the
/// lock's way. Nothing when the journal is off.
#[inline]
pub(crate) fn note(c: &mut Core, via: Via, node: NodeId, addr: u64) {
    let Some(j) = c.journal.as_mut() else {
        return;
    };
    let at = j.at;
    let ring = &mut j.rings[usize::from(node)];
    if ring.slots.is_empty() {
        // Not loaded (the node did not answer then): the lock goes unjournaled, so the
        // header says so first, whatever it holds.
        CasRead::post(&mut c.ep, via, node, at, (0, OVERFLOWED), None);
        CasRead::post(&mut c.ep, via, node, at, (ACTIVE, OVERFLOWED), None);
        ring.head = OVERFLOWED;
        return;
    }
    if ring.head == OVERFLOWED {
        return;
    }
    if ring.pending >= SLOTS {
        CasRead::post(&mut c.ep, via, node, at, (ACTIVE, OVERFLOWED), None);
        ring.head = OVERFLOWED;
        return;
    }
    let k = ring.next as usize;
    let old = ring.slots[k];
    if old != addr {
        CasRead::post(
            &mut c.ep,
            via,
            node,
            at + 8 + 8 * k as u64,
            (old, addr),
            None,
        );
        ring.slots[k] = addr;
    }
    ring.next = (ring.next + 1) % SLOTS;
    ring.pending += 1;
    ring.current += 1;
}

/// Marks coordinator `index`'s journal on `node` overflowed (one-sided, queued, not posted):
/// locks it takes outside its transactions (the re-replication copier's) go unjournaled, so
/// its recovery must scan. Only where the lock stage is one-sided (the journal's atomics go
/// its way).
pub(crate) fn mark_overflowed(ep: &mut Endpoint, map: &PoolMap, index: u32, node: NodeId) {
    if let Some(at) = at(map, index) {
        ep.cas(node, at, 0, OVERFLOWED);
        ep.cas(node, at, ACTIVE, OVERFLOWED);
    }
}

/// What recovery reads of the dead coordinators' journals: per dead coordinator, the lock
/// words (node, address) it may hold, or None when one of its journals cannot be trusted (it
/// is then found by the scan). One round trip.
pub(crate) async fn read_all(
    ep: &mut Endpoint,
    map: &PoolMap,
    dead: &[u32],
) -> Result<Vec<Option<Vec<(NodeId, u64)>>>, FabricError> {
    let nodes: Vec<NodeId> = map.live_nodes().collect();
    let mut out = Vec::with_capacity(dead.len());
    // A batch per few dead coordinators, so that no batch holds a memory node's NIC long.
    for some in dead.chunks(4) {
        let mut reads = Vec::new();
        for &d in some {
            if let Some(at) = at(map, d) {
                for &n in &nodes {
                    reads.push((d, n, ep.read(n, at, BYTES as usize)));
                }
            }
        }
        if !reads.is_empty() {
            ep.post().await?;
        }
        for &d in some {
            let mine = reads.iter().filter(|r| r.0 == d).map(|r| (r.1, r.2));
            out.push(entries(ep, mine));
        }
    }
    Ok(out)
}

/// One dead coordinator's entries, from the READs of its journals (None: not to be trusted).
fn entries(
    ep: &Endpoint,
    reads: impl Iterator<Item = (NodeId, dtxn_fabric::OpId)>,
) -> Option<Vec<(NodeId, u64)>> {
    let mut out = Vec::new();
    let mut any = false;
    for (n, r) in reads {
        any = true;
        let b = ep.bytes(r);
        let word = |i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("word"));
        if word(0) != ACTIVE {
            return None;
        }
        let named = (1..=SLOTS as usize).map(word).filter(|&a| a != 0);
        out.extend(named.map(|a| (n, a)));
    }
    out.sort_unstable();
    out.dedup();
    any.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The journal and Scythe's grant journal fill the slice's tail exactly, never past it
    /// (the next coordinator's slice starts there), and the log keeps the rest: what the
    /// log is told it has ends where the journal starts.
    #[test]
    fn the_journal_takes_the_slices_tail_and_the_log_the_rest() {
        let slice = (1 << 20, 32 << 10);
        let at = in_slice(slice).expect("room for both");
        assert_eq!(at + TAIL, slice.0 + slice.1);
        let (log_off, log_len) = log_room(slice);
        assert_eq!((log_off, log_off + log_len), (slice.0, at));
        // A slice too small to lend its tail and keep as much for the log has no journal.
        assert_eq!(in_slice((0, 2 * TAIL)), Some(TAIL));
        assert_eq!(in_slice((0, 2 * TAIL - 8)), None);
        assert_eq!(in_slice((0, TAIL + 64)), None);
    }
}
