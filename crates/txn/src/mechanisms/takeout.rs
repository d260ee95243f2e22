//! Scythe's **takeout lock** (Lu et al., TACO'24, section 4.3 of the Scythe digest): a FIFO
//! ticket queue per record, whose tickets are handed out by the memory node's CPU (one RPC),
//! waited for by one-sided READs with a back-off proportional to the queue ahead, and released
//! by a one-sided FAA.
//!
//! Layout: two of the record's metadata words (line 0, after the header), **never sharing a
//! word between the memory node's CPU and a NIC**:
//!
//! ```text
//! meta word 0  GRANT  | queued_ts (bits 16..63, 48 bits) | lower (bits 0..15) |   CPU only (CAS)
//! meta word 1  UPPER  | upper (64 bits)                                         |   NIC only (FAA +1)
//! ```
//!
//! `lower` is the next ticket to hand out, `upper` the ticket being served; the queue, holder
//! included, is `lower - upper` (mod 2^16); `queued_ts` is the largest timestamp ever granted a
//! ticket (never lowered). The paper packs `lower` and `upper` in one word (u16 + u16) and
//! `queued_ts` in another: the CPU's `lower += 1` and a NIC's FAA on `upper` then update the
//! same word, and an RDMA atomic is a read-modify-write in the NIC that does not compose with
//! a CPU store (G8, G11): the FAA can write back the `lower` it read before the grant (a ticket
//! handed out twice) or the store the `upper` it read before the release (a lost release, and
//! the queue stalls for good). Here the grant is one CPU CAS on GRANT (a check, `queued_ts`
//! and `lower + 1` in one step, so concurrent handler cores cannot hand out one ticket twice:
//! the other race, found in the authors' code), and UPPER is only ever FAAed by NICs. The test
//! `a_grant_racing_a_release_loses_nothing_on_split_words_but_does_on_the_papers_word` shows
//! both layouts under every interleaving of a grant with an in-flight FAA.
//!
//! The grant rule (`TICKET` request, [`grant`]): with `q = lower - upper` (upper read before
//! the CAS, so `q` can only overestimate the queue),
//! - R1 `ts < queued_ts`: rejected (a younger transaction holds or held a ticket: waiting
//!   behind it could close a cycle; so every wait points from a larger timestamp to a smaller
//!   one, and no deadlock can form);
//! - R2/R3 `q > limit` (the cold watermark for an OCC request, the hot one for TOCC): rejected;
//! - else granted: ticket = `lower`, `queued_ts = ts`, `lower + 1`; the reply carries the GRANT
//!   word before the grant and the UPPER word read, so the requester knows how many are ahead.
//!
//! A granted ticket is a commitment: the queue cannot pass it until its owner FAAs UPPER. An
//! aborting owner still waits for its turn and releases it (see [`wait_turns`]); nobody ever
//! decrements `lower` or cancels a ticket.
//!
//! **The grant journal** (recovery of a crashed owner, issue #23). The CPU that grants a
//! ticket records it, in the same request, in the requester's journal on that memory node:
//! the last [`JOURNAL_BYTES`] of the requester's log slice (the request names it). An entry
//! is the GRANT word's address and the ticket's **full number** `T`: the count of grants on
//! that lock before it, which UPPER (a 64-bit count of releases, only ever FAAed by one)
//! is compared with exactly: `UPPER > T` released, `UPPER == T` being served (only its
//! owner may FAA now), `UPPER < T` waiting. The handler knows `T` because the queue is short
//! (`lower - upper` is at most the hot watermark plus one, far below 2^16): `T = upper +
//! queue`, with the UPPER word it read before its CAS. So a journal entry never goes stale
//! in a dangerous way: an old one reads as released whoever holds the slot now, and needs no
//! epoch nor reset when the slot is reused; a slot is overwritten only once its entry reads
//! released, and a request finding every slot unreleased gets no ticket ([`FULL`]: it goes
//! on without one, as a transaction whose record address was not cached). A dead owner's
//! recovery ([`release_dead`]) reads its journals, waits for each unreleased ticket's turn
//! and FAAs UPPER then: a ticket granted but whose reply was lost with the crash included.
//! Words: the journal's lock word is CPU-CASed, its entries CPU-written; NICs only READ them
//! (G11 holds: no NIC atomic on a journal word, no CPU access but READs to UPPER).

use dtxn_fabric::{Endpoint, FabricError, LocalMem, NodeId, OpId};
use dtxn_store::{PoolMap, View};

/// The `TICKET` request's tag (beside `mechanisms::rpc`'s tags 1 to 5, and 6, MVCC's RAISE on
/// main).
pub(crate) const TICKET: u64 = 7;
/// Reply statuses (`mechanisms::rpc`'s `OK` and `BAD` keep their meaning).
pub(crate) const GRANTED: u64 = 0;
pub(crate) const REJECTED: u64 = 2;
/// Not granted, not rejected: the requester's journal has no released slot. It goes on without
/// a ticket for that record.
pub(crate) const FULL: u64 = 3;

/// A grant journal's bytes: a line of its own (the CPU's lock word), then 16-byte entries
/// (GRANT address, full ticket), 124 of them: more than the tickets an attempt takes on one
/// memory node in the workloads here (TPC-C's Delivery aside, which then takes fewer).
pub(crate) const JOURNAL_BYTES: u64 = 2048;
const JOURNAL_HEAD: u64 = 64;
const ENTRY_BYTES: u64 = 16;
pub(crate) const JOURNAL_ENTRIES: u64 = (JOURNAL_BYTES - JOURNAL_HEAD) / ENTRY_BYTES;
/// The journal's lock word is held (the CPU's handler cores journal one grant at a time).
const JOURNAL_HELD: u64 = 1;
/// Tries at a held journal lock word before the request is refused as bad (a grant holds it
/// for a few local accesses).
const JOURNAL_SPINS: u32 = 1 << 20;

