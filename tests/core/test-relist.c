/* SPDX-License-Identifier: Apache-2.0 */
/* Global relists: event generation, delivery, the event channel and relist metrics. */
#include "core-test.h"

#define ABSENT  (-1)
#define CREATED PLEG_CONTAINER_STATE_CREATED
#define RUNNING PLEG_CONTAINER_STATE_RUNNING
#define EXITED  PLEG_CONTAINER_STATE_EXITED
#define UNKNOWN PLEG_CONTAINER_STATE_UNKNOWN

/* One container seen in one state by a relist and in another by the next relist. */
static const struct {
    int old_state;
    int new_state;
    const char *events;
} transitions[] = {
    {ABSENT, RUNNING, "ContainerStarted c1"},
    {ABSENT, EXITED, "ContainerDied c1"},
    {ABSENT, CREATED, ""}, /* ContainerChanged is never delivered */
    {ABSENT, UNKNOWN, ""},
    {RUNNING, RUNNING, ""},
    {RUNNING, EXITED, "ContainerDied c1"},
    {RUNNING, UNKNOWN, ""},
    {RUNNING, ABSENT, "ContainerDied c1,ContainerRemoved c1"},
    {EXITED, EXITED, ""},
    {EXITED, RUNNING, "ContainerStarted c1"},
    {EXITED, ABSENT, "ContainerRemoved c1"},
    {CREATED, CREATED, ""},
    {CREATED, UNKNOWN, ""}, /* both map to unknown */
    {CREATED, RUNNING, "ContainerStarted c1"},
    {CREATED, EXITED, "ContainerDied c1"},
    {CREATED, ABSENT, "ContainerDied c1,ContainerRemoved c1"},
    {UNKNOWN, RUNNING, "ContainerStarted c1"},
    {UNKNOWN, EXITED, "ContainerDied c1"},
    {UNKNOWN, ABSENT, "ContainerDied c1,ContainerRemoved c1"},
};

START_TEST(test_container_transitions)
{
    g_autoptr(Fixture) fx = fixture_new();
    int old_state = transitions[_i].old_state;
    int new_state = transitions[_i].new_state;
    g_autoptr(GPtrArray) events = NULL;
    g_autofree char *first = NULL;
    g_autofree char *text = NULL;

    fake_runtime_add_sandbox(fx->fake, "s1", "pod1", PLEG_POD_SANDBOX_STATE_READY);
    if (old_state != ABSENT)
        fake_runtime_add_container(fx->fake, "c1", "s1", old_state);
    relist(fx);
    events = drain(fx);
    first = events_str(events, "pod1");
    /* The first relist reports the sandbox and whatever c1 is. */
    ck_assert(count_events(events, "pod1", PLEG_CONTAINER_STARTED, "s1") == 1);
    g_clear_pointer(&events, g_ptr_array_unref);

    if (new_state == ABSENT)
        fake_runtime_remove_container(fx->fake, "c1");
    else if (old_state == ABSENT)
        fake_runtime_add_container(fx->fake, "c1", "s1", new_state);
    else
        fake_runtime_set_container_state(fx->fake, "c1", new_state);
    fx->clock.now_ns += NSEC_PER_SEC;
    relist(fx);

    events = drain(fx);
    text = events_str(events, NULL);
    {
        g_autofree char *mine = events_str(events, "pod1");
        ck_assert_msg(g_str_equal(mine, transitions[_i].events),
                      "%s -> %s: got \"%s\", expected \"%s\" (first relist: \"%s\")",
                      old_state == ABSENT ? "absent" : pleg_container_state_to_string(old_state),
                      new_state == ABSENT ? "absent" : pleg_container_state_to_string(new_state),
                      text, transitions[_i].events, first);
    }
    for (guint i = 0; i < events->len; i++) {
        const PlegPodLifecycleEvent *event = g_ptr_array_index(events, i);

        ck_assert_str_eq(event->pod_uid, "pod1");
        ck_assert_int_eq(event->relist_source, PLEG_RELIST_SOURCE_GLOBAL);
        ck_assert(event->type != PLEG_CONTAINER_CHANGED);
        ck_assert_int_eq(event->time_ns, T0_NS + NSEC_PER_SEC);
    }

    /* A third relist with no change reports nothing. */
    relist(fx);
    g_clear_pointer(&events, g_ptr_array_unref);
    events = drain(fx);
    ck_assert_uint_eq(events->len, 0);
}
END_TEST

