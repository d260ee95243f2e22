//! The fabric contract: what a backend promises a coordinator, and nothing more.

use crate::{Batch, FabricError, NodeId, NodeSet};
use std::task::Poll;

/// One coordinator's connection to the memory pool: its worker thread's queue pairs (QPs), one
/// per memory node. A backend (`sim`, `shm`, later `ucx`) implements this; protocols never see it
/// directly, they use [`crate::Endpoint`], which builds batches, checks them and counts them.
///
/// # Verbs
///
/// | verb | semantics |
/// |---|---|
/// | READ(addr, len) | copies remote bytes; atomic **only per aligned 64-byte line**; the lines of one READ are fetched in any order, at distinct instants (G2, G3) |
/// | WRITE(addr, bytes) | applied line by line, each line atomically, in increasing address order (G3, G4); not atomic across lines |
/// | CAS(addr, expect, new), FAA(addr, add) | atomic on one aligned 8-byte word; return the old value |
/// | FLUSH(node) | executes after every earlier WRITE on this QP; in persistent-memory mode makes them durable |
/// | RPC(node, req) | a two-sided message served by the memory node's CPU with its [`RpcHandler`] (see *RPCs* below) |
///
/// # Ordering (the one-sided-sync paper's table G1-G10, for RDMA RC)
///
/// Guaranteed:
/// - **Doorbell batch.** Ops posted together ([`Fabric::submit`] of one [`Batch`]) go out
///   together and complete together: one round trip, however many memory nodes they reach.
/// - **G6: an atomic executes before every later op on the same QP** (the same memory node, in
///   this batch or a later one). So CAS(lock) + READ(record) in one batch is "lock, then read":
///   if the CAS succeeded the READ sees the record under the lock.
/// - **G4: WRITEs on one QP are applied in post order**, and each WRITE line by line in
///   increasing address order.
/// - **Completion means executed.** When a batch completes, every effect of its ops is visible to
///   every op posted afterwards by anyone (there is no visibility lag after a completion).
/// - FLUSH executes after every earlier WRITE on its QP.
///
/// **Not** guaranteed (a backend may, and `sim` does, exercise each of these):
/// - **G2/G3: a READ of several lines is not atomic**: its lines are fetched in any order at
///   different instants, so a concurrent WRITE can tear it across lines (never inside a line).
/// - **G5: two READs on one QP are not ordered**, even across batches, and a READ is not ordered
///   after an earlier WRITE or before a later WRITE on the same QP: to read after a write, wait
///   for the write's completion.
/// - An atomic is not ordered after earlier (non-atomic) ops on its QP.
/// - **G7: ops on different QPs are not ordered** (different threads, different memory nodes).
/// - **G8: a WRITE and an atomic on the same word do not compose**: a WRITE that lands while a
///   concurrent FAA updates the word may be lost. A word released by WRITE must be CAS-only.
/// - Durability: in persistent-memory mode, a WRITE is durable only after a later FLUSH on the
///   same QP completes; a memory-node crash drops any unflushed line, at random.
/// - Ops of a batch whose completion was never awaited (the coordinator crashed, or posted it
///   detached) may be executed in part, as a prefix of each QP's ops.
///
/// **Failures.** A batch with an op to a memory node that is down fails with
/// [`FabricError::NodeDown`]; that node's ops of it may have executed as a prefix. Its ops to
/// the other nodes still execute (each node has its own QP), and the failed batch completes
/// only once they have, so a roll-back's WRITEs to the live replicas land although the dead
/// one's cannot. The completed batch names every node it failed on ([`crate::Batch::failed`],
/// and [`Fabric::background_failed`] for a background batch; the error names one of them),
/// and a `NodeDown` error means no other kind of failure happened in it: the endpoint relies
/// on both to pass over a failure that hit only lease renewals.
///
/// G9 (one NIC per region) and G10 (atomics serialize per `addr mod 4096` slot) are performance
/// facts, modelled by the `sim` hardware profile, not ordering rules.
///
/// # RPCs: memory nodes with CPUs
///
/// An RPC is a two-sided message served by the memory node's CPU, not by its NIC:
/// - **Not ordered with one-sided ops.** RPCs travel on another channel than the QP's verbs:
///   no G6 for them (a CAS posted before an RPC in one batch may execute after the handler, and
///   the other way round), and no order with the verbs of earlier or later batches beyond
///   "completion means executed".
/// - **Packing.** All RPC ops of one batch to the same memory node travel as ONE message (as in
///   RRPC and FaSST): one request message, one response message, counted in
///   [`crate::Stats::rpc_messages`]; the request count stays `verbs[Rpc]`. The requests of a
///   message are served in post order, one after another, by one core of the node. With
///   [`crate::Endpoint::set_rpc_pack_limit`] (sim only: RRPC's size rule), a request above
///   the limit travels as a message of its own (same doorbell, same receive ring: still
///   served in post order with the others, by the same core), counted and charged as one.
/// - **Concurrency.** Different messages (other batches, other coordinators) may be served at
///   once on different cores, so a handler must be correct when it runs concurrently with
///   itself: each [`LocalMem`] access is atomic per line (per word for CAS/FAA), nothing more.
/// - **Completion.** A batch completes when every op of it has, every RPC response included.
///   Its responses' handler CPU time is returned with them ([`crate::Stats::mn_cpu_ns`]).
/// - **Failures.** An RPC to a memory node that is down, or crashes before serving it, fails
///   the batch with [`FabricError::NodeDown`], as verbs do.
///
/// **G11: CPU atomics and NIC atomics do not compose.** A handler's CAS/FAA (a CPU atomic) is
/// not atomic with respect to a one-sided CAS/FAA on the same word: an RDMA NIC's atomics are
/// atomic only among themselves (`IBV_ATOMIC_HCA`), the NIC may hold the word in its own atomic
/// unit while the CPU updates it. So during a run, each word is updated atomically either by
/// handlers or by verbs, never both. `sim` counts the words that break this rule in
/// [`crate::RunReport::g11_violations`] (tracked only while an RPC handler is installed).
pub trait Fabric {
    /// Rings the doorbells: starts every op of `batch`. The backend copies what it needs, or
    /// (a backend that executes at once) writes results into the batch now; the caller reads
    /// them only after [`Fabric::poll_complete`] says `Ready`. With `detached`, nobody will wait
    /// for the completion: results are discarded and errors ignored.
    fn submit(&mut self, batch: &mut Batch, detached: bool) -> Result<(), FabricError>;