/// Bits of GRANT below `queued_ts`.
const TS_SHIFT: u32 = 16;
/// The largest timestamp a GRANT word holds.
pub(crate) const MAX_TS: u64 = (1 << (64 - TS_SHIFT)) - 1;

/// The paper's watermarks (section 4.3 (3)): an OCC request is rejected above 3 queued, any
/// request above 10.
pub(crate) const COLD_WATERMARK: u64 = 3;
pub(crate) const HOT_WATERMARK: u64 = 10;

/// The metadata words a takeout lock takes, from word 0: GRANT, UPPER.
pub(crate) const WORDS: u8 = 2;

#[inline]
pub(crate) fn grant_word(ts: u64, lower: u16) -> u64 {
    (ts << TS_SHIFT) | u64::from(lower)
}

#[inline]
pub(crate) fn lower(grant: u64) -> u16 {
    grant as u16
}

#[inline]
pub(crate) fn queued_ts(grant: u64) -> u64 {
    grant >> TS_SHIFT
}

/// The queue (holder included) that GRANT word `grant` and UPPER word `upper` describe.
#[inline]
pub(crate) fn queue(grant: u64, upper: u64) -> u64 {
    u64::from(lower(grant).wrapping_sub(upper as u16))
}

/// Tickets ahead of `ticket` when UPPER reads `upper` (0: it is being served).
#[inline]
pub(crate) fn ahead(ticket: u16, upper: u64) -> u64 {
    u64::from(ticket.wrapping_sub(upper as u16))
}

/// What a `TICKET` request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reply {
    pub granted: bool,
    /// Not granted for want of a free journal slot (not a rejection: go on without a ticket).
    pub full: bool,
    /// The GRANT word before this request (its `lower` is our ticket, if granted).
    pub grant: u64,
    /// The UPPER word as the memory node read it.
    pub upper: u64,
}

impl Reply {
    /// The queue the request found (holder included).
    pub(crate) fn queue(&self) -> u64 {
        queue(self.grant, self.upper)
    }

    pub(crate) fn ticket(&self) -> u16 {
        lower(self.grant)
    }

    /// The ticket's full number (grants on the lock before it): the UPPER read, plus the
    /// queue ahead, which is far below 2^16.
    pub(crate) fn full_ticket(&self) -> u64 {
        self.upper.wrapping_add(self.queue())
    }
}

/// Whether the journal entry (`at`, `full`) on this memory node is released: the lock's
/// UPPER passed its ticket (or the entry is empty, or names no lock in the region).
fn released(mem: &mut dyn LocalMem, at: u64, full: u64) -> bool {
    let lock = at.is_multiple_of(8) && at.checked_add(16).is_some_and(|e| e <= mem.size());
    at == 0 || !lock || mem.read_u64(at + 8) > full
}

/// [`grant`], journaled in the requester's journal at `journal` (0: none): a free slot (empty
/// or released) is taken first, under the journal's lock word, and filled if the ticket is
/// granted; with none free, nothing is granted ([`Reply::full`]).
pub(crate) fn grant_journaled(
    mem: &mut dyn LocalMem,
    at: u64,
    ts: u64,
    limit: u64,
    journal: u64,
) -> Option<Reply> {
    if journal == 0 {
        return grant(mem, at, ts, limit);
    }
    // Held for a few local accesses by another core of this CPU, never across a request: a
    // word that stays held, or holds anything else, is no journal (a bad request).
    let mut spins = 0u32;
    loop {
        match mem.cas(journal, 0, JOURNAL_HELD) {
            0 => break,
            JOURNAL_HELD if spins < JOURNAL_SPINS => spins += 1,
            _ => return None,
        }
        std::hint::spin_loop();
    }
    let hint = mem.read_u64(journal + 8) % JOURNAL_ENTRIES;
    let slot = (0..JOURNAL_ENTRIES)
        .map(|k| journal + JOURNAL_HEAD + ENTRY_BYTES * ((hint + k) % JOURNAL_ENTRIES))
        .find(|&e| {
            let (a, full) = (mem.read_u64(e), mem.read_u64(e + 8));
            released(mem, a, full)
        });
    let r = match slot {
        None => Some(Reply {
            granted: false,
            full: true,
            grant: mem.read_u64(at),
            upper: mem.read_u64(at + 8),
        }),
        Some(e) => {
            let r = grant(mem, at, ts, limit);
            if let Some(r) = r.filter(|r| r.granted) {
                mem.write_u64(e + 8, r.full_ticket());
                mem.write_u64(e, at);
                let next = (e - journal - JOURNAL_HEAD) / ENTRY_BYTES + 1;
                mem.write_u64(journal + 8, next % JOURNAL_ENTRIES);
            }
            r
        }
    };
    mem.write_u64(journal, 0);
    r
}

