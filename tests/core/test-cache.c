/* SPDX-License-Identifier: Apache-2.0 */
/* The pod cache, pod inspection errors and reinspection. */
#include "core-test.h"

static PlegPodCache *
cache(Fixture *fx)
{
    return pleg_generic_get_cache(fx->pleg);
}

START_TEST(test_cache_status)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(PlegPodStatus) status = NULL;
    g_autoptr(GError) error = NULL;
    gint64 modified = 0;
    const PlegContainerStatus *container;
    static const char *const ips[] = {"10.0.0.5", "fd00::5", NULL};

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    fake_runtime_set_sandbox_ips(fx->fake, "s1", ips);
    ck_assert(!pleg_pod_cache_get(cache(fx), "pod1", &status, &error, &modified));
    ck_assert_uint_eq(pleg_pod_cache_get_size(cache(fx)), 0);
    ck_assert_int_eq(pleg_pod_cache_get_global_timestamp(cache(fx)), 0);

    relist(fx);
    ck_assert(pleg_pod_cache_get(cache(fx), "pod1", &status, &error, &modified));
    ck_assert(error == NULL);
    ck_assert(status != NULL);
    ck_assert_int_ge(modified, T0_NS);
    ck_assert_str_eq(status->uid, "pod1");
    ck_assert_str_eq(status->name, "pod-pod1");
    ck_assert_str_eq(status->namespace_, "default");
    ck_assert(g_strv_equal((const char *const *)status->ips, ips));
    ck_assert_uint_eq(status->sandbox_statuses->len, 1);
    ck_assert_str_eq(((PlegPodSandboxStatus *)g_ptr_array_index(status->sandbox_statuses, 0))->id,
                     "s1");
    ck_assert_uint_eq(status->container_statuses->len, 1);
    container = pleg_pod_status_find_container(status, "c1");
    ck_assert(container != NULL);
    ck_assert_int_eq(container->state, PLEG_CONTAINER_STATE_RUNNING);
    ck_assert_int_eq(pleg_pod_cache_get_global_timestamp(cache(fx)), T0_NS);
    ck_assert_uint_eq(pleg_pod_cache_get_size(cache(fx)), 1);
}
END_TEST

/* The global timestamp is the start of the last global relist: the clock moves during the
 * relist (inside a runtime call) and the timestamp keeps the start. */
static gint64 clock_step_ns;

static gint64
stepping_clock(gpointer data)
{
    FakeClock *clock = data;
    gint64 now = fake_clock_now(clock);

    fake_clock_set(clock, now + clock_step_ns);
    return now;
}

START_TEST(test_global_timestamp)
{
    g_autoptr(Fixture) fx = fixture_new();

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    relist(fx);
    ck_assert_int_eq(pleg_pod_cache_get_global_timestamp(cache(fx)), T0_NS);
    ck_assert_int_eq(pleg_generic_get_last_relist_time(fx->pleg), T0_NS);

    fx->clock.now_ns = T0_NS + 5 * NSEC_PER_SEC;
    relist(fx);
    ck_assert_int_eq(pleg_pod_cache_get_global_timestamp(cache(fx)), T0_NS + 5 * NSEC_PER_SEC);

    /* A failed relist does not move it. */
    fx->clock.now_ns = T0_NS + 10 * NSEC_PER_SEC;
    fake_runtime_fail(fx->fake, FAKE_OP_LIST_CONTAINERS, NULL, 1);
    relist_fails(fx);
    ck_assert_int_eq(pleg_pod_cache_get_global_timestamp(cache(fx)), T0_NS + 5 * NSEC_PER_SEC);
    ck_assert_int_eq(pleg_generic_get_last_relist_time(fx->pleg), T0_NS + 5 * NSEC_PER_SEC);

    /* Nor does a targeted relist. */
    fake_runtime_set_container_state(fx->fake, "c1", PLEG_CONTAINER_STATE_EXITED);
    ck_assert(pleg_generic_relist_pod(fx->pleg, "pod1", PLEG_RELIST_SOURCE_POST_SYNC, NULL));
    ck_assert_int_eq(cache_container_state(fx, "pod1", "c1"), PLEG_CONTAINER_STATE_EXITED);
    ck_assert_int_eq(pleg_pod_cache_get_global_timestamp(cache(fx)), T0_NS + 5 * NSEC_PER_SEC);
}
END_TEST

