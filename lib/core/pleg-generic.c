/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Generic PLEG.  See doc/design.md for threads, locks and data flow.
 *
 * Lock order (outermost first): relist_lock -> state_lock -> queue_lock -> (channel, cache,
 * metrics locks).  relist_lock serialises relists and is held across runtime calls; state_lock
 * guards pod records, subscribers and health and is never held across a runtime call;
 * queue_lock guards the RequestRelist queue, pod suspensions and the dispatcher's wake-ups.
 */
#include "pleg-config.h"

#include <pleg/pleg-cri-client.h>
#include <pleg/pleg-util.h>

#include "pleg-private.h"

/* kubelet's PLEG view of a container or sandbox. */
typedef enum {
    STATE_RUNNING,
    STATE_EXITED,
    STATE_UNKNOWN,
    STATE_NON_EXISTENT,
} PlegState;

typedef struct {
    char *id;
    char *sandbox_id; /* containers only */
    PlegState state;
    gint64 created_at_ns;
} PodEntry;

/* One pod as seen by one listing: kubelet's kubecontainer.Pod.  Immutable once built. */
typedef struct {
    char *uid;
    GPtrArray *containers; /* PodEntry */
    GPtrArray *sandboxes;  /* PodEntry, newest first */
} PodSnapshot;

typedef struct {
    PodSnapshot *old;     /* last published */
    PodSnapshot *current; /* last listed */
    gboolean reinspect;
} PodRecord;

typedef struct {
    int count;
    gboolean pending;
    PlegRelistSource pending_source;
} Suspension;

typedef struct {
    char *pod_uid;
    PlegRelistSource source;
    gint64 enqueued_usec; /* monotonic */
} RelistRequest;

/* What one subscriber has not received yet of one container: the undelivered events in the
 * order they were generated.  A container id passes through few states (created, running,
 * exited, gone), so the queue stays short; past MISSED_MAX events (a runtime flapping a container
 * between unknown and running while the subscriber is stalled) it collapses to kubelet's
 * transition from what the subscriber last saw to the newest state. */
#define MISSED_MAX 16

typedef struct {
    PlegPodLifecycleEvent *event;
    PlegState after;
} MissedEvent;

typedef struct {
    char *pod_uid;
    char *id;
    PlegState seen;   /* what the subscriber last received */
    PlegState latest; /* the state after the newest queued event */
    GArray *events;   /* MissedEvent, oldest first */
} Missed;

typedef struct {
    PlegEventChannel *channel;
    GHashTable *missed; /* "uid/id" -> Missed */
} Subscriber;

/* One generated event with the states around it, so a drop can be redelivered later. */
typedef struct {
    PlegPodLifecycleEventType type;
    const char *id;
    PlegState before;
    PlegState after;
} Transition;

struct _PlegGeneric {
    PlegRuntime *runtime;
    PlegGenericConfig config;
    PlegMetricsRegistry *metrics;
    PlegPodCache *cache;

    struct {
        PlegMetric *relist_duration;
        PlegMetric *relist_interval;
        PlegMetric *pod_relist_duration;
        PlegMetric *discard_events;
        PlegMetric *last_seen;
        PlegMetric *running_pods;
        PlegMetric *running_containers;
        PlegMetric *events_total;
        PlegMetric *relist_requests;
        PlegMetric *exit_detection;
    } m;

    GMutex relist_lock;
    GCancellable *cancellable;
    GThreadPool *reconcile_pool; /* global relists' pod reconciliations */

    GMutex state_lock;
    GHashTable *records; /* pod uid -> PodRecord */
    GPtrArray *subscribers;
    gint64 last_relist_ns;
    gint64 last_relist_mono_usec; /* the same instant on the monotonic clock */
    GError *last_relist_error;    /* the last global relist's failure, NULL after a success */

    GMutex queue_lock;
    GCond queue_cond;
    GQueue queue;
    GHashTable *suspensions; /* pod uid -> Suspension */
    gboolean shutdown;
    gint64 last_global_start_usec; /* monotonic start of the last successful global relist */
    GThread *thread;

