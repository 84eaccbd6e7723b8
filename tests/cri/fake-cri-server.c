/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CRI client tests' fake runtime: a preset of cri-sim (tests/harness/cri-sim), so there is
 * one CRI server implementation.  The fixed pods and the knobs of fake-cri-server.h map onto
 * cri-sim's C API.
 */
#include <string.h>

#include <grpc/status.h>

#include "cri-sim.h"
#include "fake-cri-server.h"

struct _FakeCriServer {
    CriSim *sim;
};

static void
add_pod(CriSim *sim, const CriSimPodSpec *spec)
{
    g_autoptr(GError) error = NULL;

    if (!cri_sim_add_pod_full(sim, spec, NULL, &error))
        g_error("fake CRI server: %s", error->message);
}

static void
add_container(CriSim *sim, const CriSimContainerSpec *spec)
{
    g_autoptr(GError) error = NULL;

    if (!cri_sim_add_container_full(sim, spec, NULL, &error))
        g_error("fake CRI server: %s", error->message);
}

FakeCriServer *
fake_cri_server_new(const char *socket_path)
{
    static const char *const no_labels[] = {NULL};
    static const char *const uid_a_labels[] = {"io.kubernetes.pod.uid", "uid-a", NULL};
    FakeCriServer *self = g_new0(FakeCriServer, 1);
    g_autoptr(GError) error = NULL;

    self->sim = cri_sim_new(socket_path, &error);
    if (!self->sim)
        g_error("fake CRI server: %s", error->message);
    /* Not reachable until every pod below is in place: a client that keeps retrying (plegd
     * after a runtime restart) would otherwise list a partial runtime and report containers
     * that are still to come as died and removed. */
    if (!cri_sim_go_away(self->sim, -1, FALSE, &error))
        g_error("fake CRI server: %s", error->message);
    cri_sim_set_version(self->sim, FAKE_CRI_RUNTIME_NAME, FAKE_CRI_RUNTIME_VERSION);
    cri_sim_set_id_prefixes(self->sim, "sb-", "ctr-new-");
    /* Status stays outside the subset this fake serves. */
    cri_sim_set_fail(self->sim, "Status", GRPC_STATUS_UNIMPLEMENTED, -1);
    /* A stream ends at once until fake_cri_server_set_events() says otherwise. */
    cri_sim_set_stream_greeting(self->sim, NULL, 0, TRUE);

    add_pod(self->sim, &(CriSimPodSpec){.id = "sb-a",
                                        .uid = "uid-a",
                                        .name = "pod-a",
                                        .namespace_ = "default",
                                        .ip = "10.0.0.1",
                                        .additional_ip = "fd00::1",
                                        .labels = no_labels});
    add_pod(self->sim, &(CriSimPodSpec){.id = "sb-b",
                                        .uid = "uid-b",
                                        .name = "pod-b",
                                        .namespace_ = "kube-system",
                                        .attempt = 1,
                                        .not_ready = TRUE,
                                        .labels = no_labels});
    add_container(self->sim, &(CriSimContainerSpec){.id = "ctr-1",
                                                    .pod_uid = "uid-a",
                                                    .name = "app",
                                                    .state = CRI_SIM_CONTAINER_RUNNING,
                                                    .labels = uid_a_labels});
    add_container(self->sim, &(CriSimContainerSpec){.id = "ctr-2",
                                                    .pod_uid = "uid-a",
                                                    .name = "init",
                                                    .attempt = 2,
                                                    .state = CRI_SIM_CONTAINER_EXITED,
                                                    .exit_code = 7,
                                                    .reason = "Error",
                                                    .finished_at_ns = FAKE_CRI_FINISHED_AT_NS,
                                                    .labels = uid_a_labels});
    add_container(self->sim, &(CriSimContainerSpec){.id = "ctr-3",
                                                    .pod_uid = "uid-b",
                                                    .name = "sidecar",
                                                    .state = CRI_SIM_CONTAINER_CREATED,
                                                    .labels = no_labels});
    if (!cri_sim_come_back(self->sim, &error))
        g_error("fake CRI server: %s", error->message);
    return self;
}

void
fake_cri_server_free(FakeCriServer *self)
{
    if (!self)
        return;
    cri_sim_free(self->sim);
    g_free(self);
}

void
fake_cri_server_set_hang(FakeCriServer *self, gboolean hang)
{
    cri_sim_set_delay(self->sim, "*", hang ? -1 : 0);
}

void
fake_cri_server_set_events(FakeCriServer *self, guint n_events, gboolean hang_after)
{
    g_autoptr(GPtrArray) ids = g_ptr_array_new_with_free_func(g_free);
    g_autofree CriSimEvent *events = g_new0(CriSimEvent, MAX(n_events, 1));

    for (guint i = 0; i < n_events; i++) {
        char *id = g_strdup_printf("ctr-event-%u", i);

        g_ptr_array_add(ids, id);
        events[i] = (CriSimEvent){.type = CRI_SIM_EVENT_STOPPED,
                                  .container_id = id,
                                  .created_at_ns = 1000 + i};
    }
    cri_sim_set_stream_greeting(self->sim, events, n_events, !hang_after);
}

void
fake_cri_server_set_events_unimplemented(FakeCriServer *self, gboolean unimplemented)
{
    cri_sim_set_events_unimplemented(self->sim, unimplemented);
}

void
fake_cri_server_set_padding(FakeCriServer *self, gsize bytes)
{
    g_autofree char *padding = NULL;

    if (bytes > 0) {
        padding = g_malloc(bytes + 1);
        memset(padding, 'x', bytes);
        padding[bytes] = '\0';
    }
    if (!cri_sim_set_container_label(self->sim, "ctr-1", "padding", padding, NULL))
        g_debug("fake CRI server: ctr-1 is gone, no padding");
}

guint
fake_cri_server_get_n_calls(FakeCriServer *self)
{
    return cri_sim_get_n_calls(self->sim, NULL);
}

GBytes *
fake_cri_server_get_last_request(FakeCriServer *self, const char *method)
{
    return cri_sim_get_last_request(self->sim, method);
}
