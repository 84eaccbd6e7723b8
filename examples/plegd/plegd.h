/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd internals: the pieces main.c wires together.  Everything here runs in the program's
 * main context (the default one, owned by main()).
 */
#pragma once

#include <gio/gio.h>
#include <libsoup/soup.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <pleg/pleg.h>
#include <pleg/pleg-host.h>

G_BEGIN_DECLS

/* options.c: the command line and the --config key file. */

/* The --config group of plegd's own settings (the other is [FeatureGates]). */
#define PLEGD_CONFIG_GROUP "plegd"

/**
 * PlegdEventsJournal:
 * @PLEGD_EVENTS_JOURNAL_AUTO: when plegd runs as a systemd service (`$INVOCATION_ID` is set).
 * @PLEGD_EVENTS_JOURNAL_YES: always.
 * @PLEGD_EVENTS_JOURNAL_NO: never.
 *
 * Whether each event goes to the systemd journal too: --events-journal.
 */
typedef enum {
    PLEGD_EVENTS_JOURNAL_AUTO,
    PLEGD_EVENTS_JOURNAL_YES,
    PLEGD_EVENTS_JOURNAL_NO,
} PlegdEventsJournal;

/**
 * PlegdLogFormat:
 * @PLEGD_LOG_FORMAT_TEXT: one line per record: an RFC 3339 time with microseconds and the
 *   local zone's offset, a level word, the domain, the message, the record's fields as
 *   key=value.
 * @PLEGD_LOG_FORMAT_JSON: one JSON object per record, with kubelet's keys (ts, msg, v, ...).
 *
 * How log records are written to standard error: --logging-format (plegd_log_format_record()).
 */
typedef enum {
    PLEGD_LOG_FORMAT_TEXT,
    PLEGD_LOG_FORMAT_JSON,
} PlegdLogFormat;

/**
 * PlegdTcpEvents:
 * @PLEGD_TCP_EVENTS_NO: /events, /pods and /status over TCP answer 403 with a line naming the
 *   socket.
 * @PLEGD_TCP_EVENTS_TLS: served over TLS to a client whose certificate verified against
 *   --client-ca-file; 403 without a client certificate.
 * @PLEGD_TCP_EVENTS_LOOPBACK_UNAUTHENTICATED: served to anyone who reaches the loopback address
 *   (any local user, any host-network pod): options.c makes sure the address is a loopback one.
 *
 * Who may read /events, /pods and /status over TCP: --serve-events-over-tcp.  TCP always serves /metrics,
 * /livez, /readyz and /healthz, what scrapers and probes need.
 */
typedef enum {
    PLEGD_TCP_EVENTS_NO,
    PLEGD_TCP_EVENTS_TLS,
    PLEGD_TCP_EVENTS_LOOPBACK_UNAUTHENTICATED,
} PlegdTcpEvents;

/**
 * PlegdOptions:
 * @endpoint: the CRI endpoint, from the command line, the file or the build-time default.
 * @endpoint_origin: (nullable): the --config file @endpoint came from; %NULL: command line
 *   or default.
 * @metrics_address: (nullable): where to serve HTTP; %NULL: no HTTP server.
 * @feature_gates: the gates, the plugins' declared gates registered before the file's
 *   [FeatureGates] and --feature-gates were applied.
 * @plugin_dir: (nullable): %NULL: the default, plegd_default_plugin_dir().
 * @plugin_dir_origin: (nullable): for the log: "--plugin-dir" or the file it came from.
 * @events_ring_size: events kept for GET /events?since=SEQ.
 * @events_max_clients: GET /events streams served at once.
 * @max_status_calls_in_flight: #PlegGenericConfig.max_status_calls_in_flight.
 * @version: --version was given; nothing else is set.
 * @http_idle_timeout_usec: test hook, 0: %PLEGD_HTTP_IDLE_TIMEOUT_USEC.
 * @stdout_max_backlog: test hook, 0: %PLEGD_OUTPUT_MAX_BACKLOG.
 * @events_journal: --events-journal.
 * @journal_max_queue: test hook, 0: %PLEGD_JOURNAL_MAX_QUEUE.
 * @events_first_seq: test hook, 0: a fresh history's first seq is the wall clock in
 *   microseconds.
 * @state_dir: (nullable): --state-dir, where the events and the PLEG's records are kept across
 *   restarts; %NULL: nowhere.
 * @logging_format: --logging-format.
 * @verbosity: --v, kubelet's log verbosity (see plegd_log_record_verbosity()).
 * @socket_path: (nullable): --socket, the unix socket of the whole API; %NULL: none.
 * @socket_gid: --socket-group as a group id, -1: plegd's own group.
 * @tcp_events: --serve-events-over-tcp.
 * @tls_cert_file: (nullable): --tls-cert-file; set with @tls_key_file, or neither.
 * @tls_key_file: (nullable): --tls-private-key-file.
 * @client_ca_file: (nullable): --client-ca-file; only with @tls_cert_file.
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
    char *plugin_dir_origin;
    GStrv disabled_plugins;
    GStrv required_plugins;
    guint events_ring_size;
    guint events_max_clients;
    guint max_status_calls_in_flight;
    gboolean version;
    gint64 http_idle_timeout_usec;
    guint64 stdout_max_backlog;
    PlegdEventsJournal events_journal;
    guint journal_max_queue;
    char *state_dir;
    guint64 events_first_seq;
    PlegdLogFormat logging_format;
    guint verbosity;
    char *socket_path;
    gint64 socket_gid;
    PlegdTcpEvents tcp_events;
    char *tls_cert_file;
    char *tls_key_file;
    char *client_ca_file;
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

/**
 * plegd_read_small_file:
 * @what: what the file is, for the error ("configuration file").
 * @max_bytes: a larger file is refused before it is read.
 * @ret_contents: (out) (transfer full): its bytes, NUL-terminated.
 * @ret_st: (out) (optional): the fstat() of what was read.
 * @error: %G_FILE_ERROR: the errno, "not a regular file" or "N bytes, more than a @what's M".
 *
 * Reads @path whole when it is a regular file of at most @max_bytes (the --config file, the TLS
 * files).  Never blocks on a FIFO or a device.
 */
gboolean plegd_read_small_file(const char *path, const char *what, gsize max_bytes,
                               char **ret_contents, gsize *ret_length, struct stat *ret_st,
                               GError **error);

/* output.c: one JSON object per PodLifecycleEvent, written by a thread of its own. */

/**
 * plegd_event_to_json:
 *
 * Returns: (transfer full): @event as a one-line JSON object, without the trailing newline.
 */
char *plegd_event_to_json(const PlegPodLifecycleEvent *event);

/**
 * plegd_event_to_json_with_seq:
 * @seq: the event's place in plegd's stream (1, 2, ...), the first member of the object.
 *
 * Returns: (transfer full): like plegd_event_to_json(), with `"seq":@seq` in front.
 */
char *plegd_event_to_json_with_seq(const PlegPodLifecycleEvent *event, guint64 seq);

/**
 * plegd_event_to_line:
 * @seq: as for plegd_event_to_json_with_seq().
 *
 * Returns: (transfer full): plegd_event_to_json_with_seq()'s text and a newline, in one buffer
 *   that stdout and the /events ring share.
 */
GBytes *plegd_event_to_line(const PlegPodLifecycleEvent *event, guint64 seq);

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

/**
 * plegd_output_write_bytes:
 * @line: (transfer none): a line with its newline; the writer keeps a reference, no copy.
 *
 * plegd_output_write_line() of a line that already ends in a newline.
 */
gboolean plegd_output_write_bytes(PlegdOutput *output, GBytes *line, GError **error);

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

/* Room for a gint64 in decimal, sign included. */
#define PLEGD_DECIMAL_SIZE 24

/**
 * plegd_int64_to_decimal:
 * @buf: where the text is written, at its end.
 *
 * Returns: where the text starts in @buf; it runs to @buf + %PLEGD_DECIMAL_SIZE, without a NUL.
 */
const char *plegd_int64_to_decimal(gint64 value, char buf[PLEGD_DECIMAL_SIZE]);

