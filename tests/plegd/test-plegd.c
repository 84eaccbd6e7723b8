/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd as a process: its command line and --config file, running against a runtime that is not
 * there (HTTP endpoints, logs, sd_notify, signals), and plugin directories with broken plugins.
 */
#include <signal.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <unistd.h>

#include "pleg-config.h"
#include "plegd-runner.h"

/* ---- command line ---- */

START_TEST(test_help)
{
    static const char *const flags[] = {
        "--container-runtime-endpoint",
        "--runtime-request-timeout",
        "--relist-period",
        "--relist-threshold",
        "--metrics-bind-address",
        "--socket",
        "--socket-group",
        "--serve-events-over-tcp",
        "--feature-gates",
        "--version",
        "--config",
        "--plugin-dir",
        "--disable-plugins",
        "--require-plugins",
        "[FeatureGates]",
    };
    g_autoptr(PlegdRunner) plegd = plegd_runner_spawn(NULL, "--help");
    g_autofree char *out = NULL;

    ck_assert_int_eq(plegd_runner_wait_exit(plegd), 0);
    out = plegd_runner_get_stdout(plegd);
    for (gsize i = 0; i < G_N_ELEMENTS(flags); i++)
        ck_assert_msg(strstr(out, flags[i]), "--help does not list %s:\n%s", flags[i], out);
}
END_TEST

START_TEST(test_version)
{
    g_autoptr(PlegdRunner) plegd = plegd_runner_spawn(NULL, "--version");
    g_autofree char *out = NULL;

    ck_assert_int_eq(plegd_runner_wait_exit(plegd), 0);
    out = plegd_runner_get_stdout(plegd);
    ck_assert_str_eq(out, "plegd " PLEG_VERSION "\n");
}
END_TEST

static const struct {
    const char *arg;
    const char *flag;  /* the message names this... */
    const char *value; /* ...and this */
} bad_args[] = {
    {"--relist-period=5parsecs", "--relist-period", "5parsecs"},
    {"--runtime-request-timeout=5parsecs", "--runtime-request-timeout", "5parsecs"},
    {"--relist-threshold=3 minutes", "--relist-threshold", "3 minutes"},
    {"--relist-period=0", "--relist-period", "\"0\""},
    {"--relist-period=-1s", "--relist-period", "-1s"},
    {"--relist-threshold=", "--relist-threshold", "\"\""},
    {"--relist-period=999ns", "--relist-period", "at least 1µs"},
    {"--relist-threshold=500ms", "--relist-threshold", "shorter than --relist-period"},
    {"--feature-gates=NoSuchGate=true", "--feature-gates", "NoSuchGate"},
    {"--feature-gates=EventedPLEG=maybe", "--feature-gates", "maybe"},
    {"--metrics-bind-address=localhost:10388", "--metrics-bind-address", "localhost:10388"},
    {"--metrics-bind-address=127.0.0.1:99999", "--metrics-bind-address", "127.0.0.1:99999"},
    {"--metrics-bind-address=::1:10388", "--metrics-bind-address", "::1:10388"},
    {"--metrics-bind-address=127.0.0.1", "--metrics-bind-address", "127.0.0.1"},
    {"--container-runtime-endpoint=tcp://127.0.0.1:1234", "--container-runtime-endpoint",
     "tcp://127.0.0.1:1234"},
    {"--disable-plugins=Bad_Name", "--disable-plugins", "Bad_Name"},
    {"--require-plugins=hello,a b", "--require-plugins", "a b"},
    {"--events-ring-size=999", "--events-ring-size", "out of bounds [1000, 10000000]"},
    {"--events-ring-size=lots", "--events-ring-size", "lots"},
    {"--events-max-clients=0", "--events-max-clients", "out of bounds [1, 4096]"},
    {"--max-status-calls-in-flight=0", "--max-status-calls-in-flight", "out of bounds [1, 1024]"},
    {"--max-status-calls-in-flight=1025", "--max-status-calls-in-flight",
     "out of bounds [1, 1024]"},
    {"--state-dir=relative/state", "--state-dir", "must be an absolute path"},
    {"--socket=relative/plegd.sock", "--socket", "must be an absolute path"},
    {"--socket=/tmp/a-socket-path-longer-than-the-107-bytes-of-sun-path-in-struct-sockaddr-un/"
     "which-bind-would-cut-short/plegd.sock",
     "--socket", "longer than a unix socket's 107 bytes"},
    {"--socket-group=no-such-group-for-plegd", "--socket-group", "no such group"},
    {"--serve-events-over-tcp=yes", "--serve-events-over-tcp", "\"yes\""},
    {"--config=/nonexistent/plegd.conf", "--config", "/nonexistent/plegd.conf"},
    {"--no-such-flag", "--no-such-flag", "--no-such-flag"},
    {"stray-argument", "stray-argument", "stray-argument"},
};

START_TEST(test_bad_flag)
{
    /* Harmless settings first, so that a bad value wrongly accepted does not bind 10388. */
    g_autoptr(PlegdRunner) plegd = plegd_runner_spawn(
        NULL, "--metrics-bind-address=127.0.0.1:0",
        "--container-runtime-endpoint=unix:///nonexistent/cri.sock", bad_args[_i].arg);
    g_autofree char *err = NULL;
    g_autofree char *out = NULL;

    ck_assert_int_eq(plegd_runner_wait_exit(plegd), 2);
    err = plegd_runner_get_stderr(plegd);
    out = plegd_runner_get_stdout(plegd);
    ck_assert_msg(strstr(err, bad_args[_i].flag), "%s: message does not name the flag:\n%s",
                  bad_args[_i].arg, err);
    ck_assert_msg(strstr(err, bad_args[_i].value), "%s: message does not name the value:\n%s",
                  bad_args[_i].arg, err);
    ck_assert_str_eq(out, "");
}
END_TEST

/* ---- running without a runtime ---- */