    /// Posts a background batch: started now, awaited later with [`Fabric::poll_background`]
    /// (e.g. FORD's undo log, written while the transaction's logic runs). At most one is
    /// outstanding per coordinator; its results are discarded. The default suits backends
    /// that execute ops at submit time.
    fn submit_background(&mut self, batch: &mut Batch) -> Result<(), FabricError> {
        self.submit(batch, true)
    }

    /// Ready when the background batch (if any) has completed, with its outcome.
    fn poll_background(&mut self) -> Poll<Result<(), FabricError>> {
        Poll::Ready(Ok(()))
    }

    /// After [`Fabric::poll_background`] was `Ready` with an error: every memory node that
    /// background batch failed on, as [`Batch::failed`] for an awaited one. A backend whose
    /// background batches can fail must name them all (the default suits backends whose
    /// background batches never fail).
    fn background_failed(&self) -> NodeSet {
        NodeSet::default()
    }

    /// Polls the one outstanding awaited batch; when it is complete, writes the results (READ
    /// data into its span of `batch.buf`, old values into `batch.words`, RPC responses) and
    /// returns `Ready`.
    fn poll_complete(&mut self, batch: &mut Batch) -> Poll<Result<(), FabricError>>;

    /// The coordinator's clock in nanoseconds: virtual on `sim`, wall time since the run started
    /// on `shm`.
    fn now_ns(&self) -> u64;

    /// The clock lease words are written and judged on, which every coordinator of the pool
    /// must share: `sim`'s virtual time (the default, [`Fabric::now_ns`]); on `shm` and `ucx`
    /// the host's wall clock ([`wall_clock_ns`]), shared by the processes of a host and,
    /// within the clocks' skew, by hosts whose clocks are synchronized. A lease holder fences
    /// itself on [`Fabric::now_ns`] (its own monotonic clock): a step of the wall clock does
    /// not delay its fencing.
    fn lease_now_ns(&self) -> u64 {
        self.now_ns()
    }

    /// Sleeping: the `first` poll registers the wake-up and always returns `Pending` (so a zero
    /// sleep still yields to the thread's other coroutines); later polls are `Ready` once
    /// `now_ns() >= deadline_ns`.
    fn poll_sleep(&mut self, deadline_ns: u64, first: bool) -> Poll<()>;

    /// Charges `ns` of compute-side CPU work to this coordinator's thread (`sim` only; the real
    /// backends spend real CPU instead).
    fn charge_cpu(&mut self, ns: u64);

