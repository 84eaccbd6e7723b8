/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <libsoup/soup.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pleg-config.h"
#include "plegd.h"
#include "pleg-timer-source.h"

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define TEXT_CONTENT_TYPE    "text/plain; charset=utf-8"

/* After answering a request whose body libsoup never read, plegd reads and drops what the client
 * still sends for a while before it closes: closing with unread data would reset the connection,
 * and the client could lose the answer. */
#define LINGER_USEC      (1 * G_USEC_PER_SEC)
#define LINGER_MAX_BYTES (1024 * 1024)

/* accept() failing (at the fd limit the listening socket stays readable) pauses accepting. */
#define ACCEPT_BACKOFF_MIN_MS 100
#define ACCEPT_BACKOFF_MAX_MS 1000

typedef struct _Connection Connection;

struct _PlegdHttp {
    SoupServer *server;
    GSocketListener *listener;
    GCancellable *cancellable;
    GMainContext *context; /* NULL until listening */
    PlegHost *host;
    PlegMetricsRegistry *metrics;
    PlegdEvents *events; /* NULL: no /events */
    gint64 idle_timeout_usec;

    /* The remote address handed to libsoup with each connection (it gives the same object back
     * with every message on it) -> Connection. */
    GHashTable *connections;

    gboolean accepting;
    GSocket *stand_in_peer; /* the other end of the stand-in listener's socket pair */
    GSource *accept_backoff;
    guint backoff_ms;
    guint64 n_accept_errors; /* since the last log line */
    gint64 last_accept_log_usec;

    struct _HealthRound *rounds[2]; /* by PlegHealthKind: the round running, NULL: none */
    struct _RoundThreads *round_threads; /* shared with the rounds' threads */
    PlegMetric *health_waiters;          /* plegd_health_waiters{endpoint} */
    gboolean stopping;                   /* plegd_http_stop_accepting() was called */
};

struct _Connection {
    PlegdHttp *http;
    GSocketConnection *connection; /* weak: libsoup holds it while it serves it */
    GSocketAddress *remote;
    GSource *timer;      /* the idle deadline; when closing, the end of lingering */
    GSource *idle_watch; /* between requests: whether the client closed (watch_idle()) */
    gint64 last_active_usec;
    gboolean busy;      /* from a request's headers to its answer */
    gboolean closing;   /* shut down, or lingering */
    gboolean streaming; /* answering /events: neither idle nor in the connection pool */
    goffset body_bytes; /* of the current request, when its length is not announced */

    struct _HealthWaiter *waiter; /* a health request waiting for its round, or NULL */

    GIOStream *stolen; /* taken from libsoup to answer a refused request ourselves */
    GSource *linger;
    gsize lingered_bytes;
};

static gboolean
bad_address(const char *why, GError **error)
{
    g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                "%s (expected IP:PORT or [IPV6]:PORT)", why);
    return FALSE;
}

gboolean
plegd_parse_bind_address(const char *text, GInetSocketAddress **ret_address, GError **error)
{
    g_autofree char *host = NULL;
    g_autoptr(GInetAddress) address = NULL;
    const char *port_text;
    guint64 port;

    if (text[0] == '[') {
        const char *end = strchr(text, ']');

        if (!end || end[1] != ':')
            return bad_address("missing port after the bracketed IPv6 address", error);
        host = g_strndup(text + 1, end - (text + 1));
        port_text = end + 2;
    } else {
        const char *colon = strrchr(text, ':');

        if (!colon)
            return bad_address("missing port", error);
        host = g_strndup(text, colon - text);
        if (strchr(host, ':'))
            return bad_address("an IPv6 address must be in brackets", error);
        port_text = colon + 1;
    }

    address = g_inet_address_new_from_string(host);
    if (!address || (text[0] == '[' && g_inet_address_get_family(address) != G_SOCKET_FAMILY_IPV6))
        return bad_address("host is not an IP address", error);
    if (!g_ascii_string_to_unsigned(port_text, 10, 0, G_MAXUINT16, &port, NULL))
        return bad_address("port is not a number from 0 to 65535", error);

    *ret_address = G_INET_SOCKET_ADDRESS(g_inet_socket_address_new(address, (guint16)port));
    return TRUE;
}

static char *
format_host_port(GInetAddress *address, guint port)
{
    g_autofree char *host = g_inet_address_to_string(address);

    if (g_inet_address_get_family(address) == G_SOCKET_FAMILY_IPV6)
        return g_strdup_printf("[%s]:%u", host, port);
    return g_strdup_printf("%s:%u", host, port);
}

/* ---- connections ---- */

static void
destroy_source(GSource **source)
{
    if (*source) {
        g_source_destroy(*source);
        g_clear_pointer(source, g_source_unref);
    }
}

static void on_connection_finalized(gpointer data, GObject *where_the_object_was);
static void health_waiter_lose_connection(struct _HealthWaiter *waiter);
static void health_waiter_time_out(struct _HealthWaiter *waiter, gint64 waited_usec);

static void
connection_free(gpointer data)
{
    Connection *conn = data;

    /* Closed under a health request that still waits: nobody to answer. */
    if (conn->waiter)
        health_waiter_lose_connection(conn->waiter);
    if (conn->connection)
        g_object_weak_unref(G_OBJECT(conn->connection), on_connection_finalized, conn);
    destroy_source(&conn->timer);
    destroy_source(&conn->idle_watch);
    destroy_source(&conn->linger);
    if (conn->stolen) {
        g_io_stream_close(conn->stolen, NULL, NULL);
        g_object_unref(conn->stolen);
    }
    g_object_unref(conn->remote);
    g_free(conn);
}

static void
forget(Connection *conn)
{
    g_hash_table_remove(conn->http->connections, conn->remote);
}

/* libsoup let go of the connection: it closed it. */
static void
on_connection_finalized(gpointer data, GObject *where_the_object_was)
{
    Connection *conn = data;

    conn->connection = NULL;
    forget(conn);
}

