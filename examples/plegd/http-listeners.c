/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd's listeners and who may read what on each.  A node's loopback is not private: every local
 * user and every host-network pod reaches 127.0.0.1.  So the unix socket (--socket, mode 0660:
 * plegd's user and --socket-group) serves the whole API, and TCP (--metrics-bind-address) what
 * scrapers and probes need: /metrics, /livez, /readyz, /healthz; /events and /pods only as
 * --serve-events-over-tcp says.  kubelet closed the same hole by turning its read-only port off;
 * containerd and Docker serve their APIs on root-owned unix sockets.
 */
#include <errno.h>
#include <stdarg.h>
#include <gio/gunixsocketaddress.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "http-private.h"

/* ---- the unix socket ---- */

static gboolean G_GNUC_PRINTF(3, 4)
fail_errno(GError **error, int errsv, const char *format, ...)
{
    g_autofree char *what = NULL;
    va_list args;

    va_start(args, format);
    what = g_strdup_vprintf(format, args);
    va_end(args);
    g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errsv), "%s: %s", what,
                g_strerror(errsv));
    return FALSE;
}

/* What is at @path already: nothing, or a socket nobody listens on (left by a plegd that did not
 * exit cleanly), which is removed.  Anything else is left alone: plegd never removes a file that
 * is not a socket, nor the socket of a process that listens on it. */
static gboolean
clear_path(const char *path, GError **error)
{
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    struct stat st;
    int fd, r, errsv;

    if (lstat(path, &st) < 0) {
        if (errno == ENOENT)
            return TRUE;
        return fail_errno(error, errno, "cannot look at %s", path);
    }
    if (!S_ISSOCK(st.st_mode)) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_EXISTS,
                    "%s exists and is not a socket: plegd does not remove it (remove it, or "
                    "choose another --socket)",
                    path);
        return FALSE;
    }

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return fail_errno(error, errno, "cannot check whether a process listens on %s", path);
    g_strlcpy(address.sun_path, path, sizeof address.sun_path);
    r = connect(fd, (const struct sockaddr *)&address, sizeof address);
    errsv = errno;
    close(fd);
    /* EAGAIN: a listener whose backlog is full, alive all the same. */
    if (r == 0 || errsv == EAGAIN || errsv == EINPROGRESS) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_ADDRESS_IN_USE,
                    "a process listens on %s already (another plegd?): not replacing its socket",
                    path);
        return FALSE;
    }
    if (errsv != ECONNREFUSED)
        return fail_errno(error, errsv, "cannot check whether a process listens on %s", path);
    if (unlink(path) < 0 && errno != ENOENT)
        return fail_errno(error, errno, "cannot remove the stale socket %s", path);
    g_info("removed the stale socket %s: nothing listened on it", path);
    return TRUE;
}

/* Binds @socket at @path with @mode, group @gid (-1: plegd's).  Linux gives the file the mode of
 * the socket's own inode less the umask: set first, the file is never more open than @mode, not
 * even between bind() and chmod(). */
static gboolean
bind_socket(GSocket *socket, const char *path, gint64 gid, mode_t mode, struct stat *ret_st,
            GError **error)
{
    g_autoptr(GSocketAddress) address = g_unix_socket_address_new(path);
    int errsv;

    if (fchmod(g_socket_get_fd(socket), mode) < 0)
        return fail_errno(error, errno, "cannot set the mode of the socket for %s", path);
    if (!g_socket_bind(socket, address, FALSE, error)) {
        g_prefix_error(error, "cannot bind %s: ", path);
        return FALSE;
    }
    /* Nobody can connect before listen(): the owner and mode are set first. */
    if ((gid >= 0 && lchown(path, (uid_t)-1, (gid_t)gid) < 0) || chmod(path, mode) < 0 ||
        lstat(path, ret_st) < 0) {
        errsv = errno;
        unlink(path);
        return fail_errno(error, errsv, "cannot set the group and mode of %s", path);
    }
    return TRUE;
}

/* Makes @dir and its missing parents with mode 0755 whatever the umask: a strict one (077)
 * would keep the members of --socket-group out.  Directories that exist are left as they are.
 * Returns: 0, or an errno value. */
static int
make_socket_directory(const char *dir)
{
    g_autofree char *parent = g_path_get_dirname(dir);
    struct stat st;

    if (stat(dir, &st) == 0)
        return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
    if (errno != ENOENT)
        return errno;
    if (!g_str_equal(parent, dir)) {
        int errsv = make_socket_directory(parent);

        if (errsv != 0)
            return errsv;
    }
    if (mkdir(dir, 0755) < 0)
        return errno == EEXIST ? 0 : errno; /* made meanwhile by someone else: theirs */
    return chmod(dir, 0755) < 0 ? errno : 0;
}

