/* SPDX-License-Identifier: Apache-2.0 */
/*
 * KEP-6247 through the plugin module, the fake host and a real NOTIFY_SOCKET: checker failures,
 * notification errors, retries, the exhaustion summary and rate limiting (the gate: test-watchdog-gate.c).
 */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "watchdog-test.h"

static void
assert_field(GHashTable *record, const char *field, const char *value)
{
    ck_assert_ptr_nonnull(record);
    ck_assert_str_eq(g_hash_table_lookup(record, field) ?: "(none)", value);
}

static gboolean
checker_failed(gpointer data)
{
    TestChecker *checker = data;

    return checker->fail_times == 0;
}

/* Checker error: named, default-visible, fail-fast (later checkers do not run) and the tick's
 * notification is skipped. */
START_TEST(test_checker_failure_skips_heartbeat)
{
    g_autoptr(WatchdogTest) test = watchdog_test_new(TRUE);
    TestChecker runtime = {.name = "runtime", .message = "runtime unreachable: connection refused"};
    TestChecker later = {.name = "later", .message = "never"};
    g_autoptr(GHashTable) record = NULL;
    guint later_calls;
    gint64 gap;

    watchdog_test_add_checker(test, &runtime);
    watchdog_test_add_checker(test, &later);
    watchdog_test_bind(test);
    ck_assert(watchdog_test_start(test, NULL));
    ck_assert(watchdog_test_wait_heartbeats(test, 1, 2 * SEC));

    runtime.fail_times = 2;
    later_calls = later.calls;
    ck_assert(fake_host_wait(test->host, checker_failed, &runtime, 3 * SEC));
    ck_assert_uint_eq(later.calls, later_calls);
    ck_assert_uint_eq(watchdog_test_heartbeat_count(test), 1);

    ck_assert(watchdog_test_wait_heartbeats(test, 2, 2 * SEC));
    gap = watchdog_test_heartbeat_offset(test, 1) - watchdog_test_heartbeat_offset(test, 0);
    /* Two ticks skipped: three intervals between the heartbeats, never two. */
    ck_assert_int_ge(gap, 2500 * MS);
    ck_assert_int_le(gap, 3300 * MS);

    /* Two failures in one window: one record. */
    ck_assert_uint_eq(watchdog_test_count_records(test, NULL, NULL), 1);
    record = watchdog_test_find_record(test, "watchdog_health_check", "error", 0);
    assert_field(record, "CHECKER", "runtime");
    assert_field(record, "ERROR", "runtime unreachable: connection refused");
    assert_field(record, "WATCHDOG_INTERVAL", "1s");
    assert_field(record, "PRIORITY", "5");
    assert_field(record, "GLIB_DOMAIN", "pleg-watchdog");
    ck_assert_ptr_nonnull(strstr(g_hash_table_lookup(record, "MESSAGE"),
                                 "operation=watchdog_health_check checker=runtime "
                                 "watchdog_interval=1s result=error "
                                 "error=\"runtime unreachable: connection refused\""));
}
END_TEST

/* A notification error is default-visible; the retry 1-1.1 s later sends the heartbeat. */
START_TEST(test_notify_error_then_retry)
{
    g_autoptr(WatchdogTest) test = watchdog_test_new(TRUE);
    g_autoptr(GHashTable) record = NULL;
    gint64 offset;

    /* NOTIFY_SOCKET names a path nobody has bound yet. */
    ck_assert(watchdog_test_start(test, NULL));
    ck_assert(watchdog_test_wait_records(test, "OPERATION", "watchdog_notify", 1, SEC));
    record = watchdog_test_find_record(test, "watchdog_notify", "error", 0);
    assert_field(record, "ATTEMPT", "1");
    assert_field(record, "ERROR", g_strerror(ENOENT));
    assert_field(record, "WATCHDOG_INTERVAL", "1s");
    assert_field(record, "PRIORITY", "5");
    ck_assert(!g_hash_table_contains(record, "CHECKER"));

    watchdog_test_bind(test);
    ck_assert(watchdog_test_wait_heartbeats(test, 1, 2 * SEC));
    offset = watchdog_test_heartbeat_offset(test, 0);
    ck_assert_int_ge(offset, 1000 * MS);
    ck_assert_int_le(offset, 1400 * MS);

    /* The schedule goes on at 2 s; no summary, no further record. */
    ck_assert(watchdog_test_wait_heartbeats(test, 2, 2 * SEC));
    offset = watchdog_test_heartbeat_offset(test, 1);
    ck_assert_int_ge(offset, 1900 * MS);
    ck_assert_int_le(offset, 2400 * MS);
    ck_assert_uint_eq(watchdog_test_count_records(test, NULL, NULL), 1);
}
END_TEST

