/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plugin host: one object that owns the CRI client, the Generic PLEG, the metrics registry,
 * the feature gates, the health checkers and the loaded plugins.  plegd is a thin program around
 * it; a C CRI shim embeds it in its own process with its own GMainContext.
 */
#pragma once

#include <gio/gio.h>
#include <pleg/pleg-generic.h>
#include <pleg/pleg-metrics.h>
#include <pleg/pleg-util.h>

G_BEGIN_DECLS

/**
 * PLEG_HOST_ERROR:
 *
 * Errors of the host: its configuration, its plugin loader and its own health checkers.
 * Loader messages name the plugin and the exact reason, e.g.
 * "plugin evented (/usr/lib/pleg/plugins/libpleg-evented.so): ABI major 2, host speaks 1".
 * The host's functions report no other domain, except where they pass on a cause of their
 * own module's with g_prefix_error() (the "runtime" checker passes on the runtime's error).
 */
#define PLEG_HOST_ERROR (pleg_host_error_quark())
/**
 * pleg_host_error_quark:
 *
 * Returns: the quark of %PLEG_HOST_ERROR.
 *
 * Thread safety: callable from any thread.
 */
GQuark pleg_host_error_quark(void);

/**
 * PlegHostError:
 * @PLEG_HOST_ERROR_CONFIG: a bad configuration file or value (an endpoint, a `[FeatureGates]`
 *   group, a `.plugin` file's keys or gate declarations).
 * @PLEG_HOST_ERROR_PLUGIN_FILE: a `.plugin` file or module missing, not a regular file, or of the
 *   wrong owner or mode.
 * @PLEG_HOST_ERROR_PLUGIN_OPEN: dlopen failed: not a shared object, a missing library.
 * @PLEG_HOST_ERROR_PLUGIN_SYMBOL: no descriptor symbol, or a NULL one.
 * @PLEG_HOST_ERROR_PLUGIN_ABI: the descriptor's major differs, its minor is newer, its size too
 *   small, its name or gate does not match the `.plugin` file, or reserved fields are set.
 * @PLEG_HOST_ERROR_PLUGIN_INIT: the plugin's init failed (or its thread could not start).
 * @PLEG_HOST_ERROR_PLUGIN_START: the plugin's start failed.
 * @PLEG_HOST_ERROR_REQUIRED_PLUGIN: a plugin marked required did not load, is disabled or is not
 *   running.
 * @PLEG_HOST_ERROR_UNHEALTHY: the "pleg-dispatcher" liveness checker: no global relist has
 *   finished within the liveness window ("pleg dispatcher is stuck: ..."); or the "pleg"
 *   readiness checker: the last successful relist started longer ago than the relist threshold
 *   (kubelet's "pleg was last seen active ... ago").
 * @PLEG_HOST_ERROR_NOT_READY: the "first-relist" readiness checker: no global relist has
 *   succeeded since start.
 * @PLEG_HOST_ERROR_CHECK_FAILED: a health checker failed without saying why.
 */
typedef enum {
    PLEG_HOST_ERROR_CONFIG,
    PLEG_HOST_ERROR_PLUGIN_FILE,
    PLEG_HOST_ERROR_PLUGIN_OPEN,
    PLEG_HOST_ERROR_PLUGIN_SYMBOL,
    PLEG_HOST_ERROR_PLUGIN_ABI,
    PLEG_HOST_ERROR_PLUGIN_INIT,
    PLEG_HOST_ERROR_PLUGIN_START,
    PLEG_HOST_ERROR_REQUIRED_PLUGIN,
    PLEG_HOST_ERROR_UNHEALTHY,
    PLEG_HOST_ERROR_NOT_READY,
    PLEG_HOST_ERROR_CHECK_FAILED,
} PlegHostError;

/**
 * PlegPluginState:
 * @PLEG_PLUGIN_STATE_DISABLED_GATE: its feature gate is off; the file was not opened.
 * @PLEG_PLUGIN_STATE_DISABLED_BY_NAME: named in PlegHostConfig.disabled_plugins.
 * @PLEG_PLUGIN_STATE_FAILED: loading, init or start failed; see the error.
 * @PLEG_PLUGIN_STATE_RUNNING: started.
 * @PLEG_PLUGIN_STATE_STOPPED: stopped by pleg_host_stop().
 */
