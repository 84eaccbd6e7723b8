/* SPDX-License-Identifier: Apache-2.0 */
/* Relists: a global relist lists everything, groups it into pods and reconciles each pod
 * (inspection, pod cache, record, delivery); a targeted relist does the same for one pod. */
#include "pleg-config.h"

#include "pleg-generic-private.h"

/* --- inspection --------------------------------------------------------------------------- */

static gboolean
has_ready_sandbox(const PlegPodStatus *status)
{
    for (guint i = 0; i < status->sandbox_statuses->len; i++) {
        const PlegPodSandboxStatus *s = g_ptr_array_index(status->sandbox_statuses, i);
        if (s->state == PLEG_POD_SANDBOX_STATE_READY)
            return TRUE;
    }
    return FALSE;
}

/* kubelet's GetPodStatus: every sandbox's status, newest first, then the status of every
 * container the listing placed in the pod, asked all at once (pleg_runtime_get_statuses()).
 * The listing that built @pod is moments old, so the containers are not listed again.  Objects
 * that vanish meanwhile are skipped; any other error fails the pod. */
static PlegPodStatus *
inspect_pod(PlegGeneric *pleg, const PodSnapshot *pod, PlegPodStatus *previous, GError **error)
{
    g_autoptr(PlegPodStatus) status = pleg_pod_status_new(pod->uid);
    guint n_sandboxes = pod->sandboxes->len;
    guint n_queries = n_sandboxes + pod->containers->len;
    g_autofree PlegStatusQuery *queries = g_new0(PlegStatusQuery, n_queries);
    GError *failure = NULL;

    for (guint i = 0; i < n_sandboxes; i++)
        queries[i].pod_sandbox_id = ((const PodEntry *)pod->sandboxes->pdata[i])->id;
    for (guint i = 0; i < pod->containers->len; i++)
        queries[n_sandboxes + i].container_id = ((const PodEntry *)pod->containers->pdata[i])->id;
    pleg_runtime_get_statuses(pleg->runtime, queries, n_queries, pleg->cancellable);

    for (guint i = 0; i < n_queries; i++) {
        PlegStatusQuery *q = &queries[i];
        PlegPodSandboxStatus *ss = q->pod_sandbox_status;

        if (q->error) {
            if (!failure && !pleg_error_is_not_found(q->error))
                failure = g_steal_pointer(&q->error);
        } else if (ss) {
            g_ptr_array_add(status->sandbox_statuses, g_steal_pointer(&q->pod_sandbox_status));
            if (!status->name) {
                status->name = g_strdup(ss->name);
                status->namespace_ = g_strdup(ss->namespace_);
            }
            if (i == 0 && ss->state == PLEG_POD_SANDBOX_STATE_READY && ss->ips && ss->ips[0]) {
                g_strfreev(status->ips);
                status->ips = g_strdupv(ss->ips);
            }
        } else if (q->container_status) {
            g_ptr_array_add(status->container_statuses, g_steal_pointer(&q->container_status));
        }
        pleg_status_query_clear(q);
    }
    if (failure) {
        g_propagate_error(error, failure);
        return NULL;
    }

    /* kubelet keeps the last known IPs of a pod whose sandboxes are all gone or not ready. */
    if (!status->ips[0] && previous && previous->ips[0] && !has_ready_sandbox(status)) {
        g_strfreev(status->ips);
        status->ips = g_strdupv(previous->ips);
    }
    return g_steal_pointer(&status);
}

/* --- reconciliation ----------------------------------------------------------------------- */

void
record_free(PodRecord *rec)
{
    pod_snapshot_unref(rec->old);
    pod_snapshot_unref(rec->current);
    g_free(rec);
}

/* Compares a pod's record, refreshes its cache entry, advances the record and delivers its
 * events.  Called with relist_lock held; takes state_lock itself, never across runtime calls.
 * Returns TRUE when what is published for the pod is now as fresh as @timestamp_ns: FALSE when
 * the pod is suspended or its inspection failed. */
