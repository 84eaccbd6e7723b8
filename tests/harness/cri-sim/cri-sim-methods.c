/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cri-sim: the RuntimeService methods.  What a call gets once its request is in (a scripted
 * failure, a delay, a subscription, a list stream or its answer), the unary methods over the
 * model, and the list streams of KEP-5825.  Functions without "cri_sim_" run with the lock held.
 */
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>

#include "cri-sim-private.h"

/* ---- unary methods (lock held) ---- */

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
    reply->message = sim_pack(&message);
}

static void
serve_version(CriSim *self, const Runtime__V1__VersionRequest *request, Reply *reply)
{
    Runtime__V1__VersionResponse response = RUNTIME__V1__VERSION_RESPONSE__INIT;

    response.version = (char *)"0.1.0";
    response.runtime_name = self->runtime_name;
    response.runtime_version = self->runtime_version;
    response.runtime_api_version = (char *)"v1";
    reply->message = sim_pack(&response.base);
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
    reply->message = sim_pack(&response.base);
}


static void
serve_list_pod_sandbox(CriSim *self, const Runtime__V1__ListPodSandboxRequest *request,
                       Reply *reply)
{
    g_autoptr(GPtrArray) scratch = g_ptr_array_new_with_free_func(g_free);
    Runtime__V1__ListPodSandboxResponse response = RUNTIME__V1__LIST_POD_SANDBOX_RESPONSE__INIT;

    response.items = sim_collect_sandboxes(self, request->filter, scratch, &response.n_items);
    reply->message = sim_pack(&response.base);
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
    response.status = sim_build_sandbox_status(scratch, pod);
    response.timestamp = sim_now_ns();
    reply->message = sim_pack(&response.base);
}


static void
serve_list_containers(CriSim *self, const Runtime__V1__ListContainersRequest *request,
                      Reply *reply)
{
    g_autoptr(GPtrArray) scratch = g_ptr_array_new_with_free_func(g_free);
    Runtime__V1__ListContainersResponse response = RUNTIME__V1__LIST_CONTAINERS_RESPONSE__INIT;

    response.containers = sim_collect_containers(self, request->filter, scratch, &response.n_containers);
    reply->message = sim_pack(&response.base);
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
    response.status = sim_build_container_status(scratch, container);
    reply->message = sim_pack(&response.base);
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

    id = sim_generate_id(self, self->sandbox_prefix);
    spec.id = id;
    spec.uid = config->metadata->uid;
    spec.name = config->metadata->name;
    spec.namespace_ = config->metadata->namespace_;
    spec.attempt = config->metadata->attempt;
    spec.labels = (const char *const *)labels->pdata;
    pod = sim_pod_add(self, &spec, &error);
    if (!pod) {
        reply_error(reply, GRPC_STATUS_INVALID_ARGUMENT, "%s", error->message);
        return;
    }
    response.pod_sandbox_id = pod->id;
    reply->message = sim_pack(&response.base);
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
    if (!sim_labels_get(labels, LABEL_POD_UID)) {
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
    container = sim_container_add(self, pod, &spec, NULL, &error);
    if (!container) {
        reply_error(reply, GRPC_STATUS_ALREADY_EXISTS, "%s", error->message);
        return;
    }
    response.container_id = container->id;
    reply->message = sim_pack(&response.base);
}

static void
serve_start_container(CriSim *self, const Runtime__V1__StartContainerRequest *request,
                      Reply *reply)
{
    Container *container = g_hash_table_lookup(self->containers_by_id, request->container_id);
    g_autoptr(GError) error = NULL;

    if (!container)
        reply_error(reply, GRPC_STATUS_NOT_FOUND, "container %s not found", request->container_id);
    else if (!sim_container_start(self, container, &error))
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

        sim_container_exit(self, container, graceful ? 0 : 137, graceful ? "Completed" : "Error",
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
        sim_container_remove(self, container);
    reply_empty(reply, &runtime__v1__remove_container_response__descriptor);
}

static void
serve_stop_pod_sandbox(CriSim *self, const Runtime__V1__StopPodSandboxRequest *request,
                       Reply *reply)
{
    Pod *pod = g_hash_table_lookup(self->pods_by_id, request->pod_sandbox_id);

    if (pod)
        sim_pod_stop(self, pod);
    reply_empty(reply, &runtime__v1__stop_pod_sandbox_response__descriptor);
}

static void
serve_remove_pod_sandbox(CriSim *self, const Runtime__V1__RemovePodSandboxRequest *request,
                         Reply *reply)
{
    Pod *pod = g_hash_table_lookup(self->pods_by_id, request->pod_sandbox_id);

    if (pod)
        sim_pod_remove(self, pod);
    reply_empty(reply, &runtime__v1__remove_pod_sandbox_response__descriptor);
}

/* ---- the method table ---- */

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

/* ---- list streams (KEP-5825) ---- */

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
        sim_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, "cannot decode the request", NULL);
        return;
    }
    if (sandboxes)
        items = (gpointer *)sim_collect_sandboxes(
            self, ((Runtime__V1__StreamPodSandboxesRequest *)request)->filter, scratch, &n_items);
    else
        items = (gpointer *)sim_collect_containers(
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
            g_queue_push_tail(&call->outbox, sim_pack(&response.base));
        } else {
            Runtime__V1__StreamContainersResponse response =
                RUNTIME__V1__STREAM_CONTAINERS_RESPONSE__INIT;

            response.n_containers = count;
            response.containers = (Runtime__V1__Container **)items + start;
            g_queue_push_tail(&call->outbox, sim_pack(&response.base));
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
    sim_stream_kick(call);
}

/* ---- what a call gets ---- */

/* Answers a unary call now: its scripted failure or the real thing. */
static void
call_answer(CriSim *self, Call *call)
{
    Reply reply = {GRPC_STATUS_OK, NULL, NULL};

    if (call->fail_status != GRPC_STATUS_OK)
        reply_error(&reply, call->fail_status, "%s", call->fail_details);
    else
        serve(self, call->method, call->request, &reply);
    sim_call_finish(call, reply.status, reply.details, reply.message);
    g_free(reply.details);
    g_clear_pointer(&reply.message, g_bytes_unref);
}

/* What a call gets once it is due: a subscription, a list stream, or its answer. */
void
sim_call_start(CriSim *self, Call *call)
{
    if (call->is_events)
        sim_subscribe(self, call);
    else if (call->is_stream)
        list_stream_start(self, call);
    else
        call_answer(self, call);
}

/* The request message is in: decide what the call gets. */
void
sim_call_received(CriSim *self, Call *call)
{
    int code, delay_ms;

    if (call->closed || call->status_sent)
        return;
    if (self->state != SERVER_SERVING) {
        sim_call_finish(call, GRPC_STATUS_UNAVAILABLE, GOING_AWAY, NULL);
        return;
    }
    code = sim_rule_take_failure(self, call->method);
    delay_ms = sim_rule_delay(self, call->method);
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
            sim_call_finish(call, reply.status, reply.details, NULL);
            g_free(reply.details);
            return;
        }
        if (call->fail_status != GRPC_STATUS_OK) {
            sim_call_finish(call, call->fail_status, call->fail_details, NULL);
            return;
        }
    }

    if (delay_ms < 0) {
        /* Never answered: the call ends when the client gives up or the server stops. */
    } else if (delay_ms > 0) {
        sim_timer_add(self, call, delay_ms);
    } else {
        sim_call_start(self, call);
    }
}

/* ---- the public API ---- */

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
