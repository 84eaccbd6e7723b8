/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd internals: the pieces main.c wires together.  Everything here runs in the program's
 * main context (the default one, owned by main()).
 */
#pragma once

#include <gio/gio.h>
#include <pleg/pleg.h>
#include <pleg/pleg-host.h>

G_BEGIN_DECLS

/* options.c: the command line and the --config key file. */

/* The --config group of plegd's own settings (the other is [FeatureGates]). */
#define PLEGD_CONFIG_GROUP "plegd"

/**
 * PlegdOptions:
 * @endpoint: the CRI endpoint, from the command line, the file or the build-time default.
 * @endpoint_origin: (nullable): the --config file @endpoint came from; %NULL: command line
 *   or default.
 * @metrics_address: (nullable): where to serve HTTP; %NULL: no HTTP server.
 * @plugin_dir: (nullable): %NULL: libpleg's plugin directory.
 * @version: --version was given; nothing else is set.
 * @http_idle_timeout_usec: test hook, 0: %PLEGD_HTTP_IDLE_TIMEOUT_USEC.
 * @stdout_max_backlog: test hook, 0: %PLEGD_OUTPUT_MAX_BACKLOG.
 *
 * What plegd runs with.  Durations are in microseconds.
 */
typedef struct {
    char *endpoint;
    char *endpoint_origin;
    gint64 runtime_request_timeout_usec;
    gint64 relist_period_usec;
    gint64 relist_threshold_usec;
    GInetSocketAddress *metrics_address;
    PlegFeatureGates *feature_gates;
    char *plugin_dir;
    GStrv disabled_plugins;
    GStrv required_plugins;
    gboolean version;
    gint64 http_idle_timeout_usec;
    guint64 stdout_max_backlog;
} PlegdOptions;

/**
 * plegd_options_parse:
 * @argc: (inout): as main() got it; the options parsed are removed.
 * @argv: (inout): likewise.
 * @ret_options: (out) (transfer full): the options; untouched on failure.  Clear with
 *   plegd_options_clear().
 * @error: %G_OPTION_ERROR saying which flag or which line of which --config file is wrong,
 *   in the words plegd prints.
 *
 * Parses plegd's flags and the --config file they name (the command line wins over the file;
 * --feature-gates applies after [FeatureGates]).  --help prints and exits, as GOption does.
 */
gboolean plegd_options_parse(int *argc, char ***argv, PlegdOptions *ret_options, GError **error);

/* Frees what @options holds and zeroes it.  Safe on a zeroed struct. */
void plegd_options_clear(PlegdOptions *options);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(PlegdOptions, plegd_options_clear)

/* output.c: one JSON object per PodLifecycleEvent, written by a thread of its own. */

/**
 * plegd_event_to_json:
 *
 * Returns: (transfer full): @event as a one-line JSON object, without the trailing newline.
 */
char *plegd_event_to_json(const PlegPodLifecycleEvent *event);

/* Bytes of event lines that may wait for a stalled reader of stdout before plegd gives up. */
#define PLEGD_OUTPUT_MAX_BACKLOG (64 * 1024 * 1024)
/* A backlog above max / PLEGD_OUTPUT_WARN_DIVISOR is logged (at most once a
 * %PLEGD_FAILURE_LOG_INTERVAL_USEC). */
#define PLEGD_OUTPUT_WARN_DIVISOR 8

/**
 * PlegdOutputErrorFunc:
 * @error: why a write failed (%G_IO_ERROR_BROKEN_PIPE when the reader went away).
 *
 * Runs in the context given to plegd_output_new(), once; nothing is written after it.
 */
typedef void (*PlegdOutputErrorFunc)(const GError *error, gpointer user_data);

typedef struct _PlegdOutput PlegdOutput;

/**
 * plegd_output_new:
 * @fd: where lines go; not closed.  May be blocking: only the writer thread ever waits on it.
 * @max_backlog: bytes that may wait to be written; plegd_output_write_line() fails beyond.
 * @context: (nullable): where @error_func runs; %NULL is the default context.
 *
 * Starts the writer thread.
 */
PlegdOutput *plegd_output_new(int fd, gsize max_backlog, GMainContext *context,
                              PlegdOutputErrorFunc error_func, gpointer user_data);

