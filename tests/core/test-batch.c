/* SPDX-License-Identifier: Apache-2.0 */
/* Relists that inspect many pods at once: the bound on status calls in flight, a hung pod
 * that holds back no other, and the dispatcher's pass over every queued request. */
#include "core-test.h"

#define HOUR_USEC (G_GINT64_CONSTANT(3600) * G_USEC_PER_SEC)

static Fixture *
bounded_fixture(guint max_status_calls_in_flight)
{
    PlegGenericConfig config;

    pleg_generic_config_init(&config);
    if (max_status_calls_in_flight)
        config.max_status_calls_in_flight = max_status_calls_in_flight;
    return fixture_new_full(&config, 0, TRUE);
}

static void
add_pods(Fixture *fx, guint n)
{
    for (guint i = 0; i < n; i++) {
        g_autofree char *uid = g_strdup_printf("pod%u", i);
        g_autofree char *sandbox = g_strdup_printf("s%u", i);

        fixture_add_pod(fx, uid, sandbox, NULL);
    }
}

START_TEST(test_config_default)
{
    PlegGenericConfig config;

    pleg_generic_config_init(&config);
    ck_assert_uint_eq(config.max_status_calls_in_flight, PLEG_DEFAULT_MAX_STATUS_CALLS_IN_FLIGHT);
    ck_assert_uint_eq(PLEG_DEFAULT_MAX_STATUS_CALLS_IN_FLIGHT, 64);
}
END_TEST

/* Ten pods of one sandbox each, a bound of four calls: four inspections run at once (not one
 * pod at a time), and never a fifth call while four are out. */
START_TEST(test_bound_never_exceeded)
{
    g_autoptr(Fixture) fx = bounded_fixture(4);
    RelistThread rt;
    g_autoptr(GPtrArray) events = NULL;

    add_pods(fx, 10);
    fake_runtime_block(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, NULL);
    relist_thread_start(&rt, fx->pleg);
    ck_assert(fake_runtime_wait_blocked_count(fx->fake, 4, WAIT_USEC));
    ck_assert_uint_eq(fake_runtime_get_max_status_in_flight(fx->fake), 4);
    fake_runtime_unblock(fx->fake);
    relist_thread_join(&rt);

    ck_assert_uint_eq(fake_runtime_get_max_status_in_flight(fx->fake), 4);
    ck_assert_uint_eq(fake_runtime_get_call_count(fx->fake, FAKE_OP_POD_SANDBOX_STATUS), 10);
    events = drain(fx);
    for (guint i = 0; i < 10; i++) {
        g_autofree char *uid = g_strdup_printf("pod%u", i);
        g_autofree char *sandbox = g_strdup_printf("s%u", i);

        ck_assert_uint_eq(count_events(events, uid, PLEG_CONTAINER_STARTED, sandbox), 1);
    }
}
END_TEST

/* A pod with more statuses to ask than the bound asks them in turns. */
START_TEST(test_bound_one_call)
{
    g_autoptr(Fixture) fx = bounded_fixture(1);
    g_autoptr(GPtrArray) events = NULL;

    fixture_add_pod(fx, "pod1", "s1", "c1", "c2", NULL);
    fixture_add_pod(fx, "pod2", "s2", "c3", NULL);
    relist(fx);
    ck_assert_uint_eq(fake_runtime_get_max_status_in_flight(fx->fake), 1);
    events = drain(fx);
    ck_assert_uint_eq(events->len, 5);
    ck_assert_int_eq(cache_container_state(fx, "pod1", "c2"), PLEG_CONTAINER_STATE_RUNNING);
    ck_assert_int_eq(cache_container_state(fx, "pod2", "c3"), PLEG_CONTAINER_STATE_RUNNING);
}
END_TEST

/* Four pods whose status calls hang (as many as the old pool had threads) hold back none of
 * the six others: those are published while the four still wait. */
