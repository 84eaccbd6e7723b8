/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd's events in the systemd journal, as a journal reader sees them: the test process has a
 * mount namespace of its own, each test a fresh tmpfs on /run (and on /var/log/journal) in it;
 * a test starts systemd-journald there when it needs one, and reads what arrived with
 * `journalctl -D /run/log/journal -o json`.  Then the journal that is not there, and the one
 * that does not read: plegd keeps running, serves /metrics and counts the drops.  Last, plegd's
 * own log records, its stderr connected to journald as under systemd.
 *
 * Needs root (a mount namespace) and systemd-journald: without them the tests fail, never skip.
 */
#include <errno.h>
#include <gio/gunixsocketaddress.h>
#include <json-glib/json-glib.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "cri-sim.h"
#include "plegd-runner.h"
#include "plegd.h"
#include "sample-events.h"

#define JOURNAL_SOCKET "/run/systemd/journal/socket"

static const char *const journald_paths[] = {
    "/lib/systemd/systemd-journald",
    "/usr/lib/systemd/systemd-journald",
};

static gint64
deadline(void)
{
    return g_get_monotonic_time() + (g_getenv("PLEGD_TEST_WRAPPER") ? 120 : 30) * G_USEC_PER_SEC;
}

/* ---- a private /run, and a journald of our own ---- */

/* A fresh /run for the test (the mount namespace is the process's own: main()); a test's
 * mounts stay, hidden under the next test's. */
static void
enter_private_run(void)
{
    ck_assert_msg(mount("tmpfs", "/run", "tmpfs", 0, "mode=0755") == 0, "mount tmpfs /run: %s",
                  g_strerror(errno));
    /* A persistent journal of the host stays out of it. */
    if (g_file_test("/var/log/journal", G_FILE_TEST_IS_DIR))
        ck_assert_msg(mount("tmpfs", "/var/log/journal", "tmpfs", 0, "mode=0755") == 0,
                      "mount tmpfs /var/log/journal: %s", g_strerror(errno));
    ck_assert_int_eq(g_mkdir_with_parents("/run/systemd/journal", 0755), 0);
}

static void
die_with_parent(gpointer user_data)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
}

static const char *
journald_path(void)
{
    for (gsize i = 0; i < G_N_ELEMENTS(journald_paths); i++) {
        if (g_file_test(journald_paths[i], G_FILE_TEST_IS_EXECUTABLE))
            return journald_paths[i];
    }
    return NULL;
}

/* Starts systemd-journald (killed with the test's process) and waits for its socket. */
static GPid
start_journald(void)
{
    const char *argv[] = {journald_path(), NULL};
    g_autoptr(GError) error = NULL;
    gint64 end = deadline();
    struct stat st;
    GPid pid;

    ck_assert_msg(argv[0], "no systemd-journald");
    ck_assert_msg(g_spawn_async(NULL, (char **)argv, NULL,
                                G_SPAWN_STDOUT_TO_DEV_NULL | G_SPAWN_STDERR_TO_DEV_NULL |
                                    G_SPAWN_DO_NOT_REAP_CHILD,
                                die_with_parent, NULL, &pid, &error),
                  "%s", error ? error->message : "");
    while (stat(JOURNAL_SOCKET, &st) < 0 || !S_ISSOCK(st.st_mode)) {
        ck_assert_msg(g_get_monotonic_time() < end, "journald never made " JOURNAL_SOCKET);
        g_usleep(10 * 1000);
    }
    return pid;
}

/* The value of @name in an entry of `journalctl -o json`: a string, or an array of bytes for a
 * value that is not printable text (a newline, say).  NULL when absent. */
static char *
entry_get(JsonObject *entry, const char *name)
{
    JsonNode *node = json_object_get_member(entry, name);
    JsonArray *bytes;
    GString *value;

    if (!node)
        return NULL;
    if (JSON_NODE_HOLDS_VALUE(node))
        return g_strdup(json_node_get_string(node));
    ck_assert_msg(JSON_NODE_HOLDS_ARRAY(node), "%s is neither text nor bytes", name);
    bytes = json_node_get_array(node);
    value = g_string_new(NULL);
    for (guint i = 0; i < json_array_get_length(bytes); i++)
        g_string_append_c(value, (char)json_array_get_int_element(bytes, i));
    return g_string_free(value, FALSE);
}

