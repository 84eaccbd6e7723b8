/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd with the in-tree plugins, as an operator runs it (issues 3 and 4, "Done when"):
 * EventedPLEG against cri-sim reports ContainerDied from the watcher's targeted relist, and the
 * watchdog sends heartbeats to NOTIFY_SOCKET, or, with KubeletWatchdogDiagnostics on and a
 * broken socket, logs KEP-6247's records.
 */
#include <gio/gunixsocketaddress.h>
#include <glib/gstdio.h>
#include <signal.h>
#include <string.h>

#include "cri-sim.h"
#include "plegd-runner.h"

#define WAIT_MS 15000
/* plegd's PLEGD_HEALTH_MAX_WAITERS, the bound the tests hold it to. */
#define MAX_WAITERS 16

typedef struct {
    char *dir;
    char *socket;
    char *endpoint_arg;
    CriSim *sim;
} Env;

static Env *
env_new(void)
{
    g_autoptr(GError) error = NULL;
    Env *env = g_new0(Env, 1);

    env->dir = make_tmpdir();
    env->socket = g_build_filename(env->dir, "cri.sock", NULL);
    env->endpoint_arg = g_strdup_printf("--container-runtime-endpoint=unix://%s", env->socket);
    env->sim = cri_sim_new(env->socket, &error);
    ck_assert_msg(env->sim != NULL, "cri-sim: %s", error ? error->message : "?");
    ck_assert(cri_sim_add_pod(env->sim, "uid-web", "web", &error));
    ck_assert(cri_sim_add_container(env->sim, "uid-web", "ctr-web", "app", &error));
    ck_assert(cri_sim_start_container(env->sim, "ctr-web", &error));
    return env;
}

static void
env_free(Env *env)
{
    cri_sim_free(env->sim);
    remove_tmpdir(env->dir);
    g_free(env->dir);
    g_free(env->socket);
    g_free(env->endpoint_arg);
    g_free(env);
}

G_DEFINE_AUTOPTR_CLEANUP_FUNC(Env, env_free)

/* With a one-hour relist period only the first global relist runs: the exit can only arrive
 * through the Evented PLEG watcher's RequestRelist. */
START_TEST(test_evented_reports_exit)
{
    g_autoptr(Env) env = env_new();
    g_autoptr(GError) error = NULL;
    g_autofree char *plugin_dir =
        g_strdup_printf("--plugin-dir=%s", g_getenv("PLEG_EVENTED_PLUGIN_DIR"));
    g_autoptr(PlegdRunner) plegd =
        plegd_runner_spawn(NULL, env->endpoint_arg, "--relist-period=1h", "--relist-threshold=2h",
                           "--metrics-bind-address=", "--feature-gates=EventedPLEG=true",
                           plugin_dir, "--require-plugins=evented");
    g_autofree char *out = NULL;
    char *died;
    char *end;

    ck_assert(plegd_runner_wait_stdout(
        plegd, "\"type\":\"ContainerStarted\",\"container_id\":\"ctr-web\""));
    ck_assert_msg(cri_sim_wait_subscribers(env->sim, 1, WAIT_MS), "the watcher never subscribed");
    ck_assert(cri_sim_exit_container(env->sim, "ctr-web", 3, NULL, &error));
    /* The container's names and attempt come between its id and the relist source. */
    ck_assert(plegd_runner_wait_stdout(plegd, "\"relist_source\":\"evented_pleg\""));
    out = plegd_runner_get_stdout(plegd);
    died = strstr(out, "\"type\":\"ContainerDied\",\"container_id\":\"ctr-web\"");
    ck_assert_msg(died, "%s", out);
    end = strchr(died, '\n');
    if (end)
        *end = '\0';
    ck_assert_msg(strstr(died, "\"relist_source\":\"evented_pleg\""), "%s", died);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
}
END_TEST

/* ---- the evented watcher's state in /readyz?verbose (issue 22, point 2) ---- */

/* RFC 3339 in UTC, with milliseconds: 24 characters. */
#define TIME_LENGTH  24
#define TIME_PATTERN "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z"
#define EVENTED_LINE "\\[\\+\\]evented ok \\(informational\\): "

/* plegd with the evented watcher (the installed policy: backoff from 500 ms, UNIMPLEMENTED
 * retried every 48-60 s), metrics on a free port. */
static PlegdRunner *
spawn_evented(Env *env)
{
    g_autofree char *plugin_dir =
        g_strdup_printf("--plugin-dir=%s", g_getenv("PLEG_EVENTED_PLUGIN_DIR"));

    return plegd_runner_spawn(NULL, env->endpoint_arg, "--metrics-bind-address=127.0.0.1:0",
                              "--feature-gates=EventedPLEG=true", plugin_dir,
                              "--require-plugins=evented");
}

/* The line of @body that matches @pattern (anchored), or NULL.  (transfer full) */
static char *
find_line(const char *body, const char *pattern)
{
    g_autofree char *anchored = g_strconcat("^", pattern, "$", NULL);
    g_auto(GStrv) lines = g_strsplit(body ? body : "", "\n", -1);

    for (guint i = 0; lines[i]; i++) {
        if (g_regex_match_simple(anchored, lines[i], 0, 0))
            return g_strdup(lines[i]);
    }
    return NULL;
}

/* GETs /readyz?verbose until a line matches @pattern; returns that line, and the body in
 * @ret_body (optional).  The watcher's line never counts in the verdict: the answer never has
 * "[-]evented". */
static char *
wait_readyz_line(const char *base, const char *pattern, char **ret_body)
{
    g_autofree char *url = g_strconcat(base, "/readyz?verbose", NULL);
    gint64 deadline = g_get_monotonic_time() + WAIT_MS * 1000;

    for (;;) {
        g_autofree char *body = NULL;
        char *line;

        http_request("GET", url, &body, NULL);
        ck_assert_msg(!strstr(body, "[-]evented"), "%s", body);
        line = find_line(body, pattern);
        if (line) {
            if (ret_body)
                *ret_body = g_steal_pointer(&body);
            return line;
        }
        if (g_get_monotonic_time() > deadline)
            ck_abort_msg("/readyz?verbose never had a line \"%s\":\n%s", pattern, body);
        g_usleep(50 * 1000);
    }
}

