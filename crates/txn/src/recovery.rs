//! Recovery of a crashed coordinator, by any other coordinator, with one-sided verbs only
//! (FORD section 4.8; the rule for the ambiguous case is the digest's).
//!
//! A coordinator is declared dead by the recovery service once its lease expired
//! (`membership.rs`), or after a run by whoever knows it crashed. The agent then:
//!
//! 1. reads the dead coordinator's log slice on every memory node and takes the newest entry
//!    that decodes (a crash mid-log-WRITE leaves a torn entry on some nodes: its crc fails);
//! 2. if that entry is pending on some node, decides: **committed** if every replica of every logged item
//!    the dead coordinator had locked already holds the new version (its coalescent commit
//!    landed everywhere: roll forward), **aborted** otherwise (roll back: put the old images
//!    back on every replica);
//! 3. releases every lock the dead coordinator still holds, logged or not (a lock won just
//!    before the crash may not be logged yet): record locks and chain insert locks, found in
//!    its lock journals (`mechanisms/journal.rs`: every lock word it took, journaled no later
//!    than the lock), or, where it keeps none it can trust, by a scan of every table on its
//!    primary (16 KiB of buckets per READ, every dead coordinator's at once:
//!    [`recover_all`]); each cleared with a CAS from the dead owner's value so that nobody
//!    else's lock is ever touched;
//! 4. closes the log entry (on every node, before step 3);
//! 5. gives back what else it holds (`Protocol::release_held`: Scythe's takeout tickets, from
//!    the grant journals the memory nodes' CPUs keep, each once its turn comes in its queue).
//!
//! **Idempotent.** A recovery that crashes half-way and runs again ends in the same state:
//! step 2 judges by what the replicas hold under the dead owner's locks, which stay until
//! step 3; an entry closed on some nodes only is settled again (the same judgement: the same
//! outcome, reported again); step 3 is a CAS from the dead owner's value. A test crashes the
//! recovering coordinator at many instants and compares the pool with one recovery's.
//!
//! It returns what it decided, with the versions a rolled-forward transaction installed, for
//! the history.
//!
//! Step 2 is the protocol's (`Protocol::settle`): FORD, FaRM and DrTM+H settle undo logs
//! (`mechanisms/settle.rs`), Motor rolls its op logs forward (`protocols/motor/recover.rs`).
//! Steps 1, 3 and 4 are the same for every protocol; step 3 clears a lock word holding the
//! dead owner's id in its low bits (`mechanisms::holds`: whatever flags and timestamp the
//! protocol sets above them). A 2PL lock word counting read shares says nothing of whose
//! they are: a dead coordinator's read shares are not given back but expire
//! (`mechanisms/share.rs`: under leases a share is good until the expiry its word holds).

use crate::mechanisms::rpc::FROZEN;
use crate::mechanisms::{holds, journal, word_at};
use crate::registry::Protocol;
use dtxn_check::history;
use dtxn_fabric::{Endpoint, FabricError, NodeId};
use dtxn_store::index::CHAIN_META_OFF;
use dtxn_store::log::{unwritten_of, LogEntry, LogStatus, STATUS_OFF};
use dtxn_store::record::META_OFF;
use dtxn_store::{PoolMap, TableInfo};
use std::ops::Range;

/// What recovery found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovered {
    /// The log slice held no pending transaction.
    Nothing,
    /// The pending transaction had committed everywhere: rolled forward.
    RolledForward(history::Txn),
    /// The pending transaction had not: rolled back (its id).
    RolledBack(u64),
}

impl Recovered {
    /// What recovery did, in the words of the reports.
    pub fn name(&self) -> &'static str {
        match self {
            Recovered::Nothing => "nothing pending",
            Recovered::RolledForward(_) => "rolled forward",
            Recovered::RolledBack(_) => "rolled back",
        }
    }

    /// The dead coordinator's logged transaction `e`, rolled forward at `end_ns` with
    /// `writes` installed: committed, for the history (its reads are not known).
    pub(crate) fn rolled_forward(e: &LogEntry, end_ns: u64, writes: Vec<history::Write>) -> Self {
        Recovered::RolledForward(history::Txn {
            txn: e.txn,
            session: u64::from(e.coordinator),
            status: history::Status::Committed,
            start: 0,
            end: end_ns,
            reads: Vec::new(),
            writes,
        })
    }
}