START_TEST(test_unreachable_runtime)
{
    static const struct {
        const char *query;
        guint status;
        const char *body; /* the whole body; its start for a 503, which names the runtime */
    } exclusions[] = {
        {"exclude=first-relist&exclude=runtime", 200, "ok"},
        {"verbose&exclude=first%2Drelist&exclude=runtime&exclude=etcd&exclude=runtime", 200,
         "[+]pleg-dispatcher ok\n[+]first-relist excluded: ok\n[+]runtime excluded: ok\n"
         "[+]pleg ok\nwarn: some health checks cannot be excluded: no matches for \"etcd\"\n"
         "readyz check passed\n"},
        {"exclude=first-relist", 503, "runtime failed: container runtime is not reachable: "},
        {"exclude=runtime&verbose", 503,
         "[+]pleg-dispatcher ok\n[-]first-relist failed: pleg has yet to be successful\n"
         "[+]runtime excluded: ok\n[+]pleg ok\nreadyz check failed\n"},
        {"exclude=%00", 400,
         "malformed query parameter \"exclude=%00\" (a bad %-escape, or %00)\n"},
    };
    g_autofree char *dir = make_tmpdir();
    g_autofree char *endpoint = g_strdup_printf("unix://%s/nothing.sock", dir);
    g_autofree char *endpoint_arg = g_strconcat("--container-runtime-endpoint=", endpoint, NULL);
    const char *const env[] = {"G_MESSAGES_DEBUG=plegd", NULL};
    g_autoptr(PlegdRunner) plegd = plegd_runner_spawn(env, endpoint_arg, "--relist-period=100ms",
                                                      "--metrics-bind-address=127.0.0.1:0");
    g_autofree char *base = plegd_runner_wait_metrics_url(plegd);
    g_autofree char *url = NULL;
    g_autofree char *body = NULL;
    g_autofree char *content_type = NULL;
    g_autofree char *err = NULL;
    g_autofree char *out = NULL;
    g_autofree char *failed_line = NULL;
    gint64 deadline;
    guint n_fds;

    ck_assert(g_str_has_prefix(base, "http://127.0.0.1:"));
    ck_assert_str_ne(base, "http://127.0.0.1:0");

    /* It keeps relisting (debug logs count every failure), and says once what is wrong. */
    assert_stderr_shows(plegd, "relist failure 5:");
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(strstr(err, "relist failed: "), "%s", err);
    failed_line =
        g_strndup(strstr(err, "relist failed: "), strcspn(strstr(err, "relist failed: "), "\n"));
    ck_assert_msg(strstr(failed_line, endpoint), "the failure does not name %s: %s", endpoint,
                  failed_line);
    ck_assert_msg(count_messages(err, "relist failed") <= 2, "failures not rate limited:\n%s", err);

    /* Not ready, and says why; alive: restarting plegd would not bring the runtime up. */
    url = g_strconcat(base, "/readyz", NULL);
    ck_assert_uint_eq(http_request("GET", url, &body, &content_type), 503);
    ck_assert_str_eq(body, "first-relist failed: pleg has yet to be successful");
    g_clear_pointer(&body, g_free);
    g_clear_pointer(&content_type, g_free);
    g_clear_pointer(&url, g_free);
    url = g_strconcat(base, "/readyz?verbose", NULL);
    ck_assert_uint_eq(http_request("GET", url, &body, &content_type), 503);
    /* ... and names the runtime's error, which is why. */
    ck_assert_msg(g_str_has_prefix(body, "[+]pleg-dispatcher ok\n[-]first-relist failed: pleg has "
                                         "yet to be successful\n[-]runtime failed: container "
                                         "runtime is not reachable: "),
                  "%s", body);
    ck_assert_msg(strstr(body, endpoint) &&
                      g_str_has_suffix(body, "\n[+]pleg ok\nreadyz check failed\n"),
                  "%s", body);
    g_clear_pointer(&body, g_free);
    g_clear_pointer(&content_type, g_free);
    g_clear_pointer(&url, g_free);
    /* ?exclude=NAME leaves a check out of the verdict, as kube-apiserver's does; a name no
     * check has is a warning in the verbose answer, and a bad escape a 400. */
    for (gsize i = 0; i < G_N_ELEMENTS(exclusions); i++) {
        url = g_strconcat(base, "/readyz?", exclusions[i].query, NULL);
        ck_assert_uint_eq(http_request("GET", url, &body, NULL), exclusions[i].status);
        ck_assert_msg(
            g_str_equal(body, exclusions[i].body) ||
                (exclusions[i].status == 503 && g_str_has_prefix(body, exclusions[i].body)),
            "%s: %s", exclusions[i].query, body);
        g_clear_pointer(&body, g_free);
        g_clear_pointer(&url, g_free);
    }
    for (gsize i = 0; i < 2; i++) {
        url = g_strconcat(base, i ? "/healthz" : "/livez", NULL);
        ck_assert_uint_eq(http_request("GET", url, &body, &content_type), 200);
        ck_assert_str_eq(body, "ok");
        g_clear_pointer(&body, g_free);
        g_clear_pointer(&content_type, g_free);
        g_clear_pointer(&url, g_free);
    }
    url = g_strconcat(base, "/livez?verbose", NULL);
    ck_assert_uint_eq(http_request("GET", url, &body, &content_type), 200);
    ck_assert_str_eq(body, "[+]pleg-dispatcher ok\nlivez check passed\n");
    g_clear_pointer(&body, g_free);
    g_clear_pointer(&content_type, g_free);
    g_clear_pointer(&url, g_free);

    url = g_strconcat(base, "/metrics", NULL);
    ck_assert_uint_eq(http_request("GET", url, &body, &content_type), 200);
    ck_assert_str_eq(content_type, "text/plain; version=0.0.4; charset=utf-8");
    ck_assert_msg(strstr(body, "kubelet_pleg_relist_duration_seconds"), "%s", body);
    g_clear_pointer(&body, g_free);
    ck_assert_uint_eq(http_request("POST", url, NULL, NULL), 405);
    g_clear_pointer(&url, g_free);

    url = g_strconcat(base, "/", NULL);
    ck_assert_uint_eq(http_request("GET", url, NULL, NULL), 404);
    g_clear_pointer(&url, g_free);
    url = g_strconcat(base, "/metricsz", NULL);
    ck_assert_uint_eq(http_request("GET", url, NULL, NULL), 404);

    /* Connections that clients close do not pile up. */
    n_fds = plegd_runner_count_fds(plegd);
    for (int i = 0; i < 20; i++)
        ck_assert_uint_eq(http_request("GET", url, NULL, NULL), 404);
    deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
    while (plegd_runner_count_fds(plegd) > n_fds + 2 && g_get_monotonic_time() < deadline)
        g_usleep(10 * 1000);
    ck_assert_uint_le(plegd_runner_count_fds(plegd), n_fds + 2);

    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    out = plegd_runner_get_stdout(plegd);
    ck_assert_str_eq(out, "");
    remove_tmpdir(dir);
}
END_TEST

START_TEST(test_notify_without_runtime)
{
    g_autofree char *dir = make_tmpdir();
    g_autofree char *socket_path = g_build_filename(dir, "notify.sock", NULL);
    g_autofree char *notify_env = g_strconcat("NOTIFY_SOCKET=", socket_path, NULL);
    g_autofree char *endpoint_arg =
        g_strdup_printf("--container-runtime-endpoint=unix://%s/nothing.sock", dir);
    g_autoptr(GSocket) socket = bind_notify_socket(socket_path);
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autofree char *received = NULL;
    g_autofree char *err = NULL;
    const char *env[] = {notify_env, "G_MESSAGES_DEBUG=plegd", NULL};

    plegd =
        plegd_runner_spawn(env, endpoint_arg, "--relist-period=100ms", "--metrics-bind-address=");

    /* The monitor notifies before it logs a failure's debug line. */
    assert_stderr_shows(plegd, "relist failure 5:");
    received = receive_datagrams(socket, 200 * 1000);
    ck_assert_msg(strstr(received, "STATUS="), "no STATUS= among:\n%s", received);
    ck_assert_msg(strstr(received, "nothing.sock"), "STATUS= does not say why:\n%s", received);
    ck_assert_msg(!strstr(received, "READY=1"), "READY=1 without a runtime:\n%s", received);

    /* HTTP was disabled: nothing was served before relisting started. */
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(!strstr(err, "serving metrics on"), "%s", err);

    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    g_free(received);
    received = receive_datagrams(socket, 0);
    ck_assert_msg(strstr(received, "STOPPING=1"), "no STOPPING=1 among:\n%s", received);
    ck_assert_msg(!strstr(received, "READY=1"), "%s", received);
    remove_tmpdir(dir);
}
END_TEST

START_TEST(test_bind_failure)
{
    g_autofree char *dir = make_tmpdir();
    g_autofree char *endpoint_arg =
        g_strdup_printf("--container-runtime-endpoint=unix://%s/nothing.sock", dir);
    g_autoptr(GSocket) socket = NULL;
    g_autoptr(GInetAddress) loopback = g_inet_address_new_loopback(G_SOCKET_FAMILY_IPV4);
    g_autoptr(GSocketAddress) any_port = g_inet_socket_address_new(loopback, 0);
    g_autoptr(GSocketAddress) bound = NULL;
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autofree char *address = NULL;
    g_autofree char *address_arg = NULL;
    g_autofree char *err = NULL;

    socket =
        g_socket_new(G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_TCP, &error);
    ck_assert_msg(socket, "%s", error ? error->message : "");
    ck_assert(g_socket_bind(socket, any_port, TRUE, &error));
    ck_assert(g_socket_listen(socket, &error));
    bound = g_socket_get_local_address(socket, &error);
    address = g_strdup_printf("127.0.0.1:%u",
                              g_inet_socket_address_get_port(G_INET_SOCKET_ADDRESS(bound)));
    address_arg = g_strconcat("--metrics-bind-address=", address, NULL);

    plegd = plegd_runner_spawn(NULL, endpoint_arg, address_arg);
    ck_assert_int_eq(plegd_runner_wait_exit(plegd), 1);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(strstr(err, address), "the error does not name %s:\n%s", address, err);
    remove_tmpdir(dir);
}
END_TEST