/* The value of an unlabelled series on /metrics. */
static double
scrape(const char *base, const char *name)
{
    g_autofree char *url = g_strconcat(base, "/metrics", NULL);
    g_autofree char *body = NULL;
    g_autofree char *pattern = g_strconcat(name, " [0-9.e+]+", NULL);
    g_autofree char *line = NULL;

    ck_assert_uint_eq(http_request("GET", url, &body, NULL), 200);
    line = find_line(body, pattern);
    ck_assert_msg(line, "no %s in\n%s", name, body);
    return g_ascii_strtod(line + strlen(name) + 1, NULL);
}

/* The lines of plegd's stderr that hold @needle, once one does. */
static guint
count_logged(PlegdRunner *plegd, const char *needle)
{
    g_autofree char *err = NULL;
    g_auto(GStrv) lines = NULL;
    guint n = 0;

    assert_stderr_shows(plegd, needle);
    err = plegd_runner_get_stderr(plegd);
    lines = g_strsplit(err, "\n", -1);
    for (guint i = 0; lines[i]; i++)
        n += strstr(lines[i], needle) != NULL;
    return n;
}

#define CONNECTED_RECORD     "Container event stream: connected since "
#define DISCONNECTED_RECORD  "Container event stream: disconnected since "
#define UNIMPLEMENTED_RECORD "Container event stream: the runtime answered UNIMPLEMENTED"

/* connected, then disconnected (cri-sim stops: the line carries its error, and the retries
 * with backoff keep its time and log nothing), then connected again once cri-sim is back. */
START_TEST(test_readyz_evented_connected_disconnected)
{
    g_autoptr(Env) env = env_new();
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegdRunner) plegd = spawn_evented(env);
    g_autofree char *base = plegd_runner_wait_metrics_url(plegd);
    g_autofree char *url = g_strconcat(base, "/readyz", NULL);
    g_autofree char *line = NULL;
    g_autofree char *later = NULL;
    g_autofree char *body = NULL;
    g_autofree char *since = NULL;
    double reconnects;

    line = wait_readyz_line(base, EVENTED_LINE "connected since " TIME_PATTERN, NULL);
    ck_assert_uint_eq(count_logged(plegd, CONNECTED_RECORD), 1);
    /* Plain /readyz is as it was: "ok" once the first relist succeeded. */
    g_free(wait_readyz_line(base, "readyz check passed", NULL));
    ck_assert_uint_eq(http_request("GET", url, &body, NULL), 200);
    ck_assert_str_eq(body, "ok");
    g_clear_pointer(&line, g_free);

    /* cri-sim stops: every reconnect fails, with backoff (0, 0.5, 1 s...). */
    ck_assert_msg(cri_sim_go_away(env->sim, -1, FALSE, &error), "%s", error ? error->message : "");
    line = wait_readyz_line(
        base, EVENTED_LINE "disconnected since " TIME_PATTERN ": .+; retrying with backoff", NULL);
    since =
        g_strndup(line, strlen("[+]evented ok (informational): disconnected since ") + TIME_LENGTH);
    ck_assert_uint_eq(count_logged(plegd, DISCONNECTED_RECORD), 1);
    reconnects = scrape(base, "kubelet_evented_pleg_reconnect_attempts_total");
    {
        gint64 deadline = g_get_monotonic_time() + WAIT_MS * 1000;

        while (scrape(base, "kubelet_evented_pleg_reconnect_attempts_total") < reconnects + 3 &&
               g_get_monotonic_time() < deadline)
            g_usleep(100 * 1000);
    }
    ck_assert_double_ge(scrape(base, "kubelet_evented_pleg_reconnect_attempts_total"),
                        reconnects + 3);
    /* Readiness fails for the runtime, never for the watcher, whose line keeps its time. */
    g_clear_pointer(&body, g_free);
    g_free(wait_readyz_line(base, "\\[-\\]runtime failed: .*", &body));
    later = find_line(body, EVENTED_LINE "disconnected since .*");
    ck_assert_msg(later && g_str_has_prefix(later, since), "%s, then\n%s", line, body);
    ck_assert_uint_eq(count_logged(plegd, DISCONNECTED_RECORD), 1);
    ck_assert_uint_eq(count_logged(plegd, CONNECTED_RECORD), 1);

    /* Back: connected again, one more record. */
    ck_assert_msg(cri_sim_come_back(env->sim, &error), "%s", error ? error->message : "");
    g_free(wait_readyz_line(base, EVENTED_LINE "connected since " TIME_PATTERN, NULL));
    ck_assert_uint_eq(count_logged(plegd, CONNECTED_RECORD), 2);
    ck_assert_uint_eq(count_logged(plegd, DISCONNECTED_RECORD), 1);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
}
END_TEST

/* A runtime without GetContainerEvents (containerd 1.6): the line says so and what it means;
 * readiness passes; an exit is still found, by the global relist. */
START_TEST(test_readyz_evented_unimplemented)
{
    g_autoptr(Env) env = env_new();
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autofree char *base = NULL;
    g_autofree char *body = NULL;
    g_autofree char *line = NULL;

    cri_sim_set_events_unimplemented(env->sim, TRUE);
    plegd = spawn_evented(env);
    base = plegd_runner_wait_metrics_url(plegd);
    g_free(wait_readyz_line(base,
                            EVENTED_LINE "the runtime answered UNIMPLEMENTED to "
                                         "GetContainerEvents; retrying every 48-60 s; container "
                                         "exits are detected by the global relist",
                            NULL));
    ck_assert_uint_eq(count_logged(plegd, UNIMPLEMENTED_RECORD), 1);
    g_free(wait_readyz_line(base, "readyz check passed", &body));
    line = find_line(body, EVENTED_LINE "the runtime answered UNIMPLEMENTED.*");
    ck_assert_msg(line, "%s", body);

    ck_assert(plegd_runner_wait_stdout(
        plegd, "\"type\":\"ContainerStarted\",\"container_id\":\"ctr-web\""));
    ck_assert(cri_sim_exit_container(env->sim, "ctr-web", 3, NULL, &error));
    ck_assert(
        plegd_runner_wait_stdout(plegd, "\"type\":\"ContainerDied\",\"container_id\":\"ctr-web\""));
    ck_assert_uint_eq(count_logged(plegd, UNIMPLEMENTED_RECORD), 1);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
}
END_TEST

