//! FORD's localized validation (TOS'23, section 4.7): a compute-process-wide version cache.
//!
//! A read-only item is validated against the Vcache instead of a remote READ of its version:
//! on a hit the check is local (no round trip); on a miss the coordinator reads the version
//! remotely and fills the entry (only if still absent: a writer may have put a newer one in
//! meanwhile). Writers keep the Vcache exact for the keys it holds:
//!
//! - on locking an item (the remote CAS has succeeded), they mark its entry locked by them;
//! - before their remote commit WRITEs, they set the new version (still locked);
//! - on release, they unlock it; on rollback, they put the old version back.
//!
//! The lock marks are dtxn's addition: FORD's Vcache holds versions only, and a version-only
//! validation lets two transactions that each lock what the other only read both commit (write
//! skew). Marking after the CAS and before the transaction's own validation gives the usual
//! "all locks before any validation" argument, locally.
//!
//! It is correct only if **every writer of the pool uses the same Vcache**: one compute process
//! (all its threads and coroutines share one), and no other compute process writing. The bench
//! driver enforces it with the pool's claim word (`store::layout::CLAIM_OFF`).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, DefaultHasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

const SHARDS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    version: u64,
    /// Owner id of the coordinator holding the remote lock (0: none).
    locked_by: u64,
}

/// The result of a local validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Same version, not locked by anyone else: valid, no round trip.
    Valid,
    /// Changed, or locked by another transaction: abort.
    Invalid,
    /// Not cached: validate remotely.
    Miss,
}

// A fixed hasher: the sim's runs must not depend on a random hash seed.
type Map = HashMap<(u32, u64), Entry, BuildHasherDefault<DefaultHasher>>;

/// The version cache shared by every coordinator of one compute process.
pub struct Vcache {
    shards: Vec<Mutex<Map>>,
    /// Entries filled from validation misses stop being added beyond this (lock marks always
    /// are: they are what makes the cache exact).
    capacity_per_shard: usize,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl Vcache {
    /// A Vcache of about `capacity` entries.
    pub fn new(capacity: usize) -> Vcache {
        Vcache {
            shards: (0..SHARDS).map(|_| Mutex::new(Map::default())).collect(),
            capacity_per_shard: capacity.div_ceil(SHARDS).max(1),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn shard(&self, table: u32, key: u64) -> std::sync::MutexGuard<'_, Map> {
        let i = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(table)) as usize % SHARDS;
        // A poisoned shard means a coordinator panicked mid-update: the process is going down.
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Validates a read-only item read at `version` by `owner`'s transaction.
    pub fn check(&self, table: u32, key: u64, version: u64, owner: u64) -> Check {
        let r = match self.shard(table, key).get(&(table, key)) {
            None => Check::Miss,
            Some(e) if e.version != version => Check::Invalid,
            Some(e) if e.locked_by != 0 && e.locked_by != owner => Check::Invalid,
            Some(_) => Check::Valid,
        };
        let counter = if r == Check::Miss {
            &self.misses
        } else {
            &self.hits
        };
        counter.fetch_add(1, Ordering::Relaxed);
        r
    }

    /// After a remote validation: remember the version, unless an entry exists already (a
    /// writer's, which is newer or locked).
    pub fn fill(&self, table: u32, key: u64, version: u64) {
        let mut s = self.shard(table, key);
        if s.len() < self.capacity_per_shard {
            s.entry((table, key)).or_insert(Entry {
                version,
                locked_by: 0,
            });
        }
    }

    /// `owner` holds the remote lock of the item, whose version is `version`.
    pub fn lock(&self, table: u32, key: u64, version: u64, owner: u64) {
        self.shard(table, key).insert(
            (table, key),
            Entry {
                version,
                locked_by: owner,
            },
        );
    }

    /// Before the remote commit: the item's new version (still locked by `owner`); also used
    /// to put the old version back on rollback.
    pub fn set_version(&self, table: u32, key: u64, version: u64, owner: u64) {
        self.lock(table, key, version, owner);
    }

    /// Release: the item is no longer locked by `owner`.
    pub fn unlock(&self, table: u32, key: u64, owner: u64) {
        let mut s = self.shard(table, key);
        let over = s.len() > self.capacity_per_shard;
        if let Some(e) = s.get_mut(&(table, key)) {
            if e.locked_by == owner {
                e.locked_by = 0;
                if over {
                    s.remove(&(table, key));
                }
            }
        }
    }

    /// (hits, misses) of local validations so far.
    pub fn hit_stats(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_misses_locks_and_fills() {
        let v = Vcache::new(1024);
        assert_eq!(v.check(1, 5, 3, 9), Check::Miss);
        v.fill(1, 5, 3);
        assert_eq!(v.check(1, 5, 3, 9), Check::Valid);
        assert_eq!(v.check(1, 5, 2, 9), Check::Invalid);
        // A writer locks it: others fail, the writer itself does not.
        v.lock(1, 5, 3, 7);
        assert_eq!(v.check(1, 5, 3, 9), Check::Invalid);
        assert_eq!(v.check(1, 5, 3, 7), Check::Valid);
        // A late fill from a remote read does not overwrite the writer's entry.
        v.fill(1, 5, 3);
        v.set_version(1, 5, 4, 7);
        v.unlock(1, 5, 9); // not the owner: no effect
        assert_eq!(v.check(1, 5, 4, 9), Check::Invalid);
        v.unlock(1, 5, 7);
        assert_eq!(v.check(1, 5, 4, 9), Check::Valid);
        assert_eq!(v.check(1, 5, 3, 9), Check::Invalid);
        assert_eq!(v.hit_stats(), (7, 1));
    }

    #[test]
    fn fills_stop_at_capacity_but_lock_marks_do_not() {
        let v = Vcache::new(1);
        for k in 0..200 {
            v.fill(1, k, 1);
        }
        let filled = (0..200)
            .filter(|&k| v.check(1, k, 1, 0) != Check::Miss)
            .count();
        assert!(filled <= SHARDS, "{filled}");
        for k in 0..200 {
            v.lock(1, k, 1, 5);
        }
        assert!((0..200).all(|k| v.check(1, k, 1, 0) == Check::Invalid));
    }
}
