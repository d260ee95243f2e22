//! The simulated cluster: memory nodes, queue pairs, the event queue and the adversary.
//!
//! Time is virtual (nanoseconds). A posted op leaves its compute node after the thread's CPU
//! cost, crosses the network, queues at the memory node's NIC, and executes: a READ line by line
//! at random instants (G2), a WRITE line by line in address order (G4), an atomic at one instant
//! after the previous atomic on its NIC atomic-table slot (G10). Every execution is an event in
//! one heap ordered by (time, sequence number), so a run is a pure function of the seed.
//!
//! RPCs take another path: the RPC ops of a batch to one memory node are packed into one
//! message, which crosses the network, takes one NIC op at the node, waits for a free core of
//! the node (FIFO), and is served request after request, each handler at its own virtual
//! instant; then one response message returns. A batch completes when its one-sided part and
//! every response have (`Rec::parts`). Batches without RPCs draw no extra random numbers and
//! push no extra events, so their runs are the same as before RPCs had cores.

use super::config::{Adversary, SimConfig};
use crate::contract::{check_op, LocalMem, RpcHandler};
use crate::profile::Profile;
use crate::verbs::{lines_of, Batch, OpKind, LINE};
use crate::{FabricError, NodeId, NodeSet};
use rand::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet, VecDeque};
use std::sync::Arc;

type SimRng = rand_pcg::Pcg64Mcg;

/// One executed op (or op line), for debugging a seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceEntry {
    pub time_ns: u64,
    pub coord: u32,
    pub node: NodeId,
    pub kind: OpKind,
    pub addr: u64,
    pub len: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// Execute line `line` (relative to the op's first line) of op `op` of batch record `rec`;
    /// `line == u32::MAX` executes the whole op at once.
    Exec {
        rec: u32,
        op: u32,
        line: u32,
    },
    /// One part of the batch is done: its one-sided ops, or one RPC response.
    BatchDone {
        rec: u32,
    },
    /// RPC message `msg` of batch record `rec` has passed its memory node's NIC.
    RpcArrive {
        rec: u32,
        msg: u32,
    },
    /// The core serving message `msg` starts its next request.
    RpcServe {
        rec: u32,
        msg: u32,
    },
    /// The core serving message `msg` is done with it: the response leaves.
    RpcServed {
        rec: u32,
        msg: u32,
    },
    Wake {
        coord: u32,
    },
    CrashCompute {
        cn: u32,
    },
    CrashMemory {
        node: u16,
        down_ns: u64,
    },
    RejoinMemory {
        node: u16,
    },
    RestartMemory {
        node: u16,
    },
}

const WHOLE: u32 = u32::MAX;

struct MemNode {
    mem: Vec<u8>,
    up: bool,
    epoch: u32,
    /// Bumped when a replacement comes back blank ([`World::rejoin_memory`]): coordinators
    /// must reconnect to it.
    incarnation: u32,
    nic_free_at: u64,
    /// Time its NIC spent serving ops (one-sided and RPC messages) since the run started.
    pub(crate) nic_busy_ns: u64,
    /// Next free instant of each NIC atomic-table slot (`addr mod 4096`, per 8-byte word).
    slot_free_at: Vec<u64>,
    /// Words an FAA holds in the NIC's atomic buffer: (addr, value, until).
    faa_held: Vec<(u64, u64, u64)>,
    /// Persistent-memory mode: the durable image and the lines written since their last flush.
    persisted: Vec<u8>,
    /// Per line: [`CLEAN`], the QP (worker thread) + 1 whose WRITEs or atomics changed it
    /// since it was last persisted, or [`SEVERAL`] QPs.
    dirty: Vec<u32>,
    dirty_lines: Vec<u64>,
    /// Cores serving an RPC message now, and the messages waiting for one, in arrival order.
    cores_busy: u32,
    rpc_waiting: VecDeque<(u32, u32)>,
}

/// A line persisted (or not in persistent-memory mode).
const CLEAN: u32 = 0;
/// A line changed by more than one QP since it was last persisted.
const SEVERAL: u32 = u32::MAX;

impl MemNode {
    /// Line `l` was changed by worker thread `qp`'s QP.
    fn mark_dirty(&mut self, l: u64, qp: u32) {
        let d = &mut self.dirty[l as usize];
        if *d == CLEAN {
            self.dirty_lines.push(l);
            *d = qp + 1;
        } else if *d != qp + 1 {
            *d = SEVERAL;
        }
    }

    /// A FLUSH on worker thread `qp`'s QP: persists every line that QP changed.
    fn persist_qp(&mut self, qp: u32) {
        let (mem, persisted, dirty) = (&self.mem, &mut self.persisted, &mut self.dirty);
        self.dirty_lines.retain(|&l| {
            let d = &mut dirty[l as usize];
            if *d != qp + 1 && *d != SEVERAL {
                return true;
            }
            let span = (l * LINE) as usize..((l + 1) * LINE) as usize;
            persisted[span.clone()].copy_from_slice(&mem[span]);
            *d = CLEAN;
            false
        });
    }
}

#[derive(Default, Clone, Copy)]
struct Qp {
    /// Instant the last WRITE on this QP finished applying (later WRITEs and FLUSHes follow it).
    write_end: u64,
    /// Persistent-memory mode: instant the last FLUSH on this QP answered (every later op
    /// follows it).
    flush_end: u64,
    /// Instant of the last atomic on this QP (every later op follows it).
    atomic_at: u64,
}

struct Coord {
    thread: u32,
    cn: u32,
    alive: bool,
    /// The awaited batch in flight.
    rec: Option<u32>,
    /// The background batch in flight.
    bg: Option<u32>,
    /// Per memory node, the incarnation this coordinator is connected to (see
    /// [`World::reconnect`]).
    connected: Vec<u32>,
}

