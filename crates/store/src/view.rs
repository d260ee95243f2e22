//! The pool's view: which memory nodes have failed, and which rejoin (issue #23, memory-node
//! failover and re-replication).
//!
//! One word on memory node 0 ([`crate::layout::VIEW_OFF`], CAS only): a view number and, per
//! memory node, one of four states: *live*, *failed*, *joining* (a replacement came back
//! blank and is being re-replicated: every commit writes it as a backup, nobody reads it or
//! promotes it) and *rejoined* (a replacement that became a full replica again). A view names
//! no primary: each table's *readable* replicas in view `v` are its catalog's replicas that
//! are live or rejoined, the live ones first (each group in rank order), so a rejoined node
//! is a backup until every replica ranked before it fails; then come its joining replicas,
//! written but never read. The first readable replica is the primary (a backup is promoted by
//! the view alone, and every coordinator that knows the view computes the same promotion). A
//! table with no readable replica is *lost*: refused, never served stale (a joiner does not
//! count: its copy may be incomplete).
//!
//! The view number orders the views (each change adds one); the states move only
//! live/rejoined -> failed -> joining -> rejoined, and joining -> failed.
//!
//! Memory node 0 holds the view and the membership area, so its failure is not survived (as
//! FaRM's configuration manager needs its ZooKeeper): the view never excludes it.

use dtxn_fabric::NodeId;

/// Memory nodes a view can name (node ids 0..24: two bits each in the word's low 48 bits).
pub const MAX_VIEW_NODES: usize = 24;

/// A view of the pool: its number and the memory nodes' states (three disjoint sets; a node
/// in none is live).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct View {
    /// 0 for the pool as formatted; each change adds one.
    pub number: u16,
    /// Bit `n`: memory node `n` has failed.
    pub failed: u64,
    /// Bit `n`: memory node `n` is joining (written, not read).
    pub joining: u64,
    /// Bit `n`: memory node `n` rejoined (a full replica, ranked after the live ones).
    pub rejoined: u64,
}

const FAILED: u64 = 1;
const JOINING: u64 = 2;
const REJOINED: u64 = 3;

impl View {
    /// The control chain of a pool whose first `k` memory nodes hold the control words, in
    /// this view, head first: those that never failed (a failed one that rejoined is a data
    /// replica only: its control words are blank). Empty: every member failed.
    pub fn control_chain(self, k: u8) -> Vec<NodeId> {
        (0..NodeId::from(k))
            .filter(|&n| !self.is_failed(n) && !self.is_joining(n) && !self.is_rejoined(n))
            .collect()
    }

    /// The view word: the number in the high 16 bits, two bits of state per node in the low 48.
    pub fn word(self) -> u64 {
        let mut w = u64::from(self.number) << (2 * MAX_VIEW_NODES);
        for n in 0..MAX_VIEW_NODES {
            let state = if self.failed >> n & 1 != 0 {
                FAILED
            } else if self.joining >> n & 1 != 0 {
                JOINING
            } else if self.rejoined >> n & 1 != 0 {
                REJOINED
            } else {
                0
            };
            w |= state << (2 * n);
        }
        w
    }

    pub fn parse(word: u64) -> View {
        let mut v = View {
            number: (word >> (2 * MAX_VIEW_NODES)) as u16,
            ..View::default()
        };
        for n in 0..MAX_VIEW_NODES {
            match word >> (2 * n) & 3 {
                FAILED => v.failed |= 1 << n,
                JOINING => v.joining |= 1 << n,
                REJOINED => v.rejoined |= 1 << n,
                _ => {}
            }
        }
        v
    }

    fn has(set: u64, node: NodeId) -> bool {
        (node as usize) < MAX_VIEW_NODES && set & (1 << node) != 0
    }

    pub fn is_failed(self, node: NodeId) -> bool {
        View::has(self.failed, node)
    }

    pub fn is_joining(self, node: NodeId) -> bool {
        View::has(self.joining, node)
    }

    pub fn is_rejoined(self, node: NodeId) -> bool {
        View::has(self.rejoined, node)
    }

