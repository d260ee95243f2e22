//! The memory node: a region, a UCP worker progressed by one thread, a bootstrap listener.
//! That thread is also the node's one core serving RPC messages.

use super::bootstrap::{self, NodeInfo};
use super::ucp::{post, wait_fd, AmHandle, Context, MemMap, Worker};
use super::MemNodeConfig;
use crate::contract::{LocalMem, RpcHandler};
use crate::{FabricError, NodeId};
use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Active-message ids of the RPC verb.
pub(crate) const AM_RPC_REQ: u32 = 0x4454;
pub(crate) const AM_RPC_RESP: u32 = 0x4455;
/// RPC response statuses (the response header's byte 8).
pub(crate) const RPC_OK: u8 = 0;
pub(crate) const RPC_NO_HANDLER: u8 = 1;
pub(crate) const RPC_FAILED: u8 = 2;
/// The 17th header byte of a write-back request (after `[id, sender's now_ns]`): its body is
/// `(addr u64, len u64)` ranges of the region to `msync` (see [`MemNode`]'s file).
pub(crate) const PERSIST: u8 = b'P';

/// How often a sleeping progress thread looks at the stop flag.
const WAIT_MS: i32 = 50;

/// The memory node's state shared by its threads.
struct Inner {
    /// Held while progressing UCX (which executes emulated verbs and RPCs) and by
    /// [`MemNode::with_local`]: local accesses never interleave with a remote op.
    worker: Mutex<Served>,
    map: MemMap,
    size: u64,
    token: String,
    info: NodeInfo,
    stop: AtomicBool,
    /// See [`MemNodeConfig::spin`].
    spin: Duration,
    rpc: RwLock<Option<Arc<dyn RpcHandler>>>,
    /// Keeps a file-backed region mapped (after `map`, which registers it, is dropped), and
    /// the file open with its lock.
    _file: Option<(memmap2::MmapMut, std::fs::File)>,
    /// Bytes (whole pages) written back to the file so far.
    persisted: AtomicU64,
}

