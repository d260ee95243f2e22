//! The compute-side address cache: (table, key) -> record offset, the same on every replica.
//!
//! Staleness is detected, not prevented: a READ through a cached offset that finds another key
//! or table (the slot was freed and reused) tells the caller to drop the entry and look the key
//! up in its bucket again. No compute node ever synchronizes its cache with another.

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

/// Every record's address as loaded, shared read-only by the coordinators of a run: what an
/// address cache holds once its coordinator has touched every key (the papers measure after
/// a million transactions per thread, dtxn's runs last milliseconds). A cache consults it on
/// a miss; its entries go stale like any cached address, and are caught the same way.
#[derive(Debug, Default)]
pub struct WarmAddrs {
    /// Per table: (key, offset), sorted by key.
    tables: Vec<(u32, Vec<(u64, u64)>)>,
}

impl WarmAddrs {
    pub fn new() -> WarmAddrs {
        WarmAddrs::default()
    }

    /// Adds `table`'s records as (key, offset).
    pub fn add_table(&mut self, table: u32, mut records: Vec<(u64, u64)>) {
        records.sort_unstable();
        records.dedup_by_key(|r| r.0);
        self.tables.push((table, records));
    }

    pub fn get(&self, table: u32, key: u64) -> Option<u64> {
        let (_, recs) = self.tables.iter().find(|(t, _)| *t == table)?;
        let i = recs.binary_search_by_key(&key, |r| r.0).ok()?;
        Some(recs[i].1)
    }