static void
touch(Connection *conn)
{
    conn->last_active_usec = g_get_monotonic_time();
    g_source_set_ready_time(conn->timer, conn->last_active_usec + conn->http->idle_timeout_usec);
}

static Connection *
lookup_connection(PlegdHttp *http, SoupServerMessage *msg)
{
    GSocketAddress *remote = soup_server_message_get_remote_address(msg);

    return remote ? g_hash_table_lookup(http->connections, remote) : NULL;
}

/* libsoup sees the end of the stream, answers nothing more and closes it. */
static void
shut_down(Connection *conn, const char *why)
{
    g_autoptr(GError) error = NULL;

    g_debug("closing an HTTP connection: %s", why);
    conn->closing = TRUE;
    conn->busy = FALSE;
    if (!g_socket_shutdown(g_socket_connection_get_socket(conn->connection), TRUE, TRUE, &error))
        g_debug("cannot shut down an HTTP connection: %s, ignoring", error->message);
    touch(conn);
}

static gboolean
on_timer(gpointer data)
{
    Connection *conn = data;

    if (conn->stolen) {
        forget(conn); /* lingered long enough */
    } else if (conn->waiter) {
        /* A health request waited the idle timeout for a round that does not end: answered
         * through libsoup, which then closes or keeps the connection as for any answer. */
        health_waiter_time_out(conn->waiter, conn->http->idle_timeout_usec);
        touch(conn);
    } else if (!conn->closing) {
        g_autofree char *idle = pleg_duration_format(conn->http->idle_timeout_usec);
        g_autofree char *why = g_strdup_printf("no request for %s", idle);

        shut_down(conn, why);
    } else {
        /* Shut down a timeout ago, and libsoup still holds it. */
        g_debug("closing an HTTP connection that libsoup did not close");
        g_io_stream_close(G_IO_STREAM(conn->connection), NULL, NULL);
        forget(conn);
    }
    return G_SOURCE_CONTINUE;
}

/* libsoup 3.2 stops reading a kept-alive connection whose client closed it between requests,
 * but never closes its own end: without this the descriptor stays open until the idle timeout.
 * A peek tells the end of the stream from the next request, which is left to libsoup. */
static gboolean
on_idle_readable(GSocket *socket, GIOCondition condition, gpointer data)
{
    Connection *conn = data;
    char c;
    /* recv(2) itself: GLib's receive would wait on a blocking socket when a peek finds nothing
     * (libsoup may have read what made the socket readable). */
    gssize n = recv(g_socket_get_fd(socket), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    int errsv = errno;

    if (n < 0 && (errsv == EAGAIN || errsv == EWOULDBLOCK || errsv == EINTR))
        return G_SOURCE_CONTINUE;
    if (n > 0) {
        /* A request: libsoup reads it. */
        g_clear_pointer(&conn->idle_watch, g_source_unref);
        return G_SOURCE_REMOVE;
    }
    g_debug("closing an HTTP connection: %s", n == 0 ? "the client closed it" : g_strerror(errsv));
    g_io_stream_close(G_IO_STREAM(conn->connection), NULL, NULL);
    forget(conn);
    return G_SOURCE_REMOVE;
}

static void
watch_idle(Connection *conn)
{
    if (conn->idle_watch || !conn->connection)
        return;
    conn->idle_watch = g_socket_create_source(g_socket_connection_get_socket(conn->connection),
                                              G_IO_IN | G_IO_HUP | G_IO_ERR, NULL);
    /* Below libsoup's own sources: a pipelined request that libsoup has buffered already starts
     * (handle_early() drops this watch) before an end of stream behind it is taken for idle. */
    g_source_set_priority(conn->idle_watch, G_PRIORITY_LOW);
    g_source_set_callback(conn->idle_watch, G_SOURCE_FUNC(on_idle_readable), conn, NULL);
    g_source_attach(conn->idle_watch, conn->http->context);
}

static gboolean
on_linger_readable(GSocket *socket, GIOCondition condition, gpointer data)
{
    Connection *conn = data;

    for (int i = 0; i < 16; i++) {
        g_autoptr(GError) error = NULL;
        char buffer[4096];
        gssize n = g_socket_receive_with_blocking(socket, buffer, sizeof buffer, FALSE, NULL,
                                                  &error);

        if (n < 0 && g_error_matches(error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK))
            return G_SOURCE_CONTINUE;
        if (n <= 0)
            break; /* the client is done, or gone */
        conn->lingered_bytes += (gsize)n;
        if (conn->lingered_bytes > LINGER_MAX_BYTES)
            break;
        if (i == 15)
            return G_SOURCE_CONTINUE; /* more next time */
    }
    forget(conn);
    return G_SOURCE_REMOVE;
}

static const char *
refusal_text(guint status)
{
    switch (status) {
    case SOUP_STATUS_NOT_FOUND:
        return "404 page not found\n";
    case SOUP_STATUS_METHOD_NOT_ALLOWED:
        return "405 method not allowed\n";
    case SOUP_STATUS_BAD_REQUEST:
        return "400 bad request: invalid Content-Length\n";
    default:
        return "413 request body too large\n";
    }
}

static void
refuse_without_connection(SoupServerMessage *msg, guint status)
{
    /* Not a connection of ours (it cannot happen): libsoup reads the body, and drops it. */
    soup_message_body_set_accumulate(soup_server_message_get_request_body(msg), FALSE);
    soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Connection",
                                 "close");
    soup_server_message_set_status(msg, status, NULL);
    soup_server_message_set_response(msg, TEXT_CONTENT_TYPE, SOUP_MEMORY_STATIC,
                                     refusal_text(status), strlen(refusal_text(status)));
}

/* Answers @status without reading the request body: the connection is taken from libsoup, the
 * answer written to it and the connection closed after lingering. */
