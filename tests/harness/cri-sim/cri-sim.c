/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cri-sim: the server.  One thread polls one completion queue and drives every call as a small
 * state machine; other threads (the C API, scripts) start batches directly under the lock, so an
 * emitted event leaves at once instead of waiting for the server thread to wake up.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <glib/gstdio.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include "api.pb-c.h"
#include "cri-sim.h"

#define SERVICE           "runtime.v1.RuntimeService"
#define EVENTS_METHOD     "GetContainerEvents"
#define STREAM_SANDBOXES  "StreamPodSandboxes"
#define STREAM_CONTAINERS "StreamContainers"
#define PADDING_KEY       "cri-sim.io/padding"
#define DEFAULT_LIST_BATCH 5000
#define DEFAULT_IMAGE     "docker.io/library/busybox:latest"
#define IMAGE_REF         "sha256:0123456789abcdef"
#define LABEL_POD_UID     "io.kubernetes.pod.uid"
#define LABEL_POD_NAME    "io.kubernetes.pod.name"
#define LABEL_POD_NS      "io.kubernetes.pod.namespace"
#define LABEL_CONTAINER   "io.kubernetes.container.name"
#define IDLE_WAKEUP_USEC  (50 * 1000)
#define STREAM_END_WAIT_USEC (G_USEC_PER_SEC / 2)
#define GOING_AWAY        "cri-sim: runtime going away"

G_DEFINE_QUARK(cri-sim-error-quark, cri_sim_error)

typedef struct _Pod Pod;

typedef struct {
    char *id;
    Pod *pod;
    char *name;
    char *image;
    guint32 attempt;
    CriSimContainerState state;
    gint64 created_at;
    gint64 started_at;
    gint64 finished_at;
    gint32 exit_code;
    char *reason;
    GPtrArray *labels; /* key, value, key, value... */
    guint padding_bytes; /* one annotation of this many bytes, for listings of a large size */
} Container;

struct _Pod {
    char *id;
    char *uid;
    char *name;
    char *namespace_;
    guint32 attempt;
    gboolean not_ready;
    gint64 created_at;
    char *ip;
    char *additional_ip;
    GPtrArray *labels;
    GPtrArray *containers; /* Container *, not owned, creation order */
};

typedef enum { OP_REQUEST, OP_RECV, OP_CLOSE, OP_SEND, OP_STATUS, N_OPS, OP_SHUTDOWN } OpKind;

typedef struct _Call Call;

typedef struct {
    Call *call;
    OpKind kind;
} Op;

struct _Call {
    CriSim *sim;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array metadata;
    Op ops[N_OPS];
    guint n_pending;
    char *method;
    grpc_byte_buffer *request;
    int cancelled;
    gboolean closed;
    gboolean metadata_sent;
    gboolean status_sent;
    gboolean sending;
    gboolean sending_message;
    gboolean is_stream; /* GetContainerEvents or a list stream */
    gboolean is_events; /* GetContainerEvents */
    gboolean ending;
    grpc_status_code end_status;
    char *end_details;
    /* Decided on arrival: a scripted failure, answered when due. */
    grpc_status_code fail_status;
    char *fail_details;
    gint64 due; /* monotonic usec; 0: no timer */
    GQueue outbox; /* GBytes, packed events */
    grpc_byte_buffer *send_buffer;
    grpc_slice status_details;
};

typedef struct {
    int delay_ms;
    int fail_code;
    int fail_times;
} Rule;

typedef enum { SERVER_SERVING, SERVER_STOPPING, SERVER_AWAY, SERVER_STOPPED } ServerState;

struct _CriSim {
    char *socket_path;
    char *address;
    grpc_completion_queue *cq;
    GThread *thread;

    GMutex lock; /* everything below */
    GCond cond;
    grpc_server *server;
    ServerState state;
    gboolean shutdown_seen;
    gint64 come_back_at; /* monotonic usec; G_MAXINT64: on request */
    guint n_live;        /* Call objects of the current server */
    guint n_stream_calls;

    GPtrArray *pods;       /* Pod *, owned, creation order */
    GPtrArray *containers; /* Container *, owned, creation order */
    GHashTable *pods_by_id;
    GHashTable *pods_by_uid; /* the newest sandbox of each uid */
    GHashTable *containers_by_id;
    guint next_id;
    guint next_bulk;
    char *sandbox_prefix;
    char *container_prefix;
    char *runtime_name;
    char *runtime_version;

    GHashTable *n_calls; /* method -> GUINT_TO_POINTER(count) */
    guint n_calls_total;
    guint n_streams;
    guint n_events_sent;
    GHashTable *last_requests;
    GHashTable *rules; /* method or "*" -> Rule */

    GPtrArray *calls;       /* Call *, every call that arrived and is not freed */
    GPtrArray *subscribers; /* Call *, streams that receive events */
    GQueue timers;          /* Call *, by due time */
    guint next_subscriber;
    gboolean auto_events;
    gboolean sandbox_events;
    gboolean deliver_one;
    gboolean events_unimplemented;
    gboolean list_streams_unimplemented;
    guint list_batch;          /* items a list stream message carries */
    int list_fail_after;       /* list streams fail after this many messages; -1: never */
    grpc_status_code list_fail_code;
    GArray *greeting; /* CriSimEvent with owned ids */
    gboolean greeting_end;
};

static Op shutdown_op = {NULL, OP_SHUTDOWN};

static gint64
now_ns(void)
{
    return g_get_real_time() * 1000;
}

/* ---- labels: a flat key, value list ---- */

static GPtrArray *
labels_new(const char *const *pairs)
{
    GPtrArray *labels = g_ptr_array_new_with_free_func(g_free);

    for (gsize i = 0; pairs && pairs[i] && pairs[i + 1]; i += 2) {
        g_ptr_array_add(labels, g_strdup(pairs[i]));
        g_ptr_array_add(labels, g_strdup(pairs[i + 1]));
    }
    return labels;
}

static const char *
labels_get(GPtrArray *labels, const char *key)
{
    for (guint i = 0; i + 1 < labels->len; i += 2)
        if (g_str_equal(labels->pdata[i], key))
            return labels->pdata[i + 1];
    return NULL;
}

static void
labels_set(GPtrArray *labels, const char *key, const char *value)
{
    for (guint i = 0; i + 1 < labels->len; i += 2) {
        if (!g_str_equal(labels->pdata[i], key))
            continue;
        if (value) {
            g_free(labels->pdata[i + 1]);
            labels->pdata[i + 1] = g_strdup(value);
        } else {
            g_ptr_array_remove_range(labels, i, 2);
        }
        return;
    }
    if (value) {
        g_ptr_array_add(labels, g_strdup(key));
        g_ptr_array_add(labels, g_strdup(value));
    }
}

/* Every protobuf-c map<string, string> entry has this layout. */
typedef struct {
    ProtobufCMessage base;
    char *key;
    char *value;
} MapEntry;

static gboolean
labels_match(GPtrArray *labels, MapEntry **selector, size_t n_selector)
{
    for (size_t i = 0; i < n_selector; i++)
        if (g_strcmp0(labels_get(labels, selector[i]->key), selector[i]->value) != 0)
            return FALSE;
    return TRUE;
}

/* ---- pods and containers ---- */

static void
container_free(Container *container)
{
    g_free(container->id);
    g_free(container->name);
    g_free(container->image);
    g_free(container->reason);
    g_ptr_array_unref(container->labels);
    g_free(container);
}

static void
pod_free(Pod *pod)
{
    g_free(pod->id);
    g_free(pod->uid);
    g_free(pod->name);
    g_free(pod->namespace_);
    g_free(pod->ip);
    g_free(pod->additional_ip);
    g_ptr_array_unref(pod->labels);
    g_ptr_array_unref(pod->containers);
    g_free(pod);
}

static char *
generate_id(CriSim *self, const char *prefix)
{
    for (;;) {
        char *id = g_strdup_printf("%s%u", prefix, ++self->next_id);

        if (!g_hash_table_contains(self->pods_by_id, id) &&
            !g_hash_table_contains(self->containers_by_id, id))
            return id;
        g_free(id);
    }
}

static Pod *
find_pod_by_uid(CriSim *self, const char *uid, GError **error)
{
    Pod *pod = uid ? g_hash_table_lookup(self->pods_by_uid, uid) : NULL;

    if (!pod)
        g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_NOT_FOUND, "no pod with uid \"%s\"",
                    uid ? uid : "");
    return pod;
}

static Container *
find_container(CriSim *self, const char *id, GError **error)
{
    Container *container = id ? g_hash_table_lookup(self->containers_by_id, id) : NULL;

    if (!container)
        g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_NOT_FOUND, "no container \"%s\"",
                    id ? id : "");
    return container;
}