static gboolean
reconcile_pod(PlegGeneric *pleg, const char *pod_uid, PlegRelistSource source, gint64 timestamp_ns)
{
    g_autoptr(GArray) transitions = NULL;
    g_autoptr(PodSnapshot) current = NULL;
    g_autoptr(PodSnapshot) published = NULL; /* keeps the transitions' ids alive */
    g_autoptr(PlegPodStatus) previous = NULL;
    g_autoptr(PlegPodStatus) status = NULL;
    g_autoptr(GError) error = NULL;
    PodRecord *rec;
    gboolean reinspect;

    g_mutex_lock(&pleg->state_lock);
    rec = g_hash_table_lookup(pleg->records, pod_uid);
    if (!rec) {
        g_mutex_unlock(&pleg->state_lock);
        return TRUE;
    }
    transitions = compute_transitions(rec->old, rec->current);
    reinspect = rec->reinspect;
    if (transitions->len == 0 && !reinspect) {
        gboolean fresh = !is_suspended(pleg, pod_uid);
        if (!rec->current)
            g_hash_table_remove(pleg->records, pod_uid);
        g_mutex_unlock(&pleg->state_lock);
        return fresh;
    }
    if (defer_if_suspended(pleg, pod_uid, source)) {
        g_mutex_unlock(&pleg->state_lock);
        return FALSE;
    }
    current = pod_snapshot_ref(rec->current);
    g_mutex_unlock(&pleg->state_lock);

    if (current) {
        pleg_pod_cache_get(pleg->cache, pod_uid, &previous, NULL, NULL);
        status = inspect_pod(pleg, current, previous, &error);
    }

    g_mutex_lock(&pleg->state_lock);
    /* Records change only under relist_lock, which we hold: rec is still valid. */
    if (defer_if_suspended(pleg, pod_uid, source)) {
        g_mutex_unlock(&pleg->state_lock);
        return FALSE;
    }
    if (error) {
        g_debug("inspecting pod %s failed, will reinspect: %s", pod_uid, error->message);
        pleg_pod_cache_set(pleg->cache, pod_uid, NULL, error, timestamp_ns);
        rec->reinspect = TRUE;
        g_mutex_unlock(&pleg->state_lock);
        return FALSE;
    }
    if (status)
        pleg_pod_cache_set(pleg->cache, pod_uid, status, NULL, timestamp_ns);
    else
        pleg_pod_cache_delete(pleg->cache, pod_uid);

    rec->reinspect = FALSE;
    /* A pod that vanished while it waited for reinspection has nothing left to sync. */
    if (reinspect && transitions->len == 0 && status) {
        Transition sync = {.type = PLEG_POD_SYNC};
        g_array_append_val(transitions, sync);
    }
    published = g_steal_pointer(&rec->old);
    rec->old = pod_snapshot_ref(rec->current);

    deliver(pleg, pod_uid, transitions, source, status);
    if (!rec->old)
        g_hash_table_remove(pleg->records, pod_uid);
    g_mutex_unlock(&pleg->state_lock);
    return TRUE;
}

static void
update_running_metrics(PlegGeneric *pleg, GHashTable *pods, GPtrArray *containers)
{
    guint counts[PLEG_CONTAINER_STATE_UNKNOWN + 1] = {0};
    guint running_pods = 0;
    GHashTableIter iter;
    PodSnapshot *pod;

    g_hash_table_iter_init(&iter, pods);
    while (g_hash_table_iter_next(&iter, NULL, (gpointer *)&pod)) {
        for (guint i = 0; i < pod->sandboxes->len; i++) {
            const PodEntry *e = g_ptr_array_index(pod->sandboxes, i);
            if (e->state == STATE_RUNNING) {
                running_pods++;
                break;
            }
        }
    }
    for (guint i = 0; i < containers->len; i++) {
        const PlegContainer *c = g_ptr_array_index(containers, i);
        if ((guint)c->state < G_N_ELEMENTS(counts))
            counts[c->state]++;
    }
    pleg_metric_set(pleg->m.running_pods, NULL, running_pods);
    for (guint s = 0; s < G_N_ELEMENTS(counts); s++)
        pleg_metric_set(pleg->m.running_containers,
                        (const char *[]){pleg_container_state_to_string(s)}, counts[s]);
}

