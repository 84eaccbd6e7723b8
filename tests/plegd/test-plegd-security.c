/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Who may read what (issue #23): plegd's unix socket is mode 0660, its owner and --socket-group
 * connect and nobody else (a child of the test as uid nobody); over TCP /metrics and the probes
 * answer, /events and /pods 403 naming the socket unless --serve-events-over-tcp says otherwise;
 * a stale socket is replaced, a file that is not a socket and the socket of a live plegd are
 * left alone and plegd refuses to start; plegd removes only its own socket at exit; each
 * request's peer credentials are in the debug log.  Over TLS (certificates made at test time by
 * make-test-certs.sh with openssl): no client certificate, another CA's, an expired one and one
 * not valid yet are refused /events; a good one streams it; SIGHUP rotates the server's
 * certificate under a running stream, drops a client whose CA left the CA file, and keeps the
 * files in use when the new ones do not load; a private key others may read is refused at
 * start.  Needs root (setresuid, chown).
 */
#include <errno.h>
#include <gio/gunixsocketaddress.h>
#include <glib/gstdio.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cri-sim.h"
#include "plegd-runner.h"

/* nobody and nogroup on Debian; the socket's group is one nobody is not in. */
#define NOBODY_UID   65534
#define NOGROUP_GID  65534
#define SOCKET_GROUP 4242

typedef struct {
    char *dir;
    char *endpoint_arg;
    char *socket_path;
    char *socket_arg;
} Fixture;

static Fixture fixture;

static void
setup(void)
{
    ck_assert_msg(geteuid() == 0, "this test needs root (setresuid, chown)");
    fixture.dir = make_tmpdir();
    /* Others may look up the socket in it: the socket's own mode decides. */
    ck_assert_int_eq(g_chmod(fixture.dir, 0755), 0);
    fixture.endpoint_arg =
        g_strdup_printf("--container-runtime-endpoint=unix://%s/nothing.sock", fixture.dir);
    fixture.socket_path = g_build_filename(fixture.dir, "plegd.sock", NULL);
    fixture.socket_arg = g_strconcat("--socket=", fixture.socket_path, NULL);
}

static void
teardown(void)
{
    remove_tmpdir(fixture.dir);
    g_clear_pointer(&fixture.dir, g_free);
    g_clear_pointer(&fixture.endpoint_arg, g_free);
    g_clear_pointer(&fixture.socket_path, g_free);
    g_clear_pointer(&fixture.socket_arg, g_free);
}

static char *
socket_url(void)
{
    g_autofree char *escaped = g_uri_escape_string(fixture.socket_path, NULL, FALSE);

    return g_strconcat("http+unix://", escaped, NULL);
}

/* plegd with the socket and no TCP listener, @extra_arg (nullable) last. */
static PlegdRunner *
spawn_socket_only(const char *extra_arg)
{
    const char *args[] = {fixture.endpoint_arg, "--metrics-bind-address=", fixture.socket_arg,
                          "--plugin-dir=", extra_arg, NULL};

    return plegd_runner_spawn_full(NULL, -1, args);
}

/* ---- a client as another user ---- */

enum {
    AS_USER_SERVED = 10,  /* connected, and /pods answered 200 */
    AS_USER_REFUSED = 11, /* connect() failed with EACCES */
    AS_USER_OTHER = 12,   /* anything else */
};

/* In a child that is uid and gid nobody, with @group as its only supplementary group (-1:
 * none): connects to the socket and asks for /pods.  Only async-signal-safe calls after fork(). */
static int
connect_as_nobody(gid_t group)
{
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    const char request[] = "GET /pods HTTP/1.0\r\n\r\n";
    int status;
    pid_t pid;

    g_strlcpy(address.sun_path, fixture.socket_path, sizeof address.sun_path);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char answer[32] = {0};
        gsize got = 0;
        int fd;

        if (setgroups(group == (gid_t)-1 ? 0 : 1, &group) < 0 ||
            setresgid(NOGROUP_GID, NOGROUP_GID, NOGROUP_GID) < 0 ||
            setresuid(NOBODY_UID, NOBODY_UID, NOBODY_UID) < 0)
            _exit(AS_USER_OTHER);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd < 0)
            _exit(AS_USER_OTHER);
        if (connect(fd, (struct sockaddr *)&address, sizeof address) < 0)
            _exit(errno == EACCES ? AS_USER_REFUSED : AS_USER_OTHER);
        if (write(fd, request, sizeof request - 1) != (ssize_t)(sizeof request - 1))
            _exit(AS_USER_OTHER);
        while (got < sizeof answer - 1) {
            ssize_t n = read(fd, answer + got, sizeof answer - 1 - got);

            if (n <= 0)
                break;
            got += (gsize)n;
        }
        _exit(memcmp(answer, "HTTP/1.0 200 ", 13) == 0 ? AS_USER_SERVED : AS_USER_OTHER);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* The socket is 0660 root:--socket-group: nobody cannot connect, nobody in the group can. */
START_TEST(test_socket_permissions)
{
    g_autofree char *group_arg = g_strdup_printf("--socket-group=%d", SOCKET_GROUP);
    g_autoptr(PlegdRunner) plegd = spawn_socket_only(group_arg);
    struct stat st;

    assert_stderr_shows(plegd, "serving the API on unix:");
    ck_assert_int_eq(lstat(fixture.socket_path, &st), 0);
    ck_assert(S_ISSOCK(st.st_mode));
    ck_assert_uint_eq(st.st_mode & 07777, 0660);
    ck_assert_uint_eq(st.st_uid, 0);
    ck_assert_uint_eq(st.st_gid, SOCKET_GROUP);

    ck_assert_int_eq(connect_as_nobody((gid_t)-1), AS_USER_REFUSED);
    ck_assert_int_eq(connect_as_nobody(SOCKET_GROUP), AS_USER_SERVED);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
}
END_TEST