typedef enum {
    PLEG_PLUGIN_STATE_DISABLED_GATE,
    PLEG_PLUGIN_STATE_DISABLED_BY_NAME,
    PLEG_PLUGIN_STATE_FAILED,
    PLEG_PLUGIN_STATE_RUNNING,
    PLEG_PLUGIN_STATE_STOPPED,
} PlegPluginState;

/**
 * pleg_plugin_state_to_string:
 *
 * Returns: (transfer none): "disabled-gate", "disabled-by-name", "failed", "running",
 *   "stopped", or "unknown".
 *
 * Thread safety: callable from any thread.
 */
const char *pleg_plugin_state_to_string(PlegPluginState state);

/**
 * PlegPluginReason:
 * @PLEG_PLUGIN_REASON_NONE: nothing to explain: running, or stopped by pleg_host_stop().
 * @PLEG_PLUGIN_REASON_FEATURE_GATE_OFF: its feature gate (#PlegPluginInfo.feature_gate) is off.
 * @PLEG_PLUGIN_REASON_DISABLED_BY_NAME: named in #PlegHostConfig.disabled_plugins.
 * @PLEG_PLUGIN_REASON_CONFIG: its `.plugin` file is not a valid key file, lacks Name= or
 *   Module=, repeats another plugin's name, or declares gates the host does not hold as
 *   declared (%PLEG_HOST_ERROR_CONFIG).
 * @PLEG_PLUGIN_REASON_PLUGIN_FILE: its `.plugin` file or module is missing, not a regular
 *   file, or of the wrong owner or mode (%PLEG_HOST_ERROR_PLUGIN_FILE).
 * @PLEG_PLUGIN_REASON_OPEN: the module could not be opened (%PLEG_HOST_ERROR_PLUGIN_OPEN).
 * @PLEG_PLUGIN_REASON_SYMBOL: no descriptor symbol (%PLEG_HOST_ERROR_PLUGIN_SYMBOL).
 * @PLEG_PLUGIN_REASON_ABI: the descriptor does not fit the host (%PLEG_HOST_ERROR_PLUGIN_ABI).
 * @PLEG_PLUGIN_REASON_INIT: its init failed (%PLEG_HOST_ERROR_PLUGIN_INIT).
 * @PLEG_PLUGIN_REASON_START: its start failed (%PLEG_HOST_ERROR_PLUGIN_START).
 *
 * Why a plugin is in its #PlegPluginState, as a code.  For a failed plugin it names the step
 * that failed, which #PlegPluginInfo.error's code also gives.
 */
typedef enum {
    PLEG_PLUGIN_REASON_NONE,
    PLEG_PLUGIN_REASON_FEATURE_GATE_OFF,
    PLEG_PLUGIN_REASON_DISABLED_BY_NAME,
    PLEG_PLUGIN_REASON_CONFIG,
    PLEG_PLUGIN_REASON_PLUGIN_FILE,
    PLEG_PLUGIN_REASON_OPEN,
    PLEG_PLUGIN_REASON_SYMBOL,
    PLEG_PLUGIN_REASON_ABI,
    PLEG_PLUGIN_REASON_INIT,
    PLEG_PLUGIN_REASON_START,
} PlegPluginReason;

/**
 * PlegPluginInfo:
 * @name: plugin name (from the file name when the descriptor could not be read).
 * @path: the file.
 * @state: what happened to it.
 * @error: (nullable): why it failed: "plugin NAME (PATH): " and @reason_message.
 * @feature_gate: (nullable): the gate its `.plugin` file names in FeatureGate=, %NULL when it
 *   names none or the file could not be read.  Checked to be a known gate unless @state is
 *   %PLEG_PLUGIN_STATE_FAILED with @reason %PLEG_PLUGIN_REASON_CONFIG; untrusted text then.
 * @reason: why it is in @state.
 * @reason_message: (nullable): the same in words, without the plugin's name and path: "feature
 *   gate EventedPLEG is off", "disabled by name", the loader's reason ("ABI major 2, host speaks
 *   1", "init failed: <the plugin's message>"); %NULL with %PLEG_PLUGIN_REASON_NONE.  Bytes
 *   from a `.plugin` file or a plugin are escaped (pleg_log_text()).
 *
 * What became of one plugin file, owned by the host (pleg_host_get_plugins()).  Fields after
 * @error were added later; a host fills them all.
 */