static const char *
container_state_name(CriSimContainerState state)
{
    static const char *const names[] = {"CREATED", "RUNNING", "EXITED", "UNKNOWN"};

    return (guint)state < G_N_ELEMENTS(names) ? names[state] : "?";
}

/* ---- building messages ---- */

/* Messages are built from the state without copies: the pieces live in a scratch list until the
 * message is packed, under the lock. */
static gpointer
scratch_alloc(GPtrArray *scratch, gsize size)
{
    gpointer p = g_malloc0(size);

    g_ptr_array_add(scratch, p);
    return p;
}

#define SCRATCH_NEW(scratch, Type)    ((Type *)scratch_alloc((scratch), sizeof(Type)))
#define SCRATCH_ARRAY(scratch, T, n)  ((T *)scratch_alloc((scratch), sizeof(T) * MAX((n), 1)))

static MapEntry **
build_map(GPtrArray *scratch, GPtrArray *labels, const ProtobufCMessageDescriptor *descriptor,
          size_t *ret_n)
{
    guint n = labels->len / 2;
    MapEntry **entries = SCRATCH_ARRAY(scratch, MapEntry *, n);

    for (guint i = 0; i < n; i++) {
        MapEntry *entry = SCRATCH_NEW(scratch, MapEntry);

        protobuf_c_message_init(descriptor, entry);
        entry->key = labels->pdata[2 * i];
        entry->value = labels->pdata[2 * i + 1];
        entries[i] = entry;
    }
    *ret_n = n;
    return entries;
}

static GBytes *
pack(const ProtobufCMessage *message)
{
    gsize size = protobuf_c_message_get_packed_size(message);
    guint8 *data = g_malloc(MAX(size, 1));

    protobuf_c_message_pack(message, data);
    return g_bytes_new_take(data, size);
}

static Runtime__V1__PodSandboxMetadata *
build_sandbox_metadata(GPtrArray *scratch, Pod *pod)
{
    Runtime__V1__PodSandboxMetadata *metadata = SCRATCH_NEW(scratch, Runtime__V1__PodSandboxMetadata);

    runtime__v1__pod_sandbox_metadata__init(metadata);
    metadata->name = pod->name;
    metadata->uid = pod->uid;
    metadata->namespace_ = pod->namespace_;
    metadata->attempt = pod->attempt;
    return metadata;
}

static Runtime__V1__PodSandboxState
pod_state(Pod *pod)
{
    return pod->not_ready ? RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_NOTREADY
                          : RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_READY;
}

static Runtime__V1__PodSandbox *
build_sandbox(GPtrArray *scratch, Pod *pod)
{
    Runtime__V1__PodSandbox *item = SCRATCH_NEW(scratch, Runtime__V1__PodSandbox);

    runtime__v1__pod_sandbox__init(item);
    item->id = pod->id;
    item->metadata = build_sandbox_metadata(scratch, pod);
    item->state = pod_state(pod);
    item->created_at = pod->created_at;
    item->labels = (Runtime__V1__PodSandbox__LabelsEntry **)build_map(
        scratch, pod->labels, &runtime__v1__pod_sandbox__labels_entry__descriptor, &item->n_labels);
    return item;
}

static Runtime__V1__PodSandboxStatus *
build_sandbox_status(GPtrArray *scratch, Pod *pod)
{
    Runtime__V1__PodSandboxStatus *status = SCRATCH_NEW(scratch, Runtime__V1__PodSandboxStatus);

    runtime__v1__pod_sandbox_status__init(status);
    status->id = pod->id;
    status->metadata = build_sandbox_metadata(scratch, pod);
    status->state = pod_state(pod);
    status->created_at = pod->created_at;
    status->labels = (Runtime__V1__PodSandboxStatus__LabelsEntry **)build_map(
        scratch, pod->labels, &runtime__v1__pod_sandbox_status__labels_entry__descriptor,
        &status->n_labels);
    if (pod->ip) {
        Runtime__V1__PodSandboxNetworkStatus *network =
            SCRATCH_NEW(scratch, Runtime__V1__PodSandboxNetworkStatus);

        runtime__v1__pod_sandbox_network_status__init(network);
        network->ip = pod->ip;
        if (pod->additional_ip) {
            Runtime__V1__PodIP *extra = SCRATCH_NEW(scratch, Runtime__V1__PodIP);

            runtime__v1__pod_ip__init(extra);
            extra->ip = pod->additional_ip;
            network->additional_ips = SCRATCH_ARRAY(scratch, Runtime__V1__PodIP *, 1);
            network->additional_ips[0] = extra;
            network->n_additional_ips = 1;
        }
        status->network = network;
    }
    return status;
}

static Runtime__V1__ContainerMetadata *
build_container_metadata(GPtrArray *scratch, Container *container)
{
    Runtime__V1__ContainerMetadata *metadata = SCRATCH_NEW(scratch, Runtime__V1__ContainerMetadata);

    runtime__v1__container_metadata__init(metadata);
    metadata->name = container->name;
    metadata->attempt = container->attempt;
    return metadata;
}

static Runtime__V1__ImageSpec *
build_image(GPtrArray *scratch, Container *container)
{
    Runtime__V1__ImageSpec *image = SCRATCH_NEW(scratch, Runtime__V1__ImageSpec);

    runtime__v1__image_spec__init(image);
    image->image = container->image;
    return image;
}

static Runtime__V1__Container *
build_container(GPtrArray *scratch, Container *container)
{
    Runtime__V1__Container *item = SCRATCH_NEW(scratch, Runtime__V1__Container);

    runtime__v1__container__init(item);
    item->id = container->id;
    item->pod_sandbox_id = container->pod->id;
    item->metadata = build_container_metadata(scratch, container);
    item->image = build_image(scratch, container);
    item->image_ref = (char *)IMAGE_REF;
    item->state = (Runtime__V1__ContainerState)container->state;
    item->created_at = container->created_at;
    item->labels = (Runtime__V1__Container__LabelsEntry **)build_map(
        scratch, container->labels, &runtime__v1__container__labels_entry__descriptor,
        &item->n_labels);
    if (container->padding_bytes > 0) {
        Runtime__V1__Container__AnnotationsEntry *entry =
            SCRATCH_NEW(scratch, Runtime__V1__Container__AnnotationsEntry);
        char *value = scratch_alloc(scratch, container->padding_bytes + 1);

        runtime__v1__container__annotations_entry__init(entry);
        memset(value, 'x', container->padding_bytes);
        entry->key = (char *)PADDING_KEY;
        entry->value = value;
        item->annotations = SCRATCH_ARRAY(scratch, Runtime__V1__Container__AnnotationsEntry *, 1);
        item->annotations[0] = entry;
        item->n_annotations = 1;
    }
    return item;
}

static Runtime__V1__ContainerStatus *
build_container_status(GPtrArray *scratch, Container *container)
{
    Runtime__V1__ContainerStatus *status = SCRATCH_NEW(scratch, Runtime__V1__ContainerStatus);

    runtime__v1__container_status__init(status);
    status->id = container->id;
    status->metadata = build_container_metadata(scratch, container);
    status->image = build_image(scratch, container);
    status->image_ref = (char *)IMAGE_REF;
    status->state = (Runtime__V1__ContainerState)container->state;
    status->created_at = container->created_at;
    status->started_at = container->started_at;
    status->finished_at = container->finished_at;
    status->exit_code = container->exit_code;
    status->reason = container->reason ? container->reason : (char *)"";
    status->labels = (Runtime__V1__ContainerStatus__LabelsEntry **)build_map(
        scratch, container->labels, &runtime__v1__container_status__labels_entry__descriptor,
        &status->n_labels);
    return status;
}

/* An event about @id; @pod (nullable) supplies the statuses, looked up from @id when NULL. */
static GBytes *
build_event(CriSim *self, CriSimEventType type, const char *id, Pod *pod, CriSimEventFlags flags,
            gint64 created_at)
{
    g_autoptr(GPtrArray) scratch = g_ptr_array_new_with_free_func(g_free);
    Runtime__V1__ContainerEventResponse event = RUNTIME__V1__CONTAINER_EVENT_RESPONSE__INIT;
    g_autofree char *unknown_id = NULL;

    if (!pod) {
        Container *container = g_hash_table_lookup(self->containers_by_id, id);

        pod = container ? container->pod : g_hash_table_lookup(self->pods_by_id, id);
    }
    if (flags & CRI_SIM_EVENT_UNKNOWN_ID)
        unknown_id = g_strconcat(id, "-unknown", NULL);

    event.container_id = unknown_id ? unknown_id : (char *)id;
    event.container_event_type = (Runtime__V1__ContainerEventType)type;
    event.created_at = created_at ? created_at : now_ns();
    if (pod && !(flags & CRI_SIM_EVENT_NO_SANDBOX)) {
        Runtime__V1__PodSandboxStatus *status = build_sandbox_status(scratch, pod);

        if (flags & CRI_SIM_EVENT_NO_METADATA)
            status->metadata = NULL;
        else if (flags & CRI_SIM_EVENT_EMPTY_UID)
            status->metadata->uid = (char *)"";
        event.pod_sandbox_status = status;
    }
    if (pod && !(flags & CRI_SIM_EVENT_NO_CONTAINERS)) {
        event.n_containers_statuses = pod->containers->len;
        event.containers_statuses =
            SCRATCH_ARRAY(scratch, Runtime__V1__ContainerStatus *, pod->containers->len);
        for (guint i = 0; i < pod->containers->len; i++)
            event.containers_statuses[i] = build_container_status(scratch, pod->containers->pdata[i]);
    }
    return pack(&event.base);
}

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
static void
stream_kick(Call *call)
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

