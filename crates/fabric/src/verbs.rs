//! The ops of a doorbell batch and the buffers they read from and complete into.

use crate::{NodeId, NodeSet};

/// The one-sided verbs (and the optional two-sided RPC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum OpKind {
    Read = 0,
    Write = 1,
    Cas = 2,
    Faa = 3,
    Flush = 4,
    Rpc = 5,
}

impl OpKind {
    pub const ALL: [OpKind; 6] = [
        OpKind::Read,
        OpKind::Write,
        OpKind::Cas,
        OpKind::Faa,
        OpKind::Flush,
        OpKind::Rpc,
    ];

    pub fn name(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Write => "write",
            OpKind::Cas => "cas",
            OpKind::Faa => "faa",
            OpKind::Flush => "flush",
            OpKind::Rpc => "rpc",
        }
    }

    pub fn is_atomic(self) -> bool {
        matches!(self, OpKind::Cas | OpKind::Faa)
    }
}

/// One posted op. `data..data+len` is its span in [`Batch::buf`]: the payload of a WRITE or an
/// RPC request on the way out, the destination of a READ on the way back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    pub kind: OpKind,
    pub node: NodeId,
    pub addr: u64,
    pub len: u32,
    pub data: u32,
    /// CAS: the expected value; FAA: the addend.
    pub arg0: u64,
    /// CAS: the new value.
    pub arg1: u64,
}

/// Names one op of the batch being built, and the batch: valid until the next batch is
/// started. Its results are read from the endpoint, which refuses an id of an earlier batch
/// (whose results are gone: the index would name another op of the batch now held).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpId {
    pub(crate) index: u32,
    pub(crate) batch: u32,
}

/// A doorbell batch: the ops a coordinator posts together, and after completion their results.
/// Owned by the coordinator's [`crate::Endpoint`] and reused, so posting allocates nothing once
/// the buffers have grown to the largest batch.
#[derive(Debug, Default, Clone)]
pub struct Batch {
    pub ops: Vec<Op>,
    /// WRITE payloads and RPC requests; READ results land here too.
    pub buf: BatchBuf,
    /// Per op, after completion: the old value of a CAS/FAA; for an RPC, `(offset << 32) | len`
    /// of its response in `resp`.
    pub words: Vec<u64>,
    /// RPC responses.
    pub resp: Vec<u8>,
    /// After completion: memory-node CPU time spent on this batch's RPCs (see
    /// [`crate::Stats::mn_cpu_ns`]), written by the backend with the responses.
    pub mn_cpu_ns: u64,
    /// RRPC's rule: RPC requests up to this many bytes to one memory node share one message
    /// (message batching); a larger one travels as a message of its own (doorbell batching:
    /// one doorbell, a work request each). `None`: every request shares its node's message.
    /// Set by the endpoint ([`crate::Endpoint::set_rpc_pack_limit`]); kept across `clear`.
    pub rpc_pack_limit: Option<u32>,
    /// After a completion that failed with [`crate::FabricError::NodeDown`]: every memory node
    /// the batch failed on (the error names one of them). Written by the backend.
    pub failed: NodeSet,
    /// Counts `clear`s: the [`OpId`]s of the ops pushed since carry it.
    generation: u32,
}

impl Batch {
    pub fn clear(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        self.ops.clear();
        self.buf.clear();
        self.words.clear();
        self.resp.clear();
        self.mn_cpu_ns = 0;
        self.failed = NodeSet::default();
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Makes this batch a copy of `from`, reusing its buffers (no allocation once grown).
    pub fn assign(&mut self, from: &Batch) {
        self.ops.clone_from(&from.ops);
        self.buf.clear();
        self.buf.append(&from.buf);
        self.words.clone_from(&from.words);
        self.resp.clone_from(&from.resp);
        self.mn_cpu_ns = from.mn_cpu_ns;
        self.rpc_pack_limit = from.rpc_pack_limit;
        self.failed = NodeSet::default();
    }

    /// Copies a completed batch's results (READ data, old values, RPC responses) from `from`,
    /// which holds the same ops.
    pub fn take_results(&mut self, from: &Batch) {
        debug_assert_eq!(self.ops.len(), from.ops.len());
        self.buf.clear();
        self.buf.append(&from.buf);
        self.words.clear();
        self.words.extend_from_slice(&from.words);
        self.resp.clear();
        self.resp.extend_from_slice(&from.resp);
        self.mn_cpu_ns = from.mn_cpu_ns;
        self.failed = from.failed;
    }

    /// Memory nodes that RPC ops of this batch go to, in order of first use: one message each.
    pub fn rpc_nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.ops.iter().enumerate().filter_map(|(i, op)| {
            (op.kind == OpKind::Rpc
                && !self.ops[..i]
                    .iter()
                    .any(|o| o.kind == OpKind::Rpc && o.node == op.node))
            .then_some(op.node)
        })
    }

    /// Whether RPC `op` shares its memory node's message ([`Self::rpc_pack_limit`]).
    pub fn rpc_packed(&self, op: &Op) -> bool {
        self.rpc_pack_limit.is_none_or(|limit| op.len <= limit)
    }

