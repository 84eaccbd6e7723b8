/* SPDX-License-Identifier: Apache-2.0 */
/* The dispatcher thread: periodic global relists, RequestRelist, priorities, stop. */
#include "core-test.h"

#define HOUR_USEC (G_GINT64_CONSTANT(3600) * G_USEC_PER_SEC)

/* Real clock; @period_usec between global relists; @queue_capacity 0 for the default. */
static Fixture *
dispatcher_fixture(gint64 period_usec, guint queue_capacity)
{
    PlegGenericConfig config;

    pleg_generic_config_init(&config);
    config.relist_period_usec = period_usec;
    if (queue_capacity)
        config.relist_queue_capacity = queue_capacity;
    return fixture_new_full(&config, 0, FALSE);
}

START_TEST(test_start_relists_at_once)
{
    g_autoptr(Fixture) fx = dispatcher_fixture(HOUR_USEC, 0);
    g_autoptr(PlegPodLifecycleEvent) event = NULL;

    fixture_add_pod(fx, "pod1", "s1", NULL);
    pleg_generic_start(fx->pleg);
    pleg_generic_start(fx->pleg);
    event = wait_event_for(fx, "pod1", PLEG_CONTAINER_STARTED, "s1", WAIT_USEC, NULL);
    ck_assert(event != NULL);
    ck_assert_int_eq(event->relist_source, PLEG_RELIST_SOURCE_GLOBAL);
    ck_assert(pleg_generic_healthy(fx->pleg, NULL));
    ck_assert_uint_eq(fake_runtime_get_call_count(fx->fake, FAKE_OP_LIST_POD_SANDBOXES), 1);

    pleg_generic_stop(fx->pleg);
    pleg_generic_stop(fx->pleg);
    /* Driving by hand still works after a stop. */
    fake_runtime_set_sandbox_state(fx->fake, "s1", PLEG_POD_SANDBOX_STATE_NOTREADY);
    relist(fx);
    g_clear_pointer(&event, pleg_pod_lifecycle_event_unref);
    event = pleg_event_channel_pop(fx->channel, 0);
    ck_assert(event != NULL);
    ck_assert_int_eq(event->type, PLEG_CONTAINER_DIED);

    /* And the dispatcher can be started again. */
    fake_runtime_set_sandbox_state(fx->fake, "s1", PLEG_POD_SANDBOX_STATE_READY);
    pleg_generic_start(fx->pleg);
    g_clear_pointer(&event, pleg_pod_lifecycle_event_unref);
    event = wait_event_for(fx, "pod1", PLEG_CONTAINER_STARTED, "s1", WAIT_USEC, NULL);
    ck_assert(event != NULL);
}
END_TEST

/* The period restarts after each relist: changes are found without any request. */
START_TEST(test_periodic_relist)
{
    g_autoptr(Fixture) fx = dispatcher_fixture(5 * 1000, 0);
    g_autoptr(PlegPodLifecycleEvent) event = NULL;

    fixture_add_pod(fx, "pod1", "s1", NULL);
    pleg_generic_start(fx->pleg);
    event = wait_event_for(fx, "pod1", PLEG_CONTAINER_STARTED, "s1", WAIT_USEC, NULL);
    ck_assert(event != NULL);
    g_clear_pointer(&event, pleg_pod_lifecycle_event_unref);

    fake_runtime_add_container(fx->fake, "c1", "s1", PLEG_CONTAINER_STATE_RUNNING);
    event = wait_event_for(fx, "pod1", PLEG_CONTAINER_STARTED, "c1", WAIT_USEC, NULL);
    ck_assert(event != NULL);
    ck_assert_int_eq(event->relist_source, PLEG_RELIST_SOURCE_GLOBAL);
    g_clear_pointer(&event, pleg_pod_lifecycle_event_unref);

    fake_runtime_exit_container(fx->fake, "c1", 3, "Error", T0_NS);
    event = wait_event_for(fx, "pod1", PLEG_CONTAINER_DIED, "c1", WAIT_USEC, NULL);
    ck_assert(event != NULL);
    ck_assert(event->has_exit);
    ck_assert_int_eq(event->exit_code, 3);
    ck_assert_uint_ge(fake_runtime_get_call_count(fx->fake, FAKE_OP_LIST_POD_SANDBOXES), 3);
}
END_TEST