/* journal.c: every published event as a structured entry of the systemd journal. */

/**
 * plegd_events_journal_wanted:
 * @invocation_id: (nullable): the value of `$INVOCATION_ID`, which systemd sets for a service.
 *
 * Returns: whether @mode sends the events to the journal.
 */
gboolean plegd_events_journal_wanted(PlegdEventsJournal mode, const char *invocation_id);

/* Entries that may wait for journald; an event beyond is dropped and counted. */
#define PLEGD_JOURNAL_MAX_QUEUE 10000

/**
 * PlegdJournalEntry:
 *
 * One event's journal fields, "NAME=value" each, in this order and each only when its value is
 * known (a %NULL or empty string is not): MESSAGE (the human line, with the runtime's text
 * escaped as in logs: "ContainerDied shop/web container nginx exited 137 (OOMKilled)", the pod
 * UID when the pod's names are unknown, the container ID when its name is), MESSAGE_ID (one
 * per event type), PRIORITY=6, SYSLOG_IDENTIFIER=plegd, PLEG_SEQ, PLEG_TYPE, POD_NAMESPACE,
 * POD_NAME, POD_UID, CONTAINER_NAME (never for a sandbox), CONTAINER_ID, PLEG_SANDBOX
 * (true/false), PLEG_ATTEMPT and PLEG_IMAGE (these five for container events, not PodSync),
 * PLEG_EXIT_CODE, PLEG_REASON, PLEG_FINISHED_AT (a ContainerDied's exit), PLEG_STARTED_AT (a
 * ContainerStarted's start), PLEG_RELIST_SOURCE, PLEG_INITIAL (true, only for an event of the
 * state found at a fresh start), PLEG_TIME.  Times are RFC 3339, as in the JSON
 * line; the other values are the runtime's bytes as they are (a newline included:
 * sd_journal_sendv() sends such a field in journald's binary-safe form).
 */
typedef struct _PlegdJournalEntry PlegdJournalEntry;

/**
 * plegd_journal_entry_new:
 * @seq: the event's seq in plegd's stream.
 *
 * Returns: (transfer full): @event's fields; @event is not kept.
 */
PlegdJournalEntry *plegd_journal_entry_new(const PlegPodLifecycleEvent *event, guint64 seq);
/* NULL-safe. */
void plegd_journal_entry_free(PlegdJournalEntry *entry);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegdJournalEntry, plegd_journal_entry_free)

/**
 * plegd_journal_entry_get_fields:
 * @ret_n_fields: (out): how many.
 *
 * Returns: (transfer none) (array length=ret_n_fields): the fields, for sd_journal_sendv().
 */
const struct iovec *plegd_journal_entry_get_fields(const PlegdJournalEntry *entry,
                                                   int *ret_n_fields);

/**
 * PlegdJournalSendFunc:
 *
 * Sends one entry; runs in the journal's sender thread, and may block.
 *
 * Returns: 0 or a positive value when sent, else -errno: -ENOENT or -ECONNREFUSED when no
 *   journald listens, anything else a failure.
 */
typedef int (*PlegdJournalSendFunc)(const struct iovec *fields, int n_fields, gpointer user_data);

/**
 * plegd_journal_send:
 *
 * The #PlegdJournalSendFunc plegd uses: sd_journal_sendv(), except that a missing journal socket
 * is -ENOENT (libsystemd answers 0, "sent", for it).  Blocks while journald does not read.
 */
int plegd_journal_send(const struct iovec *fields, int n_fields, gpointer user_data);

typedef struct _PlegdJournal PlegdJournal;

/**
 * plegd_journal_new:
 * @max_queue: entries that may wait to be sent, at least 1 (%PLEGD_JOURNAL_MAX_QUEUE).
 * @metrics: (transfer none): where plegd_journal_events_total and
 *   plegd_journal_events_dropped_total{reason} (queue_full, no_journal, error) are registered;
 *   a reference is kept.
 * @send: (nullable): %NULL: plegd_journal_send().
 *
 * Starts the sender thread.  A dropped event is counted, and logged: the first, then at most
 * one line every %PLEGD_FAILURE_LOG_INTERVAL_USEC with the count since the last, and a line when
 * sending works again.  plegd goes on whatever journald does.
 */
PlegdJournal *plegd_journal_new(guint max_queue, PlegMetricsRegistry *metrics,
                                PlegdJournalSendFunc send, gpointer send_data);

/**
 * plegd_journal_free:
 *
 * Drops what was not sent and stops the sender thread; a sender stuck in sd_journal_sendv() is
 * left behind (detached), never waited for.  NULL-safe.
 */
void plegd_journal_free(PlegdJournal *journal);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegdJournal, plegd_journal_free)

/**
 * plegd_journal_publish:
 * @seq: the seq @event got from plegd_events_publish().
 *
 * Queues @event's entry (plegd_journal_entry_new()); never blocks.  When %max_queue entries
 * wait already, the event is dropped and counted (queue_full).
 *
 * Thread safety: any thread; entries are sent in the order they were queued.
 */
void plegd_journal_publish(PlegdJournal *journal, const PlegPodLifecycleEvent *event, guint64 seq);

/**
 * plegd_journal_flush:
 * @timeout_usec: how long to wait at most.
 *
 * Returns: whether every entry queued was sent or dropped before @timeout_usec passed.
 */
gboolean plegd_journal_flush(PlegdJournal *journal, gint64 timeout_usec);

/** Returns: entries waiting to be sent. */
guint plegd_journal_get_queued(PlegdJournal *journal);

/* http.c: the HTTP server: /metrics, /livez, /healthz, /readyz, /events and /pods. */

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
/* Requests of one kind (/livez and /healthz, or /readyz) that wait for the round under way; one
 * more is answered 503 at once.  Well below PLEGD_HTTP_MAX_CONNECTIONS: requests waiting for a
 * checker that hangs never take the connections /metrics and /events are served on. */
#define PLEGD_HEALTH_MAX_WAITERS 16

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
 * PlegdReadinessInfoFunc:
 *
 * Returns: (transfer full): one line of text saying how a part of plegd fares, for
 *   /readyz?verbose; runs in the server's context.
 */
typedef char *(*PlegdReadinessInfoFunc)(gpointer data);

/**
 * plegd_http_add_readiness_info:
 * @name: the line's name ("state").
 * @data: (transfer none): must outlive @http.
 *
 * Adds a line "[+]@name ok (informational): TEXT" to every /readyz?verbose answer, TEXT from
 * @func: something an operator should see beside readiness that never fails it (a state
 * directory plegd cannot write to).
 */
void plegd_http_add_readiness_info(PlegdHttp *http, const char *name, PlegdReadinessInfoFunc func,
                                   gpointer data);

/**
 * plegd_http_set_idle_timeout:
 * @timeout_usec: replaces %PLEGD_HTTP_IDLE_TIMEOUT_USEC (a test hook); call before listening.
 */
void plegd_http_set_idle_timeout(PlegdHttp *http, gint64 timeout_usec);

/**
 * plegd_http_stop_accepting:
 *
 * The first step of shutting down: closes the listening sockets and answers every health
 * request from now on with 503 "plegd is shutting down", starting no health round, so that no
 * round can start after the host is stopped.  Connections already open (an /events stream
 * ending) are still served until plegd_http_free().  Idempotent.
 */
void plegd_http_stop_accepting(PlegdHttp *http);

/**
 * plegd_http_wait_rounds:
 * @timeout_usec: how long to wait at most, in microseconds (monotonic).
 *
 * Waits for the health rounds' threads to leave the host's checkers.  Call after
 * plegd_http_stop_accepting() and before freeing the host: a round still running after
 * @timeout_usec is in a checker that does not return, and the host must then stay allocated.
 *
 * Returns: whether no round runs any more.
 */
gboolean plegd_http_wait_rounds(PlegdHttp *http, gint64 timeout_usec);

