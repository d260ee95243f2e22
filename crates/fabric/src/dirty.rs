//! Which pages a queue pair wrote since its last FLUSH, per memory node: what a FLUSH must
//! write back to a file-backed region (`shm` persist mode, `ucx` memory nodes with `--path`).

use crate::NodeId;

/// Per memory node, the page-aligned data ranges a worker thread's QP wrote since its last
/// FLUSH to that node (persist mode only): what the next FLUSH writes back. Shared by the
/// thread's coordinators, as their QP is.
#[derive(Default)]
pub(crate) struct Dirty(Vec<Vec<(u64, u64)>>);

/// Ranges kept per node before they are merged into one covering range (a FLUSH then writes
/// back more than it must, never less).
pub(crate) const DIRTY_RANGES: usize = 64;

impl Dirty {
    pub(crate) fn add(&mut self, node: NodeId, addr: u64, len: u64) {
        const PAGE: u64 = 4096;
        let (from, to) = (addr & !(PAGE - 1), (addr + len).div_ceil(PAGE) * PAGE);
        if self.0.len() <= node as usize {
            self.0.resize_with(node as usize + 1, Vec::new);
        }
        let r = &mut self.0[node as usize];
        if let Some(last) = r.last_mut().filter(|l| from <= l.1 && to >= l.0) {
            *last = (last.0.min(from), last.1.max(to));
        } else if r.len() == DIRTY_RANGES {
            let lo = r.iter().map(|x| x.0).min().unwrap_or(from).min(from);
            let hi = r.iter().map(|x| x.1).max().unwrap_or(to).max(to);
            r.clear();
            r.push((lo, hi));
        } else {
            r.push((from, to));
        }
    }

    /// The ranges of `node`, forgotten.
    pub(crate) fn take(&mut self, node: NodeId) -> Vec<(u64, u64)> {
        self.0
            .get_mut(node as usize)
            .map(std::mem::take)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirty_ranges_merge_and_stay_bounded() {
        let mut d = Dirty::default();
        d.add(0, 10, 10);
        d.add(0, 4000, 200);
        d.add(0, 3 * 4096, 1);
        assert_eq!(d.take(0), [(0, 8192), (3 * 4096, 4 * 4096)]);
        assert!(d.take(0).is_empty() && d.take(7).is_empty());
        for i in 0..1000u64 {
            d.add(2, i * 2 * 4096, 1);
        }
        let r = d.take(2);
        assert!(r.len() <= DIRTY_RANGES, "{}", r.len());
        // Every page written is still covered.
        for i in 0..1000u64 {
            let p = i * 2 * 4096;
            assert!(r.iter().any(|&(a, b)| a <= p && p < b), "page at {p}");
        }
    }
}
