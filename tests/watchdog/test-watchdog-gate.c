/* SPDX-License-Identifier: Apache-2.0 */
/*
 * KubeletWatchdogDiagnostics through the plugin module, the fake host and a real NOTIFY_SOCKET:
 * the gate changes the records only, never the heartbeat, and leaves no state behind.
 */
#include <check.h>

#include "watchdog-test.h"

static void
assert_field(GHashTable *record, const char *field, const char *value)
{
    ck_assert_ptr_nonnull(record);
    ck_assert_str_eq(g_hash_table_lookup(record, field) ?: "(none)", value);
}

typedef struct {
    TestChecker *checker;
    guint calls;
} CallWait;

static gboolean
checker_called_again(gpointer data)
{
    CallWait *wait = data;

    return wait->checker->calls > wait->calls;
}

/* Off, on, off, on at run time, within one window: each "on" starts afresh. */
START_TEST(test_gate_toggle)
{
    g_autoptr(WatchdogTest) test = watchdog_test_new(FALSE);
    TestChecker runtime = {.name = "runtime", .message = "down", .fail_times = -1};
    static const gboolean phases[] = {FALSE, TRUE, FALSE, TRUE};
    guint expected = 0;

    watchdog_test_add_checker(test, &runtime);
    watchdog_test_bind(test);
    ck_assert(watchdog_test_start(test, NULL));
    for (gsize i = 0; i < G_N_ELEMENTS(phases); i++) {
        CallWait wait = {.checker = &runtime, .calls = runtime.calls};

        fake_host_set_gate(test->host, "KubeletWatchdogDiagnostics", phases[i]);
        ck_assert(fake_host_wait(test->host, checker_called_again, &wait, 1500 * MS));
        expected += phases[i];
        ck_assert_uint_eq(watchdog_test_count_records(test, NULL, NULL), expected);
        ck_assert_uint_eq(watchdog_test_count_records(test, "SUPPRESSED", NULL), 0);
    }
    ck_assert_uint_eq(expected, 2);
    ck_assert_uint_eq(watchdog_test_count_visible(test), 2);
}
END_TEST

/* ---- the same fault script with the gate off and on ---- */

typedef struct {
    gint64 heartbeats[3];
    guint checker_calls;
    guint records;
    guint visible;
} ScriptResult;

static void
run_fault_script(gboolean gate, ScriptResult *ret)
{
    g_autoptr(WatchdogTest) test = watchdog_test_new(gate);
    TestChecker runtime = {.name = "runtime", .message = "runtime unreachable"};

    watchdog_test_add_checker(test, &runtime);
    /* 0 s: no listener, the notification fails; 0.5 s: the listener appears, the retry at
     * 1-1.1 s succeeds; 2 s: sent; 3 s: the checker fails, skipped; 4 s: sent. */
    ck_assert(watchdog_test_start(test, NULL));
    fake_host_run_for(test->host, 500 * MS);
    watchdog_test_bind(test);
    ck_assert(watchdog_test_wait_heartbeats(test, 2, 2 * SEC));
    runtime.fail_times = 1;
    ck_assert(watchdog_test_wait_heartbeats(test, 3, 3 * SEC));
    watchdog_test_stop(test);

    ck_assert_uint_eq(watchdog_test_heartbeat_count(test), 3);
    for (guint i = 0; i < 3; i++)
        ret->heartbeats[i] = watchdog_test_heartbeat_offset(test, i);
    ret->checker_calls = runtime.calls;
    ret->records = watchdog_test_count_records(test, NULL, NULL);
    ret->visible = watchdog_test_count_visible(test);
    if (gate) {
        g_autoptr(GHashTable) notify = watchdog_test_find_record(test, "watchdog_notify", "error", 0);
        g_autoptr(GHashTable) check = watchdog_test_find_record(test, "watchdog_health_check",
                                                                "error", 0);

        assert_field(notify, "ATTEMPT", "1");
        assert_field(check, "CHECKER", "runtime");
    }
}

START_TEST(test_gate_same_control_flow)
{
    ScriptResult off = {0};
    ScriptResult on = {0};

    run_fault_script(FALSE, &off);
    run_fault_script(TRUE, &on);

    /* Same heartbeats at the same times (up to the retry's 10 % jitter and dispatch latency),
     * same checker rounds. */
    for (guint i = 0; i < 3; i++)
        ck_assert_int_le(ABS(off.heartbeats[i] - on.heartbeats[i]), 250 * MS);
    ck_assert_int_ge(off.heartbeats[0], 1000 * MS);
    ck_assert_int_le(off.heartbeats[0], 1400 * MS);
    ck_assert_int_ge(off.heartbeats[2] - off.heartbeats[1], 1900 * MS);
    ck_assert_uint_eq(off.checker_calls, on.checker_calls);
    ck_assert_uint_eq(off.checker_calls, 4);

    /* Only the records differ. */
    ck_assert_uint_eq(off.records, 0);
    ck_assert_uint_eq(off.visible, 0);
    ck_assert_uint_eq(on.records, 2);
    ck_assert_uint_eq(on.visible, 2);
}
END_TEST

static Suite *
watchdog_gate_suite(void)
{
    Suite *s = suite_create("watchdog-gate");
    TCase *tc = tcase_create("gate");

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_gate_toggle);
    tcase_add_test(tc, test_gate_same_control_flow);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *runner = srunner_create(watchdog_gate_suite());
    int failed;

    srunner_run_all(runner, CK_NORMAL);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? 0 : 1;
}
