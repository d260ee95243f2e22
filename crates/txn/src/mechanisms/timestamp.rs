//! Timestamp sources: the pool's oracle word (one FAA on memory node 0 per timestamp), a
//! compute process's own counter ([`crate::LocalOracle`], no round trip once its block is
//! reserved), and a compute node's start clock ([`crate::StartClock`]: a recent timestamp,
//! handed out as a start timestamp without a round trip).

use crate::protocol::Protocol;
use crate::tx::Tx;
use dtxn_store::layout::ORACLE_OFF;

/// A fresh timestamp, above every one handed out before: from the local oracle if the
/// coordinator has one, else from the pool's oracle word. Its round trips are counted as the
/// oracle's ([`crate::TxnOutcome::oracle_round_trips`]). `Err` if memory node 0 failed.
pub(crate) async fn next<P: Protocol>(tx: &mut Tx<'_, P>) -> Result<u64, ()> {
    if let Some(o) = tx.c.local_oracle.clone() {
        if let Some(ts) = o.next() {
            return Ok(ts);
        }
        let f = tx.c.ep.faa(0, ORACLE_OFF, crate::LOCAL_ORACLE_BLOCK);
        tx.oracle_round_trips += 1;
        if tx.c.ep.post().await.is_err() {
            return Err(());
        }
        o.start_at(tx.c.ep.old(f) + 1);
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

/// A start timestamp from the compute node's start clock, if it has one and its newest
/// timestamp is recent enough (`max_age_ns` > 0 turns it on).
pub(crate) fn cached_start<P: Protocol>(tx: &Tx<'_, P>, max_age_ns: u64) -> Option<u64> {
    match (&tx.c.start_clock, max_age_ns) {
        (Some(c), n) if n > 0 => c.start(tx.c.ep.now_ns()),
        _ => None,
    }
}