/* A global relist reconciles its pods on a few threads when there are several: inspections are
 * round trips to the runtime, so they overlap well, and one pod whose status call hangs until
 * its deadline no longer holds back every pod after it.  Each pod is still reconciled as one
 * unit under state_lock, so events within a pod keep their order; across pods there is none. */
#define RECONCILE_PARALLEL_MIN_PODS 4

typedef struct {
    PlegGeneric *pleg;
    gint64 timestamp_ns;
    GMutex lock;
    GCond done;
    guint pending;
} ReconcileBatch;

typedef struct {
    ReconcileBatch *batch;
    const char *pod_uid;
} ReconcileTask;

void
reconcile_task(gpointer data, gpointer user_data)
{
    ReconcileTask *task = data;
    ReconcileBatch *batch = task->batch;

    reconcile_pod(batch->pleg, task->pod_uid, PLEG_RELIST_SOURCE_GLOBAL, batch->timestamp_ns);
    g_free(task);

    g_mutex_lock(&batch->lock);
    if (--batch->pending == 0)
        g_cond_signal(&batch->done);
    g_mutex_unlock(&batch->lock);
}

/* Called with relist_lock held. */
static void
reconcile_pods(PlegGeneric *pleg, GPtrArray *uids, gint64 timestamp_ns)
{
    ReconcileBatch batch = {.pleg = pleg, .timestamp_ns = timestamp_ns, .pending = uids->len};

    if (uids->len < RECONCILE_PARALLEL_MIN_PODS) {
        for (guint i = 0; i < uids->len; i++)
            reconcile_pod(pleg, uids->pdata[i], PLEG_RELIST_SOURCE_GLOBAL, timestamp_ns);
        return;
    }

    g_mutex_init(&batch.lock);
    g_cond_init(&batch.done);
    for (guint i = 0; i < uids->len; i++) {
        ReconcileTask *task = g_new0(ReconcileTask, 1);
        task->batch = &batch;
        task->pod_uid = uids->pdata[i];
        g_thread_pool_push(pleg->reconcile_pool, task, NULL);
    }
    g_mutex_lock(&batch.lock);
    while (batch.pending > 0)
        g_cond_wait(&batch.done, &batch.lock);
    g_mutex_unlock(&batch.lock);
    g_cond_clear(&batch.done);
    g_mutex_clear(&batch.lock);
}

