/* SPDX-License-Identifier: Apache-2.0 */
/* RequestRelist's queue, pod suspension, and the dispatcher thread that serves shutdown,
 * then a due global relist, then the queued pod requests (KEP-3386, "Design Details"), all
 * that are queued in one pass, while the requests that arrive meanwhile are taken for the next. */
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

static void
next_pass_pod_free(NextPassPod *pp)
{
    g_free(pp->pod_uid);
    g_free(pp);
}

void
clear_requests(PlegGeneric *pleg)
{
    g_queue_clear_full(&pleg->queue, (GDestroyNotify)relist_request_free);
    g_hash_table_remove_all(pleg->next_pass);
    g_queue_clear_full(&pleg->next_pass_order, (GDestroyNotify)next_pass_pod_free);
}

/* While a targeted pass runs, the dispatcher takes each request as it arrives into the next
 * pass: a request of a pod already there joins it (the pass's relist of the pod starts after
 * both), a request of another pod adds it.  So the pass after serves every pod asked for while
 * this one ran, and the queue keeps its capacity for what cannot be taken.  The next pass holds
 * one entry per pod, at most as many as the pods the PLEG knows (or the queue's capacity, if
 * that is more): pending targeted work never exceeds one global relist's pods, however many
 * requests a termination storm makes.  Outside a targeted pass (while a global relist runs, or
 * before the dispatcher takes its queue) requests wait in the queue, counted against its
 * capacity (KEP-3386, "Design Details").  Called with queue_lock held. */
static gboolean
take_for_next_pass(PlegGeneric *pleg, const char *pod_uid, PlegRelistSource source, gint64 now)
{
    NextPassPod *pp;

    if (!pleg->pass_running)
        return FALSE;
    pp = g_hash_table_lookup(pleg->next_pass, pod_uid);
    if (!pp) {
        guint bound =
            MAX(pleg->config.relist_queue_capacity, (guint)g_atomic_int_get(&pleg->known_pods));

        if (g_hash_table_size(pleg->next_pass) >= bound)
            return FALSE;
        pp = g_new0(NextPassPod, 1);
        pp->pod_uid = g_strdup(pod_uid);
        pp->source = source;
        g_hash_table_insert(pleg->next_pass, pp->pod_uid, pp);
        g_queue_push_tail(&pleg->next_pass_order, pp);
    }
    pp->newest_usec = now;
    pp->n_requests[source]++;
    return TRUE;
}

