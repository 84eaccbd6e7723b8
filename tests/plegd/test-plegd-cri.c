/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd against a CRI runtime: the in-process fake CRI server of the CRI client tests.  Checks
 * the JSON event lines, READY=1 and STATUS=, /healthz once relisting works, recovery after the
 * runtime went away, and a clean exit when stdout is closed or a runtime call hangs.  Readers
 * that never read (stdout, NOTIFY_SOCKET) must not stall plegd; with stdout closed at start,
 * events go nowhere instead of into whatever fd plegd opens first.
 */
#include <fcntl.h>
#include <json-glib/json-glib.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "fake-cri-server.h"
#include "plegd-runner.h"

/* FAKE_CRI_FINISHED_AT_NS in RFC 3339. */
#define FAKE_CRI_FINISHED_AT "2023-11-14T22:13:20.123456789Z"

typedef struct {
    char *dir;
    char *cri_path;
    char *endpoint_arg;
    FakeCriServer *server;
} Fixture;

static Fixture fixture;

static void
setup(void)
{
    fixture.dir = make_tmpdir();
    fixture.cri_path = g_build_filename(fixture.dir, "cri.sock", NULL);
    fixture.endpoint_arg =
        g_strdup_printf("--container-runtime-endpoint=unix://%s", fixture.cri_path);
    fixture.server = fake_cri_server_new(fixture.cri_path);
    ck_assert_ptr_nonnull(fixture.server);
}

static void
teardown(void)
{
    g_clear_pointer(&fixture.server, fake_cri_server_free);
    remove_tmpdir(fixture.dir);
    g_clear_pointer(&fixture.dir, g_free);
    g_clear_pointer(&fixture.cri_path, g_free);
    g_clear_pointer(&fixture.endpoint_arg, g_free);
}

/* Receives datagrams into @received until one contains @needle. */
static void
wait_datagram(GSocket *socket, GString *received, const char *needle)
{
    gint64 deadline = g_get_monotonic_time() + 15 * G_USEC_PER_SEC;

    while (!strstr(received->str, needle) && g_get_monotonic_time() < deadline) {
        g_autofree char *more = receive_datagrams(socket, 100 * 1000);

        g_string_append(received, more);
    }
    ck_assert_msg(strstr(received->str, needle), "no \"%s\" among the notifications:\n%s", needle,
                  received->str);
}

/* The complete JSON lines of @out, keyed by container_id. */
static GHashTable *
parse_events(const char *out)
{
    g_autoptr(GHashTable) events =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)json_object_unref);
    g_auto(GStrv) lines = g_strsplit(out, "\n", -1);

    /* The last piece is empty or a partial line. */
    for (guint i = 0; lines[i] && lines[i + 1]; i++) {
        g_autoptr(JsonParser) parser = json_parser_new();
        g_autoptr(GError) error = NULL;
        JsonObject *object;

        ck_assert_msg(json_parser_load_from_data(parser, lines[i], -1, &error), "%s: %s", lines[i],
                      error ? error->message : "");
        ck_assert(JSON_NODE_HOLDS_OBJECT(json_parser_get_root(parser)));
        object = json_node_get_object(json_parser_get_root(parser));
        ck_assert_msg(json_object_has_member(object, "container_id"), "%s", lines[i]);
        ck_assert_msg(
            !g_hash_table_contains(events, json_object_get_string_member(object, "container_id")),
            "event repeated: %s", lines[i]);
        g_hash_table_insert(events, g_strdup(json_object_get_string_member(object, "container_id")),
                            json_object_ref(object));
    }
    return g_steal_pointer(&events);
}

static JsonObject *
lookup_event(GHashTable *events, const char *container_id, const char *type, const char *pod_uid)
{
    JsonObject *event = g_hash_table_lookup(events, container_id);

    ck_assert_msg(event, "no event for %s", container_id);
    ck_assert_str_eq(json_object_get_string_member(event, "type"), type);
    ck_assert_str_eq(json_object_get_string_member(event, "pod_uid"), pod_uid);
    ck_assert_str_eq(json_object_get_string_member(event, "relist_source"), "global");
    ck_assert(g_str_has_suffix(json_object_get_string_member(event, "time"), "Z"));
    return event;
}

