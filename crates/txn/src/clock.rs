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