static void
refuse(PlegdHttp *http, Connection *conn, SoupServerMessage *msg, guint status)
{
    g_autoptr(GString) response = g_string_new(NULL);
    g_autoptr(GError) error = NULL;
    const char *text = refusal_text(status);
    gboolean head = g_str_equal(soup_server_message_get_method(msg), SOUP_METHOD_HEAD);
    GSocket *socket;
    gssize n;

    if (!conn || conn->closing) {
        refuse_without_connection(msg, status);
        return;
    }

    g_string_append_printf(response,
                           "HTTP/1.%c %u %s\r\n"
                           "Server: plegd/" PLEG_VERSION "\r\n"
                           "Content-Type: " TEXT_CONTENT_TYPE "\r\n"
                           "Content-Length: %zu\r\n"
                           "Connection: close\r\n",
                           soup_server_message_get_http_version(msg) == SOUP_HTTP_1_0 ? '0' : '1',
                           status, soup_status_get_phrase(status), strlen(text));
    if (status == SOUP_STATUS_METHOD_NOT_ALLOWED)
        g_string_append(response, "Allow: GET, HEAD\r\n");
    g_string_append(response, "\r\n");
    if (!head)
        g_string_append(response, text);

    conn->stolen = soup_server_message_steal_connection(msg);
    if (!conn->stolen) {
        refuse_without_connection(msg, status);
        return;
    }
    conn->closing = TRUE;
    conn->busy = FALSE;
    g_debug("refusing an HTTP request with %u without reading its body", status);

    /* A few hundred bytes on a connection that has not answered anything yet: one try. */
    socket = g_socket_connection_get_socket(conn->connection);
    n = g_socket_send_with_blocking(socket, response->str, response->len, FALSE, NULL, &error);
    if (n != (gssize)response->len) {
        g_debug("cannot answer an HTTP request: %s, closing",
                error ? error->message : "short write");
        forget(conn);
        return;
    }
    if (!g_socket_shutdown(socket, FALSE, TRUE, &error)) {
        g_debug("cannot shut down an HTTP connection: %s, closing", error->message);
        forget(conn);
        return;
    }
    conn->linger = g_socket_create_source(socket, G_IO_IN | G_IO_HUP | G_IO_ERR, NULL);
    g_source_set_callback(conn->linger, G_SOURCE_FUNC(on_linger_readable), conn, NULL);
    g_source_attach(conn->linger, http->context);
    g_source_set_ready_time(conn->timer, g_get_monotonic_time() + LINGER_USEC);
}

static gboolean
is_closed(gpointer key, gpointer value, gpointer user_data)
{
    Connection *conn = value;

    return !conn->stolen && g_io_stream_is_closed(G_IO_STREAM(conn->connection));
}

/* Counts the connections that hold an fd for a while yet, and finds which to give up first: a
 * lingering one, else the one idle for longest. */
static guint
count_connections(PlegdHttp *http, Connection **ret_lingering, Connection **ret_oldest_idle)
{
    GHashTableIter iter;
    Connection *conn;
    Connection *lingering = NULL;
    Connection *oldest = NULL;
    guint n = 0;

    g_hash_table_foreach_remove(http->connections, is_closed, NULL);
    g_hash_table_iter_init(&iter, http->connections);
    while (g_hash_table_iter_next(&iter, NULL, (gpointer *)&conn)) {
        if (conn->stolen)
            lingering = conn;
        else if (conn->closing || conn->streaming)
            continue; /* libsoup closes it any moment; streams have a cap of their own */
        else if (!conn->busy && (!oldest || conn->last_active_usec < oldest->last_active_usec))
            oldest = conn;
        n++;
    }
    *ret_lingering = lingering;
    *ret_oldest_idle = oldest;
    return n;
}

static gboolean
give_up_one(PlegdHttp *http, const char *why)
{
    Connection *lingering;
    Connection *oldest;

    count_connections(http, &lingering, &oldest);
    if (lingering)
        forget(lingering);
    else if (oldest)
        shut_down(oldest, why);
    else
        return FALSE;
    return TRUE;
}

/* At the limit, the newest client wins. */
static gboolean
make_room(PlegdHttp *http)
{
    Connection *lingering;
    Connection *oldest;

    if (count_connections(http, &lingering, &oldest) < PLEGD_HTTP_MAX_CONNECTIONS)
        return TRUE;
    return give_up_one(http, "too many connections, this one is idle for longest");
}

static void
serve(PlegdHttp *http, GSocketConnection *connection)
{
    g_autoptr(GSocketAddress) local = g_socket_connection_get_local_address(connection, NULL);
    g_autoptr(GSocketAddress) remote = g_socket_connection_get_remote_address(connection, NULL);
    g_autoptr(GError) error = NULL;
    Connection *conn;

    if (!make_room(http)) {
        g_debug("refusing an HTTP connection: %u connections are busy",
                g_hash_table_size(http->connections));
        g_io_stream_close(G_IO_STREAM(connection), NULL, NULL);
        return;
    }
    if (!local || !remote) {
        g_debug("an HTTP client left before it was served, ignoring");
        g_io_stream_close(G_IO_STREAM(connection), NULL, NULL);
        return;
    }

    conn = g_new0(Connection, 1);
    conn->http = http;
    conn->connection = connection;
    g_object_weak_ref(G_OBJECT(connection), on_connection_finalized, conn);
    conn->remote = g_object_ref(remote);
    conn->timer = pleg_timer_source_new();
    g_source_set_callback(conn->timer, on_timer, conn, NULL);
    g_source_attach(conn->timer, http->context);
    touch(conn);
    g_hash_table_insert(http->connections, conn->remote, conn);
    /* Idle until its first request too; before libsoup has it, which may answer (and close)
     * the connection before returning. */
    watch_idle(conn);

    if (!soup_server_accept_iostream(http->server, G_IO_STREAM(connection), local, remote,
                                     &error)) {
        g_debug("cannot serve an HTTP connection: %s, ignoring", error->message);
        forget(conn);
        g_io_stream_close(G_IO_STREAM(connection), NULL, NULL);
    }
}

