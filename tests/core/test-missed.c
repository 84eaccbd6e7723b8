/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What a full channel missed (lib/core/pleg-delivery.c): the missed table of a stalled
 * subscriber stays bounded under churn, and its entries are told apart by pod and container
 * however their ids are spelt.  Reaches the table through subscriber_missed_entries().
 */
#include "core-test.h"

#include "pleg-generic-private.h"

static guint
missed_entries(Fixture *fx)
{
    return subscriber_missed_entries(fx->pleg, fx->channel);
}

static void
relist_pod(Fixture *fx, const char *pod_uid)
{
    g_autoptr(GError) error = NULL;

    ck_assert_msg(pleg_generic_relist_pod(fx->pleg, pod_uid, PLEG_RELIST_SOURCE_POST_SYNC, &error),
                  "relist of %s failed: %s", pod_uid, error ? error->message : "(no error)");
}

/* Issue 24, point 7: the key joined pod UID and container id with "/", so container "c" of pod
 * "a/b" and container "b/c" of pod "a" shared an entry, and a pod's relist redelivered the
 * other pod's event (or not its own). */
START_TEST(test_keys_do_not_collide)
{
    g_autoptr(Fixture) fx = fixture_new_full(NULL, 4, TRUE);

    /* Four events fill the channel. */
    fixture_add_pod(fx, "filler", "s0", "f1", "f2", "f3", NULL);
    relist(fx);
    fixture_add_pod(fx, "a/b", "s1", "c", NULL);
    fixture_add_pod(fx, "a", "s2", "b/c", NULL);
    relist(fx);
    ck_assert_uint_eq(missed_entries(fx), 4);
    assert_drained(fx, "filler ContainerStarted f1,filler ContainerStarted f2,"
                       "filler ContainerStarted f3,filler ContainerStarted s0");

    relist_pod(fx, "a");
    assert_drained(fx, "a ContainerStarted b/c,a ContainerStarted s2");
    ck_assert_uint_eq(missed_entries(fx), 2);
    relist_pod(fx, "a/b");
    assert_drained(fx, "a/b ContainerStarted c,a/b ContainerStarted s1");
    ck_assert_uint_eq(missed_entries(fx), 0);
}
END_TEST

#define CHURN_ROUND 256

/* Round @round of a pod's churn: its containers "<pod>-<round>-<i>" start, and those of the
 * round before are gone. */
static void
churn_containers(Fixture *fx, const char *pod_uid, const char *sandbox_id, guint round)
{
    for (guint i = 0; i < CHURN_ROUND; i++) {
        g_autofree char *id = g_strdup_printf("%s-%u-%u", pod_uid, round, i);

        fake_runtime_add_container(fx->fake, id, sandbox_id, PLEG_CONTAINER_STATE_RUNNING);
        if (round > 0) {
            g_autofree char *old = g_strdup_printf("%s-%u-%u", pod_uid, round - 1, i);
            fake_runtime_remove_container(fx->fake, old);
        }
    }
}

/* Drains and relists until nothing is owed; returns every event drained. */
static GPtrArray *
drain_all(Fixture *fx)
{
    GPtrArray *all = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_lifecycle_event_unref);

    for (guint i = 0; i < 1000; i++) {
        g_autoptr(GPtrArray) events = drain(fx);

        for (guint e = 0; e < events->len; e++)
            g_ptr_array_add(all, pleg_pod_lifecycle_event_ref(g_ptr_array_index(events, e)));
        if (missed_entries(fx) == 0)
            break;
        relist(fx);
    }
    ck_assert_uint_eq(missed_entries(fx), 0);
    return all;
}

/* Issue 24, point 7: a subscriber that never drains its channel, while containers come and go
 * by the thousand.  Each container gone leaves three events owed (Started, Died, Removed); the
 * table used to keep one entry for every container ever seen. */
