/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The public CRI client: typed RuntimeService calls over the internal transport (cri-private.h),
 * answers decoded into libpleg's types, and the #PlegRuntime the Generic PLEG reads.
 */
#include "pleg-config.h"

#include <pleg/pleg-cri-client.h>
#include <pleg/pleg-metrics.h>
#include <pleg/pleg-util.h>

#include "cri-private.h"
#include "pleg-private.h"

/* The two listings a relist makes. */
typedef enum { LIST_SANDBOXES, LIST_CONTAINERS, N_LISTINGS } Listing;

/* Each listing's operation, whose kubelet name is also its `operation` label in
 * pleg_cri_listing_over_limit_total. */
static const CriOperation listing_operations[N_LISTINGS] = {CRI_OPERATION_LIST_PODSANDBOX,
                                                            CRI_OPERATION_LIST_CONTAINERS};

struct _PlegCriClient {
    gatomicrefcount ref_count;
    CriChannel *channel;
    gint64 timeout_usec;
    /* What one listing may bring, unary or streamed (issue 24). */
    CriListingLimits list_limits;
    /* Once pleg_cri_client_set_metrics() gave a registry; NULL: nothing is recorded. */
    PlegMetric *over_limit; /* pleg_cri_listing_over_limit_total */
    CriOperations *ops;     /* kubelet_runtime_operations_* */

    /* How listings go (KEP-5825); list_lock guards the state below, never held across a call. */
    GMutex list_lock;
    gboolean list_streaming;
    gint64 list_probe_interval_usec;
    PlegCriListPath list_path;
    gint64 list_probe_at_usec; /* monotonic: when a fallback tries the streams again */
    gboolean too_large_said[N_LISTINGS]; /* since the last whole unary listing that fit */
    PlegCriListNoticeFunc notice_func;
    gpointer notice_data;
    GDestroyNotify notice_destroy;
};

PlegCriClient *
pleg_cri_client_new(const char *endpoint, gint64 timeout_usec, GError **error)
{
    PlegCriClient *client;
    CriChannel *channel;

    g_return_val_if_fail(timeout_usec >= 0, NULL);

    channel = cri_channel_new(endpoint, error);
    if (!channel)
        return NULL;

    client = g_new0(PlegCriClient, 1);
    g_atomic_ref_count_init(&client->ref_count);
    client->channel = channel;
    client->timeout_usec = timeout_usec > 0 ? timeout_usec : PLEG_CRI_DEFAULT_TIMEOUT_USEC;
    client->list_limits.max_bytes = PLEG_CRI_MAX_LISTING_BYTES;
    client->list_limits.max_items = PLEG_CRI_MAX_LISTING_ITEMS;
    g_mutex_init(&client->list_lock);
    client->list_probe_interval_usec = PLEG_CRI_LIST_PROBE_INTERVAL_USEC;
    client->list_path = PLEG_CRI_LIST_UNARY;
    return client;
}

PlegCriClient *
pleg_cri_client_ref(PlegCriClient *client)
{
    g_return_val_if_fail(client != NULL, NULL);
    g_atomic_ref_count_inc(&client->ref_count);
    return client;
}

void
pleg_cri_client_unref(PlegCriClient *client)
{
    if (!client || !g_atomic_ref_count_dec(&client->ref_count))
        return;
    if (client->notice_destroy)
        client->notice_destroy(client->notice_data);
    cri_operations_free(client->ops);
    g_mutex_clear(&client->list_lock);
    cri_channel_unref(client->channel);
    g_free(client);
}

const char *
pleg_cri_client_get_endpoint(PlegCriClient *client)
{
    g_return_val_if_fail(client != NULL, NULL);
    return cri_channel_get_endpoint(client->channel);
}

CriChannel *
cri_client_get_channel(PlegCriClient *client)
{
    g_return_val_if_fail(client != NULL, NULL);
    return client->channel;
}

gint64
cri_client_get_timeout_usec(PlegCriClient *client)
{
    g_return_val_if_fail(client != NULL, 0);
    return client->timeout_usec;
}

void
pleg_cri_client_set_metrics(PlegCriClient *client, PlegMetricsRegistry *registry)
{
    g_return_if_fail(client != NULL && registry != NULL);
    g_return_if_fail(client->ops == NULL);

    client->over_limit = pleg_metrics_register(
        registry, PLEG_METRIC_COUNTER, "pleg_cri_listing_over_limit_total",
        "CRI listings (ListPodSandbox, ListContainers or their KEP-5825 streams) stopped because "
        "they brought more bytes or items than one listing may, by operation and limit.",
        (const char *const[]){"operation", "limit", NULL}, NULL, 0);
    client->ops = cri_operations_new(registry);
}