/* ---- accepting ---- */

static void accept_next(PlegdHttp *http);

static gboolean
on_backoff_done(gpointer user_data)
{
    PlegdHttp *http = user_data;

    g_clear_pointer(&http->accept_backoff, g_source_unref);
    accept_next(http);
    return G_SOURCE_REMOVE;
}

static void
accept_failed(PlegdHttp *http, const GError *error)
{
    gint64 now = g_get_monotonic_time();

    http->n_accept_errors++;
    if (http->last_accept_log_usec == 0 ||
        now - http->last_accept_log_usec >= PLEGD_FAILURE_LOG_INTERVAL_USEC) {
        if (http->n_accept_errors == 1)
            g_message("cannot accept an HTTP connection: %s; retrying", error->message);
        else
            g_message("cannot accept HTTP connections: %s (%" G_GUINT64_FORMAT
                      " failures since the last report); retrying",
                      error->message, http->n_accept_errors);
        http->n_accept_errors = 0;
        http->last_accept_log_usec = now;
    } else {
        g_debug("cannot accept an HTTP connection: %s; retrying in %u ms", error->message,
                http->backoff_ms);
    }

    if (g_error_matches(error, G_IO_ERROR, G_IO_ERROR_TOO_MANY_OPEN_FILES))
        give_up_one(http, "out of file descriptors, this one is idle for longest");
    /* Spinning on a listening socket that stays readable would not free an fd sooner. */
    http->accept_backoff = g_timeout_source_new(http->backoff_ms);
    g_source_set_callback(http->accept_backoff, on_backoff_done, http, NULL);
    g_source_attach(http->accept_backoff, http->context);
    http->backoff_ms = MIN(http->backoff_ms * 2, ACCEPT_BACKOFF_MAX_MS);
}

static void
on_accepted(GObject *source, GAsyncResult *result, gpointer user_data)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(GSocketConnection) connection =
        g_socket_listener_accept_finish(G_SOCKET_LISTENER(source), result, NULL, &error);
    PlegdHttp *http;

    /* plegd_http_free() cancels: @user_data is gone. */
    if (g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
        return;
    http = user_data;
    if (!connection) {
        accept_failed(http, error);
        return;
    }
    http->backoff_ms = ACCEPT_BACKOFF_MIN_MS;
    serve(http, connection);
    accept_next(http);
}

static void
accept_next(PlegdHttp *http)
{
    g_socket_listener_accept_async(http->listener, http->cancellable, on_accepted, http);
}

/* ---- requests ---- */

static void
respond(SoupServerMessage *msg, guint status, const char *content_type, char *body)
{
    soup_server_message_set_status(msg, status, NULL);
    soup_server_message_set_response(msg, content_type, SOUP_MEMORY_TAKE, body, strlen(body));
}

static void
handle_metrics(PlegdHttp *http, SoupServerMessage *msg)
{
    /* kubelet_pleg_last_seen_seconds is set by the PLEG's health check, which kubelet runs
     * every sync loop; plegd runs it only for /healthz and the watchdog's ticks.  Run it for
     * each scrape too, so that the gauge (and an alert on its age) is current without them. */
    pleg_generic_healthy(pleg_host_get_pleg(http->host), NULL);
    respond(msg, SOUP_STATUS_OK, METRICS_CONTENT_TYPE, pleg_metrics_registry_expose(http->metrics));
}

/* Kubernetes components' health endpoints: /livez (with /healthz as its alias) fails only for
 * what restarting plegd can fix, and the systemd watchdog follows the same round; /readyz also
 * fails before the first successful relist and while the runtime is unreachable.  The plain
 * answer names the first failing check; ?verbose lists every check, and ?exclude=NAME (any
 * number of times) leaves a check out of the verdict, as kube-apiserver's do.
 *
 * Checkers run on a worker thread, one round of each kind at a time: a plugin's checker that
 * blocks must not block the main context, and with it every scrape and /events stream.  A
 * request that comes while a round runs waits for that round's verdicts. */
typedef struct _HealthRound HealthRound;

typedef struct _HealthWaiter {
    SoupServerMessage *msg; /* a reference; paused until the round ends */
    gulong disconnected_id;
    HealthRound *round; /* NULL once it left the round's list */
    Connection *conn;   /* (nullable) its connection, which points back at it */
    gboolean verbose;
    gboolean as_healthz; /* asked as /healthz, the alias of /livez */
    GPtrArray *excluded; /* the names of ?exclude=, each once */
} HealthWaiter;

/* The rounds' threads, counted so that plegd_http_wait_rounds() can tell whether one still
 * runs (a hung checker) before the host is freed.  Shared: a thread outlives the server. */
typedef struct _RoundThreads {
    gatomicrefcount refs;
    GMutex lock;
    GCond cond;
    guint running;
} RoundThreads;

struct _HealthRound {
    PlegdHttp *http; /* NULL once the server is freed */
    PlegHost *host;
    RoundThreads *threads;
    PlegHealthKind kind;
    GMainContext *context; /* the server's, where the answers go out */
    GPtrArray *waiters;    /* HealthWaiter; only the server's context touches them */
    GPtrArray *results;    /* PlegHealthResult, set by the round's thread */
};

static const struct {
    const char *endpoint;
    guint failure_status;
} health_answers[] = {
    [PLEG_HEALTH_LIVENESS] = {"livez", SOUP_STATUS_INTERNAL_SERVER_ERROR},
    [PLEG_HEALTH_READINESS] = {"readyz", SOUP_STATUS_SERVICE_UNAVAILABLE},
};

static gboolean
str_ptr_array_remove(GPtrArray *array, const char *name)
{
    guint index;

    return g_ptr_array_find_with_equal_func(array, name, g_str_equal, &index) &&
           g_ptr_array_remove_index(array, index);
}

