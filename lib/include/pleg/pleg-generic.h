/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Generic PLEG: the only writer of pod state (KEP-3386, "Proposal").
 *
 * It relists every pod each period over the runtime interface, keeps pod records and the pod
 * cache, emits PodLifecycleEvents to subscribers and reports health.  RequestRelist queues a
 * targeted relist of one pod; one dispatcher thread serves shutdown, then a due global relist,
 * then one pod request (KEP-3386, "Design Details").
 */
#pragma once

#include <gio/gio.h>
#include <pleg/pleg-metrics.h>
#include <pleg/pleg-runtime.h>
#include <pleg/pleg-types.h>

G_BEGIN_DECLS

/* kubelet's constants (pkg/kubelet/pleg). */
#define PLEG_DEFAULT_RELIST_PERIOD_USEC (1 * G_USEC_PER_SEC)
#define PLEG_DEFAULT_RELIST_THRESHOLD_USEC (3 * 60 * G_USEC_PER_SEC)
#define PLEG_DEFAULT_EVENT_CHANNEL_CAPACITY 1000
#define PLEG_DEFAULT_RELIST_QUEUE_CAPACITY 200
/* Status calls (PodSandboxStatus, ContainerStatus) a relist keeps in flight at most. */
#define PLEG_DEFAULT_MAX_STATUS_CALLS_IN_FLIGHT 64

/**
 * PlegPodLifecycleEventType:
 * @PLEG_CONTAINER_STARTED: a container (or sandbox) is now running.
 * @PLEG_CONTAINER_DIED: a container (or sandbox) exited, or vanished without being seen exited.
 * @PLEG_CONTAINER_REMOVED: a container (or sandbox) no longer exists.
 * @PLEG_POD_SYNC: a pod whose inspection failed earlier was inspected again with no change; or,
 *   for a subscriber owed events of more than 4096 containers (a long stall under churn), what
 *   stands for everything it missed of the pod: its state is to be read again from the cache.
 * @PLEG_CONTAINER_CHANGED: a container moved to the unknown state; generated, never delivered.
 *
 * kubelet's PodLifecycleEventType names, returned by pleg_pod_lifecycle_event_type_to_string().
 */
typedef enum {
    PLEG_CONTAINER_STARTED,
    PLEG_CONTAINER_DIED,
    PLEG_CONTAINER_REMOVED,
    PLEG_POD_SYNC,
    PLEG_CONTAINER_CHANGED,
} PlegPodLifecycleEventType;

/**
 * pleg_pod_lifecycle_event_type_to_string:
 * @type: an event type.
 *
 * Returns: (transfer none): kubelet's name of @type ("ContainerStarted", "ContainerDied",
 *   "ContainerRemoved", "PodSync", "ContainerChanged"), "Unknown" for a value out of range.
 *
 * Thread safety: any thread.
 */
const char *pleg_pod_lifecycle_event_type_to_string(PlegPodLifecycleEventType type);

/**
 * PlegRelistSource:
 *
 * Why a relist ran; the `relist_source` label of kubelet_pleg_events_total (KEP-3386).
 */
typedef enum {
    PLEG_RELIST_SOURCE_GLOBAL,
    PLEG_RELIST_SOURCE_EVENTED_PLEG,
    PLEG_RELIST_SOURCE_POST_SYNC,
    PLEG_RELIST_SOURCE_POST_ALLOCATION,
    PLEG_RELIST_SOURCE_N,
} PlegRelistSource;

/**
 * pleg_relist_source_to_string:
 * @source: a relist source.
 *
 * Returns: (transfer none): "global", "evented_pleg", "post_sync" or "post_allocation";
 *   "unknown" for a value out of range.
 *
 * Thread safety: any thread.
 */
const char *pleg_relist_source_to_string(PlegRelistSource source);

