/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GET /events against cri-sim: two clients, one paused, both get every event in order; a client
 * that stalls while more events than the ring holds pass is cut off with the documented last
 * line, and its resume answers 410; a resume after a disconnect gets exactly the missed events;
 * 100 clients that do not read during a storm of 5000 events keep plegd's RSS bounded; the
 * stream outlives the idle timeout; curl -N (and the README's curl | jq consumer) works.
 *
 * The clients speak HTTP/1.1 over plegd's unix socket (over TCP where a test says so, with
 * --serve-events-over-tcp=loopback-unauthenticated) and decode the chunked body themselves, so
 * that a test decides exactly when a client reads.
 */
#include <fcntl.h>
#include <json-glib/json-glib.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cri-sim.h"
#include "plegd-runner.h"

typedef struct {
    char *dir;
    CriSim *sim;
    char *endpoint_arg;
    PlegdRunner *plegd;
    char *base;  /* TCP: /metrics */
    guint16 port;
    gboolean over_tcp;       /* /events over TCP rather than the socket */
    char *api;               /* where /events is asked for: the socket, or TCP */
    GSocketAddress *address; /* the same, for the clients' own sockets */
} Fixture;

static Fixture fixture;

static gint64
deadline(void)
{
#ifdef __SANITIZE_THREAD__
    /* ThreadSanitizer slows plegd and cri-sim down 5 to 15 times: the storm takes minutes. */
    return g_get_monotonic_time() + 240 * G_USEC_PER_SEC;
#else
    return g_get_monotonic_time() + (g_getenv("PLEGD_TEST_WRAPPER") ? 120 : 30) * G_USEC_PER_SEC;
#endif
}

static void
setup(void)
{
    g_autofree char *path = NULL;
    g_autoptr(GError) error = NULL;

    fixture.dir = make_tmpdir();
    path = g_build_filename(fixture.dir, "cri.sock", NULL);
    fixture.sim = cri_sim_new(path, &error);
    ck_assert_msg(fixture.sim, "%s", error ? error->message : "");
    fixture.endpoint_arg = g_strdup_printf("--container-runtime-endpoint=unix://%s", path);
}

static void
teardown(void)
{
    g_clear_pointer(&fixture.plegd, plegd_runner_free);
    g_clear_pointer(&fixture.sim, cri_sim_free);
    g_clear_pointer(&fixture.base, g_free);
    g_clear_pointer(&fixture.api, g_free);
    g_clear_object(&fixture.address);
    remove_tmpdir(fixture.dir);
    g_clear_pointer(&fixture.dir, g_free);
    g_clear_pointer(&fixture.endpoint_arg, g_free);
}

/* plegd with stdout on /dev/null: the storm's lines would only fill the test's memory. */
static void
start_plegd_full(gboolean capture_stdout, const char *arg1, const char *arg2)
{
    /* Seqs counted from 1, not from the clock: the tests name them. */
    const char *args[] = {fixture.endpoint_arg,
                          "--relist-period=100ms",
                          "--metrics-bind-address=127.0.0.1:0",
                          "--events-first-seq=1",
                          fixture.over_tcp ? "--serve-events-over-tcp=loopback-unauthenticated"
                                           : "--serve-events-over-tcp=no",
                          arg1,
                          arg2,
                          NULL};
    const char *colon;
    int out_fd = -1;

    if (!capture_stdout) {
        out_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
        ck_assert_int_ge(out_fd, 0);
    }
#ifdef __SANITIZE_ADDRESS__
    /* ASan holds freed blocks in a quarantine of 256 MiB: RSS would measure that, not plegd. */
    g_autofree char *asan = g_strdup_printf("ASAN_OPTIONS=%s%squarantine_size_mb=0",
                                            g_getenv("ASAN_OPTIONS") ?: "",
                                            g_getenv("ASAN_OPTIONS") ? ":" : "");
    const char *const env[] = {asan, NULL};
#else
    const char *const *env = NULL;
#endif
    fixture.plegd = plegd_runner_spawn_full(env, out_fd, args);
    fixture.base = plegd_runner_wait_metrics_url(fixture.plegd);
    colon = strrchr(fixture.base, ':');
    fixture.port = (guint16)g_ascii_strtoull(colon + 1, NULL, 10);
    if (fixture.over_tcp) {
        g_autoptr(GInetAddress) loopback = g_inet_address_new_loopback(G_SOCKET_FAMILY_IPV4);

        fixture.api = g_strdup(fixture.base);
        fixture.address = g_inet_socket_address_new(loopback, fixture.port);
    } else {
        fixture.api = plegd_runner_get_api_url(fixture.plegd);
        fixture.address = socket_address_from_url(fixture.api, NULL);
    }
}

#define start_plegd(arg1, arg2) start_plegd_full(TRUE, (arg1), (arg2))

/* The value of an unlabelled (or fully spelled) series on /metrics. */
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

static void
wait_metric(const char *series, double value)
{
    gint64 end = deadline();

    while (get_metric(series) != value) {
        ck_assert_msg(g_get_monotonic_time() < end, "%s never became %g (is %g)", series, value,
                      get_metric(series));
        g_usleep(20 * 1000);
    }
}

/* Adds @n_pods pods of one running container: 2 ContainerStarted each with the next relist. */
static void
add_pods(guint n_pods)
{
    cri_sim_bulk(fixture.sim, n_pods, 1);
}

/* ---- a streaming client ---- */

typedef struct {
    GSocket *socket;
    char *head;       /* the answer's status line and headers */
    GString *raw;     /* received and not decoded yet */
    GString *body;    /* decoded body, complete lines removed */
    GPtrArray *lines; /* char *, without newline */
    guint status;
    gboolean head_done;
    gboolean body_done; /* the last chunk came */
    gboolean eof;
} Client;

static void
client_free(Client *client)
{
    if (!client)
        return;
    g_object_unref(client->socket);
    g_free(client->head);
    g_string_free(client->raw, TRUE);
    g_string_free(client->body, TRUE);
    g_ptr_array_unref(client->lines);
    g_free(client);
}
G_DEFINE_AUTOPTR_CLEANUP_FUNC(Client, client_free)

/* @rcvbuf: 0, or a small receive buffer, so that a client that does not read soon stalls plegd's
 * writes to it. */
static Client *
client_open(const char *query, int rcvbuf)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *request =
        g_strdup_printf("GET /events%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", query ? query : "");
    Client *client = g_new0(Client, 1);

    client->socket = g_socket_new(g_socket_address_get_family(fixture.address),
                                  G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_DEFAULT, &error);
    ck_assert_msg(client->socket, "%s", error ? error->message : "");
    /* On the socket, plegd's send buffer alone bounds what is in flight. */
    if (rcvbuf > 0)
        ck_assert(g_socket_set_option(client->socket, SOL_SOCKET, SO_RCVBUF, rcvbuf, NULL));
    ck_assert_msg(g_socket_connect(client->socket, fixture.address, NULL, &error), "%s",
                  error ? error->message : "");
    ck_assert(g_socket_send(client->socket, request, strlen(request), NULL, NULL) ==
              (gssize)strlen(request));
    client->raw = g_string_new(NULL);
    client->body = g_string_new(NULL);
    client->lines = g_ptr_array_new_with_free_func(g_free);
    return client;
}

static void
decode(Client *client)
{
    if (!client->head_done) {
        const char *end = strstr(client->raw->str, "\r\n\r\n");

        if (!end)
            return;
        ck_assert_msg(g_str_has_prefix(client->raw->str, "HTTP/1.1 "), "%s", client->raw->str);
        client->status = (guint)g_ascii_strtoull(client->raw->str + 9, NULL, 10);
        if (client->status == 200)
            ck_assert_msg(strstr(client->raw->str, "Transfer-Encoding: chunked\r\n") &&
                              strstr(client->raw->str, "Content-Type: application/x-ndjson"),
                          "%s", client->raw->str);
        client->head = g_strndup(client->raw->str, end + 2 - client->raw->str);
        g_string_erase(client->raw, 0, end + 4 - client->raw->str);
        client->head_done = TRUE;
    }
    while (client->status == 200 && !client->body_done) {
        const char *crlf = strstr(client->raw->str, "\r\n");
        guint64 size;
        gsize header;

        if (!crlf)
            break;
        size = g_ascii_strtoull(client->raw->str, NULL, 16);
        header = crlf + 2 - client->raw->str;
        if (client->raw->len < header + size + 2)
            break;
        if (size == 0) {
            client->body_done = TRUE;
            break;
        }
        g_string_append_len(client->body, client->raw->str + header, (gssize)size);
        g_string_erase(client->raw, 0, (gssize)(header + size + 2));
    }
    for (;;) {
        const char *newline = strchr(client->body->str, '\n');

        if (!newline)
            break;
        g_ptr_array_add(client->lines, g_strndup(client->body->str, newline - client->body->str));
        g_string_erase(client->body, 0, newline + 1 - client->body->str);
    }
}

