/* SPDX-License-Identifier: Apache-2.0 */
/* Suspending a pod's relists while its sync runs (KEP-3386): coalescing, nesting, races. */
#include "core-test.h"

#define HOUR_USEC (G_GINT64_CONSTANT(3600) * G_USEC_PER_SEC)

/* Runs the dispatcher (long period) over the requests queued by hand so far: its first global
 * relist covers every one of them, so afterwards kubelet_pleg_relist_requests_total{outcome=
 * "covered"} tells how many were queued, per source.  A sentinel request (post_allocation)
 * marks the end of the queue. */
static void
flush_queue(Fixture *fx)
{
    ck_assert_int_eq(
        pleg_generic_request_relist(fx->pleg, "sentinel", PLEG_RELIST_SOURCE_POST_ALLOCATION),
        PLEG_RELIST_REQUEST_QUEUED);
    pleg_generic_start(fx->pleg);
    ck_assert(requests_reach(fx, "post_allocation", "covered", 1));
    pleg_generic_stop(fx->pleg);
}

/* Requests found queued by flush_queue(), all sources. */
static double
covered(Fixture *fx)
{
    return requests(fx, "global", "covered") + requests(fx, "evented_pleg", "covered") +
           requests(fx, "post_sync", "covered");
}

static Fixture *
suspend_fixture(void)
{
    PlegGenericConfig config;
    Fixture *fx;

    pleg_generic_config_init(&config);
    config.relist_period_usec = HOUR_USEC;
    fx = fixture_new_full(&config, 0, TRUE);
    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    fixture_add_pod(fx, "pod2", "s2", "c2", NULL);
    relist(fx);
    g_ptr_array_unref(drain(fx));
    return fx;
}

/* A global relist skips a suspended pod and publishes the others. */
START_TEST(test_suspend_global_relist)
{
    g_autoptr(Fixture) fx = suspend_fixture();
    g_autoptr(PlegPodStatus) before = cache_status(fx, "pod1");
    g_autoptr(PlegPodStatus) after = NULL;

    pleg_generic_suspend_pod(fx->pleg, "pod1");
    fake_runtime_set_container_state(fx->fake, "c1", PLEG_CONTAINER_STATE_EXITED);
    fake_runtime_set_container_state(fx->fake, "c2", PLEG_CONTAINER_STATE_EXITED);
    fx->clock.now_ns += NSEC_PER_SEC;
    relist(fx);
    assert_drained(fx, "pod2 ContainerDied c2");
    after = cache_status(fx, "pod1");
    ck_assert(after == before); /* the very same entry */
    {
        gint64 modified = 0;
        ck_assert(
            pleg_pod_cache_get(pleg_generic_get_cache(fx->pleg), "pod1", NULL, NULL, &modified));
        ck_assert_int_eq(modified, T0_NS);
    }
    ck_assert_int_eq(cache_container_state(fx, "pod1", "c1"), PLEG_CONTAINER_STATE_RUNNING);
    ck_assert_int_eq(cache_container_state(fx, "pod2", "c2"), PLEG_CONTAINER_STATE_EXITED);

    /* Still nothing while suspended. */
    relist(fx);
    assert_drained(fx, "");

    /* After resume, the next relist publishes what was held back. */
    pleg_generic_resume_pod(fx->pleg, "pod1");
    relist(fx);
    assert_drained(fx, "pod1 ContainerDied c1");
    ck_assert_int_eq(cache_container_state(fx, "pod1", "c1"), PLEG_CONTAINER_STATE_EXITED);
}
END_TEST

/* Requests while suspended are coalesced into exactly one relist queued on resume. */
START_TEST(test_suspend_coalesces_requests)
{
    g_autoptr(Fixture) fx = suspend_fixture();

    pleg_generic_suspend_pod(fx->pleg, "pod1");
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(
            pleg_generic_request_relist(fx->pleg, "pod1", PLEG_RELIST_SOURCE_EVENTED_PLEG),
            PLEG_RELIST_REQUEST_COALESCED);
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "pod1", PLEG_RELIST_SOURCE_POST_SYNC),
                     PLEG_RELIST_REQUEST_COALESCED);
    ck_assert_int_eq(requests(fx, "evented_pleg", "coalesced"), 5);
    ck_assert_int_eq(requests(fx, "post_sync", "coalesced"), 1);
    ck_assert_int_eq(requests(fx, "evented_pleg", "queued"), 0);
    /* Other pods are not affected. */
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "pod2", PLEG_RELIST_SOURCE_POST_SYNC),
                     PLEG_RELIST_REQUEST_QUEUED);
    pleg_generic_resume_pod(fx->pleg, "pod1");

    flush_queue(fx);
    /* pod2's request and the one relist owed to pod1. */
    ck_assert_int_eq(covered(fx), 2);
}
END_TEST