/**
 * plegd_http_get_target:
 * @ret_path: (out) (transfer full): the path the client asked for ("/healthz").
 * @ret_query: (out) (transfer full) (nullable): its query, %NULL when none.
 *
 * What @msg asked for.  libsoup 3.2 builds the URI of an HTTP/1.0 request without a Host header
 * from the whole request target, so its path keeps the query ("/healthz?verbose"); it is split
 * off again here, so every route and parameter reads the same with or without a Host.
 */
void plegd_http_get_target(SoupServerMessage *msg, char **ret_path, char **ret_query);

/**
 * plegd_http_parse_query:
 * @query: (nullable): a query as plegd_http_get_target() gives it; %NULL is an empty one.
 * @error: %G_OPTION_ERROR_BAD_VALUE naming the malformed parameter.
 *
 * Splits @query at '&' into its parameters, in order, a repeated name kept each time (the
 * table of soup_form_decode() keeps only the last, silently).  Each part is form-decoded: '+'
 * is a space, %XX a byte.  A parameter without '=' has the value "" ("?verbose"); empty
 * parameters ("a&&b") are skipped.
 *
 * Returns: (transfer full) (nullable): names and values in turn (name, value, name, value...),
 *   or %NULL with @error set when a part has a bad %-escape or %00, which would cut it short.
 */
GPtrArray *plegd_http_parse_query(const char *query, GError **error);

/**
 * plegd_http_listen:
 * @ret_url: (out) (transfer full) (optional): "http://HOST:PORT" with the port actually bound
 *   ("https://" once plegd_http_set_tls() was called).
 *
 * Listens on @address in the thread-default main context.  The error names the address.
 * What TCP serves is limited: see plegd_http_set_tcp_events().
 */
gboolean plegd_http_listen(PlegdHttp *http, GInetSocketAddress *address, char **ret_url,
                           GError **error);

/* http-listeners.c: the unix socket that serves the whole API, and what TCP serves. */

/* Where plegd serves its whole API by default (--socket), and where plegctl looks. */
#define PLEGD_DEFAULT_SOCKET "/run/plegd/plegd.sock"
/* The socket's mode: its owner (plegd's user, root) and its group (--socket-group) connect. */
#define PLEGD_SOCKET_MODE 0660

/**
 * plegd_http_listen_unix:
 * @path: an absolute path of at most 107 bytes.  Its directory is created (0755) when missing.
 * @gid: the socket's group, or -1 for plegd's own.
 * @error: %G_IO_ERROR naming @path: %G_IO_ERROR_EXISTS when @path is something else than a
 *   socket (never removed), %G_IO_ERROR_ADDRESS_IN_USE when a process listens on it already.
 *
 * Serves the whole API (what TCP serves and /events and /pods) on a unix socket at @path, mode
 * %PLEGD_SOCKET_MODE, owned by plegd's user and @gid.  A socket at @path that nobody listens on
 * (left by a plegd that crashed: connect() is refused) is replaced.  The socket is removed by
 * plegd_http_stop_accepting() when it is still the one plegd made (same inode).  Each
 * connection's peer credentials (SO_PEERCRED) are logged at debug level.
 */
gboolean plegd_http_listen_unix(PlegdHttp *http, const char *path, gint64 gid, GError **error);

/* Call before listening; the default is %PLEGD_TCP_EVENTS_NO. */
void plegd_http_set_tcp_events(PlegdHttp *http, PlegdTcpEvents mode);

/* http-tls.c: TLS on the TCP listener. */

/**
 * plegd_http_set_tls:
 * @cert_file: PEM: the server's certificate, then the chain to its CA if any.
 * @key_file: PEM: its private key (unencrypted).  Refused when others may access it (any of
 *   mode 0007) or when it is owned by another user than root or plegd's, as sshd refuses its
 *   keys; a regular file of at most 1 MiB, as the other two.
 * @client_ca_file: (nullable): PEM: the CAs client certificates must be signed by.  With it a
 *   client certificate is asked for, and one that does not verify (another CA, expired, not
 *   valid yet) fails the handshake; a client without one is served what TCP serves to anyone.
 * @error: %G_FILE_ERROR or %G_TLS_ERROR naming the flag and the file.
 *
 * The TCP listener serves HTTPS only, with GLib's TLS (glib-networking).  Call before
 * plegd_http_listen().  Which paths a client certificate opens: plegd_http_set_tcp_events().
 */
gboolean plegd_http_set_tls(PlegdHttp *http, const char *cert_file, const char *key_file,
                            const char *client_ca_file, GError **error);

/**
 * plegd_http_reload_tls:
 * @error: as plegd_http_set_tls()'s; the files in use are then kept.
 *
 * Reads the three files again (on SIGHUP: a rotated certificate, a CA removed from the CA file).
 * New connections get them; open connections and their streams go on, but one whose client
 * certificate does not verify against the new CA file is closed.  Without TLS, does nothing.
 */
gboolean plegd_http_reload_tls(PlegdHttp *http, GError **error);

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

/* event-filter.c: what GET /events?type=...&namespace=... selects. */

/**
 * PlegdEventKey:
 * @time_ns: #PlegPodLifecycleEvent.time_ns: when libpleg saw the change, Unix ns.
 * @type: the event's #PlegPodLifecycleEventType.
 * @sandbox: #PlegEventDetails.sandbox.
 * @pod_namespace: (nullable): #PlegEventDetails.pod_namespace.
 * @pod_name: (nullable): #PlegEventDetails.pod_name.
 * @pod_uid: (nullable): #PlegPodLifecycleEvent.pod_uid.
 * @container_name: (nullable): #PlegEventDetails.container_name.
 *
 * What the filters of /events look at in an event, copied into one allocation (the strings
 * follow the struct), so that the ring keeps it beside the event's line instead of the event.
 */
typedef struct {
    gint64 time_ns;
    PlegPodLifecycleEventType type;
    gboolean sandbox;
    const char *pod_namespace;
    const char *pod_name;
    const char *pod_uid;
    const char *container_name;
} PlegdEventKey;

/** Returns: (transfer full): @event's key; free with plegd_event_key_free(). */
PlegdEventKey *plegd_event_key_new(const PlegPodLifecycleEvent *event);

/**
 * plegd_event_key_new_full:
 * @pod_namespace: (nullable): copied, as are the other strings.
 *
 * The key of an event known by its values only, such as an event line read back from the state
 * directory: each parameter is the #PlegdEventKey member of the same name.
 *
 * Returns: (transfer full): the key; free with plegd_event_key_free().
 *
 * Thread safety: any thread.
 */
PlegdEventKey *plegd_event_key_new_full(gint64 time_ns, PlegPodLifecycleEventType type,
                                        gboolean sandbox, const char *pod_namespace,
                                        const char *pod_name, const char *pod_uid,
                                        const char *container_name);
/* NULL-safe. */
void plegd_event_key_free(PlegdEventKey *key);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegdEventKey, plegd_event_key_free)

/* A filter value longer than this is refused (Kubernetes names are at most 253 bytes). */
#define PLEGD_EVENTS_FILTER_MAX_VALUE 1024
/* Filter values in one request at most: a client's match costs at most this many compares. */
#define PLEGD_EVENTS_FILTER_MAX_VALUES 64

typedef struct _PlegdEventFilter PlegdEventFilter;

/**
 * plegd_event_filter_new:
 * @now_ns: the wall clock (Unix ns) a duration in since_time or until_time counts back from.
 *
 * A filter that matches every event, until plegd_event_filter_add() narrows it.
 */
PlegdEventFilter *plegd_event_filter_new(gint64 now_ns);
/* NULL-safe. */
void plegd_event_filter_free(PlegdEventFilter *filter);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegdEventFilter, plegd_event_filter_free)

/**
 * plegd_event_filter_add:
 * @name: a query parameter's name: type, namespace, pod, pod_uid, container, sandbox,
 *   since_time or until_time.
 * @value: its value (no NUL: plegd_http_parse_query() refuses %00).
 *
 * Adds one parameter: values of one key are alternatives (OR), keys all apply (AND).  type is
 * ContainerStarted, ContainerDied, ContainerRemoved or PodSync; sandbox true or false;
 * namespace, pod (name), pod_uid and container (name) compare exactly; since_time and
 * until_time (each at most once) as plegd_event_filter_parse_time() reads them.
 *
 * Returns: %FALSE with %G_OPTION_ERROR_UNKNOWN_OPTION for another @name, or
 *   %G_OPTION_ERROR_BAD_VALUE naming @name and saying what it accepts: an unknown type, an empty
 *   value, one longer than %PLEGD_EVENTS_FILTER_MAX_VALUE bytes, more than
 *   %PLEGD_EVENTS_FILTER_MAX_VALUES values, a bad time; values shown are escaped with
 *   pleg_log_text().
 */
