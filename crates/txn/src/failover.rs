//! Memory-node failover's verbs (issue #23; the protocol is [`crate::membership`]'s): probing
//! the memory nodes after a transaction failed on one, and repairing a promoted primary.
//!
//! **Promotion** is the view's alone ([`dtxn_store::View`]): a table's first live replica is
//! its primary. A backup holds every committed record (a commit writes every replica before
//! it is acknowledged), but two things only the primary kept must be rebuilt before anyone
//! uses it as one ([`repair_promoted`]):
//!
//! - its **overflow counter**: inserts claim overflow buckets with an FAA on the primary's
//!   counter and link them on every replica, so a backup's counter is the load's; a promoted
//!   one would hand out buckets already linked. It is raised to the highest link any bucket
//!   of the table holds.
//! - **invisible words**: a commit WRITEs its backups with an invisible lock word (and its
//!   owner id) and leaves it there for the next install to overwrite (a release clearing it
//!   could land on the next install's: `mechanisms/release.rs`), so most of a promoted
//!   backup's written records show one, which on a primary would read as locked forever.
//!   Once every coordinator works in the new view and every dead one is recovered
//!   (nothing of an older view in flight: the repair runs only then), an invisible word on a
//!   promoted primary is stale, and cleared.
//!
//! A node that *rejoined* (a blank replacement, copied to: [`copy_to_joiners`], the protocol
//! in [`crate::membership`]) gets the same repair when it becomes a primary.
//!
//! A protocol's own primary-only state is its repair hook's (`Protocol::repair_promoted`):
//! SUNDIAL raises the promoted leases; MVCC unfreezes its rts words (its read timestamps need
//! no rebuilding: its timestamps carry the view, so every new-view writer is above every
//! old-view reader); Scythe empties its takeout queues. Motor and RCC's OCC need nothing more
//! (a backup holds whole CVTs; OCC is DrTM+H's code), nor do NO_WAIT and WAIT_DIE (their
//! lock words are FORD's; a read share on the failed primary belongs to an old-view
//! transaction, which ends before the new view is active), nor does CALVIN (its batches are on
//! node 0 with failover on, and an install that fails on a node down is finished on the live
//! replicas: `protocols/calvin.rs`).

use crate::mechanisms::share::{self, Terms};
use crate::mechanisms::{journal, INVISIBLE};
use crate::recovery::{read_buckets, scan_chunks};
use crate::registry::Protocol;
use dtxn_fabric::{Endpoint, FabricError, NodeId};
use dtxn_store::{PoolMap, TableInfo, View};

/// The memory nodes of `map`'s view that do not answer a READ: one round trip per node found
/// down, one more when none is. The control chain's last member down is an error: the pool's
/// control words are lost with it (with one member, node 0).
pub async fn probe(ep: &mut Endpoint, map: &PoolMap) -> Result<Vec<NodeId>, FabricError> {
    let mut down = Vec::new();
    loop {
        let asked: Vec<NodeId> = map.live_nodes().filter(|n| !down.contains(n)).collect();
        for &n in &asked {
            ep.read(n, 0, 8);
        }
        match ep.post().await {
            Ok(()) => return Ok(down),
            Err(FabricError::NodeDown(n)) if !map.holds_control_alone(n) && asked.contains(&n) => {
                down.push(n)
            }
            Err(e) => return Err(e),
        }
    }
}

