/* SPDX-License-Identifier: Apache-2.0 */
/*
 * In-process fake CRI runtime for the CRI client tests.  One thread accepts calls (a generic
 * grpc_server_request_call is always posted, so unknown methods get UNIMPLEMENTED instead of
 * hanging) and each call is served by a thread with its own completion queue.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include <glib/gstdio.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include "api.pb-c.h"
#include "fake-cri-server.h"

typedef struct {
    char *id;
    char *name;
    char *uid;
    char *namespace_;
    guint32 attempt;
    Runtime__V1__PodSandboxState state;
    gint64 created_at;
    char *ip;
    char *extra_ip;
} FakeSandbox;

typedef struct {
    char *id;
    char *sandbox_id;
    char *name;
    guint32 attempt;
    char *image;
    Runtime__V1__ContainerState state;
    gint64 created_at;
    gint64 started_at;
    gint64 finished_at;
    gint32 exit_code;
    char *reason;
    char *pod_uid_label; /* NULL: no labels */
} FakeContainer;

struct _FakeCriServer {
    char *socket_path;
    grpc_server *server;
    grpc_completion_queue *cq;
    GThread *accept_thread;
    gint stopping;

    GMutex lock; /* protects everything below */
    GPtrArray *sandboxes;
    GPtrArray *containers;
    GPtrArray *workers;
    GHashTable *last_requests;
    guint next_id;
    guint n_calls;
    gboolean hang;
    guint n_events;
    gboolean hang_after_events;
    gboolean events_unimplemented;
    gsize padding;
};

typedef struct {
    FakeCriServer *server;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array metadata;
    grpc_completion_queue *cq;
} FakeCall;

static int shutdown_tag, request_tag;

static void
fake_sandbox_free(FakeSandbox *sandbox)
{
    g_free(sandbox->id);
    g_free(sandbox->name);
    g_free(sandbox->uid);
    g_free(sandbox->namespace_);
    g_free(sandbox->ip);
    g_free(sandbox->extra_ip);
    g_free(sandbox);
}

static void
fake_container_free(FakeContainer *container)
{
    g_free(container->id);
    g_free(container->sandbox_id);
    g_free(container->name);
    g_free(container->image);
    g_free(container->reason);
    g_free(container->pod_uid_label);
    g_free(container);
}

static FakeSandbox *
add_sandbox(FakeCriServer *self, const char *id, const char *name, const char *uid,
            const char *namespace_, Runtime__V1__PodSandboxState state, const char *ip,
            const char *extra_ip)
{
    FakeSandbox *sandbox = g_new0(FakeSandbox, 1);

    sandbox->id = g_strdup(id);
    sandbox->name = g_strdup(name);
    sandbox->uid = g_strdup(uid);
    sandbox->namespace_ = g_strdup(namespace_);
    sandbox->state = state;
    sandbox->created_at = g_get_real_time() * 1000;
    sandbox->ip = g_strdup(ip);
    sandbox->extra_ip = g_strdup(extra_ip);
    g_ptr_array_add(self->sandboxes, sandbox);
    return sandbox;
}

static FakeContainer *
add_container(FakeCriServer *self, const char *id, const char *sandbox_id, const char *name,
              Runtime__V1__ContainerState state, const char *pod_uid_label)
{
    FakeContainer *container = g_new0(FakeContainer, 1);

    container->id = g_strdup(id);
    container->sandbox_id = g_strdup(sandbox_id);
    container->name = g_strdup(name);
    container->image = g_strdup("docker.io/library/busybox:latest");
    container->state = state;
    container->created_at = g_get_real_time() * 1000;
    container->pod_uid_label = g_strdup(pod_uid_label);
    g_ptr_array_add(self->containers, container);
    return container;
}

static FakeSandbox *
find_sandbox(FakeCriServer *self, const char *id)
{
    for (guint i = 0; i < self->sandboxes->len; i++) {
        FakeSandbox *sandbox = self->sandboxes->pdata[i];

        if (g_strcmp0(sandbox->id, id) == 0)
            return sandbox;
    }
    return NULL;
}

static FakeContainer *
find_container(FakeCriServer *self, const char *id)
{
    for (guint i = 0; i < self->containers->len; i++) {
        FakeContainer *container = self->containers->pdata[i];

        if (g_strcmp0(container->id, id) == 0)
            return container;
    }
    return NULL;
}

/* ---- responses ---- */

