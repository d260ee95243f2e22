//! Owning wrappers over the UCP handles of `dtxn-ucx-sys`. Every `unsafe` block of the ucx
//! backend that calls UCX lives here or names the invariant it relies on.

use crate::FabricError;
use dtxn_ucx_sys as sys;
use std::ffi::{c_void, CStr, CString};
use std::sync::Arc;

pub(crate) fn status_str(st: i32) -> String {
    // SAFETY: ucs_status_string returns a pointer to a static NUL-terminated string for any
    // status value (unknown ones included).
    unsafe { CStr::from_ptr(sys::dux_status_string(st)) }
        .to_string_lossy()
        .into_owned()
}

pub(crate) fn setup_err(what: &str, st: i32) -> FabricError {
    FabricError::Setup(format!("UCX: {what}: {}", status_str(st)))
}

fn check(what: &str, st: i32) -> Result<(), FabricError> {
    if st == sys::OK {
        Ok(())
    } else {
        Err(setup_err(what, st))
    }
}

/// A UCP context (`ucp_init`): the transports and the features.
pub(crate) struct Context(sys::ucp_context_h);

// SAFETY: the context is created with `mt_workers_shared = 1`, which makes UCX protect it for
// use by several threads (creating workers, mapping memory) in this `--enable-mt` build.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Context {
    /// `settings` are UCX configuration keys without the `UCX_` prefix (`TLS`, `NET_DEVICES`),
    /// applied over the environment.
    pub(crate) fn new(
        settings: &[(String, String)],
        wakeup: bool,
    ) -> Result<Arc<Context>, FabricError> {
        let mut owned = Vec::with_capacity(settings.len() * 2);
        for (k, v) in settings {
            let ck = CString::new(k.as_str())
                .map_err(|_| FabricError::Setup(format!("UCX setting {k:?} contains NUL")))?;
            let cv = CString::new(v.as_str())
                .map_err(|_| FabricError::Setup(format!("UCX setting {k}={v:?} contains NUL")))?;
            owned.push((ck, cv));
        }
        let keys: Vec<_> = owned.iter().map(|(k, _)| k.as_ptr()).collect();
        let vals: Vec<_> = owned.iter().map(|(_, v)| v.as_ptr()).collect();
        let mut h = std::ptr::null_mut();
        // SAFETY: `keys`/`vals` hold `owned.len()` valid C strings that outlive the call; `h` is
        // a valid out-pointer.
        let st = unsafe {
            sys::dux_init(
                keys.as_ptr(),
                vals.as_ptr(),
                keys.len(),
                i32::from(wakeup),
                1,
                &mut h,
            )
        };
        check("ucp_init (check UCX_TLS / UCX_NET_DEVICES)", st)?;
        Ok(Arc::new(Context(h)))
    }

    pub(crate) fn raw(&self) -> sys::ucp_context_h {
        self.0
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every worker and mapping holds an `Arc<Context>`, so none is left.
        unsafe { sys::dux_cleanup(self.0) }
    }
}

/// Waits up to `timeout_ms` for the event fd of an armed worker (see [`Worker::arm`]); no UCX
/// call, so no lock on the worker is needed meanwhile.
pub(crate) fn wait_fd(fd: i32, timeout_ms: i32) {
    // SAFETY: poll(2) on a descriptor number; a closed or reused one only ends the wait early.
    unsafe { sys::dux_fd_wait(fd, timeout_ms) };
}

/// A UCP worker: one progress engine, its endpoints and their requests.
pub(crate) struct Worker {
    h: sys::ucp_worker_h,
    _ctx: Arc<Context>,
}

impl Worker {
    /// `serialized`: several threads will use it, one at a time (behind a lock); otherwise only
    /// the creating thread does (and `Worker` is `!Send`, which enforces it).
    pub(crate) fn new(ctx: &Arc<Context>, serialized: bool) -> Result<Worker, FabricError> {
        let mut h = std::ptr::null_mut();
        // SAFETY: a live context and a valid out-pointer.
        let st = unsafe { sys::dux_worker_create(ctx.raw(), i32::from(serialized), &mut h) };
        check("ucp_worker_create", st)?;
        Ok(Worker {
            h,
            _ctx: ctx.clone(),
        })
    }

    /// The worker's address, for peers to create endpoints to it.
    pub(crate) fn address(&self) -> Result<Vec<u8>, FabricError> {
        let mut p = std::ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: a live worker, valid out-pointers.
        let st = unsafe { sys::dux_worker_address(self.h, &mut p, &mut len) };
        check("ucp_worker_get_address", st)?;
        // SAFETY: UCX returned `len` readable bytes at `p`, valid until released below.
        let v = unsafe { std::slice::from_raw_parts(p as *const u8, len) }.to_vec();
        // SAFETY: `p` came from ucp_worker_get_address on this worker and is released once.
        unsafe { sys::dux_worker_address_release(self.h, p) };
        Ok(v)
    }

