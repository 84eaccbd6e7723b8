/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cri-sim through a real gRPC client (the internal CRI core): the RuntimeService subset and its
 * filters, natural and scripted events, stream endings, going away and coming back, delays,
 * failures, round-robin delivery, bulk pods, counters, the command language, and the binary in
 * script and stdin modes.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gio/gio.h>
#include <glib/gstdio.h>

#include "cri-private.h"
#include "cri-sim.h"

#define TIMEOUT_MS    10000
#define CALL_TIMEOUT  (10 * G_USEC_PER_SEC)
#define STREAM_TIMEOUT (30 * G_USEC_PER_SEC)

static char *tmpdir;
static char *sock;
static CriSim *sim;
static CriChannel *channel;

static void
setup(void)
{
    g_autoptr(GError) error = NULL;

    tmpdir = g_dir_make_tmp("cri-sim-XXXXXX", &error);
    ck_assert_ptr_nonnull(tmpdir);
    sock = g_build_filename(tmpdir, "cri.sock", NULL);
    sim = cri_sim_new(sock, &error);
    ck_assert_msg(sim != NULL, "%s", error ? error->message : "");
    channel = cri_channel_new(sock, &error);
    ck_assert_ptr_nonnull(channel);
}

static void
teardown(void)
{
    g_autoptr(GDir) dir = NULL;
    const char *name;

    g_clear_pointer(&channel, cri_channel_unref);
    g_clear_pointer(&sim, cri_sim_free);
    dir = g_dir_open(tmpdir, 0, NULL);
    while (dir && (name = g_dir_read_name(dir))) {
        g_autofree char *path = g_build_filename(tmpdir, name, NULL);
        g_unlink(path);
    }
    g_rmdir(tmpdir);
    g_clear_pointer(&tmpdir, g_free);
    g_clear_pointer(&sock, g_free);
}

static void
assert_ok(gboolean ok, GError *error)
{
    ck_assert_msg(ok, "%s", error ? error->message : "");
}

/* ---- client helpers ---- */

static ProtobufCMessage *
call(const char *method, const ProtobufCMessage *request,
     const ProtobufCMessageDescriptor *response, GError **error)
{
    return cri_channel_call(channel, method, request, response, CALL_TIMEOUT, NULL, error);
}

static Runtime__V1__ListPodSandboxResponse *
list_pods(const Runtime__V1__PodSandboxFilter *filter)
{
    Runtime__V1__ListPodSandboxRequest request = RUNTIME__V1__LIST_POD_SANDBOX_REQUEST__INIT;
    g_autoptr(GError) error = NULL;
    ProtobufCMessage *response;

    request.filter = (Runtime__V1__PodSandboxFilter *)filter;
    response = call("ListPodSandbox", &request.base,
                    &runtime__v1__list_pod_sandbox_response__descriptor, &error);
    ck_assert_msg(response != NULL, "%s", error ? error->message : "");
    return (Runtime__V1__ListPodSandboxResponse *)response;
}

static Runtime__V1__ListContainersResponse *
list_containers(const Runtime__V1__ContainerFilter *filter)
{
    Runtime__V1__ListContainersRequest request = RUNTIME__V1__LIST_CONTAINERS_REQUEST__INIT;
    g_autoptr(GError) error = NULL;
    ProtobufCMessage *response;

    request.filter = (Runtime__V1__ContainerFilter *)filter;
    response = call("ListContainers", &request.base,
                    &runtime__v1__list_containers_response__descriptor, &error);
    ck_assert_msg(response != NULL, "%s", error ? error->message : "");
    return (Runtime__V1__ListContainersResponse *)response;
}

static Runtime__V1__ContainerStatus *
container_status(const char *id, Runtime__V1__ContainerStatusResponse **ret_response)
{
    Runtime__V1__ContainerStatusRequest request = RUNTIME__V1__CONTAINER_STATUS_REQUEST__INIT;
    g_autoptr(GError) error = NULL;
    ProtobufCMessage *response;

    request.container_id = (char *)id;
    response = call("ContainerStatus", &request.base,
                    &runtime__v1__container_status_response__descriptor, &error);
    ck_assert_msg(response != NULL, "%s", error ? error->message : "");
    *ret_response = (Runtime__V1__ContainerStatusResponse *)response;
    return (*ret_response)->status;
}

static gboolean
version(GError **error)
{
    Runtime__V1__VersionRequest request = RUNTIME__V1__VERSION_REQUEST__INIT;
    g_autoptr(ProtobufCMessage) response = NULL;

    response = cri_channel_call(channel, "Version", &request.base,
                                &runtime__v1__version_response__descriptor, 2 * G_USEC_PER_SEC,
                                NULL, error);
    return response != NULL;
}

static CriStream *
open_stream(void)
{
    Runtime__V1__GetEventsRequest request = RUNTIME__V1__GET_EVENTS_REQUEST__INIT;
    g_autoptr(GError) error = NULL;
    CriStream *stream;

    stream = cri_stream_start(channel, "GetContainerEvents", &request.base,
                              &runtime__v1__container_event_response__descriptor, STREAM_TIMEOUT,
                              TRUE, &error);
    ck_assert_ptr_nonnull(stream);
    return stream;
}

/* Opens @n streams and waits until cri-sim has them all as subscribers. */
static void
open_streams(CriStream **streams, guint n)
{
    guint before = cri_sim_get_n_subscribers(sim);

    for (guint i = 0; i < n; i++)
        streams[i] = open_stream();
    ck_assert(cri_sim_wait_subscribers(sim, before + n, TIMEOUT_MS));
}

static Runtime__V1__ContainerEventResponse *
read_event(CriStream *stream)
{
    g_autoptr(GError) error = NULL;
    ProtobufCMessage *message = NULL;

    ck_assert_msg(cri_stream_read(stream, &message, NULL, &error), "%s",
                  error ? error->message : "");
    ck_assert_msg(message != NULL, "the stream ended");
    return (Runtime__V1__ContainerEventResponse *)message;
}

static void
assert_event(CriStream *stream, Runtime__V1__ContainerEventType type, const char *id)
{
    g_autoptr(Runtime__V1__ContainerEventResponse) event = read_event(stream);

    ck_assert_str_eq(event->container_id, id);
    ck_assert_int_eq(event->container_event_type, type);
}

static void
assert_clean_end(CriStream *stream)
{
    g_autoptr(GError) error = NULL;
    ProtobufCMessage *message = NULL;

    ck_assert_msg(cri_stream_read(stream, &message, NULL, &error), "%s",
                  error ? error->message : "");
    ck_assert_ptr_null(message);
}

static void
assert_stream_error(CriStream *stream, int code)
{
    g_autoptr(GError) error = NULL;
    ProtobufCMessage *message = NULL;

    ck_assert(!cri_stream_read(stream, &message, NULL, &error));
    ck_assert_ptr_null(message);
    ck_assert_msg(error->domain == PLEG_CRI_ERROR && error->code == code,
                  "expected code %d: %s", code, error->message);
}

/* ---- the RuntimeService subset ---- */

START_TEST(test_version_status)
{
    Runtime__V1__VersionRequest version_request = RUNTIME__V1__VERSION_REQUEST__INIT;
    Runtime__V1__StatusRequest status_request = RUNTIME__V1__STATUS_REQUEST__INIT;
    g_autoptr(Runtime__V1__VersionResponse) version_response = NULL;
    g_autoptr(Runtime__V1__StatusResponse) status_response = NULL;
    g_autoptr(GError) error = NULL;

    cri_sim_set_version(sim, "sim-runtime", "9.9");
    version_response = (Runtime__V1__VersionResponse *)call(
        "Version", &version_request.base, &runtime__v1__version_response__descriptor, &error);
    ck_assert_ptr_nonnull(version_response);
    ck_assert_str_eq(version_response->runtime_name, "sim-runtime");
    ck_assert_str_eq(version_response->runtime_version, "9.9");
    ck_assert_str_eq(version_response->runtime_api_version, "v1");

    status_response = (Runtime__V1__StatusResponse *)call(
        "Status", &status_request.base, &runtime__v1__status_response__descriptor, &error);
    ck_assert_ptr_nonnull(status_response);
    ck_assert_uint_eq(status_response->status->n_conditions, 2);
    ck_assert(status_response->status->conditions[0]->status);
}
END_TEST

