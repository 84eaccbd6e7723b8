/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd's HTTP connections: plegd accepts them itself (with a backoff when accept() fails), on
 * TLS runs the handshake (http-tls.c), hands each to libsoup, and keeps what libsoup 3.2 does
 * not: an idle timeout, a bound on connections, closing the end of a client that left, and
 * refusing a request without reading its body (lingering before the close).
 */
#include <errno.h>
#include <libsoup/soup.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http-private.h"
#include "pleg-config.h"
#include "pleg-timer-source.h"

/* After answering a request whose body libsoup never read, plegd reads and drops what the client
 * still sends for a while before it closes: closing with unread data would reset the connection,
 * and the client could lose the answer. */
#define LINGER_USEC      (1 * G_USEC_PER_SEC)
#define LINGER_MAX_BYTES (1024 * 1024)

/* ---- connections ---- */

void
plegd_http_destroy_source(GSource **source)
{
    if (*source) {
        g_source_destroy(*source);
        g_clear_pointer(source, g_source_unref);
    }
}

void
plegd_http_connection_free(gpointer data)
{
    Connection *conn = data;

    /* Closed under a health request that still waits: nobody to answer. */
    if (conn->waiter)
        plegd_http_health_waiter_lose_connection(conn->waiter);
    /* The handshake's callback sees the cancellation and leaves; its task holds the TLS
     * connection until then. */
    if (conn->handshake_cancellable)
        g_cancellable_cancel(conn->handshake_cancellable);
    g_clear_object(&conn->handshake_cancellable);
    g_clear_object(&conn->handshaking);
    g_clear_object(&conn->client_certificate);
    plegd_http_destroy_source(&conn->timer);
    plegd_http_destroy_source(&conn->idle_watch);
    plegd_http_destroy_source(&conn->linger);
    if (conn->stolen) {
        g_io_stream_close(conn->stolen, NULL, NULL);
        g_object_unref(conn->stolen);
    }
    g_clear_object(&conn->stream);
    g_clear_object(&conn->connection);
    g_object_unref(conn->remote);
    g_free(conn->peer);
    g_free(conn);
}

static void
forget(Connection *conn)
{
    g_hash_table_remove(conn->http->connections, conn->remote);
}

/* Whether libsoup is done with @conn: it closes the stream when it lets go. */
static gboolean
libsoup_closed(Connection *conn)
{
    return !conn->stolen && conn->stream && g_io_stream_is_closed(conn->stream);
}

void
plegd_http_touch(Connection *conn)
{
    conn->last_active_usec = g_get_monotonic_time();
    g_source_set_ready_time(conn->timer, conn->last_active_usec + conn->http->idle_timeout_usec);
}

Connection *
plegd_http_lookup_connection(PlegdHttp *http, SoupServerMessage *msg)
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
    plegd_http_touch(conn);
}

void
plegd_http_close_connection(Connection *conn, const char *why)
{
    if (!conn->closing)
        shut_down(conn, why);
}

