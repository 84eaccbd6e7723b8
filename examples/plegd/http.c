/* SPDX-License-Identifier: Apache-2.0 */
#include <libsoup/soup.h>

#include "pleg-config.h"
#include "plegd.h"

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define TEXT_CONTENT_TYPE    "text/plain; charset=utf-8"

struct _PlegdHttp {
    SoupServer *server;
    GSocketService *service;
    PlegHost *host;
    PlegMetricsRegistry *metrics;
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

static void
respond(SoupServerMessage *msg, guint status, const char *content_type, char *body)
{
    soup_server_message_set_status(msg, status, NULL);
    soup_server_message_set_response(msg, content_type, SOUP_MEMORY_TAKE, body, strlen(body));
}

static void
handle_metrics(PlegdHttp *http, SoupServerMessage *msg)
{
    respond(msg, SOUP_STATUS_OK, METRICS_CONTENT_TYPE, pleg_metrics_registry_expose(http->metrics));
}

/* The PLEG's own verdict first, as kubelet's /healthz gives it: the host's "pleg" checker
 * forgives a first relist that is slow (for the sake of the watchdog), an operator asking
 * /healthz wants to know at once.  Then every checker of the host and its plugins. */
static void
handle_healthz(PlegdHttp *http, SoupServerMessage *msg)
{
    g_autofree char *message = NULL;
    g_autofree char *checker = NULL;
    g_autoptr(GError) error = NULL;

    if (!pleg_generic_healthy(pleg_host_get_pleg(http->host), &message))
        respond(msg, SOUP_STATUS_INTERNAL_SERVER_ERROR, TEXT_CONTENT_TYPE,
                g_strdup_printf("pleg failed: %s", message));
    else if (!pleg_host_check_health(http->host, &checker, &error))
        respond(msg, SOUP_STATUS_INTERNAL_SERVER_ERROR, TEXT_CONTENT_TYPE,
                g_strdup_printf("%s failed: %s", checker ? checker : "health check",
                                error ? error->message : "unhealthy"));
    else
        respond(msg, SOUP_STATUS_OK, TEXT_CONTENT_TYPE, g_strdup("ok"));
}

typedef void (*RouteFunc)(PlegdHttp *http, SoupServerMessage *msg);

static void
handle_request(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *query,
               gpointer user_data)
{
    PlegdHttp *http = user_data;
    const char *method = soup_server_message_get_method(msg);
    RouteFunc handler;

    if (g_str_equal(path, "/metrics"))
        handler = handle_metrics;
    else if (g_str_equal(path, "/healthz"))
        handler = handle_healthz;
    else
        handler = NULL;

    if (!handler) {
        respond(msg, SOUP_STATUS_NOT_FOUND, TEXT_CONTENT_TYPE, g_strdup("404 page not found\n"));
        return;
    }

    /* libsoup drops the body of a HEAD answer itself. */
    if (!g_str_equal(method, SOUP_METHOD_GET) && !g_str_equal(method, SOUP_METHOD_HEAD)) {
        soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Allow",
                                     "GET, HEAD");
        respond(msg, SOUP_STATUS_METHOD_NOT_ALLOWED, TEXT_CONTENT_TYPE,
                g_strdup("405 method not allowed\n"));
        return;
    }

    handler(http, msg);
}

/* Connections are accepted here and handed to the server: libsoup 3.2's own listener leaks
 * every accepted GSocket, and with it the fd of each connection the client closes. */
static gboolean
on_incoming(GSocketService *service, GSocketConnection *connection, GObject *source_object,
            gpointer user_data)
{
    PlegdHttp *http = user_data;
    g_autoptr(GSocketAddress) local = g_socket_connection_get_local_address(connection, NULL);
    g_autoptr(GSocketAddress) remote = g_socket_connection_get_remote_address(connection, NULL);
    g_autoptr(GError) error = NULL;

    if (!soup_server_accept_iostream(http->server, G_IO_STREAM(connection), local, remote, &error))
        g_debug("cannot serve an HTTP connection: %s, ignoring", error->message);
    return TRUE;
}

PlegdHttp *
plegd_http_new(PlegHost *host)
{
    PlegdHttp *http = g_new0(PlegdHttp, 1);

    http->host = host;
    http->metrics = pleg_metrics_registry_ref(pleg_host_get_metrics(host));
    http->server = soup_server_new("server-header", "plegd/" PLEG_VERSION, NULL);
    soup_server_add_handler(http->server, NULL, handle_request, http, NULL);
    http->service = g_socket_service_new();
    g_signal_connect(http->service, "incoming", G_CALLBACK(on_incoming), http);
    return http;
}

void
plegd_http_free(PlegdHttp *http)
{
    if (!http)
        return;
    g_socket_service_stop(http->service);
    g_socket_listener_close(G_SOCKET_LISTENER(http->service));
    g_signal_handlers_disconnect_by_data(http->service, http);
    g_object_unref(http->service);
    soup_server_disconnect(http->server);
    g_object_unref(http->server);
    pleg_metrics_registry_unref(http->metrics);
    g_free(http);
}

gboolean
plegd_http_listen(PlegdHttp *http, GInetSocketAddress *address, char **ret_url, GError **error)
{
    GInetAddress *host = g_inet_socket_address_get_address(address);
    g_autoptr(GSocketAddress) bound = NULL;

    if (!g_socket_listener_add_address(G_SOCKET_LISTENER(http->service), G_SOCKET_ADDRESS(address),
                                       G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_TCP, NULL, &bound,
                                       error)) {
        g_autofree char *text = format_host_port(host, g_inet_socket_address_get_port(address));

        g_prefix_error(error, "cannot listen on %s: ", text);
        return FALSE;
    }
    g_socket_service_start(http->service);

    if (ret_url) {
        /* With port 0 the kernel picked one: report what was bound. */
        guint port = g_inet_socket_address_get_port(G_INET_SOCKET_ADDRESS(bound));
        g_autofree char *text = format_host_port(host, port);

        *ret_url = g_strconcat("http://", text, NULL);
    }
    return TRUE;
}
