//! `dtxn probe`: the one-sided-sync paper's torn-read experiment (its section 8.1).
//!
//! Writers keep updating a few records while readers read them with one consistency scheme. An
//! independent oracle judges every read: each 8-byte data word encodes (record, version, word
//! index), so a read is *torn* when its words do not all come from the version the scheme
//! accepted. Per scheme the probe counts reads accepted, reads rejected (the scheme said
//! "retry"), torn reads the scheme detected, and torn reads it **accepted undetected**: the
//! number that must be zero for a correct scheme.

use anyhow::{bail, Result};
use dtxn_fabric::{Endpoint, Pool, Topology};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// How a reader makes sure it got one version of a record, and how a writer helps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Scheme {
    /// S4: head and tail version words, one READ, accepted iff they match. Broken (G2).
    Bookend,
    /// S3: lock, version and data in one READ, then the version re-read. Broken (G2).
    SingleRead,
    /// S5: FORD's "invisible" bit: the writer marks the record invisible, updates it in place
    /// and clears the mark; one READ, accepted iff not marked. Broken (G2).
    MarkInPlace,
    /// S6: READ lock+version, then READ data, then READ lock+version again. Correct.
    TwoRead,
    /// S8: FaRM's version in every cache line; one READ, accepted iff all lines agree. Correct.
    PerLine,
    /// S1: CAS the lock and READ in one doorbell batch (G6). Correct.
    Lock,
}

impl Scheme {
    pub const ALL: [Scheme; 6] = [
        Scheme::Bookend,
        Scheme::SingleRead,
        Scheme::MarkInPlace,
        Scheme::TwoRead,
        Scheme::PerLine,
        Scheme::Lock,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scheme::Bookend => "bookend",
            Scheme::SingleRead => "single-read",
            Scheme::MarkInPlace => "mark-in-place",
            Scheme::TwoRead => "two-read",
            Scheme::PerLine => "per-line",
            Scheme::Lock => "lock",
        }
    }

    /// Whether the scheme is correct under the fabric contract.
    pub fn correct(self) -> bool {
        matches!(self, Scheme::TwoRead | Scheme::PerLine | Scheme::Lock)
    }
}

/// One probe run's parameters.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeParams {
    /// Where the records start on memory node 0.
    pub base: u64,
    /// This process's compute node (`ucx`: several probe processes may share a pool).
    pub compute_node: u32,
    pub scheme: Scheme,
    pub record_size: usize,
    pub records: usize,
    pub readers: u32,
    pub writers: u32,
    pub reads_per_reader: u64,
    /// If set, readers stop at this time (virtual on sim) instead of after `reads_per_reader`.
    pub duration_ns: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProbeCounts {
    pub reads: u64,
    pub accepted: u64,
    pub rejected: u64,
    pub torn_detected: u64,
    pub torn_undetected: u64,
    pub writes: u64,
}

const WORD: usize = 8;

/// The oracle's word: record, version and word index, so any mix is recognisable.
fn oracle(record: usize, version: u64, idx: usize) -> u64 {
    (version << 24) | ((record as u64 & 0xfff) << 12) | (idx as u64 & 0xfff)
}

fn version_of(word: u64) -> u64 {
    word >> 24
}

/// Where the metadata words of a scheme sit; every other word is data.
fn is_meta(scheme: Scheme, words: usize, i: usize) -> bool {
    match scheme {
        Scheme::Bookend => i == 0 || i == words - 1,
        Scheme::SingleRead | Scheme::MarkInPlace | Scheme::TwoRead | Scheme::Lock => i < 2,
        // Line 0: lock and stamp; every further line: its stamp first.
        Scheme::PerLine => i < 2 || i.is_multiple_of(8),
    }
}

fn get(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i * WORD..(i + 1) * WORD].try_into().expect("word"))
}

fn put(b: &mut [u8], i: usize, v: u64) {
    b[i * WORD..(i + 1) * WORD].copy_from_slice(&v.to_le_bytes());
}

/// The full image of `record` at `version`, as the writer lays it out (lock words free).
fn image(scheme: Scheme, record: usize, version: u64, buf: &mut [u8]) {
    let words = buf.len() / WORD;
    for i in 0..words {
        let v = if is_meta(scheme, words, i) {
            match (scheme, i) {
                (Scheme::Bookend, _) => version,
                (_, 0) => 0, // lock / invisible mark: free
                _ => version,
            }
        } else {
            oracle(record, version, i)
        };
        put(buf, i, v);
    }
}

/// Judges a READ of a whole record: `Some(v)` if every data word is from version `v`.
fn uniform_version(scheme: Scheme, record: usize, b: &[u8]) -> Option<u64> {
    let words = b.len() / WORD;
    let mut version = None;
    for i in 0..words {
        if is_meta(scheme, words, i) {
            continue;
        }
        let w = get(b, i);
        let v = version_of(w);
        if w != oracle(record, v, i) || version.is_some_and(|x| x != v) {
            return None;
        }
        version = Some(v);
    }
    version
}