/// The memory node's side of `TICKET`: the grant rule on the lock whose GRANT word is at
/// `at` (UPPER at `at + 8`), for timestamp `ts`, rejecting above `limit` queued. One CPU CAS
/// makes the check and the grant one step with respect to other cores serving the same lock;
/// UPPER is only read (NICs FAA it). `None` for a timestamp GRANT cannot hold.
pub(crate) fn grant(mem: &mut dyn LocalMem, at: u64, ts: u64, limit: u64) -> Option<Reply> {
    if ts > MAX_TS {
        return None;
    }
    loop {
        let g = mem.read_u64(at);
        let upper = mem.read_u64(at + 8);
        let q = queue(g, upper);
        if ts < queued_ts(g) || q > limit {
            return Some(Reply {
                granted: false,
                full: false,
                grant: g,
                upper,
            });
        }
        let new = grant_word(ts, lower(g).wrapping_add(1));
        if mem.cas(at, g, new) == g {
            return Some(Reply {
                granted: true,
                full: false,
                grant: g,
                upper,
            });
        }
    }
}

/// Serves a `TICKET` request (`tag | grant addr | ts | limit | journal`) into `resp`:
/// `status | GRANT before | UPPER`. `None` for a malformed one (a journal, if any, must be
/// line-aligned, in the region and clear of the lock's words).
pub(crate) fn serve(mem: &mut dyn LocalMem, req: &[u8], resp: &mut Vec<u8>) -> Option<()> {
    let w = |i: usize| -> Option<u64> {
        let b = req.get(8 * i..8 * i + 8)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    };
    let (at, ts, limit, journal) = (w(1)?, w(2)?, w(3)?, w(4)?);
    let fits = |a: u64, len: u64| a.checked_add(len).is_some_and(|end| end <= mem.size());
    if !at.is_multiple_of(8) || !fits(at, 16) {
        return None;
    }
    if journal != 0 {
        let fitting = journal.is_multiple_of(64) && fits(journal, JOURNAL_BYTES);
        if !fitting || (at + 16 > journal && journal + JOURNAL_BYTES > at) {
            return None;
        }
    }
    let r = grant_journaled(mem, at, ts, limit, journal)?;
    let status = match r {
        _ if r.granted => GRANTED,
        _ if r.full => FULL,
        _ => REJECTED,
    };
    for v in [status, r.grant, r.upper] {
        resp.extend_from_slice(&v.to_le_bytes());
    }
    Some(())
}

/// Posts a `TICKET` request for the lock at (`node`, `at`), journaled at `journal` (0: not).
pub(crate) fn request(
    ep: &mut Endpoint,
    node: NodeId,
    at: u64,
    ts: u64,
    limit: u64,
    journal: u64,
) -> OpId {
    let mut req = [0u8; 40];
    for (i, v) in [TICKET, at, ts, limit, journal].into_iter().enumerate() {
        req[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
    }
    ep.rpc(node, &req)
}

/// A `TICKET` request's reply (`None`: malformed, or the memory node refused the request).
pub(crate) fn reply(ep: &Endpoint, id: OpId) -> Option<Reply> {
    let b = ep.bytes(id);
    let w = |i: usize| -> Option<u64> {
        Some(u64::from_le_bytes(
            b.get(8 * i..8 * i + 8)?.try_into().ok()?,
        ))
    };
    let (granted, full) = match w(0)? {
        GRANTED => (true, false),
        REJECTED => (false, false),
        FULL => (false, true),
        _ => return None,
    };
    Some(Reply {
        granted,
        full,
        grant: w(1)?,
        upper: w(2)?,
    })
}

/// Releases the ticket being served on the lock at (`node`, `at`): FAA(UPPER, 1), posted.
pub(crate) fn release(ep: &mut Endpoint, node: NodeId, at: u64) -> OpId {
    ep.faa(node, at + 8, 1)
}

/// Polls of one wait before it gives up, and the back-off bounds. Long: a wait that gives up
/// leaves its ticket to be paid later (it may not be passed on before its turn), which holds
/// its queue meanwhile; a queue ahead of us always drains unless a holder crashed (then
/// recovery releases its tickets: a wait under a lease ends sooner, [`wait_deadline`]), since
/// every wait points to an older transaction. A short limit turned a long convoy into dead
/// queues under zipf 0.99 when a given-up ticket was never released.
const WAIT_LIMIT: u32 = 1 << 20;
const MIN_BACKOFF_NS: u64 = 500;
const MAX_BACKOFF_NS: u64 = 50_000;

/// A ticket held or waited for: the lock's (node, GRANT address), the ticket, and its full
/// number (as its grant journal entry holds it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket {
    pub node: NodeId,
    pub at: u64,
    pub ticket: u16,
    pub full: u64,
    /// The view it was granted in: a ticket on a node that failed since died with its queue
    /// ([`View::kept_since`]), even if the node is back (blank, or rejoined).
    pub view: View,
}

impl Ticket {
    /// Whether its queue still stands in `now` (its node has not failed since the grant):
    /// else nobody waits behind it, and its turn never comes.
    pub fn alive_in(&self, now: View) -> bool {
        now.kept_since(self.view, self.node)
    }
}

/// A wait's `ahead` for a ticket released already, by its holder's own recovery service
/// from its grant journal (`membership`'s adoption of a view, which waits for the dead to be
/// recovered, and their tickets may queue behind one the holder owes): passed on, never to
/// be released again.
pub(crate) const PASSED: u64 = u64::MAX;

/// Why a wait for turns ended before every turn came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitEnd {
    /// Past its deadline or its poll limit.
    TimedOut,
    /// A memory node did not answer a poll (failed, perhaps for good: the coordinator
    /// should probe).
    Unreachable,
}

