/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cri-sim: the server.  One thread polls one completion queue and drives every call as a small
 * state machine; other threads (the C API, scripts) start batches directly under the lock, so an
 * emitted event leaves at once instead of waiting for the server thread to wake up.  What a call
 * gets is decided in cri-sim-methods.c.
 */
#include <errno.h>
#include <string.h>

#include <glib/gstdio.h>
#include <grpc/byte_buffer.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include "cri-sim-private.h"

#define IDLE_WAKEUP_USEC     (50 * 1000)
#define STREAM_END_WAIT_USEC (G_USEC_PER_SEC / 2)

static Op shutdown_op = {NULL, OP_SHUTDOWN};

/* ---- calls ---- */

static void
start_batch(Call *call, const grpc_op *ops, size_t n_ops, OpKind kind)
{
    grpc_call_error result = grpc_call_start_batch(call->call, ops, n_ops, &call->ops[kind], NULL);

    if (result != GRPC_CALL_OK)
        g_error("cri-sim: cannot start a batch on %s: error %d", call->method, result);
    call->n_pending++;
}

/* Sends what a stream has next: initial metadata, one event, or its final status. */
void
sim_stream_kick(Call *call)
{
    grpc_op ops[2] = {0};
    size_t n = 0;
    GBytes *bytes;

    if (call->sending || call->closed || call->status_sent)
        return;
    if (!call->metadata_sent) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        call->metadata_sent = TRUE;
    }
    bytes = g_queue_pop_head(&call->outbox);
    if (bytes) {
        gsize size;
        const void *data = g_bytes_get_data(bytes, &size);
        grpc_slice slice = grpc_slice_from_copied_buffer(data, size);

        call->send_buffer = grpc_raw_byte_buffer_create(&slice, 1);
        grpc_slice_unref(slice);
        g_bytes_unref(bytes);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = call->send_buffer;
        call->sending_message = TRUE;
    } else if (call->ending) {
        call->status_details = grpc_slice_from_copied_string(call->end_details ? call->end_details : "");
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = call->end_status;
        ops[n++].data.send_status_from_server.status_details = &call->status_details;
        call->status_sent = TRUE;
        start_batch(call, ops, n, OP_STATUS);
        return;
    }
    if (n == 0)
        return;
    call->sending = TRUE;
    start_batch(call, ops, n, OP_SEND);
}

void
sim_remove_subscriber(CriSim *self, Call *call)
{
    if (g_ptr_array_remove(self->subscribers, call))
        g_cond_broadcast(&self->cond);
}

void
sim_stream_end(CriSim *self, Call *call, grpc_status_code status, const char *details)
{
    if (call->ending)
        return;
    call->ending = TRUE;
    call->end_status = status;
    call->end_details = g_strdup(details);
    sim_remove_subscriber(self, call);
    sim_stream_kick(call);
}

/* The whole answer of a unary call (or a stream that fails at once). */
void
sim_call_finish(Call *call, grpc_status_code status, const char *details, GBytes *message)
{
    grpc_op ops[3] = {0};
    size_t n = 0;

    if (call->closed || call->status_sent)
        return;
    if (!call->metadata_sent) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        call->metadata_sent = TRUE;
    }
    if (message) {
        gsize size;
        const void *data = g_bytes_get_data(message, &size);
        grpc_slice slice = grpc_slice_from_copied_buffer(data, size);

        g_clear_pointer(&call->send_buffer, grpc_byte_buffer_destroy);
        call->send_buffer = grpc_raw_byte_buffer_create(&slice, 1);
        grpc_slice_unref(slice);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = call->send_buffer;
    }
    call->status_details = grpc_slice_from_copied_string(details ? details : "");
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = status;
    ops[n++].data.send_status_from_server.status_details = &call->status_details;
    call->status_sent = TRUE;
    start_batch(call, ops, n, OP_STATUS);
}