/* @expected: %NULL: the field is absent. */
static void
assert_entry_field(JsonObject *entry, const char *name, const char *expected)
{
    g_autofree char *value = entry_get(entry, name);

    ck_assert_msg(g_strcmp0(value, expected) == 0, "%s is \"%s\", not \"%s\"", name,
                  value ? value : "(absent)", expected ? expected : "(absent)");
}

/* The entries `journalctl -D /run/log/journal -o json MATCH...` shows, oldest first.  (Run with
 * g_spawn_sync(): GSubprocess hands the child to GLib's worker threads, which ThreadSanitizer
 * cannot follow.) */
static GPtrArray *
read_journal(const char *const *matches)
{
    g_autoptr(GStrvBuilder) builder = g_strv_builder_new();
    g_auto(GStrv) argv = NULL;
    g_autoptr(GError) error = NULL;
    g_autofree char *out = NULL;
    g_autofree char *err = NULL;
    g_auto(GStrv) lines = NULL;
    int status;
    GPtrArray *entries = g_ptr_array_new_with_free_func((GDestroyNotify)json_object_unref);

    g_strv_builder_add_many(builder, "journalctl", "--no-pager", "-D", "/run/log/journal", "-o",
                            "json", NULL);
    g_strv_builder_addv(builder, (const char **)matches);
    argv = g_strv_builder_end(builder);
    ck_assert_msg(g_spawn_sync(NULL, argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, &out, &err,
                               &status, &error),
                  "journalctl: %s", error ? error->message : "");
    ck_assert_msg(g_spawn_check_wait_status(status, NULL), "journalctl: %s", err);
    lines = g_strsplit(out, "\n", -1);
    for (char **line = lines; *line; line++) {
        g_autoptr(JsonParser) parser = json_parser_new();

        if (**line == '\0')
            continue;
        ck_assert_msg(json_parser_load_from_data(parser, *line, -1, &error), "%s: %s", *line,
                      error ? error->message : "");
        g_ptr_array_add(entries, json_object_ref(json_node_get_object(json_parser_get_root(parser))));
    }
    return entries;
}

/* Waits until @matches select at least @n entries (journald writes them when it gets to it). */
static GPtrArray *
wait_journal(guint n, const char *const *matches)
{
    gint64 end = deadline();

    for (;;) {
        GPtrArray *entries = read_journal(matches);

        if (entries->len >= n)
            return entries;
        ck_assert_msg(g_get_monotonic_time() < end, "the journal has %u entries for %s..., not %u",
                      entries->len, matches[0], n);
        g_ptr_array_unref(entries);
        g_usleep(50 * 1000);
    }
}

/* The entry of @entries whose @name is @value. */
static JsonObject *
find_entry(GPtrArray *entries, const char *name, const char *value)
{
    for (guint i = 0; i < entries->len; i++) {
        g_autofree char *found = entry_get(entries->pdata[i], name);

        if (g_strcmp0(found, value) == 0)
            return entries->pdata[i];
    }
    ck_abort_msg("no entry with %s=%s among %u", name, value, entries->len);
    return NULL;
}

/* ---- plegd against cri-sim ---- */

typedef struct {
    char *dir;
    CriSim *sim;
    char *endpoint_arg;
    PlegdRunner *plegd;
    char *base;
    GPid journald;
} Fixture;

static Fixture fixture;

static void
teardown(void)
{
    g_clear_pointer(&fixture.plegd, plegd_runner_free);
    g_clear_pointer(&fixture.sim, cri_sim_free);
    g_clear_pointer(&fixture.base, g_free);
    if (fixture.journald > 0) {
        kill(fixture.journald, SIGKILL);
        g_spawn_close_pid(fixture.journald);
        fixture.journald = 0;
    }
    if (fixture.dir)
        remove_tmpdir(fixture.dir);
    g_clear_pointer(&fixture.dir, g_free);
    g_clear_pointer(&fixture.endpoint_arg, g_free);
}

/* A private /run, journald when @with_journald, cri-sim. */
static void
setup_full(gboolean with_journald)
{
    g_autofree char *path = NULL;
    g_autoptr(GError) error = NULL;

    enter_private_run();
    if (with_journald)
        fixture.journald = start_journald();
    fixture.dir = make_tmpdir();
    path = g_build_filename(fixture.dir, "cri.sock", NULL);
    fixture.sim = cri_sim_new(path, &error);
    ck_assert_msg(fixture.sim, "%s", error ? error->message : "");
    fixture.endpoint_arg = g_strdup_printf("--container-runtime-endpoint=unix://%s", path);
}

