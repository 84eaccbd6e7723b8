/* SPDX-License-Identifier: Apache-2.0 */
/* Delivery: events built from transitions, pushed to subscribers' channels, and what a full
 * channel missed kept per container and redelivered in order by later relists. */
#include "pleg-config.h"

#include "pleg-generic-private.h"

/* An event without its names: the caller fills event->details. */
static PlegPodLifecycleEvent *
build_event(PlegGeneric *pleg, const char *pod_uid, PlegPodLifecycleEventType type, const char *id,
            PlegRelistSource source, PlegPodStatus *status)
{
    PlegPodLifecycleEvent *event =
        pleg_pod_lifecycle_event_new(pod_uid, type, id, source, now_ns(pleg));
    const PlegContainerStatus *cs =
        status && id ? pleg_pod_status_find_container(status, id) : NULL;

    if (!cs)
        return event;
    if (type == PLEG_CONTAINER_DIED && cs->state == PLEG_CONTAINER_STATE_EXITED) {
        event->has_exit = TRUE;
        event->exit_code = cs->exit_code;
        event->reason = g_strdup(cs->reason);
        event->finished_at_ns = cs->finished_at_ns;
    } else if (type == PLEG_CONTAINER_STARTED) {
        event->details.started_at_ns = cs->started_at_ns;
    }
    return event;
}

/* @event's names as @from has them (an earlier event of the same container or pod). */
static void
copy_names(PlegPodLifecycleEvent *event, const PlegPodLifecycleEvent *from)
{
    event->details.pod_namespace = g_strdup(from->details.pod_namespace);
    event->details.pod_name = g_strdup(from->details.pod_name);
    if (!event->container_id)
        return;
    event->details.container_name = g_strdup(from->details.container_name);
    event->details.image = g_strdup(from->details.image);
    event->details.attempt = from->details.attempt;
    event->details.sandbox = from->details.sandbox;
}

/* A failed push is counted as a discard only the first time an event misses a subscriber
 * (@first_attempt); replaying it later is not a new drop. */
static gboolean
push(PlegGeneric *pleg, Subscriber *sub, PlegPodLifecycleEvent *event, gboolean first_attempt)
{
    if (!pleg_event_channel_try_push(sub->channel, event)) {
        if (first_attempt) {
            pleg_metric_series_inc(pleg->series.discard_events);
            g_debug("event channel full, %s for pod %s deferred to a later relist",
                    pleg_pod_lifecycle_event_type_to_string(event->type), event->pod_uid);
        }
        return FALSE;
    }
    if (event->type == PLEG_CONTAINER_DIED && event->has_exit && event->finished_at_ns > 0) {
        double latency = (double)(now_ns(pleg) - event->finished_at_ns) / 1e9;
        pleg_metric_series_observe(source_series(pleg->series.exit_detection, event->relist_source),
                                   MAX(latency, 0.0));
    }
    return TRUE;
}

/* The missed table is a set of its entries, told apart by pod UID and id as two strings: no
 * joined key, which ("a/b", "c") and ("a", "b/c") would share. */
static guint
missed_hash(gconstpointer key)
{
    const Missed *m = key;

    return g_str_hash(m->pod_uid) * 31 + (m->id ? g_str_hash(m->id) : 0);
}

static gboolean
missed_equal(gconstpointer a, gconstpointer b)
{
    const Missed *ma = a, *mb = b;

    return g_str_equal(ma->pod_uid, mb->pod_uid) && g_strcmp0(ma->id, mb->id) == 0;
}

