/* SPDX-License-Identifier: Apache-2.0 */
/* Resuming from saved records (pleg_generic_restore_record()): the first relist of a PLEG given
 * the records an earlier one left behind reports only what changed meanwhile, nothing as
 * initial; a PLEG given none reports what it first finds as initial. */
#include "core-test.h"

#define READY PLEG_POD_SANDBOX_STATE_READY

/* What an embedder keeps of the events it received: per id, the pod, what the last event said
 * and its names; a ContainerRemoved forgets the id. */
typedef struct {
    char *pod_uid;
    gboolean sandbox;
    PlegContainerState state;
    PlegPodLifecycleEvent *last;
} Saved;

static void
saved_free(Saved *saved)
{
    g_free(saved->pod_uid);
    pleg_pod_lifecycle_event_unref(saved->last);
    g_free(saved);
}

static GHashTable *
saved_new(void)
{
    return g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)saved_free);
}

static void
save_events(GHashTable *saved, GPtrArray *events)
{
    for (guint i = 0; i < events->len; i++) {
        PlegPodLifecycleEvent *event = g_ptr_array_index(events, i);
        Saved *s;

        if (!event->container_id)
            continue;
        if (event->type == PLEG_CONTAINER_REMOVED) {
            g_hash_table_remove(saved, event->container_id);
            continue;
        }
        s = g_new0(Saved, 1);
        s->pod_uid = g_strdup(event->pod_uid);
        s->sandbox = pleg_pod_lifecycle_event_get_details(event)->sandbox;
        s->state = event->type == PLEG_CONTAINER_STARTED ? PLEG_CONTAINER_STATE_RUNNING
                                                         : PLEG_CONTAINER_STATE_EXITED;
        s->last = pleg_pod_lifecycle_event_ref(event);
        g_hash_table_replace(saved, g_strdup(event->container_id), s);
    }
}

/* A new PLEG on @fx's runtime, in place of @fx's, given @saved. */
static void
restart_with(Fixture *fx, GHashTable *saved)
{
    GHashTableIter iter;
    const char *id;
    Saved *s;

    g_clear_pointer(&fx->pleg, pleg_generic_free);
    fx->pleg = pleg_generic_new(fx->runtime, NULL, NULL);
    fx->channel = pleg_generic_subscribe(fx->pleg, 0);
    ck_assert(pleg_generic_restore(fx->pleg, NULL));
    g_hash_table_iter_init(&iter, saved);
    while (g_hash_table_iter_next(&iter, (gpointer *)&id, (gpointer *)&s)) {
        g_autoptr(GError) error = NULL;

        ck_assert_msg(pleg_generic_restore_record(fx->pleg, s->pod_uid, id, s->sandbox, s->state,
                                                  pleg_pod_lifecycle_event_get_details(s->last),
                                                  &error),
                      "%s", error ? error->message : "");
    }
}

static void
assert_none_initial(GPtrArray *events)
{
    for (guint i = 0; i < events->len; i++) {
        const PlegPodLifecycleEvent *event = g_ptr_array_index(events, i);
        g_autofree char *shown = event_str(event);

        ck_assert_msg(!pleg_pod_lifecycle_event_is_initial(event), "%s is initial", shown);
    }
}

static void
add_web(Fixture *fx)
{
    fake_runtime_add_sandbox(fx->fake, "sb0", "uid-web", READY);
    fake_runtime_set_sandbox_metadata(fx->fake, "sb0", "shop", "web", 0);
    fake_runtime_add_container(fx->fake, "c1", "sb0", PLEG_CONTAINER_STATE_RUNNING);
    fake_runtime_set_container_metadata(fx->fake, "c1", "nginx", 0, "nginx:1.25");
    fake_runtime_add_container(fx->fake, "c2", "sb0", PLEG_CONTAINER_STATE_RUNNING);
    fake_runtime_set_container_metadata(fx->fake, "c2", "sidecar", 0, "envoy:1");
    fake_runtime_add_container(fx->fake, "c3", "sb0", PLEG_CONTAINER_STATE_RUNNING);
    fake_runtime_set_container_metadata(fx->fake, "c3", "init", 0, "busybox");
    fake_runtime_exit_container(fx->fake, "c3", 0, "Completed", T0_NS);
}

