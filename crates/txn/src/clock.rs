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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_oracle_counts_from_its_block() {
        let o = LocalOracle::new();
        assert_eq!(o.next(), None);
        o.start_at(100);
        o.start_at(500);
        assert_eq!(o.next(), Some(100));
        assert_eq!(o.next(), Some(101));
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

/// A compute process's own timestamp oracle, for a process that holds the pool alone (Motor's
/// authors' configuration: one compute server, a process-wide counter). Timestamps cost no
/// round trip. It starts above every timestamp the pool has seen by reserving a block of the
/// pool's oracle word (one FAA, by the first coordinator that needs a timestamp), so a run
/// after a crashed one still stamps above everything that run wrote.
#[derive(Debug, Default)]
pub struct LocalOracle {
    next: AtomicU64,
}

/// Timestamps a local oracle reserves from the pool's oracle word.
pub const LOCAL_ORACLE_BLOCK: u64 = 1 << 40;

impl LocalOracle {
    pub fn new() -> LocalOracle {
        LocalOracle::default()
    }

    /// A fresh timestamp, or `None` until [`LocalOracle::start_at`] has run.
    pub fn next(&self) -> Option<u64> {
        let mut cur = self.next.load(Ordering::Acquire);
        loop {
            if cur == 0 {
                return None;
            }
            match self
                .next
                .compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire)
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
            .compare_exchange(0, first.max(1), Ordering::AcqRel, Ordering::Acquire);
    }
}
