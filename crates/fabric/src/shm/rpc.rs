//! The memory nodes' CPUs on `shm`: server threads that serve packed RPC messages.
//!
//! A coordinator packs the RPC ops of a batch to one memory node into one [`Slot`] and queues
//! it on that node's request queue; one of the node's server threads takes it, runs the
//! handler on each request in post order, and marks it done. The coordinator polls `done`
//! (never blocking: its thread has other coroutines to run).

use super::{RegionMem, Shared};
use crate::contract::RpcHandler;
use crate::{FabricError, NodeId};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle server thread keeps looking at its queue before it blocks: a request that
/// follows its predecessor closely (a coordinator's next RPC) is taken without a futex
/// wake-up, which costs about 10 us, while an idle node soon costs no CPU (hosts may have 2
/// cores for everyone).
const SPIN: Duration = Duration::from_micros(20);

/// One packed RPC message: the requests of one batch to one memory node, then their responses.
#[derive(Debug)]
pub(super) struct Msg {
    pub node: NodeId,
    /// The run's start: handlers see `now_ns` on the poster's clock.
    pub start: Instant,
    /// The requests back to back, and each one's `(offset, len)` in `req`.
    pub req: Vec<u8>,
    pub reqs: Vec<(u32, u32)>,
    /// The responses back to back, and each one's `(offset, len)` in `resp`.
    pub resp: Vec<u8>,
    pub resps: Vec<(u32, u32)>,
    /// Handler wall time spent on this message.
    pub cpu_ns: u64,
    /// A handler panicked: the message's responses are void.
    pub failed: bool,
}

/// A message in flight, shared by its poster and the server thread that serves it.
#[derive(Debug)]
pub(super) struct Slot {
    pub done: AtomicBool,
    pub msg: Mutex<Msg>,
}

impl Slot {
    pub fn new() -> Slot {
        Slot {
            done: AtomicBool::new(false),
            msg: Mutex::new(Msg {
                node: 0,
                start: Instant::now(),
                req: Vec::new(),
                reqs: Vec::new(),
                resp: Vec::new(),
                resps: Vec::new(),
                cpu_ns: 0,
                failed: false,
            }),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, Msg> {
        // A handler panic is caught inside the lock's scope, so poisoning carries nothing.
        self.msg.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A memory node's request queue.
#[derive(Default)]
struct NodeQueue {
    q: Mutex<VecDeque<Arc<Slot>>>,
    cv: Condvar,
    /// Messages queued, readable without the lock by spinning server threads.
    len: AtomicUsize,
    /// Server threads blocked on `cv` (changed and read under `q`'s lock): a poster wakes one
    /// only if there is one, so a busy node costs no futex call per message.
    sleepers: AtomicUsize,
}

/// What the server threads and the coordinators' ports share.
pub(super) struct RpcService {
    queues: Vec<NodeQueue>,
    stop: AtomicBool,
    handler: Arc<dyn RpcHandler>,
    shared: Arc<Shared>,
}

impl RpcService {
    /// Queues `slot` on its memory node.
    pub fn post(&self, node: NodeId, slot: Arc<Slot>) -> Result<(), FabricError> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(FabricError::Setup(
                "the memory nodes' RPC servers are stopped (the pool was dropped or its \
                 handler replaced)"
                    .into(),
            ));
        }
        let q = &self.queues[node as usize];
        let mut g = q.q.lock().unwrap_or_else(|e| e.into_inner());
        g.push_back(slot);
        q.len.fetch_add(1, Ordering::Release);
        let wake = q.sleepers.load(Ordering::Relaxed) > 0;
        drop(g);
        if wake {
            q.cv.notify_one();
        }
        Ok(())
    }

    /// The next message of `node`'s queue; `None` once stopped.
    fn next(&self, node: usize) -> Option<Arc<Slot>> {
        let q = &self.queues[node];
        let began = Instant::now();
        while q.len.load(Ordering::Acquire) == 0 && began.elapsed() < SPIN {
            if self.stop.load(Ordering::Relaxed) {
                return None;
            }
            std::hint::spin_loop();
        }
        let mut g = q.q.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(s) = g.pop_front() {
                q.len.fetch_sub(1, Ordering::Relaxed);
                return Some(s);
            }
            if self.stop.load(Ordering::Relaxed) {
                return None;
            }
            q.sleepers.fetch_add(1, Ordering::Relaxed);
            g = q.cv.wait(g).unwrap_or_else(|e| e.into_inner());
            q.sleepers.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// A server thread of memory node `node`: serves messages until stopped.
    fn serve(&self, node: usize) {
        let region = &self.shared.regions[node];
        while let Some(slot) = self.next(node) {
            {
                let mut guard = slot.lock();
                let m = &mut *guard;
                m.resp.clear();
                m.resps.clear();
                m.failed = false;
                let began = Instant::now();
                let persist = self.shared.persist.load(Ordering::Relaxed);
                let mut written = Vec::new();
                for &(off, len) in &m.reqs {
                    let req = &m.req[off as usize..(off + len) as usize];
                    let at = m.resp.len();
                    let now_ns = m.start.elapsed().as_nanos() as u64;
                    let resp = &mut m.resp;
                    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        self.handler.handle(
                            node as NodeId,
                            now_ns,
                            &mut RegionMem(region, persist.then_some(&mut written)),
                            req,
                            resp,
                        )
                    }));
                    // The memory node's stores are durable when it answers (persist mode):
                    // written back before the response goes out.
                    let persisted = RegionMem::persist(region, &mut written);
                    if let Ok(n) = persisted {
                        self.shared.persisted.fetch_add(n, Ordering::Relaxed);
                    }
                    if ok.is_err() || persisted.is_err() {
                        m.failed = true;
                        break;
                    }
                    m.resps.push((at as u32, (m.resp.len() - at) as u32));
                }
                m.cpu_ns = began.elapsed().as_nanos() as u64;
            }
            slot.done.store(true, Ordering::Release);
        }
    }
}

/// The running server threads of a pool's memory nodes.
pub(super) struct Servers {
    pub service: Arc<RpcService>,
    threads: Vec<JoinHandle<()>>,
}

impl Servers {
    /// Starts `per_node` server threads for each memory node of `shared`.
    pub fn start(
        shared: Arc<Shared>,
        handler: Arc<dyn RpcHandler>,
        per_node: usize,
    ) -> Result<Servers, FabricError> {
        let nodes = shared.regions.len();
        let service = Arc::new(RpcService {
            queues: (0..nodes).map(|_| NodeQueue::default()).collect(),
            stop: AtomicBool::new(false),
            handler,
            shared,
        });
        let mut servers = Servers {
            service,
            threads: Vec::new(),
        };
        for node in 0..nodes {
            for t in 0..per_node.max(1) {
                let svc = servers.service.clone();
                let h = std::thread::Builder::new()
                    .name(format!("shm-memnode-{node}-{t}"))
                    .spawn(move || svc.serve(node))
                    .map_err(|e| {
                        FabricError::Setup(format!("cannot spawn a memory-node thread: {e}"))
                    })?;
                // On an early return, `servers`' drop stops the threads started so far.
                servers.threads.push(h);
            }
        }
        Ok(servers)
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.service.stop.store(true, Ordering::SeqCst);
        for q in &self.service.queues {
            // Taking the lock orders the stop flag before any waiter's check-then-wait.
            drop(q.q.lock().unwrap_or_else(|e| e.into_inner()));
            q.cv.notify_all();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
