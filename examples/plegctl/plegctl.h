/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegctl: a client of plegd's HTTP API (GET /events, /pods, /status).  What its files share:
 * exit statuses and the error domain that carries them, the connection to plegd (client.c),
 * aligned tables (table.c) and the subcommands (events.c, pods.c, status.c).  One thread, the
 * default main context; nothing here is thread-safe.
 */
#pragma once

#include <json-glib/json-glib.h>
#include <libsoup/soup.h>

G_BEGIN_DECLS

/* Where plegctl looks for plegd without --address or $PLEGCTL_ADDRESS: plegd's default
 * --socket, which serves the whole API (over TCP /events, /pods and /status answer 403). */
#define PLEGCTL_DEFAULT_ADDRESS "unix:/run/plegd/plegd.sock"
/* How long a request that is not a stream may take, from connecting to the end of the answer;
 * above plegd's own 10 s, after which it answers a health round that does not end with 503. */
#define PLEGCTL_DEFAULT_TIMEOUT_USEC (15 * G_USEC_PER_SEC)

/**
 * PlegctlExit:
 * @PLEGCTL_EXIT_OK: done; for status, plegd is live and ready.
 * @PLEGCTL_EXIT_ERROR: plegd could not be asked: refused, no answer in time, an answer that is
 *   not what plegd gives (not JSON, an HTTP error, an endpoint it does not serve).
 * @PLEGCTL_EXIT_USAGE: a bad command line, or a request plegd refused as bad (400).
 * @PLEGCTL_EXIT_NOT_READY: status: plegd is live but not ready.
 * @PLEGCTL_EXIT_NOT_LIVE: status: plegd's liveness fails (it is stuck).
 * @PLEGCTL_EXIT_EVENTS_LOST: events: plegd no longer holds events asked for, or its history
 *   changed under a follow (410, or a stream that ended with slow_consumer or history_changed):
 *   relist (plegctl pods), then follow again.
 *
 * plegctl's exit statuses (plegctl(1), EXIT STATUS); the codes of #PLEGCTL_ERROR too.
 */
typedef enum {
    PLEGCTL_EXIT_OK = 0,
    PLEGCTL_EXIT_ERROR = 1,
    PLEGCTL_EXIT_USAGE = 2,
    PLEGCTL_EXIT_NOT_READY = 3,
    PLEGCTL_EXIT_NOT_LIVE = 4,
    PLEGCTL_EXIT_EVENTS_LOST = 5,
} PlegctlExit;

/* An error whose code is the exit status it ends plegctl with. */
#define PLEGCTL_ERROR (plegctl_error_quark())
GQuark plegctl_error_quark(void);

typedef enum {
    PLEGCTL_OUTPUT_TABLE,
    PLEGCTL_OUTPUT_JSON,
} PlegctlOutput;

/* The subcommand, and the options every subcommand takes. */
typedef struct {
    const char *command; /* "events" */
    const char *summary; /* what it does, for --help */
    char *address;       /* NULL: $PLEGCTL_ADDRESS, else PLEGCTL_DEFAULT_ADDRESS */
    char *timeout;       /* a Go duration; NULL: PLEGCTL_DEFAULT_TIMEOUT_USEC */
    char *output;        /* "table" or "json"; NULL: table on a terminal, else json */
    gint64 timeout_usec; /* parsed; 0: no limit */
    PlegctlOutput format;
} PlegctlCommon;

/* ---- client.c: the connection to plegd ---- */

typedef struct _PlegctlClient PlegctlClient;

/**
 * plegctl_parse_address:
 * @text: `http://HOST:PORT` (also `HOST:PORT`, as plegd's --metrics-bind-address is written),
 *   `unix:PATH` or `unix:///PATH`.
 * @ret_base: (out) (transfer full): the base URI requests go to ("http://HOST:PORT", or
 *   "http://localhost" for a socket).
 * @ret_socket: (out) (transfer full) (nullable): the unix socket's path, %NULL for TCP.
 * @error: %PLEGCTL_EXIT_USAGE saying what is wrong.
 */
gboolean plegctl_parse_address(const char *text, char **ret_base, char **ret_socket,
                               GError **error);

/* Checks @common (address, timeout, output) and connects nothing yet; NULL with @error set
 * (%PLEGCTL_EXIT_USAGE) when an option is bad. */
PlegctlClient *plegctl_client_new(PlegctlCommon *common, GError **error);
void plegctl_client_free(PlegctlClient *client);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegctlClient, plegctl_client_free)

/* The address as the user gave it (or the default), for messages. */
const char *plegctl_client_get_address(PlegctlClient *client);

/**
 * plegctl_client_get:
 * @path: the path and query ("/pods?namespace=shop"); escaped by the caller.
 * @ret_body: (out) (transfer full): the body of a 200 answer.
 * @error: %PLEGCTL_EXIT_ERROR (refused, no answer within --timeout, an HTTP error, 404 from a
 *   plegd that does not serve @path) or %PLEGCTL_EXIT_USAGE (400), each one line naming the
 *   address and what to do.
 *
 * GET @path and read the whole answer, within --timeout.  Runs the default main context.
 */