/**
 * PlegEventDetails:
 * @pod_namespace: (nullable): the pod's namespace: CRI `PodSandboxMetadata.namespace` of the
 *   newest sandbox the PLEG listed for the pod; %NULL when it listed none.
 * @pod_name: (nullable): the pod's name, from the same `PodSandboxMetadata.name`.
 * @container_name: (nullable): CRI `ContainerMetadata.name` of the container; %NULL for a
 *   sandbox and for %PLEG_POD_SYNC.
 * @attempt: `ContainerMetadata.attempt` of the container, or `PodSandboxMetadata.attempt` of
 *   the sandbox (1 for a pod's second sandbox); 0 for %PLEG_POD_SYNC.
 * @image: (nullable): the container's image as listed (CRI `Container.image.image`); %NULL for a
 *   sandbox.
 * @sandbox: whether the event's container id is one of the pod's sandboxes (CRI
 *   `PodSandbox.id`), not a container.
 * @started_at_ns: for %PLEG_CONTAINER_STARTED of a container, CRI `ContainerStatus.started_at`
 *   from the pod cache, Unix time in nanoseconds; 0 when the runtime gave none, and for every
 *   other event.
 * @initial: the event reports what the PLEG found when it first listed the pod, not a change it
 *   saw happen: the first relist of a PLEG that was given no records (pleg_generic_restore())
 *   reports every container it finds this way.  Read it with
 *   pleg_pod_lifecycle_event_is_initial() (since 0.3).
 *
 * The names of what a #PlegPodLifecycleEvent is about, taken from the listings of the relist
 * that found the change (ListPodSandbox, ListContainers): no CRI call is made for them.  An
 * event of a container the runtime no longer lists (every %PLEG_CONTAINER_REMOVED) carries the
 * names of the PLEG's last record of it.  Strings may be %NULL, or empty, when the runtime gave
 * none.  Owned by the event.
 *
 * Since: 0.2
 */
typedef struct {
    char *pod_namespace;
    char *pod_name;
    char *container_name;
    guint32 attempt;
    char *image;
    gboolean sandbox;
    gint64 started_at_ns;
    gboolean initial;
} PlegEventDetails;

/**
 * PlegPodLifecycleEvent:
 * @pod_uid: the pod's UID.
 * @type: what happened.
 * @container_id: the container (or sandbox) id; %NULL for %PLEG_POD_SYNC.
 * @relist_source: which relist found the change.
 * @time_ns: Unix time in nanoseconds at which the event was generated.
 * @has_exit: for %PLEG_CONTAINER_DIED, whether the pod cache knew the container's exit;
 *   then @exit_code, @reason and @finished_at_ns are set from its CRI ContainerStatus.
 * @details: who the event is about, by name; read it with
 *   pleg_pod_lifecycle_event_get_details() (since 0.2).
 *
 * Immutable and reference counted: subscribers may keep it on any thread.  Only libpleg
 * allocates events, and a later version may append members: never embed one, copy one by value
 * or allocate one.
 *
 * @time_ns is when libpleg saw the change (the relist that found it), @finished_at_ns and
 * #PlegEventDetails.started_at_ns when the runtime says it happened: a container that died
 * while nothing relisted has a @finished_at_ns older than @time_ns by that long.
 */
typedef struct {
    char *pod_uid;
    PlegPodLifecycleEventType type;
    char *container_id;
    PlegRelistSource relist_source;
    gint64 time_ns;
    gboolean has_exit;
    gint32 exit_code;
    char *reason;
    gint64 finished_at_ns;
    PlegEventDetails details;
} PlegPodLifecycleEvent;

/**
 * pleg_pod_lifecycle_event_get_details:
 * @event: an event.
 *
 * Who @event is about, by name, and when the runtime says a start happened.  A program that
 * reads the details through this function, not the struct member, refuses to load against a
 * libpleg older than 0.2 (the symbol is in the LIBPLEG_0_2 version node) instead of reading past
 * the end of an older, shorter event.
 *
 * Returns: (transfer none): the details, owned by @event and valid as long as the caller holds
 *   a reference to it; never %NULL.
 *
 * Thread safety: any thread holding a reference to @event.
 *
 * Since: 0.2
 */
const PlegEventDetails *pleg_pod_lifecycle_event_get_details(const PlegPodLifecycleEvent *event);

/**
 * pleg_pod_lifecycle_event_is_initial:
 * @event: an event.
 *
 * Whether @event reports the state the PLEG found when it first listed the pod rather than a
 * change (#PlegEventDetails.initial): a container that has been running for a day is reported
 * by the first relist of a fresh PLEG as %PLEG_CONTAINER_STARTED, an old exit as
 * %PLEG_CONTAINER_DIED, both initial.  A PLEG given the records of an earlier one
 * (pleg_generic_restore()) reports only what changed since, and nothing as initial.  Events of
 * a pod are initial until the PLEG has published the pod once; a PodSync never is.
 *
 * Returns: %TRUE for an initial event.
 *
 * Thread safety: any thread holding a reference to @event.
 *
 * Since: 0.3
 */
gboolean pleg_pod_lifecycle_event_is_initial(const PlegPodLifecycleEvent *event);

/**
 * pleg_pod_lifecycle_event_ref:
 * @event: an event.
 *
 * Returns: (transfer full): @event, with one more reference.
 *
 * Thread safety: any thread; the count is atomic.
 */
