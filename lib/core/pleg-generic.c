/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Generic PLEG object: construction, configuration, start/stop, subscribers, health and
 * relist state, accessors and metrics registration.  The parts it wires together are listed in
 * pleg-generic-private.h; doc/design.md has threads, locks and data flow.
 */
#include "pleg-config.h"

#include <pleg/pleg-cri-client.h>

#include "pleg-generic-private.h"

static const double exit_detection_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                0.25,  0.5,    1,     2.5,  5,     10};

gint64
now_ns(PlegGeneric *pleg)
{
    if (pleg->config.clock)
        return pleg->config.clock(pleg->config.clock_data);
    return g_get_real_time() * 1000;
}

/* Time since an instant taken as (@wall_ns, @mono_usec).  kubelet measures it on Go's monotonic
 * reading; so does libpleg, unless a test injected a clock, which then drives it. */
gint64
elapsed_usec_since(PlegGeneric *pleg, gint64 wall_ns, gint64 mono_usec)
{
    if (pleg->config.clock)
        return (now_ns(pleg) - wall_ns) / 1000;
    return g_get_monotonic_time() - mono_usec;
}

void
pleg_generic_start(PlegGeneric *pleg)
{
    g_return_if_fail(pleg != NULL);

    if (pleg->thread)
        return;
    g_mutex_lock(&pleg->queue_lock);
    pleg->shutdown = FALSE;
    g_mutex_unlock(&pleg->queue_lock);
    g_mutex_lock(&pleg->state_lock);
    pleg->dispatching = TRUE;
    pleg->attempt_end_ns = now_ns(pleg);
    pleg->attempt_end_mono_usec = g_get_monotonic_time();
    g_mutex_unlock(&pleg->state_lock);
    pleg->thread = g_thread_new("pleg-dispatcher", dispatcher_thread, pleg);
}

/* Whether records may still be restored: nothing has listed yet.  Takes state_lock. */
static gboolean
check_restorable(PlegGeneric *pleg, GError **error)
{
    gboolean listed;

    g_mutex_lock(&pleg->state_lock);
    listed = pleg->thread != NULL || pleg->relisted;
    g_mutex_unlock(&pleg->state_lock);
    if (listed) {
        g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_BUSY,
                            "records can only be restored before the PLEG starts and relists");
        return FALSE;
    }
    return TRUE;
}

gboolean
pleg_generic_restore(PlegGeneric *pleg, GError **error)
{
    g_return_val_if_fail(pleg != NULL, FALSE);
    g_return_val_if_fail(error == NULL || *error == NULL, FALSE);

    if (!check_restorable(pleg, error))
        return FALSE;
    g_mutex_lock(&pleg->state_lock);
    pleg->records_initial = FALSE;
    g_mutex_unlock(&pleg->state_lock);
    return TRUE;
}

/* @pod with @entry in place of the entry of the same id, or added (sandboxes last). */
static PodSnapshot *
snapshot_with(const PodSnapshot *pod, const char *uid, const PodEntry *entry)
{
    PodSnapshot *copy = pod_snapshot_new(uid);

    for (guint k = 0; pod && k < 2; k++) {
        GPtrArray *from = k == 0 ? pod->containers : pod->sandboxes;

        for (guint i = 0; i < from->len; i++) {
            const PodEntry *e = g_ptr_array_index(from, i);

            if (!g_str_equal(e->id, entry->id))
                g_ptr_array_add(e->is_sandbox ? copy->sandboxes : copy->containers,
                                pod_entry_new(e));
        }
    }
    g_ptr_array_add(entry->is_sandbox ? copy->sandboxes : copy->containers, pod_entry_new(entry));
    return copy;
}