START_TEST(test_hung_pods_hold_back_no_other)
{
    g_autoptr(Fixture) fx = bounded_fixture(0);
    RelistThread rt;
    g_autoptr(GPtrArray) events = NULL;
    g_autoptr(GPtrArray) later = NULL;

    add_pods(fx, 10);
    for (guint i = 0; i < 4; i++) {
        g_autofree char *sandbox = g_strdup_printf("s%u", i);

        fake_runtime_block(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, sandbox);
    }
    relist_thread_start(&rt, fx->pleg);
    ck_assert(fake_runtime_wait_blocked_count(fx->fake, 4, WAIT_USEC));
    events = wait_events(fx, 6, WAIT_USEC);
    ck_assert_uint_eq(events->len, 6);
    for (guint i = 4; i < 10; i++) {
        g_autofree char *uid = g_strdup_printf("pod%u", i);

        ck_assert_uint_eq(count_events(events, uid, PLEG_CONTAINER_STARTED, NULL), 1);
    }
    ck_assert_uint_eq(pleg_event_channel_get_length(fx->channel), 0);

    fake_runtime_unblock(fx->fake);
    relist_thread_join(&rt);
    later = drain(fx);
    ck_assert_uint_eq(later->len, 4);
    for (guint i = 0; i < 4; i++) {
        g_autofree char *uid = g_strdup_printf("pod%u", i);

        ck_assert_uint_eq(count_events(later, uid, PLEG_CONTAINER_STARTED, NULL), 1);
    }
}
END_TEST

/* Stopping cancels the relist's status calls: the call in flight ends, and the pods not yet
 * asked are not asked at all, whatever the runtime would do with a cancelled call. */
START_TEST(test_stop_asks_no_more)
{
    g_autoptr(Fixture) fx = bounded_fixture(1);

    add_pods(fx, 5);
    for (guint i = 0; i < 5; i++) {
        g_autofree char *sandbox = g_strdup_printf("s%u", i);

        fake_runtime_block(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, sandbox);
    }
    pleg_generic_start(fx->pleg);
    /* One call in flight at most: the first pod's, blocked. */
    ck_assert(fake_runtime_wait_blocked_count(fx->fake, 1, WAIT_USEC));
    pleg_generic_stop(fx->pleg);

    ck_assert_uint_eq(fake_runtime_get_call_count(fx->fake, FAKE_OP_POD_SANDBOX_STATUS), 1);
}
END_TEST

/* A pod whose inspection fails is retried by the next relist; the others are published. */
START_TEST(test_failed_pod_alone)
{
    g_autoptr(Fixture) fx = bounded_fixture(2);
    g_autoptr(GPtrArray) events = NULL;
    g_autoptr(GPtrArray) later = NULL;

    add_pods(fx, 6);
    fake_runtime_fail(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, "s3", 1);
    relist(fx);
    events = drain(fx);
    ck_assert_uint_eq(events->len, 5);
    ck_assert_uint_eq(count_events(events, "pod3", PLEG_CONTAINER_STARTED, NULL), 0);
    relist(fx);
    later = drain(fx);
    ck_assert_uint_eq(later->len, 1);
    ck_assert_uint_eq(count_events(later, "pod3", PLEG_CONTAINER_STARTED, "s3"), 1);
}
END_TEST

/* --- the dispatcher's pass over the queue ------------------------------------------------- */

static Fixture *
dispatcher_fixture_full(gint64 period_usec, guint queue_capacity)
{
    PlegGenericConfig config;

    pleg_generic_config_init(&config);
    config.relist_period_usec = period_usec;
    if (queue_capacity)
        config.relist_queue_capacity = queue_capacity;
    return fixture_new_full(&config, 0, FALSE);
}

static Fixture *
dispatcher_fixture(gint64 period_usec)
{
    return dispatcher_fixture_full(period_usec, 0);
}

/* Holds the dispatcher inside a targeted relist of pod1 (its listing of sandbox s1's
 * containers), asked by the evented PLEG, until fake_runtime_unblock(). */