typedef struct {
    grpc_status_code status;
    char *details;
    GBytes *message; /* packed response, NULL on error */
} Reply;

static GBytes *
pack(const ProtobufCMessage *message)
{
    gsize size = protobuf_c_message_get_packed_size(message);
    guint8 *data = g_malloc(size ? size : 1);

    protobuf_c_message_pack(message, data);
    return g_bytes_new_take(data, size);
}

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
fill_sandbox_metadata(Runtime__V1__PodSandboxMetadata *metadata, const FakeSandbox *sandbox)
{
    runtime__v1__pod_sandbox_metadata__init(metadata);
    metadata->name = sandbox->name;
    metadata->uid = sandbox->uid;
    metadata->namespace_ = sandbox->namespace_;
    metadata->attempt = sandbox->attempt;
}

static void
serve_list_pod_sandbox(FakeCriServer *self, Reply *reply)
{
    Runtime__V1__ListPodSandboxResponse response = RUNTIME__V1__LIST_POD_SANDBOX_RESPONSE__INIT;
    guint n = self->sandboxes->len;
    g_autofree Runtime__V1__PodSandbox *items = g_new0(Runtime__V1__PodSandbox, n);
    g_autofree Runtime__V1__PodSandboxMetadata *metadata =
        g_new0(Runtime__V1__PodSandboxMetadata, n);
    g_autofree Runtime__V1__PodSandbox **pointers = g_new0(Runtime__V1__PodSandbox *, n);

    for (guint i = 0; i < n; i++) {
        const FakeSandbox *sandbox = self->sandboxes->pdata[i];

        runtime__v1__pod_sandbox__init(&items[i]);
        fill_sandbox_metadata(&metadata[i], sandbox);
        items[i].id = sandbox->id;
        items[i].metadata = &metadata[i];
        items[i].state = sandbox->state;
        items[i].created_at = sandbox->created_at;
        pointers[i] = &items[i];
    }
    response.n_items = n;
    response.items = pointers;
    reply->message = pack(&response.base);
}

static void
serve_pod_sandbox_status(FakeCriServer *self, const Runtime__V1__PodSandboxStatusRequest *request,
                         Reply *reply)
{
    Runtime__V1__PodSandboxStatusResponse response = RUNTIME__V1__POD_SANDBOX_STATUS_RESPONSE__INIT;
    Runtime__V1__PodSandboxStatus status = RUNTIME__V1__POD_SANDBOX_STATUS__INIT;
    Runtime__V1__PodSandboxMetadata metadata;
    Runtime__V1__PodSandboxNetworkStatus network = RUNTIME__V1__POD_SANDBOX_NETWORK_STATUS__INIT;
    Runtime__V1__PodIP extra = RUNTIME__V1__POD_IP__INIT;
    Runtime__V1__PodIP *extras[] = {&extra};
    FakeSandbox *sandbox = find_sandbox(self, request->pod_sandbox_id);

    if (!sandbox) {
        reply_error(reply, GRPC_STATUS_NOT_FOUND,
                    "an error occurred when try to find sandbox %s: "
                    "not found",
                    request->pod_sandbox_id);
        return;
    }

    fill_sandbox_metadata(&metadata, sandbox);
    status.id = sandbox->id;
    status.metadata = &metadata;
    status.state = sandbox->state;
    status.created_at = sandbox->created_at;
    if (sandbox->ip) {
        network.ip = sandbox->ip;
        if (sandbox->extra_ip) {
            extra.ip = sandbox->extra_ip;
            network.n_additional_ips = 1;
            network.additional_ips = extras;
        }
        status.network = &network;
    }
    response.status = &status;
    reply->message = pack(&response.base);
}

/* The label entries of one container, kept alive until the reply is packed. */
typedef struct {
    Runtime__V1__Container__LabelsEntry entries[2];
    Runtime__V1__Container__LabelsEntry *pointers[2];
} ContainerLabels;

