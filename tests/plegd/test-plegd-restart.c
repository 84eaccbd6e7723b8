/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd restarted while cri-sim churns containers (issue #21): a consumer follows GET /events,
 * keeps its last seq and resumes with ?since=SEQ&instance=ID after each restart; what it ends
 * with is compared with what the test told cri-sim to do.
 *
 *  - graceful (SIGTERM) and kill -9 restarts, containers started, exited (each with its own
 *    exit code), removed while plegd runs, just before it stops and while it is down;
 *  - plegd killed at each crash point of its state writes (PLEGD_STATE_CRASH_AT), 24 times;
 *  - no aliasing: without --state-dir, and with its state.jsonl deleted, a cursor of the old
 *    process gets 410, never the new process's events;
 *  - a corrupt state file, and a state directory on a tmpfs that fills up and is freed again.
 *
 * The ground truth: the test changes each container at most once between two points where it
 * waited for plegd to report everything (a "settled" point), so whatever plegd saw in between,
 * the transitions it reports are known: running -> ContainerStarted, exited -> ContainerDied with
 * the exit code and finished_at the test gave, gone after exited -> ContainerRemoved.  While
 * plegd is down the test also makes containers that start and exit unseen (ContainerDied only)
 * and removes running ones (ContainerDied without an exit code, which no one can know, and
 * ContainerRemoved).  Every event is checked as it arrives: seq exactly one above the last one
 * (across restarts), (container, type) wanted and not seen before, "initial" only for the first
 * relist's events.
 *
 * The tmpfs test needs root (a mount namespace of the process's own): it fails, never skips,
 * without.  The clients speak HTTP/1.0, whose /events body is the lines until the connection
 * ends.
 */
#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <gio/gunixsocketaddress.h>
#include <json-glib/json-glib.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include "cri-sim.h"
#include "plegd-runner.h"

#define N_TYPES 4
static const char *const type_names[N_TYPES] = {"ContainerStarted", "ContainerDied",
                                                "ContainerRemoved", "ContainerChanged"};
enum { STARTED, DIED, REMOVED, CHANGED };

/* CREATED: created, not started. */
typedef enum { GONE, CREATED, RUNNING, EXITED } CtrState;

/* A container or sandbox as the test made it, and what the consumer must receive of it. */
typedef struct {
    char *id;
    char *pod_uid;
    gboolean sandbox;
    CtrState state;
    gboolean touched; /* changed since the last settled point */
    guint want[N_TYPES];
    guint got[N_TYPES];
    gboolean want_exit; /* ContainerDied carries exit_code and finished_at */
    int exit_code;
    gint64 finished_min_usec, finished_max_usec;
} Ctr;

/* A client of GET /events over HTTP/1.0. */
typedef struct {
    GSocket *socket;
    GString *raw;
    gboolean head_done;
    gboolean eof;
    guint status;
    char *head;
    char *body; /* a non-200 answer's body, at the end */
} Client;

typedef struct {
    char *dir;
    char *state_dir; /* NULL: plegd keeps no state */
    char *mount;     /* a tmpfs mounted here, unmounted by teardown */
    CriSim *sim;
    char *endpoint_arg;
    PlegdRunner *plegd;
    char *base;
    char *socket_arg; /* the same socket across restarts: one a plegd killed left is replaced */
    GSocketAddress *address;

    GHashTable *ctrs; /* id -> Ctr */
    GPtrArray *order; /* Ctr, as made */
    GPtrArray *pods;  /* uids */
    guint n_made;
    guint n_pods_made;
    guint n_pods_removed;
    guint n_exits;
    GRand *rand;
    gboolean expect_initial; /* events are the first relist's */

    /* The consumer: one stream at a time, its cursor across restarts. */
    Client *client;
    char *instance;
    guint64 last_seq; /* 0: nothing received yet */
    guint64 first_seq;
    guint n_events;
    char *end_reason; /* the reason of the stream's last line, when it had one */
} Fixture;

static Fixture fixture;
static gboolean private_mounts;

static gint64
deadline(void)
{
#ifdef __SANITIZE_THREAD__
    return g_get_monotonic_time() + 240 * G_USEC_PER_SEC;
#else
    return g_get_monotonic_time() + (g_getenv("PLEGD_TEST_WRAPPER") ? 120 : 30) * G_USEC_PER_SEC;
#endif
}

/* ---- the client ---- */

static void
client_free(Client *client)
{
    if (!client)
        return;
    g_object_unref(client->socket);
    g_string_free(client->raw, TRUE);
    g_free(client->head);
    g_free(client->body);
    g_free(client);
}
G_DEFINE_AUTOPTR_CLEANUP_FUNC(Client, client_free)

/* On plegd's socket; HTTP/1.0 without a Host. */
static Client *
client_open(const char *query)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *request = g_strdup_printf("GET /events%s HTTP/1.0\r\n\r\n", query);
    Client *client = g_new0(Client, 1);

    client->socket =
        g_socket_new(G_SOCKET_FAMILY_UNIX, G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_DEFAULT, &error);
    ck_assert_msg(client->socket, "%s", error ? error->message : "");
    ck_assert_msg(g_socket_connect(client->socket, fixture.address, NULL, &error), "%s",
                  error ? error->message : "");
    ck_assert(g_socket_send(client->socket, request, strlen(request), NULL, NULL) ==
              (gssize)strlen(request));
    client->raw = g_string_new(NULL);
    return client;
}

/* Reads what comes within @timeout_usec.  Returns: FALSE at the end of the stream (a reset
 * counts: a plegd killed). */
static gboolean
client_read(Client *client, gint64 timeout_usec)
{
    g_autoptr(GError) error = NULL;
    char buffer[65536];
    gssize n;

    if (client->eof)
        return FALSE;
    if (!g_socket_condition_timed_wait(client->socket, G_IO_IN, MAX(timeout_usec, 1), NULL,
                                       &error)) {
        ck_assert_msg(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT), "%s",
                      error->message);
        return TRUE;
    }
    n = g_socket_receive(client->socket, buffer, sizeof buffer, NULL, &error);
    if (n <= 0) {
        client->eof = TRUE;
        return FALSE;
    }
    g_string_append_len(client->raw, buffer, n);
    if (!client->head_done) {
        const char *end = strstr(client->raw->str, "\r\n\r\n");

        if (end) {
            ck_assert_msg(g_str_has_prefix(client->raw->str, "HTTP/1."), "%s", client->raw->str);
            client->status = (guint)g_ascii_strtoull(client->raw->str + 9, NULL, 10);
            client->head = g_strndup(client->raw->str, end + 2 - client->raw->str);
            g_string_erase(client->raw, 0, end + 4 - client->raw->str);
            client->head_done = TRUE;
        }
    }
    return TRUE;
}

