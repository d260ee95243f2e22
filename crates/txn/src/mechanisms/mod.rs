//! The shared mechanisms: what protocols are built of, each once. Every phase of every
//! protocol posts its verbs through these.
//!
//! - [`fetch`]: stamped record READs and bucket walks, with or without hitchhiked locks;
//! - [`lock`]: lock rounds on primaries' lock words, and giving back what a failed batch won;
//! - [`validate`]: header validation of what was read without a lock; [`absent`]: absence;
//! - [`undo`]: the undo log; [`settle`]: a crashed coordinator's undo log, settled; [`install`]: coalescent and two-phase installs, roll-back;
//! - [`release`]: unlock, make visible, close the log;
//! - [`insert`]: chain locks, free slots, new overflow buckets;
//! - [`rpc`]: the RPC forms of their verbs, and the memory nodes' handlers of them;
//! - [`share`]: 2PL's read shares, which expire under leases;
//! - [`takeout`]: Scythe's takeout lock (a ticket queue per record);
//! - [`timestamp`]: timestamp sources (the pool's oracle, a local oracle, a start clock).

pub(crate) mod absent;
pub(crate) mod fetch;
pub(crate) mod insert;
pub(crate) mod install;
pub(crate) mod journal;
pub(crate) mod lock;
pub(crate) mod release;
pub(crate) mod rpc;
pub(crate) mod settle;
pub(crate) mod share;
pub(crate) mod takeout;
pub(crate) mod timestamp;
pub(crate) mod undo;
pub(crate) mod validate;

use crate::abort::{Abort, AbortReason};
use crate::item::Item;
use dtxn_fabric::NodeId;

use dtxn_store::{PoolMap, TableInfo};

/// Bit 63 of a lock word: the record is being installed by a committing transaction.
pub(crate) const INVISIBLE: u64 = 1 << 63;
/// Bit 61 of a lock word: the low bits count read shares (2PL's shared locks), not an owner,
/// with an expiry above them under leases ([`share`]). A word counting no share is free.
/// (Bits 62 and 63 are protocols' flags: Motor's committing bit, the invisible bit.)
pub(crate) const SHARED: u64 = 1 << 61;
/// The bits of an exclusive lock word that hold its owner's id (coordinator index + 1; a pool
/// has at most 65,535 log slices, so at most as many coordinators). The bits between it and
/// the flags are the holder's own (WAIT_DIE's timestamp).
pub(crate) const OWNER_MASK: u64 = 0xffff;

/// Whether lock word `w` is held exclusively by `owner` (with whatever flags and timestamp).
#[inline]
pub(crate) fn holds(w: u64, owner: u64) -> bool {
    w & SHARED == 0 && w & OWNER_MASK == owner
}

/// The little-endian word at byte `at` of `bytes` (a record's or a bucket's, as READ).
#[inline]
pub(crate) fn word_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("a word"))
}

/// The lock word of a coordinator's `attempt`-th transaction attempt: its owner id with the
/// attempt's count above it (below the flags, bit 61 on). Unique per attempt, so that a CAS
/// giving back "our" word after a failed batch never frees an earlier attempt's lock whose
/// release (a detached WRITE, or an RPC no FLUSH orders) has not landed yet.
#[inline]
pub(crate) fn attempt_word(owner: u64, attempt: u64) -> u64 {
    const COUNT_MASK: u64 = (SHARED >> 16) - 1;
    ((attempt & COUNT_MASK) << 16) | (owner & OWNER_MASK)
}

/// Vectors the mechanisms reuse across rounds and transactions (one set per coordinator), so
/// that a transaction's hot path allocates nothing once they have grown. A phase takes one with
/// `mem::take` and puts it back when it finishes; a rare abort just drops it. The phases where
/// most aborts happen under contention (execution's lock conflicts, validation) put theirs
/// back on an abort too: every aborted attempt would otherwise grow them again.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// Execution.
    pub execute: fetch::ExecuteScratch,
    /// Memory nodes: those the undo log goes to; at commit, the backups to flush.
    pub nodes: Vec<NodeId>,
    /// Commit: a written record, encoded once for all its replicas, and the version it
    /// displaces into an older copy (MVCC's version slots).
    pub record: Vec<u8>,
    pub copy: Vec<u8>,
    /// Lock rounds: each item's probe, and whether its header was read.
    pub locks: Vec<(usize, lock::Probe, bool)>,
    /// Validation rounds (one-sided or RPC): each item's READ of its header.
    pub reads: Vec<(usize, rpc::Read)>,
    /// Validation of absent keys: the chains' walks, as (item, bucket being read, overflow
    /// hops, greatest tombstone version so far), and the READs of a round.
    pub absent: Vec<(usize, u64, u64, u64)>,
    pub absent_reads: Vec<rpc::Read>,
    /// Inserts.
    pub insert: insert::InsertScratch,
}

pub(crate) fn abort<X>(reason: AbortReason, it: &Item<X>) -> Abort {
    Abort {
        reason,
        table: it.table,
        key: it.key,
    }
}

#[inline]
pub(crate) fn table(map: &PoolMap, id: u32) -> &TableInfo {
    map.table(id).expect("checked when the item was added")
}

/// The next bucket of a chain, from a bucket's `next` link: `Err` if the link leaves the
/// table's overflow area or the walk has taken more hops than the table has overflow buckets
/// (a cycle): memory is corrupt, and following it would loop or read another table.
#[inline]
pub(crate) fn next_bucket(
    t: &TableInfo,
    next: Option<u64>,
    hops: &mut u64,
) -> Result<Option<u64>, ()> {
    let Some(n) = next else {
        return Ok(None);
    };
    *hops += 1;
    let first = t.overflow_bucket(0);
    let in_area = n >= first
        && n < t.overflow_bucket(t.overflow_buckets)
        && (n - first).is_multiple_of(t.bucket_bytes);
    if !in_area || *hops > t.overflow_buckets {
        return Err(());
    }
    Ok(Some(n))
}

/// A protocol that keeps its own metadata in each record (SUNDIAL's lease, MVCC's read
/// timestamp) needs `table` laid out with at least `words` metadata words: a pool laid out
/// for another protocol cannot hold them, and the request aborts (bad request).
pub(crate) fn needs_meta_words(
    map: &PoolMap,
    table: u32,
    key: u64,
    words: u8,
) -> Result<(), Abort> {
    match map.table(table) {
        Ok(info) if info.meta_words >= words => Ok(()),
        _ => Err(Abort {
            reason: AbortReason::BadRequest,
            table,
            key,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_word_names_its_owner_and_differs_from_the_attempts_around_it() {
        let owner = 0xbeef;
        let words: Vec<u64> = (1..=3).map(|n| attempt_word(owner, n)).collect();
        assert_eq!(
            words,
            [(1 << 16) | owner, (2 << 16) | owner, (3 << 16) | owner]
        );
        // The count wraps below the flags: the word stays an exclusive lock of its owner.
        let last = attempt_word(owner, u64::MAX);
        assert_eq!(last & (SHARED | (1 << 62) | INVISIBLE), 0);
        assert_eq!(last, ((SHARED >> 16) - 1) << 16 | owner);
        assert!(holds(last, owner) && !holds(last, owner - 1));
    }
}