typedef struct {
    char *name;
    char *path;
    PlegPluginState state;
    GError *error;
    char *feature_gate;
    PlegPluginReason reason;
    char *reason_message;
} PlegPluginInfo;

/**
 * PlegHostConfig:
 * @runtime_endpoint: CRI endpoint (kubelet's --container-runtime-endpoint).
 * @runtime_request_timeout_usec: per-call CRI deadline; 0 = 2 min.
 * @generic: Generic PLEG configuration (period, threshold, queue capacity, clock).
 * @plugin_dir: (nullable): where `*.plugin` files (and the modules they name) are looked for: a
 *   directory, or several separated by ':' and searched in order (a later plugin with a name
 *   already seen fails as a duplicate); %NULL uses the build-time default
 *   (`$libdir/pleg/plugins`), "" loads no plugin.
 * @disabled_plugins: (nullable) (array zero-terminated=1): plugin names not to load.
 * @required_plugins: (nullable) (array zero-terminated=1): plugin names whose failure (to load,
 *   init or start, or being disabled) fails pleg_host_start().
 * @runtime: (nullable): use this runtime instead of a CRI client (tests); the event stream
 *   services then fail with UNIMPLEMENTED.
 * @list_stream_probe_interval_usec: with the `CRIListStreaming` gate on, how long a runtime's
 *   UNIMPLEMENTED answer to the list streams keeps listings unary before the streams are tried
 *   again; 0 = %PLEG_CRI_LIST_PROBE_INTERVAL_USEC (5 min).
 *
 * Initialise with pleg_host_config_init(), then set fields.  Strings are borrowed during
 * pleg_host_new() and copied.
 */
typedef struct {
    const char *runtime_endpoint;
    gint64 runtime_request_timeout_usec;
    PlegGenericConfig generic;
    const char *plugin_dir;
    const char *const *disabled_plugins;
    const char *const *required_plugins;
    PlegRuntime *runtime;
    gint64 list_stream_probe_interval_usec;
    /*< private >*/
    gpointer reserved[7];
} PlegHostConfig;

/**
 * pleg_host_config_init:
 * @config: (out caller-allocates): the configuration to fill.
 *
 * Sets every field to its default: no endpoint (the default CRI endpoint), the build-time plugin
 * directory, pleg_generic_config_init() for @config->generic.
 *
 * Thread safety: callable from any thread, on a @config no other thread uses.
 */
void pleg_host_config_init(PlegHostConfig *config);

/**
 * pleg_feature_gates_load_key_file:
 * @gates: the gates to change.
 * @key_file: a key file whose `[FeatureGates]` group holds `Name=true|false` lines.
 * @error: %PLEG_HOST_ERROR_CONFIG naming the unknown gate or bad value.
 *
 * All or nothing, like pleg_feature_gates_parse().
 *
 * Thread safety: as pleg_feature_gates_parse(): not while another thread reads or changes
 *   @gates.
 */
gboolean pleg_feature_gates_load_key_file(PlegFeatureGates *gates, GKeyFile *key_file,
                                          GError **error);

