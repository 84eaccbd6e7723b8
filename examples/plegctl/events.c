/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegctl events: GET /events (doc/events.md).  Without -f, a bounded read (follow=false): what
 * plegd holds since --since, then the end.  With -f, a follow that outlives its connection: when
 * the stream ends (plegd restarted, the connection dropped) it reconnects with capped backoff
 * and resumes after the last seq it saw in the same history (since=SEQ&instance=ID), so that a
 * plegd restarted on its --state-dir loses nor repeats an event.  When plegd can no longer
 * give what was missed (410, or a stream that ended with slow_consumer or history_changed), it
 * says so on stderr and exits 5: the consumer relists (plegctl pods) and follows again, as
 * doc/events.md prescribes; going on silently would hide the loss.
 */
#include <pleg/pleg.h>

#include "plegctl.h"

#define RETRY_MIN_MS 100
#define RETRY_MAX_MS 5000
/* The most of a refusal's body kept for its message. */
#define REFUSAL_MAX_BYTES (64 * 1024)

static const char *const event_types[] = {"ContainerStarted", "ContainerDied", "ContainerRemoved",
                                          "PodSync", NULL};

typedef struct {
    PlegctlCommon *common;
    PlegctlClient *client;
    gboolean follow;
    char *since_seq;  /* --since as a seq: since= */
    char *since_time; /* --since as a time or duration: since_time= */
    char *instance;   /* --instance */
    char *sandbox;    /* --sandbox: "true" or "false" */
    char **types, **namespaces, **pods;

    /* Where a follow resumes: after @cursor, in @history. */
    gboolean has_cursor;
    guint64 cursor;
    char *history; /* the Plegd-Instance of the last answer */
    gboolean connected_once;
    gboolean resuming;   /* the stream ended; not connected again yet */
    guint backoff_ms;
    GSource *retry;

    /* The answer being read. */
    char *path;
    SoupMessage *msg;
    GDataInputStream *lines;
    GString *refusal; /* the body of an answer other than 200 */
    char *end_reason; /* the reason of the stream's last line, when it had one */

    PlegctlTable *table;
    gboolean done;
    int status;
    GError *error;
} Events;

static void connect_stream(Events *ev);

static void
finish(Events *ev, int status, GError *error)
{
    ev->done = TRUE;
    ev->status = status;
    if (error)
        g_propagate_error(&ev->error, error);
}

/* Ends with status 1 and "plegd at ADDRESS " followed by the @format's text. */
static void G_GNUC_PRINTF(2, 3)
finish_failed(Events *ev, const char *format, ...)
{
    g_autofree char *address = plegctl_cell(plegctl_client_get_address(ev->client));
    g_autofree char *what = NULL;
    va_list args;

    va_start(args, format);
    what = g_strdup_vprintf(format, args);
    va_end(args);
    finish(ev, PLEGCTL_EXIT_ERROR,
           g_error_new(PLEGCTL_ERROR, PLEGCTL_EXIT_ERROR, "plegd at %s %s", address, what));
}

static void
close_answer(Events *ev)
{
    g_clear_object(&ev->lines);
    g_clear_object(&ev->msg);
    g_clear_pointer(&ev->path, g_free);
    if (ev->refusal)
        g_string_free(g_steal_pointer(&ev->refusal), TRUE);
    g_clear_pointer(&ev->end_reason, g_free);
}

/* ---- the query ---- */

static char *
build_path(Events *ev)
{
    GString *path = g_string_new("/events");

    if (!ev->follow)
        plegctl_query_add(path, "follow", "false");
    if (ev->has_cursor) {
        /* Resuming: after the last seq seen, in the history it belongs to; since_time would
         * count back from now, no longer from the first request. */
        char seq[G_ASCII_DTOSTR_BUF_SIZE];

        g_snprintf(seq, sizeof seq, "%" G_GUINT64_FORMAT, ev->cursor);
        plegctl_query_add(path, "since", seq);
        if (ev->history || ev->instance)
            plegctl_query_add(path, "instance", ev->history ? ev->history : ev->instance);
    } else {
        if (ev->since_seq)
            plegctl_query_add(path, "since", ev->since_seq);
        if (ev->since_time)
            plegctl_query_add(path, "since_time", ev->since_time);
        if (ev->instance)
            plegctl_query_add(path, "instance", ev->instance);
    }
    for (char **type = ev->types; type && *type; type++)
        plegctl_query_add(path, "type", *type);
    for (char **ns = ev->namespaces; ns && *ns; ns++)
        plegctl_query_add(path, "namespace", *ns);
    for (char **pod = ev->pods; pod && *pod; pod++)
        plegctl_query_add(path, "pod", *pod);
    if (ev->sandbox)
        plegctl_query_add(path, "sandbox", ev->sandbox);
    return g_string_free(path, FALSE);
}