PlegPodLifecycleEvent *pleg_pod_lifecycle_event_ref(PlegPodLifecycleEvent *event);

/**
 * pleg_pod_lifecycle_event_unref:
 * @event: (nullable) (transfer full): an event.
 *
 * Drops one reference, freeing the event with the last one.  NULL-safe.
 *
 * Thread safety: any thread; the count is atomic.
 */
void pleg_pod_lifecycle_event_unref(PlegPodLifecycleEvent *event);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegPodLifecycleEvent, pleg_pod_lifecycle_event_unref)

/**
 * PlegEventChannel:
 *
 * A subscriber's bounded channel of PodLifecycleEvents.  The PLEG never blocks on it: when it
 * is full the event is not delivered now, counted in kubelet_pleg_discard_events, and delivered
 * by a later relist that finds the transition again (libpleg goes beyond kubelet here: no
 * transition is lost, and none already delivered is repeated).
 */
typedef struct _PlegEventChannel PlegEventChannel;

/**
 * pleg_event_channel_pop:
 * @channel: the channel.
 * @timeout_usec: how long to wait: 0 does not wait, -1 waits until an event or close.
 *
 * Returns: (transfer full) (nullable): the oldest event, or %NULL on timeout or when the
 *   channel was closed (by pleg_generic_unsubscribe() or pleg_generic_free()) and is empty.
 *
 * Thread safety: any thread; one consumer at a time is expected.  A pop waiting when the
 * channel is unsubscribed returns %NULL; none may start after pleg_generic_unsubscribe().
 */
PlegPodLifecycleEvent *pleg_event_channel_pop(PlegEventChannel *channel, gint64 timeout_usec);

/**
 * pleg_event_channel_get_length:
 * @channel: the channel.
 *
 * Returns: the number of events waiting.
 *
 * Thread safety: any thread.
 */
guint pleg_event_channel_get_length(PlegEventChannel *channel);

/**
 * PlegEventFunc:
 * @event: (transfer none): the event.
 * @user_data: as given to pleg_event_channel_attach().
 *
 * Runs in the #GMainContext given to pleg_event_channel_attach(), on the thread iterating it;
 * never on a PLEG thread, and with no lock of the PLEG held.  It may call pleg_generic_stop()
 * and every function whose rule is "any thread", but not pleg_generic_unsubscribe() of its own
 * channel or pleg_generic_free().
 */
typedef void (*PlegEventFunc)(PlegPodLifecycleEvent *event, gpointer user_data);

/**
 * pleg_event_channel_attach:
 * @channel: the channel.
 * @context: (nullable): where @func runs; %NULL means the thread-default main context of the
 *   caller.
 * @func: called once per event, in order, in @context.
 *
 * Drains the channel into @func from a #GSource attached to @context.
 *
 * Returns: (transfer full): the source; destroy it to stop.  The channel must outlive it.
 *
 * Thread safety: any thread; at most one source per channel.  @func runs in @context; destroy
 * the source from @context's thread to know that @func is not running.
 */
GSource *pleg_event_channel_attach(PlegEventChannel *channel, GMainContext *context,
                                   PlegEventFunc func, gpointer user_data,
                                   GDestroyNotify destroy);

/**
 * PlegPodCache:
 *
 * kubelet's pod cache: for each pod the newest status or inspection error and when it was
 * written, plus a global timestamp, the start time of the last global relist whose results are
 * all in the cache.  Written only by the Generic PLEG; read from any thread.
 */
typedef struct _PlegPodCache PlegPodCache;

/**
 * pleg_pod_cache_get:
 * @cache: the cache.
 * @pod_uid: the pod.
 * @ret_status: (out) (transfer full) (optional) (nullable): the status, %NULL when the last
 *   inspection failed.
 * @ret_error: (out) (transfer full) (optional) (nullable): the inspection error, or %NULL.
 * @ret_modified_ns: (out) (optional): Unix ns when the entry was written.
 *
 * Returns: %TRUE when the cache has an entry for @pod_uid; outputs are untouched otherwise.
 *
 * Thread safety: any thread; the entry is read under the cache's lock, and a status is
 * immutable once cached.
 */
gboolean pleg_pod_cache_get(PlegPodCache *cache, const char *pod_uid, PlegPodStatus **ret_status,
                            GError **ret_error, gint64 *ret_modified_ns);

/**
 * pleg_pod_cache_get_global_timestamp:
 * @cache: the cache.
 *
 * Returns: Unix ns of the global timestamp, 0 before the first global relist.
 *
 * Thread safety: any thread.
 */
gint64 pleg_pod_cache_get_global_timestamp(PlegPodCache *cache);