gboolean
pleg_generic_restore_record(PlegGeneric *pleg, const char *pod_uid, const char *id,
                            gboolean sandbox, PlegContainerState state,
                            const PlegEventDetails *names, GError **error)
{
    PodEntry entry = {0};
    PodRecord *rec;

    g_return_val_if_fail(pleg != NULL, FALSE);
    g_return_val_if_fail(error == NULL || *error == NULL, FALSE);

    if (!pod_uid || !*pod_uid || !id || !*id ||
        (state != PLEG_CONTAINER_STATE_RUNNING && state != PLEG_CONTAINER_STATE_EXITED)) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                    "a restored record needs a pod UID, an id and the state running or exited "
                    "(got pod %s, id %s, state %s)",
                    pod_uid && *pod_uid ? "set" : "empty", id && *id ? "set" : "empty",
                    pleg_container_state_to_string(state));
        return FALSE;
    }
    if (!pleg_generic_restore(pleg, error))
        return FALSE;

    entry.id = id;
    entry.state = pleg_state_from_container(state);
    entry.is_sandbox = sandbox ? TRUE : FALSE;
    if (names) {
        entry.names.name = sandbox ? names->pod_name : names->container_name;
        entry.names.namespace_ = sandbox ? names->pod_namespace : NULL;
        entry.names.image = sandbox ? NULL : names->image;
        entry.names.attempt = names->attempt;
    }

    g_mutex_lock(&pleg->state_lock);
    rec = g_hash_table_lookup(pleg->records, pod_uid);
    if (!rec) {
        rec = g_new0(PodRecord, 1);
        g_hash_table_insert(pleg->records, g_strdup(pod_uid), rec);
    }
    /* Snapshots are immutable once published: a new one for each entry added, which only a
     * restore (before anything runs) does. */
    g_clear_pointer(&rec->current, pod_snapshot_unref);
    rec->current = snapshot_with(rec->old, pod_uid, &entry);
    pod_snapshot_unref(rec->old);
    rec->old = pod_snapshot_ref(rec->current);
    rec->restored = TRUE;
    g_mutex_unlock(&pleg->state_lock);
    return TRUE;
}

void
pleg_generic_stop(PlegGeneric *pleg)
{
    g_return_if_fail(pleg != NULL);

    g_mutex_lock(&pleg->queue_lock);
    pleg->shutdown = TRUE;
    clear_requests(pleg);
    g_cond_broadcast(&pleg->queue_cond);
    g_mutex_unlock(&pleg->queue_lock);

    if (!pleg->thread)
        return;
    g_cancellable_cancel(pleg->cancellable);
    g_thread_join(g_steal_pointer(&pleg->thread));
    g_mutex_lock(&pleg->state_lock);
    pleg->dispatching = FALSE;
    g_mutex_unlock(&pleg->state_lock);

    /* Later relists driven by hand need a cancellable that is not cancelled. */
    g_mutex_lock(&pleg->relist_lock);
    g_object_unref(pleg->cancellable);
    pleg->cancellable = g_cancellable_new();
    g_mutex_unlock(&pleg->relist_lock);
}

/* --- construction, subscribers, health ---------------------------------------------------- */

/* max_status_calls_in_flight took the place of one reserved pointer: the size is kept. */
G_STATIC_ASSERT(sizeof(PlegGenericConfig) ==
                G_STRUCT_OFFSET(PlegGenericConfig, clock_data) + 9 * sizeof(gpointer));

void
pleg_generic_config_init(PlegGenericConfig *config)
{
    g_return_if_fail(config != NULL);

    *config = (PlegGenericConfig){
        .relist_period_usec = PLEG_DEFAULT_RELIST_PERIOD_USEC,
        .relist_threshold_usec = PLEG_DEFAULT_RELIST_THRESHOLD_USEC,
        .relist_queue_capacity = PLEG_DEFAULT_RELIST_QUEUE_CAPACITY,
        .max_status_calls_in_flight = PLEG_DEFAULT_MAX_STATUS_CALLS_IN_FLIGHT,
    };
}

static const char *const relist_outcomes[RELIST_OUTCOME_N] = {
    [RELIST_OUTCOME_QUEUED] = "queued",
    [RELIST_OUTCOME_COALESCED] = "coalesced",
    [RELIST_OUTCOME_COVERED] = "covered",
    [RELIST_OUTCOME_DROPPED] = "dropped",
};

/* pleg_relist_failures_total's reasons: the gRPC status code of a CRI error, as gRPC names it
 * in lower case, at the code's index; "other" for an error of another domain (a runtime that is
 * not the CRI client). */
G_STATIC_ASSERT(RELIST_FAILURE_REASON_N == PLEG_CRI_ERROR_UNAUTHENTICATED + 1);
static const char *const relist_failure_reasons[RELIST_FAILURE_REASON_N] = {
    "other",
    "cancelled",
    "unknown",
    "invalid_argument",
    "deadline_exceeded",
    "not_found",
    "already_exists",
    "permission_denied",
    "resource_exhausted",
    "failed_precondition",
    "aborted",
    "out_of_range",
    "unimplemented",
    "internal",
    "unavailable",
    "data_loss",
    "unauthenticated",
};

void
count_relist_failure(PlegGeneric *pleg, const GError *error)
{
    guint reason = 0;

    if (error && error->domain == PLEG_CRI_ERROR && error->code > 0 &&
        error->code < RELIST_FAILURE_REASON_N)
        reason = (guint)error->code;
    pleg_metric_series_inc(pleg->series.relist_failures[reason]);
}

