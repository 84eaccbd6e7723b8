/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd's HTTP server under abuse: more idle connections than it serves, connections that never
 * finish a request or stay idle, accept() at the file descriptor limit, and request bodies that
 * plegd never wants.  plegd runs without a runtime: /readyz answers 503, /metrics 200.  Each
 * test runs on both listeners: TCP (_i 0) and the unix socket (_i 1), whose limits are the same.
 */
#include <gio/gunixsocketaddress.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "plegd-runner.h"

#define MIB (1024 * 1024)

typedef struct {
    char *dir;
    char *endpoint_arg;
    PlegdRunner *plegd;
    char *base;
    guint16 port;
    gboolean on_socket; /* the connections go to the unix socket, not TCP */
    char *socket_path;
    char *socket_arg;
} Fixture;

static Fixture fixture;

static void
setup(void)
{
    fixture.on_socket = FALSE;
    fixture.dir = make_tmpdir();
    fixture.endpoint_arg =
        g_strdup_printf("--container-runtime-endpoint=unix://%s/nothing.sock", fixture.dir);
    fixture.socket_path = g_build_filename(fixture.dir, "plegd.sock", NULL);
    fixture.socket_arg = g_strconcat("--socket=", fixture.socket_path, NULL);
}

static void
teardown(void)
{
    g_clear_pointer(&fixture.plegd, plegd_runner_free);
    g_clear_pointer(&fixture.base, g_free);
    remove_tmpdir(fixture.dir);
    g_clear_pointer(&fixture.dir, g_free);
    g_clear_pointer(&fixture.endpoint_arg, g_free);
    g_clear_pointer(&fixture.socket_path, g_free);
    g_clear_pointer(&fixture.socket_arg, g_free);
}

/* @max_fds: 0, or a file descriptor limit for plegd. */
/* On the listener of loop iteration @i: TCP (0), the unix socket (1). */
static void
start_plegd_on(int i, const char *extra_arg, guint max_fds)
{
    const char *colon;

    fixture.on_socket = i == 1;
    if (max_fds > 0) {
        /* Set by a shell: a setrlimit() in a child setup would not reach plegd when the test
         * itself runs under valgrind. */
        g_autofree char *script = g_strdup_printf("ulimit -n %u && exec \"$0\" \"$@\"", max_fds);
        const char *args[] = {"-c", script, g_getenv("PLEGD"), fixture.endpoint_arg,
                              "--relist-period=1s", "--metrics-bind-address=127.0.0.1:0",
                              fixture.socket_arg, extra_arg, NULL};

        fixture.plegd = plegd_runner_spawn_program("/bin/sh", NULL, -1, args);
    } else {
        fixture.plegd =
            plegd_runner_spawn(NULL, fixture.endpoint_arg, "--relist-period=1s",
                               "--metrics-bind-address=127.0.0.1:0", fixture.socket_arg, extra_arg);
    }
    fixture.base = plegd_runner_wait_metrics_url(fixture.plegd);
    colon = strrchr(fixture.base, ':');
    ck_assert_ptr_nonnull(colon);
    fixture.port = (guint16)g_ascii_strtoull(colon + 1, NULL, 10);
    if (fixture.on_socket) {
        g_autofree char *escaped = g_uri_escape_string(fixture.socket_path, NULL, FALSE);

        g_free(fixture.base);
        fixture.base = g_strconcat("http+unix://", escaped, NULL);
    }
}

#define start_plegd(extra_arg, max_fds) start_plegd_on(_i, (extra_arg), (max_fds))

static void
assert_served(void)
{
    g_autofree char *url = g_strconcat(fixture.base, "/readyz", NULL);
    g_autofree char *body = NULL;

    ck_assert_uint_eq(http_request("GET", url, &body, NULL), 503);
    ck_assert_msg(g_str_has_prefix(body, "first-relist failed: "), "%s", body);
}

/* ---- raw connections ---- */