/**
 * pleg_feature_gates_register_plugins:
 * @gates: the gates to add to.
 * @plugin_dir: (nullable): the plugin search path, as #PlegHostConfig.plugin_dir: directories
 *   separated by ':'; %NULL is the build-time default, "" registers nothing.
 * @error: %PLEG_HOST_ERROR_CONFIG naming the `.plugin` file and the group: a bad or missing
 *   `Stage=` (Alpha, Beta, GA, Deprecated) or `Default=` (true, false), an unknown key, a gate
 *   name that is not CamelCase, a built-in gate redefined, or a gate declared differently by two
 *   files (both named).
 *
 * Registers every gate that the `*.plugin` files of @plugin_dir declare in a
 * `[FeatureGate <Name>]` group, with pleg_feature_gates_register().  It reads only the key
 * files: no module is opened and no plugin code runs.  A file that is not a readable key file is
 * skipped here (the loader reports it).  Call it before the gates are parsed from flags or a
 * `[FeatureGates]` group, so that a plugin's gate is accepted there, and pass the same
 * @plugin_dir to pleg_host_new(): the loader fails a plugin whose declarations the gates do not
 * hold.  pleg_host_new() with %NULL gates does this itself.  On failure @gates may hold the
 * declarations read before the failing one.
 *
 * Thread safety: as pleg_feature_gates_register().
 */
gboolean pleg_feature_gates_register_plugins(PlegFeatureGates *gates, const char *plugin_dir,
                                             GError **error);

typedef struct _PlegHost PlegHost;

/**
 * pleg_host_new:
 * @config: the configuration.
 * @gates: (transfer none) (nullable): feature gates, copied by reference: the host reads them;
 *   the caller keeps them alive and unchanged while the host lives.  They must hold the gates the
 *   plugins declare (pleg_feature_gates_register_plugins() with the same plugin_dir).  %NULL:
 *   the host's own gates, built-in and declared ones at their defaults.
 * @context: (nullable): the caller's context: event callbacks and relist callbacks run there;
 *   %NULL is the caller's thread-default context.
 *
 * Creates the CRI client (no connection yet), the metrics registry and the Generic PLEG.
 * Nothing runs until pleg_host_start().
 *
 * Returns: (transfer full): the host, or %NULL with @error set (%PLEG_HOST_ERROR_CONFIG: a bad
 *   endpoint; with %NULL @gates, a bad gate declaration).
 *
 * Thread safety: callable from any thread.  The thread that then calls pleg_host_start(),
 *   pleg_host_stop() and pleg_host_free() should be the one that iterates @context.
 */
PlegHost *pleg_host_new(const PlegHostConfig *config, PlegFeatureGates *gates,
                        GMainContext *context, GError **error);

/**
 * pleg_host_start:
 *
 * Loads the plugins (see pleg-plugin.h for the checks), each on a thread with its own
 * #GMainContext, starts the Generic PLEG and then the plugins.  A plugin that fails is reported
 * (pleg_host_get_plugins(), and a message in the "pleg" log domain) and skipped, unless required.
 *
 * Returns: %FALSE with @error (%PLEG_HOST_ERROR_REQUIRED_PLUGIN) only when a required plugin
 *   failed; the host is then stopped.  %TRUE at once when already started.
 *
 * Thread safety: call pleg_host_start(), pleg_host_stop(), pleg_host_free(),
 *   pleg_host_get_plugins() and the event callback functions from one thread, the one that
 *   owns (iterates) the host's context; never from a plugin's thread or from inside a health
 *   checker.  It waits for each plugin's init and start on the plugin's thread while holding
 *   no lock of the host.
 */
gboolean pleg_host_start(PlegHost *host, GError **error);

/**
 * pleg_host_stop:
 *
 * Stops the plugins (reverse order), each on its thread, then the Generic PLEG (joining its
 * dispatcher).  Idempotent.  A plugin's health checkers go with it.
 *
 * Thread safety: as pleg_host_start(): from the thread that owns the host's context, never
 *   from a plugin's thread or a health checker.
 */
void pleg_host_stop(PlegHost *host);

/**
 * pleg_host_free:
 * @host: (nullable) (transfer full): the host.
 *
 * Stops if needed and frees; the destroy notify of every event callback and health checker
 * left runs.  NULL-safe.  Modules stay resident.
 *
 * Thread safety: as pleg_host_start(); not from inside a callback of the host (the relist
 *   callback's pleg_generic_free() waits for a running one).
 */
void pleg_host_free(PlegHost *host);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegHost, pleg_host_free)