static void
serve_list_containers(FakeCriServer *self, const Runtime__V1__ListContainersRequest *request,
                      Reply *reply)
{
    Runtime__V1__ListContainersResponse response = RUNTIME__V1__LIST_CONTAINERS_RESPONSE__INIT;
    guint n = self->containers->len, n_out = 0;
    g_autofree Runtime__V1__Container *items = g_new0(Runtime__V1__Container, n);
    g_autofree Runtime__V1__ContainerMetadata *metadata = g_new0(Runtime__V1__ContainerMetadata, n);
    g_autofree Runtime__V1__ImageSpec *images = g_new0(Runtime__V1__ImageSpec, n);
    g_autofree ContainerLabels *labels = g_new0(ContainerLabels, n);
    g_autofree Runtime__V1__Container **pointers = g_new0(Runtime__V1__Container *, n);
    g_autofree char *padding = NULL;
    const char *filter_sandbox = NULL;

    if (request->filter && request->filter->pod_sandbox_id && *request->filter->pod_sandbox_id)
        filter_sandbox = request->filter->pod_sandbox_id;
    if (self->padding > 0) {
        padding = g_malloc(self->padding + 1);
        memset(padding, 'x', self->padding);
        padding[self->padding] = '\0';
    }

    for (guint i = 0; i < n; i++) {
        const FakeContainer *container = self->containers->pdata[i];
        Runtime__V1__Container *item = &items[n_out];
        ContainerLabels *item_labels = &labels[n_out];

        if (filter_sandbox && g_strcmp0(filter_sandbox, container->sandbox_id) != 0)
            continue;

        runtime__v1__container__init(item);
        runtime__v1__container_metadata__init(&metadata[n_out]);
        runtime__v1__image_spec__init(&images[n_out]);
        metadata[n_out].name = container->name;
        metadata[n_out].attempt = container->attempt;
        images[n_out].image = container->image;
        item->id = container->id;
        item->pod_sandbox_id = container->sandbox_id;
        item->metadata = &metadata[n_out];
        item->image = &images[n_out];
        item->image_ref = (char *)"sha256:0123456789abcdef";
        item->state = container->state;
        item->created_at = container->created_at;
        if (container->pod_uid_label) {
            runtime__v1__container__labels_entry__init(&item_labels->entries[0]);
            item_labels->entries[0].key = (char *)"io.kubernetes.pod.uid";
            item_labels->entries[0].value = container->pod_uid_label;
            item_labels->pointers[item->n_labels++] = &item_labels->entries[0];
        }
        if (padding && g_str_equal(container->id, "ctr-1")) {
            runtime__v1__container__labels_entry__init(&item_labels->entries[1]);
            item_labels->entries[1].key = (char *)"padding";
            item_labels->entries[1].value = padding;
            item_labels->pointers[item->n_labels++] = &item_labels->entries[1];
        }
        item->labels = item_labels->pointers;
        pointers[n_out++] = item;
    }
    response.n_containers = n_out;
    response.containers = pointers;
    reply->message = pack(&response.base);
}

static void
fill_container_status(Runtime__V1__ContainerStatus *status,
                      Runtime__V1__ContainerMetadata *metadata, Runtime__V1__ImageSpec *image,
                      const FakeContainer *container)
{
    runtime__v1__container_status__init(status);
    runtime__v1__container_metadata__init(metadata);
    runtime__v1__image_spec__init(image);
    metadata->name = container->name;
    metadata->attempt = container->attempt;
    image->image = container->image;
    status->id = container->id;
    status->metadata = metadata;
    status->image = image;
    status->image_ref = (char *)"sha256:0123456789abcdef";
    status->state = container->state;
    status->created_at = container->created_at;
    status->started_at = container->started_at;
    status->finished_at = container->finished_at;
    status->exit_code = container->exit_code;
    status->reason = container->reason ? container->reason : (char *)"";
}

static void
serve_container_status(FakeCriServer *self, const Runtime__V1__ContainerStatusRequest *request,
                       Reply *reply)
{
    Runtime__V1__ContainerStatusResponse response = RUNTIME__V1__CONTAINER_STATUS_RESPONSE__INIT;
    Runtime__V1__ContainerStatus status;
    Runtime__V1__ContainerMetadata metadata;
    Runtime__V1__ImageSpec image;
    FakeContainer *container = find_container(self, request->container_id);

    if (!container) {
        reply_error(reply, GRPC_STATUS_NOT_FOUND,
                    "an error occurred when try to find container "
                    "\"%s\": not found",
                    request->container_id);
        return;
    }
    fill_container_status(&status, &metadata, &image, container);
    response.status = &status;
    reply->message = pack(&response.base);
}