/**
 * pleg_pod_cache_get_size:
 * @cache: the cache.
 *
 * Returns: number of pods with an entry.
 *
 * Thread safety: any thread.
 */
guint pleg_pod_cache_get_size(PlegPodCache *cache);

/**
 * pleg_pod_cache_list_pod_uids:
 * @cache: the cache.
 *
 * The pods with an entry (a status or an inspection error), for a host that shows what the
 * PLEG believes: read each with pleg_pod_cache_get(), which answers %FALSE for a pod removed
 * meanwhile.
 *
 * Returns: (transfer full) (array zero-terminated=1): the pods' UIDs, in no particular order;
 *   an empty list when the cache is empty.  Free with g_strfreev().
 *
 * Thread safety: any thread; the UIDs are copied under the cache's lock.
 *
 * Since: 0.3
 */
char **pleg_pod_cache_list_pod_uids(PlegPodCache *cache);

/**
 * pleg_pod_cache_get_pod_names:
 * @cache: the cache.
 * @pod_uid: the pod.
 * @ret_namespace: (out) (transfer full) (optional) (nullable): the pod's namespace, %NULL when
 *   the runtime gave none.
 * @ret_name: (out) (transfer full) (optional) (nullable): the pod's name, likewise.
 *
 * The pod's namespace and name (CRI `PodSandboxMetadata`, of its newest sandbox): those of its
 * status, or, when its last inspection failed and the cache holds only the error, those of the
 * global relist's listing that found it.  So a host can name, and filter by namespace, a pod
 * that the runtime lists but cannot inspect.
 *
 * Returns: %TRUE when the cache has an entry for @pod_uid; outputs are untouched otherwise.
 *
 * Thread safety: any thread; read under the cache's lock.
 *
 * Since: 0.3
 */
gboolean pleg_pod_cache_get_pod_names(PlegPodCache *cache, const char *pod_uid,
                                      char **ret_namespace, char **ret_name);

/**
 * PlegClockFunc:
 *
 * Returns the current Unix time in nanoseconds.  Tests inject a fake to drive health.
 *
 * Thread safety: called on every thread that uses the PLEG (the dispatcher, the reconcile
 * pool, callers of pleg_generic_relist() or pleg_generic_healthy()), several at once, and
 * with PLEG locks held: it must be thread-safe, must not block and must not call into libpleg.
 */
typedef gint64 (*PlegClockFunc)(gpointer user_data);

/**
 * PlegGenericConfig:
 * @relist_period_usec: time between the end of one global relist and the start of the next
 *   (kubelet: 1 s).
 * @relist_threshold_usec: PLEG health threshold (kubelet: 3 min).
 * @relist_queue_capacity: capacity of the RequestRelist queue (200).
 * @clock: (nullable): wall clock for timestamps (events, cache, last relist time); %NULL is
 *   the real clock.  When set it also measures health and relist intervals (tests drive health
 *   with it); otherwise those are measured on the monotonic clock, as kubelet does, so a step
 *   of the wall clock neither hides a stalled PLEG nor fails a healthy one.
 * @clock_data: passed to @clock.
 * @max_status_calls_in_flight: the most PodSandboxStatus and ContainerStatus calls that a
 *   relist has in flight at once, over all the pods it inspects (64; 0 means the default).  A
 *   global relist, or one pass over the queued targeted relists, inspects its pods together
 *   under this one bound; each pod is still published as one unit, and a pod whose call hangs
 *   to its deadline holds back no other.  It takes the place of one reserved slot, so the
 *   struct keeps its size.
 *
 * Initialise with pleg_generic_config_init() and change what you need.
 */
typedef struct {
    gint64 relist_period_usec;
    gint64 relist_threshold_usec;
    guint relist_queue_capacity;
    PlegClockFunc clock;
    gpointer clock_data;
    guint max_status_calls_in_flight;
    /*< private >*/
    gpointer reserved[7];
} PlegGenericConfig;

/**
 * pleg_generic_config_init:
 * @config: (out caller-allocates): the configuration to fill with kubelet's defaults.
 *
 * Thread safety: any thread.
 */
void pleg_generic_config_init(PlegGenericConfig *config);

typedef struct _PlegGeneric PlegGeneric;