    GPtrArray *notices; /* RelistNotice not dispatched yet; under queue_lock */
    /* The relist callback: written under queue_lock, read there by its notices, which run it
     * outside the lock; set_relist_callback() waits for a running one (notice_done). */
    GMainContext *callback_context;
    PlegRelistFunc callback;
    gpointer callback_data;
    GDestroyNotify callback_destroy;
    GThread *notice_thread; /* the thread running the callback, NULL when none */
    GCond notice_done;
};

static const double exit_detection_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                0.25,  0.5,    1,     2.5,  5,     10};

static gint64
now_ns(PlegGeneric *pleg)
{
    if (pleg->config.clock)
        return pleg->config.clock(pleg->config.clock_data);
    return g_get_real_time() * 1000;
}

/* Time since an instant taken as (@wall_ns, @mono_usec).  kubelet measures it on Go's monotonic
 * reading; so does libpleg, unless a test injected a clock, which then drives it. */
static gint64
elapsed_usec_since(PlegGeneric *pleg, gint64 wall_ns, gint64 mono_usec)
{
    if (pleg->config.clock)
        return (now_ns(pleg) - wall_ns) / 1000;
    return g_get_monotonic_time() - mono_usec;
}

static PlegState
state_from_container(PlegContainerState state)
{
    switch (state) {
    case PLEG_CONTAINER_STATE_RUNNING:
        return STATE_RUNNING;
    case PLEG_CONTAINER_STATE_EXITED:
        return STATE_EXITED;
    case PLEG_CONTAINER_STATE_CREATED:
    case PLEG_CONTAINER_STATE_UNKNOWN:
        break;
    }
    return STATE_UNKNOWN;
}

/* --- snapshots ---------------------------------------------------------------------------- */

static void
pod_entry_free(PodEntry *entry)
{
    g_free(entry->id);
    g_free(entry->sandbox_id);
    g_free(entry);
}

static void
pod_snapshot_clear(PodSnapshot *pod)
{
    g_free(pod->uid);
    g_ptr_array_unref(pod->containers);
    g_ptr_array_unref(pod->sandboxes);
}

static PodSnapshot *
pod_snapshot_new(const char *uid)
{
    PodSnapshot *pod = g_rc_box_new0(PodSnapshot);

    pod->uid = g_strdup(uid);
    pod->containers = g_ptr_array_new_with_free_func((GDestroyNotify)pod_entry_free);
    pod->sandboxes = g_ptr_array_new_with_free_func((GDestroyNotify)pod_entry_free);
    return pod;
}

static PodSnapshot *
pod_snapshot_ref(PodSnapshot *pod)
{
    return pod ? g_rc_box_acquire(pod) : NULL;
}

static void
pod_snapshot_unref(PodSnapshot *pod)
{
    if (pod)
        g_rc_box_release_full(pod, (GDestroyNotify)pod_snapshot_clear);
}

G_DEFINE_AUTOPTR_CLEANUP_FUNC(PodSnapshot, pod_snapshot_unref)

static PlegState
pod_snapshot_state(const PodSnapshot *pod, const char *id)
{
    if (!pod)
        return STATE_NON_EXISTENT;
    for (guint i = 0; i < pod->containers->len; i++) {
        const PodEntry *e = g_ptr_array_index(pod->containers, i);
        if (g_str_equal(e->id, id))
            return e->state;
    }
    for (guint i = 0; i < pod->sandboxes->len; i++) {
        const PodEntry *e = g_ptr_array_index(pod->sandboxes, i);
        if (g_str_equal(e->id, id))
            return e->state;
    }
    return STATE_NON_EXISTENT;
}

static gint
entry_newest_first(gconstpointer a, gconstpointer b)
{
    const PodEntry *ea = *(const PodEntry *const *)a;
    const PodEntry *eb = *(const PodEntry *const *)b;

    return (ea->created_at_ns < eb->created_at_ns) - (ea->created_at_ns > eb->created_at_ns);
}

/* Groups a listing into pods by UID: a container belongs to its sandbox's pod, or, when its
 * sandbox is not listed, to the pod named by its io.kubernetes.pod.uid label. */
