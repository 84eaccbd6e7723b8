/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A fake plugin host for testing one plugin without the Generic PLEG.  It hands out a real
 * #PlegHostServices table whose services record what the plugin does (request_relist calls
 * first among them).
 *
 * Threads: the plugin's context is a private #GMainContext that the *test thread* iterates: every
 * fake_host_wait_*() call runs it until its condition holds or the deadline passes, so plugin
 * callbacks run on the test thread, deterministically.  Services may still be called from any
 * thread (plugins' own worker threads); they are thread-safe.
 *
 * The container event services connect for real (gRPC) to the endpoint set with
 * fake_host_set_runtime_endpoint(), normally a cri-sim instance.
 */
#pragma once

#include <pleg/pleg-plugin.h>

G_BEGIN_DECLS

/**
 * FakeHost:
 *
 * A plugin host for one plugin at a time, without the Generic PLEG.  Installed in
 * libpleg-harness (`#include <pleg/harness/fake-host.h>`, pkg-config libpleg-harness).
 */
typedef struct _FakeHost FakeHost;

/**
 * fake_host_new:
 *
 * A host with every feature gate off (fake_host_set_gate() turns one on), no runtime endpoint,
 * no plugin and a metrics registry of its own.  Each record the plugin logs is recorded and
 * also passed to GLib's log writer.  The services table, the health checkers (liveness
 * checkers, run as the real host runs them) and the log records' GLIB_DOMAIN and PRIORITY come
 * from the same code as libpleg's host; gates, RequestRelist and the runtime endpoint are the
 * fake's own.
 *
 * Returns: (transfer full): the host.  Thread safety: create, start and free it on one thread,
 *   the one that iterates its context (the "test thread").
 */
FakeHost *fake_host_new(void);

/**
 * fake_host_free:
 * @host: (nullable): the host.
 *
 * Stops and frees a plugin still started (fake_host_stop_plugin()), then the host.  NULL-safe.
 */
void fake_host_free(FakeHost *host);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(FakeHost, fake_host_free)

/**
 * fake_host_get_services:
 *
 * Returns: (transfer none): the services table handed to the plugin's init, valid until
 *   fake_host_free(); a test may call its slots itself (check_health(), get_runtime_endpoint()).
 */
const PlegHostServices *fake_host_get_services(FakeHost *host);

/**
 * fake_host_get_context:
 *
 * Returns: (transfer none): the plugin's main context (what services->get_main_context()
 *   returns), iterated by the fake_host_wait*() and fake_host_run_for() calls of the test thread.
 */
GMainContext *fake_host_get_context(FakeHost *host);

/**
 * fake_host_get_metrics:
 *
 * Returns: (transfer none): the registry the plugin's metric_register() fills; render it with
 *   pleg_metrics_registry_expose().
 */
PlegMetricsRegistry *fake_host_get_metrics(FakeHost *host);

/**
 * fake_host_set_gate:
 * @gate: a feature gate name as kubelet spells it (e.g. "EventedPLEG").
 *
 * What services->feature_enabled() answers for @gate from now on.  Thread safety: any thread.
 */
void fake_host_set_gate(FakeHost *host, const char *gate, gboolean enabled);

/**
 * fake_host_set_runtime_endpoint:
 * @endpoint: a CRI endpoint, "unix:///path" (normally a #CriSim's socket).
 *
 * What services->get_runtime_endpoint() returns, and where container_events_open() connects
 * (real gRPC).  Set it before starting a plugin that reads container events.
 */
void fake_host_set_runtime_endpoint(FakeHost *host, const char *endpoint);

/**
 * fake_host_set_request_relist_result:
 * @result: 0 queued, 1 coalesced, 2 dropped.
 *
 * What services->request_relist() returns from now on (default 0).  Thread safety: any thread.
 */
void fake_host_set_request_relist_result(FakeHost *host, int result);

/**
 * fake_host_start_plugin:
 * @descriptor: (transfer none): the plugin's pleg_plugin_descriptor, e.g. from g_module_symbol()
 *   on the built module; must stay valid (keep the module resident).
 * @error: the plugin's init or start error.
 *
 * Runs @descriptor's init and start with this host's services on the calling thread, with the
 * plugin context pushed as its thread-default, as the real host does in the plugin's thread
 * (minus the file checks of the loader).  A failed start is followed by stop and free, as in the
 * real host.  One plugin at a time.
 *
 * Returns: whether init and start succeeded.
 */
gboolean fake_host_start_plugin(FakeHost *host, const PlegPluginDescriptor *descriptor,
                                GError **error);

/**
 * fake_host_stop_plugin:
 *
 * Runs the plugin's stop and free, as the real host does.  Health checkers the plugin did not
 * remove stay listed (fake_host_get_health_checker_names() shows the leak).  Idempotent; nothing
 * happens when no plugin is started.
 */
void fake_host_stop_plugin(FakeHost *host);

/**
 * FakeRelistCall:
 * @pod_uid: the pod the plugin asked a relist for.
 * @source: the relist source it gave.
 * @monotonic_usec: g_get_monotonic_time() at the call.
 *
 * One recorded services->request_relist() call.
 */
typedef struct {
    char *pod_uid;
    PlegPluginRelistSource source;
    gint64 monotonic_usec;
} FakeRelistCall;

/** fake_host_get_relist_count: Returns: request_relist() calls recorded so far.  Any thread. */
guint fake_host_get_relist_count(FakeHost *host);

/**
 * fake_host_get_relist_calls:
 *
 * Returns: (transfer full) (element-type FakeRelistCall): a copy of the recorded calls in call
 *   order; freeing the array frees them.  Thread safety: any thread.
 */
GPtrArray *fake_host_get_relist_calls(FakeHost *host);

/** fake_host_clear_relist_calls: Forgets the recorded request_relist() calls.  Any thread. */
void fake_host_clear_relist_calls(FakeHost *host);

/** fake_host_get_log_count: Returns: log records received from the plugin so far.  Any thread. */
guint fake_host_get_log_count(FakeHost *host);

/**
 * fake_host_get_logs:
 *
 * The plugin's structured log records (services->log()), each a #GHashTable of field name to
 * string value: MESSAGE, PRIORITY (syslog digits, "6" for info), GLIB_DOMAIN ("pleg-NAME", added
 * like the real host does) and the plugin's own fields.
 *
 * Returns: (transfer full) (element-type GHashTable): a copy, in order.  Thread safety: any
 *   thread.
 */
GPtrArray *fake_host_get_logs(FakeHost *host);

/**
 * fake_host_count_logs:
 * @field: a field name, e.g. "PRIORITY".
 * @value: the value it must have, e.g. "4".
 *
 * Returns: the number of records whose @field equals @value.  Thread safety: any thread.
 */
guint fake_host_count_logs(FakeHost *host, const char *field, const char *value);

/** fake_host_clear_logs: Forgets the recorded log records.  Any thread. */
void fake_host_clear_logs(FakeHost *host);

/**
 * fake_host_get_status:
 * @ret_state: (out) (optional) (transfer full): the state word the plugin last gave to
 *   services->set_status() (ABI 1.2), e.g. "connected".
 * @ret_message: (out) (optional) (transfer full): the message that came with it, "" for none.
 * @ret_since_unix_usec: (out) (optional): when the state last changed, wall clock
 *   (g_get_real_time(), microseconds since the Unix epoch): a set_status with the same state
 *   keeps it.
 *
 * What the plugin says of itself, kept as the real host keeps it (the same code): an invalid
 * state is ignored, and the status goes once fake_host_stop_plugin() ran the plugin's free.
 *
 * Returns: whether the plugin has a status; the out parameters are untouched when not.
 *   Thread safety: any thread.
 */
gboolean fake_host_get_status(FakeHost *host, char **ret_state, char **ret_message,
                              gint64 *ret_since_unix_usec);

/**
 * fake_host_wait_status:
 * @state: the state word to wait for.
 *
 * fake_host_wait() until the plugin's status has @state.
 *
 * Returns: whether it had, before @timeout_usec passed.
 */
gboolean fake_host_wait_status(FakeHost *host, const char *state, gint64 timeout_usec);

/**
 * fake_host_get_health_checker_names:
 *
 * Returns: (transfer full): the names of the health checkers the plugin has registered, in
 *   order, comma-separated ("a,b"); "" when none.
 */
char *fake_host_get_health_checker_names(FakeHost *host);

/**
 * fake_host_wait:
 * @func: the condition, called on the test thread between iterations.
 * @timeout_usec: the deadline, in microseconds from now.
 *
 * Iterates the plugin context until @func returns %TRUE or @timeout_usec passes: plugin
 * callbacks run on the test thread, deterministically, and a test waits on a condition instead
 * of sleeping.
 *
 * Returns: the last result of @func.
 */
gboolean fake_host_wait(FakeHost *host, gboolean (*func)(gpointer data), gpointer data,
                        gint64 timeout_usec);

/**
 * fake_host_wait_relist_count:
 * @count: how many request_relist() calls to wait for.
 *
 * fake_host_wait() until at least @count calls were recorded.
 *
 * Returns: whether they were, before @timeout_usec passed.
 */
gboolean fake_host_wait_relist_count(FakeHost *host, guint count, gint64 timeout_usec);

/**
 * fake_host_run_for:
 * @usec: wall time, in microseconds.
 *
 * Iterates the plugin context for @usec, to assert that nothing happens meanwhile.
 */
void fake_host_run_for(FakeHost *host, gint64 usec);

G_END_DECLS