/**
 * pleg_generic_new:
 * @runtime: (transfer none): the runtime to read; a reference is taken.
 * @config: (nullable): configuration, copied; %NULL means defaults.
 * @metrics: (nullable) (transfer none): registry in which kubelet's PLEG metrics are registered;
 *   a reference is taken.  %NULL creates a private registry.
 *
 * Creates the PLEG without starting it: pleg_generic_relist() and pleg_generic_relist_pod()
 * may be driven by hand (as tests do) or pleg_generic_start() runs the dispatcher.
 *
 * Returns: (transfer full): the PLEG.
 *
 * Thread safety: any thread.  The thread that creates the PLEG, or one that takes it over,
 * owns its lifecycle: pleg_generic_start(), pleg_generic_stop(),
 * pleg_generic_set_relist_callback() and pleg_generic_free() are called from one thread at a
 * time.
 */
PlegGeneric *pleg_generic_new(PlegRuntime *runtime, const PlegGenericConfig *config,
                              PlegMetricsRegistry *metrics);

/**
 * pleg_generic_free:
 *
 * Stops the dispatcher if running, closes every channel and frees the PLEG; waits for a relist
 * callback running in another thread to return (see pleg_generic_set_relist_callback()).
 * When it returns, the relist callback has been called for the last time: a notice that GLib
 * is dispatching in the callback context but that has not called it yet never will, and it
 * touches nothing of the freed PLEG.  NULL-safe.  Every #GSource from
 * pleg_event_channel_attach() on its channels must have been destroyed first.
 *
 * Thread safety: the lifecycle thread (see pleg_generic_new()), when no other thread calls
 * into @pleg any more (the thread iterating the relist callback's context may go on doing so,
 * and may be in the callback); not from the PLEG's own relist callback or an event callback,
 * nor from a #PlegRuntime operation or #PlegClockFunc.
 */
void pleg_generic_free(PlegGeneric *pleg);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegGeneric, pleg_generic_free)

/**
 * pleg_generic_restore:
 * @pleg: a PLEG that has not started and has not relisted.
 * @error: %G_IO_ERROR_BUSY when @pleg has started or relisted.
 *
 * Makes @pleg resume from records saved by an earlier PLEG instead of starting from nothing:
 * its first relist reports only what changed against the records given with
 * pleg_generic_restore_record() (none: nothing existed), and no event is initial
 * (pleg_pod_lifecycle_event_is_initial()).  A container that died while nothing watched is
 * reported as %PLEG_CONTAINER_DIED with its exit from the runtime, one that was removed as
 * %PLEG_CONTAINER_REMOVED, one created meanwhile as it is found; one that is as recorded gives
 * no event.  Every restored pod is still inspected by the first relist that lists it, which
 * fills the pod cache, but gives a PodSync only when its inspection fails and is retried.
 *
 * This is how a process that keeps the events it published (plegd's --state-dir) avoids
 * reporting the whole node again after a restart; what a #PlegPodLifecycleEvent leaves behind
 * is what pleg_generic_restore_record() takes.  Restoring is not a way to learn of containers:
 * a restored container the runtime does not list is reported removed.
 *
 * Returns: %FALSE with @error set when it is too late.
 *
 * Thread safety: the lifecycle thread (see pleg_generic_new()), before pleg_generic_start().
 *
 * Since: 0.3
 */
gboolean pleg_generic_restore(PlegGeneric *pleg, GError **error);

/**
 * pleg_generic_restore_record:
 * @pleg: a PLEG that has not started and has not relisted.
 * @pod_uid: the pod's UID (#PlegPodLifecycleEvent.pod_uid).
 * @id: the container or sandbox id (#PlegPodLifecycleEvent.container_id).
 * @sandbox: whether @id is a pod sandbox (#PlegEventDetails.sandbox).
 * @state: what the last event of @id said: %PLEG_CONTAINER_STATE_RUNNING after
 *   %PLEG_CONTAINER_STARTED, %PLEG_CONTAINER_STATE_EXITED after %PLEG_CONTAINER_DIED (for a
 *   sandbox: ready, not ready).  An id whose last event was %PLEG_CONTAINER_REMOVED is not
 *   restored.
 * @names: (nullable): the names of @id's last event (pleg_pod_lifecycle_event_get_details());
 *   only @pod_namespace, @pod_name, @container_name, @attempt and @image are read, and copied.
 * @error: %G_IO_ERROR_BUSY as for pleg_generic_restore(); %G_IO_ERROR_INVALID_ARGUMENT for an
 *   empty @pod_uid or @id, or a @state other than running or exited.
 *
 * Adds one container or sandbox to @pleg's records, as pleg_generic_restore() describes (and
 * calls it).  Events later carry @names for @id until the runtime lists it with its own.  The
 * pod's sandboxes are kept in the order they are restored, newest first: a pod is named by its
 * first restored sandbox that has names.  Restoring an id again replaces it.
 *
 * Returns: %FALSE with @error set, @pleg unchanged.
 *
 * Thread safety: the lifecycle thread (see pleg_generic_new()), before pleg_generic_start().
 *
 * Since: 0.3
 */