/* Called with queue_lock held. */
static gboolean
enqueue(PlegGeneric *pleg, const char *pod_uid, PlegRelistSource source)
{
    gint64 now = g_get_monotonic_time();
    RelistRequest *req;

    if (pleg->shutdown)
        return FALSE;
    if (take_for_next_pass(pleg, pod_uid, source, now))
        return TRUE;
    if (pleg->queue.length >= pleg->config.relist_queue_capacity)
        return FALSE;
    req = g_new0(RelistRequest, 1);
    req->pod_uid = g_strdup(pod_uid);
    req->source = source;
    req->enqueued_usec = now;
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

/* Counts @n requests of @source as covered by the last global relist.  Called with queue_lock
 * held; returns with it held. */
static void
count_covered(PlegGeneric *pleg, PlegRelistSource source, guint n)
{
    if (n == 0)
        return;
    g_mutex_unlock(&pleg->queue_lock);
    for (guint i = 0; i < n; i++)
        count_request(pleg, source, "covered");
    g_mutex_lock(&pleg->queue_lock);
}

/* The pods of one pass, as relist_pods() takes them. */
typedef struct {
    GPtrArray *uids;    /* char *, owned */
    GArray *sources;    /* PlegRelistSource */
    GArray *n_requests; /* guint */
} Pass;

static void
pass_add(Pass *pass, char *pod_uid, PlegRelistSource source, guint n_requests)
{
    g_ptr_array_add(pass->uids, pod_uid);
    g_array_append_val(pass->sources, source);
    g_array_append_val(pass->n_requests, n_requests);
}

/* Serves, in one pass, the pods taken while the last pass ran, then every request queued now: a
 * request older than the start of the last successful global relist is covered by it; the
 * others' pods are listed and inspected together (relist_pods()).  Requests that arrive
 * meanwhile are taken for the next pass (take_for_next_pass()).  Called with queue_lock held;
 * returns with it held. */
static void
serve_requests(PlegGeneric *pleg)
{
    g_autoptr(GPtrArray) uids = g_ptr_array_new_with_free_func(g_free);
    g_autoptr(GArray) sources = g_array_new(FALSE, FALSE, sizeof(PlegRelistSource));
    g_autoptr(GArray) n_requests = g_array_new(FALSE, FALSE, sizeof(guint));
    Pass pass = {uids, sources, n_requests};
    g_autoptr(GError) error = NULL;
    NextPassPod *pp;
    RelistRequest *req;

    g_hash_table_remove_all(pleg->next_pass);
    while ((pp = g_queue_pop_head(&pleg->next_pass_order))) {
        guint n = 0;

        for (guint s = 0; s < PLEG_RELIST_SOURCE_N; s++) {
            if (pp->newest_usec < pleg->last_global_start_usec)
                count_covered(pleg, s, pp->n_requests[s]);
            n += pp->n_requests[s];
        }
        if (pp->newest_usec >= pleg->last_global_start_usec)
            pass_add(&pass, g_steal_pointer(&pp->pod_uid), pp->source, n);
        next_pass_pod_free(pp);
    }
    while ((req = g_queue_pop_head(&pleg->queue))) {
        if (req->enqueued_usec < pleg->last_global_start_usec)
            count_covered(pleg, req->source, 1);
        else
            pass_add(&pass, g_steal_pointer(&req->pod_uid), req->source, 1);
        relist_request_free(req);
    }
    if (uids->len == 0)
        return;
    pleg->pass_running = TRUE;
    g_mutex_unlock(&pleg->queue_lock);

    if (!relist_pods(pleg, (const char *const *)uids->pdata, (PlegRelistSource *)sources->data,
                     (guint *)n_requests->data, uids->len, &error))
        g_debug("relist of %u pods failed: %s", uids->len, error->message);
    g_mutex_lock(&pleg->queue_lock);
    pleg->pass_running = FALSE;
}

gpointer
dispatcher_thread(gpointer data)
{
    PlegGeneric *pleg = data;
    gint64 next_global_usec = 0;
    guint n_globals = 0;

    g_mutex_lock(&pleg->queue_lock);
    while (!pleg->shutdown) {
        if (G_UNLIKELY(pleg->test_stall_after && n_globals >= pleg->test_stall_after)) {
            g_cond_wait(&pleg->queue_cond, &pleg->queue_lock);
            continue;
        }
        if (g_get_monotonic_time() >= next_global_usec) {
            g_autoptr(GError) error = NULL;
            gint64 timestamp_ns;
            gboolean ok;

            g_mutex_unlock(&pleg->queue_lock);
            ok = relist_global(pleg, &timestamp_ns, &error);
            /* Progress, whatever the outcome: liveness asks only that relists keep ending.
             * Before the notice, so that its callback sees it. */
            g_mutex_lock(&pleg->state_lock);
            pleg->attempt_end_ns = now_ns(pleg);
            pleg->attempt_end_mono_usec = g_get_monotonic_time();
            g_mutex_unlock(&pleg->state_lock);
            n_globals++;
            if (ok) {
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

        if (pleg->queue.length > 0 || pleg->next_pass_order.length > 0) {
            serve_requests(pleg);
            continue;
        }

        g_cond_wait_until(&pleg->queue_cond, &pleg->queue_lock, next_global_usec);
    }
    g_mutex_unlock(&pleg->queue_lock);
    return NULL;
}
