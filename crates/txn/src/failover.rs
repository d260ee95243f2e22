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
//!   owner id) and clears it in its release; a commit cut short (its coordinator crashed,
//!   recovered in the new view) may leave one, which on a primary would read as locked
//!   forever. Once every coordinator works in the new view and every dead one is recovered
//!   (nothing of an older view in flight: the repair runs only then), an invisible word on a
//!   promoted primary is stale, and cleared.
//!
//! A protocol's own primary-only state is its repair hook's (`Protocol::repair_promoted`):
//! SUNDIAL raises the promoted leases; MVCC unfreezes its rts words (its read timestamps need
//! no rebuilding: its timestamps carry the view, so every new-view writer is above every
//! old-view reader); Scythe empties its takeout queues. Motor and RCC's OCC need nothing more
//! (a backup holds whole CVTs; OCC is DrTM+H's code). CALVIN's epoch batches are on one
//! memory node each, unreplicated: it has no failover, and NO_WAIT and WAIT_DIE (read shares
//! on the primaries alone) none yet.

use crate::mechanisms::INVISIBLE;
use crate::recovery::{read_buckets, scan_chunks};
use crate::registry::Protocol;
use dtxn_fabric::{Endpoint, FabricError, NodeId};
use dtxn_store::{PoolMap, TableInfo};

/// The memory nodes of `map`'s view (but node 0, which holds the view) that do not answer a
/// READ: one round trip per node found down, one more when none is.
pub async fn probe(ep: &mut Endpoint, map: &PoolMap) -> Result<Vec<NodeId>, FabricError> {
    let mut down = Vec::new();
    loop {
        let asked: Vec<NodeId> = map.live_nodes().filter(|n| !down.contains(n)).collect();
        for &n in &asked {
            ep.read(n, 0, 8);
        }
        match ep.post().await {
            Ok(()) => return Ok(down),
            Err(FabricError::NodeDown(n)) if n != 0 && asked.contains(&n) => down.push(n),
            Err(e) => return Err(e),
        }
    }
}

/// Repairs every promoted primary of `map`'s view (see the module doc): raises its overflow
/// counter to the highest link and clears its stale invisible words, then what `protocol`
/// kept on the primary alone (SUNDIAL's leases). Idempotent (a leader that dies half-way
/// leaves it for the next). Returns the tables repaired.
pub async fn repair_promoted(
    ep: &mut Endpoint,
    map: &PoolMap,
    protocol: Protocol,
) -> Result<u32, FabricError> {
    let mut tables = 0;
    let mut bytes = Vec::new();
    for t in map.promoted() {
        tables += 1;
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
    if tables > 0 {
        protocol.repair_promoted(ep, map).await?;
    }
    Ok(tables)
}

/// For a protocol's repair hook: every bucket of every promoted table of `map`'s view, as its
/// new primary holds it, one chunk per round trip (16 KiB per READ): `f(ep, table, bucket
/// index, bucket address, bucket bytes)` posts what it repairs there, awaited with the chunk.
pub(crate) async fn each_promoted_bucket(
    ep: &mut Endpoint,
    map: &PoolMap,
    mut f: impl FnMut(&mut Endpoint, &TableInfo, u64, u64, &[u8]),
) -> Result<(), FabricError> {
    let mut bytes = Vec::new();
    for t in map.promoted() {
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