static guint
count_lines(const char *text, const char *line)
{
    g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
    guint n = 0;

    for (guint i = 0; lines[i]; i++)
        n += g_str_equal(lines[i], line);
    return n;
}

START_TEST(test_watchdog_heartbeats)
{
    g_autoptr(Env) env = env_new();
    g_autofree char *notify_path = g_build_filename(env->dir, "notify.sock", NULL);
    g_autoptr(GSocket) notify = bind_notify_socket(notify_path);
    g_autofree char *notify_env = g_strdup_printf("NOTIFY_SOCKET=%s", notify_path);
    const char *const env_vars[] = {notify_env, "WATCHDOG_USEC=2000000", NULL};
    g_autofree char *plugin_dir =
        g_strdup_printf("--plugin-dir=%s", g_getenv("PLEG_WATCHDOG_PLUGIN_DIR"));
    g_autoptr(PlegdRunner) plegd =
        plegd_runner_spawn(env_vars, env->endpoint_arg, "--metrics-bind-address=", plugin_dir,
                           "--require-plugins=watchdog");
    g_autoptr(GString) received = g_string_new(NULL);
    gint64 deadline = g_get_monotonic_time() + WAIT_MS * 1000;

    /* A 2 s watchdog timeout means a heartbeat every second. */
    while (count_lines(received->str, "WATCHDOG=1") < 3 && g_get_monotonic_time() < deadline) {
        g_autofree char *more = receive_datagrams(notify, 300 * 1000);
        g_string_append(received, more);
    }
    ck_assert_msg(count_lines(received->str, "WATCHDOG=1") >= 3, "received:\n%s", received->str);
    ck_assert_msg(count_lines(received->str, "READY=1") == 1, "received:\n%s", received->str);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
}
END_TEST

/* ---- liveness, readiness and the heartbeat through a runtime outage ---- */

/* WATCHDOG_USEC=2s: a heartbeat every second, systemd's kill after 2 s without one.  A gap
 * must stay near the interval: 1.5 s leaves room for a loaded 2-core machine, a sanitizer
 * build slows plegd further (still under the 2 s that would get it killed).  The defect this
 * guards against gave gaps of 10 to 20 s. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define MAX_HEARTBEAT_GAP_USEC (1900 * 1000)
#else
#define MAX_HEARTBEAT_GAP_USEC (1500 * 1000)
#endif

typedef struct {
    GSocket *notify;
    GString *received;
    gint64 last_heartbeat;  /* monotonic usec, 0: none yet */
    gint64 max_gap;
} Heartbeats;

/* Receives notifications until @until_usec (monotonic), noting the widest gap between two
 * WATCHDOG=1. */
static void
heartbeats_follow(Heartbeats *h, gint64 until_usec)
{
    for (gint64 now = g_get_monotonic_time(); now < until_usec; now = g_get_monotonic_time()) {
        g_autoptr(GError) error = NULL;
        char buffer[4096];
        gssize n;

        if (!g_socket_condition_timed_wait(h->notify, G_IO_IN, until_usec - now, NULL, &error))
            break;
        n = g_socket_receive(h->notify, buffer, sizeof buffer, NULL, &error);
        ck_assert_msg(n >= 0, "%s", error ? error->message : "");
        g_string_append_len(h->received, buffer, n);
        g_string_append_c(h->received, '\n');
        if (n == strlen("WATCHDOG=1") && memcmp(buffer, "WATCHDOG=1", n) == 0) {
            now = g_get_monotonic_time();
            if (h->last_heartbeat)
                h->max_gap = MAX(h->max_gap, now - h->last_heartbeat);
            h->last_heartbeat = now;
        }
    }
}

/* GETs @path until it answers @status (a relist may have to fail first); returns the body. */
static char *
wait_answer(const char *base, const char *path, guint status, Heartbeats *h)
{
    g_autofree char *url = g_strconcat(base, path, NULL);
    gint64 deadline = g_get_monotonic_time() + WAIT_MS * 1000;
    guint got;

    for (;;) {
        char *body = NULL;

        got = http_request("GET", url, &body, NULL);
        if (got == status || g_get_monotonic_time() > deadline)
            return body;
        g_free(body);
        heartbeats_follow(h, g_get_monotonic_time() + 100 * 1000);
    }
}

/* plegd under the watchdog with a relist threshold of 3 s, and a liveness window of
 * max(3 s, period 200 ms + 4 x request timeout 1 s) = 4.2 s.  @extra_env: one more variable,
 * or NULL. */
static PlegdRunner *
spawn_watched(Env *env, const char *notify_path, const char *extra_env)
{
    g_autofree char *notify_env = g_strdup_printf("NOTIFY_SOCKET=%s", notify_path);
    const char *const env_vars[] = {notify_env, "WATCHDOG_USEC=2000000", extra_env, NULL};
    g_autofree char *plugin_dir =
        g_strdup_printf("--plugin-dir=%s", g_getenv("PLEG_WATCHDOG_PLUGIN_DIR"));

    return plegd_runner_spawn(env_vars, env->endpoint_arg, "--relist-period=200ms",
                              "--relist-threshold=3s", "--runtime-request-timeout=1s",
                              "--metrics-bind-address=127.0.0.1:0", plugin_dir,
                              "--require-plugins=watchdog");
}

/* GETs @path until its body holds @text; returns the body. */
static char *
wait_body_with(const char *base, const char *path, const char *text, Heartbeats *h)
{
    g_autofree char *url = g_strconcat(base, path, NULL);
    gint64 deadline = g_get_monotonic_time() + WAIT_MS * 1000;

    for (;;) {
        char *body = NULL;

        http_request("GET", url, &body, NULL);
        if ((body && strstr(body, text)) || g_get_monotonic_time() > deadline)
            return body;
        g_free(body);
        heartbeats_follow(h, g_get_monotonic_time() + 100 * 1000);
    }
}

