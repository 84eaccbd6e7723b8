/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internal CRI transport: a gRPC C-core channel to a CRI runtime, unary calls and server streams
 * carrying protobuf-c messages of proto/api.proto.
 *
 * Shared by the public CRI client (pleg-cri-client.c), cri-ctl and, through the host, the Evented
 * PLEG.  Never installed, never exported from libpleg: every symbol here is cri_*.
 *
 * Errors: every failed call sets a #PLEG_CRI_ERROR whose code is the gRPC status code and whose
 * message is "<endpoint>: <Method>: <gRPC status details>".
 */
#pragma once

#include <gio/gio.h>
#include <protobuf-c/protobuf-c.h>

#include <pleg/pleg-cri-client.h>
#include <pleg/pleg-metrics.h>
#include <pleg/pleg-plugin.h>

#include "api.pb-c.h"

G_BEGIN_DECLS

/* Fully qualified service name; a method path is "/" CRI_RUNTIME_SERVICE "/" <Method>. */
#define CRI_RUNTIME_SERVICE "runtime.v1.RuntimeService"

/**
 * cri_endpoint_parse:
 * @endpoint: `unix:///path`, `unix:/path` or `/path`.
 * @ret_target: (out) (transfer full): the gRPC target, `unix:/path`.
 *
 * Fails with %PLEG_CRI_ERROR_INVALID_ARGUMENT naming @endpoint for anything that is not a unix
 * socket with an absolute path.
 */
gboolean cri_endpoint_parse(const char *endpoint, char **ret_target, GError **error);

/* ---- arenas for unpacking (lib/cri/cri-arena.c) ---- */

/*
 * A CriArena hands out memory by bumping a pointer through blocks, and protobuf-c unpacks into it
 * through cri_arena_get_allocator(): no allocation per field, and nothing to free per field.  A
 * message unpacked into an arena is never given to protobuf_c_message_free_unpacked() or
 * cri_message_free(): it lives until cri_arena_free() (or a rewind past it).  One thread uses an
 * arena at a time.
 *
 * A CriArenaPool keeps the blocks of ended arenas for the next ones, at most @cap_bytes of them:
 * a block that would take the pool past its cap is freed.  An arena that needed more than one
 * block frees them all when it ends and raises the size (up to the cap) of the block the pool
 * starts each arena with, so in a steady state one cached block holds a whole answer and no
 * relist allocates.  The pool is safe from any number of threads.
 */
typedef struct _CriArenaPool CriArenaPool;
typedef struct _CriArena CriArena;

/* What a CRI channel keeps for its calls' answers: a 5,000-pod listing needs about 10 MiB. */
#define CRI_ARENA_POOL_CAP_BYTES (32 * 1024 * 1024)

CriArenaPool *cri_arena_pool_new(gsize cap_bytes);
/* Frees the cached blocks; no arena of the pool may be alive.  NULL-safe. */
void cri_arena_pool_free(CriArenaPool *pool);
/* Bytes of the blocks the pool holds for the next arenas. */
gsize cri_arena_pool_get_cached_bytes(CriArenaPool *pool);
/* Blocks the pool's arenas ever allocated (a cached block taken again is no new one). */
guint64 cri_arena_pool_get_blocks_made(CriArenaPool *pool);

/* (transfer full) */
CriArena *cri_arena_new(CriArenaPool *pool);
/* Gives the arena's blocks back to its pool and drops everything allocated in it.  NULL-safe. */
void cri_arena_free(CriArena *arena);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CriArena, cri_arena_free)
/* @size bytes aligned for any type protobuf-c stores (8 bytes); NULL only for a size no block
 * could have. */
gpointer cri_arena_alloc(CriArena *arena, gsize size);
/* (transfer none): valid as long as @arena. */
ProtobufCAllocator *cri_arena_get_allocator(CriArena *arena);
/* Bytes handed out since the arena began (with alignment and block tails given up). */
gsize cri_arena_get_used_bytes(CriArena *arena);