START_TEST(test_pods_and_containers)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(Runtime__V1__ListPodSandboxResponse) pods = NULL;
    g_autoptr(Runtime__V1__ListContainersResponse) containers = NULL;
    g_autoptr(Runtime__V1__PodSandboxStatusResponse) pod_status = NULL;
    g_autoptr(Runtime__V1__ContainerStatusResponse) running_response = NULL;
    g_autoptr(Runtime__V1__ContainerStatusResponse) exited_response = NULL;
    g_autoptr(ProtobufCMessage) gone = NULL;
    Runtime__V1__PodSandboxStatusRequest status_request =
        RUNTIME__V1__POD_SANDBOX_STATUS_REQUEST__INIT;
    Runtime__V1__ContainerStatusRequest gone_request = RUNTIME__V1__CONTAINER_STATUS_REQUEST__INIT;
    Runtime__V1__ContainerStatus *status;
    CriSimContainerState state;

    assert_ok(cri_sim_add_pod(sim, "u1", "web", &error), error);
    ck_assert(!cri_sim_add_pod(sim, "u1", NULL, &error));
    ck_assert(g_error_matches(error, CRI_SIM_ERROR, CRI_SIM_ERROR_EXISTS));
    g_clear_error(&error);
    assert_ok(cri_sim_add_container(sim, "u1", "c1", "app", &error), error);
    ck_assert(!cri_sim_add_container(sim, "nope", "c2", NULL, &error));
    ck_assert(g_error_matches(error, CRI_SIM_ERROR, CRI_SIM_ERROR_NOT_FOUND));
    g_clear_error(&error);
    assert_ok(cri_sim_start_container(sim, "c1", &error), error);
    ck_assert(!cri_sim_start_container(sim, "c1", &error));
    ck_assert(g_error_matches(error, CRI_SIM_ERROR, CRI_SIM_ERROR_STATE));
    g_clear_error(&error);

    pods = list_pods(NULL);
    ck_assert_uint_eq(pods->n_items, 1);
    ck_assert_str_eq(pods->items[0]->id, "sb-u1");
    ck_assert_str_eq(pods->items[0]->metadata->uid, "u1");
    ck_assert_str_eq(pods->items[0]->metadata->name, "web");
    ck_assert_str_eq(pods->items[0]->metadata->namespace_, "default");
    ck_assert_int_eq(pods->items[0]->state, RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_READY);

    status_request.pod_sandbox_id = (char *)"sb-u1";
    pod_status = (Runtime__V1__PodSandboxStatusResponse *)call(
        "PodSandboxStatus", &status_request.base,
        &runtime__v1__pod_sandbox_status_response__descriptor, &error);
    ck_assert_ptr_nonnull(pod_status);
    ck_assert_str_eq(pod_status->status->metadata->uid, "u1");

    containers = list_containers(NULL);
    ck_assert_uint_eq(containers->n_containers, 1);
    ck_assert_str_eq(containers->containers[0]->id, "c1");
    ck_assert_str_eq(containers->containers[0]->pod_sandbox_id, "sb-u1");
    ck_assert_str_eq(containers->containers[0]->metadata->name, "app");
    ck_assert_int_eq(containers->containers[0]->state,
                     RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING);

    status = container_status("c1", &running_response);
    ck_assert_int_eq(status->state, RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING);
    ck_assert_int_gt(status->started_at, 0);
    ck_assert_int_eq(status->finished_at, 0);

    assert_ok(cri_sim_exit_container(sim, "c1", 3, NULL, &error), error);
    status = container_status("c1", &exited_response);
    ck_assert_int_eq(status->state, RUNTIME__V1__CONTAINER_STATE__CONTAINER_EXITED);
    ck_assert_int_eq(status->exit_code, 3);
    ck_assert_str_eq(status->reason, "Error");
    ck_assert_int_gt(status->finished_at, 0);
    ck_assert(cri_sim_get_container_state(sim, "c1", &state));
    ck_assert_int_eq(state, CRI_SIM_CONTAINER_EXITED);

    assert_ok(cri_sim_remove_pod(sim, "u1", &error), error);
    ck_assert_uint_eq(cri_sim_get_n_pods(sim), 0);
    ck_assert_uint_eq(cri_sim_get_n_containers(sim), 0);
    gone_request.container_id = (char *)"c1";
    gone = call("ContainerStatus", &gone_request.base,
                &runtime__v1__container_status_response__descriptor, &error);
    ck_assert_ptr_null(gone);
    ck_assert_int_eq(error->code, PLEG_CRI_ERROR_NOT_FOUND);
}
END_TEST

START_TEST(test_filters)
{
    static const char *const labels_a[] = {"app", "a", "tier", "front", NULL};
    static const char *const labels_b[] = {"app", "b", NULL};
    g_autoptr(GError) error = NULL;
    Runtime__V1__PodSandboxFilter pod_filter = RUNTIME__V1__POD_SANDBOX_FILTER__INIT;
    Runtime__V1__PodSandboxStateValue pod_state = RUNTIME__V1__POD_SANDBOX_STATE_VALUE__INIT;
    Runtime__V1__PodSandboxFilter__LabelSelectorEntry pod_selector =
        RUNTIME__V1__POD_SANDBOX_FILTER__LABEL_SELECTOR_ENTRY__INIT;
    Runtime__V1__PodSandboxFilter__LabelSelectorEntry *pod_selectors[] = {&pod_selector};
    Runtime__V1__ContainerFilter filter = RUNTIME__V1__CONTAINER_FILTER__INIT;
    Runtime__V1__ContainerStateValue state = RUNTIME__V1__CONTAINER_STATE_VALUE__INIT;
    Runtime__V1__ContainerFilter__LabelSelectorEntry selector =
        RUNTIME__V1__CONTAINER_FILTER__LABEL_SELECTOR_ENTRY__INIT;
    Runtime__V1__ContainerFilter__LabelSelectorEntry *selectors[] = {&selector};

    assert_ok(cri_sim_add_pod_full(sim, &(CriSimPodSpec){.uid = "pa", .labels = labels_a}, NULL,
                                   &error),
              error);
    assert_ok(cri_sim_add_pod_full(sim,
                                   &(CriSimPodSpec){.uid = "pb", .labels = labels_b,
                                                    .not_ready = TRUE},
                                   NULL, &error),
              error);
    assert_ok(cri_sim_add_container_full(
                  sim, &(CriSimContainerSpec){.id = "ca", .pod_uid = "pa", .labels = labels_a},
                  NULL, &error),
              error);
    assert_ok(cri_sim_add_container_full(sim,
                                         &(CriSimContainerSpec){.id = "cb",
                                                                .pod_uid = "pb",
                                                                .state = CRI_SIM_CONTAINER_RUNNING},
                                         NULL, &error),
              error);
    assert_ok(cri_sim_add_container(sim, "pb", "cc", NULL, &error), error);

    /* Sandboxes by id, by state, by label selector (every pair must match). */
    pod_filter.id = (char *)"sb-pb";
    {
        g_autoptr(Runtime__V1__ListPodSandboxResponse) r = list_pods(&pod_filter);
        ck_assert_uint_eq(r->n_items, 1);
        ck_assert_str_eq(r->items[0]->id, "sb-pb");
    }
    pod_filter.id = (char *)"";
    pod_state.state = RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_READY;
    pod_filter.state = &pod_state;
    {
        g_autoptr(Runtime__V1__ListPodSandboxResponse) r = list_pods(&pod_filter);
        ck_assert_uint_eq(r->n_items, 1);
        ck_assert_str_eq(r->items[0]->id, "sb-pa");
    }
    pod_filter.state = NULL;
    pod_selector.key = (char *)"app";
    pod_selector.value = (char *)"b";
    pod_filter.n_label_selector = 1;
    pod_filter.label_selector = pod_selectors;
    {
        g_autoptr(Runtime__V1__ListPodSandboxResponse) r = list_pods(&pod_filter);
        ck_assert_uint_eq(r->n_items, 1);
        ck_assert_str_eq(r->items[0]->id, "sb-pb");
    }

    /* Containers by id, sandbox, state, labels; default labels carry the pod uid. */
    filter.id = (char *)"cc";
    {
        g_autoptr(Runtime__V1__ListContainersResponse) r = list_containers(&filter);
        ck_assert_uint_eq(r->n_containers, 1);
        ck_assert_str_eq(r->containers[0]->id, "cc");
    }
    filter.id = (char *)"";
    filter.pod_sandbox_id = (char *)"sb-pb";
    {
        g_autoptr(Runtime__V1__ListContainersResponse) r = list_containers(&filter);
        ck_assert_uint_eq(r->n_containers, 2);
    }
    state.state = RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING;
    filter.state = &state;
    {
        g_autoptr(Runtime__V1__ListContainersResponse) r = list_containers(&filter);
        ck_assert_uint_eq(r->n_containers, 1);
        ck_assert_str_eq(r->containers[0]->id, "cb");
    }
    filter.pod_sandbox_id = (char *)"sb-gone";
    {
        g_autoptr(Runtime__V1__ListContainersResponse) r = list_containers(&filter);
        ck_assert_uint_eq(r->n_containers, 0);
    }
    filter.pod_sandbox_id = (char *)"";
    filter.state = NULL;
    selector.key = (char *)"io.kubernetes.pod.uid";
    selector.value = (char *)"pb";
    filter.n_label_selector = 1;
    filter.label_selector = selectors;
    {
        g_autoptr(Runtime__V1__ListContainersResponse) r = list_containers(&filter);
        ck_assert_uint_eq(r->n_containers, 2);
    }
    selector.key = (char *)"tier";
    selector.value = (char *)"front";
    {
        g_autoptr(Runtime__V1__ListContainersResponse) r = list_containers(&filter);
        ck_assert_uint_eq(r->n_containers, 1);
        ck_assert_str_eq(r->containers[0]->id, "ca");
    }
}
END_TEST