/* While the runtime cannot be listed for longer than the relist threshold: /readyz is 503 and
 * names the runtime's error (a plain /readyz) and kubelet's PLEG verdict (?verbose), /livez is
 * 200, since restarting plegd cannot fix the runtime.  Returns with the threshold passed. */
static void
assert_unready_but_alive(const char *base, Heartbeats *h)
{
    g_autofree char *url = g_strconcat(base, "/livez?verbose", NULL);
    g_autofree char *body = NULL;

    body = wait_answer(base, "/readyz", 503, h);
    ck_assert_msg(g_str_has_prefix(body, "runtime failed: container runtime is not reachable: "),
                  "%s", body);
    g_clear_pointer(&body, g_free);
    body = wait_body_with(base, "/readyz?verbose", "[-]pleg failed: ", h);
    ck_assert_msg(strstr(body, "\n[-]runtime failed: container runtime is not reachable: "),
                  "%s", body);
    ck_assert_msg(strstr(body, "\n[-]pleg failed: pleg was last seen active "), "%s", body);
    ck_assert_msg(strstr(body, "; threshold is 3s\n"), "%s", body);
    ck_assert_msg(g_str_has_prefix(body, "[+]pleg-dispatcher ok\n"), "%s", body);
    g_clear_pointer(&body, g_free);
    ck_assert_uint_eq(http_request("GET", url, &body, NULL), 200);
    ck_assert_str_eq(body, "[+]pleg-dispatcher ok\nlivez check passed\n");
}

/* The runtime goes away for 15 s after a healthy start (a containerd restart, with gRPC's
 * reconnect backoff on top), five times the relist threshold: the heartbeat goes on at its
 * interval, since restarting plegd cannot fix the runtime, while /readyz is 503 naming the
 * runtime's error and kubelet's PLEG message, and /livez stays 200 all along. */
START_TEST(test_watchdog_through_runtime_outage)
{
    g_autoptr(Env) env = env_new();
    g_autofree char *notify_path = g_build_filename(env->dir, "notify.sock", NULL);
    g_autoptr(GSocket) notify = bind_notify_socket(notify_path);
    g_autoptr(GString) received = g_string_new(NULL);
    Heartbeats h = {notify, received, 0, 0};
    g_autoptr(PlegdRunner) plegd = spawn_watched(env, notify_path, NULL);
    g_autofree char *base = plegd_runner_wait_metrics_url(plegd);
    g_autofree char *livez = g_strconcat(base, "/livez", NULL);
    g_autofree char *body = NULL;
    g_autoptr(GError) error = NULL;
    gint64 outage_end;

    body = wait_answer(base, "/readyz", 200, &h);
    ck_assert_str_eq(body, "ok");
    g_clear_pointer(&body, g_free);
    heartbeats_follow(&h, g_get_monotonic_time() + 2 * G_USEC_PER_SEC);
    ck_assert_msg(strstr(received->str, "READY=1"), "received:\n%s", received->str);

    ck_assert(cri_sim_go_away(env->sim, -1, FALSE, &error));
    outage_end = g_get_monotonic_time() + 15 * G_USEC_PER_SEC;
    h.max_gap = 0;
    assert_unready_but_alive(base, &h);
    heartbeats_follow(&h, outage_end);
    ck_assert_uint_eq(http_request("GET", livez, &body, NULL), 200);
    ck_assert_str_eq(body, "ok");
    g_clear_pointer(&body, g_free);
    ck_assert_msg(h.max_gap <= MAX_HEARTBEAT_GAP_USEC,
                  "a heartbeat gap of %" G_GINT64_FORMAT " ms during the outage", h.max_gap / 1000);
    ck_assert_msg(h.max_gap > 0, "no heartbeat during the outage:\n%s", received->str);

    ck_assert(cri_sim_come_back(env->sim, &error));
    body = wait_answer(base, "/readyz", 200, &h);
    ck_assert_str_eq(body, "ok");
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
}
END_TEST

/* The runtime's socket does not exist for the first 10 s: no heartbeat gap either, /readyz is
 * 503 until the first relist succeeds, and READY=1 comes once it does. */
START_TEST(test_watchdog_runtime_absent_at_start)
{
    g_autoptr(Env) env = env_new();
    g_autofree char *notify_path = g_build_filename(env->dir, "notify.sock", NULL);
    g_autoptr(GSocket) notify = bind_notify_socket(notify_path);
    g_autoptr(GString) received = g_string_new(NULL);
    Heartbeats h = {notify, received, 0, 0};
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autofree char *base = NULL;
    g_autofree char *body = NULL;
    g_autoptr(GError) error = NULL;
    gint64 absent_end;

    ck_assert(cri_sim_go_away(env->sim, -1, FALSE, &error));
    plegd = spawn_watched(env, notify_path, NULL);
    base = plegd_runner_wait_metrics_url(plegd);
    absent_end = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
    body = wait_answer(base, "/readyz", 503, &h);
    ck_assert_msg(g_str_equal(body, "first-relist failed: pleg has yet to be successful"), "%s",
                  body);
    g_clear_pointer(&body, g_free);
    heartbeats_follow(&h, absent_end);
    ck_assert_msg(h.max_gap > 0, "no heartbeat while the runtime was absent:\n%s",
                  received->str);
    ck_assert_msg(h.max_gap <= MAX_HEARTBEAT_GAP_USEC,
                  "a heartbeat gap of %" G_GINT64_FORMAT " ms while the runtime was absent",
                  h.max_gap / 1000);
    ck_assert_msg(!strstr(received->str, "READY=1"), "READY=1 without a relist:\n%s",
                  received->str);

    ck_assert(cri_sim_come_back(env->sim, &error));
    body = wait_answer(base, "/readyz", 200, &h);
    ck_assert_str_eq(body, "ok");
    heartbeats_follow(&h, g_get_monotonic_time() + G_USEC_PER_SEC);
    ck_assert_msg(strstr(received->str, "READY=1"), "received:\n%s", received->str);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
}
END_TEST

