/* SPDX-License-Identifier: Apache-2.0 */
/* Delivery: events built from transitions, pushed to subscribers' channels, and what a full
 * channel missed kept per container and redelivered in order by later relists. */
#include "pleg-config.h"

#include "pleg-generic-private.h"

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

void
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
void
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
void
deliver(PlegGeneric *pleg, const char *pod_uid, GArray *transitions, PlegRelistSource source,
        PlegPodStatus *status)
{
    PlegMetricSeries *events_total = source_series(pleg->series.events_total, source);

    for (guint i = 0; i < transitions->len; i++) {
        const Transition *t = &g_array_index(transitions, Transition, i);
        g_autoptr(PlegPodLifecycleEvent) event = NULL;
        g_autofree char *key = NULL;

        if (t->type == PLEG_CONTAINER_CHANGED)
            continue;
        pleg_metric_series_inc(events_total);
        event = build_event(pleg, pod_uid, t->type, t->id, source, status);
        key = t->id ? missed_key(pod_uid, t->id) : NULL;

        for (guint s = 0; s < pleg->subscribers->len; s++) {
            Subscriber *sub = g_ptr_array_index(pleg->subscribers, s);
            Missed *m = key ? g_hash_table_lookup(sub->missed, key) : NULL;

            /* Earlier events of this container are still owed: this one queues behind them
             * (and counts as a discard, as it is not delivered now). */
            if (m) {
                pleg_metric_series_inc(pleg->series.discard_events);
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

void
subscriber_free(Subscriber *sub)
{
    pleg_event_channel_free(sub->channel);
    g_hash_table_unref(sub->missed);
    g_free(sub);
}
