/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The request line and headers plegd's HTTP server accepts (examples/plegd/http.c): one server
 * set up as plegd sets it up (/metrics and /healthz of a plugin host that is not started, the
 * connection limit and idle timeout at plegd's defaults) listens on 127.0.0.1 and on a unix
 * socket in a temporary directory, in this thread's main context.  Each input is sent over a new
 * TCP connection as it is, then over a new connection to the socket (which serves /pods too);
 * each time the client shuts down its sending side and reads until the server closes, running
 * the server's context meanwhile.
 *
 * Checked: no crash, sanitizer report or hang (the server answers and closes within
 * ANSWER_TIMEOUT_USEC of the end of the request); whatever it sends starts with a well-formed
 * HTTP/1.x status line and complete headers; and connections do not pile up file descriptors.
 */
#include <errno.h>
#include <gio/gunixsocketaddress.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz-target.h"
#include "plegd.h"

#define ANSWER_TIMEOUT_USEC (5 * G_USEC_PER_SEC)
/* Beyond the server's own fds at start: connections it is still closing. */
#define MAX_EXTRA_FDS (2 * PLEGD_HTTP_MAX_CONNECTIONS)

/* Read by the sanitizer runtime of a -Dfuzzing (or other sanitizer) build.  libsoup 3.2's
 * server leaks the request path of every request whose body encoding it does not recognise
 * (a Transfer-Encoding other than chunked, a Content-Length that is not a number): it answers
 * 400 or 501 without freeing it.  Not ours to free; later libsoup does.  GLib has no frame
 * pointers, so the leak's stack reaches libsoup only with the slow unwinder. */
const char *__lsan_default_suppressions(void);
const char *__asan_default_options(void);

const char *
__lsan_default_suppressions(void)
{
    return "leak:soup_headers_parse_request\n";
}

const char *
__asan_default_options(void)
{
    return "fast_unwind_on_malloc=0";
}

static GMainContext *context;
static PlegHost *host;
static PlegdHttp *http;
static GInetSocketAddress *server_address;
static GSocketAddress *socket_address;
static char *socket_dir;
static char *socket_path;
static guint baseline_fds;

static guint
count_fds(void)
{
    g_autoptr(GDir) dir = g_dir_open("/proc/self/fd", 0, NULL);
    guint n = 0;

    if (!dir)
        return 0;
    while (g_dir_read_name(dir))
        n++;
    return n;
}

static void
remove_socket(void)
{
    g_unlink(socket_path);
    g_rmdir(socket_dir);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    g_autoptr(PlegFeatureGates) gates = pleg_feature_gates_new();
    g_autoptr(GInetSocketAddress) any_port = NULL;
    g_autoptr(GError) error = NULL;
    g_autofree char *url = NULL;
    PlegHostConfig config;
    const char *port;

    context = g_main_context_new();
    g_main_context_push_thread_default(context);

    pleg_host_config_init(&config);
    config.runtime_endpoint = "unix:///nonexistent/plegd-fuzz.sock";
    config.plugin_dir = "";
    host = pleg_host_new(&config, gates, context, &error);
    if (!host)
        fuzz_fail("pleg_host_new: %s", error->message);

    http = plegd_http_new(host);
    if (!plegd_parse_bind_address("127.0.0.1:0", &any_port, &error) ||
        !plegd_http_listen(http, any_port, &url, &error))
        fuzz_fail("cannot listen: %s", error->message);
    port = strrchr(url, ':') + 1;
    server_address = G_INET_SOCKET_ADDRESS(
        g_inet_socket_address_new_from_string("127.0.0.1", (guint)g_ascii_strtoull(port, NULL, 10)));
    socket_dir = g_dir_make_tmp("plegd-fuzz-XXXXXX", &error);
    if (!socket_dir)
        fuzz_fail("cannot make a directory for the socket: %s", error->message);
    socket_path = g_build_filename(socket_dir, "plegd.sock", NULL);
    if (!plegd_http_listen_unix(http, socket_path, -1, &error))
        fuzz_fail("cannot listen: %s", error->message);
    atexit(remove_socket);
    socket_address = g_unix_socket_address_new(socket_path);
    baseline_fds = count_fds();
    return 0;
}

typedef struct {
    GSocket *socket;
    const uint8_t *data;
    gsize size;
    gsize sent;
    gboolean shut;
    GByteArray *answer;
    gboolean closed;
    gboolean timed_out;
} Client;

static gboolean
on_client_ready(GSocket *socket, GIOCondition condition, gpointer user_data)
{
    Client *client = user_data;

    if (!client->shut && (condition & G_IO_OUT)) {
        gssize n = client->sent < client->size
                       ? g_socket_send(socket, (const char *)client->data + client->sent,
                                       client->size - client->sent, NULL, NULL)
                       : 0;

        if (n > 0)
            client->sent += (gsize)n;
        /* All sent, or the server stopped reading and closed: no more to say. */
        if (n < 0 || client->sent == client->size) {
            g_socket_shutdown(socket, FALSE, TRUE, NULL);
            client->shut = TRUE;
        }
    }
    if (condition & (G_IO_IN | G_IO_HUP | G_IO_ERR)) {
        g_autoptr(GError) error = NULL;
        char buffer[4096];
        gssize n = g_socket_receive(socket, buffer, sizeof buffer, NULL, &error);

        if (n > 0) {
            g_byte_array_append(client->answer, (const guint8 *)buffer, (guint)n);
        } else if (n == 0 || !g_error_matches(error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK)) {
            /* The end, or a reset: the server closed. */
            client->closed = TRUE;
            return G_SOURCE_REMOVE;
        }
    }
    return G_SOURCE_CONTINUE;
}

static GSource *
watch(Client *client, GIOCondition extra)
{
    GSource *source =
        g_socket_create_source(client->socket, G_IO_IN | G_IO_HUP | G_IO_ERR | extra, NULL);

    g_source_set_callback(source, G_SOURCE_FUNC(on_client_ready), client, NULL);
    g_source_attach(source, context);
    return source;
}

static gboolean
on_timeout(gpointer user_data)
{
    Client *client = user_data;

    client->timed_out = TRUE;
    return G_SOURCE_REMOVE;
}

/* "HTTP/1.x NNN " then headers ending in an empty line. */
static void
check_answer(const GByteArray *answer)
{
    const char *text = (const char *)answer->data;
    const char *cr;

    if (answer->len == 0) {
        g_debug("closed without an answer");
        return; /* allowed */
    }
    cr = memchr(text, '\r', answer->len);
    g_debug("answer: %.*s", (int)(cr ? cr - text : MIN(answer->len, 80)), text);
    if (answer->len < 13 || memcmp(text, "HTTP/1.", 7) != 0 || (text[7] != '0' && text[7] != '1') ||
        text[8] != ' ' || !g_ascii_isdigit(text[9]) || !g_ascii_isdigit(text[10]) ||
        !g_ascii_isdigit(text[11]) || text[12] != ' ' || text[9] < '1' || text[9] > '5')
        fuzz_fail("the answer does not start with a status line: \"%.*s\"",
                (int)MIN(answer->len, 64), text);
    if (!g_strstr_len(text, answer->len, "\r\n\r\n"))
        fuzz_fail("the answer's headers do not end: \"%.*s\"", (int)MIN(answer->len, 256), text);
}

/* Sends @data on a new connection to @address and checks the answer. */
static void
exchange(GSocketAddress *address, const uint8_t *data, size_t size)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(GSource) ready = NULL;
    g_autoptr(GSource) timeout = NULL;
    Client client = {0};
    gboolean reading_only = FALSE;

    client.data = data;
    client.size = size;
    client.answer = g_byte_array_new();
    client.socket = g_socket_new(g_socket_address_get_family(address), G_SOCKET_TYPE_STREAM,
                                 G_SOCKET_PROTOCOL_DEFAULT, &error);
    if (!client.socket || !g_socket_connect(client.socket, address, NULL, &error))
        fuzz_fail("cannot connect to the server: %s", error->message);
    g_socket_set_blocking(client.socket, FALSE);

    ready = watch(&client, G_IO_OUT);
    timeout = g_timeout_source_new(ANSWER_TIMEOUT_USEC / 1000);
    g_source_set_callback(timeout, on_timeout, &client, NULL);
    g_source_attach(timeout, context);

    while (!client.closed && !client.timed_out) {
        /* Once everything is sent, only the answer is awaited. */
        if (client.shut && !reading_only) {
            g_source_destroy(ready);
            g_source_unref(ready);
            ready = watch(&client, 0);
            reading_only = TRUE;
        }
        g_main_context_iteration(context, TRUE);
    }
    g_source_destroy(ready);
    g_source_destroy(timeout);
    if (client.timed_out)
        fuzz_fail("the server neither answered nor closed within %d s (answer so far: %u bytes)",
                (int)(ANSWER_TIMEOUT_USEC / G_USEC_PER_SEC), client.answer->len);

    check_answer(client.answer);
    g_socket_close(client.socket, NULL);
    g_object_unref(client.socket);
    g_byte_array_unref(client.answer);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    guint fds;

    exchange(G_SOCKET_ADDRESS(server_address), data, size);
    exchange(socket_address, data, size);

    /* Let the server finish closing its side. */
    while (g_main_context_iteration(context, FALSE))
        ;
    fds = count_fds();
    if (fds > baseline_fds + MAX_EXTRA_FDS)
        fuzz_fail("%u file descriptors open, %u at start: connections pile up", fds, baseline_fds);
    return 0;
}
