//! Timestamp sources: the pool's oracle word (one FAA on memory node 0 per timestamp), a
//! compute process's own counter ([`crate::LocalOracle`], no round trip once its block is
//! reserved), and a compute node's start clock ([`crate::StartClock`]: a recent timestamp,
//! handed out as a start timestamp without a round trip).

use crate::protocol::Protocol;
use crate::tso::{Take, TsoGroup};
use crate::tx::Tx;
use dtxn_store::layout::ORACLE_OFF;

/// A fresh timestamp, above every one handed out before: from the local oracle if the
/// coordinator has one, else from the pool's oracle word. Its round trips are counted as the
/// oracle's ([`crate::TxnOutcome::oracle_round_trips`]). `Err` if memory node 0 failed.
pub(crate) async fn next<P: Protocol>(tx: &mut Tx<'_, P>) -> Result<u64, ()> {
    if let Some(g) = tx.c.tso_group.clone() {
        return from_group(tx, &g).await;
    }
    if let Some(o) = tx.c.local_oracle.clone() {
        if let Some(ts) = o.next() {
            return Ok(ts);
        }
        let f = tx.c.ep.faa(0, ORACLE_OFF, o.block());
        tx.oracle_round_trips += 1;
        if tx.c.ep.post().await.is_err() {
            return Err(());
        }
        o.start_after(tx.c.ep.old(f));
        return o.next().ok_or(());
    }
    let f = tx.c.ep.faa(0, ORACLE_OFF, 1);
    tx.oracle_round_trips += 1;
    if tx.c.ep.post().await.is_err() {
        return Err(());
    }
    let ts = tx.c.ep.old(f) + 1;
    if let Some(c) = &tx.c.start_clock {
        c.observe(ts, tx.c.ep.now_ns());
    }
    Ok(ts)
}

/// Pause of a request waiting for its group's leader, between two looks at the group.
const GROUP_WAIT_NS: u64 = 500;

/// A timestamp through the compute node's TSO group: from its reserved range, or as the
/// leader that reserves one for every request pending (one FAA of `n`), or after waiting for
/// the leader.
async fn from_group<P: Protocol>(tx: &mut Tx<'_, P>, g: &TsoGroup) -> Result<u64, ()> {
    let mut joined = false;
    loop {
        match g.take(joined) {
            Take::Ts(ts) => return Ok(ts),
            Take::Lead(n) => {
                let f = tx.c.ep.faa(0, ORACLE_OFF, n);
                tx.oracle_round_trips += 1;
                if tx.c.ep.post().await.is_err() {
                    g.failed();
                    return Err(());
                }
                return Ok(g.reserved(tx.c.ep.old(f), n));
            }
            Take::Wait => {
                joined = true;
                tx.c.ep.sleep(GROUP_WAIT_NS).await;
            }
        }
    }
}

/// A start timestamp from the compute node's start clock, if it has one and its newest
/// timestamp is recent enough (`max_age_ns` > 0 turns it on).
pub(crate) fn cached_start<P: Protocol>(tx: &Tx<'_, P>, max_age_ns: u64) -> Option<u64> {
    match (&tx.c.start_clock, max_age_ns) {
        (Some(c), n) if n > 0 => c.start(tx.c.ep.now_ns()),
        _ => None,
    }
}

/// Bits of a local-clock timestamp (microseconds: 2^45 of them are over a year), kept above a
/// lock word's owner bits and below its share bit and flags (bits 61 to 63).
const CLOCK_BITS: u32 = 45;

/// A transaction timestamp from the coordinator's local clock, as RCC makes them (the clock
/// in the high bits, the coordinator's id in the low ones: unique without a round trip, and
/// no synchronized clocks needed, since skew only makes some transactions older than they
/// are): `(microseconds << 16) | owner`, strictly above `last` (the coordinator's previous
/// one). It fits a lock word's bits below the share bit and the flags (bits 61 to 63).
pub(crate) fn local_clock(now_ns: u64, last: u64, owner: u64) -> u64 {
    let mask = (1u64 << CLOCK_BITS) - 1;
    let clock = ((now_ns / 1_000) & mask).max(((last >> 16) + 1) & mask);
    (clock << 16) | (owner & super::OWNER_MASK)
}

/// Bits of a [`view_clock`] timestamp's clock under its view epoch: microseconds since the
/// process started (2^39 of them are over six days).
const VIEW_CLOCK_BITS: u32 = CLOCK_BITS - EPOCH_BITS;
/// Bits of the view epoch, above the clock: views 0 to 63, more than a view can reach while
/// views only fail memory nodes (at most `MAX_VIEW_NODES - 1` of them).
const EPOCH_BITS: u32 = 6;
const _: () = assert!(dtxn_store::view::MAX_VIEW_NODES <= 1 << EPOCH_BITS);

/// [`local_clock`] under the pool's view `view` (memory-node failover, MVCC's): the view's
/// number above the clock, so that every timestamp of a view is above every timestamp of the
/// views before it, whatever the clocks' skew or a coordinator's run ahead of its clock. The
/// clock stops at its largest value (then timestamps step by one, still rising).
pub(crate) fn view_clock(now_ns: u64, last: u64, owner: u64, view: u16) -> u64 {
    let epoch = u64::from(view).min((1 << EPOCH_BITS) - 1) << VIEW_CLOCK_BITS;
    let clock = (now_ns / 1_000).min((1 << VIEW_CLOCK_BITS) - 1) | epoch;
    let mask = (1u64 << CLOCK_BITS) - 1;
    let clock = clock.max(((last >> 16) + 1) & mask);
    (clock << 16) | (owner & super::OWNER_MASK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_views_timestamps_are_above_every_earlier_views() {
        // A coordinator far ahead of its clock in view 0 (it saw a skewed clock's stamps)...
        let ahead = view_clock(5_000, (1u64 << 38) << 16, 3, 0);
        // ...is still below a coordinator just started in view 1, and the clock stays in view.
        let next = view_clock(0, 0, 4, 1);
        assert!(next > ahead, "{next:#x} <= {ahead:#x}");
        assert_eq!(view_clock(5_000, 0, 3, 0), local_clock(5_000, 0, 3));
        // A clock past its bits does not spill into the next view's (view 0's clock up to
        // its last value, not one past it).
        for v in 0..3 {
            assert!(
                view_clock(u64::MAX, 0, 3, v) < view_clock(0, 0, 3, v + 1),
                "view {v}"
            );
        }
        // Rising per coordinator, and never into the share bit or the flags.
        let a = view_clock(7_000, 0, 3, 2);
        assert!(view_clock(7_000, a, 3, 2) > a);
        assert_eq!(
            view_clock(u64::MAX, u64::MAX >> 3, 0xffff, u16::MAX) >> 61,
            0
        );
    }

    #[test]
    fn local_clock_timestamps_rise_per_coordinator_and_differ_between_coordinators() {
        let a = local_clock(5_000, 0, 3);
        assert_eq!(a, (5 << 16) | 3);
        // The same microsecond again: one above the last.
        let b = local_clock(5_000, a, 3);
        assert_eq!(b, (6 << 16) | 3);
        // A clock behind the last (skew, or the same instant): still above it.
        assert!(local_clock(1_000, b, 3) > b);
        assert_ne!(local_clock(5_000, 0, 4), a);
        // Never into the share bit or the flags.
        assert_eq!(local_clock(u64::MAX, 0, 0xffff) >> 61, 0);
    }
}
