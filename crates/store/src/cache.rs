//! The compute-side address cache: (table, key) -> record offset, the same on every replica.
//!
//! Staleness is detected, not prevented: a READ through a cached offset that finds another key
//! or table (the slot was freed and reused) tells the caller to drop the entry and look the key
//! up in its bucket again. No compute node ever synchronizes its cache with another.

use lru::LruCache;
use std::num::NonZeroUsize;

/// What a READ through a cached address found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotCheck {
    /// The slot holds the record.
    Match,
    /// The slot holds another record, or none: the cache entry is stale.
    Stale,
}

/// Checks a slot's header against the record the cache promised.
pub fn check_slot(h: &crate::record::RecordHeader, table: u32, key: u64) -> SlotCheck {
    if h.valid && h.table == table && h.key == key {
        SlotCheck::Match
    } else {
        SlotCheck::Stale
    }
}

/// A bounded address cache (least recently used entries go first).
pub struct AddrCache {
    map: LruCache<(u32, u64), u64>,
    hits: u64,
    misses: u64,
}

impl AddrCache {
    /// A cache of at most `capacity` entries (at least 1).
    pub fn new(capacity: usize) -> AddrCache {
        AddrCache {
            map: LruCache::new(NonZeroUsize::new(capacity.max(1)).expect("non-zero")),
            hits: 0,
            misses: 0,
        }
    }

    pub fn get(&mut self, table: u32, key: u64) -> Option<u64> {
        let r = self.map.get(&(table, key)).copied();
        if r.is_some() {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
        r
    }

    pub fn insert(&mut self, table: u32, key: u64, offset: u64) {
        self.map.put((table, key), offset);
    }

    pub fn invalidate(&mut self, table: u32, key: u64) {
        self.map.pop(&(table, key));
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// (hits, misses) since creation.
    pub fn hit_stats(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RecordHeader;

    #[test]
    fn bounded_and_least_recently_used_first() {
        let mut c = AddrCache::new(2);
        c.insert(1, 10, 640);
        c.insert(1, 11, 704);
        assert_eq!(c.get(1, 10), Some(640));
        c.insert(2, 10, 768); // evicts (1, 11), the least recently used
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(1, 11), None);
        assert_eq!(c.get(2, 10), Some(768));
        c.invalidate(2, 10);
        assert_eq!(c.get(2, 10), None);
        assert_eq!(c.hit_stats(), (2, 2));
    }

    #[test]
    fn stale_entries_are_detected_by_key_and_table() {
        let h = RecordHeader {
            lock: 0,
            version: 3,
            key: 10,
            table: 1,
            valid: true,
        };
        assert_eq!(check_slot(&h, 1, 10), SlotCheck::Match);
        assert_eq!(check_slot(&h, 1, 11), SlotCheck::Stale);
        assert_eq!(check_slot(&h, 2, 10), SlotCheck::Stale);
        let freed = RecordHeader { valid: false, ..h };
        assert_eq!(check_slot(&freed, 1, 10), SlotCheck::Stale);
    }
}