static GHashTable *
group_pods(GPtrArray *sandboxes, GPtrArray *containers)
{
    GHashTable *pods =
        g_hash_table_new_full(g_str_hash, g_str_equal, NULL, (GDestroyNotify)pod_snapshot_unref);
    g_autoptr(GHashTable) sandbox_uids = g_hash_table_new(g_str_hash, g_str_equal);

    for (guint i = 0; i < sandboxes->len; i++) {
        const PlegPodSandbox *s = g_ptr_array_index(sandboxes, i);
        PodSnapshot *pod;
        PodEntry *entry;

        if (!s->id || !s->uid || !*s->uid) {
            g_debug("sandbox %s has no pod UID, ignoring", s->id ? s->id : "(no id)");
            continue;
        }
        pod = g_hash_table_lookup(pods, s->uid);
        if (!pod) {
            pod = pod_snapshot_new(s->uid);
            g_hash_table_insert(pods, pod->uid, pod);
        }
        entry = g_new0(PodEntry, 1);
        entry->id = g_strdup(s->id);
        entry->state = s->state == PLEG_POD_SANDBOX_STATE_READY ? STATE_RUNNING : STATE_EXITED;
        entry->created_at_ns = s->created_at_ns;
        g_ptr_array_add(pod->sandboxes, entry);
        g_hash_table_insert(sandbox_uids, s->id, s->uid);
    }

    for (guint i = 0; i < containers->len; i++) {
        const PlegContainer *c = g_ptr_array_index(containers, i);
        const char *uid =
            c->pod_sandbox_id ? g_hash_table_lookup(sandbox_uids, c->pod_sandbox_id) : NULL;
        PodSnapshot *pod;
        PodEntry *entry;

        if (!uid)
            uid = c->pod_uid_label;
        if (!c->id || !uid || !*uid) {
            g_debug("container %s belongs to no known pod, ignoring", c->id ? c->id : "(no id)");
            continue;
        }
        pod = g_hash_table_lookup(pods, uid);
        if (!pod) {
            pod = pod_snapshot_new(uid);
            g_hash_table_insert(pods, pod->uid, pod);
        }
        entry = g_new0(PodEntry, 1);
        entry->id = g_strdup(c->id);
        entry->sandbox_id = g_strdup(c->pod_sandbox_id);
        entry->state = state_from_container(c->state);
        entry->created_at_ns = c->created_at_ns;
        g_ptr_array_add(pod->containers, entry);
    }

    GHashTableIter iter;
    PodSnapshot *pod;
    g_hash_table_iter_init(&iter, pods);
    while (g_hash_table_iter_next(&iter, NULL, (gpointer *)&pod))
        g_ptr_array_sort(pod->sandboxes, entry_newest_first);
    return pods;
}

/* --- event generation --------------------------------------------------------------------- */

/* kubelet's table: (old, new) -> events, Died before Removed. */
static void
add_transitions(GArray *out, const char *id, PlegState before, PlegState after)
{
    Transition t = {.id = id, .before = before, .after = after};

    if (before == after)
        return;
    switch (after) {
    case STATE_RUNNING:
        t.type = PLEG_CONTAINER_STARTED;
        break;
    case STATE_EXITED:
        t.type = PLEG_CONTAINER_DIED;
        break;
    case STATE_UNKNOWN:
        t.type = PLEG_CONTAINER_CHANGED;
        break;
    case STATE_NON_EXISTENT:
        if (before != STATE_EXITED) {
            Transition died = {PLEG_CONTAINER_DIED, id, before, STATE_EXITED};
            g_array_append_val(out, died);
            t.before = STATE_EXITED;
        }
        t.type = PLEG_CONTAINER_REMOVED;
        break;
    }
    g_array_append_val(out, t);
}

static void
add_entries_transitions(GArray *out, GPtrArray *entries, const PodSnapshot *other,
                        gboolean old_side)
{
    for (guint i = 0; i < entries->len; i++) {
        const PodEntry *e = g_ptr_array_index(entries, i);
        PlegState other_state = pod_snapshot_state(other, e->id);

        if (old_side) {
            if (other_state == STATE_NON_EXISTENT)
                add_transitions(out, e->id, e->state, STATE_NON_EXISTENT);
        } else {
            add_transitions(out, e->id, other_state, e->state);
        }
    }
}

