//! A coordinator's handle on the fabric: builds doorbell batches, posts them, counts them.

use crate::contract::Fabric;
use crate::stats::Stats;
use crate::verbs::{Batch, Op, OpId, OpKind};
use crate::{FabricError, NodeId, NodeSet};
use rand::SeedableRng;
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

/// Where a coordinator runs: compute node, worker thread, coroutine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CoordId {
    pub compute_node: u32,
    pub thread: u32,
    pub coroutine: u32,
    /// Dense index over all coordinators of the run.
    pub index: u32,
}

/// The deterministic RNG handed to coordinators (seeded from the run seed and the coordinator).
pub type CoordRng = rand_pcg::Pcg64Mcg;

/// One coordinator's access to the memory pool.
///
/// Build a batch with [`read`](Self::read), [`write`](Self::write), [`cas`](Self::cas),
/// [`faa`](Self::faa), [`flush`](Self::flush) and [`rpc`](Self::rpc); each returns an [`OpId`].
/// [`post`](Self::post) rings the doorbells and resolves when every op has completed: one round
/// trip. The results ([`bytes`](Self::bytes), [`old`](Self::old)) stay readable until the next
/// op is added. The guarantees are those of [`Fabric`], nothing more.
///
/// A coordinator future may await only what its `Endpoint` hands out (`post`, `sleep`,
/// `yield_now`): the executors know no other wake-up source.
pub struct Endpoint {
    id: CoordId,
    fabric: Box<dyn Fabric>,
    batch: Batch,
    /// True while `batch` holds the results of the last posted batch.
    completed: bool,
    /// A background batch is outstanding.
    background: bool,
    /// An op of the batch being built was too large for one verb.
    too_large: Option<u64>,
    /// Shared with the executor, which reports the counters even of a coordinator whose compute
    /// node crashed (its future, and this endpoint with it, is dropped mid-flight).
    stats: Rc<Cell<Stats>>,
    rng: CoordRng,
    /// Measure the time spent in `submit` ([`Stats::fabric_ns`]).
    time_fabric: bool,
    /// The lease this coordinator holds, if any ([`Endpoint::hold_lease`]).
    lease: Option<Held>,
    /// Its lease may have expired: every post is refused from then on.
    fenced: bool,
    /// With a lease held: when (its own clock) the awaited batch, and the background batch,
    /// passed the lease gate, and the longest time seen from there to an observed completion.
    gated_at: Option<u64>,
    background_gated_at: Option<u64>,
    max_flight_ns: u64,
    /// A memory node found down fences this coordinator ([`Endpoint::fence_on_node_down`]).
    fence_on_node_down: bool,
    /// Memory nodes a batch failed on ([`FabricError::NodeDown`]): fail-stop, so a renewal
    /// writes no copy there again (its batch would fail every time).
    down: NodeSet,
    /// With a lease held, the nodes the outstanding background batch does its caller's work
    /// on (its ops but the lease renewals): a failure elsewhere is passed over, as for an
    /// awaited batch. `None`: no lease, so no renewal rode in it.
    background_callers: Option<NodeSet>,
}

/// A lease in the pool, held by one coordinator: a word it alone WRITEs (nobody CASes it),
/// holding [`Lease::word`]. See [`Endpoint::hold_lease`] for the fencing it implies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The memory nodes holding a copy of the word (the control chain's members): a renewal
    /// WRITEs it on each one not seen down, and a reader takes the latest copy.
    pub nodes: NodeSet,
    /// The lease word (8-byte aligned), at this address on each node.
    pub addr: u64,
    /// A renewal at `t` (this coordinator's clock) grants the lease until `t + lease_ns`.
    pub lease_ns: u64,
    /// The coordinator posts nothing at or after `expiry - guard_ns`: the guard covers the
    /// longest time an op spends between its post and its execution (see the `membership`
    /// module of dtxn-txn for the argument).
    pub guard_ns: u64,
    /// Which life of this lease slot this is (15 bits: [`Lease::word`]).
    pub incarnation: u16,
}

/// The lease word's `done` bit: its holder has finished its work (it holds no lock and has
/// no transaction pending), so its expiry calls for no recovery.
pub const LEASE_DONE: u64 = 1 << 15;
const INCARNATION_MASK: u64 = LEASE_DONE - 1;

