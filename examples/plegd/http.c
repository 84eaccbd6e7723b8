/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd's HTTP server: routes, requests and the server's life (new, listen, stop, free).
 * Connections are http-connections.c's, listeners and who may read what on each
 * http-listeners.c's, health rounds http-health.c's, /events events-http.c's, /pods
 * pods-http.c's, /status status-http.c's.
 */
#include <errno.h>
#include <libsoup/soup.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http-private.h"
#include "pleg-config.h"

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

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


/* ---- requests ---- */

void
plegd_http_respond(SoupServerMessage *msg, guint status, const char *content_type, char *body)
{
    soup_server_message_set_status(msg, status, NULL);
    soup_server_message_set_response(msg, content_type, SOUP_MEMORY_TAKE, body, strlen(body));
}

static void
handle_metrics(PlegdHttp *http, SoupServerMessage *msg)
{
    /* kubelet_pleg_last_seen_seconds is set by the PLEG's health check, which kubelet runs
     * every sync loop; plegd runs it only for /readyz (the "pleg" readiness check).  Run it for
     * each scrape too, so that the gauge (and an alert on its age) is current without them. */
    pleg_generic_healthy(pleg_host_get_pleg(http->host), NULL);
    plegd_http_respond(msg, SOUP_STATUS_OK, METRICS_CONTENT_TYPE, pleg_metrics_registry_expose(http->metrics));
}

/* A stream is not idle: its connection leaves the idle timeout and the connection pool. */
static void
handle_events(PlegdHttp *http, SoupServerMessage *msg)
{
    Connection *conn = plegd_http_lookup_connection(http, msg);

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

static void
handle_pods(PlegdHttp *http, SoupServerMessage *msg)
{
    plegd_pods_serve(pleg_host_get_pleg(http->host), msg);
}

typedef void (*RouteFunc)(PlegdHttp *http, SoupServerMessage *msg);

static RouteFunc
lookup_route(PlegdHttp *http, const char *path)
{
    if (g_str_equal(path, "/metrics"))
        return handle_metrics;
    if (g_str_equal(path, "/livez"))
        return plegd_http_handle_livez;
    if (g_str_equal(path, "/healthz"))
        return plegd_http_handle_livez;
    if (g_str_equal(path, "/readyz"))
        return plegd_http_handle_readyz;
    if (http->events && g_str_equal(path, "/events"))
        return handle_events;
    if (g_str_equal(path, "/pods"))
        return handle_pods;
    if (g_str_equal(path, "/status"))
        return plegd_http_handle_status;
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
    {
        /* The request log: who asked (on the socket, its peer credentials). */
        Connection *conn = plegd_http_lookup_connection(http, msg);
        g_autofree char *shown_method = pleg_log_text(method, -1, 32);
        g_autofree char *shown = pleg_log_text(asked, -1, 256);

        g_debug("%s %s from %s", shown_method, shown, conn ? conn->peer : "an unknown client");
    }
    if (!handler) {
        plegd_http_respond(msg, SOUP_STATUS_NOT_FOUND, TEXT_CONTENT_TYPE, g_strdup("404 page not found\n"));
        return;
    }

    /* libsoup drops the body of a HEAD answer itself. */
    if (!is_allowed(method)) {
        soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Allow",
                                     "GET, HEAD");
        plegd_http_respond(msg, SOUP_STATUS_METHOD_NOT_ALLOWED, TEXT_CONTENT_TYPE,
                g_strdup("405 method not allowed\n"));
        return;
    }

    if (!plegd_http_check_access(http, plegd_http_lookup_connection(http, msg), msg, asked))
        return;
    handler(http, msg);
}

static void
on_got_chunk(SoupServerMessage *msg, GBytes *chunk, gpointer user_data)
{
    PlegdHttp *http = user_data;
    Connection *conn = plegd_http_lookup_connection(http, msg);

    if (!conn || conn->closing)
        return;
    conn->body_bytes += (goffset)g_bytes_get_size(chunk);
    if (conn->body_bytes > PLEGD_HTTP_MAX_BODY)
        plegd_http_refuse(http, conn, msg, SOUP_STATUS_REQUEST_ENTITY_TOO_LARGE);
}

