/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Server-streaming CRI calls: the KEP-5825 list streams and GetContainerEvents.  A stream owns
 * its completion queue, polled by the thread that reads; cri_stream_cancel() may come from any.
 */
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/support/time.h>

#include "cri-transport.h"

typedef enum {
    STREAM_OPEN,
    STREAM_DONE,   /* ended with status OK */
    STREAM_FAILED, /* ended with an error, kept in `failure` */
} StreamState;

struct _CriStream {
    CriChannel *channel;
    char *method;
    const ProtobufCMessageDescriptor *response_descriptor;
    CriArena *arena; /* not owned */
    grpc_completion_queue *cq;
    grpc_call *call;

    /* Batches in flight; each completes on cq with one of these tags. */
    gboolean send_pending;
    gboolean recv_pending;
    gboolean status_pending;
    int send_tag, recv_tag, status_tag;

    CriCallIo io;

    /* cri_stream_read_items() over the whole stream */
    CriListingLimits limits;
    CriListingCount count;
    CriLimit over_limit;

    StreamState state;
    GError *failure;
};

static void
on_cancelled(GCancellable *cancellable, gpointer call)
{
    grpc_call_cancel(call, NULL);
}

CriStream *
cri_stream_start(CriChannel *channel, const char *method, const ProtobufCMessage *request,
                 const ProtobufCMessageDescriptor *response_descriptor, gint64 timeout_usec,
                 gboolean wait_for_ready, GError **error)
{
    g_autoptr(CriStream) self = NULL;
    grpc_call_error call_error;
    grpc_op ops[4] = {0};
    grpc_op status_op = {0};

    g_return_val_if_fail(channel != NULL, NULL);
    g_return_val_if_fail(method != NULL, NULL);
    g_return_val_if_fail(request != NULL, NULL);
    g_return_val_if_fail(response_descriptor != NULL, NULL);

    self = g_new0(CriStream, 1);
    self->channel = cri_channel_ref(channel);
    self->method = g_strdup(method);
    self->response_descriptor = response_descriptor;
    self->cq = grpc_completion_queue_create_for_next(NULL);
    self->call =
        cri_channel_create_call(channel, method, self->cq, cri_deadline_from_timeout(timeout_usec));
    cri_call_io_init(&self->io, request);

    cri_call_io_send_ops(&self->io, ops);
    if (wait_for_ready)
        ops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY |
                       GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET;
    call_error = grpc_call_start_batch(self->call, ops, G_N_ELEMENTS(ops), &self->send_tag, NULL);
    if (call_error != GRPC_CALL_OK) {
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "%s: %s: cannot start the stream (gRPC call error %d)",
                    cri_channel_get_shown_endpoint(channel), method, (int)call_error);
        return NULL;
    }
    self->send_pending = TRUE;

    /* Posted now so that the final status arrives whenever the call ends. */
    cri_call_io_status_op(&self->io, &status_op);
    call_error = grpc_call_start_batch(self->call, &status_op, 1, &self->status_tag, NULL);
    if (call_error != GRPC_CALL_OK) {
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "%s: %s: cannot start the stream (gRPC call error %d)",
                    cri_channel_get_shown_endpoint(channel), method, (int)call_error);
        return NULL;
    }
    self->status_pending = TRUE;

    return g_steal_pointer(&self);
}

/* Consumes one completion from the stream's queue. */
static void
stream_next_event(CriStream *self)
{
    grpc_event event =
        grpc_completion_queue_next(self->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);

    g_assert(event.type == GRPC_OP_COMPLETE);
    if (event.tag == &self->send_tag)
        self->send_pending = FALSE;
    else if (event.tag == &self->recv_tag)
        self->recv_pending = FALSE;
    else if (event.tag == &self->status_tag)
        self->status_pending = FALSE;
    else
        g_assert_not_reached();
}

static gboolean
stream_finish(CriStream *self, GError **error)
{
    while (self->status_pending)
        stream_next_event(self);

    if (self->io.status == GRPC_STATUS_OK) {
        self->state = STREAM_DONE;
        return TRUE;
    }

    g_debug("%s: %s stream failed: status %d: %s", cri_channel_get_shown_endpoint(self->channel),
            self->method, (int)self->io.status,
            self->io.error_string ? self->io.error_string : "(no debug text)");
    cri_set_status_error(&self->failure, self->channel, self->method, self->io.status,
                         self->io.details);
    self->state = STREAM_FAILED;
    g_propagate_error(error, g_error_copy(self->failure));
    return FALSE;
}

/* Waits for the stream's next message: TRUE with the message's bytes in io.response_buffer, or
 * TRUE with none at a clean end (*ret_end), FALSE with @error when the stream failed. */
