//! Directed graphs with typed edges, strongly connected components and shortest cycles.
//!
//! Everything here is iterative: a history of a million transactions makes paths a million
//! nodes long, far deeper than a thread's stack.

use std::collections::VecDeque;
use std::ops::Range;

/// The kind of a dependency edge (Adya), or a real-time edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Dep {
    /// Write dependency: the source installed the version before the target's.
    Ww,
    /// Read dependency: the target read the version the source installed.
    Wr,
    /// Anti-dependency: the source read a version the target overwrote.
    Rw,
    /// Real time: the source ended before the target started.
    Rt,
}

impl Dep {
    pub(crate) const fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A set of [`Dep`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deps(u8);

impl Deps {
    pub(crate) const fn of(deps: &[Dep]) -> Self {
        let mut bits = 0;
        let mut i = 0;
        while i < deps.len() {
            bits |= deps[i].bit();
            i += 1;
        }
        Self(bits)
    }

    pub(crate) const fn has(self, d: Dep) -> bool {
        self.0 & d.bit() != 0
    }
}

/// The view the algorithms take of a graph: nodes `0..node_count()`, and for each node a range
/// of edge ids whose targets may be filtered out (`None`). Edge ids are the underlying
/// [`Csr`]'s, so a path can be mapped back to typed edges whatever the view.
pub(crate) trait Digraph {
    fn node_count(&self) -> usize;
    fn edges(&self, v: usize) -> Range<usize>;
    fn target(&self, v: usize, e: usize) -> Option<usize>;
}

/// Compressed sparse rows: the out-edges of node `v` are `off[v]..off[v + 1]`.
#[derive(Debug, Default)]
pub(crate) struct Csr {
    off: Vec<u32>,
    dst: Vec<u32>,
    dep: Vec<Dep>,
}

impl Csr {
    /// Builds from `(src, dst, dep)` triples in any order; the order of a node's out-edges
    /// follows the input's.
    pub(crate) fn new(nodes: usize, edges: &[(u32, u32, Dep)]) -> Self {
        let mut off = vec![0u32; nodes + 1];
        for &(s, _, _) in edges {
            off[s as usize + 1] += 1;
        }
        for i in 0..nodes {
            off[i + 1] += off[i];
        }
        let mut fill = off.clone();
        let mut dst = vec![0u32; edges.len()];
        let mut dep = vec![Dep::Ww; edges.len()];
        for &(s, d, k) in edges {
            let slot = &mut fill[s as usize];
            dst[*slot as usize] = d;
            dep[*slot as usize] = k;
            *slot += 1;
        }
        Self { off, dst, dep }
    }

    pub(crate) fn len(&self) -> usize {
        self.off.len() - 1
    }

    pub(crate) fn edge_count(&self) -> usize {
        self.dst.len()
    }

    pub(crate) fn edge_range(&self, v: usize) -> Range<usize> {
        self.off[v] as usize..self.off[v + 1] as usize
    }

    pub(crate) fn dst(&self, e: usize) -> usize {
        self.dst[e] as usize
    }

    pub(crate) fn dep(&self, e: usize) -> Dep {
        self.dep[e]
    }
}

/// A [`Csr`] seen through a set of edge kinds.
///
/// With `si`, it is the product graph that Cerone and Gotsman's characterisation of snapshot
/// isolation needs: node `2v + b`, where `b` says the edge that led to `v` was an
/// anti-dependency, and no anti-dependency may follow another. Its cycles are exactly the
/// cycles of `((ww | wr | rt) ; rw?)`, the relation that must be acyclic under SI.
pub(crate) struct View<'a> {
    pub g: &'a Csr,
    pub deps: Deps,
    pub si: bool,
}

impl Digraph for View<'_> {
    fn node_count(&self) -> usize {
        if self.si {
            2 * self.g.len()
        } else {
            self.g.len()
        }
    }

    fn edges(&self, v: usize) -> Range<usize> {
        self.g.edge_range(if self.si { v / 2 } else { v })
    }

    fn target(&self, v: usize, e: usize) -> Option<usize> {
        let dep = self.g.dep(e);
        if !self.deps.has(dep) {
            return None;
        }
        let w = self.g.dst(e);
        if !self.si {
            return Some(w);
        }
        match (dep, v % 2) {
            (Dep::Rw, 1) => None,
            (Dep::Rw, _) => Some(2 * w + 1),
            _ => Some(2 * w),
        }
    }
}