/* Transitions from @old to @current; ids point into the snapshots, which outlive the array. */
static GArray *
compute_transitions(const PodSnapshot *old, const PodSnapshot *current)
{
    GArray *out = g_array_new(FALSE, FALSE, sizeof(Transition));

    if (current) {
        add_entries_transitions(out, current->containers, old, FALSE);
        add_entries_transitions(out, current->sandboxes, old, FALSE);
    }
    if (old) {
        add_entries_transitions(out, old->containers, current, TRUE);
        add_entries_transitions(out, old->sandboxes, current, TRUE);
    }
    return out;
}

/* --- delivery ----------------------------------------------------------------------------- */

static PlegPodLifecycleEvent *
build_event(PlegGeneric *pleg, const char *pod_uid, PlegPodLifecycleEventType type, const char *id,
            PlegRelistSource source, PlegPodStatus *status)
{
    PlegPodLifecycleEvent *event =
        pleg_pod_lifecycle_event_new(pod_uid, type, id, source, now_ns(pleg));

    if (type == PLEG_CONTAINER_DIED && status) {
        const PlegContainerStatus *cs = pleg_pod_status_find_container(status, id);
        if (cs && cs->state == PLEG_CONTAINER_STATE_EXITED) {
            event->has_exit = TRUE;
            event->exit_code = cs->exit_code;
            event->reason = g_strdup(cs->reason);
            event->finished_at_ns = cs->finished_at_ns;
        }
    }
    return event;
}

/* A failed push is counted as a discard only the first time an event misses a subscriber
 * (@first_attempt); replaying it later is not a new drop. */
static gboolean
push(PlegGeneric *pleg, Subscriber *sub, PlegPodLifecycleEvent *event, gboolean first_attempt)
{
    const char *source = pleg_relist_source_to_string(event->relist_source);

    if (!pleg_event_channel_try_push(sub->channel, event)) {
        if (first_attempt) {
            pleg_metric_inc(pleg->m.discard_events, NULL);
            g_debug("event channel full, %s for pod %s deferred to a later relist",
                    pleg_pod_lifecycle_event_type_to_string(event->type), event->pod_uid);
        }
        return FALSE;
    }
    if (event->type == PLEG_CONTAINER_DIED && event->has_exit && event->finished_at_ns > 0) {
        double latency = (double)(now_ns(pleg) - event->finished_at_ns) / 1e9;
        pleg_metric_observe(pleg->m.exit_detection, (const char *[]){source}, MAX(latency, 0.0));
    }
    return TRUE;
}

static char *
missed_key(const char *pod_uid, const char *id)
{
    return g_strconcat(pod_uid, "/", id, NULL);
}

static void
missed_event_clear(MissedEvent *me)
{
    pleg_pod_lifecycle_event_unref(me->event);
}

static void
missed_free(Missed *m)
{
    g_free(m->pod_uid);
    g_free(m->id);
    g_array_unref(m->events);
    g_free(m);
}

static void
missed_append(Missed *m, PlegPodLifecycleEvent *event, PlegState after)
{
    MissedEvent me = {pleg_pod_lifecycle_event_ref(event), after};

    g_array_append_val(m->events, me);
    m->latest = after;
}

/* Called with state_lock held. */
static void
missed_collapse(PlegGeneric *pleg, Missed *m, PlegRelistSource source, PlegPodStatus *status)
{
    g_autoptr(GArray) transitions = g_array_new(FALSE, FALSE, sizeof(Transition));

    g_debug("subscriber missed more than %d events of %s, collapsing them", MISSED_MAX, m->id);
    g_array_set_size(m->events, 0);
    add_transitions(transitions, m->id, m->seen, m->latest);
    for (guint i = 0; i < transitions->len; i++) {
        const Transition *t = &g_array_index(transitions, Transition, i);
        g_autoptr(PlegPodLifecycleEvent) event = NULL;

        if (t->type == PLEG_CONTAINER_CHANGED)
            continue;
        event = build_event(pleg, m->pod_uid, t->type, m->id, source, status);
        missed_append(m, event, t->after);
    }
}