/* Reads what is there, waiting up to @timeout_usec for something.  Returns: FALSE at the end. */
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
    decode(client);
    return TRUE;
}

static void
client_wait_head(Client *client, guint status)
{
    gint64 end = deadline();

    while (!client->head_done && client_read(client, end - g_get_monotonic_time()))
        ck_assert_msg(g_get_monotonic_time() < end, "no answer to GET /events");
    ck_assert_msg(client->head_done, "no answer to GET /events: %s", client->raw->str);
    ck_assert_uint_eq(client->status, status);
}

static void
client_wait_lines(Client *client, guint n_lines)
{
    gint64 end = deadline();

    while (client->lines->len < n_lines) {
        if (!client_read(client, end - g_get_monotonic_time()) || g_get_monotonic_time() >= end)
            break;
    }
    ck_assert_msg(client->lines->len >= n_lines, "%u lines of %u came%s; undecoded: %.200s",
                  client->lines->len, n_lines, client->eof ? ", then the end of the stream" : "",
                  client->raw->str);
}

static void
client_wait_eof(Client *client)
{
    gint64 end = deadline();

    while (client_read(client, end - g_get_monotonic_time()))
        ck_assert_msg(g_get_monotonic_time() < end, "the stream did not end");
}

static guint64
line_seq(const char *line)
{
    ck_assert_msg(g_str_has_prefix(line, "{\"seq\":"), "%s", line);
    return g_ascii_strtoull(line + strlen("{\"seq\":"), NULL, 10);
}

/* Lines @from.. of @client have seq @first_seq, @first_seq + 1, ... */
static void
assert_consecutive(Client *client, guint from, guint n, guint64 first_seq)
{
    ck_assert_uint_ge(client->lines->len, from + n);
    for (guint i = 0; i < n; i++) {
        const char *line = client->lines->pdata[from + i];

        ck_assert_msg(line_seq(line) == first_seq + i,
                      "line %u is %s, expected seq %" G_GUINT64_FORMAT, from + i, line,
                      first_seq + i);
    }
}

/* @lines have seq @first_seq, @first_seq + 1, ... */
static void
assert_consecutive_lines(GPtrArray *lines, guint64 first_seq)
{
    for (guint i = 0; i < lines->len; i++)
        ck_assert_msg(line_seq(lines->pdata[i]) == first_seq + i, "line %u is %s", i,
                      (char *)lines->pdata[i]);
}

/* The value of @name in the answer's headers. */
static char *
client_get_header(Client *client, const char *name)
{
    g_autofree char *needle = g_strconcat("\r\n", name, ": ", NULL);
    const char *start = strstr(client->head, needle);

    ck_assert_msg(start, "no %s header in:\n%s", name, client->head);
    start += strlen(needle);
    return g_strndup(start, strcspn(start, "\r"));
}

static JsonObject *
parse_object(const char *text)
{
    g_autoptr(JsonParser) parser = json_parser_new();
    g_autoptr(GError) error = NULL;

    ck_assert_msg(json_parser_load_from_data(parser, text, -1, &error), "%s: %s", text,
                  error ? error->message : "");
    ck_assert(JSON_NODE_HOLDS_OBJECT(json_parser_get_root(parser)));
    return json_object_ref(json_node_get_object(json_parser_get_root(parser)));
}

/* ---- tests ---- */

/* On the socket (_i 0) and over TCP with --serve-events-over-tcp=loopback-unauthenticated. */
START_TEST(test_two_clients_one_paused)
{
    g_autoptr(Client) reader = NULL;
    g_autoptr(Client) paused = NULL;
    g_autofree char *out = NULL;
    g_auto(GStrv) stdout_lines = NULL;

    fixture.over_tcp = _i == 1;
    start_plegd(NULL, NULL);
    reader = client_open(NULL, 0);
    paused = client_open(NULL, 4096);
    client_wait_head(reader, 200);
    client_wait_head(paused, 200);
    wait_metric("plegd_events_clients", 2);

    /* 1000 events while one client reads nothing. */
    add_pods(500);
    client_wait_lines(reader, 1000);
    assert_consecutive(reader, 0, 1000, 1);
    wait_metric("plegd_events_last_seq", 1000);

    /* The other one resumes: every event, in order, none twice. */
    client_wait_lines(paused, 1000);
    assert_consecutive(paused, 0, 1000, 1);
    for (guint i = 0; i < 1000; i++)
        ck_assert_str_eq(paused->lines->pdata[i], reader->lines->pdata[i]);

    /* The same objects as on stdout, seq included. */
    ck_assert(plegd_runner_wait_stdout(fixture.plegd, "{\"seq\":1000,"));
    out = plegd_runner_get_stdout(fixture.plegd);
    stdout_lines = g_strsplit(out, "\n", -1);
    ck_assert_uint_ge(g_strv_length(stdout_lines), 1000);
    for (guint i = 0; i < 1000; i++)
        ck_assert_str_eq(stdout_lines[i], reader->lines->pdata[i]);
    ck_assert_double_eq(
        get_metric("plegd_events_clients_disconnected_total{reason=\"slow_consumer\"}"), 0);
}
END_TEST

/* A client that reads nothing while more events pass than the ring holds is cut off with the
 * documented last line; the events before it are all there, in order. */
START_TEST(test_slow_consumer_cut_off)
{
    g_autoptr(Client) reader = NULL;
    g_autoptr(Client) stalled = NULL;
    g_autoptr(Client) resumed = NULL;
    g_autoptr(JsonObject) last = NULL;
    g_autoptr(JsonObject) gone = NULL;
    g_autofree char *err = NULL;
    g_autofree char *query = NULL;
    guint n_events = 0;
    guint64 last_seq;

    start_plegd("--events-ring-size=1000", NULL);
    reader = client_open(NULL, 0);
    stalled = client_open(NULL, 4096);
    client_wait_head(reader, 200);
    client_wait_head(stalled, 200);

    /* Bursts of 200 events (the ring holds every burst whole): the reader keeps up, the other
     * client's unsent events fill the ring and then leave it. */
    while (get_metric("plegd_events_clients_disconnected_total{reason=\"slow_consumer\"}") == 0) {
        ck_assert_msg(n_events < 40000, "%u events and no client was cut off", n_events);
        add_pods(100);
        n_events += 200;
        client_wait_lines(reader, n_events);
    }
    g_print("a client that did not read was cut off after %u events\n", n_events);
    assert_consecutive(reader, 0, n_events, 1);
    ck_assert_msg(!reader->eof, "the client that reads was cut off too");

    /* The stalled client reads now: consecutive events from seq 1, then why it ends. */
    client_wait_eof(stalled);
    ck_assert_uint_ge(stalled->lines->len, 2);
    last = parse_object(stalled->lines->pdata[stalled->lines->len - 1]);
    ck_assert_str_eq(json_object_get_string_member(last, "reason"), "slow_consumer");
    ck_assert_msg(
        g_str_has_prefix(json_object_get_string_member(last, "error"), "slow consumer: seq "), "%s",
        json_object_get_string_member(last, "error"));
    assert_consecutive(stalled, 0, stalled->lines->len - 1, 1);
    last_seq = line_seq(stalled->lines->pdata[stalled->lines->len - 2]);
    ck_assert_uint_eq((guint64)json_object_get_int_member(last, "next_seq"), last_seq + 1);
    ck_assert(stalled->body_done);

    /* Resuming after its last event is too late: 410, and the oldest seq kept. */
    query = g_strdup_printf("?since=%" G_GUINT64_FORMAT, last_seq);
    resumed = client_open(query, 0);
    client_wait_eof(resumed);
    ck_assert_uint_eq(resumed->status, 410);
    {
        const char *body = strstr(resumed->raw->str, "{");

        ck_assert_msg(body, "%s", resumed->raw->str);
        gone = parse_object(body);
    }
    ck_assert_str_eq(json_object_get_string_member(gone, "reason"), "gone");
    ck_assert_uint_gt((guint64)json_object_get_int_member(gone, "oldest_seq"), last_seq + 1);
    ck_assert_double_eq(get_metric("plegd_events_refused_total{reason=\"gone\"}"), 1);

    err = plegd_runner_get_stderr(fixture.plegd);
    ck_assert_msg(count_messages(err, "an /events client does not read fast enough") == 1, "%s",
                  err);
}
END_TEST