/// The deadline of a live coordinator's wait for its turns: a quarter of its lease (its
/// recovery service's scan period) when it holds one, so that a coordinator queued behind a
/// crashed one's ticket gets back, between two attempts, to the service that recovers it
/// (every coordinator may be queued so on a hot record); without a lease, the poll limit
/// alone.
pub(crate) fn wait_deadline(ep: &Endpoint) -> u64 {
    match ep.lease() {
        Some((l, _)) => ep.now_ns().saturating_add(l.lease_ns / 4),
        None => u64::MAX,
    }
}

/// Waits until every ticket of `tickets` with something `ahead` is served: sleeps for about
/// `ahead x srtt` (Eq. 3: each transaction ahead costs at least a round trip), then READs the
/// UPPER words of those still waiting, in one batch, again until all are served. `srtt` is the
/// coordinator's smoothed round trip (Eq. 2, alpha 0.9), updated by the polls. `Err` if a
/// memory node failed or the wait went on past the limit or `deadline_ns` (then the
/// tickets' `ahead` say which are served: 0).
pub(crate) async fn wait_turns(
    ep: &mut Endpoint,
    tickets: &mut [(Ticket, u64)],
    srtt: &mut u64,
    polls: &mut Vec<(usize, OpId)>,
    deadline_ns: u64,
) -> Result<(), WaitEnd> {
    for _ in 0..WAIT_LIMIT {
        let waiting = tickets.iter().map(|&(_, a)| a).filter(|&a| a != PASSED);
        let most = waiting.max().unwrap_or(0);
        if most == 0 {
            return Ok(());
        }
        if ep.now_ns() >= deadline_ns {
            return Err(WaitEnd::TimedOut);
        }
        let pause = (most * (*srtt).max(1)).clamp(MIN_BACKOFF_NS, MAX_BACKOFF_NS);
        ep.sleep(pause).await;
        polls.clear();
        for (i, &(t, a)) in tickets.iter().enumerate() {
            if a > 0 && a != PASSED {
                polls.push((i, ep.read(t.node, t.at + 8, 8)));
            }
        }
        let sent = ep.now_ns();
        ep.post().await.map_err(|_| WaitEnd::Unreachable)?;
        let rtt = ep.now_ns().saturating_sub(sent);
        *srtt = (9 * *srtt + rtt) / 10;
        for &(i, id) in polls.iter() {
            let b = ep.bytes(id);
            let word = b.get(..8).and_then(|w| w.try_into().ok());
            let upper = u64::from_le_bytes(word.ok_or(WaitEnd::Unreachable)?);
            let t = tickets[i].0;
            tickets[i].1 = if upper > t.full {
                PASSED
            } else {
                ahead(t.ticket, upper)
            };
        }
    }
    Err(WaitEnd::TimedOut)
}

/// Coordinator `index`'s grant journal (the same address on every memory node): the last
/// [`JOURNAL_BYTES`] of its log slice, if the slice is at least twice that.
pub(crate) fn journal(map: &PoolMap, index: u32) -> Option<u64> {
    let (off, len) = map.log_slice(index)?;
    (len >= 2 * JOURNAL_BYTES).then(|| off + len - JOURNAL_BYTES)
}