static void
remove_subscriber(CriSim *self, Call *call)
{
    if (g_ptr_array_remove(self->subscribers, call))
        g_cond_broadcast(&self->cond);
}

static void
stream_end(CriSim *self, Call *call, grpc_status_code status, const char *details)
{
    if (call->ending)
        return;
    call->ending = TRUE;
    call->end_status = status;
    call->end_details = g_strdup(details);
    remove_subscriber(self, call);
    stream_kick(call);
}

/* The whole answer of a unary call (or a stream that fails at once). */
static void
call_finish(Call *call, grpc_status_code status, const char *details, GBytes *message)
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
    remove_subscriber(self, call);
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

static void
timer_add(CriSim *self, Call *call, int delay_ms)
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

/* ---- rules ---- */

static Rule *
rule_get(CriSim *self, const char *method)
{
    Rule *rule = g_hash_table_lookup(self->rules, method);

    if (!rule) {
        rule = g_new0(Rule, 1);
        g_hash_table_insert(self->rules, g_strdup(method), rule);
    }
    return rule;
}

static int
rule_delay(CriSim *self, const char *method)
{
    Rule *rule = g_hash_table_lookup(self->rules, method);

    if (rule && rule->delay_ms != 0)
        return rule->delay_ms;
    if (g_str_equal(method, EVENTS_METHOD))
        return 0;
    rule = g_hash_table_lookup(self->rules, "*");
    return rule ? rule->delay_ms : 0;
}

/* Consumes one scripted failure of @method, if any. */
static int
rule_take_failure(CriSim *self, const char *method)
{
    const char *keys[] = {method, "*"};

    for (gsize i = 0; i < G_N_ELEMENTS(keys); i++) {
        Rule *rule = g_hash_table_lookup(self->rules, keys[i]);
        int code;

        if (!rule || rule->fail_code == 0)
            continue;
        code = rule->fail_code;
        if (rule->fail_times > 0 && --rule->fail_times == 0)
            rule->fail_code = 0;
        return code;
    }
    return 0;
}

/* ---- events ---- */

static guint
deliver(CriSim *self, GBytes *bytes)
{
    guint n = self->subscribers->len;

    if (n == 0)
        return 0;
    if (self->deliver_one) {
        Call *call = self->subscribers->pdata[self->next_subscriber++ % n];

        g_queue_push_tail(&call->outbox, g_bytes_ref(bytes));
        stream_kick(call);
        return 1;
    }
    for (guint i = 0; i < n; i++) {
        Call *call = self->subscribers->pdata[i];

        g_queue_push_tail(&call->outbox, g_bytes_ref(bytes));
        stream_kick(call);
    }
    return n;
}

static void
natural_event(CriSim *self, CriSimEventType type, const char *id, Pod *pod)
{
    g_autoptr(GBytes) bytes = NULL;

    if (!self->auto_events || self->subscribers->len == 0)
        return;
    bytes = build_event(self, type, id, pod, 0, 0);
    deliver(self, bytes);
}

static void
sandbox_event(CriSim *self, CriSimEventType type, Pod *pod)
{
    if (self->sandbox_events)
        natural_event(self, type, pod->id, pod);
}

static void
subscribe(CriSim *self, Call *call)
{
    self->n_streams++;
    for (guint i = 0; i < self->greeting->len; i++) {
        const CriSimEvent *event = &g_array_index(self->greeting, CriSimEvent, i);

        g_queue_push_tail(&call->outbox, build_event(self, event->type, event->container_id, NULL,
                                                     event->flags, event->created_at_ns));
    }
    if (self->greeting_end) {
        call->ending = TRUE;
        call->end_status = GRPC_STATUS_OK;
    } else {
        g_ptr_array_add(self->subscribers, call);
    }
    g_debug("GetContainerEvents stream %u opened", self->n_streams);
    g_cond_broadcast(&self->cond);
    stream_kick(call);
}

/* ---- state changes (lock held) ---- */

static Pod *
pod_add(CriSim *self, const CriSimPodSpec *spec, GError **error)
{
    g_autofree char *id = NULL;
    Pod *pod;

    if (!spec->uid || !*spec->uid) {
        g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_SYNTAX, "a pod needs a uid");
        return NULL;
    }
    id = spec->id ? g_strdup(spec->id) : g_strconcat("sb-", spec->uid, NULL);
    if (g_hash_table_contains(self->pods_by_id, id) ||
        g_hash_table_contains(self->containers_by_id, id)) {
        g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_EXISTS, "id \"%s\" is taken", id);
        return NULL;
    }

    pod = g_new0(Pod, 1);
    pod->id = g_steal_pointer(&id);
    pod->uid = g_strdup(spec->uid);
    pod->name = spec->name ? g_strdup(spec->name) : g_strconcat("pod-", spec->uid, NULL);
    pod->namespace_ = g_strdup(spec->namespace_ ? spec->namespace_ : "default");
    pod->attempt = spec->attempt;
    pod->not_ready = spec->not_ready;
    pod->created_at = spec->created_at_ns ? spec->created_at_ns : now_ns();
    pod->ip = g_strdup(spec->ip);
    pod->additional_ip = g_strdup(spec->additional_ip);
    if (spec->labels) {
        pod->labels = labels_new(spec->labels);
    } else {
        pod->labels = labels_new(NULL);
        labels_set(pod->labels, LABEL_POD_UID, pod->uid);
        labels_set(pod->labels, LABEL_POD_NAME, pod->name);
        labels_set(pod->labels, LABEL_POD_NS, pod->namespace_);
    }
    pod->containers = g_ptr_array_new();
    g_ptr_array_add(self->pods, pod);
    g_hash_table_insert(self->pods_by_id, pod->id, pod);
    g_hash_table_insert(self->pods_by_uid, pod->uid, pod);

    sandbox_event(self, CRI_SIM_EVENT_CREATED, pod);
    if (!pod->not_ready)
        sandbox_event(self, CRI_SIM_EVENT_STARTED, pod);
    return pod;
}

static Container *
container_add(CriSim *self, Pod *pod, const CriSimContainerSpec *spec, char *generated_id,
              GError **error)
{
    g_autofree char *id = generated_id;
    Container *container;
    gint64 now = now_ns();

    if (!id)
        id = spec->id ? g_strdup(spec->id) : generate_id(self, self->container_prefix);
    if (g_hash_table_contains(self->pods_by_id, id) ||
        g_hash_table_contains(self->containers_by_id, id)) {
        g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_EXISTS, "id \"%s\" is taken", id);
        return NULL;
    }

    container = g_new0(Container, 1);
    container->id = g_steal_pointer(&id);
    container->pod = pod;
    container->name = g_strdup(spec->name ? spec->name : container->id);
    container->image = g_strdup(spec->image ? spec->image : DEFAULT_IMAGE);
    container->attempt = spec->attempt;
    container->state = spec->state;
    container->created_at = spec->created_at_ns ? spec->created_at_ns : now;
    if (spec->state == CRI_SIM_CONTAINER_RUNNING || spec->state == CRI_SIM_CONTAINER_EXITED)
        container->started_at = spec->started_at_ns ? spec->started_at_ns : container->created_at;
    if (spec->state == CRI_SIM_CONTAINER_EXITED) {
        container->finished_at = spec->finished_at_ns ? spec->finished_at_ns : now;
        container->exit_code = spec->exit_code;
    }
    container->reason = g_strdup(spec->reason);
    if (spec->labels) {
        container->labels = labels_new(spec->labels);
    } else {
        container->labels = labels_new(NULL);
        labels_set(container->labels, LABEL_POD_UID, pod->uid);
        labels_set(container->labels, LABEL_POD_NAME, pod->name);
        labels_set(container->labels, LABEL_POD_NS, pod->namespace_);
        labels_set(container->labels, LABEL_CONTAINER, container->name);
    }
    g_ptr_array_add(self->containers, container);
    g_ptr_array_add(pod->containers, container);
    g_hash_table_insert(self->containers_by_id, container->id, container);

    natural_event(self, CRI_SIM_EVENT_CREATED, container->id, NULL);
    if (container->state == CRI_SIM_CONTAINER_RUNNING || container->state == CRI_SIM_CONTAINER_EXITED)
        natural_event(self, CRI_SIM_EVENT_STARTED, container->id, NULL);
    if (container->state == CRI_SIM_CONTAINER_EXITED)
        natural_event(self, CRI_SIM_EVENT_STOPPED, container->id, NULL);
    return container;
}