static gboolean
stream_receive(CriStream *self, gboolean *ret_end, GCancellable *cancellable, GError **error)
{
    grpc_call_error call_error;
    gulong cancel_id = 0;
    grpc_op op = {0};

    *ret_end = FALSE;
    switch (self->state) {
    case STREAM_DONE:
        *ret_end = TRUE;
        return TRUE;
    case STREAM_FAILED:
        g_propagate_error(error, g_error_copy(self->failure));
        return FALSE;
    case STREAM_OPEN:
        break;
    }

    if (cancellable && g_cancellable_is_cancelled(cancellable))
        cri_stream_cancel(self);

    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &self->io.response_buffer;
    call_error = grpc_call_start_batch(self->call, &op, 1, &self->recv_tag, NULL);
    if (call_error != GRPC_CALL_OK) {
        g_set_error(&self->failure, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "%s: %s: cannot read the stream (gRPC call error %d)",
                    cri_channel_get_shown_endpoint(self->channel), self->method, (int)call_error);
        self->state = STREAM_FAILED;
        grpc_call_cancel(self->call, NULL);
        g_propagate_error(error, g_error_copy(self->failure));
        return FALSE;
    }
    self->recv_pending = TRUE;

    if (cancellable)
        cancel_id = g_cancellable_connect(cancellable, G_CALLBACK(on_cancelled), self->call, NULL);
    while (self->recv_pending)
        stream_next_event(self);
    if (cancel_id)
        g_cancellable_disconnect(cancellable, cancel_id);

    if (!self->io.response_buffer) {
        *ret_end = TRUE;
        return stream_finish(self, error);
    }
    return TRUE;
}

/* The message received is decoded (@ok) or not: the buffer goes either way, and, like gRPC-Go,
 * a message that does not decode ends the stream. */
static gboolean
stream_received(CriStream *self, gboolean ok, GError **error)
{
    grpc_byte_buffer_destroy(self->io.response_buffer);
    self->io.response_buffer = NULL;
    if (ok)
        return TRUE;
    self->state = STREAM_FAILED;
    grpc_call_cancel(self->call, NULL);
    g_propagate_error(error, g_error_copy(self->failure));
    return FALSE;
}

gboolean
cri_stream_read(CriStream *self, ProtobufCMessage **ret_message, GCancellable *cancellable,
                GError **error)
{
    ProtobufCMessage *message;
    gboolean end;

    g_return_val_if_fail(self != NULL, FALSE);
    g_return_val_if_fail(ret_message != NULL, FALSE);

    *ret_message = NULL;
    if (!stream_receive(self, &end, cancellable, error))
        return FALSE;
    if (end)
        return TRUE;
    message = cri_unpack_message(self->channel, self->method, self->io.response_buffer,
                                 self->response_descriptor, self->arena, &self->failure);
    if (!stream_received(self, message != NULL, error))
        return FALSE;
    *ret_message = message;
    return TRUE;
}

gboolean
cri_stream_read_items(CriStream *self, CriItemFunc item_func, gpointer item_data,
                      gboolean *ret_end, GCancellable *cancellable, GError **error)
{
    gboolean ok;

    g_return_val_if_fail(self != NULL, FALSE);
    g_return_val_if_fail(self->arena != NULL, FALSE);
    g_return_val_if_fail(item_func != NULL && ret_end != NULL, FALSE);

    if (!stream_receive(self, ret_end, cancellable, error))
        return FALSE;
    if (*ret_end)
        return TRUE;
    ok = cri_buffer_read_items(self->io.response_buffer, self->response_descriptor, self->arena,
                               item_func, item_data, &self->limits, &self->count,
                               &self->over_limit);
    if (!ok)
        cri_set_read_items_error(&self->failure, self->channel, self->method,
                                 self->response_descriptor, &self->limits, &self->count,
                                 self->over_limit);
    return stream_received(self, ok, error);
}

void
cri_stream_set_limits(CriStream *self, const CriListingLimits *limits)
{
    g_return_if_fail(self != NULL);
    self->limits = limits ? *limits : (CriListingLimits){0};
}

CriLimit
cri_stream_get_over_limit(CriStream *self)
{
    g_return_val_if_fail(self != NULL, CRI_LIMIT_NONE);
    return self->over_limit;
}

void
cri_stream_set_arena(CriStream *self, CriArena *arena)
{
    g_return_if_fail(self != NULL);
    self->arena = arena;
}

void
cri_stream_cancel(CriStream *self)
{
    g_return_if_fail(self != NULL);
    grpc_call_cancel(self->call, NULL);
}

void
cri_stream_free(CriStream *self)
{
    if (!self)
        return;

    if (self->call) {
        if (self->send_pending || self->recv_pending || self->status_pending)
            grpc_call_cancel(self->call, NULL);
        while (self->send_pending || self->recv_pending || self->status_pending)
            stream_next_event(self);
        grpc_call_unref(self->call);
    }
    if (self->cq)
        cri_queue_destroy(self->cq);

    cri_call_io_clear(&self->io);
    g_clear_error(&self->failure);
    g_free(self->method);
    cri_channel_unref(self->channel);
    g_free(self);
}