/* A point to come back to: cri_arena_rewind() drops everything allocated after it. */
typedef struct {
    guint n_blocks;
    gsize head_used;
    gsize used_bytes;
} CriArenaMark;
CriArenaMark cri_arena_mark(CriArena *arena);
void cri_arena_rewind(CriArena *arena, const CriArenaMark *mark);

/* ---- an answer item by item (lib/cri/cri-items.c) ---- */

typedef void (*CriItemFunc)(const ProtobufCMessage *item, gpointer item_data);
/* The next piece of a message's bytes, in order; FALSE at the end.  The previous piece may be
 * released when the next is asked for. */
typedef gboolean (*CriPieceFunc)(gpointer source, const guint8 **ret_data, gsize *ret_length);

/**
 * cri_unpack_items:
 * @length: the message's size in bytes, the sum of the pieces' lengths: a length field that
 *   asks for more than is left fails before anything is allocated for it.
 * @descriptor: the whole answer's type; its field 1 must be a repeated message.
 *
 * Reads a message of type @descriptor from the pieces @next_piece gives, as protobuf-c would,
 * without unpacking it whole: each item of field 1 is unpacked alone into @arena (in place
 * when one piece holds it, else from a copy in @arena), given to @item_func, and rewound when it
 * returns; other fields are skipped.  Fails, after the items before the fault were given, where
 * protobuf-c would fail the whole message: a bad tag, an unknown wire type or a group, a
 * truncated field, field 1 not length-delimited, an item that does not unpack.
 *
 * Returns: whether the whole message was read.
 */
gboolean cri_unpack_items(CriPieceFunc next_piece, gpointer source, gsize length,
                          const ProtobufCMessageDescriptor *descriptor, CriArena *arena,
                          CriItemFunc item_func, gpointer item_data);

/* ---- bounds on what one listing brings (issue 24) ---- */

/* Which bound a listing passed. */
typedef enum {
    CRI_LIMIT_NONE,
    CRI_LIMIT_BYTES,
    CRI_LIMIT_ITEMS,
} CriLimit;

/* "bytes", "items"; NULL for CRI_LIMIT_NONE.  The values of a metric's `limit` label. */
const char *cri_limit_to_string(CriLimit limit);

/* What one listing may bring, however many messages it comes in: the bytes of its messages as
 * read and the items of their field 1; 0 leaves either unbounded. */
typedef struct {
    gsize max_bytes;
    guint64 max_items;
} CriListingLimits;

/* What a listing has brought so far. */
typedef struct {
    gsize bytes;
    guint64 items;
} CriListingCount;

/**
 * cri_buffer_read_items:
 * @buffer: a received message (a `grpc_byte_buffer *`).
 * @limits: (nullable): the listing's bounds; %NULL for none.
 * @count: what the listing brought before @buffer; @buffer's bytes and items are added.
 * @ret_over: (out): the bound @buffer took the listing past, or %CRI_LIMIT_NONE.
 *
 * cri_unpack_items() over the slices @buffer's reader gives, bounded by the length of what
 * that reader reads (its buffer_out), which a reader that decompresses makes longer than
 * @buffer.  A message that takes the listing past @limits->max_bytes is not unpacked; past
 * @limits->max_items, the items are no longer given to @item_func and the walk stops at the
 * next slice.
 *
 * Returns: whether the whole message was read within @limits; FALSE with *@ret_over NONE when
 *   it does not decode.
 */
struct grpc_byte_buffer;
gboolean cri_buffer_read_items(struct grpc_byte_buffer *buffer,
                               const ProtobufCMessageDescriptor *descriptor, CriArena *arena,
                               CriItemFunc item_func, gpointer item_data,
                               const CriListingLimits *limits, CriListingCount *count,
                               CriLimit *ret_over);

typedef struct _CriChannel CriChannel;

/**
 * cri_channel_new:
 *
 * Validates @endpoint, takes a gRPC library reference (grpc_init()) and creates a lazy channel
 * with kubelet's connection parameters: reconnect backoff from 100 ms up to 3 s, a 5 s minimum
 * connect timeout, 16 MiB maximum message size.
 *
 * Returns: (transfer full): the channel or %NULL with @error set.
 */
