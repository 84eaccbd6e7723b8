/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cri-sim's CRI surface through a real gRPC client (the internal CRI core): the RuntimeService
 * subset and its filters, natural and scripted events, stream endings and round-robin delivery.
 * What a test controls (faults, counters, the command language, the binary) is
 * test-cri-sim-control.c's.
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

#include "test-cri-sim-fixture.h"

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

static Suite *
cri_sim_suite(void)
{
    Suite *s = suite_create("cri-sim");
    TCase *rpcs = tcase_create("rpcs");
    TCase *events = tcase_create("events");

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