gboolean pleg_generic_restore_record(PlegGeneric *pleg, const char *pod_uid, const char *id,
                                     gboolean sandbox, PlegContainerState state,
                                     const PlegEventDetails *names, GError **error);

/**
 * pleg_generic_start:
 *
 * Starts the dispatcher thread; the first global relist runs at once.  Idempotent.
 *
 * Thread safety: the lifecycle thread (see pleg_generic_new()), not concurrently with
 * pleg_generic_stop(), pleg_generic_set_relist_callback() or pleg_generic_free().
 */
void pleg_generic_start(PlegGeneric *pleg);

/**
 * pleg_generic_stop:
 *
 * Asks the dispatcher to shut down, cancels runtime calls in flight and joins the thread.
 * Idempotent; queued requests are dropped.  Must not be called from a subscriber callback
 * running on the dispatcher (there is none: callbacks run in the subscriber's context).
 *
 * Thread safety: the lifecycle thread (see pleg_generic_new()), not concurrently with
 * pleg_generic_start() or pleg_generic_free(); it may be the thread of a relist or event
 * callback, but not the dispatcher (a #PlegRuntime operation or #PlegClockFunc).  Blocks until
 * the runtime call in flight has returned from its cancellation.
 */
void pleg_generic_stop(PlegGeneric *pleg);

/**
 * pleg_generic_subscribe:
 * @capacity: channel capacity; 0 selects %PLEG_DEFAULT_EVENT_CHANNEL_CAPACITY.
 *
 * Subscribes to PodLifecycleEvents.  Events generated from now on are delivered.
 *
 * Returns: (transfer none): the channel, owned by the PLEG until pleg_generic_unsubscribe().
 *
 * Thread safety: any thread, including relist and event callbacks; waits for a pod being
 * published to finish, never for a runtime call.
 */
PlegEventChannel *pleg_generic_subscribe(PlegGeneric *pleg, guint capacity);

/**
 * pleg_generic_unsubscribe:
 *
 * Closes @channel, wakes a waiting pleg_event_channel_pop() and frees the channel.  Any
 * #GSource from pleg_event_channel_attach() must be destroyed first.
 *
 * Thread safety: any thread, once no thread will start a pop on @channel or read its source;
 * not from an event callback of @channel itself.
 */
void pleg_generic_unsubscribe(PlegGeneric *pleg, PlegEventChannel *channel);

/**
 * pleg_generic_relist:
 *
 * Runs one global relist on the calling thread (kubelet's Relist()).  Serialised with the
 * dispatcher.  Returns: %FALSE with @error when listing failed; the last relist time is then
 * not advanced.
 *
 * Thread safety: any thread; it blocks on runtime calls (and on a relist in progress), so not
 * from a main context that must stay responsive, and not from a #PlegRuntime operation or
 * #PlegClockFunc (the relist lock is not recursive).
 */
gboolean pleg_generic_relist(PlegGeneric *pleg, GError **error);

/**
 * pleg_generic_relist_pod:
 *
 * Runs one targeted relist of @pod_uid on the calling thread, as the dispatcher does for a
 * queued request.  The cache's global timestamp is untouched.  A suspended pod is not
 * published; the request is kept pending instead.
 *
 * Thread safety: as pleg_generic_relist().
 */
gboolean pleg_generic_relist_pod(PlegGeneric *pleg, const char *pod_uid, PlegRelistSource source,
                                 GError **error);

/**
 * PlegRelistRequestResult:
 * @PLEG_RELIST_REQUEST_QUEUED: queued for the dispatcher.
 * @PLEG_RELIST_REQUEST_COALESCED: the pod is suspended; merged into its one pending relist.
 * @PLEG_RELIST_REQUEST_DROPPED: the queue was full (or the PLEG is stopped); the next global
 *   relist covers it.
 *
 * Requests that are queued but then found covered by a newer global relist are counted as
 * `covered` in kubelet_pleg_relist_requests_total when the dispatcher reaches them.
 */
typedef enum {
    PLEG_RELIST_REQUEST_QUEUED,
    PLEG_RELIST_REQUEST_COALESCED,
    PLEG_RELIST_REQUEST_DROPPED,
} PlegRelistRequestResult;

/**
 * pleg_relist_request_result_to_string:
 * @result: a result of pleg_generic_request_relist().
 *
 * Returns: (transfer none): "queued", "coalesced" or "dropped", the `outcome` label values of
 *   kubelet_pleg_relist_requests_total; "unknown" for a value out of range.
 *
 * Thread safety: any thread.
 */
