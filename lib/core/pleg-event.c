/* SPDX-License-Identifier: Apache-2.0 */
#include "pleg-config.h"

#include "pleg-private.h"

const char *
pleg_pod_lifecycle_event_type_to_string(PlegPodLifecycleEventType type)
{
    switch (type) {
    case PLEG_CONTAINER_STARTED:
        return "ContainerStarted";
    case PLEG_CONTAINER_DIED:
        return "ContainerDied";
    case PLEG_CONTAINER_REMOVED:
        return "ContainerRemoved";
    case PLEG_POD_SYNC:
        return "PodSync";
    case PLEG_CONTAINER_CHANGED:
        return "ContainerChanged";
    }
    return "Unknown";
}

const char *
pleg_relist_source_to_string(PlegRelistSource source)
{
    switch (source) {
    case PLEG_RELIST_SOURCE_GLOBAL:
        return "global";
    case PLEG_RELIST_SOURCE_EVENTED_PLEG:
        return "evented_pleg";
    case PLEG_RELIST_SOURCE_POST_SYNC:
        return "post_sync";
    case PLEG_RELIST_SOURCE_POST_ALLOCATION:
        return "post_allocation";
    case PLEG_RELIST_SOURCE_N:
        break;
    }
    return "unknown";
}

const char *
pleg_relist_request_result_to_string(PlegRelistRequestResult result)
{
    switch (result) {
    case PLEG_RELIST_REQUEST_QUEUED:
        return "queued";
    case PLEG_RELIST_REQUEST_COALESCED:
        return "coalesced";
    case PLEG_RELIST_REQUEST_DROPPED:
        return "dropped";
    }
    return "unknown";
}

static void
event_clear(PlegPodLifecycleEvent *event)
{
    g_free(event->pod_uid);
    g_free(event->container_id);
    g_free(event->reason);
    g_free(event->details.pod_namespace);
    g_free(event->details.pod_name);
    g_free(event->details.container_name);
    g_free(event->details.image);
}

const PlegEventDetails *
pleg_pod_lifecycle_event_get_details(const PlegPodLifecycleEvent *event)
{
    g_return_val_if_fail(event != NULL, NULL);
    return &event->details;
}

gboolean
pleg_pod_lifecycle_event_is_initial(const PlegPodLifecycleEvent *event)
{
    g_return_val_if_fail(event != NULL, FALSE);
    return event->details.initial;
}

PlegPodLifecycleEvent *
pleg_pod_lifecycle_event_new(const char *pod_uid, PlegPodLifecycleEventType type,
                             const char *container_id, PlegRelistSource source, gint64 time_ns)
{
    PlegPodLifecycleEvent *event = g_atomic_rc_box_new0(PlegPodLifecycleEvent);

    event->pod_uid = g_strdup(pod_uid);
    event->type = type;
    event->container_id = g_strdup(container_id);
    event->relist_source = source;
    event->time_ns = time_ns;
    return event;
}

PlegPodLifecycleEvent *
pleg_pod_lifecycle_event_ref(PlegPodLifecycleEvent *event)
{
    g_return_val_if_fail(event != NULL, NULL);
    return g_atomic_rc_box_acquire(event);
}

void
pleg_pod_lifecycle_event_unref(PlegPodLifecycleEvent *event)
{
    if (event)
        g_atomic_rc_box_release_full(event, (GDestroyNotify)event_clear);
}

struct _PlegEventChannel {
    gatomicrefcount ref_count; /* the PLEG's, plus one per consumer inside pop() */
    GMutex lock;
    GCond cond;
    GQueue events;
    guint capacity;
    gboolean closed;
    GSource *source; /* weak: the attached source, woken on push */
};

typedef struct {
    GSource base;
    PlegEventChannel *channel;
} ChannelSource;

PlegEventChannel *
pleg_event_channel_new(guint capacity)
{
    PlegEventChannel *channel = g_new0(PlegEventChannel, 1);

    g_atomic_ref_count_init(&channel->ref_count);
    g_mutex_init(&channel->lock);
    g_cond_init(&channel->cond);
    g_queue_init(&channel->events);
    channel->capacity = capacity ? capacity : PLEG_DEFAULT_EVENT_CHANNEL_CAPACITY;
    return channel;
}