START_TEST(test_events_ready_and_recovery)
{
    g_autofree char *notify_path = g_build_filename(fixture.dir, "notify.sock", NULL);
    g_autofree char *notify_env = g_strconcat("NOTIFY_SOCKET=", notify_path, NULL);
    g_autoptr(GSocket) notify = bind_notify_socket(notify_path);
    g_autoptr(GString) received = g_string_new(NULL);
    const char *const env[] = {notify_env, NULL};
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autoptr(GHashTable) events = NULL;
    g_autofree char *base = NULL;
    g_autofree char *url = NULL;
    g_autofree char *body = NULL;
    g_autofree char *out = NULL;
    g_autofree char *tail = NULL;
    JsonObject *died;

    plegd = plegd_runner_spawn(env, fixture.endpoint_arg, "--relist-period=100ms",
                               "--metrics-bind-address=127.0.0.1:0");
    base = plegd_runner_wait_metrics_url(plegd);

    /* Ready after the first relist, with a status. */
    wait_datagram(notify, received, "READY=1");
    ck_assert_msg(strstr(received->str, "READY=1\nSTATUS=relisting 2 pods"), "%s", received->str);

    /* The first relist finds every sandbox and container (ctr-3 is CREATED: no event). */
    ck_assert(plegd_runner_wait_stdout(plegd, "\"sb-a\""));
    ck_assert(plegd_runner_wait_stdout(plegd, "\"sb-b\""));
    ck_assert(plegd_runner_wait_stdout(plegd, "\"ctr-1\""));
    ck_assert(plegd_runner_wait_stdout(plegd, "\"ctr-2\""));
    out = plegd_runner_get_stdout(plegd);
    events = parse_events(out);
    lookup_event(events, "sb-a", "ContainerStarted", "uid-a");
    lookup_event(events, "sb-b", "ContainerDied", "uid-b");
    lookup_event(events, "ctr-1", "ContainerStarted", "uid-a");
    died = lookup_event(events, "ctr-2", "ContainerDied", "uid-a");
    ck_assert_int_eq(json_object_get_int_member(died, "exit_code"), 7);
    ck_assert_str_eq(json_object_get_string_member(died, "reason"), "Error");
    ck_assert_str_eq(json_object_get_string_member(died, "finished_at"), FAKE_CRI_FINISHED_AT);
    ck_assert_msg(!g_hash_table_contains(events, "ctr-3"), "%s", out);
    ck_assert(!json_object_has_member(g_hash_table_lookup(events, "ctr-1"), "exit_code"));

    url = g_strconcat(base, "/healthz", NULL);
    ck_assert_uint_eq(http_request("GET", url, &body, NULL), 200);
    ck_assert_str_eq(body, "ok");

    /* The runtime goes away: one log line naming it, and a status. */
    g_clear_pointer(&fixture.server, fake_cri_server_free);
    assert_stderr_shows(plegd, "relist failed");
    {
        g_autofree char *err = plegd_runner_get_stderr(plegd);

        ck_assert_msg(strstr(err, fixture.cri_path), "%s", err);
    }
    wait_datagram(notify, received, "STATUS=runtime unreachable: ");

    /* It comes back: recovery is logged and the status says so again. */
    fixture.server = fake_cri_server_new(fixture.cri_path);
    assert_stderr_shows(plegd, "relist succeeded after");
    g_string_truncate(received, 0);
    wait_datagram(notify, received, "STATUS=relisting 2 pods");
    ck_assert_msg(!strstr(received->str, "READY=1"), "READY=1 twice:\n%s", received->str);

    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    tail = receive_datagrams(notify, 0);
    ck_assert_msg(strstr(tail, "STOPPING=1"), "%s", tail);

    /* Same pods after the restart: nothing new to report. */
    g_free(out);
    out = plegd_runner_get_stdout(plegd);
    g_clear_pointer(&events, g_hash_table_unref);
    events = parse_events(out);
    ck_assert_uint_eq(g_hash_table_size(events), 4);
}
END_TEST