gboolean
relist_global(PlegGeneric *pleg, gint64 *ret_timestamp_ns, GError **error)
{
    g_autoptr(GPtrArray) sandboxes = NULL;
    g_autoptr(GPtrArray) containers = NULL;
    g_autoptr(GHashTable) pods = NULL;
    g_autoptr(GPtrArray) uids = NULL;
    gint64 start_usec, timestamp_ns, last_ns, last_mono_usec;
    gboolean ok = FALSE;
    GHashTableIter iter;
    PodRecord *rec;
    PodSnapshot *pod;
    const char *uid;

    g_mutex_lock(&pleg->relist_lock);
    start_usec = g_get_monotonic_time();
    timestamp_ns = now_ns(pleg);
    *ret_timestamp_ns = timestamp_ns;

    g_mutex_lock(&pleg->state_lock);
    last_ns = pleg->last_relist_ns;
    last_mono_usec = pleg->last_relist_mono_usec;
    pleg->relist_started = TRUE;
    pleg->last_relist_attempt_ns = timestamp_ns;
    g_mutex_unlock(&pleg->state_lock);
    if (last_ns > 0)
        pleg_metric_series_observe(pleg->series.relist_interval,
                                   (double)elapsed_usec_since(pleg, last_ns, last_mono_usec) /
                                       G_USEC_PER_SEC);

    if (!pleg_runtime_list_pod_sandboxes(pleg->runtime, &sandboxes, pleg->cancellable, error) ||
        !pleg_runtime_list_containers(pleg->runtime, NULL, &containers, pleg->cancellable, error)) {
        g_mutex_lock(&pleg->state_lock);
        g_clear_error(&pleg->last_relist_error);
        pleg->last_relist_error = error && *error ? g_error_copy(*error) : NULL;
        g_mutex_unlock(&pleg->state_lock);
        goto out;
    }

    pods = group_pods(sandboxes, containers);
    update_running_metrics(pleg, pods, containers);

    g_mutex_lock(&pleg->state_lock);
    pleg->last_relist_ns = timestamp_ns;
    pleg->last_relist_mono_usec = start_usec;
    g_clear_error(&pleg->last_relist_error);
    g_hash_table_iter_init(&iter, pleg->records);
    while (g_hash_table_iter_next(&iter, (gpointer *)&uid, (gpointer *)&rec)) {
        pod_snapshot_unref(rec->current);
        rec->current = pod_snapshot_ref(g_hash_table_lookup(pods, uid));
    }
    g_hash_table_iter_init(&iter, pods);
    while (g_hash_table_iter_next(&iter, (gpointer *)&uid, (gpointer *)&pod)) {
        if (!g_hash_table_contains(pleg->records, uid)) {
            rec = g_new0(PodRecord, 1);
            rec->current = pod_snapshot_ref(pod);
            g_hash_table_insert(pleg->records, g_strdup(uid), rec);
        }
    }
    uids = g_ptr_array_new_full(g_hash_table_size(pleg->records), g_free);
    g_hash_table_iter_init(&iter, pleg->records);
    while (g_hash_table_iter_next(&iter, (gpointer *)&uid, NULL))
        g_ptr_array_add(uids, g_strdup(uid));
    g_mutex_unlock(&pleg->state_lock);

    g_mutex_lock(&pleg->queue_lock);
    pleg->last_global_start_usec = start_usec;
    g_mutex_unlock(&pleg->queue_lock);

    reconcile_pods(pleg, uids, timestamp_ns);

    g_mutex_lock(&pleg->state_lock);
    redeliver_missed(pleg, NULL);
    g_mutex_unlock(&pleg->state_lock);

    pleg_pod_cache_set_global_timestamp(pleg->cache, timestamp_ns);
    ok = TRUE;

out:
    pleg_metric_series_observe(pleg->series.relist_duration,
                               (double)(g_get_monotonic_time() - start_usec) / G_USEC_PER_SEC);
    g_mutex_lock(&pleg->state_lock);
    pleg->relist_finished = TRUE;
    g_mutex_unlock(&pleg->state_lock);
    g_mutex_unlock(&pleg->relist_lock);
    return ok;
}

gboolean
pleg_generic_relist(PlegGeneric *pleg, GError **error)
{
    gint64 timestamp_ns;

    g_return_val_if_fail(pleg != NULL, FALSE);
    return relist_global(pleg, &timestamp_ns, error);
}

/* Whether the pod as last listed holds a container whose sandbox was not listed: a global
 * relist gave it to the pod by its io.kubernetes.pod.uid label (group_pods()). */
static gboolean
has_containers_by_label(PlegGeneric *pleg, const char *pod_uid)
{
    const PodRecord *rec;
    gboolean ret = FALSE;

    g_mutex_lock(&pleg->state_lock);
    rec = g_hash_table_lookup(pleg->records, pod_uid);
    for (guint i = 0; rec && rec->current && !ret && i < rec->current->containers->len; i++) {
        const PodEntry *c = g_ptr_array_index(rec->current->containers, i);

        ret = TRUE;
        for (guint j = 0; ret && j < rec->current->sandboxes->len; j++) {
            const PodEntry *s = g_ptr_array_index(rec->current->sandboxes, j);

            if (g_strcmp0(c->sandbox_id, s->id) == 0)
                ret = FALSE;
        }
    }
    g_mutex_unlock(&pleg->state_lock);
    return ret;
}