static GSocket *
open_connection(gboolean blocking)
{
    g_autoptr(GInetAddress) loopback = g_inet_address_new_loopback(G_SOCKET_FAMILY_IPV4);
    g_autoptr(GSocketAddress) address =
        fixture.on_socket ? g_unix_socket_address_new(fixture.socket_path)
                          : g_inet_socket_address_new(loopback, fixture.port);
    g_autoptr(GError) error = NULL;
    g_autoptr(GSocket) socket = g_socket_new(g_socket_address_get_family(address),
                                             G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_DEFAULT, &error);

    ck_assert_msg(socket, "%s", error ? error->message : "");
    g_socket_set_timeout(socket, 15);
    g_socket_set_blocking(socket, blocking);
    if (!g_socket_connect(socket, address, NULL, &error))
        ck_assert_msg(!blocking && g_error_matches(error, G_IO_ERROR, G_IO_ERROR_PENDING), "%s",
                      error->message);
    return g_steal_pointer(&socket);
}

static void
send_text(GSocket *socket, const char *text)
{
    g_autoptr(GError) error = NULL;
    gsize len = strlen(text);

    ck_assert_msg(g_socket_send(socket, text, len, NULL, &error) == (gssize)len, "%s",
                  error ? error->message : "short write");
}

/* The answer up to the end of its headers. */
static char *
read_response_head(GSocket *socket)
{
    g_autoptr(GString) text = g_string_new(NULL);

    while (!strstr(text->str, "\r\n\r\n")) {
        g_autoptr(GError) error = NULL;
        char c;
        gssize n = g_socket_receive(socket, &c, 1, NULL, &error);

        ck_assert_msg(n == 1, "no answer (%s), got so far:\n%s",
                      error ? error->message : "end of stream", text->str);
        g_string_append_c(text, c);
    }
    return g_string_free(g_steal_pointer(&text), FALSE);
}

/* Whether the server closed @socket: end of stream or a reset, after any data. */
static gboolean
wait_closed(GSocket *socket, gint64 timeout_usec)
{
    gint64 deadline = g_get_monotonic_time() + timeout_usec;

    for (;;) {
        g_autoptr(GError) error = NULL;
        gint64 left = deadline - g_get_monotonic_time();
        char buffer[4096];
        gssize n;

        if (left < 0)
            left = 0;
        if (!g_socket_condition_timed_wait(socket, G_IO_IN, left, NULL, &error))
            return FALSE;
        n = g_socket_receive_with_blocking(socket, buffer, sizeof buffer, FALSE, NULL, &error);
        if (n == 0 || (n < 0 && !g_error_matches(error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK)))
            return TRUE;
    }
}

/* The connections plegd holds on its socket: its descriptors that are connected unix sockets
 * bound at the socket's path (/proc/PID/net/unix: an accepted socket shows its listener's path;
 * "Num RefCount Protocol Flags Type St Inode Path", St 03 connected). */
static guint
count_socket_connections(GHashTable *inodes, const char *pid)
{
    g_autofree char *path = g_strdup_printf("/proc/%s/net/unix", pid);
    g_autofree char *table = NULL;
    g_auto(GStrv) lines = NULL;
    guint n = 0;

    ck_assert(g_file_get_contents(path, &table, NULL, NULL));
    lines = g_strsplit(table, "\n", -1);
    for (guint i = 1; lines[i]; i++) {
        g_auto(GStrv) fields = g_strsplit_set(g_strstrip(lines[i]), " ", -1);
        g_autoptr(GPtrArray) words = g_ptr_array_new();

        for (guint j = 0; fields[j]; j++) {
            if (*fields[j])
                g_ptr_array_add(words, fields[j]);
        }
        if (words->len == 8 && g_str_equal(g_ptr_array_index(words, 5), "03") &&
            g_str_equal(g_ptr_array_index(words, 7), fixture.socket_path) &&
            g_hash_table_contains(inodes, g_ptr_array_index(words, 6)))
            n++;
    }
    return n;
}