START_TEST(test_sandbox_events)
{
    g_autoptr(Fixture) fx = fixture_new();

    fake_runtime_add_sandbox(fx->fake, "s1", "pod1", PLEG_POD_SANDBOX_STATE_READY);
    fake_runtime_add_sandbox(fx->fake, "s2", "pod2", PLEG_POD_SANDBOX_STATE_NOTREADY);
    relist(fx);
    assert_drained(fx, "pod1 ContainerStarted s1,pod2 ContainerDied s2");

    fake_runtime_set_sandbox_state(fx->fake, "s1", PLEG_POD_SANDBOX_STATE_NOTREADY);
    relist(fx);
    assert_drained(fx, "pod1 ContainerDied s1");

    fake_runtime_remove_sandbox(fx->fake, "s1");
    fake_runtime_remove_sandbox(fx->fake, "s2");
    relist(fx);
    assert_drained(fx, "pod1 ContainerRemoved s1,pod2 ContainerRemoved s2");

    /* A sandbox that vanishes while ready dies first. */
    fake_runtime_add_sandbox(fx->fake, "s3", "pod3", PLEG_POD_SANDBOX_STATE_READY);
    relist(fx);
    assert_drained(fx, "pod3 ContainerStarted s3");
    fake_runtime_remove_sandbox(fx->fake, "s3");
    relist(fx);
    assert_drained(fx, "pod3 ContainerDied s3,pod3 ContainerRemoved s3");
}
END_TEST

START_TEST(test_several_pods)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GPtrArray) events = NULL;

    fixture_add_pod(fx, "pod1", "s1", "c1", "c2", NULL);
    fixture_add_pod(fx, "pod2", "s2", "c3", NULL);
    fake_runtime_add_container(fx->fake, "c4", "s2", PLEG_CONTAINER_STATE_EXITED);
    relist(fx);
    events = drain(fx);
    ck_assert_uint_eq(events->len, 6);
    ck_assert_uint_eq(count_events(events, "pod1", PLEG_CONTAINER_STARTED, NULL), 3);
    ck_assert_uint_eq(count_events(events, "pod2", PLEG_CONTAINER_STARTED, "s2"), 1);
    ck_assert_uint_eq(count_events(events, "pod2", PLEG_CONTAINER_STARTED, "c3"), 1);
    ck_assert_uint_eq(count_events(events, "pod2", PLEG_CONTAINER_DIED, "c4"), 1);

    /* Only the pod that changed reports. */
    fake_runtime_set_container_state(fx->fake, "c3", PLEG_CONTAINER_STATE_EXITED);
    relist(fx);
    g_clear_pointer(&events, g_ptr_array_unref);
    events = drain(fx);
    {
        g_autofree char *text = events_str(events, NULL);
        ck_assert_str_eq(text, "pod2 ContainerDied c3");
    }
}
END_TEST

/* A container dies right after the relist that saw it start. */
START_TEST(test_death_after_one_relist)
{
    g_autoptr(Fixture) fx = fixture_new();

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    relist(fx);
    assert_drained(fx, "pod1 ContainerStarted c1,pod1 ContainerStarted s1");

    fake_runtime_set_container_state(fx->fake, "c1", PLEG_CONTAINER_STATE_EXITED);
    relist(fx);
    assert_drained(fx, "pod1 ContainerDied c1");
    ck_assert_int_eq(cache_container_state(fx, "pod1", "c1"), PLEG_CONTAINER_STATE_EXITED);
}
END_TEST

/* A container runs through three relists, then exits and is removed before the next. */
START_TEST(test_death_after_three_relists)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GPtrArray) events = NULL;

    fixture_add_pod(fx, "pod1", "s1", "c1", "c2", NULL);
    for (int i = 0; i < 3; i++) {
        relist(fx);
        fx->clock.now_ns += NSEC_PER_SEC;
    }
    events = drain(fx);
    ck_assert_uint_eq(events->len, 3);

    fake_runtime_set_container_state(fx->fake, "c1", PLEG_CONTAINER_STATE_EXITED);
    fake_runtime_remove_container(fx->fake, "c1");
    relist(fx);
    assert_drained(fx, "pod1 ContainerDied c1,pod1 ContainerRemoved c1");
    ck_assert_int_eq(cache_container_state(fx, "pod1", "c1"), -1);
    ck_assert_int_eq(cache_container_state(fx, "pod1", "c2"), PLEG_CONTAINER_STATE_RUNNING);
}
END_TEST

