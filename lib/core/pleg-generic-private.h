/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Generic PLEG's shared state, and the internal functions its files call across.
 * G_GNUC_INTERNAL keeps them out of libpleg's ABI.  The files, one idea each:
 *
 *   pleg-generic.c        the object: new/free, config, start/stop, subscribers, health,
 *                         relist state, accessors, metrics registration
 *   pleg-snapshot.c       pod snapshots, and the lookups transitions need
 *   pleg-listing.c        a relist's listing, grouped into the records' snapshots
 *   pleg-transitions.c    the transition table: two snapshots in, transitions out (pure)
 *   pleg-delivery.c       events built and pushed; what a full channel missed, redelivered
 *   pleg-inspect.c        inspection: a relist's status calls under one bound, pod by pod
 *   pleg-status-pool.c    those calls asked on a GLib pool, for a runtime that only blocks
 *   pleg-reconcile.c      reconcile of one pod, global and targeted relists
 *   pleg-dispatcher.c     the RequestRelist queue, pod suspension, the dispatcher thread
 *   pleg-relist-notice.c  the relist callback, called back in the host's GMainContext
 *
 * Lock order (outermost first): relist_lock -> state_lock -> queue_lock -> (channel, cache,
 * metrics locks).  relist_lock serialises relists and is held across runtime calls; state_lock
 * guards pod records, subscribers and health and is never held across a runtime call;
 * queue_lock guards the RequestRelist queue, pod suspensions and the dispatcher's wake-ups.
 * The relist callback's notices have a lock of their own, taken with no lock of the PLEG held.
 * doc/design.md has the whole picture.
 */
#pragma once

#include <pleg/pleg-util.h>

#include "pleg-private.h"

/* kubelet's PLEG view of a container or sandbox. */
typedef enum {
    STATE_RUNNING,
    STATE_EXITED,
    STATE_UNKNOWN,
    STATE_NON_EXISTENT,
} PlegState;

/* What an event names (PlegEventDetails), as the listing gave it: CRI metadata, which does not
 * change for an id, so a snapshot kept for an unchanged pod keeps it too. */
typedef struct {
    const char *name;       /* container: its metadata's name; sandbox: the pod's name */
    const char *namespace_; /* sandboxes only: the pod's namespace */
    const char *image;      /* containers only */
    guint32 attempt;
} PodEntryNames;

/* A container or sandbox of a snapshot.  Its strings live in the entry's own allocation
 * (pod_entry_new()): one block an entry, as a node holds thousands. */
typedef struct {
    const char *id;
    const char *sandbox_id; /* containers only */
    PlegState state;
    gint64 created_at_ns;
    gboolean is_sandbox;
    PodEntryNames names;
} PodEntry;

/* One pod as seen by one listing: kubelet's kubecontainer.Pod.  Immutable once built. */
typedef struct {
    char *uid;
    GPtrArray *containers; /* PodEntry */
    GPtrArray *sandboxes;  /* PodEntry, newest first */
} PodSnapshot;

typedef struct {
    PodSnapshot *old;     /* last published */
    PodSnapshot *current; /* last listed */
    gboolean reinspect;
    gboolean listed;   /* pleg-listing.c's mark: in the listing being published */
    gboolean restored; /* given by pleg_generic_restore_record(), not inspected since */
    gboolean initial;  /* first listed by a PLEG without records, not published since */
} PodRecord;

/* pleg-listing.c: a global relist's listing, kept across relists. */
typedef struct _PlegListing PlegListing;

typedef struct {
    int count;
    gboolean pending;
    PlegRelistSource pending_source;
} Suspension;

typedef struct {
    char *pod_uid;
    PlegRelistSource source;
    gint64 enqueued_usec; /* monotonic */
} RelistRequest;

/* The requests of one pod that the dispatcher took while a targeted pass ran, for the next
 * pass: served by one relist of the pod, as from the first source that asked. */
typedef struct {
    char *pod_uid;
    PlegRelistSource source;
    gint64 newest_usec;                     /* monotonic enqueue time of the last request */
    guint n_requests[PLEG_RELIST_SOURCE_N]; /* by source, for the covered count */
} NextPassPod;

