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
///
/// A bit belongs to a coordinator, and a coordinator commits one transaction after another:
/// so beside each bit, a count of the coordinator's commits (odd while one is under way), and
/// a copy keeps the count of each commit it saw under way. A reader that meets a lock of a
/// coordinator it copied, and finds that commit over ([`LocalOracle::forget_ended`]), need
/// not wait for the lock: the lock is the coordinator's next transaction's, whose commit
/// timestamp will be above the reader's start, and the ended commit's records are installed,
/// so one more READ (posted after the reader saw the commit end) sees them. Without the count
/// a reader waited on whatever the coordinator did next, until its reread limit aborted it.
#[derive(Debug)]
pub struct LocalOracle {
    /// The next timestamp to hand out (0: no block yet).
    next: AtomicU64,
    /// The first timestamp past the current block: `next` reaching it means the block is
    /// used up, and the timestamps from there on are another block's (a later run's).
    end: AtomicU64,
    /// Timestamps a block holds.
    block: u64,
    committing: Box<[AtomicU64]>,
    /// Per coordinator (lock-owner id - 1): its commits begun plus ended; odd while one is
    /// under way. Only the coordinator itself changes its own.
    commits: Box<[AtomicU64]>,
}

/// A copy of the committing bits (see [`LocalOracle::committing`]), with the commit each bit
/// stood for.
#[derive(Debug, Default, Clone)]
pub struct Suspects {
    bits: Vec<u64>,
    /// (owner, its commit count when copied) for each bit set.
    commits: Vec<(u64, u64)>,
    /// Owners whose copied commit was seen to have ended, to forget before the next READs
    /// are posted ([`Suspects::forget_ended`]).
    ended: Vec<u64>,
}

impl Suspects {
    pub fn clear(&mut self) {
        self.bits.clear();
        self.commits.clear();
        self.ended.clear();
    }

    /// Forgets the owners [`LocalOracle::forget_ended`] saw end: call it before posting
    /// READs, never between posting and judging them. A READ posted before the end was seen
    /// may still show the ended commit's records uninstalled; one posted after cannot.
    pub fn forget_ended(&mut self) {
        while let Some(owner) = self.ended.pop() {
            self.forget(owner);
        }
    }

    /// Whether `owner` was committing when the copy was made (and not forgotten since).
    pub fn holds(&self, owner: u64) -> bool {
        owner.checked_sub(1).is_some_and(|i| {
            self.bits
                .get((i / 64) as usize)
                .is_some_and(|w| w >> (i % 64) & 1 == 1)
        })
    }

