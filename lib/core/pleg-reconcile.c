/* SPDX-License-Identifier: Apache-2.0 */
/* Relists: a global relist lists everything, groups it into pods and reconciles each pod
 * (inspection, pod cache, record, delivery); targeted relists do the same for the pods asked,
 * several at once when the dispatcher serves its queue.  The pods of one relist are inspected
 * together (pleg-inspect.c). */
#include "pleg-config.h"

#include <string.h>

#include "pleg-generic-private.h"

/* --- reconciliation ----------------------------------------------------------------------- */

static void
pod_work_clear(PodWork *work)
{
    g_clear_pointer(&work->transitions, g_array_unref);
    g_clear_pointer(&work->current, pod_snapshot_unref);
    g_clear_pointer(&work->old, pod_snapshot_unref);
    work->inspect = FALSE;
}

/* Compares the pod's record.  Returns FALSE, with @work->fresh set, when there is nothing to
 * inspect or publish (no change, or the pod is suspended); TRUE when reconcile_publish() must
 * follow.  Called with relist_lock held; takes state_lock. */
static gboolean
reconcile_prepare(PlegGeneric *pleg, PodWork *work)
{
    const char *pod_uid = work->pod_uid;
    PodRecord *rec;

    g_mutex_lock(&pleg->state_lock);
    rec = g_hash_table_lookup(pleg->records, pod_uid);
    if (!rec) {
        g_mutex_unlock(&pleg->state_lock);
        work->fresh = TRUE;
        return FALSE;
    }
    work->reinspect = rec->reinspect;
    work->restored = rec->restored;
    /* A pod listed as it was published keeps its snapshot (pleg-listing.c): nothing to compare,
     * and no allocation for it. */
    if (rec->old != rec->current || work->reinspect)
        work->transitions = compute_transitions(rec->old, rec->current);
    /* A restored pod is inspected once even when nothing changed: the pod cache knows nothing
     * of it yet. */
    if ((!work->transitions || work->transitions->len == 0) && !work->reinspect &&
        !(work->restored && rec->current)) {
        work->fresh = !is_suspended(pleg, pod_uid);
        if (!rec->current)
            g_hash_table_remove(pleg->records, pod_uid);
        g_mutex_unlock(&pleg->state_lock);
        return FALSE;
    }
    if (defer_if_suspended(pleg, pod_uid, work->source)) {
        g_mutex_unlock(&pleg->state_lock);
        work->fresh = FALSE;
        return FALSE;
    }
    work->current = rec->current ? pod_snapshot_ref(rec->current) : NULL;
    work->old = rec->old ? pod_snapshot_ref(rec->old) : NULL;
    g_mutex_unlock(&pleg->state_lock);
    return TRUE;
}

/* Refreshes the pod's cache entry from its inspection (@status, or @error; neither for a pod
 * gone), advances the record and delivers its events under state_lock, so that the pod is
 * published as one unit.  Sets @work->fresh: TRUE when what is published for the pod is now as
 * fresh as @timestamp_ns, FALSE when the pod is suspended or its inspection failed.  Called
 * with relist_lock held, by the relist this pod belongs to. */