START_TEST(test_stdout_closed)
{
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autofree char *err = NULL;
    int fds[2];

    /* Nobody reads: the first event line meets EPIPE. */
    ck_assert_int_eq(pipe(fds), 0);
    close(fds[0]);
    plegd =
        plegd_runner_spawn_full(NULL, fds[1],
                                (const char *const[]){fixture.endpoint_arg, "--relist-period=100ms",
                                                      "--metrics-bind-address=", NULL});
    ck_assert_int_eq(plegd_runner_wait_exit(plegd), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(strstr(err, "stdout was closed"), "%s", err);
}
END_TEST

START_TEST(test_sigterm_while_runtime_hangs)
{
    g_autoptr(PlegdRunner) plegd = NULL;
    gint64 deadline = g_get_monotonic_time() + 15 * G_USEC_PER_SEC;

    /* A relist stuck in a call with a long deadline must not hold up the exit. */
    fake_cri_server_set_hang(fixture.server, TRUE);
    plegd = plegd_runner_spawn(NULL, fixture.endpoint_arg, "--runtime-request-timeout=10m",
                               "--metrics-bind-address=");
    while (fake_cri_server_get_n_calls(fixture.server) == 0 && g_get_monotonic_time() < deadline)
        g_usleep(10 * 1000);
    ck_assert_uint_gt(fake_cri_server_get_n_calls(fixture.server), 0);

    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
}
END_TEST

/* cri-sim as a process of its own, driven through its stdin.  The fixture's fake CRI server
 * already runs gRPC in this process: a second gRPC server beside it made ThreadSanitizer see
 * gRPC's hand-offs between the two (its core is not instrumented) as races in cri-sim. */
typedef struct {
    GSubprocess *process;
    GDataInputStream *out;
    GOutputStream *in;
} BulkRuntime;

/* Sends @command and expects "ok". */
static void
bulk_runtime_command(BulkRuntime *runtime, const char *command)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *line = NULL;

    ck_assert_msg(g_output_stream_write_all(runtime->in, command, strlen(command), NULL, NULL,
                                            &error) &&
                      g_output_stream_write_all(runtime->in, "\n", 1, NULL, NULL, &error),
                  "cri-sim: %s", error ? error->message : "");
    line = g_data_input_stream_read_line_utf8(runtime->out, NULL, NULL, &error);
    ck_assert_msg(line && g_str_equal(line, "ok"), "cri-sim answered %s to %s: %s",
                  line ? line : "nothing", command, error ? error->message : "");
}

static void
bulk_runtime_free(BulkRuntime *runtime)
{
    /* End of input: cri-sim quits. */
    g_output_stream_close(runtime->in, NULL, NULL);
    /* Not g_subprocess_wait_check(): see subprocess_wait_reaped(). */
    ck_assert(subprocess_wait_reaped(runtime->process));
    ck_assert(g_subprocess_get_successful(runtime->process));
    g_object_unref(runtime->out);
    g_object_unref(runtime->process);
    g_free(runtime);
}
G_DEFINE_AUTOPTR_CLEANUP_FUNC(BulkRuntime, bulk_runtime_free)

/* A runtime with @n_pods pods of one container each: two ContainerStarted lines a pod, some
 * 200 bytes each. */
static BulkRuntime *
start_bulk_runtime(guint n_pods, char **ret_endpoint_arg)
{
    g_autofree char *path = g_build_filename(fixture.dir, "bulk.sock", NULL);
    g_autofree char *command = g_strdup_printf("bulk %u 1", n_pods);
    g_autofree char *line = NULL;
    g_autoptr(GError) error = NULL;
    BulkRuntime *runtime = g_new0(BulkRuntime, 1);
    const char *cri_sim = g_getenv("CRI_SIM");

    ck_assert_msg(cri_sim, "CRI_SIM is not set");
    runtime->process = g_subprocess_new(G_SUBPROCESS_FLAGS_STDIN_PIPE |
                                            G_SUBPROCESS_FLAGS_STDOUT_PIPE,
                                        &error, cri_sim, "--socket", path, NULL);
    ck_assert_msg(runtime->process, "%s", error ? error->message : "");
    runtime->in = g_subprocess_get_stdin_pipe(runtime->process);
    runtime->out = g_data_input_stream_new(g_subprocess_get_stdout_pipe(runtime->process));
    line = g_data_input_stream_read_line_utf8(runtime->out, NULL, NULL, &error);
    ck_assert_msg(line && g_str_equal(line, "ready"), "cri-sim said %s: %s",
                  line ? line : "nothing", error ? error->message : "");
    bulk_runtime_command(runtime, command);
    *ret_endpoint_arg = g_strdup_printf("--container-runtime-endpoint=unix://%s", path);
    return runtime;
}

/* A pipe that holds one page, and that nobody reads: @ret_read_fd is for the test to close. */
static int
stalled_pipe(int *ret_read_fd)
{
    int fds[2];

    ck_assert_int_eq(pipe(fds), 0);
    ck_assert_int_eq(fcntl(fds[0], F_SETPIPE_SZ, 4096), 4096);
    *ret_read_fd = fds[0];
    return fds[1];
}

