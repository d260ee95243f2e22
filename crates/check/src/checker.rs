//! Building Adya's direct serialization graph from versions, and finding its anomalies.

use crate::graph::{tarjan, Bfs, Csr, Dep, Deps, Digraph, View};
use crate::history::{HistoryError, HistoryReader, Status, Txn};
use crate::report::{Anomaly, Item, Kind, Report, Step, TxnRef};
use serde::Serialize;
use std::collections::HashSet;
use std::path::Path;

/// The isolation level to check the history against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// PL-3: no cycle in the serialization graph.
    #[default]
    Serializable,
    /// PL-SI (Fekete; Cerone and Gotsman): no G0 or G1, and every cycle has two adjacent
    /// anti-dependencies.
    Snapshot,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Options {
    pub isolation: Isolation,
    /// Also order each transaction after every transaction that ended before it started
    /// (strict serializability, or strong SI).
    pub real_time: bool,
}

/// A transaction the checker cannot take: the history is malformed, not anomalous.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidTxn {
    #[error("txn {txn} appears twice")]
    DuplicateTxn { txn: u64 },
    #[error("txn {txn} ends at {end}, before its start at {start}")]
    EndBeforeStart { txn: u64, start: u64, end: u64 },
    #[error(
        "txn {txn} writes version 0 of ({table}, {key}): version 0 is the initial load, which no \
         transaction installs"
    )]
    WritesInitialVersion { txn: u64, table: u32, key: u64 },
    #[error("txn {txn} writes version {version} of ({table}, {key}) twice")]
    RepeatedWrite {
        txn: u64,
        table: u32,
        key: u64,
        version: u64,
    },
    #[error("more than {} transactions", MAX_TXNS)]
    TooManyTxns,
}

/// Transactions and real-time barriers share a `u32` node space.
const MAX_TXNS: usize = (u32::MAX / 2) as usize;

/// Checks an in-memory history.
pub fn check<'a>(
    txns: impl IntoIterator<Item = &'a Txn>,
    options: Options,
) -> Result<Report, InvalidTxn> {
    let mut c = Checker::new(options);
    for t in txns {
        c.add(t)?;
    }
    Ok(c.finish())
}

/// Reads and checks a history file, streaming: the file is never held in memory whole. A
/// file whose header says it leaves out a prefix of the run is checked as
/// [`Checker::omit_prefix`] says.
pub fn check_file(path: impl AsRef<Path>, options: Options) -> Result<Report, HistoryError> {
    let mut reader = HistoryReader::open(path)?;
    let mut c = Checker::new(options);
    while let Some(next) = reader.next() {
        let (_, txn) = next?;
        if let Err(e) = c.add(&txn) {
            return Err(reader.error_here(e.to_string()));
        }
    }
    if reader.from_ns().is_some() {
        c.omit_prefix();
    }
    Ok(c.finish())
}

#[derive(Debug, Clone, Copy)]
struct Meta {
    id: u64,
    session: u64,
    start: u64,
    end: u64,
    committed: bool,
}

/// A read or write of one version, by the transaction at index `txn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Op {
    table: u32,
    txn: u32,
    key: u64,
    version: u64,
    /// The value's hash, if recorded.
    hash: u64,
    hashed: bool,
    /// Writes: this is the version its writer installs (its greatest of this key); otherwise
    /// the version is intermediate.
    last: bool,
}

impl Op {
    fn item(&self) -> (u32, u64) {
        (self.table, self.key)
    }

    fn order(&self) -> (u32, u64, u64, u32) {
        (self.table, self.key, self.version, self.txn)
    }
}

/// Collects a history one transaction at a time, then checks it.
///
/// It keeps about 70 bytes per transaction and 40 per read or write of a committed one, no
/// more of a transaction than the graph needs; building the graph takes about as much again.
pub struct Checker {
    options: Options,
    /// The history leaves out the transactions that ended before it began.
    prefix_omitted: bool,
    txns: Vec<Meta>,
    ids: HashSet<u64>,
    /// Reads by committed transactions.
    reads: Vec<Op>,
    /// Writes by committed transactions.
    writes: Vec<Op>,
    /// Writes by aborted transactions, only to name them in G1a reports.
    aborted_writes: Vec<Op>,
    scratch: Vec<(u32, u64, u64)>,
}

