//! A small set of memory nodes (ids below 64), `Copy`: where a lease word has its copies.

use crate::NodeId;

/// Memory nodes with ids below [`NodeSet::LIMIT`], as a bit set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct NodeSet(u64);

impl NodeSet {
    /// Ids at or above this are never members.
    pub const LIMIT: NodeId = 64;

    /// `{node}`; empty if `node` is at or above [`NodeSet::LIMIT`].
    pub fn single(node: NodeId) -> NodeSet {
        NodeSet::default().with(node)
    }

    /// Nodes `0..k` (`k` capped at [`NodeSet::LIMIT`]).
    pub fn first(k: NodeId) -> NodeSet {
        match k >= NodeSet::LIMIT {
            true => NodeSet(u64::MAX),
            false => NodeSet((1u64 << k) - 1),
        }
    }

    /// This set and `node` (unchanged if `node` is at or above [`NodeSet::LIMIT`]).
    pub fn with(self, node: NodeId) -> NodeSet {
        match node < NodeSet::LIMIT {
            true => NodeSet(self.0 | 1 << node),
            false => self,
        }
    }

    /// The nodes of this set and of `other`.
    pub fn union(self, other: NodeSet) -> NodeSet {
        NodeSet(self.0 | other.0)
    }

    /// This set without the nodes of `other`.
    pub fn minus(self, other: NodeSet) -> NodeSet {
        NodeSet(self.0 & !other.0)
    }

    pub fn contains(self, node: NodeId) -> bool {
        node < NodeSet::LIMIT && self.0 & (1 << node) != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// The members, lowest id first.
    pub fn iter(self) -> impl Iterator<Item = NodeId> {
        (0..NodeSet::LIMIT).filter(move |&n| self.contains(n))
    }
}

impl FromIterator<NodeId> for NodeSet {
    fn from_iter<I: IntoIterator<Item = NodeId>>(nodes: I) -> NodeSet {
        nodes.into_iter().fold(NodeSet::default(), NodeSet::with)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn first_and_single_name_the_nodes_they_say() {
        assert_eq!(NodeSet::first(3).iter().collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(NodeSet::first(0), NodeSet::default());
        assert_eq!(NodeSet::first(64).len(), 64);
        assert_eq!(NodeSet::first(200).len(), 64);
        assert_eq!(NodeSet::single(5).iter().collect::<Vec<_>>(), [5]);
        assert!(NodeSet::single(64).is_empty());
        assert!(!NodeSet::single(3).contains(64));
    }

    proptest! {
        #[test]
        fn a_set_holds_exactly_what_went_in(
            nodes in proptest::collection::vec(0u16..80, 0..20),
            out in proptest::collection::vec(0u16..80, 0..20),
        ) {
            let s: NodeSet = nodes.iter().copied().collect();
            let o: NodeSet = out.iter().copied().collect();
            let left = s.minus(o);
            let both = s.union(o);
            for n in 0..80 {
                prop_assert_eq!(s.contains(n), n < 64 && nodes.contains(&n));
                prop_assert_eq!(left.contains(n), s.contains(n) && !o.contains(n));
                prop_assert_eq!(both.contains(n), s.contains(n) || o.contains(n));
            }
            prop_assert_eq!(s.iter().count(), s.len());
            prop_assert!(s.iter().collect::<Vec<_>>().windows(2).all(|w| w[0] < w[1]));
        }
    }
}
