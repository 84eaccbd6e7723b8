/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd against a real containerd: a private containerd (scripts/containerd-sandbox.sh), the real
 * plegd binary, and pods driven through cri-ctl.  The runtime and plegd live in an unchecked
 * fixture, that is in the parent process, so they are torn down even when an assertion fails in the
 * forked test. A runtime that cannot start fails the test: nothing here is skipped.
 *
 * GET /pods (issue #22) lists the lifecycle test's pod, its container exited with its code, and
 * drops it once removed.
 *
 * Test case "restart" (issue #21) has a runtime of its own and starts plegd itself, with
 * --state-dir, three times (after a SIGTERM, then after a SIGKILL), while a consumer follows
 * GET /events and resumes with its last seq; plegd dies with the forked test (PR_SET_PDEATHSIG).
 */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <gio/gunixsocketaddress.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <libsoup/soup.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define TEST_IMAGE    "localhost/pleg-test:latest"
#define WAIT_USEC     (30 * G_USEC_PER_SEC)
#define POLL_USEC     (50 * 1000)
/* Short enough that the issue's `sleep 1; exit 7` container is surely seen running by a few
 * relists, so ContainerStarted is deterministic. */
#define RELIST_PERIOD "250ms"
#define RELIST_USEC   (G_USEC_PER_SEC / 4)
/* Correctness, not a benchmark: a ContainerDied must follow the exit within a relist period plus
 * this much. */
#define DIED_MARGIN_USEC (3 * G_USEC_PER_SEC)

typedef struct {
    char *dir; /* the sandbox's DIR; plegd's files too, so that `stop` removes everything */
    char *endpoint;
    char *sandbox_script;
    char *plegd_path;
    char *cri_ctl_path;
    char *notify_path;
    char *stdout_path;
    char *stderr_path;
    char *metrics_url;
    char *socket_path; /* plegd's --socket: /events and /pods (403 over TCP) */
    char *socket_arg;
    int notify_fd;
    GPid plegd_pid;
} Fixture;

static Fixture fx = {.notify_fd = -1};

static char *
read_file_or_empty(const char *path)
{
    char *contents = NULL;

    if (!path || !g_file_get_contents(path, &contents, NULL, NULL))
        return g_strdup("");
    return contents;
}

static void
dump_file(const char *what, const char *path)
{
    g_autofree char *contents = read_file_or_empty(path);

    fprintf(stderr, "---- %s (%s) ----\n%s---- end of %s ----\n", what, path ? path : "-", contents,
            what);
}

static gboolean
run_sandbox_script(const char *verb, char **ret_stderr)
{
    g_autofree char *owner = g_strdup_printf("%d", (int)getpid());
    const char *argv[] = {"bash", fx.sandbox_script, verb, fx.dir, NULL};
    g_auto(GStrv) envp = g_environ_setenv(g_get_environ(), "PLEG_SANDBOX_OWNER_PID", owner, TRUE);
    g_autofree char *err = NULL;
    g_autoptr(GError) error = NULL;
    int status = 0;

    if (!g_spawn_sync(NULL, (char **)argv, envp, G_SPAWN_SEARCH_PATH, NULL, NULL, NULL, &err,
                      &status, &error)) {
        *ret_stderr = g_strdup(error->message);
        return FALSE;
    }
    fputs(err, stderr);
    if (!g_spawn_check_wait_status(status, NULL)) {
        *ret_stderr = g_steal_pointer(&err);
        return FALSE;
    }
    return TRUE;
}

static int
notify_socket_open(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd;

    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    strcpy(sa.sun_path, path);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int r = -errno;
        close(fd);
        return r;
    }
    return fd;
}

static void
plegd_child_setup(gpointer user_data)
{
    /* plegd goes when the test process goes, however it ends */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
}

/* PLEG_TEST_EVENTED_PLUGIN_DIR set: the same test with the Evented PLEG watcher loaded. */
static const char *
evented_plugin_dir(void)
{
    return g_getenv("PLEG_TEST_EVENTED_PLUGIN_DIR");
}

/* PLEG_TEST_LIST_STREAMING set: the same test with CRIListStreaming on.  containerd before the
 * KEP-5825 streams answers them UNIMPLEMENTED, and everything must work as without the gate. */
static gboolean
list_streaming(void)
{
    return g_getenv("PLEG_TEST_LIST_STREAMING") != NULL;
}

/* @state_dir: NULL, or plegd's --state-dir.  stdout and stderr are appended to, so that the
 * files hold every run of a test that restarts plegd. */
static gboolean
plegd_spawn(const char *state_dir, GError **error)
{
    g_autofree char *endpoint_arg = g_strdup_printf("--container-runtime-endpoint=%s", fx.endpoint);
    g_autofree char *plugin_dir_arg = NULL;
    g_autofree char *state_dir_arg =
        state_dir ? g_strdup_printf("--state-dir=%s", state_dir) : NULL;
    /* the program and its fixed arguments; then up to three of a variant, --state-dir, NULL */
    const char *argv[5 + 3 + 1 + 1] = {fx.plegd_path, endpoint_arg,
                                       "--relist-period=" RELIST_PERIOD,
                                       "--metrics-bind-address=127.0.0.1:0", fx.socket_arg};
    guint n = 5;

    if (evented_plugin_dir()) {
        plugin_dir_arg = g_strdup_printf("--plugin-dir=%s", evented_plugin_dir());
        argv[n++] = "--feature-gates=EventedPLEG=true";
        argv[n++] = plugin_dir_arg;
        argv[n++] = "--require-plugins=evented";
    } else if (list_streaming()) {
        argv[n++] = "--feature-gates=CRIListStreaming=true";
    }
    if (state_dir_arg)
        argv[n++] = state_dir_arg;
    g_auto(GStrv) envp = g_environ_setenv(g_get_environ(), "NOTIFY_SOCKET", fx.notify_path, TRUE);
    int out_fd, err_fd;
    gboolean ok;

    out_fd = open(fx.stdout_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    err_fd = open(fx.stderr_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (out_fd < 0 || err_fd < 0) {
        g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(errno), "open: %s",
                    g_strerror(errno));
        if (out_fd >= 0)
            close(out_fd);
        if (err_fd >= 0)
            close(err_fd);
        return FALSE;
    }
    ok = g_spawn_async_with_pipes_and_fds(
        NULL, argv, (const char *const *)envp, G_SPAWN_DO_NOT_REAP_CHILD, plegd_child_setup, NULL,
        -1, out_fd, err_fd, NULL, NULL, 0, &fx.plegd_pid, NULL, NULL, NULL, error);
    close(out_fd);
    close(err_fd);
    return ok;
}

/* 1 still running, 0 exited (ret_status set), like waitpid(WNOHANG) */
static int
plegd_poll_exit(int *ret_status)
{
    int status;

    if (fx.plegd_pid <= 0)
        return 0;
    if (waitpid(fx.plegd_pid, &status, WNOHANG) == fx.plegd_pid) {
        fx.plegd_pid = 0;
        if (ret_status)
            *ret_status = status;
        return 0;
    }
    return 1;
}

/* The URL of the "serving metrics on" line that plegd logged after byte @from of its stderr. */
static char *
wait_metrics_url(gsize from)
{
    gint64 deadline = g_get_monotonic_time() + WAIT_USEC;

    while (g_get_monotonic_time() < deadline) {
        g_autofree char *log = read_file_or_empty(fx.stderr_path);
        const char *p =
            strlen(log) > from ? strstr(log + from, "serving metrics on http://") : NULL;

        if (p) {
            p = strstr(p, "http://");
            return g_strndup(p, strcspn(p, " \t\r\n\"'"));
        }
        if (!plegd_poll_exit(NULL))
            return NULL;
        g_usleep(POLL_USEC);
    }
    return NULL;
}

static void
teardown(void)
{
    if (fx.plegd_pid > 0) {
        gint64 deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
        int status = 0;

        kill(fx.plegd_pid, SIGTERM);
        while (plegd_poll_exit(&status) && g_get_monotonic_time() < deadline)
            g_usleep(POLL_USEC);
        if (fx.plegd_pid > 0) {
            fprintf(stderr, "plegd did not exit on SIGTERM, killing it\n");
            kill(fx.plegd_pid, SIGKILL);
            waitpid(fx.plegd_pid, &status, 0);
            fx.plegd_pid = 0;
        } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "plegd ended with wait status 0x%x on SIGTERM\n", status);
        }
    }
    if (fx.stderr_path) {
        dump_file("plegd stdout", fx.stdout_path);
        dump_file("plegd stderr", fx.stderr_path);
    }
    if (fx.notify_fd >= 0) {
        close(fx.notify_fd);
        fx.notify_fd = -1;
    }
    if (fx.dir) {
        g_autofree char *err = NULL;

        if (!run_sandbox_script("stop", &err))
            fprintf(stderr, "stopping the private containerd failed: %s\n", err);
    }
    g_clear_pointer(&fx.dir, g_free);
    g_clear_pointer(&fx.endpoint, g_free);
    g_clear_pointer(&fx.sandbox_script, g_free);
    g_clear_pointer(&fx.plegd_path, g_free);
    g_clear_pointer(&fx.cri_ctl_path, g_free);
    g_clear_pointer(&fx.notify_path, g_free);
    g_clear_pointer(&fx.stdout_path, g_free);
    g_clear_pointer(&fx.stderr_path, g_free);
    g_clear_pointer(&fx.metrics_url, g_free);
    g_clear_pointer(&fx.socket_path, g_free);
    g_clear_pointer(&fx.socket_arg, g_free);
}