/* Runs once a request's headers are in, before libsoup reads its body.  plegd reads no body:
 * one that is announced too large, or sent to a path or with a method that is refused anyway,
 * is answered at once; a small one is read and dropped. */
static void
handle_early(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *query,
             gpointer user_data)
{
    PlegdHttp *http = user_data;
    Connection *conn = plegd_http_lookup_connection(http, msg);
    SoupMessageHeaders *headers = soup_server_message_get_request_headers(msg);
    goffset length = -1; /* not announced */
    guint status = 0;

    if (conn) {
        plegd_http_destroy_source(&conn->idle_watch);
        conn->busy = TRUE;
        conn->body_bytes = 0;
        plegd_http_touch(conn);
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
        plegd_http_refuse(http, conn, msg, status);
        return;
    }

    soup_message_body_set_accumulate(soup_server_message_get_request_body(msg), FALSE);
    if (length < 0)
        g_signal_connect(msg, "got-chunk", G_CALLBACK(on_got_chunk), http);
}

static void
on_request_done(SoupServer *server, SoupServerMessage *msg, gpointer user_data)
{
    Connection *conn = plegd_http_lookup_connection(user_data, msg);

    if (conn && !conn->closing) {
        conn->busy = FALSE;
        conn->streaming = FALSE;
        plegd_http_touch(conn);
        plegd_http_watch_idle(conn);
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
    http->readiness_infos = plegd_http_readiness_infos_new();
    http->connections = g_hash_table_new_full(g_direct_hash, g_direct_equal, NULL, plegd_http_connection_free);
    http->server = soup_server_new("server-header", "plegd/" PLEG_VERSION, NULL);
    soup_server_add_early_handler(http->server, NULL, handle_early, http, NULL);
    soup_server_add_handler(http->server, NULL, handle_request, http, NULL);
    g_signal_connect(http->server, "request-finished", G_CALLBACK(on_request_done), http);
    g_signal_connect(http->server, "request-aborted", G_CALLBACK(on_request_done), http);
    /* Not a GSocketService: it logs every failed accept() as a warning, and retries at once.
     * (libsoup 3.2's own listener leaks the fd of every connection a client closes.) */
    http->listener = g_socket_listener_new();
    http->cancellable = g_cancellable_new();
    plegd_http_health_init(http);
    return http;
}

void
plegd_http_stop_accepting(PlegdHttp *http)
{
    if (http->stopping)
        return;
    http->stopping = TRUE;
    g_cancellable_cancel(http->cancellable);
    plegd_http_destroy_source(&http->accept_later);
    g_socket_listener_close(http->listener);
    plegd_http_remove_unix_socket(http);
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
    plegd_http_health_detach(http);
    g_hash_table_remove_all(http->connections);
    g_signal_handlers_disconnect_by_data(http->server, http);
    soup_server_disconnect(http->server);
    g_clear_object(&http->stand_in_peer);
    g_object_unref(http->server);
    g_hash_table_unref(http->connections);
    g_ptr_array_unref(http->readiness_infos);
    g_free(http->status_config.runtime_endpoint);
    g_object_unref(http->listener);
    g_object_unref(http->cancellable);
    g_clear_pointer(&http->context, g_main_context_unref);
    plegd_http_health_clear(http);
    plegd_http_socket_clear(http);
    plegd_http_tls_clear(http);
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

/* GSocketListener's accept watches the sockets it had when it started, and a cancelled one may
 * still accept a connection (and drop it): the first accept starts from the main loop, once
 * every listener is added. */
gboolean
plegd_http_start_accepting(PlegdHttp *http, GError **error)
{
    if (http->accepting) {
        g_return_val_if_fail(http->accept_later, FALSE);
        return TRUE;
    }
    if (!add_stand_in_listener(http, error))
        return FALSE;
    http->context = g_main_context_ref_thread_default();
    http->accepting = TRUE;
    plegd_http_accept_later(http, g_idle_source_new());
    return TRUE;
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
    if (!plegd_http_start_accepting(http, error))
        return FALSE;

    if (ret_url) {
        /* With port 0 the kernel picked one: report what was bound. */
        guint port = g_inet_socket_address_get_port(G_INET_SOCKET_ADDRESS(bound));
        g_autofree char *text = format_host_port(host, port);

        *ret_url = g_strconcat(http->tls ? "https://" : "http://", text, NULL);
    }
    return TRUE;
}