static void
client_wait_head(Client *client)
{
    gint64 end = deadline();

    while (!client->head_done && client_read(client, end - g_get_monotonic_time()))
        ck_assert_msg(g_get_monotonic_time() < end, "no answer to GET /events");
    ck_assert_msg(client->head_done, "no answer to GET /events: %s", client->raw->str);
}

static char *
client_get_header(Client *client, const char *name)
{
    g_autofree char *needle = g_strconcat("\r\n", name, ": ", NULL);
    const char *start = strstr(client->head, needle);

    ck_assert_msg(start, "no %s header in:\n%s", name, client->head);
    start += strlen(needle);
    return g_strndup(start, strcspn(start, "\r"));
}

/* The whole body of an answer that is not a stream. */
static void
client_wait_end(Client *client)
{
    gint64 end = deadline();

    while (client_read(client, end - g_get_monotonic_time()))
        ck_assert_msg(g_get_monotonic_time() < end, "the answer did not end");
}

static JsonObject *
parse_object(const char *text)
{
    g_autoptr(JsonParser) parser = json_parser_new();
    g_autoptr(GError) error = NULL;

    ck_assert_msg(json_parser_load_from_data(parser, text, -1, &error), "%s: %s", text,
                  error ? error->message : "");
    ck_assert_msg(JSON_NODE_HOLDS_OBJECT(json_parser_get_root(parser)), "%s", text);
    return json_object_ref(json_node_get_object(json_parser_get_root(parser)));
}

/* ---- what cri-sim was told ---- */

static void
ctr_free(Ctr *ctr)
{
    g_free(ctr->id);
    g_free(ctr->pod_uid);
    g_free(ctr);
}

static Ctr *
ctr_add(const char *id, const char *pod_uid, gboolean sandbox)
{
    Ctr *ctr = g_new0(Ctr, 1);

    ctr->id = g_strdup(id);
    ctr->pod_uid = g_strdup(pod_uid);
    ctr->sandbox = sandbox;
    ck_assert_msg(!g_hash_table_contains(fixture.ctrs, id), "%s made twice", id);
    g_hash_table_insert(fixture.ctrs, ctr->id, ctr);
    g_ptr_array_add(fixture.order, ctr);
    return ctr;
}

static void
add_pod(void)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *uid = g_strdup_printf("u%u", ++fixture.n_pods_made);
    g_autofree char *sandbox = g_strconcat("sb-", uid, NULL);
    Ctr *ctr;

    ck_assert_msg(cri_sim_add_pod(fixture.sim, uid, NULL, &error), "%s", error->message);
    ctr = ctr_add(sandbox, uid, TRUE);
    ctr->state = RUNNING;
    ctr->touched = TRUE;
    ctr->want[STARTED] = 1;
    g_ptr_array_add(fixture.pods, g_steal_pointer(&uid));
}

/* After the first start, not the oldest pod, which changes only while plegd is down:
 * remove_pod() can take it. */
static const char *
random_pod(void)
{
    gint32 first = fixture.pods->len > 1 && !fixture.expect_initial ? 1 : 0;

    return fixture.pods->pdata[g_rand_int_range(fixture.rand, first, (gint32)fixture.pods->len)];
}

static int
next_exit_code(void)
{
    /* 1..250, then again: distinct among the containers a test keeps at a time. */
    return (int)(fixture.n_exits++ % 250) + 1;
}

/* A running container (ContainerStarted); @exited: one that also exited, both unseen by
 * plegd (ContainerDied only), its times in the past. */
static void
add_container(gboolean exited)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *id = g_strdup_printf("c%u", ++fixture.n_made);
    gint64 now_usec = g_get_real_time();
    CriSimContainerSpec spec = {
        .id = id,
        .pod_uid = random_pod(),
        .name = id,
        .state = exited ? CRI_SIM_CONTAINER_EXITED : CRI_SIM_CONTAINER_RUNNING,
    };
    Ctr *ctr = ctr_add(id, spec.pod_uid, FALSE);

    if (exited) {
        /* An hour ago, as a death found by a later start would be. */
        gint64 finished_usec = now_usec - (gint64)G_USEC_PER_SEC * 3600 + fixture.n_made;

        spec.exit_code = next_exit_code();
        spec.created_at_ns = (finished_usec - 2 * G_USEC_PER_SEC) * 1000;
        spec.started_at_ns = (finished_usec - G_USEC_PER_SEC) * 1000;
        spec.finished_at_ns = finished_usec * 1000;
        ctr->state = EXITED;
        ctr->want[DIED] = 1;
        ctr->want_exit = TRUE;
        ctr->exit_code = spec.exit_code;
        ctr->finished_min_usec = ctr->finished_max_usec = finished_usec;
    } else {
        ctr->state = RUNNING;
        ctr->want[STARTED] = 1;
    }
    ctr->touched = TRUE;
    ck_assert_msg(cri_sim_add_container_full(fixture.sim, &spec, NULL, &error), "%s",
                  error->message);
}