gboolean plegd_event_filter_add(PlegdEventFilter *filter, const char *name, const char *value,
                                GError **error);

/* Whether nothing was added: every event matches. */
gboolean plegd_event_filter_is_empty(const PlegdEventFilter *filter);

/**
 * plegd_event_filter_match:
 *
 * Whether the event of @key passes every key given but until_time, which the stream applies
 * (it ends there).  No allocation: a few integer compares and strcmp() per value given.
 */
gboolean plegd_event_filter_match(const PlegdEventFilter *filter, const PlegdEventKey *key);

/* Returns: whether since_time (until_time) was given, and then the time in @ret_ns, Unix ns. */
gboolean plegd_event_filter_get_since_time(const PlegdEventFilter *filter, gint64 *ret_ns);
gboolean plegd_event_filter_get_until_time(const PlegdEventFilter *filter, gint64 *ret_ns);

/**
 * plegd_event_filter_parse_time:
 * @name: the parameter, for the error.
 * @value: an RFC 3339 time with its offset ("2026-12-04T17:00:00.5Z", "...+01:00"; read by
 *   g_date_time_new_from_iso8601(), its fraction to the nanosecond here), or a Go duration
 *   (pleg_duration_parse()) that counts back from @now_ns: "10m" is ten minutes ago, "-5m"
 *   five minutes ahead (docker events --since and --until read durations so).
 * @now_ns: the wall clock, Unix ns.
 * @ret_ns: (out): the time, Unix ns; untouched on failure.
 *
 * Returns: %FALSE with %G_OPTION_ERROR_BAD_VALUE naming @name and saying what is accepted.
 */
gboolean plegd_event_filter_parse_time(const char *name, const char *value, gint64 now_ns,
                                       gint64 *ret_ns, GError **error);

/* event-ring.c: the last event lines, by seq, for GET /events?since=SEQ. */

#define PLEGD_EVENTS_DEFAULT_RING_SIZE 10000
/* --events-ring-size's bounds.  plegd takes the events queued for it (up to its channel's
 * capacity, 1000) in one go, before any client is written to: a smaller ring would cut off
 * clients that keep up. */
#define PLEGD_EVENTS_MIN_RING_SIZE PLEG_DEFAULT_EVENT_CHANNEL_CAPACITY
#define PLEGD_EVENTS_MAX_RING_SIZE 10000000

typedef struct _PlegdEventRing PlegdEventRing;

/**
 * plegd_event_ring_new:
 * @capacity: lines kept, at least 1 (plegd's flag takes %PLEGD_EVENTS_MIN_RING_SIZE to
 *   %PLEGD_EVENTS_MAX_RING_SIZE).
 *
 * An empty ring whose first line gets seq 1 (plegd_event_ring_start() says otherwise).  Not
 * thread-safe: one thread uses it.
 */
PlegdEventRing *plegd_event_ring_new(guint capacity);

/**
 * plegd_event_ring_start:
 * @first_seq: the seq of the first event of plegd's history (at least 1): a cursor before it is
 *   not plegd's (plegd_event_ring_check_since()).
 * @next_seq: the seq the next line gets, at least @first_seq.
 *
 * Places an empty ring in a history: a fresh one (@next_seq = @first_seq), or one resumed from
 * the state directory, whose kept lines are then pushed again in order.
 */
void plegd_event_ring_start(PlegdEventRing *ring, guint64 first_seq, guint64 next_seq);
/* Drops every line: the ring is empty, its next seq unchanged. */
void plegd_event_ring_clear(PlegdEventRing *ring);
/* The history's first seq (1 unless plegd_event_ring_start() said otherwise). */
guint64 plegd_event_ring_get_first_seq(PlegdEventRing *ring);
/* NULL-safe. */
void plegd_event_ring_free(PlegdEventRing *ring);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegdEventRing, plegd_event_ring_free)

guint plegd_event_ring_get_capacity(PlegdEventRing *ring);
/* The seq the next pushed line gets (1 for an empty ring). */
guint64 plegd_event_ring_get_next_seq(PlegdEventRing *ring);
/* The seq of the oldest line kept; equal to the next seq while the ring is empty. */
guint64 plegd_event_ring_get_oldest_seq(PlegdEventRing *ring);

/**
 * plegd_event_ring_push:
 * @line: (transfer none): the line, newline included; the ring keeps a reference.
 * @event: the event of @line; the ring keeps its #PlegdEventKey, for filters.
 * @ret_evicted: (out) (optional): the seq of the line dropped to make room, 0 when none was.
 *
 * Returns: the seq @line got: plegd_event_ring_get_next_seq() before the call.
 */
guint64 plegd_event_ring_push(PlegdEventRing *ring, GBytes *line,
                              const PlegPodLifecycleEvent *event, guint64 *ret_evicted);

/**
 * plegd_event_ring_push_key:
 * @key: (transfer full): the line's key, for a line without its event (one read back from the
 *   state directory).
 *
 * plegd_event_ring_push() with the key made already.
 */
guint64 plegd_event_ring_push_key(PlegdEventRing *ring, GBytes *line, PlegdEventKey *key,
                                  guint64 *ret_evicted);

/**
 * plegd_event_ring_lookup:
 *
 * Returns: (transfer none) (nullable): the line with @seq, %NULL when it was dropped or not
 *   pushed yet.
 */
GBytes *plegd_event_ring_lookup(PlegdEventRing *ring, guint64 seq);

/**
 * plegd_event_ring_lookup_key:
 *
 * Returns: (transfer none) (nullable): the key of the event with @seq, %NULL when it was
 *   dropped or not pushed yet.
 */
const PlegdEventKey *plegd_event_ring_lookup_key(PlegdEventRing *ring, guint64 seq);

/**
 * plegd_event_ring_check_since:
 * @since: the last seq a client saw (0: none, the history from its first seq).
 *
 * Whether every event after @since is still in the ring (or not generated yet), so that a
 * stream resumed after @since misses nothing.
 *
 * Returns: %FALSE with %G_IO_ERROR_NOT_FOUND when @since + 1 was dropped, when @since is
 *   newer than the newest event or older than the history's first seq (a cursor of another
 *   history: plegd's state was lost); the message says which and names the seq it is held
 *   against.
 */
gboolean plegd_event_ring_check_since(PlegdEventRing *ring, guint64 since, GError **error);

/**
 * plegd_event_ring_check_since_time:
 * @since_ns: the time (Unix ns) a client wants the events from, by their #PlegdEventKey.time_ns.
 *
 * Whether the ring holds every event since @since_ns: it does unless it dropped events and its
 * oldest one is later than @since_ns.
 *
 * Returns: %FALSE with %G_IO_ERROR_NOT_FOUND naming @since_ns and the oldest event kept (its
 *   seq and time).
 */
gboolean plegd_event_ring_check_since_time(PlegdEventRing *ring, gint64 since_ns,
                                           GError **error);

/* events-http.c: GET /events, newline-delimited JSON, one subscriber per connection. */

#define PLEGD_EVENTS_DEFAULT_MAX_CLIENTS 128
#define PLEGD_EVENTS_MAX_MAX_CLIENTS     4096
/* --max-status-calls-in-flight: at most this many (each holds a call slot and its answer). */
#define PLEGD_MAX_STATUS_CALLS_IN_FLIGHT_MAX 1024
/* SO_SNDBUF of a stream's socket (the kernel doubles it): bounds what a stalled client holds in
 * the kernel, and how far behind a client may get before the ring is all that keeps its events. */
#define PLEGD_EVENTS_SOCKET_SNDBUF (128 * 1024)
/* A chunk written to a client gathers event lines up to this many bytes. */
#define PLEGD_EVENTS_CHUNK_BYTES (16 * 1024)

