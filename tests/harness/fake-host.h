/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A fake plugin host for testing one plugin without the Generic PLEG (STYLE.md: "a fake host
 * that records request_relist calls").  It hands out a real #PlegHostServices table whose
 * services record what the plugin does.
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

typedef struct _FakeHost FakeHost;

FakeHost *fake_host_new(void);
/* Stops and frees a plugin still started, then the host.  NULL-safe. */
void fake_host_free(FakeHost *host);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(FakeHost, fake_host_free)

/* (transfer none) valid until fake_host_free(). */
const PlegHostServices *fake_host_get_services(FakeHost *host);
GMainContext *fake_host_get_context(FakeHost *host);
PlegMetricsRegistry *fake_host_get_metrics(FakeHost *host);

void fake_host_set_gate(FakeHost *host, const char *gate, gboolean enabled);
void fake_host_set_runtime_endpoint(FakeHost *host, const char *endpoint);
/* Value request_relist returns from now on (0 queued, 1 coalesced, 2 dropped). */
void fake_host_set_request_relist_result(FakeHost *host, int result);

/* Runs @descriptor's init and start with this host's services (as the real host does, minus
 * file loading).  fake_host_stop_plugin() runs stop and free; idempotent. */
gboolean fake_host_start_plugin(FakeHost *host, const PlegPluginDescriptor *descriptor,
                                GError **error);
void fake_host_stop_plugin(FakeHost *host);

/* Recorded request_relist calls. */
typedef struct {
    char *pod_uid;
    PlegPluginRelistSource source;
    gint64 monotonic_usec;
} FakeRelistCall;

guint fake_host_get_relist_count(FakeHost *host);
/* (transfer full) (element-type FakeRelistCall) a copy, in call order. */
GPtrArray *fake_host_get_relist_calls(FakeHost *host);
void fake_host_clear_relist_calls(FakeHost *host);

/* Recorded structured log records: each a GHashTable of field name -> string value (MESSAGE,
 * PRIORITY, GLIB_DOMAIN, and the plugin's own fields). */
guint fake_host_get_log_count(FakeHost *host);
/* (transfer full) (element-type GHashTable) a copy, in order. */
GPtrArray *fake_host_get_logs(FakeHost *host);
/* Number of records whose @field equals @value. */
guint fake_host_count_logs(FakeHost *host, const char *field, const char *value);
void fake_host_clear_logs(FakeHost *host);

/* Health checkers the plugin registered, by name in order, comma-separated ("a,b"); "" when
 * none.  (transfer full) */
char *fake_host_get_health_checker_names(FakeHost *host);

/* Iterate the plugin context until @func returns TRUE or @timeout_usec passes; returns the last
 * result of @func.  For waiting on conditions without fixed sleeps. */
gboolean fake_host_wait(FakeHost *host, gboolean (*func)(gpointer data), gpointer data,
                        gint64 timeout_usec);
gboolean fake_host_wait_relist_count(FakeHost *host, guint count, gint64 timeout_usec);
/* Iterate the plugin context for @usec of wall time (for asserting that nothing happens). */
void fake_host_run_for(FakeHost *host, gint64 usec);

G_END_DECLS
