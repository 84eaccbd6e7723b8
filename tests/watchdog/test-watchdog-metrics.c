/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kubelet_watchdog_failures_total{operation,result}: the watchdog's failures as a Prometheus
 * counter, one series per kind of KEP-6247 record, for alerting (examples/monitoring).  Counted
 * with the diagnostics gate off as well, and before the records' rate limit.
 */
#include <check.h>
#include <string.h>

#include "watchdog-test.h"

static double
failures(WatchdogTest *test, const char *operation, const char *result)
{
    PlegMetric *metric =
        pleg_metrics_lookup(fake_host_get_metrics(test->host), "kubelet_watchdog_failures_total");

    ck_assert_ptr_nonnull(metric);
    return pleg_metric_get(metric, (const char *const[]){operation, result});
}

typedef struct {
    WatchdogTest *test;
    const char *operation;
    const char *result;
    double at_least;
} Wanted;

static gboolean
reached(gpointer data)
{
    Wanted *wanted = data;

    return failures(wanted->test, wanted->operation, wanted->result) >= wanted->at_least;
}

/* Before anything failed, every series is there at 0, in the exposition too. */
START_TEST(test_series_from_the_start)
{
    g_autoptr(WatchdogTest) test = watchdog_test_new(FALSE);
    g_autofree char *text = NULL;

    watchdog_test_bind(test);
    ck_assert(watchdog_test_start(test, NULL));
    ck_assert(watchdog_test_wait_heartbeats(test, 1, 2 * SEC));
    ck_assert(failures(test, "watchdog_health_check", "error") == 0);
    ck_assert(failures(test, "watchdog_notify", "error") == 0);
    ck_assert(failures(test, "watchdog_notify", "retries_exhausted") == 0);

    text = pleg_metrics_registry_expose(fake_host_get_metrics(test->host));
    ck_assert_ptr_nonnull(strstr(text, "# TYPE kubelet_watchdog_failures_total counter\n"));
    ck_assert_ptr_nonnull(strstr(
        text,
        "kubelet_watchdog_failures_total{operation=\"watchdog_health_check\",result=\"error\"} 0\n"));
    ck_assert_ptr_nonnull(strstr(
        text, "kubelet_watchdog_failures_total{operation=\"watchdog_notify\",result=\"error\"} 0\n"));
    ck_assert_ptr_nonnull(
        strstr(text, "kubelet_watchdog_failures_total{operation=\"watchdog_notify\","
                     "result=\"retries_exhausted\"} 0\n"));
}
END_TEST

/* A broken socket with the gate off: no record is written, yet both failed attempts and the
 * exhausted notification are counted. */
START_TEST(test_notify_failures_counted_with_gate_off)
{
    g_autoptr(WatchdogTest) test = watchdog_test_new(FALSE);
    Wanted wanted = {test, "watchdog_notify", "retries_exhausted", 1};

    watchdog_test_bind(test);
    watchdog_test_break(test);
    ck_assert(watchdog_test_start(test, NULL));
    ck_assert(fake_host_wait(test->host, reached, &wanted, 3 * SEC));
    ck_assert(failures(test, "watchdog_notify", "error") >= 2);
    ck_assert(failures(test, "watchdog_health_check", "error") == 0);
    ck_assert_uint_eq(watchdog_test_count_records(test, NULL, NULL), 0);
}
END_TEST

/* A checker failing every tick: the records are rate-limited to one, the counter counts each. */
START_TEST(test_checker_failures_counted_past_rate_limit)
{
    g_autoptr(WatchdogTest) test = watchdog_test_new(TRUE);
    TestChecker runtime = {.name = "runtime", .message = "down", .fail_times = -1};
    Wanted wanted = {test, "watchdog_health_check", "error", 3};

    watchdog_test_add_checker(test, &runtime);
    watchdog_test_bind(test);
    ck_assert(watchdog_test_start(test, NULL));
    ck_assert(fake_host_wait(test->host, reached, &wanted, 5 * SEC));
    ck_assert(failures(test, "watchdog_health_check", "error") == runtime.failures);
    ck_assert_uint_eq(watchdog_test_count_records(test, NULL, NULL), 1);
    ck_assert(failures(test, "watchdog_notify", "error") == 0);
}
END_TEST

static Suite *
watchdog_metrics_suite(void)
{
    Suite *s = suite_create("watchdog-metrics");
    TCase *tc = tcase_create("metrics");

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_series_from_the_start);
    tcase_add_test(tc, test_notify_failures_counted_with_gate_off);
    tcase_add_test(tc, test_checker_failures_counted_past_rate_limit);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *runner = srunner_create(watchdog_metrics_suite());
    int failed;

    srunner_run_all(runner, CK_NORMAL);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? 0 : 1;
}