/// Tarjan's strongly connected components, iteratively. Returns each node's component and the
/// number of components; components are numbered in reverse topological order.
pub(crate) fn tarjan(g: &impl Digraph) -> (Vec<u32>, u32) {
    const UNSEEN: u32 = u32::MAX;
    let n = g.node_count();
    let mut index = vec![UNSEEN; n];
    let mut low = vec![0u32; n];
    let mut comp = vec![UNSEEN; n];
    let mut stack: Vec<u32> = Vec::new();
    // The call stack: (node, next edge id to look at).
    let mut calls: Vec<(u32, usize)> = Vec::new();
    let mut next_index = 0u32;
    let mut comps = 0u32;
    for root in 0..n {
        if index[root] != UNSEEN {
            continue;
        }
        index[root] = next_index;
        low[root] = next_index;
        next_index += 1;
        stack.push(root as u32);
        calls.push((root as u32, g.edges(root).start));
        while let Some(&mut (v, ref mut next)) = calls.last_mut() {
            let v = v as usize;
            let end = g.edges(v).end;
            let mut descended = false;
            while *next < end {
                let e = *next;
                *next += 1;
                let Some(w) = g.target(v, e) else { continue };
                if index[w] == UNSEEN {
                    index[w] = next_index;
                    low[w] = next_index;
                    next_index += 1;
                    stack.push(w as u32);
                    calls.push((w as u32, g.edges(w).start));
                    descended = true;
                    break;
                } else if comp[w] == UNSEEN {
                    // On the stack: w is an ancestor or in a component still open.
                    low[v] = low[v].min(index[w]);
                }
            }
            if descended {
                continue;
            }
            calls.pop();
            if let Some(&(p, _)) = calls.last() {
                let p = p as usize;
                low[p] = low[p].min(low[v]);
            }
            if low[v] == index[v] {
                while let Some(w) = stack.pop() {
                    comp[w as usize] = comps;
                    if w as usize == v {
                        break;
                    }
                }
                comps += 1;
            }
        }
    }
    (comp, comps)
}

/// Breadth-first search with buffers reused across searches, so that many small searches in a
/// big graph cost what they visit, not the graph's size.
pub(crate) struct Bfs {
    seen: Vec<u32>,
    round: u32,
    /// For each reached node: (predecessor, edge id).
    parent: Vec<(u32, u32)>,
    queue: VecDeque<u32>,
}

impl Bfs {
    pub(crate) fn new(nodes: usize) -> Self {
        Self {
            seen: vec![0; nodes],
            round: 0,
            parent: vec![(0, 0); nodes],
            queue: VecDeque::new(),
        }
    }

    /// A shortest path from `from` to `to` through nodes that `keep` accepts, as
    /// `(node, edge id)` steps (each edge leaves its node); empty if `from == to`. Gives up
    /// (None) when no path exists or after visiting `budget` edges; `budget` is decreased by
    /// the edges visited.
    pub(crate) fn path(
        &mut self,
        g: &impl Digraph,
        from: usize,
        to: usize,
        keep: impl Fn(usize) -> bool,
        budget: &mut u64,
    ) -> Option<Vec<(usize, usize)>> {
        self.round = self.round.wrapping_add(1);
        if self.round == 0 {
            self.seen.fill(0);
            self.round = 1;
        }
        self.queue.clear();
        self.seen[from] = self.round;
        self.queue.push_back(from as u32);
        'search: while let Some(v) = self.queue.pop_front() {
            let v = v as usize;
            if v == to {
                break 'search;
            }
            for e in g.edges(v) {
                if *budget == 0 {
                    return None;
                }
                *budget -= 1;
                let Some(w) = g.target(v, e) else { continue };
                if self.seen[w] == self.round || !keep(w) {
                    continue;
                }
                self.seen[w] = self.round;
                self.parent[w] = (v as u32, e as u32);
                if w == to {
                    break 'search;
                }
                self.queue.push_back(w as u32);
            }
        }
        if self.seen[to] != self.round {
            return None;
        }
        let mut steps = Vec::new();
        let mut at = to;
        while at != from {
            let (p, e) = self.parent[at];
            steps.push((p as usize, e as usize));
            at = p as usize;
        }
        steps.reverse();
        Some(steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(g: &Csr) -> View<'_> {
        View {
            g,
            deps: Deps::of(&[Dep::Ww, Dep::Wr, Dep::Rw, Dep::Rt]),
            si: false,
        }
    }

