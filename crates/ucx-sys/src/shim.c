/* A flat C face over the few UCP calls dtxn uses, so that Rust never has to mirror UCX's
 * parameter structs (whose layouts change between releases). Every function returns a
 * ucs_status_t (0 ok, 1 in progress, negative error) or a request handle with its status. */
#include <ucp/api/ucp.h>
#include <ucs/debug/log_def.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* UCX logs to stdout by default, which corrupts the machine-readable output (JSON, CSV) of
 * dtxn's commands: its messages go to stderr instead, one line each. */
static ucs_log_func_rc_t dux_log_to_stderr(const char *file, unsigned line,
                                           const char *function, ucs_log_level_t level,
                                           const ucs_log_component_config_t *comp_conf,
                                           const char *message, va_list ap)
{
    (void)function;
    (void)comp_conf;
    const char *base = strrchr(file, '/');
    fprintf(stderr, "ucx %s %s:%u: ", ucs_log_level_names[level], base ? base + 1 : file, line);
    vfprintf(stderr, message, ap);
    fputc('\n', stderr);
    return UCS_LOG_FUNC_RC_STOP;
}

int dux_init(const char *const *keys, const char *const *vals, size_t n, int wakeup,
             int shared_workers, ucp_context_h *out)
{
    static int log_redirected;
    if (!__atomic_exchange_n(&log_redirected, 1, __ATOMIC_SEQ_CST))
        ucs_log_push_handler(dux_log_to_stderr);
    ucp_config_t *cfg;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK)
        return st;
    for (size_t i = 0; i < n; i++) {
        st = ucp_config_modify(cfg, keys[i], vals[i]);
        if (st != UCS_OK) {
            ucp_config_release(cfg);
            return st;
        }
    }
    ucp_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    p.features = UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_AM;
    if (wakeup)
        p.features |= UCP_FEATURE_WAKEUP;
    p.mt_workers_shared = shared_workers;
    st = ucp_init(&p, cfg, out);
    ucp_config_release(cfg);
    return st;
}

void dux_cleanup(ucp_context_h ctx) { ucp_cleanup(ctx); }

const char *dux_status_string(int st) { return ucs_status_string((ucs_status_t)st); }

/* serialized: several threads use the worker, one at a time (behind a lock). */
int dux_worker_create(ucp_context_h ctx, int serialized, ucp_worker_h *out)
{
    ucp_worker_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    p.thread_mode = serialized ? UCS_THREAD_MODE_SERIALIZED : UCS_THREAD_MODE_SINGLE;
    return ucp_worker_create(ctx, &p, out);
}

void dux_worker_destroy(ucp_worker_h w) { ucp_worker_destroy(w); }

int dux_worker_address(ucp_worker_h w, void **addr, size_t *len)
{
    ucp_address_t *a;
    ucs_status_t st = ucp_worker_get_address(w, &a, len);
    *addr = a;
    return st;
}

void dux_worker_address_release(ucp_worker_h w, void *addr)
{
    ucp_worker_release_address(w, (ucp_address_t *)addr);
}

unsigned dux_progress(ucp_worker_h w) { return ucp_worker_progress(w); }

int dux_worker_fence(ucp_worker_h w) { return ucp_worker_fence(w); }

int dux_worker_efd(ucp_worker_h w, int *fd) { return ucp_worker_get_efd(w, fd); }

/* Arms the worker's event fd: 0 armed (wait on the fd), 1 busy (events pending: progress
 * again), negative on error. */
int dux_worker_arm(ucp_worker_h w)
{
    ucs_status_t st = ucp_worker_arm(w);
    if (st == UCS_ERR_BUSY)
        return 1;
    return st;
}

/* Waits up to timeout_ms for `fd` to become readable. */
int dux_fd_wait(int fd, int timeout_ms)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN, .revents = 0};
    int r = poll(&pfd, 1, timeout_ms);
    if (r < 0 && errno != EINTR)
        return UCS_ERR_IO_ERROR;
    return 0;
}