typedef struct _PlegdEvents PlegdEvents;

/**
 * plegd_events_new:
 * @ring_size: events kept for ?since= (and the most a client may lag behind).
 * @max_clients: streams served at once; more are answered 503.
 * @metrics: (transfer none): where plegd_events_* metrics are registered.
 *
 * Runs in the thread-default main context of the caller, which must be the one the HTTP server
 * runs in and plegd_events_publish() is called in.
 */
PlegdEvents *plegd_events_new(guint ring_size, guint max_clients, PlegMetricsRegistry *metrics);
/* Ends every stream (the connection closes without an error line).  NULL-safe. */
void plegd_events_free(PlegdEvents *events);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegdEvents, plegd_events_free)

/**
 * plegd_events_end_all:
 *
 * Ends every stream with a last line {"error":"plegd is shutting down","reason":"shutting_down",
 * "next_seq":N}; libsoup writes it while the main context runs.
 */
void plegd_events_end_all(PlegdEvents *events);

/**
 * plegd_events_get_instance:
 *
 * Returns: (transfer none): the instance id (a UUID) of plegd's history of events, sent as the
 *   Plegd-Instance header; a request with instance=ID of another history answers 410.  A
 *   random one, unless plegd_events_start_history() gave the one of a resumed history.
 */
const char *plegd_events_get_instance(PlegdEvents *events);

/**
 * plegd_events_get_seqs:
 * @ret_oldest: (out) (optional): the oldest seq the ring holds (the newest + 1 when it holds
 *   none).
 * @ret_newest: (out) (optional): the newest seq published, the history's first - 1 before any.
 *
 * The seqs of a 410's oldest_seq and newest_seq, and of /status.
 */
void plegd_events_get_seqs(PlegdEvents *events, guint64 *ret_oldest, guint64 *ret_newest);

/**
 * plegd_events_set_cutoff_grace:
 * @grace_usec: how long a client cut off as a slow consumer has to read what was queued for it
 *   (its last events and the error line) before its connection is closed regardless; default
 *   %PLEGD_HTTP_IDLE_TIMEOUT_USEC.
 */
void plegd_events_set_cutoff_grace(PlegdEvents *events, gint64 grace_usec);

/**
 * plegd_events_publish:
 *
 * Gives @event the next seq (plegd_events_take_seq()), keeps its line and its #PlegdEventKey in
 * the ring and queues it
 * for every stream.  A stream whose next unsent event is dropped from the ring by this is cut off
 * as a slow consumer, unless its filter would not have sent that event (it skips it then).
 *
 * @ret_seq: (out) (optional): the seq @event got (for the journal, plegd_journal_publish()).
 *
 * Returns: (transfer full): the event's JSON line with its seq and its newline, the bytes the
 *   ring keeps (for stdout, plegd_output_write_bytes()).
 */
GBytes *plegd_events_publish(PlegdEvents *events, const PlegPodLifecycleEvent *event,
                             guint64 *ret_seq);

/**
 * plegd_events_start_history:
 * @instance: the history's instance id.
 * @first_seq: its first seq: a cursor older is another history's, answered 410.
 * @next_seq: the seq the next event gets.
 *
 * Places @events in a history before any event is published or restored: a fresh one
 * (@next_seq = @first_seq) or one resumed from the state directory, whose kept lines then
 * follow with plegd_events_restore_line().
 */
void plegd_events_start_history(PlegdEvents *events, const char *instance, guint64 first_seq,
                                guint64 next_seq);

/**
 * plegd_events_break_history:
 * @instance: the new history's instance id.
 * @first_seq: its first seq.
 * @renumbered_from: the seq in the old history of the first event now numbered @first_seq:
 *   seqs taken from it on (plegd_events_take_seq()) move to the new history.
 *
 * The state directory could not make events durable (#PlegdStateCommit): ends every stream
 * with a last line {"error":...,"reason":"history_changed","next_seq":N} (the client relists),
 * drops the ring's lines, and continues in the new history.
 */
void plegd_events_break_history(PlegdEvents *events, const char *instance, guint64 first_seq,
                                guint64 renumbered_from);

/**
 * plegd_events_restore_line:
 * @seq: the line's seq: the first call's starts the ring, each later one follows the last.
 * @line: (transfer none): the line as it was published, its newline included.
 * @key: (transfer full): its key.
 *
 * Keeps a line of the resumed history in the ring, for ?since=, before anything is published.
 */
void plegd_events_restore_line(PlegdEvents *events, guint64 seq, GBytes *line,
                               PlegdEventKey *key);

/**
 * plegd_events_take_seq:
 *
 * Gives the next seq to an event that is published later with plegd_events_publish_line(), in
 * the order the seqs were taken (plegd makes an event durable between the two).
 *
 * Returns: the seq.
 */
guint64 plegd_events_take_seq(PlegdEvents *events);

/**
 * plegd_events_publish_line:
 * @seq: the seq taken for @event: the first taken and not yet published.
 * @line: (transfer none): plegd_event_to_line() of @event and @seq; the ring keeps a reference.
 *
 * plegd_events_publish() of an event whose seq and line are made already.
 */
void plegd_events_publish_line(PlegdEvents *events, const PlegPodLifecycleEvent *event,
                               guint64 seq, GBytes *line);

/** Returns: the streams being served. */
guint plegd_events_get_n_clients(PlegdEvents *events);

/**
 * plegd_events_serve:
 * @msg: a GET or HEAD request for /events; its query may hold since=SEQ, instance=ID,
 *   follow=true|false and the filters of plegd_event_filter_add().
 * @socket: (transfer none) (nullable): the connection's socket: the end of the client's side
 *   ends the stream, and a client cut off is closed through it.  libsoup does not know it
 *   for connections handed to it as streams.
 *
 * Answers 400 for a bad value (the message names the parameter and says what it accepts) or an
 * unknown parameter, 410 (JSON with oldest_seq and newest_seq) when the events after `since`,
 * or without `since` those at or after `since_time`, are no longer all kept, or `instance`
 * names another plegd process, 503 when %max_clients streams are served; else 200 with a
 * stream of the lines that pass the filters, each with its global seq (HEAD: the headers only).
 * The stream starts after `since`, else at the ring's oldest event with `since_time` or
 * follow=false, else with the next event.  follow=false ends the body after the events the
 * ring held when the request came; `until_time` sends no later event and ends the body when
 * the wall clock passes it or a later event is published (at once, as a bounded read, when it
 * has passed already).  Every answer carries the Plegd-Instance header.
 *
 * Returns: whether @msg became a stream, which ends when the client goes away, is cut off or
 *   got its bounded read (the message finishes then).
 */
gboolean plegd_events_serve(PlegdEvents *events, SoupServerMessage *msg, GSocket *socket);

/**
 * plegd_http_set_events:
 * @events: (transfer none) (nullable): serves /events; must outlive @http.  Without, /events is
 *   404.
 *
 * Streams leave the %PLEGD_HTTP_MAX_CONNECTIONS pool and its idle timeout once they start.
 */
void plegd_http_set_events(PlegdHttp *http, PlegdEvents *events);

/* status-http.c: GET /status, plegd's health and settings in one JSON document. */

/**
 * PlegdStatusConfig:
 * @runtime_endpoint: (nullable): the CRI endpoint plegd relists.
 * @relist_period_usec: --relist-period.
 * @relist_threshold_usec: --relist-threshold.
 *
 * What /status says of plegd's settings (the rest it reads from the host when asked).
 */
typedef struct {
    char *runtime_endpoint;
    gint64 relist_period_usec;
    gint64 relist_threshold_usec;
} PlegdStatusConfig;

/**
 * plegd_http_set_status_config:
 * @config: (transfer none): copied.
 *
 * Sets what /status reports of plegd's settings; without it they are left out.
 */
void plegd_http_set_status_config(PlegdHttp *http, const PlegdStatusConfig *config);

/* pods-http.c: GET /pods, what plegd believes: the Generic PLEG's pod cache as JSON. */