/* When an operation starts, for operation_done(): no clock is read without metrics. */
static gint64
operation_start(PlegCriClient *client)
{
    return client->ops ? g_get_monotonic_time() : 0;
}

/* One operation that began at @start_usec (operation_start()) ended: it is counted, and
 * @local_error (transfer full; NULL when it succeeded) is handed to @error.  Returns @ok. */
static gboolean
operation_done(PlegCriClient *client, CriOperation operation, gint64 start_usec, gboolean ok,
               GError *local_error, GError **error)
{
    if (client->ops)
        cri_operations_record(client->ops, operation, g_get_monotonic_time() - start_usec,
                              local_error);
    if (local_error)
        g_propagate_error(error, local_error);
    return ok;
}

/* A listing stopped at one of its bounds. */
static void
listing_over_limit(PlegCriClient *client, Listing listing, CriLimit limit)
{
    const char *labels[] = {cri_operation_to_string(listing_operations[listing]),
                            cri_limit_to_string(limit), NULL};

    pleg_metric_inc(client->over_limit, labels);
}

static void
container_events_ended(gint64 duration_usec, const GError *error, gpointer data)
{
    PlegCriClient *client = data;

    cri_operations_record(client->ops, CRI_OPERATION_GET_CONTAINER_EVENTS, duration_usec, error);
}

PlegContainerEventStream *
cri_client_container_events_open(PlegCriClient *client, GError **error)
{
    gint64 start_usec = operation_start(client);
    GError *local_error = NULL;
    PlegContainerEventStream *stream;

    g_return_val_if_fail(client != NULL, NULL);

    stream = cri_container_events_open(client->channel, &local_error);
    if (!stream) {
        operation_done(client, CRI_OPERATION_GET_CONTAINER_EVENTS, start_usec, FALSE,
                       local_error, error);
        return NULL;
    }
    if (client->ops)
        cri_container_events_set_end_func(stream, container_events_ended,
                                          pleg_cri_client_ref(client),
                                          (GDestroyNotify)pleg_cri_client_unref);
    return stream;
}

static gpointer
call(PlegCriClient *client, const char *method, const ProtobufCMessage *request,
     const ProtobufCMessageDescriptor *response_descriptor, GCancellable *cancellable,
     GError **error)
{
    return cri_channel_call(client->channel, method, request, response_descriptor,
                            client->timeout_usec, cancellable, error);
}

/* A unary listing: each item of the answer unpacked alone into an arena of the channel's pool
 * and given to @item_func, so that neither the answer nor a copy of it is ever held whole; an
 * answer past the listing bounds fails (*@ret_over says which). */
static gboolean
call_listing(PlegCriClient *client, Listing listing, const char *method,
             const ProtobufCMessage *request,
             const ProtobufCMessageDescriptor *response_descriptor, CriItemFunc item_func,
             gpointer item_data, CriLimit *ret_over, GCancellable *cancellable, GError **error)
{
    g_autoptr(CriArena) arena = cri_arena_new(cri_channel_get_arena_pool(client->channel));
    CriUnaryCall unary = {
        .method = method,
        .request = request,
        .response_descriptor = response_descriptor,
        .arena = arena,
        .item_func = item_func,
        .item_data = item_data,
        .limits = client->list_limits,
    };

    cri_channel_call_many(client->channel, &unary, 1, client->timeout_usec, cancellable);
    *ret_over = unary.over_limit;
    if (unary.over_limit != CRI_LIMIT_NONE)
        listing_over_limit(client, listing, unary.over_limit);
    if (unary.error) {
        g_propagate_error(error, unary.error);
        return FALSE;
    }
    return TRUE;
}

gboolean
pleg_cri_endpoint_check(const char *endpoint, GError **error)
{
    g_autofree char *target = NULL;

    g_return_val_if_fail(endpoint != NULL, FALSE);
    return cri_endpoint_parse(endpoint, &target, error);
}