static char *
setup_steps(void)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *err = NULL;
    int fd;

    if (geteuid() != 0)
        return g_strdup("the integration test runs containerd and needs root");
    fx.plegd_path = g_strdup(g_getenv("PLEG_TEST_PLEGD"));
    fx.cri_ctl_path = g_strdup(g_getenv("PLEG_TEST_CRI_CTL"));
    fx.sandbox_script = g_strdup(g_getenv("PLEG_TEST_CONTAINERD_SANDBOX"));
    if (!fx.plegd_path || !fx.cri_ctl_path || !fx.sandbox_script)
        return g_strdup("PLEG_TEST_PLEGD, PLEG_TEST_CRI_CTL and PLEG_TEST_CONTAINERD_SANDBOX must "
                        "be set (meson test does)");

    fx.dir = g_dir_make_tmp("pleg-integ-XXXXXX", &error);
    if (!fx.dir)
        return g_strdup_printf("temporary folder: %s", error->message);
    fx.endpoint = g_strdup_printf("unix://%s/containerd.sock", fx.dir);
    fx.notify_path = g_build_filename(fx.dir, "notify.sock", NULL);
    fx.stdout_path = g_build_filename(fx.dir, "plegd.out", NULL);
    fx.stderr_path = g_build_filename(fx.dir, "plegd.err", NULL);
    fx.socket_path = g_build_filename(fx.dir, "plegd.sock", NULL);
    fx.socket_arg = g_strconcat("--socket=", fx.socket_path, NULL);

    if (!run_sandbox_script("start", &err))
        return g_strdup_printf("the private containerd did not start (%s start): %s",
                               fx.sandbox_script, err);

    fd = notify_socket_open(fx.notify_path);
    if (fd < 0)
        return g_strdup_printf("notify socket %s: %s", fx.notify_path, g_strerror(-fd));
    fx.notify_fd = fd;
    return NULL;
}

/* Starts plegd (@state_dir: NULL or its --state-dir) and sets fx.metrics_url to its address;
 * returns why it failed, or NULL. */
static char *
plegd_start(const char *state_dir)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *log = read_file_or_empty(fx.stderr_path);
    gsize log_size = strlen(log);

    if (!plegd_spawn(state_dir, &error))
        return g_strdup_printf("starting %s: %s", fx.plegd_path, error->message);
    g_clear_pointer(&fx.metrics_url, g_free);
    fx.metrics_url = wait_metrics_url(log_size);
    if (!fx.metrics_url) {
        g_free(log);
        log = read_file_or_empty(fx.stderr_path);
        return g_strdup_printf("plegd never logged \"serving metrics on\"; its stderr:\n%s", log);
    }
    return NULL;
}

/* The private containerd and plegd, started once for the test case. */
static void
setup(void)
{
    g_autofree char *failure = setup_steps();

    if (!failure)
        failure = plegd_start(NULL);
    if (failure) {
        teardown();
        ck_abort_msg("%s", failure);
    }
}

/* The private containerd only: the test starts and stops plegd itself. */
static void
setup_runtime(void)
{
    g_autofree char *failure = setup_steps();

    if (failure) {
        teardown();
        ck_abort_msg("%s", failure);
    }
}

/* cri-ctl ARGS...: its stdout, stripped; fails the test on error. */
static char *
cri_ctl(const char *first, ...)
{
    g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
    g_autofree char *out = NULL;
    g_autofree char *err = NULL;
    g_autoptr(GError) error = NULL;
    va_list ap;
    int status = 0;

    g_ptr_array_add(argv, g_strdup(fx.cri_ctl_path));
    g_ptr_array_add(argv, g_strdup_printf("--endpoint=%s", fx.endpoint));
    va_start(ap, first);
    for (const char *a = first; a; a = va_arg(ap, const char *))
        g_ptr_array_add(argv, g_strdup(a));
    va_end(ap);
    g_ptr_array_add(argv, NULL);

    ck_assert_msg(
        g_spawn_sync(NULL, (char **)argv->pdata, NULL, 0, NULL, NULL, &out, &err, &status, &error),
        "spawning cri-ctl: %s", error ? error->message : "?");
    ck_assert_msg(g_spawn_check_wait_status(status, NULL), "cri-ctl %s failed: %s", first, err);
    return g_strdup(g_strstrip(out));
}

static gboolean
notify_has_ready(const char *datagram)
{
    g_auto(GStrv) lines = g_strsplit(datagram, "\n", -1);

    for (char **l = lines; *l; l++)
        if (g_str_equal(*l, "READY=1"))
            return TRUE;
    return FALSE;
}

static void
wait_ready(void)
{
    gint64 deadline = g_get_monotonic_time() + WAIT_USEC;

    for (;;) {
        struct pollfd pfd = {.fd = fx.notify_fd, .events = POLLIN};
        gint64 left = deadline - g_get_monotonic_time();
        char buf[4096];
        ssize_t n;

        ck_assert_msg(left > 0, "plegd did not send READY=1 within %d s",
                      (int)(WAIT_USEC / G_USEC_PER_SEC));
        if (poll(&pfd, 1, (int)(left / 1000) + 1) <= 0)
            continue;
        n = recv(fx.notify_fd, buf, sizeof(buf) - 1, 0);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        if (notify_has_ready(buf))
            return;
    }
}

/* A session to plegd's socket, whatever the URL's host: /events and /pods are served there.
 * @stream: no timeout, a stream may be idle for as long as nothing happens. */
static SoupSession *
socket_session_new(gboolean stream)
{
    g_autoptr(GSocketAddress) address = g_unix_socket_address_new(fx.socket_path);

    if (!stream)
        return soup_session_new_with_options("remote-connectable", address, NULL);
    return soup_session_new_with_options("timeout", 0, "idle-timeout", 0, "remote-connectable",
                                         address, NULL);
}

/* /events and /pods on the socket, the rest over TCP as Prometheus and probes ask. */
static char *
http_get(const char *path, guint *ret_status)
{
    gboolean on_socket = g_str_has_prefix(path, "/pods") || g_str_has_prefix(path, "/events");
    g_autoptr(SoupSession) session = on_socket ? socket_session_new(FALSE) : soup_session_new();
    g_autofree char *url =
        g_strconcat(on_socket ? "http://localhost" : fx.metrics_url, path, NULL);
    g_autoptr(SoupMessage) msg = soup_message_new("GET", url);
    g_autoptr(GError) error = NULL;
    g_autoptr(GBytes) body = NULL;

    ck_assert_ptr_nonnull(msg);
    body = soup_session_send_and_read(session, msg, NULL, &error);
    ck_assert_msg(body, "GET %s: %s", url, error ? error->message : "?");
    *ret_status = soup_message_get_status(msg);
    return g_strndup(g_bytes_get_data(body, NULL), g_bytes_get_size(body));
}