static void
start_plegd(const char *extra_arg)
{
    fixture.plegd = plegd_runner_spawn(NULL, fixture.endpoint_arg, "--relist-period=100ms",
                                       "--metrics-bind-address=127.0.0.1:0",
                                       "--events-journal=yes", extra_arg);
    fixture.base = plegd_runner_wait_metrics_url(fixture.plegd);
}

/* A pod "web" in namespace "shop" (uid u-web, sandbox sb-u-web) with a running container
 * "nginx" (ctr-nginx). */
static void
add_shop_web(void)
{
    g_autoptr(GError) error = NULL;
    const CriSimPodSpec pod = {.uid = "u-web", .name = "web", .namespace_ = "shop"};
    const CriSimContainerSpec container = {
        .id = "ctr-nginx",
        .pod_uid = "u-web",
        .name = "nginx",
        .image = "docker.io/library/nginx:1.27",
        .state = CRI_SIM_CONTAINER_RUNNING,
    };

    ck_assert_msg(cri_sim_add_pod_full(fixture.sim, &pod, NULL, &error), "%s",
                  error ? error->message : "");
    ck_assert_msg(cri_sim_add_container_full(fixture.sim, &container, NULL, &error), "%s",
                  error ? error->message : "");
}

static double
metric(const char *series)
{
    return plegd_metric(fixture.base, series);
}

static void
wait_metric_at_least(const char *series, double min)
{
    gint64 end = deadline();

    while (metric(series) < min) {
        ck_assert_msg(g_get_monotonic_time() < end, "%s stayed below %g", series, min);
        g_usleep(20 * 1000);
    }
}

/* ---- tests ---- */

/* journal.c alone: a stack-built event with names reaches a reader with every field, a newline
 * in a value included. */
START_TEST(test_entry_reaches_reader)
{
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    g_autoptr(PlegdJournal) journal = NULL;
    g_autoptr(GPtrArray) entries = NULL;
    g_autofree char *time = NULL;
    g_autofree char *finished = NULL;
    PlegPodLifecycleEvent died = sample_died_event();
    PlegPodLifecycleEvent sandbox = {
        .pod_uid = died.pod_uid,
        .type = PLEG_CONTAINER_STARTED,
        .container_id = (char *)"sb-1",
        .time_ns = died.time_ns,
        .details = sample_sandbox_details(),
    };

    died.relist_source = PLEG_RELIST_SOURCE_EVENTED_PLEG;
    died.exit_code = 137;
    died.reason = (char *)"OOMKilled\nby the kernel";
    died.details = sample_nginx_details();
    enter_private_run();
    fixture.journald = start_journald();
    journal = plegd_journal_new(16, registry, NULL, NULL);
    plegd_journal_publish(journal, &died, 41);
    plegd_journal_publish(journal, &sandbox, 42);
    ck_assert(plegd_journal_flush(journal, 10 * G_USEC_PER_SEC));
    ck_assert(pleg_metric_get(pleg_metrics_lookup(registry, "plegd_journal_events_total"), NULL) ==
              2);

    entries = wait_journal(1, (const char *const[]){"PLEG_TYPE=ContainerDied", NULL});
    time = pleg_time_format_rfc3339(died.time_ns);
    finished = pleg_time_format_rfc3339(died.finished_at_ns);
    assert_entry_field(entries->pdata[0], "MESSAGE",
                       "ContainerDied shop/web container nginx attempt 3 exited 137 "
                       "(OOMKilled\\nby the kernel)");
    assert_entry_field(entries->pdata[0], "MESSAGE_ID", "ff9250e6f84a497083e4cf0c74b23978");
    assert_entry_field(entries->pdata[0], "PRIORITY", "6");
    assert_entry_field(entries->pdata[0], "SYSLOG_IDENTIFIER", "plegd");
    assert_entry_field(entries->pdata[0], "PLEG_SEQ", "41");
    assert_entry_field(entries->pdata[0], "POD_NAMESPACE", "shop");
    assert_entry_field(entries->pdata[0], "POD_NAME", "web");
    assert_entry_field(entries->pdata[0], "POD_UID", died.pod_uid);
    assert_entry_field(entries->pdata[0], "CONTAINER_NAME", "nginx");
    assert_entry_field(entries->pdata[0], "CONTAINER_ID", died.container_id);
    assert_entry_field(entries->pdata[0], "PLEG_SANDBOX", "false");
    assert_entry_field(entries->pdata[0], "PLEG_ATTEMPT", "3");
    assert_entry_field(entries->pdata[0], "PLEG_IMAGE", "docker.io/library/nginx:1.27");
    assert_entry_field(entries->pdata[0], "PLEG_EXIT_CODE", "137");
    assert_entry_field(entries->pdata[0], "PLEG_REASON", "OOMKilled\nby the kernel");
    assert_entry_field(entries->pdata[0], "PLEG_FINISHED_AT", finished);
    assert_entry_field(entries->pdata[0], "PLEG_STARTED_AT", NULL);
    assert_entry_field(entries->pdata[0], "PLEG_RELIST_SOURCE", "evented_pleg");
    assert_entry_field(entries->pdata[0], "PLEG_TIME", time);
    g_clear_pointer(&entries, g_ptr_array_unref);

    entries = wait_journal(1, (const char *const[]){"PLEG_SANDBOX=true", NULL});
    assert_entry_field(entries->pdata[0], "MESSAGE", "ContainerStarted shop/web sandbox attempt 1");
    assert_entry_field(entries->pdata[0], "CONTAINER_NAME", NULL);
    assert_entry_field(entries->pdata[0], "PLEG_EXIT_CODE", NULL);
    assert_entry_field(entries->pdata[0], "PLEG_IMAGE", NULL);
}
END_TEST