/* Answers @waiter's request from a round's @results. */
static void
health_answer(const HealthWaiter *waiter, GPtrArray *results, PlegHealthKind kind)
{
    /* The endpoint's name as asked: "healthz" is the alias of "livez". */
    const char *endpoint = waiter->as_healthz ? "healthz" : health_answers[kind].endpoint;
    g_autoptr(GString) body = g_string_new(NULL);
    /* The names of @waiter->excluded, borrowed, that no check has matched yet. */
    g_autoptr(GPtrArray) unmatched = g_ptr_array_new();
    const PlegHealthResult *failed = NULL;
    gboolean verbose = waiter->verbose;

    g_ptr_array_extend(unmatched, waiter->excluded, NULL, NULL);

    for (guint i = 0; i < results->len; i++) {
        const PlegHealthResult *result = g_ptr_array_index(results, i);
        /* A plugin's reason is its own text: escaped and cut, like everything untrusted. */
        g_autofree char *reason =
            result->error ? pleg_log_text(result->error->message, -1, 1024) : NULL;

        /* Excluded: it ran with the round, but its verdict does not count. */
        if (str_ptr_array_remove(unmatched, result->name)) {
            if (verbose)
                g_string_append_printf(body, "[+]%s excluded: ok\n", result->name);
            continue;
        }
        if (result->error && !failed) {
            failed = result;
            if (!verbose)
                g_string_append_printf(body, "%s failed: %s", result->name, reason);
        }
        if (!verbose)
            continue;
        if (result->error)
            g_string_append_printf(body, "[-]%s failed: %s\n", result->name, reason);
        else
            g_string_append_printf(body, "[+]%s ok\n", result->name);
    }
    if (verbose && unmatched->len > 0) {
        /* A name no check has: a typo, or a check of another component's. */
        g_string_append(body, "warn: some health checks cannot be excluded: no matches for ");
        for (guint i = 0; i < unmatched->len; i++) {
            g_autofree char *shown = pleg_log_text(unmatched->pdata[i], -1, 256);

            g_string_append_printf(body, "%s\"%s\"", i ? "," : "", shown);
        }
        g_string_append_c(body, '\n');
    }
    if (verbose)
        g_string_append_printf(body, "%s check %s\n", endpoint, failed ? "failed" : "passed");
    else if (!failed)
        g_string_append(body, "ok");
    respond(waiter->msg, failed ? health_answers[kind].failure_status : SOUP_STATUS_OK,
            TEXT_CONTENT_TYPE, g_string_free(g_steal_pointer(&body), FALSE));
}

static RoundThreads *
round_threads_ref(RoundThreads *threads)
{
    g_atomic_ref_count_inc(&threads->refs);
    return threads;
}

static void
round_threads_unref(RoundThreads *threads)
{
    if (!threads || !g_atomic_ref_count_dec(&threads->refs))
        return;
    g_cond_clear(&threads->cond);
    g_mutex_clear(&threads->lock);
    g_free(threads);
}

static void
health_waiter_free(HealthWaiter *waiter)
{
    if (waiter->conn)
        waiter->conn->waiter = NULL;
    g_signal_handler_disconnect(waiter->msg, waiter->disconnected_id);
    g_object_unref(waiter->msg);
    g_ptr_array_unref(waiter->excluded);
    g_free(waiter);
}

static void
count_waiters(PlegdHttp *http, PlegHealthKind kind)
{
    const char *labels[] = {health_answers[kind].endpoint, NULL};
    HealthRound *round = http->rounds[kind];

    pleg_metric_set(http->health_waiters, labels, round ? round->waiters->len : 0);
}

/* Takes @waiter out of its round and frees it, unanswered (its client or its connection is
 * gone).  A waiter no longer in a round's list is being answered: left alone. */
static void
health_waiter_leave(HealthWaiter *waiter)
{
    HealthRound *round = waiter->round;

    if (!round)
        return;
    waiter->round = NULL;
    g_ptr_array_remove_fast(round->waiters, waiter);
    if (round->http)
        count_waiters(round->http, round->kind);
}

static void
health_waiter_lose_connection(HealthWaiter *waiter)
{
    waiter->conn = NULL;
    health_waiter_leave(waiter);
}

static void
health_waiter_time_out(HealthWaiter *waiter, gint64 waited_usec)
{
    SoupServerMessage *msg = g_object_ref(waiter->msg);
    g_autofree char *waited = pleg_duration_format(waited_usec);

    respond(msg, SOUP_STATUS_SERVICE_UNAVAILABLE, TEXT_CONTENT_TYPE,
            g_strdup_printf("the health checks did not finish within %s (a health checker does "
                            "not return)\n",
                            waited));
    health_waiter_leave(waiter);
    soup_server_message_unpause(msg);
    g_object_unref(msg);
}

static void
on_health_waiter_gone(SoupServerMessage *msg, gpointer user_data)
{
    health_waiter_leave(user_data);
}

static void
health_round_free(HealthRound *round)
{
    g_ptr_array_unref(round->waiters);
    g_clear_pointer(&round->results, g_ptr_array_unref);
    round_threads_unref(round->threads);
    g_main_context_unref(round->context);
    g_free(round);
}

/* In the server's context, once the round's thread has the verdicts. */
static gboolean
health_round_done(gpointer data)
{
    HealthRound *round = data;
    g_autoptr(GPtrArray) waiters = g_steal_pointer(&round->waiters);

    /* Answering may disconnect a client: no waiter leaves the list while it is walked. */
    round->waiters = g_ptr_array_new();
    for (guint i = 0; i < waiters->len; i++)
        ((HealthWaiter *)g_ptr_array_index(waiters, i))->round = NULL;
    if (round->http) {
        round->http->rounds[round->kind] = NULL;
        count_waiters(round->http, round->kind);
    }
    for (guint i = 0; i < waiters->len && round->http; i++) {
        HealthWaiter *waiter = g_ptr_array_index(waiters, i);

        health_answer(waiter, round->results, round->kind);
        soup_server_message_unpause(waiter->msg);
    }
    return G_SOURCE_REMOVE;
}