/* The value of an unlabelled sample NAME in Prometheus text, or -1 when absent. */
static double
metric_value(const char *text, const char *name)
{
    g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
    size_t len = strlen(name);

    for (char **l = lines; *l; l++)
        if (g_str_has_prefix(*l, name) && (*l)[len] == ' ')
            return g_ascii_strtod(*l + len + 1, NULL);
    return -1;
}

static double
relist_count(void)
{
    g_autofree char *text = NULL;
    guint status = 0;

    text = http_get("/metrics", &status);
    ck_assert_uint_eq(status, 200);
    return metric_value(text, "kubelet_pleg_relist_duration_seconds_count");
}

/* kubelet's own counters named without "_total" (or with "_count"): promtool's linter flags
 * their suffixes, and libpleg keeps kubelet's names on purpose.  Nothing else may be flagged. */
static const char *const kubelet_legacy_counters[] = {
    "kubelet_pleg_discard_events",
    "kubelet_evented_pleg_connection_error_count",
    "kubelet_evented_pleg_connection_success_count",
};

static void
assert_promtool_accepts(const char *text)
{
    g_autoptr(GSubprocess) proc = NULL;
    g_autoptr(GError) error = NULL;
    g_autofree char *out = NULL;
    g_auto(GStrv) lines = NULL;
    int status;

    proc = g_subprocess_new(G_SUBPROCESS_FLAGS_STDIN_PIPE | G_SUBPROCESS_FLAGS_STDOUT_PIPE |
                                G_SUBPROCESS_FLAGS_STDERR_MERGE,
                            &error, "promtool", "check", "metrics", NULL);
    ck_assert_msg(proc != NULL, "cannot run promtool: %s", error ? error->message : "?");
    ck_assert_msg(g_subprocess_communicate_utf8(proc, text, NULL, &out, NULL, &error),
                  "promtool: %s", error ? error->message : "?");
    status = g_subprocess_get_exit_status(proc);
    /* 0: clean; 3: parsed fine, lint findings only. */
    ck_assert_msg(status == 0 || status == 3, "promtool check metrics failed (%d):\n%s", status,
                  out);
    lines = g_strsplit(out, "\n", -1);
    for (guint i = 0; lines[i]; i++) {
        gboolean allowed = FALSE;

        if (!*g_strstrip(lines[i]))
            continue;
        for (guint j = 0; j < G_N_ELEMENTS(kubelet_legacy_counters); j++) {
            g_autofree char *total = g_strdup_printf(
                "%s counter metrics should have \"_total\" suffix", kubelet_legacy_counters[j]);
            g_autofree char *count = g_strdup_printf(
                "%s non-histogram and non-summary metrics should not have \"_count\" suffix",
                kubelet_legacy_counters[j]);
            allowed |= g_str_equal(lines[i], total) || g_str_equal(lines[i], count);
        }
        ck_assert_msg(allowed, "promtool check metrics: %s", lines[i]);
    }
}

/* Every event came from the Generic PLEG's global relist: with containerd 1.6 the watcher has no
 * stream, so nothing else may find a change, and the gate-off run must look the same. */
static void
assert_relist_sources_global(void)
{
    g_autofree char *out = read_file_or_empty(fx.stdout_path);
    g_auto(GStrv) lines = g_strsplit(out, "\n", -1);

    for (guint i = 0; lines[i]; i++) {
        if (*lines[i])
            ck_assert_msg(strstr(lines[i], "\"relist_source\":\"global\"") != NULL,
                          "event not from a global relist: %s", lines[i]);
    }
}

/* containerd 1.6 answers GetContainerEvents UNIMPLEMENTED: the watcher failed, retried at once,
 * and now waits at the 60 s cap, so in the few seconds of this test it tried at most twice. */
static void
assert_evented_waits_at_cap(const char *metrics)
{
    double errors = metric_value(metrics, "kubelet_evented_pleg_connection_error_count");
    double attempts = metric_value(metrics, "kubelet_evented_pleg_reconnect_attempts_total");
    double state = metric_value(metrics, "kubelet_evented_pleg_connection_state");

    ck_assert_msg(errors >= 1, "kubelet_evented_pleg_connection_error_count is %g", errors);
    ck_assert_msg(attempts >= 0 && attempts <= 2,
                  "kubelet_evented_pleg_reconnect_attempts_total is %g, expected at most 2",
                  attempts);
    ck_assert_msg(state == 0, "kubelet_evented_pleg_connection_state is %g", state);
}

/* A line plegd printed or sent, which must be a JSON object. */
static JsonObject *
parse_line(const char *line)
{
    g_autoptr(JsonParser) parser = json_parser_new();
    g_autoptr(GError) error = NULL;

    ck_assert_msg(json_parser_load_from_data(parser, line, -1, &error),
                  "plegd printed a line that is not JSON: %s (%s)", line, error->message);
    ck_assert_msg(JSON_NODE_HOLDS_OBJECT(json_parser_get_root(parser)),
                  "plegd printed a line that is not a JSON object: %s", line);
    return json_object_ref(json_node_get_object(json_parser_get_root(parser)));
}

static gboolean
event_is(JsonObject *event, const char *type, const char *container_id)
{
    return g_strcmp0(json_object_get_string_member_with_default(event, "type", ""), type) == 0 &&
           g_strcmp0(json_object_get_string_member_with_default(event, "container_id", ""),
                     container_id) == 0;
}

/* The first event on plegd's stdout with this type and container id, waiting for it. */
static JsonObject *
wait_event(const char *type, const char *container_id)
{
    gint64 deadline = g_get_monotonic_time() + WAIT_USEC;

    while (g_get_monotonic_time() < deadline) {
        g_autofree char *out = read_file_or_empty(fx.stdout_path);
        g_auto(GStrv) lines = g_strsplit(out, "\n", -1);

        /* the last piece is an unterminated line still being written, or empty */
        for (guint i = 0; lines[i] && lines[i + 1]; i++) {
            g_autoptr(JsonObject) obj = parse_line(lines[i]);

            if (event_is(obj, type, container_id))
                return g_steal_pointer(&obj);
        }
        g_usleep(POLL_USEC);
    }
    ck_abort_msg("plegd reported no %s for %s within %d s", type, container_id,
                 (int)(WAIT_USEC / G_USEC_PER_SEC));
    return NULL;
}

static gint64
iso8601_to_unix_usec(const char *text)
{
    g_autoptr(GDateTime) dt = text ? g_date_time_new_from_iso8601(text, NULL) : NULL;

    ck_assert_msg(dt, "not an RFC 3339 time: %s", text ? text : "(null)");
    return g_date_time_to_unix(dt) * G_USEC_PER_SEC + g_date_time_get_microsecond(dt);
}

/* A key=value field of `cri-ctl inspect` output. */
static char *
inspect_field(const char *inspect, const char *key)
{
    g_auto(GStrv) fields = g_strsplit(inspect, " ", -1);
    g_autofree char *prefix = g_strconcat(key, "=", NULL);

    for (char **f = fields; *f; f++)
        if (g_str_has_prefix(*f, prefix))
            return g_strdup(*f + strlen(prefix));
    ck_abort_msg("cri-ctl inspect printed no %s: %s", key, inspect);
    return NULL;
}

static void
assert_pod_uid(JsonObject *event, const char *uid)
{
    ck_assert_str_eq(json_object_get_string_member_with_default(event, "pod_uid", ""), uid);
}