impl Lease {
    /// The lease word: the expiry (ns) in the high 48 bits, the done bit, the incarnation.
    pub fn word(expiry_ns: u64, done: bool, incarnation: u16) -> u64 {
        (expiry_ns << 16)
            | if done { LEASE_DONE } else { 0 }
            | (u64::from(incarnation) & INCARNATION_MASK)
    }

    /// `(expiry_ns, done, incarnation)` of a lease word.
    pub fn parse(word: u64) -> (u64, bool, u16) {
        (
            word >> 16,
            word & LEASE_DONE != 0,
            (word & INCARNATION_MASK) as u16,
        )
    }

    /// [`Lease::parse`] of a word read at `now_ns` (the lease clock): the word keeps the
    /// expiry's low 48 bits (78 hours of nanoseconds), so the expiry is the value with those
    /// bits nearest to `now_ns`. The wall clock of `shm` and `ucx` counts from 1970, past 48
    /// bits; an expiry is never further than 2^47 ns (39 hours) from a clock that reads it
    /// (leases are shorter, [`Lease::MAX_NS`]). On `sim`'s clock, below 2^47, it is the word's.
    pub fn parse_near(word: u64, now_ns: u64) -> (u64, bool, u16) {
        let (low, done, incarnation) = Lease::parse(word);
        const SPAN: u64 = 1 << 48;
        let base = now_ns & !(SPAN - 1);
        let candidates = [
            base.wrapping_sub(SPAN) | low,
            base | low,
            base.wrapping_add(SPAN) | low,
        ];
        let expiry = candidates
            .into_iter()
            .min_by_key(|&c| c.abs_diff(now_ns))
            .unwrap_or(low);
        (expiry, done, incarnation)
    }

    /// The longest lease a word can express unambiguously ([`Lease::parse_near`]).
    pub const MAX_NS: u64 = 1 << 47;

    /// The incarnation after `i` (15 bits, never 0: 0 is a slot never held).
    pub fn next_incarnation(i: u16) -> u16 {
        let n = (u64::from(i) + 1) & INCARNATION_MASK;
        n.max(1) as u16
    }
}

/// A lease being held: its terms, the expiry last granted (lease clock), when it was renewed
/// and when it must stop posting (its own clock).
#[derive(Debug, Clone, Copy)]
struct Held {
    lease: Lease,
    expiry: u64,
    renewed_at: u64,
    /// `renewed_at + lease_ns` (the local clock): posts stop at `deadline - guard`.
    deadline: u64,
    done: bool,
}

