/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CRI transport on the gRPC C core.
 *
 * Every caller owns a completion queue and polls it itself, so calls from many threads never
 * contend for a queue (a pluck queue allows only a few pluckers) and each caller drives the core
 * while it waits.  A caller may put several unary calls in flight on its queue at once
 * (cri_channel_call_many()): each call made alone costs a thread wake-up on each side, so
 * calls that go out together cost little more than one.  No thread polls between calls: with
 * gRPC 1.51 the core's timer threads run the reconnect backoff anyway, and a connectivity watch
 * polled by a helper thread did not bring a restarted runtime back any sooner (measured: both
 * within the 3 s maximum backoff).
 */
#include "pleg-config.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include <string.h>
#include <sys/un.h>

#include <pleg/pleg-util.h>

#include "cri-private.h"
#include "pleg/pleg-plugin.h"

/* Spelled once, in the plugin ABI, so that the name plugins compare with cannot drift. */
GQuark
pleg_cri_error_quark(void)
{
    return g_quark_from_static_string(PLEG_PLUGIN_CRI_ERROR_DOMAIN);
}

/* kubelet's connection parameters (its remote runtime client); the C core calls its minimum connect timeout
 * "min_reconnect_backoff". */
#define CRI_BACKOFF_INITIAL_MS     100
#define CRI_BACKOFF_MAX_MS         3000
#define CRI_MIN_CONNECT_TIMEOUT_MS 5000

struct _CriChannel {
    gint ref_count;
    char *endpoint;
    char *shown_endpoint; /* escaped and cut (pleg_log_text()), for messages */
    char *target;
    grpc_channel *channel;
    CriArenaPool *arena_pool;
};

