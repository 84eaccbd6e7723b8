/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CRI transport on the gRPC C core.
 *
 * Every call owns a completion queue and polls it itself, so calls from many threads never
 * contend for a queue (a pluck queue allows only a few pluckers) and each caller drives the core
 * while it waits.  No thread polls between calls: with gRPC 1.51 the core's timer threads run the
 * reconnect backoff anyway, and a connectivity watch polled by a helper thread did not bring a
 * restarted runtime back any sooner (measured: both within the 3 s maximum backoff).
 */
#include "pleg-config.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include <sys/un.h>

#include "cri-private.h"

/* clang-format off */
G_DEFINE_QUARK(pleg-cri-error-quark, pleg_cri_error)
/* clang-format on */

/* kubelet's connection parameters (FACTS.md); the C core calls its minimum connect timeout
 * "min_reconnect_backoff". */
#define CRI_BACKOFF_INITIAL_MS     100
#define CRI_BACKOFF_MAX_MS         3000
#define CRI_MIN_CONNECT_TIMEOUT_MS 5000

struct _CriChannel {
    gint ref_count;
    char *endpoint;
    char *target;
    grpc_channel *channel;
};

gboolean
cri_endpoint_parse(const char *endpoint, char **ret_target, GError **error)
{
    const char *path = NULL;

    g_return_val_if_fail(ret_target != NULL, FALSE);

    if (endpoint) {
        if (g_str_has_prefix(endpoint, "unix://"))
            path = endpoint + strlen("unix://");
        else if (g_str_has_prefix(endpoint, "unix:"))
            path = endpoint + strlen("unix:");
        else
            path = endpoint;
    }

    if (!path || path[0] != '/' || path[1] == '\0') {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                    "invalid CRI endpoint \"%s\": expected a unix socket, "
                    "unix:///path/to/socket or an absolute path",
                    endpoint ? endpoint : "");
        return FALSE;
    }

    /* The kernel's limit for a socket path; gRPC would only log it and fail every call. */
    if (strlen(path) >= sizeof(((struct sockaddr_un *)NULL)->sun_path)) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                    "invalid CRI endpoint \"%s\": a unix socket path has at most %zu bytes",
                    endpoint, sizeof(((struct sockaddr_un *)NULL)->sun_path) - 1);
        return FALSE;
    }
    /* gRPC reads the target as a URI: these would silently name another socket. */
    if (strpbrk(path, "?#%")) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                    "invalid CRI endpoint \"%s\": '?', '#' and '%%' are not supported in a socket "
                    "path",
                    endpoint);
        return FALSE;
    }

    *ret_target = g_strconcat("unix:", path, NULL);
    return TRUE;
}

static const char *
status_code_name(grpc_status_code code)
{
    static const char *const names[] = {
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    };

    if ((guint)code < G_N_ELEMENTS(names))
        return names[code];
    return "UNKNOWN";
}

static void
set_status_error(GError **error, CriChannel *self, const char *method, grpc_status_code code,
                 grpc_slice details)
{
    g_autofree char *text = NULL;
    int error_code = code;

    if (GRPC_SLICE_LENGTH(details) > 0)
        text = g_strndup((const char *)GRPC_SLICE_START_PTR(details), GRPC_SLICE_LENGTH(details));
    if (error_code <= GRPC_STATUS_OK || error_code > PLEG_CRI_ERROR_UNAUTHENTICATED)
        error_code = PLEG_CRI_ERROR_UNKNOWN;

    g_set_error(error, PLEG_CRI_ERROR, error_code, "%s: %s: %s", self->endpoint, method,
                text && *text ? text : status_code_name(code));
}