/**
 * plegd_pods_to_json:
 * @cache: (transfer none): the Generic PLEG's pod cache.
 * @filter: (nullable): only the pods its namespace values select, as /events selects an
 *   event by the namespace it names (a pod whose namespace is unknown matches no value);
 *   %NULL: every pod.
 *
 * The body of GET /pods (doc/pods.md): `{"relisted_at":T,"pods":[...]}`,
 * relisted_at the start of the last global relist whose results are all in the cache (absent
 * before the first), and for each pod with an entry its uid, namespace, name (null when
 * unknown), observed_at (when its status was read from the runtime), error (only when its
 * last inspection failed: then no IPs, sandboxes or containers), ips, sandboxes (newest first:
 * id, state ready|notready, attempt, created_at) and containers (name, id, state
 * created|running|exited|unknown, attempt, image, image_ref, exit_code when exited, reason,
 * message, created_at, started_at, finished_at; strings the runtime left empty and times it
 * left 0 are absent).  Pods are sorted by namespace, name and UID, pods without names last.
 * Times are RFC 3339 in UTC with nanoseconds, as in the event lines; bytes that are not UTF-8
 * become U+FFFD.
 *
 * Returns: (transfer full): the document and a newline.
 *
 * Thread safety: any thread; each pod's entry is read under the cache's lock.
 */
char *plegd_pods_to_json(PlegPodCache *cache, const PlegdEventFilter *filter);

/**
 * plegd_pods_serve:
 * @pleg: (transfer none): whose pod cache is shown.
 * @msg: a GET or HEAD request for /pods; its query may hold namespace=NS, any number of times
 *   (a pod in any of them is shown).
 *
 * Answers 200 with plegd_pods_to_json()'s document (application/json, Cache-Control: no-store;
 * HEAD: the headers only), or 400 naming the parameter for an unknown one, an empty namespace,
 * one longer than %PLEGD_EVENTS_FILTER_MAX_VALUE bytes or more than
 * %PLEGD_EVENTS_FILTER_MAX_VALUES of them, as /events does.
 */
void plegd_pods_serve(PlegGeneric *pleg, SoupServerMessage *msg);

/* state.c: the write-ahead log of the published event lines, in --state-dir. */

/* Format version of state.jsonl's header ({"plegd_state":1,...}). */
#define PLEGD_STATE_VERSION 1
/* While degraded, a recovery is tried at least this often, batches or not. */
#define PLEGD_STATE_RETRY_USEC (10 * G_USEC_PER_SEC)
/* The file is compacted when it holds more event lines than max(2 * ring_size, this). */
#define PLEGD_STATE_MIN_COMPACT_LINES 4096

/**
 * PlegdStateRecord:
 * @pod_uid: (nullable): the pod's UID.
 * @id: the container's or sandbox's CRI id (never %NULL).
 * @sandbox: whether @id is a pod sandbox.
 * @state: %PLEG_CONTAINER_STATE_RUNNING (its last event was ContainerStarted) or
 *   %PLEG_CONTAINER_STATE_EXITED (ContainerDied).
 * @pod_namespace: (nullable): the names of the newest event of @id, as in
 *   #PlegEventDetails.
 * @pod_name: (nullable): likewise.
 * @container_name: (nullable): likewise; %NULL for a sandbox.
 * @image: (nullable): likewise; %NULL for a sandbox.
 * @attempt: likewise.
 *
 * One container or sandbox as the published events leave it: what the Generic PLEG diffs
 * against after a restart.  A ContainerRemoved forgets the id; PodSync changes nothing.
 */
typedef struct {
    char *pod_uid;
    char *id;
    gboolean sandbox;
    PlegContainerState state;
    char *pod_namespace;
    char *pod_name;
    char *container_name;
    char *image;
    guint32 attempt;
} PlegdStateRecord;

/* NULL-safe. */
void plegd_state_record_free(PlegdStateRecord *record);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegdStateRecord, plegd_state_record_free)

/**
 * PlegdStateEntry:
 * @seq: the event's seq.
 * @line: the event's line as published (plegd_event_to_line()), newline included.
 * @event: (nullable): the event of @line, a reference; %NULL: the state reads what it needs
 *   (the record's names, the #PlegdEventKey) from @line.
 *
 * One event of a batch given to plegd_state_commit().
 */
typedef struct {
    guint64 seq;
    GBytes *line;
    PlegPodLifecycleEvent *event;
} PlegdStateEntry;

/**
 * plegd_state_entry_new:
 * @line: (transfer none): a reference is taken.
 * @event: (transfer none) (nullable): a reference is taken.
 *
 * Returns: (transfer full): an entry; free with plegd_state_entry_free().
 *
 * Thread safety: any thread.
 */
PlegdStateEntry *plegd_state_entry_new(guint64 seq, GBytes *line, PlegPodLifecycleEvent *event);
/* NULL-safe; any thread. */
void plegd_state_entry_free(PlegdStateEntry *entry);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegdStateEntry, plegd_state_entry_free)

/* The largest seq a state file may hold, 2^53 less the room of a few history breaks: a JSON
 * number is a double for most consumers (jq), exact up to 2^53.  A file beyond is corrupt. */
#define PLEGD_STATE_MAX_SEQ ((G_GINT64_CONSTANT(1) << 53) - (G_GINT64_CONSTANT(1) << 40))
/* A longer line of a state file is corrupt (plegd's lines are some hundreds of bytes). */
#define PLEGD_STATE_MAX_LINE (1024 * 1024)

/* How far above the seqs of a history whose events could not be made durable the new history
 * it breaks into starts (plegd_state_commit()): more events than that history will ever
 * number after a restart resumes it. */
#define PLEGD_STATE_HISTORY_GAP (G_GUINT64_CONSTANT(1) << 32)

/**
 * PlegdStateCommit:
 * @durable: %TRUE when the batch's lines are on disk (written and fdatasync()ed) and survive a
 *   crash; %FALSE when writing failed (the state is degraded, see plegd_state_describe()): the
 *   batch is to be published all the same, from memory.
 * @instance: (nullable): set when the batch starts a new history (see plegd_state_commit()):
 *   its instance id; owned by the state, valid during the call.
 * @first_seq: with @instance, the new history's first seq: the batch's first entry's seq now.
 * @renumbered_from: with @instance, the seq the batch's first entry had in the old history.
 *   The entries of this batch and of the batches committed before the caller learned of the
 *   new history, numbered from @renumbered_from, are renumbered from @first_seq (their lines
 *   too); the caller numbers its later events in the new history likewise.
 *
 * What became of one batch.
 */
typedef struct {
    gboolean durable;
    const char *instance;
    guint64 first_seq;
    guint64 renumbered_from;
} PlegdStateCommit;

/**
 * PlegdStateCommittedFunc:
 * @batch: (transfer none) (element-type PlegdStateEntry): the batch given to
 *   plegd_state_commit(), renumbered when @commit says so; freed when the function returns.
 * @commit: what became of it.
 *
 * Runs in the main context given to plegd_state_open(), once per batch, in commit order.
 */
typedef void (*PlegdStateCommittedFunc)(GPtrArray *batch, const PlegdStateCommit *commit,
                                        gpointer user_data);

/**
 * PlegdStateLineFunc:
 * @seq: the line's seq.
 * @line: (transfer none): the line, newline included; take a reference to keep it.
 * @key: (transfer none): what the filters of /events look at; copy it to keep it.
 *
 * Called by plegd_state_foreach_line() with the state's lock held: it must not call into the
 * state.
 */
typedef void (*PlegdStateLineFunc)(guint64 seq, GBytes *line, const PlegdEventKey *key,
                                   gpointer user_data);

typedef struct _PlegdState PlegdState;