gboolean
cri_endpoint_parse(const char *endpoint, char **ret_target, GError **error)
{
    const char *path = NULL;
    g_autofree char *shown = pleg_log_text(endpoint ? endpoint : "", -1, 0);

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
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INVALID_ARGUMENT,
                    "invalid CRI endpoint \"%s\": expected a unix socket, "
                    "unix:///path/to/socket or an absolute path",
                    shown);
        return FALSE;
    }

    /* The kernel's limit for a socket path; gRPC would only log it and fail every call. */
    if (strlen(path) >= sizeof(((struct sockaddr_un *)NULL)->sun_path)) {
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INVALID_ARGUMENT,
                    "invalid CRI endpoint \"%s\": a unix socket path has at most %zu bytes",
                    shown, sizeof(((struct sockaddr_un *)NULL)->sun_path) - 1);
        return FALSE;
    }
    /* gRPC reads the target as a URI: these would silently name another socket. */
    if (strpbrk(path, "?#%")) {
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INVALID_ARGUMENT,
                    "invalid CRI endpoint \"%s\": '?', '#' and '%%' are not supported in a socket "
                    "path",
                    shown);
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

    /* The runtime's own words: any bytes, any length. */
    if (GRPC_SLICE_LENGTH(details) > 0)
        text = pleg_log_text((const char *)GRPC_SLICE_START_PTR(details),
                             (gssize)GRPC_SLICE_LENGTH(details), 1024);
    if (error_code <= GRPC_STATUS_OK || error_code > PLEG_CRI_ERROR_UNAUTHENTICATED)
        error_code = PLEG_CRI_ERROR_UNKNOWN;

    g_set_error(error, PLEG_CRI_ERROR, error_code, "%s: %s: %s", self->shown_endpoint, method,
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
    self->shown_endpoint = pleg_log_text(endpoint, -1, 0);
    self->target = g_steal_pointer(&target);
    self->arena_pool = cri_arena_pool_new(CRI_ARENA_POOL_CAP_BYTES);

    credentials = grpc_insecure_credentials_create();
    self->channel = grpc_channel_create(self->target, credentials, &channel_args);
    grpc_channel_credentials_release(credentials);

    g_debug("%s: created CRI channel to %s", self->shown_endpoint, self->target);
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
    cri_arena_pool_free(self->arena_pool);
    g_free(self->endpoint);
    g_free(self->shown_endpoint);
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

CriArenaPool *
cri_channel_get_arena_pool(CriChannel *self)
{
    g_return_val_if_fail(self != NULL, NULL);
    return self->arena_pool;
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

/* Unpacks into @arena straight from the received slice when there is one, else from a copy of
 * the slices in the arena: neither the wire bytes nor the message take a malloc.  A failed unpack
 * leaves the arena as it was. */
static ProtobufCMessage *
unpack_in_arena(grpc_byte_buffer_reader *reader, const ProtobufCMessageDescriptor *descriptor,
                CriArena *arena)
{
    CriArenaMark mark = cri_arena_mark(arena);
    grpc_slice *first = NULL, *second = NULL;
    ProtobufCMessage *message;

    if (grpc_byte_buffer_reader_peek(reader, &first) &&
        !grpc_byte_buffer_reader_peek(reader, &second)) {
        message =
            protobuf_c_message_unpack(descriptor, cri_arena_get_allocator(arena),
                                      GRPC_SLICE_LENGTH(*first), GRPC_SLICE_START_PTR(*first));
    } else {
        gsize length = grpc_byte_buffer_length(reader->buffer_out), copied = 0;
        guint8 *data = cri_arena_alloc(arena, length);
        grpc_byte_buffer *buffer = reader->buffer_in;
        grpc_slice slice;

        /* Peeking moved the reader on: start again from the first slice. */
        grpc_byte_buffer_reader_destroy(reader);
        if (!grpc_byte_buffer_reader_init(reader, buffer))
            g_assert_not_reached(); /* it succeeded a moment ago on the same buffer */
        while (grpc_byte_buffer_reader_next(reader, &slice)) {
            memcpy(data + copied, GRPC_SLICE_START_PTR(slice), GRPC_SLICE_LENGTH(slice));
            copied += GRPC_SLICE_LENGTH(slice);
            grpc_slice_unref(slice);
        }
        g_assert(copied == length);
        message = protobuf_c_message_unpack(descriptor, cri_arena_get_allocator(arena), length,
                                            data);
    }
    if (!message)
        cri_arena_rewind(arena, &mark);
    return message;
}

static ProtobufCMessage *
unpack_message(CriChannel *self, const char *method, grpc_byte_buffer *buffer,
               const ProtobufCMessageDescriptor *descriptor, CriArena *arena, GError **error)
{
    grpc_byte_buffer_reader reader;
    ProtobufCMessage *message;
    grpc_slice slice;

    if (!grpc_byte_buffer_reader_init(&reader, buffer)) {
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "%s: %s: cannot read the response of type %s", self->shown_endpoint, method,
                    descriptor->name);
        return NULL;
    }
    if (arena) {
        message = unpack_in_arena(&reader, descriptor, arena);
        grpc_byte_buffer_reader_destroy(&reader);
    } else {
        slice = grpc_byte_buffer_reader_readall(&reader);
        grpc_byte_buffer_reader_destroy(&reader);
        message = protobuf_c_message_unpack(descriptor, NULL, GRPC_SLICE_LENGTH(slice),
                                            GRPC_SLICE_START_PTR(slice));
        grpc_slice_unref(slice);
    }
    if (!message)
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "%s: %s: cannot decode the response as %s", self->shown_endpoint, method,
                    descriptor->name);
    return message;
}

/* ---- an answer item by item (cri-items.c) over the slices of a byte buffer ---- */

const char *
cri_limit_to_string(CriLimit limit)
{
    switch (limit) {
    case CRI_LIMIT_BYTES:
        return "bytes";
    case CRI_LIMIT_ITEMS:
        return "items";
    case CRI_LIMIT_NONE:
        break;
    }
    return NULL;
}

typedef struct {
    grpc_byte_buffer_reader reader;
    grpc_slice slice; /* a reference while `have_slice` */
    gboolean have_slice;
    const gboolean *stop; /* no slice is read once it is set */
} SliceSource;

