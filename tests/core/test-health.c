/* SPDX-License-Identifier: Apache-2.0 */
/* PLEG health over time, driven by a fake clock. */
#include "core-test.h"

#define MINUTE_NS (60 * NSEC_PER_SEC)

static void
assert_healthy(Fixture *fx)
{
    g_autofree char *message = NULL;
    gboolean healthy = pleg_generic_healthy(fx->pleg, &message);

    ck_assert_msg(healthy, "unhealthy: %s", message ? message : "(no message)");
}

static void
assert_unhealthy(Fixture *fx, const char *expected)
{
    g_autofree char *message = NULL;

    ck_assert(!pleg_generic_healthy(fx->pleg, &message));
    ck_assert(message != NULL);
    ck_assert_str_eq(message, expected);
    /* The message is optional. */
    ck_assert(!pleg_generic_healthy(fx->pleg, NULL));
}

START_TEST(test_health_before_first_relist)
{
    g_autoptr(Fixture) fx = fixture_new();

    assert_unhealthy(fx, "pleg has yet to be successful");
    fx->clock.now_ns += 10 * MINUTE_NS;
    assert_unhealthy(fx, "pleg has yet to be successful");

    /* A failed first relist changes nothing. */
    fake_runtime_fail(fx->fake, FAKE_OP_LIST_POD_SANDBOXES, NULL, 1);
    relist_fails(fx);
    assert_unhealthy(fx, "pleg has yet to be successful");
    ck_assert_int_eq(pleg_generic_get_last_relist_time(fx->pleg), 0);
}
END_TEST

START_TEST(test_health_threshold)
{
    g_autoptr(Fixture) fx = fixture_new();

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    relist(fx);
    assert_healthy(fx);

    fx->clock.now_ns = T0_NS + 3 * MINUTE_NS;
    assert_healthy(fx); /* not more than the threshold yet */

    fx->clock.now_ns = T0_NS + 3 * MINUTE_NS + NSEC_PER_SEC;
    assert_unhealthy(fx, "pleg was last seen active 3m1s ago; threshold is 3m0s");

    relist(fx);
    assert_healthy(fx);
    ck_assert_int_eq(pleg_generic_get_last_relist_time(fx->pleg),
                     T0_NS + 3 * MINUTE_NS + NSEC_PER_SEC);

    fx->clock.now_ns += 5 * MINUTE_NS + 500 * 1000 * NSEC_PER_USEC;
    assert_unhealthy(fx, "pleg was last seen active 5m0.5s ago; threshold is 3m0s");
}
END_TEST

/* A relist that fails to list does not count as activity. */
START_TEST(test_health_failed_relist)
{
    g_autoptr(Fixture) fx = fixture_new();

    fixture_add_pod(fx, "pod1", "s1", NULL);
    relist(fx);

    fx->clock.now_ns = T0_NS + 2 * MINUTE_NS;
    fake_runtime_fail(fx->fake, FAKE_OP_LIST_POD_SANDBOXES, NULL, 1);
    relist_fails(fx);
    fake_runtime_fail(fx->fake, FAKE_OP_LIST_CONTAINERS, NULL, 1);
    relist_fails(fx);
    assert_healthy(fx);

    fx->clock.now_ns = T0_NS + 3 * MINUTE_NS + NSEC_PER_SEC;
    assert_unhealthy(fx, "pleg was last seen active 3m1s ago; threshold is 3m0s");
    ck_assert_int_eq(pleg_generic_get_last_relist_time(fx->pleg), T0_NS);

    relist(fx);
    assert_healthy(fx);
}
END_TEST

/* A pod whose inspection fails does not make the relist fail. */
START_TEST(test_health_inspection_error)
{
    g_autoptr(Fixture) fx = fixture_new();

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    fake_runtime_fail(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, NULL, -1);
    relist(fx);
    assert_healthy(fx);
    ck_assert_int_eq(pleg_generic_get_last_relist_time(fx->pleg), T0_NS);
}
END_TEST

START_TEST(test_health_custom_threshold)
{
    PlegGenericConfig config;
    g_autoptr(Fixture) fx = NULL;

    pleg_generic_config_init(&config);
    ck_assert_int_eq(config.relist_threshold_usec, PLEG_DEFAULT_RELIST_THRESHOLD_USEC);
    ck_assert_int_eq(config.relist_period_usec, PLEG_DEFAULT_RELIST_PERIOD_USEC);
    ck_assert_uint_eq(config.relist_queue_capacity, PLEG_DEFAULT_RELIST_QUEUE_CAPACITY);
    config.relist_threshold_usec = 10 * G_USEC_PER_SEC;
    fx = fixture_new_full(&config, 0, TRUE);

    relist(fx);
    fx->clock.now_ns += 10 * NSEC_PER_SEC;
    assert_healthy(fx);
    fx->clock.now_ns += 500 * 1000 * NSEC_PER_USEC;
    assert_unhealthy(fx, "pleg was last seen active 10.5s ago; threshold is 10s");
}
END_TEST