START_TEST(test_suspend_coalesces_one)
{
    g_autoptr(Fixture) fx = suspend_fixture();

    pleg_generic_suspend_pod(fx->pleg, "pod1");
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(
            pleg_generic_request_relist(fx->pleg, "pod1", PLEG_RELIST_SOURCE_EVENTED_PLEG),
            PLEG_RELIST_REQUEST_COALESCED);
    pleg_generic_resume_pod(fx->pleg, "pod1");
    flush_queue(fx);
    ck_assert_int_eq(covered(fx), 1);
    ck_assert_int_eq(requests(fx, "evented_pleg", "covered"), 1);
}
END_TEST

/* Resume with no request and no skipped relist queues nothing. */
START_TEST(test_resume_without_request)
{
    g_autoptr(Fixture) fx = suspend_fixture();

    pleg_generic_suspend_pod(fx->pleg, "pod1");
    /* A relist that finds no change in the pod does not owe it anything. */
    relist(fx);
    pleg_generic_resume_pod(fx->pleg, "pod1");
    flush_queue(fx);
    ck_assert_int_eq(covered(fx), 0);

    /* A resume without a suspend is ignored. */
    pleg_generic_resume_pod(fx->pleg, "pod2");
}
END_TEST

/* A relist that skipped the suspended pod counts as a pending request. */
START_TEST(test_resume_after_skipped_relist)
{
    g_autoptr(Fixture) fx = suspend_fixture();

    pleg_generic_suspend_pod(fx->pleg, "pod1");
    fake_runtime_set_container_state(fx->fake, "c1", PLEG_CONTAINER_STATE_EXITED);
    relist(fx);
    relist(fx);
    ck_assert_uint_eq(pleg_event_channel_get_length(fx->channel), 0);
    pleg_generic_resume_pod(fx->pleg, "pod1");
    flush_queue(fx);
    ck_assert_int_eq(covered(fx), 1);
}
END_TEST

/* With the dispatcher running, the relist queued on resume is served and publishes. */
START_TEST(test_resume_serves_relist)
{
    g_autoptr(Fixture) fx = suspend_fixture();
    g_autoptr(PlegPodLifecycleEvent) event = NULL;
    g_autoptr(GPtrArray) others =
        g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_lifecycle_event_unref);

    fx->clock.now_ns += NSEC_PER_SEC;
    fake_runtime_set_container_state(fx->fake, "c2", PLEG_CONTAINER_STATE_EXITED);
    pleg_generic_start(fx->pleg);
    /* The dispatcher's first global relist (or this request) reports c2. */
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "pod2", PLEG_RELIST_SOURCE_POST_SYNC),
                     PLEG_RELIST_REQUEST_QUEUED);
    event = wait_event_for(fx, "pod2", PLEG_CONTAINER_DIED, "c2", WAIT_USEC, others);
    ck_assert(event != NULL);
    g_clear_pointer(&event, pleg_pod_lifecycle_event_unref);

    pleg_generic_suspend_pod(fx->pleg, "pod1");
    fake_runtime_exit_container(fx->fake, "c1", 2, "Error", T0_NS);
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "pod1", PLEG_RELIST_SOURCE_EVENTED_PLEG),
                     PLEG_RELIST_REQUEST_COALESCED);
    ck_assert_uint_eq(pleg_event_channel_get_length(fx->channel), 0);
    pleg_generic_resume_pod(fx->pleg, "pod1");

    event = wait_event_for(fx, "pod1", PLEG_CONTAINER_DIED, "c1", WAIT_USEC, others);
    ck_assert(event != NULL);
    ck_assert_int_eq(event->relist_source, PLEG_RELIST_SOURCE_EVENTED_PLEG);
    ck_assert(event->has_exit);
    ck_assert_int_eq(event->exit_code, 2);
    ck_assert_uint_eq(count_events(others, "pod1", PLEG_CONTAINER_DIED, NULL), 0);
}
END_TEST