/**
 * pleg_host_add_event_callback:
 * @func: called for each PodLifecycleEvent, in the host's context.
 * @user_data: passed to @func.
 * @destroy: (nullable): frees @user_data once the callback is removed or the host freed.
 *
 * Subscribes to the Generic PLEG with a channel of the default capacity
 * (%PLEG_DEFAULT_EVENT_CHANNEL_CAPACITY).  Events generated from now on are delivered: call
 * before pleg_host_start() to see every event.
 *
 * Returns: an id (> 0) for pleg_host_remove_event_callback().
 *
 * Thread safety: from the thread that owns the host's context (see pleg_host_start()); @func
 *   runs there, one event at a time.
 */
guint pleg_host_add_event_callback(PlegHost *host, PlegEventFunc func, gpointer user_data,
                                   GDestroyNotify destroy);

/**
 * pleg_host_remove_event_callback:
 * @id: from pleg_host_add_event_callback().
 *
 * Unsubscribes: @func of that registration is not called again, its channel and the events
 * still in it are dropped, and its destroy notify runs (at once, or once the callback returns
 * when it removes itself).  Like g_source_remove(), an unknown @id is a programming error.
 *
 * Thread safety: from the thread that owns the host's context, including from inside the
 *   callback being removed (or another of the host's callbacks); not from another thread
 *   while that context is iterated.
 */
void pleg_host_remove_event_callback(PlegHost *host, guint id);

/**
 * pleg_host_request_relist:
 * @pod_uid: the pod to relist.
 * @source: who asks; %PLEG_RELIST_SOURCE_GLOBAL is not a valid request source.
 *
 * RequestRelist (KEP-3386): pleg_generic_request_relist() on the host's Generic PLEG, for a
 * shim that syncs pods (%PLEG_RELIST_SOURCE_POST_SYNC after a sync), without reaching into the
 * PLEG.  Never blocks on runtime calls.
 *
 * Returns: what became of the request: queued, coalesced into a suspended pod's pending
 *   relist, or dropped (queue full or PLEG stopped; the next global relist covers it).
 *
 * Thread safety: callable from any thread, including the host's callbacks.
 */
PlegRelistRequestResult pleg_host_request_relist(PlegHost *host, const char *pod_uid,
                                                 PlegRelistSource source);

/**
 * pleg_host_suspend_pod:
 * @pod_uid: the pod whose sync starts.
 *
 * pleg_generic_suspend_pod(): when it returns, no relist publishes state for @pod_uid until
 * pleg_host_resume_pod() (KEP-3386: relists of a pod are suspended while its SyncPod runs).
 * Nests: each suspend needs one resume.
 *
 * Thread safety: callable from any thread, never while holding a lock that the host's event
 *   callback takes (pleg_generic_suspend_pod()'s rule: the only way to build a lock cycle with
 *   libpleg's locks).
 */
void pleg_host_suspend_pod(PlegHost *host, const char *pod_uid);

/**
 * pleg_host_resume_pod:
 * @pod_uid: the pod whose sync ended (also after an error or cancellation).
 *
 * pleg_generic_resume_pod(): ends one suspension; when the last one ends and requests arrived
 * (or a relist skipped the pod) meanwhile, exactly one relist is queued.
 *
 * Thread safety: callable from any thread, including the host's callbacks.
 */
void pleg_host_resume_pod(PlegHost *host, const char *pod_uid);

/**
 * pleg_host_set_relist_callback:
 *
 * Like pleg_generic_set_relist_callback(), in the host's context.  Call before
 * pleg_host_start().
 *
 * Thread safety: from the thread that owns the host's context; @func runs there.  Replacing
 *   the callback waits for a running one, so not from inside it.
 */
void pleg_host_set_relist_callback(PlegHost *host, PlegRelistFunc func, gpointer user_data,
                                   GDestroyNotify destroy);

/**
 * PlegHealthKind:
 * @PLEG_HEALTH_LIVENESS: fails only for what restarting this process can fix (Kubernetes'
 *   /livez): the Generic PLEG's dispatcher stuck, and the plugins' checkers.  The systemd
 *   watchdog heartbeat follows it, as kubelet's follows its own health checkers.
 * @PLEG_HEALTH_READINESS: also fails while the PLEG cannot be relied on yet or now (/readyz):
 *   before the first successful global relist, while the runtime is unreachable, and while
 *   kubelet's PLEG health check fails (kubelet reports that in its node's Ready condition).
 *
 * The two rounds of health checkers a host runs.
 */
