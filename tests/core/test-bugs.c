/* SPDX-License-Identifier: Apache-2.0 */
/* Scenarios from public kubelet bug reports about the Generic PLEG. */
#include "core-test.h"

#define MINUTE_NS (60 * NSEC_PER_SEC)

/* One pod's status call hangs until its deadline: the other pods' events still come in that
 * relist, and the hung pod is retried and reported on the next one. */
START_TEST(test_hung_pod_status)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GError) error = NULL;

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    fixture_add_pod(fx, "pod2", "s2", "c2", NULL);
    fixture_add_pod(fx, "pod3", "s3", "c3", NULL);
    relist(fx);
    g_ptr_array_unref(drain(fx));

    fake_runtime_exit_container(fx->fake, "c1", 1, "Error", T0_NS);
    fake_runtime_exit_container(fx->fake, "c2", 2, "Error", T0_NS);
    fake_runtime_exit_container(fx->fake, "c3", 3, "Error", T0_NS);
    fake_runtime_hang(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, "s2", 300 * 1000, 1);
    fx->clock.now_ns += NSEC_PER_SEC;
    relist(fx);
    assert_drained(fx, "pod1 ContainerDied c1,pod3 ContainerDied c3");
    ck_assert(pleg_pod_cache_get(pleg_generic_get_cache(fx->pleg), "pod2", NULL, &error, NULL));
    ck_assert(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT));
    /* The relist itself succeeded. */
    ck_assert_int_eq(pleg_generic_get_last_relist_time(fx->pleg), T0_NS + NSEC_PER_SEC);

    fx->clock.now_ns += NSEC_PER_SEC;
    relist(fx);
    assert_drained(fx, "pod2 ContainerDied c2");
    ck_assert_int_eq(cache_container_state(fx, "pod2", "c2"), PLEG_CONTAINER_STATE_EXITED);
}
END_TEST

/* The same with the dispatcher running: the hang delays the relist but no pod is lost. */
START_TEST(test_hung_pod_status_dispatcher)
{
    PlegGenericConfig config;
    g_autoptr(Fixture) fx = NULL;
    g_autoptr(GPtrArray) others =
        g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_lifecycle_event_unref);
    g_autoptr(PlegPodLifecycleEvent) event = NULL;

    pleg_generic_config_init(&config);
    config.relist_period_usec = 10 * 1000;
    fx = fixture_new_full(&config, 0, FALSE);
    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    fixture_add_pod(fx, "pod2", "s2", "c2", NULL);
    fake_runtime_hang(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, "s2", 300 * 1000, 1);
    pleg_generic_start(fx->pleg);

    event = wait_event_for(fx, "pod2", PLEG_CONTAINER_STARTED, "c2", WAIT_USEC, others);
    ck_assert(event != NULL);
    g_clear_pointer(&event, pleg_pod_lifecycle_event_unref);
    event = wait_event_for(fx, "pod2", PLEG_CONTAINER_STARTED, "s2", WAIT_USEC, others);
    ck_assert(event != NULL);
    /* pod1 was reported in the relist that hung on pod2, before pod2. */
    ck_assert_uint_eq(count_events(others, "pod1", PLEG_CONTAINER_STARTED, "c1"), 1);
    ck_assert_uint_eq(count_events(others, "pod1", PLEG_CONTAINER_STARTED, "s1"), 1);
}
END_TEST

static gpointer
relist_thread(gpointer data)
{
    relist(data);
    return NULL;
}

/* Beyond kubelet: a global relist reconciles pods on several threads, so a pod whose status call
 * blocks holds back no other pod's events; its own come in the same relist once it answers. */