/// Repairs the promoted primaries of `map`'s view (see the module doc): raises each one's
/// overflow counter to the highest link and clears its stale invisible words, then what
/// `protocol` kept on the primary alone (SUNDIAL's leases). With `since`, the view repaired
/// last, only the tables whose primary changed since ([`PoolMap::promoted_since`]: a
/// rejoin's later views promote nothing, and rescanning a table of millions of records would
/// hold every coordinator for nothing); without, every promoted one. Idempotent (a leader
/// that dies half-way leaves it for the next). Returns the tables repaired.
pub async fn repair_promoted(
    ep: &mut Endpoint,
    map: &PoolMap,
    protocol: Protocol,
    since: Option<View>,
) -> Result<u32, FabricError> {
    let todo: Vec<&TableInfo> = match since {
        Some(v) => map.promoted_since(v).collect(),
        None => map.promoted().collect(),
    };
    let ids: Vec<u32> = todo.iter().map(|t| t.id).collect();
    let mut bytes = Vec::new();
    for t in todo {
        let n = t.primary();
        let codec = t.codec();
        let mut highest = 0u64;
        for chunk in scan_chunks(t) {
            read_buckets(ep, t, n, &chunk, &mut bytes).await?;
            for b in chunk.clone() {
                let at = ((b - chunk.start) * t.bucket_bytes) as usize;
                let bucket = &bytes[at..at + t.bucket_bytes as usize];
                let link = u64::from_le_bytes(bucket[..8].try_into().expect("word"));
                if link <= t.overflow_buckets {
                    highest = highest.max(link);
                }
                for s in 0..t.slots_per_bucket {
                    let lock = codec.header(t.slot_bytes(bucket, s)).lock;
                    if lock & INVISIBLE != 0 {
                        ep.cas(n, t.slot(t.bucket(b), s), lock, 0);
                    }
                }
            }
            ep.post().await?;
        }
        // Only FAAs move the counter once the table is served, so a CAS from what we read
        // either raises it or finds it raised past what we read: read again.
        loop {
            let r = ep.read(n, t.overflow_counter(), 8);
            ep.post().await?;
            let now = ep.word(r, 0);
            if now >= highest {
                break;
            }
            let c = ep.cas(n, t.overflow_counter(), now, highest);
            ep.post().await?;
            if ep.cas_ok(c) {
                break;
            }
        }
    }
    if !ids.is_empty() {
        protocol.repair_promoted(ep, map, &ids).await?;
    }
    Ok(ids.len() as u32)
}

/// The failed memory nodes of `map`'s view that answer a READ again (a replacement came back
/// blank, or a new node took the id): one round trip per failed node.
pub async fn probe_failed(ep: &mut Endpoint, map: &PoolMap) -> Result<Vec<NodeId>, FabricError> {
    let mut back = Vec::new();
    let nodes = ep.node_sizes().len() as NodeId;
    for n in map.view().failed_nodes().filter(|&n| n < nodes) {
        // A replacement is a new region: reach it by a new connection (the old one broke with
        // the node).
        ep.reconnect(n);
        ep.read(n, 0, 8);
        match ep.post().await {
            Ok(()) => back.push(n),
            Err(FabricError::NodeDown(m)) if m == n => {}
            Err(e) => return Err(e),
        }
    }
    Ok(back)
}

/// Gives blank memory node `node` the pool's catalog and superblock (one round trip), so that
/// a bootstrap in a view where it joins finds it. Its tables and logs are zero already.
/// Idempotent: two coordinators doing it write the same bytes.
pub async fn format_joiner(
    ep: &mut Endpoint,
    map: &PoolMap,
    node: NodeId,
) -> Result<(), FabricError> {
    let Some(&size) = ep.node_sizes().get(node as usize) else {
        return Err(FabricError::NodeDown(node));
    };
    for (at, bytes) in map.format_image(node, size) {
        ep.write(node, at, &bytes);
    }
    // In persistent-memory mode a rejoined node must survive a power loss as any replica
    // does; elsewhere a FLUSH costs nothing but its completion.
    ep.flush(node);
    ep.post().await
}

/// A slot the copy found locked, to copy in a later pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub table: u32,
    /// The slot's offset.
    pub at: u64,
    /// The lock word the next pass CASes from: 0, or a 2PL share word that a writer may take
    /// (its shares all given back, or void: `share::free_for_writer`).
    pub expect: u64,
}

/// What one pass of [`copy_to_joiners`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyPass {
    /// Slots copied.
    pub copied: u64,
    /// Slots found locked (by a transaction, or a dead coordinator not yet recovered): to
    /// copy in a later pass.
    pub left: Vec<Slot>,
    /// A pass cut at its budget: where the next call goes on (the table's place among the
    /// joining tables, first bucket).
    pub resume: Option<(u32, u64)>,
}