static void
reconcile_publish(PlegGeneric *pleg, PodWork *work, PlegPodStatus *status, const GError *error,
                  gint64 timestamp_ns)
{
    const char *pod_uid = work->pod_uid;
    g_autoptr(PodSnapshot) published = NULL;
    PodRecord *rec;

    g_mutex_lock(&pleg->state_lock);
    work->fresh = FALSE;
    /* Records change only under relist_lock, which the relist holds: rec is still valid. */
    rec = g_hash_table_lookup(pleg->records, pod_uid);
    if (defer_if_suspended(pleg, pod_uid, work->source)) {
        g_mutex_unlock(&pleg->state_lock);
        return;
    }
    if (error) {
        g_debug("inspecting pod %s failed, will reinspect: %s", pod_uid, error->message);
        const PodEntry *sandbox = rec->current && rec->current->sandboxes->len > 0
                                      ? g_ptr_array_index(rec->current->sandboxes, 0)
                                      : NULL;

        pleg_pod_cache_set_failed(pleg->cache, pod_uid, error,
                                  sandbox ? sandbox->names.namespace_ : NULL,
                                  sandbox ? sandbox->names.name : NULL, timestamp_ns);
        rec->reinspect = TRUE;
        g_mutex_unlock(&pleg->state_lock);
        return;
    }
    if (status)
        pleg_pod_cache_set(pleg->cache, pod_uid, status, NULL, timestamp_ns);
    else
        pleg_pod_cache_delete(pleg->cache, pod_uid);

    rec->reinspect = FALSE;
    /* A pod that vanished while it waited for reinspection has nothing left to sync. */
    if (!work->transitions)
        work->transitions = g_array_new(FALSE, FALSE, sizeof(Transition));
    if (work->reinspect && work->transitions->len == 0 && status) {
        Transition sync = {.type = PLEG_POD_SYNC};
        g_array_append_val(work->transitions, sync);
    }
    published = g_steal_pointer(&rec->old);
    rec->old = pod_snapshot_ref(rec->current);

    deliver(pleg, pod_uid, work->transitions, work->source, status, rec->old, published,
            rec->initial);
    rec->restored = FALSE;
    rec->initial = FALSE;
    if (!rec->old)
        g_hash_table_remove(pleg->records, pod_uid);
    g_mutex_unlock(&pleg->state_lock);
    work->fresh = TRUE;
}

/* What a relist publishes its inspected pods with. */
typedef struct {
    PlegGeneric *pleg;
    gint64 timestamp_ns;
} Publication;

static void
on_inspected(PodWork *work, PlegPodStatus *status, const GError *error, gpointer data)
{
    Publication *publication = data;

    reconcile_publish(publication->pleg, work, status, error, publication->timestamp_ns);
}

static void
update_running_metrics(PlegGeneric *pleg, guint running_pods, const guint *container_states)
{
    pleg_metric_set(pleg->m.running_pods, NULL, running_pods);
    for (guint s = 0; s <= PLEG_CONTAINER_STATE_UNKNOWN; s++)
        pleg_metric_set(pleg->m.running_containers,
                        (const char *[]){pleg_container_state_to_string(s)}, container_states[s]);
}

/* Reconciles @works[0..n) (pod_uid and source set), setting each one's fresh.  Called with
 * relist_lock held. */
static void
reconcile_pods(PlegGeneric *pleg, PodWork *works, guint n, gint64 timestamp_ns)
{
    Publication publication = {pleg, timestamp_ns};
    gboolean any = FALSE;

    for (guint i = 0; i < n; i++) {
        PodWork *work = &works[i];

        if (!reconcile_prepare(pleg, work))
            continue;
        if (work->current) {
            work->inspect = any = TRUE;
        } else {
            /* Gone: nothing to ask the runtime, only events to publish. */
            reconcile_publish(pleg, work, NULL, NULL, timestamp_ns);
        }
    }
    if (any)
        inspect_pods(pleg, works, n, on_inspected, &publication);
    for (guint i = 0; i < n; i++)
        pod_work_clear(&works[i]);
}

/* Fills the relist's listing with every sandbox and container the runtime has. */
static gboolean
list_everything(PlegGeneric *pleg, GError **error)
{
    pleg_listing_reset(pleg->listing);
    return pleg_runtime_visit_listing(pleg->runtime, &pleg_listing_visitor, pleg->listing,
                                      pleg->cancellable, error);
}