/* What one subscriber has not received yet of one container: the undelivered events in the
 * order they were generated.  A container id passes through few states (created, running,
 * exited, gone), so the queue stays short; past MISSED_MAX events (a runtime flapping a container
 * between unknown and running while the subscriber is stalled) it collapses to kubelet's
 * transition from what the subscriber last saw to the newest state.
 *
 * A subscriber is owed events of at most MISSED_CONTAINERS_MAX containers (containers gone
 * included, until their ContainerRemoved is delivered): more than a node runs at once, so only
 * churn during a long stall reaches it.  Then everything the subscriber is owed collapses into
 * one PodSync a pod (an entry with no id), and later events of such a pod fold into it: the
 * subscriber rereads the pod's state from the cache, which holds all that happened.  A pod that
 * is gone and of which the subscriber was never told anything that still stands gets none.  So
 * the table holds at most MISSED_CONTAINERS_MAX container entries, and one PodSync for each pod
 * the PLEG knew at the last overflow or the subscriber believes exists. */
#define MISSED_MAX 16
#define MISSED_CONTAINERS_MAX 4096

typedef struct {
    PlegPodLifecycleEvent *event;
    PlegState after;
} MissedEvent;

typedef struct {
    char *pod_uid;
    char *id;         /* NULL: the pod's PodSync, in place of its containers' events */
    PlegState seen;   /* what the subscriber last received */
    PlegState latest; /* the state after the newest queued event */
    gboolean told;    /* a PodSync's: the subscriber believes the pod exists */
    GArray *events;   /* MissedEvent, oldest first */
} Missed;

/* pleg-relist-notice.c: what a relist callback shares with its queued notices. */
typedef struct _RelistNotices RelistNotices;

typedef struct {
    PlegEventChannel *channel;
    GHashTable *missed;  /* set of Missed, by pod UID and id (NULL for a PodSync) */
    guint n_containers;  /* entries in missed with an id */
} Subscriber;

/* One generated event with the states around it, so a drop can be redelivered later. */
typedef struct {
    PlegPodLifecycleEventType type;
    const char *id;
    PlegState before;
    PlegState after;
} Transition;

/* One pod of a relist, from its record's comparison to its publication. */
typedef struct {
    const char *pod_uid;
    PlegRelistSource source;
    GArray *transitions;  /* Transition, from the record's old and current snapshots */
    PodSnapshot *current; /* what to inspect; NULL when the pod is gone */
    PodSnapshot *old;     /* keeps the transitions' ids alive */
    gboolean reinspect;
    gboolean restored; /* the record's: inspect even without transitions, fill the cache */
    gboolean inspect; /* the runtime is to be asked for the pod's status (pleg-inspect.c) */
    gboolean fresh;   /* the result: see reconcile_publish() */
} PodWork;

/* The outcomes of a RequestRelist, the values of kubelet_pleg_relist_requests_total's label. */
typedef enum {
    RELIST_OUTCOME_QUEUED,
    RELIST_OUTCOME_COALESCED,
    RELIST_OUTCOME_COVERED,
    RELIST_OUTCOME_DROPPED,
    RELIST_OUTCOME_N,
} RelistOutcome;

/* The reasons of pleg_relist_failures_total: "other", then one per PLEG_CRI_ERROR code, 1 to
 * 16 (pleg-generic.c checks). */
#define RELIST_FAILURE_REASON_N 17

struct _PlegGeneric {
    PlegRuntime *runtime;
    PlegGenericConfig config;
    PlegMetricsRegistry *metrics;
    PlegPodCache *cache;