/* The runtime hangs for 12 s, four times the threshold: it takes every call and never answers
 * (cri-sim's delay "*" -1).  Each call fails at its deadline (1 s), so relists keep ending
 * within the liveness window: the heartbeat goes on, /livez stays 200, /readyz is 503. */
START_TEST(test_watchdog_through_hung_runtime)
{
    g_autoptr(Env) env = env_new();
    g_autofree char *notify_path = g_build_filename(env->dir, "notify.sock", NULL);
    g_autoptr(GSocket) notify = bind_notify_socket(notify_path);
    g_autoptr(GString) received = g_string_new(NULL);
    Heartbeats h = {notify, received, 0, 0};
    g_autoptr(PlegdRunner) plegd = spawn_watched(env, notify_path, NULL);
    g_autofree char *base = plegd_runner_wait_metrics_url(plegd);
    g_autofree char *livez = g_strconcat(base, "/livez", NULL);
    g_autofree char *body = NULL;
    gint64 hang_end;

    body = wait_answer(base, "/readyz", 200, &h);
    ck_assert_str_eq(body, "ok");
    g_clear_pointer(&body, g_free);

    cri_sim_set_delay(env->sim, "*", -1);
    hang_end = g_get_monotonic_time() + 12 * G_USEC_PER_SEC;
    h.max_gap = 0;
    assert_unready_but_alive(base, &h);
    heartbeats_follow(&h, hang_end);
    ck_assert_uint_eq(http_request("GET", livez, &body, NULL), 200);
    ck_assert_str_eq(body, "ok");
    g_clear_pointer(&body, g_free);
    ck_assert_msg(h.max_gap <= MAX_HEARTBEAT_GAP_USEC,
                  "a heartbeat gap of %" G_GINT64_FORMAT " ms while the runtime hung",
                  h.max_gap / 1000);
    ck_assert_msg(h.max_gap > 0, "no heartbeat while the runtime hung:\n%s", received->str);

    cri_sim_set_delay(env->sim, "*", 0);
    body = wait_answer(base, "/readyz", 200, &h);
    ck_assert_str_eq(body, "ok");
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
}
END_TEST

/* A dispatcher really stuck (the test hook PLEG_TEST_DISPATCHER_STALL_AFTER: after its fifth
 * global relist it does nothing until stopped) while the runtime is fine: once no relist has
 * ended for the liveness window (4.2 s), /livez is 500 naming the dispatcher, and the heartbeat
 * stops, so that systemd restarts plegd. */
START_TEST(test_stuck_dispatcher_fails_livez)
{
    g_autoptr(Env) env = env_new();
    g_autofree char *notify_path = g_build_filename(env->dir, "notify.sock", NULL);
    g_autoptr(GSocket) notify = bind_notify_socket(notify_path);
    g_autoptr(GString) received = g_string_new(NULL);
    Heartbeats h = {notify, received, 0, 0};
    g_autoptr(PlegdRunner) plegd =
        spawn_watched(env, notify_path, "PLEG_TEST_DISPATCHER_STALL_AFTER=5");
    g_autofree char *base = plegd_runner_wait_metrics_url(plegd);
    g_autofree char *body = NULL;
    guint before;

    body = wait_answer(base, "/readyz", 200, &h);
    ck_assert_str_eq(body, "ok");
    g_clear_pointer(&body, g_free);
    heartbeats_follow(&h, g_get_monotonic_time() + 1500 * 1000);
    ck_assert_msg(count_lines(received->str, "WATCHDOG=1") >= 1, "no heartbeat before the stall");

    body = wait_answer(base, "/livez", 500, &h);
    ck_assert_msg(g_str_has_prefix(body, "pleg-dispatcher failed: pleg dispatcher is stuck: no "
                                         "global relist has finished for "),
                  "%s", body);
    ck_assert_msg(g_str_has_suffix(body, "; the limit is 4.2s"), "%s", body);
    g_clear_pointer(&body, g_free);

    /* Let a round under way end, then two intervals without a heartbeat: systemd's kill. */
    heartbeats_follow(&h, g_get_monotonic_time() + 1100 * 1000);
    before = count_lines(received->str, "WATCHDOG=1");
    heartbeats_follow(&h, g_get_monotonic_time() + 2 * G_USEC_PER_SEC);
    ck_assert_msg(count_lines(received->str, "WATCHDOG=1") == before,
                  "a heartbeat while the dispatcher was stuck:\n%s", received->str);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
}
END_TEST

/* The gate on and a NOTIFY_SOCKET nobody listens on: the notify errors of both attempts and one
 * retries-exhausted summary, with KEP-6247's stable fields. */
START_TEST(test_watchdog_diagnostics_records)
{
    g_autoptr(Env) env = env_new();
    g_autofree char *notify_env = g_strdup_printf("NOTIFY_SOCKET=%s/nobody.sock", env->dir);
    const char *const env_vars[] = {notify_env, "WATCHDOG_USEC=2000000", NULL};
    g_autofree char *plugin_dir =
        g_strdup_printf("--plugin-dir=%s", g_getenv("PLEG_WATCHDOG_PLUGIN_DIR"));
    g_autoptr(PlegdRunner) plegd = plegd_runner_spawn(
        env_vars, env->endpoint_arg, "--metrics-bind-address=", plugin_dir,
        "--require-plugins=watchdog", "--feature-gates=KubeletWatchdogDiagnostics=true");

    assert_stderr_shows(plegd,
                        "operation=watchdog_notify attempt=1 watchdog_interval=1s result=error");
    assert_stderr_shows(plegd,
                        "operation=watchdog_notify attempt=2 watchdog_interval=1s result=error");
    assert_stderr_shows(plegd, "result=retries_exhausted");
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
}
END_TEST

