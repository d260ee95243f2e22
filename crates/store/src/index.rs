//! The hash index: fixed-size buckets of record slots, chained into an overflow area.
//!
//! ```text
//! table_off      table header line: 0 overflow buckets allocated u64 (FAA on the primary)
//! table_off+64   bucket 0 .. bucket_count-1, then the overflow buckets
//!
//! bucket         0 next u64 (0 = end of chain, else overflow bucket index + 1)
//!                8 insert lock u64 (home buckets: CAS-only; serializes inserts into the chain)
//!                16 chain metadata u64 (home buckets: a protocol's word for the whole chain,
//!                   SUNDIAL's chain lease; 0 until a protocol writes it)
//!                24..64 reserved
//!                64 + i*slot_stride: slot i, one record (see crate::record)
//! ```
//!
//! A key's home bucket is `hash(table, key) mod bucket_count`, with a stable hash (XXH3), so
//! every compute node finds it without asking anyone. Lookup on a cold key is a READ of the
//! bucket (plus one per chain hop); a record is valid in at most one slot of its chain.

use crate::record::{RecordFormat, SingleVersion, KEY_OFF, TABLE_OFF, VALID_OFF};
use dtxn_fabric::NodeId;

/// Where a home bucket's metadata word is: a protocol's word for the whole chain (SUNDIAL's
/// chain lease, which orders inserts after the reads that saw their keys absent).
pub const CHAIN_META_OFF: u64 = 16;

/// The stable hash of a record's identity.
pub fn hash(table: u32, key: u64) -> u64 {
    let mut b = [0u8; 12];
    b[..4].copy_from_slice(&table.to_le_bytes());
    b[4..].copy_from_slice(&key.to_le_bytes());
    xxhash_rust::xxh3::xxh3_64(&b)
}

/// A table's geometry: everything needed to find its records on any replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableInfo {
    pub id: u32,
    pub name: String,
    pub format: RecordFormat,
    pub value_size: u32,
    /// Metadata words per record, after the header in line 0 (single-version tables only;
    /// see [`crate::record`]).
    pub meta_words: u8,
    /// Copies of each record in its slot (RCC's MVCC version slots; 1 otherwise).
    pub copies: u8,
    /// Bytes of one record, all its copies (what a READ of it fetches).
    pub record_bytes: u32,
    /// Distance between slots (record bytes, padded for the mod-4096 spread).
    pub slot_stride: u64,
    pub slots_per_bucket: u32,
    pub bucket_bytes: u64,
    pub bucket_count: u64,
    pub overflow_buckets: u64,
    pub table_off: u64,
    pub overflow_off: u64,
    /// Memory nodes holding the table, primary first; the last [`TableInfo::joining`] of
    /// them are joining (written by commits as backups, never read nor promoted).
    pub replicas: Vec<NodeId>,
    /// How many of `replicas`, at the end, are joining (issue #23, re-replication).
    pub joining: u8,
    /// Multi-version tables (Motor's CVTs): the value region and the attributes.
    pub mv: Option<crate::cvt::MvInfo>,
}

/// What a scan of one bucket found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BucketScan {
    /// The slot holding the key, as (slot index, region offset).
    pub found: Option<(u32, u64)>,
    /// The first free slot (valid = 0), as (slot index, region offset).
    pub free: Option<(u32, u64)>,
    /// The next bucket of the chain, as a region offset.
    pub next: Option<u64>,
    /// A free slot that last held the key (a deleted record), as (slot index, region offset):
    /// its version is the tombstone's, which a read of the absent key observes.
    pub tombstone: Option<(u32, u64)>,
}

impl TableInfo {
    pub fn primary(&self) -> NodeId {
        self.replicas[0]
    }

    /// The replicas a commit writes besides the primary: joining ones too.
    pub fn backups(&self) -> &[NodeId] {
        &self.replicas[1..]
    }

    /// The replicas that can be read (and promoted): all but the joining ones.
    pub fn readable(&self) -> &[NodeId] {
        &self.replicas[..self.replicas.len() - usize::from(self.joining)]
    }

    /// Whether `node` is one of the table's joining replicas.
    pub fn is_joiner(&self, node: NodeId) -> bool {
        self.replicas[self.replicas.len() - usize::from(self.joining)..].contains(&node)
    }

    /// Bytes the table occupies on each replica.
    pub fn bytes(&self) -> u64 {
        let index = 64 + (self.bucket_count + self.overflow_buckets) * self.bucket_bytes;
        match &self.mv {
            Some(mv) => mv.values_off + self.slots() * mv.value_stride - self.table_off,
            None => index,
        }
    }

