/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GET /status against cri-sim: the liveness and readiness verdicts with each check, the same
 * ones /livez?verbose and /readyz?verbose show; a runtime that goes away makes plegd not ready
 * (the "runtime" check names it) and leaves it live, and coming back makes it ready again; the
 * relist settings and the last relist; the pods; the event history's instance and seqs, which
 * /events agrees with; the plugins; the state directory's informational line; a parameter, a
 * POST and a HEAD.  Every wait polls /status to a deadline.
 */
#include <json-glib/json-glib.h>
#include <signal.h>

#include "cri-sim.h"
#include "pleg-config.h"
#include "plegd-runner.h"

typedef struct {
    char *dir;
    char *state_dir;
    CriSim *sim;
    PlegdRunner *plegd;
    char *base; /* http://127.0.0.1:PORT: /metrics and the probes */
    char *api;  /* http+unix://SOCKET: the whole API */
} Fixture;

static Fixture fixture;

static gint64
deadline(void)
{
    return g_get_monotonic_time() + (g_getenv("PLEGD_TEST_WRAPPER") ? 120 : 30) * G_USEC_PER_SEC;
}

static void
setup(void)
{
    g_autofree char *path = NULL, *endpoint = NULL, *state = NULL;
    g_autoptr(GError) error = NULL;

    fixture.dir = make_tmpdir();
    fixture.state_dir = make_tmpdir();
    path = g_build_filename(fixture.dir, "cri.sock", NULL);
    fixture.sim = cri_sim_new(path, &error);
    ck_assert_msg(fixture.sim, "%s", error ? error->message : "");
    ck_assert(cri_sim_add_pod(fixture.sim, "u1", "web", NULL));
    ck_assert(cri_sim_add_pod(fixture.sim, "u2", "db", NULL));
    endpoint = g_strdup_printf("--container-runtime-endpoint=unix://%s", path);
    state = g_strdup_printf("--state-dir=%s", fixture.state_dir);
    fixture.plegd = plegd_runner_spawn(NULL, endpoint, "--relist-period=100ms",
                                       "--relist-threshold=2s", "--runtime-request-timeout=1s",
                                       "--metrics-bind-address=127.0.0.1:0",
                                       "--feature-gates=EventedPLEG=true", state);
    fixture.base = plegd_runner_wait_metrics_url(fixture.plegd);
    fixture.api = plegd_runner_get_api_url(fixture.plegd);
}

static void
teardown(void)
{
    g_clear_pointer(&fixture.plegd, plegd_runner_free);
    g_clear_pointer(&fixture.sim, cri_sim_free);
    g_clear_pointer(&fixture.base, g_free);
    g_clear_pointer(&fixture.api, g_free);
    remove_tmpdir(fixture.state_dir);
    remove_tmpdir(fixture.dir);
    g_clear_pointer(&fixture.state_dir, g_free);
    g_clear_pointer(&fixture.dir, g_free);
}

static JsonNode *
get_status(void)
{
    g_autofree char *url = g_strconcat(fixture.api, "/status", NULL);
    g_autofree char *body = NULL, *type = NULL;
    guint status = http_request("GET", url, &body, &type);

    ck_assert_msg(status == 200, "GET /status: %u %s", status, body);
    ck_assert_str_eq(type, "application/json");
    ck_assert_msg(g_str_has_suffix(body, "}\n"), "%s", body);
    return parse_json_object(body);
}

static JsonObject *
member(JsonNode *root, const char *path)
{
    g_auto(GStrv) names = g_strsplit(path, ".", -1);
    JsonObject *object = json_node_get_object(root);

    for (char **name = names; *name; name++) {
        ck_assert_msg(json_object_has_member(object, *name), "no %s in /status", path);
        object = json_object_get_object_member(object, *name);
    }
    return object;
}

/* "name:ok" or "name:failed" for each check of verdict @name, comma-separated. */
static char *
summarize_checks(JsonNode *root, const char *name)
{
    JsonArray *checks = json_object_get_array_member(member(root, name), "checks");
    g_autoptr(GString) text = g_string_new(NULL);

    for (guint i = 0; i < json_array_get_length(checks); i++) {
        JsonObject *check = json_array_get_object_element(checks, i);
        gboolean ok = json_object_get_boolean_member(check, "ok");

        g_string_append_printf(text, "%s%s:%s", i ? "," : "",
                               json_object_get_string_member(check, "name"),
                               ok ? "ok" : "failed");
        /* A reason exactly when it failed. */
        ck_assert_int_eq(json_object_has_member(check, "reason"), !ok);
    }
    return g_string_free(g_steal_pointer(&text), FALSE);
}

static gboolean
verdict(JsonNode *root, const char *name)
{
    return json_object_get_boolean_member(member(root, name), "ok");
}

/* The entry of plugin @name in /status. */
static JsonObject *
plugin_of(JsonNode *root, const char *name)
{
    JsonArray *plugins = json_object_get_array_member(json_node_get_object(root), "plugins");

    for (guint i = 0; i < json_array_get_length(plugins); i++) {
        JsonObject *plugin = json_array_get_object_element(plugins, i);

        if (g_str_equal(json_object_get_string_member(plugin, "name"), name))
            return plugin;
    }
    ck_abort_msg("no plugin %s in /status", name);
    return NULL;
}