    /// Addresses held, over all tables.
    pub fn len(&self) -> usize {
        self.tables.iter().map(|(_, r)| r.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A way's offset saying "known stale": the warm addresses are not to be consulted for it.
const STALE: u64 = u64::MAX;

/// One way of a set: `offset` 0 marks it empty (offset 0 is the superblock, never a record).
#[derive(Debug, Clone, Copy, Default)]
struct Way {
    key: u64,
    table: u32,
    /// When it was last used (a per-cache tick): the set evicts its oldest way.
    used: u32,
    offset: u64,
}

/// Ways per set: a set is 96 bytes, so a lookup touches two cache lines at most.
const WAYS: usize = 4;

/// A bounded address cache: set-associative, least recently used way of a set goes first.
///
/// Not a linked-list LRU: on a hot path that touches a few records per transaction, an
/// intrusive list costs several cache misses per lookup (it was a sixth of a SmallBank
/// transaction's CPU on shm), where a set costs one or two.
pub struct AddrCache {
    ways: Vec<Way>,
    /// Ways per set (fewer than [`WAYS`] only for tiny caches).
    assoc: usize,
    /// Sets - 1 (a power of two).
    mask: u64,
    tick: u32,
    len: usize,
    hits: u64,
    misses: u64,
    /// Consulted on a miss (`None`: the cache starts cold).
    warm: Option<std::sync::Arc<WarmAddrs>>,
}

impl AddrCache {
    /// A cache of about `capacity` entries (rounded down to whole sets). 0: no cache at all,
    /// every lookup misses (FaRM as FORD's code ran it: every access reads its bucket).
    pub fn new(capacity: usize) -> AddrCache {
        if capacity == 0 {
            return AddrCache {
                ways: Vec::new(),
                assoc: 0,
                mask: 0,
                tick: 0,
                len: 0,
                hits: 0,
                misses: 0,
                warm: None,
            };
        }
        let assoc = capacity.min(WAYS);
        let sets = (capacity / assoc).max(1);
        let sets = if sets.is_power_of_two() {
            sets
        } else {
            sets.next_power_of_two() / 2
        };
        AddrCache {
            ways: vec![Way::default(); sets * assoc],
            assoc,
            mask: sets as u64 - 1,
            tick: 0,
            len: 0,
            hits: 0,
            misses: 0,
            warm: None,
        }
    }

    /// Starts the cache warm: a miss is looked up in `warm` (every record's address as
    /// loaded). A cache of capacity 0 stays without any cache.
    pub fn set_warm(&mut self, warm: std::sync::Arc<WarmAddrs>) {
        if !self.ways.is_empty() {
            self.warm = Some(warm);
        }
    }

    fn set(&self, table: u32, key: u64) -> usize {
        // A multiplicative mix (Fibonacci hashing): cheap, and spreads sequential keys.
        let h = (key ^ (u64::from(table) << 48)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        ((h >> 32) & self.mask) as usize * self.assoc
    }

    fn find(&self, table: u32, key: u64) -> Option<usize> {
        let s = self.set(table, key);
        (s..s + self.assoc).find(|&i| {
            let w = &self.ways[i];
            w.offset != 0 && w.key == key && w.table == table
        })
    }

    fn touch(&mut self, i: usize) {
        self.tick = self.tick.wrapping_add(1);
        self.ways[i].used = self.tick;
    }

    /// Starts loading the set of `(table, key)` into the CPU's cache, without waiting: a
    /// caller about to look up many keys prefetches them all first, so that their misses
    /// overlap (a lookup is mostly one miss on its set). A hint: it changes nothing.
    #[inline]
    pub fn prefetch(&self, table: u32, key: u64) {
        if self.ways.is_empty() {
            return;
        }
        let s = self.set(table, key);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: PREFETCHT0 is a hint: it never faults and neither reads into the program
        // nor writes anything; the address is inside `ways` (`s` is a valid way index). SSE
        // is part of the x86_64 baseline.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                self.ways.as_ptr().add(s).cast(),
            );
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = s;
    }

    pub fn get(&mut self, table: u32, key: u64) -> Option<u64> {
        let found = match self.find(table, key) {
            Some(i) => {
                self.touch(i);
                // Known stale: the warm address was tried and failed.
                Some(self.ways[i].offset).filter(|&o| o != STALE)
            }
            None => self.warm.as_ref().and_then(|w| w.get(table, key)),
        };
        match found {
            Some(_) => self.hits += 1,
            None => self.misses += 1,
        }
        found
    }

    pub fn insert(&mut self, table: u32, key: u64, offset: u64) {
        if self.ways.is_empty() {
            return;
        }
        let i = match self.find(table, key) {
            Some(i) => i,
            None => {
                let s = self.set(table, key);
                let tick = self.tick;
                // An empty way, else the least recently used (ages wrap: compare distances).
                let i = (s..s + self.assoc)
                    .max_by_key(|&i| {
                        let w = &self.ways[i];
                        if w.offset == 0 {
                            u64::MAX
                        } else {
                            u64::from(tick.wrapping_sub(w.used))
                        }
                    })
                    .expect("a set has ways");
                if self.ways[i].offset == 0 {
                    self.len += 1;
                }
                i
            }
        };
        self.ways[i] = Way {
            key,
            table,
            used: 0,
            offset,
        };
        self.touch(i);
    }

    pub fn invalidate(&mut self, table: u32, key: u64) {
        if self.warm.is_some() {
            // Remember the staleness, or the next miss would try the warm address again.
            self.insert(table, key, STALE);
            return;
        }
        if let Some(i) = self.find(table, key) {
            self.ways[i].offset = 0;
            self.len -= 1;
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
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
    fn capacity_zero_caches_nothing() {
        let mut c = AddrCache::new(0);
        c.prefetch(1, 10);
        c.insert(1, 10, 640);
        assert_eq!(c.get(1, 10), None);
        c.invalidate(1, 10);
        assert!(c.is_empty());
        assert_eq!(c.hit_stats(), (0, 1));
    }

    #[test]
    fn holds_its_capacity_and_updates_in_place() {
        let mut c = AddrCache::new(1 << 12);
        for k in 0..1000u64 {
            c.insert(3, k, 64 * (k + 1));
        }
        // Sets fill unevenly, but most of a cache 4x larger than the keys keeps them all.
        let kept = (0..1000u64)
            .filter(|&k| c.get(3, k) == Some(64 * (k + 1)))
            .count();
        assert!(kept > 950, "{kept}");
        assert_eq!(c.len(), kept);
        c.insert(3, 7, 128_000);
        assert_eq!(c.get(3, 7), Some(128_000));
        assert_eq!(c.get(4, 7), None);
        assert_eq!(c.len(), kept);
    }

    #[test]
    fn a_warm_cache_answers_every_loaded_key_until_it_goes_stale() {
        let mut w = WarmAddrs::new();
        w.add_table(1, vec![(11, 704), (10, 640)]);
        w.add_table(2, vec![(10, 768)]);
        assert_eq!(w.len(), 3);
        let w = std::sync::Arc::new(w);
        let mut c = AddrCache::new(4);
        assert_eq!(c.get(1, 10), None);
        c.set_warm(w.clone());
        assert_eq!(c.get(1, 10), Some(640));
        assert_eq!(c.get(1, 11), Some(704));
        assert_eq!(c.get(2, 10), Some(768));
        assert_eq!(c.get(2, 11), None);
        // Stale: the warm address is not offered again; a new one replaces it.
        c.invalidate(1, 10);
        assert_eq!(c.get(1, 10), None);
        c.insert(1, 10, 832);
        assert_eq!(c.get(1, 10), Some(832));
        // Evicted entries fall back to the warm addresses.
        for k in 100..200 {
            c.insert(3, k, 64 * k);
        }
        assert_eq!(c.get(1, 11), Some(704));
        // No cache at all stays no cache.
        let mut none = AddrCache::new(0);
        none.set_warm(w);
        assert_eq!(none.get(1, 10), None);
    }

    #[test]
    fn stale_entries_are_detected_by_key_and_table() {
        let h = RecordHeader {
            lock: 0,
            version: 3,
            key: 10,
            table: 1,
            valid: true,
            restores: 0,
        };
        assert_eq!(check_slot(&h, 1, 10), SlotCheck::Match);
        assert_eq!(check_slot(&h, 1, 11), SlotCheck::Stale);
        assert_eq!(check_slot(&h, 2, 10), SlotCheck::Stale);
        let freed = RecordHeader { valid: false, ..h };
        assert_eq!(check_slot(&freed, 1, 10), SlotCheck::Stale);
    }
}
