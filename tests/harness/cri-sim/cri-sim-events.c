/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cri-sim: the GetContainerEvents stream.  Subscribers, the natural events of state changes,
 * events emitted by hand, the greeting a new stream gets, and the stream counters.
 */
#include "cri-sim-private.h"

/* ---- delivery (lock held) ---- */

static guint
deliver(CriSim *self, GBytes *bytes)
{
    guint n = self->subscribers->len;

    if (n == 0)
        return 0;
    if (self->deliver_one) {
        Call *call = self->subscribers->pdata[self->next_subscriber++ % n];

        g_queue_push_tail(&call->outbox, g_bytes_ref(bytes));
        sim_stream_kick(call);
        return 1;
    }
    for (guint i = 0; i < n; i++) {
        Call *call = self->subscribers->pdata[i];

        g_queue_push_tail(&call->outbox, g_bytes_ref(bytes));
        sim_stream_kick(call);
    }
    return n;
}

void
sim_natural_event(CriSim *self, CriSimEventType type, const char *id, Pod *pod)
{
    g_autoptr(GBytes) bytes = NULL;

    if (!self->auto_events || self->subscribers->len == 0)
        return;
    bytes = sim_build_event(self, type, id, pod, 0, 0);
    deliver(self, bytes);
}

void
sim_sandbox_event(CriSim *self, CriSimEventType type, Pod *pod)
{
    if (self->sandbox_events)
        sim_natural_event(self, type, pod->id, pod);
}

void
sim_subscribe(CriSim *self, Call *call)
{
    self->n_streams++;
    for (guint i = 0; i < self->greeting->len; i++) {
        const CriSimEvent *event = &g_array_index(self->greeting, CriSimEvent, i);

        g_queue_push_tail(&call->outbox, sim_build_event(self, event->type, event->container_id, NULL,
                                                     event->flags, event->created_at_ns));
    }
    if (self->greeting_end) {
        call->ending = TRUE;
        call->end_status = GRPC_STATUS_OK;
    } else {
        g_ptr_array_add(self->subscribers, call);
    }
    g_debug("GetContainerEvents stream %u opened", self->n_streams);
    g_cond_broadcast(&self->cond);
    sim_stream_kick(call);
}

void
sim_greeting_clear(CriSim *self)
{
    for (guint i = 0; i < self->greeting->len; i++)
        g_free((char *)g_array_index(self->greeting, CriSimEvent, i).container_id);
    g_array_set_size(self->greeting, 0);
}

/* ---- the public API ---- */

guint
cri_sim_emit(CriSim *self, const CriSimEvent *event)
{
    g_autoptr(GBytes) bytes = NULL;
    guint n;

    g_mutex_lock(&self->lock);
    bytes = sim_build_event(self, event->type, event->container_id, NULL, event->flags,
                        event->created_at_ns);
    n = deliver(self, bytes);
    g_mutex_unlock(&self->lock);
    return n;
}

void
cri_sim_set_auto_events(CriSim *self, gboolean enabled)
{
    g_mutex_lock(&self->lock);
    self->auto_events = enabled;
    g_mutex_unlock(&self->lock);
}

void
cri_sim_set_sandbox_events(CriSim *self, gboolean enabled)
{
    g_mutex_lock(&self->lock);
    self->sandbox_events = enabled;
    g_mutex_unlock(&self->lock);
}

void
cri_sim_set_deliver_one(CriSim *self, gboolean enabled)
{
    g_mutex_lock(&self->lock);
    self->deliver_one = enabled;
    g_mutex_unlock(&self->lock);
}

void
cri_sim_set_stream_greeting(CriSim *self, const CriSimEvent *events, guint n_events,
                            gboolean end_after)
{
    g_mutex_lock(&self->lock);
    sim_greeting_clear(self);
    for (guint i = 0; i < n_events; i++) {
        CriSimEvent copy = events[i];

        copy.container_id = g_strdup(events[i].container_id);
        g_array_append_val(self->greeting, copy);
    }
    self->greeting_end = end_after;
    g_mutex_unlock(&self->lock);
}

void
cri_sim_end_streams(CriSim *self, int status, const char *message)
{
    g_mutex_lock(&self->lock);
    while (self->subscribers->len > 0)
        sim_stream_end(self, self->subscribers->pdata[0], status,
                   message ? message : status == 0 ? "" : "cri-sim: stream ended");
    g_mutex_unlock(&self->lock);
}

void
cri_sim_set_events_unimplemented(CriSim *self, gboolean unimplemented)
{
    g_mutex_lock(&self->lock);
    self->events_unimplemented = unimplemented;
    g_mutex_unlock(&self->lock);
}

guint
cri_sim_get_n_subscribers(CriSim *self)
{
    guint n;

    g_mutex_lock(&self->lock);
    n = self->subscribers->len;
    g_mutex_unlock(&self->lock);
    return n;
}

guint
cri_sim_get_n_streams(CriSim *self)
{
    guint n;

    g_mutex_lock(&self->lock);
    n = self->n_streams;
    g_mutex_unlock(&self->lock);
    return n;
}

guint
cri_sim_get_n_events_sent(CriSim *self)
{
    guint n;

    g_mutex_lock(&self->lock);
    n = self->n_events_sent;
    g_mutex_unlock(&self->lock);
    return n;
}

gboolean
cri_sim_wait_subscribers(CriSim *self, guint n, int timeout_ms)
{
    gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
    gboolean reached;

    g_mutex_lock(&self->lock);
    while (self->subscribers->len != n)
        if (!g_cond_wait_until(&self->cond, &self->lock, deadline))
            break;
    reached = self->subscribers->len == n;
    g_mutex_unlock(&self->lock);
    return reached;
}

gboolean
cri_sim_wait_events_sent(CriSim *self, guint n, int timeout_ms)
{
    gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
    gboolean reached;

    g_mutex_lock(&self->lock);
    while (self->n_events_sent < n)
        if (!g_cond_wait_until(&self->cond, &self->lock, deadline))
            break;
    reached = self->n_events_sent >= n;
    g_mutex_unlock(&self->lock);
    return reached;
}