/* What a reader finds of shop/web's nginx started, killed (137, OOMKilled) and removed. */
typedef struct {
    GPtrArray *started; /* 2: the container's and the sandbox's */
    GPtrArray *died;
    GPtrArray *removed;
} Lifecycle;

static void
lifecycle_clear(Lifecycle *lifecycle)
{
    g_clear_pointer(&lifecycle->started, g_ptr_array_unref);
    g_clear_pointer(&lifecycle->died, g_ptr_array_unref);
    g_clear_pointer(&lifecycle->removed, g_ptr_array_unref);
}
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(Lifecycle, lifecycle_clear)

/* Runs it against plegd and journald; @match: (nullable): one more match for each read
 * ("POD_NAMESPACE=shop"). */
static void
run_lifecycle(Lifecycle *lifecycle, const char *match)
{
    g_autoptr(GError) error = NULL;

    setup_full(TRUE);
    add_shop_web();
    start_plegd(NULL);
    lifecycle->started =
        wait_journal(2, (const char *const[]){"PLEG_TYPE=ContainerStarted", match, NULL});
    ck_assert(cri_sim_exit_container(fixture.sim, "ctr-nginx", 137, "OOMKilled", &error));
    lifecycle->died = wait_journal(1, (const char *const[]){"PLEG_TYPE=ContainerDied", match, NULL});
    ck_assert(cri_sim_remove_container(fixture.sim, "ctr-nginx", &error));
    lifecycle->removed =
        wait_journal(1, (const char *const[]){"PLEG_TYPE=ContainerRemoved", match, NULL});
}

/* plegd's own entries for a container's start, death and removal and its sandbox's start: what
 * holds without the names (the core fills those in; see test_plegd_names). */