/* The connections plegd holds on its HTTP port: its descriptors that are TCP sockets whose
 * local port is that port (/proc/PID/net/tcp and tcp6), the listening socket left out; or on
 * its unix socket.  Not every descriptor: GLib and gRPC open their own meanwhile (an eventfd, a
 * socket to cri-sim), and one of those once made a count of all of them look like a connection
 * left open. */
static guint
count_http_connections(void)
{
    const char *pid = plegd_runner_get_pid(fixture.plegd);
    g_autofree char *fd_path = g_strdup_printf("/proc/%s/fd", pid);
    g_autoptr(GHashTable) inodes = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    g_autoptr(GDir) dir = NULL;
    g_autoptr(GError) error = NULL;
    const char *name;
    guint n = 0;

    dir = g_dir_open(fd_path, 0, &error);
    ck_assert_msg(dir, "%s", error ? error->message : fd_path);
    while ((name = g_dir_read_name(dir))) {
        g_autofree char *link_path = g_build_filename(fd_path, name, NULL);
        g_autofree char *target = g_file_read_link(link_path, NULL);

        /* "socket:[INODE]" */
        if (target && g_str_has_prefix(target, "socket:["))
            g_hash_table_add(inodes, g_strndup(target + 8, strcspn(target + 8, "]")));
    }
    if (fixture.on_socket)
        return count_socket_connections(inodes, pid);
    for (int family = 0; family < 2; family++) {
        g_autofree char *path = g_strdup_printf("/proc/%s/net/%s", pid, family ? "tcp6" : "tcp");
        g_autofree char *table = NULL;
        g_auto(GStrv) lines = NULL;

        if (!g_file_get_contents(path, &table, NULL, NULL))
            continue;
        lines = g_strsplit(table, "\n", -1);
        /* "sl local_address rem_address st ... uid timeout inode ...", after a header. */
        for (guint i = 1; lines[i]; i++) {
            g_auto(GStrv) fields = g_strsplit_set(g_strstrip(lines[i]), " ", -1);
            GPtrArray *words = g_ptr_array_new();
            const char *colon;

            for (guint j = 0; fields[j]; j++) {
                if (*fields[j])
                    g_ptr_array_add(words, fields[j]);
            }
            if (words->len >= 10 && (colon = strrchr(g_ptr_array_index(words, 1), ':')) &&
                g_ascii_strtoull(colon + 1, NULL, 16) == fixture.port &&
                !g_str_equal(g_ptr_array_index(words, 3), "0A") /* LISTEN */ &&
                g_hash_table_contains(inodes, g_ptr_array_index(words, 9)))
                n++;
            g_ptr_array_free(words, TRUE);
        }
    }
    return n;
}

static void
wait_connections_at_most(guint n_max)
{
    gint64 deadline = g_get_monotonic_time() + 15 * G_USEC_PER_SEC;

    while (count_http_connections() > n_max && g_get_monotonic_time() < deadline)
        g_usleep(10 * 1000);
    ck_assert_uint_le(count_http_connections(), n_max);
}

/* ---- connection limit, idle timeout, accept errors ---- */

#define N_IDLE 80
#define MAX_CONNECTIONS 64

START_TEST(test_idle_connections_over_the_limit)
{
    GSocket *sockets[N_IDLE];
    guint n_open;
    guint n_closed = 0;

    /* Idle connections never time out here: only the limit makes room. */
    start_plegd("--http-idle-timeout=1h", 0);
    assert_served();
    n_open = count_http_connections();

    for (int i = 0; i < N_IDLE; i++) {
        sockets[i] = open_connection(TRUE);
        /* Some never finish their request, some never start one. */
        if (i % 2)
            send_text(sockets[i], "GET /metrics HTTP/1.1\r\nHo");
    }

    /* A new client is served all the same. */
    assert_served();

    /* At most the limit stays open: the oldest idle ones were closed to make room. */
    wait_connections_at_most(n_open + MAX_CONNECTIONS);
    ck_assert(wait_closed(sockets[0], 15 * G_USEC_PER_SEC));
    for (int i = 0; i < N_IDLE; i++) {
        if (wait_closed(sockets[i], 0))
            n_closed++;
    }
    ck_assert_uint_ge(n_closed, N_IDLE - MAX_CONNECTIONS);
    ck_assert(!wait_closed(sockets[N_IDLE - 1], 0));
    /* The newest are still open on plegd's side, and counted as such. */
    ck_assert_uint_gt(count_http_connections(), n_open + MAX_CONNECTIONS / 2);

    for (int i = 0; i < N_IDLE; i++)
        g_object_unref(sockets[i]);
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
}
END_TEST

