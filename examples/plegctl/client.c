/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegctl's connection to plegd: the address (TCP or a unix socket), one libsoup session, the
 * deadlines, and the one-line error that says what went wrong and what to do.
 */
#include <gio/gunixsocketaddress.h>
#include <pleg/pleg.h>

#include "pleg-config.h"
#include "plegctl.h"

/* What the user sees of a plegd's answer body in an error: its first line, cut. */
#define SHOWN_BODY_BYTES 512

G_DEFINE_QUARK(plegctl-error-quark, plegctl_error)

struct _PlegctlClient {
    char *address; /* as given, for messages */
    char *base;    /* "http://HOST:PORT", or "http://localhost" for a unix socket */
    SoupSession *session;
    gint64 timeout_usec; /* 0: none */
};

static gboolean
bad_address(const char *text, const char *why, GError **error)
{
    g_autofree char *shown = pleg_log_text(text, -1, 0);

    g_set_error(error, PLEGCTL_ERROR, PLEGCTL_EXIT_USAGE,
                "invalid address \"%s\": %s (expected http://HOST:PORT, unix:PATH or "
                "unix:///PATH)",
                shown, why);
    return FALSE;
}

gboolean
plegctl_parse_address(const char *text, char **ret_base, char **ret_socket, GError **error)
{
    g_autoptr(GUri) uri = NULL;
    g_autofree char *with_scheme = NULL;
    const char *path;

    if (g_str_has_prefix(text, "unix:")) {
        path = text + strlen("unix:");
        /* unix:///run/plegd.sock, as plegd's --container-runtime-endpoint writes a socket. */
        if (g_str_has_prefix(path, "//")) {
            if (path[2] != '/')
                return bad_address(text, "a unix socket's URI has no host: unix:///PATH", error);
            path += 2;
        }
        if (path[0] == '\0')
            return bad_address(text, "no socket path", error);
        *ret_base = g_strdup("http://localhost");
        *ret_socket = g_strdup(path);
        return TRUE;
    }

    /* HOST:PORT alone, as plegd's --metrics-bind-address is written. */
    if (!strstr(text, "://"))
        text = with_scheme = g_strconcat("http://", text, NULL);
    uri = g_uri_parse(text, G_URI_FLAGS_NONE, NULL);
    if (!uri || g_strcmp0(g_uri_get_scheme(uri), "http") != 0)
        return bad_address(text, "not an http:// URL", error);
    if (!g_uri_get_host(uri) || g_uri_get_host(uri)[0] == '\0')
        return bad_address(text, "no host", error);
    if (g_uri_get_port(uri) < 0)
        return bad_address(text, "no port (plegd's default is 10388)", error);
    if (g_uri_get_query(uri) || g_uri_get_fragment(uri) || g_uri_get_userinfo(uri) ||
        (g_uri_get_path(uri)[0] != '\0' && !g_str_equal(g_uri_get_path(uri), "/")))
        return bad_address(text, "only a scheme, a host and a port", error);
    *ret_base = g_uri_join(G_URI_FLAGS_NONE, "http", NULL, g_uri_get_host(uri),
                           g_uri_get_port(uri), "", NULL, NULL);
    *ret_socket = NULL;
    return TRUE;
}

PlegctlClient *
plegctl_client_new(PlegctlCommon *common, GError **error)
{
    g_autoptr(PlegctlClient) client = g_new0(PlegctlClient, 1);
    g_autofree char *socket = NULL;
    g_autoptr(GSocketAddress) target = NULL; /* NULL: TCP to the URI's host */
    const char *address = common->address;

    if (!address)
        address = g_getenv("PLEGCTL_ADDRESS");
    if (!address || address[0] == '\0')
        address = PLEGCTL_DEFAULT_ADDRESS;
    client->address = g_strdup(address);
    if (!plegctl_parse_address(address, &client->base, &socket, error))
        return NULL;
    client->timeout_usec = common->timeout_usec;

    /* No proxy: plegd is on this node, and $http_proxy must not send its pods elsewhere.  No
     * I/O timeout of libsoup's own: a stream may be quiet for hours; plegctl's deadlines are
     * its own (--timeout). */
    if (socket)
        target = g_unix_socket_address_new(socket);
    client->session = soup_session_new_with_options(
        "proxy-resolver", NULL, "timeout", 0, "idle-timeout", 0, "user-agent",
        "plegctl/" PLEG_VERSION, "remote-connectable", target, NULL);
    return g_steal_pointer(&client);
}

void
plegctl_client_free(PlegctlClient *client)
{
    if (!client)
        return;
    g_clear_object(&client->session);
    g_free(client->address);
    g_free(client->base);
    g_free(client);
}

const char *
plegctl_client_get_address(PlegctlClient *client)
{
    return client->address;
}