/* A fresh PLEG marks what its first relist finds as initial, and nothing after. */
START_TEST(test_initial_first_relist)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GPtrArray) first = NULL;
    g_autoptr(GPtrArray) later = NULL;

    add_web(fx);
    relist(fx);
    first = drain(fx);
    ck_assert_uint_eq(first->len, 4); /* sb0, c1 and c2 started, c3 died */
    for (guint i = 0; i < first->len; i++)
        ck_assert(pleg_pod_lifecycle_event_is_initial(g_ptr_array_index(first, i)));
    ck_assert(pleg_pod_lifecycle_event_get_details(g_ptr_array_index(first, 0))->initial);

    /* A change, and a pod that appears later: transitions. */
    fake_runtime_exit_container(fx->fake, "c1", 1, "Error", T0_NS);
    fixture_add_pod(fx, "uid-new", "sb9", "c9", NULL);
    relist(fx);
    later = drain(fx);
    ck_assert_uint_eq(later->len, 3);
    assert_none_initial(later);
}
END_TEST

/* The first global relist fails: the pods of the first that succeeds are still initial. */
START_TEST(test_initial_after_failed_relist)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GPtrArray) events = NULL;

    add_web(fx);
    fake_runtime_fail(fx->fake, FAKE_OP_LIST_POD_SANDBOXES, NULL, 1);
    relist_fails(fx);
    relist(fx);
    events = drain(fx);
    ck_assert_uint_eq(events->len, 4);
    for (guint i = 0; i < events->len; i++)
        ck_assert(pleg_pod_lifecycle_event_is_initial(g_ptr_array_index(events, i)));
}
END_TEST

/* Restart with the records the events left: only what changed while no PLEG watched. */
START_TEST(test_restore_reports_only_changes)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GHashTable) saved = saved_new();
    g_autoptr(GPtrArray) events = NULL;
    g_autoptr(PlegPodStatus) status = NULL;
    g_autofree char *shown = NULL;
    const PlegPodLifecycleEvent *died = NULL;

    add_web(fx);
    relist(fx);
    events = drain(fx);
    save_events(saved, events);
    g_clear_pointer(&events, g_ptr_array_unref);

    /* Downtime: c1 is OOM-killed, c2 removed, c4 created and started; sb0 and c3 as they were. */
    fake_runtime_exit_container(fx->fake, "c1", 137, "OOMKilled", T0_NS + 5 * NSEC_PER_SEC);
    fake_runtime_remove_container(fx->fake, "c2");
    fake_runtime_add_container(fx->fake, "c4", "sb0", PLEG_CONTAINER_STATE_RUNNING);
    restart_with(fx, saved);
    relist(fx);
    events = drain(fx);
    shown = sorted_events_str(events);
    ck_assert_str_eq(shown, "uid-web ContainerDied c1,uid-web ContainerDied c2,"
                            "uid-web ContainerRemoved c2,uid-web ContainerStarted c4");
    assert_none_initial(events);
    for (guint i = 0; i < events->len; i++) {
        const PlegPodLifecycleEvent *event = g_ptr_array_index(events, i);

        if (event->type == PLEG_CONTAINER_DIED && g_str_equal(event->container_id, "c1"))
            died = event;
    }
    /* The death's real exit, and the names of the container, the removed one's from the
     * restored record. */
    ck_assert_ptr_nonnull(died);
    if (!died)
        return;
    ck_assert(died->has_exit);
    ck_assert_int_eq(died->exit_code, 137);
    ck_assert_int_eq(died->finished_at_ns, T0_NS + 5 * NSEC_PER_SEC);
    ck_assert_str_eq(pleg_pod_lifecycle_event_get_details(died)->container_name, "nginx");
    for (guint i = 0; i < events->len; i++) {
        const PlegPodLifecycleEvent *event = g_ptr_array_index(events, i);
        const PlegEventDetails *details = pleg_pod_lifecycle_event_get_details(event);

        ck_assert_str_eq(details->pod_namespace, "shop");
        ck_assert_str_eq(details->pod_name, "web");
        if (g_str_equal(event->container_id, "c2")) {
            ck_assert_str_eq(details->container_name, "sidecar");
            ck_assert_str_eq(details->image, "envoy:1");
        }
    }

    /* The restored pod was inspected: the cache has it, and nothing more is reported. */
    ck_assert(pleg_pod_cache_get(pleg_generic_get_cache(fx->pleg), "uid-web", &status, NULL,
                                 NULL));
    ck_assert_ptr_nonnull(status);
    relist(fx);
    assert_drained(fx, "");
}
END_TEST