impl Inner {
    /// Writes the pages of `ranges` back to the region's file (`msync`, waiting for the
    /// device). A region UCX allocated has no file: nothing to do.
    fn persist(&self, ranges: impl Iterator<Item = (u64, u64)>) -> std::io::Result<()> {
        let Some((file, _)) = &self._file else {
            return Ok(());
        };
        const PAGE: u64 = 4096;
        for (addr, len) in ranges {
            let end = addr.saturating_add(len).min(self.size);
            if addr >= end {
                continue;
            }
            let from = addr & !(PAGE - 1);
            let to = end.div_ceil(PAGE) * PAGE;
            let to = to.min(file.len() as u64);
            file.flush_range(from as usize, (to - from) as usize)?;
            self.persisted.fetch_add(to - from, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// A memory node serving one region over UCX. Dropping it (or [`MemNode::shutdown`]) stops its
/// threads and unmaps the region.
pub struct MemNode {
    inner: Arc<Inner>,
    addr: SocketAddr,
    node: NodeId,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for MemNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemNode")
            .field("addr", &self.addr)
            .field("size", &self.inner.size)
            .finish()
    }
}

/// The context of the RPC message handler.
struct RpcCtx {
    inner: *const Inner,
    node: NodeId,
}

impl MemNode {
    /// Maps the region, starts the progress thread and the bootstrap listener. `node` is what
    /// its RPC handler is told it is (compute processes number memory nodes by their position
    /// in their list; give each node that number).
    pub fn start(cfg: MemNodeConfig, node: NodeId) -> Result<MemNode, FabricError> {
        if cfg.size == 0 || !cfg.size.is_multiple_of(64) {
            return Err(FabricError::Setup(format!(
                "a memory node's size must be a positive multiple of 64 bytes (got {})",
                cfg.size
            )));
        }
        if cfg.token.is_empty() {
            return Err(FabricError::Setup(
                "a memory node needs a non-empty token".into(),
            ));
        }
        let len = usize::try_from(cfg.size)
            .map_err(|_| FabricError::Setup(format!("{} bytes do not fit memory", cfg.size)))?;
        let ctx = Context::new(&cfg.ucx.settings, true)?;
        let worker = Worker::new(&ctx, true)?;
        let mut file = match &cfg.file {
            None => None,
            Some(path) => Some(map_file(path, cfg.size)?),
        };
        let at = file.as_mut().map(|(m, _)| m.as_mut_ptr());
        // SAFETY: a file mapping is `len` writable bytes owned by `Inner::_file`, which is
        // dropped after `Inner::map` (field order), so it outlives the registration.
        let map = unsafe { MemMap::new(&ctx, at, len)? };
        if file.is_none() {
            // SAFETY: UCX allocated `len` writable bytes at `base`, not yet published to anyone.
            unsafe { std::ptr::write_bytes(map.base(), 0, len) };
        }
        let info = NodeInfo {
            size: cfg.size,
            base: map.base() as u64,
            worker: worker.address()?,
            rkey: map.rkey()?,
            file_backed: file.is_some(),
        };
        let listener = TcpListener::bind(cfg.listen)
            .map_err(|e| FabricError::Setup(format!("cannot listen on {}: {e}", cfg.listen)))?;
        let addr = listener
            .local_addr()
            .map_err(|e| FabricError::Setup(format!("listener address: {e}")))?;
        let inner = Arc::new(Inner {
            worker: Mutex::new(Served {
                worker: ManuallyDrop::new(worker),
                am: None,
                ctx: std::ptr::null_mut(),
            }),
            map,
            size: cfg.size,
            token: cfg.token,
            info,
            stop: AtomicBool::new(false),
            spin: cfg.spin,
            rpc: RwLock::new(None),
            _file: file,
            persisted: AtomicU64::new(0),
        });
        {
            let mut w = inner.worker.lock().unwrap_or_else(|e| e.into_inner());
            w.ctx = Box::into_raw(Box::new(RpcCtx {
                inner: Arc::as_ptr(&inner),
                node,
            }));
            // SAFETY: `w.ctx` lives until `Served::drop` frees it after destroying the worker;
            // `inner`, which it points to, owns that `Served`, so it outlives every call.
            w.am = Some(unsafe { w.set_am_handler(AM_RPC_REQ, on_rpc, w.ctx as *mut c_void)? });
        }
        let mut mn = MemNode {
            inner,
            addr,
            node,
            threads: Vec::new(),
        };
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name)
                .spawn(f)
                .map_err(|e| FabricError::Setup(format!("cannot spawn a thread: {e}")))
        };
        let i = mn.inner.clone();
        mn.threads.push(spawn(
            format!("memnode-{node}-progress"),
            Box::new(move || progress(&i)),
        )?);
        let i = mn.inner.clone();
        mn.threads.push(spawn(
            format!("memnode-{node}-bootstrap"),
            Box::new(move || accept(&i, listener)),
        )?);
        Ok(mn)
    }

    /// The bootstrap listener's address (with the actual port if 0 was asked).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn size(&self) -> u64 {
        self.inner.size
    }

    /// Bytes (whole pages) of a file-backed region written back to its file so far, at
    /// FLUSHes and RPCs' stores.
    pub fn persisted_bytes(&self) -> u64 {
        self.inner.persisted.load(Ordering::Relaxed)
    }

    pub fn node(&self) -> NodeId {
        self.node
    }

    /// Serves the RPC verb from now on.
    pub fn set_rpc_handler(&self, handler: Arc<dyn RpcHandler>) {
        *self.inner.rpc.write().unwrap_or_else(|e| e.into_inner()) = Some(handler);
    }