    /// Connects again to memory node `node` after it came back as a replacement (a new
    /// region: on RDMA, a new queue pair and rkey). Until then every op to a replacement
    /// fails with `NodeDown`, as on RDMA, where the old connection broke with the node: a
    /// node that failed and came back blank is never used unknowingly. A node still down is
    /// left as it is (its ops keep failing), and so is a healthy connection to the node's
    /// current incarnation. On `sim` ([`crate::sim`]'s rejoins bring nodes back) and on `ucx`
    /// (a memory node daemon started again at its bootstrap address: the call bootstraps from
    /// it again, blocking the thread for that, and replaces the thread's endpoint and rkey if
    /// the node is a new incarnation or the endpoint failed); a no-op elsewhere (`shm`).
    fn reconnect(&mut self, _node: NodeId) {}

    /// What a transaction's own logic costs the CPU (`sim` only): (per transaction, per item
    /// it touches), in nanoseconds. The real backends spend real CPU instead.
    fn logic_cpu_ns(&self) -> (u64, u64) {
        (0, 0)
    }

    /// Region size of every memory node, in bytes.
    fn node_sizes(&self) -> &[u64];
}

/// Memory-node-side access to one region, by its own CPU: loading tables before a run, serving
/// RPCs, inspecting memory after a run. Line atomicity holds as for the verbs; nothing here is
/// ordered with remote ops.
pub trait LocalMem {
    fn size(&self) -> u64;
    fn read(&mut self, addr: u64, buf: &mut [u8]);
    fn write(&mut self, addr: u64, data: &[u8]);
    fn cas(&mut self, addr: u64, expect: u64, new: u64) -> u64;
    fn faa(&mut self, addr: u64, add: u64) -> u64;

    fn read_u64(&mut self, addr: u64) -> u64 {
        let mut b = [0u8; 8];
        self.read(addr, &mut b);
        u64::from_le_bytes(b)
    }

    fn write_u64(&mut self, addr: u64, v: u64) {
        self.write(addr, &v.to_le_bytes());
    }
}

/// Serves two-sided calls on memory nodes (Scythe's RPC-assisted locking, RCC's hybrids). The
/// handler runs on one of the memory node's cores; other cores may run it at the same time for
/// other messages (see *RPCs* in [`Fabric`]). Each of its [`LocalMem`] accesses is atomic per
/// line (per word for CAS/FAA) like a verb, but the handler as a whole is not atomic with
/// respect to concurrent one-sided verbs or other handlers (the `sim` happens to run it at one
/// instant; do not rely on that), and its CAS/FAA do not compose with one-sided ones (G11).
pub trait RpcHandler: Send + Sync {
    /// Handles `req` on `node`, appending the response to `resp`. `now_ns` is the instant it
    /// runs at: virtual time on `sim` (the instant its core starts this request), wall
    /// nanoseconds since the run started on `shm` and `ucx` (the poster's clock, as
    /// [`Fabric::now_ns`]; on `ucx` the poster's clock at sending plus the time the message
    /// has spent at the memory node).
    fn handle(
        &self,
        node: NodeId,
        now_ns: u64,
        mem: &mut dyn LocalMem,
        req: &[u8],
        resp: &mut Vec<u8>,
    );
}

pub(crate) fn check_op(op: &crate::Op, sizes: &[u64], has_rpc: bool) -> Result<(), FabricError> {
    let node = op.node;
    let size = *sizes.get(node as usize).ok_or(FabricError::NoSuchNode {
        node,
        nodes: sizes.len(),
    })?;
    use crate::OpKind::*;
    let len = match op.kind {
        Read | Write => op.len as u64,
        Cas | Faa => {
            if !op.addr.is_multiple_of(8) {
                return Err(FabricError::Misaligned {
                    node,
                    addr: op.addr,
                });
            }
            8
        }
        Flush => 0,
        Rpc => {
            if !has_rpc {
                return Err(FabricError::NoRpcHandler(node));
            }
            0
        }
    };
    if op.addr.checked_add(len).is_none_or(|end| end > size) {
        return Err(FabricError::OutOfBounds {
            node,
            addr: op.addr,
            len,
            size,
        });
    }
    Ok(())
}

/// `CLOCK_REALTIME` in nanoseconds since the Unix epoch: the lease clock of the real backends
/// (`shm`, `ucx`). Processes on one host read the same clock; hosts agree within the skew of
/// their clock synchronization (NTP, PTP), which a lease's guard must cover.
pub fn wall_clock_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