START_TEST(test_plegd_entries)
{
    g_auto(Lifecycle) lifecycle = {0};
    JsonObject *entry;

    run_lifecycle(&lifecycle, NULL);
    entry = find_entry(lifecycle.started, "CONTAINER_ID", "ctr-nginx");
    assert_entry_field(entry, "_PID", plegd_runner_get_pid(fixture.plegd));
    assert_entry_field(entry, "SYSLOG_IDENTIFIER", "plegd");
    assert_entry_field(entry, "PRIORITY", "6");
    assert_entry_field(entry, "MESSAGE_ID", "eb875ddb9d3f4c1591690f9d77effef2");
    assert_entry_field(entry, "POD_UID", "u-web");
    assert_entry_field(entry, "PLEG_RELIST_SOURCE", "global");
    ck_assert_ptr_nonnull(json_object_get_member(entry, "PLEG_SEQ"));
    ck_assert_ptr_nonnull(json_object_get_member(entry, "PLEG_TIME"));
    ck_assert_ptr_nonnull(json_object_get_member(entry, "PLEG_ATTEMPT"));
    entry = find_entry(lifecycle.started, "CONTAINER_ID", "sb-u-web");
    assert_entry_field(entry, "POD_UID", "u-web");

    entry = find_entry(lifecycle.died, "CONTAINER_ID", "ctr-nginx");
    assert_entry_field(entry, "MESSAGE_ID", "ff9250e6f84a497083e4cf0c74b23978");
    assert_entry_field(entry, "PLEG_EXIT_CODE", "137");
    assert_entry_field(entry, "PLEG_REASON", "OOMKilled");
    ck_assert_ptr_nonnull(json_object_get_member(entry, "PLEG_FINISHED_AT"));
    ck_assert(g_str_has_suffix(json_object_get_string_member(entry, "MESSAGE"),
                               " exited 137 (OOMKilled)"));

    entry = find_entry(lifecycle.removed, "CONTAINER_ID", "ctr-nginx");
    assert_entry_field(entry, "MESSAGE_ID", "ca920fe301a64dedb30c17e4b7e66672");
    assert_entry_field(entry, "PLEG_EXIT_CODE", NULL);

    ck_assert(metric("plegd_journal_events_total") >= 4);
    ck_assert(metric("plegd_journal_events_dropped_total{reason=\"no_journal\"}") == 0);
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
}
END_TEST

/* The names, as an operator asks for them: "which containers of namespace shop died, and how".
 * Needs the Generic PLEG to fill PlegEventDetails from the relist (until then the names are
 * NULL and this test fails). */
START_TEST(test_plegd_names)
{
    g_auto(Lifecycle) lifecycle = {0};
    g_autoptr(GError) error = NULL;
    g_autoptr(GPtrArray) second = NULL;
    const CriSimPodSpec recreated = {
        .id = "sb-u-web-1", .uid = "u-web", .name = "web", .namespace_ = "shop", .attempt = 1};
    JsonObject *entry;

    run_lifecycle(&lifecycle, "POD_NAMESPACE=shop");
    entry = find_entry(lifecycle.started, "CONTAINER_ID", "ctr-nginx");
    assert_entry_field(entry, "MESSAGE", "ContainerStarted shop/web container nginx");
    assert_entry_field(entry, "POD_NAME", "web");
    assert_entry_field(entry, "CONTAINER_NAME", "nginx");
    assert_entry_field(entry, "PLEG_SANDBOX", "false");
    assert_entry_field(entry, "PLEG_ATTEMPT", "0");
    assert_entry_field(entry, "PLEG_IMAGE", "docker.io/library/nginx:1.27");
    ck_assert_ptr_nonnull(json_object_get_member(entry, "PLEG_STARTED_AT"));
    entry = find_entry(lifecycle.started, "CONTAINER_ID", "sb-u-web");
    assert_entry_field(entry, "MESSAGE", "ContainerStarted shop/web sandbox");
    assert_entry_field(entry, "PLEG_SANDBOX", "true");
    assert_entry_field(entry, "CONTAINER_NAME", NULL);

    entry = find_entry(lifecycle.died, "CONTAINER_ID", "ctr-nginx");
    assert_entry_field(entry, "MESSAGE", "ContainerDied shop/web container nginx exited 137 "
                                         "(OOMKilled)");
    assert_entry_field(entry, "POD_NAME", "web");
    assert_entry_field(entry, "CONTAINER_NAME", "nginx");

    /* Gone from the runtime: the names of the PLEG's last record. */
    entry = find_entry(lifecycle.removed, "CONTAINER_ID", "ctr-nginx");
    assert_entry_field(entry, "MESSAGE", "ContainerRemoved shop/web container nginx");
    assert_entry_field(entry, "CONTAINER_NAME", "nginx");

    /* The pod's sandbox recreated: attempt 1. */
    ck_assert(cri_sim_add_pod_full(fixture.sim, &recreated, NULL, &error));
    second = wait_journal(1, (const char *const[]){"CONTAINER_ID=sb-u-web-1",
                                                   "PLEG_TYPE=ContainerStarted", NULL});
    assert_entry_field(second->pdata[0], "MESSAGE", "ContainerStarted shop/web sandbox attempt 1");
    assert_entry_field(second->pdata[0], "PLEG_ATTEMPT", "1");
    assert_entry_field(second->pdata[0], "PLEG_SANDBOX", "true");
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
}
END_TEST

