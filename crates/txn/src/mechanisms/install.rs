//! Installing a commit's new records on every replica: coalescent (every replica in one
//! round trip, FORD) or two-phase (the backups, then the primaries, as FaRM and DrTM+H do);
//! and the roll-back of a commit that a replica failure cut short.

use super::{abort, table, INVISIBLE};
use crate::abort::{Abort, AbortReason};
use crate::item::{Item, NewValue};
use crate::mechanisms::rpc::{self, Read};
use crate::mechanisms::validate::{changed, header_of};
use crate::protocol::Protocol;
use crate::stage::Stage;
use crate::tx::Tx;
use dtxn_store::log::{LogStatus, UNWRITTEN_OFF};
use dtxn_store::record::{RecordHeader, SingleVersion, HEADER_BYTES};
use dtxn_store::{PoolMap, TableInfo};

/// How the new records reach the replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Install {
    /// FORD: every replica of every record in one round trip.
    Coalescent,
    /// FaRM and DrTM+H: the backups, then the primaries (which unlocks them). With
    /// `revalidate`, the read-only items are validated again in the backups' round.
    TwoPhase { revalidate: bool },
}

/// The coalescent commit: every replica of every written record in one round trip.
pub(crate) async fn install<P: Protocol>(tx: &mut Tx<'_, P>, mode: Install) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    let first = tx
        .items
        .iter()
        .find(|i| i.new != NewValue::Keep)
        .expect("a write");
    let fail = abort(AbortReason::ReplicaFailure, first);
    if tx.c.ep.wait_background().await.is_err() {
        return Err(fail);
    }
    unlock_unwritten(tx, &map);
    P::before_install(tx);
    write_replicas(tx, &map, mode);
    if mode == Install::Coalescent {
        decide(tx);
    }
    // DrTM+H: validate the read-only items again, now that every lock is held.
    let mut reads = std::mem::take(&mut tx.c.mech.reads);
    reads.clear();
    if let Install::TwoPhase { revalidate: true } = mode {
        let via = tx.c.via(Stage::Validate);
        for (i, it) in tx.items.iter().enumerate() {
            if let Some(off) = it.offset.filter(|_| it.exists && !it.rw) {
                let t = table(&map, it.table);
                let read = Read::post(&mut tx.c.ep, via, t.primary(), off, HEADER_BYTES);
                reads.push((i, read));
            }
        }
    }
    tx.installed = true;
    if tx.c.ep.post().await.is_err() {
        roll_back(tx).await;
        return Err(fail);
    }
    for &(i, read) in &reads {
        let it = &tx.items[i];
        // A short (malformed RPC) reply: the memory node counts as failed.
        let bad = match header_of(read.bytes(&tx.c.ep)) {
            Some(h) => changed(it, &h).then(|| abort(AbortReason::Validation, it)),
            None => Some(fail),
        };
        if let Some(a) = bad {
            roll_back(tx).await;
            return Err(a);
        }
    }
    tx.c.mech.reads = reads;
    if mode == Install::Coalescent {
        return Ok(());
    }
    install_primaries(tx, &map);
    decide(tx);
    if tx.c.ep.post().await.is_err() {
        roll_back(tx).await;
        return Err(fail);
    }
    Ok(())
}

/// With memory-node failover: the log entry says `Decided` in the batch that makes the commit
/// irrevocable (the coalescent one; the primaries' round of a two-phase install, which comes
/// after DrTM+H's re-validation). A dead coordinator's install found on a promoted backup,
/// whose failed primary may or may not have got that batch, is rolled forward only if decided
/// (`settle.rs`): else the re-validation it rode with may have failed, and an acknowledged
/// commit always completed this batch.
fn decide<P: Protocol>(tx: &mut Tx<'_, P>) {
    if tx.c.failover {
        super::undo::queue_status(tx, LogStatus::Decided);
    }
}

