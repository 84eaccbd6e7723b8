/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TLS on the TCP listener, with kubelet's flags: --tls-cert-file, --tls-private-key-file and
 * --client-ca-file.  The TLS itself is GLib's (GTlsServerConnection, glib-networking's GnuTLS
 * backend): plegd accepts connections itself (http-connections.c) and hands libsoup the TLS
 * connection once its handshake is done, so libsoup's own TLS listener is not used.  The files
 * are read again on SIGHUP (plegd_http_reload_tls()): new connections get the new certificate
 * and CA file, open ones keep theirs, but a client whose certificate no longer verifies against
 * the new CA file (its CA removed: revoked) is disconnected.
 */
#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "http-private.h"

struct _PlegdTls {
    char *cert_file;
    char *key_file;
    char *client_ca_file; /* NULL: no client certificates asked for */
    GTlsCertificate *certificate;
    GTlsDatabase *database; /* from client_ca_file */
};

/* Files of a certificate or a CA are a few KiB; a key file larger than this is not one. */
#define TLS_FILE_MAX_BYTES (1024 * 1024)
/* A handshake with itself over a socket pair takes milliseconds. */
#define SELF_CHECK_TIMEOUT_MS 10000

/* Reads a TLS file (a regular file of at most TLS_FILE_MAX_BYTES) into @contents.
 * @private_key: the file must not be accessible by others, and be owned by root or plegd's
 * user, as sshd requires of its keys. */
static gboolean
read_tls_file(const char *flag, const char *path, gboolean private_key, GString *contents,
              GError **error)
{
    g_autoptr(GError) local_error = NULL;
    g_autofree char *why = NULL;
    g_autofree char *data = NULL;
    gsize length = 0;
    struct stat st;

    if (!plegd_read_small_file(path, "TLS file", TLS_FILE_MAX_BYTES, &data, &length, &st,
                               &local_error))
        why = g_strdup(local_error->message);
    else if (private_key && (st.st_mode & S_IRWXO) != 0)
        why = g_strdup_printf(
            "mode %04o: a private key must not be accessible by others (chmod o-rwx)",
            (unsigned)(st.st_mode & 07777));
    else if (private_key && st.st_uid != 0 && st.st_uid != geteuid())
        why = g_strdup_printf("owned by uid %u: a private key must be owned by root or plegd's "
                              "user",
                              (unsigned)st.st_uid);
    if (data) {
        if (!why)
            g_string_append_len(contents, data, length);
        /* A key's bytes go no further than the certificate made of them. */
        explicit_bzero(data, length);
    }
    if (why) {
        g_set_error(error, G_FILE_ERROR, local_error ? local_error->code : G_FILE_ERROR_PERM,
                    "invalid %s \"%s\": %s", flag, path, why);
        return FALSE;
    }
    return TRUE;
}

/* ---- a certificate's handshake with itself ---- */

typedef struct {
    guint pending;
    GError *server_error;
    GError *client_error;
    GCancellable *cancellable;
} SelfCheck;

static void
on_self_handshake(GObject *source, GAsyncResult *result, gpointer data)
{
    SelfCheck *check = data;

    g_tls_connection_handshake_finish(G_TLS_CONNECTION(source), result,
                                      G_IS_TLS_SERVER_CONNECTION(source) ? &check->server_error
                                                                         : &check->client_error);
    /* One side failing leaves the other waiting for it. */
    if (check->server_error || check->client_error)
        g_cancellable_cancel(check->cancellable);
    check->pending--;
}

static gboolean
accept_any_certificate(GTlsConnection *connection, GTlsCertificate *peer_cert,
                       GTlsCertificateFlags errors, gpointer user_data)
{
    return TRUE;
}

static gboolean
on_self_check_timeout(gpointer data)
{
    g_cancellable_cancel(data);
    return G_SOURCE_REMOVE;
}

static GIOStream *
socket_stream(int fd, GError **error)
{
    g_autoptr(GSocket) socket = g_socket_new_from_fd(fd, error);

    if (!socket) {
        close(fd);
        return NULL;
    }
    return G_IO_STREAM(g_socket_connection_factory_create_connection(socket));
}

/* GLib takes a certificate and a key that do not belong together, and every handshake fails
 * later ("Decryption has failed", at debug level): a handshake of @certificate with itself
 * over a socket pair finds it now, so that a start or a SIGHUP refuses the pair. */