    pub(crate) fn progress(&self) -> u32 {
        // SAFETY: a live worker, used by one thread at a time (see `new`).
        unsafe { sys::dux_progress(self.h) }
    }

    /// Orders every op posted on this worker before the fence before every op posted after it.
    pub(crate) fn fence(&self) -> Result<(), FabricError> {
        // SAFETY: a live worker.
        check("ucp_worker_fence", unsafe { sys::dux_worker_fence(self.h) })
    }

    /// The event file descriptor, if the context has the wakeup feature and the transports
    /// support it.
    pub(crate) fn event_fd(&self) -> Option<i32> {
        let mut fd = -1;
        // SAFETY: a live worker, a valid out-pointer.
        let st = unsafe { sys::dux_worker_efd(self.h, &mut fd) };
        (st == sys::OK).then_some(fd)
    }

    /// Arms the event fd for [`wait_fd`]. `false` if events are already pending (progress
    /// again at once instead of waiting).
    pub(crate) fn arm(&self) -> bool {
        // SAFETY: a live worker, used by one thread at a time.
        unsafe { sys::dux_worker_arm(self.h) == 0 }
    }

    /// Creates an endpoint to the worker at `address` (bytes from [`Worker::address`]), with
    /// peer failure detection where the transports support it (TCP, RDMA; not shared memory):
    /// `failed` is set once the peer is found dead.
    ///
    /// # Safety
    ///
    /// `failed` must outlive the endpoint (UCX stores its address for the error callback).
    pub(crate) unsafe fn connect(
        &self,
        address: &[u8],
        failed: &std::sync::atomic::AtomicI32,
    ) -> Result<Ep, FabricError> {
        let mut st = sys::OK;
        for peer_errors in [1, 0] {
            let mut h = std::ptr::null_mut();
            // SAFETY: `address` is a worker address received from the peer (UCX parses and
            // validates it); a valid out-pointer; `failed` outlives the endpoint (the caller's
            // promise).
            st = unsafe {
                sys::dux_ep_create(
                    self.h,
                    address.as_ptr() as *const c_void,
                    peer_errors,
                    failed.as_ptr(),
                    &mut h,
                )
            };
            if st == sys::OK {
                return Ok(Ep(h));
            }
        }
        Err(setup_err("ucp_ep_create", st))
    }

    /// Closes `ep` (flushing it unless `force`), progressing at most `timeout_s`.
    pub(crate) fn close(&self, ep: Ep, force: bool, timeout_s: f64) -> i32 {
        // SAFETY: `ep` was created on this worker and is consumed here.
        unsafe { sys::dux_ep_close(self.h, ep.0, i32::from(force), timeout_s) }
    }

    /// Installs the active-message handler `cb(arg, ...)` for message `id`.
    ///
    /// # Safety
    ///
    /// `arg` must stay valid, and `cb` sound to call with it, for as long as this worker can
    /// run callbacks (until it is destroyed or the handler is replaced).
    pub(crate) unsafe fn set_am_handler(
        &self,
        id: u32,
        cb: sys::am_cb,
        arg: *mut c_void,
    ) -> Result<AmHandle, FabricError> {
        let mut h = std::ptr::null_mut();
        // SAFETY: a live worker; the caller vouches for `arg` (see above).
        let st = unsafe { sys::dux_am_set_handler(self.h, id, cb, arg, &mut h) };
        check("ucp_worker_set_am_recv_handler", st)?;
        Ok(AmHandle(h))
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // SAFETY: endpoints are closed (or abandoned to this destruction) by their owners before
        // the worker goes; UCX releases whatever is left.
        unsafe { sys::dux_worker_destroy(self.h) }
    }
}

/// The trampoline of an installed active-message handler; freed after its worker.
pub(crate) struct AmHandle(*mut c_void);

impl AmHandle {
    /// # Safety
    ///
    /// The worker it was installed on must be destroyed (it can no longer call the handler).
    pub(crate) unsafe fn free(self) {
        // SAFETY: allocated by dux_am_set_handler, freed once, unused from now on.
        unsafe { sys::dux_am_handler_free(self.0) }
    }
}

// SAFETY: the handle is an inert heap pointer until freed.
unsafe impl Send for AmHandle {}

/// An endpoint: a connection from a worker to a peer worker, the queue pair of the fabric.
pub(crate) struct Ep(sys::ucp_ep_h);