/**
 * plegd_state_open:
 * @dir: the state directory (--state-dir); created with mode 0700 when missing.
 * @ring_size: event lines kept, in memory and after a compaction in the file (the /events
 *   ring's size), at least 1.
 * @metrics: (transfer none): where plegd_state_problems_total{reason} (corrupt,
 *   foreign_version, untrusted, unreadable, unwritable, write, vanished, in_use),
 *   plegd_state_durable
 *   (gauge, 1 while commits are durable), plegd_state_commit_duration_seconds (histogram: the
 *   write and fdatasync() of one batch) and plegd_state_compactions_total are registered; a
 *   reference is kept.
 * @context: (nullable): where #PlegdStateCommittedFunc runs; %NULL is the thread-default
 *   context of the caller.
 *
 * Loads @dir/state.jsonl (format in doc/events.md: a header line, record lines, then event
 * lines byte for byte as published, consecutive seqs) and starts the writer thread.  Never
 * fails: a file that cannot be used (not a regular file owned by the effective user and
 * unwritable by group and others: "untrusted"; cannot be opened: "unreadable"; a bad line or
 * a seq out of order: "corrupt"; a header version other than %PLEGD_STATE_VERSION:
 * "foreign_version") is renamed to state.jsonl.bad-YYYYmmddTHHMMSSZ (left in place when the
 * rename fails: the state then runs from memory and never writes), logged once with
 * plegd_log_warning(), counted, and a fresh history starts: a new instance and a first seq of
 * the wall clock in microseconds, above any seq a plegd on this node handed out.  A last line
 * without its newline (a crash during an append) is dropped and the file truncated before
 * it.  A directory that cannot be created or written ("unwritable") leaves the state degraded
 * from the start.  The test hooks PLEGD_STATE_CRASH_AT and PLEGD_STATE_COMPACT_EVERY are read
 * here (state.c's head comment).
 *
 * Returns: (transfer full): the state; free with plegd_state_free() after plegd_state_close().
 *
 * Thread safety: the thread that owns @context, before the PLEG starts.
 */
PlegdState *plegd_state_open(const char *dir, guint ring_size, PlegMetricsRegistry *metrics,
                             GMainContext *context);

/* Whether an intact state.jsonl was loaded (else the history is fresh).  Any thread. */
gboolean plegd_state_is_resumed(PlegdState *state);
/* Returns: (transfer none): the loaded (or fresh) history's instance id (a UUID); a later new
 * history is told to the #PlegdStateCommittedFunc. */
const char *plegd_state_get_instance(PlegdState *state);
/* The first seq of the loaded (or fresh) history (the header's first_seq).  Any thread. */
guint64 plegd_state_get_first_seq(PlegdState *state);
/* The seq the next event gets, as loaded: the last event's + 1, or first_seq when none. */
guint64 plegd_state_get_next_seq(PlegdState *state);

/**
 * plegd_state_get_records:
 *
 * Returns: (transfer full) (element-type PlegdStateRecord): copies of the records (loaded,
 *   and updated by each batch written), sorted by id; the array frees them.
 *
 * Thread safety: any thread.
 */
GPtrArray *plegd_state_get_records(PlegdState *state);

/**
 * plegd_state_foreach_line:
 *
 * Calls @func for each event line kept (loaded, then committed), oldest first, at most
 * @ring_size of them.
 *
 * Thread safety: any thread; @func runs in the caller's thread with the state's lock held.
 */
void plegd_state_foreach_line(PlegdState *state, PlegdStateLineFunc func, gpointer user_data);

/**
 * plegd_state_commit:
 * @batch: (transfer full) (element-type PlegdStateEntry): events in seq order, the first one's
 *   seq plegd_state_get_next_seq() for the first batch and one more than the previous batch's
 *   last for each later one; made with g_ptr_array_new_with_free_func(plegd_state_entry_free).
 * @func: called with @batch once it is durable or failed.
 *
 * Queues @batch for the writer thread and returns at once.  The writer appends its lines with
 * one write() and one fdatasync() (a group commit), updates the records and the kept lines,
 * then hands the batch back to @func in the open's context.  An empty batch writes nothing and
 * is handed back in order, durable when the state is.  While degraded, each batch (and a timer
 * every %PLEGD_STATE_RETRY_USEC) tries a recovery: the whole state rewritten from memory.
 *
 * A batch that cannot be made durable while its history is on disk up to the event before it
 * starts a new history (a new instance, a first seq %PLEGD_STATE_HISTORY_GAP above, or the
 * wall clock in microseconds when that is later): published under the old history, its seqs
 * would be given again to other events if plegd were killed before the directory works again
 * and the restart resumed the old history from disk.  The batch is renumbered and #PlegdStateCommit
 * says so; the new history is on disk once a recovery wrote it.
 *
 * Thread safety: the thread that called plegd_state_open(); not after plegd_state_close().
 */
void plegd_state_commit(PlegdState *state, GPtrArray *batch, PlegdStateCommittedFunc func,
                        gpointer user_data);

/**
 * plegd_state_is_durable:
 *
 * Returns: whether the last batch (or the load, before any) was written durably.
 *
 * Thread safety: any thread.
 */
gboolean plegd_state_is_durable(PlegdState *state);

/**
 * plegd_state_describe:
 *
 * Returns: (transfer full): one line for /readyz?verbose: "durable in DIR (resumed at seq
 *   N)", "durable in DIR (fresh: state.jsonl was corrupt (line 7: ...), moved to ...)" or
 *   "not durable: cannot write DIR/state.jsonl: REASON; serving from memory since TIME".
 *
 * Thread safety: any thread.
 */
char *plegd_state_describe(PlegdState *state);

/**
 * plegd_state_close:
 * @timeout_usec: how long to wait at most for the queued batches, in microseconds.
 *
 * Waits until every batch queued was written (its #PlegdStateCommittedFunc is then pending in
 * the main context, and runs when it is iterated) or @timeout_usec passed, and stops the
 * writer.  Batches not written by then are dropped, their functions never called.  A writer
 * stuck in write() or fdatasync() is left behind (detached), never waited for.  Idempotent.
 *
 * Returns: whether every batch was written (durably or not).
 *
 * Thread safety: the thread that called plegd_state_open().
 */
gboolean plegd_state_close(PlegdState *state, gint64 timeout_usec);

/* plegd_state_close() with no wait, then frees.  NULL-safe. */
void plegd_state_free(PlegdState *state);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegdState, plegd_state_free)

/* plugins.c: what plegd says about each plugin at start. */

/**
 * plegd_describe_plugin:
 *
 * Returns: (transfer full): "running", "disabled (feature gate EventedPLEG off)",
 *   "disabled (--disable-plugins)", "failed: <reason>" or "stopped".
 */
char *plegd_describe_plugin(const PlegPluginInfo *info);

/**
 * plegd_check_plugin_dir:
 * @dir: one folder of the plugin search path.
 *
 * Returns: (transfer full) (nullable): why @dir gives no plugin ("does not exist", "is not a
 *   folder", "has no .plugin files", "cannot be read: ..."), %NULL when it has .plugin files.
 */
char *plegd_check_plugin_dir(const char *dir);

/**
 * plegd_show_plugin_statuses:
 * @http: the server whose /readyz?verbose shows them.
 * @host: (transfer none): a started host; must outlive @http.
 *
 * Adds a line "[+]NAME ok (informational): MESSAGE" to /readyz?verbose
 * (plegd_http_add_readiness_info()) for each plugin that has set a status by the time its start
 * returned (pleg_host_get_plugin_statuses(): the evented watcher's "connected since ..."),
 * showing the status it has when asked: its message, escaped (or its state word when it gave
 * no message).  Such a line never fails readiness.
 *
 * Returns: (transfer full): what the lines read, to be freed after @http.
 */
GPtrArray *plegd_show_plugin_statuses(PlegdHttp *http, PlegHost *host);

/**
 * plegd_default_plugin_dir:
 * @exe_path: (nullable): plegd's own executable, resolved (plegd_get_exe_path()).
 * @ret_origin: (out) (transfer none): where the answer comes from, for the log.
 *
 * The plugin search path without --plugin-dir: the build tree's plugin folders when @exe_path
 * is plegd as built in that tree (not installed), else the installed %PLEG_PLUGIN_DIR.
 *
 * Returns: (transfer none): the search path.
 */
const char *plegd_default_plugin_dir(const char *exe_path, const char **ret_origin);

/** Returns: (transfer full) (nullable): the real path of /proc/self/exe. */
char *plegd_get_exe_path(void);