impl Endpoint {
    pub fn new(id: CoordId, seed: u64, fabric: Box<dyn Fabric>) -> Endpoint {
        let mix = seed ^ (u64::from(id.index) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        Endpoint {
            id,
            fabric,
            batch: Batch::default(),
            completed: false,
            background: false,
            too_large: None,
            stats: Rc::default(),
            rng: CoordRng::seed_from_u64(mix),
            time_fabric: false,
            lease: None,
            fenced: false,
            gated_at: None,
            background_gated_at: None,
            max_flight_ns: 0,
            fence_on_node_down: false,
            down: NodeSet::default(),
            background_callers: None,
        }
    }

    /// From now on, a batch that fails with [`FabricError::NodeDown`] fences this coordinator
    /// as an expired lease does: it posts nothing more (every post is refused with
    /// [`FabricError::LeaseExpired`]), so its transaction's abort path writes nothing on top
    /// of what the failure left, and the pool holds what executed before it, for recovery
    /// from its log once the memory node is back (`dtxn bench --wait-memnodes`). Off by
    /// default: protocols then handle a replica's failure themselves.
    pub fn fence_on_node_down(&mut self, on: bool) {
        self.fence_on_node_down = on;
    }

    /// `r`, noting a memory node's failure (see [`Endpoint::fence_on_node_down`]).
    fn noted<T>(&mut self, r: Result<T, FabricError>) -> Result<T, FabricError> {
        self.noted_with(r, NodeSet::default())
    }

    /// [`Endpoint::noted`], with `failed` the other nodes the batch failed on.
    fn noted_with<T>(
        &mut self,
        r: Result<T, FabricError>,
        failed: NodeSet,
    ) -> Result<T, FabricError> {
        if let Err(FabricError::NodeDown(n)) = r {
            self.down = self.down.union(failed).with(n);
            if self.fence_on_node_down {
                self.fenced = true;
            }
        }
        r
    }

    /// A batch (awaited, or background) failed only on memory nodes where it did nothing but
    /// renew the lease (`failed`: every node it failed on; `callers`: the nodes of its other
    /// ops): the failure is noted and not reported. Every other op of the batch executed (the
    /// contract: a failed batch's ops to live nodes still do, and it completes after them),
    /// and a lease copy on a node that failed is not read while it is down, nor after it
    /// comes back (a node failed in a view is no control member), so the caller's batch did
    /// all it asked. (Without this, a renewal's copy on a control member that died would fail
    /// whatever transaction or recovery step it rode with.)
    fn unless_renewals_only(
        r: Result<(), FabricError>,
        failed: NodeSet,
        callers: impl FnOnce() -> NodeSet,
    ) -> Result<(), FabricError> {
        let Err(FabricError::NodeDown(n)) = r else {
            return r;
        };
        // Looked at only on a failure: a batch that succeeds costs nothing here.
        let callers = callers();
        match failed.with(n).iter().any(|f| callers.contains(f)) {
            true => r,
            false => Ok(()),
        }
    }

    /// The nodes the batch being posted does its caller's work on: the nodes of its ops but
    /// the lease renewals (a WRITE of the lease word on one of its copies: nobody else writes
    /// it).
    fn callers(&self) -> NodeSet {
        let renewal = |op: &Op| {
            self.lease.is_some_and(|h| {
                op.kind == OpKind::Write
                    && op.addr == h.lease.addr
                    && op.len == 8
                    && h.lease.nodes.contains(op.node)
            })
        };
        self.batch
            .ops
            .iter()
            .filter(|op| !renewal(op))
            .map(|op| op.node)
            .collect()
    }

    /// The memory nodes a batch of this coordinator failed on so far.
    pub fn seen_down(&self) -> NodeSet {
        self.down
    }

    /// Holds `lease` from now on: the next post carries a renewal (a WRITE of the lease word,
    /// appended to its batch), and so does every post once a quarter of the lease has passed
    /// since the last renewal. A renewal at `r` on the lease clock ([`Endpoint::lease_now_ns`])
    /// writes `expiry = r + lease`. **Fencing**: a post at or after `lease - guard` since the
    /// last renewal (measured on this coordinator's own clock, [`Endpoint::now_ns`]: on `sim`
    /// the same clock, on a real host a monotonic one, which no wall-clock step delays) is
    /// refused with [`FabricError::LeaseExpired`], and so is every later one: whatever this
    /// coordinator posted before then has executed by `expiry` (the guard covers an op's
    /// flight, and on a real host the clocks' skew), when a successor may start recovering
    /// it. Until the first renewal has landed the pool's word is the previous one: post the
    /// first renewal alone and await it ([`Endpoint::renew_lease`]) before acting under the
    /// lease.
    pub fn hold_lease(&mut self, lease: Lease) {
        let now = self.fabric.now_ns();
        self.lease = Some(Held {
            lease,
            expiry: self.fabric.lease_now_ns().saturating_add(lease.lease_ns),
            renewed_at: 0,
            deadline: now.saturating_add(lease.lease_ns),
            done: false,
        });
        self.fenced = false;
        self.force_renewal();
    }

    /// Posts a renewal of the lease now (one round trip), or fails if it is fenced.
    pub async fn renew_lease(&mut self) -> Result<(), FabricError> {
        self.force_renewal();
        // An empty batch posts nothing: the renewal goes in one of its own.
        self.start_op();
        self.lease_gate()?;
        self.post().await
    }

    /// From the next renewal on, the lease says its holder is done ([`LEASE_DONE`]).
    pub fn lease_done(&mut self) {
        if let Some(h) = &mut self.lease {
            h.done = true;
        }
        self.force_renewal();
    }

    /// Marks the held lease live again, undoing [`Endpoint::lease_done`], with the renewal
    /// that says so in the next batch; true if it was done. A done coordinator counts as
    /// settled (nobody recovers it), so one that takes locks again, as the re-replication
    /// copier does, must be live for as long as it may hold them.
    pub fn lease_undone(&mut self) -> bool {
        let was = self.lease.as_ref().is_some_and(|h| h.done);
        if was {
            if let Some(h) = &mut self.lease {
                h.done = false;
            }
            self.force_renewal();
        }
        was
    }

    fn force_renewal(&mut self) {
        if let Some(h) = &mut self.lease {
            h.renewed_at = 0;
        }
    }

    /// The held lease's terms and its expiry as last granted, if any.
    pub fn lease(&self) -> Option<(Lease, u64)> {
        self.lease.map(|h| (h.lease, h.expiry))
    }

    /// Whether this coordinator's lease may have expired: it posts nothing any more.
    pub fn fenced(&self) -> bool {
        self.fenced
    }

    /// With a lease held, the longest time (this coordinator's clock) from a batch's pass
    /// through the lease gate, before its doorbell, to its observed completion: an upper bound
    /// of the op flight plus any preemption between the clock read and the doorbell, which
    /// the guard must cover. Awaited and background batches; detached ones are never observed.
    pub fn max_flight_ns(&self) -> u64 {
        self.max_flight_ns
    }

    fn observed(&mut self, gated_at: Option<u64>) {
        if let Some(t) = gated_at {
            let flight = self.fabric.now_ns().saturating_sub(t);
            self.max_flight_ns = self.max_flight_ns.max(flight);
        }
    }

    /// Before a batch is submitted: refuses it if the lease may have expired, else appends
    /// a renewal when one is due.
    fn lease_gate(&mut self) -> Result<(), FabricError> {
        if self.fenced {
            return Err(FabricError::LeaseExpired);
        }
        let Some(h) = &mut self.lease else {
            return Ok(());
        };
        let now = self.fabric.now_ns();
        if self.fenced || now.saturating_add(h.lease.guard_ns) >= h.deadline {
            self.fenced = true;
            return Err(FabricError::LeaseExpired);
        }
        self.gated_at = Some(now);
        let renew = h.renewed_at == 0 || now >= h.renewed_at + h.lease.lease_ns / 4;
        // With no copy left to write (every node of the lease seen down) nothing renews it:
        // the lease runs out, and the gate fences this coordinator then.
        if renew && !h.lease.nodes.minus(self.down).is_empty() {
            // The lease clock is read after the local one: the expiry it grants is at least
            // `lease` after the instant `deadline` counts from.
            let expiry = self.fabric.lease_now_ns() + h.lease.lease_ns;
            let word = Lease::word(expiry, h.done, h.lease.incarnation);
            let (nodes, addr) = (h.lease.nodes.minus(self.down), h.lease.addr);
            h.expiry = expiry;
            h.deadline = now + h.lease.lease_ns;
            h.renewed_at = now.max(1);
            // One copy of the word in the buffer, one WRITE per live copy.
            let data = self.batch.buf.len() as u32;
            self.batch.append_buf(&word.to_le_bytes());
            for node in nodes.iter() {
                self.push_write(node, addr, 8, data);
            }
        }
        Ok(())
    }

    pub fn id(&self) -> CoordId {
        self.id
    }

    /// Counters since this coordinator started.
    pub fn stats(&self) -> Stats {
        self.stats.get()
    }

    /// Measures from now on the wall time spent in the backend's `submit`
    /// ([`Stats::fabric_ns`]): on `shm` the time executing the verbs, which, against a
    /// transaction's latency, splits it into memory work and the protocol's own CPU work. Off
    /// by default: it costs two clock reads per batch. Meant for `shm`: on `sim` it would put
    /// wall time into otherwise deterministic counters, and on `ucx` `submit` only posts.
    pub fn time_fabric(&mut self, on: bool) {
        self.time_fabric = on;
    }

    /// `submit` (one of the backend's submits of the batch), timed if asked
    /// ([`Self::time_fabric`]).
    fn timed(
        &mut self,
        submit: impl FnOnce(&mut dyn Fabric, &mut Batch) -> Result<(), FabricError>,
    ) -> Result<(), FabricError> {
        let start = self.time_fabric.then(std::time::Instant::now);
        let r = submit(&mut *self.fabric, &mut self.batch);
        if let Some(start) = start {
            let mut s = self.stats.get();
            s.fabric_ns += start.elapsed().as_nanos() as u64;
            self.stats.set(s);
        }
        r
    }

    pub(crate) fn stats_cell(&self) -> Rc<Cell<Stats>> {
        self.stats.clone()
    }

    pub fn rng(&mut self) -> &mut CoordRng {
        &mut self.rng
    }

    pub fn now_ns(&self) -> u64 {
        self.fabric.now_ns()
    }

    /// The clock leases are written and judged on ([`Fabric::lease_now_ns`]): `sim`'s
    /// virtual time, the wall clock on `shm` and `ucx`.
    pub fn lease_now_ns(&self) -> u64 {
        self.fabric.lease_now_ns()
    }

    /// Connects again to memory node `node`, which came back as a replacement (see
    /// [`Fabric::reconnect`]): until then its ops fail with `NodeDown`.
    pub fn reconnect(&mut self, node: NodeId) {
        self.fabric.reconnect(node);
    }

    /// Number of memory nodes and their region sizes.
    pub fn node_sizes(&self) -> &[u64] {
        self.fabric.node_sizes()
    }

    /// Charges compute-side CPU work (virtual time on `sim`; no-op elsewhere).
    pub fn compute(&mut self, ns: u64) {
        self.fabric.charge_cpu(ns);
    }

    /// Charges the CPU cost of a transaction's own logic: `txns` transactions begun and
    /// `items` items touched, at the backend's price ([`Fabric::logic_cpu_ns`]; nothing on the
    /// real backends, whose CPU is real, nor on profiles without one).
    pub fn charge_logic(&mut self, txns: u64, items: u64) {
        let (per_txn, per_item) = self.fabric.logic_cpu_ns();
        let ns = txns * per_txn + items * per_item;
        if ns > 0 {
            self.fabric.charge_cpu(ns);
        }
    }

    fn start_op(&mut self) {
        if self.completed {
            self.batch.clear();
            self.completed = false;
            self.too_large = None;
        }
    }

    /// Lengths and batch offsets are 32-bit: a larger op is refused at post time.
    fn check_len(&mut self, len: usize) -> usize {
        if len > u32::MAX as usize || self.batch.buf.len() + len > u32::MAX as usize {
            self.too_large = Some(len as u64);
            return 0;
        }
        len
    }

    /// READ `len` bytes at `addr` on `node`.
    pub fn read(&mut self, node: NodeId, addr: u64, len: usize) -> OpId {
        self.start_op();
        let len = self.check_len(len);
        let data = self.batch.reserve_buf(len);
        self.batch.push(Op {
            kind: OpKind::Read,
            node,
            addr,
            len: len as u32,
            data,
            arg0: 0,
            arg1: 0,
        })
    }

    /// WRITE `bytes` at `addr` on `node`.
    pub fn write(&mut self, node: NodeId, addr: u64, bytes: &[u8]) -> OpId {
        self.write_parts(node, addr, &[bytes])
    }

    /// WRITE the concatenation of `parts` at `addr`: one op, its payload assembled in the
    /// batch (no zeroed span, no staging copy).
    // Inlined: `write` is this with one part, and is posted for every record WRITE (without
    // inlining the loop over parts cost 2% of a TPC-C transaction's instructions).
    #[inline]
    pub fn write_parts(&mut self, node: NodeId, addr: u64, parts: &[&[u8]]) -> OpId {
        self.start_op();
        let len = parts.iter().map(|p| p.len()).sum();
        if self.check_len(len) != len {
            return self.push_write(node, addr, 0, 0);
        }
        let data = self.batch.buf.len() as u32;
        for p in parts {
            self.batch.append_buf(p);
        }
        self.push_write(node, addr, len, data)
    }

    /// WRITE `len` bytes at `addr`, encoded in place by `fill` (no staging copy).
    pub fn write_with(
        &mut self,
        node: NodeId,
        addr: u64,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> OpId {
        self.start_op();
        if self.check_len(len) != len {
            return self.push_write(node, addr, 0, 0);
        }
        let data = self.batch.reserve_zeroed(len);
        fill(&mut self.batch.buf[data as usize..data as usize + len]);
        self.push_write(node, addr, len, data)
    }

    /// The WRITE op of `len` bytes at batch offset `data` (a refused, too large one: 0, 0).
    fn push_write(&mut self, node: NodeId, addr: u64, len: usize, data: u32) -> OpId {
        self.batch.push(Op {
            kind: OpKind::Write,
            node,
            addr,
            len: len as u32,
            data,
            arg0: 0,
            arg1: 0,
        })
    }

    /// CAS the aligned word at `addr`: if it holds `expect`, store `new`. [`old`](Self::old)
    /// tells what it held; [`cas_ok`](Self::cas_ok) whether the swap happened.
    pub fn cas(&mut self, node: NodeId, addr: u64, expect: u64, new: u64) -> OpId {
        self.start_op();
        self.batch.push(Op {
            kind: OpKind::Cas,
            node,
            addr,
            len: 8,
            data: 0,
            arg0: expect,
            arg1: new,
        })
    }

    /// FAA: add `add` (wrapping) to the aligned word at `addr`; [`old`](Self::old) is its old value.
    pub fn faa(&mut self, node: NodeId, addr: u64, add: u64) -> OpId {
        self.start_op();
        self.batch.push(Op {
            kind: OpKind::Faa,
            node,
            addr,
            len: 8,
            data: 0,
            arg0: add,
            arg1: 0,
        })
    }

    /// FLUSH: executes after every earlier WRITE on `node`'s QP and makes them durable.
    pub fn flush(&mut self, node: NodeId) -> OpId {
        self.start_op();
        self.batch.push(Op {
            kind: OpKind::Flush,
            node,
            addr: 0,
            len: 0,
            data: 0,
            arg0: 0,
            arg1: 0,
        })
    }

    /// RPC: a two-sided request to `node`'s handler; [`bytes`](Self::bytes) is the response.
    pub fn rpc(&mut self, node: NodeId, req: &[u8]) -> OpId {
        self.rpc_parts(node, &[req])
    }

    /// RPC whose request is the concatenation of `parts` (assembled in the batch, no staging
    /// copy).
    pub fn rpc_parts(&mut self, node: NodeId, parts: &[&[u8]]) -> OpId {
        self.start_op();
        let total: usize = parts.iter().map(|p| p.len()).sum();
        // A request too large for one op is refused at post time (`too_large`).
        let len = self.check_len(total);
        let data = self.batch.buf.len() as u32;
        if len == total {
            for p in parts {
                self.batch.append_buf(p);
            }
        }
        self.batch.push(Op {
            kind: OpKind::Rpc,
            node,
            addr: 0,
            len: len as u32,
            data,
            arg0: 0,
            arg1: 0,
        })
    }

    /// Number of ops in the batch being built.
    pub fn pending(&self) -> usize {
        if self.completed {
            0
        } else {
            self.batch.ops.len()
        }
    }

    // Always inlined into the posts, as before RPC messages were counted here (a call per
    // batch showed in profiles); the RPC part is out of line.
    #[inline(always)]
    fn count(&mut self, awaited: bool) {
        let mut s = self.stats.get();
        s.batches += 1;
        if awaited {
            s.round_trips += 1;
        }
        let rpcs_before = s.verbs[OpKind::Rpc as usize];
        for op in &self.batch.ops {
            s.verbs[op.kind as usize] += 1;
            match op.kind {
                OpKind::Read => s.bytes_in += u64::from(op.len),
                OpKind::Write | OpKind::Rpc => s.bytes_out += u64::from(op.len),
                OpKind::Cas => {
                    s.bytes_out += 16;
                    s.bytes_in += 8;
                }
                OpKind::Faa => {
                    s.bytes_out += 8;
                    s.bytes_in += 8;
                }
                OpKind::Flush => {}
            }
        }
        if s.verbs[OpKind::Rpc as usize] != rpcs_before {
            s.rpc_messages += self.rpc_messages();
        }
        self.stats.set(s);
    }

    /// The messages the batch's RPCs are packed into.
    #[cold]
    fn rpc_messages(&self) -> u64 {
        self.batch.rpc_messages()
    }

    /// RRPC's packing rule for this endpoint's RPCs: requests up to `limit` bytes to one
    /// memory node share one message, larger ones travel alone (`Some(512)`: the paper's
    /// threshold; `Some(0)`: a message per request); `None` (the default): one message per
    /// node and batch. Honoured by `sim` only: `shm` and `ucx` always pack per node.
    pub fn set_rpc_pack_limit(&mut self, limit: Option<u32>) {
        self.batch.rpc_pack_limit = limit;
    }

    /// Posts the batch built so far (one doorbell per memory node it touches) and resolves when
    /// all of it has completed: one round trip on the critical path. An empty batch completes at
    /// once and costs nothing.
    pub fn post(&mut self) -> Post<'_> {
        let state = if let Some(len) = self.too_large.take() {
            self.batch.clear();
            self.completed = true;
            Err(Some(FabricError::TooLarge(len)))
        } else if self.completed || self.batch.is_empty() {
            self.batch.clear();
            self.completed = true;
            Err(None)
        } else if let Err(e) = self.lease_gate() {
            self.batch.clear();
            self.completed = true;
            Err(Some(e))
        } else {
            self.count(true);
            let r = self.timed(|f, b| f.submit(b, false));
            match self.noted(r) {
                Ok(()) => Ok(()),
                Err(e) => {
                    self.completed = true;
                    Err(Some(e))
                }
            }
        };
        Post { ep: self, state }
    }

    /// Posts the batch built so far without waiting for it (e.g. a background lock release):
    /// its verbs are counted, no round trip is. Results and errors are dropped; the backend may
    /// execute it after this coordinator's later ops on other QPs (and, if the coordinator
    /// crashes, only in part).
    pub fn post_detached(&mut self) -> Result<(), FabricError> {
        if let Some(len) = self.too_large.take() {
            self.batch.clear();
            return Err(FabricError::TooLarge(len));
        }
        if self.completed || self.batch.is_empty() {
            self.batch.clear();
            self.completed = false;
            return Ok(());
        }
        if let Err(e) = self.lease_gate() {
            self.batch.clear();
            return Err(e);
        }
        self.gated_at = None;
        self.count(false);
        let r = self.timed(|f, b| f.submit(b, true));
        self.batch.clear();
        self.noted(r)
    }

    /// Posts the batch built so far in the background: it executes while the coordinator goes
    /// on, and [`wait_background`](Self::wait_background) waits for its completion (FORD's undo
    /// log, written in parallel with the transaction's logic and acknowledged before the
    /// commit). Verbs and bytes are counted, no round trip is: by the papers' accounting it is
    /// off the critical path. At most one background batch is outstanding: a second call waits
    /// for nothing and replaces nothing, it is an error.
    pub fn post_background(&mut self) -> Result<(), FabricError> {
        if let Some(len) = self.too_large.take() {
            self.batch.clear();
            return Err(FabricError::TooLarge(len));
        }
        if self.completed || self.batch.is_empty() {
            self.batch.clear();
            self.completed = false;
            return Ok(());
        }
        if self.background {
            return Err(FabricError::Setup(
                "a background batch is already outstanding; wait for it first".into(),
            ));
        }
        if let Err(e) = self.lease_gate() {
            self.batch.clear();
            return Err(e);
        }
        self.background_gated_at = self.gated_at.take();
        // Without a lease no renewal rides in the batch: nothing to look for.
        self.background_callers = self.lease.is_some().then(|| self.callers());
        self.count(false);
        let r = self.timed(|f, b| f.submit_background(b));
        let r = self.noted(r);
        self.batch.clear();
        self.background = r.is_ok();
        r
    }

    /// Resolves when the background batch has completed (at once if there is none), with its
    /// outcome: a failed background batch (a memory node down) is reported here.
    pub fn wait_background(&mut self) -> WaitBackground<'_> {
        WaitBackground {
            ep: self,
            waited: false,
        }
    }