const char *pleg_relist_request_result_to_string(PlegRelistRequestResult result);

/**
 * pleg_generic_request_relist:
 * @pod_uid: the pod to relist.
 * @source: who asks; %PLEG_RELIST_SOURCE_GLOBAL is not a valid request source.
 *
 * RequestRelist (KEP-3386): queue a targeted relist.
 *
 * Thread safety: any thread, including relist and event callbacks and #PlegRuntime
 * operations; takes the queue lock briefly and never blocks on runtime calls.
 */
PlegRelistRequestResult pleg_generic_request_relist(PlegGeneric *pleg, const char *pod_uid,
                                                    PlegRelistSource source);

/**
 * pleg_generic_suspend_pod:
 *
 * Brackets a pod's sync (KEP-3386: relists of a pod are suspended while its SyncPod runs).
 * When it returns, no relist publishes state for @pod_uid until pleg_generic_resume_pod():
 * a relist already inspecting the pod discards its result.  Nests: each suspend needs one
 * resume.
 *
 * Thread safety: any thread, including relist and event callbacks; waits for a publication of
 * the pod in progress (never for a runtime call).  Never call it while holding a lock that a
 * subscriber callback takes.
 */
void pleg_generic_suspend_pod(PlegGeneric *pleg, const char *pod_uid);

/**
 * pleg_generic_resume_pod:
 *
 * Ends a suspension, also after an error or cancellation of the sync.  When requests arrived
 * (or a relist skipped the pod) meanwhile, exactly one relist is queued.
 *
 * Thread safety: any thread (not necessarily the one that suspended), including relist and
 * event callbacks; takes the queue lock briefly.
 */
void pleg_generic_resume_pod(PlegGeneric *pleg, const char *pod_uid);

/**
 * pleg_generic_healthy:
 * @ret_message: (out) (transfer full) (optional): kubelet's message when unhealthy:
 *   "pleg has yet to be successful" or "pleg was last seen active 3m1s ago; threshold is 3m0s".
 *
 * kubelet's PLEG health check; also sets kubelet_pleg_last_seen_seconds.
 *
 * Thread safety: any thread, including relist and event callbacks; never blocks on runtime
 * calls.
 */
gboolean pleg_generic_healthy(PlegGeneric *pleg, char **ret_message);

/**
 * pleg_generic_get_relist_attempt_age:
 * @pleg: the PLEG.
 *
 * How long ago the dispatcher last finished a global relist, whatever its outcome: listed,
 * refused by a runtime that is down, or failed at the runtime's call deadline; before the first
 * has finished, how long ago pleg_generic_start() started the dispatcher.  Relists driven by
 * hand (pleg_generic_relist()) do not count.  Measured as pleg_generic_healthy() measures: on
 * the monotonic clock, or on #PlegGenericConfig.clock when one is set.
 *
 * Unlike pleg_generic_healthy(), which fails while the runtime cannot be listed, this grows
 * only while the dispatcher itself makes no progress: a relist against a runtime that hangs
 * ends at the runtime's call deadlines.  A host bases its liveness on it (a restart can fix a
 * stuck dispatcher, not a runtime that is down) and its readiness on pleg_generic_healthy().
 *
 * Returns: microseconds, or -1 while the dispatcher does not run (before pleg_generic_start(),
 *   after pleg_generic_stop()).
 *
 * Thread safety: any thread, including relist and event callbacks; never blocks on runtime
 * calls.
 *
 * Since: 0.3
 */
gint64 pleg_generic_get_relist_attempt_age(PlegGeneric *pleg);

/**
 * PlegRelistState:
 * @first_relist_started: a global relist has begun (by the dispatcher or by hand).
 * @first_relist_finished: a global relist has ended, successfully or not.  Set after
 *   @first_relist_started, at the very end of the relist.
 * @first_relist_succeeded: a global relist has listed the runtime successfully; then
 *   @last_success_ns is not 0.  As in kubelet, a relist counts as successful once its listing
 *   succeeded, before its pods are reconciled: the pod cache's global timestamp
 *   (pleg_pod_cache_get_global_timestamp()) says when a relist's results are all in the cache.
 * @last_success_ns: Unix time in nanoseconds at which the last successful global relist
 *   started, 0 if none yet; the same as pleg_generic_get_last_relist_time() and the time
 *   pleg_generic_healthy() measures from.  Read from #PlegGenericConfig.clock when one is set,
 *   else from the real-time clock (CLOCK_REALTIME).
 * @last_attempt_ns: Unix ns, on the same clock, at which the last global relist started,
 *   whatever its outcome; 0 if none yet.
 * @last_error: (nullable) (transfer full): a copy of why the last global relist failed to list,
 *   %NULL when it succeeded or none ran.  A relist cut short by pleg_generic_stop() leaves its
 *   cancellation error here.
 *
 * What the Generic PLEG's global relists have achieved so far, for health and readiness
 * checks.  Filled by pleg_generic_get_relist_state(); freed with pleg_relist_state_clear(), or
 * declared `g_auto(PlegRelistState)`.
 */