gboolean
pleg_cri_client_version(PlegCriClient *client, char **ret_runtime_name, char **ret_runtime_version,
                        GCancellable *cancellable, GError **error)
{
    Runtime__V1__VersionRequest request = RUNTIME__V1__VERSION_REQUEST__INIT;
    g_autoptr(Runtime__V1__VersionResponse) response = NULL;
    GError *local_error = NULL;
    gint64 start_usec;

    g_return_val_if_fail(client != NULL, FALSE);

    /* kubelet sends the CRI API version it speaks. */
    request.version = (char *)"0.1.0";
    start_usec = operation_start(client);
    response = call(client, "Version", &request.base, &runtime__v1__version_response__descriptor,
                    cancellable, &local_error);
    if (!operation_done(client, CRI_OPERATION_VERSION, start_usec, response != NULL, local_error,
                        error))
        return FALSE;

    if (ret_runtime_name)
        *ret_runtime_name = g_strdup(response->runtime_name);
    if (ret_runtime_version)
        *ret_runtime_version = g_strdup(response->runtime_version);
    return TRUE;
}

/* ---- how listings go: unary, or CRI list streaming (KEP-5825) ---- */

const char *
pleg_cri_list_path_to_string(PlegCriListPath path)
{
    switch (path) {
    case PLEG_CRI_LIST_UNARY:
        return "unary";
    case PLEG_CRI_LIST_STREAMING:
        return "streaming";
    case PLEG_CRI_LIST_UNARY_FALLBACK:
        return "unary-fallback";
    }
    return "unknown";
}

void
pleg_cri_client_set_list_streaming(PlegCriClient *client, gboolean enabled,
                                   gint64 probe_interval_usec)
{
    g_return_if_fail(client != NULL);
    g_return_if_fail(probe_interval_usec >= 0);

    g_mutex_lock(&client->list_lock);
    client->list_streaming = enabled;
    client->list_probe_interval_usec =
        probe_interval_usec > 0 ? probe_interval_usec : PLEG_CRI_LIST_PROBE_INTERVAL_USEC;
    client->list_path = PLEG_CRI_LIST_UNARY;
    client->list_probe_at_usec = 0;
    g_mutex_unlock(&client->list_lock);
}

PlegCriListPath
pleg_cri_client_get_list_path(PlegCriClient *client)
{
    PlegCriListPath path;

    g_return_val_if_fail(client != NULL, PLEG_CRI_LIST_UNARY);

    g_mutex_lock(&client->list_lock);
    path = client->list_path;
    g_mutex_unlock(&client->list_lock);
    return path;
}

void
pleg_cri_client_set_list_notice_func(PlegCriClient *client, PlegCriListNoticeFunc func,
                                     gpointer user_data, GDestroyNotify destroy)
{
    g_return_if_fail(client != NULL);

    if (client->notice_destroy)
        client->notice_destroy(client->notice_data);
    client->notice_func = func;
    client->notice_data = user_data;
    client->notice_destroy = destroy;
}

static void
list_notify(PlegCriClient *client, PlegCriListNotice notice, const GError *reason)
{
    if (client->notice_func)
        client->notice_func(client, notice, reason, client->notice_data);
}

/* Whether the next listing goes through the streams: the gate is on, and the runtime has not
 * answered them UNIMPLEMENTED, or did so longer ago than the probe interval. */
static gboolean
list_use_streams(PlegCriClient *client)
{
    gboolean streams;

    g_mutex_lock(&client->list_lock);
    streams = client->list_streaming &&
              (client->list_path != PLEG_CRI_LIST_UNARY_FALLBACK ||
               g_get_monotonic_time() >= client->list_probe_at_usec);
    g_mutex_unlock(&client->list_lock);
    return streams;
}

/* A listing through the streams succeeded (@unimplemented NULL) or was answered UNIMPLEMENTED.
 * The notice goes out on a change of path only, so a probe that fails again says nothing. */
static void
list_streams_answered(PlegCriClient *client, const GError *unimplemented)
{
    PlegCriListPath path = unimplemented ? PLEG_CRI_LIST_UNARY_FALLBACK : PLEG_CRI_LIST_STREAMING;
    gboolean changed;

    g_mutex_lock(&client->list_lock);
    changed = client->list_path != path;
    client->list_path = path;
    if (unimplemented)
        client->list_probe_at_usec = g_get_monotonic_time() + client->list_probe_interval_usec;
    g_mutex_unlock(&client->list_lock);
    if (changed)
        list_notify(client, unimplemented ? PLEG_CRI_LIST_NOTICE_FALLBACK
                                          : PLEG_CRI_LIST_NOTICE_STREAMING,
                    unimplemented);
}