static void
serve_version(Reply *reply)
{
    Runtime__V1__VersionResponse response = RUNTIME__V1__VERSION_RESPONSE__INIT;

    response.version = (char *)"0.1.0";
    response.runtime_name = (char *)FAKE_CRI_RUNTIME_NAME;
    response.runtime_version = (char *)FAKE_CRI_RUNTIME_VERSION;
    response.runtime_api_version = (char *)"v1";
    reply->message = pack(&response.base);
}

static void
serve_run_pod_sandbox(FakeCriServer *self, const Runtime__V1__RunPodSandboxRequest *request,
                      Reply *reply)
{
    Runtime__V1__RunPodSandboxResponse response = RUNTIME__V1__RUN_POD_SANDBOX_RESPONSE__INIT;
    const Runtime__V1__PodSandboxMetadata *metadata =
        request->config ? request->config->metadata : NULL;
    g_autofree char *id = NULL;

    if (!metadata) {
        reply_error(reply, GRPC_STATUS_INVALID_ARGUMENT, "sandbox config must include metadata");
        return;
    }
    id = g_strdup_printf("sb-%u", ++self->next_id);
    add_sandbox(self, id, metadata->name, metadata->uid, metadata->namespace_,
                RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_READY, NULL, NULL);
    response.pod_sandbox_id = id;
    reply->message = pack(&response.base);
}

static void
serve_create_container(FakeCriServer *self, const Runtime__V1__CreateContainerRequest *request,
                       Reply *reply)
{
    Runtime__V1__CreateContainerResponse response = RUNTIME__V1__CREATE_CONTAINER_RESPONSE__INIT;
    const Runtime__V1__ContainerConfig *config = request->config;
    FakeSandbox *sandbox = find_sandbox(self, request->pod_sandbox_id);
    g_autofree char *id = NULL;

    if (!sandbox) {
        reply_error(reply, GRPC_STATUS_NOT_FOUND, "sandbox %s not found", request->pod_sandbox_id);
        return;
    }
    if (!config || !config->metadata) {
        reply_error(reply, GRPC_STATUS_INVALID_ARGUMENT, "container config must include metadata");
        return;
    }
    id = g_strdup_printf("ctr-new-%u", ++self->next_id);
    add_container(self, id, sandbox->id, config->metadata->name,
                  RUNTIME__V1__CONTAINER_STATE__CONTAINER_CREATED, sandbox->uid);
    response.container_id = id;
    reply->message = pack(&response.base);
}

static void
serve_empty(const ProtobufCMessageDescriptor *descriptor, Reply *reply)
{
    ProtobufCMessage message;

    protobuf_c_message_init(descriptor, &message);
    reply->message = pack(&message);
}

static void
serve_container_change(FakeCriServer *self, const char *method, const char *container_id,
                       gint64 grace, Reply *reply)
{
    FakeContainer *container = find_container(self, container_id);
    gint64 now = g_get_real_time() * 1000;

    if (!container) {
        if (g_str_equal(method, "StartContainer"))
            reply_error(reply, GRPC_STATUS_NOT_FOUND, "container %s not found", container_id);
        else if (g_str_equal(method, "StopContainer"))
            serve_empty(&runtime__v1__stop_container_response__descriptor, reply);
        else
            serve_empty(&runtime__v1__remove_container_response__descriptor, reply);
        return;
    }

    if (g_str_equal(method, "StartContainer")) {
        container->state = RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING;
        container->started_at = now;
        serve_empty(&runtime__v1__start_container_response__descriptor, reply);
    } else if (g_str_equal(method, "StopContainer")) {
        container->state = RUNTIME__V1__CONTAINER_STATE__CONTAINER_EXITED;
        container->finished_at = now;
        container->exit_code = grace > 0 ? 0 : 137;
        g_free(container->reason);
        container->reason = g_strdup(grace > 0 ? "Completed" : "Error");
        serve_empty(&runtime__v1__stop_container_response__descriptor, reply);
    } else {
        g_ptr_array_remove(self->containers, container);
        serve_empty(&runtime__v1__remove_container_response__descriptor, reply);
    }
}

static void
serve_sandbox_change(FakeCriServer *self, const char *method, const char *sandbox_id, Reply *reply)
{
    FakeSandbox *sandbox = find_sandbox(self, sandbox_id);

    if (g_str_equal(method, "StopPodSandbox")) {
        if (sandbox)
            sandbox->state = RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_NOTREADY;
        serve_empty(&runtime__v1__stop_pod_sandbox_response__descriptor, reply);
    } else {
        if (sandbox)
            g_ptr_array_remove(self->sandboxes, sandbox);
        serve_empty(&runtime__v1__remove_pod_sandbox_response__descriptor, reply);
    }
}