    struct {
        PlegMetric *relist_duration;
        PlegMetric *relist_interval;
        PlegMetric *pod_relist_duration;
        PlegMetric *discard_events;
        PlegMetric *last_seen;
        PlegMetric *running_pods;
        PlegMetric *running_containers;
        PlegMetric *events_total;
        PlegMetric *relist_requests;
        PlegMetric *exit_detection;
        PlegMetric *relist_failures;
    } m;
    /* The series that relists and deliveries update, resolved once by register_metrics(). */
    struct {
        PlegMetricSeries *relist_duration;
        PlegMetricSeries *relist_interval;
        PlegMetricSeries *pod_relist_duration;
        PlegMetricSeries *discard_events;
        PlegMetricSeries *events_total[PLEG_RELIST_SOURCE_N];
        PlegMetricSeries *exit_detection[PLEG_RELIST_SOURCE_N];
        PlegMetricSeries *relist_requests[PLEG_RELIST_SOURCE_N][RELIST_OUTCOME_N];
        /* By reason: [0] "other", else the PLEG_CRI_ERROR code's. */
        PlegMetricSeries *relist_failures[RELIST_FAILURE_REASON_N];
    } series;

    GMutex relist_lock;
    PlegListing *listing;    /* relist_global()'s, under relist_lock, as are: */
    GByteArray *relist_uids; /* the UIDs of its pods */
    GArray *relist_works;    /* PodWork (pleg-reconcile.c), one a pod */
    GCancellable *cancellable;

    GMutex state_lock;
    GHashTable *records; /* pod uid -> PodRecord */
    GPtrArray *subscribers;
    gint64 last_relist_ns;
    gint64 last_relist_mono_usec;  /* the same instant on the monotonic clock */
    GError *last_relist_error;     /* the last global relist's failure, NULL after a success */
    gint64 last_relist_attempt_ns; /* start of the last global relist, whatever its outcome */
    gboolean relist_started;       /* a global relist has begun */
    /* New records are initial (PodRecord.initial): no records were restored and no global
     * relist has succeeded yet.  Under state_lock. */
    gboolean records_initial;
    gboolean relisted; /* a relist, global or targeted, has published a listing */
    gboolean relist_finished;      /* a global relist has ended, successful or not */
    /* The dispatcher's progress, for liveness (pleg_generic_get_relist_attempt_age()): it runs
     * (between pleg_generic_start() and pleg_generic_stop()), and when it last finished a
     * global relist, whatever the outcome, or started, on both clocks.  Under state_lock. */
    gboolean dispatching;
    gint64 attempt_end_ns;
    gint64 attempt_end_mono_usec;

    GMutex queue_lock;
    GCond queue_cond;
    GQueue queue;
    GHashTable *suspensions; /* pod uid -> Suspension */
    gboolean shutdown;
    gint64 last_global_start_usec; /* monotonic start of the last successful global relist */
    GThread *thread;
    /* Test hook (PLEG_TEST_DISPATCHER_STALL_AFTER=N, read by pleg_generic_new()): after its
     * N-th global relist the dispatcher waits for pleg_generic_stop() and does nothing else, a
     * dispatcher really stuck for the liveness tests.  0: never. */
    guint test_stall_after;
    /* While the dispatcher runs a targeted pass, the requests that arrive are taken for the next
     * pass, one entry per pod, instead of waiting in the queue: see pleg-dispatcher.c. */
    gboolean pass_running;
    GHashTable *next_pass;  /* pod uid -> NextPassPod; the keys are the entries' pod_uid */
    GQueue next_pass_order; /* NextPassPod, first asked first */
    gint known_pods;        /* records after the last relist (atomic): the next pass's bound */

    /* The relist callback and its notices (pleg-relist-notice.c), NULL when there is none:
     * replaced only while the dispatcher does not run, read by the dispatcher. */
    RelistNotices *notices;
};

/* pleg-generic.c */
/* Unix ns now, from the configured clock or the real-time clock. */
G_GNUC_INTERNAL gint64 now_ns(PlegGeneric *pleg);
G_GNUC_INTERNAL gint64 elapsed_usec_since(PlegGeneric *pleg, gint64 wall_ns, gint64 mono_usec);
/* The kubelet_pleg_relist_requests_total series of @source and @outcome ("queued", "coalesced",
 * "covered" or "dropped"); NULL for any other.  Callable with any lock held. */
G_GNUC_INTERNAL PlegMetricSeries *relist_request_series(PlegGeneric *pleg, PlegRelistSource source,
                                                        const char *outcome);