/* Issue 14, "Done when": plegd under a watchdog of WatchdogSec=4s (WATCHDOG_USEC, and a
 * NOTIFY_SOCKET this test reads, as systemd would) with a plugin whose health checker hangs on
 * its third round.  With WatchdogStallDiagnostics on (a gate the watchdog plugin declares), the
 * stall record naming the checker is on stderr before systemd's deadline, 4 s after the last
 * heartbeat; then the test kills plegd as systemd would. */
START_TEST(test_watchdog_stall_record_before_kill)
{
    g_autoptr(Env) env = env_new();
    g_autofree char *notify_path = g_build_filename(env->dir, "notify.sock", NULL);
    g_autoptr(GSocket) notify = bind_notify_socket(notify_path);
    g_autofree char *notify_env = g_strdup_printf("NOTIFY_SOCKET=%s", notify_path);
    const char *const env_vars[] = {notify_env, "WATCHDOG_USEC=4000000",
                                    "PLEG_FIXTURE_HANG_AFTER=3", NULL};
    g_autofree char *hang_dir = g_build_filename(env->dir, "plugins", NULL);
    g_autofree char *module = g_build_filename(g_getenv("PLEG_FIXTURE_PLUGIN_BUILDDIR"),
                                               "libfixture-hang.so", NULL);
    g_autofree char *plugin_file = NULL;
    g_autofree char *plugin_dir = NULL;
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autoptr(GString) received = g_string_new(NULL);
    gint64 deadline = g_get_monotonic_time() + WAIT_MS * 1000;
    gint64 last_heartbeat = 0, seen_at;
    g_autofree char *err = NULL;

    ck_assert_int_eq(g_mkdir(hang_dir, 0755), 0);
    plugin_file = g_strdup_printf("[Plugin]\nName=hang\nModule=%s\n", module);
    g_free(write_file(hang_dir, "hang.plugin", plugin_file));
    plugin_dir = g_strdup_printf("--plugin-dir=%s:%s", g_getenv("PLEG_WATCHDOG_PLUGIN_DIR"),
                                 hang_dir);
    plegd = plegd_runner_spawn(env_vars, env->endpoint_arg, "--metrics-bind-address=",
                               plugin_dir, "--require-plugins=watchdog,hang",
                               "--feature-gates=WatchdogStallDiagnostics=true");

    /* Two rounds pass (heartbeats at 0 s and 2 s), the third hangs. */
    while (count_lines(received->str, "WATCHDOG=1") < 2 && g_get_monotonic_time() < deadline) {
        g_autofree char *more = receive_datagrams(notify, 100 * 1000);

        if (strstr(more, "WATCHDOG=1"))
            last_heartbeat = g_get_monotonic_time();
        g_string_append(received, more);
    }
    ck_assert_msg(count_lines(received->str, "WATCHDOG=1") >= 2, "received:\n%s", received->str);

    ck_assert(plegd_runner_wait_stderr(
        plegd, "operation=watchdog_stall checker=hang duration="));
    seen_at = g_get_monotonic_time();
    /* systemd would kill plegd 4 s after the last heartbeat; the record came before. */
    ck_assert_msg(seen_at - last_heartbeat < 4 * G_USEC_PER_SEC,
                  "the stall record came %" G_GINT64_FORMAT " ms after the last heartbeat",
                  (seen_at - last_heartbeat) / 1000);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(strstr(err, " watchdog_interval=2s result=stalled"), "%s", err);
    /* And no heartbeat since: the tick still waits for the checker. */
    g_string_append_len(received, "", 0);
    {
        g_autofree char *more = receive_datagrams(notify, 100 * 1000);

        ck_assert_msg(!strstr(more, "WATCHDOG=1"), "a heartbeat while the checker hung");
    }
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGKILL), 128 + SIGKILL);
}
END_TEST

/* plegd with the hang fixture, a copy of its own in a folder of its own so that the fixture's
 * log (next to the module) is this test's; @ret_log_path: that log. */
static PlegdRunner *
spawn_hang(Env *env, const char *hang_after, const char *extra_arg, char **ret_log_path)
{
    g_autofree char *hang_env = g_strdup_printf("PLEG_FIXTURE_HANG_AFTER=%s", hang_after);
    const char *const env_vars[] = {hang_env, NULL};
    g_autofree char *hang_dir = g_build_filename(env->dir, "plugins", NULL);
    g_autofree char *module = g_build_filename(g_getenv("PLEG_FIXTURE_PLUGIN_BUILDDIR"),
                                               "libfixture-hang.so", NULL);
    g_autofree char *plugin_dir = g_strdup_printf("--plugin-dir=%s", hang_dir);

    ck_assert_int_eq(g_mkdir(hang_dir, 0755), 0);
    copy_file(module, hang_dir, "libfixture-hang.so");
    g_free(write_file(hang_dir, "hang.plugin", "[Plugin]\nName=hang\nModule=libfixture-hang.so\n"));
    *ret_log_path = g_build_filename(hang_dir, "libfixture-hang.so.log", NULL);
    return plegd_runner_spawn(env_vars, env->endpoint_arg, "--metrics-bind-address=127.0.0.1:0",
                              plugin_dir, "--require-plugins=hang", extra_arg);
}

/* Waits until the fixture's checker has entered its hang. */
static void
wait_hung(const char *log_path)
{
    gint64 deadline = g_get_monotonic_time() + WAIT_MS * 1000;
    g_autofree char *log = NULL;

    while (g_get_monotonic_time() < deadline) {
        g_clear_pointer(&log, g_free);
        if (g_file_get_contents(log_path, &log, NULL, NULL) && strstr(log, "hang\n"))
            return;
        g_usleep(20 * 1000);
    }
    ck_abort_msg("the checker never ran: %s", log ? log : "");
}

static guint16
url_port(const char *base)
{
    return (guint16)g_ascii_strtoull(strrchr(base, ':') + 1, NULL, 10);
}

