/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unary CRI calls.  Every caller owns a completion queue and polls it itself, so calls from many
 * threads never contend for a queue (a pluck queue allows only a few pluckers) and each caller
 * drives the core while it waits.  A caller may put several unary calls in flight on its queue at
 * once (cri_channel_call_many(), and cri_channel_drive() for calls of many callers): each call
 * made alone costs a thread wake-up on each side, so calls that go out together cost little more
 * than one.
 */
#include <grpc/grpc.h>
#include <grpc/support/time.h>

#include "cri-transport.h"

/* One unary call in flight: its spec, its call and what its single batch writes into. */
typedef struct {
    CriUnaryCall *spec;
    grpc_call *call;
    CriCallIo io;
} Unary;

/* Calls of a cri_channel_call_many() in flight, for the cancellable's handler. */
typedef struct {
    GMutex lock;
    GPtrArray *calls; /* grpc_call *, not owned */
    gboolean cancelled;
} InFlight;

static void
on_calls_cancelled(GCancellable *cancellable, gpointer data)
{
    InFlight *in_flight = data;

    g_mutex_lock(&in_flight->lock);
    in_flight->cancelled = TRUE;
    for (guint i = 0; i < in_flight->calls->len; i++)
        grpc_call_cancel(in_flight->calls->pdata[i], NULL);
    g_mutex_unlock(&in_flight->lock);
}

static gboolean
unary_start(CriChannel *self, Unary *u, grpc_completion_queue *cq, gpr_timespec deadline)
{
    grpc_call_error call_error;
    grpc_op ops[6] = {0};

    u->call = cri_channel_create_call(self, u->spec->method, cq, deadline);
    cri_call_io_init(&u->io, u->spec->request);
    cri_call_io_send_ops(&u->io, ops);
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &u->io.response_buffer;
    cri_call_io_status_op(&u->io, &ops[5]);

    call_error = grpc_call_start_batch(u->call, ops, G_N_ELEMENTS(ops), u, NULL);
    if (call_error != GRPC_CALL_OK) {
        g_set_error(&u->spec->error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "%s: %s: cannot start the call (gRPC call error %d)",
                    cri_channel_get_shown_endpoint(self), u->spec->method, (int)call_error);
        return FALSE;
    }
    return TRUE;
}

/* Decodes the outcome of a completed (or never started) call into its spec and frees it. */
static void
unary_finish(CriChannel *self, Unary *u)
{
    CriUnaryCall *spec = u->spec;

    if (spec->error) {
        /* never started */
    } else if (u->io.status != GRPC_STATUS_OK) {
        g_debug("%s: %s failed: status %d: %s", cri_channel_get_shown_endpoint(self), spec->method,
                (int)u->io.status, u->io.error_string ? u->io.error_string : "(no debug text)");
        cri_set_status_error(&spec->error, self, spec->method, u->io.status, u->io.details);
    } else if (!u->io.response_buffer) {
        g_set_error(&spec->error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "%s: %s: the runtime answered without a message",
                    cri_channel_get_shown_endpoint(self), spec->method);
    } else if (spec->item_func) {
        CriListingCount count = {0};

        if (!cri_buffer_read_items(u->io.response_buffer, spec->response_descriptor, spec->arena,
                                   spec->item_func, spec->item_data, &spec->limits, &count,
                                   &spec->over_limit))
            cri_set_read_items_error(&spec->error, self, spec->method, spec->response_descriptor,
                                     &spec->limits, &count, spec->over_limit);
    } else {
        spec->response = cri_unpack_message(self, spec->method, u->io.response_buffer,
                                            spec->response_descriptor, spec->arena, &spec->error);
    }

    cri_call_io_clear(&u->io);
    grpc_call_unref(u->call);
}

/* Starts what @feed gives, at most @max_in_flight at once, on one completion queue, and hands
 * each call back as it ends.  @one_deadline: every call ends by @timeout_usec from now, else
 * each by @timeout_usec from its start. */