    /// The messages this batch's RPCs travel in: one per memory node for the packed requests,
    /// one per request for the others.
    pub fn rpc_messages(&self) -> u64 {
        let alone = self
            .ops
            .iter()
            .filter(|op| op.kind == OpKind::Rpc && !self.rpc_packed(op))
            .count() as u64;
        let packed = self.ops.iter().enumerate().filter(|&(i, op)| {
            op.kind == OpKind::Rpc
                && self.rpc_packed(op)
                && !self.ops[..i]
                    .iter()
                    .any(|o| o.kind == OpKind::Rpc && o.node == op.node && self.rpc_packed(o))
        });
        alone + packed.count() as u64
    }

    pub(crate) fn push(&mut self, op: Op) -> OpId {
        let id = OpId {
            index: self.ops.len() as u32,
            batch: self.generation,
        };
        self.ops.push(op);
        self.words.push(0);
        id
    }

    /// The index of op `id` of this batch. Panics if `id` is of an earlier batch: reading
    /// it would return another op's results (a caller that queues an op starts a new batch,
    /// and must have read what it needs of the last one before).
    #[inline]
    pub(crate) fn index(&self, id: OpId) -> usize {
        assert!(
            id.batch == self.generation,
            "the results of an op of an earlier batch were read after the next batch began"
        );
        id.index as usize
    }

    /// Appends `bytes` to the buffer; returns their offset.
    pub(crate) fn append_buf(&mut self, bytes: &[u8]) -> u32 {
        self.buf.append(bytes) as u32
    }

    /// Room for a READ's result: whatever bytes an earlier batch left (the READ overwrites them).
    pub(crate) fn reserve_buf(&mut self, len: usize) -> u32 {
        self.buf.reserve(len) as u32
    }

    /// Zeroed room, for a payload that its encoder may fill only in part.
    pub(crate) fn reserve_zeroed(&mut self, len: usize) -> u32 {
        let off = self.buf.reserve(len);
        self.buf[off..off + len].fill(0);
        off as u32
    }

    pub fn data(&self, op: &Op) -> &[u8] {
        &self.buf[op.data as usize..op.data as usize + op.len as usize]
    }
}

/// A batch's bytes: a vector that a new batch reuses without zeroing what it reserves.
///
/// A READ's span is overwritten by the READ, so reserving one hands out whatever bytes an
/// earlier batch left there (never memory that was not initialized): zeroing READ spans was
/// 1.5% of a TPC-C transaction's instructions on shm. (Spans for encoders are zeroed: see
/// [`Batch::reserve_zeroed`].)
/// Dereferences to the bytes in use.
#[derive(Debug, Default, Clone)]
pub struct BatchBuf {
    bytes: Vec<u8>,
    len: usize,
}

impl BatchBuf {
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Makes room for `n` more bytes (zeroed only the first time the buffer grows that far);
    /// returns their offset.
    pub fn reserve(&mut self, n: usize) -> usize {
        let off = self.len;
        if self.bytes.len() < off + n {
            self.bytes.resize(off + n, 0);
        }
        self.len = off + n;
        off
    }

    /// Appends `src`; returns its offset.
    pub fn append(&mut self, src: &[u8]) -> usize {
        let off = self.reserve(src.len());
        self.bytes[off..off + src.len()].copy_from_slice(src);
        off
    }
}

impl std::ops::Deref for BatchBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl std::ops::DerefMut for BatchBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[..self.len]
    }
}

/// Cache-line size: the unit of atomicity of READ and WRITE.
pub const LINE: u64 = 64;

/// The 64-byte lines that `addr..addr+len` touches, as `(first, count)`.
pub fn lines_of(addr: u64, len: u64) -> (u64, u64) {
    if len == 0 {
        return (addr / LINE, 0);
    }
    let first = addr / LINE;
    let last = (addr + len - 1) / LINE;
    (first, last - first + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_buf_reuses_its_bytes_and_derefs_to_those_in_use() {
        let mut b = BatchBuf::default();
        assert_eq!(b.append(&[1, 2, 3]), 0);
        assert_eq!(b.reserve(2), 3);
        assert_eq!(&b[..], &[1, 2, 3, 0, 0]);
        b[3] = 9;
        b.clear();
        assert!(b.is_empty());
        // Reserved again: the old bytes, not zeros (the op that reserves overwrites them).
        assert_eq!(b.reserve(4), 0);
        assert_eq!(&b[..], &[1, 2, 3, 9]);
        assert_eq!(b.append(&[5, 6]), 4);
        assert_eq!(&b[..], &[1, 2, 3, 9, 5, 6]);
    }

    #[test]
    fn lines_of_counts_partial_lines() {
        assert_eq!(lines_of(0, 64), (0, 1));
        assert_eq!(lines_of(0, 65), (0, 2));
        assert_eq!(lines_of(60, 8), (0, 2));
        assert_eq!(lines_of(128, 256), (2, 4));
        assert_eq!(lines_of(100, 0), (1, 0));
    }
}