CriChannel *
cri_channel_new(const char *endpoint, GError **error)
{
    g_autofree char *target = NULL;
    grpc_channel_credentials *credentials;
    CriChannel *self;
    grpc_arg args[] = {
        {.type = GRPC_ARG_INTEGER,
         .key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         .value.integer = PLEG_CRI_MAX_RECEIVE_BYTES},
        {.type = GRPC_ARG_INTEGER,
         .key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH,
         .value.integer = PLEG_CRI_MAX_RECEIVE_BYTES},
        {.type = GRPC_ARG_INTEGER,
         .key = (char *)GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
         .value.integer = CRI_BACKOFF_INITIAL_MS},
        {.type = GRPC_ARG_INTEGER,
         .key = (char *)GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
         .value.integer = CRI_BACKOFF_MAX_MS},
        {.type = GRPC_ARG_INTEGER,
         .key = (char *)GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
         .value.integer = CRI_MIN_CONNECT_TIMEOUT_MS},
    };
    grpc_channel_args channel_args = {.num_args = G_N_ELEMENTS(args), .args = args};

    if (!cri_endpoint_parse(endpoint, &target, error))
        return NULL;

    grpc_init();

    self = g_new0(CriChannel, 1);
    self->ref_count = 1;
    self->endpoint = g_strdup(endpoint);
    self->target = g_steal_pointer(&target);

    credentials = grpc_insecure_credentials_create();
    self->channel = grpc_channel_create(self->target, credentials, &channel_args);
    grpc_channel_credentials_release(credentials);

    g_debug("%s: created CRI channel to %s", self->endpoint, self->target);
    return self;
}

CriChannel *
cri_channel_ref(CriChannel *self)
{
    g_return_val_if_fail(self != NULL, NULL);
    g_atomic_int_inc(&self->ref_count);
    return self;
}

void
cri_channel_unref(CriChannel *self)
{
    if (!self || !g_atomic_int_dec_and_test(&self->ref_count))
        return;

    grpc_channel_destroy(self->channel);
    g_free(self->endpoint);
    g_free(self->target);
    g_free(self);

    grpc_shutdown();
}

const char *
cri_channel_get_endpoint(CriChannel *self)
{
    g_return_val_if_fail(self != NULL, NULL);
    return self->endpoint;
}

static gpr_timespec
deadline_from_timeout(gint64 timeout_usec)
{
    if (timeout_usec <= 0)
        return gpr_inf_future(GPR_CLOCK_MONOTONIC);
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                        gpr_time_from_micros(timeout_usec, GPR_TIMESPAN));
}

static grpc_byte_buffer *
pack_message(const ProtobufCMessage *message)
{
    size_t size = protobuf_c_message_get_packed_size(message);
    grpc_slice slice = grpc_slice_malloc(size);
    grpc_byte_buffer *buffer;

    protobuf_c_message_pack(message, GRPC_SLICE_START_PTR(slice));
    buffer = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return buffer;
}

static ProtobufCMessage *
unpack_message(CriChannel *self, const char *method, grpc_byte_buffer *buffer,
               const ProtobufCMessageDescriptor *descriptor, GError **error)
{
    grpc_byte_buffer_reader reader;
    ProtobufCMessage *message;
    grpc_slice slice;

    if (!grpc_byte_buffer_reader_init(&reader, buffer)) {
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "%s: %s: cannot read the response of type %s", self->endpoint, method,
                    descriptor->name);
        return NULL;
    }
    slice = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);

    message = protobuf_c_message_unpack(descriptor, NULL, GRPC_SLICE_LENGTH(slice),
                                        GRPC_SLICE_START_PTR(slice));
    grpc_slice_unref(slice);
    if (!message)
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "%s: %s: cannot decode the response as %s", self->endpoint, method,
                    descriptor->name);
    return message;
}

static void
on_cancelled(GCancellable *cancellable, gpointer call)
{
    grpc_call_cancel(call, NULL);
}

static grpc_call *
create_call(CriChannel *self, const char *method, grpc_completion_queue *cq, gint64 timeout_usec)
{
    g_autofree char *path = g_strconcat("/" CRI_RUNTIME_SERVICE "/", method, NULL);
    grpc_slice method_slice = grpc_slice_from_copied_string(path);
    grpc_call *call;

    call = grpc_channel_create_call(self->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq, method_slice,
                                    NULL, deadline_from_timeout(timeout_usec), NULL);
    grpc_slice_unref(method_slice);
    return call;
}

/* Waits for `tag` on a queue that no other thread polls. */
static void
wait_for_tag(grpc_completion_queue *cq, void *tag, gboolean *ret_success)
{
    for (;;) {
        grpc_event event =
            grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);

        g_assert(event.type == GRPC_OP_COMPLETE);
        if (event.tag == tag) {
            if (ret_success)
                *ret_success = event.success;
            return;
        }
    }
}