/* A served request relists its pod and labels the events with its source. */
START_TEST(test_request_served)
{
    g_autoptr(Fixture) fx = dispatcher_fixture(HOUR_USEC, 0);
    g_autoptr(PlegPodLifecycleEvent) event = NULL;
    g_autoptr(GPtrArray) others =
        g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_lifecycle_event_unref);

    fixture_add_pod(fx, "pod1", "s1", NULL);
    fixture_add_pod(fx, "pod2", "s2", NULL);
    pleg_generic_start(fx->pleg);
    g_ptr_array_unref(wait_events(fx, 2, WAIT_USEC));

    fake_runtime_add_container(fx->fake, "c1", "s1", PLEG_CONTAINER_STATE_RUNNING);
    fake_runtime_add_container(fx->fake, "c2", "s2", PLEG_CONTAINER_STATE_RUNNING);
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "pod1", PLEG_RELIST_SOURCE_EVENTED_PLEG),
                     PLEG_RELIST_REQUEST_QUEUED);
    event = wait_event_for(fx, "pod1", PLEG_CONTAINER_STARTED, "c1", WAIT_USEC, others);
    ck_assert(event != NULL);
    ck_assert_int_eq(event->relist_source, PLEG_RELIST_SOURCE_EVENTED_PLEG);
    /* Only pod1 was relisted. */
    ck_assert_uint_eq(others->len, 0);
    ck_assert_uint_eq(pleg_event_channel_get_length(fx->channel), 0);
    ck_assert_int_eq(cache_container_state(fx, "pod2", "c2"), -1);
    g_clear_pointer(&event, pleg_pod_lifecycle_event_unref);

    fake_runtime_exit_container(fx->fake, "c1", 0, "Completed", T0_NS);
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "pod1", PLEG_RELIST_SOURCE_POST_SYNC),
                     PLEG_RELIST_REQUEST_QUEUED);
    event = wait_event_for(fx, "pod1", PLEG_CONTAINER_DIED, "c1", WAIT_USEC, others);
    ck_assert(event != NULL);
    ck_assert_int_eq(event->relist_source, PLEG_RELIST_SOURCE_POST_SYNC);
    ck_assert(event->has_exit);
    ck_assert_str_eq(event->reason, "Completed");
    g_clear_pointer(&event, pleg_pod_lifecycle_event_unref);

    ck_assert_int_eq(
        pleg_generic_request_relist(fx->pleg, "pod2", PLEG_RELIST_SOURCE_POST_ALLOCATION),
        PLEG_RELIST_REQUEST_QUEUED);
    event = wait_event_for(fx, "pod2", PLEG_CONTAINER_STARTED, "c2", WAIT_USEC, others);
    ck_assert(event != NULL);
    ck_assert_int_eq(event->relist_source, PLEG_RELIST_SOURCE_POST_ALLOCATION);
    ck_assert_uint_eq(others->len, 0);

    ck_assert_int_eq(metric_value(fx, "kubelet_pleg_events_total", "evented_pleg", NULL), 1);
    ck_assert_int_eq(metric_value(fx, "kubelet_pleg_events_total", "post_sync", NULL), 1);
    ck_assert_int_eq(metric_value(fx, "kubelet_pleg_events_total", "post_allocation", NULL), 1);
    ck_assert_int_eq(requests(fx, "evented_pleg", "queued"), 1);
    ck_assert_int_eq(requests(fx, "post_sync", "queued"), 1);
    ck_assert_int_eq(requests(fx, "evented_pleg", "covered"), 0);
    {
        CountCond cond = {fx, 3};
        ck_assert(wait_until(pod_relists_reach, &cond, WAIT_USEC));
    }
}
END_TEST

/* Each result names itself as the outcome label of kubelet_pleg_relist_requests_total. */
START_TEST(test_request_result_to_string)
{
    ck_assert_str_eq(pleg_relist_request_result_to_string(PLEG_RELIST_REQUEST_QUEUED), "queued");
    ck_assert_str_eq(pleg_relist_request_result_to_string(PLEG_RELIST_REQUEST_COALESCED),
                     "coalesced");
    ck_assert_str_eq(pleg_relist_request_result_to_string(PLEG_RELIST_REQUEST_DROPPED),
                     "dropped");
    ck_assert_str_eq(pleg_relist_request_result_to_string((PlegRelistRequestResult)42),
                     "unknown");
}
END_TEST