/* stdout stalls: /healthz, readiness and SIGTERM do not wait for it. */
START_TEST(test_stdout_stalled)
{
    g_autofree char *endpoint_arg = NULL;
    g_autoptr(BulkRuntime) sim G_GNUC_UNUSED = start_bulk_runtime(300, &endpoint_arg);
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autofree char *base = NULL;
    g_autofree char *url = NULL;
    g_autofree char *body = NULL;
    int read_fd;
    int write_fd = stalled_pipe(&read_fd);

    plegd = plegd_runner_spawn_full(
        NULL, write_fd,
        (const char *const[]){endpoint_arg, "--relist-period=100ms",
                              "--metrics-bind-address=127.0.0.1:0", NULL});
    base = plegd_runner_wait_metrics_url(plegd);
    assert_stderr_shows(plegd, "first relist succeeded with 300 pods; ready");

    url = g_strconcat(base, "/healthz", NULL);
    ck_assert_uint_eq(http_request("GET", url, &body, NULL), 200);
    ck_assert_str_eq(body, "ok");

    /* Some 120 KB of events wait; a second is all they get. */
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    {
        g_autofree char *err = plegd_runner_get_stderr(plegd);

        ck_assert_msg(strstr(err, "stdout is not being read: dropping "), "%s", err);
    }
    close(read_fd);
}
END_TEST

/* More waits for stdout than plegd keeps: it exits 1 (the service manager restarts it). */
START_TEST(test_stdout_backlog_limit)
{
    g_autofree char *endpoint_arg = NULL;
    g_autoptr(BulkRuntime) sim G_GNUC_UNUSED = start_bulk_runtime(300, &endpoint_arg);
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autofree char *err = NULL;
    int read_fd;
    int write_fd = stalled_pipe(&read_fd);

    plegd = plegd_runner_spawn_full(
        NULL, write_fd,
        (const char *const[]){endpoint_arg, "--relist-period=100ms", "--metrics-bind-address=",
                              "--stdout-max-backlog=16384", NULL});
    ck_assert_int_eq(plegd_runner_wait_exit(plegd), 1);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(count_messages(err, "stdout is not being read: ") == 1, "%s", err);
    ck_assert_msg(strstr(err, "the most plegd keeps is 16"), "%s", err);
    close(read_fd);
}
END_TEST

static void
close_stdout(gpointer data)
{
    close(STDOUT_FILENO);
}

START_TEST(test_stdout_closed_at_start)
{
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autofree char *base = NULL;
    g_autofree char *url = NULL;
    g_autofree char *err = NULL;
    guint n_calls;
    gint64 deadline = g_get_monotonic_time() + 15 * G_USEC_PER_SEC;

    plegd = plegd_runner_spawn_with_setup(
        NULL, -1, close_stdout, NULL,
        (const char *const[]){fixture.endpoint_arg, "--relist-period=100ms",
                              "--metrics-bind-address=127.0.0.1:0", NULL});
    base = plegd_runner_wait_metrics_url(plegd);
    assert_stderr_shows(plegd, "stdout is closed; events are discarded");
    assert_stderr_shows(plegd, "first relist succeeded with 2 pods; ready");

    /* The four events went nowhere, and relisting goes on over an intact connection. */
    n_calls = fake_cri_server_get_n_calls(fixture.server);
    while (fake_cri_server_get_n_calls(fixture.server) < n_calls + 10 &&
           g_get_monotonic_time() < deadline)
        g_usleep(10 * 1000);
    ck_assert_uint_ge(fake_cri_server_get_n_calls(fixture.server), n_calls + 10);
    url = g_strconcat(base, "/healthz", NULL);
    ck_assert_uint_eq(http_request("GET", url, NULL, NULL), 200);

    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(count_messages(err, "stdout") == 1, "%s", err);
}
END_TEST