static void
destroy_queue(grpc_completion_queue *cq)
{
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
}

ProtobufCMessage *
cri_channel_call(CriChannel *self, const char *method, const ProtobufCMessage *request,
                 const ProtobufCMessageDescriptor *response_descriptor, gint64 timeout_usec,
                 GCancellable *cancellable, GError **error)
{
    grpc_metadata_array initial_metadata, trailing_metadata;
    grpc_byte_buffer *request_buffer, *response_buffer = NULL;
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    const char *error_string = NULL;
    ProtobufCMessage *response = NULL;
    grpc_completion_queue *cq;
    grpc_call_error call_error;
    gulong cancel_id = 0;
    grpc_call *call;
    grpc_op ops[6] = {0};

    g_return_val_if_fail(self != NULL, NULL);
    g_return_val_if_fail(method != NULL, NULL);
    g_return_val_if_fail(request != NULL, NULL);
    g_return_val_if_fail(response_descriptor != NULL, NULL);

    if (cancellable && g_cancellable_is_cancelled(cancellable)) {
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_CANCELLED, "%s: %s: %s", self->endpoint,
                    method, "call cancelled");
        return NULL;
    }

    cq = grpc_completion_queue_create_for_next(NULL);
    call = create_call(self, method, cq, timeout_usec);
    request_buffer = pack_message(request);
    grpc_metadata_array_init(&initial_metadata);
    grpc_metadata_array_init(&trailing_metadata);

    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = request_buffer;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial_metadata;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &response_buffer;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trailing_metadata;
    ops[5].data.recv_status_on_client.status = &status;
    ops[5].data.recv_status_on_client.status_details = &details;
    ops[5].data.recv_status_on_client.error_string = &error_string;

    call_error = grpc_call_start_batch(call, ops, G_N_ELEMENTS(ops), call, NULL);
    if (call_error != GRPC_CALL_OK) {
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "%s: %s: cannot start the call (gRPC call error %d)", self->endpoint, method,
                    (int)call_error);
        goto out;
    }

    /* Runs the handler at once if the cancellable fired after the check above. */
    if (cancellable)
        cancel_id = g_cancellable_connect(cancellable, G_CALLBACK(on_cancelled), call, NULL);

    wait_for_tag(cq, call, NULL);

    /* Blocks while a concurrent handler runs, so the call outlives every grpc_call_cancel(). */
    if (cancel_id)
        g_cancellable_disconnect(cancellable, cancel_id);

    if (status != GRPC_STATUS_OK) {
        g_debug("%s: %s failed: status %d: %s", self->endpoint, method, (int)status,
                error_string ? error_string : "(no debug text)");
        set_status_error(error, self, method, status, details);
    } else if (!response_buffer) {
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "%s: %s: the runtime answered without a message", self->endpoint, method);
    } else {
        response = unpack_message(self, method, response_buffer, response_descriptor, error);
    }

out:
    if (response_buffer)
        grpc_byte_buffer_destroy(response_buffer);
    grpc_byte_buffer_destroy(request_buffer);
    grpc_metadata_array_destroy(&initial_metadata);
    grpc_metadata_array_destroy(&trailing_metadata);
    grpc_slice_unref(details);
    gpr_free((void *)error_string);
    grpc_call_unref(call);
    destroy_queue(cq);
    return response;
}

/* ---- server streaming ---- */

typedef enum {
    STREAM_OPEN,
    STREAM_DONE,   /* ended with status OK */
    STREAM_FAILED, /* ended with an error, kept in `failure` */
} StreamState;

struct _CriStream {
    CriChannel *channel;
    char *method;
    const ProtobufCMessageDescriptor *response_descriptor;
    grpc_completion_queue *cq;
    grpc_call *call;

    /* Batches in flight; each completes on cq with one of these tags. */
    gboolean send_pending;
    gboolean recv_pending;
    gboolean status_pending;
    int send_tag, recv_tag, status_tag;