/* ---- output ---- */

static const char *const table_headers[] = {"TIME", "SEQ", "TYPE", "NAMESPACE", "POD",
                                             "CONTAINER", "EXIT", "REASON", NULL};
static const char *const table_widths[] = {"2006-01-02 15:04:05", "1796427991065231",
                                           "ContainerRemoved", "kube-system", "coredns-5d78c9869d",
                                           "(sandbox)", "137", "", NULL};

static gboolean
print_event(Events *ev, const char *line, gsize length, JsonObject *event, gint64 seq)
{
    gboolean sandbox = FALSE, initial = FALSE;
    const char *type = plegctl_json_string(event, "type");
    gint64 exit_code;
    g_autofree char *time = NULL, *seq_text = NULL, *type_text = NULL, *ns = NULL, *pod = NULL;
    g_autofree char *container = NULL, *exit_text = NULL, *reason = NULL, *text = NULL;

    if (ev->common->format == PLEGCTL_OUTPUT_JSON) {
        /* plegd's own line, as it sent it. */
        g_autofree char *copy = g_strndup(line, length);

        text = g_strconcat(copy, "\n", NULL);
        return plegctl_print(text, -1, &ev->error);
    }

    plegctl_json_bool(event, "sandbox", &sandbox);
    plegctl_json_bool(event, "initial", &initial);
    time = plegctl_format_time(plegctl_json_string(event, "time"));
    seq_text = g_strdup_printf("%" G_GINT64_FORMAT, seq);
    type_text = plegctl_cell(type);
    if (initial) {
        g_autofree char *plain = g_steal_pointer(&type_text);

        type_text = g_strconcat(plain, " (initial)", NULL);
    }
    ns = plegctl_cell(plegctl_json_string(event, "namespace"));
    pod = plegctl_cell(plegctl_json_string(event, "pod"));
    if (sandbox)
        container = g_strdup("(sandbox)");
    else
        container = plegctl_cell(plegctl_json_string(event, "container"));
    exit_text = plegctl_json_int(event, "exit_code", &exit_code)
                    ? g_strdup_printf("%" G_GINT64_FORMAT, exit_code)
                    : g_strdup("");
    reason = plegctl_json_string(event, "reason") ? plegctl_cell(plegctl_json_string(event, "reason"))
                                                  : g_strdup("");
    {
        const char *const cells[] = {time, seq_text, type_text, ns, pod, container, exit_text,
                                     reason, NULL};

        if (!ev->follow) {
            plegctl_table_add_row(ev->table, cells);
            return TRUE;
        }
        text = plegctl_table_format_row(ev->table, cells);
    }
    return plegctl_print(text, -1, &ev->error);
}

/* ---- reading an answer ---- */

static void read_next_line(Events *ev);

/* Follow: connect again after the backoff. */
static gboolean
on_retry(gpointer data)
{
    Events *ev = data;

    g_clear_pointer(&ev->retry, g_source_unref);
    connect_stream(ev);
    return G_SOURCE_REMOVE;
}

static void
schedule_retry(Events *ev, const char *why)
{
    close_answer(ev);
    if (!ev->resuming) {
        g_autofree char *address = plegctl_cell(plegctl_client_get_address(ev->client));

        ev->resuming = TRUE;
        if (ev->has_cursor)
            g_printerr("plegctl: the stream from plegd at %s ended (%s); reconnecting to resume "
                       "after seq %" G_GUINT64_FORMAT "\n",
                       address, why, ev->cursor);
        else
            g_printerr("plegctl: the stream from plegd at %s ended (%s); reconnecting\n",
                       address, why);
    }
    ev->retry = g_timeout_source_new(ev->backoff_ms);
    g_source_set_callback(ev->retry, on_retry, ev, NULL);
    g_source_attach(ev->retry, NULL);
    ev->backoff_ms = MIN(ev->backoff_ms * 2, RETRY_MAX_MS);
}