static gboolean
container_start(CriSim *self, Container *container, GError **error)
{
    if (container->state != CRI_SIM_CONTAINER_CREATED) {
        g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_STATE,
                    "container \"%s\" is %s, not CREATED", container->id,
                    container_state_name(container->state));
        return FALSE;
    }
    container->state = CRI_SIM_CONTAINER_RUNNING;
    container->started_at = now_ns();
    natural_event(self, CRI_SIM_EVENT_STARTED, container->id, NULL);
    return TRUE;
}

static gboolean
container_exit(CriSim *self, Container *container, int exit_code, const char *reason,
               GError **error)
{
    if (container->state == CRI_SIM_CONTAINER_EXITED) {
        g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_STATE, "container \"%s\" has exited",
                    container->id);
        return FALSE;
    }
    container->state = CRI_SIM_CONTAINER_EXITED;
    container->finished_at = now_ns();
    container->exit_code = exit_code;
    g_free(container->reason);
    container->reason = g_strdup(reason ? reason : exit_code == 0 ? "Completed" : "Error");
    natural_event(self, CRI_SIM_EVENT_STOPPED, container->id, NULL);
    return TRUE;
}

static void
container_remove(CriSim *self, Container *container)
{
    Pod *pod = container->pod;
    g_autofree char *id = g_strdup(container->id);

    g_ptr_array_remove(pod->containers, container);
    g_hash_table_remove(self->containers_by_id, container->id);
    g_ptr_array_remove(self->containers, container); /* frees */
    natural_event(self, CRI_SIM_EVENT_DELETED, id, pod);
}

static void
pod_stop(CriSim *self, Pod *pod)
{
    for (guint i = 0; i < pod->containers->len; i++) {
        Container *container = pod->containers->pdata[i];

        if (container->state == CRI_SIM_CONTAINER_RUNNING)
            container_exit(self, container, 137, "Error", NULL);
    }
    if (!pod->not_ready) {
        pod->not_ready = TRUE;
        sandbox_event(self, CRI_SIM_EVENT_STOPPED, pod);
    }
}

static void
pod_remove(CriSim *self, Pod *pod)
{
    pod_stop(self, pod);
    while (pod->containers->len > 0)
        container_remove(self, pod->containers->pdata[pod->containers->len - 1]);
    sandbox_event(self, CRI_SIM_EVENT_DELETED, pod);

    g_hash_table_remove(self->pods_by_id, pod->id);
    if (g_hash_table_lookup(self->pods_by_uid, pod->uid) == pod) {
        g_hash_table_remove(self->pods_by_uid, pod->uid);
        /* An older sandbox of the same pod becomes the one its uid names. */
        for (guint i = self->pods->len; i > 0; i--) {
            Pod *other = self->pods->pdata[i - 1];

            if (other != pod && g_str_equal(other->uid, pod->uid)) {
                g_hash_table_insert(self->pods_by_uid, other->uid, other);
                break;
            }
        }
    }
    g_ptr_array_remove(self->pods, pod); /* frees */
}

/* ---- RPCs (lock held) ---- */

typedef struct {
    grpc_status_code status;
    char *details;
    GBytes *message;
} Reply;

static void reply_error(Reply *reply, grpc_status_code status, const char *format, ...)
    G_GNUC_PRINTF(3, 4);

static void
reply_error(Reply *reply, grpc_status_code status, const char *format, ...)
{
    va_list args;

    va_start(args, format);
    reply->status = status;
    reply->details = g_strdup_vprintf(format, args);
    va_end(args);
}

static void
reply_empty(Reply *reply, const ProtobufCMessageDescriptor *descriptor)
{
    ProtobufCMessage message;

    protobuf_c_message_init(descriptor, &message);
    reply->message = pack(&message);
}

static void
serve_version(CriSim *self, const Runtime__V1__VersionRequest *request, Reply *reply)
{
    Runtime__V1__VersionResponse response = RUNTIME__V1__VERSION_RESPONSE__INIT;

    response.version = (char *)"0.1.0";
    response.runtime_name = self->runtime_name;
    response.runtime_version = self->runtime_version;
    response.runtime_api_version = (char *)"v1";
    reply->message = pack(&response.base);
}

static void
serve_status(CriSim *self, const Runtime__V1__StatusRequest *request, Reply *reply)
{
    Runtime__V1__StatusResponse response = RUNTIME__V1__STATUS_RESPONSE__INIT;
    Runtime__V1__RuntimeStatus status = RUNTIME__V1__RUNTIME_STATUS__INIT;
    Runtime__V1__RuntimeCondition runtime = RUNTIME__V1__RUNTIME_CONDITION__INIT;
    Runtime__V1__RuntimeCondition network = RUNTIME__V1__RUNTIME_CONDITION__INIT;
    Runtime__V1__RuntimeCondition *conditions[] = {&runtime, &network};

    runtime.type = (char *)"RuntimeReady";
    runtime.status = TRUE;
    network.type = (char *)"NetworkReady";
    network.status = TRUE;
    status.n_conditions = G_N_ELEMENTS(conditions);
    status.conditions = conditions;
    response.status = &status;
    reply->message = pack(&response.base);
}

/* The sandboxes @filter lets through, as ListPodSandbox and StreamPodSandboxes answer them. */
static Runtime__V1__PodSandbox **
collect_sandboxes(CriSim *self, const Runtime__V1__PodSandboxFilter *filter, GPtrArray *scratch,
                  size_t *ret_n)
{
    Runtime__V1__PodSandbox **items =
        SCRATCH_ARRAY(scratch, Runtime__V1__PodSandbox *, self->pods->len);
    size_t n = 0;

    for (guint i = 0; i < self->pods->len; i++) {
        Pod *pod = self->pods->pdata[i];

        if (filter) {
            if (filter->id && *filter->id && !g_str_equal(filter->id, pod->id))
                continue;
            if (filter->state && filter->state->state != pod_state(pod))
                continue;
            if (!labels_match(pod->labels, (MapEntry **)filter->label_selector,
                              filter->n_label_selector))
                continue;
        }
        items[n++] = build_sandbox(scratch, pod);
    }
    *ret_n = n;
    return items;
}

static void
serve_list_pod_sandbox(CriSim *self, const Runtime__V1__ListPodSandboxRequest *request,
                       Reply *reply)
{
    g_autoptr(GPtrArray) scratch = g_ptr_array_new_with_free_func(g_free);
    Runtime__V1__ListPodSandboxResponse response = RUNTIME__V1__LIST_POD_SANDBOX_RESPONSE__INIT;

    response.items = collect_sandboxes(self, request->filter, scratch, &response.n_items);
    reply->message = pack(&response.base);
}

static void
serve_pod_sandbox_status(CriSim *self, const Runtime__V1__PodSandboxStatusRequest *request,
                         Reply *reply)
{
    g_autoptr(GPtrArray) scratch = g_ptr_array_new_with_free_func(g_free);
    Runtime__V1__PodSandboxStatusResponse response = RUNTIME__V1__POD_SANDBOX_STATUS_RESPONSE__INIT;
    Pod *pod = g_hash_table_lookup(self->pods_by_id, request->pod_sandbox_id);

    if (!pod) {
        reply_error(reply, GRPC_STATUS_NOT_FOUND,
                    "an error occurred when try to find sandbox %s: not found",
                    request->pod_sandbox_id);
        return;
    }
    response.status = build_sandbox_status(scratch, pod);
    response.timestamp = now_ns();
    reply->message = pack(&response.base);
}

/* The containers @filter lets through, as ListContainers and StreamContainers answer them. */
static Runtime__V1__Container **
collect_containers(CriSim *self, const Runtime__V1__ContainerFilter *filter, GPtrArray *scratch,
                   size_t *ret_n)
{
    GPtrArray *candidates = self->containers;
    Runtime__V1__Container **items;
    size_t n = 0;

    /* The common per-pod listing need not walk every container. */
    if (filter && filter->pod_sandbox_id && *filter->pod_sandbox_id) {
        Pod *pod = g_hash_table_lookup(self->pods_by_id, filter->pod_sandbox_id);

        candidates = pod ? pod->containers : NULL;
    }
    items = SCRATCH_ARRAY(scratch, Runtime__V1__Container *, candidates ? candidates->len : 0);
    for (guint i = 0; candidates && i < candidates->len; i++) {
        Container *container = candidates->pdata[i];

        if (filter) {
            if (filter->id && *filter->id && !g_str_equal(filter->id, container->id))
                continue;
            if (filter->state && filter->state->state != (Runtime__V1__ContainerState)container->state)
                continue;
            if (!labels_match(container->labels, (MapEntry **)filter->label_selector,
                              filter->n_label_selector))
                continue;
        }
        items[n++] = build_container(scratch, container);
    }
    *ret_n = n;
    return items;
}