CriChannel *cri_channel_new(const char *endpoint, GError **error);
CriChannel *cri_channel_ref(CriChannel *channel);
/* The last unref destroys the channel and drops the gRPC library reference (grpc_shutdown()). */
void cri_channel_unref(CriChannel *channel);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CriChannel, cri_channel_unref)

const char *cri_channel_get_endpoint(CriChannel *channel);

/**
 * cri_channel_call:
 * @method: short method name, e.g. "Version"; also used in error messages.
 * @request: the request message.
 * @response_descriptor: descriptor of the expected response message.
 * @timeout_usec: deadline of the call from now; <= 0 means none.
 * @cancellable: (nullable): cancelling it cancels the call (grpc_call_cancel()); the call then
 *   fails with %PLEG_CRI_ERROR_CANCELLED.
 *
 * One unary RPC (cri_channel_call_many() with one call): safe from any number of threads at once.
 *
 * Returns: (transfer full): the decoded response (free with protobuf_c_message_free_unpacked()
 *   or a g_autoptr() below), or %NULL with @error set.
 */
ProtobufCMessage *cri_channel_call(CriChannel *channel, const char *method,
                                   const ProtobufCMessage *request,
                                   const ProtobufCMessageDescriptor *response_descriptor,
                                   gint64 timeout_usec, GCancellable *cancellable, GError **error);

/**
 * CriUnaryCall:
 * @method: short method name, e.g. "ContainerStatus"; also used in error messages.
 * @request: the request message; borrowed for the duration of the call.
 * @response_descriptor: descriptor of the expected response message.
 * @response: (out) (transfer full): the decoded response, or %NULL when @error is set.
 * @error: (out) (transfer full): why the call failed, or %NULL.
 * @arena: (nullable): unpack @response into this arena instead of with malloc; @response then
 *   lives as long as the arena and is never freed on its own.  Calls of one batch may share an
 *   arena: cri_channel_call_many() unpacks on its caller's thread, one answer at a time.
 * @item_func: (nullable): for an answer whose field 1 is a repeated message (every CRI listing):
 *   the answer is never unpacked whole; each item of field 1 is unpacked alone into @arena
 *   (required then), given to @item_func with @item_data on the caller's thread, in order, and
 *   dropped from the arena when it returns.  Other fields are skipped.  @response stays %NULL;
 *   @error says whether the call and every item succeeded (items already given stay given).
 * @limits: with @item_func: the answer's bounds, as cri_buffer_read_items() keeps them.  An
 *   answer past one fails with %PLEG_CRI_ERROR_RESOURCE_EXHAUSTED naming the bound and the
 *   amount.  Zeroes: none.
 * @over_limit: (out): the bound the answer passed, or %CRI_LIMIT_NONE.
 * @start_usec: (out): monotonic time the call was started (or found cancelled before it was).
 * @end_usec: (out): monotonic time it ended, its answer read.
 *
 * One call of cri_channel_call_many(); the caller fills the first three fields, and the others
 * if it wants.
 */
typedef struct {
    const char *method;
    const ProtobufCMessage *request;
    const ProtobufCMessageDescriptor *response_descriptor;
    ProtobufCMessage *response;
    GError *error;
    CriArena *arena;
    CriItemFunc item_func;
    gpointer item_data;
    CriListingLimits limits;
    CriLimit over_limit;
    gint64 start_usec;
    gint64 end_usec;
} CriUnaryCall;

/* Calls one cri_channel_call_many() keeps in flight at most; the rest start as they finish. */
#define CRI_CALLS_IN_FLIGHT_MAX 32

