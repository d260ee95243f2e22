//! Raw bindings to a C shim over the system OpenUCX UCP library (see `src/shim.c`): the calls
//! dtxn's `ucx` fabric backend needs, with flat arguments instead of UCX's parameter structs.
//!
//! Present only when the build script found UCX with pkg-config ([`AVAILABLE`]); otherwise the
//! crate is empty and dependents leave their UCX code out.
//!
//! Status codes are `ucs_status_t`: [`OK`], [`INPROGRESS`], negative errors. Request-returning
//! calls return a request handle (non-null, status [`INPROGRESS`]) or null with the final
//! status in `*st`.

#![allow(non_camel_case_types)]

/// Whether this build links UCX.
pub const AVAILABLE: bool = cfg!(have_ucx);

pub const OK: i32 = 0;
pub const INPROGRESS: i32 = 1;
pub const ERR_BUSY: i32 = -4;
pub const ERR_TIMED_OUT: i32 = -20;

/// `ucp_context_h`.
pub type ucp_context_h = *mut std::ffi::c_void;
/// `ucp_worker_h`.
pub type ucp_worker_h = *mut std::ffi::c_void;
/// `ucp_ep_h`.
pub type ucp_ep_h = *mut std::ffi::c_void;
/// `ucp_mem_h`.
pub type ucp_mem_h = *mut std::ffi::c_void;
/// `ucp_rkey_h`.
pub type ucp_rkey_h = *mut std::ffi::c_void;
/// A UCP request handle.
pub type request = *mut std::ffi::c_void;

/// Active-message callback: `(arg, header, header_len, data, data_len, reply_ep_or_null)`.
pub type am_cb = unsafe extern "C" fn(
    *mut std::ffi::c_void,
    *const std::ffi::c_void,
    usize,
    *const std::ffi::c_void,
    usize,
    ucp_ep_h,
);

#[cfg(have_ucx)]
mod ffi {
    use super::*;
    use std::ffi::{c_char, c_int, c_uint, c_void};

    extern "C" {
        pub fn dux_init(
            keys: *const *const c_char,
            vals: *const *const c_char,
            n: usize,
            wakeup: c_int,
            shared_workers: c_int,
            out: *mut ucp_context_h,
        ) -> c_int;
        pub fn dux_cleanup(ctx: ucp_context_h);
        pub fn dux_status_string(st: c_int) -> *const c_char;
        pub fn dux_worker_create(
            ctx: ucp_context_h,
            serialized: c_int,
            out: *mut ucp_worker_h,
        ) -> c_int;
        pub fn dux_worker_destroy(w: ucp_worker_h);
        pub fn dux_worker_address(
            w: ucp_worker_h,
            addr: *mut *mut c_void,
            len: *mut usize,
        ) -> c_int;
        pub fn dux_worker_address_release(w: ucp_worker_h, addr: *mut c_void);
        pub fn dux_progress(w: ucp_worker_h) -> c_uint;
        pub fn dux_worker_fence(w: ucp_worker_h) -> c_int;
        pub fn dux_worker_efd(w: ucp_worker_h, fd: *mut c_int) -> c_int;
        pub fn dux_worker_arm(w: ucp_worker_h) -> c_int;
        pub fn dux_fd_wait(fd: c_int, timeout_ms: c_int) -> c_int;
        pub fn dux_mem_map(
            ctx: ucp_context_h,
            addr: *mut c_void,
            len: usize,
            memh: *mut ucp_mem_h,
            base: *mut *mut c_void,
            mapped: *mut usize,
        ) -> c_int;
        pub fn dux_mem_unmap(ctx: ucp_context_h, memh: ucp_mem_h) -> c_int;
        pub fn dux_rkey_pack(
            ctx: ucp_context_h,
            memh: ucp_mem_h,
            buf: *mut *mut c_void,
            len: *mut usize,
        ) -> c_int;
        pub fn dux_rkey_buffer_release(buf: *mut c_void);
        pub fn dux_ep_create(
            w: ucp_worker_h,
            addr: *const c_void,
            peer_errors: c_int,
            failed: *mut c_int,
            out: *mut ucp_ep_h,
        ) -> c_int;
        pub fn dux_ep_close(w: ucp_worker_h, ep: ucp_ep_h, force: c_int, timeout_s: f64) -> c_int;
        pub fn dux_rkey_unpack(ep: ucp_ep_h, buf: *const c_void, out: *mut ucp_rkey_h) -> c_int;
        pub fn dux_rkey_destroy(rkey: ucp_rkey_h);
        pub fn dux_rkey_ptr(rkey: ucp_rkey_h, raddr: u64, ptr: *mut *mut c_void) -> c_int;
        pub fn dux_put(
            ep: ucp_ep_h,
            buf: *const c_void,
            len: usize,
            raddr: u64,
            rkey: ucp_rkey_h,
            st: *mut c_int,
        ) -> request;
        pub fn dux_get(
            ep: ucp_ep_h,
            buf: *mut c_void,
            len: usize,
            raddr: u64,
            rkey: ucp_rkey_h,
            st: *mut c_int,
        ) -> request;
        pub fn dux_amo(
            ep: ucp_ep_h,
            op: c_int,
            operand: *const u64,
            reply: *mut u64,
            raddr: u64,
            rkey: ucp_rkey_h,
            st: *mut c_int,
        ) -> request;
        pub fn dux_ep_flush(ep: ucp_ep_h, st: *mut c_int) -> request;
        pub fn dux_request_status(req: request) -> c_int;
        pub fn dux_request_free(req: request);
        pub fn dux_request_cancel(w: ucp_worker_h, req: request);
        pub fn dux_am_set_handler(
            w: ucp_worker_h,
            id: c_uint,
            cb: am_cb,
            arg: *mut c_void,
            handle: *mut *mut c_void,
        ) -> c_int;
        pub fn dux_am_handler_free(handle: *mut c_void);
        pub fn dux_am_send(
            ep: ucp_ep_h,
            id: c_uint,
            hdr: *const c_void,
            hlen: usize,
            data: *const c_void,
            len: usize,
            want_reply: c_int,
            st: *mut c_int,
        ) -> request;
        pub fn dux_am_send_copy(
            ep: ucp_ep_h,
            id: c_uint,
            hdr: *const c_void,
            hlen: usize,
            data: *const c_void,
            len: usize,
        ) -> c_int;
    }
}

#[cfg(have_ucx)]
pub use ffi::*;