/* A request for a pod that does not exist is a no-op. */
START_TEST(test_request_unknown_pod)
{
    g_autoptr(Fixture) fx = dispatcher_fixture(HOUR_USEC, 0);
    CountCond cond;

    fixture_add_pod(fx, "pod1", "s1", NULL);
    pleg_generic_start(fx->pleg);
    g_ptr_array_unref(wait_events(fx, 1, WAIT_USEC));
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "nope", PLEG_RELIST_SOURCE_EVENTED_PLEG),
                     PLEG_RELIST_REQUEST_QUEUED);
    cond = (CountCond){fx, 1};
    ck_assert(wait_until(pod_relists_reach, &cond, WAIT_USEC));
    ck_assert_uint_eq(pleg_event_channel_get_length(fx->channel), 0);
    ck_assert(!pleg_pod_cache_get(pleg_generic_get_cache(fx->pleg), "nope", NULL, NULL, NULL));
}
END_TEST

/* Requests queued before a global relist starts are covered by it and skipped; the global
 * relist runs first. */
START_TEST(test_request_covered)
{
    g_autoptr(Fixture) fx = dispatcher_fixture(HOUR_USEC, 0);
    g_autoptr(GPtrArray) events = NULL;
    g_autofree char *text = NULL;

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "pod1", PLEG_RELIST_SOURCE_EVENTED_PLEG),
                     PLEG_RELIST_REQUEST_QUEUED);
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "pod1", PLEG_RELIST_SOURCE_POST_SYNC),
                     PLEG_RELIST_REQUEST_QUEUED);
    pleg_generic_start(fx->pleg);

    ck_assert(requests_reach(fx, "evented_pleg", "covered", 1));
    ck_assert(requests_reach(fx, "post_sync", "covered", 1));
    events = wait_events(fx, 2, WAIT_USEC);
    text = sorted_events_str(events);
    ck_assert_str_eq(text, "pod1 ContainerStarted c1,pod1 ContainerStarted s1");
    for (guint i = 0; i < events->len; i++)
        ck_assert_int_eq(((PlegPodLifecycleEvent *)g_ptr_array_index(events, i))->relist_source,
                         PLEG_RELIST_SOURCE_GLOBAL);
    ck_assert_uint_eq(metric_count(fx, "kubelet_pleg_pod_relist_duration_seconds", NULL), 0);
    ck_assert_uint_eq(fake_runtime_get_call_count(fx->fake, FAKE_OP_LIST_POD_SANDBOXES), 1);
}
END_TEST

/* A request queued while a global relist is in progress (after its start) is served after it. */
START_TEST(test_request_during_relist_served)
{
    g_autoptr(Fixture) fx = dispatcher_fixture(HOUR_USEC, 0);
    g_autoptr(PlegPodLifecycleEvent) event = NULL;
    CountCond cond;

    fixture_add_pod(fx, "pod1", "s1", NULL);
    fake_runtime_block(fx->fake, FAKE_OP_LIST_CONTAINERS, NULL);
    pleg_generic_start(fx->pleg);
    ck_assert(fake_runtime_wait_blocked(fx->fake, WAIT_USEC));
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "pod1", PLEG_RELIST_SOURCE_EVENTED_PLEG),
                     PLEG_RELIST_REQUEST_QUEUED);
    fake_runtime_unblock(fx->fake);

    event = wait_event_for(fx, "pod1", PLEG_CONTAINER_STARTED, "s1", WAIT_USEC, NULL);
    ck_assert(event != NULL);
    ck_assert_int_eq(event->relist_source, PLEG_RELIST_SOURCE_GLOBAL);
    cond = (CountCond){fx, 1};
    ck_assert(wait_until(pod_relists_reach, &cond, WAIT_USEC));
    ck_assert_int_eq(requests(fx, "evented_pleg", "covered"), 0);
}
END_TEST