/// Items locked for update but left unwritten are unlocked in the install's first batch:
/// validated (their lock kept them unchanged until now), they need it no longer. Held to the
/// release instead, a coordinator that died after its commit was acknowledged left them
/// locked in its pending entry at their images' versions, and recovery, which cannot tell an
/// item never written from a write cut off on every replica, rolled the acknowledged commit
/// back. Unlocked here, an acknowledged commit (its batches completed) has freed them, and a
/// batch cut short was never acknowledged.
///
/// Unlocking is not enough: the coordinator's next transaction may lock such an item again
/// before this one's release closes its log entry, and recovery, which knows a lock by its
/// owner id, would take that lock for ours. So the same batch marks them in the entry's
/// unwritten-items word (`dtxn_store::log::unwritten_of`; the first 64 logged items), and
/// recovery leaves marked items out of its judgement: they were never to be written.
fn unlock_unwritten<P: Protocol>(tx: &mut Tx<'_, P>, map: &PoolMap) {
    let via = tx.c.via(Stage::Release);
    let owner = tx.c.owner;
    for it in tx.items.iter_mut().filter(|i| i.locked && !i.written()) {
        let Some(off) = it.offset else { continue };
        rpc::write(
            &mut tx.c.ep,
            via,
            table(map, it.table).primary(),
            off,
            &[0; 8],
        );
        it.locked = false;
        if let Some(v) = &tx.c.vcache {
            v.unlock(it.table, it.key, owner);
        }
    }
    let unwritten = tx
        .undo
        .order
        .iter()
        .take(64)
        .enumerate()
        .filter(|&(_, &i)| !tx.items[i].written())
        .fold(0u64, |m, (p, _)| m | 1 << p);
    if unwritten != 0 {
        super::undo::queue_head_word(tx, UNWRITTEN_OFF, unwritten);
    }
}

/// Posts the new records' WRITEs to every backup (and, coalescent, to the primary too, still
/// locked), then each flushed backup's FLUSH; the Vcache learns the new versions first.
/// (As RPCs, the WRITEs are the memory node's CPU stores, durable when answered: the FLUSH
/// then orders nothing more, and stays for the one-sided form's sake.)
fn write_replicas<P: Protocol>(tx: &mut Tx<'_, P>, map: &PoolMap, mode: Install) {
    let (owner, word) = (tx.c.owner, tx.c.lock_word);
    let flush = tx.c.cfg.flush;
    let full = tx.c.cfg.full_flush();
    let via = tx.c.via(Stage::Commit);
    let mut flushed = std::mem::take(&mut tx.c.mech.nodes);
    flushed.clear();
    for i in 0..tx.items.len() {
        let it = &tx.items[i];
        if it.new == NewValue::Keep {
            continue;
        }
        let t = table(map, it.table);
        let off = it.offset.expect("written items exist");
        // Encoded once; the replicas' copies differ only in the lock word (line 0's first).
        // A backup's is invisible with our owner id: if its primary fails, the backup is
        // promoted, and recovery tells our install from another's by it (`settle.rs`).
        let record = &mut tx.c.mech.record;
        encode_new(record, t, it, owner | INVISIBLE);
        let copy = &mut tx.c.mech.copy;
        let displaced = displace(copy, t, it);
        for &n in t.backups() {
            if let Some(at) = displaced {
                rpc::write(&mut tx.c.ep, via, n, at, copy);
                full_flush(&mut tx.c.ep, full, n);
            }
            rpc::write(&mut tx.c.ep, via, n, off, record);
            full_flush(&mut tx.c.ep, full, n);
            if flush && !full && !flushed.contains(&n) {
                flushed.push(n);
            }
        }
        if mode == Install::Coalescent {
            if let Some(at) = displaced {
                rpc::write(&mut tx.c.ep, via, t.primary(), at, copy);
                full_flush(&mut tx.c.ep, full, t.primary());
            }
            SingleVersion::set_lock(record, word | INVISIBLE);
            write_primary::<P>(&mut tx.c.ep, via, t, off, record, Direction::Install);
            full_flush(&mut tx.c.ep, full, t.primary());
        }
    }
    // Localized validation: the new versions go into the Vcache before the remote commit,
    // so that a validator never passes against a version the memory already replaced.
    if let Some(v) = &tx.c.vcache {
        for it in tx.items.iter().filter(|i| i.new != NewValue::Keep) {
            v.set_version(it.table, it.key, it.new_version(), owner);
        }
    }
    // Selective remote flush: each backup once, after its last WRITE (FLUSH follows every
    // earlier WRITE on its QP). The primary is never flushed: a lost primary is rebuilt from
    // its backups.
    for &n in &flushed {
        tx.c.ep.flush(n);
    }
    tx.c.mech.nodes = flushed;
}