static void
serve_list_containers(CriSim *self, const Runtime__V1__ListContainersRequest *request,
                      Reply *reply)
{
    g_autoptr(GPtrArray) scratch = g_ptr_array_new_with_free_func(g_free);
    Runtime__V1__ListContainersResponse response = RUNTIME__V1__LIST_CONTAINERS_RESPONSE__INIT;

    response.containers = collect_containers(self, request->filter, scratch, &response.n_containers);
    reply->message = pack(&response.base);
}

static void
serve_container_status(CriSim *self, const Runtime__V1__ContainerStatusRequest *request,
                       Reply *reply)
{
    g_autoptr(GPtrArray) scratch = g_ptr_array_new_with_free_func(g_free);
    Runtime__V1__ContainerStatusResponse response = RUNTIME__V1__CONTAINER_STATUS_RESPONSE__INIT;
    Container *container = g_hash_table_lookup(self->containers_by_id, request->container_id);

    if (!container) {
        reply_error(reply, GRPC_STATUS_NOT_FOUND,
                    "an error occurred when try to find container \"%s\": not found",
                    request->container_id);
        return;
    }
    response.status = build_container_status(scratch, container);
    reply->message = pack(&response.base);
}

static void
serve_run_pod_sandbox(CriSim *self, const Runtime__V1__RunPodSandboxRequest *request,
                      Reply *reply)
{
    Runtime__V1__RunPodSandboxResponse response = RUNTIME__V1__RUN_POD_SANDBOX_RESPONSE__INIT;
    const Runtime__V1__PodSandboxConfig *config = request->config;
    g_autoptr(GPtrArray) labels = NULL;
    g_autoptr(GError) error = NULL;
    g_autofree char *id = NULL;
    CriSimPodSpec spec = {0};
    Pod *pod;

    if (!config || !config->metadata) {
        reply_error(reply, GRPC_STATUS_INVALID_ARGUMENT, "sandbox config must include metadata");
        return;
    }
    labels = g_ptr_array_new();
    for (size_t i = 0; i < config->n_labels; i++) {
        g_ptr_array_add(labels, config->labels[i]->key);
        g_ptr_array_add(labels, config->labels[i]->value);
    }
    g_ptr_array_add(labels, NULL);

    id = generate_id(self, self->sandbox_prefix);
    spec.id = id;
    spec.uid = config->metadata->uid;
    spec.name = config->metadata->name;
    spec.namespace_ = config->metadata->namespace_;
    spec.attempt = config->metadata->attempt;
    spec.labels = (const char *const *)labels->pdata;
    pod = pod_add(self, &spec, &error);
    if (!pod) {
        reply_error(reply, GRPC_STATUS_INVALID_ARGUMENT, "%s", error->message);
        return;
    }
    response.pod_sandbox_id = pod->id;
    reply->message = pack(&response.base);
}

static void
serve_create_container(CriSim *self, const Runtime__V1__CreateContainerRequest *request,
                       Reply *reply)
{
    Runtime__V1__CreateContainerResponse response = RUNTIME__V1__CREATE_CONTAINER_RESPONSE__INIT;
    const Runtime__V1__ContainerConfig *config = request->config;
    Pod *pod = g_hash_table_lookup(self->pods_by_id, request->pod_sandbox_id);
    g_autoptr(GPtrArray) labels = NULL;
    g_autoptr(GError) error = NULL;
    CriSimContainerSpec spec = {0};
    Container *container;

    if (!pod) {
        reply_error(reply, GRPC_STATUS_NOT_FOUND, "sandbox %s not found", request->pod_sandbox_id);
        return;
    }
    if (!config || !config->metadata) {
        reply_error(reply, GRPC_STATUS_INVALID_ARGUMENT, "container config must include metadata");
        return;
    }
    labels = g_ptr_array_new();
    for (size_t i = 0; i < config->n_labels; i++) {
        g_ptr_array_add(labels, config->labels[i]->key);
        g_ptr_array_add(labels, config->labels[i]->value);
    }
    /* What kubelet always sets, so a PLEG can map the container to its pod. */
    if (!labels_get(labels, LABEL_POD_UID)) {
        g_ptr_array_add(labels, (char *)LABEL_POD_UID);
        g_ptr_array_add(labels, pod->uid);
    }
    g_ptr_array_add(labels, NULL);

    spec.pod_uid = pod->uid;
    spec.name = config->metadata->name;
    spec.attempt = config->metadata->attempt;
    spec.image = config->image && config->image->image && *config->image->image
                     ? config->image->image
                     : NULL;
    spec.state = CRI_SIM_CONTAINER_CREATED;
    spec.labels = (const char *const *)labels->pdata;
    container = container_add(self, pod, &spec, NULL, &error);
    if (!container) {
        reply_error(reply, GRPC_STATUS_ALREADY_EXISTS, "%s", error->message);
        return;
    }
    response.container_id = container->id;
    reply->message = pack(&response.base);
}

static void
serve_start_container(CriSim *self, const Runtime__V1__StartContainerRequest *request,
                      Reply *reply)
{
    Container *container = g_hash_table_lookup(self->containers_by_id, request->container_id);
    g_autoptr(GError) error = NULL;

    if (!container)
        reply_error(reply, GRPC_STATUS_NOT_FOUND, "container %s not found", request->container_id);
    else if (!container_start(self, container, &error))
        reply_error(reply, GRPC_STATUS_FAILED_PRECONDITION, "%s", error->message);
    else
        reply_empty(reply, &runtime__v1__start_container_response__descriptor);
}

static void
serve_stop_container(CriSim *self, const Runtime__V1__StopContainerRequest *request, Reply *reply)
{
    Container *container = g_hash_table_lookup(self->containers_by_id, request->container_id);

    /* Stopping what is gone or stopped is not an error in the CRI. */
    if (container && container->state != CRI_SIM_CONTAINER_EXITED) {
        gboolean graceful = request->timeout > 0;

        container_exit(self, container, graceful ? 0 : 137, graceful ? "Completed" : "Error",
                       NULL);
    }
    reply_empty(reply, &runtime__v1__stop_container_response__descriptor);
}

static void
serve_remove_container(CriSim *self, const Runtime__V1__RemoveContainerRequest *request,
                       Reply *reply)
{
    Container *container = g_hash_table_lookup(self->containers_by_id, request->container_id);

    if (container)
        container_remove(self, container);
    reply_empty(reply, &runtime__v1__remove_container_response__descriptor);
}

static void
serve_stop_pod_sandbox(CriSim *self, const Runtime__V1__StopPodSandboxRequest *request,
                       Reply *reply)
{
    Pod *pod = g_hash_table_lookup(self->pods_by_id, request->pod_sandbox_id);

    if (pod)
        pod_stop(self, pod);
    reply_empty(reply, &runtime__v1__stop_pod_sandbox_response__descriptor);
}

static void
serve_remove_pod_sandbox(CriSim *self, const Runtime__V1__RemovePodSandboxRequest *request,
                         Reply *reply)
{
    Pod *pod = g_hash_table_lookup(self->pods_by_id, request->pod_sandbox_id);

    if (pod)
        pod_remove(self, pod);
    reply_empty(reply, &runtime__v1__remove_pod_sandbox_response__descriptor);
}

typedef void (*ServeFunc)(CriSim *self, const void *request, Reply *reply);

static const struct {
    const char *method;
    const ProtobufCMessageDescriptor *request;
    ServeFunc serve;
} methods[] = {
    {"Version", &runtime__v1__version_request__descriptor, (ServeFunc)serve_version},
    {"Status", &runtime__v1__status_request__descriptor, (ServeFunc)serve_status},
    {"ListPodSandbox", &runtime__v1__list_pod_sandbox_request__descriptor,
     (ServeFunc)serve_list_pod_sandbox},
    {"PodSandboxStatus", &runtime__v1__pod_sandbox_status_request__descriptor,
     (ServeFunc)serve_pod_sandbox_status},
    {"ListContainers", &runtime__v1__list_containers_request__descriptor,
     (ServeFunc)serve_list_containers},
    {"ContainerStatus", &runtime__v1__container_status_request__descriptor,
     (ServeFunc)serve_container_status},
    {"RunPodSandbox", &runtime__v1__run_pod_sandbox_request__descriptor,
     (ServeFunc)serve_run_pod_sandbox},
    {"StopPodSandbox", &runtime__v1__stop_pod_sandbox_request__descriptor,
     (ServeFunc)serve_stop_pod_sandbox},
    {"RemovePodSandbox", &runtime__v1__remove_pod_sandbox_request__descriptor,
     (ServeFunc)serve_remove_pod_sandbox},
    {"CreateContainer", &runtime__v1__create_container_request__descriptor,
     (ServeFunc)serve_create_container},
    {"StartContainer", &runtime__v1__start_container_request__descriptor,
     (ServeFunc)serve_start_container},
    {"StopContainer", &runtime__v1__stop_container_request__descriptor,
     (ServeFunc)serve_stop_container},
    {"RemoveContainer", &runtime__v1__remove_container_request__descriptor,
     (ServeFunc)serve_remove_container},
};