START_TEST(test_global_timestamp_is_start)
{
    static FakeClock clock = {T0_NS};
    PlegGenericConfig config;
    g_autoptr(Fixture) fx = NULL;
    gint64 start;

    /* Every reading of this clock advances it by 1 ms. */
    clock_step_ns = 1000 * NSEC_PER_USEC;
    pleg_generic_config_init(&config);
    config.clock = stepping_clock;
    config.clock_data = &clock;
    fx = fixture_new_full(&config, 0, FALSE);
    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    fixture_add_pod(fx, "pod2", "s2", "c2", NULL);
    start = fake_clock_now(&clock);
    relist(fx);
    ck_assert_int_eq(pleg_pod_cache_get_global_timestamp(cache(fx)), start);
    ck_assert_int_eq(pleg_generic_get_last_relist_time(fx->pleg), start);
}
END_TEST

/* PodSandboxStatus fails for a pod: the error is cached, its events are held back, and the same
 * events come once inspection succeeds. */
START_TEST(test_status_error_then_success)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(PlegPodStatus) status = NULL;
    g_autoptr(GError) error = NULL;

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    fixture_add_pod(fx, "pod2", "s2", "c2", NULL);
    fake_runtime_fail(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, "s1", 1);
    relist(fx);
    assert_drained(fx, "pod2 ContainerStarted c2,pod2 ContainerStarted s2");
    ck_assert(pleg_pod_cache_get(cache(fx), "pod1", &status, &error, NULL));
    ck_assert(status == NULL);
    ck_assert(error != NULL);
    g_clear_error(&error);
    ck_assert_int_eq(cache_container_state(fx, "pod2", "c2"), PLEG_CONTAINER_STATE_RUNNING);

    fx->clock.now_ns += NSEC_PER_SEC;
    relist(fx);
    assert_drained(fx, "pod1 ContainerStarted c1,pod1 ContainerStarted s1");
    ck_assert(pleg_pod_cache_get(cache(fx), "pod1", &status, &error, NULL));
    ck_assert(error == NULL);
    ck_assert(status != NULL);
    ck_assert(pleg_pod_status_find_container(status, "c1") != NULL);
    ck_assert_int_eq(pleg_pod_cache_get_global_timestamp(cache(fx)), T0_NS + NSEC_PER_SEC);

    /* ContainerStatus failing fails the pod's inspection just the same. */
    fake_runtime_set_container_state(fx->fake, "c1", PLEG_CONTAINER_STATE_EXITED);
    fake_runtime_fail(fx->fake, FAKE_OP_CONTAINER_STATUS, "c1", 2);
    relist(fx);
    relist(fx);
    assert_drained(fx, "");
    ck_assert_int_eq(cache_container_state(fx, "pod1", "c1"), -1);
    relist(fx);
    assert_drained(fx, "pod1 ContainerDied c1");
    ck_assert_int_eq(cache_container_state(fx, "pod1", "c1"), PLEG_CONTAINER_STATE_EXITED);
}
END_TEST

START_TEST(test_cache_entry_removed)
{
    g_autoptr(Fixture) fx = fixture_new();

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    fixture_add_pod(fx, "pod2", "s2", NULL);
    relist(fx);
    g_ptr_array_unref(drain(fx));
    ck_assert_uint_eq(pleg_pod_cache_get_size(cache(fx)), 2);

    fake_runtime_remove_container(fx->fake, "c1");
    fake_runtime_remove_sandbox(fx->fake, "s1");
    relist(fx);
    assert_drained(fx, "pod1 ContainerDied c1,pod1 ContainerRemoved c1,"
                       "pod1 ContainerDied s1,pod1 ContainerRemoved s1");
    ck_assert(!pleg_pod_cache_get(cache(fx), "pod1", NULL, NULL, NULL));
    ck_assert(pleg_pod_cache_get(cache(fx), "pod2", NULL, NULL, NULL));
    ck_assert_uint_eq(pleg_pod_cache_get_size(cache(fx)), 1);

    /* The pod's record is gone as well: it comes back as a new pod. */
    fixture_add_pod(fx, "pod1", "s1b", NULL);
    relist(fx);
    assert_drained(fx, "pod1 ContainerStarted s1b");
}
END_TEST