    /// Whether memory node `node` holds in this view what it held in view `then`: readable
    /// (live or rejoined) in both, in the same state. A node leaves a state only by failing,
    /// which loses its contents (its replacement comes back blank), so a node whose state
    /// changed is another node: what was granted or queued on it then (Scythe's tickets)
    /// died with the failure. One history it cannot tell: a node rejoined in `then` that
    /// failed and rejoined again since (three view changes and a copy).
    pub fn kept_since(self, then: View, node: NodeId) -> bool {
        let state = |v: View| (v.is_failed(node), v.is_joining(node), v.is_rejoined(node));
        let readable = !self.is_failed(node) && !self.is_joining(node);
        readable && state(self) == state(then)
    }

    /// The next view: this one with `nodes` failed too (`None` if they already were, or if
    /// one is beyond what a view can name). A joining or rejoined node may fail, and so may
    /// a member of the control chain: a view whose [`View::control_chain`] is empty has lost
    /// the pool's control words, and is for the caller to refuse.
    pub fn without(self, nodes: &[NodeId]) -> Option<View> {
        let mut failed = self.failed;
        for &n in nodes {
            if n as usize >= MAX_VIEW_NODES {
                return None;
            }
            failed |= 1 << n;
        }
        (failed != self.failed).then_some(View {
            number: self.number.wrapping_add(1),
            failed,
            joining: self.joining & !failed,
            rejoined: self.rejoined & !failed,
        })
    }

    /// The next view: failed node `node` joins as a replacement (`None` unless it failed).
    pub fn joining(self, node: NodeId) -> Option<View> {
        self.is_failed(node).then_some(View {
            number: self.number.wrapping_add(1),
            failed: self.failed & !(1 << node),
            joining: self.joining | 1 << node,
            rejoined: self.rejoined,
        })
    }

    /// The next view: joining node `node` is a full replica (`None` unless it was joining).
    pub fn joined(self, node: NodeId) -> Option<View> {
        self.is_joining(node).then_some(View {
            number: self.number.wrapping_add(1),
            failed: self.failed,
            joining: self.joining & !(1 << node),
            rejoined: self.rejoined | 1 << node,
        })
    }

    /// The next view: every joining node is a full replica (`None` if none was joining).
    pub fn all_joined(self) -> Option<View> {
        (self.joining != 0).then_some(View {
            number: self.number.wrapping_add(1),
            failed: self.failed,
            joining: 0,
            rejoined: self.rejoined | self.joining,
        })
    }

    /// The failed nodes, ascending.
    pub fn failed_nodes(self) -> impl Iterator<Item = NodeId> {
        (0..MAX_VIEW_NODES as NodeId).filter(move |&n| self.is_failed(n))
    }

    /// The joining nodes, ascending.
    pub fn joining_nodes(self) -> impl Iterator<Item = NodeId> {
        (0..MAX_VIEW_NODES as NodeId).filter(move |&n| self.is_joining(n))
    }

    /// `replicas` (by rank) that can be read: live ones, then rejoined ones. The first is the
    /// primary.
    pub fn live(self, replicas: &[NodeId]) -> Vec<NodeId> {
        let ok = |&n: &NodeId| !self.is_failed(n) && !self.is_joining(n);
        let mut live: Vec<NodeId> = replicas
            .iter()
            .copied()
            .filter(|n| ok(n) && !self.is_rejoined(*n))
            .collect();
        live.extend(
            replicas
                .iter()
                .copied()
                .filter(|n| ok(n) && self.is_rejoined(*n)),
        );
        live
    }

    /// `replicas` that are joining, in rank order (written by commits, never read).
    pub fn joiners(self, replicas: &[NodeId]) -> Vec<NodeId> {
        replicas
            .iter()
            .copied()
            .filter(|&n| self.is_joining(n))
            .collect()
    }
}