struct Layout {
    base: u64,
    scheme: Scheme,
    size: usize,
    stride: u64,
    records: usize,
}

impl Layout {
    fn addr(&self, r: usize) -> u64 {
        self.base + r as u64 * self.stride
    }
}

/// Runs one scheme at one record size; the pool must be fresh (zeroed).
pub fn run_probe(pool: &mut Pool, p: &ProbeParams) -> Result<ProbeCounts> {
    let size = p.record_size;
    let layout = Arc::new(Layout {
        base: p.base,
        scheme: p.scheme,
        size,
        stride: (size as u64).div_ceil(64) * 64,
        records: p.records,
    });
    let need = p.base + layout.stride * p.records as u64;
    let have = pool.node_sizes()[0];
    if need > have {
        bail!(
            "{} records of {size} bytes need {need} bytes; the memory node has {have}",
            p.records
        );
    }
    // Version 1 of every record, loaded by the memory node's CPU (ucx: over the network,
    // where a failure is an error, not a panic).
    pool.try_with_local(0, |mem| {
        let mut buf = vec![0u8; size];
        for r in 0..p.records {
            image(p.scheme, r, 1, &mut buf);
            mem.write(layout.addr(r), &buf);
        }
    })?;
    let readers_left = Arc::new(AtomicU64::new(u64::from(p.readers)));
    let topo = Topology {
        // Probe processes do not coordinate: compute node k of k + 1 only numbers this
        // process's coordinators apart from the others'.
        compute_nodes: p.compute_node + 1,
        threads: p.writers + p.readers,
        coroutines: 1,
    };
    let writers = p.writers;
    let reads = p.reads_per_reader;
    let duration = p.duration_ns;
    let report = pool.run(topo, None, |ep: Endpoint| {
        let layout = layout.clone();
        let left = readers_left.clone();
        async move {
            let me = ep.id().thread;
            if me < writers {
                writer(ep, &layout, me, writers, &left).await
            } else {
                let c = reader(ep, &layout, reads, duration).await;
                left.fetch_sub(1, Ordering::SeqCst);
                c
            }
        }
    })?;
    let mut total = ProbeCounts::default();
    for c in report.outputs.into_iter().flatten() {
        let c = c?;
        total.reads += c.reads;
        total.accepted += c.accepted;
        total.rejected += c.rejected;
        total.torn_detected += c.torn_detected;
        total.torn_undetected += c.torn_undetected;
        total.writes += c.writes;
    }
    Ok(total)
}

/// Updates its share of the records, round-robin, until every reader is done.
async fn writer(
    mut ep: Endpoint,
    l: &Layout,
    me: u32,
    writers: u32,
    readers_left: &AtomicU64,
) -> Result<ProbeCounts> {
    let mine: Vec<usize> = (0..l.records)
        .filter(|r| r % writers as usize == me as usize)
        .collect();
    let mut versions = vec![1u64; l.records];
    let mut img = vec![0u8; l.size];
    let mut counts = ProbeCounts::default();
    let node = 0;
    let lock_owner = 1 + u64::from(me);
    while readers_left.load(Ordering::SeqCst) > 0 && !mine.is_empty() {
        for &r in &mine {
            let a = l.addr(r);
            let v = versions[r] + 1;
            versions[r] = v;
            image(l.scheme, r, v, &mut img);
            match l.scheme {
                Scheme::Bookend => {
                    ep.write(node, a, &img);
                    ep.post().await?;
                }
                Scheme::MarkInPlace => {
                    // Mark invisible, update in place, clear the mark: one QP, in order (G4).
                    ep.write(node, a, &1u64.to_le_bytes());
                    ep.write(node, a + 8, &img[8..]);
                    ep.write(node, a, &0u64.to_le_bytes());
                    ep.post().await?;
                }
                Scheme::SingleRead | Scheme::TwoRead | Scheme::PerLine | Scheme::Lock => {
                    // Take the CAS-only lock (readers of `lock` hold it briefly too).
                    loop {
                        let c = ep.cas(node, a, 0, lock_owner);
                        ep.post().await?;
                        if ep.cas_ok(c) {
                            break;
                        }
                        ep.yield_now().await;
                    }
                    if l.scheme == Scheme::TwoRead {
                        // Data first, then version and unlock in one line (write-unlatch).
                        ep.write(node, a + 16, &img[16..]);
                        let mut head = [0u8; 16];
                        put(&mut head, 1, v);
                        ep.write(node, a, &head);
                    } else {
                        ep.write(node, a + 8, &img[8..]);
                        ep.write(node, a, &0u64.to_le_bytes());
                    }
                    ep.post().await?;
                }
            }
            counts.writes += 1;
            if readers_left.load(Ordering::SeqCst) == 0 {
                break;
            }
        }
    }
    Ok(counts)
}