/* The write side over RPC, as kubelet drives it, with the events it causes. */
START_TEST(test_rpc_lifecycle)
{
    Runtime__V1__PodSandboxMetadata pod_metadata = RUNTIME__V1__POD_SANDBOX_METADATA__INIT;
    Runtime__V1__PodSandboxConfig pod_config = RUNTIME__V1__POD_SANDBOX_CONFIG__INIT;
    Runtime__V1__RunPodSandboxRequest run = RUNTIME__V1__RUN_POD_SANDBOX_REQUEST__INIT;
    Runtime__V1__ContainerMetadata container_metadata = RUNTIME__V1__CONTAINER_METADATA__INIT;
    Runtime__V1__ContainerConfig container_config = RUNTIME__V1__CONTAINER_CONFIG__INIT;
    Runtime__V1__CreateContainerRequest create = RUNTIME__V1__CREATE_CONTAINER_REQUEST__INIT;
    Runtime__V1__StartContainerRequest start = RUNTIME__V1__START_CONTAINER_REQUEST__INIT;
    Runtime__V1__StopContainerRequest stop = RUNTIME__V1__STOP_CONTAINER_REQUEST__INIT;
    Runtime__V1__RemoveContainerRequest remove = RUNTIME__V1__REMOVE_CONTAINER_REQUEST__INIT;
    Runtime__V1__StopPodSandboxRequest stopp = RUNTIME__V1__STOP_POD_SANDBOX_REQUEST__INIT;
    Runtime__V1__RemovePodSandboxRequest rmp = RUNTIME__V1__REMOVE_POD_SANDBOX_REQUEST__INIT;
    g_autoptr(Runtime__V1__RunPodSandboxResponse) run_response = NULL;
    g_autoptr(Runtime__V1__CreateContainerResponse) create_response = NULL;
    g_autoptr(Runtime__V1__ContainerStatusResponse) stopped_response = NULL;
    g_autoptr(CriStream) stream = NULL;
    g_autoptr(GError) error = NULL;
    g_autofree char *sandbox_id = NULL;
    g_autofree char *container_id = NULL;
    Runtime__V1__ContainerStatus *status;

    open_streams(&stream, 1);

    pod_metadata.name = (char *)"web";
    pod_metadata.uid = (char *)"u-rpc";
    pod_metadata.namespace_ = (char *)"team";
    pod_config.metadata = &pod_metadata;
    run.config = &pod_config;
    run_response = (Runtime__V1__RunPodSandboxResponse *)call(
        "RunPodSandbox", &run.base, &runtime__v1__run_pod_sandbox_response__descriptor, &error);
    ck_assert_ptr_nonnull(run_response);
    sandbox_id = cri_sim_get_sandbox_id(sim, "u-rpc");
    ck_assert_str_eq(run_response->pod_sandbox_id, sandbox_id);
    ck_assert(g_str_has_prefix(sandbox_id, "sb-"));

    container_metadata.name = (char *)"app";
    container_config.metadata = &container_metadata;
    create.pod_sandbox_id = sandbox_id;
    create.config = &container_config;
    create_response = (Runtime__V1__CreateContainerResponse *)call(
        "CreateContainer", &create.base, &runtime__v1__create_container_response__descriptor,
        &error);
    ck_assert_ptr_nonnull(create_response);
    container_id = g_strdup(create_response->container_id);
    assert_event(stream, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_CREATED_EVENT, container_id);

    start.container_id = container_id;
    {
        g_autoptr(ProtobufCMessage) r = call("StartContainer", &start.base,
                                             &runtime__v1__start_container_response__descriptor,
                                             &error);
        ck_assert_ptr_nonnull(r);
    }
    assert_event(stream, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STARTED_EVENT, container_id);

    stop.container_id = container_id;
    stop.timeout = 0;
    {
        g_autoptr(ProtobufCMessage) r = call(
            "StopContainer", &stop.base, &runtime__v1__stop_container_response__descriptor, &error);
        ck_assert_ptr_nonnull(r);
    }
    assert_event(stream, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STOPPED_EVENT, container_id);
    status = container_status(container_id, &stopped_response);
    ck_assert_int_eq(status->exit_code, 137);

    remove.container_id = container_id;
    {
        g_autoptr(ProtobufCMessage) r = call("RemoveContainer", &remove.base,
                                             &runtime__v1__remove_container_response__descriptor,
                                             &error);
        ck_assert_ptr_nonnull(r);
    }
    assert_event(stream, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_DELETED_EVENT, container_id);

    stopp.pod_sandbox_id = sandbox_id;
    {
        g_autoptr(ProtobufCMessage) r = call("StopPodSandbox", &stopp.base,
                                             &runtime__v1__stop_pod_sandbox_response__descriptor,
                                             &error);
        ck_assert_ptr_nonnull(r);
    }
    rmp.pod_sandbox_id = sandbox_id;
    {
        g_autoptr(ProtobufCMessage) r = call("RemovePodSandbox", &rmp.base,
                                             &runtime__v1__remove_pod_sandbox_response__descriptor,
                                             &error);
        ck_assert_ptr_nonnull(r);
    }
    ck_assert_uint_eq(cri_sim_get_n_pods(sim), 0);
    ck_assert_uint_eq(cri_sim_get_n_calls(sim, "RunPodSandbox"), 1);
    ck_assert_uint_eq(cri_sim_get_n_calls(sim, "RemovePodSandbox"), 1);
}
END_TEST

START_TEST(test_unimplemented)
{
    Runtime__V1__VersionRequest request = RUNTIME__V1__VERSION_REQUEST__INIT;
    g_autoptr(ProtobufCMessage) response = NULL;
    g_autoptr(GError) error = NULL;
    g_autoptr(CriStream) stream = NULL;

    /* A method cri-sim does not know (any message decodes as an empty one). */
    response = call("ImageFsInfo", &request.base, &runtime__v1__version_response__descriptor,
                    &error);
    ck_assert_ptr_null(response);
    ck_assert_int_eq(error->code, PLEG_CRI_ERROR_UNIMPLEMENTED);
    ck_assert_uint_eq(cri_sim_get_n_calls(sim, "ImageFsInfo"), 1);

    cri_sim_set_events_unimplemented(sim, TRUE);
    stream = open_stream();
    assert_stream_error(stream, PLEG_CRI_ERROR_UNIMPLEMENTED);
    ck_assert_uint_eq(cri_sim_get_n_streams(sim), 0);
    ck_assert_uint_eq(cri_sim_get_n_calls(sim, "GetContainerEvents"), 1);
}
END_TEST

/* ---- events ---- */