    /// Record slots of the table, home and overflow buckets.
    pub fn slots(&self) -> u64 {
        (self.bucket_count + self.overflow_buckets) * u64::from(self.slots_per_bucket)
    }

    /// The codec of the records in the hash slots: for a multi-version table, its CVTs (whose
    /// "value" is the Vcell array and the newest value; see [`crate::cvt`]).
    #[inline]
    pub fn codec(&self) -> SingleVersion {
        match (&self.format, &self.mv) {
            (RecordFormat::Cvt, Some(mv)) => SingleVersion::new(
                usize::from(mv.vnum) * crate::cvt::VCELL_BYTES + self.value_size as usize,
            ),
            _ => SingleVersion::with_meta(self.value_size as usize, self.meta_words),
        }
    }

    /// Bytes of one copy of a record (all of it unless the table keeps several copies).
    #[inline]
    pub fn copy_bytes(&self) -> usize {
        self.codec().bytes()
    }

    /// The word counting allocated overflow buckets.
    pub fn overflow_counter(&self) -> u64 {
        self.table_off
    }

    /// The insert lock of the chain starting at `bucket` (a home bucket).
    pub fn insert_lock(&self, bucket: u64) -> u64 {
        bucket + 8
    }

    pub fn home_bucket(&self, key: u64) -> u64 {
        self.bucket(hash(self.id, key) % self.bucket_count)
    }

    /// Bucket `b` of the table, its main buckets first and then its overflow area (which
    /// follows them): what a scan of every bucket walks.
    pub fn bucket(&self, b: u64) -> u64 {
        self.table_off + 64 + b * self.bucket_bytes
    }

    pub fn overflow_bucket(&self, index: u64) -> u64 {
        self.overflow_off + index * self.bucket_bytes
    }

    pub fn slot(&self, bucket: u64, i: u32) -> u64 {
        bucket + 64 + u64::from(i) * self.slot_stride
    }

    /// Whether `off` is the start of a record slot of this table.
    pub fn is_slot(&self, off: u64) -> bool {
        let Some(rel) = off.checked_sub(self.table_off + 64) else {
            return false;
        };
        let (b, in_bucket) = (rel / self.bucket_bytes, rel % self.bucket_bytes);
        b < self.bucket_count + self.overflow_buckets
            && in_bucket >= 64
            && (in_bucket - 64) % self.slot_stride == 0
    }

    /// Scans the bytes of a bucket READ at `bucket` for `key`. Each slot's first line is read
    /// atomically (G3), so its key, table and valid flag are consistent; the record's further
    /// lines are the caller's to check (decode reports `Torn`).
    pub fn scan(&self, bucket: u64, bytes: &[u8], key: u64) -> BucketScan {
        debug_assert_eq!(bytes.len() as u64, self.bucket_bytes);
        let next = u64::from_le_bytes(bytes[..8].try_into().expect("word"));
        let mut scan = BucketScan {
            next: next.checked_sub(1).map(|i| self.overflow_bucket(i)),
            ..BucketScan::default()
        };
        for i in 0..self.slots_per_bucket {
            let s = (64 + u64::from(i) * self.slot_stride) as usize;
            let valid = bytes[s + VALID_OFF as usize] != 0;
            let k = u64::from_le_bytes(
                bytes[s + KEY_OFF as usize..s + 8 + KEY_OFF as usize]
                    .try_into()
                    .expect("word"),
            );
            let t = u32::from_le_bytes(
                bytes[s + TABLE_OFF as usize..s + 4 + TABLE_OFF as usize]
                    .try_into()
                    .expect("word"),
            );
            let ours = k == key && t == self.id;
            if !valid {
                if scan.free.is_none() {
                    scan.free = Some((i, self.slot(bucket, i)));
                }
                if ours && scan.tombstone.is_none() {
                    scan.tombstone = Some((i, self.slot(bucket, i)));
                }
                continue;
            }
            if ours && scan.found.is_none() {
                scan.found = Some((i, self.slot(bucket, i)));
            }
        }
        scan
    }

    /// The record bytes of slot `i` inside a bucket READ.
    pub fn slot_bytes<'a>(&self, bucket_bytes: &'a [u8], i: u32) -> &'a [u8] {
        let s = (64 + u64::from(i) * self.slot_stride) as usize;
        &bucket_bytes[s..s + self.record_bytes as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_stable() {
        // Pinned: every compute node and every build must agree on home buckets.
        assert_eq!(hash(1, 42), hash(1, 42));
        assert_ne!(hash(1, 42), hash(2, 42));
        assert_eq!(hash(0, 0), 14_166_511_957_577_999_600);
    }
}