/**
 * plegd_output_free:
 *
 * Drops what was not written yet and stops the writer thread; a writer stuck in write(2) is
 * left behind (detached), never waited for.  NULL-safe.
 */
void plegd_output_free(PlegdOutput *output);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegdOutput, plegd_output_free)

/**
 * plegd_output_write_line:
 *
 * Queues @line and a newline; never blocks.  After a write error lines are dropped (the error
 * went to the #PlegdOutputErrorFunc).  Logs when the backlog passes the warning mark.
 *
 * Returns: %FALSE with %G_IO_ERROR_NO_SPACE when the backlog would pass its maximum (the line
 *   is dropped).
 */
gboolean plegd_output_write_line(PlegdOutput *output, const char *line, GError **error);

/** Returns: bytes queued and not written yet. */
gsize plegd_output_get_backlog(PlegdOutput *output);

/**
 * plegd_output_flush:
 * @timeout_usec: how long to wait at most.
 *
 * Waits until everything queued was written, a write failed or @timeout_usec passed.
 *
 * Returns: whether everything was written.
 */
gboolean plegd_output_flush(PlegdOutput *output, gint64 timeout_usec);

/* http.c: /metrics and /healthz. */

/**
 * plegd_parse_bind_address:
 * @text: "HOST:PORT" with HOST an IPv4 literal, or "[IPV6]:PORT"; PORT 0 picks a free port.
 * @ret_address: (out) (transfer full): the socket address; untouched on failure.
 * @error: %G_OPTION_ERROR_BAD_VALUE saying what is wrong (the caller names @text).
 */
gboolean plegd_parse_bind_address(const char *text, GInetSocketAddress **ret_address,
                                  GError **error);

/* Connections served at once; a new one beyond closes the longest idle one. */
#define PLEGD_HTTP_MAX_CONNECTIONS 64
/* A connection without a complete request, or idle between requests, for this long is closed. */
#define PLEGD_HTTP_IDLE_TIMEOUT_USEC (10 * G_USEC_PER_SEC)
/* plegd serves GET and HEAD only: a larger request body is refused (413) without reading it. */
#define PLEGD_HTTP_MAX_BODY (64 * 1024)

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
 * plegd_http_set_idle_timeout:
 * @timeout_usec: replaces %PLEGD_HTTP_IDLE_TIMEOUT_USEC (a test hook); call before listening.
 */
void plegd_http_set_idle_timeout(PlegdHttp *http, gint64 timeout_usec);

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
 * How the monitor tells the service manager; plegd sends to $NOTIFY_SOCKET without blocking
 * (plegd_notify_nonblocking()), tests record.
 *
 * Returns: %FALSE when the message could not be sent now and should be sent again later (the
 *   socket's queue is full); %TRUE when it was sent, or never can be (no socket, an error).
 */
typedef gboolean (*PlegdNotifyFunc)(const char *state, gpointer user_data);

/**
 * plegd_notify_nonblocking:
 * @notify_socket: (nullable): the value of $NOTIFY_SOCKET: a path, or "@name" for the abstract
 *   namespace.
 * @state: the datagram.
 *
 * sd_notify(3) without its one flaw for plegd: a service manager that does not drain its
 * socket blocks sd_notify(), and with it plegd's main thread.  This sends with MSG_DONTWAIT.
 *
 * Returns: 1 sent, 0 no @notify_socket, -EAGAIN the socket's queue is full, else -errno.
 */
int plegd_notify_nonblocking(const char *notify_socket, const char *state);

/* How often a relist failure that keeps repeating is logged again. */
#define PLEGD_FAILURE_LOG_INTERVAL_USEC (60 * G_USEC_PER_SEC)

typedef struct _PlegdRelistMonitor PlegdRelistMonitor;

/**
 * plegd_relist_monitor_new:
 * @endpoint: the CRI endpoint, named in failure logs when the error does not name it.
 * @notify: (nullable): %NULL sends to $NOTIFY_SOCKET with plegd_notify_nonblocking() (and
 *   logs once when the service manager does not keep up).
 *
 * What @notify could not send (READY=1, a status) is sent with the next update.
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