/* A raw HTTP/1.1 request on a new connection, left open; NULL when plegd refused it. */
static GSocketConnection *
send_request_to(GSocketConnectable *address, const char *path)
{
    g_autoptr(GSocketClient) client = g_socket_client_new();
    g_autoptr(GError) error = NULL;
    g_autofree char *request = g_strdup_printf("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path);
    g_autoptr(GSocketConnection) connection = NULL;

    /* No proxy on the loopback (GIO would ask libproxy on a thread of GLib's pool). */
    g_socket_client_set_enable_proxy(client, FALSE);
    connection = g_socket_client_connect(client, address, NULL, &error);
    ck_assert_msg(connection, "%s", error ? error->message : "");
    if (!g_output_stream_write_all(g_io_stream_get_output_stream(G_IO_STREAM(connection)),
                                   request, strlen(request), NULL, NULL, NULL))
        return NULL;
    return g_steal_pointer(&connection);
}

static GSocketConnection *
send_request(guint16 port, const char *path)
{
    g_autoptr(GSocketConnectable) address = g_network_address_new("127.0.0.1", port);

    return send_request_to(address, path);
}

/* The value of the series @series ("name{labels}") in a /metrics page, -1 when absent. */
static double
metric_value(const char *base, const char *series)
{
    g_autofree char *url = g_strconcat(base, "/metrics", NULL);
    g_autofree char *body = NULL;
    g_autofree char *needle = g_strconcat("\n", series, " ", NULL);
    const char *at;

    ck_assert_uint_eq(http_request("GET", url, &body, NULL), 200);
    at = strstr(body, needle);
    return at ? g_ascii_strtod(at + strlen(needle), NULL) : -1;
}

/* Issue 24.1: clients that ask /readyz while a checker hangs, then close, leave nothing behind
 * them: a waiter goes with its client, or is answered 503 at its connection's idle timeout (a
 * client that only half-closed may still read it); at most PLEGD_HEALTH_MAX_WAITERS wait at
 * once and one more is answered 503 at once, so plegd's memory stays bounded however many
 * come.  Before, each left its waiter, request and connection for as long as the checker hung
 * (57 MB for 3,000). */
START_TEST(test_hung_checker_waiters_bounded)
{
    g_autoptr(Env) env = env_new();
    g_autofree char *log_path = NULL;
    g_autoptr(PlegdRunner) plegd = spawn_hang(env, "1", "--http-idle-timeout=2s", &log_path);
    g_autofree char *base = plegd_runner_wait_metrics_url(plegd);
    guint16 port = url_port(base);
    const char *series = "plegd_health_waiters{endpoint=\"readyz\"}";
    g_autoptr(GSocketConnection) first = send_request(port, "/readyz");
    guint64 rss_before, rss_after;
    gint64 deadline;
    double waiters;

    wait_hung(log_path);
    /* The allocator's pools warm up before the measure starts. */
    for (guint i = 0; i < 50; i++) {
        GSocketConnection *connection = send_request(port, "/readyz");

        g_clear_object(&connection);
    }
    rss_before = plegd_runner_get_rss_kib(plegd);
    for (guint i = 0; i < 300; i++) {
        GSocketConnection *connection = send_request(port, "/readyz");

        g_clear_object(&connection);
        if (i % 50 == 0) {
            waiters = metric_value(base, series);
            ck_assert_msg(waiters >= 0 && waiters <= MAX_WAITERS,
                          "%g waiters after %u clients", waiters, i);
        }
    }
    rss_after = plegd_runner_get_rss_kib(plegd);
    /* About 19 KiB a client stayed before; a sanitizer's quarantine keeps what was freed. */
    if (!g_getenv("ASAN_OPTIONS") && !g_getenv("GLIB_TSAN_INSTRUMENTED"))
        ck_assert_msg(rss_after < rss_before + 3 * 1024,
                      "RSS grew from %" G_GUINT64_FORMAT " to %" G_GUINT64_FORMAT " KiB for 300 "
                      "health requests whose clients left",
                      rss_before, rss_after);

    /* Beyond the bound, an answer at once that says why. */
    {
        g_autoptr(GPtrArray) held = g_ptr_array_new_with_free_func(g_object_unref);
        g_autofree char *url = g_strconcat(base, "/readyz", NULL);
        g_autofree char *body = NULL;

        while (metric_value(base, series) < MAX_WAITERS)
            g_ptr_array_add(held, send_request(port, "/readyz"));
        ck_assert_uint_eq(http_request("GET", url, &body, NULL), 503);
        ck_assert_msg(strstr(body, "wait for a health check that has not finished"), "%s", body);
    }

    /* Every waiter goes, at the latest with its connection's idle timeout. */
    deadline = g_get_monotonic_time() + WAIT_MS * 1000;
    while ((waiters = metric_value(base, series)) > 0 && g_get_monotonic_time() < deadline)
        g_usleep(100 * 1000);
    ck_assert_msg(waiters == 0, "%g waiters left", waiters);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGKILL), 128 + SIGKILL);
}
END_TEST

/* Issue 24.2 and 24.3: SIGTERM while a plugin's checker never returns, a health round in it
 * and an /events client following.  plegd stops the PLEG, ends the stream with its reason,
 * flushes stdout, abandons the plugin whose stop waits for that checker after
 * PLEG_PLUGIN_STOP_TIMEOUT_USEC, leaves the host allocated for the round's thread, and exits 0
 * (under ASan, without touching freed memory).  Before, plegd never exited. */
START_TEST(test_sigterm_with_hung_checker)
{
    g_autoptr(Env) env = env_new();
    g_autofree char *log_path = NULL;
    g_autoptr(PlegdRunner) plegd = spawn_hang(env, "1", NULL, &log_path);
    g_autofree char *base = plegd_runner_wait_metrics_url(plegd);
    guint16 port = url_port(base);
    g_autoptr(GSocketAddress) socket_address =
        g_unix_socket_address_new(plegd_runner_get_socket(plegd));
    g_autoptr(GSocketConnection) stream =
        send_request_to(G_SOCKET_CONNECTABLE(socket_address), "/events");
    g_autoptr(GSocketConnection) waiting = NULL;
    g_autoptr(GString) received = g_string_new(NULL);
    g_autofree char *out = NULL;
    g_autofree char *err = NULL;
    GInputStream *input;
    char buffer[4096];
    gssize n;

    ck_assert(plegd_runner_wait_stdout(plegd, "\"ContainerStarted\""));
    waiting = send_request(port, "/readyz");
    wait_hung(log_path);

    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(strstr(err, "plugin hang did not stop within 5 s"), "%s", err);
    ck_assert_msg(strstr(err, "a health checker has not returned: leaving the host allocated"),
                  "%s", err);
    out = plegd_runner_get_stdout(plegd);
    ck_assert_msg(strstr(out, "\"ContainerStarted\""), "%s", out);

    /* The stream ended with its reason, then the connection closed. */
    input = g_io_stream_get_input_stream(G_IO_STREAM(stream));
    while ((n = g_input_stream_read(input, buffer, sizeof(buffer), NULL, NULL)) > 0)
        g_string_append_len(received, buffer, n);
    ck_assert_msg(strstr(received->str, "shutting_down"), "%s", received->str);
}
END_TEST

