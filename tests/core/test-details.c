/* SPDX-License-Identifier: Apache-2.0 */
/* PlegEventDetails: every event names its pod and container from the relist's listings, events
 * of what the runtime no longer lists included, and a sandbox says it is one.  Linked with
 * libpleg's objects for subscriber_missed_entries(). */
#include "core-test.h"

#include "pleg-generic-private.h"

#define READY    PLEG_POD_SANDBOX_STATE_READY
#define NOTREADY PLEG_POD_SANDBOX_STATE_NOTREADY

/* The event of @type about @id among @events; fails the test when there is not exactly one. */
static const PlegPodLifecycleEvent *
find_event(GPtrArray *events, PlegPodLifecycleEventType type, const char *id)
{
    const PlegPodLifecycleEvent *found = NULL;

    for (guint i = 0; i < events->len; i++) {
        const PlegPodLifecycleEvent *event = g_ptr_array_index(events, i);

        if (event->type == type && g_strcmp0(event->container_id, id) == 0) {
            ck_assert_msg(found == NULL, "two %s of %s",
                          pleg_pod_lifecycle_event_type_to_string(type), id);
            found = event;
        }
    }
    ck_assert_msg(found != NULL, "no %s of %s", pleg_pod_lifecycle_event_type_to_string(type),
                  id);
    return found;
}

static void
assert_container(const PlegPodLifecycleEvent *event, const char *name, guint32 attempt,
                 const char *image)
{
    const PlegEventDetails *details = pleg_pod_lifecycle_event_get_details(event);

    ck_assert_ptr_eq(details, &event->details);
    ck_assert_str_eq(details->pod_namespace, "shop");
    ck_assert_str_eq(details->pod_name, "web");
    ck_assert(!details->sandbox);
    ck_assert_str_eq(details->container_name, name);
    ck_assert_uint_eq(details->attempt, attempt);
    ck_assert_str_eq(details->image, image);
}

static void
assert_sandbox(const PlegPodLifecycleEvent *event, guint32 attempt)
{
    const PlegEventDetails *details = pleg_pod_lifecycle_event_get_details(event);

    ck_assert_str_eq(details->pod_namespace, "shop");
    ck_assert_str_eq(details->pod_name, "web");
    ck_assert(details->sandbox);
    ck_assert_ptr_null(details->container_name);
    ck_assert_ptr_null(details->image);
    ck_assert_uint_eq(details->attempt, attempt);
    ck_assert_int_eq(details->started_at_ns, 0);
}

static void
add_web(Fixture *fx)
{
    fake_runtime_add_sandbox(fx->fake, "sb0", "uid-web", READY);
    fake_runtime_set_sandbox_metadata(fx->fake, "sb0", "shop", "web", 0);
    fake_runtime_add_container(fx->fake, "c1", "sb0", PLEG_CONTAINER_STATE_RUNNING);
    fake_runtime_set_container_metadata(fx->fake, "c1", "nginx", 2, "nginx:1.25");
}

/* A pod's life: each event type names the pod and the container, down to the removal of a
 * container and a sandbox the runtime no longer lists, and a recreated sandbox's attempt. */