/// Where a whole pass starts and how much of it one call copies: from `from` (a
/// [`CopyPass::resume`]; the start if `None`), at most `chunks` rounds of `COPY_BYTES` (no limit if
/// `None`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopySlice {
    pub from: Option<(u32, u64)>,
    pub chunks: Option<u64>,
}

/// What the copy does; every switch is on but in the negative controls of
/// `crates/txn/tests/rejoin.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyRules {
    /// Each slot under its lock on the primary (off: an older image overwrites a commit's
    /// WRITE to a joiner).
    pub lock: bool,
    /// A multi-version table's attribute bars with its slots (off: the joiner cannot rebuild
    /// the older versions its CVTs name).
    pub bars: bool,
    /// A FLUSH of the joiner after the WRITEs (off: a power loss takes copied records).
    pub flush: bool,
    /// A slot whose word counts 2PL read shares that are gone (given back, or void) is
    /// locked from that word in the next pass (off: from 0, so such a slot is never copied).
    pub shares: bool,
    /// The protocol journals its locks: the copier marks its journal overflowed on each
    /// primary before its first copy lock there (its copy locks are not journaled, so its
    /// recovery must scan). Off for CALVIN, whose recovery always scans, and whose log slice
    /// holds its epoch area where the journal's tail would be.
    pub journaled: bool,
}

impl CopyRules {
    /// The sound copy.
    pub const SOUND: CopyRules = CopyRules {
        lock: true,
        bars: true,
        flush: true,
        shares: true,
        journaled: true,
    };
}

/// Bytes of buckets one copy round locks and READs.
const COPY_BYTES: u64 = 16 << 10;

