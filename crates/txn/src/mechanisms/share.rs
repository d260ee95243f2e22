//! 2PL read shares (NO_WAIT, WAIT_DIE): a lock word that counts readers and, where
//! coordinators can die (leases held: `--faults`, `--leases`), says until when the shares
//! it counts are good (issue #23).
//!
//! A count does not say whose shares it counts, so recovery cannot give back a dead
//! coordinator's. Under leases a share is therefore itself a lease, as DrTM's read leases
//! are: the word carries an **expiry**, and once it has passed, the shares are void and the
//! word free to whoever comes next (a reader starts a new count, a writer locks it). The
//! rules that make that safe, with `G` the lease guard (it covers an op's flight and the
//! clocks' skew, `membership`'s argument):
//!
//! 1. A share is taken with an expiry `X = now + SHARE` (half the coordinator lease, at least
//!    twice the guard), or
//!    joins a count whose expiry is later, raising it to `X` at least; the word's expiry only
//!    grows until the shares are void.
//! 2. The holder relies on its share only before `X' - G`, `X'` the expiry the word held
//!    right after its CAS: its commit checks, after its last lock and read, that its clock
//!    is still before `X' - G` for every share (else it aborts, as a failed validation),
//!    and it gives the share back (FAA -1) only if it can post that before `X' - G`; later,
//!    it lets the share expire. Every op of it on the word so lands before `X'`.
//! 3. Anyone else treats the shares as void when its clock reads `X` or later: its CAS
//!    executes after every op the holders posted on them.
//!
//! So a writer never locks a word while a share it counts is relied on, and a late
//! give-back never decrements a count that started since (it would break the next readers'
//! count, or an exclusive lock word). The serialization point of a transaction is its
//! commit's check, where it holds every lock and every share at once.
//!
//! **The word** (a share word has [`SHARED`] set and [`INVISIBLE`] clear): the count in the
//! low 16 bits, the expiry in the 45 above (in units of 1,024 ns of the lease clock, modulo
//! 2^45: 417 days, read back as the value nearest the reader's clock). Without leases the
//! expiry is 0, shares never expire, and the word is `SHARED | count` as before. A count of
//! 0 is a free word (the last reader's give-back leaves it; its CAS back to 0, which guesses
//! the expiry, may miss).
//!
//! **Left over.** Void shares stay counted in the word until someone takes it: after a run,
//! with no coordinator left, every share word is void ([`is_read_share_word`]).

use super::{INVISIBLE, SHARED};
use dtxn_fabric::Endpoint;

/// The count's bits.
pub(crate) const COUNT: u64 = 0xffff;
const EXP_SHIFT: u32 = 16;
const EXP_BITS: u32 = 45;
const EXP_MASK: u64 = ((1 << EXP_BITS) - 1) << EXP_SHIFT;
/// The expiry's unit: 2^10 ns.
const UNIT: u32 = 10;

/// A coordinator's share terms, read at the start of a locking round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Terms {
    /// The lease clock ([`Endpoint::lease_now_ns`]).
    pub now_ns: u64,
    /// How long a share it takes lasts.
    pub share_ns: u64,
    /// The lease guard: its share is relied on only before `expiry - guard`.
    pub guard_ns: u64,
}

impl Terms {
    /// The terms of a coordinator holding a lease (`None` without one: shares never expire).
    pub(crate) fn of(ep: &Endpoint) -> Option<Terms> {
        let (lease, _) = ep.lease()?;
        Some(Terms {
            now_ns: ep.lease_now_ns(),
            // Long enough to be relied on for a while past the guard whatever the terms
            // (safety does not depend on the length; a dead holder's share blocks writers
            // for this long at most).
            share_ns: (lease.lease_ns / 2).max(2 * lease.guard_ns),
            guard_ns: lease.guard_ns,
        })
    }
}

/// Whether `w` is a share word (counting shares, maybe none), not an exclusive lock.
#[inline]
pub(crate) fn is_share(w: u64) -> bool {
    w & SHARED != 0 && w & INVISIBLE == 0
}

#[inline]
pub(crate) fn count(w: u64) -> u64 {
    w & COUNT
}

/// The expiry of share word `w` on the lease clock, as read at `now_ns` (`None`: it has
/// none, its shares never expire).
pub(crate) fn expiry_ns(w: u64, now_ns: u64) -> Option<u64> {
    let e = (w & EXP_MASK) >> EXP_SHIFT;
    if e == 0 {
        return None;
    }
    let (span, half) = (1u64 << EXP_BITS, 1u64 << (EXP_BITS - 1));
    let base = now_ns >> UNIT;
    let mut at = (base & !(span - 1)) | e;
    if at > base.saturating_add(half) && at >= span {
        at -= span;
    } else if at.saturating_add(half) < base {
        at += span;
    }
    Some(at << UNIT)
}

