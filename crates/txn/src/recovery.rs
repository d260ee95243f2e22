//! Recovery of a crashed coordinator, by any other coordinator, with one-sided verbs only
//! (FORD section 4.8; the rule for the ambiguous case is the digest's).
//!
//! A coordinator is declared dead by whoever notices (a lease, or the simulator's fault plan).
//! The agent then:
//!
//! 1. reads the dead coordinator's log slice on every memory node and takes the newest entry
//!    that decodes (a crash mid-log-WRITE leaves a torn entry on some nodes: its crc fails);
//! 2. if that entry is pending, decides: **committed** if every replica of every logged item
//!    the dead coordinator had locked already holds the new version (its coalescent commit
//!    landed everywhere: roll forward), **aborted** otherwise (roll back: put the old images
//!    back on every replica);
//! 3. releases every lock the dead coordinator still holds, logged or not (a lock won just
//!    before the crash may not be logged yet): record locks and chain insert locks, found by a
//!    scan of every table on its primary, each cleared with a CAS from the dead owner's value
//!    so that nobody else's lock is ever touched;
//! 4. closes the log entry.
//!
//! It returns what it decided, with the versions a rolled-forward transaction installed, for
//! the history.
//!
//! Motor's entries are op logs (redo): the new records and pre-image lines of a commit in
//! progress, written before any of them on each memory node. Such an entry is always rolled
//! forward: every record the dead coordinator still locks gets its logged image on every
//! replica that does not hold it whole yet (a replica's record is stamped with the commit
//! timestamp once installed; a lock released means installed everywhere, so nothing else is
//! touched).

use crate::mechanisms::INVISIBLE;
use crate::protocols::motor::COMMITTING;
use dtxn_check::history;
use dtxn_fabric::{Endpoint, FabricError, NodeId, OpId};
use dtxn_store::cvt::MvCodec;
use dtxn_store::log::{ItemKind, LogEntry, LogStatus, STATUS_OFF};
use dtxn_store::record::RecordHeader;
use dtxn_store::PoolMap;

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

/// Recovers coordinator `index` (whose lock-owner id is `index + 1`).
pub async fn recover(
    ep: &mut Endpoint,
    map: &PoolMap,
    index: u32,
) -> Result<(Recovered, u32), FabricError> {
    let owner = u64::from(index) + 1;
    let nodes = map.nodes.len() as NodeId;
    let mut outcome = Recovered::Nothing;
    let mut entry: Option<LogEntry> = None;
    if let Some((slice, bytes)) = map.log_slice(index) {
        let reads: Vec<_> = (0..nodes)
            .map(|n| ep.read(n, slice, bytes as usize))
            .collect();
        ep.post().await?;
        for r in reads {
            if let Ok(Some(e)) = LogEntry::decode(ep.bytes(r)) {
                // The newest transaction; for the same one, a node whose status was updated
                // (committed or aborted) knows more than one still saying pending.
                let better = entry.as_ref().is_none_or(|x| {
                    e.txn > x.txn
                        || (e.txn == x.txn
                            && x.status == LogStatus::Pending
                            && e.status != LogStatus::Pending)
                });
                if better {
                    entry = Some(e);
                }
            }
        }
        if let Some(e) = entry.as_ref().filter(|e| e.status == LogStatus::Pending) {
            let redo = e.items.iter().any(|i| i.kind != ItemKind::Undo);
            outcome = if redo {
                redo_motor(ep, map, owner, e).await?
            } else {
                settle(ep, map, owner, e).await?
            };
            let status = match outcome {
                Recovered::RolledForward(_) => LogStatus::Committed,
                _ => LogStatus::Aborted,
            };
            for n in 0..nodes {
                ep.write(n, slice + STATUS_OFF, &(status as u64).to_le_bytes());
            }
            ep.post().await?;
        }
    }
    let released = release_all(ep, map, owner).await?;
    Ok((outcome, released))
}