/* Counts a global relist that failed with @error in pleg_relist_failures_total{reason}. */
G_GNUC_INTERNAL void count_relist_failure(PlegGeneric *pleg, const GError *error);
/* The series of @source in one of pleg->series' per-source arrays; NULL out of range. */
static inline PlegMetricSeries *
source_series(PlegMetricSeries *const *per_source, PlegRelistSource source)
{
    return (guint)source < PLEG_RELIST_SOURCE_N ? per_source[source] : NULL;
}

/* pleg-snapshot.c */
/* kubelet's PLEG state of a listed container: created and unknown are unknown. */
G_GNUC_INTERNAL PlegState pleg_state_from_container(PlegContainerState state);
/* A copy of @fields, whose strings are borrowed, in one block that g_free() frees. */
G_GNUC_INTERNAL PodEntry *pod_entry_new(const PodEntry *fields);
G_GNUC_INTERNAL PodSnapshot *pod_snapshot_new(const char *uid);
G_GNUC_INTERNAL PodSnapshot *pod_snapshot_ref(PodSnapshot *pod);
G_GNUC_INTERNAL void pod_snapshot_unref(PodSnapshot *pod);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PodSnapshot, pod_snapshot_unref)
/* The entry that stands for @id in @pod: its first container, else its first sandbox, as
 * kubelet's getContainerState() finds it.  NULL when @pod is NULL or does not hold @id. */
G_GNUC_INTERNAL const PodEntry *pod_snapshot_find(const PodSnapshot *pod, const char *id);
/* The state of pod_snapshot_find()'s entry, %STATE_NON_EXISTENT when there is none. */
G_GNUC_INTERNAL PlegState pod_snapshot_state(const PodSnapshot *pod, const char *id);

/* pleg-listing.c: under relist_lock. */
G_GNUC_INTERNAL PlegListing *pleg_listing_new(void);
G_GNUC_INTERNAL void pleg_listing_free(PlegListing *listing);
/* The records' GDestroyNotify: the listing is what makes them (pleg_listing_publish()). */
G_GNUC_INTERNAL void record_free(PodRecord *rec);
/* Empties @listing for the next relist, keeping its memory. */
G_GNUC_INTERNAL void pleg_listing_reset(PlegListing *listing);
/* Copies what grouping needs of an item; the item may be freed or reused once this returns. */
G_GNUC_INTERNAL void pleg_listing_add_sandbox(PlegListing *listing, const PlegPodSandbox *sandbox);
G_GNUC_INTERNAL void pleg_listing_add_container(PlegListing *listing,
                                                const PlegContainer *container);
/* Adds the items handed by pleg_runtime_visit_listing(); its data is the PlegListing. */
G_GNUC_INTERNAL extern const PlegListingVisitor pleg_listing_visitor;
/* The containers listed in each PlegContainerState, ignored ones included. */
G_GNUC_INTERNAL const guint *pleg_listing_get_container_states(PlegListing *listing);
/* Groups the listing into pods and sets the current snapshot of every record @only names (of
 * every record when @only is NULL) to its pod, NULL for a pod not listed, creating records for
 * new pods (initial when @initial); pods listed that @only does not name are left alone.  A
 * record whose current snapshot already holds what was listed keeps it.  Call with state_lock
 * held.  Returns: the pods published with a ready sandbox. */
G_GNUC_INTERNAL guint pleg_listing_publish(PlegListing *listing, GHashTable *records,
                                           GHashTable *only, gboolean initial);

/* pleg-transitions.c: pure, callable with no lock. */
G_GNUC_INTERNAL void add_transitions(GArray *out, const char *id, PlegState before,
                                     PlegState after);
/* Returns: (transfer full) (element-type Transition): what @current holds (containers, then
 * sandboxes), then what vanished from @old (likewise), each id once, in the state of its
 * pod_snapshot_find() entry; the ids point into the snapshots. */
G_GNUC_INTERNAL GArray *compute_transitions(const PodSnapshot *old, const PodSnapshot *current);

/* Sets @details to what @current, else @previous, names of @id (NULL: of the pod alone): the
 * pod's names from its newest sandbox that has them, the entry's own names.  Either snapshot
 * may be NULL. */