/* A thread of its own for each round (at most one per kind at a time): GLib's and libpleg's
 * hand-offs are what ThreadSanitizer's shim sees, GTask's internal pool is not. */
static gpointer
health_round_thread(gpointer data)
{
    HealthRound *round = data;
    RoundThreads *threads = round->threads;

    round->results = pleg_host_check_all(round->host, round->kind);
    g_mutex_lock(&threads->lock);
    threads->running--;
    g_cond_broadcast(&threads->cond);
    g_mutex_unlock(&threads->lock);
    g_main_context_invoke_full(round->context, G_PRIORITY_DEFAULT, health_round_done, round,
                               (GDestroyNotify)health_round_free);
    return NULL;
}

static void
start_round(PlegdHttp *http, PlegHealthKind kind)
{
    HealthRound *round = g_new0(HealthRound, 1);

    round->http = http;
    round->host = http->host;
    round->threads = round_threads_ref(http->round_threads);
    round->kind = kind;
    round->context = g_main_context_ref_thread_default();
    round->waiters = g_ptr_array_new_with_free_func((GDestroyNotify)health_waiter_free);
    http->rounds[kind] = round;
    g_mutex_lock(&http->round_threads->lock);
    http->round_threads->running++;
    g_mutex_unlock(&http->round_threads->lock);
    g_thread_unref(g_thread_new("plegd-health", health_round_thread, round));
}

static void
handle_health(PlegdHttp *http, SoupServerMessage *msg, PlegHealthKind kind)
{
    g_autofree char *path = NULL, *query = NULL;
    g_autoptr(GPtrArray) params = NULL;
    g_autoptr(GError) error = NULL;
    HealthWaiter *waiter;
    Connection *conn;

    plegd_http_get_target(msg, &path, &query);
    params = plegd_http_parse_query(query, &error);
    if (!params) {
        respond(msg, SOUP_STATUS_BAD_REQUEST, TEXT_CONTENT_TYPE,
                g_strconcat(error->message, "\n", NULL));
        return;
    }
    /* No round starts once the host may be freed. */
    if (http->stopping) {
        respond(msg, SOUP_STATUS_SERVICE_UNAVAILABLE, TEXT_CONTENT_TYPE,
                g_strdup("plegd is shutting down\n"));
        return;
    }
    if (http->rounds[kind] && http->rounds[kind]->waiters->len >= PLEGD_HEALTH_MAX_WAITERS) {
        respond(msg, SOUP_STATUS_SERVICE_UNAVAILABLE, TEXT_CONTENT_TYPE,
                g_strdup_printf("%u %s requests already wait for a health check that has not "
                                "finished (a health checker does not return)\n",
                                PLEGD_HEALTH_MAX_WAITERS, health_answers[kind].endpoint));
        return;
    }
    waiter = g_new0(HealthWaiter, 1);
    waiter->as_healthz = g_str_equal(path, "/healthz");
    waiter->excluded = g_ptr_array_new_with_free_func(g_free);
    /* Other parameters are ignored, as kube-apiserver ignores them. */
    for (guint i = 0; i < params->len; i += 2) {
        const char *name = params->pdata[i], *value = params->pdata[i + 1];

        if (g_str_equal(name, "verbose"))
            waiter->verbose = TRUE;
        else if (g_str_equal(name, "exclude") &&
                 !g_ptr_array_find_with_equal_func(waiter->excluded, value, g_str_equal, NULL))
            g_ptr_array_add(waiter->excluded, g_strdup(value));
    }
    waiter->msg = g_object_ref(msg);
    waiter->disconnected_id =
        g_signal_connect(msg, "disconnected", G_CALLBACK(on_health_waiter_gone), waiter);
    soup_server_message_pause(msg);

    if (!http->rounds[kind])
        start_round(http, kind);
    waiter->round = http->rounds[kind];
    g_ptr_array_add(waiter->round->waiters, waiter);
    count_waiters(http, kind);
    /* A client that closes its end may still want the answer (a half-close after pipelined
     * requests): the waiter stays until the round ends, or until the idle timeout closes its
     * connection (connection_free()). */
    conn = lookup_connection(http, msg);
    if (conn) {
        waiter->conn = conn;
        conn->waiter = waiter;
    }
}

static void
handle_livez(PlegdHttp *http, SoupServerMessage *msg)
{
    handle_health(http, msg, PLEG_HEALTH_LIVENESS);
}

static void
handle_readyz(PlegdHttp *http, SoupServerMessage *msg)
{
    handle_health(http, msg, PLEG_HEALTH_READINESS);
}

/* A stream is not idle: its connection leaves the idle timeout and the connection pool. */
static void
handle_events(PlegdHttp *http, SoupServerMessage *msg)
{
    Connection *conn = lookup_connection(http, msg);

    GSocket *socket = conn ? g_socket_connection_get_socket(conn->connection) : NULL;

    if (plegd_events_serve(http->events, msg, socket) && conn) {
        conn->streaming = TRUE;
        g_source_set_ready_time(conn->timer, -1);
    }
}

void
plegd_http_get_target(SoupServerMessage *msg, char **ret_path, char **ret_query)
{
    GUri *uri = soup_server_message_get_uri(msg);
    const char *path = g_uri_get_path(uri);
    const char *query = g_uri_get_query(uri);
    const char *mark = query ? NULL : strchr(path, '?');

    *ret_path = mark ? g_strndup(path, (gsize)(mark - path)) : g_strdup(path);
    *ret_query = mark ? g_strdup(mark + 1) : g_strdup(query);
}

/* One form-encoded part of a query; NULL when malformed or when it would hold a NUL. */
static char *
query_unescape(const char *text, gssize length)
{
    g_autofree char *spaced = g_strndup(text, length < 0 ? strlen(text) : (gsize)length);

    g_strdelimit(spaced, "+", ' ');
    return g_uri_unescape_string(spaced, NULL);
}