typedef enum {
    PLEG_HEALTH_LIVENESS,
    PLEG_HEALTH_READINESS,
} PlegHealthKind;

/**
 * pleg_host_check_health:
 * @ret_checker: (out) (optional) (transfer full): the name of the failing checker.
 * @error: the failing checker's error: %PLEG_HOST_ERROR_UNHEALTHY from "pleg-dispatcher", a
 *   plugin checker's own, or %PLEG_HOST_ERROR_CHECK_FAILED from a checker that gave none.
 *
 * The liveness round: runs the liveness checkers in registration order, stopping at the first
 * failure: "pleg-dispatcher", then those the plugins added (every plugin checker is a liveness
 * checker).  The watchdog plugin's heartbeat asks this.
 *
 * "pleg-dispatcher" fails only when the Generic PLEG's dispatcher is stuck: no global relist,
 * successful or not, has finished (pleg_generic_get_relist_attempt_age()) within the liveness
 * window since the last one ended, or since pleg_host_start() before the first.  The window is
 * the larger of the relist threshold and the relist period plus four runtime request timeouts
 * (#PlegHostConfig.runtime_request_timeout_usec; kubelet's defaults give 8m1s): against a
 * runtime that takes calls and never answers, a relist ends within two call deadlines, and one
 * pass of targeted relists may run before it.  Unhealthy: "pleg dispatcher is stuck: no global
 * relist has finished for <d>; the limit is <w>".  A runtime that is down or hangs, for however
 * long, fails readiness ("runtime", "pleg"), never this: restarting the process would not bring
 * the runtime back, and would lose what it holds in memory.  Healthy before pleg_host_start().
 *
 * Thread safety: callable from any thread, not from inside a health checker.  The round takes
 *   its checkers under the host's health lock and runs them without it, on the calling thread;
 *   a checker must not remove checkers or start a round itself, and a plugin must not remove a
 *   checker while holding a lock that checker takes (removal waits for its run under way).  A
 *   checker that never returns holds back only the rounds that run it.
 */
gboolean pleg_host_check_health(PlegHost *host, char **ret_checker, GError **error);

/**
 * pleg_host_check_readiness:
 * @ret_checker: (out) (optional) (transfer full): the name of the failing checker.
 * @error: the failing checker's error: as pleg_host_check_health(), or
 *   %PLEG_HOST_ERROR_NOT_READY from "first-relist", or from "runtime" the last global relist's
 *   error (its domain and code, %PLEG_CRI_ERROR from a CRI client) prefixed with "container
 *   runtime is not reachable: ", or %PLEG_HOST_ERROR_UNHEALTHY from "pleg".
 *
 * The readiness round: every checker in registration order, stopping at the first failure:
 * "pleg-dispatcher", "first-relist" ("pleg has yet to be successful" until a global relist
 * succeeded since start), "runtime" (unhealthy, "container runtime is not reachable: <the CRI
 * error>", while the last global relist could not reach the runtime, at start-up too), "pleg"
 * (kubelet's PLEG health check, pleg_generic_healthy(), once a relist has succeeded: "pleg was
 * last seen active <d> ago; threshold is <t>" once the last successful relist started longer
 * ago than the threshold), then the plugins' checkers.  The runtime's error comes before
 * kubelet's verdict, so that the first failure names the cause.
 *
 * Thread safety: callable from any thread, not from inside a health checker.
 */
gboolean pleg_host_check_readiness(PlegHost *host, char **ret_checker, GError **error);

/**
 * PlegHealthResult:
 * @name: the checker's name.
 * @error: (nullable): why it failed; %NULL when it passed.
 *
 * One checker's verdict of pleg_host_check_all().
 */
typedef struct {
    char *name;
    GError *error;
} PlegHealthResult;

/**
 * pleg_health_result_free:
 * @result: (nullable) (transfer full): a verdict.
 *
 * Thread safety: callable from any thread.
 */
void pleg_health_result_free(PlegHealthResult *result);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegHealthResult, pleg_health_result_free)