gboolean
plegd_http_listen_unix(PlegdHttp *http, const char *path, gint64 gid, GError **error)
{
    g_autofree char *dir = g_path_get_dirname(path);
    g_autoptr(GSocket) socket = NULL;
    struct stat st;
    int errsv;

    g_return_val_if_fail(!http->socket_path, FALSE);
    /* Under systemd RuntimeDirectory= makes it; a plegd run by hand makes it itself. */
    errsv = make_socket_directory(dir);
    if (errsv != 0)
        return fail_errno(error, errsv, "cannot create the directory of %s", path);
    if (!clear_path(path, error))
        return FALSE;
    socket = g_socket_new(G_SOCKET_FAMILY_UNIX, G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_DEFAULT,
                          error);
    if (!socket) {
        g_prefix_error(error, "cannot listen on %s: ", path);
        return FALSE;
    }
    if (!bind_socket(socket, path, gid, PLEGD_SOCKET_MODE, &st, error))
        return FALSE;
    http->socket_path = g_strdup(path);
    http->socket_dev = st.st_dev;
    http->socket_ino = st.st_ino;
    /* A unix socket refuses a connection beyond its backlog (EAGAIN) where TCP would retry:
     * room for the connections plegd serves at once. */
    g_socket_set_listen_backlog(socket, 2 * PLEGD_HTTP_MAX_CONNECTIONS);
    if (!g_socket_listen(socket, error) ||
        !g_socket_listener_add_socket(http->listener, socket, NULL, error)) {
        g_prefix_error(error, "cannot listen on %s: ", path);
        plegd_http_remove_unix_socket(http);
        g_clear_pointer(&http->socket_path, g_free);
        return FALSE;
    }
    return plegd_http_start_accepting(http, error);
}

void
plegd_http_remove_unix_socket(PlegdHttp *http)
{
    struct stat st;

    if (!http->socket_path)
        return;
    /* Another plegd may have replaced a socket it found stale: that one is not ours. */
    if (lstat(http->socket_path, &st) == 0 && st.st_dev == http->socket_dev &&
        st.st_ino == http->socket_ino && unlink(http->socket_path) < 0)
        g_debug("cannot remove the socket %s: %s, ignoring", http->socket_path,
                g_strerror(errno));
    http->socket_dev = 0;
    http->socket_ino = 0;
}

char *
plegd_http_describe_unix_peer(GSocket *socket)
{
    struct ucred cred;
    socklen_t length = sizeof cred;

    if (getsockopt(g_socket_get_fd(socket), SOL_SOCKET, SO_PEERCRED, &cred, &length) < 0)
        return g_strdup_printf("unknown peer (SO_PEERCRED: %s)", g_strerror(errno));
    return g_strdup_printf("pid=%d uid=%u gid=%u", (int)cred.pid, (unsigned)cred.uid,
                           (unsigned)cred.gid);
}

GSocketAddress *
plegd_http_get_unix_stand_in_local(PlegdHttp *http)
{
    if (!http->unix_stand_in_local) {
        g_autoptr(GInetAddress) loopback = g_inet_address_new_loopback(G_SOCKET_FAMILY_IPV4);

        http->unix_stand_in_local = g_inet_socket_address_new(loopback, 0);
    }
    return http->unix_stand_in_local;
}

void
plegd_http_socket_clear(PlegdHttp *http)
{
    g_clear_object(&http->unix_stand_in_local);
    g_clear_pointer(&http->socket_path, g_free);
}

/* ---- who may read what ---- */

void
plegd_http_set_tcp_events(PlegdHttp *http, PlegdTcpEvents mode)
{
    http->tcp_events = mode;
}

/* What scrapers and probes need: served on every listener. */
static gboolean
is_open_path(const char *path)
{
    static const char *const open_paths[] = {"/metrics", "/livez", "/readyz", "/healthz"};

    for (gsize i = 0; i < G_N_ELEMENTS(open_paths); i++) {
        if (g_str_equal(path, open_paths[i]))
            return TRUE;
    }
    return FALSE;
}

gboolean
plegd_http_check_access(PlegdHttp *http, Connection *conn, SoupServerMessage *msg,
                        const char *path)
{
    char *text;

    if (is_open_path(path) || (conn && conn->kind == LISTENER_UNIX))
        return TRUE;
    if (conn && http->tcp_events == PLEGD_TCP_EVENTS_LOOPBACK_UNAUTHENTICATED)
        return TRUE;
    if (conn && conn->kind == LISTENER_TLS && http->tcp_events == PLEGD_TCP_EVENTS_TLS) {
        if (conn->client_certificate)
            return TRUE;
        g_debug("refusing GET %s over TLS from %s: no client certificate", path, conn->peer);
        plegd_http_respond(msg, SOUP_STATUS_FORBIDDEN, TEXT_CONTENT_TYPE,
                           g_strdup_printf("403 forbidden: %s over TCP needs a client "
                                           "certificate signed by --client-ca-file\n",
                                           path));
        return FALSE;
    }

    if (http->socket_path)
        text = g_strdup_printf("403 forbidden: %s is served on plegd's unix socket %s, not over "
                               "TCP (--serve-events-over-tcp)\n",
                               path, http->socket_path);
    else
        text = g_strdup_printf("403 forbidden: %s is not served over TCP "
                               "(--serve-events-over-tcp), and plegd has no unix socket "
                               "(--socket is empty)\n",
                               path);
    g_debug("refusing GET %s over TCP from %s", path, conn ? conn->peer : "an unknown client");
    plegd_http_respond(msg, SOUP_STATUS_FORBIDDEN, TEXT_CONTENT_TYPE, text);
    return FALSE;
}