/**
 * cri_channel_call_many:
 * @calls: (array length=n_calls): the calls; each gets its @response or @error.
 * @timeout_usec: deadline of the whole batch from now, shared by every call; <= 0 means none.
 * @cancellable: (nullable): cancelling it cancels every call not yet finished; they fail with
 *   %PLEG_CRI_ERROR_CANCELLED.
 *
 * Several unary RPCs in flight together on one completion queue (at most
 * %CRI_CALLS_IN_FLIGHT_MAX), multiplexed on the channel's HTTP/2 connection.  Returns when all
 * have finished.  Against a runtime on the same node this costs about what one call does for
 * up to a dozen calls, where calls made one after another cost a thread wake-up each way.
 * Safe from any number of threads at once.
 */
void cri_channel_call_many(CriChannel *channel, CriUnaryCall *calls, guint n_calls,
                           gint64 timeout_usec, GCancellable *cancellable);

/**
 * CriCallFeed:
 * @next: the next call to start (its first three fields filled in, and @arena if it wants), or
 *   %NULL when none is ready until one in flight ends.
 * @done: @call ended with its @response or its @error; the call is the caller's again.
 *
 * The calls of a cri_channel_drive(), given and handed back one at a time on the thread that
 * drives.
 */
typedef struct {
    CriUnaryCall *(*next)(gpointer data);
    void (*done)(CriUnaryCall *call, gpointer data);
} CriCallFeed;

/**
 * cri_channel_drive:
 * @max_in_flight: calls in flight at most; more start as they end.
 * @timeout_usec: each call's deadline, from when it starts; <= 0 means none.
 * @cancellable: (nullable): cancelling it cancels the calls in flight and fails those the feed
 *   still gives with %PLEG_CRI_ERROR_CANCELLED, without sending them.
 *
 * Unary RPCs on one completion queue, as cri_channel_call_many(), but taken from @feed as places
 * free up and handed back as each ends, so that one thread keeps up to @max_in_flight calls of
 * many callers in flight and each caller hears of its own as soon as they end.  Returns when
 * @feed gives %NULL with nothing in flight.  Safe from any number of threads at once.
 */
void cri_channel_drive(CriChannel *channel, const CriCallFeed *feed, gpointer data,
                       guint max_in_flight, gint64 timeout_usec, GCancellable *cancellable);

typedef struct _CriStream CriStream;

/**
 * cri_stream_start:
 * @timeout_usec: deadline of the whole stream; <= 0 means none (a long-lived watch).
 * @wait_for_ready: queue the call until the channel connects instead of failing fast.
 *
 * Starts a server-streaming RPC and sends its single request.  Does not wait for the server:
 * failures show up in cri_stream_read().  Reads must come from one thread at a time;
 * cri_stream_cancel() may come from any thread.
 *
 * Returns: (transfer full): the stream or %NULL with @error set.
 */
CriStream *cri_stream_start(CriChannel *channel, const char *method,
                            const ProtobufCMessage *request,
                            const ProtobufCMessageDescriptor *response_descriptor,
                            gint64 timeout_usec, gboolean wait_for_ready, GError **error);

/**
 * cri_stream_read:
 * @ret_message: (out) (transfer full): the next message, or %NULL at a clean end of the stream
 *   (the server closed it with status OK).
 *
 * Blocks until the next message, the end of the stream, cancellation or the deadline.
 * After the end of the stream or an error, further reads fail with the same outcome.
 *
 * Returns: %FALSE with @error set when the stream failed; the error carries the final status.
 */
gboolean cri_stream_read(CriStream *stream, ProtobufCMessage **ret_message,
                         GCancellable *cancellable, GError **error);

/**
 * cri_stream_read_items:
 * @ret_end: (out): TRUE at a clean end of the stream, when no message came.
 *
 * Like cri_stream_read(), for a stream whose messages carry their items in field 1 (the CRI
 * list streams): the next message is never unpacked whole, each item is given to @item_func
 * as cri_unpack_items() does, unpacked alone into the stream's arena, which must be set.  A
 * message that does not decode fails the stream after the items before the fault were given.
 *
 * Returns: %FALSE with @error set when the stream failed.
 */
gboolean cri_stream_read_items(CriStream *stream, CriItemFunc item_func, gpointer item_data,
                               gboolean *ret_end, GCancellable *cancellable, GError **error);