/* A container created, not started: no event (the PLEG's "unknown", whose ContainerChanged the
 * Generic PLEG does not publish, as kubelet's does not). */
static void
create_container(void)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *id = g_strdup_printf("c%u", ++fixture.n_made);
    const char *pod_uid = random_pod();
    Ctr *ctr = ctr_add(id, pod_uid, FALSE);

    ck_assert_msg(cri_sim_add_container(fixture.sim, pod_uid, id, id, &error), "%s",
                  error->message);
    ctr->state = CREATED;
    ctr->touched = TRUE;
}

static void
start_container(Ctr *ctr)
{
    g_autoptr(GError) error = NULL;

    ck_assert_msg(cri_sim_start_container(fixture.sim, ctr->id, &error), "%s", error->message);
    ctr->state = RUNNING;
    ctr->want[STARTED] = 1;
    ctr->touched = TRUE;
}

/* Up to @n untouched containers in @state, at random; @down: the oldest pod's too. */
static GPtrArray *
pick(CtrState state, guint n, gboolean down)
{
    g_autoptr(GPtrArray) candidates = g_ptr_array_new();
    GPtrArray *picked = g_ptr_array_new();

    for (guint i = 0; i < fixture.order->len; i++) {
        Ctr *ctr = fixture.order->pdata[i];

        if (!down && g_str_equal(ctr->pod_uid, fixture.pods->pdata[0]))
            continue;
        if (!ctr->sandbox && !ctr->touched && ctr->state == state)
            g_ptr_array_add(candidates, ctr);
    }
    while (picked->len < n && candidates->len > 0) {
        guint i = (guint)g_rand_int_range(fixture.rand, 0, (gint32)candidates->len);

        g_ptr_array_add(picked, g_ptr_array_steal_index_fast(candidates, i));
    }
    return picked;
}

static void
exit_container(Ctr *ctr)
{
    g_autoptr(GError) error = NULL;

    ctr->exit_code = next_exit_code();
    ctr->finished_min_usec = g_get_real_time();
    ck_assert_msg(cri_sim_exit_container(fixture.sim, ctr->id, ctr->exit_code, NULL, &error), "%s",
                  error->message);
    ctr->finished_max_usec = g_get_real_time();
    ctr->state = EXITED;
    ctr->want[DIED] = 1;
    ctr->want_exit = TRUE;
    ctr->touched = TRUE;
}

/* An exited container removed: ContainerRemoved; a running one (plegd down): ContainerDied
 * without an exit code too. */
static void
remove_container(Ctr *ctr)
{
    g_autoptr(GError) error = NULL;

    ck_assert_msg(cri_sim_remove_container(fixture.sim, ctr->id, &error), "%s", error->message);
    if (ctr->state == RUNNING)
        ctr->want[DIED] = 1;
    ctr->state = GONE;
    ctr->want[REMOVED] = 1;
    ctr->touched = TRUE;
}

/* While plegd is down, a pod none of whose containers changed since the last settled point is
 * removed with its containers (cri-sim stops it first): for the running ones and the sandbox
 * ContainerDied without an exit code and ContainerRemoved, for the exited ones ContainerRemoved,
 * for one never started nothing. */
static void
remove_pod(void)
{
    for (guint p = 0; p < fixture.pods->len; p++) {
        const char *uid = fixture.pods->pdata[p];
        g_autoptr(GError) error = NULL;
        gboolean untouched = TRUE;

        for (guint i = 0; i < fixture.order->len && untouched; i++) {
            const Ctr *ctr = fixture.order->pdata[i];

            untouched = !g_str_equal(ctr->pod_uid, uid) || ctr->state == GONE || !ctr->touched;
        }
        if (!untouched)
            continue;
        ck_assert_msg(cri_sim_remove_pod(fixture.sim, uid, &error), "%s", error->message);
        for (guint i = 0; i < fixture.order->len; i++) {
            Ctr *ctr = fixture.order->pdata[i];

            if (!g_str_equal(ctr->pod_uid, uid) || ctr->state == GONE)
                continue;
            if (ctr->state == RUNNING)
                ctr->want[DIED] = 1;
            if (ctr->state != CREATED)
                ctr->want[REMOVED] = 1;
            ctr->state = GONE;
            ctr->touched = TRUE;
        }
        g_ptr_array_remove_index(fixture.pods, p);
        fixture.n_pods_removed++;
        return;
    }
}

/* One round of churn: @n_new containers started, @n_exit exited, @n_remove removed, one created
 * and one created earlier started; @down: plegd is down, so also one that starts and exits
 * unseen, one running one removed and a new pod. */
static void
churn(guint n_new, guint n_exit, guint n_remove, gboolean down)
{
    g_autoptr(GPtrArray) starting = NULL;
    g_autoptr(GPtrArray) exiting = NULL;
    g_autoptr(GPtrArray) removing = NULL;

    /* Pods come and go: 3 to 5 of them. */
    if (down && fixture.pods->len > 3)
        remove_pod();
    starting = pick(CREATED, 1, down);
    exiting = pick(RUNNING, n_exit, down);
    removing = pick(EXITED, n_remove, down);

    for (guint i = 0; i < starting->len; i++)
        start_container(starting->pdata[i]);
    create_container();

    for (guint i = 0; i < exiting->len; i++)
        exit_container(exiting->pdata[i]);
    for (guint i = 0; i < removing->len; i++)
        remove_container(removing->pdata[i]);
    if (down) {
        g_autoptr(GPtrArray) killed = pick(RUNNING, 1, down);

        for (guint i = 0; i < killed->len; i++)
            remove_container(killed->pdata[i]);
        add_container(TRUE);
        add_pod();
    }
    for (guint i = 0; i < n_new; i++)
        add_container(FALSE);
}

