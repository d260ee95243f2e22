//! Index operations over the fabric, for coordinators (compute side).

use crate::error::StoreError;
use crate::index::TableInfo;
use crate::record::RecordHeader;
use dtxn_fabric::{Endpoint, NodeId};

/// A record found through its bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// The record's offset (the same on every replica): what the address cache keeps.
    pub offset: u64,
    pub header: RecordHeader,
    /// Round trips the lookup took (one per bucket of the chain, plus re-reads of torn records).
    pub round_trips: u32,
}

/// How often a record torn by concurrent writers is re-read before giving up.
pub const TORN_RETRIES: u32 = 16;

/// Looks `key` up on replica `node` by reading its home bucket and following the chain (a cold
/// read: one round trip per bucket). On success the record's value is in `value`. A record that
/// keeps coming back torn (a writer installing it right now) is re-read up to
/// [`TORN_RETRIES`] times, then reported as [`crate::Torn`] through `Err(None)`.
pub async fn lookup(
    ep: &mut Endpoint,
    t: &TableInfo,
    node: NodeId,
    key: u64,
    value: &mut [u8],
) -> Result<Option<Found>, LookupError> {
    let codec = t.codec();
    let mut bucket = t.home_bucket(key);
    let mut round_trips = 0;
    loop {
        let id = ep.read(node, bucket, t.bucket_bytes as usize);
        ep.post().await.map_err(StoreError::from)?;
        round_trips += 1;
        let bytes = ep.bytes(id);
        let scan = t.scan(bucket, bytes, key);
        if let Some((slot, offset)) = scan.found {
            let mut result = codec.decode(t.slot_bytes(bytes, slot), value);
            let mut tries = 0;
            while result.is_err() && tries < TORN_RETRIES {
                let id = ep.read(node, offset, t.record_bytes as usize);
                ep.post().await.map_err(StoreError::from)?;
                round_trips += 1;
                tries += 1;
                result = codec.decode(ep.bytes(id), value);
            }
            let header = result.map_err(LookupError::Torn)?;
            if header.key != key || !header.valid {
                // Freed or reused between the bucket READ and the re-read: look again.
                bucket = t.home_bucket(key);
                continue;
            }
            return Ok(Some(Found {
                offset,
                header,
                round_trips,
            }));
        }
        match scan.next {
            Some(next) => bucket = next,
            None => return Ok(None),
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LookupError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("record kept coming back torn: {0}")]
    Torn(crate::record::Torn),
}

/// Why a standalone insert or delete did not happen.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum IndexOpError {
    #[error("table {table}: key {key} exists")]
    Exists { table: u32, key: u64 },
    #[error("table {table}: key {key} does not exist")]
    Missing { table: u32, key: u64 },
    /// Another coordinator holds a lock this op needs: retry or abort, never wait on it.
    #[error("a lock is held by another coordinator")]
    Busy,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<dtxn_fabric::FabricError> for IndexOpError {
    fn from(e: dtxn_fabric::FabricError) -> Self {
        IndexOpError::Store(e.into())
    }
}

/// Inserts `key` into every replica, outside any transaction (the mechanism transactional
/// inserts build on). Inserts into one chain are serialized by the home bucket's CAS-only
/// insert lock, so two coordinators never place the same key twice; the record's slot is locked
/// too, as deletes free slots under their record's lock. `owner` must be non-zero.
///
/// A slot's version stamps must never repeat, or a READ mixing the lines of the slot's previous
/// record with the new one would decode as valid: so the record gets `version`, or one more than
/// the freed slot's stamp if that is not lower. Returns the record's offset and version.
pub async fn insert(
    ep: &mut Endpoint,
    t: &TableInfo,
    key: u64,
    value: &[u8],
    version: u64,
    owner: u64,
) -> Result<(u64, u64), IndexOpError> {
    debug_assert_ne!(owner, 0);
    let primary = t.primary();
    let home = t.home_bucket(key);
    // Lock the chain, and read the home bucket after the lock (G6: same QP, atomic first).
    let lock = ep.cas(primary, t.insert_lock(home), 0, owner);
    let mut read = ep.read(primary, home, t.bucket_bytes as usize);
    ep.post().await?;
    if !ep.cas_ok(lock) {
        return Err(IndexOpError::Busy);
    }
    let result = insert_locked(ep, t, key, value, version, owner, home, &mut read).await;
    // Release the chain: the lock word is CAS-only, so a WRITE may free it (G8).
    ep.write(primary, t.insert_lock(home), &0u64.to_le_bytes());
    ep.post().await?;
    result
}

#[allow(clippy::too_many_arguments)]
async fn insert_locked(
    ep: &mut Endpoint,
    t: &TableInfo,
    key: u64,
    value: &[u8],
    version: u64,
    owner: u64,
    home: u64,
    read: &mut dtxn_fabric::OpId,
) -> Result<(u64, u64), IndexOpError> {
    let primary = t.primary();
    let mut bucket = home;
    let mut free = None;
    let chain_end;
    loop {
        let scan = t.scan(bucket, ep.bytes(*read), key);
        if scan.found.is_some() {
            return Err(IndexOpError::Exists { table: t.id, key });
        }
        if free.is_none() {
            free = scan.free.map(|(_, off)| off);
        }
        match scan.next {
            Some(next) => {
                bucket = next;
                *read = ep.read(primary, bucket, t.bucket_bytes as usize);
                ep.post().await?;
            }
            None => {
                chain_end = bucket;
                break;
            }
        }
    }
    let slot = match free {
        Some(slot) => slot,
        None => {
            // Chain a new overflow bucket: claim it with FAA on the primary's counter (its
            // index is the same on every replica), then link it everywhere.
            let f = ep.faa(primary, t.overflow_counter(), 1);
            ep.post().await?;
            let index = ep.old(f);
            if index >= t.overflow_buckets {
                return Err(StoreError::OverflowFull {
                    table: t.id,
                    buckets: t.overflow_buckets,
                }
                .into());
            }
            for &n in &t.replicas {
                ep.write(n, chain_end, &(index + 1).to_le_bytes());
            }
            ep.post().await?;
            t.slot(t.overflow_bucket(index), 0)
        }
    };
    // The slot's lock: a delete may still be releasing it.
    let c = ep.cas(primary, slot, 0, owner);
    let r = ep.read(primary, slot, 64);
    ep.post().await?;
    if !ep.cas_ok(c) {
        return Err(IndexOpError::Busy);
    }
    let freed = t.codec().header(ep.bytes(r));
    if freed.valid {
        // Slots belong to one chain and the chain is ours: only a corrupt pool gets here.
        ep.write(primary, slot, &0u64.to_le_bytes());
        ep.post().await?;
        return Err(IndexOpError::Busy);
    }
    let version = version.max(freed.version + 1);
    let codec = t.codec();
    let h = RecordHeader {
        lock: 0,
        version,
        key,
        table: t.id,
        valid: true,
        restores: 0,
    };
    // Backups first-class: the same bytes at the same offset. On the primary the record is
    // written with our lock still in it, then the lock word is cleared (WRITEs on one QP apply
    // in order, G4), so nobody locks a half-written record.
    for &n in t.backups() {
        ep.write_with(n, slot, t.record_bytes as usize, |b| {
            codec.encode(&h, value, b)
        });
    }
    let locked = RecordHeader { lock: owner, ..h };
    ep.write_with(primary, slot, t.record_bytes as usize, |b| {
        codec.encode(&locked, value, b)
    });
    ep.write(primary, slot, &0u64.to_le_bytes());
    ep.post().await?;
    Ok((slot, version))
}

/// Deletes `key` from every replica, outside any transaction: lock the record, mark it invalid
/// with version `version`, release. Its slot becomes free for inserts into the same chain.
pub async fn delete(
    ep: &mut Endpoint,
    t: &TableInfo,
    key: u64,
    version: u64,
    owner: u64,
) -> Result<(), IndexOpError> {
    let primary = t.primary();
    let mut value = vec![0u8; t.value_size as usize];
    let found = match lookup(ep, t, primary, key, &mut value).await {
        Ok(Some(f)) => f,
        Ok(None) => return Err(IndexOpError::Missing { table: t.id, key }),
        Err(LookupError::Store(e)) => return Err(e.into()),
        Err(LookupError::Torn(_)) => return Err(IndexOpError::Busy),
    };
    let c = ep.cas(primary, found.offset, 0, owner);
    let r = ep.read(primary, found.offset, 64);
    ep.post().await?;
    if !ep.cas_ok(c) {
        return Err(IndexOpError::Busy);
    }
    let h = t.codec().header(ep.bytes(r));
    if !h.valid || h.key != key || h.table != t.id {
        ep.write(primary, found.offset, &0u64.to_le_bytes());
        ep.post().await?;
        return Err(IndexOpError::Missing { table: t.id, key });
    }
    // The whole record, stamped with the delete's version: the next insert into this slot
    // stamps above it (see `insert`).
    let freed = RecordHeader {
        lock: 0,
        version: version.max(h.version + 1),
        valid: false,
        ..h
    };
    let codec = t.codec();
    let zero = vec![0u8; t.value_size as usize];
    let len = t.record_bytes as usize;
    for &n in t.backups() {
        ep.write_with(n, found.offset, len, |b| codec.encode(&freed, &zero, b));
    }
    let locked = RecordHeader {
        lock: owner,
        ..freed
    };
    ep.write_with(primary, found.offset, len, |b| {
        codec.encode(&locked, &zero, b)
    });
    ep.write(primary, found.offset, &0u64.to_le_bytes());
    ep.post().await?;
    Ok(())
}