/* Lists one pod only: its sandboxes and their containers.  A pod that holds containers by
 * their label alone is listed as a global relist lists it (everything, then grouped), or its
 * per-pod relist would find those containers removed and the next global relist find them
 * again. */
static gboolean
list_pod(PlegGeneric *pleg, const char *pod_uid, PodSnapshot **ret_pod, GError **error)
{
    g_autoptr(GPtrArray) sandboxes = NULL;
    g_autoptr(GPtrArray) mine = g_ptr_array_new();
    g_autoptr(GPtrArray) containers =
        g_ptr_array_new_with_free_func((GDestroyNotify)pleg_container_free);
    g_autoptr(GHashTable) pods = NULL;

    if (has_containers_by_label(pleg, pod_uid)) {
        g_autoptr(GPtrArray) all_containers = NULL;

        if (!pleg_runtime_list_pod_sandboxes(pleg->runtime, &sandboxes, pleg->cancellable,
                                             error) ||
            !pleg_runtime_list_containers(pleg->runtime, NULL, &all_containers,
                                          pleg->cancellable, error))
            return FALSE;
        pods = group_pods(sandboxes, all_containers);
        *ret_pod = pod_snapshot_ref(g_hash_table_lookup(pods, pod_uid));
        return TRUE;
    }

    if (!pleg_runtime_list_pod_sandboxes_of_pod(pleg->runtime, pod_uid, &sandboxes,
                                                pleg->cancellable, error))
        return FALSE;
    for (guint i = 0; i < sandboxes->len; i++) {
        PlegPodSandbox *s = g_ptr_array_index(sandboxes, i);
        g_autoptr(GPtrArray) found = NULL;

        if (!s->id)
            continue;
        g_ptr_array_add(mine, s);
        if (!pleg_runtime_list_containers(pleg->runtime, s->id, &found, pleg->cancellable, error))
            return FALSE;
        g_ptr_array_extend_and_steal(containers, g_steal_pointer(&found));
    }
    pods = group_pods(mine, containers);
    *ret_pod = pod_snapshot_ref(g_hash_table_lookup(pods, pod_uid));
    return TRUE;
}

gboolean
pleg_generic_relist_pod(PlegGeneric *pleg, const char *pod_uid, PlegRelistSource source,
                        GError **error)
{
    g_autoptr(PodSnapshot) pod = NULL;
    gint64 start_usec, timestamp_ns;
    gboolean ok;
    PodRecord *rec;

    g_return_val_if_fail(pleg != NULL && pod_uid != NULL, FALSE);
    g_return_val_if_fail(source < PLEG_RELIST_SOURCE_N, FALSE);

    g_mutex_lock(&pleg->relist_lock);
    start_usec = g_get_monotonic_time();
    timestamp_ns = now_ns(pleg);

    ok = list_pod(pleg, pod_uid, &pod, error);
    if (ok) {
        g_mutex_lock(&pleg->state_lock);
        rec = g_hash_table_lookup(pleg->records, pod_uid);
        if (!rec && pod) {
            rec = g_new0(PodRecord, 1);
            g_hash_table_insert(pleg->records, g_strdup(pod_uid), rec);
        }
        if (rec) {
            pod_snapshot_unref(rec->current);
            rec->current = g_steal_pointer(&pod);
        }
        g_mutex_unlock(&pleg->state_lock);

        if (reconcile_pod(pleg, pod_uid, source, timestamp_ns))
            pleg_pod_cache_touch(pleg->cache, pod_uid, timestamp_ns);

        g_mutex_lock(&pleg->state_lock);
        redeliver_missed(pleg, pod_uid);
        g_mutex_unlock(&pleg->state_lock);
    }
    pleg_metric_series_observe(pleg->series.pod_relist_duration,
                               (double)(g_get_monotonic_time() - start_usec) / G_USEC_PER_SEC);
    g_mutex_unlock(&pleg->relist_lock);
    return ok;
}