GPtrArray *
plegd_http_parse_query(const char *query, GError **error)
{
    g_auto(GStrv) parts = query ? g_strsplit(query, "&", -1) : NULL;
    g_autoptr(GPtrArray) params = g_ptr_array_new_with_free_func(g_free);

    for (char **part = parts; part && *part; part++) {
        const char *equals = strchr(*part, '=');
        char *name, *value;

        if (**part == '\0')
            continue;
        name = query_unescape(*part, equals ? equals - *part : -1);
        value = query_unescape(equals ? equals + 1 : "", -1);
        if (!name || !value) {
            g_autofree char *shown = pleg_log_text(*part, -1, 0);

            g_free(name);
            g_free(value);
            g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                        "malformed query parameter \"%s\" (a bad %%-escape, or %%00)", shown);
            return NULL;
        }
        g_ptr_array_add(params, name);
        g_ptr_array_add(params, value);
    }
    return g_steal_pointer(&params);
}

typedef void (*RouteFunc)(PlegdHttp *http, SoupServerMessage *msg);

static RouteFunc
lookup_route(PlegdHttp *http, const char *path)
{
    if (g_str_equal(path, "/metrics"))
        return handle_metrics;
    if (g_str_equal(path, "/livez"))
        return handle_livez;
    if (g_str_equal(path, "/healthz"))
        return handle_livez;
    if (g_str_equal(path, "/readyz"))
        return handle_readyz;
    if (http->events && g_str_equal(path, "/events"))
        return handle_events;
    return NULL;
}

static gboolean
route_exists(PlegdHttp *http, SoupServerMessage *msg)
{
    g_autofree char *path = NULL, *query = NULL;

    plegd_http_get_target(msg, &path, &query);
    return lookup_route(http, path) != NULL;
}

static gboolean
is_allowed(const char *method)
{
    return g_str_equal(method, SOUP_METHOD_GET) || g_str_equal(method, SOUP_METHOD_HEAD);
}

static void
handle_request(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *query,
               gpointer user_data)
{
    PlegdHttp *http = user_data;
    const char *method = soup_server_message_get_method(msg);
    g_autofree char *asked = NULL, *query_text = NULL;
    RouteFunc handler;

    plegd_http_get_target(msg, &asked, &query_text);
    handler = lookup_route(http, asked);
    if (!handler) {
        respond(msg, SOUP_STATUS_NOT_FOUND, TEXT_CONTENT_TYPE, g_strdup("404 page not found\n"));
        return;
    }

    /* libsoup drops the body of a HEAD answer itself. */
    if (!is_allowed(method)) {
        soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Allow",
                                     "GET, HEAD");
        respond(msg, SOUP_STATUS_METHOD_NOT_ALLOWED, TEXT_CONTENT_TYPE,
                g_strdup("405 method not allowed\n"));
        return;
    }

    handler(http, msg);
}

static void
on_got_chunk(SoupServerMessage *msg, GBytes *chunk, gpointer user_data)
{
    PlegdHttp *http = user_data;
    Connection *conn = lookup_connection(http, msg);

    if (!conn || conn->closing)
        return;
    conn->body_bytes += (goffset)g_bytes_get_size(chunk);
    if (conn->body_bytes > PLEGD_HTTP_MAX_BODY)
        refuse(http, conn, msg, SOUP_STATUS_REQUEST_ENTITY_TOO_LARGE);
}

/* Runs once a request's headers are in, before libsoup reads its body.  plegd reads no body:
 * one that is announced too large, or sent to a path or with a method that is refused anyway,
 * is answered at once; a small one is read and dropped. */
static void
handle_early(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *query,
             gpointer user_data)
{
    PlegdHttp *http = user_data;
    Connection *conn = lookup_connection(http, msg);
    SoupMessageHeaders *headers = soup_server_message_get_request_headers(msg);
    goffset length = -1; /* not announced */
    guint status = 0;

    if (conn) {
        destroy_source(&conn->idle_watch);
        conn->busy = TRUE;
        conn->body_bytes = 0;
        touch(conn);
    }

    switch (soup_message_headers_get_encoding(headers)) {
    case SOUP_ENCODING_NONE:
        return;
    case SOUP_ENCODING_CONTENT_LENGTH:
        length = soup_message_headers_get_content_length(headers);
        if (length == 0)
            return;
        break;
    default:
        break;
    }

    /* libsoup 3.2 takes "Content-Length: -10" as a length and warns when it makes the body's
     * stream of it (found by the http-request fuzz target): refuse it before any body is read. */
    if (soup_message_headers_get_encoding(headers) == SOUP_ENCODING_CONTENT_LENGTH && length < 0)
        status = SOUP_STATUS_BAD_REQUEST;
    else if (!route_exists(http, msg))
        status = SOUP_STATUS_NOT_FOUND;
    else if (!is_allowed(soup_server_message_get_method(msg)))
        status = SOUP_STATUS_METHOD_NOT_ALLOWED;
    else if (length > PLEGD_HTTP_MAX_BODY)
        status = SOUP_STATUS_REQUEST_ENTITY_TOO_LARGE;
    if (status != 0) {
        refuse(http, conn, msg, status);
        return;
    }

    soup_message_body_set_accumulate(soup_server_message_get_request_body(msg), FALSE);
    if (length < 0)
        g_signal_connect(msg, "got-chunk", G_CALLBACK(on_got_chunk), http);
}

static void
on_request_done(SoupServer *server, SoupServerMessage *msg, gpointer user_data)
{
    Connection *conn = lookup_connection(user_data, msg);

    if (conn && !conn->closing) {
        conn->busy = FALSE;
        conn->streaming = FALSE;
        touch(conn);
        watch_idle(conn);
    }
}