fn with_expiry(expiry_ns: u64) -> u64 {
    let e = (expiry_ns >> UNIT) & ((1 << EXP_BITS) - 1);
    e.max(1) << EXP_SHIFT
}

/// Whether the shares `w` counts are void at `terms`' clock (rule 3): it has an expiry, and
/// it has come.
#[inline]
pub(crate) fn void(w: u64, terms: Option<Terms>) -> bool {
    match (terms, is_share(w)) {
        (Some(t), true) => expiry_ns(w, t.now_ns).is_some_and(|x| t.now_ns >= x),
        _ => false,
    }
}

/// Whether a writer may lock `w` (CAS from it): free, or shares all given back or void.
#[inline]
pub(crate) fn free_for_writer(w: u64, terms: Option<Terms>) -> bool {
    w == 0 || is_share(w) && (count(w) == 0 || void(w, terms))
}

/// `w` with one read share more, taken at `terms` (rule 1); `None` if `w` is held
/// exclusively or counts all the shares a word can.
pub(crate) fn one_more(w: u64, terms: Option<Terms>) -> Option<u64> {
    let want = terms.map_or(0, |t| with_expiry(t.now_ns + t.share_ns));
    if w == 0 || void(w, terms) {
        return Some(SHARED | want | 1);
    }
    if !is_share(w) || count(w) >= COUNT {
        return None;
    }
    let expiry = match terms {
        // The later of the word's expiry and ours.
        Some(t) => {
            let mine = t.now_ns + t.share_ns;
            if expiry_ns(w, t.now_ns).is_some_and(|x| x >= mine) {
                w & EXP_MASK
            } else {
                want
            }
        }
        None => w & EXP_MASK,
    };
    Some(SHARED | expiry | (count(w) + 1))
}

/// `w` with one read share fewer (a memory node's UNSHARE: 0 with the last); `None` if it
/// counts none.
pub(crate) fn one_less(w: u64) -> Option<u64> {
    if !is_share(w) || count(w) == 0 {
        return None;
    }
    Some(if count(w) == 1 { 0 } else { w - 1 })
}

/// The word of our share alone, as an upgrade expects it: `held` (the word right after our
/// share was taken) with a count of one.
#[inline]
pub(crate) fn alone(held: u64) -> u64 {
    SHARED | (held & EXP_MASK) | 1
}

/// The word once every share is given back, if nobody raised its expiry since `held`: what
/// the last reader's CAS back to 0 expects.
#[inline]
pub(crate) fn drained(held: u64) -> u64 {
    SHARED | (held & EXP_MASK)
}

/// Whether the holder of the share taken as `held` may still rely on it, or post its
/// give-back, at `terms`' clock (rule 2).
#[inline]
pub(crate) fn usable(held: u64, terms: Option<Terms>) -> bool {
    match (terms, expiry_ns(held, terms.map_or(0, |t| t.now_ns))) {
        (Some(t), Some(x)) => t.now_ns.saturating_add(t.guard_ns) < x,
        _ => true,
    }
}