/* No journald: no socket, then a socket file nobody listens on.  plegd goes on, counts and
 * says it once. */
START_TEST(test_no_journald)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(GSocket) stale = NULL;
    g_autoptr(GSocketAddress) address = g_unix_socket_address_new(JOURNAL_SOCKET);
    g_autofree char *err = NULL;
    g_autofree char *healthz = NULL;
    double before;

    setup_full(FALSE);
    add_shop_web();
    start_plegd(NULL);
    wait_metric_at_least("plegd_journal_events_dropped_total{reason=\"no_journal\"}", 2);
    assert_stderr_shows(fixture.plegd, "cannot send events to the journal: no journald listens on "
                                       JOURNAL_SOCKET " (No such file or directory)");

    /* A journald that went away and left its socket: connecting is refused. */
    stale = g_socket_new(G_SOCKET_FAMILY_UNIX, G_SOCKET_TYPE_DATAGRAM, G_SOCKET_PROTOCOL_DEFAULT,
                         &error);
    ck_assert_msg(stale && g_socket_bind(stale, address, FALSE, &error), "%s",
                  error ? error->message : "");
    g_socket_close(stale, NULL);
    before = metric("plegd_journal_events_dropped_total{reason=\"no_journal\"}");
    ck_assert(cri_sim_exit_container(fixture.sim, "ctr-nginx", 1, NULL, &error));
    wait_metric_at_least("plegd_journal_events_dropped_total{reason=\"no_journal\"}", before + 1);
    assert_stderr_shows(fixture.plegd, "(Connection refused)");

    ck_assert(metric("plegd_journal_events_total") == 0);
    ck_assert_uint_eq(http_request("GET", (healthz = g_strconcat(fixture.base, "/healthz", NULL)),
                                   NULL, NULL),
                      200);
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(fixture.plegd);
    ck_assert_uint_eq(count_messages(err, "no journald listens on " JOURNAL_SOCKET
                                          " (No such file or directory)"),
                      1);
}
END_TEST

/* A journal socket that nobody reads, its queue full: sd_journal_sendv() blocks for good in
 * plegd's sender thread, the queue before it fills, and every event after is counted; plegd
 * serves /metrics and stops on SIGTERM as always. */
START_TEST(test_journal_not_read)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(GSocketAddress) address = g_unix_socket_address_new(JOURNAL_SOCKET);
    g_autoptr(GSocket) unread = NULL;
    g_autoptr(GSocket) filler = NULL;
    g_autofree char *healthz = NULL;
    guint n_filled = 0;

    setup_full(FALSE);
    unread = g_socket_new(G_SOCKET_FAMILY_UNIX, G_SOCKET_TYPE_DATAGRAM, G_SOCKET_PROTOCOL_DEFAULT,
                          &error);
    ck_assert_msg(unread && g_socket_bind(unread, address, FALSE, &error), "%s",
                  error ? error->message : "");
    filler = g_socket_new(G_SOCKET_FAMILY_UNIX, G_SOCKET_TYPE_DATAGRAM, G_SOCKET_PROTOCOL_DEFAULT,
                          &error);
    ck_assert(filler);
    g_socket_set_blocking(filler, FALSE);
    /* Until the kernel says the receiver's queue is full. */
    for (;;) {
        g_autoptr(GError) send_error = NULL;

        if (g_socket_send_to(filler, address, "MESSAGE=filler\n", 15, NULL, &send_error) < 0) {
            ck_assert_msg(g_error_matches(send_error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK), "%s",
                          send_error->message);
            break;
        }
        n_filled++;
        ck_assert_uint_lt(n_filled, 1000000);
    }

    add_shop_web();
    cri_sim_bulk(fixture.sim, 10, 1);
    start_plegd("--journal-max-queue=4");
    /* 22 ContainerStarted: one blocked in the sender, the others queued (4 at most) or
     * dropped.  The sender may take its event before the queue fills (4 stay queued, 17 are
     * dropped) or after (18 dropped, 3 stay queued once it takes one). */
    wait_metric_at_least("plegd_journal_events_dropped_total{reason=\"queue_full\"}", 17);
    assert_stderr_shows(fixture.plegd, "cannot send events to the journal: journald does not keep "
                                       "up: 4 events wait to be sent");
    ck_assert(metric("plegd_journal_events_total") == 0);
    ck_assert_uint_eq(http_request("GET", (healthz = g_strconcat(fixture.base, "/healthz", NULL)),
                                   NULL, NULL),
                      200);
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
    /* What is still queued at shutdown is dropped, and said. */
    {
        g_autofree char *err = plegd_runner_get_stderr(fixture.plegd);

        ck_assert_msg(strstr(err, "the journal does not take events: dropping 4 of them") ||
                          strstr(err, "the journal does not take events: dropping 3 of them"),
                      "%s", err);
    }
}
END_TEST

