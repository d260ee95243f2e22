//! Scythe's RDMA-friendly timestamp oracle, batched per compute node (the paper's *TSO
//! group*, section 4.5; the Scythe digest, section 6): the coordinators of one compute node
//! that want a timestamp at about the same time join a group; the first is its **leader**,
//! which reserves as many timestamps as there are requests pending with one FAA on the pool's
//! oracle word, then takes the first; the others take the rest. A coordinator that finds a
//! reserved range not used up takes from it without a round trip.
//!
//! The order is the one a correct implementation needs (the paper's text has it backwards):
//! FAA first (`base = FAA(counter, n)`: `base + 1 ..= base + n` now belong to the group),
//! hand out after. Timestamps are unique across compute nodes (FAA reserves disjoint ranges)
//! and strictly increasing within one (a range is reserved only once the last is used up, and
//! one leader at a time reserves). They are **not** ordered in real time across compute nodes:
//! a coordinator may take a value from a range reserved before another node's transaction
//! committed with a larger one. Scythe needs uniqueness and a total order (its grant rule and
//! its waits); its serializability comes from its locks. Motor's snapshots need real-time
//! order, so Motor does not use this.

use std::sync::Mutex;

/// One compute node's TSO group, shared by its coordinators.
#[derive(Debug, Default)]
pub struct TsoGroup {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The reserved range not handed out yet: `next .. end`.
    next: u64,
    end: u64,
    /// Requests waiting for a timestamp (the leader's included).
    pending: u64,
    /// A leader's FAA is in flight.
    leading: bool,
}

/// What a request does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Take {
    /// Its timestamp.
    Ts(u64),
    /// Lead: reserve this many with one FAA, then [`TsoGroup::reserved`].
    Lead(u64),
    /// A leader is reserving: wait a little and ask again (`joined` from now on).
    Wait,
}

impl TsoGroup {
    pub fn new() -> TsoGroup {
        TsoGroup::default()
    }

    /// A request for a timestamp; `joined`: this request waited already (it is counted in
    /// the pending ones).
    pub(crate) fn take(&self, joined: bool) -> Take {
        let mut s = self.state.lock().expect("no panic holds it");
        if !joined {
            s.pending += 1;
        }
        if s.next < s.end {
            let ts = s.next;
            s.next += 1;
            s.pending -= 1;
            return Take::Ts(ts);
        }
        if s.leading {
            return Take::Wait;
        }
        s.leading = true;
        Take::Lead(s.pending)
    }

    /// The leader's FAA of `n` found `base`: the group holds `base + 1 ..= base + n`; the
    /// leader's timestamp is the first.
    pub(crate) fn reserved(&self, base: u64, n: u64) -> u64 {
        let mut s = self.state.lock().expect("no panic holds it");
        s.leading = false;
        s.pending -= 1;
        s.next = base + 2;
        s.end = base + 1 + n;
        base + 1
    }

    /// The leader's FAA failed: its request gives up; another may lead.
    pub(crate) fn failed(&self) {
        let mut s = self.state.lock().expect("no panic holds it");
        s.leading = false;
        s.pending -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leader_reserves_for_every_pending_request_and_the_rest_take_without_a_round_trip() {
        let g = TsoGroup::new();
        let mut counter = 0u64;
        // Three requests arrive together: the first leads; the others wait.
        assert_eq!(g.take(false), Take::Lead(1));
        assert_eq!(g.take(false), Take::Wait);
        assert_eq!(g.take(false), Take::Wait);
        // (The leader counted itself alone: the two joined while its FAA was posted, so the
        // next leader reserves for them.)
        let base = counter;
        counter += 1;
        assert_eq!(g.reserved(base, 1), 1);
        assert_eq!(g.take(true), Take::Lead(2));
        assert_eq!(g.take(true), Take::Wait);
        let base = counter;
        counter += 2;
        assert_eq!(g.reserved(base, 2), 2);
        assert_eq!(g.take(true), Take::Ts(3));
        // Used up: the next request leads again, for itself.
        assert_eq!(g.take(false), Take::Lead(1));
        g.failed();
        assert_eq!(g.take(false), Take::Lead(1));
        assert_eq!(g.reserved(counter, 1), counter + 1);
    }

    /// Two compute nodes' groups on one counter, requests interleaved at random (a leader's
    /// FAA completing at any later step): every timestamp unique, and each node's strictly
    /// increasing in the order it handed them out.
    #[test]
    fn timestamps_are_unique_and_increase_per_node() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let groups = [TsoGroup::new(), TsoGroup::new()];
        let mut counter = 0u64;
        // Per node: requests waiting (joined), a leader's FAA in flight (n, base), handed out.
        let mut waiting = [0u64; 2];
        let mut flight: [Option<(u64, u64)>; 2] = [None, None];
        let mut out: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
        for _ in 0..20_000 {
            let g = rnd(2) as usize;
            match rnd(3) {
                0 => match groups[g].take(false) {
                    Take::Ts(t) => out[g].push(t),
                    Take::Lead(n) => {
                        flight[g] = Some((n, counter));
                        counter += n;
                    }
                    Take::Wait => waiting[g] += 1,
                },
                1 if waiting[g] > 0 => match groups[g].take(true) {
                    Take::Ts(t) => {
                        waiting[g] -= 1;
                        out[g].push(t);
                    }
                    Take::Lead(n) => {
                        waiting[g] -= 1;
                        flight[g] = Some((n, counter));
                        counter += n;
                    }
                    Take::Wait => {}
                },
                _ => {
                    if let Some((n, base)) = flight[g].take() {
                        out[g].push(groups[g].reserved(base, n));
                    }
                }
            }
        }
        let mut all: Vec<u64> = out.iter().flatten().copied().collect();
        let n = all.len();
        assert!(n > 5_000, "{n}");
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "a timestamp handed out twice");
        for o in &out {
            assert!(o.windows(2).all(|w| w[0] < w[1]), "not increasing");
        }
        // Few FAAs for many timestamps.
        assert!(counter <= *all.last().unwrap() + 64);
    }
}