static void
hold_in_pod1_relist(Fixture *fx)
{
    fake_runtime_block(fx->fake, FAKE_OP_LIST_CONTAINERS, "s1");
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "pod1", PLEG_RELIST_SOURCE_EVENTED_PLEG),
                     PLEG_RELIST_REQUEST_QUEUED);
    ck_assert(fake_runtime_wait_blocked(fx->fake, WAIT_USEC));
}

static const PlegPodLifecycleEvent *
find_event(GPtrArray *events, const char *pod_uid, const char *id)
{
    for (guint i = 0; i < events->len; i++) {
        const PlegPodLifecycleEvent *e = g_ptr_array_index(events, i);

        if (g_str_equal(e->pod_uid, pod_uid) && g_strcmp0(e->container_id, id) == 0)
            return e;
    }
    return NULL;
}

/* Requests queued while the dispatcher is busy are served in one pass: their pods are listed
 * once together, each published as from the first source that asked for it, and every request
 * is counted as served. */
START_TEST(test_queued_requests_one_pass)
{
    g_autoptr(Fixture) fx = dispatcher_fixture(HOUR_USEC);
    g_autoptr(GPtrArray) events = NULL;
    CountCond cond = {NULL, 5};
    static const struct {
        const char *uid, *container;
        PlegRelistSource source;
    } asked[] = {
        {"pod1", "c1", PLEG_RELIST_SOURCE_EVENTED_PLEG},
        {"pod2", "c2", PLEG_RELIST_SOURCE_EVENTED_PLEG},
        {"pod3", "c3", PLEG_RELIST_SOURCE_POST_SYNC},
        {"pod4", "c4", PLEG_RELIST_SOURCE_POST_ALLOCATION},
        {"pod2", "c2", PLEG_RELIST_SOURCE_POST_SYNC},
    };

    cond.fx = fx;
    add_pods(fx, 5); /* pod0 .. pod4 */
    pleg_generic_start(fx->pleg);
    g_ptr_array_unref(wait_events(fx, 5, WAIT_USEC));
    ck_assert_uint_eq(fake_runtime_get_call_count(fx->fake, FAKE_OP_LIST_POD_SANDBOXES), 1);

    fake_runtime_add_container(fx->fake, "c1", "s1", PLEG_CONTAINER_STATE_RUNNING);
    fake_runtime_add_container(fx->fake, "c2", "s2", PLEG_CONTAINER_STATE_RUNNING);
    fake_runtime_add_container(fx->fake, "c3", "s3", PLEG_CONTAINER_STATE_RUNNING);
    fake_runtime_add_container(fx->fake, "c4", "s4", PLEG_CONTAINER_STATE_RUNNING);
    hold_in_pod1_relist(fx);
    for (guint i = 1; i < G_N_ELEMENTS(asked); i++)
        ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, asked[i].uid, asked[i].source),
                         PLEG_RELIST_REQUEST_QUEUED);
    fake_runtime_unblock(fx->fake);

    ck_assert(wait_until(pod_relists_reach, &cond, WAIT_USEC));
    events = wait_events(fx, 4, WAIT_USEC);
    ck_assert_uint_eq(events->len, 4);
    for (guint i = 0; i < 4; i++) {
        const PlegPodLifecycleEvent *e = find_event(events, asked[i].uid, asked[i].container);

        ck_assert_msg(e != NULL, "no event for %s", asked[i].container);
        ck_assert_int_eq(e->type, PLEG_CONTAINER_STARTED);
        ck_assert_int_eq(e->relist_source, asked[i].source);
    }
    /* The global relist, pod1's own, then one for the other three pods together. */
    ck_assert_uint_eq(fake_runtime_get_call_count(fx->fake, FAKE_OP_LIST_POD_SANDBOXES), 3);
    ck_assert_uint_eq(metric_count(fx, "kubelet_pleg_pod_relist_duration_seconds", NULL), 5);
    ck_assert_int_eq(requests(fx, "evented_pleg", "queued"), 2);
    ck_assert_int_eq(requests(fx, "post_sync", "queued"), 2);
    ck_assert_int_eq(requests(fx, "post_sync", "covered"), 0);
    ck_assert_uint_eq(pleg_event_channel_get_length(fx->channel), 0);
}
END_TEST