static gboolean
have_ipv6_loopback(void)
{
    g_autoptr(GSocket) socket =
        g_socket_new(G_SOCKET_FAMILY_IPV6, G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_TCP, NULL);
    g_autoptr(GInetAddress) loopback = g_inet_address_new_loopback(G_SOCKET_FAMILY_IPV6);
    g_autoptr(GSocketAddress) address = g_inet_socket_address_new(loopback, 0);

    return socket && g_socket_bind(socket, address, TRUE, NULL);
}

/* A hangup reloads (the TLS files: test-plegd-security), instead of its default of killing
 * plegd: without TLS files it says there is nothing to reload, and plegd runs on. */
START_TEST(test_sighup)
{
    g_autofree char *dir = make_tmpdir();
    g_autofree char *endpoint_arg =
        g_strdup_printf("--container-runtime-endpoint=unix://%s/none.sock", dir);
    g_autoptr(PlegdRunner) plegd = plegd_runner_spawn(NULL, endpoint_arg, "--metrics-bind-address=",
                                                      "--plugin-dir=");
    g_autofree char *err = NULL;
    pid_t pid;

    /* Logged after the signal handlers are in place. */
    assert_stderr_shows(plegd, "relisting");
    pid = (pid_t)g_ascii_strtoll(plegd_runner_get_pid(plegd), NULL, 10);
    ck_assert_int_eq(kill(pid, SIGHUP), 0);
    assert_stderr_shows(plegd, "received SIGHUP: nothing to reload (no --tls-cert-file)");
    ck_assert(plegd_runner_is_running(plegd));
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(!strstr(err, "received SIGHUP, shutting down"), "%s", err);
    remove_tmpdir(dir);
}
END_TEST

/* SIGUSR1 and SIGUSR2 mean nothing to plegd: each is logged with its sender, plegd keeps running
 * and still stops cleanly on SIGTERM (their default action would have killed it). */
START_TEST(test_sigusr_ignored)
{
    g_autofree char *dir = make_tmpdir();
    g_autofree char *endpoint_arg =
        g_strdup_printf("--container-runtime-endpoint=unix://%s/none.sock", dir);
    g_autoptr(PlegdRunner) plegd =
        plegd_runner_spawn(NULL, endpoint_arg, "--metrics-bind-address=", "--plugin-dir=");
    g_autofree char *sender = g_strdup_printf("from pid %d", (int)getpid());
    pid_t pid;

    assert_stderr_shows(plegd, "relisting");
    pid = (pid_t)g_ascii_strtoll(plegd_runner_get_pid(plegd), NULL, 10);
    ck_assert_int_eq(kill(pid, SIGUSR1), 0);
    assert_stderr_shows(plegd, "received SIGUSR1");
    ck_assert_int_eq(kill(pid, SIGUSR2), 0);
    assert_stderr_shows(plegd, "received SIGUSR2");
    {
        g_autofree char *err = plegd_runner_get_stderr(plegd);

        ck_assert_msg(strstr(err, sender), "%s", err);
        ck_assert_msg(strstr(err, "plegd has no use for it, ignored"), "%s", err);
        ck_assert_msg(!strstr(err, "shutting down"), "%s", err);
    }
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    assert_stderr_shows(plegd, "received SIGTERM, shutting down");
    remove_tmpdir(dir);
}
END_TEST

START_TEST(test_ipv6_and_sigint)
{
    g_autofree char *dir = make_tmpdir();
    g_autofree char *endpoint_arg =
        g_strdup_printf("--container-runtime-endpoint=unix://%s/nothing.sock", dir);
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autofree char *base = NULL;
    g_autofree char *url = NULL;

    if (!have_ipv6_loopback()) {
        remove_tmpdir(dir);
        return; /* no ::1 here; nothing to test */
    }

    plegd = plegd_runner_spawn(NULL, endpoint_arg, "--relist-period=100ms",
                               "--metrics-bind-address=[::1]:0");
    base = plegd_runner_wait_metrics_url(plegd);
    ck_assert_msg(g_str_has_prefix(base, "http://[::1]:"), "%s", base);
    url = g_strconcat(base, "/readyz", NULL);
    ck_assert_uint_eq(http_request("GET", url, NULL, NULL), 503);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGINT), 0);
    remove_tmpdir(dir);
}
END_TEST

START_TEST(test_disabled_and_required)
{
    g_autoptr(PlegdRunner) plegd = plegd_runner_spawn(
        NULL, "--metrics-bind-address=127.0.0.1:0",
        "--container-runtime-endpoint=unix:///nonexistent/cri.sock", "--disable-plugins=a,b",
        "--require-plugins=c, b");
    g_autofree char *err = NULL;

    ck_assert_int_eq(plegd_runner_wait_exit(plegd), 2);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(strstr(err, "--require-plugins") && strstr(err, "plugin b "), "%s", err);
}
END_TEST

/* ---- --config ---- */

typedef struct {
    char *dir;         /* the runtime socket (never created) and the config file */
    char *plugin_dir;
    char *endpoint;
    char *config_path;
} ConfigFixture;

static ConfigFixture cfg;

static void
config_setup(void)
{
    cfg.dir = make_tmpdir();
    cfg.plugin_dir = make_tmpdir();
    cfg.endpoint = g_strdup_printf("unix://%s/nothing.sock", cfg.dir);
}

static void
config_teardown(void)
{
    remove_tmpdir(cfg.dir);
    remove_tmpdir(cfg.plugin_dir);
    g_clear_pointer(&cfg.dir, g_free);
    g_clear_pointer(&cfg.plugin_dir, g_free);
    g_clear_pointer(&cfg.endpoint, g_free);
    g_clear_pointer(&cfg.config_path, g_free);
}

static char *
config_arg(const char *contents)
{
    g_free(cfg.config_path);
    cfg.config_path = write_file(cfg.dir, "plegd.conf", contents);
    return g_strconcat("--config=", cfg.config_path, NULL);
}

/* A plugin whose module is not a shared object: the loader fails on it once it opens it. */
static void
add_broken_plugin(const char *dir, const char *name, const char *gate)
{
    g_autofree char *module = g_strdup_printf("lib%s.so", name);
    g_autofree char *key_file_name = g_strconcat(name, ".plugin", NULL);
    g_autofree char *gate_line = gate ? g_strdup_printf("FeatureGate=%s\n", gate) : g_strdup("");
    g_autofree char *key_file =
        g_strdup_printf("[Plugin]\nName=%s\nModule=%s\n%s", name, module, gate_line);

    g_free(write_file(dir, key_file_name, key_file));
    g_free(write_file(dir, module, "this is not a shared object\n"));
}