/* Delivers, in order, what each subscriber missed of @pod_uid (all pods when NULL), as far as
 * its channel has room.  Called with state_lock held. */
static void
redeliver_missed(PlegGeneric *pleg, const char *pod_uid)
{
    for (guint s = 0; s < pleg->subscribers->len; s++) {
        Subscriber *sub = g_ptr_array_index(pleg->subscribers, s);
        gboolean blocked = FALSE;
        GHashTableIter iter;
        Missed *m;

        g_hash_table_iter_init(&iter, sub->missed);
        while (!blocked && g_hash_table_iter_next(&iter, NULL, (gpointer *)&m)) {
            guint sent = 0;

            if (pod_uid && !g_str_equal(pod_uid, m->pod_uid))
                continue;
            for (; sent < m->events->len; sent++) {
                MissedEvent *me = &g_array_index(m->events, MissedEvent, sent);
                if (!push(pleg, sub, me->event, FALSE)) {
                    blocked = TRUE; /* the channel is full: try again next relist */
                    break;
                }
                m->seen = me->after;
            }
            g_array_remove_range(m->events, 0, sent);
            if (m->events->len == 0)
                g_hash_table_iter_remove(&iter);
        }
    }
}

/* Publishes a pod's transitions to every subscriber; what is owed from earlier drops goes out
 * when the relist ends (redeliver_missed()).  Called with state_lock held. */
static void
deliver(PlegGeneric *pleg, const char *pod_uid, GArray *transitions, PlegRelistSource source,
        PlegPodStatus *status)
{
    const char *source_label[] = {pleg_relist_source_to_string(source)};

    for (guint i = 0; i < transitions->len; i++) {
        const Transition *t = &g_array_index(transitions, Transition, i);
        g_autoptr(PlegPodLifecycleEvent) event = NULL;
        g_autofree char *key = NULL;

        if (t->type == PLEG_CONTAINER_CHANGED)
            continue;
        pleg_metric_inc(pleg->m.events_total, source_label);
        event = build_event(pleg, pod_uid, t->type, t->id, source, status);
        key = t->id ? missed_key(pod_uid, t->id) : NULL;

        for (guint s = 0; s < pleg->subscribers->len; s++) {
            Subscriber *sub = g_ptr_array_index(pleg->subscribers, s);
            Missed *m = key ? g_hash_table_lookup(sub->missed, key) : NULL;

            /* Earlier events of this container are still owed: this one queues behind them
             * (and counts as a discard, as it is not delivered now). */
            if (m) {
                pleg_metric_inc(pleg->m.discard_events, NULL);
                missed_append(m, event, t->after);
                if (m->events->len > MISSED_MAX)
                    missed_collapse(pleg, m, source, status);
                continue;
            }
            if (!push(pleg, sub, event, TRUE) && key) {
                m = g_new0(Missed, 1);
                m->pod_uid = g_strdup(pod_uid);
                m->id = g_strdup(t->id);
                m->seen = t->before;
                m->events = g_array_new(FALSE, FALSE, sizeof(MissedEvent));
                g_array_set_clear_func(m->events, (GDestroyNotify)missed_event_clear);
                missed_append(m, event, t->after);
                g_hash_table_insert(sub->missed, g_strdup(key), m);
            }
        }
    }
}

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

static void
record_free(PodRecord *rec)
{
    pod_snapshot_unref(rec->old);
    pod_snapshot_unref(rec->current);
    g_free(rec);
}

static gboolean
is_suspended(PlegGeneric *pleg, const char *pod_uid)
{
    gboolean suspended;

    g_mutex_lock(&pleg->queue_lock);
    suspended = g_hash_table_contains(pleg->suspensions, pod_uid);
    g_mutex_unlock(&pleg->queue_lock);
    return suspended;
}