/// Decides and applies the pending entry's outcome.
async fn settle(
    ep: &mut Endpoint,
    map: &PoolMap,
    owner: u64,
    e: &LogEntry,
) -> Result<Recovered, FabricError> {
    let reads = read_replicas(ep, map, e);
    ep.post().await?;
    let seen = judge_replicas(ep, map, owner, e, &reads);
    // Items it never locked were never written (the commit waits for every lock).
    let ours: Vec<usize> = (0..e.items.len()).filter(|&i| seen.held[i]).collect();
    if ours.is_empty() {
        // It holds nothing it logged: it never wrote, or it released everything already.
        return Ok(Recovered::Nothing);
    }
    let committed = ours.iter().all(|&i| seen.everywhere[i]);
    if committed {
        return Ok(rolled_forward(ep, e, &ours, &seen));
    }
    roll_back(ep, map, owner, e, &ours, &seen.installed);
    ep.post().await?;
    Ok(Recovered::RolledBack(e.txn))
}

/// What the replicas of an entry's items hold, per logged item.
struct Seen {
    /// The dead coordinator still locks the primary's record.
    held: Vec<bool>,
    /// Every replica holds the new record, whole.
    everywhere: Vec<bool>,
    /// The version installed (where one was).
    installed: Vec<u64>,
    /// The primary record's key.
    keys: Vec<u64>,
}

/// Queues a READ of every replica of every logged item, as it is now.
fn read_replicas(ep: &mut Endpoint, map: &PoolMap, e: &LogEntry) -> Vec<(usize, NodeId, OpId)> {
    let mut reads = Vec::new();
    for (i, it) in e.items.iter().enumerate() {
        let Ok(t) = map.table(it.table) else { continue };
        // An image of the wrong size is a corrupt entry (its crc passed, but trust nothing
        // remote): leave the item to the lock release.
        let sized = it.image.len() == t.record_bytes as usize;
        if !(sized || it.insert && it.image.is_empty()) {
            continue;
        }
        for &n in &t.replicas {
            reads.push((i, n, ep.read(n, it.offset, t.record_bytes as usize)));
        }
    }
    reads
}

/// Judges each replica's record: locked by `owner` (on the primary), and new or not.
fn judge_replicas(
    ep: &Endpoint,
    map: &PoolMap,
    owner: u64,
    e: &LogEntry,
    reads: &[(usize, NodeId, OpId)],
) -> Seen {
    let n_items = e.items.len();
    let mut seen = Seen {
        held: vec![false; n_items],
        everywhere: vec![true; n_items],
        installed: vec![0u64; n_items],
        keys: vec![0u64; n_items],
    };
    for &(i, n, r) in reads {
        let it = &e.items[i];
        let t = map.table(it.table).expect("checked");
        let now = t.codec().header(ep.bytes(r));
        // A commit WRITE cut off by the crash leaves line 0 new and later lines old: the
        // header alone would call it installed. Only a record whose every line agrees is.
        let mut scratch = vec![0u8; t.value_size as usize];
        let whole = t.codec().decode(ep.bytes(r), &mut scratch).is_ok();
        let new = if !whole {
            None
        } else if it.insert {
            // An insert's new record: valid, our key... its version is whatever it installed.
            now.valid.then_some(now.version)
        } else {
            let old = t.codec().header(&it.image);
            (now.version == old.version + 1 && now.key == old.key).then_some(now.version)
        };
        if n == t.primary() {
            seen.held[i] = now.lock & !INVISIBLE == owner;
            seen.keys[i] = now.key;
        }
        match new {
            Some(v) => seen.installed[i] = v,
            None => seen.everywhere[i] = false,
        }
    }
    seen
}

/// The commit landed everywhere: what it installed, for the history.
fn rolled_forward(ep: &Endpoint, e: &LogEntry, ours: &[usize], seen: &Seen) -> Recovered {
    let writes = ours
        .iter()
        .map(|&i| {
            let it = &e.items[i];
            history::Write {
                table: it.table,
                key: seen.keys[i],
                version: seen.installed[i],
                deleted: false,
            }
        })
        .collect();
    Recovered::RolledForward(history::Txn {
        txn: e.txn,
        session: u64::from(e.coordinator),
        status: history::Status::Committed,
        start: 0,
        end: ep.now_ns(),
        reads: Vec::new(),
        writes,
    })
}