START_TEST(test_config_file)
{
    g_autofree char *contents = NULL;
    g_autofree char *arg = NULL;
    g_autofree char *relisting = NULL;
    g_autoptr(PlegdRunner) plegd = NULL;

    add_broken_plugin(cfg.plugin_dir, "gated", "EventedPLEG");
    contents = g_strdup_printf("# plegd settings\n"
                               "[plegd]\n"
                               "container-runtime-endpoint=%s\n"
                               "relist-period=100ms\n"
                               "metrics-bind-address=127.0.0.1:0\n"
                               "plugin-dir=%s\n"
                               "\n"
                               "[FeatureGates]\n"
                               "EventedPLEG=true\n",
                               cfg.endpoint, cfg.plugin_dir);
    arg = config_arg(contents);
    plegd = plegd_runner_spawn(NULL, arg);

    /* Every setting came from the file: the endpoint, the period, the bind address, the plugin
     * directory, and the gate that makes the loader open the plugin. */
    relisting = g_strdup_printf("relisting %s every 100ms", cfg.endpoint);
    assert_stderr_shows(plegd, relisting);
    g_free(plegd_runner_wait_metrics_url(plegd));
    assert_stderr_shows(plegd, "plugin gated: failed: ");
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
}
END_TEST

/* A gate that a plugin declares (hello.plugin: HelloPlugin, Alpha, off) is accepted in
 * [FeatureGates] when the plugin directory comes from the same file: plegd reads the [plegd]
 * group, registers the declared gates of that directory, then applies the gates. */
START_TEST(test_config_file_declared_gate)
{
    g_autofree char *contents = NULL;
    g_autofree char *arg = NULL;
    g_autofree char *err = NULL;
    g_autoptr(PlegdRunner) plegd = NULL;

    add_hello_plugin(cfg.plugin_dir);
    contents = g_strdup_printf("[plegd]\n"
                               "container-runtime-endpoint=%s\n"
                               "relist-period=100ms\n"
                               "metrics-bind-address=127.0.0.1:0\n"
                               "plugin-dir=%s\n"
                               "[FeatureGates]\n"
                               "HelloPlugin=true\n",
                               cfg.endpoint, cfg.plugin_dir);
    arg = config_arg(contents);
    plegd = plegd_runner_spawn(NULL, arg, "--require-plugins=hello");
    assert_stderr_shows(plegd, "plugin hello: running");
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    g_clear_pointer(&plegd, plegd_runner_free);

    /* Without a plugin directory that declares it, the same gate is unknown. */
    g_free(contents);
    g_free(arg);
    contents = g_strdup_printf("[plegd]\n"
                               "container-runtime-endpoint=%s\n"
                               "plugin-dir=\n"
                               "[FeatureGates]\n"
                               "HelloPlugin=true\n",
                               cfg.endpoint);
    g_free(cfg.config_path);
    cfg.config_path = write_file(cfg.dir, "undeclared.conf", contents);
    arg = g_strconcat("--config=", cfg.config_path, NULL);
    plegd = plegd_runner_spawn(NULL, arg);
    ck_assert_int_eq(plegd_runner_wait_exit(plegd), 2);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(strstr(err, "unrecognized feature gate: HelloPlugin"), "%s", err);
}
END_TEST

START_TEST(test_config_file_flags_win)
{
    g_autofree char *contents = NULL;
    g_autofree char *arg = NULL;
    g_autofree char *plugin_dir_arg = g_strconcat("--plugin-dir=", cfg.plugin_dir, NULL);
    g_autofree char *relisting = NULL;
    g_autofree char *err = NULL;
    g_autoptr(PlegdRunner) plegd = NULL;

    add_broken_plugin(cfg.plugin_dir, "gated", "EventedPLEG");
    contents = g_strdup_printf("[plegd]\n"
                               "container-runtime-endpoint=%s\n"
                               "relist-period=5s\n"
                               "metrics-bind-address=\n"
                               "plugin-dir=/nonexistent\n"
                               "[FeatureGates]\n"
                               "EventedPLEG=true\n",
                               cfg.endpoint);
    arg = config_arg(contents);
    plegd = plegd_runner_spawn(NULL, arg, "--relist-period=200ms", plugin_dir_arg,
                               "--feature-gates=EventedPLEG=false");

    relisting = g_strdup_printf("relisting %s every 200ms", cfg.endpoint);
    assert_stderr_shows(plegd, relisting);
    assert_stderr_shows(plegd, "plugin gated: disabled (feature gate EventedPLEG off)");
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(!strstr(err, "serving metrics on"), "%s", err);
}
END_TEST

/* --feature-gates given twice merges, as kubelet's map flag does: each flag is applied in turn
 * after [FeatureGates], so a gate keeps the value of the last flag that names it, or else the
 * file's. */
START_TEST(test_feature_gates_repeated)
{
    g_autofree char *contents = NULL;
    g_autofree char *arg = NULL;
    g_autofree char *plugin_dir_arg = g_strconcat("--plugin-dir=", cfg.plugin_dir, NULL);
    g_autoptr(PlegdRunner) plegd = NULL;

    add_broken_plugin(cfg.plugin_dir, "evented-gated", "EventedPLEG");
    add_broken_plugin(cfg.plugin_dir, "diagnostics-gated", "KubeletWatchdogDiagnostics");
    add_broken_plugin(cfg.plugin_dir, "streaming-gated", "CRIListStreaming");
    add_broken_plugin(cfg.plugin_dir, "watchdog-gated", "SystemdWatchdog");
    contents = g_strdup_printf("[plegd]\n"
                               "container-runtime-endpoint=%s\n"
                               "metrics-bind-address=\n"
                               "[FeatureGates]\n"
                               "EventedPLEG=false\n"
                               "CRIListStreaming=true\n",
                               cfg.endpoint);
    arg = config_arg(contents);
    plegd = plegd_runner_spawn(NULL, arg, plugin_dir_arg,
                               "--feature-gates=EventedPLEG=true,KubeletWatchdogDiagnostics=false",
                               "--feature-gates=KubeletWatchdogDiagnostics=true",
                               "--feature-gates=SystemdWatchdog=false");

    /* A gate that is on makes the loader open the (broken) module. */
    assert_stderr_shows(plegd, "plugin evented-gated: failed: ");
    assert_stderr_shows(plegd, "plugin diagnostics-gated: failed: ");
    assert_stderr_shows(plegd, "plugin streaming-gated: failed: ");
    assert_stderr_shows(plegd,
                        "plugin watchdog-gated: disabled (feature gate SystemdWatchdog off)");
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
}
END_TEST

static const struct {
    const char *contents;
    const char *needle; /* the message names this (and the file) */
} bad_configs[] = {
    {"[FeatureGates]\nNoSuchGate=true\n", "NoSuchGate"},
    {"[FeatureGates]\nEventedPLEG=maybe\n", "maybe"},
    {"[FeatureGates]\nEventedPLEG=true\nNoSuchGate=false\n", "NoSuchGate"},
    {"[plegd]\nrelist-period=5parsecs\n", "5parsecs"},
    {"[plegd]\nrelist-threshold=0\n", "relist-threshold"},
    /* The period past the default threshold: the message names the period, not a "(null)". */
    {"[plegd]\nrelist-period=1h\n", "relist-period \"1h\" in [plegd]"},
    {"[plegd]\nmetrics-bind-address=localhost:1\n", "localhost:1"},
    {"[plegd]\ndisable-plugins=Bad_Name\n", "Bad_Name"},
    {"[plegd]\nno-such-key=1\n", "no-such-key"},
    {"[plegd]\nfeature-gates=EventedPLEG=true\n", "feature-gates"},
    {"[Plegd]\nrelist-period=1s\n", "Plegd"},
    {"relist-period=1s\n", "--config"},
    {"[plegd]\ncontainer-runtime-endpoint=tcp://127.0.0.1:1\n", "tcp://127.0.0.1:1"},
    /* A localized key is a translation to GKeyFile, neither a setting nor an unknown key. */
    {"[plegd]\nrelist-perod[de]=3s\n", "relist-perod[de]"},
    {"[FeatureGates]\nNoSuchGate[de]=true\n", "NoSuchGate[de]"},
    /* GLib would set its error twice for the last one (fuzz regression). */
    {"[plegd]\nrelist-period=1\\q\n", "\\q"},
    {"[plegd]\nrelist-period=1s\\\n", "relist-period\" ends with a lone backslash"},
    {"[plegd]\nrelist-period=\\X1s\\\n", "\\X"},
};

