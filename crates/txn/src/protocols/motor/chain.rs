//! Version chains, the structure Motor's CVT replaces (its Fig. 10 ablation), as a cost model
//! over the CVT ([`crate::VersionLayout`]): how many nodes a walk reads to find the version a
//! snapshot sees, and what a node costs to read.

use crate::config::VersionLayout;
use dtxn_store::cvt::Cvt;
use dtxn_store::TableInfo;

/// The nodes a walk of `cvt`'s versions, laid out as a chain, READs (one round trip each,
/// after the record's own READ, which finds its lock word and the link to the chain's first
/// node) to find the version a snapshot at `ts` sees (`u64::MAX`: the newest, what a writer
/// builds on). Each version is a node, allocated apart from the record as in the paper's
/// Fig. 1; the walk stops at the first node that settles the answer.
///
/// - New-to-old: the first node is the newest; the walk goes down until a version at most
///   `ts`, or through every node when none is (the key absent in the snapshot, or its
///   version gone).
/// - Old-to-new: the first node is the oldest; the walk goes up until a version above `ts`
///   (the one before it is the answer), or to the newest, whose link is empty. A first node
///   above `ts` settles it at once.
pub(crate) fn nodes(cvt: &Cvt, ts: u64, layout: VersionLayout) -> u32 {
    let mut n = 0u32;
    let mut at_most = 0u32;
    for c in cvt.cells.iter().filter(|c| c.valid()) {
        n += 1;
        if c.version <= ts {
            at_most += 1;
        }
    }
    if n == 0 {
        return 0;
    }
    // The nodes at most `ts` are the oldest `at_most` of them: the answer is node
    // `at_most - 1` counted from the oldest, if any.
    match layout {
        VersionLayout::Cvt => 0,
        VersionLayout::N2o if at_most == 0 => n,
        VersionLayout::N2o => n - at_most + 1,
        VersionLayout::O2n if at_most == n => n,
        VersionLayout::O2n => at_most + 1,
    }
}

/// What one node of a chain READs: a version's whole value, its version word and its link
/// (a chain keeps full values, where a CVT keeps the newest and pre-images of the changed
/// attributes), at most the record's bytes (what the stand-in READ can take).
pub(crate) fn node_bytes(t: &TableInfo) -> usize {
    (t.value_size as usize + 16).min(t.record_bytes as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dtxn_store::cvt::Vcell;

    /// A CVT whose valid versions are `versions`, in cells in the order given (a CVT's cells
    /// are a ring: the oldest need not come first), and one invalid cell.
    fn cvt(versions: &[u64]) -> Cvt {
        let mut c = Cvt::default();
        for &v in versions {
            let mut cell = Vcell {
                version: v,
                ..Vcell::default()
            };
            cell.flags = dtxn_store::cvt::VALID;
            c.cells.push(cell);
        }
        c.cells.push(Vcell {
            version: 99,
            ..Vcell::default()
        });
        c
    }

    /// The walk itself, node by node, for the same answer.
    fn walk(versions: &[u64], ts: u64, layout: VersionLayout) -> u32 {
        let mut v = versions.to_vec();
        v.sort_unstable();
        if v.is_empty() {
            return 0;
        }
        let mut read = 1u32;
        match layout {
            VersionLayout::Cvt => return 0,
            VersionLayout::N2o => {
                let mut i = v.len() - 1;
                while v[i] > ts && i > 0 {
                    i -= 1;
                    read += 1;
                }
            }
            VersionLayout::O2n => {
                let mut i = 0;
                while v[i] <= ts && i + 1 < v.len() {
                    i += 1;
                    read += 1;
                }
            }
        }
        read
    }

    #[test]
    fn a_walk_reads_the_nodes_from_the_first_to_the_answer() {
        let c = cvt(&[30, 10, 20, 40]);
        let n2o = |ts| nodes(&c, ts, VersionLayout::N2o);
        let o2n = |ts| nodes(&c, ts, VersionLayout::O2n);
        // The newest: the first node new-to-old, the last of four old-to-new.
        assert_eq!((n2o(u64::MAX), o2n(u64::MAX)), (1, 4));
        assert_eq!((n2o(40), o2n(40)), (1, 4));
        // 20: 40, 30, 20 down; from the oldest, 10 then 20 then 30 (above: the answer is 20).
        assert_eq!((n2o(25), o2n(25)), (3, 3));
        assert_eq!((n2o(10), o2n(10)), (4, 2));
        // Older than every version: the whole chain new-to-old, the first node old-to-new.
        assert_eq!((n2o(5), o2n(5)), (4, 1));
        assert_eq!(nodes(&c, 25, VersionLayout::Cvt), 0);
        assert_eq!(nodes(&cvt(&[]), 25, VersionLayout::N2o), 0);
        assert_eq!(nodes(&cvt(&[7]), 25, VersionLayout::O2n), 1);
    }

    proptest::proptest! {
        #[test]
        fn nodes_are_what_a_walk_node_by_node_reads(
            versions in proptest::collection::btree_set(1u64..1000, 1..15),
            ts in 0u64..1100,
        ) {
            let v: Vec<u64> = versions.into_iter().rev().collect();
            let c = cvt(&v);
            for layout in [VersionLayout::Cvt, VersionLayout::N2o, VersionLayout::O2n] {
                proptest::prop_assert_eq!(nodes(&c, ts, layout), walk(&v, ts, layout));
                proptest::prop_assert_eq!(nodes(&c, u64::MAX, layout), walk(&v, u64::MAX, layout));
            }
        }
    }
}