    /// The memory node's own CPU view of its region (loading, inspection). No remote op is
    /// executed by this node while `f` runs (on transports where the node's CPU executes them;
    /// an RDMA NIC does not wait).
    ///
    /// # Panics
    ///
    /// If an access of `f` falls outside the region or an atomic is misaligned.
    pub fn with_local<T>(&self, f: impl FnOnce(&mut dyn LocalMem) -> T) -> T {
        let _g = self.inner.worker.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut RawMem::of(&self.inner))
    }

    /// Stops serving: the progress and bootstrap threads end, the region is unmapped.
    pub fn shutdown(self) {}
}

impl Drop for MemNode {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        // Wakes the blocking accept; a failure means the listener is gone already.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // `inner`, now referenced by this node only, goes with its fields.
    }
}

/// The worker with the RPC message handler installed on it: destroys the worker before the
/// handler's trampoline and context, which the worker may call until then.
struct Served {
    worker: ManuallyDrop<Worker>,
    am: Option<AmHandle>,
    ctx: *mut RpcCtx,
}

// SAFETY: the worker is created serialized (used by one thread at a time, behind the mutex
// that holds `Served`); `am` and `ctx` are heap data touched only on drop.
unsafe impl Send for Served {}

impl std::ops::Deref for Served {
    type Target = Worker;

    fn deref(&self) -> &Worker {
        &self.worker
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        // SAFETY: dropped once, here; nothing uses the worker afterwards.
        unsafe { ManuallyDrop::drop(&mut self.worker) };
        if let Some(am) = self.am.take() {
            // SAFETY: the worker that could call the handler is destroyed.
            unsafe { am.free() };
        }
        if !self.ctx.is_null() {
            // SAFETY: from `Box::into_raw` in `MemNode::start`, unused now that the worker
            // is gone, freed once.
            drop(unsafe { Box::from_raw(self.ctx) });
        }
    }
}

/// Opens (creating or extending to `size`), locks and maps the region's file.
fn map_file(
    path: &std::path::Path,
    size: u64,
) -> Result<(memmap2::MmapMut, std::fs::File), FabricError> {
    let err = |e: std::io::Error| FabricError::Setup(format!("{}: {e}", path.display()));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(err)?;
    lock(&f, path)?;
    let len = f.metadata().map_err(err)?.len();
    if len < size {
        f.set_len(size).map_err(err)?;
    }
    // SAFETY: a shared mapping of a file we opened read-write and hold an exclusive lock on:
    // no other memory node changes it underneath (other writers are not dtxn's).
    let m = unsafe { memmap2::MmapOptions::new().len(size as usize).map_mut(&f) }.map_err(err)?;
    Ok((m, f))
}

/// Takes the exclusive advisory lock of the region's file for as long as `f` stays open: two
/// memory nodes serving one file would each think they own it.
fn lock(f: &std::fs::File, path: &std::path::Path) -> Result<(), FabricError> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock(2) on the descriptor of an open file; no memory is passed.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Err(FabricError::Setup(format!(
            "{} is already served by another memory node (it holds the file's lock)",
            path.display()
        )))
    } else {
        Err(FabricError::Setup(format!(
            "cannot lock {}: {e}",
            path.display()
        )))
    }
}

fn progress(inner: &Inner) {
    let fd = inner
        .worker
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .event_fd();
    let mut last = Instant::now();
    while !inner.stop.load(Ordering::Relaxed) {
        let n = {
            let w = inner.worker.lock().unwrap_or_else(|e| e.into_inner());
            let mut n = 0;
            // Drain in one go: the lock is per burst, not per event.
            while w.progress() > 0 {
                n += 1;
            }
            n
        };
        if n > 0 {
            last = Instant::now();
            continue;
        }
        if last.elapsed() < inner.spin {
            std::hint::spin_loop();
            continue;
        }
        match fd {
            Some(fd) => {
                let armed = inner.worker.lock().unwrap_or_else(|e| e.into_inner()).arm();
                if armed {
                    // Without the lock: `with_local` must not wait for a sleeping node.
                    wait_fd(fd, WAIT_MS);
                }
                last = Instant::now();
            }
            None => std::thread::yield_now(),
        }
    }
}