impl std::fmt::Display for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |set: u64| -> Vec<String> {
            (0..MAX_VIEW_NODES as NodeId)
                .filter(|&n| View::has(set, n))
                .map(|n| n.to_string())
                .collect()
        };
        let mut parts = Vec::new();
        for (set, what) in [
            (self.failed, "failed"),
            (self.joining, "joining"),
            (self.rejoined, "rejoined"),
        ] {
            let l = list(set);
            if !l.is_empty() {
                parts.push(format!(
                    "memory node{} {} {what}",
                    if l.len() > 1 { "s" } else { "" },
                    l.join(", ")
                ));
            }
        }
        if parts.is_empty() {
            write!(f, "view {} (every memory node live)", self.number)
        } else {
            write!(f, "view {} ({})", self.number, parts.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_word_round_trips(number: u16, a in 0u64..(1 << 24), b in 0u64..(1 << 24),
                                c in 0u64..(1 << 24)) {
            // Three disjoint sets.
            let (failed, joining, rejoined) = (a, b & !a, c & !a & !b);
            let v = View { number, failed, joining, rejoined };
            prop_assert_eq!(View::parse(v.word()), v);
        }
    }

    /// A node that failed since holds nothing of before, even once back: failed, joining or
    /// rejoined now where it was live; nodes that did not fail keep what they held, whatever
    /// else changed.
    #[test]
    fn a_node_keeps_its_contents_only_while_it_does_not_fail() {
        let v0 = View::default();
        let failed = v0.without(&[1]).unwrap();
        let joining = failed.joining(1).unwrap();
        let rejoined = joining.joined(1).unwrap();
        let other = rejoined.without(&[2]).unwrap();
        for v in [v0, failed, joining, rejoined, other] {
            assert!(v.kept_since(v0, 0), "{v}: node 0 never fails");
        }
        for v in [failed, joining, rejoined, other] {
            assert!(!v.kept_since(v0, 1), "{v}: node 1 failed since view 0");
        }
        assert!(!joining.kept_since(joining, 1), "a joiner is not read");
        assert!(other.kept_since(rejoined, 1), "another node failed");
        assert!(!other.kept_since(rejoined, 2));
        assert!(
            rejoined
                .without(&[1])
                .unwrap()
                .joining(1)
                .unwrap()
                .joined(1)
                .unwrap()
                .kept_since(rejoined, 1),
            "the history it cannot tell"
        );
    }

    #[test]
    fn a_view_only_grows_and_never_drops_node_0() {
        let v0 = View::default();
        let v1 = v0.without(&[2]).unwrap();
        assert_eq!((v1.number, v1.failed), (1, 0b100));
        assert_eq!(v1.without(&[2]), None, "already failed");
        let lost = v1.without(&[0]).unwrap();
        assert_eq!(
            lost.control_chain(1),
            Vec::<NodeId>::new(),
            "node 0 held the view alone"
        );
        assert_eq!(lost.control_chain(2), [1]);
        assert_eq!(v1.control_chain(3), [0, 1], "node 2 failed");
        assert_eq!(
            v1.joining(2).unwrap().control_chain(3),
            [0, 1],
            "a joiner is no member"
        );
        assert_eq!(v1.without(&[24]), None);
        let v2 = v1.without(&[1, 2]).unwrap();
        assert_eq!((v2.number, v2.failed), (2, 0b110));
        assert_eq!(v2.live(&[2, 0, 1, 3]), [0, 3]);
        assert_eq!(v2.failed_nodes().collect::<Vec<_>>(), [1, 2]);
        assert_eq!(v2.to_string(), "view 2 (memory nodes 1, 2 failed)");
    }

    #[test]
    fn a_joiner_is_written_not_read_and_rejoins_last() {
        let v1 = View::default().without(&[1]).unwrap();
        assert_eq!(v1.joined(1), None, "not joining");
        assert_eq!(View::default().joining(1), None, "not failed");
        let v2 = v1.joining(1).unwrap();
        assert_eq!(v2.number, 2);
        assert!(!v2.is_failed(1) && v2.is_joining(1));
        assert_eq!(v2.live(&[1, 2]), [2]);
        assert_eq!(v2.joiners(&[1, 2]), [1]);
        assert_eq!(
            v2.live(&[1]),
            Vec::<NodeId>::new(),
            "a joiner alone is no replica"
        );
        assert_eq!(v2.to_string(), "view 2 (memory node 1 joining)");
        let v3 = v2.joined(1).unwrap();
        assert_eq!(v2.all_joined(), Some(v3));
        assert_eq!(v3.all_joined(), None);
        assert_eq!(v3.live(&[1, 2, 3]), [2, 3, 1], "a rejoined node ranks last");
        assert!(v3.joiners(&[1, 2]).is_empty());
        let v4 = v3.without(&[2]).unwrap();
        assert_eq!(v4.live(&[1, 2, 3]), [3, 1]);
        let v5 = v4.without(&[3]).unwrap();
        assert_eq!(v5.live(&[1, 2, 3]), [1], "the rejoined node is promoted");
        assert_eq!(View::parse(v5.word()), v5);
        // A joiner that fails again is failed, not joining.
        let w = v2.without(&[1]).unwrap();
        assert!(w.is_failed(1) && !w.is_joining(1));
    }
}