impl Ep {
    /// Unpacks the memory node's packed remote key for use on this endpoint.
    pub(crate) fn unpack_rkey(&self, packed: &[u8]) -> Result<Rkey, FabricError> {
        let mut h = std::ptr::null_mut();
        // SAFETY: a live endpoint; `packed` is the peer's `ucp_rkey_pack` output (UCX checks
        // it); a valid out-pointer.
        let st = unsafe { sys::dux_rkey_unpack(self.0, packed.as_ptr() as *const c_void, &mut h) };
        check("ucp_ep_rkey_unpack", st)?;
        Ok(Rkey(h))
    }
}

/// An unpacked remote key; destroy it before its endpoint closes.
pub(crate) struct Rkey(sys::ucp_rkey_h);

impl Rkey {
    /// Whether this process can load and store the remote region directly (a shared-memory
    /// transport mapped it): then UCX's GET and PUT are plain memcpy, not line-atomic.
    pub(crate) fn directly_mapped(&self, raddr: u64) -> bool {
        let mut p = std::ptr::null_mut();
        // SAFETY: a live rkey; `ucp_rkey_ptr` only computes a local pointer (never dereferenced
        // here) and fails for transports that cannot map.
        unsafe { sys::dux_rkey_ptr(self.0, raddr, &mut p) == sys::OK }
    }
}

impl Drop for Rkey {
    fn drop(&mut self) {
        // SAFETY: unpacked by `unpack_rkey`, destroyed once; owners drop rkeys before closing
        // their endpoints.
        unsafe { sys::dux_rkey_destroy(self.0) }
    }
}

/// A request in flight. Its buffers must outlive it: owners keep them until [`Req::poll`]
/// says it is done, or leak them.
pub(crate) struct Req(sys::request);

impl Req {
    /// Turns a posting call's `(request, status)` into `Ok(None)` (done at once),
    /// `Ok(Some(req))` (in flight), or `Err(status)`.
    fn from(r: sys::request, st: i32) -> Result<Option<Req>, i32> {
        if st == sys::INPROGRESS && !r.is_null() {
            Ok(Some(Req(r)))
        } else if st == sys::OK {
            Ok(None)
        } else {
            Err(st)
        }
    }

    /// `None` while in flight; then its final status, and the request is released.
    pub(crate) fn poll(&mut self) -> Option<i32> {
        // SAFETY: a live request handle (not yet freed: `poll` frees it only when returning
        // `Some`, after which the owner drops this `Req` without polling again).
        let st = unsafe { sys::dux_request_status(self.0) };
        if st == sys::INPROGRESS {
            return None;
        }
        // SAFETY: completed, so UCX no longer touches its buffers; freed once.
        unsafe { sys::dux_request_free(self.0) };
        self.0 = std::ptr::null_mut();
        Some(st)
    }

    /// Gives up on a request that carries no buffer of ours (a flush), or whose buffers are
    /// leaked (an abandoned batch's): released now, UCX frees it when it completes (kept,
    /// `ucp_worker_destroy` would find it unreleased).
    pub(crate) fn release(mut self) {
        if self.poll().is_none() {
            // SAFETY: a live request handle, not yet freed (`poll` returned `None`), freed
            // once here; it references no memory of ours, or only memory leaked for it.
            unsafe { sys::dux_request_free(self.0) };
        }
    }
}

/// Non-blocking verbs on one endpoint.
///
/// # Safety (all of them)
///
/// The buffers must stay valid, unmoved and otherwise unaccessed (except `src` for reading)
/// until the returned request completes ([`Req::poll`] returns `Some`); `rkey` must belong to
/// `ep`; the target range must lie inside the remote region.
pub(crate) mod post {
    use super::*;

    pub(crate) unsafe fn put(
        ep: &Ep,
        rkey: &Rkey,
        raddr: u64,
        src: &[u8],
    ) -> Result<Option<Req>, i32> {
        let mut st = 0;
        // SAFETY: see the module's contract, upheld by the caller.
        let r = unsafe {
            sys::dux_put(
                ep.0,
                src.as_ptr() as *const c_void,
                src.len(),
                raddr,
                rkey.0,
                &mut st,
            )
        };
        Req::from(r, st)
    }

    pub(crate) unsafe fn get(
        ep: &Ep,
        rkey: &Rkey,
        raddr: u64,
        dst: *mut u8,
        len: usize,
    ) -> Result<Option<Req>, i32> {
        let mut st = 0;
        // SAFETY: see the module's contract, upheld by the caller.
        let r = unsafe { sys::dux_get(ep.0, dst as *mut c_void, len, raddr, rkey.0, &mut st) };
        Req::from(r, st)
    }

    /// `cswap`: `operand` is the expected value and `*reply` the new one (UCX's argument order);
    /// otherwise fetch-and-add of `operand`. Either way `*reply` receives the old value.
    pub(crate) unsafe fn amo(
        ep: &Ep,
        rkey: &Rkey,
        raddr: u64,
        cswap: bool,
        operand: *const u64,
        reply: *mut u64,
    ) -> Result<Option<Req>, i32> {
        let mut st = 0;
        let op = if cswap { 0 } else { 1 };
        // SAFETY: see the module's contract, upheld by the caller.
        let r = unsafe { sys::dux_amo(ep.0, op, operand, reply, raddr, rkey.0, &mut st) };
        Req::from(r, st)
    }