/* A whole (unfiltered) unary listing ended: RESOURCE_EXHAUSTED, an answer over the receive
 * limit, is noticed once until that listing fits again.  One pod's listings, which fit on a node
 * whose whole listing does not, change nothing. */
static void
list_unary_answered(PlegCriClient *client, Listing listing, gboolean whole, const GError *error)
{
    gboolean too_large = g_error_matches(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_RESOURCE_EXHAUSTED);
    gboolean say;

    if (!whole || (error && !too_large))
        return;
    g_mutex_lock(&client->list_lock);
    say = too_large && !client->too_large_said[listing];
    client->too_large_said[listing] = too_large;
    g_mutex_unlock(&client->list_lock);
    if (say)
        list_notify(client, PLEG_CRI_LIST_NOTICE_TOO_LARGE, error);
}

/* One list stream, each message's items decoded into @items as it arrives, item by item, so
 * that neither a message nor the whole answer is ever held unpacked.  The stream's deadline is
 * the client's call deadline; the stream is cancelled when it passes the listing bounds. */
static gboolean
list_stream(PlegCriClient *client, Listing listing, const char *method,
            const ProtobufCMessage *request,
            const ProtobufCMessageDescriptor *response_descriptor, CriItemFunc item_func,
            gpointer items, GCancellable *cancellable, GError **error)
{
    g_autoptr(CriStream) stream = cri_stream_start(client->channel, method, request,
                                                   response_descriptor, client->timeout_usec,
                                                   FALSE, error);
    g_autoptr(CriArena) arena = NULL;
    gboolean end = FALSE;

    if (!stream)
        return FALSE;
    /* Declared after the stream, so freed before it: the stream only borrows the arena. */
    arena = cri_arena_new(cri_channel_get_arena_pool(client->channel));
    cri_stream_set_arena(stream, arena);
    cri_stream_set_limits(stream, &client->list_limits);
    while (!end) {
        if (!cri_stream_read_items(stream, item_func, items, &end, cancellable, error)) {
            if (cri_stream_get_over_limit(stream) != CRI_LIMIT_NONE)
                listing_over_limit(client, listing, cri_stream_get_over_limit(stream));
            return FALSE;
        }
    }
    return TRUE;
}

/* Where a listing's items go: @item_func's data, and how to drop what it was given when the
 * listing starts again with the unary RPC. */
typedef struct {
    CriItemFunc item_func;
    gpointer data;
    void (*reset)(gpointer data);
} ItemSink;

/* Lists through the stream when the gate says so; FALSE with @error on a failure other than
 * UNIMPLEMENTED, and FALSE without an error when the caller must list unary instead. */
static gboolean
try_list_stream(PlegCriClient *client, Listing listing, const char *method,
                const ProtobufCMessage *request,
                const ProtobufCMessageDescriptor *response_descriptor, const ItemSink *sink,
                GCancellable *cancellable, GError **error)
{
    g_autoptr(GError) local_error = NULL;

    if (!list_use_streams(client))
        return FALSE;
    if (list_stream(client, listing, method, request, response_descriptor, sink->item_func,
                    sink->data, cancellable, &local_error)) {
        list_streams_answered(client, NULL);
        return TRUE;
    }
    sink->reset(sink->data);
    if (g_error_matches(local_error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_UNIMPLEMENTED)) {
        g_debug("%s, listing with the unary RPC", local_error->message);
        list_streams_answered(client, local_error);
        return FALSE;
    }
    g_propagate_error(error, g_steal_pointer(&local_error));
    return FALSE;
}

static void
add_sandbox(const ProtobufCMessage *item, gpointer sandboxes)
{
    g_ptr_array_add(sandboxes, cri_decode_pod_sandbox((gconstpointer)item));
}

static void
add_container(const ProtobufCMessage *item, gpointer containers)
{
    g_ptr_array_add(containers, cri_decode_container((gconstpointer)item));
}

static void
clear_array(gpointer array)
{
    g_ptr_array_set_size(array, 0);
}