void
plegctl_query_add(GString *query, const char *name, const char *value)
{
    g_autofree char *escaped = g_uri_escape_string(value, NULL, FALSE);

    g_string_append_printf(query, "%s%s=%s", strchr(query->str, '?') ? "&" : "?", name, escaped);
}

static SoupMessage *
new_message(PlegctlClient *client, const char *path)
{
    g_autofree char *uri = g_strconcat(client->base, path, NULL);

    return soup_message_new(SOUP_METHOD_GET, uri);
}

/* The path of "/events?since=1": what the messages name. */
static char *
endpoint_of(const char *path)
{
    return g_strndup(path, strcspn(path, "?"));
}

/* The first line of @body, escaped and cut; "" when there is none. */
static char *
first_line(GBytes *body)
{
    gsize size = 0;
    const char *data = body ? g_bytes_get_data(body, &size) : NULL;
    gsize length = 0;

    while (length < size && data[length] != '\n' && data[length] != '\r')
        length++;
    if (length == 0)
        return g_strdup("");
    return pleg_log_text(data, (gssize)length, SHOWN_BODY_BYTES);
}

/* A JSON error object of plegd's ({"error":...}), or NULL. */
static char *
json_error_message(GBytes *body)
{
    g_autoptr(JsonParser) parser = json_parser_new();
    gsize size = 0;
    const char *data = body ? g_bytes_get_data(body, &size) : NULL;
    JsonNode *root;
    const char *message;

    if (!data || !json_parser_load_from_data(parser, data, (gssize)size, NULL))
        return NULL;
    root = json_parser_get_root(parser);
    if (!root || !JSON_NODE_HOLDS_OBJECT(root))
        return NULL;
    message = plegctl_json_string(json_node_get_object(root), "error");
    return message ? pleg_log_text(message, -1, SHOWN_BODY_BYTES) : NULL;
}

char *
plegctl_body_message(GBytes *body)
{
    char *message = json_error_message(body);

    return message ? message : first_line(body);
}

static char *
describe_timeout(gint64 timeout_usec)
{
    return pleg_duration_format(timeout_usec);
}

void
plegctl_client_describe_error(PlegctlClient *client, const char *path, SoupMessage *msg,
                              GBytes *body, const GError *cause, GError **error)
{
    g_autofree char *address = pleg_log_text(client->address, -1, 0);
    g_autofree char *endpoint = endpoint_of(path);
    g_autofree char *line = NULL;
    g_autofree char *server = NULL;
    guint status;

    if (cause) {
        g_autofree char *why = pleg_log_text(cause->message, -1, SHOWN_BODY_BYTES);

        if (g_error_matches(cause, G_IO_ERROR, G_IO_ERROR_CONNECTION_REFUSED) ||
            g_error_matches(cause, G_IO_ERROR, G_IO_ERROR_NOT_FOUND))
            g_set_error(error, PLEGCTL_ERROR, PLEGCTL_EXIT_ERROR,
                        "cannot connect to plegd at %s: %s (is plegd running and serving HTTP "
                        "there? --address or $PLEGCTL_ADDRESS names another)",
                        address, why);
        else if (g_error_matches(cause, G_IO_ERROR, G_IO_ERROR_TIMED_OUT)) {
            g_autofree char *limit = describe_timeout(client->timeout_usec);

            g_set_error(error, PLEGCTL_ERROR, PLEGCTL_EXIT_ERROR,
                        "plegd at %s did not answer %s within %s: it hangs, or the node is "
                        "overloaded (--timeout waits longer)",
                        address, endpoint, limit);
        } else
            g_set_error(error, PLEGCTL_ERROR, PLEGCTL_EXIT_ERROR,
                        "cannot get %s from plegd at %s: %s", endpoint, address, why);
        return;
    }

    status = soup_message_get_status(msg);
    line = plegctl_body_message(body);
    server = pleg_log_text(soup_message_headers_get_one(soup_message_get_response_headers(msg),
                                                        "Server"),
                           -1, 0);
    switch (status) {
    case SOUP_STATUS_NOT_FOUND:
        g_set_error(error, PLEGCTL_ERROR, PLEGCTL_EXIT_ERROR,
                    "%s at %s does not serve %s (404): it is older than plegctl " PLEG_VERSION
                    ", or not plegd; upgrade plegd, or point --address at it",
                    g_str_has_prefix(server, "plegd/") ? server : "the server", address,
                    endpoint);
        return;
    case SOUP_STATUS_BAD_REQUEST:
        g_set_error(error, PLEGCTL_ERROR, PLEGCTL_EXIT_USAGE, "plegd at %s refused %s: %s",
                    address, endpoint, line);
        return;
    default:
        g_set_error(error, PLEGCTL_ERROR, PLEGCTL_EXIT_ERROR,
                    "plegd at %s answered %s with %u %s%s%s", address, endpoint, status,
                    soup_status_get_phrase(status), line[0] ? ": " : "", line);
        return;
    }
}

