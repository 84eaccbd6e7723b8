/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Public report, as a scenario with the real host: systemd killed kubelet during a slow start
 * because the first heartbeat came after the slow part.  Here a PlegHost loads the watchdog
 * module from the build dir, with WATCHDOG_USEC=2s and a runtime whose first listing blocks for
 * 10 s; heartbeats must keep a spacing of at most one interval (1 s) from the start, all along.
 */
#include <check.h>
#include <errno.h>
#include <fake-runtime.h>
#include <glib/gstdio.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define SEC G_GINT64_CONSTANT(1000000)
#define MS  G_GINT64_CONSTANT(1000)

#define STARTUP_BLOCK_USEC (10 * SEC)
/* The interval (1 s) plus what timers and scheduling may add on a loaded machine (valgrind);
 * systemd's limit is 2 s, and a heartbeat that waited for the start-up would be ~10 s late. */
#define MAX_SPACING_USEC (1200 * MS)

typedef struct {
    char *dir;
    char *path;
    int fd;
    GArray *heartbeats;
} Listener;

static void
listener_init(Listener *listener)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    g_autoptr(GError) error = NULL;

    listener->dir = g_dir_make_tmp("pleg-watchdog-host-XXXXXX", &error);
    ck_assert_ptr_null(error);
    listener->path = g_build_filename(listener->dir, "notify", NULL);
    listener->heartbeats = g_array_new(FALSE, FALSE, sizeof(gint64));
    listener->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    ck_assert_int_ge(listener->fd, 0);
    strcpy(addr.sun_path, listener->path);
    ck_assert_int_eq(bind(listener->fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
}

static void
listener_clear(Listener *listener)
{
    close(listener->fd);
    g_unlink(listener->path);
    g_rmdir(listener->dir);
    g_free(listener->path);
    g_free(listener->dir);
    g_array_unref(listener->heartbeats);
}

/* Reads datagrams as they come, for @usec, iterating the host's context in between. */
static void
listen_for(Listener *listener, gint64 usec)
{
    gint64 deadline = g_get_monotonic_time() + usec;
    gint64 now;

    while ((now = g_get_monotonic_time()) < deadline) {
        struct pollfd pfd = {.fd = listener->fd, .events = POLLIN};
        char buf[64];
        ssize_t n;

        while (g_main_context_iteration(NULL, FALSE))
            ;
        if (poll(&pfd, 1, (int)MIN((deadline - now) / 1000 + 1, 10)) <= 0)
            continue;
        while ((n = recv(listener->fd, buf, sizeof(buf) - 1, MSG_DONTWAIT)) >= 0) {
            gint64 arrival = g_get_monotonic_time();

            buf[n] = '\0';
            ck_assert_str_eq(buf, "WATCHDOG=1");
            g_array_append_val(listener->heartbeats, arrival);
        }
        ck_assert_int_eq(errno, EAGAIN);
    }
}

static void
assert_spacing(Listener *listener, gint64 from_usec, gint64 to_usec)
{
    gint64 previous = from_usec;

    for (guint i = 0; i < listener->heartbeats->len; i++) {
        gint64 arrival = g_array_index(listener->heartbeats, gint64, i);

        ck_assert_msg(arrival - previous <= MAX_SPACING_USEC,
                      "heartbeat %u came %" G_GINT64_FORMAT " ms after the previous one", i,
                      (arrival - previous) / 1000);
        previous = arrival;
    }
    ck_assert_msg(to_usec - previous <= MAX_SPACING_USEC,
                  "no heartbeat in the last %" G_GINT64_FORMAT " ms", (to_usec - previous) / 1000);
}

static void
on_event(PlegPodLifecycleEvent *event, gpointer user_data)
{
}

START_TEST(test_slow_start_keeps_heartbeat)
{
    g_autoptr(FakeRuntime) fake = fake_runtime_new();
    g_autoptr(PlegRuntime) runtime = fake_runtime_as_runtime(fake);
    g_autoptr(PlegFeatureGates) gates = pleg_feature_gates_new();
    g_autoptr(PlegHost) host = NULL;
    g_autoptr(GPtrArray) plugins = NULL;
    g_autoptr(GError) error = NULL;
    PlegHostConfig config;
    Listener listener;
    gboolean found = FALSE;
    gint64 start_usec;

    listener_init(&listener);
    g_setenv("NOTIFY_SOCKET", listener.path, TRUE);
    g_setenv("WATCHDOG_USEC", "2000000", TRUE);
    g_unsetenv("WATCHDOG_PID");
    /* watchdog.plugin declares WatchdogStallDiagnostics: registered before any gate is set. */
    ck_assert_msg(pleg_feature_gates_register_plugins(gates, g_getenv("PLEG_WATCHDOG_PLUGIN_DIR"),
                                                      &error),
                  "%s", error->message);
    ck_assert(pleg_feature_gates_known(gates, "WatchdogStallDiagnostics", NULL, NULL));
    ck_assert(!pleg_feature_gates_enabled(gates, "WatchdogStallDiagnostics"));
    ck_assert(pleg_feature_gates_set(gates, PLEG_FEATURE_KUBELET_WATCHDOG_DIAGNOSTICS, TRUE, NULL));

    fake_runtime_add_sandbox(fake, "sandbox-1", "pod-1", PLEG_POD_SANDBOX_STATE_READY);
    fake_runtime_block(fake, FAKE_OP_LIST_POD_SANDBOXES, NULL);

    start_usec = g_get_monotonic_time();
    pleg_host_config_init(&config);
    config.runtime = runtime;
    config.plugin_dir = g_getenv("PLEG_WATCHDOG_PLUGIN_DIR");
    config.required_plugins = (const char *const[]){"watchdog", NULL};
    host = pleg_host_new(&config, gates, NULL, &error);
    ck_assert_msg(host, "%s", error ? error->message : "");
    pleg_host_add_event_callback(host, on_event, NULL, NULL);
    ck_assert_msg(pleg_host_start(host, &error), "%s", error ? error->message : "");

    plugins = pleg_host_get_plugins(host);
    for (guint i = 0; i < plugins->len; i++) {
        const PlegPluginInfo *info = g_ptr_array_index(plugins, i);

        if (g_str_equal(info->name, "watchdog")) {
            ck_assert_str_eq(pleg_plugin_state_to_string(info->state),
                             pleg_plugin_state_to_string(PLEG_PLUGIN_STATE_RUNNING));
            found = TRUE;
        }
    }
    ck_assert(found);

    /* The first relist is stuck in the runtime for 10 s. */
    ck_assert(fake_runtime_wait_blocked(fake, 5 * SEC));
    listen_for(&listener, start_usec + STARTUP_BLOCK_USEC - g_get_monotonic_time());
    ck_assert_int_eq(pleg_generic_get_last_relist_time(pleg_host_get_pleg(host)), 0);
    assert_spacing(&listener, start_usec, g_get_monotonic_time());
    ck_assert_uint_ge(listener.heartbeats->len, 9);

    /* Start-up finishes; the heartbeat goes on. */
    fake_runtime_unblock(fake);
    listen_for(&listener, 1500 * MS);
    assert_spacing(&listener, start_usec, g_get_monotonic_time());
    ck_assert_int_gt(pleg_generic_get_last_relist_time(pleg_host_get_pleg(host)), 0);
    ck_assert(pleg_host_check_health(host, NULL, NULL));

    pleg_host_stop(host);
    listener_clear(&listener);
}
END_TEST

/* A dispatcher really stuck (a runtime call without a deadline, which no CRI call is): once no
 * global relist has ended within the liveness window, max(threshold 1 s, period 100 ms + 4 x
 * request timeout 200 ms) = 1 s, liveness fails and the heartbeat stops, so that systemd
 * restarts plegd; when the dispatcher moves again, the heartbeat comes back. */
START_TEST(test_stuck_dispatcher_stops_heartbeat)
{
    g_autoptr(FakeRuntime) fake = fake_runtime_new();
    g_autoptr(PlegRuntime) runtime = fake_runtime_as_runtime(fake);
    g_autoptr(PlegFeatureGates) gates = pleg_feature_gates_new();
    g_autoptr(PlegHost) host = NULL;
    g_autoptr(GError) error = NULL;
    g_autofree char *checker = NULL;
    PlegHostConfig config;
    Listener listener;
    gint64 start_usec, stuck_usec, deadline;
    guint before;

    listener_init(&listener);
    g_setenv("NOTIFY_SOCKET", listener.path, TRUE);
    g_setenv("WATCHDOG_USEC", "2000000", TRUE);
    g_unsetenv("WATCHDOG_PID");
    ck_assert_msg(pleg_feature_gates_register_plugins(gates, g_getenv("PLEG_WATCHDOG_PLUGIN_DIR"),
                                                      &error),
                  "%s", error->message);
    fake_runtime_add_sandbox(fake, "sandbox-1", "pod-1", PLEG_POD_SANDBOX_STATE_READY);

    start_usec = g_get_monotonic_time();
    pleg_host_config_init(&config);
    config.runtime = runtime;
    config.plugin_dir = g_getenv("PLEG_WATCHDOG_PLUGIN_DIR");
    config.required_plugins = (const char *const[]){"watchdog", NULL};
    config.generic.relist_period_usec = 100 * MS;
    config.generic.relist_threshold_usec = SEC;
    config.runtime_request_timeout_usec = 200 * MS;
    host = pleg_host_new(&config, gates, NULL, &error);
    ck_assert_msg(host, "%s", error ? error->message : "");
    pleg_host_add_event_callback(host, on_event, NULL, NULL);
    ck_assert_msg(pleg_host_start(host, &error), "%s", error ? error->message : "");

    listen_for(&listener, 1500 * MS);
    assert_spacing(&listener, start_usec, g_get_monotonic_time());
    ck_assert_int_gt(pleg_generic_get_last_relist_time(pleg_host_get_pleg(host)), 0);

    /* The next listing never returns. */
    fake_runtime_block(fake, FAKE_OP_LIST_POD_SANDBOXES, NULL);
    ck_assert(fake_runtime_wait_blocked(fake, 5 * SEC));
    stuck_usec = g_get_monotonic_time();
    deadline = stuck_usec + 5 * SEC;
    while (pleg_host_check_health(host, NULL, NULL) && g_get_monotonic_time() < deadline)
        listen_for(&listener, 20 * MS);
    ck_assert(!pleg_host_check_health(host, &checker, &error));
    ck_assert_str_eq(checker, "pleg-dispatcher");
    ck_assert_msg(g_str_has_prefix(error->message, "pleg dispatcher is stuck: no global relist "
                                                   "has finished for "),
                  "%s", error->message);
    ck_assert_msg(g_str_has_suffix(error->message, "; the limit is 1s"), "%s", error->message);
    /* Not before the window. */
    ck_assert_int_ge(g_get_monotonic_time() - stuck_usec, 900 * MS);

    /* No heartbeat for two intervals, which would get plegd killed (the round under way when
     * liveness failed may still have sent one). */
    listen_for(&listener, 1100 * MS);
    before = listener.heartbeats->len;
    listen_for(&listener, 2 * SEC);
    ck_assert_uint_eq(listener.heartbeats->len, before);

    /* Unstuck: relists end again, and so does the silence. */
    fake_runtime_unblock(fake);
    deadline = g_get_monotonic_time() + 5 * SEC;
    while (listener.heartbeats->len == before && g_get_monotonic_time() < deadline)
        listen_for(&listener, 20 * MS);
    ck_assert_uint_gt(listener.heartbeats->len, before);
    ck_assert(pleg_host_check_health(host, NULL, NULL));

    pleg_host_stop(host);
    listener_clear(&listener);
}
END_TEST

static Suite *
watchdog_host_suite(void)
{
    Suite *s = suite_create("watchdog-host");
    TCase *tc = tcase_create("host");

    tcase_set_timeout(tc, 40);
    tcase_add_test(tc, test_slow_start_keeps_heartbeat);
    tcase_add_test(tc, test_stuck_dispatcher_stops_heartbeat);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *runner = srunner_create(watchdog_host_suite());
    int failed;

    srunner_run_all(runner, CK_NORMAL);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? 0 : 1;
}