static void
assert_full_event(Runtime__V1__ContainerEventResponse *event, const char *uid, guint n_containers)
{
    ck_assert_ptr_nonnull(event->pod_sandbox_status);
    ck_assert_ptr_nonnull(event->pod_sandbox_status->metadata);
    ck_assert_str_eq(event->pod_sandbox_status->metadata->uid, uid);
    ck_assert_uint_eq(event->n_containers_statuses, n_containers);
    ck_assert_int_gt(event->created_at, 0);
}

START_TEST(test_events_broadcast)
{
    CriStream *streams[2];
    g_autoptr(GError) error = NULL;

    open_streams(streams, G_N_ELEMENTS(streams));
    ck_assert_uint_eq(cri_sim_get_n_streams(sim), 2);
    assert_ok(cri_sim_add_pod(sim, "u1", NULL, &error), error);
    assert_ok(cri_sim_add_container(sim, "u1", "c1", NULL, &error), error);
    assert_ok(cri_sim_start_container(sim, "c1", &error), error);
    assert_ok(cri_sim_exit_container(sim, "c1", 0, NULL, &error), error);
    assert_ok(cri_sim_remove_container(sim, "c1", &error), error);

    for (guint i = 0; i < G_N_ELEMENTS(streams); i++) {
        static const Runtime__V1__ContainerEventType types[] = {
            RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_CREATED_EVENT,
            RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STARTED_EVENT,
            RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STOPPED_EVENT,
            RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_DELETED_EVENT,
        };

        for (guint t = 0; t < G_N_ELEMENTS(types); t++) {
            g_autoptr(Runtime__V1__ContainerEventResponse) event = read_event(streams[i]);

            ck_assert_str_eq(event->container_id, "c1");
            ck_assert_int_eq(event->container_event_type, types[t]);
            /* The deleted container is no longer among the pod's statuses. */
            assert_full_event(event, "u1", t == 3 ? 0 : 1);
            if (t == 2) {
                ck_assert_int_eq(event->containers_statuses[0]->state,
                                 RUNTIME__V1__CONTAINER_STATE__CONTAINER_EXITED);
                ck_assert_str_eq(event->containers_statuses[0]->reason, "Completed");
            }
        }
    }
    /* The server counts a message when gRPC reports it written, maybe after the client read it. */
    ck_assert(cri_sim_wait_events_sent(sim, 8, TIMEOUT_MS));
    ck_assert_uint_eq(cri_sim_get_n_events_sent(sim), 8);

    /* A client that goes away is no longer a subscriber. */
    cri_stream_free(streams[0]);
    ck_assert(cri_sim_wait_subscribers(sim, 1, TIMEOUT_MS));
    cri_stream_free(streams[1]);
    ck_assert(cri_sim_wait_subscribers(sim, 0, TIMEOUT_MS));
}
END_TEST

START_TEST(test_events_scripted)
{
    g_autoptr(CriStream) stream = NULL;
    g_autoptr(GError) error = NULL;
    static const CriSimEventFlags flag_cases[] = {
        CRI_SIM_EVENT_NO_SANDBOX,
        CRI_SIM_EVENT_NO_METADATA,
        CRI_SIM_EVENT_EMPTY_UID,
        CRI_SIM_EVENT_UNKNOWN_ID,
        CRI_SIM_EVENT_NO_CONTAINERS,
    };

    assert_ok(cri_sim_add_pod(sim, "u1", NULL, &error), error);
    assert_ok(cri_sim_add_container(sim, "u1", "c1", NULL, &error), error);
    open_streams(&stream, 1);

    for (gsize i = 0; i < G_N_ELEMENTS(flag_cases); i++) {
        CriSimEvent spec = {CRI_SIM_EVENT_STOPPED, "c1", flag_cases[i], 0};
        g_autoptr(Runtime__V1__ContainerEventResponse) event = NULL;

        ck_assert_uint_eq(cri_sim_emit(sim, &spec), 1);
        event = read_event(stream);
        ck_assert_int_eq(event->container_event_type,
                         RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STOPPED_EVENT);
        switch (flag_cases[i]) {
        case CRI_SIM_EVENT_NO_SANDBOX:
            ck_assert_ptr_null(event->pod_sandbox_status);
            ck_assert_uint_eq(event->n_containers_statuses, 1);
            break;
        case CRI_SIM_EVENT_NO_METADATA:
            ck_assert_ptr_nonnull(event->pod_sandbox_status);
            ck_assert_ptr_null(event->pod_sandbox_status->metadata);
            break;
        case CRI_SIM_EVENT_EMPTY_UID:
            ck_assert_str_eq(event->pod_sandbox_status->metadata->uid, "");
            break;
        case CRI_SIM_EVENT_UNKNOWN_ID:
            ck_assert_str_eq(event->container_id, "c1-unknown");
            assert_full_event(event, "u1", 1);
            break;
        case CRI_SIM_EVENT_NO_CONTAINERS:
            assert_full_event(event, "u1", 0);
            break;
        default:
            ck_abort();
        }
        if (flag_cases[i] != CRI_SIM_EVENT_UNKNOWN_ID)
            ck_assert_str_eq(event->container_id, "c1");
    }

    /* An id the runtime never had: no statuses at all.  Old created_at, duplicates, and
     * STOPPED before STARTED, all through the command language. */
    assert_ok(cri_sim_run_command(sim, "event STOPPED ghost", NULL, &error), error);
    {
        g_autoptr(Runtime__V1__ContainerEventResponse) event = read_event(stream);

        ck_assert_str_eq(event->container_id, "ghost");
        ck_assert_ptr_null(event->pod_sandbox_status);
        ck_assert_uint_eq(event->n_containers_statuses, 0);
    }
    assert_ok(cri_sim_run_command(sim, "event STOPPED c1 old-created-at=12345", NULL, &error),
              error);
    {
        g_autoptr(Runtime__V1__ContainerEventResponse) event = read_event(stream);

        ck_assert_int_eq(event->created_at, 12345);
    }
    assert_ok(cri_sim_run_command(sim, "event STOPPED c1", NULL, &error), error);
    assert_ok(cri_sim_run_command(sim, "event STOPPED c1", NULL, &error), error);
    assert_ok(cri_sim_run_command(sim, "event STARTED c1", NULL, &error), error);
    assert_event(stream, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STOPPED_EVENT, "c1");
    assert_event(stream, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STOPPED_EVENT, "c1");
    assert_event(stream, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STARTED_EVENT, "c1");
    /* No state change came with them. */
    {
        CriSimContainerState state;

        ck_assert(cri_sim_get_container_state(sim, "c1", &state));
        ck_assert_int_eq(state, CRI_SIM_CONTAINER_CREATED);
    }
}
END_TEST

START_TEST(test_auto_and_sandbox_events)
{
    g_autoptr(CriStream) stream = NULL;
    g_autoptr(GError) error = NULL;

    open_streams(&stream, 1);
    /* Off: state changes are silent; what is emitted by hand still goes out. */
    cri_sim_set_auto_events(sim, FALSE);
    assert_ok(cri_sim_add_pod(sim, "u1", NULL, &error), error);
    assert_ok(cri_sim_add_container(sim, "u1", "c1", NULL, &error), error);
    assert_ok(cri_sim_start_container(sim, "c1", &error), error);
    cri_sim_emit(sim, &(CriSimEvent){.type = CRI_SIM_EVENT_STOPPED, .container_id = "c1"});
    assert_event(stream, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STOPPED_EVENT, "c1");

    /* Sandbox events, like containerd's: the sandbox id stands as the container id. */
    cri_sim_set_auto_events(sim, TRUE);
    cri_sim_set_sandbox_events(sim, TRUE);
    assert_ok(cri_sim_run_command(sim, "rmp u1", NULL, &error), error);
    assert_event(stream, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STOPPED_EVENT, "c1");
    assert_event(stream, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STOPPED_EVENT, "sb-u1");
    assert_event(stream, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_DELETED_EVENT, "c1");
    assert_event(stream, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_DELETED_EVENT, "sb-u1");
    assert_ok(cri_sim_run_command(sim, "pod u2", NULL, &error), error);
    assert_event(stream, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_CREATED_EVENT, "sb-u2");
    assert_event(stream, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STARTED_EVENT, "sb-u2");
}
END_TEST