static void
reply_unimplemented(Reply *reply, const char *method)
{
    reply_error(reply, GRPC_STATUS_UNIMPLEMENTED, "unknown method %s for service %s", method,
                SERVICE);
}

static void
failure_details(Reply *reply, grpc_status_code code, const char *method)
{
    if (code == GRPC_STATUS_UNIMPLEMENTED)
        reply_unimplemented(reply, method);
    else
        reply_error(reply, code, "cri-sim: scripted failure of %s", method);
}

/* Decodes the request of @method, kept as its last request; NULL when it does not decode. */
static ProtobufCMessage *
take_request(CriSim *self, const char *method, grpc_byte_buffer *buffer,
             const ProtobufCMessageDescriptor *descriptor)
{
    g_autoptr(GBytes) request_bytes = NULL;
    gsize size;
    const guint8 *data;

    if (buffer) {
        grpc_byte_buffer_reader reader;
        grpc_slice slice;

        grpc_byte_buffer_reader_init(&reader, buffer);
        slice = grpc_byte_buffer_reader_readall(&reader);
        grpc_byte_buffer_reader_destroy(&reader);
        request_bytes = g_bytes_new(GRPC_SLICE_START_PTR(slice), GRPC_SLICE_LENGTH(slice));
        grpc_slice_unref(slice);
    } else {
        request_bytes = g_bytes_new(NULL, 0);
    }
    g_hash_table_replace(self->last_requests, g_strdup(method), g_bytes_ref(request_bytes));

    data = g_bytes_get_data(request_bytes, &size);
    return protobuf_c_message_unpack(descriptor, NULL, size, data);
}

static void
serve(CriSim *self, const char *method, grpc_byte_buffer *buffer, Reply *reply)
{
    ProtobufCMessage *request;

    for (gsize i = 0; i < G_N_ELEMENTS(methods); i++) {
        if (!g_str_equal(methods[i].method, method))
            continue;

        request = take_request(self, method, buffer, methods[i].request);
        if (!request) {
            reply_error(reply, GRPC_STATUS_INVALID_ARGUMENT, "cannot decode %s",
                        methods[i].request->name);
            return;
        }
        methods[i].serve(self, request, reply);
        protobuf_c_message_free_unpacked(request, NULL);
        return;
    }
    reply_unimplemented(reply, method);
}

/* A list stream (KEP-5825): the whole listing at once, cut into messages of list_batch items,
 * then a clean end, or the scripted failure after list_fail_after messages. */
static void
list_stream_start(CriSim *self, Call *call)
{
    g_autoptr(GPtrArray) scratch = g_ptr_array_new_with_free_func(g_free);
    gboolean sandboxes = g_str_equal(call->method, STREAM_SANDBOXES);
    ProtobufCMessage *request;
    gpointer *items;
    size_t n_items;
    guint n_messages = 0;

    request = take_request(self, call->method, call->request,
                           sandboxes ? &runtime__v1__stream_pod_sandboxes_request__descriptor
                                     : &runtime__v1__stream_containers_request__descriptor);
    if (!request) {
        call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, "cannot decode the request", NULL);
        return;
    }
    if (sandboxes)
        items = (gpointer *)collect_sandboxes(
            self, ((Runtime__V1__StreamPodSandboxesRequest *)request)->filter, scratch, &n_items);
    else
        items = (gpointer *)collect_containers(
            self, ((Runtime__V1__StreamContainersRequest *)request)->filter, scratch, &n_items);
    protobuf_c_message_free_unpacked(request, NULL);

    for (size_t start = 0; start < n_items; start += self->list_batch) {
        size_t count = MIN((size_t)self->list_batch, n_items - start);

        if (self->list_fail_after >= 0 && n_messages == (guint)self->list_fail_after)
            break;
        if (sandboxes) {
            Runtime__V1__StreamPodSandboxesResponse response =
                RUNTIME__V1__STREAM_POD_SANDBOXES_RESPONSE__INIT;

            response.n_pod_sandboxes = count;
            response.pod_sandboxes = (Runtime__V1__PodSandbox **)items + start;
            g_queue_push_tail(&call->outbox, pack(&response.base));
        } else {
            Runtime__V1__StreamContainersResponse response =
                RUNTIME__V1__STREAM_CONTAINERS_RESPONSE__INIT;

            response.n_containers = count;
            response.containers = (Runtime__V1__Container **)items + start;
            g_queue_push_tail(&call->outbox, pack(&response.base));
        }
        n_messages++;
    }
    call->ending = TRUE;
    if (self->list_fail_after >= 0) {
        call->end_status = self->list_fail_code;
        call->end_details = g_strdup_printf("cri-sim: scripted failure of %s after %u messages",
                                            call->method, n_messages);
    } else {
        call->end_status = GRPC_STATUS_OK;
    }
    stream_kick(call);
}

/* Answers a unary call now: its scripted failure or the real thing. */
static void
call_answer(CriSim *self, Call *call)
{
    Reply reply = {GRPC_STATUS_OK, NULL, NULL};

    if (call->fail_status != GRPC_STATUS_OK)
        reply_error(&reply, call->fail_status, "%s", call->fail_details);
    else
        serve(self, call->method, call->request, &reply);
    call_finish(call, reply.status, reply.details, reply.message);
    g_free(reply.details);
    g_clear_pointer(&reply.message, g_bytes_unref);
}

/* What a call gets once it is due: a subscription, a list stream, or its answer. */
static void
call_start(CriSim *self, Call *call)
{
    if (call->is_events)
        subscribe(self, call);
    else if (call->is_stream)
        list_stream_start(self, call);
    else
        call_answer(self, call);
}

/* The request message is in: decide what the call gets. */
static void
call_received(CriSim *self, Call *call)
{
    int code, delay_ms;

    if (call->closed || call->status_sent)
        return;
    if (self->state != SERVER_SERVING) {
        call_finish(call, GRPC_STATUS_UNAVAILABLE, GOING_AWAY, NULL);
        return;
    }
    code = rule_take_failure(self, call->method);
    delay_ms = rule_delay(self, call->method);
    if (code != 0) {
        Reply reply = {0};

        failure_details(&reply, code, call->method);
        call->fail_status = reply.status;
        call->fail_details = reply.details;
    }

    if (call->is_stream) {
        if (call->is_events ? self->events_unimplemented : self->list_streams_unimplemented) {
            Reply reply = {0};

            reply_unimplemented(&reply, call->method);
            call_finish(call, reply.status, reply.details, NULL);
            g_free(reply.details);
            return;
        }
        if (call->fail_status != GRPC_STATUS_OK) {
            call_finish(call, call->fail_status, call->fail_details, NULL);
            return;
        }
    }

    if (delay_ms < 0) {
        /* Never answered: the call ends when the client gives up or the server stops. */
    } else if (delay_ms > 0) {
        timer_add(self, call, delay_ms);
    } else {
        call_start(self, call);
    }
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
            call_received(self, call);
        break;
    case OP_CLOSE:
        call->closed = TRUE;
        remove_subscriber(self, call);
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
            stream_kick(call);
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
        call_start(self, call);
    }
}

/* ---- the server ---- */

static gboolean
server_start(CriSim *self, GError **error)
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

/* Leaves a socket file nobody listens on, as a killed server does. */
static void
leave_stale_socket(CriSim *self)
{
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    int fd;

    if (g_file_test(self->socket_path, G_FILE_TEST_EXISTS))
        return;
    if (strlen(self->socket_path) >= sizeof(address.sun_path))
        return;
    strcpy(address.sun_path, self->socket_path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    if (bind(fd, (struct sockaddr *)&address, sizeof(address)) < 0)
        g_debug("cannot leave a stale socket at %s: %s", self->socket_path, g_strerror(errno));
    close(fd);
}

/* Stops the serving server: streams end with UNAVAILABLE, other calls are cancelled.  Waits
 * (releasing the lock) until every call of it is gone, then destroys it. */
static void
server_stop(CriSim *self)
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
            stream_end(self, call, GRPC_STATUS_UNAVAILABLE, GOING_AWAY);
        else
            call_finish(call, GRPC_STATUS_UNAVAILABLE, GOING_AWAY, NULL);
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

static gpointer
server_thread_main(gpointer data)
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

            if (!server_start(self, &error)) {
                g_debug("cannot come back, retrying: %s", error->message);
                self->come_back_at = g_get_monotonic_time() + IDLE_WAKEUP_USEC;
            }
        }
        g_cond_broadcast(&self->cond);
        g_mutex_unlock(&self->lock);
    }
    return NULL;
}