/* What plegd no longer holds cannot be followed on: the consumer relists. */
static void
finish_lost(Events *ev, const char *why)
{
    g_autofree char *address = plegctl_cell(plegctl_client_get_address(ev->client));
    g_autofree char *shown = plegctl_cell(why);

    finish(ev, PLEGCTL_EXIT_EVENTS_LOST,
           g_error_new(PLEGCTL_ERROR, PLEGCTL_EXIT_EVENTS_LOST,
                       "events were lost: plegd at %s %s; relist (plegctl pods), then follow "
                       "again",
                       address, shown));
}

/* One line of a 200 answer: an event, or plegd's last line saying why the stream ends. */
static void
handle_line(Events *ev, const char *line, gsize length)
{
    g_autoptr(JsonParser) parser = json_parser_new();
    g_autoptr(GError) error = NULL;
    JsonObject *object;
    const char *message;
    gint64 seq, next_seq;

    if (length == 0)
        return;
    if (!json_parser_load_from_data(parser, line, (gssize)length, &error) ||
        !JSON_NODE_HOLDS_OBJECT(json_parser_get_root(parser))) {
        g_autofree char *shown = pleg_log_text(line, (gssize)length, 256);

        finish_failed(ev, "sent an /events line that is not JSON: %s", shown);
        return;
    }
    object = json_node_get_object(json_parser_get_root(parser));
    message = plegctl_json_string(object, "error");
    if (message) {
        const char *reason = plegctl_json_string(object, "reason");

        g_free(ev->end_reason);
        ev->end_reason = g_strdup(reason ? reason : "unknown");
        /* Shutting down: what it had not sent yet starts at next_seq, which a filtered stream's
         * last event may be far behind. */
        if (g_strcmp0(reason, "shutting_down") == 0 && ev->follow &&
            plegctl_json_int(object, "next_seq", &next_seq) && next_seq > 0 &&
            (!ev->has_cursor || (guint64)next_seq - 1 > ev->cursor)) {
            ev->has_cursor = TRUE;
            ev->cursor = (guint64)next_seq - 1;
        } else if (g_strcmp0(reason, "shutting_down") != 0) {
            g_autofree char *why = g_strdup_printf("ended the stream: %s", message);

            finish_lost(ev, why);
        }
        return;
    }
    if (!plegctl_json_int(object, "seq", &seq) || seq < 0) {
        finish_failed(ev, "sent an /events line without a seq: not plegd's /events");
        return;
    }
    /* Each event once: a resumed stream starts after the cursor, this only guards it. */
    if (ev->has_cursor && (guint64)seq <= ev->cursor)
        return;
    ev->has_cursor = TRUE;
    ev->cursor = (guint64)seq;
    if (!print_event(ev, line, length, object, seq))
        finish(ev, PLEGCTL_EXIT_ERROR, NULL);
}

/* The answer's body ended (or broke, @error). */
static void
handle_end(Events *ev, const GError *error)
{
    if (ev->refusal) {
        g_autoptr(GBytes) body = g_bytes_new(ev->refusal->str, ev->refusal->len);
        GError *refused = NULL;

        plegctl_client_describe_error(ev->client, ev->path, ev->msg, body, NULL, &refused);
        if (soup_message_get_status(ev->msg) == SOUP_STATUS_GONE) {
            /* plegd's 410 says what it no longer holds, or that its history is another. */
            g_autofree char *said = plegctl_body_message(body);
            g_autofree char *why = g_strdup_printf("answered 410: %s", said);

            g_error_free(refused);
            finish_lost(ev, why);
        } else if (soup_message_get_status(ev->msg) == SOUP_STATUS_SERVICE_UNAVAILABLE &&
                   ev->connected_once) {
            /* Too many clients, or shutting down: try again. */
            g_error_free(refused);
            schedule_retry(ev, "plegd answered 503");
        } else {
            finish(ev, refused->code, refused);
        }
        return;
    }

    if (ev->end_reason && g_str_equal(ev->end_reason, "shutting_down") && !ev->follow) {
        finish_failed(ev, "shut down before it sent every event asked for: ask again");
        return;
    }
    if (!ev->follow) {
        if (error) {
            g_autofree char *why = plegctl_cell(error->message);

            finish_failed(ev, "broke off its answer: %s", why);
            return;
        }
        finish(ev, PLEGCTL_EXIT_OK, NULL);
        return;
    }
    if (ev->end_reason && g_str_equal(ev->end_reason, "shutting_down"))
        schedule_retry(ev, "plegd shut down");
    else if (error)
        schedule_retry(ev, error->message);
    else
        schedule_retry(ev, "the connection closed");
}