    /// Bytes of a completed READ, or the response of a completed RPC.
    pub fn bytes(&self, id: OpId) -> &[u8] {
        debug_assert!(self.completed, "results read before the batch completed");
        let i = self.batch.index(id);
        let op = &self.batch.ops[i];
        match op.kind {
            OpKind::Rpc => {
                let w = self.batch.words[i];
                let (off, len) = ((w >> 32) as usize, (w & 0xffff_ffff) as usize);
                &self.batch.resp[off..off + len]
            }
            _ => self.batch.data(op),
        }
    }

    /// The 8-byte little-endian word at `offset` in a completed READ.
    pub fn word(&self, id: OpId, offset: usize) -> u64 {
        let b = self.bytes(id);
        u64::from_le_bytes(b[offset..offset + 8].try_into().expect("8 bytes"))
    }

    /// Old value of a completed CAS or FAA.
    pub fn old(&self, id: OpId) -> u64 {
        debug_assert!(self.completed, "results read before the batch completed");
        self.batch.words[self.batch.index(id)]
    }

    /// Whether a completed CAS swapped.
    pub fn cas_ok(&self, id: OpId) -> bool {
        let op = &self.batch.ops[self.batch.index(id)];
        debug_assert_eq!(op.kind, OpKind::Cas);
        self.old(id) == op.arg0
    }