/// The record `it` installs (its new value and version, deleted or not), with `lock` in its
/// lock word, into `record`.
pub(crate) fn encode_new<X>(record: &mut Vec<u8>, t: &TableInfo, it: &Item<X>, lock: u64) {
    let h = RecordHeader {
        lock,
        version: it.new_version(),
        key: it.key,
        table: it.table,
        valid: it.new != NewValue::Delete,
        // An insert's too (the slot's): its version, one above the slot's, is that of any
        // insert rolled back there since the slot was freed.
        restores: it.restores,
    };
    // One copy: a table's older copies (MVCC's version slots) are [`displace`]'s.
    record.resize(t.copy_bytes(), 0);
    let codec = t.codec();
    codec.encode(&h, &it.value, record);
    // The buffer is reused across records, and encoding leaves metadata words as they were:
    // word 0 is the item's, as the protocol set it for the commit.
    if codec.meta_words() > 0 {
        codec.set_meta_word(record, 0, it.meta);
    }
}

/// A table that keeps older copies of its records (RCC's MVCC version slots, see
/// `dtxn_store::record`): the version the commit of `it` replaces, as its undo image holds it
/// (read under our lock: stable), into `copy`, with the new version in its lock word (the
/// version that followed it: a reader checks a chain of copies against it, `mvcc.rs`).
/// Returns where it goes: over the oldest of the older copies (an empty one first). Posted
/// on each replica before the new record, on the same QP, so applied before it (G4): a
/// replica whose new record is whole has the copy too (what recovery's roll forward needs).
/// The install's own roll-back writes the whole image back, the older copies with it;
/// recovery's, from the undo log, copy 0 alone (the copy left behind names a successor that
/// never committed: off every reader's chain, `mvcc.rs`). `None` if the
/// table keeps one copy, or the commit replaces no version (an insert, a re-created key).
fn displace<X>(copy: &mut Vec<u8>, t: &TableInfo, it: &Item<X>) -> Option<u64> {
    let (copies, b) = (usize::from(t.copies), t.copy_bytes());
    if copies < 2 || !it.exists || it.new == NewValue::Insert || it.image.len() < copies * b {
        return None;
    }
    let codec = t.codec();
    let oldest = (1..copies).min_by_key(|&c| {
        let h = codec.header(&it.image[c * b..]);
        (h.valid && h.key == it.key && h.table == it.table, h.version)
    })?;
    copy.clear();
    copy.extend_from_slice(&it.image[..b]);
    SingleVersion::set_lock(copy, it.new_version());
    Some(it.offset? + (oldest * b) as u64)
}

/// Two-phase commit's second phase: the primaries' WRITEs.
///
/// The primaries, under our lock and invisible. They are unlocked by the release, after
/// every primary has its new record: a recovery agent that finds any of our locks released
/// then knows the commit is complete everywhere (see recovery.rs).
fn install_primaries<P: Protocol>(tx: &mut Tx<'_, P>, map: &PoolMap) {
    let word = tx.c.lock_word;
    let full = tx.c.cfg.full_flush();
    let via = tx.c.via(Stage::Commit);
    for i in 0..tx.items.len() {
        let it = &tx.items[i];
        if it.new == NewValue::Keep {
            continue;
        }
        let t = table(map, it.table);
        let off = it.offset.expect("written items exist");
        let record = &mut tx.c.mech.record;
        encode_new(record, t, it, word | INVISIBLE);
        if let Some(at) = displace(&mut tx.c.mech.copy, t, it) {
            rpc::write(&mut tx.c.ep, via, t.primary(), at, &tx.c.mech.copy);
            full_flush(&mut tx.c.ep, full, t.primary());
        }
        write_primary::<P>(&mut tx.c.ep, via, t, off, record, Direction::Install);
        full_flush(&mut tx.c.ep, full, t.primary());
    }
}

/// FORD's full flush (`ford.full_flush`, the baseline its selective flush is measured
/// against): a FLUSH right after each WRITE, to whichever replica it went.
#[inline]
pub(crate) fn full_flush(ep: &mut dtxn_fabric::Endpoint, full: bool, node: dtxn_fabric::NodeId) {
    if full {
        ep.flush(node);
    }
}

/// Which way a record WRITE around the metadata words goes ([`write_around_meta`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// A new version over the old: the value, then the header.
    Install,
    /// The old image back over an install (a roll-back): the header, then the value.
    RollBack,
}

/// A record's WRITE to its primary: whole, or, for a protocol whose metadata words others
/// change under its lock ([`Protocol::LIVE_META`]: Scythe's takeout lock, granted by the
/// memory node's CPU and released by NICs' FAAs while the record is held), around them
/// ([`write_around_meta`]).
#[inline]
pub(crate) fn write_primary<P: Protocol>(
    ep: &mut dtxn_fabric::Endpoint,
    via: rpc::Via,
    t: &TableInfo,
    off: u64,
    record: &[u8],
    direction: Direction,
) {
    let codec = t.codec();
    if P::LIVE_META && codec.meta_words() > 0 {
        write_around_meta(t, off, record, direction, |at, b| {
            rpc::write(ep, via, t.primary(), at, b)
        });
    } else {
        rpc::write(ep, via, t.primary(), off, record);
    }
}