static void
on_line(GObject *source, GAsyncResult *result, gpointer data)
{
    Events *ev = data;
    g_autoptr(GError) error = NULL;
    gsize length = 0;
    g_autofree char *line =
        g_data_input_stream_read_line_finish_utf8(G_DATA_INPUT_STREAM(source), result, &length,
                                                  &error);

    /* Not UTF-8: still a line of plegd's to judge (it sends only UTF-8). */
    if (!line && g_error_matches(error, G_CONVERT_ERROR, G_CONVERT_ERROR_ILLEGAL_SEQUENCE)) {
        finish_failed(ev, "sent an /events line that is not UTF-8: not plegd's /events");
        return;
    }
    if (!line) {
        handle_end(ev, error);
        return;
    }
    if (ev->refusal) {
        if (ev->refusal->len < REFUSAL_MAX_BYTES)
            g_string_append_printf(ev->refusal, "%s\n", line);
    } else {
        handle_line(ev, line, length);
    }
    if (!ev->done)
        read_next_line(ev);
}

static void
read_next_line(Events *ev)
{
    g_data_input_stream_read_line_async(ev->lines, G_PRIORITY_DEFAULT, NULL, on_line, ev);
}

static void
on_answer(SoupMessage *msg, GInputStream *stream, const GError *error, gpointer data)
{
    Events *ev = data;
    const char *header;
    guint64 newest;

    if (error) {
        GError *failed = NULL;

        if (ev->connected_once) {
            schedule_retry(ev, error->message);
            return;
        }
        plegctl_client_describe_error(ev->client, ev->path, msg, NULL, error, &failed);
        finish(ev, failed->code, failed);
        return;
    }
    ev->msg = g_object_ref(msg);
    ev->lines = g_data_input_stream_new(stream);
    g_filter_input_stream_set_close_base_stream(G_FILTER_INPUT_STREAM(ev->lines), TRUE);
    if (soup_message_get_status(msg) != SOUP_STATUS_OK) {
        ev->refusal = g_string_new(NULL);
        read_next_line(ev);
        return;
    }

    header = soup_message_headers_get_one(soup_message_get_response_headers(msg),
                                          "Plegd-Instance");
    if (header) {
        g_free(ev->history);
        ev->history = g_strdup(header);
    }
    /* A live stream without since starts after Plegd-Newest-Seq: a follow that ends before
     * its first event resumes there. */
    header = soup_message_headers_get_one(soup_message_get_response_headers(msg),
                                          "Plegd-Newest-Seq");
    if (!ev->has_cursor && ev->follow && !ev->since_seq && !ev->since_time && header &&
        g_ascii_string_to_unsigned(header, 10, 0, G_MAXUINT64, &newest, NULL)) {
        ev->has_cursor = TRUE;
        ev->cursor = newest;
    }
    if (ev->resuming) {
        g_autofree char *address = plegctl_cell(plegctl_client_get_address(ev->client));

        g_printerr("plegctl: following plegd at %s again\n", address);
        ev->resuming = FALSE;
    }
    ev->connected_once = TRUE;
    ev->backoff_ms = RETRY_MIN_MS;
    read_next_line(ev);
}

static void
connect_stream(Events *ev)
{
    close_answer(ev);
    ev->path = build_path(ev);
    plegctl_client_open_stream(ev->client, ev->path, on_answer, ev);
}

/* ---- the command ---- */

static gboolean
check_options(Events *ev, const char *since, GError **error)
{
    g_autoptr(GDateTime) time = NULL;
    guint64 seq;
    gint64 usec;

    for (char **type = ev->types; type && *type; type++) {
        if (!g_strv_contains(event_types, *type)) {
            g_autofree char *shown = pleg_log_text(*type, -1, 0);

            g_set_error(error, PLEGCTL_ERROR, PLEGCTL_EXIT_USAGE,
                        "invalid --type \"%s\": expected ContainerStarted, ContainerDied, "
                        "ContainerRemoved or PodSync",
                        shown);
            return FALSE;
        }
    }
    if (ev->sandbox && !g_str_equal(ev->sandbox, "true") && !g_str_equal(ev->sandbox, "false")) {
        g_autofree char *shown = pleg_log_text(ev->sandbox, -1, 0);

        g_set_error(error, PLEGCTL_ERROR, PLEGCTL_EXIT_USAGE,
                    "invalid --sandbox \"%s\": expected true (sandboxes only) or false "
                    "(containers only)",
                    shown);
        return FALSE;
    }
    if (!since)
        return TRUE;
    if (g_ascii_isdigit(since[0]) &&
        g_ascii_string_to_unsigned(since, 10, 0, G_MAXINT64, &seq, NULL)) {
        ev->since_seq = g_strdup(since);
        return TRUE;
    }
    time = g_date_time_new_from_iso8601(since, NULL);
    if (pleg_duration_parse(since, &usec, NULL) || time) {
        ev->since_time = g_strdup(since);
        return TRUE;
    }
    {
        g_autofree char *shown = pleg_log_text(since, -1, 0);

        g_set_error(error, PLEGCTL_ERROR, PLEGCTL_EXIT_USAGE,
                    "invalid --since \"%s\": expected a seq (42), a duration before now (10m, "
                    "1h30m) or an RFC 3339 time with its offset (2026-12-04T17:00:00Z)",
                    shown);
        return FALSE;
    }
}