START_TEST(test_health_last_seen_gauge)
{
    g_autoptr(Fixture) fx = fixture_new();

    relist(fx);
    fx->clock.now_ns += 4 * MINUTE_NS;
    ck_assert(!pleg_generic_healthy(fx->pleg, NULL));
    ck_assert_double_eq_tol(metric_value(fx, "kubelet_pleg_last_seen_seconds", NULL),
                            (double)T0_NS / NSEC_PER_SEC, 1e-3);

    fx->clock.now_ns += NSEC_PER_SEC;
    relist(fx);
    assert_healthy(fx);
    ck_assert_double_eq_tol(metric_value(fx, "kubelet_pleg_last_seen_seconds", NULL),
                            (double)(T0_NS + 4 * MINUTE_NS + NSEC_PER_SEC) / NSEC_PER_SEC, 1e-3);
}
END_TEST

/* --- the dispatcher's progress, for liveness ---------------------------------------------- */

/* Less than a minute since the dispatcher last finished a global relist (data: the PLEG). */
static gboolean
attempt_ended_within_a_minute(gpointer data)
{
    gint64 age = pleg_generic_get_relist_attempt_age(data);

    return age >= 0 && age < 60 * G_USEC_PER_SEC;
}

/* How long ago the dispatcher last finished a global relist, whatever its outcome: from its
 * start until the first ends, not moved by relists by hand, -1 while it does not run.  A runtime
 * that is down or hangs (calls failing at their deadline) keeps it low while kubelet's health
 * fails; only a relist that does not end (a call without a deadline) lets it grow. */
START_TEST(test_relist_attempt_age)
{
    PlegGenericConfig config;
    g_autoptr(Fixture) fx = NULL;
    g_autofree char *message = NULL;

    pleg_generic_config_init(&config);
    config.relist_period_usec = 10 * 1000;
    fx = fixture_new_full(&config, 0, TRUE);
    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);

    ck_assert_int_eq(pleg_generic_get_relist_attempt_age(fx->pleg), -1);
    relist(fx);
    ck_assert_int_eq(pleg_generic_get_relist_attempt_age(fx->pleg), -1);

    /* The first global relist stuck in the runtime: the age counts from the start. */
    fake_runtime_block(fx->fake, FAKE_OP_LIST_POD_SANDBOXES, NULL);
    pleg_generic_start(fx->pleg);
    ck_assert(fake_runtime_wait_blocked(fx->fake, WAIT_USEC));
    ck_assert_int_eq(pleg_generic_get_relist_attempt_age(fx->pleg), 0);
    fake_clock_advance(&fx->clock, 5 * 60 * G_USEC_PER_SEC);
    ck_assert_int_eq(pleg_generic_get_relist_attempt_age(fx->pleg), 5 * 60 * G_USEC_PER_SEC);

    /* The runtime refuses every listing: the relists end, failed, and the age falls back,
     * while kubelet's check counts from the last success. */
    fake_runtime_fail(fx->fake, FAKE_OP_LIST_POD_SANDBOXES, NULL, -1);
    fake_runtime_unblock(fx->fake);
    ck_assert(wait_until(attempt_ended_within_a_minute, fx->pleg, WAIT_USEC));
    ck_assert(!pleg_generic_healthy(fx->pleg, &message));
    ck_assert_str_eq(message, "pleg was last seen active 5m0s ago; threshold is 3m0s");
    fake_clock_advance(&fx->clock, 10 * 60 * G_USEC_PER_SEC);
    ck_assert(wait_until(attempt_ended_within_a_minute, fx->pleg, WAIT_USEC));

    /* A runtime that hangs: each listing fails at its deadline, and the relists still end. */
    fake_runtime_clear_faults(fx->fake);
    fake_runtime_hang(fx->fake, FAKE_OP_LIST_POD_SANDBOXES, NULL, 20 * 1000, -1);
    fake_clock_advance(&fx->clock, 10 * 60 * G_USEC_PER_SEC);
    ck_assert(wait_until(attempt_ended_within_a_minute, fx->pleg, WAIT_USEC));
    ck_assert(!pleg_generic_healthy(fx->pleg, NULL));

    pleg_generic_stop(fx->pleg);
    ck_assert_int_eq(pleg_generic_get_relist_attempt_age(fx->pleg), -1);
}
END_TEST

/* --- relist state ------------------------------------------------------------------------ */

static gpointer
relist_thread(gpointer data)
{
    relist(data);
    return NULL;
}

/* Before any relist everything is unset; during the first one only "started" holds; after it,
 * "finished" and "succeeded", with the relist's start as the last success and attempt. */