/* The service manager's socket is full: plegd neither blocks nor forgets READY=1. */
START_TEST(test_notify_socket_full)
{
    g_autofree char *notify_path = g_build_filename(fixture.dir, "notify.sock", NULL);
    g_autofree char *notify_env = g_strconcat("NOTIFY_SOCKET=", notify_path, NULL);
    g_autoptr(GSocket) notify = bind_notify_socket(notify_path);
    g_autoptr(GSocketAddress) notify_address = g_socket_get_local_address(notify, NULL);
    g_autoptr(GSocket) filler = g_socket_new(G_SOCKET_FAMILY_UNIX, G_SOCKET_TYPE_DATAGRAM, 0, NULL);
    g_autoptr(GString) received = g_string_new(NULL);
    const char *const env[] = {notify_env, NULL};
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autofree char *base = NULL;
    g_autofree char *url = NULL;
    g_autofree char *err = NULL;
    guint n_filled = 0;

    /* Fill the queue of the socket. */
    g_socket_set_blocking(filler, FALSE);
    while (g_socket_send_to(filler, notify_address, "X=1", 3, NULL, NULL) == 3)
        n_filled++;
    ck_assert_uint_gt(n_filled, 0);

    plegd = plegd_runner_spawn(env, fixture.endpoint_arg, "--relist-period=100ms",
                               "--metrics-bind-address=127.0.0.1:0");
    base = plegd_runner_wait_metrics_url(plegd);
    assert_stderr_shows(plegd, "the service manager does not read NOTIFY_SOCKET");
    url = g_strconcat(base, "/healthz", NULL);
    ck_assert_uint_eq(http_request("GET", url, NULL, NULL), 200);

    /* Drained: READY=1 follows with a later relist. */
    wait_datagram(notify, received, "READY=1");
    ck_assert_msg(strstr(received->str, "READY=1\nSTATUS=relisting 2 pods"), "%s",
                  received->str);

    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(count_messages(err, "does not read NOTIFY_SOCKET") == 1, "%s", err);
}
END_TEST

/* A working plugin and a broken one change nothing of what the Generic PLEG reports. */
START_TEST(test_plugins_leave_events_unchanged)
{
    g_autofree char *plugin_dir = make_tmpdir();
    g_autofree char *plugin_dir_arg = g_strconcat("--plugin-dir=", plugin_dir, NULL);
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autoptr(GHashTable) events = NULL;
    g_autofree char *base = NULL;
    g_autofree char *url = NULL;
    g_autofree char *body = NULL;
    g_autofree char *out = NULL;

    copy_file(g_getenv("PLEG_HELLO_PLUGIN"), plugin_dir, "libpleg-hello.so");
    copy_file(g_getenv("PLEG_HELLO_PLUGIN_FILE"), plugin_dir, "hello.plugin");
    g_free(write_file(plugin_dir, "broken.plugin", "[Plugin]\nName=broken\nModule=libbroken.so\n"));
    g_free(write_file(plugin_dir, "libbroken.so", "this is not a shared object\n"));

    /* hello's own gate, declared in hello.plugin, is off by default. */
    plegd = plegd_runner_spawn(NULL, fixture.endpoint_arg, plugin_dir_arg, "--relist-period=100ms",
                               "--metrics-bind-address=127.0.0.1:0",
                               "--feature-gates=HelloPlugin=true");
    base = plegd_runner_wait_metrics_url(plegd);
    assert_stderr_shows(plegd, "plugin hello: running");
    assert_stderr_shows(plegd, "plugin broken: failed: ");
    assert_stderr_shows(plegd, "first relist succeeded with 2 pods; ready");
    ck_assert(plegd_runner_wait_stdout(plegd, "\"ctr-2\""));
    ck_assert(plegd_runner_wait_stdout(plegd, "\"sb-b\""));

    /* Healthy: the PLEG relists and the plugin's own checker passes. */
    url = g_strconcat(base, "/healthz", NULL);
    ck_assert_uint_eq(http_request("GET", url, &body, NULL), 200);
    ck_assert_str_eq(body, "ok");

    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    out = plegd_runner_get_stdout(plegd);
    events = parse_events(out);
    ck_assert_uint_eq(g_hash_table_size(events), 4);
    lookup_event(events, "sb-a", "ContainerStarted", "uid-a");
    lookup_event(events, "sb-b", "ContainerDied", "uid-b");
    lookup_event(events, "ctr-1", "ContainerStarted", "uid-a");
    lookup_event(events, "ctr-2", "ContainerDied", "uid-a");
    remove_tmpdir(plugin_dir);
}
END_TEST

static Suite *
plegd_cri_suite(void)
{
    Suite *suite = suite_create("plegd-cri");
    TCase *tc = tcase_create("fake-cri");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_events_ready_and_recovery);
    tcase_add_test(tc, test_stdout_closed);
    tcase_add_test(tc, test_sigterm_while_runtime_hangs);
    tcase_add_test(tc, test_plugins_leave_events_unchanged);
    suite_add_tcase(suite, tc);

    tc = tcase_create("stalled-readers");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_stdout_stalled);
    tcase_add_test(tc, test_stdout_backlog_limit);
    tcase_add_test(tc, test_stdout_closed_at_start);
    tcase_add_test(tc, test_notify_socket_full);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    SRunner *runner = srunner_create(plegd_cri_suite());
    int n_failed;

    srunner_run_all(runner, CK_NORMAL);
    n_failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return n_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