/* ---- the consumer ---- */

static gint64
parse_time_usec(const char *text)
{
    g_autoptr(GDateTime) time = g_date_time_new_from_iso8601(text, NULL);

    ck_assert_msg(time, "not a time: %s", text);
    return g_date_time_to_unix(time) * G_USEC_PER_SEC + g_date_time_get_microsecond(time);
}

static void
check_died(Ctr *ctr, JsonObject *event, const char *line)
{
    const char *finished;
    gint64 finished_usec;

    if (!ctr->want_exit) {
        /* Removed while running and plegd down: there is no exit code to tell. */
        ck_assert_msg(!json_object_has_member(event, "exit_code"), "an exit code no one knows: %s",
                      line);
        return;
    }
    ck_assert_msg(json_object_has_member(event, "exit_code"), "no exit_code: %s", line);
    ck_assert_msg(json_object_get_int_member(event, "exit_code") == ctr->exit_code,
                  "exit code %d wanted: %s", ctr->exit_code, line);
    finished = json_object_get_string_member_with_default(event, "finished_at", NULL);
    ck_assert_msg(finished, "no finished_at: %s", line);
    finished_usec = parse_time_usec(finished);
    /* A millisecond either way: how GDateTime rounds nanoseconds. */
    ck_assert_msg(finished_usec >= ctr->finished_min_usec - 1000 &&
                      finished_usec <= ctr->finished_max_usec + 1000,
                  "finished_at is not when %s exited (%" G_GINT64_FORMAT "..%" G_GINT64_FORMAT
                  " us): %s",
                  ctr->id, ctr->finished_min_usec, ctr->finished_max_usec, line);
}

static void
handle_line(const char *line)
{
    g_autoptr(JsonObject) event = parse_object(line);
    const char *type, *id;
    gboolean initial;
    guint64 seq;
    Ctr *ctr;
    int t;

    if (!json_object_has_member(event, "seq")) {
        /* The last line of a stream plegd ends. */
        ck_assert_msg(json_object_has_member(event, "error"), "neither event nor end: %s", line);
        g_free(fixture.end_reason);
        fixture.end_reason = g_strdup(json_object_get_string_member(event, "reason"));
        return;
    }
    seq = (guint64)json_object_get_int_member(event, "seq");
    if (fixture.last_seq == 0)
        fixture.first_seq = seq;
    else
        ck_assert_msg(seq == fixture.last_seq + 1,
                      "seq %" G_GUINT64_FORMAT " after %" G_GUINT64_FORMAT ": %s", seq,
                      fixture.last_seq, line);
    fixture.last_seq = seq;
    fixture.n_events++;

    type = json_object_get_string_member_with_default(event, "type", "");
    for (t = 0; t < N_TYPES && !g_str_equal(type, type_names[t]); t++)
        ;
    ck_assert_msg(t < N_TYPES, "an event of no transition the test made: %s", line);
    id = json_object_get_string_member_with_default(event, "container_id", "");
    ctr = g_hash_table_lookup(fixture.ctrs, id);
    ck_assert_msg(ctr, "an unknown container: %s", line);
    ck_assert_str_eq(json_object_get_string_member(event, "pod_uid"), ctr->pod_uid);
    ck_assert(json_object_get_boolean_member(event, "sandbox") == ctr->sandbox);
    ck_assert_msg(ctr->got[t] < ctr->want[t], "%s: %s",
                  ctr->want[t] ? "twice" : "a transition the test did not make", line);
    ctr->got[t]++;
    initial = json_object_get_boolean_member_with_default(event, "initial", FALSE);
    ck_assert_msg(initial == fixture.expect_initial, "%s: %s",
                  initial ? "initial after the first relist" : "not initial in the first relist",
                  line);
    if (t == DIED)
        check_died(ctr, event, line);
}

/* Hands the complete lines received to handle_line(). */
static void
consume_lines(void)
{
    Client *client = fixture.client;

    for (;;) {
        const char *newline = strchr(client->raw->str, '\n');
        g_autofree char *line = NULL;

        if (!newline)
            break;
        line = g_strndup(client->raw->str, newline - client->raw->str);
        g_string_erase(client->raw, 0, newline + 1 - client->raw->str);
        handle_line(line);
    }
}

/* Reads for up to @timeout_usec.  Returns: FALSE at the end of the stream. */
static gboolean
consumer_pump(gint64 timeout_usec)
{
    gboolean more = client_read(fixture.client, timeout_usec);

    if (fixture.client->head_done)
        consume_lines();
    return more;
}

/* Follows /events: from the start of the history the first time, else from its cursor. */
static void
consumer_connect(void)
{
    g_autofree char *query = NULL;
    g_autofree char *instance = NULL;

    g_clear_pointer(&fixture.client, client_free);
    g_clear_pointer(&fixture.end_reason, g_free);
    if (fixture.instance)
        query = g_strdup_printf("?since=%" G_GUINT64_FORMAT "&instance=%s", fixture.last_seq,
                                fixture.instance);
    else
        query = g_strdup("?since=0");
    fixture.client = client_open(query);
    client_wait_head(fixture.client);
    if (fixture.client->status != 200) {
        client_wait_end(fixture.client);
        ck_abort_msg("GET /events%s: %s%s", query, fixture.client->head, fixture.client->raw->str);
    }
    instance = client_get_header(fixture.client, "Plegd-Instance");
    if (fixture.instance)
        ck_assert_str_eq(instance, fixture.instance);
    else
        fixture.instance = g_steal_pointer(&instance);
    consume_lines();
}