impl Checker {
    pub fn new(options: Options) -> Self {
        Self {
            options,
            prefix_omitted: false,
            txns: Vec::new(),
            ids: HashSet::new(),
            reads: Vec::new(),
            writes: Vec::new(),
            aborted_writes: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// The history is a suffix of a run: it leaves out every transaction that ended before the
    /// recording began (a benchmark's warm-up), and keeps every one that ended after.
    ///
    /// A version no recorded transaction wrote, read by a recorded one, is then the
    /// recording's starting state if it is older than every version of its key that a recorded
    /// transaction installed: its writer ended before the recording began. This is sound for
    /// every protocol here because a writer learns its outcome before it unlocks, so of two
    /// writers of a key, the one that ended first installed the older version: the left-out
    /// writers' versions all precede the recorded ones. Such a read is held, like a read of
    /// version 0, to the value its first reader saw, and precedes the key's first recorded
    /// writer. What is lost: the order among left-out versions, so a cycle through a
    /// transaction that ended before the recording began is out of sight. A read of an
    /// unwritten version newer than a recorded one is still G1a.
    pub fn omit_prefix(&mut self) {
        self.prefix_omitted = true;
    }

    /// Adds one transaction. On error the checker is unchanged.
    pub fn add(&mut self, t: &Txn) -> Result<(), InvalidTxn> {
        if t.end < t.start {
            return Err(InvalidTxn::EndBeforeStart {
                txn: t.txn,
                start: t.start,
                end: t.end,
            });
        }
        if self.txns.len() >= MAX_TXNS {
            return Err(InvalidTxn::TooManyTxns);
        }
        // Sorted writes give each item's greatest version: the one the writer installs.
        let w = &mut self.scratch;
        w.clear();
        w.extend(t.writes.iter().map(|w| (w.table, w.key, w.version)));
        w.sort_unstable();
        for (i, &(table, key, version)) in w.iter().enumerate() {
            if version == 0 {
                return Err(InvalidTxn::WritesInitialVersion {
                    txn: t.txn,
                    table,
                    key,
                });
            }
            if i > 0 && w[i - 1] == (table, key, version) {
                return Err(InvalidTxn::RepeatedWrite {
                    txn: t.txn,
                    table,
                    key,
                    version,
                });
            }
        }
        if self.ids.contains(&t.txn) {
            return Err(InvalidTxn::DuplicateTxn { txn: t.txn });
        }
        self.ids.insert(t.txn);
        let txn = self.txns.len() as u32;
        let committed = t.status == Status::Committed;
        self.txns.push(Meta {
            id: t.txn,
            session: t.session,
            start: t.start,
            end: t.end,
            committed,
        });
        let writes = if committed {
            &mut self.writes
        } else {
            &mut self.aborted_writes
        };
        for x in &t.writes {
            let after = w.partition_point(|&(tb, k, _)| (tb, k) <= (x.table, x.key));
            writes.push(Op {
                table: x.table,
                txn,
                key: x.key,
                version: x.version,
                hash: x.hash.unwrap_or(0),
                hashed: x.hash.is_some(),
                last: w[after - 1].2 == x.version,
            });
        }
        if committed {
            self.reads.extend(t.reads.iter().map(|r| Op {
                table: r.table,
                txn,
                key: r.key,
                version: r.version,
                hash: r.hash.unwrap_or(0),
                hashed: r.hash.is_some(),
                last: false,
            }));
        }
        Ok(())
    }

    /// Builds the graph and reports every anomaly found.
    pub fn finish(mut self) -> Report {
        for ops in [&mut self.reads, &mut self.writes, &mut self.aborted_writes] {
            ops.sort_unstable_by_key(Op::order);
        }
        let mut b = Builder {
            h: &self,
            edges: Vec::new(),
            anomalies: Vec::new(),
            writers: Vec::new(),
            installed: Vec::new(),
        };
        b.dependencies();
        let nodes = b.real_time_edges();
        let Builder {
            edges,
            mut anomalies,
            ..
        } = b;
        let graph = Csr::new(nodes, &edges);
        drop(edges);
        let labels = Labels::new(&self);
        let mut cycles = Cycles {
            h: &self,
            labels: &labels,
            out: &mut anomalies,
        };
        cycles.search(&graph);
        // The SI search can meet one cycle from two components; the text makes equal ones
        // adjacent.
        anomalies.sort_by_cached_key(|a| (a.kind(), a.txns(), a.to_string()));
        anomalies.dedup();
        let committed = self.txns.iter().filter(|t| t.committed).count() as u64;
        Report {
            options: self.options,
            committed,
            aborted: self.txns.len() as u64 - committed,
            anomalies,
        }
    }

    fn txn_ref(&self, txn: u32) -> TxnRef {
        let m = &self.txns[txn as usize];
        TxnRef {
            txn: m.id,
            session: m.session,
        }
    }
}

/// Splits sorted `ops` into the runs that agree on `f`.
fn runs_by<T: PartialEq>(ops: &[Op], f: impl Fn(&Op) -> T) -> impl Iterator<Item = &[Op]> {
    ops.chunk_by(move |a, b| f(a) == f(b))
}

/// The edges of the graph, and the anomalies visible item by item (G1a, G1b, torn value, lost
/// update, duplicate version).
struct Builder<'a> {
    h: &'a Checker,
    edges: Vec<(u32, u32, Dep)>,
    anomalies: Vec<Anomaly>,
    writers: Vec<u32>,
    /// The installed versions of the current item: (version, range of `ws`) per version.
    installed: Vec<(u64, usize, usize)>,
}

impl Builder<'_> {
    fn edge(&mut self, from: u32, to: u32, dep: Dep) {
        // A transaction is never ordered against itself.
        if from != to {
            self.edges.push((from, to, dep));
        }
    }

    fn dependencies(&mut self) {
        let (reads, writes) = (&self.h.reads[..], &self.h.writes[..]);
        let (mut r, mut w) = (0, 0);
        // Both lists are sorted by item: walk them side by side, one item at a time.
        while let Some(item) = [reads.get(r), writes.get(w)]
            .into_iter()
            .flatten()
            .map(Op::item)
            .min()
        {
            let r_end = r + reads[r..].partition_point(|o| o.item() == item);
            let w_end = w + writes[w..].partition_point(|o| o.item() == item);
            self.item(item, &reads[r..r_end], &writes[w..w_end]);
            (r, w) = (r_end, w_end);
        }
    }

    /// One item: `ws` its committed writes and `rs` its committed reads, both sorted by
    /// version then transaction.
    fn item(&mut self, (table, key): (u32, u64), rs: &[Op], ws: &[Op]) {
        let h = self.h;
        for run in runs_by(ws, |o| o.version) {
            if run.len() > 1 {
                self.anomalies.push(Anomaly::Version {
                    kind: Kind::DuplicateVersion,
                    table,
                    key,
                    version: run[0].version,
                    txns: run.iter().map(|o| h.txn_ref(o.txn)).collect(),
                });
            }
        }
        // The version order: each writer's last version. Where several transactions installed
        // one version (reported above), the first stands for it and the others are ordered
        // between its neighbours, which keeps the edge count linear.
        self.installed.clear();
        let mut i = 0;
        while i < ws.len() {
            let v = ws[i].version;
            let end = i + ws[i..].partition_point(|o| o.version == v);
            if ws[i..end].iter().any(|o| o.last) {
                self.installed.push((v, i, end));
            }
            i = end;
        }
        let members = |&(_, a, b): &(u64, usize, usize)| ws[a..b].iter().filter(|o| o.last);
        let rep = |g: &(u64, usize, usize)| members(g).next().map_or(0, |o| o.txn);
        for pair in 0..self.installed.len().saturating_sub(1) {
            let (prev, next) = (self.installed[pair], self.installed[pair + 1]);
            let (p, n) = (rep(&prev), rep(&next));
            for m in members(&next) {
                self.edge(p, m.txn, Dep::Ww);
            }
            for m in members(&prev).skip(1) {
                self.edge(m.txn, n, Dep::Ww);
            }
        }

        self.writers.clear();
        self.writers.extend(ws.iter().map(|o| o.txn));
        self.writers.sort_unstable();
        self.writers.dedup();
        for run in runs_by(rs, |o| o.version) {
            let v = run[0].version;
            let (group, next) = match self.installed.binary_search_by_key(&v, |g| g.0) {
                Ok(g) => (Some(self.installed[g]), self.installed.get(g + 1).copied()),
                // Version 0 is installed by no transaction, before all others; so is, in a
                // history that omits its prefix, a version older than every recorded one that
                // no recorded transaction wrote (see `Checker::omit_prefix`).
                Err(0) if v == 0 || self.prefix_version((table, key), v, ws) => {
                    (None, self.installed.first().copied())
                }
                Err(_) => {
                    for rd in run {
                        self.uninstalled_read(rd, ws, &rep);
                    }
                    continue;
                }
            };
            let own = |x: u32| group.is_some_and(|g| members(&g).any(|o| o.txn == x));
            let writer = group.and_then(|g| members(&g).next().copied());
            self.values(run, writer, &own);
            // Readers of v that also wrote the item (runs are sorted by txn).
            let mut lost: Vec<u32> = run
                .iter()
                .map(|o| o.txn)
                .filter(|&x| !own(x) && self.writers.binary_search(&x).is_ok())
                .collect();
            lost.dedup();
            if lost.len() < 2 {
                lost.clear();
            } else {
                self.anomalies.push(Anomaly::Version {
                    kind: Kind::LostUpdate,
                    table,
                    key,
                    version: v,
                    txns: lost.iter().map(|&x| h.txn_ref(x)).collect(),
                });
            }
            let next = next.map(|n| rep(&n));
            // The anti-dependencies between the transactions of a lost update are the lost
            // update: they stay out of the graph, where they would be found again as G-single.
            let lost_to_next = next.is_some_and(|n| lost.binary_search(&n).is_ok());
            for rd in run {
                let x = rd.txn;
                if own(x) {
                    // Its own version: the ww edges order it already.
                    continue;
                }
                if let Some(g) = group {
                    self.edge(rep(&g), x, Dep::Wr);
                }
                if let Some(n) = next {
                    if !(lost_to_next && lost.binary_search(&x).is_ok()) {
                        self.edge(x, n, Dep::Rw);
                    }
                }
            }
        }
    }