typedef struct {
    gboolean first_relist_started;
    gboolean first_relist_finished;
    gboolean first_relist_succeeded;
    gint64 last_success_ns;
    gint64 last_attempt_ns;
    GError *last_error;
    /*< private >*/
    gpointer reserved[4];
} PlegRelistState;

/**
 * pleg_generic_get_relist_state:
 * @pleg: the PLEG.
 * @ret_state: (out caller-allocates): filled with a consistent snapshot of the relist state;
 *   release with pleg_relist_state_clear().
 *
 * Reads every field under one lock, so that they describe the same moment.
 *
 * Thread safety: any thread, including relist and event callbacks; never blocks on runtime
 * calls.
 */
void pleg_generic_get_relist_state(PlegGeneric *pleg, PlegRelistState *ret_state);

/**
 * pleg_relist_state_clear:
 * @state: (nullable): a state filled by pleg_generic_get_relist_state(), or zeroed.
 *
 * Frees @state's error and zeroes it; the struct itself is the caller's.  NULL-safe, and safe
 * to call twice.
 *
 * Thread safety: any thread, on a state no other thread uses.
 */
void pleg_relist_state_clear(PlegRelistState *state);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(PlegRelistState, pleg_relist_state_clear)

/**
 * PlegRelistFunc:
 * @error: (nullable): %NULL when the global relist succeeded, else why listing failed.
 * @relist_time_ns: Unix ns at which the relist started.
 * @user_data: as given to pleg_generic_set_relist_callback().
 *
 * Tells a host the outcome of each global relist, so that it can signal readiness, update its
 * status and say what went wrong (the library itself only logs at debug).
 *
 * Runs in the #GMainContext given to pleg_generic_set_relist_callback(), on the thread that
 * iterates it; never on the dispatcher, and with no lock of the PLEG held.  It may call
 * pleg_generic_stop() and every function whose rule is "any thread", but not
 * pleg_generic_free().
 */
typedef void (*PlegRelistFunc)(const GError *error, gint64 relist_time_ns, gpointer user_data);

/**
 * pleg_generic_set_relist_callback:
 * @context: (nullable): where @func runs; %NULL is the caller's thread-default context.
 * @func: (nullable): the callback, %NULL to remove it.
 *
 * Call before pleg_generic_start().  @func runs in @context after every global relist run by
 * the dispatcher (not for pleg_generic_relist() called by hand), except one that
 * pleg_generic_stop() cancelled: that one says nothing about the runtime.  Notices that have
 * not called the old callback yet are dropped, one that GLib is dispatching at this moment
 * included; when the old callback is running in another thread, this waits until it returned,
 * then calls the old destroy notify (from inside the callback it does not wait).  So once this
 * returns the old callback is never called again.  pleg_generic_free() does the same.
 *
 * Thread safety: the lifecycle thread (see pleg_generic_new()), or the relist callback
 * itself, while the dispatcher is not running (before pleg_generic_start() or after
 * pleg_generic_stop()).
 */
void pleg_generic_set_relist_callback(PlegGeneric *pleg, GMainContext *context,
                                      PlegRelistFunc func, gpointer user_data,
                                      GDestroyNotify destroy);

/**
 * pleg_generic_get_last_relist_time:
 * @pleg: the PLEG.
 *
 * Returns: Unix ns of the start of the last successful global relist, 0 if none yet.
 *
 * Thread safety: any thread.
 */
gint64 pleg_generic_get_last_relist_time(PlegGeneric *pleg);

/**
 * pleg_generic_get_cache:
 * @pleg: the PLEG.
 *
 * Returns: (transfer none): the pod cache, valid until pleg_generic_free().
 *
 * Thread safety: any thread.
 */
PlegPodCache *pleg_generic_get_cache(PlegGeneric *pleg);

/**
 * pleg_generic_get_metrics:
 * @pleg: the PLEG.
 *
 * Returns: (transfer none): the metrics registry, valid until pleg_generic_free() (take a
 *   reference to keep it longer).
 *
 * Thread safety: any thread.
 */
PlegMetricsRegistry *pleg_generic_get_metrics(PlegGeneric *pleg);

G_END_DECLS