START_TEST(test_died_carries_exit)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GPtrArray) events = NULL;
    const PlegPodLifecycleEvent *event;
    gint64 finished_at = T0_NS + 500 * G_USEC_PER_SEC * NSEC_PER_USEC / 1000;

    fixture_add_pod(fx, "pod1", "s1", "c1", "c2", NULL);
    relist(fx);
    g_ptr_array_unref(drain(fx));

    fake_runtime_exit_container(fx->fake, "c1", 7, "Error", finished_at);
    fake_runtime_exit_container(fx->fake, "c2", 137, "OOMKilled", finished_at + 1);
    relist(fx);
    events = drain(fx);
    ck_assert_uint_eq(events->len, 2);
    for (guint i = 0; i < events->len; i++) {
        event = g_ptr_array_index(events, i);
        ck_assert_int_eq(event->type, PLEG_CONTAINER_DIED);
        ck_assert(event->has_exit);
        if (g_str_equal(event->container_id, "c1")) {
            ck_assert_int_eq(event->exit_code, 7);
            ck_assert_str_eq(event->reason, "Error");
            ck_assert_int_eq(event->finished_at_ns, finished_at);
        } else {
            ck_assert_str_eq(event->container_id, "c2");
            ck_assert_int_eq(event->exit_code, 137);
            ck_assert_str_eq(event->reason, "OOMKilled");
            ck_assert_int_eq(event->finished_at_ns, finished_at + 1);
        }
    }

    /* Events other than ContainerDied carry no exit. */
    fake_runtime_add_container(fx->fake, "c3", "s1", PLEG_CONTAINER_STATE_RUNNING);
    relist(fx);
    g_clear_pointer(&events, g_ptr_array_unref);
    events = drain(fx);
    ck_assert_uint_eq(events->len, 1);
    event = g_ptr_array_index(events, 0);
    ck_assert_int_eq(event->type, PLEG_CONTAINER_STARTED);
    ck_assert(!event->has_exit);
}
END_TEST

static guint
find_event(GPtrArray *events, PlegPodLifecycleEventType type, const char *container_id)
{
    for (guint i = 0; i < events->len; i++) {
        const PlegPodLifecycleEvent *event = g_ptr_array_index(events, i);
        if (event->type == type && g_strcmp0(event->container_id, container_id) == 0)
            return i;
    }
    return G_MAXUINT;
}

/* A full channel drops events and counts them; libpleg delivers the dropped transitions on the
 * next relists and never repeats what was delivered. */
