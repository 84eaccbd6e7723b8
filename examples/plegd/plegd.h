/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd internals: the pieces main.c wires together.  Everything here runs in the program's
 * main context (the default one, owned by main()).
 */
#pragma once

#include <gio/gio.h>
#include <stdio.h>
#include <pleg/pleg.h>
#include <pleg/pleg-host.h>

G_BEGIN_DECLS

/* output.c: one JSON object per PodLifecycleEvent. */

/**
 * plegd_event_to_json:
 *
 * Returns: (transfer full): @event as a one-line JSON object, without the trailing newline.
 */
char *plegd_event_to_json(const PlegPodLifecycleEvent *event);

/**
 * plegd_write_line:
 *
 * Writes @line and a newline to @stream and flushes it.  On failure @error is a #G_IO_ERROR
 * from errno (%G_IO_ERROR_BROKEN_PIPE when the reader went away).
 */
gboolean plegd_write_line(FILE *stream, const char *line, GError **error);

/* http.c: /metrics and /healthz. */

/**
 * plegd_parse_bind_address:
 * @text: "HOST:PORT" with HOST an IPv4 literal, or "[IPV6]:PORT"; PORT 0 picks a free port.
 * @ret_address: (out) (transfer full): the socket address; untouched on failure.
 * @error: %G_OPTION_ERROR_BAD_VALUE saying what is wrong (the caller names @text).
 */
gboolean plegd_parse_bind_address(const char *text, GInetSocketAddress **ret_address,
                                  GError **error);

typedef struct _PlegdHttp PlegdHttp;

/**
 * plegd_http_new:
 * @host: (transfer none): the Generic PLEG's health, then the host's health checkers answer
 *   /healthz (500 names the failing checker and says why); its metrics registry is rendered
 *   on /metrics.  Must outlive the server.
 */
PlegdHttp *plegd_http_new(PlegHost *host);
void plegd_http_free(PlegdHttp *http);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegdHttp, plegd_http_free)

/**
 * plegd_http_listen:
 * @ret_url: (out) (transfer full) (optional): "http://HOST:PORT" with the port actually bound.
 *
 * Listens on @address in the thread-default main context.  The error names the address.
 */
gboolean plegd_http_listen(PlegdHttp *http, GInetSocketAddress *address, char **ret_url,
                           GError **error);

/* relist-monitor.c: readiness, STATUS= and rate-limited relist failure logs. */

/**
 * PlegdNotifyFunc:
 * @state: sd_notify(3) assignments, newline-separated.
 *
 * How the monitor tells the service manager; plegd uses sd_notify(), tests record.
 */
typedef void (*PlegdNotifyFunc)(const char *state, gpointer user_data);

/* How often a relist failure that keeps repeating is logged again. */
#define PLEGD_FAILURE_LOG_INTERVAL_USEC (60 * G_USEC_PER_SEC)

typedef struct _PlegdRelistMonitor PlegdRelistMonitor;

/**
 * plegd_relist_monitor_new:
 * @endpoint: the CRI endpoint, named in failure logs when the error does not name it.
 * @notify: (nullable): %NULL sends to the service manager with sd_notify().
 */
PlegdRelistMonitor *plegd_relist_monitor_new(const char *endpoint, PlegdNotifyFunc notify,
                                             gpointer notify_data);
void plegd_relist_monitor_free(PlegdRelistMonitor *monitor);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegdRelistMonitor, plegd_relist_monitor_free)

/**
 * plegd_relist_monitor_update:
 * @error: (nullable): why the global relist failed, %NULL on success.
 * @n_pods: pods in the pod cache after a successful relist.
 * @now_usec: monotonic time, for rate limiting.
 *
 * Sends READY=1 after the first success and STATUS= whenever the status text changes; logs the
 * first failure, a changed error, a repeated one at most every
 * %PLEGD_FAILURE_LOG_INTERVAL_USEC with the count since the last log, and recovery.
 */
void plegd_relist_monitor_update(PlegdRelistMonitor *monitor, const GError *error, guint n_pods,
                                 gint64 now_usec);

/** Sends STOPPING=1 and a final STATUS=. */
void plegd_relist_monitor_stopping(PlegdRelistMonitor *monitor);

/** Returns: whether READY=1 was sent. */
gboolean plegd_relist_monitor_is_ready(PlegdRelistMonitor *monitor);

/* plugins.c: what plegd says about each plugin at start. */

/**
 * plegd_describe_plugin:
 *
 * Returns: (transfer full): "running", "disabled (feature gate EventedPLEG off)",
 *   "disabled (--disable-plugins)", "failed: <reason>" or "stopped".
 */
char *plegd_describe_plugin(const PlegPluginInfo *info);

G_END_DECLS