START_TEST(test_config_file_bad)
{
    g_autofree char *arg = config_arg(bad_configs[_i].contents);
    /* No other flag: it would win over the file. */
    g_autoptr(PlegdRunner) plegd = plegd_runner_spawn(NULL, arg);
    g_autofree char *err = NULL;
    g_autofree char *out = NULL;

    ck_assert_int_eq(plegd_runner_wait_exit(plegd), 2);
    err = plegd_runner_get_stderr(plegd);
    out = plegd_runner_get_stdout(plegd);
    ck_assert_msg(strstr(err, bad_configs[_i].needle), "%s: message does not name \"%s\":\n%s",
                  bad_configs[_i].contents, bad_configs[_i].needle, err);
    ck_assert_msg(strstr(err, cfg.config_path), "%s: message does not name the file:\n%s",
                  bad_configs[_i].contents, err);
    ck_assert_str_eq(out, "");
}
END_TEST

/* A bad value in the file is an error even when a flag sets the same setting, with the message
 * it has without the flag. */
static const struct {
    const char *contents;
    const char *flag; /* sets what the file sets, validly */
} bad_overridden[] = {
    {"[plegd]\nrelist-period=5parsecs\n", "--relist-period=1s"},
    {"[plegd]\nruntime-request-timeout=0\n", "--runtime-request-timeout=2m"},
    {"[plegd]\nrelist-threshold=999ns\n", "--relist-threshold=3m"},
    {"[plegd]\nmetrics-bind-address=localhost:1\n", "--metrics-bind-address=127.0.0.1:0"},
    {"[plegd]\ncontainer-runtime-endpoint=tcp://127.0.0.1:1\n",
     "--container-runtime-endpoint=unix:///nonexistent/cri.sock"},
    {"[plegd]\ndisable-plugins=Bad_Name\n", "--disable-plugins="},
    {"[plegd]\nrequire-plugins=a b\n", "--require-plugins="},
    {"[plegd]\nevents-ring-size=999\n", "--events-ring-size=1000"},
    {"[plegd]\nevents-max-clients=lots\n", "--events-max-clients=1"},
    {"[plegd]\nmax-status-calls-in-flight=0\n", "--max-status-calls-in-flight=64"},
    {"[plegd]\nrelist-period=1\\q\n", "--relist-period=1s"},
};

/* The first line of what @plegd printed when it exited with status 2. */
static char *
first_error_line(PlegdRunner *plegd)
{
    g_autofree char *err = NULL;
    g_autofree char *out = NULL;

    ck_assert_int_eq(plegd_runner_wait_exit(plegd), 2);
    err = plegd_runner_get_stderr(plegd);
    out = plegd_runner_get_stdout(plegd);
    ck_assert_str_eq(out, "");
    return g_strndup(err, strcspn(err, "\n"));
}

START_TEST(test_config_file_bad_overridden)
{
    g_autofree char *arg = config_arg(bad_overridden[_i].contents);
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autofree char *alone = NULL;
    g_autofree char *overridden = NULL;

    /* The other settings harmless, so that a bad value wrongly accepted starts nothing. */
    plegd = plegd_runner_spawn(NULL, arg);
    alone = first_error_line(plegd);
    ck_assert_msg(strstr(alone, cfg.config_path), "%s", alone);
    g_clear_pointer(&plegd, plegd_runner_free);

    plegd = plegd_runner_spawn(NULL, "--metrics-bind-address=127.0.0.1:0",
                               "--container-runtime-endpoint=unix:///nonexistent/cri.sock",
                               "--plugin-dir=", arg, bad_overridden[_i].flag);
    overridden = first_error_line(plegd);
    ck_assert_str_eq(overridden, alone);
}
END_TEST

/* GKeyFile reads a line up to a NUL byte and drops the rest of it: a file with one is refused,
 * naming the line.  Each '^' below is written as a NUL byte; the settings before it are harmless,
 * so that a file wrongly accepted starts nothing. */
#define HARMLESS_CONFIG                                                                            \
    "[plegd]\nmetrics-bind-address=127.0.0.1:0\n"                                                  \
    "container-runtime-endpoint=unix:///nonexistent/cri.sock\nplugin-dir=\n"

static const struct {
    const char *contents;
    guint line;
} nul_configs[] = {
    {HARMLESS_CONFIG "relist-period=1s^ and the rest\n", 5},
    {HARMLESS_CONFIG "relist-period=1s\n# a comment ^\n", 6},
    {HARMLESS_CONFIG "[FeatureGates]\nEventedPLEG=true^\n", 6},
    {HARMLESS_CONFIG "relist-period=1s\n^", 6},
    {"^" HARMLESS_CONFIG, 1},
};

START_TEST(test_config_nul_byte)
{
    g_autofree char *path = g_build_filename(cfg.dir, "nul.conf", NULL);
    g_autofree char *arg = g_strconcat("--config=", path, NULL);
    g_autofree char *contents = g_strdup(nul_configs[_i].contents);
    gsize length = strlen(contents);
    g_autofree char *want = NULL;
    g_autofree char *line = NULL;
    g_autoptr(PlegdRunner) plegd = NULL;

    g_strdelimit(contents, "^", '\0');
    ck_assert(g_file_set_contents(path, contents, length, NULL));
    plegd = plegd_runner_spawn(NULL, arg);
    line = first_error_line(plegd);
    want = g_strdup_printf("plegd: invalid --config \"%s\": line %u has a NUL byte", path,
                           nul_configs[_i].line);
    ck_assert_str_eq(line, want);
}
END_TEST

/* What is not a configuration file fails at once, naming the file: a FIFO with no writer (no
 * blocking open), a device that never ends, a file past the size cap. */
START_TEST(test_config_not_a_config_file)
{
    g_autofree char *fifo = g_build_filename(cfg.dir, "plegd.fifo", NULL);
    g_autofree char *big = g_build_filename(cfg.dir, "big.conf", NULL);
    const struct {
        const char *path;
        const char *reason;
    } cases[] = {
        {fifo, "not a regular file"},
        {"/dev/zero", "not a regular file"},
        {big, "2097152 bytes, more than a configuration file's 1048576"},
    };

    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    {
        g_autoptr(GString) contents = g_string_new("[plegd]\n");

        while (contents->len < 2 * 1024 * 1024)
            g_string_append(contents, "# padding\n");
        g_string_truncate(contents, 2 * 1024 * 1024);
        g_free(write_file(cfg.dir, "big.conf", contents->str));
    }
    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autofree char *arg = g_strconcat("--config=", cases[i].path, NULL);
        g_autofree char *want = g_strdup_printf("invalid --config \"%s\": %s", cases[i].path,
                                                cases[i].reason);
        g_autoptr(PlegdRunner) plegd = plegd_runner_spawn(NULL, arg);
        g_autofree char *err = NULL;

        ck_assert_int_eq(plegd_runner_wait_exit(plegd), 2);
        err = plegd_runner_get_stderr(plegd);
        ck_assert_msg(strstr(err, want), "%s: want \"%s\":\n%s", cases[i].path, want, err);
    }
}
END_TEST

/* ---- plugin directories ---- */