START_TEST(test_end_stream)
{
    CriStream *streams[2];
    g_autoptr(GError) error = NULL;

    assert_ok(cri_sim_add_pod(sim, "u1", NULL, &error), error);
    open_streams(streams, 1);
    /* Queued events go out first, then the clean end. */
    assert_ok(cri_sim_add_container(sim, "u1", "c1", NULL, &error), error);
    cri_sim_end_streams(sim, 0, NULL);
    ck_assert_uint_eq(cri_sim_get_n_subscribers(sim), 0);
    assert_event(streams[0], RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_CREATED_EVENT, "c1");
    assert_clean_end(streams[0]);

    open_streams(&streams[1], 1);
    assert_ok(cri_sim_run_command(sim, "end-stream error 13 broken pipe", NULL, &error), error);
    assert_stream_error(streams[1], PLEG_CRI_ERROR_INTERNAL);
    ck_assert_uint_eq(cri_sim_get_n_streams(sim), 2);
    cri_stream_free(streams[0]);
    cri_stream_free(streams[1]);
}
END_TEST

START_TEST(test_deliver_one)
{
    CriStream *streams[2];
    g_autoptr(GError) error = NULL;
    guint seen[2] = {0, 0};

    assert_ok(cri_sim_add_pod(sim, "u1", NULL, &error), error);
    open_streams(streams, G_N_ELEMENTS(streams));
    assert_ok(cri_sim_run_command(sim, "deliver-one on", NULL, &error), error);
    for (guint i = 0; i < 4; i++) {
        g_autofree char *id = g_strdup_printf("c%u", i);

        assert_ok(cri_sim_add_container(sim, "u1", id, NULL, &error), error);
    }
    /* Round-robin: each gets every other event, and nothing more (the end comes next). */
    for (guint s = 0; s < G_N_ELEMENTS(streams); s++)
        for (guint i = 0; i < 2; i++) {
            g_autoptr(Runtime__V1__ContainerEventResponse) event = read_event(streams[s]);

            ck_assert_int_eq(event->container_event_type,
                             RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_CREATED_EVENT);
            seen[s] |= 1u << (event->container_id[1] - '0');
        }
    ck_assert_uint_eq(seen[0] | seen[1], 0xf);
    ck_assert_uint_eq(seen[0] & seen[1], 0);
    cri_sim_end_streams(sim, 0, NULL);
    for (guint s = 0; s < G_N_ELEMENTS(streams); s++) {
        assert_clean_end(streams[s]);
        cri_stream_free(streams[s]);
    }
}
END_TEST

/* ---- the server goes away ---- */

static gboolean
connect_refused(const char *path)
{
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int r, errsv;

    g_strlcpy(address.sun_path, path, sizeof(address.sun_path));
    r = connect(fd, (struct sockaddr *)&address, sizeof(address));
    errsv = errno;
    close(fd);
    return r < 0 && errsv == ECONNREFUSED;
}

static gboolean
wait_version(gint64 timeout_usec)
{
    gint64 deadline = g_get_monotonic_time() + timeout_usec;

    while (g_get_monotonic_time() < deadline) {
        g_autoptr(GError) error = NULL;

        if (version(&error))
            return TRUE;
        g_usleep(20 * 1000);
    }
    return FALSE;
}

START_TEST(test_away_and_back)
{
    g_autoptr(CriStream) stream = NULL;
    g_autoptr(CriStream) again = NULL;
    g_autoptr(GError) error = NULL;

    assert_ok(cri_sim_add_pod(sim, "u1", NULL, &error), error);
    assert_ok(cri_sim_add_container(sim, "u1", "c1", NULL, &error), error);
    assert_ok(cri_sim_start_container(sim, "c1", &error), error);
    open_streams(&stream, 1);

    /* Away until told: the stream ends UNAVAILABLE, the socket is gone. */
    assert_ok(cri_sim_go_away(sim, -1, FALSE, &error), error);
    ck_assert(!cri_sim_is_serving(sim));
    ck_assert(!cri_sim_go_away(sim, 10, FALSE, &error));
    g_clear_error(&error);
    assert_stream_error(stream, PLEG_CRI_ERROR_UNAVAILABLE);
    ck_assert_uint_eq(cri_sim_get_n_subscribers(sim), 0);
    ck_assert(!g_file_test(sock, G_FILE_TEST_EXISTS));
    ck_assert(!version(&error));
    ck_assert_int_eq(error->code, PLEG_CRI_ERROR_UNAVAILABLE);
    g_clear_error(&error);

    /* What happens meanwhile is kept; its events reach nobody. */
    assert_ok(cri_sim_exit_container(sim, "c1", 1, NULL, &error), error);
    assert_ok(cri_sim_come_back(sim, &error), error);
    ck_assert(cri_sim_is_serving(sim));
    ck_assert(wait_version(20 * G_USEC_PER_SEC));
    {
        g_autoptr(Runtime__V1__ContainerStatusResponse) response = NULL;

        ck_assert_int_eq(container_status("c1", &response)->exit_code, 1);
    }
    /* A new stream counts as a reconnect. */
    open_streams(&again, 1);
    ck_assert_uint_eq(cri_sim_get_n_streams(sim), 2);
}
END_TEST

/* The soak (scripts/soak.sh) churns through commands while the runtime is away: pods and
 * containers made, exited and removed meanwhile are what the listing shows once it is back. */
START_TEST(test_away_changes_kept)
{
    g_autoptr(Runtime__V1__ListPodSandboxResponse) pods = NULL;
    g_autoptr(Runtime__V1__ListContainersResponse) containers = NULL;
    g_autoptr(GError) error = NULL;
    const char *const during[] = {"pod u2", "container u2 c2", "start c2", "container u2 c3",
                                  "exit c3 42", "rm c1", "rmp u1"};

    assert_ok(cri_sim_run_command(sim, "pod u1", NULL, &error), error);
    assert_ok(cri_sim_run_command(sim, "container u1 c1", NULL, &error), error);
    assert_ok(cri_sim_run_command(sim, "start c1", NULL, &error), error);
    assert_ok(cri_sim_run_command(sim, "away -1 stale-socket", NULL, &error), error);
    for (guint i = 0; i < G_N_ELEMENTS(during); i++)
        assert_ok(cri_sim_run_command(sim, during[i], NULL, &error), error);
    ck_assert(!cri_sim_is_serving(sim));
    assert_ok(cri_sim_run_command(sim, "back", NULL, &error), error);
    ck_assert(wait_version(20 * G_USEC_PER_SEC));

    pods = list_pods(NULL);
    ck_assert_uint_eq(pods->n_items, 1);
    ck_assert_str_eq(pods->items[0]->id, "sb-u2");
    ck_assert_int_eq(pods->items[0]->state, RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_READY);
    containers = list_containers(NULL);
    ck_assert_uint_eq(containers->n_containers, 2);
    for (guint i = 0; i < containers->n_containers; i++) {
        const Runtime__V1__Container *c = containers->containers[i];

        ck_assert_str_eq(c->pod_sandbox_id, "sb-u2");
        if (g_str_equal(c->id, "c2"))
            ck_assert_int_eq(c->state, RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING);
        else {
            g_autoptr(Runtime__V1__ContainerStatusResponse) response = NULL;

            ck_assert_str_eq(c->id, "c3");
            ck_assert_int_eq(c->state, RUNTIME__V1__CONTAINER_STATE__CONTAINER_EXITED);
            ck_assert_int_eq(container_status("c3", &response)->exit_code, 42);
        }
    }
}
END_TEST

START_TEST(test_away_stale_socket)
{
    g_autoptr(CriStream) stream = NULL;
    g_autoptr(GError) error = NULL;

    open_streams(&stream, 1);
    assert_ok(cri_sim_run_command(sim, "away -1 stale-socket", NULL, &error), error);
    assert_stream_error(stream, PLEG_CRI_ERROR_UNAVAILABLE);
    /* A socket file stays, but nobody listens on it, as after a crash. */
    ck_assert(g_file_test(sock, G_FILE_TEST_EXISTS));
    ck_assert(connect_refused(sock));
    assert_ok(cri_sim_run_command(sim, "back", NULL, &error), error);
    ck_assert(wait_version(20 * G_USEC_PER_SEC));
}
END_TEST