START_TEST(test_idle_timeout)
{
    g_autoptr(GSocket) silent = NULL;
    g_autoptr(GSocket) partial = NULL;
    g_autoptr(GSocket) keep_alive = NULL;
    g_autofree char *head = NULL;
    guint n_open;

    start_plegd("--http-idle-timeout=300ms", 0);
    assert_served();
    n_open = count_http_connections();

    silent = open_connection(TRUE);
    partial = open_connection(TRUE);
    send_text(partial, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    keep_alive = open_connection(TRUE);
    send_text(keep_alive, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    head = read_response_head(keep_alive);
    ck_assert_msg(g_str_has_prefix(head, "HTTP/1.1 200"), "%s", head);

    /* No request, half a request, idle after one: each closed by plegd. */
    ck_assert(wait_closed(silent, 15 * G_USEC_PER_SEC));
    ck_assert(wait_closed(partial, 15 * G_USEC_PER_SEC));
    ck_assert(wait_closed(keep_alive, 15 * G_USEC_PER_SEC));
    wait_connections_at_most(n_open);

    assert_served();
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
}
END_TEST

/* accept() failing with EMFILE is logged without a GLib warning (tests run with
 * G_DEBUG=fatal-warnings), rate-limited, and serving resumes once clients close. */
START_TEST(test_accept_at_fd_limit)
{
    GSocket *sockets[N_IDLE] = {NULL};
    const char *needle = "cannot accept an HTTP connection: ";
    g_autofree char *err = NULL;

    /* valgrind keeps fds of its own below the limit, and does not let a wrapped shell set it. */
    if (g_getenv("PLEGD_TEST_WRAPPER")) {
        g_printerr("test_accept_at_fd_limit: skipped under PLEGD_TEST_WRAPPER\n");
        return;
    }

    /* Fewer fds than the connection limit; idle connections stay. */
    start_plegd("--http-idle-timeout=1h", 40);
    assert_served();

    for (int i = 0; i < N_IDLE; i++) {
        g_autofree char *text = plegd_runner_get_stderr(fixture.plegd);

        if (strstr(text, needle))
            break;
        sockets[i] = open_connection(FALSE);
        /* Not faster than plegd accepts: connections beyond its listen backlog would wait. */
        g_usleep(5 * 1000);
    }
    assert_stderr_shows(fixture.plegd, needle);
    /* plegd closes its ends, and accepts again. */
    for (int i = 0; i < N_IDLE; i++)
        g_clear_object(&sockets[i]);

    assert_served();
    err = plegd_runner_get_stderr(fixture.plegd);
    ck_assert_msg(count_messages(err, "cannot accept") == 1, "%s", err);
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
}
END_TEST

/* ---- request bodies ---- */

/* Sends @size bytes, or less when plegd closed the connection. */
static void
send_body(GSocket *socket, gsize size)
{
    g_autofree char *chunk = g_malloc0(64 * 1024);

    for (gsize sent = 0; sent < size;) {
        g_autoptr(GError) error = NULL;
        gssize n = g_socket_send(socket, chunk, MIN(size - sent, 64 * 1024), NULL, &error);

        if (n < 0)
            return;
        sent += (gsize)n;
    }
}

/* Headers of a request with a large body: the answer comes before the body is sent. */
static void
assert_refused_before_body(const char *request, const char *status_line, gsize body_size)
{
    g_autoptr(GSocket) socket = open_connection(TRUE);
    g_autofree char *head = NULL;

    send_text(socket, request);
    head = read_response_head(socket);
    ck_assert_msg(g_str_has_prefix(head, status_line), "%s", head);
    ck_assert_msg(strstr(head, "\r\nConnection: close\r\n"), "%s", head);
    send_body(socket, body_size);
    ck_assert(wait_closed(socket, 15 * G_USEC_PER_SEC));
}

START_TEST(test_large_bodies_refused_unread)
{
    g_autoptr(GSocket) chunked = NULL;
    g_autofree char *head = NULL;
    g_autofree char *chunk = NULL;
    guint64 rss_before;
    guint64 rss_after;
    guint n_open;
    gsize sent = 0;

    start_plegd(NULL, 0);
    assert_served();
    n_open = count_http_connections();
    rss_before = plegd_runner_get_rss_kib(fixture.plegd);

    /* 10 MiB POSTed: 405 at once, nothing kept. */
    assert_refused_before_body("POST /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                               "Content-Length: 10485760\r\n\r\n",
                               "HTTP/1.1 405 ", 10 * MIB);
    /* Also with a method plegd answers, and on a path it does not serve. */
    assert_refused_before_body("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                               "Content-Length: 10485760\r\n\r\n",
                               "HTTP/1.1 413 ", 10 * MIB);
    assert_refused_before_body("PUT /nothing HTTP/1.0\r\nContent-Length: 10485760\r\n\r\n",
                               "HTTP/1.0 404 ", 10 * MIB);
    assert_refused_before_body("POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n",
                               "HTTP/1.1 405 ", MIB);
    /* A negative length is a bad request, and says so (not "too large"). */
    {
        g_autoptr(GSocket) socket = open_connection(TRUE);
        g_autofree char *negative = NULL;
        char body[64] = {0};
        gssize n;

        send_text(socket, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          "Content-Length: -1\r\n\r\n");
        negative = read_response_head(socket);
        ck_assert_msg(g_str_has_prefix(negative, "HTTP/1.1 400 "), "%s", negative);
        n = g_socket_receive(socket, body, sizeof body - 1, NULL, NULL);
        ck_assert_int_gt(n, 0);
        ck_assert_str_eq(body, "400 bad request: invalid Content-Length\n");
    }

    /* A chunked body of unannounced size: refused once it passes 64 KiB. */
    chunked = open_connection(TRUE);
    send_text(chunked, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n");
    chunk = g_strnfill(16 * 1024, 'x');
    while (sent < 10 * MIB && !g_socket_condition_check(chunked, G_IO_IN)) {
        g_autoptr(GError) error = NULL;
        g_autofree char *framed = g_strdup_printf("4000\r\n%s\r\n", chunk);

        if (g_socket_send(chunked, framed, strlen(framed), NULL, &error) < 0)
            break;
        sent += strlen(chunk);
        /* Let plegd read: the refusal is due after 64 KiB, not at the end. */
        if (sent > 64 * 1024)
            g_socket_condition_timed_wait(chunked, G_IO_IN, 10 * 1000, NULL, NULL);
    }
    ck_assert_uint_lt(sent, 10 * MIB);
    head = read_response_head(chunked);
    ck_assert_msg(g_str_has_prefix(head, "HTTP/1.1 413 "), "%s", head);
    ck_assert(wait_closed(chunked, 15 * G_USEC_PER_SEC));

    rss_after = plegd_runner_get_rss_kib(fixture.plegd);
    ck_assert_msg(rss_after < rss_before + 8 * 1024, "VmRSS grew from %" G_GUINT64_FORMAT
                  " KiB to %" G_GUINT64_FORMAT " KiB", rss_before, rss_after);
    wait_connections_at_most(n_open);
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
}
END_TEST

START_TEST(test_small_bodies_still_served)
{
    g_autoptr(GSocket) socket = NULL;
    g_autofree char *head = NULL;

    start_plegd(NULL, 0);

    /* A small body on a GET is read and ignored; the connection stays usable. */
    socket = open_connection(TRUE);
    send_text(socket, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\n"
                      "hello");
    head = read_response_head(socket);
    ck_assert_msg(g_str_has_prefix(head, "HTTP/1.1 200 "), "%s", head);
    g_clear_pointer(&socket, g_object_unref);

    /* No body: 405 from the handler as before, with Allow. */
    socket = open_connection(TRUE);
    send_text(socket, "DELETE /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    g_free(head);
    head = read_response_head(socket);
    ck_assert_msg(g_str_has_prefix(head, "HTTP/1.1 405 "), "%s", head);
    ck_assert_msg(strstr(head, "\r\nAllow: GET, HEAD\r\n"), "%s", head);

    assert_served();
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
}
END_TEST

/* ---- keep-alive ---- */

/* One whole answer (its head, then a body of its Content-Length) read off @socket. */
static char *
read_answer(GSocket *socket)
{
    g_autofree char *head = read_response_head(socket);
    const char *length = strstr(head, "\r\nContent-Length: ");
    g_autofree char *body = NULL;
    gsize size, got = 0;

    ck_assert_msg(length, "no Content-Length:\n%s", head);
    size = (gsize)g_ascii_strtoull(length + strlen("\r\nContent-Length: "), NULL, 10);
    body = g_malloc0(size + 1);
    while (got < size) {
        g_autoptr(GError) error = NULL;
        gssize n = g_socket_receive(socket, body + got, size - got, NULL, &error);

        ck_assert_msg(n > 0, "answer cut after %zu of %zu bytes (%s):\n%s", got, size,
                      error ? error->message : "end of stream", head);
        got += (gsize)n;
    }
    return g_strconcat(head, body, NULL);
}

/* HTTP/1.1 connections stay open after an answer (libsoup 3.2 closes them unless its server has
 * a listener: plegd gives it a stand-in), for one request after another and for pipelined ones;
 * a client's "Connection: close" still closes. */
START_TEST(test_keep_alive)
{
    g_autoptr(GSocket) socket = NULL;
    const char *request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    guint n_open;

    start_plegd("--http-idle-timeout=1h", 0);
    assert_served();

    socket = open_connection(TRUE);
    for (int i = 0; i < 3; i++) {
        g_autofree char *answer = NULL;

        send_text(socket, request);
        answer = read_answer(socket);
        ck_assert_msg(g_str_has_prefix(answer, "HTTP/1.1 200 "), "request %d:\n%s", i, answer);
        ck_assert_msg(!strstr(answer, "\r\nConnection: close\r\n"), "%s", answer);
        ck_assert_msg(strstr(answer, "kubelet_pleg_relist_duration_seconds"), "%s", answer);
    }

    /* Pipelined: both answered, in order, on the same connection. */
    send_text(socket, "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                      "GET /nothing HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    {
        g_autofree char *first = read_answer(socket);
        g_autofree char *second = read_answer(socket);

        ck_assert_msg(g_str_has_prefix(first, "HTTP/1.1 503 "), "%s", first);
        ck_assert_msg(g_str_has_prefix(second, "HTTP/1.1 404 "), "%s", second);
    }
    ck_assert(!wait_closed(socket, 0));

    /* The client asks to close: answered, then closed. */
    send_text(socket, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    g_free(read_answer(socket));
    ck_assert(wait_closed(socket, 15 * G_USEC_PER_SEC));
    g_clear_object(&socket);

    /* Pipelined requests, then the end of the client's side: every one is answered (the end
     * of the stream behind requests libsoup has buffered is no idle close), then closed. */
    socket = open_connection(TRUE);
    send_text(socket, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                      "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                      "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                      "GET /nothing HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    ck_assert(g_socket_shutdown(socket, FALSE, TRUE, NULL));
    for (int i = 0; i < 4; i++) {
        g_autofree char *answer = read_answer(socket);

        ck_assert_msg(g_str_has_prefix(answer, i == 3 ? "HTTP/1.1 404 " : "HTTP/1.1 200 "),
                      "answer %d:\n%s", i, answer);
    }
    ck_assert(wait_closed(socket, 15 * G_USEC_PER_SEC));
    g_clear_object(&socket);

    /* A client that closes a kept-alive connection between requests, or before its first:
     * plegd closes its end at once, not at the idle timeout (an hour here). */
    n_open = count_http_connections();
    for (int i = 0; i < 10; i++) {
        g_autoptr(GSocket) client = open_connection(TRUE);

        /* Every other one leaves before its first request. */
        if (i % 2 == 0) {
            send_text(client, request);
            g_free(read_answer(client));
        }
        ck_assert(g_socket_close(client, NULL));
    }
    wait_connections_at_most(n_open);

    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
}
END_TEST

/* ---- the request target ---- */

/* The whole answer to @request on a new connection (HTTP/1.0: the server closes it). */
static char *
answer_of(const char *request)
{
    g_autoptr(GSocket) socket = open_connection(TRUE);
    g_autoptr(GString) text = g_string_new(NULL);

    send_text(socket, request);
    for (;;) {
        g_autoptr(GError) error = NULL;
        char buffer[4096];
        gssize n = g_socket_receive(socket, buffer, sizeof buffer, NULL, &error);

        ck_assert_msg(n >= 0, "%s", error->message);
        if (n == 0)
            break;
        g_string_append_len(text, buffer, n);
    }
    return g_string_free(g_steal_pointer(&text), FALSE);
}

/* HTTP/1.0 without a Host header: libsoup keeps the query in the path there, plegd splits it
 * off, so routes and parameters read as with a Host.  On the socket libsoup gets a stand-in
 * local address (it takes it for an inet one to build the URI).  Over TCP /events is 403. */
START_TEST(test_http10_without_host)
{
    static const char *const requests[][2] = {
        {"GET /healthz?verbose HTTP/1.0\r\n\r\n", "HTTP/1.0 200 "},
        {"GET /healthz?verbose HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", "HTTP/1.0 200 "},
        {"GET /events?since=yesterday HTTP/1.0\r\n\r\n", NULL},
        {"GET /nothing?x HTTP/1.0\r\n\r\n", "HTTP/1.0 404 "},
    };

    start_plegd(NULL, 0);
    assert_served();
    for (gsize i = 0; i < G_N_ELEMENTS(requests); i++) {
        g_autofree char *answer = answer_of(requests[i][0]);
        const char *expected = requests[i][1];

        if (!expected)
            expected = fixture.on_socket ? "HTTP/1.0 400 " : "HTTP/1.0 403 ";
        ck_assert_msg(g_str_has_prefix(answer, expected), "%s:\n%s", requests[i][0], answer);
        if (i < 2)
            ck_assert_msg(strstr(answer, "\n[+]pleg-dispatcher ok\n"), "not verbose:\n%s", answer);
        if (i == 2 && fixture.on_socket)
            ck_assert_msg(strstr(answer, "invalid since \"yesterday\""), "%s", answer);
        if (i == 2 && !fixture.on_socket)
            ck_assert_msg(strstr(answer, fixture.socket_path), "%s", answer);
    }
}
END_TEST

static Suite *
plegd_http_suite(void)
{
    Suite *suite = suite_create("plegd-http");
    TCase *tc = tcase_create("connections");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, test_idle_connections_over_the_limit, 0, 2);
    tcase_add_loop_test(tc, test_idle_timeout, 0, 2);
    tcase_add_loop_test(tc, test_accept_at_fd_limit, 0, 2);
    tcase_add_loop_test(tc, test_keep_alive, 0, 2);
    suite_add_tcase(suite, tc);

    tc = tcase_create("bodies");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, test_large_bodies_refused_unread, 0, 2);
    tcase_add_loop_test(tc, test_small_bodies_still_served, 0, 2);
    suite_add_tcase(suite, tc);

    tc = tcase_create("target");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, test_http10_without_host, 0, 2);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    SRunner *runner = srunner_create(plegd_http_suite());
    int n_failed;

    /* A connection plegd closed must fail a send, not kill the test. */
    signal(SIGPIPE, SIG_IGN);
    srunner_run_all(runner, CK_NORMAL);
    n_failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return n_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