START_TEST(test_channel_full)
{
    g_autoptr(Fixture) fx = fixture_new_full(NULL, 2, TRUE);
    g_autoptr(GPtrArray) all =
        g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_lifecycle_event_unref);
    g_autoptr(GPtrArray) events = NULL;
    static const char *const ids[] = {"s1", "c1", "c2", "c3"};
    /* kubelet_pleg_discard_events after each relist: one per event not delivered. */
    static const double expected_discards[] = {2, 2, 2, 4, 4, 4};
    double discards[G_N_ELEMENTS(expected_discards)];
    guint n = 0;

    fixture_add_pod(fx, "pod1", "s1", "c1", "c2", "c3", NULL);
    relist(fx);
    discards[n++] = metric_value(fx, "kubelet_pleg_discard_events", NULL);
    ck_assert_uint_eq(pleg_event_channel_get_length(fx->channel), 2);

    events = drain(fx);
    ck_assert_uint_eq(events->len, 2);
    g_ptr_array_extend_and_steal(all, g_steal_pointer(&events));

    relist(fx);
    discards[n++] = metric_value(fx, "kubelet_pleg_discard_events", NULL);
    events = drain(fx);
    ck_assert_uint_eq(events->len, 2);
    g_ptr_array_extend_and_steal(all, g_steal_pointer(&events));

    relist(fx);
    discards[n++] = metric_value(fx, "kubelet_pleg_discard_events", NULL);
    events = drain(fx);
    ck_assert_uint_eq(events->len, 0);
    g_clear_pointer(&events, g_ptr_array_unref);
    for (guint i = 0; i < G_N_ELEMENTS(ids); i++)
        ck_assert_msg(count_events(all, "pod1", PLEG_CONTAINER_STARTED, ids[i]) == 1,
                      "ContainerStarted %s delivered %u times", ids[i],
                      count_events(all, "pod1", PLEG_CONTAINER_STARTED, ids[i]));
    ck_assert_uint_eq(all->len, 4);
    g_ptr_array_set_size(all, 0);

    /* Four events with an order inside each container: Died c1, Removed c1, Died c2, Removed c2.
     * Two fit per relist. */
    fake_runtime_remove_container(fx->fake, "c1");
    fake_runtime_exit_container(fx->fake, "c2", 1, "Error", T0_NS);
    fake_runtime_remove_container(fx->fake, "c2");
    relist(fx);
    discards[n++] = metric_value(fx, "kubelet_pleg_discard_events", NULL);
    events = drain(fx);
    ck_assert_uint_eq(events->len, 2);
    g_ptr_array_extend_and_steal(all, g_steal_pointer(&events));
    relist(fx);
    discards[n++] = metric_value(fx, "kubelet_pleg_discard_events", NULL);
    events = drain(fx);
    g_ptr_array_extend_and_steal(all, g_steal_pointer(&events));
    relist(fx);
    discards[n++] = metric_value(fx, "kubelet_pleg_discard_events", NULL);
    events = drain(fx);
    g_ptr_array_extend_and_steal(all, g_steal_pointer(&events));
    {
        g_autofree char *text = events_str(all, NULL);
        ck_assert_msg(all->len == 4, "got %s", text);
        for (guint i = 1; i <= 2; i++) {
            g_autofree char *cid = g_strdup_printf("c%u", i);
            guint died = find_event(all, PLEG_CONTAINER_DIED, cid);
            guint removed = find_event(all, PLEG_CONTAINER_REMOVED, cid);
            ck_assert_msg(died != G_MAXUINT && removed != G_MAXUINT && died < removed, "got %s",
                          text);
        }
    }
    ck_assert_int_eq(cache_container_state(fx, "pod1", "c1"), -1);
    ck_assert_int_eq(cache_container_state(fx, "pod1", "c3"), PLEG_CONTAINER_STATE_RUNNING);
    ck_assert_uint_eq(n, G_N_ELEMENTS(expected_discards));
    for (guint i = 0; i < n; i++)
        ck_assert_msg(discards[i] == expected_discards[i],
                      "kubelet_pleg_discard_events after relist %u is %g, expected %g", i + 1,
                      discards[i], expected_discards[i]);
}
END_TEST

/* A subscriber stalled through several changes of one container gets every transition it
 * missed, in order: here C is seen running, then exited (or removed), while the channel is full.
 * Replaying only "from what it last saw to now" would lose ContainerStarted C (or all of C). */
static void
check_stalled_subscriber_gets_every_transition(gboolean remove)
{
    g_autoptr(Fixture) fx = fixture_new_full(NULL, 1, TRUE);
    g_autoptr(GPtrArray) all =
        g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_lifecycle_event_unref);
    g_autofree char *text = NULL;

    fake_runtime_add_sandbox(fx->fake, "s1", "pod1", PLEG_POD_SANDBOX_STATE_READY);
    relist(fx); /* ContainerStarted s1 fills the channel */
    fake_runtime_add_container(fx->fake, "c1", "s1", PLEG_CONTAINER_STATE_RUNNING);
    relist(fx); /* ContainerStarted c1: not delivered */
    if (remove)
        fake_runtime_remove_container(fx->fake, "c1");
    else
        fake_runtime_exit_container(fx->fake, "c1", 3, "Error", T0_NS);
    relist(fx); /* ContainerDied c1 (and ContainerRemoved c1): not delivered */
    ck_assert_int_eq(metric_value(fx, "kubelet_pleg_discard_events", NULL), remove ? 3 : 2);

    for (guint i = 0; i < 6; i++) {
        g_autoptr(GPtrArray) events = drain(fx);
        g_ptr_array_extend_and_steal(all, g_steal_pointer(&events));
        relist(fx);
    }
    text = events_str(all, "pod1");
    ck_assert_str_eq(text, remove ? "ContainerStarted s1,ContainerStarted c1,ContainerDied c1,"
                                    "ContainerRemoved c1"
                                  : "ContainerStarted s1,ContainerStarted c1,ContainerDied c1");
    if (!remove) {
        const PlegPodLifecycleEvent *died = g_ptr_array_index(all, 2);
        /* Replayed as generated: with the exit the cache knew then. */
        ck_assert(died->has_exit);
        ck_assert_int_eq(died->exit_code, 3);
    }
}

START_TEST(test_channel_full_exit_while_stalled)
{
    check_stalled_subscriber_gets_every_transition(FALSE);
}
END_TEST