/* The names containerd listed: the pod's for every event, the container's for a container. */
static void
assert_names(JsonObject *event, const char *uid, gboolean sandbox)
{
    const char *image;

    assert_pod_uid(event, uid);
    ck_assert_str_eq(json_object_get_string_member_with_default(event, "namespace", ""),
                     "pleg-test");
    ck_assert_str_eq(json_object_get_string_member_with_default(event, "pod", ""), "integ");
    ck_assert_msg(json_object_has_member(event, "sandbox"), "an event without \"sandbox\"");
    ck_assert_int_eq(json_object_get_boolean_member(event, "sandbox"), sandbox);
    ck_assert_int_eq(json_object_get_int_member_with_default(event, "attempt", -1), 0);
    if (sandbox) {
        ck_assert(!json_object_has_member(event, "container"));
        ck_assert(!json_object_has_member(event, "image"));
        return;
    }
    ck_assert_str_eq(json_object_get_string_member_with_default(event, "container", ""), "exit7");
    /* Container.image.image: what the container was created with, or the image id it
     * resolved to, as the runtime chose to list it. */
    image = json_object_get_string_member_with_default(event, "image", "");
    ck_assert_msg(g_str_equal(image, TEST_IMAGE) || g_str_has_prefix(image, "sha256:"),
                  "image \"%s\", expected %s or its id", image, TEST_IMAGE);
}

/* With CRIListStreaming: the runtime's answer to the streams was said once, either way, and the
 * gauge agrees with it. */
static void
assert_list_path_said_once(const char *metrics)
{
    g_autofree char *log = read_file_or_empty(fx.stderr_path);
    g_auto(GStrv) lines = g_strsplit(log, "\n", -1);
    guint fallback = 0, streaming = 0;

    for (char **line = lines; *line; line++) {
        fallback += strstr(*line, "does not serve the CRI list streams") != NULL;
        streaming += strstr(*line, "through the CRI list streams") != NULL;
    }
    ck_assert_msg(fallback + streaming == 1, "the listing path was said %u times:\n%s",
                  fallback + streaming, log);
    ck_assert_msg(strstr(metrics, fallback ? "kubelet_cri_streaming_enabled{service=\"runtime\"} 0\n"
                                           : "kubelet_cri_streaming_enabled{service=\"runtime\"} 1\n"),
                  "%s", metrics);
    fprintf(stderr, "CRIListStreaming: the runtime %s the list streams\n",
            fallback ? "does not serve" : "serves");
}

/* GET /pods?namespace=pleg-test (issue #22): the pod @uid, or NULL with @ret_absent set. */
static JsonObject *
pods_find(const char *uid, gboolean *ret_absent)
{
    g_autofree char *body = NULL;
    g_autoptr(JsonParser) parser = json_parser_new();
    g_autoptr(GError) error = NULL;
    guint status = 0;
    JsonArray *pods;

    body = http_get("/pods?namespace=pleg-test", &status);
    ck_assert_msg(status == 200, "GET /pods answered %u: %s", status, body);
    ck_assert_msg(json_parser_load_from_data(parser, body, -1, &error), "GET /pods: %s: %s",
                  error->message, body);
    pods = json_object_get_array_member(json_node_get_object(json_parser_get_root(parser)), "pods");
    ck_assert_msg(pods, "GET /pods without \"pods\": %s", body);
    *ret_absent = TRUE;
    for (guint i = 0; i < json_array_get_length(pods); i++) {
        JsonObject *pod = json_array_get_object_element(pods, i);

        /* Only our namespace, whatever else the node runs. */
        ck_assert_str_eq(json_object_get_string_member_with_default(pod, "namespace", ""),
                         "pleg-test");
        if (g_str_equal(json_object_get_string_member_with_default(pod, "uid", ""), uid)) {
            *ret_absent = FALSE;
            return json_object_ref(pod);
        }
    }
    return NULL;
}

static JsonObject *
pod_container(JsonObject *pod, const char *id)
{
    JsonArray *containers = json_object_get_array_member(pod, "containers");

    for (guint i = 0; containers && i < json_array_get_length(containers); i++) {
        JsonObject *container = json_array_get_object_element(containers, i);

        if (g_str_equal(json_object_get_string_member_with_default(container, "id", ""), id))
            return container;
    }
    return NULL;
}

/* Polls GET /pods until the pod @uid lists container @container_id exited; returns the pod. */
static JsonObject *
wait_pod_with_exited(const char *uid, const char *container_id)
{
    gint64 deadline = g_get_monotonic_time() + WAIT_USEC;

    while (g_get_monotonic_time() < deadline) {
        gboolean absent;
        g_autoptr(JsonObject) pod = pods_find(uid, &absent);
        JsonObject *container = pod ? pod_container(pod, container_id) : NULL;

        if (container &&
            g_str_equal(json_object_get_string_member_with_default(container, "state", ""),
                        "exited"))
            return g_steal_pointer(&pod);
        g_usleep(POLL_USEC);
    }
    ck_abort_msg("GET /pods never listed pod %s with container %s exited within %d s", uid,
                 container_id, (int)(WAIT_USEC / G_USEC_PER_SEC));
    return NULL;
}

static void
wait_pod_gone(const char *uid)
{
    gint64 deadline = g_get_monotonic_time() + WAIT_USEC;

    while (g_get_monotonic_time() < deadline) {
        gboolean absent;
        g_autoptr(JsonObject) pod = pods_find(uid, &absent);

        if (absent)
            return;
        g_usleep(POLL_USEC);
    }
    ck_abort_msg("GET /pods still lists pod %s %d s after it was removed", uid,
                 (int)(WAIT_USEC / G_USEC_PER_SEC));
}

/* What plegd believes of the pod once its container exited: containerd's names, states, exit. */
static void
assert_pods_after_exit(const char *uid, const char *sandbox_id, const char *container_id,
                       JsonObject *died)
{
    g_autoptr(JsonObject) pod = wait_pod_with_exited(uid, container_id);
    JsonObject *container = pod_container(pod, container_id);
    JsonArray *sandboxes = json_object_get_array_member(pod, "sandboxes");
    JsonObject *sandbox;
    const char *image;

    ck_assert_str_eq(json_object_get_string_member_with_default(pod, "name", ""), "integ");
    ck_assert_msg(!json_object_has_member(pod, "error"), "an inspection error: %s",
                  json_object_get_string_member_with_default(pod, "error", ""));
    ck_assert_msg(json_object_get_array_member(pod, "ips"), "a pod without \"ips\"");
    ck_assert_msg(sandboxes && json_array_get_length(sandboxes) == 1, "not one sandbox");
    sandbox = json_array_get_object_element(sandboxes, 0);
    ck_assert_str_eq(json_object_get_string_member_with_default(sandbox, "id", ""), sandbox_id);
    ck_assert_str_eq(json_object_get_string_member_with_default(sandbox, "state", ""), "ready");
    ck_assert_int_eq(json_object_get_int_member_with_default(sandbox, "attempt", -1), 0);
    iso8601_to_unix_usec(json_object_get_string_member_with_default(sandbox, "created_at", NULL));

    ck_assert_str_eq(json_object_get_string_member_with_default(container, "name", ""), "exit7");
    ck_assert_int_eq(json_object_get_int_member_with_default(container, "attempt", -1), 0);
    ck_assert_int_eq(json_object_get_int_member_with_default(container, "exit_code", -1), 7);
    ck_assert_str_eq(json_object_get_string_member_with_default(container, "reason", ""), "Error");
    image = json_object_get_string_member_with_default(container, "image", "");
    ck_assert_msg(g_str_equal(image, TEST_IMAGE) || g_str_has_prefix(image, "sha256:"),
                  "image \"%s\", expected %s or its id", image, TEST_IMAGE);
    /* The same exit as the event's, and a start before it. */
    ck_assert_str_eq(json_object_get_string_member_with_default(container, "finished_at", "-"),
                     json_object_get_string_member_with_default(died, "finished_at", ""));
    ck_assert_int_le(iso8601_to_unix_usec(
                         json_object_get_string_member_with_default(container, "started_at", NULL)),
                     iso8601_to_unix_usec(json_object_get_string_member_with_default(
                         container, "finished_at", NULL)));
    iso8601_to_unix_usec(json_object_get_string_member_with_default(pod, "observed_at", NULL));
}