gboolean
relist_global(PlegGeneric *pleg, gint64 *ret_timestamp_ns, GError **error)
{
    g_autoptr(GError) local_error = NULL;
    GByteArray *uids = pleg->relist_uids;
    GArray *works = pleg->relist_works;
    gint64 start_usec, timestamp_ns, last_ns, last_mono_usec;
    gboolean ok = FALSE;
    guint running_pods;
    GHashTableIter iter;
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

    if (!list_everything(pleg, &local_error)) {
        /* One that pleg_generic_stop() cut short is no failure of the runtime. */
        if (!g_cancellable_is_cancelled(pleg->cancellable))
            count_relist_failure(pleg, local_error);
        g_mutex_lock(&pleg->state_lock);
        g_clear_error(&pleg->last_relist_error);
        pleg->last_relist_error = g_error_copy(local_error);
        g_mutex_unlock(&pleg->state_lock);
        g_propagate_error(error, g_steal_pointer(&local_error));
        goto out;
    }

    g_mutex_lock(&pleg->state_lock);
    pleg->last_relist_ns = timestamp_ns;
    pleg->last_relist_mono_usec = start_usec;
    g_clear_error(&pleg->last_relist_error);
    pleg->relisted = TRUE;
    running_pods =
        pleg_listing_publish(pleg->listing, pleg->records, NULL, pleg->records_initial);
    /* The pods' UIDs are copied, for reconciling may remove a record and free its key; into
     * memory kept for the next relist, so that a steady relist allocates nothing per pod.  Each
     * work holds its UID's offset until the copies stop moving. */
    g_byte_array_set_size(uids, 0);
    g_array_set_size(works, 0);
    g_hash_table_iter_init(&iter, pleg->records);
    while (g_hash_table_iter_next(&iter, (gpointer *)&uid, NULL)) {
        PodWork work = {.pod_uid = GUINT_TO_POINTER(uids->len),
                        .source = PLEG_RELIST_SOURCE_GLOBAL};

        g_byte_array_append(uids, (const guint8 *)uid, strlen(uid) + 1);
        g_array_append_val(works, work);
    }
    g_atomic_int_set(&pleg->known_pods, (gint)g_hash_table_size(pleg->records));
    g_mutex_unlock(&pleg->state_lock);
    for (guint i = 0; i < works->len; i++) {
        PodWork *work = &g_array_index(works, PodWork, i);

        work->pod_uid = (const char *)uids->data + GPOINTER_TO_UINT(work->pod_uid);
    }
    update_running_metrics(pleg, running_pods, pleg_listing_get_container_states(pleg->listing));

    g_mutex_lock(&pleg->queue_lock);
    pleg->last_global_start_usec = start_usec;
    g_mutex_unlock(&pleg->queue_lock);

    reconcile_pods(pleg, (PodWork *)works->data, works->len, timestamp_ns);

    g_mutex_lock(&pleg->state_lock);
    redeliver_missed(pleg, NULL);
    g_mutex_unlock(&pleg->state_lock);

    pleg_pod_cache_set_global_timestamp(pleg->cache, timestamp_ns);
    g_mutex_lock(&pleg->state_lock);
    pleg->records_initial = FALSE;
    g_mutex_unlock(&pleg->state_lock);
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
 * relist gave it to the pod by its io.kubernetes.pod.uid label (pleg-listing.c). */
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

/* Adds one pod's own listing to the relist's: its sandboxes and their containers. */
static gboolean
list_pod(PlegGeneric *pleg, const char *pod_uid, GError **error)
{
    g_autoptr(GPtrArray) sandboxes = NULL;

    if (!pleg_runtime_list_pod_sandboxes_of_pod(pleg->runtime, pod_uid, &sandboxes,
                                                pleg->cancellable, error))
        return FALSE;
    for (guint i = 0; i < sandboxes->len; i++) {
        const PlegPodSandbox *s = g_ptr_array_index(sandboxes, i);
        g_autoptr(GPtrArray) containers = NULL;

        /* A sandbox without an id names no containers (an empty filter would list all). */
        if (!s->id)
            continue;
        pleg_listing_add_sandbox(pleg->listing, s);
        if (!pleg_runtime_list_containers(pleg->runtime, s->id, &containers, pleg->cancellable,
                                          error))
            return FALSE;
        for (guint j = 0; j < containers->len; j++)
            pleg_listing_add_container(pleg->listing, containers->pdata[j]);
    }
    return TRUE;
}

/* Whether to list everything once rather than each of @n_pods pods apart: a pod's own listing
 * is one ListPodSandbox and one ListContainers per sandbox, a full listing two calls that
 * decode every pod the node has (a few microseconds each, against a round trip of a hundred or
 * so for a call). */
#define FULL_LISTING_PODS_PER_POD 32

/* Fills the relist's listing for the pods @uids: everything when that is cheaper, or when a pod
 * holds containers by their label alone (its own listing would find them removed and the next
 * global relist find them again); else each pod's own. */
static gboolean
list_pods(PlegGeneric *pleg, GPtrArray *uids, GError **error)
{
    gboolean everything;
    guint n_known;

    g_mutex_lock(&pleg->state_lock);
    n_known = g_hash_table_size(pleg->records);
    g_mutex_unlock(&pleg->state_lock);

    everything = uids->len > 1 && (guint64)uids->len * FULL_LISTING_PODS_PER_POD >= n_known;
    for (guint i = 0; !everything && i < uids->len; i++)
        everything = has_containers_by_label(pleg, uids->pdata[i]);

    if (everything)
        return list_everything(pleg, error);
    pleg_listing_reset(pleg->listing);
    for (guint i = 0; i < uids->len; i++) {
        if (!list_pod(pleg, uids->pdata[i], error))
            return FALSE;
    }
    return TRUE;
}

gboolean
relist_pods(PlegGeneric *pleg, const char *const *pod_uids, const PlegRelistSource *sources,
            const guint *n_requests, guint n, GError **error)
{
    g_autoptr(GHashTable) seen = g_hash_table_new(g_str_hash, g_str_equal);
    g_autoptr(GPtrArray) uids = g_ptr_array_sized_new(n); /* distinct, first asked first */
    g_autofree PodWork *works = NULL;
    gint64 start_usec, timestamp_ns, elapsed_usec;
    gboolean ok;

    works = g_new0(PodWork, n);
    for (guint i = 0; i < n; i++) {
        if (g_hash_table_add(seen, (gpointer)pod_uids[i])) {
            works[uids->len] = (PodWork){.pod_uid = pod_uids[i], .source = sources[i]};
            g_ptr_array_add(uids, (gpointer)pod_uids[i]);
        }
    }

    g_mutex_lock(&pleg->relist_lock);
    start_usec = g_get_monotonic_time();
    timestamp_ns = now_ns(pleg);

    ok = list_pods(pleg, uids, error);
    if (ok) {
        g_mutex_lock(&pleg->state_lock);
        pleg->relisted = TRUE;
        pleg_listing_publish(pleg->listing, pleg->records, seen, pleg->records_initial);
        g_atomic_int_set(&pleg->known_pods, (gint)g_hash_table_size(pleg->records));
        g_mutex_unlock(&pleg->state_lock);

        reconcile_pods(pleg, works, uids->len, timestamp_ns);
        for (guint i = 0; i < uids->len; i++) {
            if (works[i].fresh)
                pleg_pod_cache_touch(pleg->cache, works[i].pod_uid, timestamp_ns);
        }

        g_mutex_lock(&pleg->state_lock);
        for (guint i = 0; i < uids->len; i++)
            redeliver_missed(pleg, uids->pdata[i]);
        g_mutex_unlock(&pleg->state_lock);
    }
    elapsed_usec = g_get_monotonic_time() - start_usec;
    for (guint i = 0; i < n; i++) {
        for (guint r = 0; r < (n_requests ? n_requests[i] : 1); r++)
            pleg_metric_series_observe(pleg->series.pod_relist_duration,
                                       (double)elapsed_usec / G_USEC_PER_SEC);
    }
    g_mutex_unlock(&pleg->relist_lock);
    return ok;
}

gboolean
pleg_generic_relist_pod(PlegGeneric *pleg, const char *pod_uid, PlegRelistSource source,
                        GError **error)
{
    g_return_val_if_fail(pleg != NULL && pod_uid != NULL, FALSE);
    g_return_val_if_fail(source < PLEG_RELIST_SOURCE_N, FALSE);

    return relist_pods(pleg, &pod_uid, &source, NULL, 1, error);
}