#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Mode {
    #[default]
    Awaited,
    Background,
    Detached,
}

#[derive(Default)]
struct Rec {
    coord: u32,
    thread: u32,
    mode: Mode,
    complete: bool,
    batch: Batch,
    /// Memory-node epoch at submission, per op: an op executing after its node restarted fails.
    epochs: Vec<u32>,
    error: Option<FabricError>,
    /// Parts still to complete: the one-sided ops (one part) and each RPC message.
    parts: u32,
    /// The batch's RPC messages, one per memory node.
    msgs: Vec<RpcMsg>,
}

/// The RPC ops of one batch to one memory node, travelling as one message; with the batch's
/// `rpc_pack_limit`, those above it as messages of their own, posted with one doorbell and
/// still served in post order by one core (they go to the same receive ring), each costing
/// its NIC op and `rpc_msg_cpu_ns`.
#[derive(Default)]
struct RpcMsg {
    node: NodeId,
    /// Wire messages: the packed requests' one (if any), plus one per request alone.
    messages: u32,
    has_packed: bool,
    /// Per op of `ops`: it starts a wire message (charged `rpc_msg_cpu_ns` when served).
    starts: Vec<bool>,
    /// Op indices, in post order.
    ops: Vec<u32>,
    /// Index into `ops` of the next request to serve.
    next: u32,
    /// When the last of its ops was posted (the message leaves then).
    depart: u64,
    req_bytes: u64,
    resp_bytes: u64,
    /// Memory-node epoch at submission: a node that restarted since fails the message.
    epoch: u32,
}

pub(crate) struct World {
    pub now: u64,
    seq: u64,
    heap: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    rng: SimRng,
    pub profile: Profile,
    adv: Adversary,
    persistent: bool,
    nodes: Vec<MemNode>,
    pub sizes: Vec<u64>,
    pub rpc: Option<Arc<dyn RpcHandler>>,
    threads_cpu_free_at: Vec<u64>,
    /// Per compute node: next instant its NIC is free to post an op (profiles with a compute
    /// NIC only).
    cn_nic_free_at: Vec<u64>,
    qps: Vec<Qp>,
    coords: Vec<Coord>,
    recs: Vec<Rec>,
    free_recs: Vec<u32>,
    pub ready: Vec<u32>,
    /// Per compute node: ops of its coordinators executing after this instant are lost.
    cutoff: Vec<u64>,
    /// Coordinators whose compute node crashed, for the executor to drop.
    pub killed: Vec<u32>,
    pub hash: u64,
    pub verbs_executed: u64,
    pub trace: Option<Vec<TraceEntry>>,
    delay_prob: f64,
    delay_max_ns: u64,
    /// G11 bookkeeping for the current run (kept only while an RPC handler is installed):
    /// words (`node << 48 | addr`) updated by handler atomics, by verb atomics, and those
    /// already counted as violations.
    g11_handler: HashSet<u64>,
    g11_verb: HashSet<u64>,
    g11_hit: HashSet<u64>,
    pub g11_violations: u64,
    /// The longest flight of a one-sided op this run (post to last line executed).
    pub max_flight_ns: u64,
    /// Scratch: the words a handler's CAS/FAA touched.
    rpc_atomics: Vec<u64>,
}

fn g11_key(node: NodeId, addr: u64) -> u64 {
    (u64::from(node) << 48) | addr
}

fn mix(h: u64, x: u64) -> u64 {
    (h ^ x).wrapping_mul(0x0000_0100_0000_01b3).rotate_left(29)
}

fn mix_bytes(mut h: u64, b: &[u8]) -> u64 {
    let mut words = b.chunks_exact(8);
    for c in &mut words {
        h = mix(h, u64::from_le_bytes(c.try_into().expect("8 bytes")));
    }
    for &byte in words.remainder() {
        h = mix(h, u64::from(byte));
    }
    h
}

impl World {
    pub fn new(cfg: &SimConfig) -> Result<World, FabricError> {
        cfg.profile.validate().map_err(FabricError::Setup)?;
        if cfg.node_sizes.is_empty() {
            return Err(FabricError::Setup(
                "a pool needs at least one memory node".into(),
            ));
        }
        let mut nodes = Vec::new();
        for (i, &size) in cfg.node_sizes.iter().enumerate() {
            if size == 0 || size % LINE != 0 {
                return Err(FabricError::Setup(format!(
                    "memory node {i}: region size {size} is not a positive multiple of 64 bytes"
                )));
            }
            let lines = (size / LINE) as usize;
            nodes.push(MemNode {
                mem: vec![0; size as usize],
                up: true,
                epoch: 0,
                incarnation: 0,
                nic_free_at: 0,
                nic_busy_ns: 0,
                slot_free_at: vec![0; 4096 / 8],
                faa_held: Vec::new(),
                persisted: if cfg.persistent {
                    vec![0; size as usize]
                } else {
                    Vec::new()
                },
                dirty: if cfg.persistent {
                    vec![CLEAN; lines]
                } else {
                    Vec::new()
                },
                dirty_lines: Vec::new(),
                cores_busy: 0,
                rpc_waiting: VecDeque::new(),
            });
        }
        Ok(World {
            now: 0,
            seq: 0,
            heap: BinaryHeap::new(),
            rng: SimRng::seed_from_u64(cfg.seed),
            profile: cfg.profile.clone(),
            adv: cfg.adversary.clone(),
            persistent: cfg.persistent,
            nodes,
            sizes: cfg.node_sizes.clone(),
            rpc: None,
            threads_cpu_free_at: Vec::new(),
            cn_nic_free_at: Vec::new(),
            qps: Vec::new(),
            coords: Vec::new(),
            recs: Vec::new(),
            free_recs: Vec::new(),
            ready: Vec::new(),
            cutoff: Vec::new(),
            killed: Vec::new(),
            hash: cfg.seed,
            verbs_executed: 0,
            trace: if cfg.keep_trace {
                Some(Vec::new())
            } else {
                None
            },
            delay_prob: cfg.faults.delay_prob,
            delay_max_ns: cfg.faults.delay_max_ns,
            g11_handler: HashSet::new(),
            g11_verb: HashSet::new(),
            g11_hit: HashSet::new(),
            g11_violations: 0,
            max_flight_ns: 0,
            rpc_atomics: Vec::new(),
        })
    }