START_TEST(test_channel_full_removed_while_stalled)
{
    check_stalled_subscriber_gets_every_transition(TRUE);
}
END_TEST

/* A container flapping between unknown and running while the subscriber is stalled: what is owed
 * stays bounded (collapsed), and the subscriber still ends on the container's newest state. */
START_TEST(test_channel_full_flapping_is_bounded)
{
    g_autoptr(Fixture) fx = fixture_new_full(NULL, 1, TRUE);
    g_autoptr(GPtrArray) all =
        g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_lifecycle_event_unref);
    const PlegPodLifecycleEvent *last;

    fake_runtime_add_sandbox(fx->fake, "s1", "pod1", PLEG_POD_SANDBOX_STATE_READY);
    relist(fx); /* fills the channel */
    fake_runtime_add_container(fx->fake, "c1", "s1", PLEG_CONTAINER_STATE_RUNNING);
    for (guint i = 0; i < 100; i++) {
        fake_runtime_set_container_state(fx->fake, "c1", PLEG_CONTAINER_STATE_UNKNOWN);
        relist(fx);
        fake_runtime_set_container_state(fx->fake, "c1", PLEG_CONTAINER_STATE_RUNNING);
        relist(fx);
    }
    for (guint i = 0; i < 40; i++) {
        g_autoptr(GPtrArray) events = drain(fx);
        g_ptr_array_extend_and_steal(all, g_steal_pointer(&events));
        relist(fx);
    }
    ck_assert_uint_le(count_events(all, "pod1", PLEG_CONTAINER_STARTED, "c1"), 17);
    ck_assert_uint_ge(count_events(all, "pod1", PLEG_CONTAINER_STARTED, "c1"), 1);
    last = g_ptr_array_index(all, all->len - 1);
    ck_assert_str_eq(last->container_id, "c1");
    ck_assert_int_eq(last->type, PLEG_CONTAINER_STARTED);
}
END_TEST

/* A dropped ContainerDied whose container is then removed: the next relists deliver Died, then
 * Removed, one per relist with a channel of one. */
START_TEST(test_channel_full_then_removed)
{
    g_autoptr(Fixture) fx = fixture_new_full(NULL, 1, TRUE);
    g_autoptr(GPtrArray) events = NULL;
    g_autofree char *text = NULL;
    g_autofree char *expected = NULL;
    const PlegPodLifecycleEvent *event;
    const char *dropped;
    double discards[2];

    fake_runtime_add_sandbox(fx->fake, "s1", "pod1", PLEG_POD_SANDBOX_STATE_READY);
    relist(fx);
    g_ptr_array_unref(drain(fx));
    fake_runtime_add_container(fx->fake, "c1", "s1", PLEG_CONTAINER_STATE_RUNNING);
    relist(fx);
    g_ptr_array_unref(drain(fx));
    fake_runtime_add_container(fx->fake, "c2", "s1", PLEG_CONTAINER_STATE_RUNNING);
    relist(fx);
    text = drain_str(fx);
    ck_assert_str_eq(text, "pod1 ContainerStarted c2");
    ck_assert_int_eq(metric_value(fx, "kubelet_pleg_discard_events", NULL), 0);

    fake_runtime_set_container_state(fx->fake, "c1", PLEG_CONTAINER_STATE_EXITED);
    fake_runtime_set_container_state(fx->fake, "c2", PLEG_CONTAINER_STATE_EXITED);
    relist(fx);
    discards[0] = metric_value(fx, "kubelet_pleg_discard_events", NULL);
    events = drain(fx);
    ck_assert_uint_eq(events->len, 1);
    event = g_ptr_array_index(events, 0);
    ck_assert_int_eq(event->type, PLEG_CONTAINER_DIED);
    dropped = g_str_equal(event->container_id, "c1") ? "c2" : "c1";

    fake_runtime_remove_container(fx->fake, dropped);
    relist(fx);
    g_free(text);
    text = drain_str(fx);
    g_free(expected);
    expected = g_strdup_printf("pod1 ContainerDied %s", dropped);
    ck_assert_str_eq(text, expected);
    discards[1] = metric_value(fx, "kubelet_pleg_discard_events", NULL);

    relist(fx);
    g_free(text);
    text = drain_str(fx);
    g_free(expected);
    expected = g_strdup_printf("pod1 ContainerRemoved %s", dropped);
    ck_assert_str_eq(text, expected);

    relist(fx);
    g_free(text);
    text = drain_str(fx);
    ck_assert_str_eq(text, "");
    ck_assert_int_eq(cache_container_state(fx, "pod1", dropped), -1);
    /* One event not delivered in each of the two relists. */
    ck_assert_msg(discards[0] == 1 && discards[1] == 2,
                  "kubelet_pleg_discard_events: %g then %g, expected 1 then 2", discards[0],
                  discards[1]);
}
END_TEST