/* @id NULL: the pod's PodSync entry. */
static Missed *
missed_lookup(Subscriber *sub, const char *pod_uid, const char *id)
{
    const Missed key = {.pod_uid = (char *)pod_uid, .id = (char *)id};

    return g_hash_table_lookup(sub->missed, &key);
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

static Missed *
missed_add(Subscriber *sub, const char *pod_uid, const char *id, PlegState seen)
{
    Missed *m = g_new0(Missed, 1);

    m->pod_uid = g_strdup(pod_uid);
    m->id = g_strdup(id);
    m->seen = seen;
    m->latest = seen;
    m->events = g_array_new(FALSE, FALSE, sizeof(MissedEvent));
    g_array_set_clear_func(m->events, (GDestroyNotify)missed_event_clear);
    g_hash_table_add(sub->missed, m);
    if (id)
        sub->n_containers++;
    return m;
}

/* Removes the entry @iter is at. */
static void
missed_iter_remove(Subscriber *sub, GHashTableIter *iter, Missed *m)
{
    if (m->id)
        sub->n_containers--;
    g_hash_table_iter_remove(iter);
}

/* Called with state_lock held. */
static void
missed_collapse(PlegGeneric *pleg, Missed *m, PlegRelistSource source, PlegPodStatus *status)
{
    g_autoptr(GArray) transitions = g_array_new(FALSE, FALSE, sizeof(Transition));
    g_autoptr(PlegPodLifecycleEvent) named = NULL;

    g_debug("subscriber missed more than %d events of %s, collapsing them", MISSED_MAX, m->id);
    /* The queued events name the container; the collapsed ones keep those names. */
    named = pleg_pod_lifecycle_event_ref(g_array_index(m->events, MissedEvent, 0).event);
    g_array_set_size(m->events, 0);
    add_transitions(transitions, m->id, m->seen, m->latest);
    for (guint i = 0; i < transitions->len; i++) {
        const Transition *t = &g_array_index(transitions, Transition, i);
        g_autoptr(PlegPodLifecycleEvent) event = NULL;

        if (t->type == PLEG_CONTAINER_CHANGED)
            continue;
        event = build_event(pleg, m->pod_uid, t->type, m->id, source, status);
        copy_names(event, named);
        /* What the subscriber never saw of an initial state is still the initial state. */
        event->details.initial = named->details.initial;
        missed_append(m, event, t->after);
    }
}

/* The pod being delivered when the missed table overflows: its transitions before @index have
 * gone to the subscriber or into the table, the others not yet. */
typedef struct {
    const char *pod_uid;
    GArray *transitions;
    guint index;
} Delivering;

/* What the subscriber was last told of @id of @pod_uid, whose published snapshot is @published
 * (NULL: none). */
static PlegState
told_state(Subscriber *sub, const char *pod_uid, const char *id, const PodSnapshot *published,
           const Delivering *now)
{
    Missed *m = missed_lookup(sub, pod_uid, id);

    if (m)
        return m->seen;
    if (now && g_str_equal(now->pod_uid, pod_uid)) {
        gboolean pushed = FALSE;
        PlegState state = STATE_NON_EXISTENT;

        /* @published is already this publication's: the subscriber has what the transitions
         * before @index brought, and what was before the first one after it. */
        for (guint i = 0; i < now->transitions->len; i++) {
            const Transition *t = &g_array_index(now->transitions, Transition, i);

            if (!t->id || t->type == PLEG_CONTAINER_CHANGED || !g_str_equal(t->id, id))
                continue;
            if (i >= now->index)
                return pushed ? state : t->before;
            state = t->after;
            pushed = TRUE;
        }
        if (pushed)
            return state;
    }
    return pod_snapshot_state(published, id);
}

/* Whether the subscriber believes that something of @pod_uid that has no entry in its table
 * exists: a container of the published snapshot, or one being delivered. */
static gboolean
pod_told(PlegGeneric *pleg, Subscriber *sub, const char *pod_uid, const Delivering *now)
{
    PodRecord *rec = g_hash_table_lookup(pleg->records, pod_uid);
    const PodSnapshot *published = rec ? rec->old : NULL;

    if (published) {
        GPtrArray *entries[] = {published->containers, published->sandboxes};

        for (guint e = 0; e < G_N_ELEMENTS(entries); e++) {
            for (guint i = 0; i < entries[e]->len; i++) {
                const PodEntry *entry = g_ptr_array_index(entries[e], i);

                if (told_state(sub, pod_uid, entry->id, published, now) != STATE_NON_EXISTENT)
                    return TRUE;
            }
        }
    }
    if (now && g_str_equal(now->pod_uid, pod_uid)) {
        for (guint i = 0; i < now->transitions->len; i++) {
            const Transition *t = &g_array_index(now->transitions, Transition, i);

            if (t->id && told_state(sub, pod_uid, t->id, published, now) != STATE_NON_EXISTENT)
                return TRUE;
        }
    }
    return FALSE;
}

/* The subscriber is owed events of MISSED_CONTAINERS_MAX containers: everything it is owed
 * becomes one PodSync a pod, for the pods the PLEG knows and those the subscriber believes
 * exist; a pod gone that it was never told of needs nothing.  Called with state_lock held. */
static void
missed_overflow(PlegGeneric *pleg, Subscriber *sub, PlegRelistSource source, const Delivering *now)
{
    g_autoptr(GHashTable) pods = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    /* An event owed of each pod, for the names of a pod the PLEG no longer holds. */
    g_autoptr(GHashTable) named = g_hash_table_new_full(
        g_str_hash, g_str_equal, g_free, (GDestroyNotify)pleg_pod_lifecycle_event_unref);
    GHashTableIter iter;
    Missed *m;
    const char *pod_uid;
    gpointer told;

    g_debug("subscriber owed events of %u containers, collapsing them into PodSyncs",
            sub->n_containers);
    /* Whether the subscriber believes that something of each pod exists: then, the pod gone,
     * a PodSync still has something to tell it. */
    g_hash_table_iter_init(&iter, sub->missed);
    while (g_hash_table_iter_next(&iter, (gpointer *)&m, NULL)) {
        if (m->id && !GPOINTER_TO_INT(g_hash_table_lookup(pods, m->pod_uid)))
            g_hash_table_insert(pods, g_strdup(m->pod_uid),
                                GINT_TO_POINTER(m->seen != STATE_NON_EXISTENT));
        if (m->events->len > 0 && !g_hash_table_contains(named, m->pod_uid))
            g_hash_table_insert(
                named, g_strdup(m->pod_uid),
                pleg_pod_lifecycle_event_ref(g_array_index(m->events, MissedEvent, 0).event));
    }
    g_hash_table_iter_init(&iter, pods);
    while (g_hash_table_iter_next(&iter, (gpointer *)&pod_uid, &told)) {
        if (!GPOINTER_TO_INT(told) && pod_told(pleg, sub, pod_uid, now))
            g_hash_table_iter_replace(&iter, GINT_TO_POINTER(TRUE));
    }

    g_hash_table_iter_init(&iter, sub->missed);
    while (g_hash_table_iter_next(&iter, (gpointer *)&m, NULL)) {
        PodRecord *rec = g_hash_table_lookup(pleg->records, m->pod_uid);

        /* An earlier PodSync of a pod gone since, of which the subscriber knows nothing. */
        if (m->id || (!m->told && !(rec && rec->old)))
            missed_iter_remove(sub, &iter, m);
    }

    g_hash_table_iter_init(&iter, pods);
    while (g_hash_table_iter_next(&iter, (gpointer *)&pod_uid, &told)) {
        PodRecord *rec = g_hash_table_lookup(pleg->records, pod_uid);
        g_autoptr(PlegPodLifecycleEvent) event = NULL;

        if (!GPOINTER_TO_INT(told) && !(rec && rec->old))
            continue;
        m = missed_add(sub, pod_uid, NULL, STATE_NON_EXISTENT);
        m->told = GPOINTER_TO_INT(told);
        event = build_event(pleg, pod_uid, PLEG_POD_SYNC, NULL, source, NULL);
        if (rec)
            pod_snapshot_fill_details(&event->details, NULL, rec->current, rec->old);
        if (!event->details.pod_name && !event->details.pod_namespace &&
            g_hash_table_contains(named, pod_uid))
            copy_names(event, g_hash_table_lookup(named, pod_uid));
        missed_append(m, event, STATE_NON_EXISTENT);
    }
}

/* Delivers, in order, what each subscriber missed of @pod_uid (all pods when NULL), as far as
 * its channel has room.  Called with state_lock held. */
void
redeliver_missed(PlegGeneric *pleg, const char *pod_uid)
{
    for (guint s = 0; s < pleg->subscribers->len; s++) {
        Subscriber *sub = g_ptr_array_index(pleg->subscribers, s);
        gboolean blocked = FALSE;
        GHashTableIter iter;
        Missed *m;

        g_hash_table_iter_init(&iter, sub->missed);
        while (!blocked && g_hash_table_iter_next(&iter, (gpointer *)&m, NULL)) {
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
                missed_iter_remove(sub, &iter, m);
        }
    }
}

/* Publishes a pod's transitions to every subscriber; what is owed from earlier drops goes out
 * when the relist ends (redeliver_missed()).  Called with state_lock held. */
void
deliver(PlegGeneric *pleg, const char *pod_uid, GArray *transitions, PlegRelistSource source,
        PlegPodStatus *status, const PodSnapshot *current, const PodSnapshot *previous,
        gboolean initial)
{
    PlegMetricSeries *events_total = source_series(pleg->series.events_total, source);

    for (guint i = 0; i < transitions->len; i++) {
        const Transition *t = &g_array_index(transitions, Transition, i);
        g_autoptr(PlegPodLifecycleEvent) event = NULL;

        if (t->type == PLEG_CONTAINER_CHANGED)
            continue;
        pleg_metric_series_inc(events_total);
        event = build_event(pleg, pod_uid, t->type, t->id, source, status);
        pod_snapshot_fill_details(&event->details, t->id, current, previous);
        event->details.initial = initial;

        for (guint s = 0; s < pleg->subscribers->len; s++) {
            Subscriber *sub = g_ptr_array_index(pleg->subscribers, s);
            Missed *m = NULL;

            if (g_hash_table_size(sub->missed) > 0) {
                /* A PodSync is owed for the pod: it stands for this event too, as the
                 * subscriber rereads the pod's state when it gets it. */
                if (missed_lookup(sub, pod_uid, NULL)) {
                    pleg_metric_series_inc(pleg->series.discard_events);
                    continue;
                }
                m = t->id ? missed_lookup(sub, pod_uid, t->id) : NULL;
            }
            /* Earlier events of this container are still owed: this one queues behind them
             * (and counts as a discard, as it is not delivered now). */
            if (m) {
                pleg_metric_series_inc(pleg->series.discard_events);
                missed_append(m, event, t->after);
                if (m->events->len > MISSED_MAX)
                    missed_collapse(pleg, m, source, status);
                continue;
            }
            if (push(pleg, sub, event, TRUE) || !t->id)
                continue;
            if (sub->n_containers >= MISSED_CONTAINERS_MAX) {
                const Delivering now = {pod_uid, transitions, i};

                missed_overflow(pleg, sub, source, &now);
                if (missed_lookup(sub, pod_uid, NULL))
                    continue;
            }
            m = missed_add(sub, pod_uid, t->id, t->before);
            missed_append(m, event, t->after);
        }
    }
}

Subscriber *
subscriber_new(guint capacity)
{
    Subscriber *sub = g_new0(Subscriber, 1);

    sub->channel = pleg_event_channel_new(capacity);
    sub->missed =
        g_hash_table_new_full(missed_hash, missed_equal, (GDestroyNotify)missed_free, NULL);
    return sub;
}

void
subscriber_free(Subscriber *sub)
{
    pleg_event_channel_free(sub->channel);
    g_hash_table_unref(sub->missed);
    g_free(sub);
}

guint
subscriber_missed_entries(PlegGeneric *pleg, PlegEventChannel *channel)
{
    guint n = 0;

    g_mutex_lock(&pleg->state_lock);
    for (guint s = 0; s < pleg->subscribers->len; s++) {
        Subscriber *sub = g_ptr_array_index(pleg->subscribers, s);

        if (sub->channel == channel)
            n = g_hash_table_size(sub->missed);
    }
    g_mutex_unlock(&pleg->state_lock);
    return n;
}
