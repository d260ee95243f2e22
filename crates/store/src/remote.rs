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