    /// Sleeps (without using CPU) for `ns`: backoff.
    pub fn sleep(&mut self, ns: u64) -> Sleep<'_> {
        let deadline = self.fabric.now_ns().saturating_add(ns);
        Sleep {
            ep: self,
            deadline,
            first: true,
        }
    }

    /// Lets the other coroutines of this thread run.
    pub fn yield_now(&mut self) -> Sleep<'_> {
        self.sleep(0)
    }
}

/// The future of [`Endpoint::post`].
pub struct Post<'a> {
    ep: &'a mut Endpoint,
    /// `Ok`: in flight; `Err(None)`: done; `Err(Some(e))`: failed at submit.
    state: Result<(), Option<FabricError>>,
}

impl Future for Post<'_> {
    type Output = Result<(), FabricError>;

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match &mut this.state {
            Err(e) => Poll::Ready(match e.take() {
                Some(e) => Err(e),
                None => Ok(()),
            }),
            Ok(()) => {
                let ep = &mut *this.ep;
                match ep.fabric.poll_complete(&mut ep.batch) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(r) => {
                        ep.completed = true;
                        this.state = Err(None);
                        let gated = ep.gated_at.take();
                        ep.observed(gated);
                        let failed = ep.batch.failed;
                        let r = ep.noted_with(r, failed);
                        let r = Endpoint::unless_renewals_only(r, failed, || ep.callers());
                        // RPC responses' sizes are known only now (the rest was counted
                        // at post).
                        if ep.batch.mn_cpu_ns != 0 || !ep.batch.resp.is_empty() {
                            let mut s = ep.stats.get();
                            s.mn_cpu_ns += ep.batch.mn_cpu_ns;
                            s.bytes_in += ep.batch.resp.len() as u64;
                            ep.stats.set(s);
                        }
                        Poll::Ready(r)
                    }
                }
            }
        }
    }
}