static void
drive(CriChannel *self, const CriCallFeed *feed, gpointer data, guint max_in_flight,
      gint64 timeout_usec, gboolean one_deadline, GCancellable *cancellable)
{
    InFlight in_flight = {0};
    /* Slots are made as calls need them, so that a large bound costs only what is used. */
    g_autoptr(GPtrArray) slots = g_ptr_array_new_with_free_func(g_free);
    g_autoptr(GPtrArray) free_slots = g_ptr_array_new();
    guint running = 0;
    gpr_timespec deadline = cri_deadline_from_timeout(timeout_usec);
    grpc_completion_queue *cq;
    gulong cancel_id = 0;
    gboolean more = TRUE;

    g_mutex_init(&in_flight.lock);
    in_flight.calls = g_ptr_array_new();
    cq = grpc_completion_queue_create_for_next(NULL);
    /* Runs the handler at once if @cancellable is already cancelled. */
    if (cancellable)
        cancel_id =
            g_cancellable_connect(cancellable, G_CALLBACK(on_calls_cancelled), &in_flight, NULL);

    for (;;) {
        grpc_event event;
        Unary *done;

        while (more && running < max_in_flight) {
            CriUnaryCall *spec = feed->next(data);
            Unary *u;
            gboolean cancelled;

            if (!spec) {
                more = FALSE;
                break;
            }
            spec->response = NULL;
            spec->error = NULL;
            spec->over_limit = CRI_LIMIT_NONE;
            g_mutex_lock(&in_flight.lock);
            cancelled = in_flight.cancelled;
            g_mutex_unlock(&in_flight.lock);
            spec->start_usec = g_get_monotonic_time();
            if (cancelled) {
                g_set_error(&spec->error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_CANCELLED, "%s: %s: %s",
                            cri_channel_get_shown_endpoint(self), spec->method, "call cancelled");
                spec->end_usec = spec->start_usec;
                feed->done(spec, data);
                continue;
            }
            if (free_slots->len > 0)
                u = g_ptr_array_steal_index_fast(free_slots, free_slots->len - 1);
            else
                g_ptr_array_add(slots, (u = g_new0(Unary, 1)));
            u->spec = spec;
            if (!unary_start(self, u, cq,
                             one_deadline ? deadline : cri_deadline_from_timeout(timeout_usec))) {
                unary_finish(self, u);
                spec->end_usec = g_get_monotonic_time();
                g_ptr_array_add(free_slots, u);
                feed->done(spec, data);
                continue;
            }
            g_mutex_lock(&in_flight.lock);
            g_ptr_array_add(in_flight.calls, u->call);
            if (in_flight.cancelled)
                grpc_call_cancel(u->call, NULL);
            g_mutex_unlock(&in_flight.lock);
            running++;
        }
        if (running == 0)
            break;

        event = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        g_assert(event.type == GRPC_OP_COMPLETE);
        done = event.tag;
        g_mutex_lock(&in_flight.lock);
        g_ptr_array_remove_fast(in_flight.calls, done->call);
        g_mutex_unlock(&in_flight.lock);
        running--;
        unary_finish(self, done);
        done->spec->end_usec = g_get_monotonic_time();
        g_ptr_array_add(free_slots, done);
        feed->done(done->spec, data);
        more = TRUE;
    }

    /* Blocks while a concurrent handler runs, so it never sees @in_flight gone. */
    if (cancel_id)
        g_cancellable_disconnect(cancellable, cancel_id);
    cri_queue_destroy(cq);
    g_ptr_array_unref(in_flight.calls);
    g_mutex_clear(&in_flight.lock);
}

void
cri_channel_drive(CriChannel *self, const CriCallFeed *feed, gpointer data, guint max_in_flight,
                  gint64 timeout_usec, GCancellable *cancellable)
{
    g_return_if_fail(self != NULL && feed != NULL && max_in_flight > 0);
    drive(self, feed, data, max_in_flight, timeout_usec, FALSE, cancellable);
}

/* cri_channel_call_many()'s feed: the array in order. */
typedef struct {
    CriUnaryCall *calls;
    guint n_calls;
    guint next;
} CallArray;

static CriUnaryCall *
call_array_next(gpointer data)
{
    CallArray *array = data;

    return array->next < array->n_calls ? &array->calls[array->next++] : NULL;
}

static void
call_array_done(CriUnaryCall *call, gpointer data)
{
}

void
cri_channel_call_many(CriChannel *self, CriUnaryCall *calls, guint n_calls, gint64 timeout_usec,
                      GCancellable *cancellable)
{
    static const CriCallFeed feed = {call_array_next, call_array_done};
    CallArray array = {calls, n_calls, 0};

    g_return_if_fail(self != NULL);
    g_return_if_fail(n_calls == 0 || calls != NULL);

    for (guint i = 0; i < n_calls; i++)
        g_return_if_fail(calls[i].method && calls[i].request && calls[i].response_descriptor);
    for (guint i = 0; i < n_calls; i++) {
        calls[i].response = NULL;
        calls[i].error = NULL;
    }
    if (n_calls == 0)
        return;

    /* One deadline for the batch: calls that wait for a free slot get no extra time, so a
     * runtime that stops answering costs one timeout, however many calls there are. */
    drive(self, &feed, &array, MIN(n_calls, CRI_CALLS_IN_FLIGHT_MAX), timeout_usec, TRUE,
          cancellable);
}

ProtobufCMessage *
cri_channel_call(CriChannel *self, const char *method, const ProtobufCMessage *request,
                 const ProtobufCMessageDescriptor *response_descriptor, gint64 timeout_usec,
                 GCancellable *cancellable, GError **error)
{
    CriUnaryCall call = {
        .method = method,
        .request = request,
        .response_descriptor = response_descriptor,
    };

    g_return_val_if_fail(self != NULL, NULL);
    g_return_val_if_fail(method != NULL, NULL);
    g_return_val_if_fail(request != NULL, NULL);
    g_return_val_if_fail(response_descriptor != NULL, NULL);

    cri_channel_call_many(self, &call, 1, timeout_usec, cancellable);
    if (call.error)
        g_propagate_error(error, call.error);
    return call.response;
}