/* A broken socket (its file left behind): two attempts, then exactly one summary. */
START_TEST(test_exhausted_summary_once)
{
    g_autoptr(WatchdogTest) test = watchdog_test_new(TRUE);
    g_autoptr(GHashTable) first = NULL;
    g_autoptr(GHashTable) second = NULL;
    g_autoptr(GHashTable) summary = NULL;

    watchdog_test_bind(test);
    watchdog_test_break(test);
    ck_assert(watchdog_test_start(test, NULL));
    ck_assert(watchdog_test_wait_records(test, "RESULT", "retries_exhausted", 1, 2 * SEC));
    fake_host_run_for(test->host, 300 * MS);
    ck_assert_uint_eq(watchdog_test_count_records(test, "RESULT", "retries_exhausted"), 1);
    ck_assert_uint_eq(watchdog_test_count_records(test, NULL, NULL), 3);

    first = watchdog_test_find_record(test, "watchdog_notify", "error", 0);
    second = watchdog_test_find_record(test, "watchdog_notify", "error", 1);
    summary = watchdog_test_find_record(test, "watchdog_notify", "retries_exhausted", 0);
    assert_field(first, "ATTEMPT", "1");
    assert_field(first, "ERROR", g_strerror(ECONNREFUSED));
    assert_field(second, "ATTEMPT", "2");
    assert_field(summary, "ATTEMPT", "2");
    assert_field(summary, "ERROR", g_strerror(ECONNREFUSED));
    assert_field(summary, "WATCHDOG_INTERVAL", "1s");
    assert_field(summary, "PRIORITY", "5");
    ck_assert_uint_eq(watchdog_test_heartbeat_count(test), 0);
}
END_TEST

/* A checker failing every tick: the first record of the window only. */
START_TEST(test_rate_limited)
{
    g_autoptr(WatchdogTest) test = watchdog_test_new(TRUE);
    TestChecker runtime = {.name = "runtime", .message = "down", .fail_times = -1};

    watchdog_test_add_checker(test, &runtime);
    watchdog_test_bind(test);
    ck_assert(watchdog_test_start(test, NULL));
    fake_host_run_for(test->host, 3500 * MS);
    ck_assert_uint_eq(runtime.failures, 4);
    ck_assert_uint_eq(watchdog_test_heartbeat_count(test), 0);
    ck_assert_uint_eq(watchdog_test_count_records(test, NULL, NULL), 1);
    ck_assert_uint_eq(watchdog_test_count_visible(test), 1);
}
END_TEST

static Suite *
watchdog_diagnostics_suite(void)
{
    Suite *s = suite_create("watchdog-diagnostics");
    TCase *tc = tcase_create("diagnostics");

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_checker_failure_skips_heartbeat);
    tcase_add_test(tc, test_notify_error_then_retry);
    tcase_add_test(tc, test_exhausted_summary_once);
    tcase_add_test(tc, test_rate_limited);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *runner = srunner_create(watchdog_diagnostics_suite());
    int failed;

    srunner_run_all(runner, CK_NORMAL);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? 0 : 1;
}
