/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegctl end to end, as a process ($PLEGCTL) against a real plegd and cri-sim: events as JSON
 * Lines and as a table, its filters and --since (a seq, a duration, a time, a seq plegd no
 * longer holds); pods and its namespace filter; status and its exit statuses (ready; the runtime
 * gone: not ready); a follow that outlives plegd restarts (SIGKILL before its first event,
 * SIGTERM after) on its --state-dir, printing each event once with contiguous seqs, and one
 * whose history is lost (a restart without the state: exit 5).  And what goes wrong, each one
 * line and its exit status: connection refused (TCP, a unix socket), a server that never
 * answers (--timeout), an older plegd without /status (404), an answer that is not JSON, a
 * not-live verdict (exit 4), a bad command line (exit 2).  The other servers are made here: a
 * socket that listens and never accepts, and a libsoup server with canned answers on TCP and
 * on a unix socket.  Every wait has a deadline.
 */
#include <gio/gunixsocketaddress.h>
#include <json-glib/json-glib.h>
#include <libsoup/soup.h>
#include <signal.h>

#include "cri-sim.h"
#include "pleg-config.h"
#include "plegd-runner.h"

typedef struct {
    char *dir;
    char *state_dir;
    CriSim *sim;
    PlegdRunner *plegd;
    char *base;         /* http://127.0.0.1:PORT: /metrics and the probes only */
    char *api;          /* http+unix://SOCKET, the whole API, for http_request() */
    char *address;      /* unix:SOCKET, plegd's socket as plegctl is given it */
    char *address_arg;  /* --address=ADDRESS */
    char *socket_arg;   /* --socket=SOCKET, in the test's folder */
    char *bind_arg;     /* --metrics-bind-address=127.0.0.1:PORT, for a restart */
    char *endpoint_arg; /* --container-runtime-endpoint=... */
} Fixture;

static Fixture fixture;

static gint64
deadline(void)
{
    return g_get_monotonic_time() + (g_getenv("PLEGD_TEST_WRAPPER") ? 120 : 30) * G_USEC_PER_SEC;
}

/* ---- plegd and cri-sim ---- */

static void
start_plegd(const char *bind_arg, gboolean with_state)
{
    g_autofree char *state = g_strdup_printf("--state-dir=%s", fixture.state_dir);

    fixture.plegd = plegd_runner_spawn(NULL, fixture.endpoint_arg, "--relist-period=100ms",
                                       "--feature-gates=EventedPLEG=true", bind_arg,
                                       fixture.socket_arg, with_state ? state : "--state-dir=");
    g_free(fixture.base);
    fixture.base = plegd_runner_wait_metrics_url(fixture.plegd);
    g_free(fixture.api);
    fixture.api = plegd_runner_get_api_url(fixture.plegd);
}

static void
setup(void)
{
    g_autofree char *path = NULL;
    g_autoptr(GError) error = NULL;

    fixture.dir = make_tmpdir();
    fixture.state_dir = make_tmpdir();
    path = g_build_filename(fixture.dir, "cri.sock", NULL);
    fixture.sim = cri_sim_new(path, &error);
    ck_assert_msg(fixture.sim, "%s", error ? error->message : "");
    fixture.endpoint_arg = g_strdup_printf("--container-runtime-endpoint=unix://%s", path);
    fixture.socket_arg = g_strdup_printf("--socket=%s/plegd.sock", fixture.dir);
    fixture.address = g_strdup_printf("unix:%s/plegd.sock", fixture.dir);
    start_plegd("--metrics-bind-address=127.0.0.1:0", TRUE);
    fixture.address_arg = g_strconcat("--address=", fixture.address, NULL);
    fixture.bind_arg =
        g_strconcat("--metrics-bind-address=", fixture.base + strlen("http://"), NULL);
}

static void
teardown(void)
{
    g_clear_pointer(&fixture.plegd, plegd_runner_free);
    g_clear_pointer(&fixture.sim, cri_sim_free);
    remove_tmpdir(fixture.state_dir);
    remove_tmpdir(fixture.dir);
    g_clear_pointer(&fixture.state_dir, g_free);
    g_clear_pointer(&fixture.dir, g_free);
    g_clear_pointer(&fixture.base, g_free);
    g_clear_pointer(&fixture.api, g_free);
    g_clear_pointer(&fixture.address, g_free);
    g_clear_pointer(&fixture.address_arg, g_free);
    g_clear_pointer(&fixture.socket_arg, g_free);
    g_clear_pointer(&fixture.bind_arg, g_free);
    g_clear_pointer(&fixture.endpoint_arg, g_free);
}

/* A pod @uid named @ns/@name with a running container @id named @container. */
static void
add_pod(const char *uid, const char *ns, const char *name, const char *id, const char *container)
{
    CriSimPodSpec pod = {.uid = uid, .namespace_ = ns, .name = name};
    CriSimContainerSpec spec = {
        .id = id, .pod_uid = uid, .name = container, .state = CRI_SIM_CONTAINER_RUNNING};
    g_autoptr(GError) error = NULL;

    ck_assert_msg(cri_sim_add_pod_full(fixture.sim, &pod, NULL, &error), "%s",
                  error ? error->message : "");
    ck_assert_msg(cri_sim_add_container_full(fixture.sim, &spec, NULL, &error), "%s",
                  error ? error->message : "");
}