    /// The fault plan's op delays, for the next runs.
    pub fn set_delays(&mut self, faults: &super::config::Faults) {
        self.delay_prob = faults.delay_prob;
        self.delay_max_ns = faults.delay_max_ns;
    }

    fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, ev)));
    }

    /// Sets up a run's coordinators: `threads[i]` is the compute node of thread `i`,
    /// `coords[j]` the thread of coordinator `j`.
    pub fn start_run(&mut self, compute_nodes: u32, thread_cn: &[u32], coord_thread: &[u32]) {
        self.threads_cpu_free_at = vec![self.now; thread_cn.len()];
        self.cn_nic_free_at = vec![self.now; compute_nodes as usize];
        self.qps = vec![Qp::default(); thread_cn.len() * self.nodes.len()];
        for n in &mut self.nodes {
            n.nic_busy_ns = 0;
        }
        self.coords = coord_thread
            .iter()
            .map(|&t| Coord {
                thread: t,
                cn: thread_cn[t as usize],
                alive: true,
                rec: None,
                bg: None,
                connected: self.nodes.iter().map(|n| n.incarnation).collect(),
            })
            .collect();
        self.cutoff = vec![u64::MAX; compute_nodes as usize];
        self.ready = (0..coord_thread.len() as u32).collect();
        self.killed.clear();
        // Each run's report covers that run only (the pool's memory carries over, counters do
        // not); the hash still depends on everything before, through the memory.
        self.verbs_executed = 0;
        self.g11_handler.clear();
        self.g11_verb.clear();
        self.g11_hit.clear();
        self.g11_violations = 0;
        self.max_flight_ns = 0;
    }

    pub fn schedule_faults(&mut self, faults: &super::config::Faults) {
        let base = self.now;
        for c in &faults.compute_crashes {
            self.push(base + c.at_ns, Ev::CrashCompute { cn: c.compute_node });
        }
        for c in &faults.memory_crashes {
            self.push(
                base + c.at_ns,
                Ev::CrashMemory {
                    node: c.node,
                    down_ns: c.down_ns,
                },
            );
        }
        for r in &faults.memory_rejoins {
            self.push(base + r.at_ns, Ev::RejoinMemory { node: r.node });
        }
    }

    /// Ends a run: forget pending events (ops of coordinators that no longer exist).
    /// Per memory node, its NIC's busy time since the run started.
    pub fn nic_busy_ns(&self) -> Vec<u64> {
        self.nodes.iter().map(|n| n.nic_busy_ns).collect()
    }

    pub fn end_run(&mut self) {
        self.heap.clear();
        self.recs.clear();
        self.free_recs.clear();
        self.ready.clear();
        for n in &mut self.nodes {
            n.cores_busy = 0;
            n.rpc_waiting.clear();
        }
    }

    pub fn coord_now(&self, coord: u32) -> u64 {
        let t = self.coords[coord as usize].thread as usize;
        self.now.max(self.threads_cpu_free_at[t])
    }

    /// Coordinator `coord` connects to memory node `node` as it is now (a replacement that
    /// came back: its ops were failing until then).
    pub fn reconnect(&mut self, coord: u32, node: NodeId) {
        if let (Some(c), Some(n)) = (
            self.coords.get_mut(coord as usize),
            self.nodes.get(node as usize),
        ) {
            c.connected[node as usize] = n.incarnation;
        }
    }

    /// The epoch an op of `coord` to `node` carries: the node's, unless the coordinator is
    /// connected to an earlier incarnation of it (then no epoch the node will have: it fails).
    fn op_epoch(&self, coord: u32, node: usize) -> u32 {
        let n = &self.nodes[node];
        if self.coords[coord as usize].connected[node] == n.incarnation {
            n.epoch
        } else {
            u32::MAX
        }
    }

    pub fn charge_cpu(&mut self, coord: u32, ns: u64) {
        let t = self.coords[coord as usize].thread as usize;
        self.threads_cpu_free_at[t] = self.now.max(self.threads_cpu_free_at[t]) + ns;
    }

    /// Picks a ready coordinator in seeded random order. If its thread's CPU is still busy, the
    /// coordinator is postponed to when it is free; otherwise the thread is charged one step.
    pub fn next_ready(&mut self) -> Option<u32> {
        while !self.ready.is_empty() {
            let i = self.rng.random_range(0..self.ready.len());
            let c = self.ready.swap_remove(i);
            let coord = &self.coords[c as usize];
            if !coord.alive {
                continue;
            }
            let t = coord.thread as usize;
            if self.threads_cpu_free_at[t] > self.now {
                let at = self.threads_cpu_free_at[t];
                self.push(at, Ev::Wake { coord: c });
                continue;
            }
            if self.adv.stall_prob > 0.0 && self.rng.random_bool(self.adv.stall_prob.min(1.0)) {
                // The thread is descheduled: this coordinator, and every other one of its
                // thread, resumes only after the stall.
                let stall = 1 + self.rand_below(self.adv.stall_max_ns);
                self.threads_cpu_free_at[t] = self.now + stall;
                self.push(self.now + stall, Ev::Wake { coord: c });
                continue;
            }
            self.threads_cpu_free_at[t] = self.now + self.profile.cpu_per_step_ns;
            return Some(c);
        }
        None
    }

    pub fn next_event_time(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((t, _, _))| *t)
    }

    pub fn register_sleep(&mut self, coord: u32, deadline: u64) {
        let at = deadline.max(self.now);
        self.push(at, Ev::Wake { coord });
    }

    fn alloc_rec(&mut self) -> u32 {
        match self.free_recs.pop() {
            Some(r) => r,
            None => {
                self.recs.push(Rec::default());
                (self.recs.len() - 1) as u32
            }
        }
    }

    fn rand_below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.rng.random_range(0..=n)
        }
    }

    /// When an op posted (by the CPU) at `posted` on compute node `cn` leaves its NIC: ops queue
    /// there in post order, each holding it for its service time. Without a compute NIC in
    /// the profile, at once (and nothing is recorded, so such runs stay as they were).
    fn cn_nic_leave(&mut self, cn: u32, posted: u64, out: u64, inb: u64) -> u64 {
        if !self.profile.has_cn_nic() {
            return posted;
        }
        let service = self.profile.cn_nic_service_ns(out, inb);
        let free = &mut self.cn_nic_free_at[cn as usize];
        let leave = posted.max(*free);
        *free = leave + service;
        leave
    }

    /// Posts a batch: schedules the execution of every op and the batch's completion.
    pub fn submit(&mut self, coord: u32, batch: &Batch, mode: Mode) -> Result<(), FabricError> {
        let has_rpc = self.rpc.is_some();
        for op in &batch.ops {
            check_op(op, &self.sizes, has_rpc)?;
        }
        let c = &self.coords[coord as usize];
        debug_assert!(c.alive);
        debug_assert!(
            mode != Mode::Awaited || c.rec.is_none(),
            "one awaited batch at a time"
        );
        debug_assert!(
            mode != Mode::Background || c.bg.is_none(),
            "one background batch"
        );
        let (thread, cn) = (c.thread, c.cn);
        let r = self.alloc_rec();
        {
            let rec = &mut self.recs[r as usize];
            rec.coord = coord;
            rec.thread = thread;
            rec.mode = mode;
            rec.complete = false;
            rec.error = None;
            rec.batch.assign(batch);
            rec.batch.mn_cpu_ns = 0;
            rec.epochs.clear();
            rec.msgs.clear();
        }
        let p = &self.profile;
        let (one_way, per_verb, spread) = (p.one_way_ns, p.cpu_per_verb_ns, self.adv.window_ns);
        let mut depart = self.now.max(self.threads_cpu_free_at[thread as usize]);
        let posted = depart;
        let mut done_at = depart;
        let n_nodes = self.nodes.len();
        for (i, op) in batch.ops.iter().enumerate() {
            depart += per_verb;
            let node = op.node as usize;
            if op.kind == OpKind::Rpc {
                let epoch = self.op_epoch(coord, node);
                let rec = &mut self.recs[r as usize];
                rec.epochs.push(epoch);
                let packed = rec.batch.rpc_packed(op);
                let k = match rec.msgs.iter().position(|m| m.node == op.node) {
                    Some(k) => k,
                    None => {
                        rec.msgs.push(RpcMsg {
                            node: op.node,
                            epoch,
                            ..RpcMsg::default()
                        });
                        rec.msgs.len() - 1
                    }
                };
                let m = &mut rec.msgs[k];
                // A request alone is a message of its own; the packed ones share one.
                let starts = !packed || !m.has_packed;
                m.has_packed |= packed;
                m.messages += u32::from(starts);
                m.starts.push(starts);
                m.ops.push(i as u32);
                m.depart = depart;
                m.req_bytes += u64::from(op.len);
                continue;
            }
            let (out_bytes, in_bytes) = match op.kind {
                OpKind::Read => (0, u64::from(op.len)),
                OpKind::Write | OpKind::Rpc => (u64::from(op.len), 0),
                OpKind::Cas => (16, 8),
                OpKind::Faa => (8, 8),
                OpKind::Flush => (0, 0),
            };
            let leave = self.cn_nic_leave(cn, depart, out_bytes, in_bytes);
            let mut arrive = leave + one_way + self.profile.transfer_ns(out_bytes);
            if self.delay_prob > 0.0 && self.rng.random_bool(self.delay_prob.min(1.0)) {
                arrive += self.rand_below(self.delay_max_ns);
            }
            // The NIC works through ops in arrival order; execution may then lag by the
            // adversary's window, which is what lets the contract's unordered ops overtake.
            let mut service = self.profile.nic_service_ns(out_bytes + in_bytes);
            if self.persistent && op.kind == OpKind::Write {
                service += self.profile.pm_write_ns(out_bytes);
            }
            let mn = &mut self.nodes[node];
            let nic_start = arrive.max(mn.nic_free_at);
            mn.nic_free_at = nic_start + service;
            mn.nic_busy_ns += service;
            let qp = self.qps[thread as usize * n_nodes + node];
            // (A FLUSH answers in order with everything after it on the QP: `flush_end`.)
            let mut exec = nic_start.max(qp.atomic_at).max(qp.flush_end);
            if matches!(op.kind, OpKind::Write | OpKind::Flush) {
                exec = exec.max(qp.write_end);
            }
            if self.adv.reorder {
                exec += self.rand_below(spread);
                // Drawn only when enabled: runs without it stay as they were, bit for bit.
                if self.adv.overtake_prob > 0.0
                    && self.rng.random_bool(self.adv.overtake_prob.min(1.0))
                {
                    exec += spread;
                }
            }
            if op.kind.is_atomic() {
                let slot = ((op.addr % 4096) / 8) as usize;
                let mn = &mut self.nodes[node];
                exec = exec.max(mn.slot_free_at[slot]);
                mn.slot_free_at[slot] = exec + self.profile.atomic_slot_ns;
            }
            let (_, lines) = lines_of(op.addr, u64::from(op.len));
            let mut end = exec;
            match op.kind {
                OpKind::Read if self.adv.tear_reads && lines > 1 => {
                    let window = service.max(spread).max(lines);
                    // Each READ fetches its lines in one of three orders: uniformly random
                    // instants; the first line at once and the rest at the end (the order
                    // that defeats a header-only check); or highest address first.
                    let pattern = self.rng.random_range(0..3u8);
                    for l in 0..lines {
                        let at = match pattern {
                            0 => exec + self.rand_below(window),
                            1 if l == 0 => exec,
                            1 => exec + window - self.rand_below(window / 8),
                            _ => exec + (lines - 1 - l) * (window / lines),
                        };
                        end = end.max(at);
                        self.push(
                            at,
                            Ev::Exec {
                                rec: r,
                                op: i as u32,
                                line: l as u32,
                            },
                        );
                    }
                }
                OpKind::Write if self.adv.tear_reads && lines > 1 => {
                    let step = (service.max(spread) / lines).max(1);
                    for l in 0..lines {
                        end = exec + l * step;
                        self.push(
                            end,
                            Ev::Exec {
                                rec: r,
                                op: i as u32,
                                line: l as u32,
                            },
                        );
                    }
                }
                _ => self.push(
                    exec,
                    Ev::Exec {
                        rec: r,
                        op: i as u32,
                        line: WHOLE,
                    },
                ),
            }
            let qp = &mut self.qps[thread as usize * n_nodes + node];
            if self.persistent && op.kind == OpKind::Flush {
                // The NIC answers once the QP's earlier WRITEs reached the media, and the
                // QP's later ops after it (RC answers in order).
                end = exec + self.profile.pm_flush_ns;
                qp.flush_end = qp.flush_end.max(end);
            }
            if op.kind == OpKind::Write {
                qp.write_end = qp.write_end.max(end);
            }
            if op.kind.is_atomic() {
                qp.atomic_at = qp.atomic_at.max(exec);
            }
            self.max_flight_ns = self.max_flight_ns.max(end - posted);
            let back = end + one_way + self.profile.transfer_ns(in_bytes);
            done_at = done_at.max(back);
            let epoch = self.op_epoch(coord, node);
            self.recs[r as usize].epochs.push(epoch);
        }
        self.threads_cpu_free_at[thread as usize] = depart;
        let msgs = self.recs[r as usize].msgs.len();
        self.recs[r as usize].parts = 1 + msgs as u32;
        for k in 0..msgs {
            let m = &self.recs[r as usize].msgs[k];
            let (node, depart, bytes) = (m.node as usize, m.depart, m.req_bytes);
            let m_messages = m.messages;
            // One post per wire message; the responses' bytes are not known yet.
            let mut leave = self.cn_nic_leave(cn, depart, bytes, 0);
            for _ in 1..m_messages {
                leave = self.cn_nic_leave(cn, depart, 0, 0);
            }
            let mut arrive = leave + one_way + self.profile.transfer_ns(bytes);
            if self.delay_prob > 0.0 && self.rng.random_bool(self.delay_prob.min(1.0)) {
                arrive += self.rand_below(self.delay_max_ns);
            }
            let service = self.rpc_nic_ns(bytes, m_messages);
            let mn = &mut self.nodes[node];
            let nic_start = arrive.max(mn.nic_free_at);
            mn.nic_free_at = nic_start + service;
            mn.nic_busy_ns += service;
            self.push(
                nic_start + service,
                Ev::RpcArrive {
                    rec: r,
                    msg: k as u32,
                },
            );
        }
        if self.adv.completion_delay_prob > 0.0
            && self
                .rng
                .random_bool(self.adv.completion_delay_prob.min(1.0))
        {
            done_at += self.rand_below(self.adv.completion_delay_max_ns);
        }
        self.push(done_at, Ev::BatchDone { rec: r });
        match mode {
            Mode::Awaited => self.coords[coord as usize].rec = Some(r),
            Mode::Background => self.coords[coord as usize].bg = Some(r),
            Mode::Detached => {}
        }
        Ok(())
    }

    /// If the coordinator's awaited batch is complete, hands its results over.
    pub fn take_completion(
        &mut self,
        coord: u32,
        batch: &mut Batch,
    ) -> Option<Result<(), FabricError>> {
        let r = self.coords[coord as usize].rec?;
        let rec = &mut self.recs[r as usize];
        if !rec.complete {
            return None;
        }
        batch.take_results(&rec.batch);
        let result = match rec.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        };
        self.coords[coord as usize].rec = None;
        self.free_recs.push(r);
        Some(result)
    }

    /// If the coordinator's background batch is complete (or there is none), its outcome and
    /// the nodes it failed on.
    pub fn take_background(&mut self, coord: u32) -> Option<(Result<(), FabricError>, NodeSet)> {
        let Some(r) = self.coords[coord as usize].bg else {
            return Some((Ok(()), NodeSet::default()));
        };
        let rec = &mut self.recs[r as usize];
        if !rec.complete {
            return None;
        }
        let result = match rec.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        };
        let failed = std::mem::take(&mut rec.batch.failed);
        self.coords[coord as usize].bg = None;
        self.free_recs.push(r);
        Some((result, failed))
    }

    /// Executes the next event. Returns false when there is none.
    pub fn step(&mut self) -> bool {
        let Some(Reverse((at, _, ev))) = self.heap.pop() else {
            return false;
        };
        debug_assert!(at >= self.now);
        self.now = at;
        match ev {
            Ev::Exec { rec, op, line } => self.exec(rec, op, line),
            Ev::BatchDone { rec } => {
                let rc = &mut self.recs[rec as usize];
                if rc.parts > 1 {
                    rc.parts -= 1;
                    return true;
                }
                let coord = rc.coord;
                if rc.mode == Mode::Detached || !self.coords[coord as usize].alive {
                    self.free_recs.push(rec);
                } else {
                    rc.complete = true;
                    self.ready.push(coord);
                }
            }
            Ev::Wake { coord } => {
                if self.coords[coord as usize].alive {
                    self.ready.push(coord);
                }
            }
            Ev::RpcArrive { rec, msg } => self.rpc_arrive(rec, msg),
            Ev::RpcServe { rec, msg } => self.rpc_serve(rec, msg),
            Ev::RpcServed { rec, msg } => self.rpc_served(rec, msg),
            Ev::CrashCompute { cn } => self.crash_compute(cn),
            Ev::CrashMemory { node, down_ns } => self.crash_memory(node, down_ns),
            Ev::RestartMemory { node } => {
                if let Some(n) = self.nodes.get_mut(node as usize) {
                    n.up = true;
                }
            }
            Ev::RejoinMemory { node } => self.rejoin_memory(node),
        }
        true
    }

    fn crash_compute(&mut self, cn: u32) {
        if cn as usize >= self.cutoff.len() || self.cutoff[cn as usize] != u64::MAX {
            return;
        }
        // Ops already on the wire may still land; after a random instant, none does.
        let window = 2 * self.profile.one_way_ns + self.adv.window_ns;
        self.cutoff[cn as usize] = self.now + self.rand_below(window);
        self.hash = mix(self.hash, 0xc0 ^ u64::from(cn));
        for (i, c) in self.coords.iter_mut().enumerate() {
            if c.cn == cn && c.alive {
                c.alive = false;
                self.killed.push(i as u32);
            }
        }
    }

    /// A replacement for a memory node that is down: up again, blank (nothing persisted
    /// either). Ops posted before it came back still fail (the epoch moved at the crash).
    fn rejoin_memory(&mut self, node: u16) {
        let Some(n) = self.nodes.get_mut(node as usize) else {
            return;
        };
        if n.up {
            return;
        }
        n.up = true;
        n.epoch += 1;
        n.incarnation += 1;
        n.mem.fill(0);
        n.persisted.fill(0);
        for l in std::mem::take(&mut n.dirty_lines) {
            n.dirty[l as usize] = CLEAN;
        }
        self.hash = mix(self.hash, 0xd2 ^ u64::from(node));
    }

    fn crash_memory(&mut self, node: u16, down_ns: u64) {
        let Some(n) = self.nodes.get_mut(node as usize) else {
            return;
        };
        if !n.up {
            return;
        }
        n.up = false;
        n.epoch += 1;
        n.faa_held.clear();
        self.lose_volatile(node);
        self.hash = mix(self.hash, 0xd0 ^ u64::from(node));
        // A node failed for good never restarts: an event at `FOREVER` would still be
        // stepped to once the coordinators are done (the run drains its events), bringing
        // the node back blank, 146 years later.
        if down_ns < super::config::MemoryCrash::FOREVER {
            let at = self.now + down_ns;
            self.push(at, Ev::RestartMemory { node });
        }
    }

    /// Every coordinator is done: the fault plan's events still to come are dropped, so that
    /// a crash or failure drawn past the run's end does not strike the idle pool while the
    /// run drains its last ops (nobody would notice it; the next run would find a node down,
    /// or blank, in a view that still lists it). Restarts of crashed nodes stay.
    pub fn drop_pending_faults(&mut self) {
        self.heap.retain(|Reverse((_, _, ev))| {
            !matches!(
                ev,
                Ev::CrashCompute { .. } | Ev::CrashMemory { .. } | Ev::RejoinMemory { .. }
            )
        });
    }

    /// What memory node `node` keeps through a loss of power: in persistent-memory mode its
    /// persisted lines and a random subset of the others, else nothing.
    fn lose_volatile(&mut self, node: u16) {
        if self.persistent {
            // Each unflushed line may or may not have reached the media.
            let mut lines = std::mem::take(&mut self.nodes[node as usize].dirty_lines);
            for &l in &lines {
                let keep = self.rng.random_bool(0.5);
                let n = &mut self.nodes[node as usize];
                let span = (l * LINE) as usize..((l + 1) * LINE) as usize;
                if keep {
                    n.persisted[span.clone()].copy_from_slice(&n.mem[span]);
                } else {
                    let (mem, per) = (&mut n.mem, &n.persisted);
                    mem[span.clone()].copy_from_slice(&per[span]);
                }
                n.dirty[l as usize] = CLEAN;
            }
            lines.clear();
            self.nodes[node as usize].dirty_lines = lines;
        } else {
            self.nodes[node as usize].mem.fill(0);
        }
    }

    /// Every memory node loses power and comes back at once (between runs: nothing is in
    /// flight), keeping what [`World::lose_volatile`] says.
    pub(crate) fn power_loss(&mut self) {
        for node in 0..self.nodes.len() as u16 {
            self.lose_volatile(node);
            self.hash = mix(self.hash, 0xd1 ^ u64::from(node));
        }
    }

    fn exec(&mut self, r: u32, i: u32, line: u32) {
        let rec = &self.recs[r as usize];
        let coord = rec.coord;
        let cn = self.coords[coord as usize].cn;
        if self.now > self.cutoff[cn as usize] {
            return; // lost with its crashed compute node
        }
        let op = rec.batch.ops[i as usize];
        let node = op.node as usize;
        if !self.nodes[node].up || self.nodes[node].epoch != rec.epochs[i as usize] {
            let rec = &mut self.recs[r as usize];
            rec.error = Some(FabricError::NodeDown(op.node));
            rec.batch.failed = rec.batch.failed.with(op.node);
            return;
        }
        if line == 0 || line == WHOLE {
            self.verbs_executed += 1;
        }
        let (lo, hi) = if line == WHOLE {
            (op.addr, op.addr + u64::from(op.len))
        } else {
            let (first, _) = lines_of(op.addr, u64::from(op.len));
            let l = first + u64::from(line);
            (
                op.addr.max(l * LINE),
                (op.addr + u64::from(op.len)).min((l + 1) * LINE),
            )
        };
        let mut h = mix(self.hash, self.now);
        h = mix(
            h,
            (u64::from(coord) << 32) | ((op.node as u64) << 8) | op.kind as u64,
        );
        h = mix(h, lo);
        let now = self.now;
        let World { nodes, recs, .. } = self;
        let mn = &mut nodes[node];
        let rec = &mut recs[r as usize];
        match op.kind {
            OpKind::Read => {
                let off = (op.data as u64 + lo - op.addr) as usize;
                let dst = &mut rec.batch.buf[off..off + (hi - lo) as usize];
                dst.copy_from_slice(&mn.mem[lo as usize..hi as usize]);
                h = mix_bytes(h, dst);
            }
            OpKind::Write => {
                let off = (op.data as u64 + lo - op.addr) as usize;
                let src = &rec.batch.buf[off..off + (hi - lo) as usize];
                mn.mem[lo as usize..hi as usize].copy_from_slice(src);
                h = mix_bytes(h, src);
                if self.adv.lose_write_under_faa && !mn.faa_held.is_empty() {
                    mn.faa_held.retain(|&(_, _, until)| until >= now);
                    for &(a, v, _) in &mn.faa_held {
                        if a >= lo && a < hi {
                            // The NIC writes its buffered FAA result back over this WRITE.
                            mn.mem[a as usize..a as usize + 8].copy_from_slice(&v.to_le_bytes());
                        }
                    }
                }
                if self.persistent {
                    for l in lo / LINE..hi.div_ceil(LINE) {
                        mn.mark_dirty(l, rec.thread);
                    }
                }
            }
            OpKind::Cas | OpKind::Faa => {
                let a = op.addr as usize;
                let old = u64::from_le_bytes(mn.mem[a..a + 8].try_into().expect("word"));
                let new = if op.kind == OpKind::Cas {
                    if old == op.arg0 {
                        op.arg1
                    } else {
                        old
                    }
                } else {
                    let new = old.wrapping_add(op.arg0);
                    if self.adv.lose_write_under_faa {
                        let hold = self.profile.atomic_slot_ns.max(self.adv.window_ns);
                        mn.faa_held.push((op.addr, new, now + hold));
                    }
                    new
                };
                mn.mem[a..a + 8].copy_from_slice(&new.to_le_bytes());
                if self.persistent {
                    mn.mark_dirty(op.addr / LINE, rec.thread);
                }
                rec.batch.words[i as usize] = old;
                h = mix(h, old);
                if self.rpc.is_some() {
                    let key = g11_key(op.node, op.addr);
                    self.g11_verb.insert(key);
                    if self.g11_handler.contains(&key) && self.g11_hit.insert(key) {
                        self.g11_violations += 1;
                    }
                }
            }
            OpKind::Flush => {
                if self.persistent {
                    // Exactly what the contract promises: the lines this QP changed (with
                    // whatever other QPs wrote into the same lines: a line is persisted
                    // whole), not the lines only other QPs wrote.
                    mn.persist_qp(rec.thread);
                }
            }
            OpKind::Rpc => unreachable!("RPCs are served by rpc_serve"),
        }
        self.hash = h;
        if let Some(t) = &mut self.trace {
            t.push(TraceEntry {
                time_ns: now,
                coord,
                node: op.node,
                kind: op.kind,
                addr: lo,
                len: (hi - lo) as u32,
            });
        }
    }

    /// The memory node's CPU view of its region. Its writes are durable at once (a CPU store
    /// followed by a cache-line flush).
    pub fn mem(&mut self, node: NodeId) -> VecMem<'_> {
        let persistent = self.persistent;
        let n = &mut self.nodes[node as usize];
        VecMem {
            mem: &mut n.mem,
            persisted: if persistent {
                Some(&mut n.persisted)
            } else {
                None
            },
            atomics: None,
        }
    }

    /// An RPC message has passed the NIC: a free core takes it now, or it queues.
    fn rpc_arrive(&mut self, r: u32, k: u32) {
        let node = self.recs[r as usize].msgs[k as usize].node as usize;
        let cores = self.profile.mn_cores;
        let n = &mut self.nodes[node];
        if cores == 0 || n.cores_busy < cores {
            n.cores_busy += 1;
            self.rpc_serve(r, k);
        } else {
            n.rpc_waiting.push_back((r, k));
        }
    }

    /// A core serves the message's next request, now.
    fn rpc_serve(&mut self, r: u32, k: u32) {
        let rec = &self.recs[r as usize];
        let coord = rec.coord;
        let cn = self.coords[coord as usize].cn;
        let m = &rec.msgs[k as usize];
        let node = m.node;
        let mn = &self.nodes[node as usize];
        if !mn.up || mn.epoch != m.epoch {
            let rec = &mut self.recs[r as usize];
            rec.error = Some(FabricError::NodeDown(node));
            rec.batch.failed = rec.batch.failed.with(node);
            return self.rpc_served(r, k);
        }
        if self.now > self.cutoff[cn as usize] {
            // Lost with its crashed compute node: the rest of the message is not served.
            return self.rpc_served(r, k);
        }
        let i = m.ops[m.next as usize] as usize;
        let last = m.next as usize + 1 == m.ops.len();
        let op = rec.batch.ops[i];
        let handler = self.rpc.clone().expect("checked at submit");
        let req = rec.batch.data(&op).to_vec();
        let now = self.now;
        let mut atomics = std::mem::take(&mut self.rpc_atomics);
        atomics.clear();
        let World {
            nodes,
            recs,
            persistent,
            ..
        } = self;
        let mn = &mut nodes[node as usize];
        let rec = &mut recs[r as usize];
        let mut mem = VecMem {
            mem: &mut mn.mem,
            persisted: if *persistent {
                Some(&mut mn.persisted)
            } else {
                None
            },
            atomics: Some(&mut atomics),
        };
        let off = rec.batch.resp.len();
        handler.handle(node, now, &mut mem, &req, &mut rec.batch.resp);
        let len = rec.batch.resp.len() - off;
        rec.batch.words[i] = ((off as u64) << 32) | len as u64;
        let mut cost = self.profile.rpc_service_ns(req.len() as u64 + len as u64);
        let m = &rec.msgs[k as usize];
        if m.starts[m.next as usize] {
            // The message's own: finding it in the ring, its header, the response's post.
            cost += self.profile.rpc_msg_cpu_ns;
        }
        rec.batch.mn_cpu_ns += cost;
        let m = &mut rec.msgs[k as usize];
        m.next += 1;
        m.resp_bytes += len as u64;
        let mut h = mix(self.hash, now);
        h = mix(
            h,
            (u64::from(coord) << 32) | (u64::from(node) << 8) | OpKind::Rpc as u64,
        );
        h = mix_bytes(h, &req);
        h = mix_bytes(h, &rec.batch.resp[off..]);
        self.hash = h;
        self.verbs_executed += 1;
        if let Some(t) = &mut self.trace {
            t.push(TraceEntry {
                time_ns: now,
                coord,
                node,
                kind: OpKind::Rpc,
                addr: 0,
                len: req.len() as u32,
            });
        }
        for &addr in &atomics {
            let key = g11_key(node, addr);
            self.g11_handler.insert(key);
            if self.g11_verb.contains(&key) && self.g11_hit.insert(key) {
                self.g11_violations += 1;
            }
        }
        self.rpc_atomics = atomics;
        let ev = if last {
            Ev::RpcServed { rec: r, msg: k }
        } else {
            Ev::RpcServe { rec: r, msg: k }
        };
        self.push(now + cost, ev);
    }

    /// NIC time of `messages` wire messages carrying `bytes` in all: the payload's, and one
    /// op's minimum for each message beyond the first (the same as one message when packed).
    fn rpc_nic_ns(&self, bytes: u64, messages: u32) -> u64 {
        self.profile.nic_service_ns(bytes)
            + u64::from(messages.saturating_sub(1)) * self.profile.nic_service_ns(0)
    }

    /// The core is done with the message: it takes the next waiting one, and the response
    /// (one NIC op) returns to the compute node.
    fn rpc_served(&mut self, r: u32, k: u32) {
        let m = &self.recs[r as usize].msgs[k as usize];
        let (node, bytes) = (m.node as usize, m.resp_bytes);
        let service = self.rpc_nic_ns(bytes, m.messages);
        let n = &mut self.nodes[node];
        n.cores_busy -= 1;
        let nic_start = self.now.max(n.nic_free_at);
        n.nic_free_at = nic_start + service;
        n.nic_busy_ns += service;
        let back = nic_start + service + self.profile.one_way_ns;
        self.push(back, Ev::BatchDone { rec: r });
        if let Some((r2, k2)) = self.nodes[node].rpc_waiting.pop_front() {
            self.nodes[node].cores_busy += 1;
            self.rpc_serve(r2, k2);
        }
    }
}

