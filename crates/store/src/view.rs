//! The pool's view: which memory nodes have failed (issue #23, memory-node failover).
//!
//! One word on memory node 0 ([`crate::layout::VIEW_OFF`], CAS only): a view number and the
//! set of memory nodes that failed, which only grows. A view names no primary: each table's
//! replicas in view `v` are its catalog's replicas minus the failed nodes, in rank order, so
//! the first live one is the primary (a backup is promoted by the view alone, and every
//! coordinator that knows the view computes the same promotion). A table whose every replica
//! failed is *lost*: refused, never served stale.
//!
//! Memory node 0 holds the view and the membership area, so its failure is not survived (as
//! FaRM's configuration manager needs its ZooKeeper): the view never excludes it.

use dtxn_fabric::NodeId;

/// Memory nodes a view can name as failed (node ids 0..48: the word's low 48 bits).
pub const MAX_VIEW_NODES: usize = 48;

/// A view of the pool: its number and the failed memory nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct View {
    /// 0 for the pool as formatted; each change adds one.
    pub number: u16,
    /// Bit `n`: memory node `n` has failed.
    pub failed: u64,
}

const NODES_MASK: u64 = (1 << MAX_VIEW_NODES) - 1;

impl View {
    /// The view word: the number in the high 16 bits, the failed set in the low 48.
    pub fn word(self) -> u64 {
        (u64::from(self.number) << MAX_VIEW_NODES) | (self.failed & NODES_MASK)
    }

    pub fn parse(word: u64) -> View {
        View {
            number: (word >> MAX_VIEW_NODES) as u16,
            failed: word & NODES_MASK,
        }
    }

    pub fn is_failed(self, node: NodeId) -> bool {
        (node as usize) < MAX_VIEW_NODES && self.failed & (1 << node) != 0
    }

    /// The next view: this one with `nodes` failed too (`None` if they already were, or if
    /// one is node 0 or beyond what a view can name).
    pub fn without(self, nodes: &[NodeId]) -> Option<View> {
        let mut failed = self.failed;
        for &n in nodes {
            if n == 0 || n as usize >= MAX_VIEW_NODES {
                return None;
            }
            failed |= 1 << n;
        }
        (failed != self.failed).then_some(View {
            number: self.number.wrapping_add(1),
            failed,
        })
    }

    /// The failed nodes, ascending.
    pub fn failed_nodes(self) -> impl Iterator<Item = NodeId> {
        (0..MAX_VIEW_NODES as NodeId).filter(move |&n| self.is_failed(n))
    }

    /// `replicas` (by rank) without the failed nodes: the first is the primary.
    pub fn live(self, replicas: &[NodeId]) -> Vec<NodeId> {
        replicas
            .iter()
            .copied()
            .filter(|&n| !self.is_failed(n))
            .collect()
    }
}

impl std::fmt::Display for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let failed: Vec<String> = self.failed_nodes().map(|n| n.to_string()).collect();
        if failed.is_empty() {
            write!(f, "view {} (every memory node live)", self.number)
        } else {
            write!(
                f,
                "view {} (memory node{} {} failed)",
                self.number,
                if failed.len() > 1 { "s" } else { "" },
                failed.join(", ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_word_round_trips(number: u16, failed in 0u64..(1 << 48)) {
            let v = View { number, failed };
            prop_assert_eq!(View::parse(v.word()), v);
        }
    }

    #[test]
    fn a_view_only_grows_and_never_drops_node_0() {
        let v0 = View::default();
        let v1 = v0.without(&[2]).unwrap();
        assert_eq!((v1.number, v1.failed), (1, 0b100));
        assert_eq!(v1.without(&[2]), None, "already failed");
        assert_eq!(v1.without(&[0]), None, "node 0 holds the view");
        assert_eq!(v1.without(&[48]), None);
        let v2 = v1.without(&[1, 2]).unwrap();
        assert_eq!((v2.number, v2.failed), (2, 0b110));
        assert_eq!(v2.live(&[2, 0, 1, 3]), [0, 3]);
        assert_eq!(v2.failed_nodes().collect::<Vec<_>>(), [1, 2]);
        assert_eq!(v2.to_string(), "view 2 (memory nodes 1, 2 failed)");
    }
}