/* Called with state_lock held: if @pod_uid is suspended, remember that a relist is owed. */
static gboolean
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
#define RECONCILE_THREADS           4
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

static void
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

static gboolean
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
    g_mutex_unlock(&pleg->state_lock);
    if (last_ns > 0)
        pleg_metric_observe(pleg->m.relist_interval, NULL,
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
    pleg_metric_observe(pleg->m.relist_duration, NULL,
                        (double)(g_get_monotonic_time() - start_usec) / G_USEC_PER_SEC);
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
    pleg_metric_observe(pleg->m.pod_relist_duration, NULL,
                        (double)(g_get_monotonic_time() - start_usec) / G_USEC_PER_SEC);
    g_mutex_unlock(&pleg->relist_lock);
    return ok;
}

/* --- RequestRelist, suspension and the dispatcher ----------------------------------------- */

static void
count_request(PlegGeneric *pleg, PlegRelistSource source, const char *outcome)
{
    pleg_metric_inc(pleg->m.relist_requests,
                    (const char *[]){pleg_relist_source_to_string(source), outcome});
}

static void
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

static void notify_relist(PlegGeneric *pleg, const GError *error, gint64 timestamp_ns);

static gpointer
dispatcher_thread(gpointer data)
{
    PlegGeneric *pleg = data;
    gint64 next_global_usec = 0;

    g_mutex_lock(&pleg->queue_lock);
    while (!pleg->shutdown) {
        RelistRequest *req;

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

        req = g_queue_pop_head(&pleg->queue);
        if (req) {
            gboolean covered = req->enqueued_usec < pleg->last_global_start_usec;

            g_mutex_unlock(&pleg->queue_lock);
            if (covered) {
                count_request(pleg, req->source, "covered");
            } else {
                g_autoptr(GError) error = NULL;
                if (!pleg_generic_relist_pod(pleg, req->pod_uid, req->source, &error))
                    g_debug("relist of pod %s failed: %s", req->pod_uid, error->message);
            }
            relist_request_free(req);
            g_mutex_lock(&pleg->queue_lock);
            continue;
        }

        g_cond_wait_until(&pleg->queue_cond, &pleg->queue_lock, next_global_usec);
    }
    g_mutex_unlock(&pleg->queue_lock);
    return NULL;
}

typedef struct {
    PlegGeneric *pleg;
    GSource *source; /* owns the notice */
    GError *error;
    gint64 timestamp_ns;
} RelistNotice;

static gboolean
relist_notice_dispatch(gpointer data)
{
    RelistNotice *notice = data;
    PlegGeneric *pleg = notice->pleg;
    g_autoptr(GError) error = NULL;
    gint64 timestamp_ns;

    PlegRelistFunc func;
    gpointer func_data;

    /* notify_relist() may have updated the newest notice until now.  The callback is read
     * here, under the lock that pleg_generic_set_relist_callback() changes it under, and that
     * waits for notice_thread before it destroys the callback's data or the PLEG goes. */
    g_mutex_lock(&pleg->queue_lock);
    g_ptr_array_remove(pleg->notices, notice);
    error = g_steal_pointer(&notice->error);
    timestamp_ns = notice->timestamp_ns;
    func = pleg->callback;
    func_data = pleg->callback_data;
    if (func)
        pleg->notice_thread = g_thread_self();
    g_mutex_unlock(&pleg->queue_lock);
    if (!func)
        return G_SOURCE_REMOVE;

    func(error, timestamp_ns, func_data);

    g_mutex_lock(&pleg->queue_lock);
    pleg->notice_thread = NULL;
    g_cond_broadcast(&pleg->notice_done);
    g_mutex_unlock(&pleg->queue_lock);
    return G_SOURCE_REMOVE;
}

static void
relist_notice_free(gpointer data)
{
    RelistNotice *notice = data;

    g_clear_error(&notice->error);
    g_free(notice);
}

#define MAX_PENDING_NOTICES 64