static gboolean
check_handshake(GTlsCertificate *certificate, GError **error)
{
    g_autoptr(GMainContext) context = g_main_context_new();
    g_autoptr(GIOStream) server_end = NULL, client_end = NULL;
    g_autoptr(GIOStream) server = NULL, client = NULL;
    g_autoptr(GSource) timeout = NULL;
    g_autoptr(GCancellable) cancellable = g_cancellable_new();
    SelfCheck check = {.pending = 2, .cancellable = cancellable};
    int fds[2];

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0) {
        int errsv = errno;

        g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errsv),
                    "cannot check the certificate: socketpair: %s", g_strerror(errsv));
        return FALSE;
    }
    server_end = socket_stream(fds[0], error);
    if (!server_end) {
        close(fds[1]);
        return FALSE;
    }
    client_end = socket_stream(fds[1], error);
    if (!client_end)
        return FALSE;
    server = g_tls_server_connection_new(server_end, certificate, error);
    client = server ? g_tls_client_connection_new(client_end, NULL, error) : NULL;
    if (!client)
        return FALSE;
    g_signal_connect(client, "accept-certificate", G_CALLBACK(accept_any_certificate), NULL);

    g_main_context_push_thread_default(context);
    timeout = g_timeout_source_new(SELF_CHECK_TIMEOUT_MS);
    g_source_set_callback(timeout, on_self_check_timeout, cancellable, NULL);
    g_source_attach(timeout, context);
    g_tls_connection_handshake_async(G_TLS_CONNECTION(server), G_PRIORITY_DEFAULT, cancellable,
                                     on_self_handshake, &check);
    g_tls_connection_handshake_async(G_TLS_CONNECTION(client), G_PRIORITY_DEFAULT, cancellable,
                                     on_self_handshake, &check);
    while (check.pending > 0)
        g_main_context_iteration(context, TRUE);
    g_source_destroy(timeout);
    g_main_context_pop_thread_default(context);

    if (check.server_error || check.client_error) {
        /* The side that failed first says why; the other one was cancelled. */
        GError *cause = check.server_error && !g_error_matches(check.server_error, G_IO_ERROR,
                                                               G_IO_ERROR_CANCELLED)
                            ? check.server_error
                            : check.client_error ? check.client_error : check.server_error;

        g_set_error(error, G_TLS_ERROR, G_TLS_ERROR_BAD_CERTIFICATE,
                    "a TLS handshake with this certificate and key fails (does the key belong "
                    "to the certificate?): %s",
                    cause->message);
        g_clear_error(&check.server_error);
        g_clear_error(&check.client_error);
        return FALSE;
    }
    return TRUE;
}

static void
tls_free(PlegdTls *tls)
{
    if (!tls)
        return;
    g_free(tls->cert_file);
    g_free(tls->key_file);
    g_free(tls->client_ca_file);
    g_clear_object(&tls->certificate);
    g_clear_object(&tls->database);
    g_free(tls);
}
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegdTls, tls_free)

/* Reads the three files into a new PlegdTls. */
static PlegdTls *
tls_load(const char *cert_file, const char *key_file, const char *client_ca_file, GError **error)
{
    g_autoptr(PlegdTls) tls = g_new0(PlegdTls, 1);
    g_autoptr(GString) pem = g_string_new(NULL);
    g_autoptr(GString) key = g_string_new(NULL);
    g_autoptr(GError) local_error = NULL;

    tls->cert_file = g_strdup(cert_file);
    tls->key_file = g_strdup(key_file);
    tls->client_ca_file = g_strdup(client_ca_file);

    if (!read_tls_file("--tls-cert-file", cert_file, FALSE, pem, error) ||
        !read_tls_file("--tls-private-key-file", key_file, TRUE, key, error))
        return NULL;
    /* The certificate (and the chain after it), then the key: GLib parses both from one PEM. */
    g_string_append_c(pem, '\n');
    g_string_append_len(pem, key->str, key->len);
    explicit_bzero(key->str, key->len);
    tls->certificate = g_tls_certificate_new_from_pem(pem->str, pem->len, &local_error);
    explicit_bzero(pem->str, pem->len);
    if (!tls->certificate || !check_handshake(tls->certificate, &local_error)) {
        g_set_error(error, G_TLS_ERROR, G_TLS_ERROR_BAD_CERTIFICATE,
                    "invalid --tls-cert-file \"%s\" or --tls-private-key-file \"%s\": %s",
                    cert_file, key_file, local_error->message);
        return NULL;
    }

    if (client_ca_file) {
        g_autoptr(GString) unused = g_string_new(NULL);

        /* The same checks as the other files (a regular file, a bounded size), then GLib's. */
        if (!read_tls_file("--client-ca-file", client_ca_file, FALSE, unused, error))
            return NULL;
        tls->database = g_tls_file_database_new(client_ca_file, &local_error);
        if (!tls->database) {
            g_set_error(error, G_TLS_ERROR, G_TLS_ERROR_BAD_CERTIFICATE,
                        "invalid --client-ca-file \"%s\": %s", client_ca_file,
                        local_error->message);
            return NULL;
        }
    }
    return g_steal_pointer(&tls);
}

static char *
describe_certificate(GTlsCertificate *certificate)
{
    g_autofree char *subject = g_tls_certificate_get_subject_name(certificate);
    g_autoptr(GDateTime) until = g_tls_certificate_get_not_valid_after(certificate);
    g_autofree char *until_text = until ? g_date_time_format_iso8601(until) : NULL;

    return g_strdup_printf("%s, valid until %s", subject ? subject : "no subject",
                           until_text ? until_text : "?");
}