/// A record's WRITE around its metadata words, which stay as they are, through
/// `write(address, bytes)`: three WRITEs on one QP, applied in order, each line by line (G4),
/// so that a crash leaves a prefix of their lines. First the lock word with the invisible bit
/// (from here on a reader reads again rather than take line 0's value, which changes under a
/// header that still looks committed). Then, for an install, the value and then the header,
/// its version last; for a roll-back, the header (the image's version, its lock word still
/// invisible until the release) and then the value.
///
/// Whatever the prefix, recovery then finds the record at the version it is going to and
/// whole, or at the other with a stamp or a value that tells it apart, and rolls back:
/// - An install cut off leaves the old version, its value new in part (a one-line record: a
///   new value whole under the old header, which recovery compares with the image).
/// - A roll-back cut off leaves the image's version in line 0 over lines stamped with the
///   install's (torn), or a one-line record at the image's version with the install's value.
///
/// The other orders are wrong. Two WRITEs, header then value, left a one-line install whole
/// at the new version with the old value when cut between them: recovery rolled forward a
/// value never written. A roll-back in the install's order, cut inside the value, left line 0
/// with the image's first bytes under the install's header and line 1 as the install left it:
/// whole at the new version, a value nobody wrote, and recovery rolled it forward (torture:
/// scythe/skew/seed 60000011 under `--faults memory=1,compute=1,rejoin=100us`, a roll-back
/// after a backup failed, cut off by the coordinator's crash). And a roll-back whose header
/// came back with the plain lock word let readers take a one-line record's install value as
/// the old version's until its value WRITE landed, and commit once the lock was released
/// (torture: scythe-cas/kv/seed 60100018 and three more, a `torn-value` in the history).
pub(crate) fn write_around_meta(
    t: &TableInfo,
    off: u64,
    record: &[u8],
    direction: Direction,
    mut write: impl FnMut(u64, &[u8]),
) {
    let lock = u64::from_le_bytes(record[..8].try_into().expect("a header")) | INVISIBLE;
    let v = t.codec().value_off();
    write(off, &lock.to_le_bytes());
    match direction {
        Direction::Install => {
            write(off + v as u64, &record[v..]);
            write(off, &record[..HEADER_BYTES]);
        }
        Direction::RollBack => {
            // The old header still invisible: until the value is back, line 0 holds the
            // install's first bytes under it (a one-line record: the install's whole value),
            // and a READ of several lines may take line 0 now and the others after the
            // value's WRITE, each stamped with the old version: a reader must take neither
            // for the old version's value. The release clears the word.
            let mut header = [0u8; HEADER_BYTES];
            header.copy_from_slice(&record[..HEADER_BYTES]);
            header[..8].copy_from_slice(&lock.to_le_bytes());
            write(off, &header);
            write(off + v as u64, &record[v..]);
        }
    }
}