START_TEST(test_container_lifecycle)
{
    g_autofree char *uid = g_strdup_printf("pleg-integ-%08x", g_random_int());
    g_autofree char *sandbox_id = NULL;
    g_autofree char *container_id = NULL;
    g_autofree char *inspect = NULL;
    g_autofree char *finished_ns = NULL;
    g_autofree char *healthz = NULL;
    g_autofree char *metrics = NULL;
    g_autoptr(JsonObject) started = NULL;
    g_autoptr(JsonObject) sandbox_started = NULL;
    g_autoptr(JsonObject) died = NULL;
    g_autoptr(JsonObject) removed = NULL;
    g_autoptr(JsonObject) sandbox_removed = NULL;
    gint64 finished_usec, event_finished_usec, died_usec;
    guint status = 0;

    /* READY=1 comes only after the first successful relist */
    wait_ready();
    ck_assert_msg(relist_count() >= 1, "READY=1 before any relist was counted");

    sandbox_id = cri_ctl("runp", "--name", "integ", "--namespace", "pleg-test", "--uid", uid, NULL);
    ck_assert_str_ne(sandbox_id, "");
    /* Runs for four relist periods, so that a relist surely sees it running. */
    container_id = cri_ctl("create", sandbox_id, "--pod-name", "integ", "--namespace", "pleg-test",
                           "--uid", uid, "--name", "exit7", "--image", TEST_IMAGE, "--", "sh", "-c",
                           "sleep 1; exit 7", NULL);
    ck_assert_str_ne(container_id, "");
    g_free(cri_ctl("start", container_id, NULL));

    started = wait_event("ContainerStarted", container_id);
    assert_names(started, uid, FALSE);
    ck_assert_msg(json_object_has_member(started, "started_at"),
                  "ContainerStarted without started_at");
    sandbox_started = wait_event("ContainerStarted", sandbox_id);
    assert_names(sandbox_started, uid, TRUE);

    died = wait_event("ContainerDied", container_id);
    assert_names(died, uid, FALSE);
    ck_assert_msg(json_object_has_member(died, "exit_code"), "ContainerDied without exit_code");
    ck_assert_int_eq(json_object_get_int_member(died, "exit_code"), 7);

    inspect = cri_ctl("inspect", container_id, NULL);
    finished_ns = inspect_field(inspect, "finished_at");
    finished_usec = g_ascii_strtoll(finished_ns, NULL, 10) / 1000;
    ck_assert_int_gt(finished_usec, 0);
    /* the event carries the exit as the runtime reported it */
    ck_assert_str_eq(json_object_get_string_member_with_default(died, "reason", ""), "Error");
    event_finished_usec =
        iso8601_to_unix_usec(json_object_get_string_member_with_default(died, "finished_at", NULL));
    ck_assert_msg(ABS(event_finished_usec - finished_usec) <= 1,
                  "ContainerDied finished_at %" G_GINT64_FORMAT
                  " us, the runtime's %" G_GINT64_FORMAT,
                  event_finished_usec, finished_usec);
    died_usec =
        iso8601_to_unix_usec(json_object_get_string_member_with_default(died, "time", NULL));
    /* the runtime's clock and ours are the same clock; allow for rounding only */
    ck_assert_msg(died_usec >= finished_usec - 10000,
                  "ContainerDied at %" G_GINT64_FORMAT " us before the exit at %" G_GINT64_FORMAT,
                  died_usec, finished_usec);
    ck_assert_msg(died_usec - finished_usec <= RELIST_USEC + DIED_MARGIN_USEC,
                  "ContainerDied %" G_GINT64_FORMAT " ms after the exit, more than a relist period "
                  "plus %d s",
                  (died_usec - finished_usec) / 1000, (int)(DIED_MARGIN_USEC / G_USEC_PER_SEC));

    fprintf(stderr, "ContainerDied %" G_GINT64_FORMAT " ms after the container's finished_at\n",
            (died_usec - finished_usec) / 1000);
    assert_pods_after_exit(uid, sandbox_id, container_id, died);

    g_free(cri_ctl("rm", container_id, NULL));
    /* containerd no longer lists the container: its names come from plegd's record */
    removed = wait_event("ContainerRemoved", container_id);
    assert_names(removed, uid, FALSE);

    g_free(cri_ctl("stopp", sandbox_id, NULL));
    g_free(cri_ctl("rmp", sandbox_id, NULL));
    sandbox_removed = wait_event("ContainerRemoved", sandbox_id);
    assert_names(sandbox_removed, uid, TRUE);
    wait_pod_gone(uid);

    ck_assert_msg(relist_count() > 0, "kubelet_pleg_relist_duration_seconds_count missing or 0");
    metrics = http_get("/metrics", &status);
    ck_assert_uint_eq(status, 200);
    assert_promtool_accepts(metrics);
    assert_relist_sources_global();
    if (evented_plugin_dir())
        assert_evented_waits_at_cap(metrics);
    if (list_streaming())
        assert_list_path_said_once(metrics);
    healthz = http_get("/healthz", &status);
    ck_assert_msg(status == 200, "/healthz answered %u: %s", status, healthz);
}
END_TEST

/* ---- plegd restarted with --state-dir while a consumer follows GET /events (issue #21) ---- */

#define RESTART_POD "restart"

/* A consumer following GET /events through libsoup, which reads the body line by line in the
 * consumer's own main context; that context runs only while the test waits on the consumer, and
 * the kernel buffers what plegd sends meanwhile. */
typedef struct {
    GMainContext *context;
    GCancellable *cancellable;
    SoupSession *session;
    SoupMessage *message;
    GDataInputStream *body;
    char *url;
    GPtrArray *lines; /* char *: the lines of the body, in order, without their newline */
    char *instance;   /* the Plegd-Instance header */
    guint status;
    gboolean answered;
    gboolean busy;  /* a callback with this consumer is to come */
    gboolean ended; /* the body ended: at its end, or cut off (end_error) */
    char *end_error;
} Consumer;

static void consumer_read_line(Consumer *consumer);

static void
on_consumer_line(GObject *source, GAsyncResult *result, gpointer user_data)
{
    Consumer *consumer = user_data;
    g_autoptr(GError) error = NULL;
    char *line =
        g_data_input_stream_read_line_finish(G_DATA_INPUT_STREAM(source), result, NULL, &error);

    consumer->busy = FALSE;
    if (line) {
        g_ptr_array_add(consumer->lines, line);
        consumer_read_line(consumer);
        return;
    }
    consumer->ended = TRUE;
    if (error)
        consumer->end_error = g_strdup(error->message);
}

static void
consumer_read_line(Consumer *consumer)
{
    consumer->busy = TRUE;
    g_data_input_stream_read_line_async(consumer->body, G_PRIORITY_DEFAULT, consumer->cancellable,
                                        on_consumer_line, consumer);
}

static void
on_consumer_answer(GObject *source, GAsyncResult *result, gpointer user_data)
{
    Consumer *consumer = user_data;
    g_autoptr(GError) error = NULL;
    g_autoptr(GInputStream) stream = soup_session_send_finish(SOUP_SESSION(source), result, &error);

    consumer->busy = FALSE;
    consumer->answered = TRUE;
    if (!stream) {
        consumer->ended = TRUE;
        consumer->end_error = g_strdup(error->message);
        return;
    }
    consumer->status = soup_message_get_status(consumer->message);
    consumer->instance = g_strdup(soup_message_headers_get_one(
        soup_message_get_response_headers(consumer->message), "Plegd-Instance"));
    consumer->body = g_data_input_stream_new(stream);
    g_data_input_stream_set_newline_type(consumer->body, G_DATA_STREAM_NEWLINE_TYPE_LF);
    consumer_read_line(consumer);
}

typedef gboolean (*ConsumerCondition)(Consumer *consumer, gconstpointer data);

static gboolean
on_consumer_deadline(gpointer user_data)
{
    *(gboolean *)user_data = TRUE;
    return G_SOURCE_REMOVE;
}