START_TEST(test_events_total)
{
    g_autoptr(Fixture) fx = fixture_new();

    fixture_add_pod(fx, "pod1", "s1", "c1", "c2", NULL);
    ck_assert_int_eq(metric_value(fx, "kubelet_pleg_events_total", "global", NULL), 0);
    relist(fx);
    g_ptr_array_unref(drain(fx));
    ck_assert_int_eq(metric_value(fx, "kubelet_pleg_events_total", "global", NULL), 3);

    fake_runtime_remove_container(fx->fake, "c1");
    relist(fx);
    g_ptr_array_unref(drain(fx));
    ck_assert_int_eq(metric_value(fx, "kubelet_pleg_events_total", "global", NULL), 5);

    ck_assert_int_eq(metric_value(fx, "kubelet_pleg_events_total", "evented_pleg", NULL), 0);
    fake_runtime_set_container_state(fx->fake, "c2", PLEG_CONTAINER_STATE_EXITED);
    ck_assert(pleg_generic_relist_pod(fx->pleg, "pod1", PLEG_RELIST_SOURCE_EVENTED_PLEG, NULL));
    {
        g_autoptr(GPtrArray) events = drain(fx);
        const PlegPodLifecycleEvent *event;

        ck_assert_uint_eq(events->len, 1);
        event = g_ptr_array_index(events, 0);
        ck_assert_int_eq(event->type, PLEG_CONTAINER_DIED);
        ck_assert_int_eq(event->relist_source, PLEG_RELIST_SOURCE_EVENTED_PLEG);
    }
    ck_assert_int_eq(metric_value(fx, "kubelet_pleg_events_total", "evented_pleg", NULL), 1);
    ck_assert_int_eq(metric_value(fx, "kubelet_pleg_events_total", "global", NULL), 5);
}
END_TEST

START_TEST(test_running_counts)
{
    g_autoptr(Fixture) fx = fixture_new();

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    fake_runtime_add_container(fx->fake, "c2", "s1", PLEG_CONTAINER_STATE_EXITED);
    fake_runtime_add_sandbox(fx->fake, "s2", "pod2", PLEG_POD_SANDBOX_STATE_NOTREADY);
    fake_runtime_add_container(fx->fake, "c3", "s2", PLEG_CONTAINER_STATE_EXITED);
    fixture_add_pod(fx, "pod3", "s3", "c4", "c5", NULL);
    /* An old, not ready sandbox next to the ready one: the pod still counts once. */
    fake_runtime_add_sandbox(fx->fake, "s3-old", "pod3", PLEG_POD_SANDBOX_STATE_NOTREADY);
    fake_runtime_add_container(fx->fake, "c6", "s3", PLEG_CONTAINER_STATE_CREATED);
    relist(fx);

    ck_assert_int_eq(metric_value(fx, "kubelet_running_pods", NULL), 2);
    ck_assert_int_eq(metric_value(fx, "kubelet_running_containers", "running", NULL), 3);
    ck_assert_int_eq(metric_value(fx, "kubelet_running_containers", "exited", NULL), 2);
    ck_assert_int_eq(metric_value(fx, "kubelet_running_containers", "created", NULL), 1);

    fake_runtime_set_container_state(fx->fake, "c1", PLEG_CONTAINER_STATE_EXITED);
    fake_runtime_set_sandbox_state(fx->fake, "s1", PLEG_POD_SANDBOX_STATE_NOTREADY);
    fake_runtime_remove_container(fx->fake, "c6");
    relist(fx);
    ck_assert_int_eq(metric_value(fx, "kubelet_running_pods", NULL), 1);
    ck_assert_int_eq(metric_value(fx, "kubelet_running_containers", "running", NULL), 2);
    ck_assert_int_eq(metric_value(fx, "kubelet_running_containers", "exited", NULL), 3);
    ck_assert_int_eq(metric_value(fx, "kubelet_running_containers", "created", NULL), 0);

    /* A failed listing leaves the gauges alone. */
    fake_runtime_fail(fx->fake, FAKE_OP_LIST_POD_SANDBOXES, NULL, 1);
    relist_fails(fx);
    ck_assert_int_eq(metric_value(fx, "kubelet_running_pods", NULL), 1);
}
END_TEST

