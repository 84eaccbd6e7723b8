/* SPDX-License-Identifier: Apache-2.0 */
/* Shared fixture and helpers of the Generic PLEG unit tests. */
#pragma once

#include <check.h>

#include "fake-runtime.h"

G_BEGIN_DECLS

#define NSEC_PER_SEC  G_GINT64_CONSTANT(1000000000)
#define NSEC_PER_USEC G_GINT64_CONSTANT(1000)
/* The fake clock's start: 2023-11-14T22:13:20Z. */
#define T0_NS (G_GINT64_CONSTANT(1700000000) * NSEC_PER_SEC)
/* Generous deadline for conditions that should hold almost at once (valgrind is slow). */
#define WAIT_USEC (10 * G_USEC_PER_SEC)

typedef struct {
    FakeRuntime *fake;
    PlegRuntime *runtime;
    FakeClock clock;
    PlegGeneric *pleg;
    PlegEventChannel *channel;
} Fixture;

/* @config: NULL for defaults; when @fake_clock, its clock is replaced by the fixture's FakeClock
 * (starting at T0_NS).  @capacity: the subscription's channel capacity, 0 for the default. */
Fixture *fixture_new_full(const PlegGenericConfig *config, guint capacity, gboolean fake_clock);
/* Default config, fake clock, default capacity. */
Fixture *fixture_new(void);
void fixture_free(Fixture *fx);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(Fixture, fixture_free)

/* A sandbox (READY) for @pod_uid called @sandbox_id, with containers "<...>" running. */
void fixture_add_pod(Fixture *fx, const char *pod_uid, const char *sandbox_id,
                     ...) G_GNUC_NULL_TERMINATED;

/* pleg_generic_relist(), asserting success. */
void relist(Fixture *fx);
/* pleg_generic_relist(), asserting failure. */
void relist_fails(Fixture *fx);

/* Pops every event waiting now. (element-type PlegPodLifecycleEvent) */
GPtrArray *drain(Fixture *fx);
/* Pops until @n events arrived or @timeout_usec passed; returns what arrived. */
GPtrArray *wait_events(Fixture *fx, guint n, gint64 timeout_usec);
/* Pops events until one for @pod_uid of @type about @container_id (NULL: any) arrives; events
 * popped meanwhile are appended to @others when not NULL.  NULL on timeout. */
PlegPodLifecycleEvent *wait_event_for(Fixture *fx, const char *pod_uid,
                                      PlegPodLifecycleEventType type, const char *container_id,
                                      gint64 timeout_usec, GPtrArray *others);

/* "ContainerStarted c1" ("PodSync" for a PodSync). */
char *event_str(const PlegPodLifecycleEvent *event);
/* Comma-separated event_str() of the events of @pod_uid (NULL: all events, then each is
 * prefixed with "<pod_uid> "), in order.  "" when none. */
char *events_str(GPtrArray *events, const char *pod_uid);
/* "<pod_uid> <event_str()>" of every event, comma-separated, sorted by pod and container id so
 * that only the order of events about the same container (Died before Removed) shows. */
char *sorted_events_str(GPtrArray *events);
/* Drains and returns sorted_events_str(). */
char *drain_str(Fixture *fx);
/* Drains and asserts that sorted_events_str() is @expected ("" for none).  A macro, so that a
 * failure names the test's own line. */
#define assert_drained(fx, expected)                                                               \
    do {                                                                                           \
        g_autofree char *drained_ = drain_str(fx);                                                 \
        ck_assert_str_eq(drained_, (expected));                                                    \
    } while (0)
/* Number of events in @events for @pod_uid (NULL: any) of @type about @container_id (NULL: any). */
guint count_events(GPtrArray *events, const char *pod_uid, PlegPodLifecycleEventType type,
                   const char *container_id);

/* The value of a metric series; label values NULL-terminated.  Asserts the metric exists. */
double metric_value(Fixture *fx, const char *name, ...) G_GNUC_NULL_TERMINATED;
/* A histogram's observation count. */
guint64 metric_count(Fixture *fx, const char *name, ...) G_GNUC_NULL_TERMINATED;

/* Polls @cond every millisecond until it holds or @timeout_usec passes. */
gboolean wait_until(gboolean (*cond)(gpointer data), gpointer data, gint64 timeout_usec);

/* The cached status of @pod_uid, NULL when there is no entry or it holds an error. */
PlegPodStatus *cache_status(Fixture *fx, const char *pod_uid);
/* State of @container_id in the cached status, -1 when it is not there. */
int cache_container_state(Fixture *fx, const char *pod_uid, const char *container_id);

/* kubelet_pleg_relist_requests_total{relist_source=@source, outcome=@outcome}. */
double requests(Fixture *fx, const char *source, const char *outcome);
/* Polls until requests() reaches @value; FALSE after WAIT_USEC. */
gboolean requests_reach(Fixture *fx, const char *source, const char *outcome, double value);
/* For wait_until(): kubelet_pleg_pod_relist_duration_seconds has @count observations. */
typedef struct {
    Fixture *fx;
    guint64 count;
} CountCond;
gboolean pod_relists_reach(gpointer data);
/* pleg_generic_relist() on a thread of its own: start, then join, which asserts success. */
typedef struct {
    PlegGeneric *pleg;
    gboolean ok;
    GError *error;
    GThread *thread;
} RelistThread;
void relist_thread_start(RelistThread *rt, PlegGeneric *pleg);
void relist_thread_join(RelistThread *rt);
/* Runs @suite with Check and returns an exit status. */
int run_suite(Suite *suite);

G_END_DECLS