/* Unpacks @request as @descriptor; an undecodable request is INVALID_ARGUMENT. */
static ProtobufCMessage *
unpack_request(GBytes *request, const ProtobufCMessageDescriptor *descriptor, Reply *reply)
{
    gsize size;
    const guint8 *data = g_bytes_get_data(request, &size);
    ProtobufCMessage *message = protobuf_c_message_unpack(descriptor, NULL, size, data);

    if (!message)
        reply_error(reply, GRPC_STATUS_INVALID_ARGUMENT, "cannot decode %s", descriptor->name);
    return message;
}

static const struct {
    const char *method;
    const ProtobufCMessageDescriptor *request;
} methods[] = {
    {"Version", &runtime__v1__version_request__descriptor},
    {"ListPodSandbox", &runtime__v1__list_pod_sandbox_request__descriptor},
    {"PodSandboxStatus", &runtime__v1__pod_sandbox_status_request__descriptor},
    {"ListContainers", &runtime__v1__list_containers_request__descriptor},
    {"ContainerStatus", &runtime__v1__container_status_request__descriptor},
    {"RunPodSandbox", &runtime__v1__run_pod_sandbox_request__descriptor},
    {"StopPodSandbox", &runtime__v1__stop_pod_sandbox_request__descriptor},
    {"RemovePodSandbox", &runtime__v1__remove_pod_sandbox_request__descriptor},
    {"CreateContainer", &runtime__v1__create_container_request__descriptor},
    {"StartContainer", &runtime__v1__start_container_request__descriptor},
    {"StopContainer", &runtime__v1__stop_container_request__descriptor},
    {"RemoveContainer", &runtime__v1__remove_container_request__descriptor},
};

static void
dispatch(FakeCriServer *self, const char *method, GBytes *request_bytes, Reply *reply)
{
    const ProtobufCMessageDescriptor *descriptor = NULL;
    ProtobufCMessage *request;

    for (gsize i = 0; i < G_N_ELEMENTS(methods); i++)
        if (g_str_equal(methods[i].method, method))
            descriptor = methods[i].request;
    if (!descriptor) {
        reply_error(reply, GRPC_STATUS_UNIMPLEMENTED, "unknown method %s", method);
        return;
    }
    request = unpack_request(request_bytes, descriptor, reply);
    if (!request)
        return;

    g_mutex_lock(&self->lock);
    g_hash_table_replace(self->last_requests, g_strdup(method), g_bytes_ref(request_bytes));
    if (g_str_equal(method, "Version"))
        serve_version(reply);
    else if (g_str_equal(method, "ListPodSandbox"))
        serve_list_pod_sandbox(self, reply);
    else if (g_str_equal(method, "PodSandboxStatus"))
        serve_pod_sandbox_status(self, (void *)request, reply);
    else if (g_str_equal(method, "ListContainers"))
        serve_list_containers(self, (void *)request, reply);
    else if (g_str_equal(method, "ContainerStatus"))
        serve_container_status(self, (void *)request, reply);
    else if (g_str_equal(method, "RunPodSandbox"))
        serve_run_pod_sandbox(self, (void *)request, reply);
    else if (g_str_equal(method, "CreateContainer"))
        serve_create_container(self, (void *)request, reply);
    else if (g_str_equal(method, "StartContainer"))
        serve_container_change(
            self, method, ((Runtime__V1__StartContainerRequest *)request)->container_id, 0, reply);
    else if (g_str_equal(method, "StopContainer"))
        serve_container_change(self, method,
                               ((Runtime__V1__StopContainerRequest *)request)->container_id,
                               ((Runtime__V1__StopContainerRequest *)request)->timeout, reply);
    else if (g_str_equal(method, "RemoveContainer"))
        serve_container_change(
            self, method, ((Runtime__V1__RemoveContainerRequest *)request)->container_id, 0, reply);
    else if (g_str_equal(method, "StopPodSandbox"))
        serve_sandbox_change(
            self, method, ((Runtime__V1__StopPodSandboxRequest *)request)->pod_sandbox_id, reply);
    else
        serve_sandbox_change(
            self, method, ((Runtime__V1__RemovePodSandboxRequest *)request)->pod_sandbox_id, reply);
    g_mutex_unlock(&self->lock);

    protobuf_c_message_free_unpacked(request, NULL);
}