    grpc_byte_buffer *request_buffer;
    grpc_byte_buffer *response_buffer;
    grpc_metadata_array initial_metadata;
    grpc_metadata_array trailing_metadata;
    grpc_status_code status;
    grpc_slice details;
    const char *error_string;

    StreamState state;
    GError *failure;
};

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
    self->call = create_call(channel, method, self->cq, timeout_usec);
    self->request_buffer = pack_message(request);
    self->details = grpc_empty_slice();
    grpc_metadata_array_init(&self->initial_metadata);
    grpc_metadata_array_init(&self->trailing_metadata);

    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (wait_for_ready)
        ops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY |
                       GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = self->request_buffer;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &self->initial_metadata;
    call_error = grpc_call_start_batch(self->call, ops, G_N_ELEMENTS(ops), &self->send_tag, NULL);
    if (call_error != GRPC_CALL_OK) {
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "%s: %s: cannot start the stream (gRPC call error %d)", channel->endpoint,
                    method, (int)call_error);
        return NULL;
    }
    self->send_pending = TRUE;

    /* Posted now so that the final status arrives whenever the call ends. */
    status_op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    status_op.data.recv_status_on_client.trailing_metadata = &self->trailing_metadata;
    status_op.data.recv_status_on_client.status = &self->status;
    status_op.data.recv_status_on_client.status_details = &self->details;
    status_op.data.recv_status_on_client.error_string = &self->error_string;
    call_error = grpc_call_start_batch(self->call, &status_op, 1, &self->status_tag, NULL);
    if (call_error != GRPC_CALL_OK) {
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "%s: %s: cannot start the stream (gRPC call error %d)", channel->endpoint,
                    method, (int)call_error);
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

    if (self->status == GRPC_STATUS_OK) {
        self->state = STREAM_DONE;
        return TRUE;
    }

    g_debug("%s: %s stream failed: status %d: %s", self->channel->endpoint, self->method,
            (int)self->status, self->error_string ? self->error_string : "(no debug text)");
    set_status_error(&self->failure, self->channel, self->method, self->status, self->details);
    self->state = STREAM_FAILED;
    g_propagate_error(error, g_error_copy(self->failure));
    return FALSE;
}

gboolean
cri_stream_read(CriStream *self, ProtobufCMessage **ret_message, GCancellable *cancellable,
                GError **error)
{
    grpc_call_error call_error;
    ProtobufCMessage *message;
    gulong cancel_id = 0;
    grpc_op op = {0};

    g_return_val_if_fail(self != NULL, FALSE);
    g_return_val_if_fail(ret_message != NULL, FALSE);

    switch (self->state) {
    case STREAM_DONE:
        *ret_message = NULL;
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
    op.data.recv_message.recv_message = &self->response_buffer;
    call_error = grpc_call_start_batch(self->call, &op, 1, &self->recv_tag, NULL);
    if (call_error != GRPC_CALL_OK) {
        g_set_error(&self->failure, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "%s: %s: cannot read the stream (gRPC call error %d)", self->channel->endpoint,
                    self->method, (int)call_error);
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

    if (!self->response_buffer)
        return stream_finish(self, error);

    message = unpack_message(self->channel, self->method, self->response_buffer,
                             self->response_descriptor, &self->failure);
    grpc_byte_buffer_destroy(self->response_buffer);
    self->response_buffer = NULL;
    if (!message) {
        /* Like gRPC-Go: an undecodable message ends the stream. */
        self->state = STREAM_FAILED;
        grpc_call_cancel(self->call, NULL);
        g_propagate_error(error, g_error_copy(self->failure));
        return FALSE;
    }

    *ret_message = message;
    return TRUE;
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
        destroy_queue(self->cq);

    if (self->request_buffer)
        grpc_byte_buffer_destroy(self->request_buffer);
    if (self->response_buffer)
        grpc_byte_buffer_destroy(self->response_buffer);
    grpc_metadata_array_destroy(&self->initial_metadata);
    grpc_metadata_array_destroy(&self->trailing_metadata);
    grpc_slice_unref(self->details);
    gpr_free((void *)self->error_string);
    g_clear_error(&self->failure);
    g_free(self->method);
    cri_channel_unref(self->channel);
    g_free(self);
}