/* The queue is bounded: a full queue drops the request and counts it. */
START_TEST(test_queue_full)
{
    g_autoptr(Fixture) fx = dispatcher_fixture(HOUR_USEC, 2);
    CountCond cond;

    fixture_add_pod(fx, "pod1", "s1", NULL);
    fixture_add_pod(fx, "pod2", "s2", NULL);
    /* Hold the dispatcher inside its first global relist. */
    fake_runtime_block(fx->fake, FAKE_OP_LIST_POD_SANDBOXES, NULL);
    pleg_generic_start(fx->pleg);
    ck_assert(fake_runtime_wait_blocked(fx->fake, WAIT_USEC));

    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "pod1", PLEG_RELIST_SOURCE_EVENTED_PLEG),
                     PLEG_RELIST_REQUEST_QUEUED);
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "pod1", PLEG_RELIST_SOURCE_EVENTED_PLEG),
                     PLEG_RELIST_REQUEST_QUEUED);
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "pod2", PLEG_RELIST_SOURCE_POST_SYNC),
                     PLEG_RELIST_REQUEST_DROPPED);
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "pod2", PLEG_RELIST_SOURCE_EVENTED_PLEG),
                     PLEG_RELIST_REQUEST_DROPPED);
    ck_assert_int_eq(requests(fx, "evented_pleg", "queued"), 2);
    ck_assert_int_eq(requests(fx, "evented_pleg", "dropped"), 1);
    ck_assert_int_eq(requests(fx, "post_sync", "dropped"), 1);

    fake_runtime_unblock(fx->fake);
    /* Both queued requests came after the relist started: both are served. */
    cond = (CountCond){fx, 2};
    ck_assert(wait_until(pod_relists_reach, &cond, WAIT_USEC));
    g_ptr_array_unref(wait_events(fx, 2, WAIT_USEC));

    /* Room again. */
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "pod2", PLEG_RELIST_SOURCE_POST_SYNC),
                     PLEG_RELIST_REQUEST_QUEUED);
    cond = (CountCond){fx, 3};
    ck_assert(wait_until(pod_relists_reach, &cond, WAIT_USEC));
}
END_TEST

START_TEST(test_request_after_stop)
{
    g_autoptr(Fixture) fx = dispatcher_fixture(HOUR_USEC, 0);

    pleg_generic_start(fx->pleg);
    pleg_generic_stop(fx->pleg);
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "pod1", PLEG_RELIST_SOURCE_EVENTED_PLEG),
                     PLEG_RELIST_REQUEST_DROPPED);
    ck_assert_int_eq(requests(fx, "evented_pleg", "dropped"), 1);
}
END_TEST

/* Shutdown comes first: stop drops the queued requests instead of serving them. */
START_TEST(test_stop_drops_queue)
{
    g_autoptr(Fixture) fx = dispatcher_fixture(HOUR_USEC, 0);

    fixture_add_pod(fx, "pod1", "s1", NULL);
    fake_runtime_block(fx->fake, FAKE_OP_LIST_POD_SANDBOXES, NULL);
    pleg_generic_start(fx->pleg);
    ck_assert(fake_runtime_wait_blocked(fx->fake, WAIT_USEC));
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "pod1", PLEG_RELIST_SOURCE_EVENTED_PLEG),
                     PLEG_RELIST_REQUEST_QUEUED);
    ck_assert_int_eq(pleg_generic_request_relist(fx->pleg, "pod1", PLEG_RELIST_SOURCE_POST_SYNC),
                     PLEG_RELIST_REQUEST_QUEUED);
    /* The blocked call is cancelled by the stop. */
    pleg_generic_stop(fx->pleg);
    ck_assert_uint_eq(metric_count(fx, "kubelet_pleg_pod_relist_duration_seconds", NULL), 0);
    ck_assert_uint_eq(fake_runtime_get_call_count(fx->fake, FAKE_OP_LIST_POD_SANDBOXES), 1);
    ck_assert_int_eq(pleg_generic_get_last_relist_time(fx->pleg), 0);
    ck_assert_uint_eq(pleg_event_channel_get_length(fx->channel), 0);
}
END_TEST