CriSim *
cri_sim_new(const char *socket_path, GError **error)
{
    CriSim *self;

    g_return_val_if_fail(socket_path && *socket_path, NULL);

    grpc_init();
    self = g_new0(CriSim, 1);
    self->socket_path = g_strdup(socket_path);
    self->address = g_strconcat("unix:", socket_path, NULL);
    g_mutex_init(&self->lock);
    g_cond_init(&self->cond);
    self->state = SERVER_AWAY;
    self->pods = g_ptr_array_new_with_free_func((GDestroyNotify)pod_free);
    self->containers = g_ptr_array_new_with_free_func((GDestroyNotify)container_free);
    self->pods_by_id = g_hash_table_new(g_str_hash, g_str_equal);
    self->pods_by_uid = g_hash_table_new(g_str_hash, g_str_equal);
    self->containers_by_id = g_hash_table_new(g_str_hash, g_str_equal);
    self->sandbox_prefix = g_strdup("sb-");
    self->container_prefix = g_strdup("ctr-");
    self->runtime_name = g_strdup("cri-sim");
    self->runtime_version = g_strdup("0.1.0");
    self->n_calls = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    self->last_requests =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)g_bytes_unref);
    self->rules = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    self->calls = g_ptr_array_new();
    self->subscribers = g_ptr_array_new();
    g_queue_init(&self->timers);
    self->auto_events = TRUE;
    self->greeting = g_array_new(FALSE, TRUE, sizeof(CriSimEvent));
    self->list_batch = DEFAULT_LIST_BATCH;
    self->list_fail_after = -1;
    self->cq = grpc_completion_queue_create_for_next(NULL);

    g_mutex_lock(&self->lock);
    if (!server_start(self, error)) {
        g_mutex_unlock(&self->lock);
        self->state = SERVER_STOPPED;
        cri_sim_free(self);
        return NULL;
    }
    g_mutex_unlock(&self->lock);
    self->thread = g_thread_new("cri-sim", server_thread_main, self);
    return self;
}

static void
greeting_clear(CriSim *self)
{
    for (guint i = 0; i < self->greeting->len; i++)
        g_free((char *)g_array_index(self->greeting, CriSimEvent, i).container_id);
    g_array_set_size(self->greeting, 0);
}

void
cri_sim_free(CriSim *self)
{
    if (!self)
        return;

    g_mutex_lock(&self->lock);
    while (self->state == SERVER_STOPPING)
        g_cond_wait(&self->cond, &self->lock);
    if (self->state == SERVER_SERVING)
        server_stop(self);
    self->state = SERVER_STOPPED;
    g_mutex_unlock(&self->lock);

    grpc_completion_queue_shutdown(self->cq);
    if (self->thread)
        g_thread_join(self->thread);
    else
        while (grpc_completion_queue_next(self->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL)
                   .type != GRPC_QUEUE_SHUTDOWN)
            ;
    grpc_completion_queue_destroy(self->cq);
    g_unlink(self->socket_path);

    g_assert(self->n_live == 0);
    g_ptr_array_unref(self->calls);
    g_ptr_array_unref(self->subscribers);
    g_hash_table_unref(self->pods_by_id);
    g_hash_table_unref(self->pods_by_uid);
    g_hash_table_unref(self->containers_by_id);
    g_ptr_array_unref(self->containers);
    g_ptr_array_unref(self->pods);
    g_hash_table_unref(self->n_calls);
    g_hash_table_unref(self->last_requests);
    g_hash_table_unref(self->rules);
    greeting_clear(self);
    g_array_unref(self->greeting);
    g_free(self->sandbox_prefix);
    g_free(self->container_prefix);
    g_free(self->runtime_name);
    g_free(self->runtime_version);
    g_free(self->socket_path);
    g_free(self->address);
    g_cond_clear(&self->cond);
    g_mutex_clear(&self->lock);
    g_free(self);

    grpc_shutdown();
}

const char *
cri_sim_get_socket_path(CriSim *self)
{
    return self->socket_path;
}

void
cri_sim_set_version(CriSim *self, const char *runtime_name, const char *runtime_version)
{
    g_mutex_lock(&self->lock);
    g_free(self->runtime_name);
    g_free(self->runtime_version);
    self->runtime_name = g_strdup(runtime_name);
    self->runtime_version = g_strdup(runtime_version);
    g_mutex_unlock(&self->lock);
}

void
cri_sim_set_id_prefixes(CriSim *self, const char *sandbox_prefix, const char *container_prefix)
{
    g_mutex_lock(&self->lock);
    g_free(self->sandbox_prefix);
    g_free(self->container_prefix);
    self->sandbox_prefix = g_strdup(sandbox_prefix);
    self->container_prefix = g_strdup(container_prefix);
    g_mutex_unlock(&self->lock);
}

/* ---- public state changes ---- */

gboolean
cri_sim_add_pod_full(CriSim *self, const CriSimPodSpec *spec, char **ret_id, GError **error)
{
    Pod *pod;

    g_mutex_lock(&self->lock);
    pod = pod_add(self, spec, error);
    if (pod && ret_id)
        *ret_id = g_strdup(pod->id);
    g_mutex_unlock(&self->lock);
    return pod != NULL;
}

gboolean
cri_sim_add_pod(CriSim *self, const char *uid, const char *name, GError **error)
{
    CriSimPodSpec spec = {.uid = uid, .name = name};
    gboolean ok;

    g_mutex_lock(&self->lock);
    if (uid && g_hash_table_contains(self->pods_by_uid, uid)) {
        g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_EXISTS, "pod \"%s\" exists", uid);
        ok = FALSE;
    } else {
        ok = pod_add(self, &spec, error) != NULL;
    }
    g_mutex_unlock(&self->lock);
    return ok;
}

gboolean
cri_sim_add_container_full(CriSim *self, const CriSimContainerSpec *spec, char **ret_id,
                           GError **error)
{
    Container *container = NULL;
    Pod *pod;

    g_mutex_lock(&self->lock);
    pod = find_pod_by_uid(self, spec->pod_uid, error);
    if (pod)
        container = container_add(self, pod, spec, NULL, error);
    if (container && ret_id)
        *ret_id = g_strdup(container->id);
    g_mutex_unlock(&self->lock);
    return container != NULL;
}

gboolean
cri_sim_add_container(CriSim *self, const char *pod_uid, const char *id, const char *name,
                      GError **error)
{
    CriSimContainerSpec spec = {.pod_uid = pod_uid, .id = id, .name = name};

    return cri_sim_add_container_full(self, &spec, NULL, error);
}

gboolean
cri_sim_start_container(CriSim *self, const char *id, GError **error)
{
    Container *container;
    gboolean ok;

    g_mutex_lock(&self->lock);
    container = find_container(self, id, error);
    ok = container && container_start(self, container, error);
    g_mutex_unlock(&self->lock);
    return ok;
}

gboolean
cri_sim_exit_container(CriSim *self, const char *id, int exit_code, const char *reason,
                       GError **error)
{
    Container *container;
    gboolean ok;

    g_mutex_lock(&self->lock);
    container = find_container(self, id, error);
    ok = container && container_exit(self, container, exit_code, reason, error);
    g_mutex_unlock(&self->lock);
    return ok;
}

gboolean
cri_sim_remove_container(CriSim *self, const char *id, GError **error)
{
    Container *container;

    g_mutex_lock(&self->lock);
    container = find_container(self, id, error);
    if (container)
        container_remove(self, container);
    g_mutex_unlock(&self->lock);
    return container != NULL;
}

gboolean
cri_sim_stop_pod(CriSim *self, const char *pod_uid, GError **error)
{
    Pod *pod;

    g_mutex_lock(&self->lock);
    pod = find_pod_by_uid(self, pod_uid, error);
    if (pod)
        pod_stop(self, pod);
    g_mutex_unlock(&self->lock);
    return pod != NULL;
}

gboolean
cri_sim_remove_pod(CriSim *self, const char *pod_uid, GError **error)
{
    Pod *pod;

    g_mutex_lock(&self->lock);
    pod = find_pod_by_uid(self, pod_uid, error);
    if (pod)
        pod_remove(self, pod);
    g_mutex_unlock(&self->lock);
    return pod != NULL;
}

gboolean
cri_sim_set_container_label(CriSim *self, const char *id, const char *key, const char *value,
                            GError **error)
{
    Container *container;

    g_mutex_lock(&self->lock);
    container = find_container(self, id, error);
    if (container)
        labels_set(container->labels, key, value);
    g_mutex_unlock(&self->lock);
    return container != NULL;
}

