/* SPDX-License-Identifier: Apache-2.0 */
/* RequestRelist's queue, pod suspension, and the dispatcher thread that serves shutdown,
 * then a due global relist, then the queued pod requests (KEP-3386, "Design Details"), all
 * that are queued in one pass. */
#include "pleg-config.h"

#include "pleg-generic-private.h"

gboolean
is_suspended(PlegGeneric *pleg, const char *pod_uid)
{
    gboolean suspended;

    g_mutex_lock(&pleg->queue_lock);
    suspended = g_hash_table_contains(pleg->suspensions, pod_uid);
    g_mutex_unlock(&pleg->queue_lock);
    return suspended;
}

/* Called with state_lock held: if @pod_uid is suspended, remember that a relist is owed. */
gboolean
defer_if_suspended(PlegGeneric *pleg, const char *pod_uid, PlegRelistSource source)
{
    Suspension *susp;

    g_mutex_lock(&pleg->queue_lock);
    susp = g_hash_table_lookup(pleg->suspensions, pod_uid);
    if (susp && (!susp->pending || susp->pending_source == PLEG_RELIST_SOURCE_GLOBAL)) {
        susp->pending = TRUE;
        susp->pending_source = source;
    }
    g_mutex_unlock(&pleg->queue_lock);
    return susp != NULL;
}

static void
count_request(PlegGeneric *pleg, PlegRelistSource source, const char *outcome)
{
    pleg_metric_series_inc(relist_request_series(pleg, source, outcome));
}

void
relist_request_free(RelistRequest *req)
{
    g_free(req->pod_uid);
    g_free(req);
}

/* Called with queue_lock held. */
static gboolean
enqueue(PlegGeneric *pleg, const char *pod_uid, PlegRelistSource source)
{
    RelistRequest *req;

    if (pleg->shutdown || pleg->queue.length >= pleg->config.relist_queue_capacity)
        return FALSE;
    req = g_new0(RelistRequest, 1);
    req->pod_uid = g_strdup(pod_uid);
    req->source = source;
    req->enqueued_usec = g_get_monotonic_time();
    g_queue_push_tail(&pleg->queue, req);
    g_cond_signal(&pleg->queue_cond);
    return TRUE;
}

PlegRelistRequestResult
pleg_generic_request_relist(PlegGeneric *pleg, const char *pod_uid, PlegRelistSource source)
{
    PlegRelistRequestResult result;
    Suspension *susp;

    g_return_val_if_fail(pleg != NULL && pod_uid != NULL, PLEG_RELIST_REQUEST_DROPPED);
    g_return_val_if_fail(source > PLEG_RELIST_SOURCE_GLOBAL && source < PLEG_RELIST_SOURCE_N,
                         PLEG_RELIST_REQUEST_DROPPED);

    g_mutex_lock(&pleg->queue_lock);
    susp = g_hash_table_lookup(pleg->suspensions, pod_uid);
    if (susp) {
        if (!susp->pending || susp->pending_source == PLEG_RELIST_SOURCE_GLOBAL)
            susp->pending_source = source;
        susp->pending = TRUE;
        result = PLEG_RELIST_REQUEST_COALESCED;
    } else if (enqueue(pleg, pod_uid, source)) {
        result = PLEG_RELIST_REQUEST_QUEUED;
    } else {
        result = PLEG_RELIST_REQUEST_DROPPED;
    }
    g_mutex_unlock(&pleg->queue_lock);

    count_request(pleg, source,
                  result == PLEG_RELIST_REQUEST_QUEUED      ? "queued"
                  : result == PLEG_RELIST_REQUEST_COALESCED ? "coalesced"
                                                            : "dropped");
    return result;
}

void
pleg_generic_suspend_pod(PlegGeneric *pleg, const char *pod_uid)
{
    Suspension *susp;

    g_return_if_fail(pleg != NULL && pod_uid != NULL);

    /* Taking state_lock waits for a publication of this pod in progress to finish. */
    g_mutex_lock(&pleg->state_lock);
    g_mutex_lock(&pleg->queue_lock);
    susp = g_hash_table_lookup(pleg->suspensions, pod_uid);
    if (!susp) {
        susp = g_new0(Suspension, 1);
        g_hash_table_insert(pleg->suspensions, g_strdup(pod_uid), susp);
    }
    susp->count++;
    g_mutex_unlock(&pleg->queue_lock);
    g_mutex_unlock(&pleg->state_lock);
}