/* Suspensions nest. */
START_TEST(test_suspend_nested)
{
    g_autoptr(Fixture) fx = suspend_fixture();

    pleg_generic_suspend_pod(fx->pleg, "pod1");
    pleg_generic_suspend_pod(fx->pleg, "pod1");
    fake_runtime_set_container_state(fx->fake, "c1", PLEG_CONTAINER_STATE_EXITED);
    relist(fx);
    assert_drained(fx, "");

    pleg_generic_resume_pod(fx->pleg, "pod1");
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "pod1", PLEG_RELIST_SOURCE_POST_SYNC),
                     PLEG_RELIST_REQUEST_COALESCED);
    relist(fx);
    assert_drained(fx, "");

    pleg_generic_resume_pod(fx->pleg, "pod1");
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "pod1", PLEG_RELIST_SOURCE_POST_SYNC),
                     PLEG_RELIST_REQUEST_QUEUED);
    relist(fx);
    assert_drained(fx, "pod1 ContainerDied c1");
}
END_TEST

/* A targeted relist of a suspended pod does not publish and stays pending. */
START_TEST(test_suspend_relist_pod)
{
    g_autoptr(Fixture) fx = suspend_fixture();

    gint64 modified_before = 0, modified_after = 0;

    ck_assert(
        pleg_pod_cache_get(pleg_generic_get_cache(fx->pleg), "pod1", NULL, NULL, &modified_before));
    pleg_generic_suspend_pod(fx->pleg, "pod1");
    fake_runtime_set_container_state(fx->fake, "c1", PLEG_CONTAINER_STATE_EXITED);
    fx->clock.now_ns += NSEC_PER_SEC;
    ck_assert(pleg_generic_relist_pod(fx->pleg, "pod1", PLEG_RELIST_SOURCE_EVENTED_PLEG, NULL));
    assert_drained(fx, "");
    ck_assert_int_eq(cache_container_state(fx, "pod1", "c1"), PLEG_CONTAINER_STATE_RUNNING);
    /* Not even marked as observed: the entry would claim to be fresh while it is stale. */
    ck_assert(
        pleg_pod_cache_get(pleg_generic_get_cache(fx->pleg), "pod1", NULL, NULL, &modified_after));
    ck_assert_msg(modified_after == modified_before,
                  "suspended pod1's cache entry was touched: modified %" G_GINT64_FORMAT
                  " -> %" G_GINT64_FORMAT,
                  modified_before, modified_after);
    pleg_generic_resume_pod(fx->pleg, "pod1");
    flush_queue(fx);
    ck_assert_int_eq(requests(fx, "evented_pleg", "covered"), 1);
    ck_assert_int_eq(covered(fx), 1);

    /* The dispatcher's global relist published it meanwhile. */
    assert_drained(fx, "pod1 ContainerDied c1");
}
END_TEST

/* A relist already inspecting the pod when the suspension starts does not publish it. */
START_TEST(test_suspend_during_inspection)
{
    g_autoptr(Fixture) fx = suspend_fixture();
    RelistThread rt;

    fake_runtime_set_container_state(fx->fake, "c1", PLEG_CONTAINER_STATE_EXITED);
    fake_runtime_set_container_state(fx->fake, "c2", PLEG_CONTAINER_STATE_EXITED);
    fake_runtime_block(fx->fake, FAKE_OP_POD_SANDBOX_STATUS, "s1");
    relist_thread_start(&rt, fx->pleg);
    ck_assert(fake_runtime_wait_blocked(fx->fake, WAIT_USEC));

    /* Must return while the relist is stuck inside the pod's inspection. */
    pleg_generic_suspend_pod(fx->pleg, "pod1");
    fake_runtime_unblock(fx->fake);
    relist_thread_join(&rt);

    assert_drained(fx, "pod2 ContainerDied c2");
    ck_assert_int_eq(cache_container_state(fx, "pod1", "c1"), PLEG_CONTAINER_STATE_RUNNING);

    pleg_generic_resume_pod(fx->pleg, "pod1");
    relist(fx);
    assert_drained(fx, "pod1 ContainerDied c1");
    ck_assert_int_eq(cache_container_state(fx, "pod1", "c1"), PLEG_CONTAINER_STATE_EXITED);
}
END_TEST

/* --- stress ------------------------------------------------------------------------------- */

#define STRESS_PODS       3
#define STRESS_THREADS    4
#define STRESS_ITERATIONS 1000

typedef struct {
    Fixture *fx;
    guint index;
} Worker;

typedef struct {
    Fixture *fx;
    GMutex lock;
    GPtrArray *events;
    gint stop;
} Consumer;