/// Whether lock word `w` counts read shares (maybe none, maybe void): after a run, with no
/// coordinator left to hold or give back a share, every such word is void, and the run's
/// checks clear it first (`dtxn bench --verify` and `dtxn verify` under leases).
pub fn is_read_share_word(w: u64) -> bool {
    is_share(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn terms(now_ns: u64) -> Option<Terms> {
        Some(Terms {
            now_ns,
            share_ns: 500_000,
            guard_ns: 20_000,
        })
    }

    #[test]
    fn without_leases_a_word_counts_shares_as_before() {
        assert_eq!(one_more(0, None), Some(SHARED | 1));
        assert_eq!(one_more(SHARED | 1, None), Some(SHARED | 2));
        assert_eq!(one_more(SHARED, None), Some(SHARED | 1));
        assert_eq!(one_less(SHARED | 2), Some(SHARED | 1));
        assert_eq!(one_less(SHARED | 1), Some(0));
        assert_eq!(one_less(SHARED), None);
        assert!(!void(SHARED | 3, None));
        assert!(usable(SHARED | 1, None));
        assert_eq!(alone(SHARED | 5), SHARED | 1);
        assert_eq!(drained(SHARED | 5), SHARED);
        // Held exclusively (an owner), or installing: no share.
        assert_eq!(one_more(7, None), None);
        assert_eq!(one_more(INVISIBLE | SHARED | 1, None), None);
        assert_eq!(one_more(SHARED | COUNT, None), None);
        // What a run's checks clear after it: words counting shares (maybe none); not an
        // exclusive lock, an installing word or a free one.
        assert!(is_read_share_word(SHARED | 3) && is_read_share_word(SHARED));
        assert!(!is_read_share_word(7) && !is_read_share_word(0));
        assert!(!is_read_share_word(INVISIBLE | SHARED | 1));
    }

    #[test]
    fn a_share_expires_and_its_word_is_then_free_to_readers_and_writers() {
        let w = one_more(0, terms(1_000_000)).unwrap();
        assert_eq!(count(w), 1);
        let x = expiry_ns(w, 1_000_000).unwrap();
        assert!((1_499_000..=1_500_000).contains(&x), "{x}");
        // Before its expiry: counted, the holder may rely on it until the guard.
        assert!(!void(w, terms(x - 1)));
        assert!(!free_for_writer(w, terms(x - 1)));
        assert!(usable(w, terms(x - 20_001)));
        assert!(!usable(w, terms(x - 20_000)));
        // From its expiry: void. A reader starts a new count, a writer locks it.
        assert!(void(w, terms(x)));
        assert!(free_for_writer(w, terms(x)));
        let again = one_more(w, terms(x)).unwrap();
        assert_eq!(count(again), 1);
        assert_eq!(expiry_ns(again, x), Some(((x + 500_000) >> UNIT) << UNIT));
    }

    #[test]
    fn a_share_joining_a_count_raises_its_expiry_never_lowers_it() {
        let w = one_more(0, terms(1_000_000)).unwrap();
        let later = one_more(w, terms(1_200_000)).unwrap();
        assert_eq!(count(later), 2);
        assert!(expiry_ns(later, 1_200_000).unwrap() > expiry_ns(w, 1_200_000).unwrap());
        // A share taken with a shorter term (an earlier clock) keeps the later expiry.
        let t = Some(Terms {
            share_ns: 1_000,
            ..terms(1_200_000).unwrap()
        });
        let third = one_more(later, t).unwrap();
        assert_eq!(third & EXP_MASK, later & EXP_MASK);
        assert_eq!(count(third), 3);
        // The last one's give-back expects the word as it left it.
        assert_eq!(drained(third), third - 3);
        assert_eq!(alone(third), third - 2);
    }

    #[test]
    fn a_word_whose_shares_were_all_given_back_is_free() {
        let w = one_more(0, terms(10_000)).unwrap();
        let back = w - 1;
        assert!(free_for_writer(back, terms(10_000)));
        assert!(!free_for_writer(w, terms(10_000)));
        assert!(!free_for_writer(5, terms(u64::MAX / 2)));
    }

    proptest! {
        /// The expiry read back is the one written, for clocks anywhere (the wall clock counts
        /// from 1970, past the field's 45 bits of 1,024 ns), read up to 2^44 units away.
        #[test]
        fn an_expiry_reads_back_near_any_clock(
            now in 0u64..(u64::MAX >> 2),
            share in 1u64..(1 << 40),
            later in 0u64..(1 << 40),
        ) {
            let t = Some(Terms { now_ns: now, share_ns: share, guard_ns: 0 });
            let w = one_more(0, t).unwrap();
            let x = expiry_ns(w, now + later).unwrap();
            let want = ((now + share) >> UNIT).max(1) << UNIT;
            prop_assert!(x == want || (now + share) >> UNIT & ((1 << EXP_BITS) - 1) == 0);
            prop_assert!(is_share(w) && count(w) == 1);
            prop_assert_eq!(one_less(w), Some(0));
        }

        /// Near the field's wrap (every 2^45 units), an expiry reads back exactly from clocks
        /// on either side of it up to a quarter of the field away: a reader whose clock lags
        /// the writer's (the expiry then looks a period ahead, and is taken back), or runs
        /// past the wrap while the expiry is before it (the expiry looks a period behind).
        #[test]
        fn an_expiry_reads_back_across_the_fields_wrap(
            wrap in 1u64..(1 << 7),
            x_off in -(1i64 << 40)..(1i64 << 40),
            d in -(1i64 << 43)..(1i64 << 43),
        ) {
            let x_units = ((wrap << EXP_BITS) as i64 + x_off) as u64;
            prop_assume!(x_units & ((1 << EXP_BITS) - 1) != 0);
            let x = x_units << UNIT;
            let w = SHARED | 1 | with_expiry(x);
            let reader = (x_units as i64 + d) as u64;
            prop_assert_eq!(expiry_ns(w, reader << UNIT), Some(x));
            prop_assert_eq!(expiry_ns(w, (reader << UNIT) + (1 << UNIT) - 1), Some(x));
        }

        /// Taking and giving back shares keeps the count exact and never touches the flags.
        #[test]
        fn shares_count_exactly(n in 1u64..200, now in 0u64..(1 << 50)) {
            let t = Some(Terms { now_ns: now, share_ns: 1 << 20, guard_ns: 0 });
            let mut w = 0;
            for _ in 0..n {
                w = one_more(w, t).unwrap();
            }
            prop_assert_eq!(count(w), n);
            prop_assert!(is_share(w));
            for _ in 1..n {
                w = one_less(w).unwrap();
            }
            prop_assert_eq!(count(w), 1);
            prop_assert_eq!(one_less(w), Some(0));
        }
    }
}