/* The evented watcher's status word, "" before it set one. */
static const char *
evented_state(JsonNode *root)
{
    JsonObject *plugin = plugin_of(root, "evented");

    if (!json_object_has_member(plugin, "status"))
        return "";
    return json_object_get_string_member(json_object_get_object_member(plugin, "status"),
                                         "state");
}

/* Polls /status until readiness is @ready, when @pods is not negative the pod cache holds @pods
 * pods (a relist counts as successful once it listed, before its pods are in the cache), and
 * when @evented is set the evented watcher's status is that word; returns the document. */
static JsonNode *
wait_status(gboolean ready, gint64 pods, const char *evented)
{
    gint64 end = deadline();

    for (;;) {
        g_autoptr(JsonNode) root = get_status();

        if (verdict(root, "ready") == ready &&
            (pods < 0 || json_object_get_int_member(json_node_get_object(root), "pods") == pods) &&
            (!evented || g_str_equal(evented_state(root), evented)))
            return g_steal_pointer(&root);
        ck_assert_msg(g_get_monotonic_time() < end,
                      "/status never said ready.ok=%d with %" G_GINT64_FORMAT
                      " pods, evented %s",
                      ready, pods, evented ? evented : "any");
        g_usleep(20 * 1000);
    }
}

#define wait_ready(ready) wait_status((ready), -1, NULL)

/* Waits until /events holds @n events (the runtime changes no more); returns the last seq. */
static gint64
wait_history(guint n)
{
    g_autofree char *url = g_strconcat(fixture.api, "/events?follow=false", NULL);

    for (gint64 end = deadline();; g_usleep(20 * 1000)) {
        g_autofree char *text = NULL;
        g_auto(GStrv) lines = NULL;

        ck_assert_uint_eq(http_request("GET", url, &text, NULL), 200);
        lines = g_strsplit(text ? g_strchomp(text) : "", "\n", -1);
        if (g_strv_length(lines) == n && n > 0) {
            g_autoptr(JsonNode) last = parse_json_object(lines[n - 1]);

            return json_object_get_int_member(json_node_get_object(last), "seq");
        }
        ck_assert_msg(g_get_monotonic_time() < end, "/events never held %u events: %s", n, text);
    }
}

START_TEST(test_status_document)
{
    /* The two pods' sandboxes started, published after the pods are in the cache. */
    gint64 last_seq = wait_history(2);
    g_autoptr(JsonNode) root = wait_status(TRUE, 2, "connected");
    JsonObject *object = json_node_get_object(root);
    JsonObject *relist = member(root, "relist");
    JsonObject *events = member(root, "events");
    JsonObject *evented = plugin_of(root, "evented");
    JsonObject *watchdog = plugin_of(root, "watchdog");
    JsonObject *evented_status = json_object_get_object_member(evented, "status");
    JsonArray *infos = json_object_get_array_member(member(root, "ready"), "informational");
    g_autofree char *live = summarize_checks(root, "live");
    g_autofree char *ready = summarize_checks(root, "ready");
    g_autofree char *endpoint = NULL;
    g_autoptr(GDateTime) last_success = NULL, since = NULL;

    ck_assert_str_eq(json_object_get_string_member(object, "version"), PLEG_VERSION);
    endpoint = g_strconcat("unix://", cri_sim_get_socket_path(fixture.sim), NULL);
    ck_assert_str_eq(json_object_get_string_member(object, "runtime_endpoint"), endpoint);
    ck_assert(verdict(root, "live"));
    ck_assert_str_eq(live, "pleg-dispatcher:ok");
    ck_assert_str_eq(ready, "pleg-dispatcher:ok,first-relist:ok,runtime:ok,pleg:ok");

    ck_assert_int_eq(json_object_get_int_member(relist, "period_ms"), 100);
    ck_assert_int_eq(json_object_get_int_member(relist, "threshold_ms"), 2000);
    last_success = g_date_time_new_from_iso8601(
        json_object_get_string_member(relist, "last_success"), NULL);
    ck_assert(last_success != NULL);
    ck_assert_int_ge(json_object_get_int_member(relist, "last_success_age_ms"), 0);
    ck_assert_int_lt(json_object_get_int_member(relist, "last_success_age_ms"), 2000);
    ck_assert(json_object_has_member(relist, "last_attempt"));
    ck_assert(json_object_has_member(relist, "last_finished_age_ms"));
    ck_assert(!json_object_has_member(relist, "last_error"));
    ck_assert_int_eq(json_object_get_int_member(object, "pods"), 2);

    /* The history /events serves: its newest seq is the last line's. */
    ck_assert_int_eq(json_object_get_int_member(events, "newest_seq"), last_seq);
    ck_assert_int_eq(json_object_get_int_member(events, "oldest_seq") + 1, last_seq);
    ck_assert_int_eq(strlen(json_object_get_string_member(events, "instance")), 36);
    ck_assert_int_eq(json_object_get_int_member(events, "clients"), 0);

    ck_assert_str_eq(json_object_get_string_member(watchdog, "state"), "running");
    ck_assert_str_eq(json_object_get_string_member(watchdog, "detail"), "running");
    ck_assert_str_eq(json_object_get_string_member(watchdog, "feature_gate"), "SystemdWatchdog");
    ck_assert(!json_object_has_member(watchdog, "status")); /* it sets none */
    /* The watcher's status: its word, its line, and since when. */
    ck_assert_str_eq(json_object_get_string_member(evented, "state"), "running");
    ck_assert_str_eq(json_object_get_string_member(evented, "feature_gate"), "EventedPLEG");
    ck_assert_msg(g_str_has_prefix(json_object_get_string_member(evented_status, "message"),
                                   "connected since "),
                  "%s", json_object_get_string_member(evented_status, "message"));
    since = g_date_time_new_from_iso8601(json_object_get_string_member(evented_status, "since"),
                                         NULL);
    ck_assert(since != NULL);

    /* The informational lines /readyz?verbose shows: --state-dir's, then the watcher's. */
    ck_assert_int_eq(json_array_get_length(infos), 2);
    ck_assert_str_eq(json_object_get_string_member(json_array_get_object_element(infos, 0),
                                                   "name"),
                     "state");
    ck_assert_str_eq(json_object_get_string_member(json_array_get_object_element(infos, 1),
                                                   "name"),
                     "evented");
    ck_assert_str_eq(json_object_get_string_member(json_array_get_object_element(infos, 1),
                                                   "message"),
                     json_object_get_string_member(evented_status, "message"));
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
}
END_TEST