/* ListPodSandbox, or its stream when the runtime has it, each item given to @sink. */
static gboolean
visit_pod_sandboxes_once(PlegCriClient *client, Runtime__V1__PodSandboxFilter *filter,
                         const ItemSink *sink, GCancellable *cancellable, GError **error)
{
    Runtime__V1__StreamPodSandboxesRequest stream_request =
        RUNTIME__V1__STREAM_POD_SANDBOXES_REQUEST__INIT;
    Runtime__V1__ListPodSandboxRequest request = RUNTIME__V1__LIST_POD_SANDBOX_REQUEST__INIT;
    g_autoptr(GError) local_error = NULL;
    CriLimit over = CRI_LIMIT_NONE;

    stream_request.filter = filter;
    if (try_list_stream(client, LIST_SANDBOXES, "StreamPodSandboxes", &stream_request.base,
                        &runtime__v1__stream_pod_sandboxes_response__descriptor, sink, cancellable,
                        &local_error))
        return TRUE;
    if (local_error) {
        g_propagate_error(error, g_steal_pointer(&local_error));
        return FALSE;
    }

    request.filter = filter;
    call_listing(client, LIST_SANDBOXES, "ListPodSandbox", &request.base,
                 &runtime__v1__list_pod_sandbox_response__descriptor, sink->item_func, sink->data,
                 &over, cancellable, &local_error);
    if (over == CRI_LIMIT_NONE)
        list_unary_answered(client, LIST_SANDBOXES, filter == NULL, local_error);
    if (local_error) {
        g_propagate_error(error, g_steal_pointer(&local_error));
        return FALSE;
    }
    return TRUE;
}

/* ListContainers, or its stream when the runtime has it, each item given to @sink. */
static gboolean
visit_containers_once(PlegCriClient *client, const char *pod_sandbox_id, const ItemSink *sink,
                      GCancellable *cancellable, GError **error)
{
    Runtime__V1__StreamContainersRequest stream_request =
        RUNTIME__V1__STREAM_CONTAINERS_REQUEST__INIT;
    Runtime__V1__ListContainersRequest request = RUNTIME__V1__LIST_CONTAINERS_REQUEST__INIT;
    Runtime__V1__ContainerFilter filter = RUNTIME__V1__CONTAINER_FILTER__INIT;
    g_autoptr(GError) local_error = NULL;
    CriLimit over = CRI_LIMIT_NONE;

    if (pod_sandbox_id) {
        filter.pod_sandbox_id = (char *)pod_sandbox_id;
        request.filter = &filter;
        stream_request.filter = &filter;
    }
    if (try_list_stream(client, LIST_CONTAINERS, "StreamContainers", &stream_request.base,
                        &runtime__v1__stream_containers_response__descriptor, sink, cancellable,
                        &local_error))
        return TRUE;
    if (local_error) {
        g_propagate_error(error, g_steal_pointer(&local_error));
        return FALSE;
    }

    call_listing(client, LIST_CONTAINERS, "ListContainers", &request.base,
                 &runtime__v1__list_containers_response__descriptor, sink->item_func, sink->data,
                 &over, cancellable, &local_error);
    if (over == CRI_LIMIT_NONE)
        list_unary_answered(client, LIST_CONTAINERS, pod_sandbox_id == NULL, local_error);
    if (local_error) {
        g_propagate_error(error, g_steal_pointer(&local_error));
        return FALSE;
    }
    return TRUE;
}

/* A listing is one operation, as kubelet's ListPodSandbox and ListContainers are, whether
 * it went through the stream, the unary RPC or both. */
static gboolean
visit_pod_sandboxes(PlegCriClient *client, Runtime__V1__PodSandboxFilter *filter,
                    const ItemSink *sink, GCancellable *cancellable, GError **error)
{
    gint64 start_usec = operation_start(client);
    GError *local_error = NULL;
    gboolean ok = visit_pod_sandboxes_once(client, filter, sink, cancellable, &local_error);

    return operation_done(client, CRI_OPERATION_LIST_PODSANDBOX, start_usec, ok, local_error,
                          error);
}

static gboolean
visit_containers(PlegCriClient *client, const char *pod_sandbox_id, const ItemSink *sink,
                 GCancellable *cancellable, GError **error)
{
    gint64 start_usec = operation_start(client);
    GError *local_error = NULL;
    gboolean ok = visit_containers_once(client, pod_sandbox_id, sink, cancellable, &local_error);

    return operation_done(client, CRI_OPERATION_LIST_CONTAINERS, start_usec, ok, local_error,
                          error);
}

/* ---- PlegRuntime ---- */