/* ---- call plumbing ---- */

static gboolean
run_batch(FakeCall *call, const grpc_op *ops, size_t n_ops)
{
    grpc_event event;

    if (grpc_call_start_batch(call->call, ops, n_ops, call, NULL) != GRPC_CALL_OK)
        g_error("fake CRI server: cannot start a batch");
    event = grpc_completion_queue_next(call->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    g_assert(event.type == GRPC_OP_COMPLETE && event.tag == call);
    return event.success;
}

static void
send_reply(FakeCall *call, const Reply *reply, gboolean initial_metadata_sent)
{
    grpc_op ops[4] = {0};
    grpc_slice details = grpc_slice_from_copied_string(reply->details ? reply->details : "");
    grpc_byte_buffer *buffer = NULL;
    int cancelled = 0;
    size_t n = 0;

    if (!initial_metadata_sent)
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (reply->message) {
        gsize size;
        const void *data = g_bytes_get_data(reply->message, &size);
        grpc_slice slice = grpc_slice_from_copied_buffer(data, size);

        buffer = grpc_raw_byte_buffer_create(&slice, 1);
        grpc_slice_unref(slice);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = buffer;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = reply->status;
    ops[n++].data.send_status_from_server.status_details = reply->details ? &details : NULL;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &cancelled;
    run_batch(call, ops, n);

    if (buffer)
        grpc_byte_buffer_destroy(buffer);
    grpc_slice_unref(details);
}

/* Waits until the client goes away or the server stops; then ends the call. */
static void
hang(FakeCall *call)
{
    FakeCriServer *self = call->server;
    int cancelled = 0;
    grpc_op op = {0};

    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &cancelled;
    if (grpc_call_start_batch(call->call, &op, 1, call, NULL) != GRPC_CALL_OK)
        g_error("fake CRI server: cannot start a batch");

    for (;;) {
        gpr_timespec deadline =
            gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(50, GPR_TIMESPAN));
        grpc_event event = grpc_completion_queue_next(call->cq, deadline, NULL);

        if (event.type == GRPC_OP_COMPLETE) {
            if (cancelled)
                return;
            /* Only the client's half-close: keep waiting for the end. */
            continue;
        }
        if (g_atomic_int_get(&self->stopping)) {
            grpc_call_cancel(call->call, NULL);
            event = grpc_completion_queue_next(call->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
            return;
        }
    }
}

static void
serve_events(FakeCall *call)
{
    FakeCriServer *self = call->server;
    guint n_events;
    gboolean hang_after;
    Reply end = {.status = GRPC_STATUS_OK};

    g_mutex_lock(&self->lock);
    n_events = self->n_events;
    hang_after = self->hang_after_events;
    g_mutex_unlock(&self->lock);

    for (guint i = 0; i < n_events; i++) {
        Runtime__V1__ContainerEventResponse event = RUNTIME__V1__CONTAINER_EVENT_RESPONSE__INIT;
        g_autofree char *id = g_strdup_printf("ctr-event-%u", i);
        g_autoptr(GBytes) bytes = NULL;
        grpc_byte_buffer *buffer;
        grpc_slice slice;
        grpc_op ops[2] = {0};
        size_t n = 0;
        gsize size;
        const void *data;

        event.container_id = id;
        event.container_event_type = RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STOPPED_EVENT;
        event.created_at = 1000 + i;
        bytes = pack(&event.base);
        data = g_bytes_get_data(bytes, &size);
        slice = grpc_slice_from_copied_buffer(data, size);
        buffer = grpc_raw_byte_buffer_create(&slice, 1);
        grpc_slice_unref(slice);

        if (i == 0)
            ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = buffer;
        run_batch(call, ops, n);
        grpc_byte_buffer_destroy(buffer);
    }

    if (hang_after)
        hang(call);
    else
        send_reply(call, &end, n_events > 0);
}

static gpointer
call_thread_main(gpointer data)
{
    FakeCall *call = data;
    FakeCriServer *self = call->server;
    /* gpr_malloc() is malloc(), so g_free() may release it. */
    g_autofree char *path = grpc_slice_to_c_string(call->details.method);
    const char *prefix = "/runtime.v1.RuntimeService/";
    const char *method = g_str_has_prefix(path, prefix) ? path + strlen(prefix) : path;
    grpc_byte_buffer *request_buffer = NULL;
    g_autoptr(GBytes) request = NULL;
    Reply reply = {.status = GRPC_STATUS_OK};
    grpc_op op = {0};
    gboolean hang_calls, unimplemented_events;

    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &request_buffer;
    run_batch(call, &op, 1);
    if (request_buffer) {
        grpc_byte_buffer_reader reader;
        grpc_slice slice;

        grpc_byte_buffer_reader_init(&reader, request_buffer);
        slice = grpc_byte_buffer_reader_readall(&reader);
        grpc_byte_buffer_reader_destroy(&reader);
        request = g_bytes_new(GRPC_SLICE_START_PTR(slice), GRPC_SLICE_LENGTH(slice));
        grpc_slice_unref(slice);
        grpc_byte_buffer_destroy(request_buffer);
    } else {
        request = g_bytes_new(NULL, 0);
    }

    g_mutex_lock(&self->lock);
    hang_calls = self->hang;
    unimplemented_events = self->events_unimplemented;
    g_mutex_unlock(&self->lock);

    if (g_str_equal(method, "GetContainerEvents")) {
        if (unimplemented_events) {
            reply_error(&reply, GRPC_STATUS_UNIMPLEMENTED,
                        "unknown method GetContainerEvents for service %s",
                        "runtime.v1.RuntimeService");
            send_reply(call, &reply, FALSE);
        } else {
            serve_events(call);
        }
    } else if (hang_calls) {
        hang(call);
    } else {
        dispatch(self, method, request, &reply);
        send_reply(call, &reply, FALSE);
    }

    g_free(reply.details);
    g_clear_pointer(&reply.message, g_bytes_unref);
    grpc_call_unref(call->call);
    grpc_call_details_destroy(&call->details);
    grpc_metadata_array_destroy(&call->metadata);
    grpc_completion_queue_shutdown(call->cq);
    while (grpc_completion_queue_next(call->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(call->cq);
    g_free(call);
    return NULL;
}

static FakeCall *
request_call(FakeCriServer *self)
{
    FakeCall *call = g_new0(FakeCall, 1);

    call->server = self;
    call->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_call_details_init(&call->details);
    grpc_metadata_array_init(&call->metadata);
    if (grpc_server_request_call(self->server, &call->call, &call->details, &call->metadata,
                                 call->cq, self->cq, &request_tag) != GRPC_CALL_OK)
        g_error("fake CRI server: cannot request a call");
    return call;
}

static void
discard_call(FakeCall *call)
{
    grpc_call_details_destroy(&call->details);
    grpc_metadata_array_destroy(&call->metadata);
    grpc_completion_queue_shutdown(call->cq);
    while (grpc_completion_queue_next(call->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(call->cq);
    g_free(call);
}

static gpointer
accept_thread_main(gpointer data)
{
    FakeCriServer *self = data;
    FakeCall *pending = request_call(self);
    gboolean shut_down = FALSE;

    while (pending || !shut_down) {
        grpc_event event =
            grpc_completion_queue_next(self->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);

        g_assert(event.type == GRPC_OP_COMPLETE);
        if (event.tag == &shutdown_tag) {
            shut_down = TRUE;
        } else if (event.tag == &request_tag) {
            FakeCall *call = g_steal_pointer(&pending);

            if (!event.success || g_atomic_int_get(&self->stopping)) {
                if (call->call)
                    grpc_call_unref(call->call);
                discard_call(call);
                continue;
            }
            g_mutex_lock(&self->lock);
            self->n_calls++;
            g_ptr_array_add(self->workers, g_thread_new("fake-cri-call", call_thread_main, call));
            g_mutex_unlock(&self->lock);
            pending = request_call(self);
        }
    }
    return NULL;
}

FakeCriServer *
fake_cri_server_new(const char *socket_path)
{
    FakeCriServer *self = g_new0(FakeCriServer, 1);
    g_autofree char *address = g_strconcat("unix:", socket_path, NULL);
    grpc_server_credentials *credentials;
    FakeSandbox *sandbox;
    FakeContainer *container;

    grpc_init();

    self->socket_path = g_strdup(socket_path);
    g_mutex_init(&self->lock);
    self->sandboxes = g_ptr_array_new_with_free_func((GDestroyNotify)fake_sandbox_free);
    self->containers = g_ptr_array_new_with_free_func((GDestroyNotify)fake_container_free);
    self->workers = g_ptr_array_new();
    self->last_requests =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)g_bytes_unref);

    add_sandbox(self, "sb-a", "pod-a", "uid-a", "default",
                RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_READY, "10.0.0.1", "fd00::1");
    sandbox = add_sandbox(self, "sb-b", "pod-b", "uid-b", "kube-system",
                          RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_NOTREADY, NULL, NULL);
    sandbox->attempt = 1;
    container = add_container(self, "ctr-1", "sb-a", "app",
                              RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING, "uid-a");
    container->started_at = container->created_at;
    container = add_container(self, "ctr-2", "sb-a", "init",
                              RUNTIME__V1__CONTAINER_STATE__CONTAINER_EXITED, "uid-a");
    container->attempt = 2;
    container->exit_code = 7;
    container->reason = g_strdup("Error");
    container->started_at = container->created_at;
    container->finished_at = FAKE_CRI_FINISHED_AT_NS;
    add_container(self, "ctr-3", "sb-b", "sidecar", RUNTIME__V1__CONTAINER_STATE__CONTAINER_CREATED,
                  NULL);

    if (g_unlink(socket_path) < 0 && errno != ENOENT)
        g_error("fake CRI server: cannot remove %s: %s", socket_path, g_strerror(errno));

    self->cq = grpc_completion_queue_create_for_next(NULL);
    self->server = grpc_server_create(NULL, NULL);
    grpc_server_register_completion_queue(self->server, self->cq, NULL);
    credentials = grpc_insecure_server_credentials_create();
    if (!grpc_server_add_http2_port(self->server, address, credentials))
        g_error("fake CRI server: cannot listen on %s", address);
    grpc_server_credentials_release(credentials);
    grpc_server_start(self->server);

    self->accept_thread = g_thread_new("fake-cri-accept", accept_thread_main, self);
    return self;
}

void
fake_cri_server_free(FakeCriServer *self)
{
    if (!self)
        return;

    g_atomic_int_set(&self->stopping, 1);
    grpc_server_shutdown_and_notify(self->server, self->cq, &shutdown_tag);
    grpc_server_cancel_all_calls(self->server);
    g_thread_join(self->accept_thread);

    /* No new workers can appear now. */
    for (guint i = 0; i < self->workers->len; i++)
        g_thread_join(self->workers->pdata[i]);
    g_ptr_array_unref(self->workers);

    grpc_server_destroy(self->server);
    grpc_completion_queue_shutdown(self->cq);
    while (grpc_completion_queue_next(self->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(self->cq);

    g_unlink(self->socket_path);
    g_free(self->socket_path);
    g_ptr_array_unref(self->sandboxes);
    g_ptr_array_unref(self->containers);
    g_hash_table_unref(self->last_requests);
    g_mutex_clear(&self->lock);
    g_free(self);

    grpc_shutdown();
}

void
fake_cri_server_set_hang(FakeCriServer *self, gboolean hang_calls)
{
    g_mutex_lock(&self->lock);
    self->hang = hang_calls;
    g_mutex_unlock(&self->lock);
}

void
fake_cri_server_set_events(FakeCriServer *self, guint n_events, gboolean hang_after)
{
    g_mutex_lock(&self->lock);
    self->n_events = n_events;
    self->hang_after_events = hang_after;
    g_mutex_unlock(&self->lock);
}

void
fake_cri_server_set_events_unimplemented(FakeCriServer *self, gboolean unimplemented)
{
    g_mutex_lock(&self->lock);
    self->events_unimplemented = unimplemented;
    g_mutex_unlock(&self->lock);
}

void
fake_cri_server_set_padding(FakeCriServer *self, gsize bytes)
{
    g_mutex_lock(&self->lock);
    self->padding = bytes;
    g_mutex_unlock(&self->lock);
}

guint
fake_cri_server_get_n_calls(FakeCriServer *self)
{
    guint n;

    g_mutex_lock(&self->lock);
    n = self->n_calls;
    g_mutex_unlock(&self->lock);
    return n;
}

GBytes *
fake_cri_server_get_last_request(FakeCriServer *self, const char *method)
{
    GBytes *bytes;

    g_mutex_lock(&self->lock);
    bytes = g_hash_table_lookup(self->last_requests, method);
    if (bytes)
        g_bytes_ref(bytes);
    g_mutex_unlock(&self->lock);
    return bytes;
}
