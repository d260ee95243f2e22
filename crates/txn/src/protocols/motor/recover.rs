//! Motor's recovery: a crashed coordinator's op log (redo) is always rolled forward. Every
//! record the dead coordinator still locks gets its logged image on every replica that does
//! not hold it whole yet (a replica's record is stamped with the commit timestamp once
//! installed; a lock released means installed everywhere, so nothing else is touched). The op
//! log was written before any of the records on each memory node (G4).
//!
//! Across a view change (memory-node failover), a coordinator that died in an older view
//! held its locks on a primary that failed since: a promoted primary's records are judged
//! by their versions alone (see [`redo_motor`]).

use super::COMMITTING;
use crate::recovery::Recovered;
use dtxn_check::history;
use dtxn_fabric::{Endpoint, FabricError, NodeId, OpId};
use dtxn_store::cvt::MvCodec;
use dtxn_store::log::{ItemKind, LogEntry};
use dtxn_store::PoolMap;

/// Finishes the commit of a Motor op log: every logged record that `owner` still locks is
/// written, with its pre-image lines first, to every replica that does not hold it whole.
pub(crate) async fn redo_motor(
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
            } else if map.lost_locks(t) {
                // A promoted primary, and the dead coordinator died before the promotion:
                // its lock died with the failed primary (a backup's lock word is always 0).
                // Taken as held, as every record an op log names is while its commit is in
                // flight: the redo below writes only a replica whose record is older than
                // the logged one (versions are commit timestamps, and a released commit had
                // installed on every replica, so only a commit in flight leaves one older),
                // and nobody else can have written it since (its lock was ours on the failed
                // primary; the promoted one is used only once this recovery is done). A
                // released commit is then reported rolled forward again, which the history
                // takes once (by its id).
                held[g] = Some(0);
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
    Ok(Recovered::rolled_forward(e, ep.now_ns(), installed))
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
                hash: Some(if newest.tombstone() {
                    history::ABSENT
                } else {
                    history::value_hash(&v)
                }),
            })
        })
        .collect()
}