void
cri_sim_bulk(CriSim *self, guint n_pods, guint containers_per_pod)
{
    cri_sim_bulk_full(self, n_pods, containers_per_pod, 0);
}

void
cri_sim_bulk_full(CriSim *self, guint n_pods, guint containers_per_pod, guint annotation_bytes)
{
    gboolean auto_events;

    g_mutex_lock(&self->lock);
    auto_events = self->auto_events;
    self->auto_events = FALSE;
    for (guint i = 0; i < n_pods; i++) {
        g_autofree char *uid = NULL;
        g_autofree char *sandbox_id = NULL;
        CriSimPodSpec pod_spec = {0};
        Pod *pod;

        do {
            g_free(uid);
            uid = g_strdup_printf("bulk-%u", self->next_bulk++);
        } while (g_hash_table_contains(self->pods_by_uid, uid));
        sandbox_id = generate_id(self, "sb-bulk-");
        pod_spec.id = sandbox_id;
        pod_spec.uid = uid;
        pod = pod_add(self, &pod_spec, NULL);
        g_assert(pod);
        for (guint c = 0; c < containers_per_pod; c++) {
            CriSimContainerSpec spec = {.state = CRI_SIM_CONTAINER_RUNNING};
            g_autofree char *id = g_strdup_printf("%s-%u", uid, c);

            Container *container;

            spec.name = id;
            container = container_add(self, pod, &spec, g_steal_pointer(&id), NULL);
            if (container)
                container->padding_bytes = annotation_bytes;
            else
                g_debug("bulk: container of %s not added", uid);
        }
    }
    self->auto_events = auto_events;
    g_mutex_unlock(&self->lock);
}

char *
cri_sim_get_sandbox_id(CriSim *self, const char *pod_uid)
{
    Pod *pod;
    char *id;

    g_mutex_lock(&self->lock);
    pod = g_hash_table_lookup(self->pods_by_uid, pod_uid);
    id = pod ? g_strdup(pod->id) : NULL;
    g_mutex_unlock(&self->lock);
    return id;
}

gboolean
cri_sim_get_container_state(CriSim *self, const char *id, CriSimContainerState *ret_state)
{
    Container *container;

    g_mutex_lock(&self->lock);
    container = g_hash_table_lookup(self->containers_by_id, id);
    if (container && ret_state)
        *ret_state = container->state;
    g_mutex_unlock(&self->lock);
    return container != NULL;
}

guint
cri_sim_get_n_pods(CriSim *self)
{
    guint n;

    g_mutex_lock(&self->lock);
    n = self->pods->len;
    g_mutex_unlock(&self->lock);
    return n;
}

guint
cri_sim_get_n_containers(CriSim *self)
{
    guint n;

    g_mutex_lock(&self->lock);
    n = self->containers->len;
    g_mutex_unlock(&self->lock);
    return n;
}

/* ---- public events ---- */

guint
cri_sim_emit(CriSim *self, const CriSimEvent *event)
{
    g_autoptr(GBytes) bytes = NULL;
    guint n;

    g_mutex_lock(&self->lock);
    bytes = build_event(self, event->type, event->container_id, NULL, event->flags,
                        event->created_at_ns);
    n = deliver(self, bytes);
    g_mutex_unlock(&self->lock);
    return n;
}

void
cri_sim_set_auto_events(CriSim *self, gboolean enabled)
{
    g_mutex_lock(&self->lock);
    self->auto_events = enabled;
    g_mutex_unlock(&self->lock);
}

void
cri_sim_set_sandbox_events(CriSim *self, gboolean enabled)
{
    g_mutex_lock(&self->lock);
    self->sandbox_events = enabled;
    g_mutex_unlock(&self->lock);
}

void
cri_sim_set_deliver_one(CriSim *self, gboolean enabled)
{
    g_mutex_lock(&self->lock);
    self->deliver_one = enabled;
    g_mutex_unlock(&self->lock);
}

void
cri_sim_set_stream_greeting(CriSim *self, const CriSimEvent *events, guint n_events,
                            gboolean end_after)
{
    g_mutex_lock(&self->lock);
    greeting_clear(self);
    for (guint i = 0; i < n_events; i++) {
        CriSimEvent copy = events[i];

        copy.container_id = g_strdup(events[i].container_id);
        g_array_append_val(self->greeting, copy);
    }
    self->greeting_end = end_after;
    g_mutex_unlock(&self->lock);
}

void
cri_sim_end_streams(CriSim *self, int status, const char *message)
{
    g_mutex_lock(&self->lock);
    while (self->subscribers->len > 0)
        stream_end(self, self->subscribers->pdata[0], status,
                   message ? message : status == 0 ? "" : "cri-sim: stream ended");
    g_mutex_unlock(&self->lock);
}

void
cri_sim_set_events_unimplemented(CriSim *self, gboolean unimplemented)
{
    g_mutex_lock(&self->lock);
    self->events_unimplemented = unimplemented;
    g_mutex_unlock(&self->lock);
}

void
cri_sim_set_list_streams_unimplemented(CriSim *self, gboolean unimplemented)
{
    g_mutex_lock(&self->lock);
    self->list_streams_unimplemented = unimplemented;
    g_mutex_unlock(&self->lock);
}

void
cri_sim_set_list_batch(CriSim *self, guint items)
{
    g_return_if_fail(items > 0);

    g_mutex_lock(&self->lock);
    self->list_batch = items;
    g_mutex_unlock(&self->lock);
}

void
cri_sim_set_list_stream_failure(CriSim *self, int after_messages, int status)
{
    g_mutex_lock(&self->lock);
    self->list_fail_after = status == 0 ? -1 : MAX(after_messages, 0);
    self->list_fail_code = status;
    g_mutex_unlock(&self->lock);
}

/* ---- public server control ---- */

gboolean
cri_sim_go_away(CriSim *self, int away_ms, gboolean stale_socket, GError **error)
{
    g_mutex_lock(&self->lock);
    if (self->state != SERVER_SERVING) {
        g_mutex_unlock(&self->lock);
        g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_STATE, "not serving");
        return FALSE;
    }
    server_stop(self);
    if (stale_socket)
        leave_stale_socket(self);
    else
        g_unlink(self->socket_path);
    if (self->state == SERVER_AWAY)
        self->come_back_at =
            away_ms < 0 ? 0 : MAX(g_get_monotonic_time() + (gint64)away_ms * 1000, 1);
    g_mutex_unlock(&self->lock);
    return TRUE;
}

gboolean
cri_sim_come_back(CriSim *self, GError **error)
{
    gboolean ok = TRUE;

    g_mutex_lock(&self->lock);
    while (self->state == SERVER_STOPPING)
        g_cond_wait(&self->cond, &self->lock);
    if (self->state == SERVER_AWAY)
        ok = server_start(self, error);
    g_mutex_unlock(&self->lock);
    return ok;
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

void
cri_sim_set_delay(CriSim *self, const char *method, int delay_ms)
{
    g_mutex_lock(&self->lock);
    rule_get(self, method)->delay_ms = delay_ms;
    g_mutex_unlock(&self->lock);
}

void
cri_sim_set_fail(CriSim *self, const char *method, int code, int times)
{
    Rule *rule;

    g_mutex_lock(&self->lock);
    rule = rule_get(self, method);
    rule->fail_code = times == 0 ? 0 : code;
    rule->fail_times = times;
    g_mutex_unlock(&self->lock);
}

/* ---- public counters ---- */

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

guint
cri_sim_get_n_subscribers(CriSim *self)
{
    guint n;

    g_mutex_lock(&self->lock);
    n = self->subscribers->len;
    g_mutex_unlock(&self->lock);
    return n;
}

guint
cri_sim_get_n_streams(CriSim *self)
{
    guint n;

    g_mutex_lock(&self->lock);
    n = self->n_streams;
    g_mutex_unlock(&self->lock);
    return n;
}

guint
cri_sim_get_n_events_sent(CriSim *self)
{
    guint n;

    g_mutex_lock(&self->lock);
    n = self->n_events_sent;
    g_mutex_unlock(&self->lock);
    return n;
}

gboolean
cri_sim_wait_subscribers(CriSim *self, guint n, int timeout_ms)
{
    gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
    gboolean reached;

    g_mutex_lock(&self->lock);
    while (self->subscribers->len != n)
        if (!g_cond_wait_until(&self->cond, &self->lock, deadline))
            break;
    reached = self->subscribers->len == n;
    g_mutex_unlock(&self->lock);
    return reached;
}

gboolean
cri_sim_wait_events_sent(CriSim *self, guint n, int timeout_ms)
{
    gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
    gboolean reached;

    g_mutex_lock(&self->lock);
    while (self->n_events_sent < n)
        if (!g_cond_wait_until(&self->cond, &self->lock, deadline))
            break;
    reached = self->n_events_sent >= n;
    g_mutex_unlock(&self->lock);
    return reached;
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