/// Roll back what it holds: the old images everywhere, still under its lock on the primary
/// (released after [`settle`] with everything else). Queues the WRITEs.
fn roll_back(
    ep: &mut Endpoint,
    map: &PoolMap,
    owner: u64,
    e: &LogEntry,
    ours: &[usize],
    installed: &[u64],
) {
    for &i in ours {
        let it = &e.items[i];
        let Ok(t) = map.table(it.table) else { continue };
        let codec = t.codec();
        for (rank, &n) in t.replicas.iter().enumerate() {
            let lock = if rank == 0 { owner } else { 0 };
            if it.insert && it.image.is_empty() {
                // An entry without the slot's old image: free it, stamped above the insert.
                let h = RecordHeader {
                    lock,
                    version: installed[i].max(1) + 1,
                    key: 0,
                    table: 0,
                    valid: false,
                };
                let zero = vec![0u8; t.value_size as usize];
                ep.write_with(n, it.offset, t.record_bytes as usize, |b| {
                    codec.encode(&h, &zero, b)
                });
            } else {
                ep.write_with(n, it.offset, it.image.len(), |b| {
                    b.copy_from_slice(&it.image);
                    b[..8].copy_from_slice(&lock.to_le_bytes());
                });
            }
        }
    }
}

/// Finishes the commit of a Motor op log: every logged record that `owner` still locks is
/// written, with its pre-image lines first, to every replica that does not hold it whole.
async fn redo_motor(
    ep: &mut Endpoint,
    map: &PoolMap,
    owner: u64,
    e: &LogEntry,
) -> Result<Recovered, FabricError> {
    let groups = redo_groups(e);
    let mut reads = Vec::new();
    for (g, &(i, _)) in groups.iter().enumerate() {
        let it = &e.items[i];
        // Trust nothing remote: an item that does not fit its table is left alone.
        let Ok(t) = map.table(it.table) else { continue };
        if t.mv.is_none() || it.image.len() != t.record_bytes as usize || !t.is_slot(it.offset) {
            continue;
        }
        for &n in &t.replicas {
            reads.push((g, n, ep.read(n, it.offset, t.record_bytes as usize)));
        }
    }
    ep.post().await?;
    let mut held = vec![None; groups.len()];
    for &(g, n, r) in &reads {
        let t = map.table(e.items[groups[g].0].table).expect("checked");
        if n == t.primary() {
            let lock = t.codec().header(ep.bytes(r)).lock;
            if lock == owner || lock == owner | COMMITTING {
                held[g] = Some(lock);
            }
        }
    }
    let missing = missing_replicas(ep, map, e, &groups, &held, &reads);
    if redo_writes(ep, map, e, &groups, &held, missing) {
        ep.post().await?;
    }
    let installed = redone(map, e, &groups, &held);
    if installed.is_empty() {
        // It holds nothing it logged: the commit finished (or this entry is an older one).
        return Ok(Recovered::Nothing);
    }
    Ok(Recovered::RolledForward(history::Txn {
        txn: e.txn,
        session: u64::from(e.coordinator),
        status: history::Status::Committed,
        start: 0,
        end: ep.now_ns(),
        reads: Vec::new(),
        writes: installed,
    }))
}

/// Each record item, with the bar lines logged after it.
fn redo_groups(e: &LogEntry) -> Vec<(usize, Option<usize>)> {
    let mut groups: Vec<(usize, Option<usize>)> = Vec::new();
    for (i, it) in e.items.iter().enumerate() {
        match it.kind {
            ItemKind::RedoRecord => groups.push((i, None)),
            ItemKind::RedoBar => {
                if let Some(g) = groups.last_mut() {
                    g.1 = Some(i);
                }
            }
            ItemKind::Undo => {}
        }
    }
    groups
}

/// The replicas that lack the logged record (decided before any WRITE is queued: the
/// READs' results are gone once new ops are).
fn missing_replicas(
    ep: &Endpoint,
    map: &PoolMap,
    e: &LogEntry,
    groups: &[(usize, Option<usize>)],
    held: &[Option<u64>],
    reads: &[(usize, NodeId, OpId)],
) -> Vec<(usize, NodeId)> {
    let mut missing = Vec::new();
    for &(g, n, r) in reads {
        if held[g].is_none() {
            continue;
        }
        let it = &e.items[groups[g].0];
        let t = map.table(it.table).expect("checked");
        let k = MvCodec::new(t).expect("checked");
        let want = k.cvt.header(&it.image).version;
        let mut v = vec![0u8; t.value_size as usize];
        let whole = matches!(k.decode(ep.bytes(r), &mut v), Ok(c) if c.header.version >= want);
        if !whole {
            missing.push((g, n));
        }
    }
    missing
}