fn accept(inner: &Inner, listener: TcpListener) {
    for conn in listener.incoming() {
        if inner.stop.load(Ordering::SeqCst) {
            return;
        }
        if let Ok(s) = conn {
            // A misbehaving client only costs its own connection (bounded by timeouts).
            let _ = bootstrap::serve(s, &inner.token, &inner.info);
        }
    }
}

/// The region seen by the memory node's CPU. For a file-backed region's RPC handler it
/// notes the ranges its stores changed, written back before the answer.
struct RawMem {
    base: *mut u8,
    size: u64,
    written: Option<Vec<(u64, u64)>>,
}

impl RawMem {
    fn of(inner: &Inner) -> RawMem {
        RawMem {
            base: inner.map.base(),
            size: inner.size,
            written: None,
        }
    }

    fn check(&self, addr: u64, len: usize) -> usize {
        match addr.checked_add(len as u64) {
            Some(end) if end <= self.size => addr as usize,
            _ => panic!(
                "local access at {addr:#x}+{len} is outside the {}-byte region",
                self.size
            ),
        }
    }

    fn word(&self, addr: u64) -> &AtomicU64 {
        assert!(
            addr.is_multiple_of(8),
            "atomic at {addr:#x} is not 8-byte aligned"
        );
        let off = self.check(addr, 8);
        // SAFETY: in bounds (checked), 8-byte aligned (the base is page-aligned), and remote
        // atomics on this word are executed by this node's progress thread, which is excluded
        // by the lock held around every `RawMem` use.
        unsafe { AtomicU64::from_ptr(self.base.add(off) as *mut u64) }
    }
}

impl LocalMem for RawMem {
    fn size(&self) -> u64 {
        self.size
    }

    fn read(&mut self, addr: u64, buf: &mut [u8]) {
        let off = self.check(addr, buf.len());
        // SAFETY: in bounds (checked); no remote op runs meanwhile (the lock); `buf` is ours.
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(off), buf.as_mut_ptr(), buf.len()) }
    }

    fn write(&mut self, addr: u64, data: &[u8]) {
        let off = self.check(addr, data.len());
        // SAFETY: as for `read`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.add(off), data.len()) }
        if let Some(w) = &mut self.written {
            w.push((addr, data.len() as u64));
        }
    }

    fn cas(&mut self, addr: u64, expect: u64, new: u64) -> u64 {
        match self
            .word(addr)
            .compare_exchange(expect, new, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(v) | Err(v) => v,
        }
    }

    fn faa(&mut self, addr: u64, add: u64) -> u64 {
        self.word(addr).fetch_add(add, Ordering::SeqCst)
    }
}