typedef struct {
    gint64 until_usec;
} Deadline;

static gboolean
deadline_passed(gpointer data)
{
    const Deadline *d = data;

    return g_get_monotonic_time() >= d->until_usec;
}

/* A global relist that falls due while requests wait runs before them, and covers those
 * queued before it started: the pass serves none of them. */
START_TEST(test_due_global_first_covers_queue)
{
    const gint64 period_usec = G_USEC_PER_SEC / 2;
    g_autoptr(Fixture) fx = dispatcher_fixture(period_usec);
    CountCond cond = {NULL, 1};
    Deadline due;

    cond.fx = fx;
    add_pods(fx, 3);
    pleg_generic_start(fx->pleg);
    g_ptr_array_unref(wait_events(fx, 3, WAIT_USEC));

    hold_in_pod1_relist(fx);
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "pod0", PLEG_RELIST_SOURCE_POST_SYNC),
                     PLEG_RELIST_REQUEST_QUEUED);
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "pod2", PLEG_RELIST_SOURCE_POST_SYNC),
                     PLEG_RELIST_REQUEST_QUEUED);
    /* The last global relist ended before now: one is due once a period has passed. */
    due.until_usec = g_get_monotonic_time() + period_usec;
    ck_assert(wait_until(deadline_passed, &due, WAIT_USEC));
    fake_runtime_unblock(fx->fake);

    ck_assert(wait_until(pod_relists_reach, &cond, WAIT_USEC));
    ck_assert(requests_reach(fx, "post_sync", "covered", 2));
    ck_assert_int_eq(requests(fx, "post_sync", "covered"), 2);
    ck_assert_uint_eq(metric_count(fx, "kubelet_pleg_pod_relist_duration_seconds", NULL), 1);
}
END_TEST

/* Requests made while a targeted pass runs are taken for the next pass as they come, one entry
 * a pod, so a storm of requests for distinct pods is not dropped at the queue's capacity: here
 * six requests during pod1's pass, against a queue of two, are all served by one more pass. */
START_TEST(test_pass_takes_past_capacity)
{
    g_autoptr(Fixture) fx = dispatcher_fixture_full(HOUR_USEC, 2);
    g_autoptr(GPtrArray) events = NULL;
    CountCond cond = {NULL, 7};
    static const char *const asked[] = {"pod0", "pod2", "pod3", "pod4", "pod5", "pod0"};

    cond.fx = fx;
    add_pods(fx, 6);
    pleg_generic_start(fx->pleg);
    g_ptr_array_unref(wait_events(fx, 6, WAIT_USEC));

    for (guint i = 0; i < 6; i++) {
        g_autofree char *id = g_strdup_printf("c%u", i);
        g_autofree char *sandbox = g_strdup_printf("s%u", i);

        fake_runtime_add_container(fx->fake, id, sandbox, PLEG_CONTAINER_STATE_RUNNING);
    }
    hold_in_pod1_relist(fx);
    for (guint i = 0; i < G_N_ELEMENTS(asked); i++)
        ck_assert_int_eq(
            pleg_generic_request_relist(fx->pleg, asked[i], PLEG_RELIST_SOURCE_EVENTED_PLEG),
            PLEG_RELIST_REQUEST_QUEUED);
    fake_runtime_unblock(fx->fake);

    ck_assert(wait_until(pod_relists_reach, &cond, WAIT_USEC));
    events = wait_events(fx, 6, WAIT_USEC);
    for (guint i = 0; i < 6; i++) {
        g_autofree char *uid = g_strdup_printf("pod%u", i);
        g_autofree char *id = g_strdup_printf("c%u", i);

        ck_assert_uint_eq(count_events(events, uid, PLEG_CONTAINER_STARTED, id), 1);
    }
    /* The global relist, pod1's, then one listing for the five pods of the next pass. */
    ck_assert_uint_eq(fake_runtime_get_call_count(fx->fake, FAKE_OP_LIST_POD_SANDBOXES), 3);
    ck_assert_uint_eq(metric_count(fx, "kubelet_pleg_pod_relist_duration_seconds", NULL), 7);
    ck_assert_int_eq(requests(fx, "evented_pleg", "queued"), 7);
    ck_assert_int_eq(requests(fx, "evented_pleg", "dropped"), 0);
}
END_TEST