/* ---- a request, its deadline ---- */

typedef struct {
    GCancellable *cancellable;
    GSource *deadline;
    gboolean timed_out;
    gboolean done;
    GBytes *body;
    GInputStream *stream;
    GError *error;
    /* For a stream: the caller's callback. */
    PlegctlClient *client;
    SoupMessage *msg;
    PlegctlStreamFunc func;
    gpointer user_data;
} Request;

static gboolean
on_deadline(gpointer data)
{
    Request *request = data;

    request->timed_out = TRUE;
    g_cancellable_cancel(request->cancellable);
    return G_SOURCE_REMOVE;
}

static Request *
request_new(PlegctlClient *client)
{
    Request *request = g_new0(Request, 1);

    request->client = client;
    request->cancellable = g_cancellable_new();
    if (client->timeout_usec > 0) {
        request->deadline = g_timeout_source_new((guint)MIN(client->timeout_usec / 1000,
                                                            G_MAXUINT));
        g_source_set_callback(request->deadline, on_deadline, request, NULL);
        g_source_attach(request->deadline, NULL);
    }
    return request;
}

static void
request_free(Request *request)
{
    if (request->deadline) {
        g_source_destroy(request->deadline);
        g_source_unref(request->deadline);
    }
    g_object_unref(request->cancellable);
    g_clear_pointer(&request->body, g_bytes_unref);
    g_clear_object(&request->stream);
    g_clear_object(&request->msg);
    g_clear_error(&request->error);
    g_free(request);
}

/* A cancellation by the deadline is a time-out. */
static void
finish_error(Request *request)
{
    if (request->error && request->timed_out &&
        g_error_matches(request->error, G_IO_ERROR, G_IO_ERROR_CANCELLED)) {
        g_clear_error(&request->error);
        g_set_error_literal(&request->error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT, "timed out");
    }
}

static void
on_read(GObject *source, GAsyncResult *result, gpointer data)
{
    Request *request = data;

    request->body = soup_session_send_and_read_finish(SOUP_SESSION(source), result,
                                                      &request->error);
    finish_error(request);
    request->done = TRUE;
}

gboolean
plegctl_client_get(PlegctlClient *client, const char *path, GBytes **ret_body, GError **error)
{
    Request *request = request_new(client);
    g_autoptr(SoupMessage) msg = new_message(client, path);
    gboolean ok;

    soup_session_send_and_read_async(client->session, msg, G_PRIORITY_DEFAULT,
                                     request->cancellable, on_read, request);
    while (!request->done)
        g_main_context_iteration(NULL, TRUE);

    ok = !request->error && soup_message_get_status(msg) == SOUP_STATUS_OK;
    if (ok)
        *ret_body = g_steal_pointer(&request->body);
    else
        plegctl_client_describe_error(client, path, msg, request->body, request->error, error);
    request_free(request);
    return ok;
}

JsonNode *
plegctl_client_get_json(PlegctlClient *client, const char *path, GBytes **ret_body,
                        GError **error)
{
    g_autoptr(GBytes) body = NULL;
    g_autoptr(JsonParser) parser = json_parser_new();
    g_autoptr(GError) local_error = NULL;
    gsize size;
    const char *data;

    if (!plegctl_client_get(client, path, &body, error))
        return NULL;
    data = g_bytes_get_data(body, &size);
    if (!json_parser_load_from_data(parser, data ? data : "", (gssize)size, &local_error) ||
        !json_parser_get_root(parser) || !JSON_NODE_HOLDS_OBJECT(json_parser_get_root(parser))) {
        g_autofree char *address = pleg_log_text(client->address, -1, 0);
        g_autofree char *endpoint = endpoint_of(path);
        g_autofree char *line = first_line(body);

        g_set_error(error, PLEGCTL_ERROR, PLEGCTL_EXIT_ERROR,
                    "%s answered %s with something that is not plegd's JSON (%s): %s", address,
                    endpoint, local_error ? local_error->message : "not an object", line);
        return NULL;
    }
    if (ret_body)
        *ret_body = g_steal_pointer(&body);
    return json_node_copy(json_parser_get_root(parser));
}

static void
on_stream(GObject *source, GAsyncResult *result, gpointer data)
{
    Request *request = data;

    request->stream = soup_session_send_finish(SOUP_SESSION(source), result, &request->error);
    finish_error(request);
    request->func(request->msg, request->stream, request->error, request->user_data);
    request_free(request);
}

void
plegctl_client_open_stream(PlegctlClient *client, const char *path, PlegctlStreamFunc func,
                           gpointer user_data)
{
    Request *request = request_new(client);

    request->msg = new_message(client, path);
    request->func = func;
    request->user_data = user_data;
    soup_session_send_async(client->session, request->msg, G_PRIORITY_DEFAULT,
                            request->cancellable, on_stream, request);
}