PlegdHttp *
plegd_http_new(PlegHost *host)
{
    PlegdHttp *http = g_new0(PlegdHttp, 1);

    http->host = host;
    http->metrics = pleg_metrics_registry_ref(pleg_host_get_metrics(host));
    http->idle_timeout_usec = PLEGD_HTTP_IDLE_TIMEOUT_USEC;
    http->backoff_ms = ACCEPT_BACKOFF_MIN_MS;
    http->connections = g_hash_table_new_full(g_direct_hash, g_direct_equal, NULL, connection_free);
    http->server = soup_server_new("server-header", "plegd/" PLEG_VERSION, NULL);
    soup_server_add_early_handler(http->server, NULL, handle_early, http, NULL);
    soup_server_add_handler(http->server, NULL, handle_request, http, NULL);
    g_signal_connect(http->server, "request-finished", G_CALLBACK(on_request_done), http);
    g_signal_connect(http->server, "request-aborted", G_CALLBACK(on_request_done), http);
    /* Not a GSocketService: it logs every failed accept() as a warning, and retries at once.
     * (libsoup 3.2's own listener leaks the fd of every connection a client closes.) */
    http->listener = g_socket_listener_new();
    http->cancellable = g_cancellable_new();
    http->round_threads = g_new0(RoundThreads, 1);
    g_atomic_ref_count_init(&http->round_threads->refs);
    g_mutex_init(&http->round_threads->lock);
    g_cond_init(&http->round_threads->cond);
    http->health_waiters = pleg_metrics_register(
        http->metrics, PLEG_METRIC_GAUGE, "plegd_health_waiters",
        "Health requests waiting for the health check round under way, by endpoint; at "
        "the bound further requests are answered 503 at once.",
        (const char *const[]){"endpoint", NULL}, NULL, 0);
    count_waiters(http, PLEG_HEALTH_LIVENESS);
    count_waiters(http, PLEG_HEALTH_READINESS);
    return http;
}

void
plegd_http_stop_accepting(PlegdHttp *http)
{
    if (http->stopping)
        return;
    http->stopping = TRUE;
    g_cancellable_cancel(http->cancellable);
    destroy_source(&http->accept_backoff);
    g_socket_listener_close(http->listener);
}

gboolean
plegd_http_wait_rounds(PlegdHttp *http, gint64 timeout_usec)
{
    RoundThreads *threads = http->round_threads;
    gint64 deadline = g_get_monotonic_time() + timeout_usec;
    gboolean idle;

    g_mutex_lock(&threads->lock);
    while (threads->running > 0 && g_cond_wait_until(&threads->cond, &threads->lock, deadline))
        ;
    idle = threads->running == 0;
    g_mutex_unlock(&threads->lock);
    return idle;
}

void
plegd_http_set_events(PlegdHttp *http, PlegdEvents *events)
{
    http->events = events;
}

void
plegd_http_set_idle_timeout(PlegdHttp *http, gint64 timeout_usec)
{
    http->idle_timeout_usec = timeout_usec;
}

void
plegd_http_free(PlegdHttp *http)
{
    if (!http)
        return;
    plegd_http_stop_accepting(http);
    /* A round still running answers nobody. */
    for (gsize i = 0; i < G_N_ELEMENTS(http->rounds); i++)
        if (http->rounds[i])
            http->rounds[i]->http = NULL;
    g_hash_table_remove_all(http->connections);
    g_signal_handlers_disconnect_by_data(http->server, http);
    soup_server_disconnect(http->server);
    g_clear_object(&http->stand_in_peer);
    g_object_unref(http->server);
    g_hash_table_unref(http->connections);
    g_object_unref(http->listener);
    g_object_unref(http->cancellable);
    g_clear_pointer(&http->context, g_main_context_unref);
    round_threads_unref(http->round_threads);
    pleg_metrics_registry_unref(http->metrics);
    g_free(http);
}

/* libsoup 3.2 keeps a connection open after an answer only while the server has a listener of
 * its own (request_finished() in soup-server.c); without one it closes every connection after
 * its first answer, without "Connection: close", and keep-alive clients (Prometheus, curl) find
 * the connection dead.  plegd accepts connections itself, so it gives libsoup a stand-in
 * listener that never accepts anything: one end of a connected socket pair, whose other end
 * plegd holds and never writes to, so it never becomes readable. */
static gboolean
add_stand_in_listener(PlegdHttp *http, GError **error)
{
    g_autoptr(GSocket) socket = NULL;
    int fds[2];

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0) {
        int errsv = errno;

        g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errsv),
                    "cannot make the HTTP server's stand-in listener: %s", g_strerror(errsv));
        return FALSE;
    }
    socket = g_socket_new_from_fd(fds[0], error);
    if (socket)
        http->stand_in_peer = g_socket_new_from_fd(fds[1], error);
    if (!socket || !http->stand_in_peer) {
        if (!socket)
            close(fds[0]);
        close(fds[1]);
        return FALSE;
    }
    return soup_server_listen_socket(http->server, socket, 0, error);
}

gboolean
plegd_http_listen(PlegdHttp *http, GInetSocketAddress *address, char **ret_url, GError **error)
{
    GInetAddress *host = g_inet_socket_address_get_address(address);
    g_autoptr(GSocketAddress) bound = NULL;

    if (!g_socket_listener_add_address(http->listener, G_SOCKET_ADDRESS(address),
                                       G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_TCP, NULL, &bound,
                                       error)) {
        g_autofree char *text = format_host_port(host, g_inet_socket_address_get_port(address));

        g_prefix_error(error, "cannot listen on %s: ", text);
        return FALSE;
    }
    if (!http->accepting) {
        if (!add_stand_in_listener(http, error))
            return FALSE;
        http->context = g_main_context_ref_thread_default();
        http->accepting = TRUE;
        accept_next(http);
    }

    if (ret_url) {
        /* With port 0 the kernel picked one: report what was bound. */
        guint port = g_inet_socket_address_get_port(G_INET_SOCKET_ADDRESS(bound));
        g_autofree char *text = format_host_port(host, port);

        *ret_url = g_strconcat("http://", text, NULL);
    }
    return TRUE;
}