static void
notify_relist(PlegGeneric *pleg, const GError *error, gint64 timestamp_ns)
{
    RelistNotice *notice;
    GSource *source;

    /* A host whose context is not iterated must not make notices pile up: past a bound, the
     * newest queued notice takes the newest outcome instead (older outcomes are superseded). */
    g_mutex_lock(&pleg->queue_lock);
    if (!pleg->callback) {
        g_mutex_unlock(&pleg->queue_lock);
        return;
    }
    if (pleg->notices->len >= MAX_PENDING_NOTICES) {
        notice = g_ptr_array_index(pleg->notices, pleg->notices->len - 1);
        g_clear_error(&notice->error);
        notice->error = error ? g_error_copy(error) : NULL;
        notice->timestamp_ns = timestamp_ns;
        g_mutex_unlock(&pleg->queue_lock);
        return;
    }
    g_mutex_unlock(&pleg->queue_lock);

    notice = g_new0(RelistNotice, 1);
    notice->pleg = pleg;
    notice->error = error ? g_error_copy(error) : NULL;
    notice->timestamp_ns = timestamp_ns;
    /* Not g_main_context_invoke(): it would run the callback right here when nobody owns
     * the context, and the header promises the callback context. */
    source = g_idle_source_new();
    g_source_set_name(source, "pleg relist notice");
    g_source_set_priority(source, G_PRIORITY_DEFAULT);
    g_source_set_callback(source, relist_notice_dispatch, notice, relist_notice_free);
    notice->source = source;
    g_mutex_lock(&pleg->queue_lock);
    g_ptr_array_add(pleg->notices, notice);
    g_source_attach(source, pleg->callback_context);
    g_mutex_unlock(&pleg->queue_lock);
    g_source_unref(source);
}

void
pleg_generic_set_relist_callback(PlegGeneric *pleg, GMainContext *context, PlegRelistFunc func,
                                 gpointer user_data, GDestroyNotify destroy)
{
    g_return_if_fail(pleg != NULL);
    g_return_if_fail(pleg->thread == NULL);

    GMainContext *old_context;
    gpointer old_data;
    GDestroyNotify old_destroy;

    /* Notices still queued would call into a PLEG that may be about to be freed, and one
     * running now (in the callback context's thread) must return before the old data is
     * destroyed.  From inside the callback itself there is nothing to wait for. */
    g_mutex_lock(&pleg->queue_lock);
    while (pleg->notices->len > 0) {
        RelistNotice *notice = g_ptr_array_steal_index_fast(pleg->notices, 0);
        g_source_destroy(notice->source); /* frees the notice */
    }
    while (pleg->notice_thread && pleg->notice_thread != g_thread_self())
        g_cond_wait(&pleg->notice_done, &pleg->queue_lock);
    old_context = pleg->callback_context;
    old_data = pleg->callback_data;
    old_destroy = pleg->callback_destroy;
    pleg->callback = func;
    pleg->callback_data = user_data;
    pleg->callback_destroy = destroy;
    pleg->callback_context =
        !func     ? NULL
        : context ? g_main_context_ref(context)
                  : g_main_context_ref_thread_default();
    g_mutex_unlock(&pleg->queue_lock);

    if (old_destroy)
        old_destroy(old_data);
    if (old_context)
        g_main_context_unref(old_context);
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
    pleg->thread = g_thread_new("pleg-dispatcher", dispatcher_thread, pleg);
}

void
pleg_generic_stop(PlegGeneric *pleg)
{
    g_return_if_fail(pleg != NULL);

    g_mutex_lock(&pleg->queue_lock);
    pleg->shutdown = TRUE;
    g_queue_clear_full(&pleg->queue, (GDestroyNotify)relist_request_free);
    g_cond_broadcast(&pleg->queue_cond);
    g_mutex_unlock(&pleg->queue_lock);

    if (!pleg->thread)
        return;
    g_cancellable_cancel(pleg->cancellable);
    g_thread_join(g_steal_pointer(&pleg->thread));

    /* Later relists driven by hand need a cancellable that is not cancelled. */
    g_mutex_lock(&pleg->relist_lock);
    g_object_unref(pleg->cancellable);
    pleg->cancellable = g_cancellable_new();
    g_mutex_unlock(&pleg->relist_lock);
}

/* --- construction, subscribers, health ---------------------------------------------------- */