/* After a disconnect, since=SEQ gives exactly what was missed, then live events. */
START_TEST(test_resume_after_disconnect)
{
    g_autoptr(Client) first = NULL;
    g_autoptr(Client) again = NULL;
    g_autoptr(Client) all = NULL;
    g_autoptr(Client) other = NULL;
    g_autofree char *instance = NULL;
    g_autofree char *query = NULL;

    start_plegd(NULL, NULL);
    first = client_open(NULL, 0);
    client_wait_head(first, 200);
    instance = client_get_header(first, "Plegd-Instance");
    ck_assert_uint_eq(strlen(instance), 36);
    add_pods(10);
    client_wait_lines(first, 20);
    assert_consecutive(first, 0, 20, 1);
    g_clear_pointer(&first, client_free);
    wait_metric("plegd_events_clients", 0);

    /* Missed while away. */
    add_pods(15);
    wait_metric("plegd_events_last_seq", 50);

    query = g_strdup_printf("?since=20&instance=%s", instance);
    again = client_open(query, 0);
    client_wait_head(again, 200);
    client_wait_lines(again, 30);
    assert_consecutive(again, 0, 30, 21);
    add_pods(5);
    client_wait_lines(again, 40);
    assert_consecutive(again, 0, 40, 21);
    /* Nothing twice: a repeated line would come before the next new one. */
    add_pods(1);
    client_wait_lines(again, 42);
    assert_consecutive(again, 0, 42, 21);

    /* The instance is a UUID: in upper case it is the same one. */
    {
        g_autofree char *upper = g_ascii_strup(instance, -1);
        g_autofree char *upper_query = g_strdup_printf("?since=20&instance=%s", upper);
        g_autoptr(Client) same = client_open(upper_query, 0);

        client_wait_head(same, 200);
    }

    /* The seqs of another plegd process: 410, whatever the seq. */
    other = client_open("?since=20&instance=0b9e5a52-0000-4000-8000-000000000000", 0);
    client_wait_eof(other);
    ck_assert_uint_eq(other->status, 410);
    ck_assert_msg(strstr(other->raw->str, "plegd restarted"), "%s", other->raw->str);

    /* since=0: everything since plegd started. */
    all = client_open("?since=0", 0);
    client_wait_lines(all, 62);
    assert_consecutive(all, 0, 62, 1);
}
END_TEST

/* Every fresh history but the tests' starts far above 1 (at the wall clock in microseconds):
 * since=0 is still its whole history, and a seq below its first is another history's. */
START_TEST(test_history_above_one)
{
    const guint64 first = G_GUINT64_CONSTANT(1796000000000000);
    g_autoptr(Client) all = NULL;
    g_autoptr(Client) older = NULL;

    /* The last --events-first-seq wins over the fixture's =1. */
    start_plegd("--events-first-seq=1796000000000000", NULL);
    add_pods(3);
    wait_metric("plegd_events_last_seq", (double)(first + 5));

    all = client_open("?since=0&follow=false", 0);
    client_wait_eof(all);
    ck_assert_uint_eq(all->status, 200);
    ck_assert_uint_eq(all->lines->len, 6);
    assert_consecutive(all, 0, 6, first);

    older = client_open("?since=20", 0);
    client_wait_eof(older);
    ck_assert_uint_eq(older->status, 410);
    ck_assert_msg(strstr(older->raw->str, "is older than this plegd's history"), "%s",
                  older->raw->str);
}
END_TEST

#define N_CLIENTS    100
#define N_STORM_PODS 2500 /* 5000 events */
/* RSS growth allowed over the storm.  Copies of every line per client would be 100 x 5000 x
 * ~170 bytes = 85 MB; the ring holds one copy (~1 MB), each client at most one chunk of 16 KiB,
 * and the PLEG's records and pod cache of 2500 pods some 10 MB (measured: +10 MB during the
 * storm, +14 MB once every client read everything). */
#ifdef __SANITIZE_ADDRESS__
/* ASan's redzones and allocator metadata (its quarantine is off for plegd here) roughly triple
 * what each allocation costs, and each of the up to 64 threads that inspect the storm's pods
 * (--max-status-calls-in-flight) gets its fake stack for detect_stack_use_after_return
 * (measured: +117 MB during the storm); per-client copies, some 250 MB more under ASan, still
 * exceed it. */
#define STORM_RSS_GROWTH_MAX_KIB (5 * 32 * 1024)
#define STORM_PLEGD_ARG          NULL
#elif defined(__SANITIZE_THREAD__)
/* ThreadSanitizer's shadow and meta shadow of every heap page plegd touches, and its allocator,
 * which keeps freed blocks cached per thread (measured: +80 MB during the storm, +102 MB once
 * every client read everything); per-client copies, 85 MB more in a plain build, still exceed it.
 * TSan also gives each thread a history of its own, megabytes each: the 64 threads that inspect
 * the storm's pods at the default bound took RSS past the allowance (+194 MB), so plegd inspects
 * with 8 here; the test is about the clients, not the inspection. */
#define STORM_RSS_GROWTH_MAX_KIB (5 * 32 * 1024)
#define STORM_PLEGD_ARG          "--max-status-calls-in-flight=8"
#else
#define STORM_RSS_GROWTH_MAX_KIB (32 * 1024)
#define STORM_PLEGD_ARG          NULL
#endif

START_TEST(test_storm_many_clients)
{
    g_autoptr(GPtrArray) clients = g_ptr_array_new_with_free_func((GDestroyNotify)client_free);
    g_autoptr(Client) extra = NULL;
    guint64 rss_before;
    guint64 rss_storm;
    guint64 rss_after;

    start_plegd_full(FALSE, "--events-max-clients=100", STORM_PLEGD_ARG);
    for (guint i = 0; i < N_CLIENTS; i++)
        g_ptr_array_add(clients, client_open(NULL, 0));
    for (guint i = 0; i < N_CLIENTS; i++)
        client_wait_head(clients->pdata[i], 200);
    wait_metric("plegd_events_clients", N_CLIENTS);

    /* One more than the cap: 503, counted. */
    extra = client_open(NULL, 0);
    client_wait_eof(extra);
    ck_assert_uint_eq(extra->status, 503);
    ck_assert_msg(strstr(extra->raw->str, "--events-max-clients"), "%s", extra->raw->str);
    ck_assert_double_eq(get_metric("plegd_events_refused_total{reason=\"too_many_clients\"}"), 1);

    /* The storm, while no client reads. */
    rss_before = plegd_runner_get_rss_kib(fixture.plegd);
    add_pods(N_STORM_PODS);
    wait_metric("plegd_events_last_seq", 2 * N_STORM_PODS);
    rss_storm = plegd_runner_get_rss_kib(fixture.plegd);

    /* Then every client reads every event, in order. */
    for (guint i = 0; i < N_CLIENTS; i++) {
        Client *client = clients->pdata[i];

        client_wait_lines(client, 2 * N_STORM_PODS);
        assert_consecutive(client, 0, 2 * N_STORM_PODS, 1);
        g_ptr_array_set_size(client->lines, 0);
    }
    rss_after = plegd_runner_get_rss_kib(fixture.plegd);
    g_print("plegd RSS: %" G_GUINT64_FORMAT " KiB with %u clients, %" G_GUINT64_FORMAT
            " KiB after %u events, %" G_GUINT64_FORMAT " KiB once all were read\n",
            rss_before, N_CLIENTS, rss_storm, 2 * N_STORM_PODS, rss_after);
    ck_assert_msg(rss_storm < rss_before + STORM_RSS_GROWTH_MAX_KIB,
                  "RSS grew from %" G_GUINT64_FORMAT " to %" G_GUINT64_FORMAT " KiB", rss_before,
                  rss_storm);
    ck_assert_msg(rss_after < rss_before + STORM_RSS_GROWTH_MAX_KIB,
                  "RSS grew from %" G_GUINT64_FORMAT " to %" G_GUINT64_FORMAT " KiB", rss_before,
                  rss_after);
    ck_assert_double_eq(
        get_metric("plegd_events_clients_disconnected_total{reason=\"slow_consumer\"}"), 0);
}
END_TEST