/* A pod that is as it was recorded: inspected, no event, no PodSync. */
START_TEST(test_restore_unchanged)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GHashTable) saved = saved_new();
    g_autoptr(GPtrArray) events = NULL;
    g_autoptr(PlegPodStatus) status = NULL;

    add_web(fx);
    relist(fx);
    events = drain(fx);
    save_events(saved, events);
    restart_with(fx, saved);
    relist(fx);
    assert_drained(fx, "");
    ck_assert(pleg_pod_cache_get(pleg_generic_get_cache(fx->pleg), "uid-web", &status, NULL,
                                 NULL));
    ck_assert_ptr_nonnull(status);
    ck_assert_uint_eq(pleg_pod_cache_get_size(pleg_generic_get_cache(fx->pleg)), 1);
    relist(fx);
    assert_drained(fx, "");
}
END_TEST

/* A pod removed entirely while no PLEG watched: each of its containers and its sandbox gets
 * its removal, named from the restored records. */
START_TEST(test_restore_pod_gone)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GHashTable) saved = saved_new();
    g_autoptr(GPtrArray) events = NULL;

    add_web(fx);
    relist(fx);
    events = drain(fx);
    save_events(saved, events);
    g_clear_pointer(&events, g_ptr_array_unref);
    fake_runtime_remove_container(fx->fake, "c1");
    fake_runtime_remove_container(fx->fake, "c2");
    fake_runtime_remove_container(fx->fake, "c3");
    fake_runtime_remove_sandbox(fx->fake, "sb0");
    restart_with(fx, saved);
    relist(fx);
    events = drain(fx);
    ck_assert_uint_eq(count_events(events, "uid-web", PLEG_CONTAINER_REMOVED, NULL), 4);
    /* c3 had died already: only its removal; the others die, then go. */
    ck_assert_uint_eq(count_events(events, "uid-web", PLEG_CONTAINER_DIED, NULL), 3);
    ck_assert_uint_eq(count_events(events, "uid-web", PLEG_CONTAINER_DIED, "c3"), 0);
    for (guint i = 0; i < events->len; i++)
        ck_assert_str_eq(
            pleg_pod_lifecycle_event_get_details(g_ptr_array_index(events, i))->pod_name, "web");
    assert_none_initial(events);
    ck_assert_uint_eq(pleg_pod_cache_get_size(pleg_generic_get_cache(fx->pleg)), 0);
}
END_TEST

/* Restored with no records at all: everything found is new, not initial. */
START_TEST(test_restore_empty)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GHashTable) saved = saved_new();
    g_autoptr(GPtrArray) events = NULL;

    add_web(fx);
    restart_with(fx, saved);
    relist(fx);
    events = drain(fx);
    ck_assert_uint_eq(events->len, 4);
    assert_none_initial(events);
}
END_TEST

START_TEST(test_restore_errors)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GError) error = NULL;

    ck_assert(!pleg_generic_restore_record(fx->pleg, "", "c1", FALSE,
                                           PLEG_CONTAINER_STATE_RUNNING, NULL, &error));
    ck_assert(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT));
    g_clear_error(&error);
    ck_assert(!pleg_generic_restore_record(fx->pleg, "uid", "c1", FALSE,
                                           PLEG_CONTAINER_STATE_CREATED, NULL, &error));
    ck_assert(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT));
    g_clear_error(&error);

    /* Too late once a relist has published a listing. */
    add_web(fx);
    relist(fx);
    ck_assert(!pleg_generic_restore(fx->pleg, &error));
    ck_assert(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_BUSY));
    g_clear_error(&error);
    ck_assert(!pleg_generic_restore_record(fx->pleg, "uid-web", "c1", FALSE,
                                           PLEG_CONTAINER_STATE_RUNNING, NULL, &error));
    ck_assert(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_BUSY));
    /* The refused calls changed nothing: the first relist's events are still initial. */
    for (guint i = 0; i < 4; i++) {
        g_autoptr(GPtrArray) events = drain(fx);

        if (i == 0) {
            ck_assert_uint_eq(events->len, 4);
            ck_assert(pleg_pod_lifecycle_event_is_initial(g_ptr_array_index(events, 0)));
        }
    }
}
END_TEST

static Suite *
restore_suite(void)
{
    Suite *suite = suite_create("restore");
    TCase *tc = tcase_create("restore");

    tcase_add_test(tc, test_initial_first_relist);
    tcase_add_test(tc, test_initial_after_failed_relist);
    tcase_add_test(tc, test_restore_reports_only_changes);
    tcase_add_test(tc, test_restore_unchanged);
    tcase_add_test(tc, test_restore_pod_gone);
    tcase_add_test(tc, test_restore_empty);
    tcase_add_test(tc, test_restore_errors);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    return run_suite(restore_suite());
}