gboolean plegctl_client_get(PlegctlClient *client, const char *path, GBytes **ret_body,
                            GError **error);

/* plegctl_client_get() of a JSON object, and the body it came in (@ret_body: optional):
 * %PLEGCTL_EXIT_ERROR when the body is not one. */
JsonNode *plegctl_client_get_json(PlegctlClient *client, const char *path, GBytes **ret_body,
                                  GError **error);

/* What an answer's @body (nullable) says went wrong: the "error" of plegd's JSON, else its
 * first line; escaped and cut; "" when empty. */
char *plegctl_body_message(GBytes *body);

/* Appends "NAME=VALUE" to @query ("?" first, then "&"), @value %-escaped. */
void plegctl_query_add(GString *query, const char *name, const char *value);

/**
 * PlegctlStreamFunc:
 * @msg: the answer's headers are in; its status may be any.
 * @stream: (nullable): the body, %NULL when the request failed (@error is set).
 * @error: (nullable): why no answer came (refused, --timeout before the headers, ...).
 *
 * Runs in the default main context once the headers of a stream's answer are in, or it failed.
 */
typedef void (*PlegctlStreamFunc)(SoupMessage *msg, GInputStream *stream, const GError *error,
                                  gpointer user_data);

/**
 * plegctl_client_open_stream:
 *
 * GET @path with no limit on the body's length: --timeout bounds the wait for the headers
 * only, so a stream that is quiet for a day stays open.  @func runs once.
 */
void plegctl_client_open_stream(PlegctlClient *client, const char *path, PlegctlStreamFunc func,
                                gpointer user_data);

/**
 * plegctl_client_describe_error:
 * @path: the endpoint asked, for the message.
 * @body: (nullable): the answer's body, for HTTP errors.
 *
 * Sets @error to the one line that says why @msg (a non-200 answer, or none: @cause) did not
 * bring what was asked: the address, what happened, what to do.  Its code is the exit status.
 */
void plegctl_client_describe_error(PlegctlClient *client, const char *path, SoupMessage *msg,
                                   GBytes *body, const GError *cause, GError **error);

/* ---- table.c: aligned columns, as crictl and systemctl print them ---- */

typedef struct _PlegctlTable PlegctlTable;

/* A table of the NULL-terminated @headers; every row has as many cells. */
PlegctlTable *plegctl_table_new(const char *const *headers);
void plegctl_table_free(PlegctlTable *table);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegctlTable, plegctl_table_free)

/* Adds a row; @cells as many as the headers, each copied; NULL is shown as "-". */
void plegctl_table_add_row(PlegctlTable *table, const char *const *cells);
/* The headers and every row added, each column as wide as its widest cell, two spaces apart,
 * no trailing blanks. */
char *plegctl_table_format(PlegctlTable *table);
/* Makes the columns at least as wide as @cells, without a row: a stream's usual widths. */
void plegctl_table_widen(PlegctlTable *table, const char *const *cells);
/* For a stream: the headers (once, with the first row) and @cells as one line, columns as wide
 * as the widest cell seen so far in them (they only grow). */
char *plegctl_table_format_row(PlegctlTable *table, const char *const *cells);

/* A cell of text from a runtime or a plugin: control characters escaped, as for a terminal;
 * "-" for %NULL. */
char *plegctl_cell(const char *text);

/* Members of plegd's JSON, checked: a member that is absent or of another type (an older or
 * newer plegd) is NULL or FALSE, never a critical.  @object may be NULL. */
const char *plegctl_json_string(JsonObject *object, const char *name);
gboolean plegctl_json_int(JsonObject *object, const char *name, gint64 *ret_value);
gboolean plegctl_json_bool(JsonObject *object, const char *name, gboolean *ret_value);
JsonObject *plegctl_json_object(JsonObject *object, const char *name);
JsonArray *plegctl_json_array(JsonObject *object, const char *name);
/* Element @index of @array when it is an object, else NULL. */
JsonObject *plegctl_json_element(JsonArray *array, guint index);
/* An RFC 3339 time as local time "YYYY-MM-DD HH:MM:SS", or a cell of @text when it is none. */
char *plegctl_format_time(const char *text);

/* ---- the subcommands: each returns its exit status, with @error set when not 0 and there is
 * something to say ---- */

int plegctl_events(PlegctlCommon *common, int argc, char **argv, GError **error);
int plegctl_pods(PlegctlCommon *common, int argc, char **argv, GError **error);
int plegctl_status(PlegctlCommon *common, int argc, char **argv, GError **error);

/* Parses @argv with @entries and the common options into @common; %PLEGCTL_EXIT_USAGE on a
 * bad option or a stray argument. */
gboolean plegctl_parse_command(PlegctlCommon *common, const GOptionEntry *entries, int *argc,
                               char ***argv, GError **error);

/* Writes @text to stdout and flushes it; FALSE (with @error) when stdout is gone. */
gboolean plegctl_print(const char *text, gssize length, GError **error);
/* Prints plegd's answer: its @body as it came with -o json, else @table, the text made of it. */
gboolean plegctl_print_answer(PlegctlCommon *common, GBytes *body, const char *table,
                              GError **error);

G_END_DECLS