static Call *
call_new(CriSim *self)
{
    Call *call = g_new0(Call, 1);

    call->sim = self;
    grpc_call_details_init(&call->details);
    grpc_metadata_array_init(&call->metadata);
    for (guint i = 0; i < N_OPS; i++)
        call->ops[i] = (Op){call, i};
    call->status_details = grpc_empty_slice();
    g_queue_init(&call->outbox);
    self->n_live++;
    return call;
}

static void
call_free(CriSim *self, Call *call)
{
    g_assert(call->n_pending == 0);
    g_ptr_array_remove_fast(self->calls, call);
    sim_remove_subscriber(self, call);
    if (call->due)
        g_queue_remove(&self->timers, call);
    if (call->call)
        grpc_call_unref(call->call);
    grpc_call_details_destroy(&call->details);
    grpc_metadata_array_destroy(&call->metadata);
    if (call->request)
        grpc_byte_buffer_destroy(call->request);
    if (call->send_buffer)
        grpc_byte_buffer_destroy(call->send_buffer);
    grpc_slice_unref(call->status_details);
    g_queue_clear_full(&call->outbox, (GDestroyNotify)g_bytes_unref);
    if (call->is_stream)
        self->n_stream_calls--;
    g_free(call->method);
    g_free(call->end_details);
    g_free(call->fail_details);
    g_free(call);
    self->n_live--;
    g_cond_broadcast(&self->cond);
}

static void
post_request(CriSim *self)
{
    Call *call = call_new(self);

    if (grpc_server_request_call(self->server, &call->call, &call->details, &call->metadata,
                                 self->cq, self->cq, &call->ops[OP_REQUEST]) != GRPC_CALL_OK)
        g_error("cri-sim: cannot request a call");
    call->n_pending++;
}

void
sim_timer_add(CriSim *self, Call *call, int delay_ms)
{
    GList *link;

    call->due = g_get_monotonic_time() + (gint64)delay_ms * 1000;
    for (link = self->timers.tail; link; link = link->prev)
        if (((Call *)link->data)->due <= call->due)
            break;
    if (link)
        g_queue_insert_after(&self->timers, link, call);
    else
        g_queue_push_head(&self->timers, call);
}

static void
call_arrived(CriSim *self, Call *call)
{
    /* gpr_malloc() is malloc(), so g_free() may release it. */
    g_autofree char *path = grpc_slice_to_c_string(call->details.method);
    const char *prefix = "/" SERVICE "/";
    grpc_op ops[1] = {0};
    guint count;

    call->method = g_strdup(g_str_has_prefix(path, prefix) ? path + strlen(prefix) : path);
    call->is_events = g_str_equal(call->method, EVENTS_METHOD);
    call->is_stream = call->is_events || g_str_equal(call->method, STREAM_SANDBOXES) ||
                      g_str_equal(call->method, STREAM_CONTAINERS);
    if (call->is_stream)
        self->n_stream_calls++;
    count = GPOINTER_TO_UINT(g_hash_table_lookup(self->n_calls, call->method));
    g_hash_table_replace(self->n_calls, g_strdup(call->method), GUINT_TO_POINTER(count + 1));
    self->n_calls_total++;
    g_ptr_array_add(self->calls, call);

    ops[0].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[0].data.recv_close_on_server.cancelled = &call->cancelled;
    start_batch(call, ops, 1, OP_CLOSE);
    ops[0].op = GRPC_OP_RECV_MESSAGE;
    ops[0].data.recv_message.recv_message = &call->request;
    start_batch(call, ops, 1, OP_RECV);
}