/* The idle timeout closes idle connections, never a stream. */
START_TEST(test_stream_outlives_idle_timeout)
{
    g_autoptr(Client) stream = NULL;
    g_autoptr(GSocket) idle = NULL;
    char c;

    start_plegd("--http-idle-timeout=500ms", NULL);
    stream = client_open(NULL, 0);
    client_wait_head(stream, 200);

    /* An idle connection opened after the stream: once plegd closed it, the stream has been
     * idle for longer than the timeout too. */
    idle = g_socket_new(g_socket_address_get_family(fixture.address), G_SOCKET_TYPE_STREAM,
                        G_SOCKET_PROTOCOL_DEFAULT, NULL);
    g_socket_set_timeout(idle, 30);
    ck_assert(g_socket_connect(idle, fixture.address, NULL, NULL));
    ck_assert_int_eq(g_socket_receive(idle, &c, 1, NULL, NULL), 0);

    add_pods(1);
    client_wait_lines(stream, 2);
    assert_consecutive(stream, 0, 2, 1);
    ck_assert(!stream->eof);
}
END_TEST

/* @query after /events: the status, the body in @ret_body. */
static guint
request_events(const char *method, const char *query, char **ret_body, char **ret_type)
{
    g_autofree char *url = g_strconcat(fixture.api, "/events", query, NULL);

    return http_request(method, url, ret_body, ret_type);
}

START_TEST(test_bad_requests)
{
    g_autofree char *body = NULL;
    g_autofree char *type = NULL;

    start_plegd(NULL, NULL);
    ck_assert_uint_eq(request_events("GET", "?since=yesterday", &body, NULL), 400);
    ck_assert_msg(strstr(body, "invalid since \"yesterday\""), "%s", body);
    g_clear_pointer(&body, g_free);

    ck_assert_uint_eq(request_events("GET", "?from=1", &body, NULL), 400);
    ck_assert_msg(strstr(body, "unknown query parameter \"from\""), "%s", body);
    g_clear_pointer(&body, g_free);

    /* A repeated parameter is refused, not the last one taken. */
    ck_assert_uint_eq(request_events("GET", "?since=0&since=1", &body, NULL), 400);
    ck_assert_msg(strstr(body, "query parameter \"since\" given more than once"), "%s", body);
    g_clear_pointer(&body, g_free);

    /* %00 would cut the value short ("0"): refused. */
    ck_assert_uint_eq(request_events("GET", "?since=0%00garbage", &body, NULL), 400);
    ck_assert_msg(strstr(body, "malformed query parameter \"since=0%00garbage\""), "%s", body);
    g_clear_pointer(&body, g_free);

    /* GLib's reason quotes the value again: escaped in the answer too. */
    ck_assert_uint_eq(request_events("GET", "?since=%1b%5b2J", &body, NULL), 400);
    ck_assert_msg(!strchr(body, '\x1b') && strstr(body, "invalid since \"\\x1b[2J\""), "%s", body);
    g_clear_pointer(&body, g_free);

    /* An empty instance names no history: a bad value, not another history. */
    ck_assert_uint_eq(request_events("GET", "?instance=", &body, NULL), 400);
    ck_assert_msg(strstr(body, "invalid instance \"\""), "%s", body);
    g_clear_pointer(&body, g_free);

    /* Escapes decode as a form's do. */
    ck_assert_uint_eq(request_events("GET", "?si%6Ece=yesterday", &body, NULL), 400);
    ck_assert_msg(strstr(body, "invalid since \"yesterday\""), "%s", body);
    g_clear_pointer(&body, g_free);

    /* A seq newer than any (a client of an earlier plegd) cannot be resumed either. */
    ck_assert_uint_eq(request_events("GET", "?since=7", &body, &type), 410);
    ck_assert_str_eq(type, "application/json");
    ck_assert_msg(strstr(body, "seq 7 was never assigned"), "%s", body);
    g_clear_pointer(&body, g_free);
    g_clear_pointer(&type, g_free);

    ck_assert_uint_eq(request_events("HEAD", "", NULL, &type), 200);
    ck_assert_str_eq(type, "application/x-ndjson");
    ck_assert_uint_eq(request_events("POST", "", NULL, NULL), 405);

    /* HEAD says what GET would send: a chunked body on a connection that closes after it,
     * not a Content-Length of 0.  The server closes after its headers. */
    {
        g_autoptr(GSocketClient) socket_client = g_socket_client_new();
        g_autoptr(GSocketConnection) connection = NULL;
        g_autoptr(GError) error = NULL;
        g_autofree char *answer = NULL;
        const char request[] = "HEAD /events?follow=false HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
        GString *raw = g_string_new(NULL);
        char buffer[4096];
        gssize n;

        connection = g_socket_client_connect(socket_client, G_SOCKET_CONNECTABLE(fixture.address),
                                             NULL, &error);
        ck_assert_msg(connection, "%s", error ? error->message : "");
        ck_assert(g_output_stream_write_all(
            g_io_stream_get_output_stream(G_IO_STREAM(connection)), request, strlen(request),
            NULL, NULL, NULL));
        while ((n = g_input_stream_read(g_io_stream_get_input_stream(G_IO_STREAM(connection)),
                                        buffer, sizeof(buffer), NULL, NULL)) > 0)
            g_string_append_len(raw, buffer, n);
        answer = g_string_free(raw, FALSE);
        ck_assert_msg(g_str_has_prefix(answer, "HTTP/1.1 200 OK\r\n"), "%s", answer);
        ck_assert_msg(strstr(answer, "\r\nTransfer-Encoding: chunked\r\n"), "%s", answer);
        ck_assert_msg(strstr(answer, "\r\nConnection: close\r\n"), "%s", answer);
        ck_assert_msg(!strstr(answer, "Content-Length"), "%s", answer);
        ck_assert_msg(g_str_has_suffix(answer, "\r\n\r\n"), "a body after HEAD: %s", answer);
    }
}
END_TEST

/* ---- filters and bounded reads ---- */

static void
sim_run(const char *command)
{
    g_autoptr(GError) error = NULL;

    ck_assert_msg(cri_sim_run_command(fixture.sim, command, NULL, &error), "%s: %s", command,
                  error ? error->message : "");
}

/* The lines of a complete answer of GET /events?@query (which ends: follow=false). */
static GPtrArray *
read_complete(const char *query)
{
    g_autofree char *body = NULL;
    g_autofree char *target = g_strconcat("?", query, NULL);
    g_auto(GStrv) lines = NULL;
    GPtrArray *result = g_ptr_array_new_with_free_func(g_free);
    guint status = request_events("GET", target, &body, NULL);

    ck_assert_msg(status == 200, "GET /events?%s: %u %s", query, status, body);
    ck_assert_msg(!body || g_str_has_suffix(body, "\n"), "%s", body);
    lines = g_strsplit(body ? body : "", "\n", -1);
    for (char **line = lines; *line && **line; line++)
        g_ptr_array_add(result, g_strdup(*line));
    return result;
}

typedef gboolean (*LinePredicate)(JsonObject *object, gconstpointer data);

/* GET /events?follow=false&@query answers exactly the lines of @all that @predicate selects,
 * in order; returns how many. */
static guint
assert_selects(GPtrArray *all, const char *query, LinePredicate predicate, gconstpointer data)
{
    g_autofree char *full_query = g_strconcat("follow=false&", query, NULL);
    g_autoptr(GPtrArray) got = read_complete(full_query);
    g_autoptr(GPtrArray) expected = g_ptr_array_new();

    for (guint i = 0; i < all->len; i++) {
        g_autoptr(JsonObject) object = parse_object(all->pdata[i]);

        if (predicate(object, data))
            g_ptr_array_add(expected, all->pdata[i]);
    }
    for (guint i = 0; i < MAX(got->len, expected->len); i++)
        ck_assert_msg(i < got->len && i < expected->len &&
                          g_str_equal(got->pdata[i], expected->pdata[i]),
                      "?%s: line %u is %s, expected %s", query, i,
                      i < got->len ? (char *)got->pdata[i] : "(none)",
                      i < expected->len ? (char *)expected->pdata[i] : "(none)");
    return got->len;
}