/* The UIDs listed are the pods with an entry: a status or an inspection error, and no longer a
 * pod that went away. */
START_TEST(test_cache_list_pod_uids)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_auto(GStrv) uids = pleg_pod_cache_list_pod_uids(cache(fx));
    static const char *const both[] = {"pod1", "pod2", NULL};
    static const char *const second[] = {"pod2", NULL};

    ck_assert(uids != NULL);
    ck_assert_uint_eq(g_strv_length(uids), 0);
    g_clear_pointer(&uids, g_strfreev);

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    fixture_add_pod(fx, "pod2", "s2", NULL);
    fake_runtime_fail(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, "s2", 1);
    relist(fx);
    g_ptr_array_unref(drain(fx));
    ck_assert(cache_status(fx, "pod2") == NULL); /* an error entry */
    uids = pleg_pod_cache_list_pod_uids(cache(fx));
    ck_assert_uint_eq(g_strv_length(uids), 2);
    ck_assert(g_strv_contains((const char *const *)uids, both[0]));
    ck_assert(g_strv_contains((const char *const *)uids, both[1]));
    g_clear_pointer(&uids, g_strfreev);

    fake_runtime_remove_container(fx->fake, "c1");
    fake_runtime_remove_sandbox(fx->fake, "s1");
    relist(fx);
    g_ptr_array_unref(drain(fx));
    uids = pleg_pod_cache_list_pod_uids(cache(fx));
    ck_assert(g_strv_equal((const char *const *)uids, second));
}
END_TEST

/* A pod's names: its status's, or, while its inspection fails, its listing's. */
START_TEST(test_cache_pod_names)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autofree char *namespace_ = NULL;
    g_autofree char *name = NULL;

    ck_assert(!pleg_pod_cache_get_pod_names(cache(fx), "pod1", &namespace_, &name));
    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    fake_runtime_set_sandbox_metadata(fx->fake, "s1", "shop", "cart", 0);
    fixture_add_pod(fx, "pod2", "s2", NULL);
    fake_runtime_fail(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, "s2", 1);
    relist(fx);
    g_ptr_array_unref(drain(fx));

    ck_assert(pleg_pod_cache_get_pod_names(cache(fx), "pod1", &namespace_, &name));
    ck_assert_str_eq(namespace_, "shop");
    ck_assert_str_eq(name, "cart");
    g_clear_pointer(&namespace_, g_free);
    g_clear_pointer(&name, g_free);

    ck_assert(cache_status(fx, "pod2") == NULL); /* an error entry, named by the listing */
    ck_assert(pleg_pod_cache_get_pod_names(cache(fx), "pod2", &namespace_, &name));
    ck_assert_str_eq(namespace_, "default");
    ck_assert_str_eq(name, "pod-pod2");
    ck_assert(pleg_pod_cache_get_pod_names(cache(fx), "pod2", NULL, NULL));
}
END_TEST

/* Reinspection: a pod whose inspection failed is retried on the next relist even without
 * events, and reports PodSync when nothing else changed. */