/* Bounds what cri_stream_read_items() reads over the whole stream (@limits copied; NULL: none).
 * The message that takes the stream past one fails it with %PLEG_CRI_ERROR_RESOURCE_EXHAUSTED
 * naming the bound and the amount, and cancels the call. */
void cri_stream_set_limits(CriStream *stream, const CriListingLimits *limits);
/* The bound the stream passed, or CRI_LIMIT_NONE. */
CriLimit cri_stream_get_over_limit(CriStream *stream);

/* Messages read after this are unpacked into @arena (nullable: with malloc again), which must
 * outlive them; the caller rewinds or frees it between messages as it likes. */
void cri_stream_set_arena(CriStream *stream, CriArena *arena);

/* The channel's pool for its calls' arenas.  (transfer none) */
CriArenaPool *cri_channel_get_arena_pool(CriChannel *channel);

/* Cancels the stream from any thread; a blocked cri_stream_read() returns CANCELLED. */
void cri_stream_cancel(CriStream *stream);

/* Cancels the stream if it is still open and frees it.  NULL-safe. */
void cri_stream_free(CriStream *stream);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CriStream, cri_stream_free)

/* Frees any protobuf-c message unpacked by this module.  NULL-safe. */
static inline void
cri_message_free(gpointer message)
{
    if (message)
        protobuf_c_message_free_unpacked(message, NULL);
}