static gboolean
member_in(JsonObject *object, const char *member, const char *const *values)
{
    const char *value = json_object_has_member(object, member)
                            ? json_object_get_string_member_with_default(object, member, NULL)
                            : NULL;

    return value && g_strv_contains(values, value);
}

static gboolean
is_type(JsonObject *object, gconstpointer data)
{
    return member_in(object, "type", data);
}

static gboolean
is_pod_uid(JsonObject *object, gconstpointer data)
{
    return member_in(object, "pod_uid", data);
}

static gboolean
is_died_of_p1_or_p2(JsonObject *object, gconstpointer data)
{
    const char *const died[] = {"ContainerDied", NULL};
    const char *const uids[] = {"p1", "p2", NULL};

    return member_in(object, "type", died) && member_in(object, "pod_uid", uids);
}

/* plegd's RFC 3339 UTC time ("...:55Z", "...:55.1827Z": trailing zeros trimmed) with the
 * fraction padded to nine digits, so that two compare as text. */
static char *
time_padded(const char *time)
{
    const char *dot = strchr(time, '.');
    gsize whole = dot ? (gsize)(dot - time) : strlen(time) - 1;
    g_autofree char *fraction = dot ? g_strndup(dot + 1, strcspn(dot + 1, "Z")) : g_strdup("");

    ck_assert_msg(g_str_has_suffix(time, "Z") && strlen(fraction) <= 9, "time %s", time);
    return g_strdup_printf("%.*s.%s%.*sZ", (int)whole, time, fraction,
                           (int)(9 - strlen(fraction)), "000000000");
}

static int
time_compare(JsonObject *object, const char *time)
{
    g_autofree char *a = time_padded(json_object_get_string_member(object, "time"));
    g_autofree char *b = time_padded(time);

    return strcmp(a, b);
}

#define EPOCH "1970-01-01T00:00:00Z"

static gboolean
time_at_or_after(JsonObject *object, gconstpointer data)
{
    return time_compare(object, data) >= 0;
}

static gboolean
time_at_or_before(JsonObject *object, gconstpointer data)
{
    return time_compare(object, data) <= 0;
}

static gboolean
seq_after(JsonObject *object, gconstpointer data)
{
    return (guint64)json_object_get_int_member(object, "seq") > *(const guint64 *)data;
}

static gboolean
none(JsonObject *object, gconstpointer data)
{
    return FALSE;
}

/* Two pods of one container each, started, exited and removed: 8 events. */
static void
run_two_pods(void)
{
    sim_run("pod p1");
    sim_run("container p1 c1");
    sim_run("start c1");
    sim_run("pod p2");
    sim_run("container p2 c2");
    sim_run("start c2");
    wait_metric("plegd_events_last_seq", 4);
    sim_run("exit c1 3");
    sim_run("exit c2 4");
    wait_metric("plegd_events_last_seq", 6);
    sim_run("rm c1");
    sim_run("rm c2");
    wait_metric("plegd_events_last_seq", 8);
}

/* type and pod_uid, alone, repeated and combined, on the ring's history and on a live stream. */
START_TEST(test_filter_type_and_pod_uid)
{
    const char *const started[] = {"ContainerStarted", NULL};
    const char *const died_removed[] = {"ContainerDied", "ContainerRemoved", NULL};
    const char *const p2[] = {"p2", NULL};
    const char *const p1_p2[] = {"p1", "p2", NULL};
    g_autoptr(GPtrArray) all = NULL;
    g_autoptr(Client) live = NULL;
    g_autoptr(Client) live_none = NULL;
    guint64 since = 5;

    start_plegd(NULL, NULL);
    /* follow=false on an empty ring: an empty, complete answer. */
    all = read_complete("follow=false");
    ck_assert_uint_eq(all->len, 0);
    g_clear_pointer(&all, g_ptr_array_unref);

    live = client_open("?type=ContainerDied&type=ContainerRemoved&pod_uid=p1", 0);
    live_none = client_open("?type=PodSync", 0);
    client_wait_head(live, 200);
    client_wait_head(live_none, 200);
    wait_metric("plegd_events_clients", 2);
    run_two_pods();

    all = read_complete("follow=false");
    ck_assert_uint_eq(all->len, 8);
    assert_consecutive_lines(all, 1);

    ck_assert_uint_eq(assert_selects(all, "type=ContainerStarted", is_type, started), 4);
    ck_assert_uint_eq(
        assert_selects(all, "type=ContainerDied&type=ContainerRemoved", is_type, died_removed), 4);
    ck_assert_uint_eq(assert_selects(all, "pod_uid=p2", is_pod_uid, p2), 4);
    ck_assert_uint_eq(assert_selects(all, "pod_uid=p1&pod_uid=p2", is_pod_uid, p1_p2), 8);
    ck_assert_uint_eq(
        assert_selects(all, "pod_uid=p1&pod_uid=p2&type=ContainerDied", is_died_of_p1_or_p2, NULL),
        2);
    ck_assert_uint_eq(assert_selects(all, "pod_uid=p3", none, NULL), 0);
    ck_assert_uint_eq(assert_selects(all, "type=PodSync", none, NULL), 0);
    /* since: after the seq, whatever the filter. */
    ck_assert_uint_eq(assert_selects(all, "since=5", seq_after, &since), 3);

    /* The live stream got p1's death and removal, with their global seqs, and nothing else. */
    client_wait_lines(live, 2);
    for (guint i = 0; i < 2; i++) {
        g_autoptr(JsonObject) object = parse_object(live->lines->pdata[i]);

        ck_assert_str_eq(json_object_get_string_member(object, "pod_uid"), "p1");
        ck_assert_str_eq(json_object_get_string_member(object, "type"),
                         i == 0 ? "ContainerDied" : "ContainerRemoved");
        ck_assert(g_ptr_array_find_with_equal_func(all, live->lines->pdata[i], g_str_equal, NULL));
    }
    /* Another pod's death and removal do not come; p1's next death comes as the third line. */
    g_clear_pointer(&live_none, client_free);
    sim_run("pod p1b");
    sim_run("container p1b c1b");
    sim_run("start c1b");
    wait_metric("plegd_events_last_seq", 10);
    sim_run("exit c1b 0");
    wait_metric("plegd_events_last_seq", 11);
    sim_run("rm c1b");
    wait_metric("plegd_events_last_seq", 12);
    sim_run("container p1 c1x");
    sim_run("start c1x");
    wait_metric("plegd_events_last_seq", 13);
    sim_run("exit c1x 0");
    client_wait_lines(live, 3);
    {
        g_autoptr(JsonObject) object = parse_object(live->lines->pdata[2]);

        ck_assert_str_eq(json_object_get_string_member(object, "container_id"), "c1x");
        ck_assert_str_eq(json_object_get_string_member(object, "type"), "ContainerDied");
        ck_assert_int_eq(json_object_get_int_member(object, "seq"), 14);
    }
    ck_assert_uint_eq(live->lines->len, 3);
    ck_assert(!live->eof);
}
END_TEST

/* A filtered stream keeps the global seq: since=SEQ resumes it exactly across the ring's wrap; a
 * client whose filter matches nothing of a flood is never cut off, even if it reads nothing. */