    /// The reads `run` of one installed version (or of version 0), against the value its
    /// `writer` installed. A version whose writer recorded no hash (version 0, the initial
    /// load, has no writer) is held to the value its first reader (in history order) saw.
    /// Reads of one's own version, and reads without a hash, are not judged.
    fn values(&mut self, run: &[Op], writer: Option<Op>, own: &dyn Fn(u32) -> bool) {
        let h = self.h;
        let mut judged = run.iter().filter(|o| o.hashed && !own(o.txn));
        let (expected, by_writer, source) = match writer.filter(|w| w.hashed) {
            Some(w) => (w.hash, true, w.txn),
            None => match judged.next() {
                Some(first) => (first.hash, false, first.txn),
                None => return,
            },
        };
        for rd in judged.filter(|o| o.hash != expected) {
            self.anomalies.push(Anomaly::Value {
                kind: Kind::TornValue,
                reader: h.txn_ref(rd.txn),
                table: rd.table,
                key: rd.key,
                version: rd.version,
                hash: rd.hash,
                expected,
                writer: by_writer.then(|| h.txn_ref(source)),
                first_reader: (!by_writer).then(|| h.txn_ref(source)),
            });
        }
    }

    /// In a history that omits its prefix, whether version `v` of `item` (older than every
    /// installed one) is the starting state: no recorded transaction, committed or aborted,
    /// wrote it. `ws` are the item's committed writes, sorted by version.
    fn prefix_version(&self, (table, key): (u32, u64), v: u64, ws: &[Op]) -> bool {
        let aw = &self.h.aborted_writes;
        let at = aw.partition_point(|o| o.order() < (table, key, v, 0));
        let aborted = aw
            .get(at)
            .is_some_and(|o| (o.table, o.key, o.version) == (table, key, v));
        let committed = ws[ws.partition_point(|o| o.version < v)..]
            .first()
            .is_some_and(|o| o.version == v);
        self.h.prefix_omitted && !aborted && !committed
    }

    /// A committed read of a version no committed transaction installed: G1b if a committed
    /// transaction wrote it and then overwrote it, G1a otherwise.
    fn uninstalled_read(&mut self, rd: &Op, ws: &[Op], rep: &dyn Fn(&(u64, usize, usize)) -> u32) {
        let h = self.h;
        let at = ws.partition_point(|o| o.version < rd.version);
        if let Some(w) = ws.get(at).filter(|o| o.version == rd.version) {
            if w.txn == rd.txn {
                // Reading one's own intermediate write says nothing about others.
                return;
            }
            let installed = ws
                .iter()
                .find(|o| o.txn == w.txn && o.last)
                .map_or(rd.version, |o| o.version);
            self.anomalies.push(Anomaly::Read {
                kind: Kind::G1b,
                reader: h.txn_ref(rd.txn),
                table: rd.table,
                key: rd.key,
                version: rd.version,
                writer: Some(h.txn_ref(w.txn)),
                installed: Some(installed),
            });
            // The reader saw the writer's effects, and precedes whoever overwrote them.
            self.edge(w.txn, rd.txn, Dep::Wr);
            if let Ok(g) = self.installed.binary_search_by_key(&installed, |g| g.0) {
                if let Some(next) = self.installed.get(g + 1).copied() {
                    self.edge(rd.txn, rep(&next), Dep::Rw);
                }
            }
            return;
        }
        let aw = &h.aborted_writes;
        let at = aw.partition_point(|o| o.order() < (rd.table, rd.key, rd.version, 0));
        let writer = aw
            .get(at)
            .filter(|o| (o.table, o.key, o.version) == (rd.table, rd.key, rd.version))
            .map(|o| h.txn_ref(o.txn));
        self.anomalies.push(Anomaly::Read {
            kind: Kind::G1a,
            reader: h.txn_ref(rd.txn),
            table: rd.table,
            key: rd.key,
            version: rd.version,
            writer,
            installed: None,
        });
    }

    /// With real time on, orders every committed transaction after those that ended before it
    /// started, through a chain of barrier nodes (one per distinct end time) instead of the
    /// quadratically many direct edges. Returns the number of nodes.
    fn real_time_edges(&mut self) -> usize {
        let n = self.h.txns.len();
        if !self.h.options.real_time {
            return n;
        }
        let committed = || self.h.txns.iter().enumerate().filter(|(_, m)| m.committed);
        let mut ends: Vec<u64> = committed().map(|(_, m)| m.end).collect();
        ends.sort_unstable();
        ends.dedup();
        let barrier = |j: usize| (n + j) as u32;
        let mut edges = Vec::with_capacity(ends.len() + 2 * n);
        for j in 1..ends.len() {
            edges.push((barrier(j - 1), barrier(j), Dep::Rt));
        }
        for (t, m) in committed() {
            let j = ends.partition_point(|&e| e < m.end);
            edges.push((t as u32, barrier(j), Dep::Rt));
            let before = ends.partition_point(|&e| e < m.start);
            if before > 0 {
                edges.push((barrier(before - 1), t as u32, Dep::Rt));
            }
        }
        self.edges.extend(edges);
        n + ends.len()
    }
}

/// Each transaction's reads and writes, to say which item and versions an edge is about.
struct Labels {
    reads: ByTxn,
    writes: ByTxn,
}