static void
register_metrics(PlegGeneric *pleg)
{
    PlegMetricsRegistry *r = pleg->metrics;
    static const char *const source_label[] = {"relist_source", NULL};
    static const char *const request_labels[] = {"relist_source", "outcome", NULL};
    static const char *const state_label[] = {"container_state", NULL};
    static const char *const reason_label[] = {"reason", NULL};

    pleg->m.relist_duration =
        pleg_metrics_register(r, PLEG_METRIC_HISTOGRAM, "kubelet_pleg_relist_duration_seconds",
                              "Duration in seconds for relisting pods in PLEG.", NULL, NULL, 0);
    pleg->m.relist_interval =
        pleg_metrics_register(r, PLEG_METRIC_HISTOGRAM, "kubelet_pleg_relist_interval_seconds",
                              "Interval in seconds between relisting in PLEG.", NULL, NULL, 0);
    pleg->m.pod_relist_duration = pleg_metrics_register(
        r, PLEG_METRIC_HISTOGRAM, "kubelet_pleg_pod_relist_duration_seconds",
        "Duration in seconds of a targeted relist of one pod in PLEG.", NULL, NULL, 0);
    pleg->m.discard_events = pleg_metrics_register(
        r, PLEG_METRIC_COUNTER, "kubelet_pleg_discard_events",
        "The number of discard events in PLEG (deferred to a later relist by libpleg).", NULL, NULL,
        0);
    pleg->m.last_seen = pleg_metrics_register(
        r, PLEG_METRIC_GAUGE, "kubelet_pleg_last_seen_seconds",
        "Timestamp in seconds when PLEG was last seen active.", NULL, NULL, 0);
    pleg->m.running_pods =
        pleg_metrics_register(r, PLEG_METRIC_GAUGE, "kubelet_running_pods",
                              "Number of pods that have a running pod sandbox.", NULL, NULL, 0);
    pleg->m.running_containers =
        pleg_metrics_register(r, PLEG_METRIC_GAUGE, "kubelet_running_containers",
                              "Number of containers currently running.", state_label, NULL, 0);
    pleg->m.events_total = pleg_metrics_register(
        r, PLEG_METRIC_COUNTER, "kubelet_pleg_events_total",
        "Pod lifecycle events generated by PLEG, by the relist that found them.", source_label,
        NULL, 0);
    pleg->m.relist_requests = pleg_metrics_register(
        r, PLEG_METRIC_COUNTER, "kubelet_pleg_relist_requests_total",
        "RequestRelist calls by outcome: queued, coalesced, covered or dropped.", request_labels,
        NULL, 0);
    pleg->m.relist_failures = pleg_metrics_register(
        r, PLEG_METRIC_COUNTER, "pleg_relist_failures_total",
        "Global relists that failed, by reason: the gRPC status code of the CRI call that failed "
        "them, or other.",
        reason_label, NULL, 0);
    pleg->m.exit_detection = pleg_metrics_register(
        r, PLEG_METRIC_HISTOGRAM, "kubelet_pleg_exit_detection_latency_seconds",
        "Time from a container's CRI finished_at to delivery of its ContainerDied.", source_label,
        exit_detection_buckets, G_N_ELEMENTS(exit_detection_buckets));

    pleg->series.relist_duration = pleg_metric_get_series(pleg->m.relist_duration, NULL);
    pleg->series.relist_interval = pleg_metric_get_series(pleg->m.relist_interval, NULL);
    pleg->series.pod_relist_duration = pleg_metric_get_series(pleg->m.pod_relist_duration, NULL);
    pleg->series.discard_events = pleg_metric_get_series(pleg->m.discard_events, NULL);
    for (PlegRelistSource s = 0; s < PLEG_RELIST_SOURCE_N; s++) {
        const char *src = pleg_relist_source_to_string(s);

        pleg->series.events_total[s] =
            pleg_metric_get_series(pleg->m.events_total, (const char *[]){src});
        pleg->series.exit_detection[s] =
            pleg_metric_get_series(pleg->m.exit_detection, (const char *[]){src});
        for (RelistOutcome o = 0; o < RELIST_OUTCOME_N; o++)
            pleg->series.relist_requests[s][o] = pleg_metric_get_series(
                pleg->m.relist_requests, (const char *[]){src, relist_outcomes[o]});
    }

    for (guint i = 0; i < RELIST_FAILURE_REASON_N; i++)
        pleg->series.relist_failures[i] = pleg_metric_get_series(
            pleg->m.relist_failures, (const char *[]){relist_failure_reasons[i]});

    /* Show every series from the start, so rates work from the first scrape. */
    for (guint i = 0; i < RELIST_FAILURE_REASON_N; i++)
        pleg_metric_series_add(pleg->series.relist_failures[i], 0);
    for (PlegRelistSource s = 0; s < PLEG_RELIST_SOURCE_N; s++) {
        pleg_metric_series_add(pleg->series.events_total[s], 0);
        if (s == PLEG_RELIST_SOURCE_GLOBAL)
            continue;
        for (RelistOutcome o = 0; o < RELIST_OUTCOME_N; o++)
            pleg_metric_series_add(pleg->series.relist_requests[s][o], 0);
    }
}

