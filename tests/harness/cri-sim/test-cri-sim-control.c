/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What a test controls in cri-sim, through a real gRPC client: going away and coming back,
 * delays, failures, bulk pods, counters, threads, the command language, and the binary in
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

#include "test-cri-sim-fixture.h"

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
cri_sim_control_suite(void)
{
    Suite *s = suite_create("cri-sim-control");
    TCase *server = tcase_create("server");
    TCase *misc = tcase_create("misc");
    TCase *binary = tcase_create("binary");

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
    SRunner *runner = srunner_create(cri_sim_control_suite());
    int failed;

    srunner_run_all(runner, CK_NORMAL);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