/* plegd without a runtime, with the fixture's plugin directory (which holds hello) and
 * @extra_arg (nullable).  hello's own gate HelloPlugin, declared in hello.plugin, is off by
 * default: the flag that turns it on is accepted only because plegd read that declaration. */
static PlegdRunner *
spawn_with_plugins(const char *extra_arg)
{
    g_autofree char *endpoint_arg = g_strconcat("--container-runtime-endpoint=", cfg.endpoint, NULL);
    g_autofree char *plugin_dir_arg = g_strconcat("--plugin-dir=", cfg.plugin_dir, NULL);
    const char *args[] = {endpoint_arg, plugin_dir_arg, "--relist-period=100ms",
                          "--metrics-bind-address=127.0.0.1:0", "--feature-gates=HelloPlugin=true",
                          extra_arg, NULL};

    return plegd_runner_spawn_full(NULL, -1, args);
}

static char *
get(const char *base, const char *path, guint expected_status)
{
    g_autofree char *url = g_strconcat(base, path, NULL);
    char *body = NULL;

    ck_assert_uint_eq(http_request("GET", url, &body, NULL), expected_status);
    return body;
}

START_TEST(test_broken_plugin)
{
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autofree char *base = NULL;
    g_autofree char *body = NULL;
    g_autofree char *err = NULL;

    add_broken_plugin(cfg.plugin_dir, "broken", NULL);
    add_hello_plugin(cfg.plugin_dir);
    plegd = spawn_with_plugins(NULL);
    base = plegd_runner_wait_metrics_url(plegd);

    /* Reported with the reason, and the rest runs: the PLEG, HTTP and the good plugin. */
    assert_stderr_shows(plegd, "plugin broken: failed: ");
    assert_stderr_shows(plegd, "plugin hello: running");
    assert_stderr_shows(plegd, "relist failed: ");
    body = get(base, "/readyz", 503);
    ck_assert_msg(strstr(body, "pleg has yet to be successful"), "%s", body);
    ck_assert_msg(g_str_has_prefix(body, "first-relist"), "the checker is not named: %s", body);
    g_free(body);
    body = get(base, "/metrics", 200);
    ck_assert_msg(strstr(body, "pleg_hello_ticks_total"), "%s", body);
    ck_assert_msg(strstr(body, "kubelet_pleg_relist_duration_seconds"), "%s", body);

    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(!strstr(err, "plugin hello: failed"), "%s", err);
}
END_TEST

START_TEST(test_disable_plugins)
{
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autofree char *base = NULL;
    g_autofree char *body = NULL;
    g_autofree char *err = NULL;

    add_broken_plugin(cfg.plugin_dir, "broken", NULL);
    add_hello_plugin(cfg.plugin_dir);
    plegd = spawn_with_plugins("--disable-plugins= nothing,broken ,,hello");
    base = plegd_runner_wait_metrics_url(plegd);

    assert_stderr_shows(plegd, "plugin broken: disabled (--disable-plugins)");
    assert_stderr_shows(plegd, "plugin hello: disabled (--disable-plugins)");
    body = get(base, "/metrics", 200);
    ck_assert_msg(!strstr(body, "pleg_hello"), "a disabled plugin ran:\n%s", body);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(!strstr(err, "plugin broken: failed") && !strstr(err, "plugin hello: failed"),
                  "a disabled plugin was loaded:\n%s", err);
}
END_TEST

START_TEST(test_require_plugins)
{
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autofree char *err = NULL;

    add_broken_plugin(cfg.plugin_dir, "broken", NULL);
    add_hello_plugin(cfg.plugin_dir);

    /* A required plugin that works: nothing changes. */
    plegd = spawn_with_plugins("--require-plugins=hello");
    assert_stderr_shows(plegd, "plugin hello: running");
    assert_stderr_shows(plegd, "plugin broken: failed: ");
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    g_clear_pointer(&plegd, plegd_runner_free);

    /* One that fails ends plegd, saying why. */
    plegd = spawn_with_plugins("--require-plugins=hello,broken");
    ck_assert_int_eq(plegd_runner_wait_exit(plegd), 1);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(strstr(err, "plegd: ") && strstr(err, "broken"), "%s", err);
    g_clear_pointer(&plegd, plegd_runner_free);
    g_free(err);

    /* So does one that is missing. */
    plegd = spawn_with_plugins("--require-plugins=missing");
    ck_assert_int_eq(plegd_runner_wait_exit(plegd), 1);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(strstr(err, "missing"), "%s", err);
}
END_TEST

/* ---- untrusted text in messages ---- */

