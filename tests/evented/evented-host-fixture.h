/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The real plugin host (pleg-host.h) with the Generic PLEG and the evented plugin loaded from
 * the build dir, against cri-sim; shared by test-evented-host and bench-evented.  The host runs
 * in a private context that the caller's thread iterates through host_fixture_wait().
 */
#pragma once

#include <pleg/pleg-host.h>

#include "cri-sim.h"

G_BEGIN_DECLS

typedef struct {
    gint64 relist_time_ns; /* start, as the Generic PLEG reports it */
    gint64 done_ns;        /* Unix ns when the callback ran: the end, give or take a wakeup */
    gboolean ok;
} HostRelist;

typedef struct {
    char *dir;
    char *socket_path;
    CriSim *sim;
    PlegFeatureGates *gates;
    GMainContext *context;
    PlegHost *host;
    GPtrArray *events; /* PlegPodLifecycleEvent, in arrival order */
    GArray *relists;   /* HostRelist */
    /* Called for each event besides recording it, in the host context (optional). */
    PlegEventFunc on_event;
    gpointer on_event_data;
    gboolean keep_events;
} HostFixture;

/* A cri-sim runtime on a fresh socket, with no pods. */
HostFixture *host_fixture_new(void);
/* Creates and starts the host; @relist_period_usec 0: kubelet's 1 s. */
void host_fixture_start(HostFixture *fx, gboolean evented, gint64 relist_period_usec);
void host_fixture_free(HostFixture *fx);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(HostFixture, host_fixture_free)

/* Iterates the host context until @func returns TRUE or @timeout_usec passes. */
gboolean host_fixture_wait(HostFixture *fx, gboolean (*func)(gpointer data), gpointer data,
                           gint64 timeout_usec);

/* Waits for an event of @type for @container_id; (transfer none) or NULL at the deadline. */
PlegPodLifecycleEvent *host_fixture_wait_event(HostFixture *fx, PlegPodLifecycleEventType type,
                                               const char *container_id, gint64 timeout_usec);

/* Number of successful global relists so far. */
guint host_fixture_count_relists(HostFixture *fx);

/* A metric's value in the host's registry (0 when not registered). */
double host_fixture_metric(HostFixture *fx, const char *name, const char *const *labels);

G_END_DECLS