/// Reads random records with the scheme and lets the oracle judge what it accepted.
async fn reader(
    mut ep: Endpoint,
    l: &Layout,
    reads: u64,
    duration_ns: Option<u64>,
) -> Result<ProbeCounts> {
    use rand::Rng;
    let mut counts = ProbeCounts::default();
    let words = l.size / WORD;
    let node = 0;
    let owner = 0x1000 + u64::from(ep.id().thread);
    let deadline = duration_ns.map(|d| ep.now_ns() + d);
    loop {
        let done = match deadline {
            Some(d) => ep.now_ns() >= d,
            None => counts.reads >= reads,
        };
        if done {
            break;
        }
        let r = ep.rng().random_range(0..l.records);
        let a = l.addr(r);
        counts.reads += 1;
        // (accepted version, the record bytes judged)
        let verdict: Option<u64>;
        let snapshot: Vec<u8>;
        match l.scheme {
            Scheme::Bookend => {
                let id = ep.read(node, a, l.size);
                ep.post().await?;
                let b = ep.bytes(id);
                let (head, tail) = (get(b, 0), get(b, words - 1));
                verdict = (head == tail).then_some(head);
                snapshot = b.to_vec();
            }
            Scheme::SingleRead => {
                let id = ep.read(node, a, l.size);
                ep.post().await?;
                let b = ep.bytes(id).to_vec();
                let (lock, v1) = (get(&b, 0), get(&b, 1));
                if lock != 0 {
                    verdict = None;
                } else {
                    let id = ep.read(node, a + 8, 8);
                    ep.post().await?;
                    verdict = (ep.word(id, 0) == v1).then_some(v1);
                }
                snapshot = b;
            }
            Scheme::MarkInPlace => {
                let id = ep.read(node, a, l.size);
                ep.post().await?;
                let b = ep.bytes(id);
                verdict = (get(b, 0) == 0).then_some(get(b, 1));
                snapshot = b.to_vec();
            }
            Scheme::TwoRead => {
                let h = ep.read(node, a, 16);
                ep.post().await?;
                let (lock, v1) = (ep.word(h, 0), ep.word(h, 8));
                if lock != 0 {
                    verdict = None;
                    snapshot = Vec::new();
                } else {
                    // Only after the header's completion (G5: READs are not ordered).
                    let d = ep.read(node, a, l.size);
                    ep.post().await?;
                    let b = ep.bytes(d).to_vec();
                    let h = ep.read(node, a, 16);
                    ep.post().await?;
                    let (lock2, v2) = (ep.word(h, 0), ep.word(h, 8));
                    verdict = (lock2 == 0 && v2 == v1).then_some(v1);
                    snapshot = b;
                }
            }
            Scheme::PerLine => {
                let id = ep.read(node, a, l.size);
                ep.post().await?;
                let b = ep.bytes(id);
                let v = get(b, 1);
                let stamps_agree = (8..words).step_by(8).all(|i| get(b, i) == v);
                verdict = (get(b, 0) == 0 && stamps_agree).then_some(v);
                snapshot = b.to_vec();
            }
            Scheme::Lock => {
                let c = ep.cas(node, a, 0, owner);
                let id = ep.read(node, a, l.size);
                ep.post().await?;
                if ep.cas_ok(c) {
                    let b = ep.bytes(id).to_vec();
                    verdict = Some(get(&b, 1));
                    snapshot = b;
                    // Write-unlatch: the lock word is CAS-only.
                    ep.write(node, a, &0u64.to_le_bytes());
                    ep.post().await?;
                } else {
                    verdict = None;
                    snapshot = Vec::new();
                }
            }
        }
        let actual = if snapshot.is_empty() {
            None
        } else {
            uniform_version(l.scheme, r, &snapshot)
        };
        match verdict {
            Some(v) => {
                counts.accepted += 1;
                if actual != Some(v) {
                    counts.torn_undetected += 1;
                }
            }
            None => {
                counts.rejected += 1;
                if !snapshot.is_empty() && actual.is_none() {
                    counts.torn_detected += 1;
                }
            }
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_uniform_and_mixes_are_not() {
        for s in Scheme::ALL {
            let mut a = vec![0u8; 256];
            let mut b = vec![0u8; 256];
            image(s, 3, 7, &mut a);
            image(s, 3, 8, &mut b);
            assert_eq!(uniform_version(s, 3, &a), Some(7), "{s:?}");
            assert_eq!(uniform_version(s, 4, &a), None, "{s:?}: wrong record");
            let mut torn = a.clone();
            torn[192..].copy_from_slice(&b[192..]);
            assert_eq!(uniform_version(s, 3, &torn), None, "{s:?}");
        }
    }
}