/* Runs the consumer until @condition holds, its body ends, or WAIT_USEC passed; returns whether
 * @condition holds. */
static gboolean
consumer_wait(Consumer *consumer, ConsumerCondition condition, gconstpointer data)
{
    GSource *timer = g_timeout_source_new((guint)(WAIT_USEC / 1000));
    gboolean timed_out = FALSE;

    g_source_set_callback(timer, on_consumer_deadline, &timed_out, NULL);
    g_source_attach(timer, consumer->context);
    g_main_context_push_thread_default(consumer->context);
    while (!condition(consumer, data) && !consumer->ended && !timed_out)
        g_main_context_iteration(consumer->context, TRUE);
    g_main_context_pop_thread_default(consumer->context);
    g_source_destroy(timer);
    g_source_unref(timer);
    return condition(consumer, data);
}

static gboolean
consumer_answered(Consumer *consumer, gconstpointer data)
{
    return consumer->answered;
}

static gboolean
consumer_ended(Consumer *consumer, gconstpointer data)
{
    return consumer->ended;
}

static char *
consumer_text(Consumer *consumer)
{
    GString *text = g_string_new(NULL);

    for (guint i = 0; i < consumer->lines->len; i++)
        g_string_append_printf(text, "%s\n", (char *)consumer->lines->pdata[i]);
    if (consumer->ended)
        g_string_append_printf(text, "(the end%s%s)\n", consumer->end_error ? ": " : "",
                               consumer->end_error ? consumer->end_error : "");
    return g_string_free(text, FALSE);
}

/* GET /events@query on the running plegd; fails the test unless it answers 200. */
static Consumer *
consumer_open(const char *query)
{
    Consumer *consumer = g_new0(Consumer, 1);

    consumer->url = g_strconcat("http://localhost/events", query, NULL);
    consumer->context = g_main_context_new();
    consumer->cancellable = g_cancellable_new();
    consumer->lines = g_ptr_array_new_with_free_func(g_free);
    g_main_context_push_thread_default(consumer->context);
    /* no timeout: a stream may be idle for as long as nothing happens */
    consumer->session = socket_session_new(TRUE);
    consumer->message = soup_message_new("GET", consumer->url);
    ck_assert_msg(consumer->message, "not a URL: %s", consumer->url);
    consumer->busy = TRUE;
    soup_session_send_async(consumer->session, consumer->message, G_PRIORITY_DEFAULT,
                            consumer->cancellable, on_consumer_answer, consumer);
    g_main_context_pop_thread_default(consumer->context);

    ck_assert_msg(consumer_wait(consumer, consumer_answered, NULL),
                  "no answer to GET %s within %d s", consumer->url,
                  (int)(WAIT_USEC / G_USEC_PER_SEC));
    if (consumer->status != 200) {
        g_autofree char *text = NULL;

        consumer_wait(consumer, consumer_ended, NULL);
        text = consumer_text(consumer);
        ck_abort_msg("GET %s answered %u:\n%s", consumer->url, consumer->status, text);
    }
    return consumer;
}

static void
consumer_free(Consumer *consumer)
{
    if (!consumer)
        return;
    g_main_context_push_thread_default(consumer->context);
    g_cancellable_cancel(consumer->cancellable);
    /* a cancelled operation still calls back, soon */
    while (consumer->busy)
        g_main_context_iteration(consumer->context, TRUE);
    g_clear_object(&consumer->body);
    g_clear_object(&consumer->message);
    if (consumer->session)
        soup_session_abort(consumer->session);
    g_clear_object(&consumer->session);
    g_main_context_pop_thread_default(consumer->context);
    g_object_unref(consumer->cancellable);
    g_main_context_unref(consumer->context);
    g_ptr_array_unref(consumer->lines);
    g_free(consumer->url);
    g_free(consumer->instance);
    g_free(consumer->end_error);
    g_free(consumer);
}
G_DEFINE_AUTOPTR_CLEANUP_FUNC(Consumer, consumer_free)

static gboolean
line_is_event(const char *line)
{
    return g_str_has_prefix(line, "{\"seq\":");
}

static guint64
line_seq(const char *line)
{
    ck_assert_msg(line_is_event(line), "not an event: %s", line);
    return g_ascii_strtoull(line + strlen("{\"seq\":"), NULL, 10);
}

/* The index of the first line from @from on that is an event of @type about @container_id, or
 * -1. */
static int
find_event(GPtrArray *lines, guint from, const char *type, const char *container_id)
{
    for (guint i = from; i < lines->len; i++) {
        g_autoptr(JsonObject) event = NULL;

        if (!line_is_event(lines->pdata[i]))
            continue;
        event = parse_line(lines->pdata[i]);
        if (event_is(event, type, container_id))
            return (int)i;
    }
    return -1;
}

/* Events a consumer waits for: its lines from @from on hold each (type, container id) of @want,
 * a NULL-terminated list of pairs. */
typedef struct {
    guint from;
    const char *const *want;
} Wanted;

static gboolean
consumer_has_events(Consumer *consumer, gconstpointer data)
{
    const Wanted *wanted = data;

    for (guint i = 0; wanted->want[i]; i += 2)
        if (find_event(consumer->lines, wanted->from, wanted->want[i], wanted->want[i + 1]) < 0)
            return FALSE;
    return TRUE;
}

static void
consumer_wait_events(Consumer *consumer, guint from, const char *const *want)
{
    Wanted wanted = {from, want};

    if (!consumer_wait(consumer, consumer_has_events, &wanted)) {
        g_autofree char *text = consumer_text(consumer);
        GString *names = g_string_new(NULL);

        for (guint i = 0; want[i]; i += 2)
            g_string_append_printf(names, " %s of %.12s", want[i], want[i + 1]);
        ck_abort_msg("GET %s did not bring%s within %d s; it brought:\n%s", consumer->url,
                     names->str, (int)(WAIT_USEC / G_USEC_PER_SEC), text);
    }
}

/* The event at @lines[@index], which exists. */
static JsonObject *
event_at(GPtrArray *lines, int index)
{
    ck_assert_int_ge(index, 0);
    return parse_line(lines->pdata[index]);
}

static guint64
consumer_last_seq(Consumer *consumer)
{
    for (guint i = consumer->lines->len; i > 0; i--)
        if (line_is_event(consumer->lines->pdata[i - 1]))
            return line_seq(consumer->lines->pdata[i - 1]);
    return 0;
}

static gboolean
consumer_has_seq(Consumer *consumer, gconstpointer data)
{
    return consumer_last_seq(consumer) >= *(const guint64 *)data;
}

/* Waits until plegd relisted twice more and the consumer has every event plegd had published
 * by then, so that nothing is on its way; returns that last seq. */
static guint64
consumer_catch_up(Consumer *consumer)
{
    gint64 deadline = g_get_monotonic_time() + WAIT_USEC;
    double relists = relist_count();
    g_autofree char *metrics = NULL;
    guint64 last_seq;
    guint status = 0;

    while (relist_count() < relists + 2) {
        ck_assert_msg(g_get_monotonic_time() < deadline, "plegd did not relist twice within %d s",
                      (int)(WAIT_USEC / G_USEC_PER_SEC));
        g_usleep(POLL_USEC);
    }
    metrics = http_get("/metrics", &status);
    ck_assert_uint_eq(status, 200);
    ck_assert_msg(metric_value(metrics, "plegd_events_last_seq") > 0, "plegd_events_last_seq: %s",
                  metrics);
    last_seq = (guint64)metric_value(metrics, "plegd_events_last_seq");
    if (!consumer_wait(consumer, consumer_has_seq, &last_seq)) {
        g_autofree char *text = consumer_text(consumer);
        ck_abort_msg("GET %s did not bring seq %" G_GUINT64_FORMAT " within %d s; it brought:\n%s",
                     consumer->url, last_seq, (int)(WAIT_USEC / G_USEC_PER_SEC), text);
    }
    ck_assert_uint_eq(consumer_last_seq(consumer), last_seq);
    return last_seq;
}