static guint
count_occurrences(const char *haystack, const char *needle)
{
    guint n = 0;

    for (const char *p = strstr(haystack, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* A 100 KB value is named once, cut, and the message stays short. */
static const char *const huge_flags[] = {
    "--relist-period=", "--feature-gates=", "--container-runtime-endpoint=/",
    "--disable-plugins=_", "--runtime-request-timeout=",
};

START_TEST(test_huge_flag_value)
{
    g_autofree char *value = g_strnfill(100 * 1024, 'x');
    g_autofree char *arg = g_strconcat(huge_flags[_i], value, NULL);
    g_autofree char *window = g_strnfill(300, 'x');
    g_autoptr(PlegdRunner) plegd = plegd_runner_spawn(
        NULL, "--metrics-bind-address=127.0.0.1:0",
        "--container-runtime-endpoint=unix:///nonexistent/cri.sock", arg);
    g_autofree char *err = NULL;

    ck_assert_int_eq(plegd_runner_wait_exit(plegd), 2);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(strlen(err) < 2048, "%s: %zu bytes of stderr", huge_flags[_i], strlen(err));
    ck_assert_msg(!strstr(err, window), "%s: the value is not cut:\n%s", huge_flags[_i], err);
    ck_assert_msg(count_occurrences(err, "bytes in all)") == 1,
                  "%s: the value is not named exactly once:\n%s", huge_flags[_i], err);
}
END_TEST

/* The plugin flags: a 100 KB plugin name or folder is cut wherever it is named, GLib's own
 * message about the folder too. */
START_TEST(test_huge_plugin_flag_values)
{
    g_autofree char *value = g_strnfill(100 * 1024, 'x');
    g_autofree char *require = g_strconcat("--require-plugins=", value, NULL);
    g_autofree char *dir = g_strconcat("--plugin-dir=/tmp/", value, NULL);
    g_autofree char *window = g_strnfill(4200, 'x');
    g_autoptr(PlegdRunner) required = NULL, searched = NULL;
    g_autofree char *err = NULL, *err2 = NULL;

    required = plegd_runner_spawn(NULL, "--metrics-bind-address=127.0.0.1:0",
                                  "--container-runtime-endpoint=unix:///nonexistent/cri.sock",
                                  "--plugin-dir=", require);
    ck_assert_int_eq(plegd_runner_wait_exit(required), 1);
    err = plegd_runner_get_stderr(required);
    ck_assert_msg(strstr(err, "required plugin xxx"), "%s", err);
    ck_assert_msg(strlen(err) < 8192, "%zu bytes of stderr:\n%s", strlen(err), err);

    searched = plegd_runner_spawn(NULL, "--metrics-bind-address=127.0.0.1:0",
                                  "--container-runtime-endpoint=unix:///nonexistent/cri.sock", dir);
    assert_stderr_shows(searched, "no plugins from it");
    ck_assert_int_eq(plegd_runner_stop(searched, SIGTERM), 0);
    err2 = plegd_runner_get_stderr(searched);
    ck_assert_msg(!strstr(err2, window), "the folder is not cut:\n%.2000s", err2);
    ck_assert_msg(strlen(err2) < 32768, "%zu bytes of stderr", strlen(err2));
}
END_TEST

/* Control characters and bytes that are not UTF-8 reach the terminal escaped. */
START_TEST(test_control_bytes_in_flag)
{
    g_autoptr(PlegdRunner) plegd =
        plegd_runner_spawn(NULL, "--relist-period=1\x1b[31mred\x07\x01");
    g_autofree char *err = NULL;

    ck_assert_int_eq(plegd_runner_wait_exit(plegd), 2);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(!strchr(err, '\x1b') && !strchr(err, '\x07') && !strchr(err, '\x01'),
                  "raw bytes in:\n%s", err);
    ck_assert_msg(strstr(err, "1\\x1b[31mred\\x07\\x01"), "%s", err);
}
END_TEST

/* GLib's reason for a bad number quotes the value again: escaped too. */
START_TEST(test_control_bytes_in_number_flag)
{
    g_autoptr(PlegdRunner) plegd = plegd_runner_spawn(NULL, "--events-ring-size=1\x1b[2J");
    g_autofree char *err = NULL;

    ck_assert_int_eq(plegd_runner_wait_exit(plegd), 2);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(!strchr(err, '\x1b'), "raw bytes in:\n%s", err);
    ck_assert_msg(strstr(err, "--events-ring-size \"1\\x1b[2J\""), "%s", err);
}
END_TEST

/* An endpoint is a path, and a path may hold a newline: the CRI errors that name it, which plegd
 * logs on every failed relist, keep it on one line. */
START_TEST(test_control_bytes_in_endpoint)
{
    g_autoptr(PlegdRunner) plegd = plegd_runner_spawn(
        NULL, "--metrics-bind-address=127.0.0.1:0",
        "--plugin-dir=", "--container-runtime-endpoint=unix:///nonexistent/a\nb\x1b.sock");
    g_autofree char *err = NULL;

    assert_stderr_shows(plegd, "relist failed: ");
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(!strchr(err, '\x1b') && !strstr(err, "\nb"), "raw bytes in:\n%s", err);
    ck_assert_msg(
        strstr(err, "relist failed: unix:///nonexistent/a\\nb\\x1b.sock: ListPodSandbox: "), "%s",
        err);
}
END_TEST

/* ---- --config: a key given twice ---- */

START_TEST(test_config_duplicate_key)
{
    g_autofree char *arg = config_arg("[plegd]\n"
                                      "relist-period=5s\n"
                                      "# later edit\n"
                                      "relist-period = 200ms\n"
                                      "[FeatureGates]\n"
                                      "EventedPLEG=false\n"
                                      "[plegd]\n"
                                      "metrics-bind-address=127.0.0.1:0\n"
                                      "[FeatureGates]\n"
                                      "EventedPLEG=true\n");
    g_autofree char *endpoint_arg = g_strconcat("--container-runtime-endpoint=", cfg.endpoint, NULL);
    g_autoptr(PlegdRunner) plegd =
        plegd_runner_spawn(NULL, arg, endpoint_arg, "--plugin-dir=");
    g_autofree char *err = NULL;

    /* GKeyFile takes the last one; plegd says so, naming the key and both lines. */
    assert_stderr_shows(plegd, "every 200ms");
    g_free(plegd_runner_wait_metrics_url(plegd));
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(count_messages(err, "WARN plegd: --config") == 2, "%s", err);
    ck_assert_msg(strstr(err, ": line 4 sets relist-period in [plegd] again (first on line 2); "
                              "the last one is used"),
                  "%s", err);
    ck_assert_msg(strstr(err, ": line 10 sets EventedPLEG in [FeatureGates] again (first on "
                              "line 6)"),
                  "%s", err);
    ck_assert_msg(strstr(err, cfg.config_path), "%s", err);
}
END_TEST

START_TEST(test_config_no_duplicate_no_warning)
{
    g_autofree char *arg = config_arg("[plegd]\nrelist-period=200ms\n"
                                      "[FeatureGates]\nEventedPLEG=false\n"
                                      "[plegd]\nmetrics-bind-address=127.0.0.1:0\n");
    g_autofree char *endpoint_arg = g_strconcat("--container-runtime-endpoint=", cfg.endpoint, NULL);
    g_autoptr(PlegdRunner) plegd =
        plegd_runner_spawn(NULL, arg, endpoint_arg, "--plugin-dir=");
    g_autofree char *err = NULL;

    /* Logged after the signal handlers are in place. */
    assert_stderr_shows(plegd, "every 200ms");
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(!strstr(err, " WARN "), "%s", err);
}
END_TEST

/* ---- which plugins, from where ---- */

/* From its build tree and without --plugin-dir, plegd loads the tree's plugins and says so. */
START_TEST(test_build_tree_plugins)
{
    g_autofree char *endpoint_arg = g_strconcat("--container-runtime-endpoint=", cfg.endpoint, NULL);
    g_autoptr(PlegdRunner) plegd = plegd_runner_spawn(NULL, endpoint_arg, "--relist-period=100ms",
                                                      "--metrics-bind-address=");
    g_autofree char *err = NULL;

    assert_stderr_shows(plegd, "plugins: searching ");
    assert_stderr_shows(plegd, "(the build tree's plugins)");
    assert_stderr_shows(plegd, "plugin evented: disabled (feature gate EventedPLEG off)");
    assert_stderr_shows(plegd, "plugin watchdog: running");
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(!strstr(err, " WARN "), "%s", err);
}
END_TEST

/* A --disable-plugins name that no plugin has is a warning (a typo would leave the plugin
 * running); a name that matches is none. */
START_TEST(test_disable_unknown_plugin_warns)
{
    g_autofree char *endpoint_arg = g_strconcat("--container-runtime-endpoint=", cfg.endpoint, NULL);
    g_autoptr(PlegdRunner) plegd =
        plegd_runner_spawn(NULL, endpoint_arg, "--metrics-bind-address=",
                           "--disable-plugins=evnted,watchdog");
    g_autofree char *err = NULL;

    assert_stderr_shows(plegd, "plugin watchdog: disabled (--disable-plugins)");
    assert_stderr_shows(plegd, "WARN plegd: --disable-plugins names evnted, but no plugin in the "
                               "search path has that name");
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_uint_eq(count_messages(err, " WARN "), 1);
}
END_TEST

/* Shutdown signals are blocked in every thread of plegd, its plugins', gRPC's and GLib's
 * included, and read by the main loop: a handler would run on whichever thread the kernel
 * picked, where a sanitizer could leave it pending (a plegd under TSan ignored SIGTERM). */
START_TEST(test_signals_blocked_in_every_thread)
{
    g_autofree char *endpoint_arg = g_strconcat("--container-runtime-endpoint=", cfg.endpoint, NULL);
    g_autoptr(PlegdRunner) plegd = plegd_runner_spawn(
        NULL, endpoint_arg, "--relist-period=100ms", "--metrics-bind-address=127.0.0.1:0",
        "--feature-gates=EventedPLEG=true");
    const guint64 wanted = (1ull << (SIGINT - 1)) | (1ull << (SIGTERM - 1)) |
                           (1ull << (SIGHUP - 1)) | (1ull << (SIGUSR1 - 1)) |
                           (1ull << (SIGUSR2 - 1));
    g_autofree char *task_dir = NULL;
    g_autoptr(GDir) dir = NULL;
    g_autoptr(GError) error = NULL;
    const char *tid;
    guint n_threads = 0;

    assert_stderr_shows(plegd, "plugin evented: running");
    assert_stderr_shows(plegd, "plugin watchdog: running");
    task_dir = g_strdup_printf("/proc/%s/task", plegd_runner_get_pid(plegd));
    dir = g_dir_open(task_dir, 0, &error);
    ck_assert_msg(dir, "%s", error ? error->message : "");
    while ((tid = g_dir_read_name(dir))) {
        g_autofree char *path = g_build_filename(task_dir, tid, "status", NULL);
        g_autofree char *status = NULL;
        const char *line;
        guint64 blocked;

        if (!g_file_get_contents(path, &status, NULL, NULL))
            continue; /* the thread ended */
        line = strstr(status, "\nSigBlk:");
        ck_assert_msg(line, "%s: no SigBlk", path);
        blocked = g_ascii_strtoull(line + strlen("\nSigBlk:"), NULL, 16);
        ck_assert_msg((blocked & wanted) == wanted, "thread %s blocks %" G_GINT64_MODIFIER "x:\n%s",
                      tid, blocked, status);
        n_threads++;
    }
    ck_assert_uint_gt(n_threads, 3);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    assert_stderr_shows(plegd, "received SIGTERM, shutting down");
}
END_TEST

/* A mistyped folder, or one without plugins, is a warning at the default level. */
START_TEST(test_missing_and_empty_plugin_dir)
{
    g_autofree char *endpoint_arg = g_strconcat("--container-runtime-endpoint=", cfg.endpoint, NULL);
    g_autofree char *missing = g_build_filename(cfg.dir, "plugnis", NULL);
    g_autofree char *plugin_dir_arg =
        g_strdup_printf("--plugin-dir=%s:%s", missing, cfg.plugin_dir);
    g_autofree char *want_missing =
        g_strdup_printf("WARN plegd: plugin folder %s does not exist: no plugins from it", missing);
    g_autofree char *want_empty = g_strdup_printf(
        "WARN plegd: plugin folder %s has no .plugin files: no plugins from it", cfg.plugin_dir);
    g_autoptr(PlegdRunner) plegd = plegd_runner_spawn(NULL, endpoint_arg, plugin_dir_arg,
                                                      "--relist-period=100ms",
                                                      "--metrics-bind-address=");
    g_autofree char *err = NULL;

    assert_stderr_shows(plegd, "WARN plegd: no plugins loaded from ");
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(count_messages(err, want_missing) == 1, "%s", err);
    ck_assert_msg(count_messages(err, want_empty) == 1, "%s", err);
    ck_assert_msg(strstr(err, "(--plugin-dir)"), "%s", err);
}
END_TEST

/* One failure, one line: plegd's, at message level; none from the library. */
START_TEST(test_plugin_failure_logged_once)
{
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autofree char *err = NULL;

    add_broken_plugin(cfg.plugin_dir, "broken", NULL);
    add_hello_plugin(cfg.plugin_dir);
    plegd = spawn_with_plugins(NULL);
    assert_stderr_shows(plegd, "plugin hello: running");
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(count_occurrences(err, "libbroken.so") == 1, "%s", err);
    ck_assert_msg(count_messages(err, "plugin broken: failed: cannot open the module: ") == 1,
                  "%s", err);
    ck_assert_msg(!strstr(err, " NOTICE pleg: ") && !strstr(err, " WARN pleg: "), "%s", err);
}
END_TEST

/* A .plugin file of garbage: the loader's reason quotes it, escaped and cut. */
START_TEST(test_garbage_plugin_file)
{
    g_autoptr(GString) garbage = g_string_new("[Plugin]\nName=garbage\n");
    g_autofree char *path = NULL;
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autofree char *err = NULL;
    g_autoptr(GError) error = NULL;

    g_string_append(garbage, "\x1b]0;owned\x07\xff\xfe\x01");
    for (int i = 0; i < 20000; i++)
        g_string_append_c(garbage, "garbage\x1b"[i % 8]);
    g_string_append_c(garbage, '\n');
    path = g_build_filename(cfg.plugin_dir, "garbage.plugin", NULL);
    ck_assert(g_file_set_contents(path, garbage->str, garbage->len, &error));
    add_hello_plugin(cfg.plugin_dir);

    plegd = spawn_with_plugins(NULL);
    assert_stderr_shows(plegd, "plugin hello: running");
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(count_messages(err, "plugin garbage: failed: cannot read the plugin file: ") == 1,
                  "%s", err);
    ck_assert_msg(!strchr(err, '\x1b') && !strchr(err, '\x07') && !strchr(err, '\xff') &&
                      !strchr(err, '\x01'),
                  "raw bytes reached the log");
    /* (GLib has replaced the bytes that are not UTF-8 by U+FFFD already.) */
    ck_assert_msg(strstr(err, "\\x1b]0;owned\\x07"), "%s", err);
    ck_assert_msg(strstr(err, "bytes in all)"), "%s", err);
    ck_assert_msg(strlen(err) < 8192, "%zu bytes of stderr", strlen(err));
}
END_TEST

static Suite *
plegd_suite(void)
{
    Suite *suite = suite_create("plegd");
    TCase *tc;

    tc = tcase_create("command-line");
    tcase_add_test(tc, test_help);
    tcase_add_test(tc, test_version);
    tcase_add_loop_test(tc, test_bad_flag, 0, G_N_ELEMENTS(bad_args));
    tcase_add_test(tc, test_huge_plugin_flag_values);
    tcase_add_test(tc, test_control_bytes_in_number_flag);
    tcase_add_test(tc, test_control_bytes_in_endpoint);
    tcase_add_loop_test(tc, test_huge_flag_value, 0, G_N_ELEMENTS(huge_flags));
    tcase_add_test(tc, test_control_bytes_in_flag);
    suite_add_tcase(suite, tc);

    tc = tcase_create("no-runtime");
    tcase_add_test(tc, test_unreachable_runtime);
    tcase_add_test(tc, test_notify_without_runtime);
    tcase_add_test(tc, test_bind_failure);
    tcase_add_test(tc, test_ipv6_and_sigint);
    tcase_add_test(tc, test_sighup);
    tcase_add_test(tc, test_sigusr_ignored);
    suite_add_tcase(suite, tc);

    tc = tcase_create("config");
    tcase_add_checked_fixture(tc, config_setup, config_teardown);
    tcase_add_test(tc, test_disabled_and_required);
    tcase_add_test(tc, test_config_file);
    tcase_add_test(tc, test_config_file_declared_gate);
    tcase_add_test(tc, test_config_file_flags_win);
    tcase_add_test(tc, test_feature_gates_repeated);
    tcase_add_loop_test(tc, test_config_file_bad, 0, G_N_ELEMENTS(bad_configs));
    tcase_add_loop_test(tc, test_config_file_bad_overridden, 0, G_N_ELEMENTS(bad_overridden));
    tcase_add_loop_test(tc, test_config_nul_byte, 0, G_N_ELEMENTS(nul_configs));
    tcase_add_test(tc, test_config_not_a_config_file);
    tcase_add_test(tc, test_config_duplicate_key);
    tcase_add_test(tc, test_config_no_duplicate_no_warning);
    suite_add_tcase(suite, tc);

    tc = tcase_create("plugins");
    tcase_add_checked_fixture(tc, config_setup, config_teardown);
    tcase_add_test(tc, test_broken_plugin);
    tcase_add_test(tc, test_disable_plugins);
    tcase_add_test(tc, test_require_plugins);
    tcase_add_test(tc, test_build_tree_plugins);
    tcase_add_test(tc, test_signals_blocked_in_every_thread);
    tcase_add_test(tc, test_disable_unknown_plugin_warns);
    tcase_add_test(tc, test_missing_and_empty_plugin_dir);
    tcase_add_test(tc, test_plugin_failure_logged_once);
    tcase_add_test(tc, test_garbage_plugin_file);
    suite_add_tcase(suite, tc);

    return suite;
}

int
main(void)
{
    SRunner *runner = srunner_create(plegd_suite());
    int n_failed;

    srunner_run_all(runner, CK_NORMAL);
    n_failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return n_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
