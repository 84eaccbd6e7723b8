/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One GetContainerEvents message: the input is a ContainerEventResponse on the wire.  It goes
 * through the host's decoding (lib/cri/cri-events.c) and the Evented PLEG watcher's
 * validation and request decision (plugins/evented/decision.c), the code the plugin runs.
 *
 * Checked against the wire message itself: a relist is requested exactly for a
 * CONTAINER_STOPPED_EVENT whose pod_sandbox_status has metadata with a non-empty uid, and for
 * that uid; every other event is ignored for the first reason that applies, or (a valid event
 * of another type) neither ignored nor relisted; labels are the plugin's fixed label values;
 * latency is measured exactly when created_at > 0 and is never negative.
 */
#include <glib.h>
#include <string.h>

#include "decision.h"
#include "fuzz-target.h"
#include "pleg-services.h"

/* A fixed receipt time (2027-01-15), so that a replay decides as the fuzzer did. */
#define RECEIVED_NS G_GINT64_CONSTANT(1800000000000000000)

static gboolean
is_type_label(const char *label)
{
    static const char *const labels[] = {"created", "started", "stopped", "deleted", "unknown"};

    for (gsize i = 0; i < G_N_ELEMENTS(labels); i++)
        if (g_strcmp0(label, labels[i]) == 0)
            return TRUE;
    return FALSE;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    g_autoptr(Runtime__V1__ContainerEventResponse) message =
        runtime__v1__container_event_response__unpack(NULL, size, data);
    const Runtime__V1__PodSandboxStatus *wire_status;
    PlegContainerEvent *event;
    EventedDecision decision;
    int expected_reason;

    if (!message)
        return 0;

    event = cri_decode_container_event(message);
    FUZZ_CHECK(event->container_id != NULL, "the container id is never NULL");
    FUZZ_CHECK(event->container_statuses != NULL, "the container statuses are never NULL");
    FUZZ_CHECK(!event->has_metadata || event->pod_sandbox_status, "metadata needs a status");
    FUZZ_CHECK((int)event->type == (int)message->container_event_type,
               "the event type passes through as it came");

    evented_decide(event, RECEIVED_NS, &decision);

    wire_status = message->pod_sandbox_status;
    if (!wire_status)
        expected_reason = EVENTED_IGNORE_NO_SANDBOX_STATUS;
    else if (!wire_status->metadata)
        expected_reason = EVENTED_IGNORE_NO_METADATA;
    else if (!wire_status->metadata->uid || !wire_status->metadata->uid[0])
        expected_reason = EVENTED_IGNORE_EMPTY_UID;
    else
        expected_reason = -1;
    FUZZ_CHECK(decision.ignore_reason == expected_reason, "ignored for the first reason that applies");
    if (decision.ignore_reason >= 0) {
        FUZZ_CHECK(evented_ignore_reason_label(decision.ignore_reason) != NULL, "a reason label");
        FUZZ_CHECK(evented_ignore_reason_message(decision.ignore_reason) != NULL, "a reason text");
    }

    if (expected_reason < 0 &&
        message->container_event_type == RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STOPPED_EVENT) {
        FUZZ_CHECK(decision.relist_pod_uid != NULL, "a valid stopped event asks for a relist");
        FUZZ_CHECK(g_str_equal(decision.relist_pod_uid, wire_status->metadata->uid),
                   "the relist is for the event's pod");
    } else {
        FUZZ_CHECK(decision.relist_pod_uid == NULL, "nothing else asks for a relist");
    }

    FUZZ_CHECK(is_type_label(decision.type_label), "the event type label is a fixed value");
    FUZZ_CHECK(decision.has_latency == (message->created_at > 0),
               "latency is measured exactly when created_at is set");
    FUZZ_CHECK(decision.latency_seconds >= 0, "latency is never negative");

    cri_container_event_free(event);
    return 0;
}