START_TEST(test_reinspection_pod_sync)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GPtrArray) events = NULL;
    const PlegPodLifecycleEvent *event;
    guint calls;

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    relist(fx);
    g_ptr_array_unref(drain(fx));

    /* A container comes and the inspection fails. */
    fake_runtime_add_container(fx->fake, "c2", "s1", PLEG_CONTAINER_STATE_RUNNING);
    fake_runtime_fail(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, "s1", 1);
    relist(fx);
    assert_drained(fx, "");
    ck_assert(cache_status(fx, "pod1") == NULL);
    ck_assert(pleg_pod_cache_get(cache(fx), "pod1", NULL, NULL, NULL));

    /* It goes away again before the next relist: no event, but the pod is reinspected. */
    fake_runtime_remove_container(fx->fake, "c2");
    calls = fake_runtime_get_call_count_for(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, "s1");
    fx->clock.now_ns += NSEC_PER_SEC;
    relist(fx);
    ck_assert_uint_eq(fake_runtime_get_call_count_for(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, "s1"),
                      calls + 1);
    events = drain(fx);
    ck_assert_uint_eq(events->len, 1);
    event = g_ptr_array_index(events, 0);
    ck_assert_int_eq(event->type, PLEG_POD_SYNC);
    ck_assert_str_eq(event->pod_uid, "pod1");
    ck_assert(event->container_id == NULL);
    ck_assert_int_eq(event->relist_source, PLEG_RELIST_SOURCE_GLOBAL);
    ck_assert_int_eq(cache_container_state(fx, "pod1", "c1"), PLEG_CONTAINER_STATE_RUNNING);

    /* No longer flagged: no inspection, no PodSync. */
    calls = fake_runtime_get_call_count_for(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, "s1");
    relist(fx);
    assert_drained(fx, "");
    ck_assert_uint_eq(fake_runtime_get_call_count_for(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, "s1"),
                      calls);
}
END_TEST

/* Reinspection that fails again keeps the pod flagged; a flagged pod with events reports the
 * events and no PodSync. */
START_TEST(test_reinspection_fails_again)
{
    g_autoptr(Fixture) fx = fixture_new();
    guint calls;

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    relist(fx);
    g_ptr_array_unref(drain(fx));

    fake_runtime_add_container(fx->fake, "c2", "s1", PLEG_CONTAINER_STATE_RUNNING);
    fake_runtime_fail(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, "s1", 1);
    relist(fx);
    fake_runtime_remove_container(fx->fake, "c2");
    fake_runtime_fail(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, "s1", 1);
    calls = fake_runtime_get_call_count_for(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, "s1");
    relist(fx);
    ck_assert_uint_eq(fake_runtime_get_call_count_for(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, "s1"),
                      calls + 1);
    assert_drained(fx, "");
    ck_assert(cache_status(fx, "pod1") == NULL);

    /* Still flagged: inspected again.  This time a container exits too, so the events are
     * reported instead of PodSync. */
    fake_runtime_set_container_state(fx->fake, "c1", PLEG_CONTAINER_STATE_EXITED);
    relist(fx);
    ck_assert_uint_eq(fake_runtime_get_call_count_for(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, "s1"),
                      calls + 2);
    assert_drained(fx, "pod1 ContainerDied c1");
    ck_assert_int_eq(cache_container_state(fx, "pod1", "c1"), PLEG_CONTAINER_STATE_EXITED);

    relist(fx);
    assert_drained(fx, "");
}
END_TEST

/* A pod deleted while it waits for reinspection: no crash, its cache entry goes. */
START_TEST(test_reinspection_pod_deleted)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GPtrArray) events = NULL;

    /* Seen for the first time with an inspection error. */
    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    fixture_add_pod(fx, "pod2", "s2", NULL);
    fake_runtime_fail(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, "s1", 1);
    relist(fx);
    g_ptr_array_unref(drain(fx));
    ck_assert(pleg_pod_cache_get(cache(fx), "pod1", NULL, NULL, NULL));

    fake_runtime_remove_container(fx->fake, "c1");
    fake_runtime_remove_sandbox(fx->fake, "s1");
    relist(fx);
    events = drain(fx);
    /* Nothing was ever delivered for pod1, so nothing about its containers is now. */
    ck_assert_uint_eq(count_events(events, "pod1", PLEG_CONTAINER_STARTED, NULL), 0);
    ck_assert_uint_eq(count_events(events, "pod1", PLEG_CONTAINER_DIED, NULL), 0);
    ck_assert_uint_eq(count_events(events, "pod1", PLEG_CONTAINER_REMOVED, NULL), 0);
    /* A vanished pod has nothing to sync. */
    ck_assert_uint_eq(count_events(events, "pod1", PLEG_POD_SYNC, NULL), 0);
    ck_assert_uint_eq(count_events(events, "pod2", PLEG_CONTAINER_STARTED, NULL), 0);
    ck_assert(!pleg_pod_cache_get(cache(fx), "pod1", NULL, NULL, NULL));
    ck_assert_uint_eq(pleg_pod_cache_get_size(cache(fx)), 1);

    relist(fx);
    g_clear_pointer(&events, g_ptr_array_unref);
    events = drain(fx);
    ck_assert_uint_eq(events->len, 0);
}
END_TEST