static void
handle_completion(CriSim *self, Op *op, gboolean success)
{
    Call *call = op->call;

    if (op->kind == OP_SHUTDOWN) {
        self->shutdown_seen = TRUE;
        return;
    }

    call->n_pending--;
    switch (op->kind) {
    case OP_REQUEST:
        if (success && self->state == SERVER_SERVING)
            post_request(self);
        if (success)
            call_arrived(self, call);
        break;
    case OP_RECV:
        if (success)
            sim_call_received(self, call);
        break;
    case OP_CLOSE:
        call->closed = TRUE;
        sim_remove_subscriber(self, call);
        if (call->due) {
            g_queue_remove(&self->timers, call);
            call->due = 0;
        }
        g_queue_clear_full(&call->outbox, (GDestroyNotify)g_bytes_unref);
        break;
    case OP_SEND:
        call->sending = FALSE;
        g_clear_pointer(&call->send_buffer, grpc_byte_buffer_destroy);
        if (call->sending_message && success && call->is_events)
            self->n_events_sent++;
        call->sending_message = FALSE;
        if (success)
            sim_stream_kick(call);
        break;
    case OP_STATUS:
        g_clear_pointer(&call->send_buffer, grpc_byte_buffer_destroy);
        break;
    default:
        g_assert_not_reached();
    }
    if (call->n_pending == 0)
        call_free(self, call);
}

static void
run_timers(CriSim *self)
{
    gint64 now = g_get_monotonic_time();
    Call *call;

    while ((call = g_queue_peek_head(&self->timers)) && call->due <= now) {
        g_queue_pop_head(&self->timers);
        call->due = 0;
        sim_call_start(self, call);
    }
}

/* ---- the server ---- */

gboolean
sim_server_start(CriSim *self, GError **error)
{
    grpc_server_credentials *credentials;
    grpc_server *server;

    if (g_unlink(self->socket_path) < 0 && errno != ENOENT) {
        int errsv = errno;

        g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_FAILED, "cannot remove %s: %s",
                    self->socket_path, g_strerror(errsv));
        return FALSE;
    }
    server = grpc_server_create(NULL, NULL);
    grpc_server_register_completion_queue(server, self->cq, NULL);
    credentials = grpc_insecure_server_credentials_create();
    if (!grpc_server_add_http2_port(server, self->address, credentials)) {
        grpc_server_credentials_release(credentials);
        grpc_server_destroy(server);
        g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_FAILED, "cannot listen on %s",
                    self->address);
        return FALSE;
    }
    grpc_server_credentials_release(credentials);
    grpc_server_start(server);

    self->server = server;
    self->state = SERVER_SERVING;
    self->shutdown_seen = FALSE;
    self->come_back_at = 0;
    post_request(self);
    g_debug("serving on %s", self->socket_path);
    g_cond_broadcast(&self->cond);
    return TRUE;
}

/* Stops the serving server: streams end with UNAVAILABLE, other calls are cancelled.  Waits
 * (releasing the lock) until every call of it is gone, then destroys it. */
void
sim_server_stop(CriSim *self)
{
    grpc_server *server = self->server;
    gint64 deadline = g_get_monotonic_time() + STREAM_END_WAIT_USEC;

    g_assert(self->state == SERVER_SERVING);
    self->state = SERVER_STOPPING;
    grpc_server_shutdown_and_notify(server, self->cq, &shutdown_op);

    for (guint i = 0; i < self->calls->len; i++) {
        Call *call = self->calls->pdata[i];

        if (!call->is_stream || call->closed || call->status_sent || call->ending)
            continue;
        /* Events already emitted still go out first. */
        if (call->due) {
            g_queue_remove(&self->timers, call);
            call->due = 0;
        }
        if (g_ptr_array_find(self->subscribers, call, NULL))
            sim_stream_end(self, call, GRPC_STATUS_UNAVAILABLE, GOING_AWAY);
        else
            sim_call_finish(call, GRPC_STATUS_UNAVAILABLE, GOING_AWAY, NULL);
    }
    /* Let the statuses reach the clients before anything is cancelled. */
    while (self->n_stream_calls > 0)
        if (!g_cond_wait_until(&self->cond, &self->lock, deadline))
            break;
    grpc_server_cancel_all_calls(server);
    while (!self->shutdown_seen || self->n_live > 0)
        g_cond_wait(&self->cond, &self->lock);

    self->server = NULL;
    g_mutex_unlock(&self->lock);
    grpc_server_destroy(server);
    g_mutex_lock(&self->lock);
    self->state = SERVER_AWAY;
    g_debug("stopped serving on %s", self->socket_path);
    g_cond_broadcast(&self->cond);
}