START_TEST(test_relist_metrics)
{
    g_autoptr(Fixture) fx = fixture_new();

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    relist(fx);
    fx->clock.now_ns += NSEC_PER_SEC;
    relist(fx);
    ck_assert_uint_eq(metric_count(fx, "kubelet_pleg_relist_duration_seconds", NULL), 2);
    /* The interval is observed from the second relist on. */
    ck_assert_uint_ge(metric_count(fx, "kubelet_pleg_relist_interval_seconds", NULL), 1);

    /* Failed relists are counted; an error that is not the CRI's has the reason "other". */
    ck_assert_int_eq(metric_value(fx, "pleg_relist_failures_total", "other", NULL), 0);
    fake_runtime_fail(fx->fake, FAKE_OP_LIST_CONTAINERS, NULL, 1);
    relist_fails(fx);
    ck_assert_int_eq(pleg_generic_get_last_relist_time(fx->pleg), T0_NS + NSEC_PER_SEC);
    ck_assert_int_eq(metric_value(fx, "pleg_relist_failures_total", "other", NULL), 1);
    ck_assert_int_eq(metric_value(fx, "pleg_relist_failures_total", "unavailable", NULL), 0);
    relist(fx);
    ck_assert_int_eq(metric_value(fx, "pleg_relist_failures_total", "other", NULL), 1);
}
END_TEST

/* A listing error ends the relist before any pod is looked at. */
START_TEST(test_list_error)
{
    g_autoptr(Fixture) fx = fixture_new();

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    fake_runtime_fail(fx->fake, FAKE_OP_LIST_POD_SANDBOXES, NULL, 1);
    relist_fails(fx);
    ck_assert_uint_eq(pleg_event_channel_get_length(fx->channel), 0);
    ck_assert_int_eq(pleg_generic_get_last_relist_time(fx->pleg), 0);
    ck_assert_uint_eq(fake_runtime_get_call_count(fx->fake, FAKE_OP_POD_SANDBOX_STATUS), 0);

    fake_runtime_fail(fx->fake, FAKE_OP_LIST_CONTAINERS, NULL, 1);
    relist_fails(fx);
    ck_assert_uint_eq(pleg_event_channel_get_length(fx->channel), 0);
    ck_assert_uint_eq(fake_runtime_get_call_count(fx->fake, FAKE_OP_POD_SANDBOX_STATUS), 0);
    ck_assert_uint_eq(pleg_pod_cache_get_size(pleg_generic_get_cache(fx->pleg)), 0);

    relist(fx);
    assert_drained(fx, "pod1 ContainerStarted c1,pod1 ContainerStarted s1");
    ck_assert_int_eq(pleg_generic_get_last_relist_time(fx->pleg), T0_NS);
}
END_TEST

START_TEST(test_unsubscribe)
{
    g_autoptr(Fixture) fx = fixture_new();
    PlegEventChannel *second = pleg_generic_subscribe(fx->pleg, 0);
    g_autoptr(PlegPodLifecycleEvent) event = NULL;

    fixture_add_pod(fx, "pod1", "s1", NULL);
    relist(fx);
    ck_assert_uint_eq(pleg_event_channel_get_length(fx->channel), 1);
    ck_assert_uint_eq(pleg_event_channel_get_length(second), 1);
    event = pleg_event_channel_pop(second, 0);
    ck_assert_str_eq(event->container_id, "s1");
    pleg_generic_unsubscribe(fx->pleg, second);

    fake_runtime_set_sandbox_state(fx->fake, "s1", PLEG_POD_SANDBOX_STATE_NOTREADY);
    relist(fx);
    ck_assert_uint_eq(pleg_event_channel_get_length(fx->channel), 2);
}
END_TEST