static gboolean
list_pod_sandboxes(PlegCriClient *client, Runtime__V1__PodSandboxFilter *filter,
                   GPtrArray **ret_sandboxes, GCancellable *cancellable, GError **error)
{
    g_autoptr(GPtrArray) sandboxes =
        g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_sandbox_free);
    ItemSink sink = {.item_func = add_sandbox, .data = sandboxes, .reset = clear_array};

    if (!visit_pod_sandboxes(client, filter, &sink, cancellable, error))
        return FALSE;
    *ret_sandboxes = g_steal_pointer(&sandboxes);
    return TRUE;
}

static gboolean
runtime_list_pod_sandboxes(gpointer impl, GPtrArray **ret_sandboxes, GCancellable *cancellable,
                           GError **error)
{
    return list_pod_sandboxes(impl, NULL, ret_sandboxes, cancellable, error);
}

/* kubelet labels every sandbox with its pod's UID and asks for one pod's sandboxes with this
 * selector.  A runtime holding sandboxes without the label answers with none of them: then list
 * everything, so such pods are still found (the caller matches metadata.uid). */
static gboolean
runtime_list_pod_sandboxes_of_pod(gpointer impl, const char *pod_uid, GPtrArray **ret_sandboxes,
                                  GCancellable *cancellable, GError **error)
{
    Runtime__V1__PodSandboxFilter filter = RUNTIME__V1__POD_SANDBOX_FILTER__INIT;
    Runtime__V1__PodSandboxFilter__LabelSelectorEntry entry =
        RUNTIME__V1__POD_SANDBOX_FILTER__LABEL_SELECTOR_ENTRY__INIT;
    Runtime__V1__PodSandboxFilter__LabelSelectorEntry *entries[] = {&entry};
    GPtrArray *sandboxes = NULL;

    entry.key = (char *)"io.kubernetes.pod.uid";
    entry.value = (char *)pod_uid;
    filter.n_label_selector = G_N_ELEMENTS(entries);
    filter.label_selector = entries;

    if (!list_pod_sandboxes(impl, &filter, &sandboxes, cancellable, error))
        return FALSE;
    if (sandboxes->len > 0) {
        *ret_sandboxes = sandboxes;
        return TRUE;
    }
    g_ptr_array_unref(sandboxes);
    return list_pod_sandboxes(impl, NULL, ret_sandboxes, cancellable, error);
}

static gboolean
runtime_list_containers(gpointer impl, const char *pod_sandbox_id, GPtrArray **ret_containers,
                        GCancellable *cancellable, GError **error)
{
    g_autoptr(GPtrArray) containers =
        g_ptr_array_new_with_free_func((GDestroyNotify)pleg_container_free);
    ItemSink sink = {.item_func = add_container, .data = containers, .reset = clear_array};

    if (!visit_containers(impl, pod_sandbox_id, &sink, cancellable, error))
        return FALSE;
    *ret_containers = g_steal_pointer(&containers);
    return TRUE;
}

/* The Generic PLEG's global listing (pleg_runtime_visit_listing()): each item viewed in place
 * in its arena and handed borrowed, so that no text of it is copied into an allocation of its
 * own. */
typedef struct {
    const PlegListingVisitor *visitor;
    gpointer data;
} Visit;

static void
visit_sandbox(const ProtobufCMessage *item, gpointer data)
{
    Visit *visit = data;
    PlegPodSandbox sandbox;

    cri_view_pod_sandbox((gconstpointer)item, &sandbox);
    visit->visitor->sandbox(&sandbox, visit->data);
}

static void
visit_container(const ProtobufCMessage *item, gpointer data)
{
    Visit *visit = data;
    PlegContainer container;

    cri_view_container((gconstpointer)item, &container);
    visit->visitor->container(&container, visit->data);
}

static void
restart_sandboxes(gpointer data)
{
    Visit *visit = data;

    visit->visitor->restart(TRUE, visit->data);
}

static void
restart_containers(gpointer data)
{
    Visit *visit = data;

    visit->visitor->restart(FALSE, visit->data);
}

static gboolean
runtime_visit_listing(gpointer impl, const PlegListingVisitor *visitor, gpointer data,
                      GCancellable *cancellable, GError **error)
{
    Visit visit = {.visitor = visitor, .data = data};
    ItemSink sandboxes = {.item_func = visit_sandbox, .data = &visit, .reset = restart_sandboxes};
    ItemSink containers = {
        .item_func = visit_container, .data = &visit, .reset = restart_containers};

    return visit_pod_sandboxes(impl, NULL, &sandboxes, cancellable, error) &&
           visit_containers(impl, NULL, &containers, cancellable, error);
}