    #[test]
    fn components_of_a_small_graph() {
        // 0 -> 1 -> 2 -> 0, 2 -> 3, 3 -> 4 -> 3, 5 alone.
        let e = [
            (0, 1, Dep::Ww),
            (1, 2, Dep::Wr),
            (2, 0, Dep::Rw),
            (2, 3, Dep::Ww),
            (3, 4, Dep::Ww),
            (4, 3, Dep::Ww),
        ];
        let g = Csr::new(6, &e);
        let (comp, n) = tarjan(&all(&g));
        assert_eq!(n, 3);
        assert_eq!(comp[0], comp[1]);
        assert_eq!(comp[1], comp[2]);
        assert_eq!(comp[3], comp[4]);
        assert_ne!(comp[0], comp[3]);
        assert_ne!(comp[5], comp[0]);
        assert_ne!(comp[5], comp[3]);
        // Reverse topological: {3,4} is finished before {0,1,2} which reaches it.
        assert!(comp[3] < comp[0]);
        // Without anti-dependencies the first cycle is gone.
        let v = View {
            g: &g,
            deps: Deps::of(&[Dep::Ww, Dep::Wr]),
            si: false,
        };
        let (comp, n) = tarjan(&v);
        assert_eq!(n, 5);
        assert_ne!(comp[0], comp[2]);
    }

    #[test]
    fn a_million_node_cycle_needs_no_recursion() {
        let n = 1_000_000u32;
        let e: Vec<_> = (0..n).map(|i| (i, (i + 1) % n, Dep::Ww)).collect();
        let g = Csr::new(n as usize, &e);
        let (comp, comps) = tarjan(&all(&g));
        assert_eq!(comps, 1);
        assert!(comp.iter().all(|&c| c == 0));
        let mut bfs = Bfs::new(n as usize);
        let mut budget = u64::MAX;
        let path = bfs.path(&all(&g), 1, 0, |_| true, &mut budget).unwrap();
        assert_eq!(path.len(), n as usize - 1);
    }

    #[test]
    fn si_product_forbids_adjacent_anti_dependencies() {
        // Write skew: 0 -rw-> 1 -rw-> 0 is a cycle, but not of ((ww|wr);rw?).
        let g = Csr::new(2, &[(0, 1, Dep::Rw), (1, 0, Dep::Rw)]);
        let si = View {
            g: &g,
            deps: Deps::of(&[Dep::Ww, Dep::Wr, Dep::Rw]),
            si: true,
        };
        let (_, n) = tarjan(&si);
        assert_eq!(n, 4, "no cycle in the product");
        // Read skew: 0 -rw-> 1 -wr-> 0 is.
        let g = Csr::new(2, &[(0, 1, Dep::Rw), (1, 0, Dep::Wr)]);
        let si = View {
            g: &g,
            deps: Deps::of(&[Dep::Ww, Dep::Wr, Dep::Rw]),
            si: true,
        };
        let (comp, _) = tarjan(&si);
        assert_eq!(
            comp[0], comp[3],
            "(0, after non-rw) and (1, after rw) cycle"
        );
    }

    #[test]
    fn bfs_finds_a_shortest_path_and_respects_its_budget() {
        // 0 -> 1 -> 2 -> 3 and a shortcut 0 -> 3.
        let g = Csr::new(
            4,
            &[
                (0, 1, Dep::Ww),
                (1, 2, Dep::Ww),
                (2, 3, Dep::Ww),
                (0, 3, Dep::Wr),
            ],
        );
        let mut bfs = Bfs::new(4);
        let p = bfs.path(&all(&g), 0, 3, |_| true, &mut 100).unwrap();
        assert_eq!(p, vec![(0, 1)]);
        let p = bfs.path(&all(&g), 0, 3, |v| v != 3, &mut 100);
        assert!(p.is_none());
        let ww = View {
            g: &g,
            deps: Deps::of(&[Dep::Ww]),
            si: false,
        };
        let p = bfs.path(&ww, 0, 3, |_| true, &mut 100).unwrap();
        assert_eq!(p.len(), 3);
        assert!(bfs.path(&ww, 0, 3, |_| true, &mut 2).is_none());
    }
}