START_TEST(test_away_timed)
{
    g_autoptr(CriStream) stream = NULL;
    g_autoptr(CriStream) again = NULL;
    g_autoptr(GError) error = NULL;

    open_streams(&stream, 1);
    assert_ok(cri_sim_go_away(sim, 300, FALSE, &error), error);
    assert_stream_error(stream, PLEG_CRI_ERROR_UNAVAILABLE);
    /* Back on its own, on the same path; a waiting stream gets in. */
    again = open_stream();
    ck_assert(cri_sim_wait_serving(sim, TIMEOUT_MS));
    ck_assert(cri_sim_wait_subscribers(sim, 1, 30000));
    ck_assert_uint_eq(cri_sim_get_n_streams(sim), 2);
    ck_assert(wait_version(20 * G_USEC_PER_SEC));
}
END_TEST

/* ---- delays and failures ---- */

START_TEST(test_delay)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(ProtobufCMessage) hung = NULL;
    Runtime__V1__VersionRequest request = RUNTIME__V1__VERSION_REQUEST__INIT;
    gint64 start;

    assert_ok(cri_sim_run_command(sim, "delay Version 200", NULL, &error), error);
    start = g_get_monotonic_time();
    assert_ok(version(&error), error);
    ck_assert_int_ge(g_get_monotonic_time() - start, 200 * 1000);
    /* Other methods are not delayed by a rule for one method; a delayed call still counts. */
    ck_assert_uint_eq(cri_sim_get_n_calls(sim, "Version"), 1);

    /* Never: the call ends when the client gives up.  The Version rule goes first, or its 200 ms
     * answer would race the client's 200 ms deadline. */
    cri_sim_set_delay(sim, "Version", 0);
    cri_sim_set_delay(sim, "*", -1);
    hung = cri_channel_call(channel, "Version", &request.base,
                            &runtime__v1__version_response__descriptor, G_USEC_PER_SEC / 5, NULL,
                            &error);
    ck_assert_ptr_null(hung);
    ck_assert_int_eq(error->code, PLEG_CRI_ERROR_DEADLINE_EXCEEDED);
    g_clear_error(&error);

    cri_sim_set_delay(sim, "*", 0);
    assert_ok(version(&error), error);
}
END_TEST

START_TEST(test_delay_stream)
{
    g_autoptr(CriStream) stream = NULL;

    g_autoptr(CriStream) never = NULL;
    gint64 start;

    /* Never: the stream is in, but no subscriber. */
    cri_sim_set_delay(sim, "GetContainerEvents", -1);
    never = open_stream();
    ck_assert(cri_sim_wait_calls(sim, "GetContainerEvents", 1, TIMEOUT_MS));
    ck_assert_uint_eq(cri_sim_get_n_subscribers(sim), 0);
    g_clear_pointer(&never, cri_stream_free);

    /* A delayed stream subscribes late. */
    cri_sim_set_delay(sim, "GetContainerEvents", 200);
    start = g_get_monotonic_time();
    stream = open_stream();
    ck_assert(cri_sim_wait_subscribers(sim, 1, TIMEOUT_MS));
    ck_assert_int_ge(g_get_monotonic_time() - start, 200 * 1000);
    cri_sim_emit(sim, &(CriSimEvent){.type = CRI_SIM_EVENT_CREATED, .container_id = "x"});
    assert_event(stream, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_CREATED_EVENT, "x");
}
END_TEST

START_TEST(test_fail)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(CriStream) stream = NULL;
    g_autoptr(CriStream) healthy = NULL;

    assert_ok(cri_sim_run_command(sim, "fail Version 14 2", NULL, &error), error);
    for (guint i = 0; i < 2; i++) {
        ck_assert(!version(&error));
        ck_assert_int_eq(error->code, PLEG_CRI_ERROR_UNAVAILABLE);
        ck_assert_msg(strstr(error->message, "scripted failure"), "%s", error->message);
        g_clear_error(&error);
    }
    assert_ok(version(&error), error);

    /* Until cleared. */
    cri_sim_set_fail(sim, "Version", 8, -1);
    for (guint i = 0; i < 3; i++) {
        ck_assert(!version(&error));
        ck_assert_int_eq(error->code, PLEG_CRI_ERROR_RESOURCE_EXHAUSTED);
        g_clear_error(&error);
    }
    assert_ok(cri_sim_run_command(sim, "fail Version 0", NULL, &error), error);
    assert_ok(version(&error), error);

    /* Streams fail at once, once. */
    cri_sim_set_fail(sim, "GetContainerEvents", 13, 1);
    stream = open_stream();
    assert_stream_error(stream, PLEG_CRI_ERROR_INTERNAL);
    open_streams(&healthy, 1);
}
END_TEST

/* ---- bulk, counters, threads ---- */

START_TEST(test_bulk)
{
    g_autoptr(Runtime__V1__ListPodSandboxResponse) pods = NULL;
    g_autoptr(Runtime__V1__ListContainersResponse) containers = NULL;
    g_autoptr(CriStream) stream = NULL;
    g_autoptr(GError) error = NULL;
    Runtime__V1__ContainerFilter filter = RUNTIME__V1__CONTAINER_FILTER__INIT;

    open_streams(&stream, 1);
    cri_sim_bulk(sim, 1000, 1);
    assert_ok(cri_sim_run_command(sim, "bulk 10 3", NULL, &error), error);
    ck_assert_uint_eq(cri_sim_get_n_pods(sim), 1010);
    ck_assert_uint_eq(cri_sim_get_n_containers(sim), 1030);
    pods = list_pods(NULL);
    ck_assert_uint_eq(pods->n_items, 1010);
    containers = list_containers(NULL);
    ck_assert_uint_eq(containers->n_containers, 1030);
    {
        g_autofree char *sandbox_id = cri_sim_get_sandbox_id(sim, "bulk-1005");
        g_autoptr(Runtime__V1__ListContainersResponse) in_pod = NULL;

        ck_assert_ptr_nonnull(sandbox_id);
        filter.pod_sandbox_id = sandbox_id;
        in_pod = list_containers(&filter);
        ck_assert_uint_eq(in_pod->n_containers, 3);
        ck_assert_str_eq(in_pod->containers[2]->id, "bulk-1005-2");
        ck_assert_int_eq(in_pod->containers[2]->state,
                         RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING);
    }
    /* Bulk is silent: the first event on the stream is the next real one. */
    assert_ok(cri_sim_exit_container(sim, "bulk-7-0", 0, NULL, &error), error);
    assert_event(stream, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STOPPED_EVENT, "bulk-7-0");
}
END_TEST

START_TEST(test_counters_and_last_request)
{
    Runtime__V1__VersionRequest request = RUNTIME__V1__VERSION_REQUEST__INIT;
    g_autoptr(ProtobufCMessage) response = NULL;
    g_autoptr(GBytes) bytes = NULL;
    g_autoptr(GError) error = NULL;
    Runtime__V1__VersionRequest *decoded;
    gsize size;
    const guint8 *data;

    ck_assert_uint_eq(cri_sim_get_n_calls(sim, NULL), 0);
    ck_assert_ptr_null(cri_sim_get_last_request(sim, "Version"));
    request.version = (char *)"0.1.0";
    response = call("Version", &request.base, &runtime__v1__version_response__descriptor, &error);
    ck_assert_ptr_nonnull(response);
    g_clear_pointer(&response, cri_message_free);
    {
        g_autoptr(Runtime__V1__ListPodSandboxResponse) pods G_GNUC_UNUSED = list_pods(NULL);
    }
    ck_assert(cri_sim_wait_calls(sim, NULL, 2, TIMEOUT_MS));
    ck_assert_uint_eq(cri_sim_get_n_calls(sim, "Version"), 1);
    ck_assert_uint_eq(cri_sim_get_n_calls(sim, "ListPodSandbox"), 1);
    ck_assert_uint_eq(cri_sim_get_n_calls(sim, "ListContainers"), 0);
    ck_assert(!cri_sim_wait_calls(sim, "ListContainers", 1, 10));

    bytes = cri_sim_get_last_request(sim, "Version");
    ck_assert_ptr_nonnull(bytes);
    data = g_bytes_get_data(bytes, &size);
    decoded = runtime__v1__version_request__unpack(NULL, size, data);
    ck_assert_str_eq(decoded->version, "0.1.0");
    runtime__v1__version_request__free_unpacked(decoded, NULL);

    ck_assert(!cri_sim_wait_subscribers(sim, 1, 10));
}
END_TEST

typedef struct {
    guint index;
    gint failures;
} Worker;