/* Same, for a pod that was known and running before its inspection failed. */
START_TEST(test_reinspection_known_pod_deleted)
{
    g_autoptr(Fixture) fx = fixture_new();

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    relist(fx);
    g_ptr_array_unref(drain(fx));

    fake_runtime_set_container_state(fx->fake, "c1", PLEG_CONTAINER_STATE_EXITED);
    fake_runtime_fail(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, "s1", 1);
    relist(fx);
    assert_drained(fx, "");

    fake_runtime_remove_container(fx->fake, "c1");
    fake_runtime_remove_sandbox(fx->fake, "s1");
    relist(fx);
    assert_drained(fx, "pod1 ContainerDied c1,pod1 ContainerRemoved c1,"
                       "pod1 ContainerDied s1,pod1 ContainerRemoved s1");
    ck_assert(!pleg_pod_cache_get(cache(fx), "pod1", NULL, NULL, NULL));
}
END_TEST

/* kubelet's IP preservation: a pod whose sandboxes are all not ready and report no address
 * keeps its last IPs. */
START_TEST(test_ip_preservation)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(PlegPodStatus) status = NULL;
    static const char *const ips[] = {"10.1.2.3", NULL};
    static const char *const new_ips[] = {"10.9.9.9", NULL};

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    fake_runtime_set_sandbox_ips(fx->fake, "s1", ips);
    relist(fx);
    status = cache_status(fx, "pod1");
    ck_assert(g_strv_equal((const char *const *)status->ips, ips));
    g_clear_pointer(&status, pleg_pod_status_unref);

    fake_runtime_set_sandbox_state(fx->fake, "s1", PLEG_POD_SANDBOX_STATE_NOTREADY);
    fake_runtime_set_sandbox_ips(fx->fake, "s1", NULL);
    fake_runtime_set_container_state(fx->fake, "c1", PLEG_CONTAINER_STATE_EXITED);
    relist(fx);
    status = cache_status(fx, "pod1");
    ck_assert(status != NULL);
    ck_assert_int_eq(cache_container_state(fx, "pod1", "c1"), PLEG_CONTAINER_STATE_EXITED);
    ck_assert_msg(g_strv_equal((const char *const *)status->ips, ips), "IPs lost: %s",
                  status->ips[0] ? status->ips[0] : "(none)");
    g_clear_pointer(&status, pleg_pod_status_unref);

    /* A new ready sandbox brings its own address. */
    fake_runtime_add_sandbox(fx->fake, "s2", "pod1", PLEG_POD_SANDBOX_STATE_READY);
    fake_runtime_set_sandbox_ips(fx->fake, "s2", new_ips);
    relist(fx);
    status = cache_status(fx, "pod1");
    ck_assert(g_strv_equal((const char *const *)status->ips, new_ips));
    ck_assert_uint_eq(status->sandbox_statuses->len, 2);
    ck_assert_str_eq(((PlegPodSandboxStatus *)g_ptr_array_index(status->sandbox_statuses, 0))->id,
                     "s2");
}
END_TEST

static Suite *
cache_suite(void)
{
    Suite *suite = suite_create("cache");
    TCase *tc = tcase_create("cache");

    tcase_add_test(tc, test_cache_status);
    tcase_add_test(tc, test_global_timestamp);
    tcase_add_test(tc, test_global_timestamp_is_start);
    tcase_add_test(tc, test_status_error_then_success);
    tcase_add_test(tc, test_cache_entry_removed);
    tcase_add_test(tc, test_cache_list_pod_uids);
    tcase_add_test(tc, test_ip_preservation);
    suite_add_tcase(suite, tc);

    tc = tcase_create("reinspection");
    tcase_add_test(tc, test_reinspection_pod_sync);
    tcase_add_test(tc, test_reinspection_fails_again);
    tcase_add_test(tc, test_cache_pod_names);
    tcase_add_test(tc, test_reinspection_pod_deleted);
    tcase_add_test(tc, test_reinspection_known_pod_deleted);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    return run_suite(cache_suite());
}