START_TEST(test_status_runtime_away)
{
    g_autoptr(JsonNode) ready = wait_ready(TRUE);
    g_autoptr(JsonNode) away = NULL, back = NULL;
    g_autoptr(GError) error = NULL;
    g_autofree char *checks = NULL;
    JsonArray *list;
    const char *reason = NULL;

    ck_assert_msg(cri_sim_go_away(fixture.sim, -1, FALSE, &error), "%s",
                  error ? error->message : "");
    away = wait_ready(FALSE);
    /* Restarting plegd would not bring the runtime back: still live. */
    ck_assert(verdict(away, "live"));
    checks = summarize_checks(away, "ready");
    ck_assert_msg(g_str_has_prefix(checks, "pleg-dispatcher:ok,first-relist:ok,runtime:failed"),
                  "%s", checks);
    list = json_object_get_array_member(member(away, "ready"), "checks");
    for (guint i = 0; i < json_array_get_length(list); i++) {
        JsonObject *check = json_array_get_object_element(list, i);

        if (g_str_equal(json_object_get_string_member(check, "name"), "runtime"))
            reason = json_object_get_string_member(check, "reason");
    }
    ck_assert_msg(reason && g_str_has_prefix(reason, "container runtime is not reachable: "),
                  "%s", reason ? reason : "(none)");
    ck_assert(json_object_has_member(member(away, "relist"), "last_error"));

    ck_assert_msg(cri_sim_come_back(fixture.sim, &error), "%s", error ? error->message : "");
    back = wait_ready(TRUE);
    ck_assert(!json_object_has_member(member(back, "relist"), "last_error"));
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
}
END_TEST

START_TEST(test_status_requests)
{
    g_autofree char *with_query = g_strconcat(fixture.api, "/status?verbose", NULL);
    g_autofree char *url = g_strconcat(fixture.api, "/status", NULL);
    g_autofree char *body = NULL, *head_body = NULL, *post_body = NULL;

    ck_assert_uint_eq(http_request("GET", with_query, &body, NULL), 400);
    ck_assert_str_eq(body, "unknown query parameter \"verbose\" (/status takes none)\n");
    ck_assert_uint_eq(http_request("HEAD", url, &head_body, NULL), 200);
    ck_assert_msg(!head_body || head_body[0] == '\0', "HEAD answered a body: %s", head_body);
    ck_assert_uint_eq(http_request("POST", url, &post_body, NULL), 405);
    g_clear_pointer(&body, g_free);

    /* Over TCP, where any local user can connect, /status is refused (it names the plugins and
     * the event history): 403 naming the socket. */
    g_free(url);
    url = g_strconcat(fixture.base, "/status", NULL);
    ck_assert_uint_eq(http_request("GET", url, &body, NULL), 403);
    ck_assert_msg(strstr(body, "/status is served on plegd's unix socket "), "%s", body);
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
}
END_TEST

static Suite *
status_suite(void)
{
    Suite *suite = suite_create("plegd-status");
    TCase *tc = tcase_create("status");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_status_document);
    tcase_add_test(tc, test_status_runtime_away);
    tcase_add_test(tc, test_status_requests);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    SRunner *runner = srunner_create(status_suite());
    int failed;

    srunner_run_all(runner, CK_NORMAL);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? 0 : 1;
}