/// Queues the logged record (its bar lines first) to every replica that lacks it, under the
/// dead coordinator's lock on the primary. True if any WRITE was queued.
fn redo_writes(
    ep: &mut Endpoint,
    map: &PoolMap,
    e: &LogEntry,
    groups: &[(usize, Option<usize>)],
    held: &[Option<u64>],
    missing: Vec<(usize, NodeId)>,
) -> bool {
    let mut writes = Vec::new();
    for (g, n) in missing {
        let lock = held[g].expect("held");
        let (ri, bar) = groups[g];
        let it = &e.items[ri];
        let t = map.table(it.table).expect("checked");
        if let Some(b) = bar {
            ep.write(n, e.items[b].offset, &e.items[b].image);
        }
        let lock = if n == t.primary() { lock } else { 0 };
        ep.write_with(n, it.offset, it.image.len(), |b| {
            b.copy_from_slice(&it.image);
            b[..8].copy_from_slice(&lock.to_le_bytes());
        });
        writes.push(n);
    }
    !writes.is_empty()
}

/// The versions the rolled-forward records carry, for the history.
fn redone(
    map: &PoolMap,
    e: &LogEntry,
    groups: &[(usize, Option<usize>)],
    held: &[Option<u64>],
) -> Vec<history::Write> {
    groups
        .iter()
        .zip(held)
        .filter(|(_, h)| h.is_some())
        .filter_map(|(&(i, _), _)| {
            let it = &e.items[i];
            let t = map.table(it.table).ok()?;
            let k = MvCodec::new(t)?;
            let mut v = vec![0u8; t.value_size as usize];
            let cvt = k.decode(&it.image, &mut v).ok()?;
            let newest = cvt.cells[cvt.newest()?];
            Some(history::Write {
                table: it.table,
                key: cvt.header.key,
                version: newest.version,
                deleted: newest.tombstone(),
            })
        })
        .collect()
}

/// Clears every lock word that `owner` holds, on every table's primary and on backups' lock
/// words too (an invisible bit a commit left there). Returns how many it cleared.
async fn release_all(ep: &mut Endpoint, map: &PoolMap, owner: u64) -> Result<u32, FabricError> {
    let mut cleared = 0;
    for t in map.tables() {
        let codec = t.codec();
        let buckets = t.bucket_count + t.overflow_buckets;
        for &n in &t.replicas {
            let primary = n == t.primary();
            for b in 0..buckets {
                let base = t.table_off + 64 + b * t.bucket_bytes;
                let r = ep.read(n, base, t.bucket_bytes as usize);
                ep.post().await?;
                let bytes = ep.bytes(r).to_vec();
                let mut cas = Vec::new();
                if primary && b < t.bucket_count {
                    let lock = u64::from_le_bytes(bytes[8..16].try_into().expect("word"));
                    if lock == owner {
                        cas.push(ep.cas(n, t.insert_lock(base), owner, 0));
                    }
                }
                for s in 0..t.slots_per_bucket {
                    let h = codec.header(t.slot_bytes(&bytes, s));
                    let off = t.slot(base, s);
                    let ours = [owner, owner | INVISIBLE, owner | COMMITTING];
                    if primary && ours.contains(&h.lock) {
                        cas.push(ep.cas(n, off, h.lock, 0));
                    } else if !primary && h.lock == INVISIBLE {
                        // A backup's invisible bit may be another, live, commit's: clearing it
                        // early is safe all the same, because every reader validates at the
                        // primary, whose lock that commit still holds.
                        cas.push(ep.cas(n, off, INVISIBLE, 0));
                    }
                }
                if !cas.is_empty() {
                    ep.post().await?;
                    cleared += cas.iter().filter(|&&c| ep.cas_ok(c)).count() as u32;
                }
            }
        }
    }
    Ok(cleared)
}