int
plegctl_events(PlegctlCommon *common, int argc, char **argv, GError **error)
{
    Events ev = {.common = common, .backoff_ms = RETRY_MIN_MS};
    g_autofree char *since = NULL;
    const GOptionEntry entries[] = {
        {"follow", 'f', 0, G_OPTION_ARG_NONE, &ev.follow,
         "Go on with each event as it happens; reconnect and resume when plegd restarts", NULL},
        {"since", 0, 0, G_OPTION_ARG_STRING, &since,
         "Events after seq SEQ, or since a time: 10m, 1h30m, 2026-12-04T17:00:00Z (default: "
         "all plegd holds; with -f, only new ones)",
         "SEQ|TIME"},
        {"type", 0, 0, G_OPTION_ARG_STRING_ARRAY, &ev.types,
         "Only events of TYPE: ContainerStarted, ContainerDied, ContainerRemoved, PodSync "
         "(repeat for several)",
         "TYPE"},
        {"namespace", 'n', 0, G_OPTION_ARG_STRING_ARRAY, &ev.namespaces,
         "Only events of pods in namespace NS (repeat for several)", "NS"},
        {"pod", 0, 0, G_OPTION_ARG_STRING_ARRAY, &ev.pods,
         "Only events of pods named NAME (repeat for several)", "NAME"},
        {"sandbox", 0, 0, G_OPTION_ARG_STRING, &ev.sandbox,
         "true: only the events of pod sandboxes; false: only containers' and PodSync", "BOOL"},
        {"instance", 0, 0, G_OPTION_ARG_STRING, &ev.instance,
         "With --since SEQ: the history SEQ belongs to (the Plegd-Instance header); another "
         "history's events are never shown",
         "ID"},
        G_OPTION_ENTRY_NULL,
    };
    int status;

    if (!plegctl_parse_command(common, entries, &argc, &argv, error) ||
        !check_options(&ev, since, error)) {
        status = PLEGCTL_EXIT_USAGE;
        goto out;
    }
    ev.client = plegctl_client_new(common, error);
    if (!ev.client) {
        status = PLEGCTL_EXIT_USAGE;
        goto out;
    }
    if (common->format == PLEGCTL_OUTPUT_TABLE) {
        ev.table = plegctl_table_new(table_headers);
        /* A follow prints each row as it comes: room for the usual widths from the start. */
        if (ev.follow)
            plegctl_table_widen(ev.table, table_widths);
    }

    connect_stream(&ev);
    while (!ev.done)
        g_main_context_iteration(NULL, TRUE);

    if (ev.status == PLEGCTL_EXIT_OK && ev.table && !ev.follow) {
        g_autofree char *text = plegctl_table_format(ev.table);

        if (!plegctl_print(text, -1, &ev.error))
            ev.status = PLEGCTL_EXIT_ERROR;
    }
    status = ev.status;
    if (ev.error)
        g_propagate_error(error, g_steal_pointer(&ev.error));

out:
    close_answer(&ev);
    if (ev.retry) {
        g_source_destroy(ev.retry);
        g_source_unref(ev.retry);
    }
    plegctl_table_free(ev.table);
    plegctl_client_free(ev.client);
    g_free(ev.since_seq);
    g_free(ev.since_time);
    g_free(ev.instance);
    g_free(ev.sandbox);
    g_free(ev.history);
    g_strfreev(ev.types);
    g_strfreev(ev.namespaces);
    g_strfreev(ev.pods);
    return status;
}