PlegMetricSeries *
relist_request_series(PlegGeneric *pleg, PlegRelistSource source, const char *outcome)
{
    if ((guint)source >= PLEG_RELIST_SOURCE_N)
        return NULL;
    for (RelistOutcome o = 0; o < RELIST_OUTCOME_N; o++)
        if (strcmp(outcome, relist_outcomes[o]) == 0)
            return pleg->series.relist_requests[source][o];
    return NULL;
}

PlegGeneric *
pleg_generic_new(PlegRuntime *runtime, const PlegGenericConfig *config,
                 PlegMetricsRegistry *metrics)
{
    PlegGeneric *pleg;

    g_return_val_if_fail(runtime != NULL, NULL);

    pleg = g_new0(PlegGeneric, 1);
    pleg->runtime = pleg_runtime_ref(runtime);
    if (config)
        pleg->config = *config;
    else
        pleg_generic_config_init(&pleg->config);
    if (pleg->config.relist_period_usec <= 0)
        pleg->config.relist_period_usec = PLEG_DEFAULT_RELIST_PERIOD_USEC;
    if (pleg->config.relist_threshold_usec <= 0)
        pleg->config.relist_threshold_usec = PLEG_DEFAULT_RELIST_THRESHOLD_USEC;
    if (pleg->config.relist_queue_capacity == 0)
        pleg->config.relist_queue_capacity = PLEG_DEFAULT_RELIST_QUEUE_CAPACITY;
    if (pleg->config.max_status_calls_in_flight == 0)
        pleg->config.max_status_calls_in_flight = PLEG_DEFAULT_MAX_STATUS_CALLS_IN_FLIGHT;

    pleg->metrics = metrics ? pleg_metrics_registry_ref(metrics) : pleg_metrics_registry_new();
    register_metrics(pleg);
    pleg->cache = pleg_pod_cache_new();

    g_mutex_init(&pleg->relist_lock);
    pleg->listing = pleg_listing_new();
    pleg->relist_uids = g_byte_array_new();
    pleg->relist_works = g_array_new(FALSE, TRUE, sizeof(PodWork));
    pleg->cancellable = g_cancellable_new();

    g_mutex_init(&pleg->state_lock);
    pleg->records =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)record_free);
    pleg->records_initial = TRUE;
    pleg->subscribers = g_ptr_array_new_with_free_func((GDestroyNotify)subscriber_free);

    g_mutex_init(&pleg->queue_lock);
    g_cond_init(&pleg->queue_cond);
    g_queue_init(&pleg->queue);
    pleg->next_pass = g_hash_table_new(g_str_hash, g_str_equal);
    g_queue_init(&pleg->next_pass_order);
    pleg->suspensions = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    pleg->test_stall_after =
        (guint)g_ascii_strtoull(g_getenv("PLEG_TEST_DISPATCHER_STALL_AFTER") ?: "0", NULL, 10);
    return pleg;
}

void
pleg_generic_free(PlegGeneric *pleg)
{
    if (!pleg)
        return;

    pleg_generic_stop(pleg);
    pleg_generic_set_relist_callback(pleg, NULL, NULL, NULL, NULL);

    g_ptr_array_unref(pleg->subscribers);
    g_hash_table_unref(pleg->records);
    pleg_listing_free(pleg->listing);
    g_byte_array_unref(pleg->relist_uids);
    g_array_unref(pleg->relist_works);
    g_hash_table_unref(pleg->suspensions);
    clear_requests(pleg);
    g_hash_table_unref(pleg->next_pass);
    g_cond_clear(&pleg->queue_cond);
    g_mutex_clear(&pleg->queue_lock);
    g_mutex_clear(&pleg->state_lock);
    g_mutex_clear(&pleg->relist_lock);
    g_object_unref(pleg->cancellable);
    g_clear_error(&pleg->last_relist_error);
    pleg_pod_cache_free(pleg->cache);
    pleg_metrics_registry_unref(pleg->metrics);
    pleg_runtime_unref(pleg->runtime);
    g_free(pleg);
}