int dux_mem_map(ucp_context_h ctx, void *addr, size_t len, ucp_mem_h *memh, void **base,
                size_t *mapped)
{
    ucp_mem_map_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS |
                   UCP_MEM_MAP_PARAM_FIELD_ADDRESS;
    p.length = len;
    p.address = addr;
    p.flags = addr == NULL ? UCP_MEM_MAP_ALLOCATE : 0;
    ucs_status_t st = ucp_mem_map(ctx, &p, memh);
    if (st != UCS_OK)
        return st;
    ucp_mem_attr_t a;
    memset(&a, 0, sizeof(a));
    a.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    st = ucp_mem_query(*memh, &a);
    if (st != UCS_OK) {
        ucp_mem_unmap(ctx, *memh);
        return st;
    }
    *base = a.address;
    *mapped = a.length;
    return UCS_OK;
}

int dux_mem_unmap(ucp_context_h ctx, ucp_mem_h memh) { return ucp_mem_unmap(ctx, memh); }

int dux_rkey_pack(ucp_context_h ctx, ucp_mem_h memh, void **buf, size_t *len)
{
    return ucp_rkey_pack(ctx, memh, buf, len);
}

void dux_rkey_buffer_release(void *buf) { ucp_rkey_buffer_release(buf); }

static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t st)
{
    /* Failed requests complete with an error status, which the caller reports; a response
     * awaited from the peer never comes, so the caller's flag (if any) says it failed. */
    (void)ep;
    (void)st;
    if (arg != NULL) {
        __atomic_store_n((int *)arg, 1, __ATOMIC_RELEASE);
    }
}

/* peer_errors: ask for peer failure detection (failed requests instead of hangs); shared-memory
 * transports cannot give it. `failed`, if not NULL, is set to 1 when the peer fails; it must
 * outlive the endpoint. */
int dux_ep_create(ucp_worker_h w, const void *addr, int peer_errors, int *failed, ucp_ep_h *out)
{
    ucp_ep_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                   UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.address = (const ucp_address_t *)addr;
    p.err_mode = peer_errors ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    p.err_handler.cb = ep_error;
    p.err_handler.arg = failed;
    return ucp_ep_create(w, &p, out);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Closes an endpoint, flushing it unless `force`, progressing the worker for at most
 * `timeout_s`. Returns the close status, or UCS_ERR_TIMED_OUT (the request is then released:
 * UCX frees it when the close completes, by the worker's destruction at the latest). */
int dux_ep_close(ucp_worker_h w, ucp_ep_h ep, int force, double timeout_s)
{
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &p);
    if (req == NULL)
        return UCS_OK;
    if (UCS_PTR_IS_ERR(req))
        return UCS_PTR_STATUS(req);
    double deadline = now_s() + timeout_s;
    ucs_status_t st;
    while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
        ucp_worker_progress(w);
        if (now_s() > deadline) {
            /* Released now, UCX frees it when the close completes; kept, it would trip
             * ucp_worker_destroy's check that every request was released. */
            ucp_request_free(req);
            return UCS_ERR_TIMED_OUT;
        }
    }
    ucp_request_free(req);
    return st;
}

int dux_rkey_unpack(ucp_ep_h ep, const void *buf, ucp_rkey_h *out)
{
    return ucp_ep_rkey_unpack(ep, buf, out);
}

void dux_rkey_destroy(ucp_rkey_h rkey) { ucp_rkey_destroy(rkey); }

int dux_rkey_ptr(ucp_rkey_h rkey, uint64_t raddr, void **ptr)
{
    return ucp_rkey_ptr(rkey, raddr, ptr);
}

static void *ret(ucs_status_ptr_t p, int *st)
{
    if (p == NULL) {
        *st = UCS_OK;
        return NULL;
    }
    if (UCS_PTR_IS_ERR(p)) {
        *st = UCS_PTR_STATUS(p);
        return NULL;
    }
    *st = UCS_INPROGRESS;
    return p;
}

void *dux_put(ucp_ep_h ep, const void *buf, size_t len, uint64_t raddr, ucp_rkey_h rkey, int *st)
{
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    return ret(ucp_put_nbx(ep, buf, len, raddr, rkey, &p), st);
}

void *dux_get(ucp_ep_h ep, void *buf, size_t len, uint64_t raddr, ucp_rkey_h rkey, int *st)
{
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    return ret(ucp_get_nbx(ep, buf, len, raddr, rkey, &p), st);
}