static gpointer
consumer_thread(gpointer data)
{
    Consumer *c = data;

    while (!g_atomic_int_get(&c->stop)) {
        PlegPodLifecycleEvent *event = pleg_event_channel_pop(c->fx->channel, 2000);
        if (event) {
            g_mutex_lock(&c->lock);
            g_ptr_array_add(c->events, event);
            g_mutex_unlock(&c->lock);
        }
    }
    return NULL;
}

static gpointer
worker_thread(gpointer data)
{
    Worker *w = data;
    PlegGeneric *pleg = w->fx->pleg;
    FakeRuntime *fake = w->fx->fake;
    g_autoptr(GRand) rand = g_rand_new_with_seed(w->index + 1);
    g_autoptr(GPtrArray) running = g_ptr_array_new_with_free_func(g_free);
    g_autoptr(GPtrArray) exited = g_ptr_array_new_with_free_func(g_free);
    guint next_id = 0;

    for (guint i = 0; i < STRESS_ITERATIONS; i++) {
        guint pod = g_rand_int_range(rand, 0, STRESS_PODS);
        g_autofree char *uid = g_strdup_printf("pod%u", pod);
        g_autofree char *sandbox = g_strdup_printf("s%u", pod);
        PlegRelistSource source =
            g_rand_boolean(rand) ? PLEG_RELIST_SOURCE_EVENTED_PLEG : PLEG_RELIST_SOURCE_POST_SYNC;
        gboolean suspend = g_rand_int_range(rand, 0, 3) == 0;
        guint action = g_rand_int_range(rand, 0, 4);

        if (suspend)
            pleg_generic_suspend_pod(pleg, uid);
        switch (action) {
        case 0: {
            char *id = g_strdup_printf("w%u-c%u-%s", w->index, next_id++, sandbox);
            fake_runtime_add_container(fake, id, sandbox, PLEG_CONTAINER_STATE_RUNNING);
            g_ptr_array_add(running, id);
            break;
        }
        case 1:
            if (running->len) {
                char *id = g_ptr_array_steal_index(running, 0);
                fake_runtime_exit_container(fake, id, 1, "Error", T0_NS);
                g_ptr_array_add(exited, id);
            }
            break;
        case 2:
            if (exited->len) {
                g_autofree char *id = g_ptr_array_steal_index(exited, 0);
                fake_runtime_remove_container(fake, id);
            }
            break;
        default:
            break;
        }
        pleg_generic_request_relist(pleg, uid, source);
        if (suspend) {
            if (g_rand_boolean(rand))
                pleg_generic_request_relist(pleg, uid, source);
            pleg_generic_resume_pod(pleg, uid);
        }
        /* Pace the workers so that relists interleave with them. */
        g_usleep(g_rand_int_range(rand, 0, 1000));
    }
    return NULL;
}

static gboolean
is_substring_order(const char *sequence)
{
    /* Delivered events of one container follow Started? Died? Removed? with no repeat. */
    static const char *const allowed[] = {
        "", "S", "D", "R", "SD", "SR", "DR", "SDR",
    };

    for (guint i = 0; i < G_N_ELEMENTS(allowed); i++)
        if (g_str_equal(sequence, allowed[i]))
            return TRUE;
    return FALSE;
}