/// Recovers coordinator `index` (whose lock-owner id is `index + 1`) of a pool run by
/// `protocol`.
pub async fn recover(
    ep: &mut Endpoint,
    map: &PoolMap,
    protocol: Protocol,
    index: u32,
) -> Result<(Recovered, u32), FabricError> {
    let mut r = recover_all(ep, map, protocol, &[index]).await?;
    Ok(r.pop().expect("one"))
}

/// Recovers every coordinator of `dead` at once: settles each one's log entry, then
/// releases all their locks (from their lock journals, or in one scan of the tables). What
/// each one's recovery found and how many of its locks it cleared, in the order of `dead`.
pub async fn recover_all(
    ep: &mut Endpoint,
    map: &PoolMap,
    protocol: Protocol,
    dead: &[u32],
) -> Result<Vec<(Recovered, u32)>, FabricError> {
    let in_view: Vec<(u32, bool)> = dead.iter().map(|&d| (d, false)).collect();
    recover_all_in_views(ep, map, protocol, &in_view).await
}

/// [`recover_all`], each dead coordinator with whether it died in an older view than
/// `map`'s (memory-node failover: its locks on primaries that failed since are lost, and
/// its log entry is judged by what the promoted backups hold).
pub async fn recover_all_in_views(
    ep: &mut Endpoint,
    map: &PoolMap,
    protocol: Protocol,
    dead: &[(u32, bool)],
) -> Result<Vec<(Recovered, u32)>, FabricError> {
    let (mut settled, mut released) = (Vec::new(), Vec::new());
    let r = recover_within(
        ep,
        map,
        protocol,
        dead,
        u64::MAX,
        &mut settled,
        &mut released,
    )
    .await?;
    Ok(r.into_iter().map(|(o, l, _)| (o, l)).collect())
}

/// [`recover_all_in_views`], then step 5, the protocol's (Scythe's takeout tickets: each
/// waits for its turn in its queue, and counts with the locks released), waiting until
/// `deadline_ns` (the endpoint's clock) at most: per dead coordinator also whether it is
/// recovered for good (false: something of its
/// still waits behind others, maybe behind a dead coordinator not yet found: run it again
/// later, with them; every step is idempotent).
///
/// `settled` gets each dead coordinator's outcome (in the order of `dead`) as soon as its
/// log entry is settled, before the entry is closed: if recovery is cut short after that
/// (a memory node fails under it), the entry may be closed on every live node, and a
/// recovery run again finds nothing pending, so the outcome known here is the only report
/// of a roll forward (a transaction committed, whose coordinator never recorded it).
/// `released` counts, per dead coordinator, the lock words cleared so far, for the same
/// reason: a recovery run again finds them free.
pub async fn recover_within(
    ep: &mut Endpoint,
    map: &PoolMap,
    protocol: Protocol,
    dead: &[(u32, bool)],
    deadline_ns: u64,
    settled: &mut Vec<Recovered>,
    released: &mut Vec<u32>,
) -> Result<Vec<(Recovered, u32, bool)>, FabricError> {
    settled.clear();
    released.clear();
    released.resize(dead.len(), 0);
    let older = map.for_older_view();
    for &(index, before) in dead {
        let map = if before { &older } else { map };
        settle_log(ep, map, protocol, index, settled).await?;
    }
    let out = settled.clone();
    // The journals say where each dead coordinator's locks may be, unless a memory node
    // failed (a promoted primary's lock words are not where the journal on the failed one
    // named them) or the protocol keeps none: then the scan finds them.
    let whole_view = map.live_nodes().count() == usize::from(map.node_count());
    let journals = if protocol.journaled() && whole_view && dead.iter().all(|d| !d.1) {
        let ids: Vec<u32> = dead.iter().map(|d| d.0).collect();
        journal::read_all(ep, map, &ids).await?
    } else {
        vec![None; dead.len()]
    };
    let dead: Vec<u32> = dead.iter().map(|d| d.0).collect();
    let owners: Vec<u64> = dead.iter().map(|&i| u64::from(i) + 1).collect();
    let thaw = protocol.freezes();
    release_listed(ep, map, &owners, &journals, thaw, released).await?;
    let scanned: Vec<usize> = (0..dead.len()).filter(|&k| journals[k].is_none()).collect();
    if !scanned.is_empty() {
        release_all(ep, map, &owners, &scanned, thaw, released).await?;
    }
    let held = protocol.release_held(ep, map, &dead, deadline_ns).await?;
    // (What it gave back counts with the lock words: Scythe's tickets are queue locks.)
    Ok(out
        .into_iter()
        .zip(released.iter().copied())
        .zip(held)
        .map(|((o, l), (done, more))| (o, l + more, done))
        .collect())
}