static gboolean
next_slice(gpointer data, const guint8 **ret_data, gsize *ret_length)
{
    SliceSource *source = data;

    if (source->have_slice)
        grpc_slice_unref(source->slice);
    source->have_slice =
        !*source->stop && grpc_byte_buffer_reader_next(&source->reader, &source->slice);
    if (!source->have_slice)
        return FALSE;
    *ret_data = GRPC_SLICE_START_PTR(source->slice);
    *ret_length = GRPC_SLICE_LENGTH(source->slice);
    return TRUE;
}

/* The items of a listing on their way to the caller, counted: past the bound they are
 * dropped, and the walk ends at the next slice. */
typedef struct {
    CriItemFunc item_func;
    gpointer item_data;
    guint64 max_items;
    guint64 *n_items;
    gboolean over;
} ItemCounter;

static void
count_item(const ProtobufCMessage *item, gpointer data)
{
    ItemCounter *counter = data;

    if (counter->max_items > 0 && *counter->n_items >= counter->max_items)
        counter->over = TRUE;
    (*counter->n_items)++;
    if (!counter->over)
        counter->item_func(item, counter->item_data);
}

gboolean
cri_buffer_read_items(struct grpc_byte_buffer *buffer,
                      const ProtobufCMessageDescriptor *descriptor, CriArena *arena,
                      CriItemFunc item_func, gpointer item_data, const CriListingLimits *limits,
                      CriListingCount *count, CriLimit *ret_over)
{
    static const CriListingLimits unbounded = {0};
    ItemCounter counter = {.item_func = item_func, .item_data = item_data};
    SliceSource source = {.stop = &counter.over};
    gsize length;
    gboolean ok;

    g_return_val_if_fail(buffer != NULL && count != NULL && ret_over != NULL, FALSE);

    *ret_over = CRI_LIMIT_NONE;
    if (!limits)
        limits = &unbounded;
    if (!grpc_byte_buffer_reader_init(&source.reader, buffer))
        return FALSE;
    /* The length of what the reader reads, buffer_out: a reader that decompresses (gRPC's did
     * before 1.4x) reads more than @buffer's compressed length, which would cut the walk short.
     * gRPC 1.51's reader hands over @buffer as it is, so today the two are the same. */
    length = grpc_byte_buffer_length(source.reader.buffer_out);
    count->bytes += length;
    if (limits->max_bytes > 0 && count->bytes > limits->max_bytes) {
        grpc_byte_buffer_reader_destroy(&source.reader);
        *ret_over = CRI_LIMIT_BYTES;
        return FALSE;
    }
    counter.max_items = limits->max_items;
    counter.n_items = &count->items;
    ok = cri_unpack_items(next_slice, &source, length, descriptor, arena, count_item, &counter);
    if (source.have_slice)
        grpc_slice_unref(source.slice);
    grpc_byte_buffer_reader_destroy(&source.reader);
    if (counter.over) {
        *ret_over = CRI_LIMIT_ITEMS;
        return FALSE;
    }
    return ok;
}

/* Why cri_buffer_read_items() failed, as the call's error. */
static void
set_read_items_error(GError **error, CriChannel *self, const char *method,
                     const ProtobufCMessageDescriptor *descriptor, const CriListingLimits *limits,
                     const CriListingCount *count, CriLimit over)
{
    switch (over) {
    case CRI_LIMIT_BYTES:
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_RESOURCE_EXHAUSTED,
                    "%s: %s: the listing passed its limit of %zu bytes (%zu bytes received)",
                    self->shown_endpoint, method, limits->max_bytes, count->bytes);
        break;
    case CRI_LIMIT_ITEMS:
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_RESOURCE_EXHAUSTED,
                    "%s: %s: the listing passed its limit of %" G_GUINT64_FORMAT
                    " items (%" G_GUINT64_FORMAT " items received)",
                    self->shown_endpoint, method, limits->max_items, count->items);
        break;
    case CRI_LIMIT_NONE:
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "%s: %s: cannot decode the response as %s", self->shown_endpoint, method,
                    descriptor->name);
        break;
    }
}