START_TEST(test_suspend_stress)
{
    PlegGenericConfig config;
    g_autoptr(Fixture) fx = NULL;
    Consumer consumer = {0};
    GThread *consumer_t;
    GThread *threads[STRESS_THREADS];
    Worker workers[STRESS_THREADS];
    g_autoptr(GHashTable) sequences = NULL;
    g_autoptr(GPtrArray) containers = NULL;

    pleg_generic_config_init(&config);
    config.relist_period_usec = 10 * 1000;
    fx = fixture_new_full(&config, 0, FALSE);
    for (guint p = 0; p < STRESS_PODS; p++) {
        g_autofree char *uid = g_strdup_printf("pod%u", p);
        g_autofree char *sandbox = g_strdup_printf("s%u", p);
        fake_runtime_add_sandbox(fx->fake, sandbox, uid, PLEG_POD_SANDBOX_STATE_READY);
    }

    consumer.fx = fx;
    g_mutex_init(&consumer.lock);
    consumer.events =
        g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_lifecycle_event_unref);
    consumer_t = g_thread_new("consumer", consumer_thread, &consumer);

    pleg_generic_start(fx->pleg);
    for (guint i = 0; i < STRESS_THREADS; i++) {
        workers[i] = (Worker){fx, i};
        threads[i] = g_thread_new("worker", worker_thread, &workers[i]);
    }
    for (guint i = 0; i < STRESS_THREADS; i++)
        g_thread_join(threads[i]);
    pleg_generic_stop(fx->pleg);
    /* One final relist settles everything: no pod is suspended any more. */
    relist(fx);
    g_atomic_int_set(&consumer.stop, 1);
    g_thread_join(consumer_t);
    g_ptr_array_extend_and_steal(consumer.events, drain(fx));
    g_mutex_clear(&consumer.lock);

    /* The cache matches the runtime. */
    ck_assert(pleg_runtime_list_containers(fx->runtime, NULL, &containers, NULL, NULL));
    for (guint p = 0; p < STRESS_PODS; p++) {
        g_autofree char *uid = g_strdup_printf("pod%u", p);
        g_autofree char *sandbox = g_strdup_printf("s%u", p);
        g_autoptr(PlegPodStatus) status = cache_status(fx, uid);
        guint n = 0;

        ck_assert_msg(status != NULL, "no cache entry for %s", uid);
        for (guint i = 0; i < containers->len; i++) {
            const PlegContainer *c = g_ptr_array_index(containers, i);
            const PlegContainerStatus *cs;

            if (!g_str_equal(c->pod_sandbox_id, sandbox))
                continue;
            n++;
            cs = pleg_pod_status_find_container(status, c->id);
            ck_assert_msg(cs != NULL, "%s missing from the cache of %s", c->id, uid);
            ck_assert_msg(cs->state == c->state, "%s is %s in the cache, %s in the runtime", c->id,
                          pleg_container_state_to_string(cs->state),
                          pleg_container_state_to_string(c->state));
        }
        ck_assert_uint_eq(status->container_statuses->len, n);
    }

    /* Every container's delivered events are in order, never repeated, and end in its state. */
    sequences = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    for (guint i = 0; i < consumer.events->len; i++) {
        const PlegPodLifecycleEvent *event = g_ptr_array_index(consumer.events, i);
        const char *letter;
        char *seq;

        if (!event->container_id || event->container_id[0] == 's')
            continue;
        ck_assert(event->type != PLEG_CONTAINER_CHANGED);
        letter = event->type == PLEG_CONTAINER_STARTED ? "S"
                 : event->type == PLEG_CONTAINER_DIED  ? "D"
                                                       : "R";
        seq = g_hash_table_lookup(sequences, event->container_id);
        g_hash_table_insert(sequences, g_strdup(event->container_id),
                            g_strconcat(seq ? seq : "", letter, NULL));
    }
    {
        GHashTableIter iter;
        const char *id;
        const char *seq;

        g_hash_table_iter_init(&iter, sequences);
        while (g_hash_table_iter_next(&iter, (gpointer *)&id, (gpointer *)&seq)) {
            PlegContainerState state;
            char last = seq[strlen(seq) - 1];

            ck_assert_msg(is_substring_order(seq), "events of %s: %s", id, seq);
            if (!fake_runtime_lookup_container(fx->fake, id, &state))
                ck_assert_msg(last == 'R', "removed %s ends with %s", id, seq);
            else if (state == PLEG_CONTAINER_STATE_EXITED)
                ck_assert_msg(last == 'D', "exited %s ends with %s", id, seq);
            else
                ck_assert_msg(last == 'S', "running %s ends with %s", id, seq);
        }
    }
    for (guint i = 0; i < containers->len; i++) {
        const PlegContainer *c = g_ptr_array_index(containers, i);
        ck_assert_msg(g_hash_table_contains(sequences, c->id), "no event for %s", c->id);
    }
    g_ptr_array_unref(consumer.events);
}
END_TEST

static Suite *
suspend_suite(void)
{
    Suite *suite = suite_create("suspend");
    TCase *tc = tcase_create("suspend");

    tcase_add_test(tc, test_suspend_global_relist);
    tcase_add_test(tc, test_suspend_coalesces_requests);
    tcase_add_test(tc, test_suspend_coalesces_one);
    tcase_add_test(tc, test_resume_without_request);
    tcase_add_test(tc, test_resume_after_skipped_relist);
    tcase_add_test(tc, test_resume_serves_relist);
    tcase_add_test(tc, test_suspend_nested);
    tcase_add_test(tc, test_suspend_relist_pod);
    tcase_add_test(tc, test_suspend_during_inspection);
    suite_add_tcase(suite, tc);

    tc = tcase_create("stress");
    tcase_add_test(tc, test_suspend_stress);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    return run_suite(suspend_suite());
}