static void
add_container(const char *uid, const char *id, const char *name)
{
    CriSimContainerSpec spec = {
        .id = id, .pod_uid = uid, .name = name, .state = CRI_SIM_CONTAINER_RUNNING};
    g_autoptr(GError) error = NULL;

    ck_assert_msg(cri_sim_add_container_full(fixture.sim, &spec, NULL, &error), "%s",
                  error ? error->message : "");
}

static void
exit_container(const char *id, int code, const char *reason)
{
    g_autoptr(GError) error = NULL;

    ck_assert_msg(cri_sim_exit_container(fixture.sim, id, code, reason, &error), "%s",
                  error ? error->message : "");
}

/* ---- running plegctl ---- */

static PlegdRunner *
spawn_plegctl_argv(const char *const *env, const char *const *args)
{
    const char *binary = g_getenv("PLEGCTL");

    ck_assert_msg(binary, "PLEGCTL must name the plegctl binary");
    return plegd_runner_spawn_program(binary, env, -1, args);
}

/* Runs plegctl to its exit: its status, stdout and stderr. */
static int
run_plegctl_argv(const char *const *env, const char *const *args, char **ret_out, char **ret_err)
{
    g_autoptr(PlegdRunner) run = spawn_plegctl_argv(env, args);
    int status = plegd_runner_wait_exit(run);

    *ret_out = plegd_runner_get_stdout(run);
    *ret_err = plegd_runner_get_stderr(run);
    return status;
}

#define run_plegctl(out, err, ...)                                                                 \
    run_plegctl_argv(NULL, (const char *const[]){__VA_ARGS__, NULL}, (out), (err))

/* Runs plegctl and asserts @status, and that stderr is empty when it is 0, else one line
 * holding @needle. */
#define assert_plegctl(status, needle, out, ...)                                                   \
    G_STMT_START                                                                                   \
    {                                                                                              \
        g_autofree char *_err = NULL;                                                              \
        int _status = run_plegctl((out), &_err, __VA_ARGS__);                                      \
                                                                                                   \
        ck_assert_msg(_status == (status), "plegctl exited %d, not %d; stderr:\n%s", _status,     \
                      (status), _err);                                                             \
        assert_one_line(_err, (needle));                                                           \
    }                                                                                              \
    G_STMT_END

static void
assert_one_line(const char *err, const char *needle)
{
    if (!needle) {
        ck_assert_msg(err[0] == '\0', "plegctl wrote to stderr:\n%s", err);
        return;
    }
    ck_assert_msg(strstr(err, needle), "stderr lacks \"%s\":\n%s", needle, err);
    ck_assert_msg(g_str_has_prefix(err, "plegctl: ") && strchr(err, '\n') == err + strlen(err) - 1,
                  "not one line \"plegctl: ...\":\n%s", err);
}

/* JSON Lines: the objects, each checked. */
static GPtrArray *
parse_lines(const char *text)
{
    g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
    GPtrArray *objects = g_ptr_array_new_with_free_func((GDestroyNotify)json_node_unref);

    for (char **line = lines; *line; line++) {
        if (**line)
            g_ptr_array_add(objects, parse_json_object(*line));
    }
    ck_assert_msg(text[0] == '\0' || g_str_has_suffix(text, "\n"), "no final newline: %s", text);
    return objects;
}

static const char *
member_string(JsonNode *node, const char *name)
{
    JsonObject *object = json_node_get_object(node);

    return json_object_has_member(object, name) ? json_object_get_string_member(object, name)
                                                : NULL;
}

static gint64
member_int(JsonNode *node, const char *name)
{
    return json_object_get_int_member(json_node_get_object(node), name);
}