/* op 0: CSWAP (operand = expected, *reply = new in, old out); op 1: fetch-and-add. */
void *dux_amo(ucp_ep_h ep, int op, const uint64_t *operand, uint64_t *reply, uint64_t raddr,
              ucp_rkey_h rkey, int *st)
{
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
    p.datatype = ucp_dt_make_contig(8);
    p.reply_buffer = reply;
    ucp_atomic_op_t opc = op == 0 ? UCP_ATOMIC_OP_CSWAP : UCP_ATOMIC_OP_ADD;
    return ret(ucp_atomic_op_nbx(ep, opc, operand, 1, raddr, rkey, &p), st);
}

void *dux_ep_flush(ucp_ep_h ep, int *st)
{
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    return ret(ucp_ep_flush_nbx(ep, &p), st);
}

int dux_request_status(void *req) { return ucp_request_check_status(req); }

void dux_request_free(void *req) { ucp_request_free(req); }

void dux_request_cancel(ucp_worker_h w, void *req) { ucp_request_cancel(w, req); }

/* ---- active messages (the RPC verb) ---- */

typedef void (*dux_am_cb)(void *arg, const void *hdr, size_t hlen, const void *data, size_t len,
                          ucp_ep_h reply_ep);

struct am_tramp {
    dux_am_cb cb;
    void *arg;
};

static ucs_status_t am_tramp(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
                             const ucp_am_recv_param_t *param)
{
    struct am_tramp *t = arg;
    /* Senders use eager messages only; a rendezvous one is dropped (and its data released). */
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)
        return UCS_OK;
    ucp_ep_h reply = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : NULL;
    t->cb(t->arg, hdr, hlen, data, len, reply);
    return UCS_OK;
}

/* Installs `cb(arg, ...)` for messages `id`. The returned handle owns the trampoline; free it
 * with dux_am_handler_free after the worker is destroyed (or the handler replaced). */
int dux_am_set_handler(ucp_worker_h w, unsigned id, dux_am_cb cb, void *arg, void **handle)
{
    struct am_tramp *t = malloc(sizeof(*t));
    if (t == NULL)
        return UCS_ERR_NO_MEMORY;
    t->cb = cb;
    t->arg = arg;
    ucp_am_handler_param_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                   UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    p.id = id;
    p.flags = UCP_AM_FLAG_WHOLE_MSG;
    p.cb = am_tramp;
    p.arg = t;
    ucs_status_t st = ucp_worker_set_am_recv_handler(w, &p);
    if (st != UCS_OK) {
        free(t);
        return st;
    }
    *handle = t;
    return UCS_OK;
}

void dux_am_handler_free(void *handle) { free(handle); }

/* Sends an eager active message; `hdr` and `data` must stay valid until the request completes.
 * With `want_reply`, the receiver's callback gets an endpoint to answer on. */
void *dux_am_send(ucp_ep_h ep, unsigned id, const void *hdr, size_t hlen, const void *data,
                  size_t len, int want_reply, int *st)
{
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_EAGER | (want_reply ? UCP_AM_SEND_FLAG_REPLY : 0);
    return ret(ucp_am_send_nbx(ep, id, hdr, hlen, data, len, &p), st);
}

static void free_on_send(void *req, ucs_status_t st, void *user)
{
    (void)st;
    free(user);
    ucp_request_free(req);
}

/* Sends an eager active message from a private copy, freed when the send completes: for
 * replies sent from inside a message callback, whose buffers do not outlive it. */
int dux_am_send_copy(ucp_ep_h ep, unsigned id, const void *hdr, size_t hlen, const void *data,
                     size_t len)
{
    char *copy = malloc(hlen + len + 1);
    if (copy == NULL)
        return UCS_ERR_NO_MEMORY;
    if (hlen)
        memcpy(copy, hdr, hlen);
    if (len)
        memcpy(copy + hlen, data, len);
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK |
                     UCP_OP_ATTR_FIELD_USER_DATA;
    p.flags = UCP_AM_SEND_FLAG_EAGER;
    p.cb.send = free_on_send;
    p.user_data = copy;
    ucs_status_ptr_t r = ucp_am_send_nbx(ep, id, copy, hlen, copy + hlen, len, &p);
    if (r == NULL) {
        free(copy);
        return UCS_OK;
    }
    if (UCS_PTR_IS_ERR(r)) {
        free(copy);
        return UCS_PTR_STATUS(r);
    }
    return UCS_INPROGRESS;
}