    fn forget(&mut self, owner: u64) {
        if let Some(i) = owner.checked_sub(1) {
            if let Some(w) = self.bits.get_mut((i / 64) as usize) {
                *w &= !(1 << (i % 64));
            }
        }
    }
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
        LocalOracle::with_block(coordinators, LOCAL_ORACLE_BLOCK)
    }

    /// [`LocalOracle::new`] reserving `block` timestamps at a time (tests use small ones).
    pub fn with_block(coordinators: u32, block: u64) -> LocalOracle {
        let words = coordinators / 64 + 1;
        LocalOracle {
            next: AtomicU64::new(0),
            end: AtomicU64::new(0),
            block: block.max(1),
            committing: (0..words).map(|_| AtomicU64::new(0)).collect(),
            commits: (0..words * 64).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Timestamps to reserve from the pool's oracle word at a time (one FAA of this).
    pub fn block(&self) -> u64 {
        self.block
    }

    /// A fresh timestamp, or `None` until [`LocalOracle::start_after`] has run, and again
    /// once its block is used up.
    pub fn next(&self) -> Option<u64> {
        let mut cur = self.next.load(Ordering::SeqCst);
        loop {
            // `end` is loaded after `next`, and grows only after `next` was moved into the
            // block it ends: a `cur` below it lies in a block of ours.
            if cur == 0 || cur >= self.end.load(Ordering::SeqCst) {
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

    /// Starts counting after `last`, what the pool's oracle word held before the FAA that
    /// reserved a block of [`LocalOracle::block`] timestamps for this process: the last
    /// timestamp handed out before (an earlier run's, or our previous block's), which must
    /// never be handed out again. Unless another coordinator already started a block that is
    /// not used up (its FAA's block is then left unused: only the pool's word moved).
    pub fn start_after(&self, last: u64) {
        let cur = self.next.load(Ordering::SeqCst);
        if cur != 0 && cur < self.end.load(Ordering::SeqCst) {
            return;
        }
        let first = last + 1;
        if self
            .next
            .compare_exchange(cur, first, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            // Raised only now that `next` is in the block, and never lowered: a racing start
            // of a later block must not see its end undone.
            self.end.fetch_max(first + self.block, Ordering::SeqCst);
        }
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

    /// Sets or clears `owner`'s committing bit: a commit begins (before its timestamp is
    /// taken) or ends (its records installed). The count turns odd before the bit is set and
    /// even after it is cleared, so a copy that sees the bit finds the count odd unless that
    /// commit has ended since.
    pub fn set_committing(&self, owner: u64, on: bool) {
        let Some((w, b)) = self.bit(owner) else {
            return;
        };
        let count = &self.commits[(owner - 1) as usize];
        let turn = |odd: u64| move |c: u64| (c % 2 == odd).then_some(c + 1);
        if on {
            let _ = count.fetch_update(Ordering::SeqCst, Ordering::SeqCst, turn(0));
            w.fetch_or(b, Ordering::SeqCst);
        } else {
            w.fetch_and(!b, Ordering::SeqCst);
            let _ = count.fetch_update(Ordering::SeqCst, Ordering::SeqCst, turn(1));
        }
    }

    /// Copies the committing bits into `out`, with the commit each stands for. A bit whose
    /// commit has ended by the time its count is read is left out: its records are installed.
    pub fn committing(&self, out: &mut Suspects) {
        out.clear();
        out.bits
            .extend(self.committing.iter().map(|w| w.load(Ordering::SeqCst)));
        for (wi, word) in out.bits.iter_mut().enumerate() {
            let mut rest = *word;
            while rest != 0 {
                let bit = rest.trailing_zeros() as u64;
                rest &= rest - 1;
                let owner = wi as u64 * 64 + bit + 1;
                let c = self.commits[(owner - 1) as usize].load(Ordering::SeqCst);
                if c % 2 == 1 {
                    out.commits.push((owner, c));
                } else {
                    *word &= !(1 << bit);
                }
            }
        }
    }

    /// Whether the commit of `owner` that `s` copied as under way has ended since; if so, `s`
    /// forgets `owner` at its next [`Suspects::forget_ended`], before the next READs are
    /// posted (see the type's comment for why a reader then reads once more instead of
    /// waiting).
    pub fn forget_ended(&self, s: &mut Suspects, owner: u64) -> bool {
        let Some(&(_, seen)) = s.commits.iter().find(|(o, _)| *o == owner) else {
            return false;
        };
        let ended = self.commits[(owner - 1) as usize].load(Ordering::SeqCst) != seen;
        if ended && !s.ended.contains(&owner) {
            s.ended.push(owner);
        }
        ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// It counts from its block's first timestamp, past the last one handed out before it (a
    /// fresh pool's word is 0: it starts at 1), and a second start changes nothing.
    #[test]
    fn a_local_oracle_counts_from_its_block() {
        let o = LocalOracle::new(100);
        assert_eq!(o.next(), None);
        o.start_after(99);
        o.start_after(500);
        assert_eq!(o.next(), Some(100));
        assert_eq!(o.next(), Some(101));
        let fresh = LocalOracle::new(1);
        fresh.start_after(0);
        assert_eq!(fresh.next(), Some(1));
    }

    /// A block used up hands out nothing more (the timestamps past it are another block's)
    /// until the next block starts; a start while a block lasts changes nothing.
    #[test]
    fn a_local_oracle_stops_at_its_blocks_end() {
        let o = LocalOracle::with_block(4, 3);
        o.start_after(10);
        assert_eq!(
            [o.next(), o.next(), o.next()],
            [Some(11), Some(12), Some(13)]
        );
        assert_eq!(o.next(), None);
        assert_eq!(o.next(), None);
        // Another process reserved 14..=16 meanwhile; ours is 17..=19.
        o.start_after(16);
        o.start_after(40);
        assert_eq!(
            [o.next(), o.next(), o.next()],
            [Some(17), Some(18), Some(19)]
        );
        assert_eq!(o.next(), None);
    }

    #[test]
    fn committing_bits_are_per_owner() {
        let o = LocalOracle::new(100);
        let mut s = Suspects::default();
        o.set_committing(1, true);
        o.set_committing(70, true);
        o.committing(&mut s);
        assert!(s.holds(1) && s.holds(70));
        assert!(!s.holds(2) && !s.holds(0));
        o.set_committing(70, false);
        o.committing(&mut s);
        assert!(!s.holds(70));
        assert!(o.tracks(101) && !o.tracks(129) && !o.tracks(0));
        o.set_committing(128, true);
        o.committing(&mut s);
        assert!(s.holds(128) && s.holds(1));
    }

    #[test]
    fn a_suspect_is_its_commit_not_its_coordinator() {
        let o = LocalOracle::new(8);
        let mut s = Suspects::default();
        o.set_committing(3, true);
        o.committing(&mut s);
        // Still the same commit: the reader must wait for it.
        assert!(!o.forget_ended(&mut s, 3));
        assert!(s.holds(3));
        // It ends and the coordinator's next commit begins: the one copied is over.
        o.set_committing(3, false);
        o.set_committing(3, true);
        assert!(o.forget_ended(&mut s, 3));
        assert!(
            s.holds(3),
            "READs posted before the end was seen still wait"
        );
        s.forget_ended();
        assert!(!s.holds(3), "forgotten: its next locks are not waited on");
        // One that was not copied is never "ended".
        assert!(!o.forget_ended(&mut s, 4));
        // Setting twice is one commit, clearing twice one end.
        o.set_committing(3, true);
        o.committing(&mut s);
        o.set_committing(3, false);
        o.set_committing(3, false);
        o.set_committing(3, true);
        assert!(o.forget_ended(&mut s, 3));
        s.forget_ended();
        assert!(!s.holds(3));
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