START_TEST(test_blocked_pod_holds_back_nobody)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GPtrArray) events = NULL;
    g_autoptr(GPtrArray) late = NULL;
    GThread *thread;

    for (guint i = 1; i <= 6; i++) {
        g_autofree char *uid = g_strdup_printf("pod%u", i);
        g_autofree char *sid = g_strdup_printf("s%u", i);
        g_autofree char *cid = g_strdup_printf("c%u", i);
        fixture_add_pod(fx, uid, sid, cid, NULL);
    }
    relist(fx);
    g_ptr_array_unref(drain(fx));

    for (guint i = 1; i <= 6; i++) {
        g_autofree char *cid = g_strdup_printf("c%u", i);
        fake_runtime_exit_container(fx->fake, cid, i, "Error", T0_NS);
    }
    fake_runtime_block(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, "s1");
    thread = g_thread_new("relist", relist_thread, fx);
    ck_assert(fake_runtime_wait_blocked(fx->fake, WAIT_USEC));

    events = wait_events(fx, 5, WAIT_USEC);
    ck_assert_uint_eq(events->len, 5);
    ck_assert_uint_eq(count_events(events, "pod1", PLEG_CONTAINER_DIED, NULL), 0);
    for (guint i = 2; i <= 6; i++) {
        g_autofree char *uid = g_strdup_printf("pod%u", i);
        ck_assert_uint_eq(count_events(events, uid, PLEG_CONTAINER_DIED, NULL), 1);
    }

    fake_runtime_unblock(fx->fake);
    g_thread_join(thread);
    late = drain(fx);
    ck_assert_uint_eq(late->len, 1);
    ck_assert_uint_eq(count_events(late, "pod1", PLEG_CONTAINER_DIED, "c1"), 1);
}
END_TEST

/* ListContainers hangs: health holds until the threshold after the last good relist, then
 * reports kubelet's message, and recovers with the next good relist. */
START_TEST(test_hung_list)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autofree char *message = NULL;

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);

    /* Hanging from the very start: no nonsense duration. */
    fake_runtime_hang(fx->fake, FAKE_OP_LIST_CONTAINERS, NULL, 50 * 1000, -1);
    relist_fails(fx);
    fx->clock.now_ns += 10 * MINUTE_NS;
    ck_assert(!pleg_generic_healthy(fx->pleg, &message));
    ck_assert_str_eq(message, "pleg has yet to be successful");
    g_clear_pointer(&message, g_free);

    fake_runtime_clear_faults(fx->fake);
    relist(fx);
    ck_assert(pleg_generic_healthy(fx->pleg, NULL));
    g_ptr_array_unref(drain(fx));
    gint64 good = fx->clock.now_ns;

    fake_runtime_hang(fx->fake, FAKE_OP_LIST_CONTAINERS, NULL, 50 * 1000, -1);
    for (int i = 1; i <= 3; i++) {
        fx->clock.now_ns = good + i * MINUTE_NS;
        relist_fails(fx);
        ck_assert_msg(pleg_generic_healthy(fx->pleg, &message), "%s", message);
    }
    fx->clock.now_ns = good + 3 * MINUTE_NS + 30 * NSEC_PER_SEC;
    ck_assert(!pleg_generic_healthy(fx->pleg, &message));
    ck_assert_str_eq(message, "pleg was last seen active 3m30s ago; threshold is 3m0s");
    g_clear_pointer(&message, g_free);
    ck_assert_uint_eq(pleg_event_channel_get_length(fx->channel), 0);
    ck_assert_int_eq(pleg_generic_get_last_relist_time(fx->pleg), good);

    fake_runtime_clear_faults(fx->fake);
    fake_runtime_set_container_state(fx->fake, "c1", PLEG_CONTAINER_STATE_EXITED);
    relist(fx);
    ck_assert(pleg_generic_healthy(fx->pleg, NULL));
    message = drain_str(fx);
    ck_assert_str_eq(message, "pod1 ContainerDied c1");
}
END_TEST

/* A container exits and is removed, and its sandbox removed too, all between two relists:
 * ContainerDied then ContainerRemoved for each, and the pod's cache entry goes. */
