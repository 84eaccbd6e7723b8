/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the Evented PLEG watcher makes of one container event, as a pure function: the label it
 * is counted under, the latency it measures, whether it is ignored and why, and which pod to
 * relist.  evented.c acts on the decision (metrics, logs, RequestRelist); tests/fuzz drives it
 * with decoded wire bytes.
 */
#pragma once

#include <pleg/pleg-plugin.h>

G_BEGIN_DECLS

/* Why an event names no pod; the `reason` label of kubelet_evented_pleg_events_ignored_total. */
typedef enum {
    EVENTED_IGNORE_NO_SANDBOX_STATUS,
    EVENTED_IGNORE_NO_METADATA,
    EVENTED_IGNORE_EMPTY_UID,
    EVENTED_IGNORE_N,
} EventedIgnoreReason;

/**
 * EventedDecision:
 * @type_label: the `event_type` label of kubelet_evented_pleg_events_received_total
 *   ("created", "started", "stopped", "deleted", or "unknown" for a value outside the enum).
 * @has_latency: whether the event carries a created_at (> 0) to measure latency from.
 * @latency_seconds: receipt minus created_at in seconds, never negative; 0 without one.
 * @ignore_reason: the reason the event is ignored, or -1 when it names a pod.
 * @relist_pod_uid: (transfer none) (nullable): the pod to RequestRelist: set for a valid
 *   CONTAINER_STOPPED_EVENT only, whatever its exit code or attached statuses (the relist reads
 *   the truth).  Points into the event.
 */
typedef struct {
    const char *type_label;
    gboolean has_latency;
    double latency_seconds;
    int ignore_reason;
    const char *relist_pod_uid;
} EventedDecision;

/**
 * evented_decide:
 * @event: a decoded event.
 * @received_ns: Unix ns at which the watcher received it.
 * @ret_decision: (out): what to do.
 *
 * Pure: no side effects, any thread.
 */
void evented_decide(const PlegContainerEvent *event, gint64 received_ns,
                    EventedDecision *ret_decision);

/* The `reason` label of @reason ("no_sandbox_status", ...). */
const char *evented_ignore_reason_label(EventedIgnoreReason reason);

/* How the log line says why ("without a pod sandbox status", ...). */
const char *evented_ignore_reason_message(EventedIgnoreReason reason);

G_END_DECLS