START_TEST(test_filter_since_across_wrap)
{
    g_autoptr(Client) watcher = NULL;
    g_autoptr(Client) idle = NULL;
    g_autoptr(Client) resumed = NULL;
    g_autoptr(Client) gone = NULL;
    g_autoptr(JsonObject) died = NULL;
    g_autofree char *query = NULL;
    guint64 died_seq;

    start_plegd("--events-ring-size=1000", NULL);
    sim_run("pod w");
    sim_run("container w wc");
    sim_run("start wc");
    wait_metric("plegd_events_last_seq", 2);

    watcher = client_open("?pod_uid=w&since=0", 0);
    idle = client_open("?pod_uid=nobody", 4096);
    client_wait_lines(watcher, 2);
    client_wait_head(idle, 200);

    /* 600 events, w's death, 600 more: the ring (1000) wraps past the death's neighbours. */
    add_pods(300);
    wait_metric("plegd_events_last_seq", 602);
    sim_run("exit wc 9");
    wait_metric("plegd_events_last_seq", 603);
    add_pods(300);
    wait_metric("plegd_events_last_seq", 1203);

    client_wait_lines(watcher, 3);
    died = parse_object(watcher->lines->pdata[2]);
    ck_assert_str_eq(json_object_get_string_member(died, "type"), "ContainerDied");
    died_seq = (guint64)json_object_get_int_member(died, "seq");
    ck_assert_uint_eq(died_seq, 603);
    g_clear_pointer(&watcher, client_free);

    /* Missed while away: 200 more events, then w's removal. */
    add_pods(100);
    wait_metric("plegd_events_last_seq", 1403);
    sim_run("rm wc");
    wait_metric("plegd_events_last_seq", 1404);

    /* Resumed after its last seq: exactly the removal, though 800 events came between. */
    query = g_strdup_printf("?pod_uid=w&since=%" G_GUINT64_FORMAT, died_seq);
    resumed = client_open(query, 0);
    client_wait_lines(resumed, 1);
    {
        g_autoptr(JsonObject) removed = parse_object(resumed->lines->pdata[0]);

        ck_assert_str_eq(json_object_get_string_member(removed, "type"), "ContainerRemoved");
        ck_assert_int_eq(json_object_get_int_member(removed, "seq"), 1404);
    }

    /* The 410 rules are those of an unfiltered stream. */
    gone = client_open("?pod_uid=w&since=2", 0);
    client_wait_eof(gone);
    ck_assert_uint_eq(gone->status, 410);
    ck_assert_msg(strstr(gone->raw->str, "\"oldest_seq\":405"), "%s", gone->raw->str);

    /* The client that read nothing had nothing to read: still connected, never cut off. */
    ck_assert_double_eq(
        get_metric("plegd_events_clients_disconnected_total{reason=\"slow_consumer\"}"), 0);
    ck_assert_double_eq(get_metric("plegd_events_clients"), 2);
    client_read(idle, 0);
    ck_assert(!idle->eof);
    ck_assert_uint_eq(idle->lines->len, 0);

    /* since_time before the oldest event kept: 410, naming it; at its time: complete. */
    {
        g_autofree char *body = NULL;
        g_autoptr(GPtrArray) oldest = read_complete("follow=false");
        g_autoptr(JsonObject) first = parse_object(oldest->pdata[0]);
        g_autofree char *at_oldest = g_strconcat(
            "?follow=false&since_time=", json_object_get_string_member(first, "time"), NULL);
        g_autoptr(GPtrArray) from_oldest = NULL;

        ck_assert_int_eq(json_object_get_int_member(first, "seq"), 405);
        ck_assert_uint_eq(request_events("GET", "?since_time=1h&follow=false", &body, NULL), 410);
        ck_assert_msg(
            strstr(body, "are no longer all kept: the oldest event kept is seq 405 of ") &&
                strstr(body, "\"reason\":\"gone\"") && strstr(body, "\"oldest_seq\":405"),
            "%s", body);
        from_oldest = read_complete(at_oldest + 1);
        ck_assert_uint_eq(from_oldest->len, oldest->len);
    }
}
END_TEST

/* follow=false, since_time and until_time: bounded reads that end. */
/* Runs @argv (searched in PATH) to its end and returns its stdout; fails unless it exits 0.
 * g_spawn_sync(), not GSubprocess: GSubprocess's communicate hands its work to GLib's thread
 * pool and main contexts that ThreadSanitizer's shim does not see. */
static char *
run_to_end(const char *const *argv)
{
    g_autoptr(GError) error = NULL;
    char *out = NULL;
    int status;

    ck_assert_msg(g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, &out,
                               NULL, &status, &error),
                  "%s: %s", argv[0], error ? error->message : "");
    ck_assert_msg(g_spawn_check_wait_status(status, &error), "%s: %s", argv[0], error->message);
    return out;
}

START_TEST(test_bounded_reads)
{
    g_autoptr(GPtrArray) all = NULL;
    g_autoptr(Client) until_soon = NULL;
    g_autoptr(Client) until_past = NULL;
    g_autoptr(JsonObject) third = NULL;
    const char *third_time;
    g_autofree char *query = NULL;
    guint n;

    start_plegd(NULL, NULL);
    run_two_pods();
    all = read_complete("follow=false");
    ck_assert_uint_eq(all->len, 8);
    third = parse_object(all->pdata[2]);
    third_time = json_object_get_string_member(third, "time");

    /* since_time: at or after, to the nanosecond; a duration counts back from now. */
    query = g_strconcat("since_time=", third_time, NULL);
    n = assert_selects(all, query, time_at_or_after, third_time);
    ck_assert_uint_ge(n, 6);
    ck_assert_uint_eq(assert_selects(all, "since_time=1h", time_at_or_after, EPOCH), 8);
    ck_assert_uint_eq(assert_selects(all, "since_time=-1h", none, NULL), 0);
    ck_assert_uint_eq(
        assert_selects(all, "since_time=2000-01-01T00:00:00%2B01:00", time_at_or_after, EPOCH), 8);
    g_clear_pointer(&query, g_free);

    /* until_time in the past: the history up to it, then the end, follow or not. */
    query = g_strconcat("until_time=", third_time, NULL);
    n = assert_selects(all, query, time_at_or_before, third_time);
    ck_assert_uint_ge(n, 3);
    g_clear_pointer(&query, g_free);
    query = g_strconcat("?until_time=", third_time, NULL);
    until_past = client_open(query, 0);
    client_wait_eof(until_past);
    ck_assert(until_past->body_done);
    ck_assert_uint_eq(until_past->lines->len, n);

    /* A bounded read with curl and jq, as doc/events.md shows one: the answer ends. */
    {
        const char *script =
            "curl -s --unix-socket \"$0\" "
            "\"http://localhost/events?follow=false&type=ContainerDied&since_time=10m\" | "
            "jq -r '[.seq, .time, .pod_uid, .container_id, .exit_code, .reason] | @tsv'";
        const char *argv[] = {"sh", "-c", script, plegd_runner_get_socket(fixture.plegd), NULL};
        g_autofree char *out = run_to_end(argv);
        g_auto(GStrv) rows = NULL;

        rows = g_strsplit(out, "\n", -1);
        ck_assert_msg(g_strv_length(rows) == 3 && *rows[2] == '\0', "%s", out);
        for (guint i = 0; i < 2; i++) {
            g_auto(GStrv) fields = g_strsplit(rows[i], "\t", -1);

            ck_assert_msg(g_strv_length(fields) == 6, "%s", rows[i]);
            ck_assert(g_str_equal(fields[3], "c1") || g_str_equal(fields[3], "c2"));
            ck_assert_str_eq(fields[4], g_str_equal(fields[3], "c1") ? "3" : "4");
        }
    }

    /* until_time ahead: live events until the wall clock passes it, then the end. */
    until_soon = client_open("?until_time=-1s&since=8", 0);
    client_wait_head(until_soon, 200);
    sim_run("pod p3");
    sim_run("container p3 c3");
    sim_run("start c3");
    client_wait_eof(until_soon);
    ck_assert(until_soon->body_done);
    for (guint i = 0; i < until_soon->lines->len; i++)
        ck_assert_uint_gt(line_seq(until_soon->lines->pdata[i]), 8);
}
END_TEST