/// Indices into a sorted op list, grouped by transaction.
struct ByTxn {
    off: Vec<u32>,
    idx: Vec<u32>,
}

impl ByTxn {
    fn new(ops: &[Op], txns: usize) -> Self {
        let mut off = vec![0u32; txns + 1];
        for o in ops {
            off[o.txn as usize + 1] += 1;
        }
        for i in 0..txns {
            off[i + 1] += off[i];
        }
        let mut fill = off.clone();
        let mut idx = vec![0u32; ops.len()];
        for (i, o) in ops.iter().enumerate() {
            let slot = &mut fill[o.txn as usize];
            idx[*slot as usize] = i as u32;
            *slot += 1;
        }
        Self { off, idx }
    }

    fn of<'a>(&'a self, ops: &'a [Op], txn: u32) -> impl Iterator<Item = &'a Op> + Clone {
        let (a, b) = (self.off[txn as usize], self.off[txn as usize + 1]);
        self.idx[a as usize..b as usize]
            .iter()
            .map(move |&i| &ops[i as usize])
    }
}

impl Labels {
    fn new(h: &Checker) -> Self {
        Self {
            reads: ByTxn::new(&h.reads, h.txns.len()),
            writes: ByTxn::new(&h.writes, h.txns.len()),
        }
    }

    /// The item and versions behind the edge `a -dep-> b`: the closest pair of versions if
    /// several keys or versions give the same edge.
    fn step(&self, h: &Checker, a: u32, b: u32, dep: Dep) -> Step {
        let ra = self.reads.of(&h.reads, a);
        let rb = self.reads.of(&h.reads, b);
        let wa = self.writes.of(&h.writes, a);
        let wb = self.writes.of(&h.writes, b);
        let pair = |x: &Op, y: &Op| Item {
            table: x.table,
            key: x.key,
            from_version: x.version,
            to_version: y.version,
        };
        let item = match dep {
            Dep::Ww => wb
                .filter(|y| y.last)
                .flat_map(|y| {
                    wa.clone()
                        .filter(move |x| x.last && x.item() == y.item() && x.version < y.version)
                        .map(move |x| pair(x, y))
                })
                .min_by_key(|i| i.to_version - i.from_version),
            Dep::Wr => rb
                .flat_map(|y| {
                    wa.clone()
                        .filter(move |x| x.item() == y.item() && x.version == y.version)
                        .map(move |x| pair(x, y))
                })
                .next(),
            Dep::Rw => ra
                .flat_map(|x| {
                    wb.clone()
                        .filter(move |y| y.last && x.item() == y.item() && x.version < y.version)
                        .map(move |y| pair(x, y))
                })
                .min_by_key(|i| i.to_version - i.from_version),
            Dep::Rt => None,
        };
        let rt = dep == Dep::Rt;
        Step {
            from: h.txn_ref(a),
            to: h.txn_ref(b),
            dep: match dep {
                Dep::Ww => "ww",
                Dep::Wr => "wr",
                Dep::Rw => "rw",
                Dep::Rt => "rt",
            },
            item,
            from_end: rt.then(|| h.txns[a as usize].end),
            to_start: rt.then(|| h.txns[b as usize].start),
        }
    }
}

const WW: Deps = Deps::of(&[Dep::Ww]);
const WW_WR: Deps = Deps::of(&[Dep::Ww, Dep::Wr]);
const WW_WR_RW: Deps = Deps::of(&[Dep::Ww, Dep::Wr, Dep::Rw]);
const ALL: Deps = Deps::of(&[Dep::Ww, Dep::Wr, Dep::Rw, Dep::Rt]);

/// The cycle search: strongly connected components of the whole graph first (linear); then,
/// inside each one that is not a single node, witness cycles, classified by the kinds of edge
/// they need, from the most to the least severe.
struct Cycles<'a> {
    h: &'a Checker,
    labels: &'a Labels,
    out: &'a mut Vec<Anomaly>,
}

/// A cycle as found in a view: (view node, edge id) per step.
type Cycle = Vec<(usize, usize)>;

/// One non-trivial component, as a graph of its own.
struct Region {
    g: Csr,
    /// Global node of each local node.
    global: Vec<u32>,
}