static void
on_cancelled(GCancellable *cancellable, gpointer call)
{
    grpc_call_cancel(call, NULL);
}

static grpc_call *
create_call(CriChannel *self, const char *method, grpc_completion_queue *cq, gpr_timespec deadline)
{
    g_autofree char *path = g_strconcat("/" CRI_RUNTIME_SERVICE "/", method, NULL);
    grpc_slice method_slice = grpc_slice_from_copied_string(path);
    grpc_call *call;

    call = grpc_channel_create_call(self->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq, method_slice,
                                    NULL, deadline, NULL);
    grpc_slice_unref(method_slice);
    return call;
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

/* The request a call sends and what its batches write into. */
typedef struct {
    grpc_byte_buffer *request_buffer;
    grpc_byte_buffer *response_buffer;
    grpc_metadata_array initial_metadata;
    grpc_metadata_array trailing_metadata;
    grpc_status_code status;
    grpc_slice details;
    const char *error_string;
} CallIo;

static void
call_io_init(CallIo *io, const ProtobufCMessage *request)
{
    io->request_buffer = pack_message(request);
    io->response_buffer = NULL;
    grpc_metadata_array_init(&io->initial_metadata);
    grpc_metadata_array_init(&io->trailing_metadata);
    io->status = GRPC_STATUS_UNKNOWN;
    io->details = grpc_empty_slice();
    io->error_string = NULL;
}

/* Fills @ops with the four operations that send the request and receive the initial metadata. */
static void
call_io_send_ops(CallIo *io, grpc_op ops[4])
{
    memset(ops, 0, 4 * sizeof(grpc_op));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = io->request_buffer;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &io->initial_metadata;
}

static void
call_io_status_op(CallIo *io, grpc_op *op)
{
    memset(op, 0, sizeof(*op));
    op->op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op->data.recv_status_on_client.trailing_metadata = &io->trailing_metadata;
    op->data.recv_status_on_client.status = &io->status;
    op->data.recv_status_on_client.status_details = &io->details;
    op->data.recv_status_on_client.error_string = &io->error_string;
}

static void
call_io_clear(CallIo *io)
{
    g_clear_pointer(&io->request_buffer, grpc_byte_buffer_destroy);
    g_clear_pointer(&io->response_buffer, grpc_byte_buffer_destroy);
    grpc_metadata_array_destroy(&io->initial_metadata);
    grpc_metadata_array_destroy(&io->trailing_metadata);
    grpc_slice_unref(io->details);
    io->details = grpc_empty_slice();
    gpr_free((void *)io->error_string);
    io->error_string = NULL;
}

/* One unary call in flight: its spec, its call and what its single batch writes into. */
typedef struct {
    CriUnaryCall *spec;
    grpc_call *call;
    CallIo io;
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

    u->call = create_call(self, u->spec->method, cq, deadline);
    call_io_init(&u->io, u->spec->request);
    call_io_send_ops(&u->io, ops);
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &u->io.response_buffer;
    call_io_status_op(&u->io, &ops[5]);

    call_error = grpc_call_start_batch(u->call, ops, G_N_ELEMENTS(ops), u, NULL);
    if (call_error != GRPC_CALL_OK) {
        g_set_error(&u->spec->error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "%s: %s: cannot start the call (gRPC call error %d)", self->shown_endpoint,
                    u->spec->method, (int)call_error);
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
        g_debug("%s: %s failed: status %d: %s", self->shown_endpoint, spec->method,
                (int)u->io.status, u->io.error_string ? u->io.error_string : "(no debug text)");
        set_status_error(&spec->error, self, spec->method, u->io.status, u->io.details);
    } else if (!u->io.response_buffer) {
        g_set_error(&spec->error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "%s: %s: the runtime answered without a message", self->shown_endpoint,
                    spec->method);
    } else if (spec->item_func) {
        CriListingCount count = {0};

        if (!cri_buffer_read_items(u->io.response_buffer, spec->response_descriptor, spec->arena,
                                   spec->item_func, spec->item_data, &spec->limits, &count,
                                   &spec->over_limit))
            set_read_items_error(&spec->error, self, spec->method, spec->response_descriptor,
                                 &spec->limits, &count, spec->over_limit);
    } else {
        spec->response = unpack_message(self, spec->method, u->io.response_buffer,
                                        spec->response_descriptor, spec->arena, &spec->error);
    }

    call_io_clear(&u->io);
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
    gpr_timespec deadline = deadline_from_timeout(timeout_usec);
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
            if (cancelled) {
                g_set_error(&spec->error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_CANCELLED, "%s: %s: %s",
                            self->shown_endpoint, spec->method, "call cancelled");
                feed->done(spec, data);
                continue;
            }
            if (free_slots->len > 0)
                u = g_ptr_array_steal_index_fast(free_slots, free_slots->len - 1);
            else
                g_ptr_array_add(slots, (u = g_new0(Unary, 1)));
            u->spec = spec;
            if (!unary_start(self, u, cq,
                             one_deadline ? deadline : deadline_from_timeout(timeout_usec))) {
                unary_finish(self, u);
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
        g_ptr_array_add(free_slots, done);
        feed->done(done->spec, data);
        more = TRUE;
    }

    /* Blocks while a concurrent handler runs, so it never sees @in_flight gone. */
    if (cancel_id)
        g_cancellable_disconnect(cancellable, cancel_id);
    destroy_queue(cq);
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
    CriArena *arena; /* not owned */
    grpc_completion_queue *cq;
    grpc_call *call;

    /* Batches in flight; each completes on cq with one of these tags. */
    gboolean send_pending;
    gboolean recv_pending;
    gboolean status_pending;
    int send_tag, recv_tag, status_tag;

    CallIo io;

    /* cri_stream_read_items() over the whole stream */
    CriListingLimits limits;
    CriListingCount count;
    CriLimit over_limit;

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
    self->call = create_call(channel, method, self->cq, deadline_from_timeout(timeout_usec));
    call_io_init(&self->io, request);

    call_io_send_ops(&self->io, ops);
    if (wait_for_ready)
        ops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY |
                       GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET;
    call_error = grpc_call_start_batch(self->call, ops, G_N_ELEMENTS(ops), &self->send_tag, NULL);
    if (call_error != GRPC_CALL_OK) {
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "%s: %s: cannot start the stream (gRPC call error %d)", channel->shown_endpoint,
                    method, (int)call_error);
        return NULL;
    }
    self->send_pending = TRUE;

    /* Posted now so that the final status arrives whenever the call ends. */
    call_io_status_op(&self->io, &status_op);
    call_error = grpc_call_start_batch(self->call, &status_op, 1, &self->status_tag, NULL);
    if (call_error != GRPC_CALL_OK) {
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "%s: %s: cannot start the stream (gRPC call error %d)", channel->shown_endpoint,
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

    if (self->io.status == GRPC_STATUS_OK) {
        self->state = STREAM_DONE;
        return TRUE;
    }

    g_debug("%s: %s stream failed: status %d: %s", self->channel->shown_endpoint, self->method,
            (int)self->io.status,
            self->io.error_string ? self->io.error_string : "(no debug text)");
    set_status_error(&self->failure, self->channel, self->method, self->io.status,
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
                    self->channel->shown_endpoint, self->method, (int)call_error);
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
    message = unpack_message(self->channel, self->method, self->io.response_buffer,
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
        set_read_items_error(&self->failure, self->channel, self->method,
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
        destroy_queue(self->cq);

    call_io_clear(&self->io);
    g_clear_error(&self->failure);
    g_free(self->method);
    cri_channel_unref(self->channel);
    g_free(self);
}