static int
compare_strings(gconstpointer a, gconstpointer b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* "TYPE container-or-(sandbox)" of each event, comma-separated, in order or @sorted (the
 * events of one relist come in no promised order). */
static char *
summarize_events(GPtrArray *events, gboolean sorted)
{
    g_autoptr(GPtrArray) items = g_ptr_array_new_with_free_func(g_free);

    for (guint i = 0; i < events->len; i++) {
        JsonNode *event = events->pdata[i];
        const char *container = member_string(event, "container");

        g_ptr_array_add(items, g_strdup_printf("%s %s", member_string(event, "type"),
                                               container ? container : "(sandbox)"));
    }
    if (sorted)
        g_ptr_array_sort(items, compare_strings);
    g_ptr_array_add(items, NULL);
    return g_strjoinv(",", (char **)items->pdata);
}

/* Where "TYPE container" is in @events; fails when it is not there. */
static guint
index_of(GPtrArray *events, const char *type, const char *container)
{
    for (guint i = 0; i < events->len; i++) {
        if (g_str_equal(member_string(events->pdata[i], "type"), type) &&
            g_strcmp0(member_string(events->pdata[i], "container"), container) == 0)
            return i;
    }
    ck_abort_msg("no %s of %s", type, container);
    return 0;
}

/* Polls `plegctl events -o json ARGS...` until it prints at least @n events; returns them. */
static GPtrArray *
wait_events(guint n, const char *const *args)
{
    gint64 end = deadline();
    g_autoptr(GPtrArray) argv = g_ptr_array_new();

    g_ptr_array_add(argv, "events");
    g_ptr_array_add(argv, "-o");
    g_ptr_array_add(argv, "json");
    g_ptr_array_add(argv, fixture.address_arg);
    for (const char *const *arg = args; *arg; arg++)
        g_ptr_array_add(argv, (gpointer)*arg);
    g_ptr_array_add(argv, NULL);
    for (;;) {
        g_autofree char *out = NULL, *err = NULL;
        int status = run_plegctl_argv(NULL, (const char *const *)argv->pdata, &out, &err);
        g_autoptr(GPtrArray) events = NULL;

        ck_assert_msg(status == 0, "plegctl events exited %d: %s", status, err);
        events = parse_lines(out);
        if (events->len >= n)
            return g_steal_pointer(&events);
        ck_assert_msg(g_get_monotonic_time() < end, "plegctl events never printed %u events:\n%s",
                      n, out);
        g_usleep(50 * 1000);
    }
}

#define wait_events_with(n, ...) wait_events((n), (const char *const[]){__VA_ARGS__, NULL})

/* Two deaths in two namespaces: shop/web's nginx (137, OOMKilled), batch/job's worker (3). */
static GPtrArray *
make_deaths(void)
{
    add_pod("u-web", "shop", "web", "c-web", "nginx");
    add_pod("u-job", "batch", "job", "c-job", "worker");
    g_ptr_array_unref(wait_events_with(4, "--type=ContainerStarted"));
    exit_container("c-web", 137, "OOMKilled");
    exit_container("c-job", 3, "Error");
    return wait_events_with(2, "--type=ContainerDied");
}

/* The seq of each event, comma-separated. */
static char *
seqs_of(GPtrArray *events, guint from)
{
    GString *text = g_string_new(NULL);

    for (guint i = from; i < events->len; i++)
        g_string_append_printf(text, "%s%" G_GINT64_FORMAT, i > from ? "," : "",
                               member_int(events->pdata[i], "seq"));
    return g_string_free(text, FALSE);
}

/* Where the cell @word starts in @line, which must hold it: @word whole, between spaces or the
 * line's ends (a seq may hold "137" too). */
static gsize
column_of(const char *line, const char *word)
{
    gsize len = strlen(word);

    for (const char *at = strstr(line, word); at; at = strstr(at + 1, word)) {
        if ((at == line || at[-1] == ' ') && (at[len] == ' ' || at[len] == '\0'))
            return (gsize)(at - line);
    }
    ck_abort_msg("no cell \"%s\" in \"%s\"", word, line);
    return 0;
}

/* ---- events ---- */

START_TEST(test_events)
{
    g_autoptr(GPtrArray) deaths = make_deaths();
    g_autoptr(GPtrArray) all = wait_events_with(6, "--since=0");
    g_autofree char *died = summarize_events(deaths, TRUE);
    g_autofree char *table = NULL, *out = NULL, *since_seq = NULL, *expected = NULL;
    g_autofree char *got = NULL;
    g_auto(GStrv) lines = NULL;
    const char *row = NULL;
    guint half = all->len / 2;

    /* JSON Lines: plegd's own objects (the two deaths may come from one relist, in any order). */
    JsonNode *nginx = deaths->pdata[index_of(deaths, "ContainerDied", "nginx")];
    JsonNode *worker = deaths->pdata[index_of(deaths, "ContainerDied", "worker")];

    ck_assert_str_eq(died, "ContainerDied nginx,ContainerDied worker");
    ck_assert_int_eq(member_int(nginx, "exit_code"), 137);
    ck_assert_str_eq(member_string(nginx, "reason"), "OOMKilled");
    ck_assert_str_eq(member_string(worker, "namespace"), "batch");
    ck_assert_int_eq(member_int(worker, "exit_code"), 3);

    /* The table: a header, a row an event, columns aligned. */
    assert_plegctl(0, NULL, &table, "events", fixture.address_arg, "-o", "table",
                   "--type", "ContainerDied");
    lines = g_strsplit(table, "\n", -1);
    ck_assert_int_eq(g_strv_length(lines), 4); /* header, 2 rows, "" */
    ck_assert_msg(g_str_has_prefix(lines[0], "TIME "), "%s", lines[0]);
    for (char **line = lines + 1; *line; line++)
        if (strstr(*line, "OOMKilled"))
            row = *line;
    ck_assert_msg(row, "no OOMKilled row:\n%s", table);
    ck_assert_uint_eq(column_of(lines[0], "NAMESPACE"), column_of(row, "shop"));
    ck_assert_uint_eq(column_of(lines[0], "CONTAINER"), column_of(row, "nginx"));
    ck_assert_uint_eq(column_of(lines[0], "EXIT"), column_of(row, "137"));
    ck_assert_uint_eq(column_of(lines[0], "REASON"), column_of(row, "OOMKilled"));
    ck_assert_uint_eq(column_of(lines[0], "TYPE"), column_of(row, "ContainerDied"));

    /* Filters: namespaces (any of them), types (any of them), pods. */
    {
        g_autoptr(GPtrArray) shop = wait_events_with(3, "-n", "shop");
        g_autoptr(GPtrArray) both = wait_events_with(6, "-n", "shop", "--namespace=batch");
        g_autoptr(GPtrArray) starts = wait_events_with(
            3, "--type=ContainerStarted", "--type=ContainerDied", "-n", "batch", "--pod=job");

        for (guint i = 0; i < shop->len; i++)
            ck_assert_str_eq(member_string(shop->pdata[i], "namespace"), "shop");
        ck_assert_uint_eq(shop->len, 3);
        ck_assert_uint_eq(both->len, 6);
        g_autoptr(GPtrArray) containers = wait_events_with(2, "-n", "batch", "--sandbox=false");
        g_autofree char *containers_got = summarize_events(containers, TRUE);

        got = summarize_events(starts, TRUE);
        ck_assert_str_eq(got,
                         "ContainerDied worker,ContainerStarted (sandbox),ContainerStarted worker");
        ck_assert_str_eq(containers_got, "ContainerDied worker,ContainerStarted worker");
    }

    /* --since SEQ: exactly the events after it. */
    since_seq = g_strdup_printf("--since=%" G_GINT64_FORMAT, member_int(all->pdata[half - 1], "seq"));
    {
        g_autoptr(GPtrArray) after = wait_events(0, (const char *const[]){since_seq, NULL});
        g_autofree char *after_seqs = seqs_of(after, 0);

        expected = seqs_of(all, half);
        ck_assert_str_eq(after_seqs, expected);
    }
    /* --since a duration or a time: the events at or after it. */
    {
        g_autoptr(GPtrArray) recent = wait_events_with(0, "--since=10m");
        g_autoptr(GPtrArray) since_2000 = wait_events_with(0, "--since=2000-01-01T00:00:00Z");
        g_autoptr(GPtrArray) future = wait_events_with(0, "--since=-1h");
        g_autofree char *all_seqs = seqs_of(all, 0);
        g_autofree char *recent_seqs = seqs_of(recent, 0);
        g_autofree char *since_2000_seqs = seqs_of(since_2000, 0);

        ck_assert_str_eq(recent_seqs, all_seqs);
        ck_assert_str_eq(since_2000_seqs, all_seqs);
        ck_assert_uint_eq(future->len, 0);
    }

    /* A seq older than plegd's history: what was asked is lost, exit 5. */
    g_clear_pointer(&out, g_free);
    assert_plegctl(5, "events were lost: plegd at", &out, "events", fixture.address_arg,
                   "--since=1");
    ck_assert_str_eq(out, "");
    g_clear_pointer(&out, g_free);
    assert_plegctl(2, "invalid --since \"yesterday\"", &out, "events", fixture.address_arg,
                   "--since=yesterday");
    g_clear_pointer(&out, g_free);
    assert_plegctl(2, "invalid --type \"Died\"", &out, "events", fixture.address_arg,
                   "--type=Died");
    g_clear_pointer(&out, g_free);
    assert_plegctl(2, "invalid --sandbox \"maybe\"", &out, "events", fixture.address_arg,
                   "--sandbox=maybe");
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
}
END_TEST

/* ---- pods ---- */

START_TEST(test_pods)
{
    g_autoptr(GPtrArray) deaths = make_deaths();
    g_autofree char *out = NULL, *table = NULL;
    g_autoptr(JsonNode) doc = NULL;
    JsonArray *pods;
    g_auto(GStrv) lines = NULL;

    assert_plegctl(0, NULL, &out, "pods", fixture.address_arg);
    doc = parse_json_object(out);
    pods = json_object_get_array_member(json_node_get_object(doc), "pods");
    ck_assert_int_eq(json_array_get_length(pods), 2);
    ck_assert_str_eq(json_object_get_string_member(json_array_get_object_element(pods, 0),
                                                   "namespace"),
                     "batch");
    g_clear_pointer(&out, g_free);
    g_clear_pointer(&doc, json_node_unref);

    assert_plegctl(0, NULL, &out, "pods", fixture.address_arg, "-n", "shop", "-o", "json");
    doc = parse_json_object(out);
    pods = json_object_get_array_member(json_node_get_object(doc), "pods");
    ck_assert_int_eq(json_array_get_length(pods), 1);
    ck_assert_str_eq(json_object_get_string_member(json_array_get_object_element(pods, 0), "name"),
                     "web");
    g_clear_pointer(&out, g_free);

    assert_plegctl(0, NULL, &table, "pods", fixture.address_arg, "-o", "table",
                   "--namespace=shop", "--namespace=batch");
    lines = g_strsplit(table, "\n", -1);
    ck_assert_int_eq(g_strv_length(lines), 4);
    ck_assert_str_eq(lines[0], "NAMESPACE  NAME  UID    SANDBOX  IP  CONTAINERS");
    ck_assert_str_eq(lines[1], "batch      job   u-job  ready    -   worker exited 3 (Error)");
    ck_assert_str_eq(lines[2], "shop       web   u-web  ready    -   nginx exited 137 (OOMKilled)");

    /* A value plegd refuses: its reason, exit 2. */
    assert_plegctl(2, "refused /pods: invalid namespace", &out, "pods", fixture.address_arg,
                   "--namespace=");
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
}
END_TEST

/* ---- status ---- */

/* Polls `plegctl status -o table` until it exits @status and prints @needle (NULL: anything);
 * returns its stdout. */
static char *
wait_status(int status, const char *needle)
{
    gint64 end = deadline();

    for (;;) {
        g_autofree char *out = NULL, *err = NULL;
        int got = run_plegctl(&out, &err, "status", fixture.address_arg, "-o", "table");

        if (got == status && (!needle || strstr(out, needle))) {
            ck_assert_str_eq(err, "");
            return g_steal_pointer(&out);
        }
        ck_assert_msg(got == 0 || got == 3, "plegctl status exited %d: %s", got, err);
        ck_assert_msg(g_get_monotonic_time() < end, "plegctl status never exited %d with %s:\n%s",
                      status, needle ? needle : "any output", out);
        g_usleep(50 * 1000);
    }
}

START_TEST(test_status)
{
    /* EventedPLEG is on: the fast path is on once the watcher's stream is connected. */
    g_autofree char *ready = wait_status(0, "\n  Fast path:  on: connected since ");
    g_autofree char *away = NULL, *back = NULL, *json = NULL;
    g_autoptr(JsonNode) doc = NULL;
    g_autoptr(GError) error = NULL;
    g_autofree char *head = g_strdup_printf("plegd %s at %s\n", PLEG_VERSION, fixture.address);
    g_autofree char *tcp_arg = g_strconcat("--address=", fixture.base, NULL);

    ck_assert_msg(g_str_has_prefix(ready, head), "%s", ready);
    ck_assert_msg(strstr(ready, "\n  Live:       yes\n  Ready:      yes\n"), "%s", ready);
    ck_assert_msg(strstr(ready, "\n  Relists:    every 100ms (threshold 3m0s); last success "),
                  "%s", ready);
    ck_assert_msg(strstr(ready, "\nReadiness checks:\n  [+] pleg-dispatcher\n  [+] first-relist\n"
                                "  [+] runtime\n  [+] pleg\n  [i] state: durable in "),
                  "%s", ready);
    ck_assert_msg(strstr(ready, "\n  [i] evented: connected since "), "%s", ready);
    ck_assert_msg(strstr(ready, "\nPLUGIN    STATE    DETAIL\nevented   running  running\n"),
                  "%s", ready);

    assert_plegctl(0, NULL, &json, "status", fixture.address_arg);
    doc = parse_json_object(json);
    g_clear_pointer(&json, g_free);
    /* Over TCP, where any local user can connect, plegd refuses /status: plegctl says so. */
    assert_plegctl(1, "is served on plegd's unix socket", &json, "status", tcp_arg);
    g_clear_pointer(&json, g_free);
    ck_assert(json_object_get_boolean_member(
        json_object_get_object_member(json_node_get_object(doc), "ready"), "ok"));

    /* The runtime gone: live, not ready (3), and why. */
    ck_assert_msg(cri_sim_go_away(fixture.sim, -1, FALSE, &error), "%s",
                  error ? error->message : "");
    /* The runtime gone: not ready (3), and the watcher's stream is down with it. */
    away = wait_status(3, "\n  Fast path:  off: disconnected since ");
    ck_assert_msg(strstr(away, "\n  Live:       yes\n  Ready:      no: runtime failed: container "
                               "runtime is not reachable: "),
                  "%s", away);
    ck_assert_msg(strstr(away, "; the last failed: "), "%s", away);
    g_clear_pointer(&json, g_free);
    assert_plegctl(3, NULL, &json, "status", fixture.address_arg, "-o", "json");

    ck_assert_msg(cri_sim_come_back(fixture.sim, &error), "%s", error ? error->message : "");
    back = wait_status(0, NULL);
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
}
END_TEST

/* ---- follow ---- */

/* Waits until plegd serves @n /events streams. */
static void
wait_clients(gint64 n)
{
    gint64 end = deadline();
    g_autofree char *url = g_strconcat(fixture.api, "/status", NULL);

    for (;;) {
        g_autofree char *body = NULL;
        g_autoptr(JsonNode) doc = NULL;
        JsonObject *events;

        ck_assert_uint_eq(http_request("GET", url, &body, NULL), 200);
        doc = parse_json_object(body);
        events = json_object_get_object_member(json_node_get_object(doc), "events");
        if (json_object_get_int_member(events, "clients") == n)
            return;
        ck_assert_msg(g_get_monotonic_time() < end, "plegd never served %" G_GINT64_FORMAT
                      " streams", n);
        g_usleep(20 * 1000);
    }
}

static void
restart_plegd(int signum, gboolean with_state)
{
    int status = plegd_runner_stop(fixture.plegd, signum);

    ck_assert_int_eq(status, signum == SIGKILL ? 128 + SIGKILL : 0);
    g_clear_pointer(&fixture.plegd, plegd_runner_free);
    start_plegd(fixture.bind_arg, with_state);
}

static void
assert_follow_shows(PlegdRunner *follow, const char *needle)
{
    if (!plegd_runner_wait_stdout(follow, needle)) {
        g_autofree char *out = plegd_runner_get_stdout(follow);
        g_autofree char *err = plegd_runner_get_stderr(follow);

        ck_abort_msg("the follow never printed %s; stdout:\n%s\nstderr:\n%s", needle, out, err);
    }
}

START_TEST(test_follow_restarts)
{
    g_autoptr(PlegdRunner) follow = spawn_plegctl_argv(
        NULL, (const char *const[]){"events", "-f", "-o", "json", fixture.address_arg, NULL});
    g_autofree char *out = NULL, *err = NULL, *got = NULL;
    g_autoptr(GPtrArray) events = NULL;
    gint64 first;

    wait_clients(1);
    /* Killed before the follow saw an event: it resumes where its stream began
     * (Plegd-Newest-Seq), so the events of the restart's first relist are not missed. */
    restart_plegd(SIGKILL, TRUE);
    add_pod("u-f", "follow", "f", "c1", "one");
    assert_follow_shows(follow, "\"container_id\":\"c1\"");
    exit_container("c1", 7, "Error");
    assert_follow_shows(follow, "\"exit_code\":7");

    /* Stopped (its streams end with shutting_down), changed while down, started again. */
    restart_plegd(SIGTERM, TRUE);
    {
        g_autoptr(GError) error = NULL;

        ck_assert(cri_sim_remove_container(fixture.sim, "c1", &error));
    }
    add_container("u-f", "c2", "two");
    assert_follow_shows(follow, "\"container_id\":\"c2\"");
    assert_follow_shows(follow, "\"type\":\"ContainerRemoved\"");

    ck_assert_int_eq(plegd_runner_stop(follow, SIGTERM), 128 + SIGTERM);
    out = plegd_runner_get_stdout(follow);
    err = plegd_runner_get_stderr(follow);
    events = parse_lines(out);
    got = summarize_events(events, TRUE);
    /* Each event once, in order. */
    ck_assert_str_eq(got, "ContainerDied one,ContainerRemoved one,ContainerStarted (sandbox),"
                          "ContainerStarted one,ContainerStarted two");
    ck_assert_uint_lt(index_of(events, "ContainerStarted", "one"),
                      index_of(events, "ContainerDied", "one"));
    ck_assert_uint_lt(index_of(events, "ContainerDied", "one"),
                      index_of(events, "ContainerRemoved", "one"));
    first = member_int(events->pdata[0], "seq");
    for (guint i = 0; i < events->len; i++)
        ck_assert_int_eq(member_int(events->pdata[i], "seq"), first + i);
    /* The restarts, each said once on stderr. */
    ck_assert_msg(strstr(err, "reconnecting") && strstr(err, "following plegd at"), "%s", err);
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
}
END_TEST

START_TEST(test_follow_history_lost)
{
    g_autoptr(PlegdRunner) follow = NULL;
    g_autofree char *err = NULL, *out = NULL;

    /* A plegd without --state-dir: each start is a new history. */
    restart_plegd(SIGTERM, FALSE);
    follow = spawn_plegctl_argv(
        NULL, (const char *const[]){"events", "--follow", fixture.address_arg, NULL});
    wait_clients(1);
    restart_plegd(SIGTERM, FALSE);
    ck_assert_int_eq(plegd_runner_wait_exit(follow), 5);
    err = plegd_runner_get_stderr(follow);
    out = plegd_runner_get_stdout(follow);
    ck_assert_str_eq(out, "");
    ck_assert_msg(strstr(err, "plegctl: events were lost: plegd at ") &&
                      strstr(err, "answered 410: instance ") &&
                      strstr(err, "relist (plegctl pods), then follow again\n"),
                  "%s", err);
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
}
END_TEST

/* ---- what goes wrong ---- */

/* A listening socket at @address (an IPv4 port 0: one of its own); @ret_base: its URL. */
static GSocket *
listen_at(GSocketAddress *address, char **ret_base)
{
    g_autoptr(GSocket) socket = g_socket_new(g_socket_address_get_family(address),
                                             G_SOCKET_TYPE_STREAM, 0, NULL);
    g_autoptr(GSocketAddress) bound = NULL;

    ck_assert(socket);
    ck_assert(g_socket_bind(socket, address, FALSE, NULL));
    ck_assert(g_socket_listen(socket, NULL));
    if (ret_base && G_IS_INET_SOCKET_ADDRESS(address)) {
        bound = g_socket_get_local_address(socket, NULL);
        *ret_base = g_strdup_printf("http://127.0.0.1:%u", g_inet_socket_address_get_port(
                                                               G_INET_SOCKET_ADDRESS(bound)));
    }
    return g_steal_pointer(&socket);
}

static GSocketAddress *
loopback_any_port(void)
{
    g_autoptr(GInetAddress) loopback = g_inet_address_new_loopback(G_SOCKET_FAMILY_IPV4);

    return g_inet_socket_address_new(loopback, 0);
}

/* A port nothing listens on: bound, then closed. */
static guint16
free_port(void)
{
    g_autoptr(GSocketAddress) any = loopback_any_port();
    g_autoptr(GSocket) socket = g_socket_new(G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM,
                                             G_SOCKET_PROTOCOL_TCP, NULL);
    g_autoptr(GSocketAddress) bound = NULL;

    ck_assert(g_socket_bind(socket, any, FALSE, NULL));
    bound = g_socket_get_local_address(socket, NULL);
    return g_inet_socket_address_get_port(G_INET_SOCKET_ADDRESS(bound));
}

START_TEST(test_refused)
{
    g_autofree char *address = g_strdup_printf("--address=http://127.0.0.1:%u", free_port());
    g_autofree char *unix_address = g_strdup_printf("--address=unix:%s/none.sock", fixture.dir);
    g_autofree char *out = NULL;

    assert_plegctl(1, "cannot connect to plegd at http://127.0.0.1:", &out, "status", address);
    ck_assert_str_eq(out, "");
    g_clear_pointer(&out, g_free);
    assert_plegctl(1, "(is plegd running and serving HTTP there?", &out, "events", "-f", address);
    g_clear_pointer(&out, g_free);
    assert_plegctl(1, "cannot connect to plegd at unix:", &out, "pods", unix_address);
}
END_TEST

/* A server that takes connections (the kernel's backlog) and never answers. */
START_TEST(test_hanging_server)
{
    g_autoptr(GSocketAddress) any = loopback_any_port();
    g_autofree char *base = NULL, *address = NULL, *out = NULL;
    g_autoptr(GSocket) socket = listen_at(any, &base);
    gint64 start;

    address = g_strconcat("--address=", base + strlen("http://"), NULL);
    start = g_get_monotonic_time();
    assert_plegctl(1, "did not answer /status within 300ms", &out, "status", address,
                   "--timeout=300ms");
    ck_assert_int_lt(g_get_monotonic_time() - start, 10 * G_USEC_PER_SEC);
    g_clear_pointer(&out, g_free);
    /* A follow waits for the headers no longer either. */
    assert_plegctl(1, "did not answer /events within 300ms", &out, "events", "-f", address,
                   "--timeout", "300ms");
}
END_TEST

/* ---- a server with canned answers: an older plegd, a broken one, a stuck one ---- */

typedef struct {
    const char *path;
    guint status;
    const char *content_type;
    const char *body;
} Canned;

/* One thread that accepts a connection at a time, reads the request's head and answers from
 * @answers, then closes: plain blocking sockets (libsoup 3.2's own server listener leaks per
 * connection, which the sanitizer builds would report). */
typedef struct {
    GThread *thread;
    GSocket *socket; /* listening */
    GCancellable *cancellable;
    const Canned *answers;
    char *base; /* for TCP: http://127.0.0.1:PORT */
} FakeServer;

static const Canned not_found = {NULL, 404, "text/plain", "404 page not found\n"};

static void
serve_one(FakeServer *fake, GSocket *client)
{
    g_autoptr(GString) head = g_string_new(NULL);
    g_autofree char *path = NULL, *response = NULL;
    const Canned *answer = &not_found;
    char buffer[4096];
    gssize n;

    g_socket_set_timeout(client, 10);
    while (!strstr(head->str, "\r\n\r\n") && head->len < 65536 &&
           (n = g_socket_receive(client, buffer, sizeof buffer, fake->cancellable, NULL)) > 0)
        g_string_append_len(head, buffer, n);
    /* "GET /status?x HTTP/1.1": the path without its query. */
    if (strchr(head->str, ' ')) {
        const char *start = strchr(head->str, ' ') + 1;

        path = g_strndup(start, strcspn(start, " ?\r\n"));
    }
    for (const Canned *canned = fake->answers; path && canned->path; canned++)
        if (g_str_equal(canned->path, path))
            answer = canned;
    response = g_strdup_printf("HTTP/1.1 %u %s\r\nServer: plegd/0.2.0\r\nContent-Type: %s\r\n"
                               "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                               answer->status, soup_status_get_phrase(answer->status),
                               answer->content_type, strlen(answer->body), answer->body);
    for (gsize sent = 0; sent < strlen(response); sent += (gsize)n) {
        n = g_socket_send(client, response + sent, strlen(response) - sent, fake->cancellable,
                          NULL);
        if (n <= 0)
            break;
    }
    g_socket_shutdown(client, FALSE, TRUE, NULL);
    /* Until the client has read it all and closed. */
    while (g_socket_receive(client, buffer, sizeof buffer, fake->cancellable, NULL) > 0)
        ;
    g_socket_close(client, NULL);
}

static gpointer
fake_thread(gpointer data)
{
    FakeServer *fake = data;

    for (;;) {
        g_autoptr(GSocket) client = g_socket_accept(fake->socket, fake->cancellable, NULL);

        if (!client)
            return NULL;
        serve_one(fake, client);
    }
}

/* Serves @answers at @address (NULL: TCP on a port of its own, fake->base). */
static FakeServer *
fake_server_start(const Canned *answers, GSocketAddress *address)
{
    FakeServer *fake = g_new0(FakeServer, 1);
    g_autoptr(GSocketAddress) tcp = address ? NULL : loopback_any_port();

    fake->answers = answers;
    fake->socket = listen_at(address ? address : tcp, &fake->base);
    fake->cancellable = g_cancellable_new();
    fake->thread = g_thread_new("fake-plegd", fake_thread, fake);
    return fake;
}

static void
fake_server_stop(FakeServer *fake)
{
    g_cancellable_cancel(fake->cancellable);
    g_thread_join(fake->thread);
    g_socket_close(fake->socket, NULL);
    g_object_unref(fake->socket);
    g_object_unref(fake->cancellable);
    g_free(fake->base);
    g_free(fake);
}

/* A verdict of a plegd whose dispatcher is stuck, its evented plugin off. */
static const char stuck_status[] =
    "{\"version\":\"9.9\",\"live\":{\"ok\":false,\"checks\":[{\"name\":\"pleg-dispatcher\","
    "\"ok\":false,\"reason\":\"pleg dispatcher is stuck: no global relist has finished for 9m0s; "
    "the limit is 8m1s\"}]},\"ready\":{\"ok\":false,\"checks\":[{\"name\":\"pleg-dispatcher\","
    "\"ok\":false,\"reason\":\"stuck\"}],\"informational\":[]},\"relist\":{\"period_ms\":1000},"
    "\"plugins\":[{\"name\":\"evented\",\"state\":\"disabled-gate\",\"detail\":\"disabled "
    "(feature gate EventedPLEG off)\"}]}\n";

START_TEST(test_other_servers)
{
    static const Canned old_plegd[] = {
        {"/pods", 200, "text/plain", "hello\n"},
        {"/status", 404, "text/plain", "404 page not found\n"},
        {NULL, 0, NULL, NULL},
    };
    static const Canned stuck_plegd[] = {
        {"/status", 200, "application/json", stuck_status},
        {NULL, 0, NULL, NULL},
    };
    FakeServer *fake = fake_server_start(old_plegd, NULL);
    g_autofree char *address = g_strconcat("--address=", fake->base, NULL);
    g_autofree char *socket_path = g_build_filename(fixture.dir, "fake.sock", NULL);
    g_autofree char *unix_address = g_strconcat("--address=unix:", socket_path, NULL);
    g_autofree char *unix_uri = g_strconcat("--address=unix://", socket_path, NULL);
    g_autofree char *env_address = g_strconcat("PLEGCTL_ADDRESS=unix:", socket_path, NULL);
    g_autofree char *out = NULL, *err = NULL;
    g_autoptr(GSocketAddress) socket_address = g_unix_socket_address_new(socket_path);

    /* An older plegd, without /status: what to do, exit 1. */
    assert_plegctl(1, "plegd/0.2.0 at http://127.0.0.1:", &out, "status", address);
    ck_assert_msg(strstr(out, "") && !out[0], "%s", out);
    g_clear_pointer(&out, g_free);
    assert_plegctl(1, "does not serve /status (404): it is older than plegctl", &out, "status",
                   address);
    g_clear_pointer(&out, g_free);
    assert_plegctl(1, "answered /pods with something that is not plegd's JSON", &out, "pods",
                   address);
    fake_server_stop(fake);

    /* A stuck plegd, asked over a unix socket: not live, exit 4. */
    fake = fake_server_start(stuck_plegd, socket_address);
    g_clear_pointer(&out, g_free);
    assert_plegctl(4, NULL, &out, "status", unix_address, "-o", "table");
    ck_assert_msg(strstr(out, "\n  Live:       no: pleg-dispatcher failed: pleg dispatcher is "
                              "stuck: no global relist has finished for 9m0s"),
                  "%s", out);
    ck_assert_msg(strstr(out, "\n  Fast path:  off: evented disabled (feature gate EventedPLEG "
                              "off)\n"),
                  "%s", out);
    g_clear_pointer(&out, g_free);
    assert_plegctl(4, NULL, &out, "status", unix_uri);
    ck_assert_str_eq(out, stuck_status);
    /* $PLEGCTL_ADDRESS when --address is not given. */
    g_clear_pointer(&out, g_free);
    ck_assert_int_eq(run_plegctl_argv((const char *const[]){env_address, NULL},
                                      (const char *const[]){"status", NULL}, &out, &err),
                     4);
    ck_assert_str_eq(out, stuck_status);
    fake_server_stop(fake);
}
END_TEST

START_TEST(test_usage)
{
    g_autofree char *out = NULL, *err = NULL;

    ck_assert_int_eq(run_plegctl(&out, &err, "frobnicate"), 2);
    ck_assert_msg(g_str_has_prefix(err, "plegctl: unknown command \"frobnicate\"\n"), "%s", err);
    g_clear_pointer(&out, g_free);
    g_clear_pointer(&err, g_free);
    ck_assert_int_eq(run_plegctl(&out, &err, "status", "--output=yaml"), 2);
    ck_assert_msg(g_str_has_prefix(err, "plegctl: invalid --output \"yaml\": expected table or "
                                        "json\nRun 'plegctl status --help'"),
                  "%s", err);
    g_clear_pointer(&out, g_free);
    g_clear_pointer(&err, g_free);
    ck_assert_int_eq(run_plegctl(&out, &err, "pods", "extra"), 2);
    g_clear_pointer(&out, g_free);
    g_clear_pointer(&err, g_free);
    ck_assert_int_eq(run_plegctl(&out, &err, "pods", "--address=ftp://host:21"), 2);
    ck_assert_msg(strstr(err, "invalid address \"ftp://host:21\""), "%s", err);
    g_clear_pointer(&out, g_free);
    g_clear_pointer(&err, g_free);
    ck_assert_int_eq(run_plegctl(&out, &err, "events", "--timeout=soon"), 2);
    g_clear_pointer(&out, g_free);
    g_clear_pointer(&err, g_free);
    ck_assert_int_eq(run_plegctl(&out, &err, "--version"), 0);
    ck_assert_str_eq(out, "plegctl " PLEG_VERSION "\n");
    g_clear_pointer(&out, g_free);
    g_clear_pointer(&err, g_free);
    ck_assert_int_eq(run_plegctl(&out, &err, "status", "--help"), 0);
    ck_assert_msg(strstr(out, "--address=ADDRESS") && strstr(out, "--timeout=DURATION"), "%s",
                  out);
}
END_TEST

static Suite *
plegctl_suite(void)
{
    Suite *suite = suite_create("plegctl");
    TCase *tc = tcase_create("plegctl");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_events);
    tcase_add_test(tc, test_pods);
    tcase_add_test(tc, test_status);
    tcase_add_test(tc, test_follow_restarts);
    tcase_add_test(tc, test_follow_history_lost);
    tcase_add_test(tc, test_refused);
    tcase_add_test(tc, test_hanging_server);
    tcase_add_test(tc, test_other_servers);
    tcase_add_test(tc, test_usage);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    SRunner *runner = srunner_create(plegctl_suite());
    int failed;

    srunner_run_all(runner, CK_NORMAL);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? 0 : 1;
}