START_TEST(test_everything_gone_between_relists)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GPtrArray) events = NULL;
    g_autofree char *text = NULL;

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    fixture_add_pod(fx, "pod2", "s2", "c2", NULL);
    relist(fx);
    g_ptr_array_unref(drain(fx));

    fake_runtime_exit_container(fx->fake, "c1", 0, "Completed", T0_NS);
    fake_runtime_remove_container(fx->fake, "c1");
    fake_runtime_set_sandbox_state(fx->fake, "s1", PLEG_POD_SANDBOX_STATE_NOTREADY);
    fake_runtime_remove_sandbox(fx->fake, "s1");
    relist(fx);
    events = drain(fx);
    text = sorted_events_str(events);
    ck_assert_str_eq(text, "pod1 ContainerDied c1,pod1 ContainerRemoved c1,"
                           "pod1 ContainerDied s1,pod1 ContainerRemoved s1");
    ck_assert(!pleg_pod_cache_get(pleg_generic_get_cache(fx->pleg), "pod1", NULL, NULL, NULL));
    ck_assert(pleg_pod_cache_get(pleg_generic_get_cache(fx->pleg), "pod2", NULL, NULL, NULL));

    relist(fx);
    g_clear_pointer(&events, g_ptr_array_unref);
    events = drain(fx);
    ck_assert_uint_eq(events->len, 0);
}
END_TEST

/* A container whose sandbox is gone is placed by its pod UID label and still reported. */
START_TEST(test_container_outlives_sandbox)
{
    g_autoptr(Fixture) fx = fixture_new();

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    relist(fx);
    g_ptr_array_unref(drain(fx));

    fake_runtime_remove_sandbox(fx->fake, "s1");
    fake_runtime_set_container_state(fx->fake, "c1", PLEG_CONTAINER_STATE_EXITED);
    relist(fx);
    assert_drained(fx, "pod1 ContainerDied c1,pod1 ContainerDied s1,pod1 ContainerRemoved s1");
    ck_assert_int_eq(cache_container_state(fx, "pod1", "c1"), PLEG_CONTAINER_STATE_EXITED);

    fake_runtime_remove_container(fx->fake, "c1");
    relist(fx);
    assert_drained(fx, "pod1 ContainerRemoved c1");
    ck_assert(!pleg_pod_cache_get(pleg_generic_get_cache(fx->pleg), "pod1", NULL, NULL, NULL));
}
END_TEST

/* A listing that repeats a container id (CRI ids are unique, a broken runtime is not) counts
 * the id once, in the state of its first entry, as kubelet's getContainersFromPods() and
 * getContainerState() do: the same listing again gives no events, and the id's removal one
 * ContainerDied and one ContainerRemoved. */
START_TEST(test_repeated_container_id)
{
    g_autoptr(Fixture) fx = fixture_new();

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    fake_runtime_add_duplicate_container(fx->fake, "c1", "s1", PLEG_CONTAINER_STATE_EXITED);
    relist(fx);
    assert_drained(fx, "pod1 ContainerStarted c1,pod1 ContainerStarted s1");

    relist(fx);
    assert_drained(fx, "");

    fake_runtime_remove_container(fx->fake, "c1");
    fake_runtime_remove_container(fx->fake, "c1");
    relist(fx);
    assert_drained(fx, "pod1 ContainerDied c1,pod1 ContainerRemoved c1");
}
END_TEST

/* A container listed under its own sandbox's id: kubelet's getContainerState() finds the id
 * among the containers first, and so does a relist, every time. */
START_TEST(test_container_id_of_a_sandbox)
{
    g_autoptr(Fixture) fx = fixture_new();

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    fake_runtime_add_container(fx->fake, "s1", "s1", PLEG_CONTAINER_STATE_EXITED);
    relist(fx);
    assert_drained(fx, "pod1 ContainerStarted c1,pod1 ContainerDied s1");

    relist(fx);
    assert_drained(fx, "");
}
END_TEST

static Suite *
bugs_suite(void)
{
    Suite *suite = suite_create("bugs");
    TCase *tc = tcase_create("bugs");

    tcase_add_test(tc, test_hung_pod_status);
    tcase_add_test(tc, test_hung_pod_status_dispatcher);
    tcase_add_test(tc, test_blocked_pod_holds_back_nobody);
    tcase_add_test(tc, test_hung_list);
    tcase_add_test(tc, test_everything_gone_between_relists);
    tcase_add_test(tc, test_container_outlives_sandbox);
    tcase_add_test(tc, test_repeated_container_id);
    tcase_add_test(tc, test_container_id_of_a_sandbox);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    return run_suite(bugs_suite());
}
