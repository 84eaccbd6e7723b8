/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CRI GetContainerEvents for the container_events_* host services.
 */
#include "cri-private.h"

struct _PlegContainerEventStream {
    CriStream *stream;
    gint64 open_usec; /* monotonic */
    gboolean ended;   /* the end func was called */
    CriContainerEventsEndFunc end_func;
    gpointer end_data;
    GDestroyNotify end_destroy;
};

/* The stream's end, told once. */
static void
events_ended(PlegContainerEventStream *self, const GError *error)
{
    if (self->ended)
        return;
    self->ended = TRUE;
    if (self->end_func)
        self->end_func(g_get_monotonic_time() - self->open_usec, error, self->end_data);
}

PlegContainerEventStream *
cri_container_events_open(CriChannel *channel, GError **error)
{
    Runtime__V1__GetEventsRequest request = RUNTIME__V1__GET_EVENTS_REQUEST__INIT;
    gint64 open_usec = g_get_monotonic_time();
    PlegContainerEventStream *self;
    CriStream *stream;

    g_return_val_if_fail(channel != NULL, NULL);

    /* No deadline: the watch lives until cancelled.  Fail-fast, as kubelet calls it: a stream
     * that has not failed is one the channel carried to the runtime (READY), so a watcher may
     * count it as established.  With WAIT_FOR_READY a runtime that is away held the call pending
     * with no failure and no sign, which looked like a quiet healthy stream; now the call ends
     * with UNAVAILABLE once the channel cannot connect, and the watcher's retry policy decides
     * when to ask again. */
    stream = cri_stream_start(channel, "GetContainerEvents", &request.base,
                              &runtime__v1__container_event_response__descriptor, 0, FALSE, error);
    if (!stream)
        return NULL;

    self = g_new0(PlegContainerEventStream, 1);
    self->stream = stream;
    self->open_usec = open_usec;
    return self;
}

void
cri_container_events_set_end_func(PlegContainerEventStream *self, CriContainerEventsEndFunc func,
                                  gpointer user_data, GDestroyNotify destroy)
{
    g_return_if_fail(self != NULL);

    if (self->end_destroy)
        self->end_destroy(self->end_data);
    self->end_func = func;
    self->end_data = user_data;
    self->end_destroy = destroy;
}

PlegContainerEvent *
cri_decode_container_event(const Runtime__V1__ContainerEventResponse *message)
{
    PlegContainerEvent *event = g_new0(PlegContainerEvent, 1);

    event->container_id = g_strdup(message->container_id ? message->container_id : "");
    event->type = (PlegContainerEventType)message->container_event_type;
    event->created_at_ns = message->created_at;
    if (message->pod_sandbox_status) {
        event->pod_sandbox_status = cri_decode_pod_sandbox_status(message->pod_sandbox_status);
        event->has_metadata = message->pod_sandbox_status->metadata != NULL;
    }
    event->container_statuses = g_ptr_array_new_full(message->n_containers_statuses,
                                                     (GDestroyNotify)pleg_container_status_free);
    for (size_t i = 0; i < message->n_containers_statuses; i++) {
        if (message->containers_statuses[i])
            g_ptr_array_add(event->container_statuses,
                            cri_decode_container_status(message->containers_statuses[i]));
    }
    return event;
}

gboolean
cri_container_events_read(PlegContainerEventStream *self, PlegContainerEvent **ret_event,
                          GError **error)
{
    g_autoptr(ProtobufCMessage) message = NULL;
    g_autoptr(GError) local_error = NULL;

    g_return_val_if_fail(self != NULL, FALSE);
    g_return_val_if_fail(ret_event != NULL, FALSE);

    if (!cri_stream_read(self->stream, &message, NULL, &local_error)) {
        events_ended(self, local_error);
        g_propagate_error(error, g_steal_pointer(&local_error));
        return FALSE;
    }
    if (!message) {
        events_ended(self, NULL);
        *ret_event = NULL;
        return TRUE;
    }
    *ret_event = cri_decode_container_event((const Runtime__V1__ContainerEventResponse *)message);
    return TRUE;
}

void
cri_container_events_cancel(PlegContainerEventStream *self)
{
    g_return_if_fail(self != NULL);
    cri_stream_cancel(self->stream);
}

void
cri_container_events_free(PlegContainerEventStream *self)
{
    if (!self)
        return;
    cri_stream_free(self->stream);
    events_ended(self, NULL);
    if (self->end_destroy)
        self->end_destroy(self->end_data);
    g_free(self);
}

void
cri_container_event_free(PlegContainerEvent *event)
{
    if (!event)
        return;
    g_free(event->container_id);
    pleg_pod_sandbox_status_free(event->pod_sandbox_status);
    if (event->container_statuses)
        g_ptr_array_unref(event->container_statuses);
    g_free(event);
}