/* A full subscriber does not hold back or duplicate another subscriber's events. */
START_TEST(test_channel_full_two_subscribers)
{
    g_autoptr(Fixture) fx = fixture_new();
    PlegEventChannel *small = pleg_generic_subscribe(fx->pleg, 1);
    g_autoptr(GPtrArray) all =
        g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_lifecycle_event_unref);
    g_autofree char *text = NULL;
    PlegPodLifecycleEvent *event;

    fixture_add_pod(fx, "pod1", "s1", "c1", "c2", NULL);
    relist(fx);
    text = drain_str(fx);
    ck_assert_str_eq(text,
                     "pod1 ContainerStarted c1,pod1 ContainerStarted c2,pod1 ContainerStarted s1");
    /* The small channel takes one event per relist; the big one gets nothing twice. */
    for (int i = 0; i < 3; i++) {
        if (i > 0)
            relist(fx);
        event = pleg_event_channel_pop(small, 0);
        ck_assert_msg(event != NULL, "relist %d delivered nothing to the small channel", i + 1);
        g_ptr_array_add(all, event);
        ck_assert(pleg_event_channel_pop(small, 0) == NULL);
        g_free(text);
        text = drain_str(fx);
        ck_assert_str_eq(text, "");
    }
    g_free(text);
    text = sorted_events_str(all);
    ck_assert_str_eq(text,
                     "pod1 ContainerStarted c1,pod1 ContainerStarted c2,pod1 ContainerStarted s1");

    /* Both are in step again. */
    fake_runtime_set_container_state(fx->fake, "c1", PLEG_CONTAINER_STATE_EXITED);
    relist(fx);
    g_free(text);
    text = drain_str(fx);
    ck_assert_str_eq(text, "pod1 ContainerDied c1");
    event = pleg_event_channel_pop(small, 0);
    ck_assert(event != NULL);
    ck_assert_int_eq(event->type, PLEG_CONTAINER_DIED);
    pleg_pod_lifecycle_event_unref(event);
    ck_assert(pleg_event_channel_pop(small, 0) == NULL);
}
END_TEST

typedef struct {
    PlegEventChannel *channel;
    gint waiting;
    PlegPodLifecycleEvent *event;
} PopThread;

static gpointer
pop_thread(gpointer data)
{
    PopThread *pt = data;

    g_atomic_int_set(&pt->waiting, 1);
    /* Bounded, so that a lost wake-up fails the test instead of hanging it. */
    pt->event = pleg_event_channel_pop(pt->channel, 5 * G_USEC_PER_SEC);
    return NULL;
}

static gboolean
is_waiting(gpointer data)
{
    return g_atomic_int_get(&((PopThread *)data)->waiting);
}

/* Unsubscribing wakes a consumer blocked in pleg_event_channel_pop(), which returns NULL. */
START_TEST(test_unsubscribe_wakes_pop)
{
    g_autoptr(Fixture) fx = fixture_new();
    PopThread pt = {pleg_generic_subscribe(fx->pleg, 0), 0, NULL};
    GThread *thread = g_thread_new("pop", pop_thread, &pt);

    ck_assert(wait_until(is_waiting, &pt, WAIT_USEC));
    /* Give the thread every chance to be inside the wait. */
    for (int i = 0; i < 10; i++)
        g_thread_yield();
    pleg_generic_unsubscribe(fx->pleg, pt.channel);
    g_thread_join(thread);
    ck_assert(pt.event == NULL);
}
END_TEST

static Suite *
relist_suite(void)
{
    Suite *suite = suite_create("relist");
    TCase *tc = tcase_create("events");

    tcase_add_loop_test(tc, test_container_transitions, 0, G_N_ELEMENTS(transitions));
    tcase_add_test(tc, test_sandbox_events);
    tcase_add_test(tc, test_several_pods);
    tcase_add_test(tc, test_death_after_one_relist);
    tcase_add_test(tc, test_death_after_three_relists);
    tcase_add_test(tc, test_died_carries_exit);
    tcase_add_test(tc, test_list_error);
    tcase_add_test(tc, test_unsubscribe);
    suite_add_tcase(suite, tc);

    tc = tcase_create("channel");
    tcase_add_test(tc, test_channel_full);
    tcase_add_test(tc, test_channel_full_then_removed);
    tcase_add_test(tc, test_channel_full_exit_while_stalled);
    tcase_add_test(tc, test_channel_full_removed_while_stalled);
    tcase_add_test(tc, test_channel_full_flapping_is_bounded);
    tcase_add_test(tc, test_channel_full_two_subscribers);
    suite_add_tcase(suite, tc);

    /* A separate case with a short Check timeout: the bug it catches tends to hang. */
    tc = tcase_create("unsubscribe");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_unsubscribe_wakes_pop);
    suite_add_tcase(suite, tc);

    tc = tcase_create("metrics");
    tcase_add_test(tc, test_events_total);
    tcase_add_test(tc, test_running_counts);
    tcase_add_test(tc, test_relist_metrics);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    return run_suite(relist_suite());
}