/// Recovery: releases every ticket the journals of the dead coordinators `dead` (by index)
/// show granted and unreleased, on every live memory node, each once its turn comes: FAA
/// UPPER when a READ shows `UPPER == T`. Exactly once: at `UPPER == T` only the ticket's
/// owner may FAA, and the dead owner acts no more (the lease's fencing: all its ops, its
/// TICKET requests' grants included, executed before recovery's first READ), nor does an
/// earlier recovery (one leader at a time; a dead leader's ops landed too); after the FAA,
/// `UPPER > T` for good, so a recovery run again finds it released. Waits for the queues
/// ahead (live transactions, or dead coordinators not yet recovered) until `deadline_ns` at
/// most. Per dead coordinator: whether all its tickets are released (else run it again
/// later: the rest of recovery is idempotent), and how many this run released.
pub(crate) async fn release_dead(
    ep: &mut Endpoint,
    map: &PoolMap,
    dead: &[u32],
    deadline_ns: u64,
) -> Result<Vec<(bool, u32)>, FabricError> {
    let mut reads = Vec::new();
    for (k, &d) in dead.iter().enumerate() {
        let Some(j) = journal(map, d) else { continue };
        for n in map.live_nodes() {
            reads.push((k, n, ep.read(n, j, JOURNAL_BYTES as usize)));
        }
    }
    let mut done = vec![(true, 0u32); dead.len()];
    if reads.is_empty() {
        return Ok(done);
    }
    ep.post().await?;
    // (dead coordinator, node, GRANT address, full ticket)
    let mut pending = Vec::new();
    for (k, n, r) in reads {
        let size = ep.node_sizes().get(usize::from(n)).copied().unwrap_or(0);
        for e in 0..JOURNAL_ENTRIES {
            let off = (JOURNAL_HEAD + ENTRY_BYTES * e) as usize;
            let (at, full) = (ep.word(r, off), ep.word(r, off + 8));
            let lock = at.is_multiple_of(8) && at.checked_add(16).is_some_and(|e| e <= size);
            if at != 0 && lock {
                pending.push((k, n, at, full));
            }
        }
    }
    let mut pause = MIN_BACKOFF_NS;
    let mut polls = Vec::new();
    for _ in 0..WAIT_LIMIT {
        polls.clear();
        polls.extend(pending.iter().map(|&(_, n, at, _)| ep.read(n, at + 8, 8)));
        ep.post().await?;
        let uppers: Vec<u64> = polls.iter().map(|&id| ep.word(id, 0)).collect();
        let mut released = 0;
        let mut i = 0;
        pending.retain(|&(k, n, at, full)| {
            let upper = uppers[i];
            i += 1;
            if upper == full {
                release(ep, n, at);
                released += 1;
                done[k].1 += 1;
            }
            upper < full
        });
        if released > 0 {
            ep.post().await?;
        }
        if pending.is_empty() || ep.now_ns() >= deadline_ns {
            break;
        }
        ep.sleep(pause).await;
        pause = (2 * pause).min(MAX_BACKOFF_NS);
    }
    for &(k, ..) in &pending {
        done[k].0 = false;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A region as a memory node's CPU sees it.
    #[derive(Clone)]
    struct Mem(Vec<u8>);

    impl LocalMem for Mem {
        fn size(&self) -> u64 {
            self.0.len() as u64
        }
        fn read(&mut self, addr: u64, buf: &mut [u8]) {
            buf.copy_from_slice(&self.0[addr as usize..addr as usize + buf.len()]);
        }
        fn write(&mut self, addr: u64, data: &[u8]) {
            self.0[addr as usize..addr as usize + data.len()].copy_from_slice(data);
        }
        fn cas(&mut self, addr: u64, expect: u64, new: u64) -> u64 {
            let old = self.read_u64(addr);
            if old == expect {
                self.write_u64(addr, new);
            }
            old
        }
        fn faa(&mut self, addr: u64, add: u64) -> u64 {
            let old = self.read_u64(addr);
            self.write_u64(addr, old.wrapping_add(add));
            old
        }
    }

    fn lock(ts: u64, lower: u16, upper: u64) -> Mem {
        let mut m = Mem(vec![0; 64]);
        m.write_u64(16, grant_word(ts, lower));
        m.write_u64(24, upper);
        m
    }

    #[test]
    fn tickets_go_out_in_order_and_the_queue_counts_the_holder() {
        let mut m = lock(0, 0, 0);
        for (ts, want) in [(5, 0u16), (6, 1), (6, 2)] {
            let r = grant(&mut m, 16, ts, HOT_WATERMARK).unwrap();
            assert!(r.granted);
            assert_eq!(r.ticket(), want);
            assert_eq!(r.queue(), u64::from(want));
        }
        let g = m.read_u64(16);
        assert_eq!((lower(g), queued_ts(g)), (3, 6));
        // Two releases: the third ticket is served.
        m.write_u64(24, 2);
        assert_eq!(ahead(2, m.read_u64(24)), 0);
        assert_eq!(ahead(2, 1), 1);
    }

    #[test]
    fn the_grant_rule_rejects_older_timestamps_and_long_queues() {
        // R1: a timestamp below the largest granted, even on an empty queue.
        let mut m = lock(9, 4, 4);
        let r = grant(&mut m, 16, 8, HOT_WATERMARK).unwrap();
        assert!(!r.granted);
        assert_eq!(
            m.read_u64(16),
            grant_word(9, 4),
            "a rejection changes nothing"
        );
        // Equal is granted (the same transaction's other request).
        assert!(grant(&mut m, 16, 9, HOT_WATERMARK).unwrap().granted);
        // R2: an OCC request is granted with 3 queued (it becomes the 4th), not with 4.
        let mut m = lock(1, 3, 0);
        assert!(grant(&mut m, 16, 2, COLD_WATERMARK).unwrap().granted);
        let r = grant(&mut m, 16, 2, COLD_WATERMARK).unwrap();
        assert!(!r.granted);
        assert_eq!(r.queue(), 4);
        // R3: any request with more than 10 queued.
        let mut m = lock(1, 11, 0);
        assert!(!grant(&mut m, 16, 2, HOT_WATERMARK).unwrap().granted);
        let mut m = lock(1, 10, 0);
        assert!(grant(&mut m, 16, 2, HOT_WATERMARK).unwrap().granted);
    }

    #[test]
    fn tickets_wrap_around_modulo_2_16() {
        // upper's FAAs run past 2^16 (carrying into its high bits); lower wraps to 0.
        let mut m = lock(1, u16::MAX, (3 << 16) | u64::from(u16::MAX - 1));
        let r = grant(&mut m, 16, 1, HOT_WATERMARK).unwrap();
        assert!(r.granted);
        assert_eq!((r.ticket(), r.queue()), (u16::MAX, 1));
        assert_eq!(lower(m.read_u64(16)), 0);
        let r = grant(&mut m, 16, 1, HOT_WATERMARK).unwrap();
        assert_eq!((r.ticket(), r.queue()), (0, 2));
        assert_eq!(ahead(0, (3 << 16) | u64::from(u16::MAX - 1)), 2);
        assert_eq!(ahead(0, 4 << 16), 0);
    }

    #[test]
    fn requests_round_trip_and_bad_ones_are_refused() {
        let mut m = lock(0, 0, 0);
        let mut resp = Vec::new();
        let req: Vec<u8> = [TICKET, 16, 7, 3, 0]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        serve(&mut m, &req, &mut resp).unwrap();
        let w: Vec<u64> = resp
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(w, vec![GRANTED, grant_word(0, 0), 0]);
        let mut big = Mem(vec![0; 4096]);
        for bad in [
            [TICKET, 12, 7, 3, 0],
            [TICKET, 4088, 7, 3, 0],
            [TICKET, 16, MAX_TS + 1, 3, 0],
            // Journals: misaligned, past the region, over the lock's words.
            [TICKET, 16, 7, 3, 2048 + 8],
            [TICKET, 16, 7, 3, 4096 - 64],
        ]
        .iter()
        .map(|b| b.to_vec())
        .chain([vec![TICKET, 1024, 7, 3, 0x3c0]])
        {
            let req: Vec<u8> = bad.iter().flat_map(|w| w.to_le_bytes()).collect();
            assert!(serve(&mut big, &req, &mut resp).is_none(), "{bad:?}");
        }
        assert!(serve(&mut m, &req[..32], &mut resp).is_none());
        // A journal address past the end of any region, and a "journal" whose lock word holds
        // something else (a bad address into a table): refused, no panic, no spin.
        big.write_u64(2048, 0xdead);
        for journal in [u64::MAX - 63, 2048] {
            let req: Vec<u8> = [TICKET, 16, 7, 3, journal]
                .iter()
                .flat_map(|w| w.to_le_bytes())
                .collect();
            assert!(serve(&mut big, &req, &mut resp).is_none(), "{journal}");
        }
        assert_eq!(big.read_u64(16), 0, "nothing granted");
    }

    /// The largest timestamp GRANT holds is 2^48 - 1, and it reads back as granted; 2^48
    /// would lose its top bit to the shift, and is refused.
    #[test]
    fn the_largest_timestamp_fits_its_word_and_the_next_is_refused() {
        assert_eq!(MAX_TS, (1 << 48) - 1);
        let mut m = lock(0, 0, 0);
        let r = grant(&mut m, 16, (1 << 48) - 1, HOT_WATERMARK).unwrap();
        assert!(r.granted);
        assert_eq!(queued_ts(m.read_u64(16)), (1 << 48) - 1);
        assert_eq!(lower(m.read_u64(16)), 1);
        assert!(grant(&mut m, 16, 1 << 48, HOT_WATERMARK).is_none());
    }

    /// A memory whose journal lock word at `journal` reads held for the first `busy` CASes
    /// on it, as while another handler core journals its grant.
    struct Busy {
        mem: Mem,
        journal: u64,
        busy: u32,
    }

    impl LocalMem for Busy {
        fn size(&self) -> u64 {
            self.mem.size()
        }
        fn read(&mut self, addr: u64, buf: &mut [u8]) {
            self.mem.read(addr, buf)
        }
        fn write(&mut self, addr: u64, data: &[u8]) {
            self.mem.write(addr, data)
        }
        fn cas(&mut self, addr: u64, expect: u64, new: u64) -> u64 {
            if addr == self.journal && self.busy > 0 {
                self.busy -= 1;
                return JOURNAL_HELD;
            }
            self.mem.cas(addr, expect, new)
        }
        fn faa(&mut self, addr: u64, add: u64) -> u64 {
            self.mem.faa(addr, add)
        }
    }

    /// A journal held by another core is waited for (a grant holds it for a few accesses),
    /// up to `JOURNAL_SPINS` tries; one that stays held longer is no journal.
    #[test]
    fn a_journal_held_by_another_core_is_waited_for_up_to_a_bound() {
        let j = 2048;
        let busy = |busy| Busy {
            mem: Mem(vec![0; 4096]),
            journal: j,
            busy,
        };
        let mut m = busy(1000);
        let r = grant_journaled(&mut m, 16, 1, HOT_WATERMARK, j).unwrap();
        assert!(r.granted);
        assert_eq!(entry(&mut m.mem, j, 0), (16, 0));
        let mut m = busy(JOURNAL_SPINS);
        assert!(grant_journaled(&mut m, 16, 1, HOT_WATERMARK, j).is_some());
        let mut m = busy(JOURNAL_SPINS + 1);
        assert!(grant_journaled(&mut m, 16, 1, HOT_WATERMARK, j).is_none());
        assert_eq!(m.mem.read_u64(16), 0, "nothing granted");
    }

    /// A journal entry naming no lock of the region (misaligned, or past its end: garbage in
    /// a slot never written by a grant) reads as released, and its slot is taken first.
    #[test]
    fn an_entry_naming_no_lock_is_a_free_slot() {
        let j = 2048;
        for garbage in [2049, 4096 - 8, u64::MAX - 7] {
            let mut m = Mem(vec![0; 4096]);
            let e0 = j + JOURNAL_HEAD;
            m.write_u64(e0, garbage);
            // Were it read as a lock, its UPPER would never pass this ticket.
            m.write_u64(e0 + 8, u64::MAX);
            let r = grant_journaled(&mut m, 16, 1, HOT_WATERMARK, j).unwrap();
            assert!(r.granted, "{garbage}");
            assert_eq!(entry(&mut m, j, 0), (16, 0), "{garbage}");
        }
    }

    /// A slot whose ticket is not released is passed over, wherever the search starts; a
    /// journal with none free grants nothing and says so, with the lock's words.
    #[test]
    fn a_busy_slot_is_passed_over_and_a_full_journal_says_so() {
        let j = 2048;
        let mut m = Mem(vec![0; 4096]);
        // A lock at 32 whose UPPER (0) has not passed ticket 5: entry 0 is busy.
        let busy = |m: &mut Mem, e: u64| {
            let at = j + JOURNAL_HEAD + ENTRY_BYTES * e;
            m.write_u64(at, 32);
            m.write_u64(at + 8, 5);
        };
        busy(&mut m, 0);
        let r = grant_journaled(&mut m, 16, 1, HOT_WATERMARK, j).unwrap();
        assert!(r.granted && !r.full);
        assert_eq!(entry(&mut m, j, 1), (16, 0));
        assert_eq!(entry(&mut m, j, 0), (32, 5), "the busy slot is kept");
        // Every slot busy: not granted, not rejected, and the reply carries GRANT and UPPER.
        for e in 0..JOURNAL_ENTRIES {
            busy(&mut m, e);
        }
        m.write_u64(24, 7 << 16 | 1);
        let before = m.read_u64(16);
        let r = grant_journaled(&mut m, 16, 1, HOT_WATERMARK, j).unwrap();
        assert!(!r.granted && r.full);
        assert_eq!((r.grant, r.upper), (before, 7 << 16 | 1));
        assert_eq!(m.read_u64(16), before, "nothing granted");
        assert_eq!(m.read_u64(j), 0, "the journal's lock word is free again");
    }

    /// The search for a free slot starts at the journal's hint, the slot after the last one
    /// taken, kept in the journal's head; nothing outside the journal is written (the words
    /// before it are the requester's undo log).
    #[test]
    fn the_next_slot_is_hinted_in_the_journals_head_and_nothing_else_is_written() {
        let j = 2048;
        let mut m = Mem(vec![0; 4096]);
        for w in (j - 64..j).step_by(8) {
            m.write_u64(w, 0x5a5a_5a5a_5a5a_5a5a);
        }
        m.write_u64(j + 8, 5);
        let r = grant_journaled(&mut m, 16, 1, HOT_WATERMARK, j).unwrap();
        assert!(r.granted);
        assert_eq!(entry(&mut m, j, 5), (16, 0));
        assert_eq!(m.read_u64(j + 8), 6);
        // The last slot's successor is the first.
        m.write_u64(j + 8, JOURNAL_ENTRIES - 1);
        assert!(
            grant_journaled(&mut m, 16, 1, HOT_WATERMARK, j)
                .unwrap()
                .granted
        );
        assert_eq!(entry(&mut m, j, JOURNAL_ENTRIES - 1), (16, 1));
        assert_eq!(m.read_u64(j + 8), 0);
        for w in (j - 64..j).step_by(8) {
            assert_eq!(m.read_u64(w), 0x5a5a_5a5a_5a5a_5a5a, "{w}");
        }
    }

    /// A request whose lock words lie beside the journal, just before it or just after, is
    /// served; one whose words overlap the journal is refused (a grant would journal into its
    /// own lock, or the lock's CAS land in a journal entry).
    #[test]
    fn a_lock_beside_the_journal_is_served_and_one_inside_it_refused() {
        let j = 1024;
        let mut resp = Vec::new();
        for (at, served) in [
            (j - 16, true),
            (j + JOURNAL_BYTES, true),
            (j - 8, false),
            (j + 8, false),
            (j + JOURNAL_BYTES - 8, false),
        ] {
            let mut m = Mem(vec![0; 4096]);
            let req: Vec<u8> = [TICKET, at, 7, 3, j]
                .iter()
                .flat_map(|w| w.to_le_bytes())
                .collect();
            assert_eq!(serve(&mut m, &req, &mut resp).is_some(), served, "{at}");
        }
    }

    /// Journal entry `e` of the journal at `j`: (GRANT address, full ticket).
    fn entry(m: &mut Mem, j: u64, e: u64) -> (u64, u64) {
        let at = j + JOURNAL_HEAD + ENTRY_BYTES * e;
        (m.read_u64(at), m.read_u64(at + 8))
    }

    #[test]
    fn grants_are_journaled_with_their_full_ticket_across_the_wrap() {
        let j = 2048;
        let mut m = Mem(vec![0; 4096]);
        // upper has counted 3 x 2^16 + 65534 releases; lower wrapped with it.
        let upper = (3 << 16) | u64::from(u16::MAX - 1);
        m.write_u64(16, grant_word(1, u16::MAX));
        m.write_u64(24, upper);
        let r = grant_journaled(&mut m, 16, 1, HOT_WATERMARK, j).unwrap();
        assert!(r.granted && !r.full);
        assert_eq!(r.full_ticket(), upper + 1);
        assert_eq!(entry(&mut m, j, 0), (16, upper + 1));
        let r = grant_journaled(&mut m, 16, 1, HOT_WATERMARK, j).unwrap();
        assert_eq!(lower(r.grant), 0, "lower wrapped");
        assert_eq!(entry(&mut m, j, 1), (16, upper + 2));
        // A rejection journals nothing; the lock word is free again.
        assert!(
            !grant_journaled(&mut m, 16, 0, HOT_WATERMARK, j)
                .unwrap()
                .granted
        );
        assert_eq!(entry(&mut m, j, 2), (0, 0));
        assert_eq!(m.read_u64(j), 0);
    }

    #[test]
    fn a_journal_full_of_unreleased_tickets_grants_nothing_until_one_is_released() {
        let j = 2048;
        let mut m = Mem(vec![0; 4096]);
        let n = JOURNAL_ENTRIES;
        for t in 0..n {
            let r = grant_journaled(&mut m, 16, 1, u64::MAX, j).unwrap();
            assert!(r.granted, "ticket {t}");
            assert_eq!(r.full_ticket(), t);
        }
        let before = m.read_u64(16);
        let r = grant_journaled(&mut m, 16, 1, u64::MAX, j).unwrap();
        assert!(r.full && !r.granted);
        assert_eq!(m.read_u64(16), before, "nothing granted");
        // Ticket 0 released (UPPER 1): its slot takes the next grant, ticket n.
        m.write_u64(24, 1);
        let r = grant_journaled(&mut m, 16, 1, u64::MAX, j).unwrap();
        assert!(r.granted);
        assert_eq!(entry(&mut m, j, 0), (16, n));
        assert!(
            grant_journaled(&mut m, 16, 1, u64::MAX, j).unwrap().full,
            "the others are all still held"
        );
    }

    /// The memory as a grant (a handler on the memory node's CPU) sees it while a NIC executes
    /// a release's FAA on `faa_at`: the NIC reads the word before the handler's access number
    /// `r` and writes its sum back before access number `w` (the sim's `lose_write_under_faa`:
    /// a NIC atomic is a read-modify-write that a CPU store inside it does not survive; with
    /// `r == w` the FAA is atomic there).
    struct Racing {
        mem: Mem,
        faa_at: u64,
        add: u64,
        r: usize,
        w: usize,
        step: usize,
        held: Option<u64>,
    }

    impl Racing {
        fn tick(&mut self) {
            if self.step == self.r {
                self.held = Some(self.mem.read_u64(self.faa_at).wrapping_add(self.add));
            }
            if self.step == self.w {
                let v = self.held.take().expect("read before write-back");
                self.mem.write_u64(self.faa_at, v);
            }
            self.step += 1;
        }
    }

    impl LocalMem for Racing {
        fn size(&self) -> u64 {
            self.mem.size()
        }
        fn read(&mut self, addr: u64, buf: &mut [u8]) {
            self.tick();
            self.mem.read(addr, buf)
        }
        fn write(&mut self, addr: u64, data: &[u8]) {
            self.tick();
            self.mem.write(addr, data)
        }
        fn cas(&mut self, addr: u64, expect: u64, new: u64) -> u64 {
            self.tick();
            self.mem.cas(addr, expect, new)
        }
        fn faa(&mut self, addr: u64, add: u64) -> u64 {
            self.tick();
            self.mem.faa(addr, add)
        }
    }

    /// The paper's layout (Fig. 14): `lower` u16 and `upper` u16 in one word at `at`,
    /// `queued_ts` in the next; the grant as the authors' handler does it (a check, then
    /// `queued_ts` and a store of `lower + 1`). A release is FAA(`at`, 1 << 16).
    fn grant_packed(mem: &mut dyn LocalMem, at: u64, ts: u64, limit: u64) -> bool {
        let word = mem.read_u64(at);
        let (lower, upper) = (word as u16, (word >> 16) as u16);
        if ts < mem.read_u64(at + 8) || u64::from(lower.wrapping_sub(upper)) > limit {
            return false;
        }
        mem.write_u64(at + 8, ts);
        mem.write(at, &lower.wrapping_add(1).to_le_bytes());
        true
    }

    /// Every interleaving of one grant (`run`, which makes `steps` memory accesses) with one
    /// release's FAA: whether the lock ends with the grant and the release both counted
    /// (`counted(mem)`), for each.
    fn interleavings(
        start: &Mem,
        faa: (u64, u64),
        steps: usize,
        run: impl Fn(&mut Racing),
        counted: impl Fn(&mut Mem) -> bool,
    ) -> (usize, usize) {
        let (mut ok, mut lost) = (0, 0);
        for r in 0..=steps {
            for w in r..=steps {
                let mut m = Racing {
                    mem: start.clone(),
                    faa_at: faa.0,
                    add: faa.1,
                    r,
                    w,
                    step: 0,
                    held: None,
                };
                run(&mut m);
                // The FAA's steps past the handler's last access.
                while m.step <= w {
                    m.tick();
                }
                if counted(&mut m.mem) {
                    ok += 1;
                } else {
                    lost += 1;
                }
            }
        }
        (ok, lost)
    }

    #[test]
    fn a_grant_racing_a_release_loses_nothing_on_split_words_but_does_on_the_papers_word() {
        // One holder (ticket 4 being served, lower 5); a new request (ts 9) races the
        // holder's release.
        let split = lock(7, 5, 4);
        let (ok, lost) = interleavings(
            &split,
            (24, 1),
            3, // GRANT read, UPPER read, CAS
            |m| assert!(grant(m, 16, 9, HOT_WATERMARK).unwrap().granted),
            |m| m.read_u64(16) == grant_word(9, 6) && m.read_u64(24) == 5,
        );
        assert_eq!(
            (ok, lost),
            (10, 0),
            "split words: every interleaving counts both"
        );

        let mut packed = Mem(vec![0; 64]);
        packed.write_u64(16, (4 << 16) | 5);
        packed.write_u64(24, 7);
        let (ok, lost) = interleavings(
            &packed,
            (16, 1 << 16),
            4, // word read, queued_ts read, queued_ts store, lower store
            |m| assert!(grant_packed(m, 16, 9, HOT_WATERMARK)),
            |m| m.read_u64(16) == (5 << 16) | 6,
        );
        assert!(
            ok > 0 && lost > 0,
            "paper's word: {ok} counted, {lost} lost"
        );
        // The FAA in flight over the `lower` store writes back the old `lower`: the next
        // request is handed the ticket this one got.
        let mut m = Racing {
            mem: packed.clone(),
            faa_at: 16,
            add: 1 << 16,
            r: 3,
            w: 4,
            step: 0,
            held: None,
        };
        assert!(grant_packed(&mut m, 16, 9, HOT_WATERMARK));
        m.tick();
        assert_eq!(
            m.mem.read_u64(16),
            (5 << 16) | 5,
            "ticket 5 will go out twice"
        );
    }
}