    /// Completes when every earlier op on `ep` has completed at the target.
    pub(crate) fn flush(ep: &Ep) -> Result<Option<Req>, i32> {
        let mut st = 0;
        // SAFETY: a live endpoint; a flush has no buffers.
        let r = unsafe { sys::dux_ep_flush(ep.0, &mut st) };
        Req::from(r, st)
    }

    /// An eager active message that asks for a reply endpoint.
    pub(crate) unsafe fn am(
        ep: &Ep,
        id: u32,
        header: &[u8],
        data: &[u8],
    ) -> Result<Option<Req>, i32> {
        let mut st = 0;
        // SAFETY: see the module's contract, upheld by the caller.
        let r = unsafe {
            sys::dux_am_send(
                ep.0,
                id,
                header.as_ptr() as *const c_void,
                header.len(),
                data.as_ptr() as *const c_void,
                data.len(),
                1,
                &mut st,
            )
        };
        Req::from(r, st)
    }

    /// An eager active message on `reply_ep` from a private copy (usable from inside a
    /// message callback, whose buffers die with it).
    ///
    /// `reply_ep` must be the endpoint UCX handed to the running callback.
    pub(crate) unsafe fn am_reply(
        reply_ep: sys::ucp_ep_h,
        id: u32,
        header: &[u8],
        data: &[u8],
    ) -> i32 {
        // SAFETY: the caller passes the callback's live reply endpoint; the shim copies both
        // buffers before returning.
        unsafe {
            sys::dux_am_send_copy(
                reply_ep,
                id,
                header.as_ptr() as *const c_void,
                header.len(),
                data.as_ptr() as *const c_void,
                data.len(),
            )
        }
    }
}

/// Memory registered with (or allocated by) UCX, and its packed remote key.
pub(crate) struct MemMap {
    ctx: Arc<Context>,
    memh: sys::ucp_mem_h,
    base: *mut u8,
    len: usize,
}

// SAFETY: the handle and pointer are plain data; access to the memory is synchronized by the
// owner (the memory node's lock), and unmapping happens once, on drop.
unsafe impl Send for MemMap {}
// SAFETY: as above; `&MemMap` exposes only the base address and length.
unsafe impl Sync for MemMap {}

impl MemMap {
    /// Allocates `len` bytes with UCX (`UCP_MEM_MAP_ALLOCATE`), or registers `at`.
    ///
    /// # Safety
    ///
    /// If `at` is given, it must point to `len` writable bytes that outlive this mapping.
    pub(crate) unsafe fn new(
        ctx: &Arc<Context>,
        at: Option<*mut u8>,
        len: usize,
    ) -> Result<MemMap, FabricError> {
        let mut memh = std::ptr::null_mut();
        let mut base = std::ptr::null_mut();
        let mut mapped = 0usize;
        let addr = at.map_or(std::ptr::null_mut(), |p| p as *mut c_void);
        // SAFETY: a live context; valid out-pointers; `addr` is null or vouched for by the
        // caller.
        let st =
            unsafe { sys::dux_mem_map(ctx.raw(), addr, len, &mut memh, &mut base, &mut mapped) };
        check("ucp_mem_map", st)?;
        let m = MemMap {
            ctx: ctx.clone(),
            memh,
            base: base as *mut u8,
            len: mapped,
        };
        if m.len < len || m.base.is_null() {
            return Err(FabricError::Setup(format!(
                "UCX mapped {} bytes, {len} were asked for",
                m.len
            )));
        }
        Ok(m)
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.base
    }

    pub(crate) fn rkey(&self) -> Result<Vec<u8>, FabricError> {
        let mut p = std::ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: a live context and mapping; valid out-pointers.
        let st = unsafe { sys::dux_rkey_pack(self.ctx.raw(), self.memh, &mut p, &mut len) };
        check("ucp_rkey_pack", st)?;
        // SAFETY: UCX returned `len` readable bytes at `p`, valid until released below.
        let v = unsafe { std::slice::from_raw_parts(p as *const u8, len) }.to_vec();
        // SAFETY: `p` came from ucp_rkey_pack and is released once.
        unsafe { sys::dux_rkey_buffer_release(p) };
        Ok(v)
    }
}

impl Drop for MemMap {
    fn drop(&mut self) {
        // SAFETY: mapped by `new`, unmapped once; the memory node drops it after its worker,
        // so no remote op is served from it any more.
        unsafe { sys::dux_mem_unmap(self.ctx.raw(), self.memh) };
    }
}