/* Sends @signum to plegd and waits for its end; returns its wait status. */
static int
plegd_signal_and_wait(int signum)
{
    gint64 deadline = g_get_monotonic_time() + WAIT_USEC;
    int status = 0;

    ck_assert_int_gt(fx.plegd_pid, 0);
    ck_assert_int_eq(kill(fx.plegd_pid, signum), 0);
    while (plegd_poll_exit(&status)) {
        ck_assert_msg(g_get_monotonic_time() < deadline, "plegd did not end within %d s of %s",
                      (int)(WAIT_USEC / G_USEC_PER_SEC), g_strsignal(signum));
        g_usleep(POLL_USEC);
    }
    return status;
}

/* Forgets what an earlier plegd sent to the notify socket (READY=1, STOPPING=1). */
static void
notify_drain(void)
{
    char buf[4096];

    while (recv(fx.notify_fd, buf, sizeof(buf), 0) >= 0)
        ;
}

/* `cri-ctl inspect` of a container once the runtime says it exited. */
static char *
wait_exited(const char *container_id)
{
    gint64 deadline = g_get_monotonic_time() + WAIT_USEC;

    for (;;) {
        char *inspect = cri_ctl("inspect", container_id, NULL);

        if (g_str_has_prefix(inspect, "state=EXITED "))
            return inspect;
        ck_assert_msg(g_get_monotonic_time() < deadline, "%s did not exit within %d s: %s",
                      container_id, (int)(WAIT_USEC / G_USEC_PER_SEC), inspect);
        g_free(inspect);
        g_usleep(POLL_USEC);
    }
}

typedef struct {
    char *uid;
    char *sandbox_id;
    char *state_dir;
    char *instance;    /* plegd's history, which every restart resumes */
    Consumer *follow;  /* the consumer following GET /events */
    GPtrArray *events; /* char *: the event lines of the consumers before @follow */
} Restart;

static char *
restart_run_container(Restart *r, const char *name, const char *command)
{
    char *id = cri_ctl("create", r->sandbox_id, "--pod-name", RESTART_POD, "--namespace",
                       "pleg-test", "--uid", r->uid, "--name", name, "--image", TEST_IMAGE, "--",
                       "sh", "-c", command, NULL);

    ck_assert_str_ne(id, "");
    g_free(cri_ctl("start", id, NULL));
    return id;
}

static void
assert_not_initial(GPtrArray *lines, guint from)
{
    for (guint i = from; i < lines->len; i++)
        ck_assert_msg(!strstr(lines->pdata[i], "\"initial\""),
                      "an event after the restart is marked initial: %s", (char *)lines->pdata[i]);
}

/* The names of the restart test's pod and of container @name, kept by plegd's records when the
 * runtime no longer lists the container. */
static void
assert_restart_names(JsonObject *event, Restart *r, const char *name)
{
    assert_pod_uid(event, r->uid);
    ck_assert_str_eq(json_object_get_string_member_with_default(event, "namespace", ""),
                     "pleg-test");
    ck_assert_str_eq(json_object_get_string_member_with_default(event, "pod", ""), RESTART_POD);
    ck_assert_str_eq(json_object_get_string_member_with_default(event, "container", ""), name);
    ck_assert_msg(json_object_has_member(event, "sandbox") &&
                      !json_object_get_boolean_member(event, "sandbox"),
                  "not an event of a container");
}

/*
 * One restart: a container starts (runner-N) and one exits (gone-N), the consumer sees both;
 * plegd is stopped with @signum; while it is down, runner-N exits with 40 + N and gone-N is
 * removed; plegd starts again on the same --state-dir, and the consumer resumes with its last
 * seq and the instance.  It must get exactly a ContainerDied of runner-N with its real exit and
 * finished_at and a ContainerRemoved of gone-N, with the next two seqs, not marked initial:
 * nothing about the containers that did not change, nothing replayed.
 */
static void
restart_round(Restart *r, guint round, int signum)
{
    int runner_code = 40 + (int)round, gone_code = 10 + (int)round;
    g_autofree char *runner_name = g_strdup_printf("runner-%u", round);
    g_autofree char *gone_name = g_strdup_printf("gone-%u", round);
    /* SIGTERM (StopContainer) ends it with runner_code: `wait` returns on a trapped signal.  The
     * trap is set long before the stop, which comes after plegd reported the container started;
     * were it not, the runtime would kill it after the grace period (137) and the test say so. */
    g_autofree char *runner_command =
        g_strdup_printf("trap 'exit %d' TERM; sleep 100000 & wait", runner_code);
    g_autofree char *gone_command = g_strdup_printf("exit %d", gone_code);
    g_autofree char *runner = NULL, *gone = NULL, *inspect = NULL, *failure = NULL;
    g_autofree char *exit_code = NULL, *finished_ns = NULL;
    g_autofree char *query = NULL, *readyz = NULL;
    g_autoptr(Consumer) after = NULL;
    g_autoptr(JsonObject) gone_died = NULL, died = NULL, removed = NULL;
    Consumer *before = r->follow;
    guint from = before->lines->len, status_http = 0;
    gint64 down_usec, up_usec, finished_usec, event_finished_usec, time_usec;
    guint64 last_seq, new_last_seq;
    int status;

    runner = restart_run_container(r, runner_name, runner_command);
    gone = restart_run_container(r, gone_name, gone_command);
    consumer_wait_events(
        before, from,
        (const char *const[]){"ContainerStarted", runner, "ContainerDied", gone, NULL});
    gone_died = event_at(before->lines, find_event(before->lines, from, "ContainerDied", gone));
    ck_assert_int_eq(json_object_get_int_member_with_default(gone_died, "exit_code", -1),
                     gone_code);
    last_seq = consumer_catch_up(before);

    /* Down. */
    status = plegd_signal_and_wait(signum);
    down_usec = g_get_real_time();
    if (signum == SIGTERM)
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                      "plegd ended with wait status 0x%x on SIGTERM", status);
    else
        ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == signum,
                      "plegd ended with wait status 0x%x, not by %s", status, g_strsignal(signum));
    ck_assert_msg(consumer_wait(before, consumer_ended, NULL), "GET %s did not end when plegd did",
                  before->url);
    {
        g_autofree char *text = consumer_text(before);

        ck_assert_msg(consumer_last_seq(before) == last_seq,
                      "events after seq %" G_GUINT64_FORMAT " as plegd stopped:\n%s", last_seq,
                      text);
        if (signum == SIGTERM) {
            /* an orderly end: the reason, then the end of the body */
            const char *end = before->lines->pdata[before->lines->len - 1];

            ck_assert_msg(!before->end_error && !line_is_event(end) &&
                              strstr(end, "\"reason\":\"shutting_down\""),
                          "the stream did not end with a shutting_down line:\n%s", text);
        } else {
            ck_assert_msg(!strstr(text, "shutting_down"),
                          "a stream of a plegd killed by %s ended in order:\n%s",
                          g_strsignal(signum), text);
        }
        fprintf(stderr,
                "restart %u: plegd ended by %s at seq %" G_GUINT64_FORMAT "; the stream "
                "ended %s\n",
                round, g_strsignal(signum), last_seq,
                before->end_error ? before->end_error : "with its body complete");
    }

    /* While plegd is down: runner-N exits, gone-N is removed. */
    g_free(cri_ctl("stop", "--grace", "30", runner, NULL));
    inspect = wait_exited(runner);
    exit_code = inspect_field(inspect, "exit_code");
    ck_assert_int_eq(atoi(exit_code), runner_code);
    finished_ns = inspect_field(inspect, "finished_at");
    finished_usec = g_ascii_strtoll(finished_ns, NULL, 10) / 1000;
    g_free(cri_ctl("rm", gone, NULL));
    up_usec = g_get_real_time();

    /* Up again, on the same state. */
    notify_drain();
    failure = plegd_start(r->state_dir);
    ck_assert_msg(!failure, "%s", failure);
    wait_ready();
    query = g_strdup_printf("?since=%" G_GUINT64_FORMAT "&instance=%s", last_seq, r->instance);
    after = consumer_open(query);
    ck_assert_str_eq(after->instance ? after->instance : "(none)", r->instance);
    consumer_wait_events(
        after, 0, (const char *const[]){"ContainerDied", runner, "ContainerRemoved", gone, NULL});
    new_last_seq = consumer_catch_up(after);
    {
        g_autofree char *text = consumer_text(after);

        ck_assert_msg(after->lines->len == 2 && new_last_seq == last_seq + 2,
                      "after restart %u (%s) the consumer resumed at seq %" G_GUINT64_FORMAT
                      " got %u lines, up to seq %" G_GUINT64_FORMAT ", not just the ContainerDied "
                      "of %s and the ContainerRemoved of %s:\n%s",
                      round, g_strsignal(signum), last_seq, after->lines->len, new_last_seq,
                      runner_name, gone_name, text);
    }
    ck_assert_uint_eq(line_seq(after->lines->pdata[0]), last_seq + 1);
    ck_assert_uint_eq(line_seq(after->lines->pdata[1]), last_seq + 2);
    assert_not_initial(after->lines, 0);

    died = event_at(after->lines, find_event(after->lines, 0, "ContainerDied", runner));
    assert_restart_names(died, r, runner_name);
    ck_assert_int_eq(json_object_get_int_member_with_default(died, "exit_code", -1), runner_code);
    ck_assert_str_eq(json_object_get_string_member_with_default(died, "reason", ""), "Error");
    event_finished_usec =
        iso8601_to_unix_usec(json_object_get_string_member_with_default(died, "finished_at", NULL));
    ck_assert_msg(ABS(event_finished_usec - finished_usec) <= 1,
                  "ContainerDied finished_at %" G_GINT64_FORMAT
                  " us, the runtime's %" G_GINT64_FORMAT,
                  event_finished_usec, finished_usec);
    ck_assert_msg(down_usec <= event_finished_usec && event_finished_usec <= up_usec,
                  "ContainerDied finished_at %" G_GINT64_FORMAT " us is not in plegd's downtime "
                  "%" G_GINT64_FORMAT "..%" G_GINT64_FORMAT,
                  event_finished_usec, down_usec, up_usec);
    /* seen by the restarted plegd: its time is after the downtime, its finished_at in it */
    time_usec =
        iso8601_to_unix_usec(json_object_get_string_member_with_default(died, "time", NULL));
    ck_assert_msg(time_usec >= up_usec,
                  "ContainerDied time %" G_GINT64_FORMAT " us is before "
                  "plegd restarted at %" G_GINT64_FORMAT,
                  time_usec, up_usec);

    removed = event_at(after->lines, find_event(after->lines, 0, "ContainerRemoved", gone));
    assert_restart_names(removed, r, gone_name);
    time_usec =
        iso8601_to_unix_usec(json_object_get_string_member_with_default(removed, "time", NULL));
    ck_assert_msg(time_usec >= up_usec,
                  "ContainerRemoved time %" G_GINT64_FORMAT " us is before "
                  "plegd restarted at %" G_GINT64_FORMAT,
                  time_usec, up_usec);

    readyz = http_get("/readyz?verbose", &status_http);
    ck_assert_msg(status_http == 200 && strstr(readyz, "[+]state ok"),
                  "/readyz?verbose answered %u:\n%s", status_http, readyz);

    /* the consumer follows on with the new stream */
    for (guint i = 0; i < before->lines->len; i++)
        if (line_is_event(before->lines->pdata[i]))
            g_ptr_array_add(r->events, g_strdup(before->lines->pdata[i]));
    consumer_free(before);
    r->follow = g_steal_pointer(&after);
}

