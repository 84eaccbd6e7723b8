/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The watcher's validation and request decision (KEP-3386: a CONTAINER_STOPPED_EVENT asks for a
 * relist of its pod; the payload goes nowhere else).
 */
#include "decision.h"

static const char *const ignore_reason_labels[EVENTED_IGNORE_N] = {
    [EVENTED_IGNORE_NO_SANDBOX_STATUS] = "no_sandbox_status",
    [EVENTED_IGNORE_NO_METADATA] = "no_metadata",
    [EVENTED_IGNORE_EMPTY_UID] = "empty_uid",
};

static const char *const ignore_reason_messages[EVENTED_IGNORE_N] = {
    [EVENTED_IGNORE_NO_SANDBOX_STATUS] = "without a pod sandbox status",
    [EVENTED_IGNORE_NO_METADATA] = "without pod sandbox metadata",
    [EVENTED_IGNORE_EMPTY_UID] = "with an empty pod UID",
};

const char *
evented_ignore_reason_label(EventedIgnoreReason reason)
{
    g_return_val_if_fail(reason < EVENTED_IGNORE_N, "unknown");
    return ignore_reason_labels[reason];
}

const char *
evented_ignore_reason_message(EventedIgnoreReason reason)
{
    g_return_val_if_fail(reason < EVENTED_IGNORE_N, "for an unknown reason");
    return ignore_reason_messages[reason];
}

static const char *
event_type_label(PlegContainerEventType type)
{
    switch (type) {
    case PLEG_CONTAINER_CREATED_EVENT:
        return "created";
    case PLEG_CONTAINER_STARTED_EVENT:
        return "started";
    case PLEG_CONTAINER_STOPPED_EVENT:
        return "stopped";
    case PLEG_CONTAINER_DELETED_EVENT:
        return "deleted";
    }
    return "unknown";
}

static int
validate(const PlegContainerEvent *event)
{
    if (!event->pod_sandbox_status)
        return EVENTED_IGNORE_NO_SANDBOX_STATUS;
    if (!event->has_metadata)
        return EVENTED_IGNORE_NO_METADATA;
    if (!event->pod_sandbox_status->uid || !event->pod_sandbox_status->uid[0])
        return EVENTED_IGNORE_EMPTY_UID;
    return -1;
}

void
evented_decide(const PlegContainerEvent *event, gint64 received_ns, EventedDecision *ret_decision)
{
    EventedDecision decision = {0};

    g_return_if_fail(event != NULL && ret_decision != NULL);

    decision.type_label = event_type_label(event->type);
    /* created_at is only a latency measure (KEP-3386); an unset one measures nothing. */
    if (event->created_at_ns > 0) {
        gint64 latency_ns = event->created_at_ns < received_ns
                                ? received_ns - event->created_at_ns
                                : 0;

        decision.has_latency = TRUE;
        decision.latency_seconds = (double)latency_ns / 1e9;
    }
    decision.ignore_reason = validate(event);
    if (decision.ignore_reason < 0 && event->type == PLEG_CONTAINER_STOPPED_EVENT)
        decision.relist_pod_uid = event->pod_sandbox_status->uid;
    *ret_decision = decision;
}