static gboolean
on_timer(gpointer data)
{
    Connection *conn = data;

    if (conn->stolen || libsoup_closed(conn)) {
        forget(conn); /* lingered long enough, or libsoup closed it */
    } else if (conn->waiter) {
        /* A health request waited the idle timeout for a round that does not end: answered
         * through libsoup, which then closes or keeps the connection as for any answer. */
        plegd_http_health_waiter_time_out(conn->waiter, conn->http->idle_timeout_usec);
        plegd_http_touch(conn);
    } else if (!conn->closing) {
        g_autofree char *idle = pleg_duration_format(conn->http->idle_timeout_usec);
        g_autofree char *why = g_strdup_printf("no request for %s", idle);

        shut_down(conn, why);
    } else if (conn->handshaking) {
        /* A TLS handshake that did not end when shut down a timeout ago. */
        forget(conn);
    } else {
        /* Shut down a timeout ago, and libsoup still holds it. */
        g_debug("closing an HTTP connection that libsoup did not close");
        g_io_stream_close(conn->stream, NULL, NULL);
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
    gssize n;
    int errsv;

    if (libsoup_closed(conn)) {
        forget(conn);
        return G_SOURCE_REMOVE;
    }
    /* recv(2) itself: GLib's receive would wait on a blocking socket when a peek finds nothing
     * (libsoup may have read what made the socket readable). */
    n = recv(g_socket_get_fd(socket), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    errsv = errno;
    if (n < 0 && (errsv == EAGAIN || errsv == EWOULDBLOCK || errsv == EINTR))
        return G_SOURCE_CONTINUE;
    if (n > 0) {
        /* A request: libsoup reads it. */
        g_clear_pointer(&conn->idle_watch, g_source_unref);
        return G_SOURCE_REMOVE;
    }
    g_debug("closing an HTTP connection: %s", n == 0 ? "the client closed it" : g_strerror(errsv));
    g_io_stream_close(conn->stream, NULL, NULL);
    forget(conn);
    return G_SOURCE_REMOVE;
}

void
plegd_http_watch_idle(Connection *conn)
{
    if (conn->idle_watch || !conn->stream || libsoup_closed(conn))
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
void
plegd_http_refuse(PlegdHttp *http, Connection *conn, SoupServerMessage *msg, guint status)
{
    g_autoptr(GString) response = g_string_new(NULL);
    g_autoptr(GError) error = NULL;
    const char *text = refusal_text(status);
    gboolean head = g_str_equal(soup_server_message_get_method(msg), SOUP_METHOD_HEAD);
    GSocket *socket;
    GOutputStream *output;
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

    /* A few hundred bytes on a connection that has not answered anything yet: one try, through
     * TLS when the connection has it. */
    socket = g_socket_connection_get_socket(conn->connection);
    output = g_io_stream_get_output_stream(conn->stream);
    n = g_pollable_output_stream_write_nonblocking(G_POLLABLE_OUTPUT_STREAM(output), response->str,
                                                   response->len, NULL, &error);
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
    return libsoup_closed(value);
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

/* Gives @conn to libsoup, which serves @stream (the socket's connection, or its TLS one). */
static void
hand_over(PlegdHttp *http, Connection *conn, GIOStream *stream, GSocketAddress *local)
{
    g_autoptr(GError) error = NULL;

    conn->stream = g_object_ref(stream);
    /* Idle until its first request too; before libsoup has it, which may answer (and close)
     * the connection before returning. */
    plegd_http_watch_idle(conn);
    if (!soup_server_accept_iostream(http->server, stream, local, conn->remote, &error)) {
        g_debug("cannot serve an HTTP connection: %s, ignoring", error->message);
        g_io_stream_close(stream, NULL, NULL);
        forget(conn);
    }
}

typedef struct {
    Connection *conn;
    GCancellable *cancellable; /* cancelled when @conn is freed */
} Handshake;

static void
on_handshake_done(GObject *source, GAsyncResult *result, gpointer data)
{
    Handshake *handshake = data;
    g_autoptr(GCancellable) cancellable = handshake->cancellable;
    Connection *conn = handshake->conn;
    g_autoptr(GError) error = NULL;
    gboolean done = g_tls_connection_handshake_finish(G_TLS_CONNECTION(source), result, &error);
    g_autoptr(GTlsConnection) tls = NULL;
    g_autoptr(GSocketAddress) local = NULL;
    GTlsCertificate *client;

    g_free(handshake);
    if (g_cancellable_is_cancelled(cancellable))
        return; /* @conn is gone */
    tls = g_steal_pointer(&conn->handshaking);
    g_clear_object(&conn->handshake_cancellable);
    if (!done || conn->closing) {
        g_debug("refusing TLS client %s: %s", conn->peer,
                error ? error->message : "closed during the handshake");
        forget(conn);
        return;
    }
    client = g_tls_connection_get_peer_certificate(tls);
    if (client && g_tls_connection_get_peer_certificate_errors(tls) != 0) {
        /* Refused in the handshake (http-tls.c's accept-certificate): never here. */
        g_debug("refusing TLS client %s: its certificate %s", conn->peer,
                plegd_http_describe_tls_errors(g_tls_connection_get_peer_certificate_errors(tls)));
        forget(conn);
        return;
    }
    if (client) {
        g_autofree char *subject = g_tls_certificate_get_subject_name(client);
        char *peer = g_strdup_printf("%s (%s)", conn->peer, subject ? subject : "no subject");

        conn->client_certificate = g_object_ref(client);
        g_free(conn->peer);
        conn->peer = peer;
    }
    local = g_socket_connection_get_local_address(conn->connection, NULL);
    if (!local) {
        g_debug("an HTTP client left during the TLS handshake, ignoring");
        forget(conn);
        return;
    }
    g_debug("TLS handshake done with %s", conn->peer);
    hand_over(conn->http, conn, G_IO_STREAM(tls), local);
}

static void
start_handshake(PlegdHttp *http, Connection *conn)
{
    g_autoptr(GError) error = NULL;
    Handshake *handshake;

    conn->handshaking = plegd_http_tls_wrap(http, conn->connection, &error);
    if (!conn->handshaking) {
        g_debug("cannot start TLS with %s: %s, closing", conn->peer, error->message);
        g_io_stream_close(G_IO_STREAM(conn->connection), NULL, NULL);
        forget(conn);
        return;
    }
    conn->handshake_cancellable = g_cancellable_new();
    handshake = g_new0(Handshake, 1);
    handshake->conn = conn;
    handshake->cancellable = g_object_ref(conn->handshake_cancellable);
    /* Bounded by the idle timeout, as a request is. */
    g_tls_connection_handshake_async(conn->handshaking, G_PRIORITY_DEFAULT,
                                     conn->handshake_cancellable, on_handshake_done, handshake);
}

static void
serve(PlegdHttp *http, GSocketConnection *connection)
{
    g_autoptr(GSocketAddress) local = g_socket_connection_get_local_address(connection, NULL);
    g_autoptr(GSocketAddress) remote = g_socket_connection_get_remote_address(connection, NULL);
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
    conn->connection = g_object_ref(connection);
    if (g_socket_get_family(g_socket_connection_get_socket(connection)) == G_SOCKET_FAMILY_UNIX) {
        conn->kind = LISTENER_UNIX;
        conn->peer = plegd_http_describe_unix_peer(g_socket_connection_get_socket(connection));
        /* libsoup takes the local address for an inet one (see its getter). */
        g_object_unref(local);
        local = g_object_ref(plegd_http_get_unix_stand_in_local(http));
    } else {
        conn->kind = http->tls ? LISTENER_TLS : LISTENER_TCP;
        conn->peer = g_socket_connectable_to_string(G_SOCKET_CONNECTABLE(remote));
    }
    g_debug("an HTTP connection from %s", conn->peer);
    conn->remote = g_object_ref(remote);
    conn->timer = pleg_timer_source_new();
    g_source_set_callback(conn->timer, on_timer, conn, NULL);
    g_source_attach(conn->timer, http->context);
    plegd_http_touch(conn);
    g_hash_table_insert(http->connections, conn->remote, conn);
    if (conn->kind == LISTENER_TLS)
        start_handshake(http, conn);
    else
        hand_over(http, conn, G_IO_STREAM(connection), local);
}

/* ---- accepting ---- */


static gboolean
on_accept_later(gpointer user_data)
{
    PlegdHttp *http = user_data;

    g_clear_pointer(&http->accept_later, g_source_unref);
    plegd_http_accept_next(http);
    return G_SOURCE_REMOVE;
}

void
plegd_http_accept_later(PlegdHttp *http, GSource *source)
{
    http->accept_later = source;
    g_source_set_callback(source, on_accept_later, http, NULL);
    g_source_attach(source, http->context);
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
    plegd_http_accept_later(http, g_timeout_source_new(http->backoff_ms));
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
    plegd_http_accept_next(http);
}

void
plegd_http_accept_next(PlegdHttp *http)
{
    g_socket_listener_accept_async(http->listener, http->cancellable, on_accepted, http);
}