/**
 * pleg_host_check_all:
 * @kind: which round.
 *
 * Runs every checker of the round, not stopping at a failure, for a verbose answer
 * (kube-apiserver's `?verbose`: one "[+]name ok" or "[-]name failed: reason" line each).
 *
 * Returns: (transfer full) (element-type PlegHealthResult): the verdicts in registration
 *   order.
 *
 * Thread safety: callable from any thread, not from inside a health checker.
 */
GPtrArray *pleg_host_check_all(PlegHost *host, PlegHealthKind kind);

/**
 * pleg_host_get_pleg:
 *
 * Returns: (transfer none): the Generic PLEG, valid while the host lives.  A shim needs it
 *   only for what the host does not forward (pleg_host_request_relist(),
 *   pleg_host_suspend_pod(), pleg_host_resume_pod() do).
 *
 * Thread safety: callable from any thread; the PLEG's own functions say theirs.
 */
PlegGeneric *pleg_host_get_pleg(PlegHost *host);

/**
 * pleg_host_get_metrics:
 *
 * Returns: (transfer none): the metrics registry shared by the core and every plugin.
 *
 * Thread safety: callable from any thread; the registry locks itself.
 */
PlegMetricsRegistry *pleg_host_get_metrics(PlegHost *host);

/**
 * pleg_host_get_plugins:
 *
 * Returns: (transfer container) (element-type PlegPluginInfo): one entry per plugin file found
 *   or skipped, in load order; the entries are owned by the host and valid until the next
 *   pleg_host_start() or pleg_host_free().
 *
 * Thread safety: as pleg_host_start(): from the thread that starts and stops the host, which
 *   alone changes the entries.
 */
GPtrArray *pleg_host_get_plugins(PlegHost *host);

/**
 * PlegPluginStatus:
 * @name: the plugin's name (#PlegPluginInfo.name).
 * @state: the word the plugin last gave to set_status (plugin ABI 1.2, pleg-plugin.h): short,
 *   stable and lowercase, `[a-z][a-z0-9-]*` (the evented watcher's: "connecting", "connected",
 *   "unimplemented", "disconnected").
 * @message: the line in words that came with it, "" when none: the plugin's own text, to be
 *   escaped (pleg_log_text()) before it is shown.
 * @since_unix_usec: when @state last changed (set_status with the same state keeps it): wall
 *   clock, microseconds since the Unix epoch (g_get_real_time()).
 *
 * A plugin's informational status, which never changes health: what it says of itself for an
 * operator (plegd shows it in `/readyz?verbose`).  A copy, owned by the caller.
 *
 * Since: 0.3
 */
typedef struct {
    char *name;
    char *state;
    char *message;
    gint64 since_unix_usec;
} PlegPluginStatus;

/**
 * pleg_plugin_status_free:
 * @status: (nullable) (transfer full): a status.
 *
 * Thread safety: callable from any thread.
 *
 * Since: 0.3
 */
void pleg_plugin_status_free(PlegPluginStatus *status);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegPluginStatus, pleg_plugin_status_free)

/**
 * pleg_host_get_plugin_statuses:
 *
 * The status each plugin last set (set_status), from its first set_status until its free
 * returned (pleg_host_stop()); a plugin that never set one is not listed.
 *
 * Returns: (transfer full) (element-type PlegPluginStatus): copies, in load order; empty when
 *   no plugin has a status.
 *
 * Thread safety: callable from any thread, while plugins set theirs from their threads: each
 *   copy is one set_status call's state and message with the time of its state.
 *
 * Since: 0.3
 */
GPtrArray *pleg_host_get_plugin_statuses(PlegHost *host);

/**
 * pleg_host_get_plugin_status:
 * @name: a plugin's name.
 *
 * The status of the plugin @name, as pleg_host_get_plugin_statuses() lists it.
 *
 * Returns: (transfer full) (nullable): a copy, or %NULL when no plugin named @name has a
 *   status.
 *
 * Thread safety: callable from any thread.
 *
 * Since: 0.3
 */
PlegPluginStatus *pleg_host_get_plugin_status(PlegHost *host, const char *name);

G_END_DECLS