/// Serves one RPC message (the RPC ops of one batch to this node), on the progress thread,
/// inside `ucp_worker_progress` (so with the worker lock held: no other remote op or local
/// access interleaves). The message is a header `[id, sender's now_ns]` (little-endian u64s)
/// and the requests, each a little-endian u32 length and its bytes; they are served in order
/// and answered in one message: header `[id, status u8, handler ns u64]`, then each response
/// as a u32 length and its bytes.
unsafe extern "C" fn on_rpc(
    arg: *mut c_void,
    hdr: *const c_void,
    hlen: usize,
    data: *const c_void,
    len: usize,
    reply_ep: dtxn_ucx_sys::ucp_ep_h,
) {
    let arrived = Instant::now();
    if reply_ep.is_null() || hlen < 16 {
        return;
    }
    // SAFETY: `arg` is the `RpcCtx` leaked in `MemNode::start`, valid while the worker lives,
    // and `inner` outlives the worker it contains.
    let ctx = unsafe { &*(arg as *const RpcCtx) };
    // SAFETY: as above: the worker calling us is owned by `*ctx.inner`.
    let inner = unsafe { &*ctx.inner };
    // SAFETY: UCX passes `hlen` header bytes and `len` data bytes valid for this call.
    let (hdr, body) = unsafe {
        (
            std::slice::from_raw_parts(hdr as *const u8, hlen),
            if len == 0 {
                &[][..]
            } else {
                std::slice::from_raw_parts(data as *const u8, len)
            },
        )
    };
    let sent_ns = u64::from_le_bytes(hdr[8..16].try_into().expect("8 bytes"));
    let mut resp = Vec::new();
    let mut cpu_ns = 0u64;
    let status = if hdr.get(16) == Some(&PERSIST) {
        // A FLUSH's write-back: every PUT before it has landed (the client sends this after
        // its endpoint flush completed).
        let began = Instant::now();
        let ranges = body.chunks_exact(16).map(|r| {
            (
                u64::from_le_bytes(r[..8].try_into().expect("8 bytes")),
                u64::from_le_bytes(r[8..].try_into().expect("8 bytes")),
            )
        });
        let ok = inner.persist(ranges).is_ok();
        cpu_ns = began.elapsed().as_nanos() as u64;
        if ok {
            RPC_OK
        } else {
            RPC_FAILED
        }
    } else {
        serve_rpcs(ctx, inner, body, sent_ns, arrived, &mut resp, &mut cpu_ns)
    };
    let mut rh = [0u8; 17];
    rh[..8].copy_from_slice(&hdr[..8]);
    rh[8] = status;
    rh[9..17].copy_from_slice(&cpu_ns.to_le_bytes());
    // SAFETY: `reply_ep` is the live reply endpoint of this callback; the data is copied.
    // A failed reply shows up at the client as a dropped connection.
    let _ = unsafe { post::am_reply(reply_ep, AM_RPC_RESP, &rh, &resp) };
}

/// Serves the requests of one RPC message with the node's handler into `resp`; its status.
/// A file-backed region's stores are written back before the answer (a memory node's CPU
/// stores are durable when it answers).
fn serve_rpcs(
    ctx: &RpcCtx,
    inner: &Inner,
    body: &[u8],
    sent_ns: u64,
    arrived: Instant,
    resp: &mut Vec<u8>,
    cpu_ns: &mut u64,
) -> u8 {
    let handler = inner.rpc.read().unwrap_or_else(|e| e.into_inner()).clone();
    match handler {
        None => RPC_NO_HANDLER,
        Some(h) => {
            let mut mem = RawMem::of(inner);
            if inner._file.is_some() {
                mem.written = Some(Vec::new());
            }
            let began = Instant::now();
            // A panic must not unwind into C: it becomes an error reply.
            let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut pos = 0;
                while pos < body.len() {
                    let Some(n) = body.get(pos..pos + 4) else {
                        return false;
                    };
                    let n = u32::from_le_bytes(n.try_into().expect("4 bytes")) as usize;
                    let Some(req) = body.get(pos + 4..pos + 4 + n) else {
                        return false;
                    };
                    pos += 4 + n;
                    let at = resp.len();
                    resp.extend_from_slice(&[0; 4]);
                    // The sender's clock, advanced by the time the message spent here.
                    let now_ns = sent_ns + arrived.elapsed().as_nanos() as u64;
                    h.handle(ctx.node, now_ns, &mut mem, req, resp);
                    let n = (resp.len() - at - 4) as u32;
                    resp[at..at + 4].copy_from_slice(&n.to_le_bytes());
                }
                true
            }));
            let persisted = match mem.written.take() {
                Some(w) => inner.persist(w.into_iter()).is_ok(),
                None => true,
            };
            *cpu_ns = began.elapsed().as_nanos() as u64;
            match served {
                Ok(true) if persisted => RPC_OK,
                _ => {
                    resp.clear();
                    RPC_FAILED
                }
            }
        }
    }
}