static gpointer
worker_main(gpointer data)
{
    Worker *worker = data;

    for (guint i = 0; i < 25; i++) {
        g_autoptr(GError) error = NULL;
        g_autofree char *uid = g_strdup_printf("w%u-%u", worker->index, i);
        g_autofree char *id = g_strdup_printf("w%u-%u-c", worker->index, i);
        g_autoptr(Runtime__V1__ListContainersResponse) containers = NULL;

        if (!cri_sim_add_pod(sim, uid, NULL, &error) ||
            !cri_sim_add_container(sim, uid, id, NULL, &error) ||
            !cri_sim_start_container(sim, id, &error) ||
            !cri_sim_exit_container(sim, id, 0, NULL, &error) || !version(&error))
            g_atomic_int_inc(&worker->failures);
        containers = list_containers(NULL);
        if (i % 2 == 0 && !cri_sim_remove_pod(sim, uid, &error))
            g_atomic_int_inc(&worker->failures);
    }
    return NULL;
}

START_TEST(test_threads)
{
    CriStream *streams[2];
    Worker workers[4];
    GThread *threads[G_N_ELEMENTS(workers)];

    open_streams(streams, G_N_ELEMENTS(streams));
    for (guint i = 0; i < G_N_ELEMENTS(workers); i++) {
        workers[i] = (Worker){.index = i};
        threads[i] = g_thread_new("worker", worker_main, &workers[i]);
    }
    for (guint i = 0; i < G_N_ELEMENTS(workers); i++) {
        g_thread_join(threads[i]);
        ck_assert_int_eq(workers[i].failures, 0);
    }
    ck_assert_uint_eq(cri_sim_get_n_pods(sim), 4 * 12);
    ck_assert_uint_eq(cri_sim_get_n_calls(sim, "Version"), 100);
    /* Every subscriber got every event: 3 per container, plus 2 per removed pod. */
    cri_sim_end_streams(sim, 0, NULL);
    for (guint s = 0; s < G_N_ELEMENTS(streams); s++) {
        guint n = 0;

        for (;;) {
            g_autoptr(GError) error = NULL;
            ProtobufCMessage *message = NULL;

            ck_assert_msg(cri_stream_read(streams[s], &message, NULL, &error), "%s",
                          error ? error->message : "");
            if (!message)
                break;
            cri_message_free(message);
            n++;
        }
        ck_assert_uint_eq(n, 4 * (25 * 3 + 13));
        cri_stream_free(streams[s]);
    }
}
END_TEST

/* ---- the command language ---- */

START_TEST(test_commands)
{
    static const char *const bad[] = {
        "bogus",
        "pod",
        "container u1",
        "exit c1",
        "exit c1 abc",
        "event NOPE c1",
        "event STOPPED c1 sideways",
        "end-stream maybe",
        "deliver-one yes",
        "away",
        "delay Version",
        "fail Version 99",
        "bulk many",
        "quit now",
        "bulk 1 1 -5",
        "list-streams maybe",
        "list-batch 0",
        "list-stream-fail 1",
        "list-stream-fail 1 99",
        "pod \xff\xfe",
    };
    g_autoptr(GError) error = NULL;
    gboolean quit = FALSE;
    g_autofree char *script = g_build_filename(tmpdir, "script.txt", NULL);
    CriSimContainerState state;

    for (gsize i = 0; i < G_N_ELEMENTS(bad); i++) {
        ck_assert_msg(!cri_sim_run_command(sim, bad[i], NULL, &error), "\"%s\" was accepted",
                      bad[i]);
        ck_assert_msg(g_error_matches(error, CRI_SIM_ERROR, CRI_SIM_ERROR_SYNTAX), "%s: %s",
                      bad[i], error->message);
        g_clear_error(&error);
    }
    ck_assert(!cri_sim_run_command(sim, "start nope", NULL, &error));
    ck_assert(g_error_matches(error, CRI_SIM_ERROR, CRI_SIM_ERROR_NOT_FOUND));
    g_clear_error(&error);
    assert_ok(cri_sim_run_command(sim, "   # only a comment", NULL, &error), error);
    /* The list stream commands; what they do is tested through a client in
     * tests/cri/test-cri-list-streaming.c. */
    assert_ok(cri_sim_run_command(sim, "list-streams unimplemented", NULL, &error), error);
    assert_ok(cri_sim_run_command(sim, "list-streams on", NULL, &error), error);
    assert_ok(cri_sim_run_command(sim, "list-batch 2", NULL, &error), error);
    assert_ok(cri_sim_run_command(sim, "list-stream-fail 1 14", NULL, &error), error);
    assert_ok(cri_sim_run_command(sim, "list-stream-fail 0 0", NULL, &error), error);
    assert_ok(cri_sim_run_command(sim, "", NULL, &error), error);

    ck_assert(g_file_set_contents(script,
                                  "pod u1 web  # a pod\n"
                                  "container u1 c1 app\n"
                                  "start c1\n"
                                  "exit c1 2 OOMKilled\n"
                                  "quit\n"
                                  "pod never\n",
                                  -1, NULL));
    assert_ok(cri_sim_run_script(sim, script, &quit, &error), error);
    ck_assert(quit);
    ck_assert(cri_sim_get_container_state(sim, "c1", &state));
    ck_assert_int_eq(state, CRI_SIM_CONTAINER_EXITED);
    ck_assert_uint_eq(cri_sim_get_n_pods(sim), 1);
    {
        g_autoptr(Runtime__V1__ContainerStatusResponse) response = NULL;

        ck_assert_str_eq(container_status("c1", &response)->reason, "OOMKilled");
    }

    ck_assert(g_file_set_contents(script, "pod u2\nstart nope\n", -1, NULL));
    ck_assert(!cri_sim_run_script(sim, script, NULL, &error));
    ck_assert_msg(strstr(error->message, "script.txt:2: "), "%s", error->message);
    ck_assert(strstr(cri_sim_command_help(), "deliver-one on|off"));
}
END_TEST

/* ---- the binary ---- */

typedef struct {
    GSubprocess *process;
    GDataInputStream *out;
    GOutputStream *in;
} Binary;

static void
binary_clear(Binary *binary)
{
    if (binary->process) {
        g_subprocess_force_exit(binary->process);
        g_subprocess_wait(binary->process, NULL, NULL);
    }
    g_clear_object(&binary->out);
    g_clear_object(&binary->process);
}
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(Binary, binary_clear)

static char *
read_line(Binary *binary)
{
    g_autoptr(GError) error = NULL;
    char *line = g_data_input_stream_read_line(binary->out, NULL, NULL, &error);

    ck_assert_msg(line != NULL, "cri-sim said nothing: %s", error ? error->message : "EOF");
    return line;
}

static void
binary_spawn(Binary *binary, const char *socket_path, const char *script)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *ready = NULL;
    GSubprocessFlags flags = G_SUBPROCESS_FLAGS_STDOUT_PIPE;

    if (!script)
        flags |= G_SUBPROCESS_FLAGS_STDIN_PIPE;
    binary->process = g_subprocess_new(flags, &error, CRI_SIM_PATH, "--socket", socket_path,
                                       script ? "--script" : NULL, script, NULL);
    ck_assert_msg(binary->process != NULL, "%s", error ? error->message : "");
    binary->out = g_data_input_stream_new(g_subprocess_get_stdout_pipe(binary->process));
    binary->in = g_subprocess_get_stdin_pipe(binary->process);
    ready = read_line(binary);
    ck_assert_str_eq(ready, "ready");
}

static void
binary_command(Binary *binary, const char *command, const char *expected)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *line = g_strconcat(command, "\n", NULL);
    g_autofree char *answer = NULL;

    ck_assert(g_output_stream_write_all(binary->in, line, strlen(line), NULL, NULL, &error));
    answer = read_line(binary);
    ck_assert_msg(g_str_has_prefix(answer, expected), "%s: %s", command, answer);
}

static int
binary_wait(Binary *binary)
{
    g_autoptr(GError) error = NULL;

    ck_assert(g_subprocess_wait(binary->process, NULL, &error));
    ck_assert(g_subprocess_get_if_exited(binary->process));
    return g_subprocess_get_exit_status(binary->process);
}