/* Reads the stream of a plegd that stopped to its end. */
static void
consumer_drain(void)
{
    gint64 end = deadline();

    while (consumer_pump(end - g_get_monotonic_time()))
        ck_assert_msg(g_get_monotonic_time() < end, "the stream of a stopped plegd did not end");
}

/* ---- plegd ---- */

static void
plegd_start(const char *const *env, const char *extra_arg)
{
    g_autofree char *state_arg =
        fixture.state_dir ? g_strconcat("--state-dir=", fixture.state_dir, NULL) : NULL;
    const char *args[] = {fixture.endpoint_arg,
                          "--relist-period=100ms",
                          "--metrics-bind-address=127.0.0.1:0",
                          fixture.socket_arg,
                          state_arg ? state_arg : extra_arg,
                          state_arg ? extra_arg : NULL,
                          NULL};
    int out_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);

    ck_assert_int_ge(out_fd, 0);
    g_clear_pointer(&fixture.plegd, plegd_runner_free);
    g_clear_pointer(&fixture.base, g_free);
    fixture.plegd = plegd_runner_spawn_full(env, out_fd, args);
    fixture.base = plegd_runner_wait_metrics_url(fixture.plegd);
}

static double
get_metric(const char *series)
{
    g_autofree char *url = g_strconcat(fixture.base, "/metrics", NULL);
    g_autofree char *body = NULL;
    g_autofree char *needle = g_strconcat("\n", series, " ", NULL);
    const char *line;

    ck_assert_uint_eq(http_request("GET", url, &body, NULL), 200);
    line = strstr(body, needle);
    ck_assert_msg(line, "no %s in:\n%s", series, body);
    return g_ascii_strtod(line + strlen(needle), NULL);
}

static guint
get_path(const char *path, char **ret_body)
{
    g_autofree char *url = g_strconcat(fixture.base, path, NULL);

    return http_request("GET", url, ret_body, NULL);
}

/* ---- settling ---- */

static gboolean
all_received(void)
{
    for (guint i = 0; i < fixture.order->len; i++) {
        const Ctr *ctr = fixture.order->pdata[i];

        for (int t = 0; t < N_TYPES; t++)
            if (ctr->got[t] != ctr->want[t])
                return FALSE;
    }
    return TRUE;
}

static char *
describe_missing(void)
{
    GString *text = g_string_new(NULL);

    for (guint i = 0; i < fixture.order->len; i++) {
        const Ctr *ctr = fixture.order->pdata[i];

        for (int t = 0; t < N_TYPES; t++)
            if (ctr->got[t] != ctr->want[t])
                g_string_append_printf(text, " %s %s (%u of %u);", ctr->id, type_names[t],
                                       ctr->got[t], ctr->want[t]);
    }
    return g_string_free(text, FALSE);
}

static void
mark_settled(void)
{
    for (guint i = 0; i < fixture.order->len; i++)
        ((Ctr *)fixture.order->pdata[i])->touched = FALSE;
}

static void
fail_missing(const char *what)
{
    g_autofree char *missing = describe_missing();
    g_autofree char *err = plegd_runner_get_stderr(fixture.plegd);

    ck_abort_msg("%s; missing:%s\nplegd's stderr:\n%s", what, missing, err);
}

/* Waits until the consumer has every event the test made happen; @quiet: then two more relists
 * that must bring nothing (a duplicate fails handle_line()). */
static void
settle(gboolean quiet)
{
    gint64 end = deadline();

    while (!all_received()) {
        if (!consumer_pump(20 * 1000))
            fail_missing("the stream ended");
        if (g_get_monotonic_time() > end)
            fail_missing("the events did not all come");
    }
    if (quiet) {
        double relists = get_metric("kubelet_pleg_relist_duration_seconds_count");

        while (get_metric("kubelet_pleg_relist_duration_seconds_count") < relists + 2) {
            ck_assert_msg(consumer_pump(20 * 1000), "the stream ended");
            ck_assert_msg(g_get_monotonic_time() < end, "plegd does not relist");
        }
        /* A commit under way when the relists were counted. */
        ck_assert(consumer_pump(1));
    }
    mark_settled();
}

/* settle(FALSE), or the death of a plegd by SIGKILL (a crash hook): returns TRUE then. */
static gboolean
settle_or_die(void)
{
    gint64 end = deadline();

    while (!all_received()) {
        if (!consumer_pump(20 * 1000)) {
            int status = plegd_runner_wait_exit(fixture.plegd);

            ck_assert_msg(status == 128 + SIGKILL, "plegd exited with %d, not by SIGKILL", status);
            return TRUE;
        }
        if (g_get_monotonic_time() > end)
            fail_missing("the events did not all come, and plegd lives");
    }
    mark_settled();
    return FALSE;
}

/* ---- fixture ---- */

static void
setup_world(gboolean with_state)
{
    g_autofree char *path = NULL;
    g_autoptr(GError) error = NULL;

    memset(&fixture, 0, sizeof fixture);
    fixture.dir = make_tmpdir();
    if (with_state)
        fixture.state_dir = g_build_filename(fixture.dir, "state", NULL);
    path = g_build_filename(fixture.dir, "cri.sock", NULL);
    fixture.sim = cri_sim_new(path, &error);
    ck_assert_msg(fixture.sim, "%s", error ? error->message : "");
    fixture.endpoint_arg = g_strdup_printf("--container-runtime-endpoint=unix://%s", path);
    g_free(path);
    path = g_build_filename(fixture.dir, "plegd.sock", NULL);
    fixture.socket_arg = g_strconcat("--socket=", path, NULL);
    fixture.address = g_unix_socket_address_new(path);
    fixture.ctrs = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, (GDestroyNotify)ctr_free);
    fixture.order = g_ptr_array_new();
    fixture.pods = g_ptr_array_new_with_free_func(g_free);
    /* The seed is printed for a failure to be replayed with PLEGD_RESTART_SEED. */
    {
        const char *seed_text = g_getenv("PLEGD_RESTART_SEED");
        guint32 seed =
            seed_text ? (guint32)g_ascii_strtoull(seed_text, NULL, 10) : (guint32)g_get_real_time();

        g_print("PLEGD_RESTART_SEED=%u\n", seed);
        fixture.rand = g_rand_new_with_seed(seed);
    }
    fixture.expect_initial = TRUE;
}