gpointer
sim_server_thread_main(gpointer data)
{
    CriSim *self = data;

    for (;;) {
        gint64 now = g_get_monotonic_time();
        gint64 wake = now + IDLE_WAKEUP_USEC;
        Call *next;
        grpc_event event;

        g_mutex_lock(&self->lock);
        next = g_queue_peek_head(&self->timers);
        if (next)
            wake = MIN(wake, next->due);
        if (self->state == SERVER_AWAY && self->come_back_at)
            wake = MIN(wake, self->come_back_at);
        g_mutex_unlock(&self->lock);

        event = grpc_completion_queue_next(
            self->cq,
            gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                         gpr_time_from_micros(MAX(wake - now, 0), GPR_TIMESPAN)),
            NULL);
        if (event.type == GRPC_QUEUE_SHUTDOWN)
            break;

        g_mutex_lock(&self->lock);
        if (event.type == GRPC_OP_COMPLETE)
            handle_completion(self, event.tag, event.success);
        run_timers(self);
        if (self->state == SERVER_AWAY && self->come_back_at &&
            g_get_monotonic_time() >= self->come_back_at) {
            g_autoptr(GError) error = NULL;

            if (!sim_server_start(self, &error)) {
                g_debug("cannot come back, retrying: %s", error->message);
                self->come_back_at = g_get_monotonic_time() + IDLE_WAKEUP_USEC;
            }
        }
        g_cond_broadcast(&self->cond);
        g_mutex_unlock(&self->lock);
    }
    return NULL;
}

gboolean
cri_sim_is_serving(CriSim *self)
{
    gboolean serving;

    g_mutex_lock(&self->lock);
    serving = self->state == SERVER_SERVING;
    g_mutex_unlock(&self->lock);
    return serving;
}

gboolean
cri_sim_wait_serving(CriSim *self, int timeout_ms)
{
    gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
    gboolean serving;

    g_mutex_lock(&self->lock);
    while (self->state != SERVER_SERVING)
        if (!g_cond_wait_until(&self->cond, &self->lock, deadline))
            break;
    serving = self->state == SERVER_SERVING;
    g_mutex_unlock(&self->lock);
    return serving;
}

/* ---- calls received ---- */

static guint
n_calls_of(CriSim *self, const char *method)
{
    return method ? GPOINTER_TO_UINT(g_hash_table_lookup(self->n_calls, method))
                  : self->n_calls_total;
}

guint
cri_sim_get_n_calls(CriSim *self, const char *method)
{
    guint n;

    g_mutex_lock(&self->lock);
    n = n_calls_of(self, method);
    g_mutex_unlock(&self->lock);
    return n;
}

gboolean
cri_sim_wait_calls(CriSim *self, const char *method, guint n, int timeout_ms)
{
    gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
    gboolean reached;

    g_mutex_lock(&self->lock);
    while (n_calls_of(self, method) < n)
        if (!g_cond_wait_until(&self->cond, &self->lock, deadline))
            break;
    reached = n_calls_of(self, method) >= n;
    g_mutex_unlock(&self->lock);
    return reached;
}

GBytes *
cri_sim_get_last_request(CriSim *self, const char *method)
{
    GBytes *bytes;

    g_mutex_lock(&self->lock);
    bytes = g_hash_table_lookup(self->last_requests, method);
    if (bytes)
        g_bytes_ref(bytes);
    g_mutex_unlock(&self->lock);
    return bytes;
}