impl Cycles<'_> {
    fn search(&mut self, graph: &Csr) {
        let all = View {
            g: graph,
            deps: ALL,
            si: false,
        };
        let (comp, comps) = tarjan(&all);
        let mut size = vec![0u32; comps as usize];
        for &c in &comp {
            size[c as usize] += 1;
        }
        let mut members: Vec<Vec<u32>> = vec![Vec::new(); comps as usize];
        for (v, &c) in comp.iter().enumerate() {
            if size[c as usize] > 1 {
                members[c as usize].push(v as u32);
            }
        }
        let mut local = vec![u32::MAX; graph.len()];
        for nodes in members.iter().filter(|m| !m.is_empty()) {
            for (i, &v) in nodes.iter().enumerate() {
                local[v as usize] = i as u32;
            }
            let mut edges = Vec::new();
            for (i, &v) in nodes.iter().enumerate() {
                for e in graph.edge_range(v as usize) {
                    let w = local[graph.dst(e)];
                    if w != u32::MAX {
                        edges.push((i as u32, w, graph.dep(e)));
                    }
                }
            }
            for &v in nodes {
                local[v as usize] = u32::MAX;
            }
            let region = Region {
                g: Csr::new(nodes.len(), &edges),
                global: nodes.clone(),
            };
            self.region(&region);
        }
    }

    fn region(&mut self, r: &Region) {
        let g = &r.g;
        let si = self.h.options.isolation == Isolation::Snapshot;
        let mut plain = Bfs::new(g.len());
        let mut product = Bfs::new(if si { 2 * g.len() } else { 0 });
        // Searches past the first witness of a component are bounded, so that a history whose
        // every transaction is in one component is still checked in about linear time.
        let mut budget = 4 * (g.len() + g.edge_count()) as u64 + 100_000;

        let v0 = View {
            g,
            deps: WW,
            si: false,
        };
        let (c0, n0) = tarjan(&v0);
        for cycle in first_cycles(
            &v0,
            &c0,
            &mut vec![false; n0 as usize],
            |_, e, _| g.dep(e) == Dep::Ww,
            &mut plain,
        ) {
            self.report(r, false, Kind::G0, &cycle);
        }
        let v1 = View {
            g,
            deps: WW_WR,
            si: false,
        };
        let (c1, n1) = tarjan(&v1);
        for cycle in first_cycles(
            &v1,
            &c1,
            &mut vec![false; n1 as usize],
            |_, e, _| g.dep(e) == Dep::Wr,
            &mut plain,
        ) {
            self.report(r, false, Kind::G1c, &cycle);
        }

        let v2 = View {
            g,
            deps: WW_WR_RW,
            si,
        };
        let (c2, n2) = tarjan(&v2);
        // The transactions of each component (under SI, of either of their two states).
        let mut nodes_of: Vec<Vec<usize>> = vec![Vec::new(); n2 as usize];
        for x in 0..g.len() {
            if si {
                let (a, b) = (c2[2 * x], c2[2 * x + 1]);
                nodes_of[a as usize].push(x);
                if b != a {
                    nodes_of[b as usize].push(x);
                }
            } else {
                nodes_of[c2[x] as usize].push(x);
            }
        }
        let mut done = vec![false; n2 as usize];
        let mut member = vec![false; g.len()];
        for (v, _, w) in anchors(&v2, Dep::Rw) {
            let c = c2[v];
            if c2[w] != c || done[c as usize] {
                continue;
            }
            done[c as usize] = true;
            let nodes = &nodes_of[c as usize];
            for &x in nodes {
                member[x] = true;
            }
            if !self.g_single(r, &v1, &c1, nodes, &member, &mut plain, &mut budget) {
                let bfs = if si { &mut product } else { &mut plain };
                self.g2(r, &v2, &c2, c, nodes, bfs);
            }
            for &x in nodes {
                member[x] = false;
            }
        }

        if self.h.options.real_time {
            let v3 = View { g, deps: ALL, si };
            let (c3, n3) = tarjan(&v3);
            // Real time matters where it closes a cycle that the dependencies alone do not:
            // a component whose transactions are all in one component without rt edges has
            // been reported above, and an rt edge there only runs beside a dependency.
            let n = self.h.txns.len();
            let mut first_c2 = vec![u32::MAX; n3 as usize];
            let mut explained = vec![true; n3 as usize];
            for v in 0..v3.node_count() {
                let x = if si { v / 2 } else { v };
                if r.global[x] as usize >= n {
                    continue;
                }
                let c = c3[v] as usize;
                if first_c2[c] == u32::MAX {
                    first_c2[c] = c2[v];
                } else if first_c2[c] != c2[v] {
                    explained[c] = false;
                }
            }
            // Anchored where possible at a dependency between components that the dependencies
            // alone leave apart, which keeps long chains of rt edges out of the witness.
            let bfs = if si { &mut product } else { &mut plain };
            let done = &mut explained;
            let across = |v: usize, e: usize, w: usize| g.dep(e) != Dep::Rt && c2[v] != c2[w];
            let mut cycles = first_cycles(&v3, &c3, done, across, bfs);
            cycles.extend(first_cycles(
                &v3,
                &c3,
                done,
                |_, e, _| g.dep(e) == Dep::Rt,
                bfs,
            ));
            for cycle in cycles {
                self.report(r, si, Kind::RealTime, &cycle);
            }
        }
    }

    /// Looks for a cycle with exactly one anti-dependency among `nodes` (those marked in
    /// `member`): an rw edge whose target reaches its source by ww and wr edges. Certain and
    /// cheap when both ends are in one ww/wr component (`c1`); otherwise a bounded search.
    #[allow(clippy::too_many_arguments)]
    fn g_single(
        &mut self,
        r: &Region,
        v1: &View<'_>,
        c1: &[u32],
        nodes: &[usize],
        member: &[bool],
        bfs: &mut Bfs,
        budget: &mut u64,
    ) -> bool {
        let g = v1.g;
        let rw = || {
            nodes.iter().flat_map(move |&x| {
                g.edge_range(x)
                    .filter(move |&e| g.dep(e) == Dep::Rw)
                    .map(move |e| (x, e, g.dst(e)))
            })
        };
        for (x, e, w) in rw().filter(|&(x, _, w)| c1[x] == c1[w]) {
            let mut unbounded = u64::MAX;
            let c = c1[x];
            if let Some(p) = bfs.path(v1, w, x, |y| c1[y] == c, &mut unbounded) {
                self.report(r, false, Kind::GSingle, &close(x, e, p));
                return true;
            }
        }
        // Tarjan numbers components in reverse topological order: what w reaches by ww and wr
        // edges has a component number no greater than w's. So only rw edges that point up
        // can close a cycle, and a search needs no node numbered below x's component.
        for (x, e, w) in rw().filter(|&(x, _, w)| c1[w] > c1[x] && member[w]) {
            if *budget == 0 {
                break;
            }
            let floor = c1[x];
            if let Some(p) = bfs.path(v1, w, x, |y| member[y] && c1[y] >= floor, budget) {
                self.report(r, false, Kind::GSingle, &close(x, e, p));
                return true;
            }
        }
        false
    }

    /// A shortest cycle through the first rw edge of component `c`, named by its
    /// anti-dependencies.
    fn g2(
        &mut self,
        r: &Region,
        v2: &View<'_>,
        c2: &[u32],
        c: u32,
        nodes: &[usize],
        bfs: &mut Bfs,
    ) {
        let g = v2.g;
        let states = |x: usize| if v2.si { 2 * x..2 * x + 2 } else { x..x + 1 };
        let anchor = nodes
            .iter()
            .flat_map(|&x| states(x))
            .filter(|&v| c2[v] == c)
            .flat_map(|v| v2.edges(v).map(move |e| (v, e)))
            .find_map(|(v, e)| {
                let w = v2.target(v, e)?;
                (g.dep(e) == Dep::Rw && c2[w] == c).then_some((v, e, w))
            });
        let Some((v, e, w)) = anchor else { return };
        let mut unbounded = u64::MAX;
        if let Some(p) = bfs.path(v2, w, v, |y| c2[y] == c, &mut unbounded) {
            let cycle = close(v, e, p);
            let rws = cycle.iter().filter(|&&(_, e)| g.dep(e) == Dep::Rw).count();
            let kind = if rws == 1 { Kind::GSingle } else { Kind::G2 };
            self.report(r, v2.si, kind, &cycle);
        }
    }

    /// Turns a cycle of the region into an anomaly: transactions and labelled edges, the
    /// barrier chains of real time folded into single rt steps, starting at the smallest
    /// transaction id.
    fn report(&mut self, r: &Region, si: bool, kind: Kind, cycle: &Cycle) {
        let h = self.h;
        let n = h.txns.len();
        let is_txn = |l: usize| (r.global[l] as usize) < n;
        let mut local: Vec<(usize, usize, Dep)> = cycle
            .iter()
            .map(|&(v, e)| (if si { v / 2 } else { v }, r.g.dst(e), r.g.dep(e)))
            .collect();
        // Barriers only lead forward in time, so every cycle has a transaction on it.
        let Some(start) = local.iter().position(|s| is_txn(s.0)) else {
            return;
        };
        local.rotate_left(start);
        let mut steps = Vec::with_capacity(local.len());
        let mut i = 0;
        while let Some(&(a, mut b, dep)) = local.get(i) {
            i += 1;
            while !is_txn(b) {
                let Some(next) = local.get(i) else { break };
                b = next.1;
                i += 1;
            }
            let (ga, gb) = (r.global[a], r.global[b]);
            steps.push(self.labels.step(h, ga, gb, dep));
        }
        if let Some(min) = (0..steps.len()).min_by_key(|&i| steps[i].from.txn) {
            steps.rotate_left(min);
        }
        self.out.push(Anomaly::Cycle { kind, cycle: steps });
    }
}