/* A plugin's health checker that never returns holds back only the health answers: /metrics
 * (and everything else the main context serves) still answers at once, and more /livez
 * requests wait for the same round instead of starting more of them. */
START_TEST(test_hung_checker_blocks_no_endpoint)
{
    g_autoptr(Env) env = env_new();
    const char *const env_vars[] = {"PLEG_FIXTURE_HANG_AFTER=1", NULL};
    g_autofree char *hang_dir = g_build_filename(env->dir, "plugins", NULL);
    g_autofree char *module = g_build_filename(g_getenv("PLEG_FIXTURE_PLUGIN_BUILDDIR"),
                                               "libfixture-hang.so", NULL);
    g_autofree char *log_path = g_build_filename(hang_dir, "libfixture-hang.so.log", NULL);
    g_autofree char *plugin_dir = g_strdup_printf("--plugin-dir=%s", hang_dir);
    g_autofree char *log = NULL;
    gint64 deadline;
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autoptr(GSocketClient) client = g_socket_client_new();
    g_autoptr(GPtrArray) waiting = g_ptr_array_new_with_free_func(g_object_unref);
    g_autofree char *base = NULL;
    g_autofree char *url = NULL;
    g_autofree char *body = NULL;
    guint16 port;

    /* A copy of its own, so that the fixture's log (next to the module) is this test's. */
    ck_assert_int_eq(g_mkdir(hang_dir, 0755), 0);
    copy_file(module, hang_dir, "libfixture-hang.so");
    g_free(write_file(hang_dir, "hang.plugin", "[Plugin]\nName=hang\nModule=libfixture-hang.so\n"));
    plegd = plegd_runner_spawn(env_vars, env->endpoint_arg, "--metrics-bind-address=127.0.0.1:0",
                               plugin_dir, "--require-plugins=hang");
    base = plegd_runner_wait_metrics_url(plegd);
    port = (guint16)g_ascii_strtoull(strrchr(base, ':') + 1, NULL, 10);
    /* plegd is on the loopback: no proxy.  With one, GIO asks the default proxy resolver
     * (libproxy) on a thread of GLib's pool, which outlives the test and hands its answer back
     * through GIO's own queues. */
    g_socket_client_set_enable_proxy(client, FALSE);

    /* Three /livez requests whose answers never come. */
    for (guint i = 0; i < 3; i++) {
        g_autoptr(GError) error = NULL;
        const char *request = "GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
        GSocketConnection *connection =
            g_socket_client_connect_to_host(client, "127.0.0.1", port, NULL, &error);

        ck_assert_msg(connection, "%s", error ? error->message : "");
        ck_assert(g_output_stream_write_all(
            g_io_stream_get_output_stream(G_IO_STREAM(connection)), request, strlen(request),
            NULL, NULL, &error));
        g_ptr_array_add(waiting, connection);
    }
    deadline = g_get_monotonic_time() + WAIT_MS * 1000;
    while (g_get_monotonic_time() < deadline) {
        g_clear_pointer(&log, g_free);
        if (g_file_get_contents(log_path, &log, NULL, NULL) && strstr(log, "hang\n"))
            break;
        g_usleep(20 * 1000);
    }
    ck_assert_msg(log && strstr(log, "hang\n"), "the checker never ran: %s", log ? log : "");

    url = g_strconcat(base, "/metrics", NULL);
    for (guint i = 0; i < 3; i++) {
        gint64 start = g_get_monotonic_time();

        ck_assert_uint_eq(http_request("GET", url, &body, NULL), 200);
        ck_assert_msg(strstr(body, "kubelet_pleg_relist_duration_seconds"), "%s", body);
        ck_assert_msg(g_get_monotonic_time() - start < 2 * G_USEC_PER_SEC,
                      "/metrics took %" G_GINT64_FORMAT " ms while a checker hung",
                      (g_get_monotonic_time() - start) / 1000);
        g_clear_pointer(&body, g_free);
    }
    /* The checker was called once: the three requests share one round. */
    g_clear_pointer(&log, g_free);
    ck_assert(g_file_get_contents(log_path, &log, NULL, NULL));
    ck_assert_uint_eq(count_lines(log, "hang"), 1);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGKILL), 128 + SIGKILL);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("plegd-plugins");
    TCase *tc = tcase_create("plugins");
    SRunner *sr;
    int failed;

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_evented_reports_exit);
    tcase_add_test(tc, test_readyz_evented_connected_disconnected);
    tcase_add_test(tc, test_readyz_evented_unimplemented);
    tcase_add_test(tc, test_watchdog_heartbeats);
    tcase_add_test(tc, test_watchdog_diagnostics_records);
    tcase_add_test(tc, test_watchdog_stall_record_before_kill);
    tcase_add_test(tc, test_watchdog_through_runtime_outage);
    tcase_add_test(tc, test_watchdog_runtime_absent_at_start);
    tcase_add_test(tc, test_watchdog_through_hung_runtime);
    tcase_add_test(tc, test_stuck_dispatcher_fails_livez);
    tcase_add_test(tc, test_hung_checker_blocks_no_endpoint);
    tcase_add_test(tc, test_hung_checker_waiters_bounded);
    tcase_add_test(tc, test_sigterm_with_hung_checker);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