/// Steps 1 and 2, and 4: settles coordinator `index`'s newest log entry and closes it. The
/// outcome is pushed to `settled` once known, before the entry is closed.
async fn settle_log(
    ep: &mut Endpoint,
    map: &PoolMap,
    protocol: Protocol,
    index: u32,
    settled: &mut Vec<Recovered>,
) -> Result<(), FabricError> {
    let owner = u64::from(index) + 1;
    // The live memory nodes of the view recovery runs in (a failed node's copy of the log
    // is gone; every entry was written to each replica of the items it logs).
    let nodes: Vec<NodeId> = map.live_nodes().collect();
    let mut outcome = Recovered::Nothing;
    let mut entry: Option<LogEntry> = None;
    if let Some((slice, bytes)) = map.log_slice(index) {
        let reads: Vec<_> = nodes
            .iter()
            .map(|&n| ep.read(n, slice, bytes as usize))
            .collect();
        ep.post().await?;
        // The newest transaction on any node. It is settled if any node's copy still says
        // pending, even if another's was closed: a recovery that crashed after closing it on
        // some nodes only (or its coordinator, closing it on its way out) left it so, and
        // settling again is what that recovery did (the locks it judges by are released only
        // after every copy is closed), so the outcome reported is the same.
        // Decided on one node is decided (`LogStatus::Decided`: that batch was posted), and an
        // item marked unwritten on one is unwritten (the mark is a fact about the commit).
        let (mut pending, mut decided, mut unwritten) = (false, false, 0u64);
        for r in reads {
            if let Ok(Some(e)) = LogEntry::decode(ep.bytes(r)) {
                match &entry {
                    Some(x) if x.txn > e.txn => continue,
                    Some(x) if x.txn == e.txn => {}
                    _ => (pending, decided, unwritten) = (false, false, 0),
                }
                pending |= e.status.open();
                decided |= e.status == LogStatus::Decided;
                unwritten |= unwritten_of(ep.bytes(r));
                entry = Some(e);
            }
        }
        if let Some(e) = entry.as_mut().filter(|_| decided && pending) {
            e.status = LogStatus::Decided;
        }
        // Items the commit did not write (fetched for update, unlocked by its install) are
        // not its to judge: their lock may be our next transaction's by now.
        if let Some(e) = entry.as_mut() {
            let mut k = 0;
            e.items.retain(|_| {
                k += 1;
                k > 64 || unwritten & 1 << (k - 1) == 0
            });
        }
        // (CALVIN's redo log is judged whatever its status: `Protocol::judges_closed`.)
        let judged = |e: &&LogEntry| pending || protocol.judges_closed(e);
        if let Some(e) = entry.as_ref().filter(judged) {
            outcome = protocol.settle(ep, map, owner, e).await?;
            let status = match outcome {
                Recovered::RolledForward(_) => LogStatus::Committed,
                _ => LogStatus::Aborted,
            };
            // A redo entry judged over (`Recovered::Nothing`, not pending) is left as it is.
            let close = pending || outcome != Recovered::Nothing;
            settled.push(outcome);
            if close {
                for &n in &nodes {
                    ep.write(n, slice + STATUS_OFF, &(status as u64).to_le_bytes());
                }
                return ep.post().await;
            }
            return Ok(());
        }
    }
    settled.push(outcome);
    Ok(())
}

/// Bytes the lock release's scan reads per round trip (at least a bucket): big enough to
/// take few round trips, small enough not to hold a memory node's NIC for long while the
/// other coordinators run (an op queued behind it flies longer, and a lease's guard must
/// cover the longest flight).
const SCAN_BYTES: u64 = 16 << 10;