void
pleg_generic_resume_pod(PlegGeneric *pleg, const char *pod_uid)
{
    Suspension *susp;
    PlegRelistSource source = PLEG_RELIST_SOURCE_GLOBAL;
    gboolean pending = FALSE, dropped = FALSE;

    g_return_if_fail(pleg != NULL && pod_uid != NULL);

    g_mutex_lock(&pleg->queue_lock);
    susp = g_hash_table_lookup(pleg->suspensions, pod_uid);
    if (!susp) {
        g_mutex_unlock(&pleg->queue_lock);
        g_debug("resume of pod %s that is not suspended, ignoring", pod_uid);
        return;
    }
    if (--susp->count == 0) {
        pending = susp->pending;
        source = susp->pending_source;
        g_hash_table_remove(pleg->suspensions, pod_uid);
        if (pending)
            dropped = !enqueue(pleg, pod_uid, source);
    }
    g_mutex_unlock(&pleg->queue_lock);

    if (dropped)
        count_request(pleg, source, "dropped");
}

/* Serves every request queued now in one pass: a request older than the start of the last
 * successful global relist is covered by it; the others' pods are listed and inspected
 * together (relist_pods()).  Called with queue_lock held; returns with it held. */
static void
serve_requests(PlegGeneric *pleg)
{
    g_autoptr(GPtrArray) served =
        g_ptr_array_new_with_free_func((GDestroyNotify)relist_request_free);
    g_autofree const char **uids = NULL;
    g_autofree PlegRelistSource *sources = NULL;
    g_autoptr(GError) error = NULL;
    RelistRequest *req;

    while ((req = g_queue_pop_head(&pleg->queue))) {
        if (req->enqueued_usec < pleg->last_global_start_usec) {
            g_mutex_unlock(&pleg->queue_lock);
            count_request(pleg, req->source, "covered");
            relist_request_free(req);
            g_mutex_lock(&pleg->queue_lock);
        } else {
            g_ptr_array_add(served, req);
        }
    }
    g_mutex_unlock(&pleg->queue_lock);

    uids = g_new(const char *, served->len);
    sources = g_new(PlegRelistSource, served->len);
    for (guint i = 0; i < served->len; i++) {
        req = g_ptr_array_index(served, i);
        uids[i] = req->pod_uid;
        sources[i] = req->source;
    }
    if (served->len > 0 && !relist_pods(pleg, uids, sources, served->len, &error))
        g_debug("relist of %u pods failed: %s", served->len, error->message);
    g_mutex_lock(&pleg->queue_lock);
}

gpointer
dispatcher_thread(gpointer data)
{
    PlegGeneric *pleg = data;
    gint64 next_global_usec = 0;

    g_mutex_lock(&pleg->queue_lock);
    while (!pleg->shutdown) {
        if (g_get_monotonic_time() >= next_global_usec) {
            g_autoptr(GError) error = NULL;
            gint64 timestamp_ns;

            g_mutex_unlock(&pleg->queue_lock);
            if (relist_global(pleg, &timestamp_ns, &error)) {
                notify_relist(pleg, NULL, timestamp_ns);
            } else if (g_cancellable_is_cancelled(pleg->cancellable)) {
                /* pleg_generic_stop() cut it short: no outcome of the runtime to report. */
                g_debug("relist cancelled by stop: %s, ignoring", error->message);
            } else {
                g_debug("relist failed: %s", error->message);
                notify_relist(pleg, error, timestamp_ns);
            }
            g_mutex_lock(&pleg->queue_lock);
            next_global_usec = g_get_monotonic_time() + pleg->config.relist_period_usec;
            continue;
        }

        if (pleg->queue.length > 0) {
            serve_requests(pleg);
            continue;
        }

        g_cond_wait_until(&pleg->queue_cond, &pleg->queue_lock, next_global_usec);
    }
    g_mutex_unlock(&pleg->queue_lock);
    return NULL;
}