/// A replica failed during the commit: put the old images back wherever we can reach.
async fn roll_back<P: Protocol>(tx: &mut Tx<'_, P>) {
    let map = tx.c.map.clone();
    let (owner, word) = (tx.c.owner, tx.c.lock_word);
    let via = tx.c.via(Stage::Commit);
    let record = &mut tx.c.mech.record;
    for it in tx.items.iter().filter(|i| i.new != NewValue::Keep) {
        let t = table(&map, it.table);
        let off = it.offset.expect("written items exist");
        record.clear();
        record.extend_from_slice(&it.image);
        // At the old version, one restore up: our install's version is the next commit's.
        if record.len() >= t.copy_bytes() {
            t.codec().restored(record);
        }
        for (rank, &n) in t.replicas.iter().enumerate() {
            let lock = if rank == 0 { word } else { 0 };
            record[..8].copy_from_slice(&lock.to_le_bytes());
            if rank == 0 {
                write_primary::<P>(&mut tx.c.ep, via, t, off, record, Direction::RollBack);
            } else {
                rpc::write(&mut tx.c.ep, via, n, off, record);
            }
        }
    }
    // In persistent-memory mode the old images are flushed like the install was: a backup
    // that kept the flushed install and lost the unflushed roll-back to a power loss would
    // hold a version that never committed.
    if tx.c.cfg.flush {
        let mut flushed = std::mem::take(&mut tx.c.mech.nodes);
        flushed.clear();
        for it in tx.items.iter().filter(|i| i.new != NewValue::Keep) {
            for &n in table(&map, it.table).backups() {
                if !flushed.contains(&n) {
                    flushed.push(n);
                }
            }
        }
        for &n in &flushed {
            tx.c.ep.flush(n);
        }
        tx.c.mech.nodes = flushed;
    }
    // Best effort: the failed node's copy is rebuilt when it is replaced.
    let _ = tx.c.ep.post().await;
    tx.installed = false;
    if let Some(v) = &tx.c.vcache {
        for it in tx.items.iter().filter(|i| i.new != NewValue::Keep) {
            v.set_version(it.table, it.key, it.version, owner);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dtxn_store::{Plan, PoolShape, TableSpec};

    /// A record of `t` at `version` holding `fill`, locked with `lock`, its two metadata
    /// words (Scythe's takeout words) `meta`.
    fn record(t: &TableInfo, version: u64, fill: u8, lock: u64, meta: u64) -> Vec<u8> {
        let codec = t.codec();
        let h = RecordHeader {
            lock,
            version,
            key: 1,
            table: t.id,
            valid: true,
            restores: 0,
        };
        let mut rec = vec![0u8; t.record_bytes as usize];
        codec.encode(&h, &vec![fill; t.value_size as usize], &mut rec);
        for i in 0..codec.meta_words() {
            codec.set_meta_word(&mut rec, i, meta + i as u64);
        }
        rec
    }

    /// A WRITE around the metadata words, applied one WRITE at a time over `before` (the
    /// states a crash, or a reader between two WRITEs, can see): after every prefix the
    /// record is locked by its owner with the invisible bit, and the takeout words are as
    /// others left them; at the end it holds `record`'s header and value. A roll-back whose
    /// first WRITE dropped the owner (`| INVISIBLE` made `& INVISIBLE`: lock word 0) unlocked
    /// the record until its header's WRITE, for another coordinator to lock under it; an
    /// install whose header went before its value showed the new version over the old value.
    #[test]
    fn every_prefix_of_a_write_around_the_meta_words_keeps_its_owners_lock() {
        const OWNER: u64 = 7;
        // One line (the whole value in line 0) and three.
        for value_size in [16, 150] {
            let spec = TableSpec::new(1, "t", value_size, 16).with_meta_words(2);
            let plan = Plan::new(&[spec], &PoolShape::default()).unwrap();
            let t = plan.table(1).unwrap().clone();
            let codec = t.codec();
            let old = record(&t, 4, 0x0A, OWNER, 0);
            let new = record(&t, 5, 0x0B, OWNER | INVISIBLE, 0);
            // The header's version after each WRITE: an install's last (its value first), a
            // roll-back's second (the old header before the old value).
            for (direction, before, target, versions) in [
                (Direction::Install, &old, &new, [4, 4, 5]),
                (Direction::RollBack, &new, &old, [5, 4, 4]),
            ] {
                // Others' takeout words, granted and released while the record is held.
                let mut pool = before.clone();
                for i in 0..codec.meta_words() {
                    codec.set_meta_word(&mut pool, i, 0xFEED + i as u64);
                }
                let mut writes = 0;
                write_around_meta(&t, 0, target, direction, |at, b| {
                    let at = at as usize;
                    pool[at..at + b.len()].copy_from_slice(b);
                    writes += 1;
                    let lock = u64::from_le_bytes(pool[..8].try_into().unwrap());
                    let at = format!("{direction:?}, {value_size} bytes, WRITE {writes}");
                    assert_eq!(lock, OWNER | INVISIBLE, "{at}: the lock word");
                    let version = codec.header(&pool).version;
                    assert_eq!(version, versions[writes - 1], "{at}: the header's version");
                    for i in 0..codec.meta_words() {
                        let w = codec.meta_word(&pool, i);
                        assert_eq!(w, 0xFEED + i as u64, "{at}: takeout word {i}");
                    }
                });
                assert_eq!(writes, 3, "{direction:?}");
                let mut value = vec![0u8; value_size];
                let h = codec.decode(&pool, &mut value).unwrap();
                let want = codec.header(target);
                assert_eq!(h.version, want.version, "{direction:?}");
                assert_eq!(value, vec![target[codec.value_off()]; value.len()]);
            }
        }
    }
}