/* What the node has before plegd's first start: 3 pods, 6 running containers and 2 that
 * exited an hour ago. */
static void
add_initial_state(void)
{
    for (guint i = 0; i < 3; i++)
        add_pod();
    for (guint i = 0; i < 6; i++)
        add_container(FALSE);
    for (guint i = 0; i < 2; i++)
        add_container(TRUE);
}

/* The first start: the first relist's events, all initial. */
static void
first_start(const char *const *env)
{
    add_initial_state();
    plegd_start(env, NULL);
    consumer_connect();
    settle(TRUE);
    fixture.expect_initial = FALSE;
}

static void
remove_dir(const char *dir)
{
    if (dir && g_file_test(dir, G_FILE_TEST_IS_DIR))
        remove_tmpdir(dir);
}

static void
teardown(void)
{
    g_clear_pointer(&fixture.client, client_free);
    g_clear_pointer(&fixture.plegd, plegd_runner_free);
    g_clear_pointer(&fixture.sim, cri_sim_free);
    if (fixture.mount)
        umount2(fixture.mount, MNT_DETACH);
    remove_dir(fixture.state_dir);
    remove_dir(fixture.dir);
    g_free(fixture.mount);
    g_free(fixture.dir);
    g_free(fixture.state_dir);
    g_free(fixture.endpoint_arg);
    g_free(fixture.base);
    g_free(fixture.socket_arg);
    g_clear_object(&fixture.address);
    g_free(fixture.instance);
    g_free(fixture.end_reason);
    g_clear_pointer(&fixture.ctrs, g_hash_table_unref);
    g_clear_pointer(&fixture.order, g_ptr_array_unref);
    g_clear_pointer(&fixture.pods, g_ptr_array_unref);
    g_clear_pointer(&fixture.rand, g_rand_free);
}

/* ---- restarts ---- */

/* Three restarts by @signum while containers start, exit and go: before each stop two settled
 * rounds, then one plegd may or may not see; while it is down one more. */
static void
run_restarts(int signum)
{
    setup_world(TRUE);
    first_start(NULL);
    for (guint restart = 0; restart < 3; restart++) {
        int status;

        for (guint round = 0; round < 2; round++) {
            churn(4, 3, 3, FALSE);
            settle(FALSE);
        }
        churn(4, 3, 3, FALSE);
        status = plegd_runner_stop(fixture.plegd, signum);
        consumer_drain();
        if (signum == SIGTERM) {
            ck_assert_int_eq(status, 0);
            ck_assert_str_eq(fixture.end_reason, "shutting_down");
        } else {
            ck_assert_int_eq(status, 128 + SIGKILL);
        }
        churn(2, 2, 2, TRUE);

        plegd_start(NULL, NULL);
        consumer_connect();
        settle(TRUE);
    }
    churn(3, 3, 3, FALSE);
    settle(TRUE);
    ck_assert_uint_gt(fixture.n_events, 100);
    ck_assert_uint_ge(fixture.n_pods_removed, 2);
    ck_assert_double_eq(get_metric("plegd_events_last_seq"), (double)fixture.last_seq);
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
}

START_TEST(test_restart_sigterm)
{
    run_restarts(SIGTERM);
}
END_TEST

START_TEST(test_restart_sigkill)
{
    run_restarts(SIGKILL);
}
END_TEST

/* ---- crash points ---- */

static const char *const crash_steps[] = {
    "append-before-write", "append-torn",         "append-before-fsync",   "append-after-fsync",
    "compact-tmp-created", "compact-tmp-written", "compact-before-rename", "compact-after-rename",
};

/* For each crash point, three times (the 1st, 2nd, 3rd visit): plegd with the hook, churned
 * until it dies, changes while it is down, plegd without the hook, the consumer resumes. */
START_TEST(test_crash_points)
{
    const char *const compact_env[] = {"PLEGD_STATE_COMPACT_EVERY=3", NULL};
    guint n_iterations = 0;

    setup_world(TRUE);
    first_start(compact_env);
    for (gsize s = 0; s < G_N_ELEMENTS(crash_steps); s++) {
        for (guint n = 1; n <= 3; n++) {
            g_autofree char *crash_at =
                g_strdup_printf("PLEGD_STATE_CRASH_AT=%s:%u", crash_steps[s], n);
            const char *const env[] = {crash_at, compact_env[0], NULL};
            gboolean died = FALSE;

            ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
            consumer_drain();
            plegd_start(env, NULL);
            consumer_connect();
            for (guint round = 0; round < 30 && !died; round++) {
                churn(2, 2, 2, FALSE);
                died = settle_or_die();
            }
            ck_assert_msg(died, "plegd never reached %s", crash_at);
            consumer_drain();
            churn(1, 1, 1, TRUE);

            plegd_start(compact_env, NULL);
            consumer_connect();
            settle(TRUE);
            n_iterations++;
        }
    }
    ck_assert_uint_ge(n_iterations, 20);
    ck_assert_uint_ge(fixture.n_pods_removed, 20);
    ck_assert_double_gt(get_metric("plegd_state_compactions_total"), 0);
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
}
END_TEST