START_TEST(test_details_every_type)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GPtrArray) events = NULL;
    g_autoptr(PlegPodStatus) status = NULL;
    const PlegPodLifecycleEvent *event;

    add_web(fx);
    relist(fx);
    events = drain(fx);
    status = cache_status(fx, "uid-web");
    event = find_event(events, PLEG_CONTAINER_STARTED, "c1");
    assert_container(event, "nginx", 2, "nginx:1.25");
    ck_assert_int_ne(event->details.started_at_ns, 0);
    ck_assert_int_eq(event->details.started_at_ns,
                     pleg_pod_status_find_container(status, "c1")->started_at_ns);
    assert_sandbox(find_event(events, PLEG_CONTAINER_STARTED, "sb0"), 0);
    g_clear_pointer(&events, g_ptr_array_unref);

    fake_runtime_exit_container(fx->fake, "c1", 137, "OOMKilled", T0_NS);
    relist(fx);
    events = drain(fx);
    event = find_event(events, PLEG_CONTAINER_DIED, "c1");
    assert_container(event, "nginx", 2, "nginx:1.25");
    ck_assert(event->has_exit);
    ck_assert_int_eq(event->exit_code, 137);
    ck_assert_str_eq(event->reason, "OOMKilled");
    ck_assert_int_eq(event->finished_at_ns, T0_NS);
    ck_assert_int_eq(event->details.started_at_ns, 0);
    g_clear_pointer(&events, g_ptr_array_unref);

    /* The runtime no longer lists c1: the names come from the PLEG's last record of it. */
    fake_runtime_remove_container(fx->fake, "c1");
    relist(fx);
    events = drain(fx);
    assert_container(find_event(events, PLEG_CONTAINER_REMOVED, "c1"), "nginx", 2, "nginx:1.25");
    g_clear_pointer(&events, g_ptr_array_unref);

    /* The sandbox is recreated: the old one dies and goes, the new one is attempt 1. */
    fake_runtime_set_sandbox_state(fx->fake, "sb0", NOTREADY);
    relist(fx);
    events = drain(fx);
    assert_sandbox(find_event(events, PLEG_CONTAINER_DIED, "sb0"), 0);
    g_clear_pointer(&events, g_ptr_array_unref);
    fake_runtime_remove_sandbox(fx->fake, "sb0");
    fake_runtime_add_sandbox(fx->fake, "sb1", "uid-web", READY);
    fake_runtime_set_sandbox_metadata(fx->fake, "sb1", "shop", "web", 1);
    relist(fx);
    events = drain(fx);
    assert_sandbox(find_event(events, PLEG_CONTAINER_REMOVED, "sb0"), 0);
    assert_sandbox(find_event(events, PLEG_CONTAINER_STARTED, "sb1"), 1);
    ck_assert_uint_eq(events->len, 2);
}
END_TEST

/* A pod the runtime forgets at once: its last events still name it. */
START_TEST(test_details_pod_gone)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GPtrArray) events = NULL;

    add_web(fx);
    relist(fx);
    g_ptr_array_unref(drain(fx));

    fake_runtime_remove_container(fx->fake, "c1");
    fake_runtime_remove_sandbox(fx->fake, "sb0");
    relist(fx);
    events = drain(fx);
    assert_container(find_event(events, PLEG_CONTAINER_DIED, "c1"), "nginx", 2, "nginx:1.25");
    assert_container(find_event(events, PLEG_CONTAINER_REMOVED, "c1"), "nginx", 2, "nginx:1.25");
    assert_sandbox(find_event(events, PLEG_CONTAINER_DIED, "sb0"), 0);
    assert_sandbox(find_event(events, PLEG_CONTAINER_REMOVED, "sb0"), 0);
    ck_assert_uint_eq(events->len, 4);
}
END_TEST

/* Events a full channel missed, redelivered later, and a container whose missed events
 * collapsed (more than 16 of them), keep their names. */
START_TEST(test_details_redelivered)
{
    g_autoptr(Fixture) fx = fixture_new_full(NULL, 1, TRUE);
    g_autoptr(GPtrArray) events = NULL;
    guint n_c1 = 0;

    add_web(fx);
    relist(fx);
    /* The channel holds one event: the rest waits in the missed table.  c1 flaps between
     * running and exited, more than the table keeps of one container. */
    for (int i = 0; i < 20; i++) {
        fake_runtime_set_container_state(fx->fake, "c1", i % 2 == 0 ? PLEG_CONTAINER_STATE_EXITED
                                                                    : PLEG_CONTAINER_STATE_RUNNING);
        relist(fx);
    }
    events = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_lifecycle_event_unref);
    for (int i = 0; i < 100; i++) {
        g_autoptr(GPtrArray) some = drain(fx);

        if (some->len == 0 && i > 0)
            break;
        g_ptr_array_extend_and_steal(events, g_steal_pointer(&some));
        relist(fx);
    }
    for (guint i = 0; i < events->len; i++) {
        const PlegPodLifecycleEvent *event = g_ptr_array_index(events, i);

        if (g_str_equal(event->container_id, "c1")) {
            assert_container(event, "nginx", 2, "nginx:1.25");
            n_c1++;
        } else {
            assert_sandbox(event, 0);
        }
    }
    ck_assert_uint_ge(n_c1, 2);
    ck_assert_uint_eq(subscriber_missed_entries(fx->pleg, fx->channel), 0);
}
END_TEST

static Suite *
details_suite(void)
{
    Suite *suite = suite_create("details");
    TCase *tc = tcase_create("details");

    tcase_add_test(tc, test_details_every_type);
    tcase_add_test(tc, test_details_pod_gone);
    tcase_add_test(tc, test_details_redelivered);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    return run_suite(details_suite());
}