/* log.c: the writer of every log record of the process. */

/**
 * plegd_log_warning:
 *
 * Logs an operator warning: message level in plegd's domain, journald priority 4, the text
 * prefixed with "warning: ".  (GLib's warning level means a bug.)
 */
void plegd_log_warning(const char *format, ...) G_GNUC_PRINTF(1, 2);

/**
 * plegd_log_error:
 *
 * Logs why plegd stops with a failure: message level in plegd's domain (GLib's error level
 * aborts), journald priority 3, shown as ERROR.
 */
void plegd_log_error(const char *format, ...) G_GNUC_PRINTF(1, 2);

/* The --v at which info records of other domains than plegd's and the plugins' (GLib's,
 * libsoup's) are shown; plegd's, the plugins' and every record above info are shown at 0. */
#define PLEGD_LOG_V_INFO 2
/* The --v at which debug records of plegd, libpleg ("pleg") and the plugins are shown. */
#define PLEGD_LOG_V_DEBUG 4
/* The --v at which debug records of every other domain are shown. */
#define PLEGD_LOG_V_TRACE 5

/**
 * plegd_log_record_verbosity:
 * @level: the record's GLib level.
 * @fields: (array length=n_fields): the record's fields, GLIB_DOMAIN and PRIORITY among them
 *   when it has them.
 *
 * The least --v at which a record is shown: 0 for a priority of 5 (notice) or less, and for
 *   info (6) of plegd's or a plugin's domain; %PLEGD_LOG_V_INFO for other info records;
 *   %PLEGD_LOG_V_DEBUG for debug (7) of plegd, libpleg and the plugins; %PLEGD_LOG_V_TRACE for
 *   other debug records.  The priority is the PRIORITY field, else the one GLib gives the level
 *   (error 3, critical and warning 4, message 5, info 6, debug 7).
 *
 * Thread safety: any thread.
 */
guint plegd_log_record_verbosity(GLogLevelFlags level, const GLogField *fields, gsize n_fields);

/**
 * plegd_log_format_record:
 * @time_usec: when the record was made, in microseconds since the epoch.
 * @zone: (nullable): the zone of the text format's time; %NULL: the local zone.
 *
 * Formats one record.  Text: "TIME LEVEL DOMAIN: MESSAGE key=value ...", TIME as
 * "2026-12-04T23:41:07.123456+01:00", LEVEL the priority's word (ERROR for 0 to 3, WARN,
 * NOTICE, INFO, DEBUG; ERROR too for GLib's warning and critical levels, which mean a bug),
 * "DOMAIN: " only when the record has one; in the message control
 * characters and bytes that are not UTF-8 are escaped (\n, \xNN); each field but GLib's own
 * (MESSAGE, PRIORITY, GLIB_DOMAIN, GLIB_OLD_LOG_API, CODE_*, MESSAGE_ID, SYSLOG_IDENTIFIER) as
 * " key=value", the key in lower case, the value in double quotes with \" \\ \n \xNN escapes
 * when it is empty or holds a space, '"', '=', '\\' or a control character, left out when the
 * message shows it as " key=" already.  JSON: {"ts": milliseconds since the epoch (a number
 * with microseconds, as kubelet's "ts"), "level", "logger": the domain, "caller": "file.c:LINE"
 * when known, "msg", "v": plegd_log_record_verbosity() (absent for ERROR and WARN, as kubelet
 * leaves it out of errors), then each field as in the text, a string, its key in upper case
 * when in lower case it would be one of those}.  A priority 4 message's leading "warning: " is
 * left out in both (the level says it).
 *
 * Returns: (transfer full): the line and its newline.
 *
 * Thread safety: any thread.
 */
char *plegd_log_format_record(PlegdLogFormat format, GLogLevelFlags level,
                              const GLogField *fields, gsize n_fields, gint64 time_usec,
                              GTimeZone *zone);

/**
 * plegd_log_init:
 *
 * Makes plegd's writer GLib's log writer (g_log_set_writer_func()).  Records are held until
 * plegd_log_start() says how to write them (a --config warning comes before the options are
 * known), except an error or a record that G_DEBUG makes fatal: those, and the held ones
 * before them, are written at once as text at --v=0.
 *
 * Thread safety: once, first thing in main(), before any thread exists.
 */
void plegd_log_init(void);

/**
 * plegd_log_start:
 * @format: how records go to standard error.
 * @verbosity: --v: records whose plegd_log_record_verbosity() is above it are dropped, unless
 *   G_MESSAGES_DEBUG names their domain (or is "all") and the level is info or debug.
 *
 * Writes the held records, then every record as it comes: to the journal, natively with its
 * fields (g_log_writer_journald()), when standard error is journald's stream (whatever
 * @format), else to standard error in @format.
 *
 * Thread safety: any thread, after plegd_log_init().
 */
void plegd_log_start(PlegdLogFormat format, guint verbosity);
/* exporter-metrics.c: what a Prometheus exporter shows besides its own metrics. */

/**
 * PlegdProcStat:
 * @utime_ticks: field 14 of /proc/PID/stat, user CPU time in clock ticks (`_SC_CLK_TCK`).
 * @stime_ticks: field 15, system CPU time in clock ticks.
 * @starttime_ticks: field 22, when the process started, in clock ticks after boot.
 * @vsize_bytes: field 23, virtual memory size in bytes.
 * @rss_pages: field 24, resident set size in pages.
 *
 * The fields of proc(5)'s /proc/PID/stat that Prometheus' process collector reads.
 */
typedef struct {
    guint64 utime_ticks;
    guint64 stime_ticks;
    guint64 starttime_ticks;
    guint64 vsize_bytes;
    guint64 rss_pages;
} PlegdProcStat;

/**
 * plegd_proc_stat_parse:
 * @text: (nullable): the contents of /proc/PID/stat.
 * @ret_stat: (out): the fields, untouched on failure.
 *
 * Reads the fields after the command, which is in parentheses and may hold spaces and
 * parentheses itself (the last ')' ends it).
 *
 * Returns: %FALSE when @text is not such a line (too few fields, a field not a number).
 */
gboolean plegd_proc_stat_parse(const char *text, PlegdProcStat *ret_stat);

/**
 * plegd_exporter_metrics_register:
 * @registry: plegd's registry.
 *
 * Registers Prometheus' process metrics, read at each exposition by a collector
 * (pleg_metrics_registry_add_collector()): `process_cpu_seconds_total` (user and system CPU
 * time), `process_open_fds` (entries of /proc/self/fd), `process_max_fds` (the soft
 * RLIMIT_NOFILE), `process_virtual_memory_bytes` and `process_resident_memory_bytes` (from
 * /proc/self/stat), and `process_start_time_seconds` (the boot time of /proc/stat plus the
 * process's start, set once); a value that cannot be read keeps its last one.  Also
 * `plegd_build_info{version,libpleg_version,glib_version,libsoup_version}`, always 1, as
 * Prometheus' own `*_build_info` metrics: plegd's version, and the versions of the libraries
 * it runs with (pleg_get_version(), GLib's and libsoup's at run time).  Call once.
 *
 * Thread safety: callable from any thread; the collector runs on the thread that exposes.
 */
void plegd_exporter_metrics_register(PlegMetricsRegistry *registry);

/**
 * plegd_plugin_state_metrics_set:
 * @registry: plegd's registry.
 * @plugins: (element-type PlegPluginInfo): pleg_host_get_plugins()'s answer.
 *
 * Sets `plegd_plugin_state{plugin,state}`: for each plugin, 1 for the state it is in and 0 for
 * the others, the states named as pleg_plugin_state_to_string() names them (running, stopped,
 * failed, disabled-gate, disabled-by-name), so that an alert on `state="failed"` sees a series
 * for every plugin.  A plugin's state changes only when the host starts or stops: plegd calls
 * this after pleg_host_start().
 *
 * Thread safety: from the thread that starts and stops the host, as pleg_host_get_plugins().
 */
void plegd_plugin_state_metrics_set(PlegMetricsRegistry *registry, GPtrArray *plugins);

G_END_DECLS