START_TEST(test_restart_resumes)
{
    Restart r = {
        .uid = g_strdup_printf("pleg-restart-%08x", g_random_int()),
        .state_dir = g_build_filename(fx.dir, "plegd-state", NULL),
        .events = g_ptr_array_new_with_free_func(g_free),
    };
    g_autofree char *keeper = NULL, *early = NULL, *failure = NULL, *query = NULL;
    g_autoptr(Consumer) history = NULL;
    g_autoptr(GHashTable) seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    guint64 first_seq;
    int status;

    /* Before plegd ever ran: a pod with a container that runs on and one that exited. */
    r.sandbox_id =
        cri_ctl("runp", "--name", RESTART_POD, "--namespace", "pleg-test", "--uid", r.uid, NULL);
    ck_assert_str_ne(r.sandbox_id, "");
    keeper = restart_run_container(&r, "keeper", "exec sleep 100000");
    early = restart_run_container(&r, "early", "exit 5");
    g_free(wait_exited(early));

    /* A fresh history: its first relist reports them as the node's initial state. */
    failure = plegd_start(r.state_dir);
    ck_assert_msg(!failure, "%s", failure);
    wait_ready();
    /* the history so far (an hour back is all of it), then live events */
    r.follow = consumer_open("?since_time=1h");
    ck_assert_msg(r.follow->instance, "GET /events answered without Plegd-Instance");
    r.instance = g_strdup(r.follow->instance);
    consumer_wait_events(r.follow, 0,
                         (const char *const[]){"ContainerStarted", r.sandbox_id, "ContainerStarted",
                                               keeper, "ContainerDied", early, NULL});
    for (guint i = 0; i < r.follow->lines->len; i++)
        ck_assert_msg(strstr(r.follow->lines->pdata[i], "\"initial\":true"),
                      "an event of the first relist not marked initial: %s",
                      (char *)r.follow->lines->pdata[i]);

    restart_round(&r, 1, SIGTERM);
    restart_round(&r, 2, SIGKILL);

    /* The history of the instance, kept across both restarts: every event the consumer got, byte
     * for byte, with consecutive seqs, each (container, type) once. */
    for (guint i = 0; i < r.follow->lines->len; i++)
        if (line_is_event(r.follow->lines->pdata[i]))
            g_ptr_array_add(r.events, g_strdup(r.follow->lines->pdata[i]));
    first_seq = line_seq(r.events->pdata[0]);
    query = g_strdup_printf("?follow=false&since=%" G_GUINT64_FORMAT "&instance=%s", first_seq - 1,
                            r.instance);
    history = consumer_open(query);
    ck_assert_msg(consumer_wait(history, consumer_ended, NULL), "GET %s did not end", history->url);
    ck_assert_msg(!history->end_error, "GET %s: %s", history->url, history->end_error);
    ck_assert_uint_eq(history->lines->len, r.events->len);
    for (guint i = 0; i < r.events->len; i++) {
        g_autoptr(JsonObject) event = parse_line(r.events->pdata[i]);

        ck_assert_str_eq(history->lines->pdata[i], r.events->pdata[i]);
        ck_assert_uint_eq(line_seq(r.events->pdata[i]), first_seq + i);
        ck_assert_msg(
            g_hash_table_add(
                seen,
                g_strconcat(json_object_get_string_member_with_default(event, "container_id", ""),
                            " ", json_object_get_string_member_with_default(event, "type", ""),
                            NULL)),
            "reported twice: %s", (char *)r.events->pdata[i]);
    }
    fprintf(stderr,
            "restart: %u events, seq %" G_GUINT64_FORMAT "..%" G_GUINT64_FORMAT " of instance %s\n",
            r.events->len, first_seq, first_seq + r.events->len - 1, r.instance);

    consumer_free(g_steal_pointer(&r.follow));
    status = plegd_signal_and_wait(SIGTERM);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "plegd ended with wait status 0x%x on SIGTERM", status);
    g_ptr_array_unref(r.events);
    g_free(r.uid);
    g_free(r.sandbox_id);
    g_free(r.state_dir);
    g_free(r.instance);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("containerd");
    TCase *tc = tcase_create("plegd");
    SRunner *sr;
    int failed;

    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_container_lifecycle);
    suite_add_tcase(s, tc);

    /* its own runtime: the events of its pod must not reach the other test's plegd */
    tc = tcase_create("restart");
    tcase_add_unchecked_fixture(tc, setup_runtime, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_restart_resumes);
    suite_add_tcase(s, tc);

    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
