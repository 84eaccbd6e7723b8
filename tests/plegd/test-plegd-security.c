/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Who may read what (issue #23): plegd's unix socket is mode 0660, its owner and --socket-group
 * connect and nobody else (a child of the test as uid nobody); over TCP /metrics and the probes
 * answer, /events and /pods 403 naming the socket unless --serve-events-over-tcp says otherwise;
 * a stale socket is replaced, a file that is not a socket and the socket of a live plegd are
 * left alone and plegd refuses to start; plegd removes only its own socket at exit; each
 * request's peer credentials are in the debug log.  Needs root (setresuid, chown).
 */
#include <errno.h>
#include <gio/gunixsocketaddress.h>
#include <glib/gstdio.h>
#include <grp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

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
    g_autoptr(PlegdRunner) plegd =
        plegd_runner_spawn(NULL, fixture.endpoint_arg, "--metrics-bind-address=",
                           fixture.socket_arg, group_arg, "--plugin-dir=");
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

/* Without --socket-group the socket is plegd's group's (root's): nobody is refused. */
START_TEST(test_socket_default_group)
{
    g_autoptr(PlegdRunner) plegd = plegd_runner_spawn(
        NULL, fixture.endpoint_arg, "--metrics-bind-address=", fixture.socket_arg, "--plugin-dir=");
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
    ck_assert_msg(count_messages(err, "warning: serving /events and /pods on http://127.0.0.1:") ==
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
                              "(127.0.0.1 or [::1]), not 0.0.0.0"),
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
    plegd = plegd_runner_spawn(NULL, fixture.endpoint_arg, "--metrics-bind-address=",
                               fixture.socket_arg, "--plugin-dir=");
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
    g_autoptr(PlegdRunner) plegd = plegd_runner_spawn(
        NULL, fixture.endpoint_arg, "--metrics-bind-address=", fixture.socket_arg, "--plugin-dir=");
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
        g_autoptr(PlegdRunner) again =
            plegd_runner_spawn(NULL, fixture.endpoint_arg, "--metrics-bind-address=",
                               fixture.socket_arg, "--plugin-dir=");

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
    g_autoptr(PlegdRunner) first = plegd_runner_spawn(
        NULL, fixture.endpoint_arg, "--metrics-bind-address=", fixture.socket_arg, "--plugin-dir=");
    g_autoptr(PlegdRunner) second = NULL;
    g_autofree char *api = socket_url();
    g_autofree char *err = NULL;
    g_autofree char *expected = g_strdup_printf(
        "plegd: a process listens on %s already (another plegd?): not replacing its socket",
        fixture.socket_path);
    struct stat before, after;

    assert_stderr_shows(first, "serving the API on unix:");
    ck_assert_int_eq(lstat(fixture.socket_path, &before), 0);
    second = plegd_runner_spawn(NULL, fixture.endpoint_arg, "--metrics-bind-address=",
                                fixture.socket_arg, "--plugin-dir=");
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
    g_autoptr(PlegdRunner) plegd = plegd_runner_spawn(
        NULL, fixture.endpoint_arg, "--metrics-bind-address=", fixture.socket_arg, "--plugin-dir=");
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

static Suite *
plegd_security_suite(void)
{
    Suite *suite = suite_create("plegd-security");
    TCase *tc = tcase_create("socket");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_socket_permissions);
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
main(void)
{
    SRunner *runner = srunner_create(plegd_security_suite());
    int n_failed;

    srunner_run_all(runner, CK_NORMAL);
    n_failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return n_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