static void
set_missing_status_error(PlegCriClient *client, const char *method, GError **error)
{
    g_autofree char *shown = pleg_log_text(cri_channel_get_endpoint(client->channel), -1, 0);

    g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                "%s: %s: the runtime answered without a status", shown, method);
}

/* The request of one status query. */
typedef union {
    Runtime__V1__PodSandboxStatusRequest sandbox;
    Runtime__V1__ContainerStatusRequest container;
} StatusRequest;

/* @call asks @q, with @request, its answer unpacked into @arena. */
static void
status_call_init(CriUnaryCall *call, StatusRequest *request, const PlegStatusQuery *q,
                 CriArena *arena)
{
    if (q->pod_sandbox_id) {
        request->sandbox =
            (Runtime__V1__PodSandboxStatusRequest)RUNTIME__V1__POD_SANDBOX_STATUS_REQUEST__INIT;
        request->sandbox.pod_sandbox_id = (char *)q->pod_sandbox_id;
        call->method = "PodSandboxStatus";
        call->request = &request->sandbox.base;
        call->response_descriptor = &runtime__v1__pod_sandbox_status_response__descriptor;
    } else {
        request->container =
            (Runtime__V1__ContainerStatusRequest)RUNTIME__V1__CONTAINER_STATUS_REQUEST__INIT;
        request->container.container_id = (char *)q->container_id;
        call->method = "ContainerStatus";
        call->request = &request->container.base;
        call->response_descriptor = &runtime__v1__container_status_response__descriptor;
    }
    call->arena = arena;
}

/* Decodes the outcome of @call, which asked @q, into @q. */
static void
status_call_decode(PlegCriClient *client, CriUnaryCall *call, PlegStatusQuery *q)
{
    if (call->error) {
        q->error = g_steal_pointer(&call->error);
    } else if (q->pod_sandbox_id) {
        const Runtime__V1__PodSandboxStatusResponse *response = (gconstpointer)call->response;

        if (response->status)
            q->pod_sandbox_status = cri_decode_pod_sandbox_status(response->status);
        else
            set_missing_status_error(client, call->method, &q->error);
    } else {
        const Runtime__V1__ContainerStatusResponse *response = (gconstpointer)call->response;

        if (response->status)
            q->container_status = cri_decode_container_status(response->status);
        else
            set_missing_status_error(client, call->method, &q->error);
    }
}

/* Decodes the outcome of @call, which asked @q, into @q, and counts it. */
static void
status_call_answer(PlegCriClient *client, CriUnaryCall *call, PlegStatusQuery *q)
{
    status_call_decode(client, call, q);
    if (client->ops)
        cri_operations_record(client->ops,
                              q->pod_sandbox_id ? CRI_OPERATION_PODSANDBOX_STATUS
                                                : CRI_OPERATION_CONTAINER_STATUS,
                              call->end_usec - call->start_usec, q->error);
}

/* PodSandboxStatus and ContainerStatus calls, all in flight at once (cri_channel_call_many()). */
static void
runtime_get_statuses(gpointer impl, PlegStatusQuery *queries, guint n_queries,
                     GCancellable *cancellable)
{
    PlegCriClient *client = impl;
    g_autofree StatusRequest *requests = g_new(StatusRequest, n_queries);
    g_autofree CriUnaryCall *calls = g_new0(CriUnaryCall, n_queries);
    /* Every answer of the batch in one arena, dropped once all are decoded. */
    g_autoptr(CriArena) arena = cri_arena_new(cri_channel_get_arena_pool(client->channel));

    for (guint i = 0; i < n_queries; i++)
        status_call_init(&calls[i], &requests[i], &queries[i], arena);
    cri_channel_call_many(client->channel, calls, n_queries, client->timeout_usec, cancellable);
    for (guint i = 0; i < n_queries; i++)
        status_call_answer(client, &calls[i], &queries[i]);
}

/* One status call of runtime_drive_statuses(): the channel hands back the call, the first
 * member. */
typedef struct {
    CriUnaryCall call;
    StatusRequest request;
    PlegStatusQuery *query;
} StatusCall;