/* The next pass holds as many pods as the PLEG knows (or the queue's capacity, if more); past
 * that, requests wait in the queue, and past its capacity they are dropped: pending work stays
 * bounded when a runtime names pods that do not exist. */
START_TEST(test_next_pass_bounded)
{
    g_autoptr(Fixture) fx = dispatcher_fixture_full(HOUR_USEC, 2);
    CountCond cond = {NULL, 7};

    cond.fx = fx;
    add_pods(fx, 3);
    pleg_generic_start(fx->pleg);
    g_ptr_array_unref(wait_events(fx, 3, WAIT_USEC));

    hold_in_pod1_relist(fx);
    /* Three pods known: the next pass takes three unknown ones, and more of the same pods. */
    for (guint i = 0; i < 3; i++) {
        g_autofree char *uid = g_strdup_printf("ghost%u", i);

        ck_assert_int_eq(
            pleg_generic_request_relist(fx->pleg, uid, PLEG_RELIST_SOURCE_EVENTED_PLEG),
            PLEG_RELIST_REQUEST_QUEUED);
    }
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "ghost0", PLEG_RELIST_SOURCE_POST_SYNC),
                     PLEG_RELIST_REQUEST_QUEUED);
    /* A fourth pod waits in the queue, then a fifth; the queue of two is full for a sixth. */
    ck_assert_int_eq(
        pleg_generic_request_relist(fx->pleg, "ghost3", PLEG_RELIST_SOURCE_EVENTED_PLEG),
        PLEG_RELIST_REQUEST_QUEUED);
    ck_assert_int_eq(
        pleg_generic_request_relist(fx->pleg, "ghost4", PLEG_RELIST_SOURCE_EVENTED_PLEG),
        PLEG_RELIST_REQUEST_QUEUED);
    ck_assert_int_eq(
        pleg_generic_request_relist(fx->pleg, "ghost5", PLEG_RELIST_SOURCE_EVENTED_PLEG),
        PLEG_RELIST_REQUEST_DROPPED);
    ck_assert_int_eq(requests(fx, "evented_pleg", "dropped"), 1);
    fake_runtime_unblock(fx->fake);

    /* pod1's relist, then one pass: ghost0 (twice asked), ghost1, ghost2, ghost3, ghost4. */
    ck_assert(wait_until(pod_relists_reach, &cond, WAIT_USEC));
    ck_assert_int_eq(requests(fx, "evented_pleg", "queued"), 6);
    ck_assert_int_eq(requests(fx, "post_sync", "queued"), 1);
    ck_assert_uint_eq(pleg_event_channel_get_length(fx->channel), 0);
}
END_TEST

static Suite *
batch_suite(void)
{
    Suite *suite = suite_create("batch");
    TCase *tc = tcase_create("bound");

    tcase_add_test(tc, test_config_default);
    tcase_add_test(tc, test_bound_never_exceeded);
    tcase_add_test(tc, test_bound_one_call);
    tcase_add_test(tc, test_hung_pods_hold_back_no_other);
    tcase_add_test(tc, test_stop_asks_no_more);
    tcase_add_test(tc, test_failed_pod_alone);
    suite_add_tcase(suite, tc);

    tc = tcase_create("pass");
    tcase_add_test(tc, test_queued_requests_one_pass);
    tcase_add_test(tc, test_due_global_first_covers_queue);
    tcase_add_test(tc, test_pass_takes_past_capacity);
    tcase_add_test(tc, test_next_pass_bounded);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    return run_suite(batch_suite());
}