PlegEventChannel *
pleg_generic_subscribe(PlegGeneric *pleg, guint capacity)
{
    Subscriber *sub;

    g_return_val_if_fail(pleg != NULL, NULL);

    sub = subscriber_new(capacity);
    g_mutex_lock(&pleg->state_lock);
    g_ptr_array_add(pleg->subscribers, sub);
    g_mutex_unlock(&pleg->state_lock);
    return sub->channel;
}

void
pleg_generic_unsubscribe(PlegGeneric *pleg, PlegEventChannel *channel)
{
    Subscriber *found = NULL;

    g_return_if_fail(pleg != NULL && channel != NULL);

    g_mutex_lock(&pleg->state_lock);
    for (guint i = 0; i < pleg->subscribers->len; i++) {
        Subscriber *sub = g_ptr_array_index(pleg->subscribers, i);
        if (sub->channel == channel) {
            found = g_ptr_array_steal_index(pleg->subscribers, i);
            break;
        }
    }
    g_mutex_unlock(&pleg->state_lock);

    g_return_if_fail(found != NULL);
    subscriber_free(found);
}

gboolean
pleg_generic_healthy(PlegGeneric *pleg, char **ret_message)
{
    gint64 last_ns, last_mono_usec, elapsed_usec;

    g_return_val_if_fail(pleg != NULL, FALSE);

    g_mutex_lock(&pleg->state_lock);
    last_ns = pleg->last_relist_ns;
    last_mono_usec = pleg->last_relist_mono_usec;
    g_mutex_unlock(&pleg->state_lock);

    if (last_ns == 0) {
        if (ret_message)
            *ret_message = g_strdup("pleg has yet to be successful");
        return FALSE;
    }
    pleg_metric_set(pleg->m.last_seen, NULL, (double)(last_ns / G_GINT64_CONSTANT(1000000000)));

    elapsed_usec = elapsed_usec_since(pleg, last_ns, last_mono_usec);
    if (elapsed_usec > pleg->config.relist_threshold_usec) {
        if (ret_message) {
            g_autofree char *elapsed = pleg_duration_format(elapsed_usec);
            g_autofree char *threshold = pleg_duration_format(pleg->config.relist_threshold_usec);
            *ret_message = g_strdup_printf("pleg was last seen active %s ago; threshold is %s",
                                           elapsed, threshold);
        }
        return FALSE;
    }
    return TRUE;
}

gint64
pleg_generic_get_relist_attempt_age(PlegGeneric *pleg)
{
    gint64 end_ns, end_mono_usec;
    gboolean dispatching;

    g_return_val_if_fail(pleg != NULL, -1);

    g_mutex_lock(&pleg->state_lock);
    dispatching = pleg->dispatching;
    end_ns = pleg->attempt_end_ns;
    end_mono_usec = pleg->attempt_end_mono_usec;
    g_mutex_unlock(&pleg->state_lock);
    if (!dispatching)
        return -1;
    return MAX(elapsed_usec_since(pleg, end_ns, end_mono_usec), 0);
}

void
pleg_generic_get_relist_state(PlegGeneric *pleg, PlegRelistState *ret_state)
{
    g_return_if_fail(pleg != NULL && ret_state != NULL);

    g_mutex_lock(&pleg->state_lock);
    *ret_state = (PlegRelistState){
        .first_relist_started = pleg->relist_started,
        .first_relist_finished = pleg->relist_finished,
        .first_relist_succeeded = pleg->last_relist_ns != 0,
        .last_success_ns = pleg->last_relist_ns,
        .last_attempt_ns = pleg->last_relist_attempt_ns,
        .last_error = pleg->last_relist_error ? g_error_copy(pleg->last_relist_error) : NULL,
    };
    g_mutex_unlock(&pleg->state_lock);
}

void
pleg_relist_state_clear(PlegRelistState *state)
{
    if (!state)
        return;
    g_clear_error(&state->last_error);
    *state = (PlegRelistState){0};
}

gint64
pleg_generic_get_last_relist_time(PlegGeneric *pleg)
{
    gint64 last_ns;

    g_return_val_if_fail(pleg != NULL, 0);
    g_mutex_lock(&pleg->state_lock);
    last_ns = pleg->last_relist_ns;
    g_mutex_unlock(&pleg->state_lock);
    return last_ns;
}

PlegPodCache *
pleg_generic_get_cache(PlegGeneric *pleg)
{
    g_return_val_if_fail(pleg != NULL, NULL);
    return pleg->cache;
}

PlegMetricsRegistry *
pleg_generic_get_metrics(PlegGeneric *pleg)
{
    g_return_val_if_fail(pleg != NULL, NULL);
    return pleg->metrics;
}