/// The future of [`Endpoint::sleep`] and [`Endpoint::yield_now`]. A zero sleep still yields
/// once, so that the other coroutines of the thread get to run.
pub struct Sleep<'a> {
    ep: &'a mut Endpoint,
    deadline: u64,
    first: bool,
}

impl Future for Sleep<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let first = std::mem::replace(&mut this.first, false);
        this.ep.fabric.poll_sleep(this.deadline, first)
    }
}

/// The future of [`Endpoint::wait_background`].
pub struct WaitBackground<'a> {
    ep: &'a mut Endpoint,
    /// It had to wait: counted once as a round trip on the critical path.
    waited: bool,
}

impl Future for WaitBackground<'_> {
    type Output = Result<(), FabricError>;

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let ep = &mut *this.ep;
        if !ep.background {
            return Poll::Ready(Ok(()));
        }
        match ep.fabric.poll_background() {
            Poll::Pending => {
                // A background batch still in flight when it is needed lies on the critical
                // path: the wait is (part of) a round trip like an awaited batch's.
                if !this.waited {
                    this.waited = true;
                    let mut s = ep.stats.get();
                    s.round_trips += 1;
                    ep.stats.set(s);
                }
                Poll::Pending
            }
            Poll::Ready(r) => {
                ep.background = false;
                let gated = ep.background_gated_at.take();
                ep.observed(gated);
                let failed = ep.fabric.background_failed();
                let r = ep.noted_with(r, failed);
                Poll::Ready(match ep.background_callers.take() {
                    Some(callers) => Endpoint::unless_renewals_only(r, failed, || callers),
                    None => r,
                })
            }
        }
    }
}
