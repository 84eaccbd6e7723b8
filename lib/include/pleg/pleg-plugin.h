/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The libpleg plugin ABI.  This is the only libpleg header a plugin includes, and a plugin does
 * not link against libpleg: everything it may call reaches it through #PlegHostServices.
 *
 * A plugin is a shared object exporting exactly one symbol, %PLEG_PLUGIN_DESCRIPTOR_SYMBOL, a
 * const #PlegPluginDescriptor, installed next to a key file `<name>.plugin` (as libpeas does):
 * |[
 * [Plugin]
 * Name=evented
 * Module=libpleg-evented.so
 * FeatureGate=EventedPLEG
 * Description=Evented PLEG watcher (KEP-3386)
 * ]|
 * From that file the host checks the plugin's feature gate by name before the module is opened
 * (a disabled plugin runs no code, not even constructors), then checks the module file (regular, owned by root or the running user, not group- or
 * world-writable), opens it with local binding, checks the ABI (major equal, minor not newer than
 * the host's) and keeps the module resident.
 *
 * Lifecycle (all in the plugin's #GMainContext thread unless said otherwise):
 *   init   parse nothing global, allocate state, register metrics; no sources, threads or I/O
 *   start  attach sources, start threads, open connections
 *   stop   idempotent; detach and join everything that start created; may be called after a
 *          failed start
 *   free   NULL-safe; free the state
 *
 * Threading: the host calls the lifecycle functions from the thread that owns the plugin's
 * #GMainContext (services->get_main_context()).  Every service is callable from any thread
 * unless its documentation says otherwise.
 */
#pragma once

#include <gio/gio.h>
#include <gmodule.h>
#include <pleg/pleg-metrics.h>
#include <pleg/pleg-types.h>

G_BEGIN_DECLS

#define PLEG_PLUGIN_ABI_MAJOR 1
#define PLEG_PLUGIN_ABI_MINOR 2

/** PLEG_PLUGIN_DESCRIPTOR_SYMBOL: the one symbol a plugin exports. */
#define PLEG_PLUGIN_DESCRIPTOR_SYMBOL "pleg_plugin_descriptor"

/**
 * PlegPluginRelistSource:
 *
 * Values of the Generic PLEG's PlegRelistSource that a plugin may pass to request_relist, with
 * the same numbers (KEP-3386 `relist_source`).
 */
typedef enum {
    PLEG_PLUGIN_RELIST_SOURCE_EVENTED_PLEG = 1,
    PLEG_PLUGIN_RELIST_SOURCE_POST_SYNC = 2,
    PLEG_PLUGIN_RELIST_SOURCE_POST_ALLOCATION = 3,
} PlegPluginRelistSource;

/**
 * PlegContainerEventType:
 *
 * CRI `ContainerEventType`, numbered as on the wire (KEP-3386 Design Details).
 */
typedef enum {
    PLEG_CONTAINER_CREATED_EVENT = 0,
    PLEG_CONTAINER_STARTED_EVENT = 1,
    PLEG_CONTAINER_STOPPED_EVENT = 2,
    PLEG_CONTAINER_DELETED_EVENT = 3,
} PlegContainerEventType;

/**
 * PlegContainerEvent:
 * @container_id: `ContainerEventResponse.container_id`, may be empty.
 * @type: `container_event_type`; values outside the enum are passed through as they came.
 * @created_at_ns: `created_at`, Unix ns as the runtime sent it (0 when unset).
 * @pod_sandbox_status: (nullable): decoded `pod_sandbox_status`, %NULL when the event had none.
 * @has_metadata: whether `pod_sandbox_status.metadata` was present on the wire.
 * @container_statuses: (element-type PlegContainerStatus): decoded `containers_statuses`, never
 *   %NULL.
 *
 * One message of the CRI GetContainerEvents stream, decoded by the host.  A latency hint only:
 * KEP-3386 forbids putting its payload into the pod cache.  Freed with the host's
 * container_event_free service.
 */
typedef struct {
    char *container_id;
    PlegContainerEventType type;
    gint64 created_at_ns;
    PlegPodSandboxStatus *pod_sandbox_status;
    gboolean has_metadata;
    GPtrArray *container_statuses;
} PlegContainerEvent;

/**
 * PLEG_PLUGIN_CRI_ERROR_DOMAIN:
 *
 * Name of the #GError domain of failed container event services (libpleg's PLEG_CRI_ERROR,
 * which a plugin cannot link to): compare with g_quark_to_string(error->domain).  The code is
 * the gRPC status code, e.g. %PLEG_PLUGIN_CRI_UNIMPLEMENTED for a runtime without the stream.
 */
#define PLEG_PLUGIN_CRI_ERROR_DOMAIN "pleg-cri-error-quark"
#define PLEG_PLUGIN_CRI_CANCELLED 1
#define PLEG_PLUGIN_CRI_UNIMPLEMENTED 12
#define PLEG_PLUGIN_CRI_UNAVAILABLE 14

/**
 * PLEG_PLUGIN_STATUS_STATE_MAX:
 *
 * The longest state word set_status takes, in bytes (ABI 1.2).
 */
#define PLEG_PLUGIN_STATUS_STATE_MAX 32

typedef struct _PlegPluginHost PlegPluginHost;
typedef struct _PlegContainerEventStream PlegContainerEventStream;

/**
 * PlegHealthCheckFunc:
 * @user_data: as registered.
 * @error: set with a one-line reason when unhealthy.
 *
 * A health checker, run in registration order by whoever checks health (the host's /healthz,
 * the watchdog plugin); the first failure stops the round.  Runs in the caller's thread: must
 * not block.
 *
 * Thread safety: runs on whichever thread asks for a round (plegd's health thread, the
 *   watchdog plugin's thread), possibly on two at once, while the round holds the host's health
 *   lock as a reader: it must not add or remove health checkers nor start a round itself
 *   (check_health, check_health_progress), which would deadlock.
 *
 * Returns: %TRUE when healthy.
 */
typedef gboolean (*PlegHealthCheckFunc)(gpointer user_data, GError **error);

/**
 * PlegHealthProgressFunc:
 * @checker: (transfer none): the name of the checker about to run; valid during the call.
 * @user_data: as passed to check_health_progress.
 *
 * Called by check_health_progress in the calling thread just before each checker runs (ABI
 * 1.1), so that a caller can tell which checker a round that has not returned is in.  Must not
 * block or call back into the host's health services.
 *
 * Thread safety: runs on the thread that called check_health_progress, under the host's
 *   health lock, as a #PlegHealthCheckFunc does.
 */
typedef void (*PlegHealthProgressFunc)(const char *checker, gpointer user_data);

/**
 * PlegHostServices:
 * @size: sizeof (PlegHostServices) as compiled into the host; a plugin built against a newer
 *   minor checks @size before using a slot added later.
 * @abi_minor: the host's %PLEG_PLUGIN_ABI_MINOR.
 * @host: opaque handle passed back to every service.
 * @get_main_context: (transfer none): the plugin's own context, owned by a thread of the host;
 *   every plugin callback runs there.  Not the global default context.
 * @feature_enabled: whether a feature gate is on (kubelet names; unknown names are off).
 * @request_relist: RequestRelist (KEP-3386): queue a targeted relist of @pod_uid.  Never blocks.
 *   Returns a PlegRelistRequestResult value: 0 queued, 1 coalesced, 2 dropped.
 * @metric_register: pleg_metrics_register() on the host's registry.  (transfer none)
 * @metric_add: pleg_metric_add().
 * @metric_set: pleg_metric_set().
 * @metric_observe: pleg_metric_observe().
 * @add_health_checker: appends a checker named @name (a stable, lowercase identifier).
 *   Returns an id > 0 for @remove_health_checker.
 * @remove_health_checker: removes it: a round that has not reached it skips it, and it returns
 *   once no round runs it any more (it waits for a run under way), after @destroy of the
 *   registration ran.  A plugin may then free what the checker uses.
 * @check_health: runs every checker in order, stopping at the first failure.  On failure
 *   @ret_checker (transfer full, optional) names it and @error says why.
 * @log: structured logging: @fields are GLib's #GLogField, MESSAGE among them; the host adds
 *   GLIB_DOMAIN (the plugin's log domain) and decides where records go.
 * @get_runtime_endpoint: (transfer none): the CRI endpoint the host talks to.
 * @container_events_open: starts CRI GetContainerEvents on the host's channel, fail-fast (not
 *   gRPC wait-for-ready, as kubelet calls it): while the runtime is away or its socket refuses
 *   connections the first read fails with %PLEG_PLUGIN_CRI_UNAVAILABLE, so a stream that has
 *   not failed is one the channel carried to the runtime; answers such as UNIMPLEMENTED show up
 *   in the first read too.  Errors are in %PLEG_PLUGIN_CRI_ERROR_DOMAIN (the gRPC status code).
 * @container_events_read: blocks until the next event (%TRUE, @ret_event set, transfer full),
 *   a clean end of the stream (%TRUE, @ret_event %NULL: the runtime closed it without error) or
 *   a failure (%FALSE, @error set).  Call from one thread at a time, never from the plugin's
 *   main context thread (it blocks).
 * @container_events_cancel: from any thread: a blocked read returns CANCELLED promptly.
 * @container_events_free: cancels if needed and frees.  NULL-safe.
 * @container_event_free: frees a #PlegContainerEvent.  NULL-safe.
 * @check_health_progress: (ABI 1.1) like @check_health, calling @progress (nullable) with
 *   @progress_data before each checker runs.  A plugin built against 1.1 checks
 *   `abi_minor >= 1` before using it.
 * @set_status: (ABI 1.2) the plugin's informational status, for an operator: @state a short,
 *   stable, lowercase word (`[a-z][a-z0-9-]*`, at most %PLEG_PLUGIN_STATUS_STATE_MAX bytes; the
 *   evented watcher's are "connecting", "connected", "unimplemented", "disconnected"), @message
 *   (nullable) one line in words saying what it means now.  The host keeps the last one with
 *   the wall-clock time of the last change of @state: calling it again with the same @state
 *   replaces the message and keeps that time.  An invalid @state is ignored (the host logs it at
 *   debug level).  A status never changes health: plegd shows it in `/readyz?verbose` as an
 *   informational line.  The host forgets it once the plugin's free returned.  A plugin built
 *   against 1.2 checks `abi_minor >= 2` and that the slot is not %NULL before using it.
 *
 * The host's services, a versioned table of function pointers (PipeWire SPA's `support[]`):
 * nothing in the ABI is a global symbol.
 *
 * Thread safety: every service is callable from any thread of the plugin, from init until
 *   free returns, except: @container_events_read blocks and is for one thread at a time, never
 *   the plugin's context thread; @check_health and @check_health_progress are not for a health
 *   checker or progress function; @add_health_checker and @remove_health_checker are not for a
 *   health checker, nor @remove_health_checker while holding a lock that the removed checker
 *   takes (removal waits for a run of that checker under way).  A removed checker's destroy
 *   notify runs on the thread that removed it, with no host lock held.  Checkers the plugin
 *   leaves are removed after its stop, on its context thread.  A plugin whose stop and free
 *   have not returned within 5 s (a stop that removes a checker that never returns) is
 *   abandoned by the host: its thread is left running and its state is never freed.
 */
typedef struct {
    guint32 size;
    guint32 abi_minor;
    PlegPluginHost *host;

    GMainContext *(*get_main_context)(PlegPluginHost *host);
    gboolean (*feature_enabled)(PlegPluginHost *host, const char *gate);
    int (*request_relist)(PlegPluginHost *host, const char *pod_uid,
                          PlegPluginRelistSource source);

    PlegMetric *(*metric_register)(PlegPluginHost *host, PlegMetricType type, const char *name,
                                   const char *help, const char *const *label_names,
                                   const double *buckets, gsize n_buckets);
    void (*metric_add)(PlegMetric *metric, const char *const *label_values, double value);
    void (*metric_set)(PlegMetric *metric, const char *const *label_values, double value);
    void (*metric_observe)(PlegMetric *metric, const char *const *label_values, double value);

    guint (*add_health_checker)(PlegPluginHost *host, const char *name, PlegHealthCheckFunc func,
                                gpointer user_data, GDestroyNotify destroy);
    void (*remove_health_checker)(PlegPluginHost *host, guint id);
    gboolean (*check_health)(PlegPluginHost *host, char **ret_checker, GError **error);

    void (*log)(PlegPluginHost *host, GLogLevelFlags level, const GLogField *fields,
                gsize n_fields);

    const char *(*get_runtime_endpoint)(PlegPluginHost *host);
    PlegContainerEventStream *(*container_events_open)(PlegPluginHost *host, GError **error);
    gboolean (*container_events_read)(PlegContainerEventStream *stream,
                                      PlegContainerEvent **ret_event, GError **error);
    void (*container_events_cancel)(PlegContainerEventStream *stream);
    void (*container_events_free)(PlegContainerEventStream *stream);
    void (*container_event_free)(PlegContainerEvent *event);
    gboolean (*check_health_progress)(PlegPluginHost *host, PlegHealthProgressFunc progress,
                                      gpointer progress_data, char **ret_checker,
                                      GError **error);
    void (*set_status)(PlegPluginHost *host, const char *state, const char *message);
    /*< private >*/
    gpointer reserved[22];
} PlegHostServices;

/**
 * PlegPluginDescriptor:
 * @abi_major: %PLEG_PLUGIN_ABI_MAJOR as compiled into the plugin; must equal the host's.
 * @abi_minor: %PLEG_PLUGIN_ABI_MINOR as compiled; must not be newer than the host's.
 * @size: sizeof (PlegPluginDescriptor) as compiled.
 * @name: short name, `[a-z0-9-]+`; must equal `Name` in the `.plugin` file; the name used by
 *   --disable-plugins.
 * @description: one line for logs.
 * @feature_gate: (nullable): the gate that enables the plugin; must equal `FeatureGate` in the
 *   `.plugin` file, which the host reads before opening the module.  %NULL: always on (unless
 *   disabled by name).
 * @init: allocate state into @ret_state; no side effects.  @services stays valid until @free.
 *   %FALSE with @error set makes the host report and skip the plugin.
 * @start: attach sources / start threads.  %FALSE with @error set: the host calls @stop and
 *   @free and runs on without it.
 * @stop: idempotent.
 * @free: NULL-safe.
 *
 * The exported descriptor.  Fields after @free are reserved and must be zero.
 *
 * Thread safety: the host calls @init, @start, @stop and @free one at a time, each on the
 *   plugin's own thread with its #GMainContext acquired and pushed as thread-default; the
 *   thread that started or stops the host waits for each call to return.  Plugins run on
 *   threads of their own, so two plugins' functions may run at once.
 */
typedef struct {
    guint32 abi_major;
    guint32 abi_minor;
    guint32 size;
    const char *name;
    const char *description;
    const char *feature_gate;
    gboolean (*init)(const PlegHostServices *services, gpointer *ret_state, GError **error);
    gboolean (*start)(gpointer state, GError **error);
    void (*stop)(gpointer state);
    void (*free)(gpointer state);

    /*< private >*/
    gpointer reserved[16];
} PlegPluginDescriptor;

/**
 * PLEG_PLUGIN_DEFINE:
 *
 * Defines the exported descriptor with the ABI fields filled in, e.g.
 * |[
 * PLEG_PLUGIN_DEFINE(.name = "evented", .feature_gate = "EventedPLEG",
 *                    .init = evented_init, .start = evented_start,
 *                    .stop = evented_stop, .free = evented_free);
 * ]|
 */
#define PLEG_PLUGIN_DEFINE(...)                                                                    \
    G_MODULE_EXPORT const PlegPluginDescriptor pleg_plugin_descriptor = {                          \
        .abi_major = PLEG_PLUGIN_ABI_MAJOR,                                                        \
        .abi_minor = PLEG_PLUGIN_ABI_MINOR,                                                        \
        .size = sizeof(PlegPluginDescriptor),                                                      \
        __VA_ARGS__}

G_END_DECLS