/// The cycle made of the edge `v -e->` and a path back to `v`.
fn close(v: usize, e: usize, path: Cycle) -> Cycle {
    let mut cycle = Vec::with_capacity(path.len() + 1);
    cycle.push((v, e));
    cycle.extend(path);
    cycle
}

/// The edges of `dep` kind a view keeps, as (node, edge id, target).
fn anchors<'v>(view: &'v View<'_>, dep: Dep) -> impl Iterator<Item = (usize, usize, usize)> + 'v {
    edges(view).filter(move |&(_, e, _)| view.g.dep(e) == dep)
}

/// The edges a view keeps, as (node, edge id, target).
fn edges<'v>(view: &'v View<'_>) -> impl Iterator<Item = (usize, usize, usize)> + 'v {
    (0..view.node_count()).flat_map(move |v| {
        view.edges(v)
            .filter_map(move |e| view.target(v, e).map(|w| (v, e, w)))
    })
}

/// One shortest witness cycle through an `anchor` edge per component of `comp` that has one,
/// skipping the components already `done` (and marking those it finds a cycle in).
fn first_cycles(
    view: &View<'_>,
    comp: &[u32],
    done: &mut [bool],
    anchor: impl Fn(usize, usize, usize) -> bool,
    bfs: &mut Bfs,
) -> Vec<Cycle> {
    let mut cycles = Vec::new();
    for (v, e, w) in edges(view) {
        let c = comp[v];
        if comp[w] != c || done[c as usize] || !anchor(v, e, w) {
            continue;
        }
        done[c as usize] = true;
        let mut unbounded = u64::MAX;
        if let Some(p) = bfs.path(view, w, v, |x| comp[x] == c, &mut unbounded) {
            cycles.push(close(v, e, p));
        }
    }
    cycles
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Read, Write};

    /// A committed transaction on table 1, concurrent with every other one built here.
    fn txn(id: u64, reads: &[(u64, u64)], writes: &[(u64, u64)]) -> Txn {
        Txn {
            txn: id,
            session: id % 3,
            status: Status::Committed,
            start: 0,
            end: 100,
            reads: reads
                .iter()
                .map(|&(key, version)| read(key, version))
                .collect(),
            writes: writes
                .iter()
                .map(|&(key, version)| write(key, version))
                .collect(),
        }
    }

    fn read(key: u64, version: u64) -> Read {
        Read {
            table: 1,
            key,
            version,
            hash: None,
        }
    }

    fn write(key: u64, version: u64) -> Write {
        Write {
            table: 1,
            key,
            version,
            deleted: false,
            hash: None,
        }
    }

    /// `t` with the hashes of its reads and writes, in their order.
    fn hashed(mut t: Txn, reads: &[u64], writes: &[u64]) -> Txn {
        assert_eq!((reads.len(), writes.len()), (t.reads.len(), t.writes.len()));
        for (r, &h) in t.reads.iter_mut().zip(reads) {
            r.hash = Some(h);
        }
        for (w, &h) in t.writes.iter_mut().zip(writes) {
            w.hash = Some(h);
        }
        t
    }

    fn aborted(mut t: Txn) -> Txn {
        t.status = Status::Aborted;
        t
    }

    fn at(mut t: Txn, start: u64, end: u64) -> Txn {
        (t.start, t.end) = (start, end);
        t
    }

    fn report(h: &[Txn], isolation: Isolation, real_time: bool) -> Report {
        check(
            h,
            Options {
                isolation,
                real_time,
            },
        )
        .unwrap()
    }

    fn kinds(h: &[Txn]) -> Vec<&'static str> {
        let r = report(h, Isolation::Serializable, false);
        r.anomalies.iter().map(|a| a.kind().name()).collect()
    }

    #[test]
    fn a_read_of_a_version_nobody_wrote_is_g1a_but_version_0_is_the_initial_load() {
        let h = [txn(1, &[(1, 0), (2, 5)], &[])];
        let r = report(&h, Isolation::Serializable, false);
        assert_eq!(r.anomalies.len(), 1);
        assert_eq!(
            r.anomalies[0].to_string(),
            "G1a: txn 1 (session 1) read (1, 2) v5, which no transaction committed"
        );
    }

    fn suffix_report(h: &[Txn]) -> Report {
        let mut c = Checker::new(Options::default());
        for t in h {
            c.add(t).unwrap();
        }
        c.omit_prefix();
        c.finish()
    }

    #[test]
    fn a_history_without_its_prefix_starts_from_the_versions_it_reads_first() {
        // The warm-up left v5 and v7 of key 2 (and v3 of key 4, never rewritten) behind; the
        // recording sees txn 1 read v5, txn 2 read v7, and txn 3 install v8.
        let h = [
            txn(1, &[(2, 5), (4, 3)], &[]),
            txn(2, &[(2, 7)], &[]),
            txn(3, &[(2, 7)], &[(2, 8)]),
        ];
        assert_eq!(kinds(&h), ["G1a", "G1a", "G1a", "G1a"], "a whole history");
        assert!(suffix_report(&h).ok(), "{}", suffix_report(&h));
        // An unwritten version newer than a recorded one is no starting state.
        let late = [txn(3, &[], &[(2, 8)]), txn(4, &[(2, 9)], &[])];
        assert_eq!(suffix_report(&late).anomalies[0].kind().name(), "G1a");
        // Nor is one a recorded transaction wrote: txn 5 read 6's intermediate v6.
        let mut six = txn(6, &[], &[(2, 6), (2, 8)]);
        six.writes[0].version = 6;
        let g1b = [six, txn(5, &[(2, 6)], &[])];
        assert_eq!(suffix_report(&g1b).anomalies[0].kind().name(), "G1b");
    }

    #[test]
    fn a_read_of_the_starting_state_precedes_the_first_recorded_writer() {
        // 1 reads x's starting v5 and writes y; 2 reads y's starting v2 and writes x: each
        // misses the other's write, a write skew (G2) the suffix still shows.
        let h = [
            txn(1, &[(1, 5), (2, 2)], &[(2, 3)]),
            txn(2, &[(1, 5), (2, 2)], &[(1, 6)]),
        ];
        let r = suffix_report(&h);
        assert_eq!(r.anomalies.len(), 1, "{r}");
        assert_eq!(r.anomalies[0].kind().name(), "G2");
    }

    #[test]
    fn a_read_whose_value_is_not_its_writers_is_a_torn_value() {
        use crate::history::ABSENT;
        // 2 reads v1 with the bytes 1 installed; 3 reads v1 with other bytes: torn.
        let h = [
            hashed(txn(1, &[(1, 0)], &[(1, 1)]), &[0xa], &[0xb]),
            hashed(txn(2, &[(1, 1)], &[]), &[0xb], &[]),
            hashed(txn(3, &[(1, 1)], &[]), &[0xc], &[]),
        ];
        let r = report(&h, Isolation::Serializable, false);
        assert_eq!(
            r.to_string(),
            "NOT serializable: 1 anomaly (torn-value x1)\n\
             torn-value: txn 3 (session 0) read (1, 1) v1 as value 000000000000000c, but txn 1 \
             (session 1) installed 000000000000000b\n"
        );
        match &r.anomalies[0] {
            Anomaly::Value {
                reader,
                version,
                hash,
                expected,
                writer,
                first_reader,
                ..
            } => {
                assert_eq!((reader.txn, *version, *hash, *expected), (3, 1, 0xc, 0xb));
                assert_eq!((writer.map(|w| w.txn), *first_reader), (Some(1), None));
            }
            other => panic!("{other}"),
        }
        // The versions alone make this history serializable: only the value gives it away.
        let mut bare = h.to_vec();
        for t in &mut bare {
            t.reads.iter_mut().for_each(|r| r.hash = None);
            t.writes.iter_mut().for_each(|w| w.hash = None);
        }
        assert!(kinds(&bare).is_empty());
        // It is an anomaly under snapshot isolation too.
        let si = report(&h, Isolation::Snapshot, false);
        assert_eq!(
            si.verdict(),
            "NOT snapshot isolation: 1 anomaly (torn-value x1)"
        );
        // A delete installs the absent value: reading the key as present at that version is
        // a phantom.
        let mut del = h[..2].to_vec();
        del[0].writes[0].deleted = true;
        del[0].writes[0].hash = Some(ABSENT);
        assert_eq!(kinds(&del), ["torn-value"]);
        assert!(report(&del, Isolation::Serializable, false).anomalies[0]
            .to_string()
            .ends_with("installed absent"));
        del[1].reads[0].hash = Some(ABSENT);
        assert!(kinds(&del).is_empty());
    }

    #[test]
    fn readers_of_a_version_nobody_installed_must_agree_with_the_first() {
        // Version 0 (the load): 1 and 2 saw the same bytes, 3 other ones; 4 recorded none.
        let h = [
            hashed(txn(1, &[(1, 0)], &[]), &[0xa], &[]),
            hashed(txn(2, &[(1, 0)], &[]), &[0xa], &[]),
            hashed(txn(3, &[(1, 0), (2, 0)], &[]), &[0xd, 0xe], &[]),
            txn(4, &[(1, 0)], &[]),
        ];
        let r = report(&h, Isolation::Serializable, false);
        assert_eq!(
            r.to_string(),
            "NOT serializable: 1 anomaly (torn-value x1)\n\
             torn-value: txn 3 (session 0) read (1, 1) v0 as value 000000000000000d, but txn 1 \
             (session 1) read it as 000000000000000a (a version no transaction in the history \
             installed)\n"
        );
        // A writer without a hash (an old file, a recovered transaction) is no reference
        // either: its readers are held to the first of them.
        let h = [
            txn(1, &[], &[(1, 1)]),
            hashed(txn(2, &[(1, 1)], &[]), &[0xa], &[]),
            hashed(txn(3, &[(1, 1)], &[]), &[0xa], &[]),
        ];
        assert!(kinds(&h).is_empty());
        let mut torn = h.to_vec();
        torn[2].reads[0].hash = Some(0xf);
        assert_eq!(kinds(&torn), ["torn-value"]);
    }

    #[test]
    fn reads_already_anomalous_or_of_ones_own_writes_are_not_judged_by_value() {
        // 2 reads 1's intermediate v1 (G1b) with a value 1 never installed: G1b alone.
        let h = [
            hashed(txn(1, &[], &[(1, 1), (1, 2)]), &[], &[0xa, 0xb]),
            hashed(txn(2, &[(1, 1)], &[]), &[0xc], &[]),
        ];
        assert_eq!(kinds(&h), ["G1b"]);
        // 1 reads its own installed version with another hash (not how dtxn records, but
        // legal): not judged against itself.
        let h = [hashed(txn(1, &[(1, 1)], &[(1, 1)]), &[0xc], &[0xb])];
        assert!(kinds(&h).is_empty());
    }

    #[test]
    fn aborted_transactions_reads_are_not_judged() {
        let h = [
            txn(1, &[], &[(1, 1)]),
            aborted(txn(2, &[(1, 7), (2, 3)], &[(1, 2)])),
            txn(3, &[(1, 1)], &[]),
        ];
        assert!(kinds(&h).is_empty());
    }

    #[test]
    fn the_last_of_two_writes_is_installed_whatever_the_listing_order() {
        // Listed greater first: v3 is still the version txn 1 installs.
        let h = [txn(1, &[], &[(1, 3), (1, 2)]), txn(2, &[(1, 2)], &[])];
        let r = report(&h, Isolation::Serializable, false);
        assert_eq!(kinds(&h), ["G1b"]);
        assert!(matches!(
            r.anomalies[0],
            Anomaly::Read {
                version: 2,
                installed: Some(3),
                ..
            }
        ));
        let ok = [txn(1, &[], &[(1, 3), (1, 2)]), txn(2, &[(1, 3)], &[])];
        assert!(kinds(&ok).is_empty());
    }

    #[test]
    fn reading_ones_own_write_is_not_a_dependency() {
        let h = [
            txn(1, &[(1, 0), (1, 1), (1, 2)], &[(1, 1), (1, 2)]),
            txn(2, &[(1, 2)], &[(1, 3)]),
            txn(3, &[(1, 3)], &[]),
        ];
        assert!(kinds(&h).is_empty());
    }

    #[test]
    fn a_lost_update_is_named_once_not_also_as_its_cycle() {
        let h = [
            txn(1, &[(1, 0)], &[(1, 1)]),
            txn(2, &[(1, 0)], &[(1, 2)]),
            txn(3, &[(1, 0)], &[(1, 3)]),
        ];
        let r = report(&h, Isolation::Serializable, false);
        assert_eq!(r.verdict(), "NOT serializable: 1 anomaly (lost-update x1)");
        match &r.anomalies[0] {
            Anomaly::Version { txns, version, .. } => {
                assert_eq!(*version, 0);
                assert_eq!(txns.iter().map(|t| t.txn).collect::<Vec<_>>(), [1, 2, 3]);
            }
            other => panic!("{other}"),
        }
        // The same transactions with a read skew on other items: that cycle is reported.
        let mut h = h.to_vec();
        h[1].reads.extend([read(9, 0), read(8, 1)]);
        h[0].writes.extend([write(9, 1), write(8, 1)]);
        assert_eq!(kinds(&h), ["lost-update", "G-single"]);
    }

    #[test]
    fn duplicate_versions_keep_the_graph_linear_and_are_named() {
        let h = [
            txn(1, &[], &[(1, 1)]),
            txn(2, &[], &[(1, 2)]),
            txn(3, &[], &[(1, 2)]),
            txn(4, &[], &[(1, 2)]),
            txn(5, &[(1, 2)], &[(1, 3)]),
        ];
        let r = report(&h, Isolation::Serializable, false);
        assert_eq!(
            r.to_string(),
            "NOT serializable: 1 anomaly (duplicate-version x1)\n\
             duplicate-version: txn 2 (session 2), txn 3 (session 0), txn 4 (session 1) each \
             installed (1, 1) v2\n"
        );
    }

    #[test]
    fn separate_components_give_separate_anomalies() {
        // Two write skews on disjoint keys, and a G0 beside them.
        let h = [
            txn(1, &[(1, 0), (2, 0)], &[(1, 1)]),
            txn(2, &[(1, 0), (2, 0)], &[(2, 1)]),
            txn(3, &[(3, 0), (4, 0)], &[(3, 1)]),
            txn(4, &[(3, 0), (4, 0)], &[(4, 1)]),
            txn(5, &[], &[(5, 1), (6, 2)]),
            txn(6, &[], &[(5, 2), (6, 1)]),
        ];
        let r = report(&h, Isolation::Serializable, false);
        assert_eq!(r.verdict(), "NOT serializable: 3 anomalies (G0 x1, G2 x2)");
        let r = report(&h, Isolation::Snapshot, false);
        assert_eq!(r.verdict(), "NOT snapshot isolation: 1 anomaly (G0 x1)");
    }

    #[test]
    fn one_component_reports_each_kind_it_contains() {
        // 1 and 2 form a G0 (keys 1, 2); 2 and 3 a read skew (keys 3, 4), in one component.
        let h = [
            txn(1, &[], &[(1, 1), (2, 2)]),
            txn(2, &[(4, 0), (3, 1)], &[(1, 2), (2, 1)]),
            txn(3, &[], &[(3, 1), (4, 1)]),
        ];
        assert_eq!(kinds(&h), ["G0", "G-single"]);
    }

    #[test]
    fn real_time_orders_only_what_ended_before_the_other_started() {
        // 2 reads the initial x although 1, which wrote x, ended when 2 started: not before.
        let h = [
            at(txn(1, &[], &[(1, 1)]), 0, 10),
            at(txn(2, &[(1, 0)], &[]), 10, 20),
        ];
        assert!(report(&h, Isolation::Serializable, true).ok());
        let h = [
            at(txn(1, &[], &[(1, 1)]), 0, 10),
            at(txn(2, &[(1, 0)], &[]), 11, 20),
        ];
        let r = report(&h, Isolation::Serializable, true);
        assert_eq!(
            r.verdict(),
            "NOT strict serializable: 1 anomaly (real-time x1)"
        );
        // An aborted transaction orders nothing.
        let h = [
            at(aborted(txn(1, &[], &[(1, 1)])), 0, 10),
            at(txn(2, &[(1, 0)], &[]), 11, 20),
            at(txn(3, &[], &[(1, 1)]), 15, 30),
        ];
        assert!(report(&h, Isolation::Serializable, true).ok());
    }

    #[test]
    fn long_real_time_chains_fold_into_single_rt_steps() {
        // Many transactions between 1 and 2 in time; the witness still has two steps.
        let mut h: Vec<Txn> = (10..60)
            .map(|i| at(txn(i, &[], &[]), i * 10, i * 10 + 5))
            .collect();
        h.push(at(txn(1, &[], &[(1, 1)]), 0, 10));
        h.push(at(txn(2, &[(1, 0)], &[]), 1000, 1010));
        let r = report(&h, Isolation::Serializable, true);
        match &r.anomalies[..] {
            [Anomaly::Cycle { kind, cycle }] => {
                assert_eq!(*kind, Kind::RealTime);
                let deps: Vec<_> = cycle
                    .iter()
                    .map(|s| (s.from.txn, s.dep, s.to.txn))
                    .collect();
                assert_eq!(deps, [(1, "rt", 2), (2, "rw", 1)]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn malformed_transactions_are_refused_and_leave_the_checker_unchanged() {
        let mut c = Checker::new(Options::default());
        c.add(&txn(1, &[], &[(1, 1)])).unwrap();
        let e = |t: &Txn, c: &mut Checker| c.add(t).unwrap_err().to_string();
        assert_eq!(e(&txn(1, &[], &[]), &mut c), "txn 1 appears twice");
        assert_eq!(
            e(&at(txn(2, &[], &[]), 5, 4), &mut c),
            "txn 2 ends at 4, before its start at 5"
        );
        assert!(e(&txn(2, &[], &[(1, 0)]), &mut c).starts_with("txn 2 writes version 0 of (1, 1)"));
        assert_eq!(
            e(&txn(2, &[], &[(1, 3), (1, 3)]), &mut c),
            "txn 2 writes version 3 of (1, 1) twice"
        );
        // None of that was taken: txn 2 is new, and the history is still fine.
        c.add(&txn(2, &[(1, 1)], &[])).unwrap();
        assert!(c.finish().ok());
    }

    #[test]
    fn an_invalid_transaction_in_a_file_is_reported_at_its_line() {
        let dir = std::env::temp_dir().join(format!("dtxn-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("dup.jsonl");
        let mut w = crate::HistoryWriter::create(&path).unwrap();
        w.write(&txn(1, &[], &[])).unwrap();
        w.write(&txn(1, &[], &[])).unwrap();
        w.finish().unwrap();
        let e = check_file(&path, Options::default())
            .unwrap_err()
            .to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(e.ends_with("dup.jsonl:3: txn 1 appears twice"), "{e}");
    }
}