/* Stop cancels a runtime call in flight instead of waiting for its deadline. */
START_TEST(test_stop_cancels)
{
    g_autoptr(Fixture) fx = dispatcher_fixture(HOUR_USEC, 0);
    gint64 start;

    fake_runtime_hang(fx->fake, FAKE_OP_LIST_POD_SANDBOXES, NULL, 300 * G_USEC_PER_SEC, 1);
    pleg_generic_start(fx->pleg);
    start = g_get_monotonic_time();
    /* Wait until the dispatcher is inside the hanging call. */
    while (fake_runtime_get_call_count(fx->fake, FAKE_OP_LIST_POD_SANDBOXES) == 0 &&
           g_get_monotonic_time() - start < WAIT_USEC)
        g_usleep(1000);
    ck_assert_uint_eq(fake_runtime_get_call_count(fx->fake, FAKE_OP_LIST_POD_SANDBOXES), 1);
    start = g_get_monotonic_time();
    pleg_generic_stop(fx->pleg);
    /* Far less than the 300 s the call would hang. */
    ck_assert_int_lt(g_get_monotonic_time() - start, 60 * G_USEC_PER_SEC);
    ck_assert_int_eq(pleg_generic_get_last_relist_time(fx->pleg), 0);
    /* A relist cut short by the stop is no failure of the runtime. */
    ck_assert_int_eq(metric_value(fx, "pleg_relist_failures_total", "other", NULL), 0);
}
END_TEST

typedef struct {
    guint calls;
    guint errors;
    gint64 last_time_ns;
} CallbackLog;

static void
on_relist(const GError *error, gint64 relist_time_ns, gpointer user_data)
{
    CallbackLog *log = user_data;

    log->calls++;
    if (error)
        log->errors++;
    log->last_time_ns = relist_time_ns;
}

static gboolean
iterate_until_calls(GMainContext *context, CallbackLog *log, guint calls)
{
    gint64 end_time = g_get_monotonic_time() + WAIT_USEC;

    while (log->calls < calls) {
        if (g_get_monotonic_time() > end_time)
            return FALSE;
        if (!g_main_context_iteration(context, FALSE))
            g_usleep(1000);
    }
    return TRUE;
}

START_TEST(test_relist_callback)
{
    g_autoptr(GMainContext) context = g_main_context_new();
    CallbackLog log = {0};
    PlegGenericConfig config;
    g_autoptr(Fixture) fx = NULL;

    pleg_generic_config_init(&config);
    config.relist_period_usec = 5 * 1000;
    fx = fixture_new_full(&config, 0, TRUE);
    pleg_generic_set_relist_callback(fx->pleg, context, on_relist, &log, NULL);

    /* Not called for relists driven by hand. */
    relist(fx);
    while (g_main_context_iteration(context, FALSE))
        ;
    ck_assert_uint_eq(log.calls, 0);

    fake_runtime_fail(fx->fake, FAKE_OP_LIST_POD_SANDBOXES, NULL, 1);
    fx->clock.now_ns += NSEC_PER_SEC;
    pleg_generic_start(fx->pleg);
    ck_assert(iterate_until_calls(context, &log, 2));
    ck_assert_uint_eq(log.errors, 1);
    ck_assert_int_eq(log.last_time_ns, T0_NS + NSEC_PER_SEC);
    pleg_generic_stop(fx->pleg);
}
END_TEST

static gboolean
relists_at_least(gpointer data)
{
    Fixture *fx = data;

    return metric_count(fx, "kubelet_pleg_relist_duration_seconds", NULL) >= 200;
}

/* A host that does not iterate its callback context: notices stay bounded, and the newest
 * outcome is the one it sees last. */
START_TEST(test_relist_callback_not_iterated)
{
    g_autoptr(GMainContext) context = g_main_context_new();
    CallbackLog log = {0};
    PlegGenericConfig config;
    g_autoptr(Fixture) fx = NULL;

    pleg_generic_config_init(&config);
    config.relist_period_usec = 100;
    fx = fixture_new_full(&config, 0, FALSE);
    pleg_generic_set_relist_callback(fx->pleg, context, on_relist, &log, NULL);
    pleg_generic_start(fx->pleg);
    ck_assert(wait_until(relists_at_least, fx, WAIT_USEC));
    pleg_generic_stop(fx->pleg);

    while (g_main_context_iteration(context, FALSE))
        ;
    ck_assert_uint_ge(log.calls, 1);
    ck_assert_uint_le(log.calls, 64);
    ck_assert_int_eq(log.last_time_ns, pleg_generic_get_last_relist_time(fx->pleg));
}
END_TEST