START_TEST(test_stalled_subscriber_container_churn)
{
    g_autoptr(Fixture) fx = fixture_new_full(NULL, 1, TRUE);
    guint rounds = MISSED_CONTAINERS_MAX / CHURN_ROUND + 4;
    g_autoptr(GPtrArray) events = NULL;
    g_autofree char *text = NULL;

    fixture_add_pod(fx, "filler", "s0", NULL);
    relist(fx); /* fills the channel */
    fixture_add_pod(fx, "pod1", "s1", NULL);
    fixture_add_pod(fx, "pod2", "s2", "steady", NULL);
    for (guint round = 0; round < rounds; round++) {
        churn_containers(fx, "pod1", "s1", round);
        relist(fx);
        ck_assert_uint_le(missed_entries(fx), MISSED_CONTAINERS_MAX);
    }

    /* The subscriber drains at last: past the bound, what it was owed collapsed into one
     * PodSync a pod, whose state the cache holds. */
    events = drain_all(fx);
    text = sorted_events_str(events);
    ck_assert_str_eq(text, "filler ContainerStarted s0,pod1 PodSync,pod2 PodSync");

    /* Afterwards each container's events are kept again: the round's 256 Started (one of them
     * delivered at once), the round before's 256 Died and Removed. */
    churn_containers(fx, "pod1", "s1", rounds);
    relist(fx);
    ck_assert_uint_eq(pleg_event_channel_get_length(fx->channel), 1);
    ck_assert_uint_eq(missed_entries(fx), 2 * CHURN_ROUND - 1);
}
END_TEST

/* The same with whole pods: each round's pods start, the round before's are gone.  A pod the
 * subscriber never heard of that is gone needs no PodSync, so none is kept for it. */
START_TEST(test_stalled_subscriber_pod_churn)
{
    g_autoptr(Fixture) fx = fixture_new_full(NULL, 64, TRUE);
    guint rounds = MISSED_CONTAINERS_MAX / (2 * CHURN_ROUND) + 4;
    g_autoptr(GPtrArray) events = NULL;

    /* 64 events fill the channel. */
    fake_runtime_add_sandbox(fx->fake, "s0", "filler", PLEG_POD_SANDBOX_STATE_READY);
    for (guint i = 0; i < 63; i++) {
        g_autofree char *id = g_strdup_printf("f%u", i);

        fake_runtime_add_container(fx->fake, id, "s0", PLEG_CONTAINER_STATE_RUNNING);
    }
    relist(fx);
    ck_assert_uint_eq(missed_entries(fx), 0);
    for (guint round = 0; round < rounds; round++) {
        for (guint i = 0; i < CHURN_ROUND; i++) {
            g_autofree char *uid = g_strdup_printf("pod-%u-%u", round, i);
            g_autofree char *sandbox = g_strdup_printf("s-%u-%u", round, i);
            g_autofree char *container = g_strdup_printf("c-%u-%u", round, i);

            fixture_add_pod(fx, uid, sandbox, container, NULL);
            if (round > 0) {
                g_autofree char *old_sandbox = g_strdup_printf("s-%u-%u", round - 1, i);
                g_autofree char *old_container = g_strdup_printf("c-%u-%u", round - 1, i);

                fake_runtime_remove_container(fx->fake, old_container);
                fake_runtime_remove_sandbox(fx->fake, old_sandbox);
            }
        }
        relist(fx);
        /* The containers' bound, and at most a PodSync for each pod the PLEG knows. */
        ck_assert_uint_le(missed_entries(fx), MISSED_CONTAINERS_MAX + CHURN_ROUND + 1);
    }

    /* Every pod alive now is told of, by a PodSync or by its own events. */
    events = drain_all(fx);
    for (guint i = 0; i < CHURN_ROUND; i++) {
        g_autofree char *uid = g_strdup_printf("pod-%u-%u", rounds - 1, i);

        ck_assert_uint_ge(count_events(events, uid, PLEG_POD_SYNC, NULL) +
                              count_events(events, uid, PLEG_CONTAINER_STARTED, NULL),
                          1);
    }
}
END_TEST

static Suite *
missed_suite(void)
{
    Suite *suite = suite_create("missed");
    TCase *tc = tcase_create("missed");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_keys_do_not_collide);
    tcase_add_test(tc, test_stalled_subscriber_container_churn);
    tcase_add_test(tc, test_stalled_subscriber_pod_churn);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    return run_suite(missed_suite());
}