gboolean
plegd_http_set_tls(PlegdHttp *http, const char *cert_file, const char *key_file,
                   const char *client_ca_file, GError **error)
{
    PlegdTls *tls;

    g_return_val_if_fail(!http->tls, FALSE);
    tls = tls_load(cert_file, key_file, client_ca_file, error);
    if (!tls)
        return FALSE;
    http->tls = tls;
    {
        g_autofree char *description = describe_certificate(tls->certificate);

        g_info("TLS certificate: %s%s", description,
               client_ca_file ? "; client certificates verified against --client-ca-file" : "");
    }
    return TRUE;
}

/* An open connection whose client certificate no longer verifies (its CA was removed from the
 * CA file, or it expired since) is closed. */
static void
reverify_clients(PlegdHttp *http)
{
    GHashTableIter iter;
    Connection *conn;

    g_hash_table_iter_init(&iter, http->connections);
    while (g_hash_table_iter_next(&iter, NULL, (gpointer *)&conn)) {
        g_autoptr(GError) error = NULL;
        GTlsCertificateFlags flags;

        if (!conn->client_certificate || conn->closing)
            continue;
        flags = http->tls->database
                    ? g_tls_database_verify_chain(http->tls->database, conn->client_certificate,
                                                  G_TLS_DATABASE_PURPOSE_AUTHENTICATE_CLIENT,
                                                  NULL, NULL, G_TLS_DATABASE_VERIFY_NONE, NULL,
                                                  &error)
                    : G_TLS_CERTIFICATE_UNKNOWN_CA;
        if (flags == 0 && !error)
            continue;
        g_message("closing the connection of TLS client %s: its certificate does not verify "
                  "against --client-ca-file any more (%s)",
                  conn->peer, error ? error->message : plegd_http_describe_tls_errors(flags));
        plegd_http_close_connection(conn, "its client certificate does not verify any more");
    }
}

gboolean
plegd_http_reload_tls(PlegdHttp *http, GError **error)
{
    PlegdTls *tls;

    if (!http->tls)
        return TRUE;
    tls = tls_load(http->tls->cert_file, http->tls->key_file, http->tls->client_ca_file, error);
    if (!tls)
        return FALSE;
    tls_free(http->tls);
    http->tls = tls;
    {
        g_autofree char *description = describe_certificate(tls->certificate);

        g_info("TLS certificate: %s", description);
    }
    reverify_clients(http);
    return TRUE;
}

void
plegd_http_tls_clear(PlegdHttp *http)
{
    g_clear_pointer(&http->tls, tls_free);
}

/* ---- a connection's handshake ---- */

const char *
plegd_http_describe_tls_errors(GTlsCertificateFlags flags)
{
    if (flags & G_TLS_CERTIFICATE_EXPIRED)
        return "expired";
    if (flags & G_TLS_CERTIFICATE_NOT_ACTIVATED)
        return "not valid yet";
    if (flags & G_TLS_CERTIFICATE_UNKNOWN_CA)
        return "not signed by a CA of --client-ca-file";
    if (flags & G_TLS_CERTIFICATE_REVOKED)
        return "revoked";
    if (flags & G_TLS_CERTIFICATE_INSECURE)
        return "insecure";
    return "does not verify";
}

/* On a server GLib asks for every client certificate, with what its verification against the
 * connection's database (--client-ca-file) found: only one without errors is taken. */
static gboolean
on_accept_certificate(GTlsConnection *connection, GTlsCertificate *peer_cert,
                      GTlsCertificateFlags errors, gpointer user_data)
{
    g_autofree char *subject = NULL;

    if (errors == 0)
        return TRUE;
    subject = g_tls_certificate_get_subject_name(peer_cert);
    g_debug("refusing a TLS client certificate (%s): %s", subject ? subject : "no subject",
            plegd_http_describe_tls_errors(errors));
    return FALSE;
}

GTlsConnection *
plegd_http_tls_wrap(PlegdHttp *http, GSocketConnection *connection, GError **error)
{
    static const char *const protocols[] = {"http/1.1", "http/1.0", NULL};
    GIOStream *tls;

    tls = g_tls_server_connection_new(G_IO_STREAM(connection), http->tls->certificate, error);
    if (!tls)
        return NULL;
    /* Asked for, not required: /metrics and the probes are served without one; /events and
     * /pods only to a client that presented one that verified (plegd_http_check_access()).  A
     * certificate that does not verify fails the handshake. */
    g_object_set(tls, "authentication-mode",
                 http->tls->database ? G_TLS_AUTHENTICATION_REQUESTED : G_TLS_AUTHENTICATION_NONE,
                 NULL);
    if (http->tls->database)
        g_tls_connection_set_database(G_TLS_CONNECTION(tls), http->tls->database);
    /* As libsoup's own listener: an HTTP answer has its own end. */
    g_tls_connection_set_require_close_notify(G_TLS_CONNECTION(tls), FALSE);
    g_tls_connection_set_advertised_protocols(G_TLS_CONNECTION(tls), protocols);
    g_signal_connect(tls, "accept-certificate", G_CALLBACK(on_accept_certificate), NULL);
    return G_TLS_CONNECTION(tls);
}