/* A global relist that pleg_generic_stop() cancels tells nothing about the runtime: the host
 * must not hear of it as a failure (a host would report the runtime unreachable while it shuts
 * down, and a host that iterates rarely would see that failure as the newest outcome). */
START_TEST(test_relist_callback_not_for_stop)
{
    g_autoptr(GMainContext) context = g_main_context_new();
    CallbackLog log = {0};
    g_autoptr(Fixture) fx = dispatcher_fixture(HOUR_USEC, 0);
    gint64 start;

    pleg_generic_set_relist_callback(fx->pleg, context, on_relist, &log, NULL);
    fake_runtime_hang(fx->fake, FAKE_OP_LIST_POD_SANDBOXES, NULL, 300 * G_USEC_PER_SEC, 1);
    pleg_generic_start(fx->pleg);
    start = g_get_monotonic_time();
    while (fake_runtime_get_call_count(fx->fake, FAKE_OP_LIST_POD_SANDBOXES) == 0 &&
           g_get_monotonic_time() - start < WAIT_USEC)
        g_usleep(1000);
    ck_assert_uint_eq(fake_runtime_get_call_count(fx->fake, FAKE_OP_LIST_POD_SANDBOXES), 1);
    pleg_generic_stop(fx->pleg);

    while (g_main_context_iteration(context, FALSE))
        ;
    ck_assert_uint_eq(log.calls, 0);

    /* A relist that ends before the stop is still reported. */
    pleg_generic_start(fx->pleg);
    ck_assert(iterate_until_calls(context, &log, 1));
    pleg_generic_stop(fx->pleg);
    ck_assert_uint_eq(log.errors, 0);
    ck_assert_int_eq(log.last_time_ns, pleg_generic_get_last_relist_time(fx->pleg));
}
END_TEST

/* The callback context is iterated by a host thread of its own. */
typedef struct {
    GMainContext *context;
    GMutex lock;
    GCond cond;
    gboolean in_callback; /* the first callback is running and waits for release */
    gboolean release;
    gboolean destroyed;   /* the destroy notify ran */
    gboolean used_destroyed;
    gint quit;
} CallbackHost;

static void
on_relist_blocking(const GError *error, gint64 relist_time_ns, gpointer user_data)
{
    CallbackHost *host = user_data;

    g_mutex_lock(&host->lock);
    if (host->destroyed)
        host->used_destroyed = TRUE;
    host->in_callback = TRUE;
    g_cond_broadcast(&host->cond);
    while (!host->release)
        g_cond_wait(&host->cond, &host->lock);
    if (host->destroyed)
        host->used_destroyed = TRUE;
    g_mutex_unlock(&host->lock);
}

static void
on_relist_destroy(gpointer user_data)
{
    CallbackHost *host = user_data;

    g_mutex_lock(&host->lock);
    host->destroyed = TRUE;
    g_cond_broadcast(&host->cond);
    g_mutex_unlock(&host->lock);
}

static gpointer
callback_host_thread(gpointer data)
{
    CallbackHost *host = data;

    g_main_context_push_thread_default(host->context);
    while (!g_atomic_int_get(&host->quit))
        g_main_context_iteration(host->context, TRUE);
    g_main_context_pop_thread_default(host->context);
    return NULL;
}

static gpointer
free_pleg_thread(gpointer data)
{
    pleg_generic_free(data);
    return NULL;
}

/* pleg_generic_free() (or a new callback) while the host thread runs the callback: the
 * destroy notify waits until the callback returned, and the PLEG stays alive until then. */