void
pleg_generic_config_init(PlegGenericConfig *config)
{
    g_return_if_fail(config != NULL);

    *config = (PlegGenericConfig){
        .relist_period_usec = PLEG_DEFAULT_RELIST_PERIOD_USEC,
        .relist_threshold_usec = PLEG_DEFAULT_RELIST_THRESHOLD_USEC,
        .relist_queue_capacity = PLEG_DEFAULT_RELIST_QUEUE_CAPACITY,
    };
}

static void
register_metrics(PlegGeneric *pleg)
{
    PlegMetricsRegistry *r = pleg->metrics;
    static const char *const source_label[] = {"relist_source", NULL};
    static const char *const request_labels[] = {"relist_source", "outcome", NULL};
    static const char *const state_label[] = {"container_state", NULL};

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
    pleg->m.exit_detection = pleg_metrics_register(
        r, PLEG_METRIC_HISTOGRAM, "kubelet_pleg_exit_detection_latency_seconds",
        "Time from a container's CRI finished_at to delivery of its ContainerDied.", source_label,
        exit_detection_buckets, G_N_ELEMENTS(exit_detection_buckets));

    /* Show every series from the start, so rates work from the first scrape. */
    for (PlegRelistSource s = 0; s < PLEG_RELIST_SOURCE_N; s++) {
        const char *src = pleg_relist_source_to_string(s);
        pleg_metric_add(pleg->m.events_total, (const char *[]){src}, 0);
        if (s == PLEG_RELIST_SOURCE_GLOBAL)
            continue;
        for (guint o = 0; o < 4; o++) {
            static const char *const outcomes[] = {"queued", "coalesced", "covered", "dropped"};
            pleg_metric_add(pleg->m.relist_requests, (const char *[]){src, outcomes[o]}, 0);
        }
    }
}

static void
subscriber_free(Subscriber *sub)
{
    pleg_event_channel_free(sub->channel);
    g_hash_table_unref(sub->missed);
    g_free(sub);
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

    pleg->metrics = metrics ? pleg_metrics_registry_ref(metrics) : pleg_metrics_registry_new();
    register_metrics(pleg);
    pleg->cache = pleg_pod_cache_new();

    g_mutex_init(&pleg->relist_lock);
    pleg->cancellable = g_cancellable_new();
    pleg->reconcile_pool = g_thread_pool_new(reconcile_task, NULL, RECONCILE_THREADS, FALSE, NULL);

    g_mutex_init(&pleg->state_lock);
    pleg->records =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)record_free);
    pleg->subscribers = g_ptr_array_new_with_free_func((GDestroyNotify)subscriber_free);

    g_mutex_init(&pleg->queue_lock);
    g_cond_init(&pleg->queue_cond);
    g_cond_init(&pleg->notice_done);
    g_queue_init(&pleg->queue);
    pleg->suspensions = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    pleg->notices = g_ptr_array_new(); /* RelistNotice, owned by their sources */
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
    g_hash_table_unref(pleg->suspensions);
    g_ptr_array_unref(pleg->notices);
    g_queue_clear_full(&pleg->queue, (GDestroyNotify)relist_request_free);
    g_cond_clear(&pleg->notice_done);
    g_cond_clear(&pleg->queue_cond);
    g_mutex_clear(&pleg->queue_lock);
    g_mutex_clear(&pleg->state_lock);
    g_mutex_clear(&pleg->relist_lock);
    g_thread_pool_free(pleg->reconcile_pool, FALSE, TRUE);
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

    sub = g_new0(Subscriber, 1);
    sub->channel = pleg_event_channel_new(capacity);
    sub->missed =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)missed_free);
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

void
pleg_generic_get_runtime_state(PlegGeneric *pleg, gboolean *ret_ever_reached, GError **ret_error)
{
    g_mutex_lock(&pleg->state_lock);
    *ret_ever_reached = pleg->last_relist_ns != 0;
    *ret_error = pleg->last_relist_error ? g_error_copy(pleg->last_relist_error) : NULL;
    g_mutex_unlock(&pleg->state_lock);
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