/// Every bucket of `t` (main, then overflow), in the ranges a scan READs at once:
/// [`SCAN_BYTES`] of buckets, at least one.
pub(crate) fn scan_chunks(t: &TableInfo) -> impl Iterator<Item = Range<u64>> {
    let buckets = t.bucket_count + t.overflow_buckets;
    let per = (SCAN_BYTES / t.bucket_bytes).max(1);
    (0..buckets)
        .step_by(per as usize)
        .map(move |first| first..buckets.min(first + per))
}

/// READs buckets `chunk` of `t` on memory node `node` into `bytes` (one round trip).
pub(crate) async fn read_buckets(
    ep: &mut Endpoint,
    t: &TableInfo,
    node: NodeId,
    chunk: &Range<u64>,
    bytes: &mut Vec<u8>,
) -> Result<(), FabricError> {
    let len = (chunk.end - chunk.start) * t.bucket_bytes;
    let r = ep.read(node, t.bucket(chunk.start), len as usize);
    ep.post().await?;
    bytes.clear();
    bytes.extend_from_slice(ep.bytes(r));
    Ok(())
}

/// Clears every lock word one of `owners[k]`, `k` in `which`, holds, on every table's primary
/// (a backup's word is no lock: a commit leaves its id there, and a CAS clearing it could race
/// the WRITE of a live commit's install, G8); with `thaw`, a word the lock's holder froze
/// beside it is unfrozen first ([`Thaw`]). Counts in `cleared[k]` what it cleared per owner
/// as it goes.
async fn release_all(
    ep: &mut Endpoint,
    map: &PoolMap,
    owners: &[u64],
    which: &[usize],
    thaw: bool,
    cleared: &mut [u32],
) -> Result<(), FabricError> {
    let mut bytes = Vec::new();
    let mut thaws = Thaw::default();
    for t in map.tables() {
        let codec = t.codec();
        let n = t.primary();
        {
            for chunk in scan_chunks(t) {
                read_buckets(ep, t, n, &chunk, &mut bytes).await?;
                // (address, the lock word, whose) to CAS for this batch of buckets.
                let mut ours = Vec::new();
                thaws.clear();
                for b in chunk.clone() {
                    let at = ((b - chunk.start) * t.bucket_bytes) as usize;
                    let bucket = &bytes[at..at + t.bucket_bytes as usize];
                    let base = t.bucket(b);
                    if b < t.bucket_count {
                        let lock = word_at(bucket, 8);
                        if let Some(&k) = which.iter().find(|&&k| holds(lock, owners[k])) {
                            ours.push((t.insert_lock(base), lock, k));
                            let c = CHAIN_META_OFF as usize;
                            thaws.note(
                                thaw && t.meta_words > 0,
                                (n, base + c as u64),
                                word_at(bucket, c),
                            );
                        }
                    }
                    for s in 0..t.slots_per_bucket {
                        let slot = t.slot_bytes(bucket, s);
                        let h = codec.header(slot);
                        let off = t.slot(base, s);
                        let mine = which.iter().copied().find(|&k| holds(h.lock, owners[k]));
                        if let Some(k) = mine {
                            ours.push((off, h.lock, k));
                            let meta = (off + META_OFF as u64, word_at(slot, META_OFF));
                            thaws.note(thaw && t.meta_words > 0, (n, meta.0), meta.1);
                        }
                    }
                }
                thaws.write(ep).await?;
                let cas: Vec<_> = ours
                    .into_iter()
                    .map(|(a, lock, k)| (ep.cas(n, a, lock, 0), k))
                    .collect();
                if !cas.is_empty() {
                    ep.post().await?;
                    for (c, k) in cas {
                        cleared[k] += u32::from(ep.cas_ok(c));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Clears the lock words each dead owner's journal names (`journals[k]`, for `owners[k]`;
/// None: left to the scan) that still hold its id, on the primary. Per [`LISTED_PER_TRIP`]
/// words, two round trips: READ them, CAS those still the dead owner's. Counts in
/// `cleared[k]` what it cleared for `owners[k]` as it goes.
async fn release_listed(
    ep: &mut Endpoint,
    map: &PoolMap,
    owners: &[u64],
    journals: &[Option<Vec<(NodeId, u64)>>],
    thaw: bool,
    cleared: &mut [u32],
) -> Result<(), FabricError> {
    // (owner's index, node, address, where the word frozen beside it is)
    let mut words = Vec::new();
    for (k, list) in journals.iter().enumerate() {
        for &(n, a) in list.iter().flatten() {
            let Some(t) = map.tables().find(|t| t.primary() == n && in_buckets(t, a)) else {
                continue; // a stale entry of a table no longer there
            };
            // A record's lock word is its slot's first; a chain's is its home bucket's
            // second, with the chain's word in the same line.
            let frozen = match t.is_slot(a) {
                true => a + META_OFF as u64,
                false => a - 8 + CHAIN_META_OFF,
            };
            let frozen = (thaw && t.meta_words > 0).then_some(frozen);
            words.push((k, n, a, frozen));
        }
    }
    let mut thaws = Thaw::default();
    for chunk in words.chunks(LISTED_PER_TRIP) {
        // The lock word and the word frozen beside it, in one line: one READ sees both as
        // they were together.
        let reads: Vec<_> = chunk
            .iter()
            .map(|&(_, n, a, frozen)| {
                let len = frozen.map_or(8, |f| f + 8 - a);
                ep.read(n, a, len as usize)
            })
            .collect();
        ep.post().await?;
        // Every word is taken before the first CAS starts a new batch.
        thaws.clear();
        let mut ours: Vec<(usize, NodeId, u64, u64)> = Vec::new();
        for (&(k, n, a, frozen), r) in chunk.iter().zip(reads) {
            let bytes = ep.bytes(r);
            let w = word_at(bytes, 0);
            if !holds(w, owners[k]) {
                continue;
            }
            if let Some(f) = frozen {
                thaws.note(true, (n, f), word_at(bytes, (f - a) as usize));
            }
            ours.push((k, n, a, w));
        }
        if ours.is_empty() {
            continue;
        }
        thaws.write(ep).await?;
        let cas: Vec<_> = ours
            .into_iter()
            .map(|(k, n, a, w)| (k, ep.cas(n, a, w, 0)))
            .collect();
        ep.post().await?;
        for (k, c) in cas {
            cleared[k] += u32::from(ep.cas_ok(c));
        }
    }
    Ok(())
}

/// The words a dead lock holder froze beside its locks ([`crate::Protocol`]'s `FREEZES`),
/// on one node, written back unfrozen before the locks are freed. While the dead holds the
/// lock nobody else changes such a word (a reader's raise or renewal fails on a frozen one,
/// and only the lock's holder freezes or takes a freeze over), so a WRITE does; and it is
/// awaited, since the contract orders no CAS after an earlier WRITE. One round trip, only
/// when there is a frozen word to thaw.
#[derive(Default)]
struct Thaw(Vec<(NodeId, u64, u64)>);

impl Thaw {
    fn clear(&mut self) {
        self.0.clear();
    }

    /// The word `w` at `addr` on `n`, next to a dead owner's lock: thawed if frozen (and
    /// `on`).
    fn note(&mut self, on: bool, (n, addr): (NodeId, u64), w: u64) {
        if on && w & FROZEN != 0 {
            self.0.push((n, addr, w & !FROZEN));
        }
    }

    async fn write(&mut self, ep: &mut Endpoint) -> Result<(), FabricError> {
        if self.0.is_empty() {
            return Ok(());
        }
        for &(n, addr, w) in &self.0 {
            ep.write(n, addr, &w.to_le_bytes());
        }
        ep.post().await
    }
}

/// Words [`release_listed`] reads per round trip: few enough that an op queued behind them
/// on a memory node's QP does not fly long (see [`SCAN_BYTES`]).
const LISTED_PER_TRIP: usize = 256;

/// Whether `a` is a word in `t`'s buckets (main or overflow).
fn in_buckets(t: &TableInfo, a: u64) -> bool {
    let start = t.bucket(0);
    a >= start && a < start + (t.bucket_count + t.overflow_buckets) * t.bucket_bytes
}