/* Bad filter values: 400 naming the key and saying what is accepted. */
START_TEST(test_filter_bad_values)
{
    static const struct {
        const char *query;
        const char *needle;
    } cases[] = {
        {"?type=ContainerExploded",
         "invalid type \"ContainerExploded\": expected ContainerStarted, ContainerDied, "
         "ContainerRemoved or PodSync"},
        {"?sandbox=maybe", "invalid sandbox \"maybe\": expected true or false"},
        {"?since_time=10x", "invalid since_time \"10x\": expected an RFC 3339 time"},
        {"?until_time=tomorrow", "invalid until_time \"tomorrow\""},
        {"?since_time=1m&since_time=2m", "query parameter \"since_time\" given more than once"},
        {"?follow=maybe", "invalid follow \"maybe\": expected true"},
        {"?follow=false&follow=true", "query parameter \"follow\" given more than once"},
        {"?namespace=", "invalid namespace \"\": empty"},
        {"?namespace=shop%00evil", "malformed query parameter \"namespace=shop%00evil\""},
        {"?pod=web&%00=1", "malformed query parameter"},
        {"?label=app", "unknown query parameter \"label\" (/events takes since, instance, follow, "
                       "type, namespace, pod, pod_uid, container, sandbox, since_time and "
                       "until_time)"},
    };
    g_autofree char *long_value = g_strnfill(60 * 1024, 'a');
    g_autofree char *long_query = g_strconcat("?type=ContainerDied&container=", long_value, NULL);
    g_autofree char *huge_value = g_strnfill(100 * 1024, 'a');
    g_autofree char *huge_query = g_strconcat("?container=", huge_value, NULL);
    g_autoptr(Client) huge = NULL;
    g_autofree char *body = NULL;

    start_plegd(NULL, NULL);
    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        ck_assert_uint_eq(request_events("GET", cases[i].query, &body, NULL), 400);
        ck_assert_msg(strstr(body, cases[i].needle), "%s: %s", cases[i].query, body);
        g_clear_pointer(&body, g_free);
    }
    ck_assert_uint_eq(request_events("GET", long_query, &body, NULL), 400);
    ck_assert_msg(strstr(body, "invalid container \"aaaa") &&
                      strstr(body, "61440 bytes, at most 1024 accepted") && strlen(body) < 1024,
                  "%.2000s", body);
    /* A request line past libsoup's 64 KiB of request headers never reaches plegd: libsoup closes
     * the connection without an answer (the unit test checks plegd's own 400 for 100 KB). */
    huge = client_open(huge_query, 0);
    client_wait_eof(huge);
    ck_assert(!huge->head_done);
    /* Nothing was served meanwhile. */
    ck_assert_double_eq(get_metric("plegd_events_clients"), 0);
}
END_TEST

/* namespace, pod, container and sandbox, on the names libpleg puts in each event
 * (PlegEventDetails), and the bounded read with curl that README shows. */
static const char *
pod_spec_add(const char *uid, const char *ns, const char *name)
{
    g_autoptr(GError) error = NULL;
    CriSimPodSpec spec = {.uid = uid, .name = name, .namespace_ = ns};

    ck_assert_msg(cri_sim_add_pod_full(fixture.sim, &spec, NULL, &error), "%s",
                  error ? error->message : "");
    return uid;
}

static gboolean
is_container(JsonObject *object, gconstpointer data)
{
    return member_in(object, "container_id", data);
}

static gboolean
is_died_container(JsonObject *object, gconstpointer data)
{
    const char *const died[] = {"ContainerDied", NULL};

    return member_in(object, "type", died) && member_in(object, "container_id", data);
}

START_TEST(test_filter_names)
{
    const char *const shop_web[] = {"shop-web", NULL};
    const char *const shop_uids[] = {"shop-web", "shop-cart", NULL};
    const char *const nginx_ids[] = {"web-nginx", "dweb-nginx", NULL};
    const char *const shop_sandboxes[] = {"sb-shop-web", "sb-shop-cart", NULL};
    const char *const shop_containers[] = {"web-nginx", "cart-redis", NULL};
    const char *const shop_died[] = {"web-nginx", "cart-redis", NULL};
    g_autoptr(GPtrArray) all = NULL;
    g_autofree char *url = NULL;
    g_autofree char *out = NULL;
    g_auto(GStrv) out_lines = NULL;

    start_plegd(NULL, NULL);
    pod_spec_add("shop-web", "shop", "web");
    sim_run("container shop-web web-nginx nginx");
    sim_run("start web-nginx");
    pod_spec_add("shop-cart", "shop", "cart");
    sim_run("container shop-cart cart-redis redis");
    sim_run("start cart-redis");
    pod_spec_add("default-web", "default", "web");
    sim_run("container default-web dweb-nginx nginx");
    sim_run("start dweb-nginx");
    wait_metric("plegd_events_last_seq", 6);
    sim_run("exit web-nginx 137 OOMKilled");
    sim_run("exit cart-redis 1");
    sim_run("exit dweb-nginx 2");
    wait_metric("plegd_events_last_seq", 9);
    all = read_complete("follow=false");
    ck_assert_uint_eq(all->len, 9);

    ck_assert_uint_eq(assert_selects(all, "namespace=shop", is_pod_uid, shop_uids), 6);
    ck_assert_uint_eq(assert_selects(all, "namespace=shop&pod=web", is_pod_uid, shop_web), 3);
    ck_assert_uint_eq(assert_selects(all, "container=nginx", is_container, nginx_ids), 4);
    ck_assert_uint_eq(
        assert_selects(all, "namespace=shop&sandbox=true", is_container, shop_sandboxes), 2);
    ck_assert_uint_eq(
        assert_selects(all, "namespace=shop&sandbox=false", is_container, shop_containers), 4);
    ck_assert_uint_eq(assert_selects(all,
                                     "namespace=shop&namespace=default&pod=web&container=nginx&"
                                     "type=ContainerDied",
                                     is_died_container, nginx_ids),
                      2);

    /* Which containers of namespace shop died: one curl that ends. */
    url = g_strdup("http://localhost/events?follow=false&type=ContainerDied&namespace=shop");
    {
        const char *argv[] = {"curl", "-s", "--unix-socket", plegd_runner_get_socket(fixture.plegd),
                              url, NULL};

        out = run_to_end(argv);
    }
    out_lines = g_strsplit(out, "\n", -1);
    ck_assert_uint_eq(g_strv_length(out_lines), 3);
    for (guint i = 0; i < 2; i++) {
        g_autoptr(JsonObject) object = parse_object(out_lines[i]);

        ck_assert(is_died_container(object, shop_died));
    }
}
END_TEST

/* SIGTERM ends each stream with a line saying so. */
START_TEST(test_shutdown_line)
{
    g_autoptr(Client) client = NULL;
    g_autoptr(JsonObject) last = NULL;

    start_plegd(NULL, NULL);
    client = client_open(NULL, 0);
    client_wait_head(client, 200);
    add_pods(2);
    client_wait_lines(client, 4);
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
    client_wait_eof(client);
    ck_assert_uint_eq(client->lines->len, 5);
    assert_consecutive(client, 0, 4, 1);
    last = parse_object(client->lines->pdata[4]);
    ck_assert_str_eq(json_object_get_string_member(last, "reason"), "shutting_down");
    ck_assert_int_eq(json_object_get_int_member(last, "next_seq"), 5);
    ck_assert(client->body_done);
}
END_TEST

static char *
read_line_from(GDataInputStream *stream)
{
    g_autoptr(GError) error = NULL;
    char *line = g_data_input_stream_read_line_utf8(stream, NULL, NULL, &error);

    ck_assert_msg(line, "no line: %s", error ? error->message : "end of output");
    return line;
}

/* curl -N over TCP (--serve-events-over-tcp=loopback-unauthenticated), and the README's
 * consumer on the socket: curl --unix-socket | jq. */