/* ---- plegd's log records ---- */

#define JOURNAL_STDOUT "/run/systemd/journal/stdout"

/* A stream to journald as systemd gives a service with StandardError=journal: connected to
 * its stdout socket, the stream's header sent. */
static int
connect_journal_stream(void)
{
    static const char header[] = "plegd\n\n6\n0\n0\n0\n0\n";
    struct sockaddr_un address = {.sun_family = AF_UNIX, .sun_path = JOURNAL_STDOUT};
    gint64 end = deadline();
    struct stat st;
    int fd;

    while (stat(JOURNAL_STDOUT, &st) < 0 || !S_ISSOCK(st.st_mode)) {
        ck_assert_msg(g_get_monotonic_time() < end, "journald never made " JOURNAL_STDOUT);
        g_usleep(10 * 1000);
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_msg(connect(fd, (struct sockaddr *)&address, sizeof address) == 0,
                  "connect " JOURNAL_STDOUT ": %s", g_strerror(errno));
    ck_assert_int_eq(write(fd, header, strlen(header)), (int)strlen(header));
    return fd;
}

static void
stderr_to(gpointer fd)
{
    dup2(GPOINTER_TO_INT(fd), STDERR_FILENO);
}

/* plegd with the example plugin hello (an info record with a PLUGIN field at start, a debug
 * "tick" every second), its stderr the journal's stream; @verbosity is its --v.  Sets
 * fixture.base from the "serving metrics on" record.  Returns: (transfer full): plegd's pid. */
static char *
start_plegd_to_journal(const char *plugin_dir_arg, const char *verbosity)
{
    const char *args[] = {fixture.endpoint_arg,
                          "--relist-period=100ms",
                          "--metrics-bind-address=127.0.0.1:0",
                          "--events-journal=no",
                          plugin_dir_arg,
                          "--feature-gates=HelloPlugin=true",
                          "--logging-format=json",
                          verbosity,
                          NULL};
    int fd = connect_journal_stream();
    g_autofree char *pid = NULL;
    g_autofree char *pid_match = NULL;
    gint64 end = deadline();

    fixture.plegd = plegd_runner_spawn_with_setup(NULL, -1, stderr_to, GINT_TO_POINTER(fd), args);
    close(fd);
    pid = g_strdup(plegd_runner_get_pid(fixture.plegd));
    pid_match = g_strconcat("_PID=", pid, NULL);
    while (!fixture.base) {
        g_autoptr(GPtrArray) entries =
            read_journal((const char *const[]){pid_match, "GLIB_DOMAIN=plegd", NULL});

        for (guint i = 0; i < entries->len && !fixture.base; i++) {
            g_autofree char *message = entry_get(entries->pdata[i], "MESSAGE");

            if (g_str_has_prefix(message, "serving metrics on "))
                fixture.base = g_strdup(message + strlen("serving metrics on "));
        }
        ck_assert_msg(fixture.base || g_get_monotonic_time() < end,
                      "no \"serving metrics on\" record of plegd in the journal");
        if (!fixture.base)
            g_usleep(50 * 1000);
    }
    return g_steal_pointer(&pid);
}

/* With its stderr connected to journald (the shipped unit's StandardError=journal), plegd's
 * log records go to the journal natively, with PRIORITY, GLIB_DOMAIN, GLib's CODE_* and the
 * plugin's own fields, whatever --logging-format (json here); --v chooses them as on a
 * terminal: the plugin's debug record at --v=4, none at --v=0. */
START_TEST(test_log_records)
{
    g_autofree char *plugin_dir = NULL;
    g_autofree char *plugin_dir_arg = NULL;
    g_autofree char *pid = NULL;
    g_autofree char *pid_match = NULL;
    g_autoptr(GPtrArray) ticks = NULL;
    g_autoptr(GPtrArray) started = NULL;
    g_autoptr(GPtrArray) running = NULL;
    g_autoptr(GPtrArray) debug = NULL;

    setup_full(TRUE);
    plugin_dir = g_build_filename(fixture.dir, "plugins", NULL);
    ck_assert_int_eq(g_mkdir_with_parents(plugin_dir, 0755), 0);
    add_hello_plugin(plugin_dir);
    plugin_dir_arg = g_strconcat("--plugin-dir=", plugin_dir, NULL);

    pid = start_plegd_to_journal(plugin_dir_arg, "--v=4");
    pid_match = g_strconcat("_PID=", pid, NULL);
    ticks = wait_journal(
        1, (const char *const[]){pid_match, "GLIB_DOMAIN=pleg-hello", "PRIORITY=7", NULL});
    assert_entry_field(ticks->pdata[0], "MESSAGE", "tick");
    assert_entry_field(ticks->pdata[0], "PLUGIN", "hello");
    started = wait_journal(
        1, (const char *const[]){pid_match, "GLIB_DOMAIN=pleg-hello", "PRIORITY=6", NULL});
    assert_entry_field(started->pdata[0], "MESSAGE",
                       "started: counting seconds in pleg_hello_ticks_total");
    assert_entry_field(started->pdata[0], "PLUGIN", "hello");
    running = wait_journal(1, (const char *const[]){pid_match, "MESSAGE=plugin hello: running",
                                                    NULL});
    assert_entry_field(running->pdata[0], "GLIB_DOMAIN", "plegd");
    assert_entry_field(running->pdata[0], "PRIORITY", "6");
    assert_entry_field(running->pdata[0], "CODE_FUNC", "log_plugins");
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
    g_clear_pointer(&fixture.plegd, plegd_runner_free);
    g_clear_pointer(&fixture.base, g_free);
    g_clear_pointer(&pid, g_free);
    g_clear_pointer(&pid_match, g_free);

    /* At --v=0 hello ticks, and logs nothing of it. */
    pid = start_plegd_to_journal(plugin_dir_arg, "--v=0");
    pid_match = g_strconcat("_PID=", pid, NULL);
    wait_metric_at_least("pleg_hello_ticks_total", 2);
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
    /* The last record: the ones before it are in the journal too. */
    g_ptr_array_unref(wait_journal(1, (const char *const[]){pid_match, "MESSAGE=stopped", NULL}));
    debug = read_journal((const char *const[]){pid_match, "PRIORITY=7", NULL});
    ck_assert_uint_eq(debug->len, 0);
    g_ptr_array_unref(wait_journal(
        1, (const char *const[]){pid_match, "GLIB_DOMAIN=pleg-hello", "PRIORITY=6", NULL}));
}
END_TEST

static Suite *
journal_suite(void)
{
    Suite *suite = suite_create("plegd-journal");
    TCase *tc = tcase_create("journal");

    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_entry_reaches_reader);
    tcase_add_test(tc, test_plegd_entries);
    tcase_add_test(tc, test_no_journald);
    tcase_add_test(tc, test_journal_not_read);
    tcase_add_test(tc, test_log_records);
    suite_add_tcase(suite, tc);

    tc = tcase_create("names");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_plegd_names);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    SRunner *runner;
    int n_failed;

    /* CI counts a skip as a failure, and so does this: no root or no journald is an error. */
    if (geteuid() != 0) {
        g_printerr("test-plegd-journal: needs root (a mount namespace and a journald of its own)\n");
        return EXIT_FAILURE;
    }
    if (!journald_path()) {
        g_printerr("test-plegd-journal: no systemd-journald (install the systemd package)\n");
        return EXIT_FAILURE;
    }
    /* A mount namespace of the process's own, made while it has one thread: unshare() refuses
     * a process whose threads share its filesystem information, and a child forked by Check
     * may have one more already (ThreadSanitizer's background thread). */
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
        g_printerr("test-plegd-journal: a private mount namespace: %s\n", g_strerror(errno));
        return EXIT_FAILURE;
    }
    runner = srunner_create(journal_suite());
    /* Each test's journald ends with its process. */
    srunner_set_fork_status(runner, CK_FORK);
    srunner_run_all(runner, CK_NORMAL);
    n_failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return n_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