/* ---- no aliasing ---- */

/* A cursor of the previous process, without instance= and with it: 410 naming why. */
static void
assert_cursor_gone(guint64 old_seq, const char *old_instance)
{
    const char *queries[] = {"", old_instance};

    for (gsize i = 0; i < G_N_ELEMENTS(queries); i++) {
        g_autofree char *query = g_strdup_printf("?since=%" G_GUINT64_FORMAT "%s%s", old_seq,
                                                 i ? "&instance=" : "", queries[i]);
        g_autoptr(Client) client = client_open(query);
        g_autoptr(JsonObject) answer = NULL;
        const char *error;

        client_wait_head(client);
        client_wait_end(client);
        ck_assert_msg(client->status == 410, "GET /events%s: %s%s", query, client->head,
                      client->raw->str);
        answer = parse_object(client->raw->str);
        ck_assert_str_eq(json_object_get_string_member(answer, "reason"), "gone");
        error = json_object_get_string_member(answer, "error");
        if (i == 0)
            ck_assert_msg(strstr(error, "is older than this plegd's history"), "%s", error);
        else
            ck_assert_msg(strstr(error, "is not this plegd's history"), "%s", error);
        ck_assert_msg(json_object_get_int_member(answer, "oldest_seq") > (gint64)old_seq, "%s",
                      client->raw->str);
    }
}

/* Restarted with its history lost: the old cursor gets 410, and the new history (read from its
 * start) has seqs above every old one, its first relist's events initial. */
static void
run_aliasing(gboolean with_state)
{
    g_autofree char *old_instance = NULL;
    guint64 old_seq;

    setup_world(with_state);
    first_start(NULL);
    churn(3, 3, 3, FALSE);
    settle(TRUE);
    old_seq = fixture.last_seq;
    old_instance = g_strdup(fixture.instance);
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
    consumer_drain();
    if (with_state) {
        g_autofree char *file = g_build_filename(fixture.state_dir, "state.jsonl", NULL);

        ck_assert_int_eq(g_unlink(file), 0);
    }

    plegd_start(NULL, NULL);
    assert_cursor_gone(old_seq, old_instance);

    /* A new consumer: all of the new history, every event of it again, initial. */
    g_clear_pointer(&fixture.instance, g_free);
    fixture.last_seq = 0;
    fixture.expect_initial = TRUE;
    for (guint i = 0; i < fixture.order->len; i++) {
        Ctr *ctr = fixture.order->pdata[i];

        memset(ctr->got, 0, sizeof ctr->got);
        memset(ctr->want, 0, sizeof ctr->want);
        if (ctr->state == RUNNING)
            ctr->want[STARTED] = 1;
        else if (ctr->state == EXITED)
            ctr->want[DIED] = 1;
        /* What exited while plegd ran last is reported as plegd finds it. */
    }
    consumer_connect();
    ck_assert_str_ne(fixture.instance, old_instance);
    settle(TRUE);
    ck_assert_uint_gt(fixture.first_seq, old_seq);
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
}

START_TEST(test_aliasing_no_state)
{
    run_aliasing(FALSE);
}
END_TEST

START_TEST(test_aliasing_state_deleted)
{
    run_aliasing(TRUE);
}
END_TEST

/* ---- bad state ---- */

static void
wait_ready(void)
{
    gint64 end = deadline();

    while (get_path("/readyz", NULL) != 200)
        ck_assert_msg(g_get_monotonic_time() < end, "plegd never became ready");
}

static char *
get_state_line(void)
{
    g_autofree char *body = NULL;
    const char *line;

    ck_assert_uint_eq(get_path("/readyz?verbose", &body), 200);
    line = strstr(body, "[+]state ok (informational): ");
    ck_assert_msg(line, "no state line in:\n%s", body);
    return g_strndup(line, strcspn(line, "\n"));
}

/* A state.jsonl with a line that is not JSON: moved aside, said once, counted; plegd serves a
 * fresh history. */
START_TEST(test_corrupt_state)
{
    static const char corrupt[] = "{\"plegd_state\":1,\"instance\":\"i\",\"first_seq\":5}\n"
                                  "{\"seq\":5,\"time\":\n";
    g_autofree char *file = NULL;
    g_autofree char *state_line = NULL;
    g_autofree char *aside = NULL;
    g_autofree char *contents = NULL;
    g_autofree char *err = NULL;
    g_autoptr(GError) error = NULL;
    g_autoptr(GDir) dir = NULL;
    const char *name;
    guint n_aside = 0;

    setup_world(TRUE);
    ck_assert_int_eq(g_mkdir(fixture.state_dir, 0700), 0);
    file = g_build_filename(fixture.state_dir, "state.jsonl", NULL);
    ck_assert(g_file_set_contents_full(file, corrupt, -1, G_FILE_SET_CONTENTS_NONE, 0600, &error));
    first_start(NULL);
    wait_ready();

    ck_assert_double_eq(get_metric("plegd_state_problems_total{reason=\"corrupt\"}"), 1);
    ck_assert_double_eq(get_metric("plegd_state_durable"), 1);
    state_line = get_state_line();
    ck_assert_msg(
        strstr(state_line, "fresh: state.jsonl was corrupt (line 2: not JSON), moved to ") &&
            strstr(state_line, "/state.jsonl.bad-"),
        "%s", state_line);

    dir = g_dir_open(fixture.state_dir, 0, &error);
    ck_assert(dir);
    while ((name = g_dir_read_name(dir))) {
        if (g_str_has_prefix(name, "state.jsonl.bad-")) {
            n_aside++;
            aside = g_build_filename(fixture.state_dir, name, NULL);
        }
    }
    ck_assert_uint_eq(n_aside, 1);
    ck_assert(strstr(state_line, aside));
    ck_assert(g_file_get_contents(aside, &contents, NULL, &error));
    ck_assert_str_eq(contents, corrupt);
    ck_assert(g_file_test(file, G_FILE_TEST_IS_REGULAR));

    churn(2, 2, 2, FALSE);
    settle(TRUE);
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(fixture.plegd);
    ck_assert_msg(count_messages(err, "state:") == 1 && count_messages(err, "was corrupt") == 1,
                  "%s", err);
}
END_TEST