/// A simulated memory node's region seen by its own CPU.
pub struct VecMem<'a> {
    mem: &'a mut Vec<u8>,
    persisted: Option<&'a mut Vec<u8>>,
    /// Serving an RPC: the words its CAS/FAA touch, for the G11 check.
    atomics: Option<&'a mut Vec<u64>>,
}

impl LocalMem for VecMem<'_> {
    fn size(&self) -> u64 {
        self.mem.len() as u64
    }

    fn read(&mut self, addr: u64, buf: &mut [u8]) {
        buf.copy_from_slice(&self.mem[addr as usize..addr as usize + buf.len()]);
    }

    fn write(&mut self, addr: u64, data: &[u8]) {
        let span = addr as usize..addr as usize + data.len();
        self.mem[span.clone()].copy_from_slice(data);
        if let Some(p) = &mut self.persisted {
            p[span].copy_from_slice(data);
        }
    }

    fn cas(&mut self, addr: u64, expect: u64, new: u64) -> u64 {
        if let Some(a) = &mut self.atomics {
            a.push(addr);
        }
        let old = self.read_u64(addr);
        if old == expect {
            self.write_u64(addr, new);
        }
        old
    }

    fn faa(&mut self, addr: u64, add: u64) -> u64 {
        if let Some(a) = &mut self.atomics {
            a.push(addr);
        }
        let old = self.read_u64(addr);
        self.write_u64(addr, old.wrapping_add(add));
        old
    }
}
