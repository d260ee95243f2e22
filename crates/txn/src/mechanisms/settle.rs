//! Settling a crashed coordinator's undo log (FORD, FaRM, DrTM+H): roll forward if its
//! commit landed on every replica of everything it locked, else roll back from the old images.
//! (The recovery driver, `recovery.rs`, finds the entry and releases the locks.)

use crate::mechanisms::install::{write_around_meta, Direction};
use crate::mechanisms::{holds, INVISIBLE};
use crate::recovery::Recovered;
use dtxn_check::history;
use dtxn_fabric::{Endpoint, FabricError, NodeId, OpId};
use dtxn_store::log::{LogEntry, LogStatus};
use dtxn_store::record::{RecordHeader, META_OFF};
use dtxn_store::PoolMap;

/// Decides and applies the pending entry's outcome. With `live_meta` (a protocol whose
/// metadata words others change under its lock: Scythe's takeout words), a roll-back writes a
/// primary's record around them, as the commit did: the image's copies of them are stale.
pub(crate) async fn settle(
    ep: &mut Endpoint,
    map: &PoolMap,
    owner: u64,
    e: &LogEntry,
    live_meta: bool,
) -> Result<Recovered, FabricError> {
    let reads = read_replicas(ep, map, e);
    ep.post().await?;
    let seen = judge_replicas(ep, map, owner, e, &reads, live_meta);
    // Items it never locked were never written (the commit waits for every lock).
    let ours: Vec<usize> = (0..e.items.len()).filter(|&i| seen.held[i]).collect();
    // What it holds but never wrote, newer than its image: not its to roll back. Nor what no
    // replica shows a write of (none torn, none newer): a cold item's image is logged before
    // its lock, and a roll-back since (another's, or a first recovery's) left the record at
    // the image's version with a higher restore count, which writing the image one restore
    // up would lower: the next install would then be stamped like one already undone.
    let ours_to_undo: Vec<usize> = ours
        .iter()
        .copied()
        .filter(|&i| !seen.foreign[i] && seen.touched[i])
        .collect();
    if ours.is_empty() {
        // It holds nothing it logged: it never wrote, or it released everything already.
        return Ok(Recovered::Nothing);
    }
    // Its install showing on a primary (our id with the invisible bit, newer than the image)
    // means it held and validated every lock before installing: then a newer record under
    // our plain lock is not another's commit over our image (that is only seen by a lock
    // round that aborts before any install) but our install, released by the cut-off
    // release, and locked again by our *next* transaction, which started as soon as this
    // one's commit was acknowledged (its log entry is still this one's: the release that
    // closes it was cut off too). Judged foreign, the acknowledged commit was rolled back
    // (torture: ford/kv/seed 1000718).
    let installed_seen = ours.iter().any(|&i| seen.our_install[i]);
    // A promoted primary cannot show whether the failed one got the commit's last batch (a
    // two-phase install's primaries' round, after DrTM+H's re-validation, which may have
    // failed): there only an entry that says `Decided`, written in that batch, rolls forward
    // (`install::decide`; an acknowledged commit completed it).
    let undecided = e.status != LogStatus::Decided
        && ours
            .iter()
            .any(|&i| map.table(e.items[i].table).is_ok_and(|t| map.lost_locks(t)));
    let committed = !undecided
        && ours
            .iter()
            .all(|&i| seen.everywhere[i] && (!seen.foreign[i] || installed_seen));
    if committed {
        // A joining replica may lack the install (a coordinator of an older view never wrote
        // it; or the crash cut its WRITE there), and the copier, which skips what is locked,
        // may have passed the record already: it gets the primary's record, still under the
        // dead's lock, as the commit would have left it.
        // Every record is copied out before the first WRITE is queued: that starts a new
        // batch, and the READs' bytes go with the old one (a second item's fix once read
        // past the end of the new batch: nowait/smallbank/seed 60000222 with rejoin).
        let fixes: Vec<(NodeId, u64, Vec<u8>)> = seen
            .to_joiners
            .iter()
            .filter(|&&(i, _, _)| {
                let t = map.table(e.items[i].table).expect("checked");
                ours.contains(&i) && t.copy_bytes() == t.record_bytes as usize
            })
            .map(|&(i, n, r)| {
                let mut record = ep.bytes(r).to_vec();
                record[..8].copy_from_slice(&0u64.to_le_bytes());
                (n, e.items[i].offset, record)
            })
            .collect();
        for (n, off, record) in &fixes {
            ep.write(*n, *off, record);
        }
        if !fixes.is_empty() {
            ep.post().await?;
        }
        return Ok(rolled_forward(ep, e, &ours, &seen));
    }
    roll_back(ep, map, owner, e, &ours_to_undo, &seen.installed, live_meta);
    ep.post().await?;
    Ok(Recovered::RolledBack(e.txn))
}

