/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The watchdog plugin as a module under the fake host, against a real NOTIFY_SOCKET: the
 * heartbeat, its configuration, and the public report of a NOTIFY_SOCKET that goes away.
 */
#include <check.h>
#include <string.h>
#include <unistd.h>

#include "watchdog-test.h"

/* ---- the module ---- */

START_TEST(test_descriptor_matches_key_file)
{
    const PlegPluginDescriptor *descriptor = watchdog_test_descriptor();
    g_autofree char *dir = g_path_get_dirname(g_getenv("PLEG_WATCHDOG_PLUGIN"));
    g_autofree char *base = g_path_get_basename(g_getenv("PLEG_WATCHDOG_PLUGIN"));
    g_autofree char *path = g_build_filename(dir, "watchdog.plugin", NULL);
    g_autoptr(GKeyFile) key_file = g_key_file_new();
    g_autoptr(GError) error = NULL;
    g_autofree char *name = NULL;
    g_autofree char *module = NULL;
    g_autofree char *gate = NULL;

    ck_assert_uint_eq(descriptor->abi_major, PLEG_PLUGIN_ABI_MAJOR);
    ck_assert_uint_eq(descriptor->size, sizeof(PlegPluginDescriptor));
    ck_assert_msg(g_key_file_load_from_file(key_file, path, G_KEY_FILE_NONE, &error), "%s: %s",
                  path, error ? error->message : "");
    name = g_key_file_get_string(key_file, "Plugin", "Name", NULL);
    module = g_key_file_get_string(key_file, "Plugin", "Module", NULL);
    gate = g_key_file_get_string(key_file, "Plugin", "FeatureGate", NULL);
    ck_assert_str_eq(name, "watchdog");
    ck_assert_str_eq(descriptor->name, name);
    ck_assert_str_eq(module, base);
    ck_assert_str_eq(gate, "SystemdWatchdog");
    ck_assert_str_eq(descriptor->feature_gate, gate);
}
END_TEST

/* ---- heartbeat ---- */

START_TEST(test_heartbeat_count_and_spacing)
{
    g_autoptr(WatchdogTest) test = watchdog_test_new(FALSE);
    g_autoptr(GError) error = NULL;

    watchdog_test_bind(test);
    ck_assert_msg(watchdog_test_start(test, &error), "%s", error ? error->message : "");

    /* The first WATCHDOG=1 goes out at start, then one per interval (2 s / 2). */
    ck_assert(watchdog_test_wait_heartbeats(test, 4, 5 * SEC));
    fake_host_run_for(test->host, 300 * MS);
    ck_assert_uint_eq(watchdog_test_heartbeat_count(test), 4);
    ck_assert_uint_eq(test->other_messages, 0);
    /* Immediately, not one interval later (the margin is for valgrind on a loaded machine). */
    ck_assert_int_lt(watchdog_test_heartbeat_offset(test, 0), 500 * MS);
    for (guint i = 1; i < 4; i++) {
        gint64 spacing = watchdog_test_heartbeat_offset(test, i) -
                         watchdog_test_heartbeat_offset(test, i - 1);

        /* One interval; the margins absorb dispatch latency on a loaded machine (valgrind). */
        ck_assert_int_ge(spacing, 800 * MS);
        ck_assert_int_le(spacing, 1200 * MS);
    }
    /* Success is quiet: one info line at start, the rest at debug. */
    ck_assert_uint_eq(watchdog_test_count_visible(test), 0);
    ck_assert_uint_eq(watchdog_test_count_messages(test, "systemd watchdog enabled: timeout 2s, "
                                                         "WATCHDOG=1 every 1s"),
                      1);
    ck_assert_uint_eq(watchdog_test_count_records(test, NULL, NULL), 0);

    /* Stop is idempotent and silences the heartbeat. */
    watchdog_test_stop(test);
    watchdog_test_stop(test);
    fake_host_run_for(test->host, 1200 * MS);
    ck_assert_uint_eq(watchdog_test_heartbeat_count(test), 4);
}
END_TEST

/* WATCHDOG_PID naming this process is honoured like an unset one. */
START_TEST(test_watchdog_pid_ours)
{
    g_autoptr(WatchdogTest) test = watchdog_test_new(FALSE);
    g_autofree char *pid = g_strdup_printf("%d", (int)getpid());

    g_setenv("WATCHDOG_PID", pid, TRUE);
    watchdog_test_bind(test);
    ck_assert(watchdog_test_start(test, NULL));
    ck_assert(watchdog_test_wait_heartbeats(test, 1, 2 * SEC));
}
END_TEST

