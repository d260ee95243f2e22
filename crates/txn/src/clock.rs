//! A compute node's start clock: the newest timestamp any of its coordinators has seen from
//! the oracle, handed out as a start timestamp without a round trip while it is recent.
//!
//! Why a *stale* start timestamp is safe for Motor's snapshots: a value `v` here was the
//! result of an oracle FAA that completed; every writer whose commit timestamp is at most `v`
//! had marked its locks committing before that FAA (it marks before it takes its
//! timestamp), so a reader that starts with `v` and reads afterwards sees each such writer's
//! records marked or installed. What staleness costs is real-time order: a transaction that
//! starts after another compute node's commit may read a snapshot from before it (serializable,
//! but not strictly). `max_age_ns` bounds how far back. Commit timestamps are never taken from
//! here: a writer's commit timestamp must come from an FAA issued after its marks.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug)]
pub struct StartClock {
    value: AtomicU64,
    seen_at_ns: AtomicU64,
    max_age_ns: u64,
}

impl StartClock {
    /// A clock whose timestamps serve as start timestamps for `max_age_ns` after they were
    /// seen.
    pub fn new(max_age_ns: u64) -> StartClock {
        StartClock {
            value: AtomicU64::new(0),
            seen_at_ns: AtomicU64::new(0),
            max_age_ns,
        }
    }

    /// A timestamp the oracle returned at `now_ns`.
    pub fn observe(&self, ts: u64, now_ns: u64) {
        self.value.fetch_max(ts, Ordering::AcqRel);
        self.seen_at_ns.fetch_max(now_ns, Ordering::AcqRel);
    }

    /// A start timestamp, if the newest seen is recent enough. (The two words are read
    /// apart: a value older than the time says is still a safe, staler, start.)
    pub fn start(&self, now_ns: u64) -> Option<u64> {
        let seen = self.seen_at_ns.load(Ordering::Acquire);
        let v = self.value.load(Ordering::Acquire);
        (v > 0 && now_ns.saturating_sub(seen) <= self.max_age_ns).then_some(v)
    }
}

/// A compute process's own timestamp oracle, for a process that holds the pool alone (Motor's
/// authors' configuration: one compute server, a process-wide counter). Timestamps cost no
/// round trip. It starts above every timestamp the pool has seen by reserving a block of the
/// pool's oracle word (one FAA, by the first coordinator that needs a timestamp), so a run
/// after a crashed one still stamps above everything that run wrote.
///
/// It also replaces the round trip that marks a writer's locks *committing* in the pool: a
/// writer sets its bit here before it takes its commit timestamp and clears it once its
/// records are installed; a reader copies the bits right after taking its start timestamp,
/// and treats a record locked by a coordinator whose bit it copied as being committed (it
/// waits). One total order over the counter and the bits (SeqCst) makes the argument: a
/// writer whose commit timestamp is below my start set its bit before my copy, so I either
/// see the bit or, if it was cleared already, read its installed records.
#[derive(Debug)]
pub struct LocalOracle {
    next: AtomicU64,
    committing: Box<[AtomicU64]>,
}

/// Timestamps a local oracle reserves from the pool's oracle word.
pub const LOCAL_ORACLE_BLOCK: u64 = 1 << 40;

impl Default for LocalOracle {
    fn default() -> LocalOracle {
        LocalOracle::new(1024)
    }
}

impl LocalOracle {
    /// An oracle for coordinators with lock-owner ids 1..=`coordinators`.
    pub fn new(coordinators: u32) -> LocalOracle {
        LocalOracle {
            next: AtomicU64::new(0),
            committing: (0..=coordinators / 64).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// A fresh timestamp, or `None` until [`LocalOracle::start_at`] has run.
    pub fn next(&self) -> Option<u64> {
        let mut cur = self.next.load(Ordering::SeqCst);
        loop {
            if cur == 0 {
                return None;
            }
            match self
                .next
                .compare_exchange_weak(cur, cur + 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return Some(cur),
                Err(now) => cur = now,
            }
        }
    }

    /// Starts counting at `first` (the start of a reserved block), unless another coordinator
    /// already started it.
    pub fn start_at(&self, first: u64) {
        let _ = self
            .next
            .compare_exchange(0, first.max(1), Ordering::SeqCst, Ordering::SeqCst);
    }

    fn bit(&self, owner: u64) -> Option<(&AtomicU64, u64)> {
        let i = owner.checked_sub(1)?;
        let word = self.committing.get((i / 64) as usize)?;
        Some((word, 1 << (i % 64)))
    }

    /// Whether `owner` (a lock-owner id) can be tracked here.
    pub fn tracks(&self, owner: u64) -> bool {
        self.bit(owner).is_some()
    }

    /// Sets or clears `owner`'s committing bit.
    pub fn set_committing(&self, owner: u64, on: bool) {
        if let Some((w, b)) = self.bit(owner) {
            if on {
                w.fetch_or(b, Ordering::SeqCst);
            } else {
                w.fetch_and(!b, Ordering::SeqCst);
            }
        }
    }

    /// Copies the committing bits into `out`.
    pub fn committing(&self, out: &mut Vec<u64>) {
        out.clear();
        out.extend(self.committing.iter().map(|w| w.load(Ordering::SeqCst)));
    }

    /// Whether `owner`'s bit is set in a copy made by [`LocalOracle::committing`].
    pub fn is_set(bits: &[u64], owner: u64) -> bool {
        owner.checked_sub(1).is_some_and(|i| {
            bits.get((i / 64) as usize)
                .is_some_and(|w| w >> (i % 64) & 1 == 1)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_oracle_counts_from_its_block() {
        let o = LocalOracle::new(100);
        assert_eq!(o.next(), None);
        o.start_at(100);
        o.start_at(500);
        assert_eq!(o.next(), Some(100));
        assert_eq!(o.next(), Some(101));
    }

    #[test]
    fn committing_bits_are_per_owner() {
        let o = LocalOracle::new(100);
        let mut bits = Vec::new();
        o.set_committing(1, true);
        o.set_committing(70, true);
        o.committing(&mut bits);
        assert!(LocalOracle::is_set(&bits, 1) && LocalOracle::is_set(&bits, 70));
        assert!(!LocalOracle::is_set(&bits, 2) && !LocalOracle::is_set(&bits, 0));
        o.set_committing(70, false);
        o.committing(&mut bits);
        assert!(!LocalOracle::is_set(&bits, 70));
        assert!(o.tracks(101) && !o.tracks(129) && !o.tracks(0));
    }

    #[test]
    fn serves_the_newest_value_while_it_is_fresh() {
        let c = StartClock::new(1_000);
        assert_eq!(c.start(0), None);
        c.observe(7, 100);
        c.observe(5, 50);
        assert_eq!(c.start(600), Some(7));
        assert_eq!(c.start(1_100), Some(7));
        assert_eq!(c.start(1_101), None);
    }
}