gboolean
pleg_event_channel_try_push(PlegEventChannel *channel, PlegPodLifecycleEvent *event)
{
    gboolean pushed = FALSE;

    g_mutex_lock(&channel->lock);
    if (!channel->closed && channel->events.length < channel->capacity) {
        g_queue_push_tail(&channel->events, pleg_pod_lifecycle_event_ref(event));
        g_cond_signal(&channel->cond);
        if (channel->source)
            g_source_set_ready_time(channel->source, 0);
        pushed = TRUE;
    }
    g_mutex_unlock(&channel->lock);
    return pushed;
}

void
pleg_event_channel_close(PlegEventChannel *channel)
{
    g_mutex_lock(&channel->lock);
    channel->closed = TRUE;
    g_cond_broadcast(&channel->cond);
    if (channel->source)
        g_source_set_ready_time(channel->source, 0);
    g_mutex_unlock(&channel->lock);
}

static void
channel_unref(PlegEventChannel *channel)
{
    if (!g_atomic_ref_count_dec(&channel->ref_count))
        return;
    g_queue_clear_full(&channel->events, (GDestroyNotify)pleg_pod_lifecycle_event_unref);
    g_cond_clear(&channel->cond);
    g_mutex_clear(&channel->lock);
    g_free(channel);
}

void
pleg_event_channel_free(PlegEventChannel *channel)
{
    if (!channel)
        return;
    g_return_if_fail(channel->source == NULL);
    /* A consumer still blocked in pop() keeps the memory alive until it returns. */
    pleg_event_channel_close(channel);
    channel_unref(channel);
}

PlegPodLifecycleEvent *
pleg_event_channel_pop(PlegEventChannel *channel, gint64 timeout_usec)
{
    PlegPodLifecycleEvent *event;
    gint64 end_time = timeout_usec > 0 ? g_get_monotonic_time() + timeout_usec : 0;

    g_return_val_if_fail(channel != NULL, NULL);

    g_atomic_ref_count_inc(&channel->ref_count);
    g_mutex_lock(&channel->lock);
    while (channel->events.length == 0 && !channel->closed && timeout_usec != 0) {
        if (timeout_usec < 0)
            g_cond_wait(&channel->cond, &channel->lock);
        else if (!g_cond_wait_until(&channel->cond, &channel->lock, end_time))
            break;
    }
    event = g_queue_pop_head(&channel->events);
    g_mutex_unlock(&channel->lock);
    channel_unref(channel);
    return event;
}

guint
pleg_event_channel_get_length(PlegEventChannel *channel)
{
    guint length;

    g_return_val_if_fail(channel != NULL, 0);
    g_mutex_lock(&channel->lock);
    length = channel->events.length;
    g_mutex_unlock(&channel->lock);
    return length;
}

static gboolean
channel_source_dispatch(GSource *source, GSourceFunc callback, gpointer user_data)
{
    PlegEventChannel *channel = ((ChannelSource *)source)->channel;
    PlegEventFunc func = (PlegEventFunc)(void (*)(void))callback;

    g_source_set_ready_time(source, -1);
    while (!g_source_is_destroyed(source)) {
        g_autoptr(PlegPodLifecycleEvent) event = pleg_event_channel_pop(channel, 0);
        if (!event)
            break;
        if (func)
            func(event, user_data);
    }
    return G_SOURCE_CONTINUE;
}

static void
channel_source_finalize(GSource *source)
{
    PlegEventChannel *channel = ((ChannelSource *)source)->channel;

    g_mutex_lock(&channel->lock);
    if (channel->source == source)
        channel->source = NULL;
    g_mutex_unlock(&channel->lock);
}

static GSourceFuncs channel_source_funcs = {
    .dispatch = channel_source_dispatch,
    .finalize = channel_source_finalize,
};

GSource *
pleg_event_channel_attach(PlegEventChannel *channel, GMainContext *context, PlegEventFunc func,
                          gpointer user_data, GDestroyNotify destroy)
{
    GSource *source;

    g_return_val_if_fail(channel != NULL && func != NULL, NULL);
    g_return_val_if_fail(channel->source == NULL, NULL);

    source = g_source_new(&channel_source_funcs, sizeof(ChannelSource));
    ((ChannelSource *)source)->channel = channel;
    g_source_set_name(source, "pleg event channel");
    g_source_set_callback(source, (GSourceFunc)(void (*)(void))func, user_data, destroy);

    g_mutex_lock(&channel->lock);
    channel->source = source;
    g_source_set_ready_time(source, channel->events.length > 0 ? 0 : -1);
    g_mutex_unlock(&channel->lock);

    g_source_attach(source, context ? context : g_main_context_get_thread_default());
    return source;
}