START_TEST(test_watchdog_disabled)
{
    static const char *const pids[] = {NULL, "1"};

    for (gsize i = 0; i < G_N_ELEMENTS(pids); i++) {
        g_autoptr(WatchdogTest) test = watchdog_test_new(TRUE);

        if (pids[i])
            g_setenv("WATCHDOG_PID", pids[i], TRUE); /* another process's watchdog */
        else
            g_unsetenv("WATCHDOG_USEC");
        watchdog_test_bind(test);
        ck_assert(watchdog_test_start(test, NULL));
        fake_host_run_for(test->host, 1500 * MS);
        ck_assert_uint_eq(watchdog_test_heartbeat_count(test), 0);
        /* Said once, at info, and nothing else. */
        ck_assert_uint_eq(fake_host_get_log_count(test->host), 1);
        ck_assert_uint_eq(fake_host_count_logs(test->host, "PRIORITY", "6"), 1);
        ck_assert_uint_eq(watchdog_test_count_messages(test, "systemd watchdog not enabled"), 1);
        watchdog_test_stop(test);
    }
}
END_TEST

START_TEST(test_interval_too_small)
{
    static const char *const values[][2] = {
        {"1000000", "WATCHDOG_USEC=1000000 (1s) is too small: it must be more than 1s"},
        {"500000", "WATCHDOG_USEC=500000 (500ms) is too small"},
        {"1", "WATCHDOG_USEC=1 (1\u00b5s) is too small"},
        {"2s", "invalid systemd watchdog environment (WATCHDOG_USEC=\"2s\""},
    };

    for (gsize i = 0; i < G_N_ELEMENTS(values); i++) {
        g_autoptr(WatchdogTest) test = watchdog_test_new(TRUE);
        g_autoptr(GError) error = NULL;

        g_setenv("WATCHDOG_USEC", values[i][0], TRUE);
        watchdog_test_bind(test);
        ck_assert(!watchdog_test_start(test, &error));
        ck_assert(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT));
        ck_assert_msg(strstr(error->message, values[i][1]), "%s", error->message);
        fake_host_run_for(test->host, 200 * MS);
        ck_assert_uint_eq(watchdog_test_heartbeat_count(test), 0);
    }
}
END_TEST

/* ---- public report: NOTIFY_SOCKET removed after READY=1 (sd_notify(1, ...)) ---- */

START_TEST(test_notify_socket_removed)
{
    for (int gate = 0; gate <= 1; gate++) {
        g_autoptr(WatchdogTest) test = watchdog_test_new(gate);

        watchdog_test_bind(test);
        ck_assert(watchdog_test_start(test, NULL));
        ck_assert(watchdog_test_wait_heartbeats(test, 1, 2 * SEC));
        g_unsetenv("NOTIFY_SOCKET");

        /* Two more ticks: one clear line, no retries, no records, no spam. */
        fake_host_run_for(test->host, 2200 * MS);
        ck_assert_uint_eq(watchdog_test_heartbeat_count(test), 1);
        ck_assert_uint_eq(watchdog_test_count_visible(test), 1);
        ck_assert_uint_eq(watchdog_test_count_messages(test, "NOTIFY_SOCKET is not set"), 1);
        ck_assert_uint_eq(fake_host_count_logs(test->host, "PRIORITY", "5"), 1);
        ck_assert_uint_eq(watchdog_test_count_records(test, NULL, NULL), 0);
        watchdog_test_stop(test);
    }
}
END_TEST

START_TEST(test_notify_socket_missing_from_start)
{
    g_autoptr(WatchdogTest) test = watchdog_test_new(TRUE);

    g_unsetenv("NOTIFY_SOCKET");
    ck_assert(watchdog_test_start(test, NULL));
    fake_host_run_for(test->host, 2200 * MS);
    ck_assert_uint_eq(watchdog_test_count_visible(test), 1);
    ck_assert_uint_eq(watchdog_test_count_messages(test, "NOTIFY_SOCKET is not set"), 1);
    /* One line that says there is no heartbeat, not "enabled ... every 1s" before it. */
    ck_assert_uint_eq(watchdog_test_count_messages(test, "systemd watchdog enabled"), 0);
    ck_assert_uint_eq(watchdog_test_count_messages(test, "no heartbeat is sent"), 1);
    ck_assert_uint_eq(watchdog_test_heartbeat_count(test), 0);
    ck_assert_uint_eq(watchdog_test_count_records(test, NULL, NULL), 0);
}
END_TEST

static Suite *
watchdog_plugin_suite(void)
{
    Suite *s = suite_create("watchdog-plugin");
    TCase *tc = tcase_create("plugin");

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_descriptor_matches_key_file);
    tcase_add_test(tc, test_heartbeat_count_and_spacing);
    tcase_add_test(tc, test_watchdog_pid_ours);
    tcase_add_test(tc, test_watchdog_disabled);
    tcase_add_test(tc, test_interval_too_small);
    tcase_add_test(tc, test_notify_socket_removed);
    tcase_add_test(tc, test_notify_socket_missing_from_start);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *runner = srunner_create(watchdog_plugin_suite());
    int failed;

    srunner_run_all(runner, CK_NORMAL);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? 0 : 1;
}