/// Copies every table of `map`'s view that has joining replicas from its primary to them
/// (the whole table, or only the slots `only` names: what an earlier pass left), per slot
/// under the slot's lock on the primary, taken with `owner` (issue #23, re-replication).
///
/// Per chunk of buckets, three round trips: a CAS of each slot's lock word from 0 to
/// `owner`, then a READ of the buckets (an atomic executes before later ops on its QP: the
/// READ sees every slot we locked as locked, so no commit writes it under us); the WRITE of
/// each locked record (its lock word 0) to every joiner, and of each bucket's chain link
/// that is set; then, once those WRITEs completed, a CAS of each lock back to 0. A slot
/// found locked is left for a later pass; if it holds NO_WAIT's or WAIT_DIE's read shares
/// that a writer may take (all given back, or void: they stay counted in the word until
/// someone takes it, `mechanisms::share`), the later pass CASes from that word, as a writer
/// would. Why a commit's WRITE to the joiner and the copy's never land out of order, and
/// why links, inserts and deletes need nothing more: see [`crate::membership`]
/// (re-replication).
///
/// The caller's view must be active (every coordinator works in it): then every commit
/// that can still write a copied slot writes the joiners too. Before its first lock on a
/// node the copier marks its own lock journal there overflowed: its copy locks are not
/// journaled, and if it dies holding some, its recovery scans for them.
///
/// A multi-version table's slots take their attribute bars with them (Motor's older
/// versions' chunks, READ under the slot's lock after the slot was locked and read).
///
/// `rules` other than [`CopyRules::SOUND`] are the negative controls' unsound copies.
pub async fn copy_to_joiners(
    ep: &mut Endpoint,
    map: &PoolMap,
    owner: u64,
    only: Option<&[Slot]>,
    rules: CopyRules,
    slice: CopySlice,
) -> Result<CopyPass, FabricError> {
    let CopyRules {
        lock,
        bars,
        flush,
        shares,
        journaled: _,
    } = rules;
    let owner = if lock { owner } else { 0 };
    // A slot found locked: left with the word to CAS from next time.
    let left = |ep: &Endpoint, table: u32, at: u64, old: u64| Slot {
        table,
        at,
        expect: if shares && share::free_for_writer(old, Terms::of(ep)) {
            old
        } else {
            0
        },
    };
    let mut pass = CopyPass::default();
    let index = ep.id().index;
    let mut marked: Vec<NodeId> = Vec::new();
    let mut bytes = Vec::new();
    let mut budget = slice.chunks;
    for (i, t) in map.tables().filter(|t| t.joining > 0).enumerate() {
        let i = i as u32;
        if slice.from.is_some_and(|(from, _)| i < from) {
            continue;
        }
        let p = t.primary();
        let joiners: Vec<NodeId> = t.replicas[t.readable().len()..].to_vec();
        if rules.journaled && !marked.contains(&p) {
            journal::mark_overflowed(ep, map, index, p);
            ep.post().await?;
            marked.push(p);
        }
        let record = t.record_bytes as usize;
        if let Some(only) = only {
            let slots: Vec<&Slot> = only.iter().filter(|s| s.table == t.id).collect();
            for chunk in slots.chunks((COPY_BYTES / t.slot_stride.max(1)).max(1) as usize) {
                let ops: Vec<_> = chunk
                    .iter()
                    .map(|s| {
                        (
                            s.at,
                            lock.then(|| ep.cas(p, s.at, s.expect, owner)),
                            ep.read(p, s.at, record),
                        )
                    })
                    .collect();
                ep.post().await?;
                let mut locked = Vec::new();
                for (s, c, r) in ops {
                    match c {
                        Some(c) if !ep.cas_ok(c) => pass.left.push(left(ep, t.id, s, ep.old(c))),
                        _ => {
                            let mut b = ep.bytes(r).to_vec();
                            b[..8].copy_from_slice(&0u64.to_le_bytes());
                            locked.push((s, b));
                        }
                    }
                }
                let bars = if bars {
                    bars_of(ep, t, p, &locked).await?
                } else {
                    Vec::new()
                };
                copy_locked(ep, p, &joiners, (owner, flush), &locked, &bars).await?;
                pass.copied += locked.len() as u64;
            }
            continue;
        }
        // Overflow buckets claimed before the copy started; later ones are claimed and
        // linked by commits that write the joiners too.
        let r = ep.read(p, t.overflow_counter(), 8);
        ep.post().await?;
        let used = ep.word(r, 0).min(t.overflow_buckets);
        let buckets = t.bucket_count + used;
        let per = (COPY_BYTES / t.bucket_bytes).max(1);
        let mut first = match slice.from {
            Some((from, b)) if from == i => b,
            _ => 0,
        };
        while first < buckets {
            if budget == Some(0) {
                pass.resume = Some((i, first));
                return Ok(pass);
            }
            budget = budget.map(|b| b - 1);
            let chunk = first..buckets.min(first + per);
            first = chunk.end;
            let mut cas = Vec::new();
            for b in chunk.clone() {
                for s in 0..t.slots_per_bucket {
                    let at = t.slot(t.bucket(b), s);
                    cas.push((b, s, at, lock.then(|| ep.cas(p, at, 0, owner))));
                }
            }
            let len = (chunk.end - chunk.start) * t.bucket_bytes;
            let r = ep.read(p, t.bucket(chunk.start), len as usize);
            ep.post().await?;
            bytes.clear();
            bytes.extend_from_slice(ep.bytes(r));
            let bucket_of = |b: u64| {
                let at = ((b - chunk.start) * t.bucket_bytes) as usize;
                &bytes[at..at + t.bucket_bytes as usize]
            };
            let mut locked = Vec::new();
            for &(b, s, at, c) in &cas {
                match c {
                    Some(c) if !ep.cas_ok(c) => pass.left.push(left(ep, t.id, at, ep.old(c))),
                    _ => {
                        let mut rec = t.slot_bytes(bucket_of(b), s).to_vec();
                        rec[..8].copy_from_slice(&0u64.to_le_bytes());
                        locked.push((at, rec));
                    }
                }
            }
            // A chain link, once set, never changes and is the same on every replica: the
            // one we read is the joiner's too (a link not yet set is left alone: the insert
            // that sets it writes the joiners).
            let links: Vec<(u64, Vec<u8>)> = chunk
                .clone()
                .map(|b| (t.bucket(b), bucket_of(b)[..8].to_vec()))
                .filter(|(_, w)| w.iter().any(|&x| x != 0))
                .collect();
            let mut also = if bars {
                bars_of(ep, t, p, &locked).await?
            } else {
                Vec::new()
            };
            also.extend(links);
            copy_locked(ep, p, &joiners, (owner, flush), &locked, &also).await?;
            pass.copied += locked.len() as u64;
        }
    }
    Ok(pass)
}