G_GNUC_INTERNAL void pod_snapshot_fill_details(PlegEventDetails *details, const char *id,
                                               const PodSnapshot *current,
                                               const PodSnapshot *previous);

/* pleg-delivery.c: called with state_lock held.  @current and @previous are the pod's
 * snapshots the transitions came from, for the events' names; @initial marks the events
 * (PlegEventDetails.initial). */
G_GNUC_INTERNAL void deliver(PlegGeneric *pleg, const char *pod_uid, GArray *transitions,
                             PlegRelistSource source, PlegPodStatus *status,
                             const PodSnapshot *current, const PodSnapshot *previous,
                             gboolean initial);
G_GNUC_INTERNAL void redeliver_missed(PlegGeneric *pleg, const char *pod_uid);
G_GNUC_INTERNAL Subscriber *subscriber_new(guint capacity);
G_GNUC_INTERNAL void subscriber_free(Subscriber *sub);
/* Tests only: how many entries (containers, and pods owed a PodSync) the missed table of
 * @channel's subscriber holds; 0 for a channel of no subscriber.  Takes state_lock. */
G_GNUC_INTERNAL guint subscriber_missed_entries(PlegGeneric *pleg, PlegEventChannel *channel);

/* pleg-inspect.c: called once for each pod inspected, with its status or the failure that
 * stopped its inspection (one of them set, both borrowed). */
typedef void (*PodInspectedFunc)(PodWork *work, PlegPodStatus *status, const GError *error,
                                 gpointer data);
/* Inspects the pods of @works[0..n) whose inspect is set, their status calls in flight together
 * under max_status_calls_in_flight; calls @func on this thread as each pod's calls are answered.
 * Called with relist_lock held and no other lock. */
G_GNUC_INTERNAL void inspect_pods(PlegGeneric *pleg, PodWork *works, guint n, PodInspectedFunc func,
                                  gpointer data);

/* pleg-reconcile.c */
/* Takes relist_lock.  @ret_timestamp_ns: Unix ns at which the relist started. */
G_GNUC_INTERNAL gboolean relist_global(PlegGeneric *pleg, gint64 *ret_timestamp_ns, GError **error);
/* Targeted relists of @n pods at once (@pod_uids[i] asked by @sources[i], @n_requests[i] times,
 * or once when @n_requests is NULL; a pod may repeat): the distinct pods are listed and
 * inspected together, each published as from the first source that asked for it;
 * kubelet_pleg_pod_relist_duration_seconds gets one observation per request.  Takes
 * relist_lock.  Fails, for every pod, when the listing fails. */
G_GNUC_INTERNAL gboolean relist_pods(PlegGeneric *pleg, const char *const *pod_uids,
                                     const PlegRelistSource *sources, const guint *n_requests,
                                     guint n, GError **error);

/* pleg-dispatcher.c */
/* Take queue_lock: call with state_lock held or with no lock. */
G_GNUC_INTERNAL gboolean is_suspended(PlegGeneric *pleg, const char *pod_uid);
G_GNUC_INTERNAL gboolean defer_if_suspended(PlegGeneric *pleg, const char *pod_uid,
                                            PlegRelistSource source);
G_GNUC_INTERNAL void relist_request_free(RelistRequest *req);
/* Drops the queued requests and the next pass's pods.  Called with queue_lock held. */
G_GNUC_INTERNAL void clear_requests(PlegGeneric *pleg);
/* The dispatcher thread's GThreadFunc; @data is the PlegGeneric. */
G_GNUC_INTERNAL gpointer dispatcher_thread(gpointer data);

/* pleg-relist-notice.c: takes the notices' own lock (a leaf, above the GMainContext's); called by
 * the dispatcher with no lock of the PLEG held. */
G_GNUC_INTERNAL void notify_relist(PlegGeneric *pleg, const GError *error, gint64 timestamp_ns);
/* Tests only (tests/core/test-notice.c): when set, every relist notice calls it once GLib has
 * dispatched the notice, before it takes any lock.  Never set by the library itself. */
G_GNUC_INTERNAL extern void (*relist_notice_dispatch_hook)(void);