START_TEST(test_relist_callback_free_while_running)
{
    CallbackHost host = {.context = g_main_context_new()};
    Fixture *fx = dispatcher_fixture(1000, 0);
    GThread *host_thread, *free_thread;
    gint64 end_time;

    g_mutex_init(&host.lock);
    g_cond_init(&host.cond);
    pleg_generic_set_relist_callback(fx->pleg, host.context, on_relist_blocking, &host,
                                     on_relist_destroy);
    host_thread = g_thread_new("callback-host", callback_host_thread, &host);
    pleg_generic_start(fx->pleg);

    g_mutex_lock(&host.lock);
    end_time = g_get_monotonic_time() + WAIT_USEC;
    while (!host.in_callback)
        ck_assert(g_cond_wait_until(&host.cond, &host.lock, end_time));
    g_mutex_unlock(&host.lock);

    /* The fixture's PLEG goes from another thread while the callback holds on. */
    free_thread = g_thread_new("free", free_pleg_thread, g_steal_pointer(&fx->pleg));
    g_mutex_lock(&host.lock);
    end_time = g_get_monotonic_time() + G_USEC_PER_SEC / 5;
    while (!host.destroyed && g_cond_wait_until(&host.cond, &host.lock, end_time))
        ;
    ck_assert_msg(!host.destroyed, "destroy notify ran while the callback was running");
    host.release = TRUE;
    g_cond_broadcast(&host.cond);
    g_mutex_unlock(&host.lock);
    g_thread_join(free_thread);

    g_mutex_lock(&host.lock);
    ck_assert(host.destroyed);
    ck_assert(!host.used_destroyed);
    g_mutex_unlock(&host.lock);

    g_atomic_int_set(&host.quit, 1);
    g_main_context_wakeup(host.context);
    g_thread_join(host_thread);
    fixture_free(fx);
    g_main_context_unref(host.context);
    g_cond_clear(&host.cond);
    g_mutex_clear(&host.lock);
}
END_TEST

typedef struct {
    GPtrArray *events;
} AttachLog;

static void
on_event(PlegPodLifecycleEvent *event, gpointer user_data)
{
    AttachLog *log = user_data;

    g_ptr_array_add(log->events, pleg_pod_lifecycle_event_ref(event));
}

START_TEST(test_channel_attach)
{
    g_autoptr(GMainContext) context = g_main_context_new();
    g_autoptr(Fixture) fx = dispatcher_fixture(HOUR_USEC, 0);
    AttachLog log = {
        g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_lifecycle_event_unref)};
    GSource *source;
    gint64 end_time;
    g_autofree char *text = NULL;

    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    source = pleg_event_channel_attach(fx->channel, context, on_event, &log, NULL);
    pleg_generic_start(fx->pleg);
    end_time = g_get_monotonic_time() + WAIT_USEC;
    while (log.events->len < 2 && g_get_monotonic_time() < end_time) {
        if (!g_main_context_iteration(context, FALSE))
            g_usleep(1000);
    }
    text = sorted_events_str(log.events);
    ck_assert_str_eq(text, "pod1 ContainerStarted c1,pod1 ContainerStarted s1");
    pleg_generic_stop(fx->pleg);
    g_source_destroy(source);
    g_source_unref(source);
    g_ptr_array_unref(log.events);
}
END_TEST

static Suite *
dispatcher_suite(void)
{
    Suite *suite = suite_create("dispatcher");
    TCase *tc = tcase_create("dispatcher");

    tcase_add_test(tc, test_start_relists_at_once);
    tcase_add_test(tc, test_periodic_relist);
    tcase_add_test(tc, test_request_served);
    tcase_add_test(tc, test_request_unknown_pod);
    tcase_add_test(tc, test_request_result_to_string);
    tcase_add_test(tc, test_request_covered);
    tcase_add_test(tc, test_request_during_relist_served);
    tcase_add_test(tc, test_queue_full);
    tcase_add_test(tc, test_request_after_stop);
    tcase_add_test(tc, test_stop_drops_queue);
    tcase_add_test(tc, test_stop_cancels);
    tcase_add_test(tc, test_relist_callback);
    tcase_add_test(tc, test_relist_callback_not_iterated);
    tcase_add_test(tc, test_relist_callback_not_for_stop);
    tcase_add_test(tc, test_relist_callback_free_while_running);
    tcase_add_test(tc, test_channel_attach);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    return run_suite(dispatcher_suite());
}