START_TEST(test_curl)
{
    g_autoptr(GSubprocess) curl = NULL;
    g_autoptr(GSubprocess) pipeline = NULL;
    g_autoptr(GDataInputStream) curl_out = NULL;
    g_autoptr(GDataInputStream) jq_out = NULL;
    g_autoptr(GError) error = NULL;
    g_autoptr(JsonObject) first = NULL;
    g_autoptr(JsonObject) died = NULL;
    g_autofree char *url = NULL;
    g_autofree char *line = NULL;
    g_autofree char *died_line = NULL;
    /* Stopped after its first line, should curl or jq hang. */
    const char *script =
        "curl -sN --unix-socket \"$0\" http://localhost/events | jq -c --unbuffered "
        "'select(.type == \"ContainerDied\") | {seq, pod_uid, container_id, exit_code}'";

    fixture.over_tcp = TRUE;
    start_plegd(NULL, NULL);
    url = g_strconcat(fixture.base, "/events", NULL);
    curl = g_subprocess_new(G_SUBPROCESS_FLAGS_STDOUT_PIPE, &error, "curl", "-sN", url, NULL);
    ck_assert_msg(curl, "%s", error ? error->message : "");
    pipeline = g_subprocess_new(G_SUBPROCESS_FLAGS_STDOUT_PIPE, &error, "sh", "-c", script,
                                plegd_runner_get_socket(fixture.plegd), NULL);
    ck_assert_msg(pipeline, "%s", error ? error->message : "");
    wait_metric("plegd_events_clients", 2);

    {
        g_autoptr(GError) sim_error = NULL;

        ck_assert(cri_sim_run_command(fixture.sim, "pod p1", NULL, &sim_error));
        ck_assert(cri_sim_run_command(fixture.sim, "container p1 c1", NULL, &sim_error));
        ck_assert(cri_sim_run_command(fixture.sim, "start c1", NULL, &sim_error));
    }
    curl_out = g_data_input_stream_new(g_subprocess_get_stdout_pipe(curl));
    line = read_line_from(curl_out);
    first = parse_object(line);
    ck_assert_int_eq(json_object_get_int_member(first, "seq"), 1);
    ck_assert_str_eq(json_object_get_string_member(first, "pod_uid"), "p1");

    wait_metric("plegd_events_last_seq", 2);
    {
        g_autoptr(GError) sim_error = NULL;

        ck_assert(cri_sim_run_command(fixture.sim, "exit c1 3", NULL, &sim_error));
    }
    jq_out = g_data_input_stream_new(g_subprocess_get_stdout_pipe(pipeline));
    died_line = read_line_from(jq_out);
    died = parse_object(died_line);
    ck_assert_int_eq(json_object_get_int_member(died, "seq"), 3);
    ck_assert_str_eq(json_object_get_string_member(died, "container_id"), "c1");
    ck_assert_int_eq(json_object_get_int_member(died, "exit_code"), 3);

    /* Gone clients are noticed without an event to write. */
    g_subprocess_force_exit(curl);
    ck_assert(subprocess_wait_reaped(curl));
    wait_metric("plegd_events_clients", 1);
    g_subprocess_send_signal(pipeline, SIGTERM);
    ck_assert(subprocess_wait_reaped(pipeline));
}
END_TEST

/* ---- identity ---- */

/* The one line of @lines of @type about @id, parsed; fails unless there is exactly one. */
static JsonObject *
find_line(GPtrArray *lines, const char *type, const char *id)
{
    JsonObject *found = NULL;

    for (guint i = 0; i < lines->len; i++) {
        JsonObject *object = parse_object(lines->pdata[i]);

        if (g_str_equal(json_object_get_string_member_with_default(object, "type", ""), type) &&
            g_str_equal(json_object_get_string_member_with_default(object, "container_id", ""),
                        id)) {
            ck_assert_msg(!found, "two %s of %s", type, id);
            found = json_object_ref(object);
        }
        json_object_unref(object);
    }
    ck_assert_msg(found, "no %s of %s", type, id);
    return found;
}

/* @object names pod shop/web and, unless @container is NULL (a sandbox), @container. */
static void
assert_identity(JsonObject *object, const char *container, guint attempt)
{
    ck_assert_str_eq(json_object_get_string_member(object, "pod_uid"), "uid-web");
    ck_assert_str_eq(json_object_get_string_member(object, "namespace"), "shop");
    ck_assert_str_eq(json_object_get_string_member(object, "pod"), "web");
    ck_assert(json_object_has_member(object, "sandbox"));
    ck_assert_int_eq(json_object_get_boolean_member(object, "sandbox"), container == NULL);
    ck_assert_int_eq(json_object_get_int_member(object, "attempt"), attempt);
    if (container) {
        ck_assert_str_eq(json_object_get_string_member(object, "container"), container);
        ck_assert_str_eq(json_object_get_string_member(object, "image"), "nginx:1.25");
    } else {
        ck_assert(!json_object_has_member(object, "container"));
        ck_assert(!json_object_has_member(object, "image"));
    }
}

/* Every event type names its pod and container, from cri-sim's listings: a container removed
 * (the runtime lists it no more), the pod's sandbox stopped and removed, and the sandbox the
 * pod gets next (attempt 1). */
START_TEST(test_identity_every_type)
{
    g_autoptr(GError) error = NULL;
    CriSimPodSpec pod = {.uid = "uid-web", .name = "web", .namespace_ = "shop"};
    CriSimPodSpec second = {
        .id = "sb-web-1", .uid = "uid-web", .name = "web", .namespace_ = "shop", .attempt = 1};
    CriSimContainerSpec nginx = {.id = "ctr-nginx",
                                 .pod_uid = "uid-web",
                                 .name = "nginx",
                                 .attempt = 2,
                                 .image = "nginx:1.25",
                                 .state = CRI_SIM_CONTAINER_RUNNING};
    g_autoptr(GPtrArray) lines = NULL;
    g_autoptr(JsonObject) started = NULL, died = NULL, removed = NULL;
    g_autoptr(JsonObject) sandbox_started = NULL, sandbox_died = NULL, sandbox_removed = NULL;
    g_autoptr(JsonObject) sandbox_next = NULL;

    start_plegd(NULL, NULL);
    ck_assert_msg(cri_sim_add_pod_full(fixture.sim, &pod, NULL, &error), "%s",
                  error ? error->message : "");
    ck_assert_msg(cri_sim_add_container_full(fixture.sim, &nginx, NULL, &error), "%s",
                  error ? error->message : "");
    wait_metric("plegd_events_last_seq", 2);
    sim_run("exit ctr-nginx 137 OOMKilled");
    wait_metric("plegd_events_last_seq", 3);
    sim_run("rm ctr-nginx");
    wait_metric("plegd_events_last_seq", 4);
    sim_run("rmp uid-web");
    wait_metric("plegd_events_last_seq", 6);
    ck_assert_msg(cri_sim_add_pod_full(fixture.sim, &second, NULL, &error), "%s",
                  error ? error->message : "");
    wait_metric("plegd_events_last_seq", 7);

    lines = read_complete("follow=false");
    ck_assert_uint_eq(lines->len, 7);
    started = find_line(lines, "ContainerStarted", "ctr-nginx");
    assert_identity(started, "nginx", 2);
    ck_assert(json_object_has_member(started, "started_at"));
    died = find_line(lines, "ContainerDied", "ctr-nginx");
    assert_identity(died, "nginx", 2);
    ck_assert_int_eq(json_object_get_int_member(died, "exit_code"), 137);
    ck_assert_str_eq(json_object_get_string_member(died, "reason"), "OOMKilled");
    ck_assert(json_object_has_member(died, "finished_at"));
    removed = find_line(lines, "ContainerRemoved", "ctr-nginx");
    assert_identity(removed, "nginx", 2);

    sandbox_started = find_line(lines, "ContainerStarted", "sb-uid-web");
    assert_identity(sandbox_started, NULL, 0);
    sandbox_died = find_line(lines, "ContainerDied", "sb-uid-web");
    assert_identity(sandbox_died, NULL, 0);
    ck_assert(!json_object_has_member(sandbox_died, "exit_code"));
    sandbox_removed = find_line(lines, "ContainerRemoved", "sb-uid-web");
    assert_identity(sandbox_removed, NULL, 0);
    sandbox_next = find_line(lines, "ContainerStarted", "sb-web-1");
    assert_identity(sandbox_next, NULL, 1);
}
END_TEST

static Suite *
plegd_events_suite(void)
{
    Suite *suite = suite_create("plegd-events");
    TCase *tc = tcase_create("events");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_two_clients_one_paused, 0, 2);
    tcase_add_test(tc, test_slow_consumer_cut_off);
    tcase_add_test(tc, test_resume_after_disconnect);
    tcase_add_test(tc, test_history_above_one);
    tcase_add_test(tc, test_storm_many_clients);
    tcase_add_test(tc, test_stream_outlives_idle_timeout);
    tcase_add_test(tc, test_bad_requests);
    tcase_add_test(tc, test_shutdown_line);
    tcase_add_test(tc, test_curl);
    tcase_add_test(tc, test_filter_type_and_pod_uid);
    tcase_add_test(tc, test_filter_since_across_wrap);
    tcase_add_test(tc, test_bounded_reads);
    tcase_add_test(tc, test_filter_bad_values);
    tcase_add_test(tc, test_filter_names);
    tcase_add_test(tc, test_identity_every_type);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    SRunner *runner = srunner_create(plegd_events_suite());
    int n_failed;

    srunner_run_all(runner, CK_NORMAL);
    n_failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return n_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