/* g_autoptr() for the protobuf-c types this project handles. */
#define CRI_DEFINE_MESSAGE_AUTOPTR(Type)                                                           \
    static inline void cri_message_free_##Type(Type *message)                                      \
    {                                                                                              \
        cri_message_free(message);                                                                 \
    }                                                                                              \
    G_DEFINE_AUTOPTR_CLEANUP_FUNC(Type, cri_message_free_##Type)

CRI_DEFINE_MESSAGE_AUTOPTR(ProtobufCMessage)
CRI_DEFINE_MESSAGE_AUTOPTR(Runtime__V1__VersionResponse)
CRI_DEFINE_MESSAGE_AUTOPTR(Runtime__V1__StatusResponse)
CRI_DEFINE_MESSAGE_AUTOPTR(Runtime__V1__RunPodSandboxResponse)
CRI_DEFINE_MESSAGE_AUTOPTR(Runtime__V1__StopPodSandboxResponse)
CRI_DEFINE_MESSAGE_AUTOPTR(Runtime__V1__RemovePodSandboxResponse)
CRI_DEFINE_MESSAGE_AUTOPTR(Runtime__V1__PodSandboxStatusResponse)
CRI_DEFINE_MESSAGE_AUTOPTR(Runtime__V1__ListPodSandboxResponse)
CRI_DEFINE_MESSAGE_AUTOPTR(Runtime__V1__CreateContainerResponse)
CRI_DEFINE_MESSAGE_AUTOPTR(Runtime__V1__StartContainerResponse)
CRI_DEFINE_MESSAGE_AUTOPTR(Runtime__V1__StopContainerResponse)
CRI_DEFINE_MESSAGE_AUTOPTR(Runtime__V1__RemoveContainerResponse)
CRI_DEFINE_MESSAGE_AUTOPTR(Runtime__V1__ListContainersResponse)
CRI_DEFINE_MESSAGE_AUTOPTR(Runtime__V1__ContainerStatusResponse)
CRI_DEFINE_MESSAGE_AUTOPTR(Runtime__V1__ContainerEventResponse)

/*
 * Decoding into libpleg's types (pleg-types.h).  Each returns a new object with every string
 * copied; a missing submessage leaves the fields it would fill NULL or 0.  Used by the CRI client
 * and by the Evented PLEG for the statuses that events carry.
 */
PlegPodSandbox *cri_decode_pod_sandbox(const Runtime__V1__PodSandbox *sandbox);
PlegContainer *cri_decode_container(const Runtime__V1__Container *container);
/* The same fields as cri_decode_pod_sandbox() and cri_decode_container() into @ret, borrowed
 * from the message: valid while it is.  The casts drop const: nothing writes through them. */
void cri_view_pod_sandbox(const Runtime__V1__PodSandbox *sandbox, PlegPodSandbox *ret);
void cri_view_container(const Runtime__V1__Container *container, PlegContainer *ret);
PlegPodSandboxStatus *cri_decode_pod_sandbox_status(const Runtime__V1__PodSandboxStatus *status);
PlegContainerStatus *cri_decode_container_status(const Runtime__V1__ContainerStatus *status);

/* The channel under a client, for in-library users such as the Evented PLEG host.
 * (transfer none) */
CriChannel *cri_client_get_channel(PlegCriClient *client);

/* cri_container_events_open() on the client's channel, the stream counted as the client's
 * get_container_events operation when it ends (pleg_cri_client_set_metrics()).
 * (transfer full) */
PlegContainerEventStream *cri_client_container_events_open(PlegCriClient *client,
                                                           GError **error);

/* The client's per-call deadline in microseconds. */
gint64 cri_client_get_timeout_usec(PlegCriClient *client);

/* ---- kubelet's runtime operation metrics (lib/cri/pleg-cri-operations.c) ---- */

/* The CRI operations the client makes, each with kubelet's operation_type
 * (cri_operation_to_string()). */
typedef enum {
    CRI_OPERATION_VERSION,
    CRI_OPERATION_LIST_PODSANDBOX,
    CRI_OPERATION_LIST_CONTAINERS,
    CRI_OPERATION_PODSANDBOX_STATUS,
    CRI_OPERATION_CONTAINER_STATUS,
    CRI_OPERATION_GET_CONTAINER_EVENTS,
    CRI_OPERATION_N,
} CriOperation;

/* "version", "list_podsandbox", ...: kubelet's operation_type.  (transfer none) */
const char *cri_operation_to_string(CriOperation operation);

/* kubelet_runtime_operations_total, _errors_total and _duration_seconds on a registry, every
 * series resolved (pleg_cri_client_set_metrics() documents them).  libpleg only: the static
 * CRI core does not link the registry. */
typedef struct _CriOperations CriOperations;
/* (transfer full): keeps a reference on @registry. */
CriOperations *cri_operations_new(PlegMetricsRegistry *registry);
void cri_operations_free(CriOperations *ops);
/* One operation of @duration_usec that ended with @error (nullable); CANCELLED counts as no
 * error.  NULL @ops records nothing.  Any thread. */
void cri_operations_record(CriOperations *ops, CriOperation operation, gint64 duration_usec,
                           const GError *error);

/* ---- the CRI event stream (lib/cri/cri-events.c) ---- */

/* Starts GetContainerEvents on @channel, failing fast as kubelet calls it: with no runtime the
 * first read fails UNAVAILABLE, so a stream that has not failed is one the runtime carries.
 * (transfer full) */
PlegContainerEventStream *cri_container_events_open(CriChannel *channel, GError **error);
gboolean cri_container_events_read(PlegContainerEventStream *stream, PlegContainerEvent **ret_event,
                                   GError **error);
void cri_container_events_cancel(PlegContainerEventStream *stream);
void cri_container_events_free(PlegContainerEventStream *stream);
void cri_container_event_free(PlegContainerEvent *event);

/* How a GetContainerEvents stream ended, once, @duration_usec after it was opened: @error the
 * error it ended with, NULL at a clean end and when it was freed before it ended. */
typedef void (*CriContainerEventsEndFunc)(gint64 duration_usec, const GError *error,
                                          gpointer user_data);
/* Set before the first read, from the thread that opened the stream; @destroy runs with the
 * stream's free. */
void cri_container_events_set_end_func(PlegContainerEventStream *stream,
                                       CriContainerEventsEndFunc func, gpointer user_data,
                                       GDestroyNotify destroy);

/* Decodes one wire message.  (transfer full) */
PlegContainerEvent *cri_decode_container_event(const Runtime__V1__ContainerEventResponse *message);

G_END_DECLS
