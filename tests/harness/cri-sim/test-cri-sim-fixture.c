/* SPDX-License-Identifier: Apache-2.0 */
/* The cri-sim tests' shared fixture and calls (test-cri-sim-fixture.h). */
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

char *tmpdir;
char *sock;
CriSim *sim;
CriChannel *channel;

void
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

void
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

void
assert_ok(gboolean ok, GError *error)
{
    ck_assert_msg(ok, "%s", error ? error->message : "");
}

/* ---- client helpers ---- */

ProtobufCMessage *
call(const char *method, const ProtobufCMessage *request,
     const ProtobufCMessageDescriptor *response, GError **error)
{
    return cri_channel_call(channel, method, request, response, CALL_TIMEOUT, NULL, error);
}

Runtime__V1__ListPodSandboxResponse *
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

Runtime__V1__ListContainersResponse *
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

Runtime__V1__ContainerStatus *
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

gboolean
version(GError **error)
{
    Runtime__V1__VersionRequest request = RUNTIME__V1__VERSION_REQUEST__INIT;
    g_autoptr(ProtobufCMessage) response = NULL;

    response = cri_channel_call(channel, "Version", &request.base,
                                &runtime__v1__version_response__descriptor, 2 * G_USEC_PER_SEC,
                                NULL, error);
    return response != NULL;
}

CriStream *
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
void
open_streams(CriStream **streams, guint n)
{
    guint before = cri_sim_get_n_subscribers(sim);

    for (guint i = 0; i < n; i++)
        streams[i] = open_stream();
    ck_assert(cri_sim_wait_subscribers(sim, before + n, TIMEOUT_MS));
}

Runtime__V1__ContainerEventResponse *
read_event(CriStream *stream)
{
    g_autoptr(GError) error = NULL;
    ProtobufCMessage *message = NULL;

    ck_assert_msg(cri_stream_read(stream, &message, NULL, &error), "%s",
                  error ? error->message : "");
    ck_assert_msg(message != NULL, "the stream ended");
    return (Runtime__V1__ContainerEventResponse *)message;
}

void
assert_event(CriStream *stream, Runtime__V1__ContainerEventType type, const char *id)
{
    g_autoptr(Runtime__V1__ContainerEventResponse) event = read_event(stream);

    ck_assert_str_eq(event->container_id, id);
    ck_assert_int_eq(event->container_event_type, type);
}

void
assert_clean_end(CriStream *stream)
{
    g_autoptr(GError) error = NULL;
    ProtobufCMessage *message = NULL;

    ck_assert_msg(cri_stream_read(stream, &message, NULL, &error), "%s",
                  error ? error->message : "");
    ck_assert_ptr_null(message);
}

void
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