/// What the replicas of an entry's items hold, per logged item.
struct Seen {
    /// The dead coordinator still locks the primary's record (or may have: a promoted one).
    held: Vec<bool>,
    /// Every replica holds the new record, whole.
    everywhere: Vec<bool>,
    /// The version installed (where one was).
    installed: Vec<u64>,
    /// The primary record's key.
    keys: Vec<u64>,
    /// Locked by the dead coordinator but newer than its undo image, and never written by it:
    /// an image logged before its lock (a cold item, locked at commit) that another
    /// transaction committed over in between, which the dead one's lock round then saw and
    /// aborted on. Rolling it back would undo that other, acknowledged, commit.
    foreign: Vec<bool>,
    /// The primary shows our install: our id with the invisible bit, whole and newer than
    /// the image (FORD's and FaRM's installs leave it until the release).
    our_install: Vec<bool>,
    /// Per item, each joining replica, with the READ of the primary's record: judged by the
    /// readable replicas alone (an older view's commit never wrote a joiner), a roll forward
    /// gives them the primary's record.
    to_joiners: Vec<(usize, NodeId, OpId)>,
    /// Some replica (a joiner too) holds a write over the image: a torn record, or a whole
    /// one newer than the image.
    touched: Vec<bool>,
}

/// Queues a READ of every replica of every logged item, as it is now.
fn read_replicas(ep: &mut Endpoint, map: &PoolMap, e: &LogEntry) -> Vec<(usize, NodeId, OpId)> {
    let mut reads = Vec::new();
    for (i, it) in e.items.iter().enumerate() {
        let Ok(t) = map.table(it.table) else { continue };
        // An image of the wrong size is a corrupt entry (its crc passed, but trust nothing
        // remote): leave the item to the lock release.
        // (A record kept with older copies logs its copy 0 alone.)
        let sized = it.image.len() == t.record_bytes as usize || it.image.len() == t.copy_bytes();
        if !(sized || it.insert && it.image.is_empty()) {
            continue;
        }
        for &n in &t.replicas {
            reads.push((i, n, ep.read(n, it.offset, t.copy_bytes())));
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
    live_meta: bool,
) -> Seen {
    let n_items = e.items.len();
    let mut seen = Seen {
        held: vec![false; n_items],
        everywhere: vec![true; n_items],
        installed: vec![0u64; n_items],
        keys: vec![0u64; n_items],
        foreign: vec![false; n_items],
        our_install: vec![false; n_items],
        to_joiners: Vec::new(),
        touched: vec![false; n_items],
    };
    for &(i, n, r) in reads {
        let it = &e.items[i];
        let t = map.table(it.table).expect("checked");
        let now = t.codec().header(ep.bytes(r));
        // A commit WRITE cut off by the crash leaves line 0 new and later lines old: the
        // header alone would call it installed. Only a record whose every line agrees is.
        let mut scratch = vec![0u8; t.value_size as usize];
        let whole = t.codec().decode(ep.bytes(r), &mut scratch).is_ok();
        let mut image_value = vec![0u8; t.value_size as usize];
        // The image's header (an insert may log no image: its slot was free).
        let old = (!it.insert).then(|| t.codec().header(&it.image));
        let new = match &old {
            _ if !whole => None,
            // An insert's new record: valid, our key... its version is whatever it installed.
            None => now.valid.then_some(now.version),
            // Newer than the image: FORD's commits install `version + 1`, timestamp-ordered
            // ones (SUNDIAL, MVCC) their commit timestamp, above it.
            Some(old) => (now.version > old.version && now.key == old.key).then_some(now.version),
        };
        // Touched: torn, newer, or at the image's version with another value (a write around
        // the metadata words cut off before its header: `install::write_primary`; in a
        // one-line record no stamp tells).
        let same =
            old.is_some_and(|o| (o.key, o.table, o.valid) == (now.key, now.table, now.valid));
        let other_value = whole
            && new.is_none()
            && same
            && t.codec().decode(&it.image, &mut image_value).is_ok()
            && scratch != image_value;
        // Or with other metadata words than the image's (MVCC's rts word frozen, SUNDIAL's
        // lease locked, by the dead's commit before its install): the roll-back puts the
        // image's back, or readers abort on them until a writer comes. (Not a protocol's whose
        // words others change under its lock, `live_meta`: its roll-back leaves them alone.)
        let meta = t.codec().value_off();
        let other_meta = whole
            && new.is_none()
            && same
            && !live_meta
            && t.codec().meta_words() > 0
            && it.image.len() >= meta
            && ep.bytes(r)[META_OFF..meta] != it.image[META_OFF..meta];
        if !whole || new.is_some() || other_value || other_meta {
            seen.touched[i] = true;
        }
        if t.is_joiner(n) {
            let primary = reads.iter().find(|x| x.0 == i && x.1 == t.primary());
            seen.to_joiners
                .extend(primary.map(|&(_, _, pr)| (i, n, pr)));
            continue;
        }
        if n == t.primary() && map.lost_locks(t) && !holds(now.lock, owner) {
            // A promoted primary, and the dead coordinator died before the promotion: its
            // lock died with the failed primary. (A commit leaves its owner id on a backup,
            // and no release clears it: only the next commit's install, under the primary's
            // lock, overwrites it. So a record showing our id is judged in the branch below,
            // as on a primary.) Recovery in a new view runs once no live coordinator works in
            // an older one, so only dead coordinators' writes can be cut off here. Without
            // our id, the record is:
            // - torn: a write cut off, ours (or another dead one's over the same image):
            //   held, to undo, and not installed;
            // - still the image (a free slot, for an insert): our write never landed here (our
            //   commit was never acknowledged): held, not installed, and undone where another
            //   replica shows our write;
            // - newer: another's commit, over our released install (ours committed) or over
            //   our image (then we never held its lock and never wrote at all): not ours to
            //   judge, as a released lock on a primary. (When releases cleared the backups'
            //   words, a late clear could land on our install here and make it look like
            //   this: waitdie-hybrid, seeds 81000085 and 81000323 under harsh failover.)
            let landed = match &old {
                None => now.valid,
                Some(old) => now.version != old.version,
            };
            if !whole || !landed {
                // Held, and ours to undo (where not landed here, another replica may hold our
                // write, a commit WRITE that reached one backup alone: `touched` says).
                seen.held[i] = true;
                seen.everywhere[i] = false;
            }
            seen.keys[i] = now.key;
        } else if n == t.primary() {
            // (On a promoted primary, a commit's invisible word with our id counts as our
            // lock: recovery judges it as it would on the primary that failed.)
            seen.held[i] = holds(now.lock, owner);
            seen.keys[i] = now.key;
            // Every install leaves the primary invisible until the release: a whole, newer
            // primary without the bit under our plain lock was installed by someone else.
            // (Or ours, released and locked again by our next transaction: see `settle`.)
            if !it.insert && new.is_some() && now.lock & INVISIBLE == 0 {
                seen.foreign[i] = true;
            }
            seen.our_install[i] = seen.held[i] && new.is_some() && now.lock & INVISIBLE != 0;
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
                // Not read back: its readers are held to the first of them.
                hash: None,
            }
        })
        .collect();
    Recovered::rolled_forward(e, ep.now_ns(), writes)
}

/// Roll back what it holds: the old images everywhere, still under its lock on the primary
/// (released after [`settle`] with everything else). Queues the WRITEs, and a FLUSH to every
/// node written: in persistent-memory mode a replica that kept the dead's flushed install
/// and lost the unflushed roll-back to a power loss would hold a version that never
/// committed (a FLUSH costs a verb per node, off every transaction's path, and orders
/// nothing more where memory is not persistent).
fn roll_back(
    ep: &mut Endpoint,
    map: &PoolMap,
    owner: u64,
    e: &LogEntry,
    ours: &[usize],
    installed: &[u64],
    live_meta: bool,
) {
    let mut record = Vec::new();
    let mut written = Vec::new();
    for &i in ours {
        let it = &e.items[i];
        let Ok(t) = map.table(it.table) else { continue };
        let codec = t.codec();
        for (rank, &n) in t.replicas.iter().enumerate() {
            if !written.contains(&n) {
                written.push(n);
            }
            let lock = if rank == 0 { owner } else { 0 };
            record.clear();
            if it.insert && it.image.is_empty() {
                // An entry without the slot's old image: free it, stamped above the insert.
                let h = RecordHeader {
                    lock,
                    version: installed[i].max(1) + 1,
                    key: 0,
                    table: 0,
                    valid: false,
                    restores: 0,
                };
                let zero = vec![0u8; t.value_size as usize];
                record.resize(t.record_bytes as usize, 0);
                codec.encode(&h, &zero, &mut record);
            } else {
                record.extend_from_slice(&it.image);
                // At the old version, one restore up (the install's version is the next
                // commit's): the same bytes whichever recovery writes them.
                codec.restored(&mut record);
                record[..8].copy_from_slice(&lock.to_le_bytes());
            }
            if rank == 0 && live_meta && codec.meta_words() > 0 {
                // Around the metadata words, which stay as the memory node's CPU and NICs
                // left them; the old header before the value (a recovery cut off in between
                // leaves a record torn or at the image's version: rolled back again).
                write_around_meta(t, it.offset, &record, Direction::RollBack, |at, b| {
                    ep.write(n, at, b);
                });
            } else {
                ep.write(n, it.offset, &record);
            }
        }
    }
    for n in written {
        ep.flush(n);
    }
}