/// The attribute bars of the `locked` slots of multi-version table `t` (Motor's older
/// versions' chunks, apart from the CVTs), READ from primary `p` while the copy holds the
/// slots' locks: a commit writes a record's bar under the record's lock, so the bar read is
/// the one its CVT (read under the same lock) names. Nothing for a single-version table.
async fn bars_of(
    ep: &mut Endpoint,
    t: &TableInfo,
    p: NodeId,
    locked: &[(u64, Vec<u8>)],
) -> Result<Vec<(u64, Vec<u8>)>, FabricError> {
    let Some(mv) = t.mv.as_ref() else {
        return Ok(Vec::new());
    };
    if mv.bar_lines == 0 || locked.is_empty() {
        return Ok(Vec::new());
    }
    let len = mv.bar_lines as usize * dtxn_store::record::LINE;
    let reads: Vec<(u64, _)> = locked
        .iter()
        .map(|(at, _)| {
            let bar = t.bar_line_off(*at, 0);
            (bar, ep.read(p, bar, len))
        })
        .collect();
    ep.post().await?;
    Ok(reads
        .into_iter()
        .map(|(bar, r)| (bar, ep.bytes(r).to_vec()))
        .collect())
}

/// WRITEs the `locked` records and what goes `also` (a multi-version table's bars, chain
/// links) to every joiner, FLUSHes them there (unless `flush` is false) (persistent-memory mode: a commit's FLUSH of the joiner
/// persists only its own QP's lines, so without this a power loss takes copied records from a
/// node that counts as a replica), and once those have executed, unlocks the records on
/// primary `p`. On a failed WRITE (a joiner died) the locks are given back all the same.
async fn copy_locked(
    ep: &mut Endpoint,
    p: NodeId,
    joiners: &[NodeId],
    (owner, flush): (u64, bool),
    locked: &[(u64, Vec<u8>)],
    also: &[(u64, Vec<u8>)],
) -> Result<(), FabricError> {
    for &j in joiners {
        for (at, bytes) in locked.iter().chain(also) {
            ep.write(j, *at, bytes);
        }
        if flush {
            ep.flush(j);
        }
    }
    let written = ep.post().await;
    if owner == 0 {
        return written; // copied without locks
    }
    for (at, _) in locked {
        ep.cas(p, *at, owner, 0);
    }
    let unlocked = ep.post().await;
    written.and(unlocked)
}

/// For a protocol's repair hook: every bucket of each promoted table of `tables` (ids, of
/// `map`'s view), as its new primary holds it, one chunk per round trip (16 KiB per READ):
/// `f(ep, table, bucket index, bucket address, bucket bytes)` posts what it repairs there,
/// awaited with the chunk.
pub(crate) async fn each_promoted_bucket(
    ep: &mut Endpoint,
    map: &PoolMap,
    tables: &[u32],
    mut f: impl FnMut(&mut Endpoint, &TableInfo, u64, u64, &[u8]),
) -> Result<(), FabricError> {
    let mut bytes = Vec::new();
    for t in map.tables().filter(|t| tables.contains(&t.id)) {
        for chunk in scan_chunks(t) {
            read_buckets(ep, t, t.primary(), &chunk, &mut bytes).await?;
            for (b, bucket) in chunk.clone().zip(bytes.chunks(t.bucket_bytes as usize)) {
                f(ep, t, b, t.bucket(b), bucket);
            }
            ep.post().await?;
        }
    }
    Ok(())
}