/* A strict umask (077) does not close the directories plegd makes for its socket: they are 0755,
 * and the group of --socket-group still gets in. */
START_TEST(test_socket_directory_strict_umask)
{
    g_autofree char *group_arg = g_strdup_printf("--socket-group=%d", SOCKET_GROUP);
    g_autofree char *outer = g_build_filename(fixture.dir, "run", NULL);
    g_autofree char *inner = g_build_filename(outer, "plegd", NULL);
    g_autoptr(PlegdRunner) plegd = NULL;
    struct stat st;
    mode_t previous;

    g_free(fixture.socket_path);
    g_free(fixture.socket_arg);
    fixture.socket_path = g_build_filename(inner, "plegd.sock", NULL);
    fixture.socket_arg = g_strconcat("--socket=", fixture.socket_path, NULL);
    previous = umask(077);
    plegd = spawn_socket_only(group_arg);
    umask(previous);

    assert_stderr_shows(plegd, "serving the API on unix:");
    ck_assert_int_eq(stat(outer, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0755);
    ck_assert_int_eq(stat(inner, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0755);
    ck_assert_int_eq(lstat(fixture.socket_path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0660);
    ck_assert_int_eq(connect_as_nobody(SOCKET_GROUP), AS_USER_SERVED);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
}
END_TEST

/* Without --socket-group the socket is plegd's group's (root's): nobody is refused. */
START_TEST(test_socket_default_group)
{
    g_autoptr(PlegdRunner) plegd = spawn_socket_only(NULL);
    struct stat st;

    assert_stderr_shows(plegd, "serving the API on unix:");
    ck_assert_int_eq(lstat(fixture.socket_path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0660);
    ck_assert_uint_eq(st.st_gid, getegid());
    ck_assert_int_eq(connect_as_nobody(SOCKET_GROUP), AS_USER_REFUSED);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
}
END_TEST

/* ---- what TCP serves ---- */

static void
assert_forbidden(const char *base, const char *method, const char *path, const char *needle)
{
    g_autofree char *url = g_strconcat(base, path, NULL);
    g_autofree char *body = NULL;

    ck_assert_uint_eq(http_request(method, url, &body, NULL), 403);
    if (g_str_equal(method, "GET"))
        ck_assert_msg(strstr(body, needle), "%s %s: %s", method, path, body);
}

static void
assert_status(const char *base, const char *path, guint status)
{
    g_autofree char *url = g_strconcat(base, path, NULL);
    g_autofree char *body = NULL;

    ck_assert_msg(http_request("GET", url, &body, NULL) == status, "GET %s: %s", path, body);
}

/* By default TCP serves what scrapers and probes need; /events and /pods answer 403 with a line
 * naming the socket, where both are served. */
START_TEST(test_tcp_default)
{
    g_autoptr(PlegdRunner) plegd =
        plegd_runner_spawn(NULL, fixture.endpoint_arg, "--metrics-bind-address=127.0.0.1:0",
                           fixture.socket_arg, "--plugin-dir=");
    g_autofree char *base = plegd_runner_wait_metrics_url(plegd);
    g_autofree char *api = socket_url();
    g_autofree char *needle =
        g_strdup_printf("is served on plegd's unix socket %s", fixture.socket_path);

    assert_status(base, "/metrics", 200);
    assert_status(base, "/livez", 200);
    assert_status(base, "/healthz", 200);
    assert_status(base, "/readyz", 503); /* no runtime */
    assert_forbidden(base, "GET", "/events", needle);
    assert_forbidden(base, "GET", "/events?follow=false&since=0", needle);
    assert_forbidden(base, "HEAD", "/events", needle);
    assert_forbidden(base, "GET", "/pods", needle);
    assert_forbidden(base, "GET", "/pods?namespace=kube-system", needle);
    assert_status(base, "/nothing", 404);

    /* The same paths on the socket. */
    assert_status(api, "/metrics", 200);
    assert_status(api, "/livez", 200);
    assert_status(api, "/pods", 200);
    assert_status(api, "/events?follow=false", 200);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
}
END_TEST

/* Without a socket the 403 says so. */
START_TEST(test_tcp_without_socket)
{
    g_autoptr(PlegdRunner) plegd = plegd_runner_spawn(
        NULL, fixture.endpoint_arg, "--metrics-bind-address=127.0.0.1:0", "--socket=",
        "--plugin-dir=");
    g_autofree char *base = plegd_runner_wait_metrics_url(plegd);
    g_autofree char *err = NULL;

    assert_forbidden(base, "GET", "/events", "plegd has no unix socket (--socket is empty)");
    assert_status(base, "/metrics", 200);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(!strstr(err, "serving the API on unix:"), "%s", err);
}
END_TEST

/* --serve-events-over-tcp=loopback-unauthenticated serves them on a loopback address, and says
 * at start that anyone on the node can read them; a non-loopback address is refused. */
START_TEST(test_tcp_loopback_unauthenticated)
{
    g_autoptr(PlegdRunner) plegd = plegd_runner_spawn(
        NULL, fixture.endpoint_arg, "--metrics-bind-address=127.0.0.1:0", fixture.socket_arg,
        "--serve-events-over-tcp=loopback-unauthenticated", "--plugin-dir=");
    g_autofree char *base = plegd_runner_wait_metrics_url(plegd);
    g_autoptr(PlegdRunner) wildcard = NULL;
    g_autoptr(PlegdRunner) no_tcp = NULL;
    g_autofree char *err = NULL;

    assert_status(base, "/pods", 200);
    assert_status(base, "/events?follow=false", 200);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(count_messages(err, "serving /events, /pods and /status on http://127.0.0.1:") ==
                      1,
                  "%s", err);
    ck_assert_msg(strstr(err, "every local user and every host-network pod can read them"), "%s",
                  err);
    g_clear_pointer(&err, g_free);

    wildcard = plegd_runner_spawn(NULL, fixture.endpoint_arg, "--metrics-bind-address=0.0.0.0:0",
                                  "--serve-events-over-tcp=loopback-unauthenticated");
    ck_assert_int_eq(plegd_runner_wait_exit(wildcard), 2);
    err = plegd_runner_get_stderr(wildcard);
    ck_assert_msg(strstr(err, "invalid --serve-events-over-tcp \"loopback-unauthenticated\": "
                              "--metrics-bind-address must be a loopback address "
                              "(127.0.0.0/8 or [::1]), not 0.0.0.0"),
                  "%s", err);
    g_clear_pointer(&err, g_free);

    no_tcp = plegd_runner_spawn(NULL, fixture.endpoint_arg, "--metrics-bind-address=",
                                "--serve-events-over-tcp=loopback-unauthenticated");
    ck_assert_int_eq(plegd_runner_wait_exit(no_tcp), 2);
    err = plegd_runner_get_stderr(no_tcp);
    ck_assert_msg(strstr(err, "there is no TCP listener"), "%s", err);
}
END_TEST

/* ---- what is at the socket's path ---- */

/* A socket bound and closed without unlink(): what a plegd killed leaves. */
static void
make_stale_socket(const char *path)
{
    g_autoptr(GSocketAddress) address = g_unix_socket_address_new(path);
    g_autoptr(GSocket) socket =
        g_socket_new(G_SOCKET_FAMILY_UNIX, G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_DEFAULT, NULL);

    ck_assert(socket && g_socket_bind(socket, address, FALSE, NULL));
    ck_assert(g_socket_listen(socket, NULL));
    ck_assert(g_socket_close(socket, NULL));
}

START_TEST(test_stale_socket_replaced)
{
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autofree char *api = socket_url();
    struct stat after;

    make_stale_socket(fixture.socket_path);
    plegd = spawn_socket_only(NULL);
    assert_stderr_shows(plegd, "serving the API on unix:");
    ck_assert_int_eq(lstat(fixture.socket_path, &after), 0);
    ck_assert_uint_eq(after.st_mode & 07777, 0660);
    assert_status(api, "/pods", 200);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    {
        g_autofree char *err = plegd_runner_get_stderr(plegd);

        ck_assert_msg(strstr(err, "removed the stale socket"), "%s", err);
    }
    /* Removed at a clean exit. */
    ck_assert_int_lt(lstat(fixture.socket_path, &after), 0);
}
END_TEST

/* A file that is not a socket is never removed: plegd refuses to start, naming it. */
START_TEST(test_foreign_file_kept)
{
    g_autofree char *path = write_file(fixture.dir, "plegd.sock", "not a socket\n");
    g_autoptr(PlegdRunner) plegd = spawn_socket_only(NULL);
    g_autofree char *err = NULL;
    g_autofree char *contents = NULL;
    g_autofree char *expected = g_strdup_printf(
        "plegd: %s exists and is not a socket: plegd does not remove it", fixture.socket_path);

    ck_assert_int_eq(plegd_runner_wait_exit(plegd), 1);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(strstr(err, expected), "%s", err);
    ck_assert(g_file_get_contents(path, &contents, NULL, NULL));
    ck_assert_str_eq(contents, "not a socket\n");

    /* A directory neither. */
    ck_assert_int_eq(g_unlink(path), 0);
    ck_assert_int_eq(g_mkdir(path, 0700), 0);
    {
        g_autoptr(PlegdRunner) again = spawn_socket_only(NULL);

        ck_assert_int_eq(plegd_runner_wait_exit(again), 1);
        g_clear_pointer(&err, g_free);
        err = plegd_runner_get_stderr(again);
        ck_assert_msg(strstr(err, expected), "%s", err);
    }
    ck_assert(g_file_test(path, G_FILE_TEST_IS_DIR));
    ck_assert_int_eq(g_rmdir(path), 0);
}
END_TEST

/* A second plegd on the socket of a live one refuses to start; the first one serves on. */
START_TEST(test_second_plegd_refused)
{
    g_autoptr(PlegdRunner) first = spawn_socket_only(NULL);
    g_autoptr(PlegdRunner) second = NULL;
    g_autofree char *api = socket_url();
    g_autofree char *err = NULL;
    g_autofree char *expected = g_strdup_printf(
        "plegd: a process listens on %s already (another plegd?): not replacing its socket",
        fixture.socket_path);
    struct stat before, after;

    assert_stderr_shows(first, "serving the API on unix:");
    ck_assert_int_eq(lstat(fixture.socket_path, &before), 0);
    second = spawn_socket_only(NULL);
    ck_assert_int_eq(plegd_runner_wait_exit(second), 1);
    err = plegd_runner_get_stderr(second);
    ck_assert_msg(strstr(err, expected), "%s", err);

    ck_assert_int_eq(lstat(fixture.socket_path, &after), 0);
    ck_assert_uint_eq(before.st_ino, after.st_ino);
    assert_status(api, "/pods", 200);
    ck_assert_int_eq(plegd_runner_stop(first, SIGTERM), 0);
}
END_TEST

/* At exit plegd removes its socket only when it is still the one it made. */
START_TEST(test_exit_keeps_a_socket_not_its_own)
{
    g_autoptr(PlegdRunner) plegd = spawn_socket_only(NULL);
    struct stat st;

    assert_stderr_shows(plegd, "serving the API on unix:");
    ck_assert_int_eq(g_unlink(fixture.socket_path), 0);
    make_stale_socket(fixture.socket_path);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    ck_assert_int_eq(lstat(fixture.socket_path, &st), 0);
    ck_assert(S_ISSOCK(st.st_mode));
}
END_TEST

/* ---- the request log ---- */

/* At debug level each connection and request names its client: on the socket, its peer
 * credentials (SO_PEERCRED); over TCP, its address. */
START_TEST(test_peer_credentials_logged)
{
    const char *const env[] = {"G_MESSAGES_DEBUG=plegd", NULL};
    g_autoptr(PlegdRunner) plegd =
        plegd_runner_spawn(env, fixture.endpoint_arg, "--metrics-bind-address=127.0.0.1:0",
                           fixture.socket_arg, "--plugin-dir=");
    g_autofree char *base = plegd_runner_wait_metrics_url(plegd);
    g_autofree char *api = socket_url();
    g_autofree char *needle =
        g_strdup_printf("GET /pods from pid=%d uid=0 gid=0", (int)getpid());

    assert_status(api, "/pods", 200);
    assert_stderr_shows(plegd, needle);
    assert_status(base, "/metrics", 200);
    assert_stderr_shows(plegd, "GET /metrics from 127.0.0.1:");
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
}
END_TEST

/* ---- TLS ---- */

static char *certs_dir;
static CriSim *sim;

static char *
cert_path(const char *name)
{
    return g_build_filename(certs_dir, name, NULL);
}

/* setup(), the certificates (make-test-certs.sh), and cri-sim as the runtime. */
static void
tls_setup(void)
{
    const char *script = g_getenv("PLEGD_TEST_MAKE_CERTS");
    g_autofree char *err = NULL;
    g_autofree char *socket = NULL;
    g_autoptr(GError) error = NULL;
    int status;

    setup();
    ck_assert_msg(script, "PLEGD_TEST_MAKE_CERTS must name make-test-certs.sh");
    certs_dir = g_build_filename(fixture.dir, "certs", NULL);
    ck_assert_int_eq(g_mkdir(certs_dir, 0700), 0);
    {
        const char *argv[] = {"bash", script, certs_dir, NULL};

        ck_assert_msg(g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL,
                                   NULL, &err, &status, &error),
                      "%s", error ? error->message : "");
        ck_assert_msg(g_spawn_check_wait_status(status, NULL), "make-test-certs.sh: %s", err);
    }
    socket = g_build_filename(fixture.dir, "cri.sock", NULL);
    sim = cri_sim_new(socket, &error);
    ck_assert_msg(sim, "%s", error ? error->message : "");
    g_free(fixture.endpoint_arg);
    fixture.endpoint_arg = g_strconcat("--container-runtime-endpoint=unix://", socket, NULL);
}

static void
tls_teardown(void)
{
    g_autofree char *issued = g_build_filename(certs_dir, "issued", NULL);

    g_clear_pointer(&sim, cri_sim_free);
    remove_tmpdir(issued);
    remove_tmpdir(certs_dir);
    g_clear_pointer(&certs_dir, g_free);
    teardown();
}

static void
sim_command(const char *line)
{
    g_autoptr(GError) error = NULL;

    ck_assert_msg(cri_sim_run_command(sim, line, NULL, &error), "%s: %s", line,
                  error ? error->message : "");
}

/* Copies certs/@from to certs/@to, mode @mode (rotation writes over the files in use). */
static void
copy_cert(const char *from, const char *to, int mode)
{
    g_autofree char *source = cert_path(from);
    g_autofree char *target = cert_path(to);
    g_autofree char *contents = NULL;
    g_autoptr(GError) error = NULL;
    gsize length;

    ck_assert_msg(g_file_get_contents(source, &contents, &length, &error), "%s", error->message);
    ck_assert_msg(g_file_set_contents_full(target, contents, (gssize)length,
                                           G_FILE_SET_CONTENTS_CONSISTENT, mode, &error),
                  "%s", error ? error->message : "");
}

static GTlsCertificate *
load_certificate(const char *name, gboolean with_key)
{
    g_autofree char *pem = g_strconcat(name, ".pem", NULL);
    g_autofree char *key = g_strconcat(name, ".key", NULL);
    g_autofree char *pem_path = cert_path(pem);
    g_autofree char *key_path = cert_path(key);
    g_autoptr(GError) error = NULL;
    GTlsCertificate *certificate = with_key
                                       ? g_tls_certificate_new_from_files(pem_path, key_path, &error)
                                       : g_tls_certificate_new_from_file(pem_path, &error);

    ck_assert_msg(certificate, "%s: %s", name, error ? error->message : "");
    return certificate;
}

/* A client of plegd's TLS listener, trusting ca.pem for the server. */
typedef struct {
    GIOStream *tls;
    GString *raw;
    gboolean ended; /* end of stream, or an error: the server refused or closed */
    char *why;      /* how it ended */
} TlsClient;

static void
tls_client_free(TlsClient *client)
{
    if (!client)
        return;
    if (client->tls)
        g_io_stream_close(client->tls, NULL, NULL);
    g_clear_object(&client->tls);
    g_string_free(client->raw, TRUE);
    g_free(client->why);
    g_free(client);
}
G_DEFINE_AUTOPTR_CLEANUP_FUNC(TlsClient, tls_client_free)

static guint16
port_of(const char *url)
{
    return (guint16)g_ascii_strtoull(strrchr(url, ':') + 1, NULL, 10);
}

/* Connects with the client certificate certs/@name.pem (NULL: none) and sends @request.  With
 * TLS 1.3 a refused client certificate may show only after the client's side of the handshake:
 * a client that ends without an answer was refused either way. */
static TlsClient *
tls_client_open(guint16 port, const char *name, const char *request)
{
    g_autoptr(GSocketClient) socket_client = g_socket_client_new();
    g_autoptr(GSocketConnection) connection = NULL;
    g_autoptr(GSocketConnectable) identity = g_network_address_new("127.0.0.1", port);
    g_autofree char *ca = cert_path("ca.pem");
    g_autoptr(GTlsDatabase) database = NULL;
    g_autoptr(GError) error = NULL;
    TlsClient *client = g_new0(TlsClient, 1);

    client->raw = g_string_new(NULL);
    g_socket_client_set_enable_proxy(socket_client, FALSE);
    connection = g_socket_client_connect(socket_client, identity, NULL, &error);
    ck_assert_msg(connection, "%s", error ? error->message : "");
    g_socket_set_timeout(g_socket_connection_get_socket(connection), 15);
    client->tls = g_tls_client_connection_new(G_IO_STREAM(connection), identity, &error);
    ck_assert_msg(client->tls, "%s", error ? error->message : "");
    database = g_tls_file_database_new(ca, &error);
    ck_assert_msg(database, "%s", error ? error->message : "");
    g_tls_connection_set_database(G_TLS_CONNECTION(client->tls), database);
    if (name) {
        g_autoptr(GTlsCertificate) certificate = load_certificate(name, TRUE);

        g_tls_connection_set_certificate(G_TLS_CONNECTION(client->tls), certificate);
    }
    if (!g_tls_connection_handshake(G_TLS_CONNECTION(client->tls), NULL, &error) ||
        !g_output_stream_write_all(g_io_stream_get_output_stream(client->tls), request,
                                   strlen(request), NULL, NULL, &error)) {
        client->ended = TRUE;
        client->why = g_strdup(error->message);
    }
    return client;
}

/* Reads until @needle is in what came (NULL: until the end).  Returns: whether it came. */
static gboolean
tls_client_read_until(TlsClient *client, const char *needle)
{
    while (!(needle && strstr(client->raw->str, needle)) && !client->ended) {
        g_autoptr(GError) error = NULL;
        char buffer[4096];
        gssize n = g_input_stream_read(g_io_stream_get_input_stream(client->tls), buffer,
                                       sizeof buffer, NULL, &error);

        if (n <= 0) {
            client->ended = TRUE;
            client->why = g_strdup(error ? error->message : "end of stream");
            break;
        }
        g_string_append_len(client->raw, buffer, n);
    }
    return needle ? strstr(client->raw->str, needle) != NULL : TRUE;
}

/* GET @path on a connection of its own: the status, 0 when no answer came (refused). */
static guint
tls_get(guint16 port, const char *name, const char *path, char **ret_answer)
{
    g_autofree char *request =
        g_strdup_printf("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
    g_autoptr(TlsClient) client = tls_client_open(port, name, request);
    guint status = 0;

    tls_client_read_until(client, NULL);
    if (g_str_has_prefix(client->raw->str, "HTTP/1.1 "))
        status = (guint)g_ascii_strtoull(client->raw->str + 9, NULL, 10);
    else /* no answer: why, in the test's log, for an assertion that expected one */
        g_printerr("GET %s as %s: no answer: %s\n", path, name ? name : "(no certificate)",
                   client->why ? client->why : client->raw->str);
    if (ret_answer)
        *ret_answer = g_strdup(status ? client->raw->str : client->why);
    return status;
}

/* plegd serving TLS with server.pem, client certificates of certs/@ca_name, /events to them. */
static PlegdRunner *
spawn_tls(const char *ca_name, char **ret_url)
{
    g_autofree char *cert = cert_path("server.pem");
    g_autofree char *key = cert_path("server.key");
    g_autofree char *ca = cert_path(ca_name);
    g_autofree char *cert_arg = g_strconcat("--tls-cert-file=", cert, NULL);
    g_autofree char *key_arg = g_strconcat("--tls-private-key-file=", key, NULL);
    g_autofree char *ca_arg = g_strconcat("--client-ca-file=", ca, NULL);
    const char *const env[] = {"G_MESSAGES_DEBUG=plegd", NULL};
    PlegdRunner *plegd = plegd_runner_spawn(
        env, fixture.endpoint_arg, "--metrics-bind-address=127.0.0.1:0", "--relist-period=100ms",
        fixture.socket_arg, "--plugin-dir=", "--serve-events-over-tcp=tls", cert_arg, key_arg,
        ca_arg);

    *ret_url = plegd_runner_wait_metrics_url(plegd);
    ck_assert_msg(g_str_has_prefix(*ret_url, "https://127.0.0.1:"), "%s", *ret_url);
    return plegd;
}

static void
assert_refused(guint16 port, const char *name)
{
    g_autofree char *answer = NULL;

    ck_assert_msg(tls_get(port, name, "/events?follow=false", &answer) == 0,
                  "%s was answered:\n%s", name, answer);
}

/* What a client certificate opens, and what it does not: the three refused at the handshake,
 * /events and /pods 403 without one, /metrics and the probes served to anyone over TLS. */
START_TEST(test_tls_client_certificates)
{
    g_autofree char *url = NULL;
    g_autoptr(PlegdRunner) plegd = spawn_tls("ca.pem", &url);
    guint16 port = port_of(url);
    g_autofree char *answer = NULL;
    g_autofree char *err = NULL;
    g_autoptr(TlsClient) stream = NULL;

    /* No client certificate: what scrapers and probes need, not the events. */
    ck_assert_uint_eq(tls_get(port, NULL, "/metrics", NULL), 200);
    ck_assert_uint_eq(tls_get(port, NULL, "/livez", NULL), 200);
    ck_assert_uint_eq(tls_get(port, NULL, "/events", &answer), 403);
    ck_assert_msg(strstr(answer, "403 forbidden: /events over TCP needs a client certificate "
                                 "signed by --client-ca-file"),
                  "%s", answer);
    ck_assert_uint_eq(tls_get(port, NULL, "/pods", NULL), 403);

    /* Another CA's, expired, not valid yet: refused at the handshake. */
    assert_refused(port, "other-client");
    assert_refused(port, "expired");
    assert_refused(port, "future");
    assert_stderr_shows(plegd, "refusing a TLS client certificate (CN=intruder): not signed by "
                               "a CA of --client-ca-file");
    assert_stderr_shows(plegd, "refusing a TLS client certificate (CN=expired): expired");
    assert_stderr_shows(plegd, "refusing a TLS client certificate (CN=future): not valid yet");

    /* Plain HTTP on the TLS port: no answer. */
    {
        g_autofree char *http_url = g_strdup_printf("http://127.0.0.1:%u/metrics", port);
        g_autoptr(GSocketClient) socket_client = g_socket_client_new();
        g_autoptr(GSocketConnection) connection = g_socket_client_connect_to_host(
            socket_client, "127.0.0.1", port, NULL, NULL);
        const char request[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
        char buffer[64] = {0};

        ck_assert(connection);
        g_socket_set_timeout(g_socket_connection_get_socket(connection), 15);
        ck_assert(g_output_stream_write_all(g_io_stream_get_output_stream(G_IO_STREAM(connection)),
                                            request, strlen(request), NULL, NULL, NULL));
        g_input_stream_read(g_io_stream_get_input_stream(G_IO_STREAM(connection)), buffer,
                            sizeof buffer - 1, NULL, NULL);
        ck_assert_msg(!g_str_has_prefix(buffer, "HTTP/"), "%s: %s", http_url, buffer);
    }

    /* A good one: /pods, and /events streams. */
    ck_assert_uint_eq(tls_get(port, "client", "/pods", NULL), 200);
    stream = tls_client_open(port, "client",
                             "GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    ck_assert_msg(tls_client_read_until(stream, "\r\n\r\n"), "%s", stream->why);
    ck_assert_msg(g_str_has_prefix(stream->raw->str, "HTTP/1.1 200 "), "%s", stream->raw->str);
    sim_command("pod p1");
    ck_assert_msg(tls_client_read_until(stream, "\"pod_uid\":\"p1\""), "%s: %s", stream->why,
                  stream->raw->str);

    /* A request body plegd refuses unread is answered through TLS too. */
    {
        g_autoptr(TlsClient) post = tls_client_open(
            port, NULL,
            "POST /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10485760\r\n\r\n");

        tls_client_read_until(post, "\r\n\r\n");
        ck_assert_msg(g_str_has_prefix(post->raw->str, "HTTP/1.1 405 "), "%s %s", post->raw->str,
                      post->why);
    }

    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(strstr(err, "GET /pods from 127.0.0.1:") && strstr(err, "(CN=consumer)"), "%s",
                  err);
}
END_TEST

/* Short TLS connections one after another, each answered and closed by libsoup while
 * glib-networking's handshake thread may still hold the connection: plegd serves every one,
 * keeps running, and logs no critical (the test runs it with G_DEBUG=fatal-warnings).  On one
 * CPU (this forked test and the plegd it starts) the handshake thread is mostly preempted by
 * the loop's thread it woke, and drops the connection's last reference after libsoup: a plegd
 * that freed its connection record from there failed here within a few dozen connections. */
START_TEST(test_tls_short_connections)
{
    g_autofree char *url = NULL;
    g_autoptr(PlegdRunner) plegd = NULL;
    guint16 port;
    g_autofree char *err = NULL;
    cpu_set_t all_cpus;
    cpu_set_t one_cpu;

    ck_assert_int_eq(sched_getaffinity(0, sizeof all_cpus, &all_cpus), 0);
    CPU_ZERO(&one_cpu);
    CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one_cpu);
    ck_assert_int_eq(sched_setaffinity(0, sizeof one_cpu, &one_cpu), 0);
    plegd = spawn_tls("ca.pem", &url);
    port = port_of(url);

    for (guint i = 0; i < 400; i++)
        ck_assert_msg(tls_get(port, i % 2 ? "client" : NULL, "/livez", NULL) == 200,
                      "connection %u was not answered", i);
    ck_assert(plegd_runner_is_running(plegd));
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    ck_assert_int_eq(sched_setaffinity(0, sizeof all_cpus, &all_cpus), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(!strstr(err, "CRITICAL") && !strstr(err, "ERROR"), "%s", err);
}
END_TEST

static void
send_signal(PlegdRunner *plegd, int signum)
{
    ck_assert_int_eq(kill((pid_t)g_ascii_strtoll(plegd_runner_get_pid(plegd), NULL, 10), signum),
                     0);
}

/* A new connection with the good client certificate is served /pods, and plegd presents
 * @expected. */
static void
assert_next_connection_gets(guint16 port, GTlsCertificate *expected)
{
    g_autoptr(TlsClient) next =
        tls_client_open(port, "client", "GET /pods HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                        "Connection: close\r\n\r\n");

    tls_client_read_until(next, NULL);
    ck_assert_msg(g_str_has_prefix(next->raw->str, "HTTP/1.1 200 "), "%s", next->why);
    ck_assert(g_tls_certificate_is_same(
        g_tls_connection_get_peer_certificate(G_TLS_CONNECTION(next->tls)), expected));
}

/* SIGHUP reads the certificate and key again: a stream that runs keeps running, the next
 * connection gets the new certificate; files that do not load leave the ones in use. */
START_TEST(test_tls_rotation)
{
    g_autofree char *url = NULL;
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autoptr(TlsClient) stream = NULL;
    g_autoptr(GTlsCertificate) first = NULL;
    g_autoptr(GTlsCertificate) second = NULL;
    guint16 port;

    /* Files of their own, written over by the rotation. */
    copy_cert("server.pem", "current.pem", 0644);
    copy_cert("server.key", "current.key", 0600);
    {
        g_autofree char *cert = cert_path("current.pem");
        g_autofree char *key = cert_path("current.key");
        g_autofree char *ca = cert_path("ca.pem");
        g_autofree char *cert_arg = g_strconcat("--tls-cert-file=", cert, NULL);
        g_autofree char *key_arg = g_strconcat("--tls-private-key-file=", key, NULL);
        g_autofree char *ca_arg = g_strconcat("--client-ca-file=", ca, NULL);

        plegd = plegd_runner_spawn(NULL, fixture.endpoint_arg, "--metrics-bind-address=127.0.0.1:0",
                                   "--relist-period=100ms", fixture.socket_arg, "--plugin-dir=",
                                   "--serve-events-over-tcp=tls", cert_arg, key_arg, ca_arg);
    }
    url = plegd_runner_wait_metrics_url(plegd);
    port = port_of(url);
    first = load_certificate("server", FALSE);
    second = load_certificate("server2", FALSE);

    stream = tls_client_open(port, "client", "GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    ck_assert_msg(tls_client_read_until(stream, "\r\n\r\n"), "%s", stream->why);
    ck_assert(g_tls_certificate_is_same(
        g_tls_connection_get_peer_certificate(G_TLS_CONNECTION(stream->tls)), first));
    sim_command("pod p1");
    ck_assert(tls_client_read_until(stream, "\"pod_uid\":\"p1\""));

    copy_cert("server2.pem", "current.pem", 0644);
    copy_cert("server2.key", "current.key", 0600);
    send_signal(plegd, SIGHUP);
    assert_stderr_shows(plegd, "received SIGHUP: reloaded the TLS files");

    /* The next connection gets the new certificate; the stream goes on. */
    assert_next_connection_gets(port, second);
    sim_command("pod p2");
    ck_assert_msg(tls_client_read_until(stream, "\"pod_uid\":\"p2\""), "%s", stream->why);

    /* A certificate with another's key: refused, the pair in use stays. */
    copy_cert("server.pem", "current.pem", 0644);
    send_signal(plegd, SIGHUP);
    assert_stderr_shows(plegd, "received SIGHUP: cannot reload the TLS files: invalid "
                               "--tls-cert-file");
    assert_stderr_shows(plegd, "does the key belong to the certificate?");
    assert_next_connection_gets(port, second);
    sim_command("pod p3");
    ck_assert(tls_client_read_until(stream, "\"pod_uid\":\"p3\""));
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
}
END_TEST

/* A CA removed from the CA file and SIGHUP: its clients' streams end, new connections with its
 * certificates are refused; the other CA's clients go on. */
START_TEST(test_tls_revoked_by_the_ca_file)
{
    g_autofree char *url = NULL;
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autoptr(TlsClient) kept = NULL;
    g_autoptr(TlsClient) revoked = NULL;
    g_autofree char *err = NULL;
    guint16 port;

    copy_cert("both-cas.pem", "cas.pem", 0644);
    plegd = spawn_tls("cas.pem", &url);
    port = port_of(url);
    kept = tls_client_open(port, "client", "GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    revoked = tls_client_open(port, "other-client",
                              "GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    ck_assert_msg(tls_client_read_until(kept, "\r\n\r\n"), "%s", kept->why);
    ck_assert_msg(tls_client_read_until(revoked, "\r\n\r\n"), "%s", revoked->why);
    ck_assert_msg(g_str_has_prefix(revoked->raw->str, "HTTP/1.1 200 "), "%s", revoked->raw->str);

    copy_cert("ca.pem", "cas.pem", 0644);
    send_signal(plegd, SIGHUP);
    assert_stderr_shows(plegd, "received SIGHUP: reloaded the TLS files");
    assert_stderr_shows(plegd, "closing the connection of TLS client 127.0.0.1:");
    /* Its stream ends; a new connection is refused. */
    tls_client_read_until(revoked, NULL);
    ck_assert(revoked->ended);
    assert_refused(port, "other-client");

    sim_command("pod p1");
    ck_assert_msg(tls_client_read_until(kept, "\"pod_uid\":\"p1\""), "%s", kept->why);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(strstr(err, "(CN=intruder): its certificate does not verify against "
                              "--client-ca-file any more"),
                  "%s", err);
}
END_TEST

/* plegd refuses to start with a private key others may read (as sshd does), one owned by
 * another user, a key that is not the certificate's, and TLS flags that do not go together. */
START_TEST(test_tls_bad_files_and_flags)
{
    static const struct {
        const char *key;  /* the key file, copied from server.key */
        int mode;
        uid_t owner;
        const char *cert; /* the certificate file */
        const char *message;
    } cases[] = {
        {"loose.key", 0644, 0, "server.pem",
         "mode 0644: a private key must not be accessible by others (chmod o-rwx)"},
        {"loose.key", 0604, 0, "server.pem", "mode 0604"},
        {"foreign.key", 0600, NOBODY_UID, "server.pem",
         "owned by uid 65534: a private key must be owned by root or plegd's user"},
        {"server2.key", 0600, 0, "server.pem", "does the key belong to the certificate?"},
    };

    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autofree char *key = cert_path(cases[i].key);
        g_autofree char *cert = cert_path(cases[i].cert);
        g_autofree char *key_arg = g_strconcat("--tls-private-key-file=", key, NULL);
        g_autofree char *cert_arg = g_strconcat("--tls-cert-file=", cert, NULL);
        g_autoptr(PlegdRunner) plegd = NULL;
        g_autofree char *err = NULL;

        if (!g_str_equal(cases[i].key, "server2.key"))
            copy_cert("server.key", cases[i].key, 0600);
        ck_assert_int_eq(chmod(key, cases[i].mode), 0);
        ck_assert_int_eq(chown(key, cases[i].owner, 0), 0);
        plegd = plegd_runner_spawn(NULL, fixture.endpoint_arg,
                                   "--metrics-bind-address=127.0.0.1:0", cert_arg, key_arg);
        ck_assert_int_eq(plegd_runner_wait_exit(plegd), 2);
        err = plegd_runner_get_stderr(plegd);
        ck_assert_msg(strstr(err, cases[i].message) && strstr(err, key), "%s", err);
    }

    {
        static const char *const flags[][3] = {
            {"--tls-cert-file=/etc/hostname", NULL,
             "--tls-cert-file and --tls-private-key-file go together"},
            {"--client-ca-file=/etc/hostname", NULL,
             "needs --tls-cert-file and --tls-private-key-file"},
            {"--serve-events-over-tcp=tls", NULL, "needs --client-ca-file"},
            {"--tls-cert-file=relative.pem", "--tls-private-key-file=/etc/hostname",
             "must be an absolute path"},
            {"--metrics-bind-address=", "--tls-cert-file=/a", "there is no TCP listener"},
        };

        for (gsize i = 0; i < G_N_ELEMENTS(flags); i++) {
            g_autoptr(PlegdRunner) plegd =
                plegd_runner_spawn(NULL, fixture.endpoint_arg, "--metrics-bind-address=127.0.0.1:0",
                                   flags[i][0], flags[i][1] ? flags[i][1] : "--plugin-dir=",
                                   g_str_has_prefix(flags[i][1] ? flags[i][1] : "", "--tls-cert")
                                       ? "--tls-private-key-file=/b"
                                       : "--plugin-dir=");
            g_autofree char *err = NULL;

            ck_assert_int_eq(plegd_runner_wait_exit(plegd), 2);
            err = plegd_runner_get_stderr(plegd);
            ck_assert_msg(strstr(err, flags[i][2]), "%s: %s", flags[i][0], err);
        }
    }
}
END_TEST

/* @tls: the TLS cases (meson test plegd-tls), else the others (plegd-security). */
static Suite *
plegd_security_suite(gboolean tls)
{
    Suite *suite = suite_create(tls ? "plegd-tls" : "plegd-security");
    TCase *tc;

    if (tls) {
        tc = tcase_create("tls");
        tcase_add_checked_fixture(tc, tls_setup, tls_teardown);
        tcase_add_test(tc, test_tls_client_certificates);
        tcase_add_test(tc, test_tls_short_connections);
        tcase_add_test(tc, test_tls_rotation);
        tcase_add_test(tc, test_tls_revoked_by_the_ca_file);
        tcase_add_test(tc, test_tls_bad_files_and_flags);
        suite_add_tcase(suite, tc);
        return suite;
    }

    tc = tcase_create("socket");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_socket_permissions);
    tcase_add_test(tc, test_socket_directory_strict_umask);
    tcase_add_test(tc, test_socket_default_group);
    tcase_add_test(tc, test_stale_socket_replaced);
    tcase_add_test(tc, test_foreign_file_kept);
    tcase_add_test(tc, test_second_plegd_refused);
    tcase_add_test(tc, test_exit_keeps_a_socket_not_its_own);
    tcase_add_test(tc, test_peer_credentials_logged);
    suite_add_tcase(suite, tc);

    tc = tcase_create("tcp");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_tcp_default);
    tcase_add_test(tc, test_tcp_without_socket);
    tcase_add_test(tc, test_tcp_loopback_unauthenticated);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(int argc, char **argv)
{
    SRunner *runner = srunner_create(plegd_security_suite(argc > 1 && g_str_equal(argv[1], "tls")));
    int n_failed;

    srunner_run_all(runner, CK_NORMAL);
    n_failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return n_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