START_TEST(test_relist_state_first_relist)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_auto(PlegRelistState) state = {0};
    GThread *thread;

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    pleg_generic_get_relist_state(fx->pleg, &state);
    ck_assert(!state.first_relist_started);
    ck_assert(!state.first_relist_finished);
    ck_assert(!state.first_relist_succeeded);
    ck_assert_int_eq(state.last_success_ns, 0);
    ck_assert_int_eq(state.last_attempt_ns, 0);
    ck_assert_ptr_null(state.last_error);

    fake_runtime_block(fx->fake, FAKE_OP_LIST_CONTAINERS, NULL);
    thread = g_thread_new("relist", relist_thread, fx);
    ck_assert(fake_runtime_wait_blocked(fx->fake, WAIT_USEC));
    pleg_generic_get_relist_state(fx->pleg, &state);
    ck_assert(state.first_relist_started);
    ck_assert(!state.first_relist_finished);
    ck_assert(!state.first_relist_succeeded);
    ck_assert_int_eq(state.last_attempt_ns, T0_NS);
    ck_assert_int_eq(state.last_success_ns, 0);
    ck_assert_ptr_null(state.last_error);
    pleg_relist_state_clear(&state);

    fake_runtime_unblock(fx->fake);
    g_thread_join(thread);
    pleg_generic_get_relist_state(fx->pleg, &state);
    ck_assert(state.first_relist_started);
    ck_assert(state.first_relist_finished);
    ck_assert(state.first_relist_succeeded);
    ck_assert_int_eq(state.last_attempt_ns, T0_NS);
    ck_assert_int_eq(state.last_success_ns, T0_NS);
    ck_assert_int_eq(state.last_success_ns, pleg_generic_get_last_relist_time(fx->pleg));
    ck_assert_ptr_null(state.last_error);
}
END_TEST

/* A failed relist sets the error and the attempt time and keeps the last success; the next
 * good relist clears the error. */
START_TEST(test_relist_state_failure_then_success)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_auto(PlegRelistState) state = {0};

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    relist(fx);

    fx->clock.now_ns = T0_NS + MINUTE_NS;
    fake_runtime_fail(fx->fake, FAKE_OP_LIST_POD_SANDBOXES, NULL, 1);
    relist_fails(fx);
    pleg_generic_get_relist_state(fx->pleg, &state);
    ck_assert(state.first_relist_started);
    ck_assert(state.first_relist_finished);
    ck_assert(state.first_relist_succeeded);
    ck_assert_int_eq(state.last_success_ns, T0_NS);
    ck_assert_int_eq(state.last_attempt_ns, T0_NS + MINUTE_NS);
    ck_assert_ptr_nonnull(state.last_error);
    ck_assert(g_error_matches(state.last_error, G_IO_ERROR, G_IO_ERROR_FAILED));
    pleg_relist_state_clear(&state);
    ck_assert_ptr_null(state.last_error);
    pleg_relist_state_clear(&state); /* twice is fine */
    pleg_relist_state_clear(NULL);

    fx->clock.now_ns = T0_NS + 2 * MINUTE_NS;
    relist(fx);
    pleg_generic_get_relist_state(fx->pleg, &state);
    ck_assert(state.first_relist_succeeded);
    ck_assert_int_eq(state.last_success_ns, T0_NS + 2 * MINUTE_NS);
    ck_assert_int_eq(state.last_attempt_ns, T0_NS + 2 * MINUTE_NS);
    ck_assert_ptr_null(state.last_error);
}
END_TEST

/* A first relist that fails has finished without succeeding. */
START_TEST(test_relist_state_first_relist_fails)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_auto(PlegRelistState) state = {0};

    fake_runtime_fail(fx->fake, FAKE_OP_LIST_CONTAINERS, NULL, 1);
    relist_fails(fx);
    pleg_generic_get_relist_state(fx->pleg, &state);
    ck_assert(state.first_relist_started);
    ck_assert(state.first_relist_finished);
    ck_assert(!state.first_relist_succeeded);
    ck_assert_int_eq(state.last_success_ns, 0);
    ck_assert_int_eq(state.last_attempt_ns, T0_NS);
    ck_assert(g_error_matches(state.last_error, G_IO_ERROR, G_IO_ERROR_FAILED));
}
END_TEST

static Suite *
health_suite(void)
{
    Suite *suite = suite_create("health");
    TCase *tc = tcase_create("health");

    tcase_add_test(tc, test_health_before_first_relist);
    tcase_add_test(tc, test_health_threshold);
    tcase_add_test(tc, test_health_failed_relist);
    tcase_add_test(tc, test_health_inspection_error);
    tcase_add_test(tc, test_health_custom_threshold);
    tcase_add_test(tc, test_health_last_seen_gauge);
    tcase_add_test(tc, test_relist_attempt_age);
    tcase_add_test(tc, test_relist_state_first_relist);
    tcase_add_test(tc, test_relist_state_failure_then_success);
    tcase_add_test(tc, test_relist_state_first_relist_fails);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    return run_suite(health_suite());
}