static gboolean
wait_pods(guint n)
{
    gint64 deadline = g_get_monotonic_time() + 20 * G_USEC_PER_SEC;

    while (g_get_monotonic_time() < deadline) {
        Runtime__V1__ListPodSandboxRequest request = RUNTIME__V1__LIST_POD_SANDBOX_REQUEST__INIT;
        g_autoptr(Runtime__V1__ListPodSandboxResponse) response = NULL;
        g_autoptr(GError) error = NULL;

        response = (Runtime__V1__ListPodSandboxResponse *)cri_channel_call(
            channel, "ListPodSandbox", &request.base,
            &runtime__v1__list_pod_sandbox_response__descriptor, G_USEC_PER_SEC, NULL, &error);
        if (response && response->n_items == n)
            return TRUE;
        g_usleep(20 * 1000);
    }
    return FALSE;
}

START_TEST(test_binary_script)
{
    g_autofree char *path = g_build_filename(tmpdir, "bin.sock", NULL);
    g_autofree char *script = g_build_filename(tmpdir, "bin.script", NULL);
    g_autoptr(CriStream) stream = NULL;
    g_autoptr(CriStream) second = NULL;
    g_autoptr(GError) error = NULL;
    g_auto(Binary) binary = {0};
    Runtime__V1__GetEventsRequest request = RUNTIME__V1__GET_EVENTS_REQUEST__INIT;

    /* The script sets up a pod, waits for the test's stream, exits the container in it, waits
     * for a second stream (the test opens it once it has read the event: going away at once
     * could close the connection before the event is read), goes away briefly and keeps
     * serving until SIGTERM. */
    ck_assert(g_file_set_contents(script,
                                  "pod u1\n"
                                  "container u1 c1\n"
                                  "start c1\n"
                                  "wait-subscribers 1 30000\n"
                                  "exit c1 9\n"
                                  "wait-subscribers 2 30000\n"
                                  "away 100\n",
                                  -1, NULL));
    binary_spawn(&binary, path, script);
    g_clear_pointer(&channel, cri_channel_unref);
    channel = cri_channel_new(path, &error);
    ck_assert(wait_pods(1));
    stream = cri_stream_start(channel, "GetContainerEvents", &request.base,
                              &runtime__v1__container_event_response__descriptor, STREAM_TIMEOUT,
                              TRUE, &error);
    ck_assert_ptr_nonnull(stream);
    assert_event(stream, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STOPPED_EVENT, "c1");
    second = cri_stream_start(channel, "GetContainerEvents", &request.base,
                              &runtime__v1__container_event_response__descriptor, STREAM_TIMEOUT,
                              TRUE, &error);
    ck_assert_ptr_nonnull(second);
    assert_stream_error(stream, PLEG_CRI_ERROR_UNAVAILABLE);
    ck_assert(wait_version(20 * G_USEC_PER_SEC));
    {
        g_autoptr(Runtime__V1__ContainerStatusResponse) response = NULL;

        ck_assert_int_eq(container_status("c1", &response)->exit_code, 9);
    }

    g_subprocess_send_signal(binary.process, SIGTERM);
    ck_assert_int_eq(binary_wait(&binary), 0);
    ck_assert(!g_file_test(path, G_FILE_TEST_EXISTS));
}
END_TEST

START_TEST(test_binary_script_error)
{
    g_autofree char *path = g_build_filename(tmpdir, "bin.sock", NULL);
    g_autofree char *script = g_build_filename(tmpdir, "bad.script", NULL);
    g_autoptr(GError) error = NULL;
    g_autoptr(GSubprocess) process = NULL;
    g_autofree char *err = NULL;

    ck_assert(g_file_set_contents(script, "pod u1\nexit nope 1\n", -1, NULL));
    process = g_subprocess_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE | G_SUBPROCESS_FLAGS_STDERR_PIPE,
                               &error, CRI_SIM_PATH, "--socket", path, "--script", script, NULL);
    ck_assert_ptr_nonnull(process);
    ck_assert(g_subprocess_communicate_utf8(process, NULL, NULL, NULL, &err, &error));
    ck_assert_int_eq(g_subprocess_get_exit_status(process), 1);
    ck_assert_msg(strstr(err, "bad.script:2: no container \"nope\""), "%s", err);
}
END_TEST

START_TEST(test_binary_stdin)
{
    g_autofree char *path = g_build_filename(tmpdir, "bin.sock", NULL);
    g_autoptr(GError) error = NULL;
    g_auto(Binary) binary = {0};

    binary_spawn(&binary, path, NULL);
    g_clear_pointer(&channel, cri_channel_unref);
    channel = cri_channel_new(path, &error);
    binary_command(&binary, "pod u1", "ok");
    binary_command(&binary, "pod u2", "ok");
    binary_command(&binary, "start nope", "error: no container");
    /* Bytes that are not UTF-8 are a malformed command, and the commands after it are served. */
    binary_command(&binary, "pod \xff\xfe", "error: a command is UTF-8 text");
    ck_assert(wait_pods(2));
    binary_command(&binary, "fail ListPodSandbox 14", "ok");
    {
        Runtime__V1__ListPodSandboxRequest request = RUNTIME__V1__LIST_POD_SANDBOX_REQUEST__INIT;
        g_autoptr(ProtobufCMessage) response = NULL;

        response = call("ListPodSandbox", &request.base,
                        &runtime__v1__list_pod_sandbox_response__descriptor, &error);
        ck_assert_ptr_null(response);
        ck_assert_int_eq(error->code, PLEG_CRI_ERROR_UNAVAILABLE);
    }
    binary_command(&binary, "quit", "ok");
    ck_assert_int_eq(binary_wait(&binary), 0);
    ck_assert(!g_file_test(path, G_FILE_TEST_EXISTS));
}
END_TEST

START_TEST(test_binary_help)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(GSubprocess) process = NULL;
    g_autofree char *out = NULL;

    process = g_subprocess_new(G_SUBPROCESS_FLAGS_STDOUT_PIPE, &error, CRI_SIM_PATH, "--help",
                               NULL);
    ck_assert_ptr_nonnull(process);
    ck_assert(g_subprocess_communicate_utf8(process, NULL, NULL, &out, NULL, &error));
    ck_assert_int_eq(g_subprocess_get_exit_status(process), 0);
    ck_assert(strstr(out, "--socket"));
    ck_assert(strstr(out, "away MS [stale-socket]"));
}
END_TEST

static Suite *
cri_sim_suite(void)
{
    Suite *s = suite_create("cri-sim");
    TCase *rpcs = tcase_create("rpcs");
    TCase *events = tcase_create("events");
    TCase *server = tcase_create("server");
    TCase *misc = tcase_create("misc");
    TCase *binary = tcase_create("binary");

    tcase_add_checked_fixture(rpcs, setup, teardown);
    tcase_add_test(rpcs, test_version_status);
    tcase_add_test(rpcs, test_pods_and_containers);
    tcase_add_test(rpcs, test_filters);
    tcase_add_test(rpcs, test_rpc_lifecycle);
    tcase_add_test(rpcs, test_unimplemented);
    suite_add_tcase(s, rpcs);

    tcase_add_checked_fixture(events, setup, teardown);
    tcase_add_test(events, test_events_broadcast);
    tcase_add_test(events, test_events_scripted);
    tcase_add_test(events, test_auto_and_sandbox_events);
    tcase_add_test(events, test_end_stream);
    tcase_add_test(events, test_deliver_one);
    suite_add_tcase(s, events);

    tcase_add_checked_fixture(server, setup, teardown);
    tcase_add_test(server, test_away_and_back);
    tcase_add_test(server, test_away_changes_kept);
    tcase_add_test(server, test_away_stale_socket);
    tcase_add_test(server, test_away_timed);
    tcase_add_test(server, test_delay);
    tcase_add_test(server, test_delay_stream);
    tcase_add_test(server, test_fail);
    suite_add_tcase(s, server);

    tcase_add_checked_fixture(misc, setup, teardown);
    tcase_add_test(misc, test_bulk);
    tcase_add_test(misc, test_counters_and_last_request);
    tcase_add_test(misc, test_threads);
    tcase_add_test(misc, test_commands);
    suite_add_tcase(s, misc);

    tcase_add_checked_fixture(binary, setup, teardown);
    tcase_add_test(binary, test_binary_script);
    tcase_add_test(binary, test_binary_script_error);
    tcase_add_test(binary, test_binary_stdin);
    tcase_add_test(binary, test_binary_help);
    suite_add_tcase(s, binary);

    return s;
}

int
main(void)
{
    SRunner *runner = srunner_create(cri_sim_suite());
    int failed;

    srunner_run_all(runner, CK_NORMAL);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