/* Fills @dir's file system with one file; returns its path. */
static char *
fill_up(const char *dir)
{
    g_autofree char *path = g_build_filename(dir, "filler", NULL);
    char block[4096] = {0};
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

    ck_assert_int_ge(fd, 0);
    for (;;) {
        ssize_t n = write(fd, block, sizeof block);

        if (n < 0) {
            ck_assert_int_eq(errno, ENOSPC);
            break;
        }
    }
    close(fd);
    return g_steal_pointer(&path);
}

/* The state directory on a small tmpfs that fills up mid-run: events are still published, from
 * memory, and said so; space freed, the state is durable again, and a restart resumes. */
START_TEST(test_state_disk_full)
{
    g_autofree char *filler = NULL;
    g_autofree char *state_line = NULL;
    g_autofree char *old_instance = NULL;
    guint64 old_last_seq;
    gint64 end;

    ck_assert_msg(private_mounts, "needs root: a mount namespace of the test's own");
    setup_world(TRUE);
    ck_assert_int_eq(g_mkdir(fixture.state_dir, 0700), 0);
    ck_assert_msg(mount("tmpfs", fixture.state_dir, "tmpfs", 0, "size=64k,mode=0700") == 0,
                  "mount tmpfs: %s", g_strerror(errno));
    fixture.mount = g_strdup(fixture.state_dir);
    first_start(NULL);
    wait_ready();
    ck_assert_double_eq(get_metric("plegd_state_durable"), 1);

    filler = fill_up(fixture.state_dir);
    old_instance = g_strdup(fixture.instance);
    old_last_seq = fixture.last_seq;
    /* Until an append needs a page the tmpfs does not have: that batch cannot be made durable,
     * so it starts a new history, and the stream says so as it ends. */
    end = deadline();
    while (consumer_pump(20 * 1000)) {
        ck_assert_msg(g_get_monotonic_time() < end, "the state stays durable on a full disk");
        if (all_received())
            churn(3, 2, 2, FALSE);
    }
    ck_assert_pstr_eq(fixture.end_reason, "history_changed");
    ck_assert_double_eq(get_metric("plegd_state_durable"), 0);
    ck_assert_double_eq(get_metric("plegd_state_problems_total{reason=\"write\"}"), 1);
    state_line = get_state_line();
    ck_assert_msg(strstr(state_line, "not durable: ") &&
                      strstr(state_line, "No space left on device"),
                  "%s", state_line);
    wait_ready();

    /* The old cursor is refused, whatever the instance. */
    {
        g_autofree char *query = g_strdup_printf("?since=%" G_GUINT64_FORMAT "&instance=%s",
                                                 old_last_seq, old_instance);
        g_autoptr(Client) old = client_open(query);

        client_wait_end(old);
        ck_assert_uint_eq(old->status, 410);
    }
    /* The client relists, then follows the new history from its start: the events it did not
     * get under the old one are there, each once, seqs far above the old ones. */
    g_clear_pointer(&fixture.instance, g_free);
    fixture.last_seq = 0;
    consumer_connect();
    ck_assert_str_ne(fixture.instance, old_instance);
    churn(3, 2, 2, FALSE);
    settle(FALSE);
    ck_assert_uint_ge(fixture.first_seq, old_last_seq + (G_GUINT64_CONSTANT(1) << 32));

    ck_assert_int_eq(g_unlink(filler), 0);
    end = deadline();
    while (get_metric("plegd_state_durable") != 1) {
        ck_assert_msg(g_get_monotonic_time() < end, "the state is not durable again");
        churn(2, 1, 1, FALSE);
        settle(FALSE);
    }
    g_clear_pointer(&state_line, g_free);
    state_line = get_state_line();
    ck_assert_msg(strstr(state_line, "durable in "), "%s", state_line);
    churn(3, 2, 2, FALSE);
    settle(FALSE);

    /* Every event since the start, durable: the consumer resumes after a restart. */
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
    consumer_drain();
    churn(2, 2, 2, TRUE);
    plegd_start(NULL, NULL);
    consumer_connect();
    settle(TRUE);
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
}
END_TEST

static Suite *
restart_suite(void)
{
    Suite *suite = suite_create("plegd-restart");
    TCase *tc = tcase_create("restart");

    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_restart_sigterm);
    tcase_add_test(tc, test_restart_sigkill);
    tcase_add_test(tc, test_aliasing_no_state);
    tcase_add_test(tc, test_aliasing_state_deleted);
    tcase_add_test(tc, test_corrupt_state);
    tcase_add_test(tc, test_state_disk_full);
    suite_add_tcase(suite, tc);

    tc = tcase_create("crash-points");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_crash_points);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    SRunner *runner;
    int n_failed;

    /* A mount namespace of the process's own (for the tmpfs), made while it has one thread; the
     * tests that need none run without root too. */
    if (geteuid() == 0) {
        if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
            g_printerr("test-plegd-restart: a private mount namespace: %s\n", g_strerror(errno));
            return EXIT_FAILURE;
        }
        private_mounts = TRUE;
    }
    runner = srunner_create(restart_suite());
    srunner_set_fork_status(runner, CK_FORK);
    srunner_run_all(runner, CK_NORMAL);
    n_failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return n_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