typedef struct {
    PlegCriClient *client;
    const PlegStatusFeed *feed;
    gpointer data;
    GPtrArray *calls;      /* every StatusCall made, as the channel needed them */
    GPtrArray *free_calls; /* those not in flight */
    /* Every answer is unpacked into it and dropped once decoded: the channel unpacks one
     * answer at a time, on this thread, just before handing its call back. */
    CriArena *arena;
    CriArenaMark empty;
} StatusDrive;

static CriUnaryCall *
status_drive_next(gpointer data)
{
    StatusDrive *drive = data;
    PlegStatusQuery *q;
    StatusCall *call;

    q = drive->feed->next(drive->data);
    if (!q)
        return NULL;
    if (drive->free_calls->len > 0)
        call = g_ptr_array_steal_index_fast(drive->free_calls, drive->free_calls->len - 1);
    else
        g_ptr_array_add(drive->calls, (call = g_new(StatusCall, 1)));
    memset(&call->call, 0, sizeof(call->call));
    call->query = q;
    status_call_init(&call->call, &call->request, q, drive->arena);
    return &call->call;
}

static void
status_drive_done(CriUnaryCall *done, gpointer data)
{
    StatusDrive *drive = data;
    StatusCall *call = (StatusCall *)done;

    status_call_answer(drive->client, &call->call, call->query);
    cri_arena_rewind(drive->arena, &drive->empty);
    g_ptr_array_add(drive->free_calls, call);
    drive->feed->answered(call->query, drive->data);
}

/* The Generic PLEG's inspections: every status call of a relist in flight from the relist's
 * thread, each answer decoded as it comes (cri_channel_drive()). */
static void
runtime_drive_statuses(gpointer impl, const PlegStatusFeed *feed, gpointer data,
                       guint max_in_flight, GCancellable *cancellable)
{
    static const CriCallFeed call_feed = {status_drive_next, status_drive_done};
    PlegCriClient *client = impl;
    g_autoptr(GPtrArray) calls = g_ptr_array_new_with_free_func(g_free);
    g_autoptr(GPtrArray) free_calls = g_ptr_array_new();
    g_autoptr(CriArena) arena = cri_arena_new(cri_channel_get_arena_pool(client->channel));
    StatusDrive drive = {client, feed, data, calls, free_calls, arena};

    drive.empty = cri_arena_mark(arena);
    cri_channel_drive(client->channel, &call_feed, &drive, max_in_flight, client->timeout_usec,
                      cancellable);
}

static PlegPodSandboxStatus *
runtime_pod_sandbox_status(gpointer impl, const char *pod_sandbox_id, GCancellable *cancellable,
                           GError **error)
{
    PlegStatusQuery query = {.pod_sandbox_id = pod_sandbox_id};

    runtime_get_statuses(impl, &query, 1, cancellable);
    if (query.error)
        g_propagate_error(error, query.error);
    return query.pod_sandbox_status;
}

static PlegContainerStatus *
runtime_container_status(gpointer impl, const char *container_id, GCancellable *cancellable,
                         GError **error)
{
    PlegStatusQuery query = {.container_id = container_id};

    runtime_get_statuses(impl, &query, 1, cancellable);
    if (query.error)
        g_propagate_error(error, query.error);
    return query.container_status;
}

static void
runtime_finalize(gpointer impl)
{
    pleg_cri_client_unref(impl);
}

static const PlegRuntimeVTable cri_runtime_vtable = {
    .size = sizeof(PlegRuntimeVTable),
    .list_pod_sandboxes = runtime_list_pod_sandboxes,
    .list_containers = runtime_list_containers,
    .pod_sandbox_status = runtime_pod_sandbox_status,
    .container_status = runtime_container_status,
    .finalize = runtime_finalize,
    .list_pod_sandboxes_of_pod = runtime_list_pod_sandboxes_of_pod,
    .get_statuses = runtime_get_statuses,
};

PlegRuntime *
pleg_cri_client_as_runtime(PlegCriClient *client)
{
    PlegRuntime *runtime;

    g_return_val_if_fail(client != NULL, NULL);
    runtime = pleg_runtime_new(&cri_runtime_vtable, pleg_cri_client_ref(client));
    pleg_runtime_set_visit_func(runtime, runtime_visit_listing);
    pleg_runtime_set_drive_func(runtime, runtime_drive_statuses);
    return runtime;
}
