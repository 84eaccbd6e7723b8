/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GET /events: every PodLifecycleEvent as a JSON line with its seq, to each connected client, from
 * a ring that also serves ?since=SEQ.  A client's unsent events are the ring's lines after its
 * cursor: plegd copies at most one chunk (PLEGD_EVENTS_CHUNK_BYTES) per client, so memory does not
 * grow with clients times events.  A client whose next unsent line falls out of the ring is cut
 * off.  A client's filter is matched once against each event its cursor passes, on the key the
 * ring keeps beside the line; a bounded read (follow=false, until_time) ends its body.
 * Everything runs in the main context of the HTTP server.
 */
#include <json-glib/json-glib.h>
#include <sys/socket.h>

#include "plegd.h"

#define NDJSON_CONTENT_TYPE "application/x-ndjson"
#define JSON_CONTENT_TYPE   "application/json"
#define TEXT_CONTENT_TYPE   "text/plain; charset=utf-8"

/* Label values of plegd_events_clients_disconnected_total and plegd_events_refused_total. */
#define REASON_SLOW_CONSUMER    "slow_consumer"
#define REASON_SHUTTING_DOWN    "shutting_down"
#define REASON_GONE             "gone"
#define REASON_TOO_MANY_CLIENTS "too_many_clients"
#define REASON_HISTORY_CHANGED  "history_changed"

/* Bytes a client may send during its stream that are read and dropped per wake-up. */
#define DRAIN_BYTES (16 * 4096)
/* Events a client's cursor passes in one go at most (most of them not matching its filter), so
 * that a filter that matches little of a large ring does not hold up the main loop. */
#define SCAN_BUDGET 65536

typedef struct _Subscriber Subscriber;

struct _PlegdEvents {
    PlegdEventRing *ring;
    char *instance;     /* a UUID: seqs of another plegd history are not ours */
    guint64 next_taken; /* the seq plegd_events_take_seq() gives next */
    guint max_clients;
    gint64 cutoff_grace_usec;
    GMainContext *context;
    GList *subscribers; /* Subscriber *, newest first */
    guint n_subscribers;
    GSource *flush; /* pending: write to every client that can take more */

    PlegMetric *clients;
    PlegMetric *disconnected;
    PlegMetric *refused;
    PlegMetricSeries *last_seq; /* set per event: resolved once */

    gint64 last_cutoff_log_usec;
    guint n_cutoffs_unlogged;
};

struct _Subscriber {
    PlegdEvents *events;
    GList *link;
    SoupServerMessage *msg;
    GSocket *socket;
    guint64 next_seq;   /* the first seq not handed to libsoup yet (nor skipped) */
    gboolean in_flight; /* a chunk handed to libsoup and not written yet */
    gboolean ending;    /* the body is complete: nothing more is added */
    GSource *watch;     /* the client's side of the socket: its end shows it went away */
    GSource *grace;     /* after a cut-off: closes the socket when the client does not read */

    PlegdEventFilter *filter; /* NULL: every event */
    gboolean follow;          /* FALSE: the body ends at history_end */
    guint64 history_end;      /* the ring's next seq when the request came (or until_time did) */
    gboolean has_until;
    gint64 until_ns;      /* until_time: later events are not sent; a live one ends the stream */
    GSource *until_timer; /* ends a live stream when the wall clock passes until_ns */
};

static void schedule_flush(PlegdEvents *events);

static void
destroy_source(GSource **source)
{
    if (*source) {
        g_source_destroy(*source);
        g_clear_pointer(source, g_source_unref);
    }
}

/* {"error":@message,"reason":@reason,<number_name>:@number} and a newline. */
static char *
error_json(const char *message, const char *reason, const char *number_name, guint64 number,
           const char *number2_name, guint64 number2)
{
    g_autoptr(JsonBuilder) builder = json_builder_new();
    g_autoptr(JsonGenerator) generator = json_generator_new();
    g_autoptr(JsonNode) root = NULL;

    json_builder_begin_object(builder);
    json_builder_set_member_name(builder, "error");
    json_builder_add_string_value(builder, message);
    json_builder_set_member_name(builder, "reason");
    json_builder_add_string_value(builder, reason);
    json_builder_set_member_name(builder, number_name);
    json_builder_add_int_value(builder, (gint64)number);
    if (number2_name) {
        json_builder_set_member_name(builder, number2_name);
        json_builder_add_int_value(builder, (gint64)number2);
    }
    json_builder_end_object(builder);
    root = json_builder_get_root(builder);
    json_generator_set_root(generator, root);
    return json_generator_to_data(generator, NULL);
}

/* ---- subscribers ---- */

static void
subscriber_free(Subscriber *sub)
{
    PlegdEvents *events = sub->events;

    events->subscribers = g_list_delete_link(events->subscribers, sub->link);
    events->n_subscribers--;
    pleg_metric_set(events->clients, NULL, events->n_subscribers);
    destroy_source(&sub->watch);
    destroy_source(&sub->grace);
    destroy_source(&sub->until_timer);
    plegd_event_filter_free(sub->filter);
    g_signal_handlers_disconnect_by_data(sub->msg, sub);
    g_object_unref(sub->msg);
    g_clear_object(&sub->socket);
    g_free(sub);
}

/* Completes the body: libsoup writes what is queued (and the chunked terminator) and finishes
 * the message, or fails to on a socket shut down and finishes it all the same. */
static void
end_stream(Subscriber *sub)
{
    sub->ending = TRUE;
    soup_message_body_complete(soup_server_message_get_response_body(sub->msg));
    soup_server_message_unpause(sub->msg);
}

static void
close_socket(Subscriber *sub)
{
    g_autoptr(GError) error = NULL;

    if (sub->socket && !g_socket_shutdown(sub->socket, TRUE, TRUE, &error))
        g_debug("cannot shut down an /events connection: %s, ignoring", error->message);
}

static gboolean
on_grace_over(gpointer data)
{
    Subscriber *sub = data;

    g_debug("an /events client cut off did not read its last lines in time, closing");
    g_clear_pointer(&sub->grace, g_source_unref);
    close_socket(sub);
    return G_SOURCE_REMOVE;
}

static void
log_cutoff(PlegdEvents *events, guint64 missed_seq)
{
    gint64 now = g_get_monotonic_time();

    events->n_cutoffs_unlogged++;
    if (events->last_cutoff_log_usec != 0 &&
        now - events->last_cutoff_log_usec < PLEGD_FAILURE_LOG_INTERVAL_USEC) {
        g_debug("an /events client is cut off: seq %" G_GUINT64_FORMAT " left the ring before "
                "it was sent",
                missed_seq);
        return;
    }
    if (events->n_cutoffs_unlogged == 1)
        g_message("an /events client does not read fast enough: seq %" G_GUINT64_FORMAT
                  " left the ring (--events-ring-size=%u) before it was sent; disconnecting it",
                  missed_seq, plegd_event_ring_get_capacity(events->ring));
    else
        g_message("%u /events clients did not read fast enough and were disconnected since the "
                  "last report (--events-ring-size=%u)",
                  events->n_cutoffs_unlogged, plegd_event_ring_get_capacity(events->ring));
    events->n_cutoffs_unlogged = 0;
    events->last_cutoff_log_usec = now;
}

/* Ends the stream with a last line saying why; the client has the grace period to read it. */
static void
end_with_error(Subscriber *sub, const char *reason, const char *message)
{
    PlegdEvents *events = sub->events;
    const char *const labels[] = {reason};
    g_autofree char *json = error_json(message, reason, "next_seq", sub->next_seq, NULL, 0);
    char *line = g_strconcat(json, "\n", NULL);

    pleg_metric_inc(events->disconnected, labels);
    soup_message_body_append(soup_server_message_get_response_body(sub->msg), SOUP_MEMORY_TAKE,
                             line, strlen(line));
    end_stream(sub);
    sub->grace = g_timeout_source_new((guint)MAX(1, sub->events->cutoff_grace_usec / 1000));
    g_source_set_callback(sub->grace, on_grace_over, sub, NULL);
    g_source_attach(sub->grace, events->context);
}

/* The client's next unsent line was dropped from the ring: it would miss an event. */
static void
cut_off(Subscriber *sub)
{
    g_autofree char *message = g_strdup_printf(
        "slow consumer: seq %" G_GUINT64_FORMAT " left the ring (%u events) before it was sent",
        sub->next_seq, plegd_event_ring_get_capacity(sub->events->ring));

    log_cutoff(sub->events, sub->next_seq);
    end_with_error(sub, REASON_SLOW_CONSUMER, message);
}

/* Whether @sub is to get the event @seq of @key, ending aside: the one match of @sub's filter
 * against that event, as @sub's cursor passes it (or as it leaves the ring before). */
static gboolean
wants(Subscriber *sub, guint64 seq, const PlegdEventKey *key)
{
    if (!sub->follow && seq >= sub->history_end)
        return FALSE;
    if (sub->has_until && key->time_ns > sub->until_ns)
        return FALSE;
    return !sub->filter || plegd_event_filter_match(sub->filter, key);
}

/* Hands libsoup the next chunk of lines @sub wants, when it wrote the previous one; ends a
 * bounded read once it has everything. */
static void
flush_subscriber(Subscriber *sub)
{
    PlegdEventRing *ring = sub->events->ring;
    guint64 next = plegd_event_ring_get_next_seq(ring);
    guint64 end = sub->follow ? next : MIN(next, sub->history_end);
    g_autoptr(GByteArray) chunk = NULL;
    GBytes *first = NULL;
    gsize size = 0;
    guint scanned = 0;
    gboolean past_until = FALSE;

    if (sub->in_flight || sub->ending)
        return;
    for (; sub->next_seq < end && scanned < SCAN_BUDGET; sub->next_seq++, scanned++) {
        GBytes *line;
        gsize line_size;

        if (sub->filter || sub->has_until) {
            const PlegdEventKey *key = plegd_event_ring_lookup_key(ring, sub->next_seq);

            g_return_if_fail(key != NULL); /* publish() cuts off whoever lags this far */
            /* A live event later than until_time ends the stream; the ring's history may hold
             * later ones before earlier ones (the wall clock stepped back): skipped. */
            if (sub->has_until && key->time_ns > sub->until_ns &&
                sub->next_seq >= sub->history_end) {
                past_until = TRUE;
                break;
            }
            if (!wants(sub, sub->next_seq, key))
                continue;
        }
        line = plegd_event_ring_lookup(ring, sub->next_seq);
        g_return_if_fail(line != NULL);
        line_size = g_bytes_get_size(line);
        if (first && size + line_size > PLEGD_EVENTS_CHUNK_BYTES)
            break;
        if (!first) {
            first = line;
        } else {
            if (!chunk) {
                chunk = g_byte_array_sized_new(PLEGD_EVENTS_CHUNK_BYTES);
                g_byte_array_append(chunk, g_bytes_get_data(first, NULL), size);
            }
            g_byte_array_append(chunk, g_bytes_get_data(line, NULL), line_size);
        }
        size += line_size;
    }

    if (chunk) {
        gsize len;
        guint8 *data = g_byte_array_steal(chunk, &len);

        soup_message_body_append_take(soup_server_message_get_response_body(sub->msg), data, len);
    } else if (first) {
        soup_message_body_append_bytes(soup_server_message_get_response_body(sub->msg), first);
    }
    if (first) {
        sub->in_flight = TRUE;
        soup_server_message_unpause(sub->msg);
    }
    if (past_until || (!sub->follow && sub->next_seq >= sub->history_end)) {
        g_debug("a bounded /events stream ends at seq %" G_GUINT64_FORMAT, sub->next_seq);
        end_stream(sub);
    } else if (!first && sub->next_seq < end) {
        schedule_flush(sub->events); /* out of budget: the rest after other sources ran */
    }
}

static void
on_wrote_chunk(SoupServerMessage *msg, gpointer data)
{
    Subscriber *sub = data;

    sub->in_flight = FALSE;
    if (!sub->ending &&
        (!sub->follow || sub->next_seq < plegd_event_ring_get_next_seq(sub->events->ring)))
        schedule_flush(sub->events);
}

/* until_time came on the wall clock: what was published until now is the stream's last. */
static gboolean
on_until(gpointer data)
{
    Subscriber *sub = data;
    gint64 left_ms = (sub->until_ns - g_get_real_time() * 1000) / 1000000;

    g_clear_pointer(&sub->until_timer, g_source_unref);
    if (left_ms > 0) {
        /* The monotonic timer ran ahead of the wall clock (or it was set for more than 49
         * days): wait for the rest. */
        sub->until_timer = g_timeout_source_new((guint)MIN(left_ms + 1, G_MAXUINT));
        g_source_set_callback(sub->until_timer, on_until, sub, NULL);
        g_source_attach(sub->until_timer, sub->events->context);
        return G_SOURCE_REMOVE;
    }
    sub->follow = FALSE;
    sub->history_end = plegd_event_ring_get_next_seq(sub->events->ring);
    flush_subscriber(sub);
    return G_SOURCE_REMOVE;
}

/* The message is done: the client went away, or its stream ended. */
static void
on_finished(SoupServerMessage *msg, gpointer data)
{
    Subscriber *sub = data;

    g_debug("an /events stream ended at seq %" G_GUINT64_FORMAT, sub->next_seq);
    subscriber_free(sub);
}

/* The client sends nothing after its request: the end of its side means it went away. */
static gboolean
on_socket_readable(GSocket *socket, GIOCondition condition, gpointer data)
{
    Subscriber *sub = data;
    gsize drained = 0;

    while (drained < DRAIN_BYTES) {
        g_autoptr(GError) error = NULL;
        char buffer[4096];
        gssize n =
            g_socket_receive_with_blocking(socket, buffer, sizeof buffer, FALSE, NULL, &error);

        if (n < 0 && g_error_matches(error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK))
            return G_SOURCE_CONTINUE;
        if (n <= 0) {
            g_debug("an /events client went away%s%s", error ? ": " : "",
                    error ? error->message : "");
            g_clear_pointer(&sub->watch, g_source_unref);
            close_socket(sub);
            if (!sub->ending)
                end_stream(sub);
            return G_SOURCE_REMOVE;
        }
        drained += (gsize)n; /* a pipelined request is never answered: drop it */
    }
    return G_SOURCE_CONTINUE;
}

/* ---- the hub ---- */

static gboolean
on_flush(gpointer data)
{
    PlegdEvents *events = data;

    g_clear_pointer(&events->flush, g_source_unref);
    for (GList *l = events->subscribers; l; l = l->next)
        flush_subscriber(l->data);
    return G_SOURCE_REMOVE;
}

/* Batches every event published in one main loop iteration into one chunk per client. */
static void
schedule_flush(PlegdEvents *events)
{
    if (events->flush)
        return;
    events->flush = g_idle_source_new();
    g_source_set_priority(events->flush, G_PRIORITY_DEFAULT);
    g_source_set_callback(events->flush, on_flush, events, NULL);
    g_source_attach(events->flush, events->context);
}

PlegdEvents *
plegd_events_new(guint ring_size, guint max_clients, PlegMetricsRegistry *metrics)
{
    static const char *const reason_label[] = {"reason", NULL};
    PlegdEvents *events = g_new0(PlegdEvents, 1);
    const char *const slow[] = {REASON_SLOW_CONSUMER};
    const char *const shutting_down[] = {REASON_SHUTTING_DOWN};
    const char *const gone[] = {REASON_GONE};
    const char *const too_many[] = {REASON_TOO_MANY_CLIENTS};
    const char *const history_changed[] = {REASON_HISTORY_CHANGED};

    events->ring = plegd_event_ring_new(ring_size);
    events->instance = g_uuid_string_random();
    events->next_taken = plegd_event_ring_get_next_seq(events->ring);
    events->max_clients = max_clients;
    events->cutoff_grace_usec = PLEGD_HTTP_IDLE_TIMEOUT_USEC;
    events->context = g_main_context_ref_thread_default();
    events->clients = pleg_metrics_register(metrics, PLEG_METRIC_GAUGE, "plegd_events_clients",
                                            "Clients streaming GET /events.", NULL, NULL, 0);
    events->disconnected = pleg_metrics_register(
        metrics, PLEG_METRIC_COUNTER, "plegd_events_clients_disconnected_total",
        "/events clients plegd disconnected, by reason.", reason_label, NULL, 0);
    events->refused = pleg_metrics_register(
        metrics, PLEG_METRIC_COUNTER, "plegd_events_refused_total",
        "/events requests refused: gone (410, ?since= older than the ring), too_many_clients "
        "(503).",
        reason_label, NULL, 0);
    events->last_seq = pleg_metric_get_series(
        pleg_metrics_register(metrics, PLEG_METRIC_GAUGE, "plegd_events_last_seq",
                              "The seq of the newest event (0: none yet).", NULL, NULL, 0),
        NULL);
    /* Every series from the start, so that rate() sees the first increase. */
    pleg_metric_add(events->disconnected, slow, 0);
    pleg_metric_add(events->disconnected, shutting_down, 0);
    pleg_metric_add(events->disconnected, history_changed, 0);
    pleg_metric_add(events->refused, gone, 0);
    pleg_metric_add(events->refused, too_many, 0);
    pleg_metric_set(events->clients, NULL, 0);
    pleg_metric_series_set(events->last_seq, 0);
    return events;
}

void
plegd_events_free(PlegdEvents *events)
{
    if (!events)
        return;
    while (events->subscribers) {
        Subscriber *sub = events->subscribers->data;

        close_socket(sub);
        subscriber_free(sub);
    }
    destroy_source(&events->flush);
    g_main_context_unref(events->context);
    plegd_event_ring_free(events->ring);
    g_free(events->instance);
    g_free(events);
}

void
plegd_events_end_all(PlegdEvents *events)
{
    for (GList *l = events->subscribers; l; l = l->next) {
        Subscriber *sub = l->data;

        if (!sub->ending)
            end_with_error(sub, REASON_SHUTTING_DOWN, "plegd is shutting down");
    }
}

const char *
plegd_events_get_instance(PlegdEvents *events)
{
    return events->instance;
}

void
plegd_events_get_seqs(PlegdEvents *events, guint64 *ret_oldest, guint64 *ret_newest)
{
    if (ret_oldest)
        *ret_oldest = plegd_event_ring_get_oldest_seq(events->ring);
    if (ret_newest)
        *ret_newest = plegd_event_ring_get_next_seq(events->ring) - 1;
}

void
plegd_events_set_cutoff_grace(PlegdEvents *events, gint64 grace_usec)
{
    events->cutoff_grace_usec = grace_usec;
}

guint
plegd_events_get_n_clients(PlegdEvents *events)
{
    return events->n_subscribers;
}

/* The oldest event is about to leave the ring: a client whose cursor has not passed it yet
 * skips it when it does not want it, and is cut off when it would miss it. */
static void
before_eviction(PlegdEvents *events)
{
    guint64 oldest = plegd_event_ring_get_oldest_seq(events->ring);
    const PlegdEventKey *key = plegd_event_ring_lookup_key(events->ring, oldest);

    for (GList *l = events->subscribers; l; l = l->next) {
        Subscriber *sub = l->data;

        if (sub->ending || sub->next_seq > oldest)
            continue;
        if (wants(sub, oldest, key))
            cut_off(sub);
        else
            sub->next_seq = oldest + 1;
    }
}

void
plegd_events_start_history(PlegdEvents *events, const char *instance, guint64 first_seq,
                           guint64 next_seq)
{
    g_return_if_fail(events->next_taken == plegd_event_ring_get_next_seq(events->ring));

    g_free(events->instance);
    events->instance = g_strdup(instance);
    plegd_event_ring_start(events->ring, first_seq, next_seq);
    events->next_taken = next_seq;
    pleg_metric_series_set(events->last_seq, (double)(next_seq - 1));
}

void
plegd_events_break_history(PlegdEvents *events, const char *instance, guint64 first_seq,
                           guint64 renumbered_from)
{
    g_autofree char *message = g_strdup_printf(
        "plegd cannot write its state directory: its events are not durable, and a new history "
        "starts (instance %s, seq %" G_GUINT64_FORMAT "); relist, then follow /events",
        instance, first_seq);

    for (GList *l = events->subscribers; l; l = l->next) {
        Subscriber *sub = l->data;

        if (!sub->ending)
            end_with_error(sub, REASON_HISTORY_CHANGED, message);
    }
    plegd_event_ring_clear(events->ring);
    events->next_taken = events->next_taken - renumbered_from + first_seq;
    g_free(events->instance);
    events->instance = g_strdup(instance);
    plegd_event_ring_start(events->ring, first_seq, first_seq);
}

void
plegd_events_restore_line(PlegdEvents *events, guint64 seq, GBytes *line, PlegdEventKey *key)
{
    PlegdEventRing *ring = events->ring;

    if (plegd_event_ring_get_oldest_seq(ring) == plegd_event_ring_get_next_seq(ring))
        plegd_event_ring_start(ring, plegd_event_ring_get_first_seq(ring), seq);
    g_return_if_fail(seq == plegd_event_ring_get_next_seq(ring));
    plegd_event_ring_push_key(ring, line, key, NULL);
    events->next_taken = seq + 1;
    pleg_metric_series_set(events->last_seq, (double)seq);
}

guint64
plegd_events_take_seq(PlegdEvents *events)
{
    return events->next_taken++;
}

void
plegd_events_publish_line(PlegdEvents *events, const PlegPodLifecycleEvent *event, guint64 seq,
                          GBytes *line)
{
    PlegdEventRing *ring = events->ring;

    g_return_if_fail(seq == plegd_event_ring_get_next_seq(ring));
    if (events->subscribers &&
        seq - plegd_event_ring_get_oldest_seq(ring) == plegd_event_ring_get_capacity(ring))
        before_eviction(events);
    plegd_event_ring_push(ring, line, event, NULL);
    pleg_metric_series_set(events->last_seq, (double)seq);
    if (events->subscribers)
        schedule_flush(events);
}

GBytes *
plegd_events_publish(PlegdEvents *events, const PlegPodLifecycleEvent *event, guint64 *ret_seq)
{
    guint64 seq = plegd_events_take_seq(events);
    GBytes *line = plegd_event_to_line(event, seq);

    plegd_events_publish_line(events, event, seq, line);
    if (ret_seq)
        *ret_seq = seq;
    return line;
}

/* ---- requests ---- */

static void
respond(SoupServerMessage *msg, guint status, const char *content_type, char *body)
{
    soup_server_message_set_status(msg, status, NULL);
    soup_server_message_set_response(msg, content_type, SOUP_MEMORY_TAKE, body, strlen(body));
}

/* What a request for /events asks for. */
typedef struct {
    gboolean has_since;
    guint64 since;
    char *instance;
    gboolean follow;
    PlegdEventFilter *filter;
} Request;

static void
request_clear(Request *request)
{
    g_clear_pointer(&request->instance, g_free);
    g_clear_pointer(&request->filter, plegd_event_filter_free);
}
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(Request, request_clear)

#define PARAMETERS                                                                                 \
    "since, instance, follow, type, namespace, pod, pod_uid, container, sandbox, since_time and "  \
    "until_time"

/* since, instance and follow at most once each; the filter's keys; nothing else. */
static gboolean
parse_query(const char *query, gint64 now_ns, Request *ret_request, GError **error)
{
    g_autoptr(GPtrArray) params = plegd_http_parse_query(query, error);
    gboolean has_instance = FALSE, has_follow = FALSE;

    ret_request->follow = TRUE;
    ret_request->filter = plegd_event_filter_new(now_ns);
    if (!params)
        return FALSE;
    for (guint i = 0; i < params->len; i += 2) {
        const char *name = params->pdata[i];
        const char *value = params->pdata[i + 1];
        g_autofree char *shown = pleg_log_text(name, -1, 0);
        g_autoptr(GError) local_error = NULL;

        if ((g_str_equal(name, "since") && ret_request->has_since) ||
            (g_str_equal(name, "instance") && has_instance) ||
            (g_str_equal(name, "follow") && has_follow)) {
            g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                        "query parameter \"%s\" given more than once", shown);
            return FALSE;
        }
        if (g_str_equal(name, "instance")) {
            has_instance = TRUE;
            if (value[0] == '\0') {
                g_set_error_literal(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                                    "invalid instance \"\": expected the value of the "
                                    "Plegd-Instance header");
                return FALSE;
            }
            ret_request->instance = g_strdup(value);
        } else if (g_str_equal(name, "follow")) {
            has_follow = TRUE;
            if (!g_str_equal(value, "true") && !g_str_equal(value, "false")) {
                g_autofree char *shown_value = pleg_log_text(value, -1, 0);

                g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                            "invalid follow \"%s\": expected true (the default: live events "
                            "after the history) or false (the history only, then the end)",
                            shown_value);
                return FALSE;
            }
            ret_request->follow = g_str_equal(value, "true");
        } else if (g_str_equal(name, "since")) {
            if (!g_ascii_string_to_unsigned(value, 10, 0, G_MAXINT64, &ret_request->since,
                                            &local_error)) {
                g_autofree char *shown_value = pleg_log_text(value, -1, 0);
                /* GLib's reason quotes the value again, raw. */
                g_autofree char *why = pleg_log_text(local_error->message, -1, 0);

                g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                            "invalid since \"%s\": %s (expected the seq of the last event seen)",
                            shown_value, why);
                return FALSE;
            }
            ret_request->has_since = TRUE;
        } else if (!plegd_event_filter_add(ret_request->filter, name, value, &local_error)) {
            if (g_error_matches(local_error, G_OPTION_ERROR, G_OPTION_ERROR_UNKNOWN_OPTION))
                g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                            "%s (/events takes " PARAMETERS ")", local_error->message);
            else
                g_propagate_error(error, g_steal_pointer(&local_error));
            return FALSE;
        }
    }
    if (plegd_event_filter_is_empty(ret_request->filter))
        g_clear_pointer(&ret_request->filter, plegd_event_filter_free);
    return TRUE;
}

/* 410 with {"error", "reason":"gone", "oldest_seq", "newest_seq"}. */
static void
respond_gone(PlegdEvents *events, SoupServerMessage *msg, const char *message)
{
    const char *const labels[] = {REASON_GONE};
    guint64 oldest, newest;
    g_autofree char *json = NULL;

    plegd_events_get_seqs(events, &oldest, &newest);
    json = error_json(message, REASON_GONE, "oldest_seq", oldest, "newest_seq", newest);

    pleg_metric_inc(events->refused, labels);
    respond(msg, SOUP_STATUS_GONE, JSON_CONTENT_TYPE, g_strconcat(json, "\n", NULL));
}

gboolean
plegd_events_serve(PlegdEvents *events, SoupServerMessage *msg, GSocket *socket)
{
    g_autofree char *path = NULL, *query = NULL;
    g_autoptr(GError) error = NULL;
    SoupMessageHeaders *headers = soup_server_message_get_response_headers(msg);
    gboolean head = g_str_equal(soup_server_message_get_method(msg), SOUP_METHOD_HEAD);
    gint64 now_ns = g_get_real_time() * 1000;
    g_auto(Request) request = {0};
    guint64 next = plegd_event_ring_get_next_seq(events->ring);
    gint64 since_ns = 0;
    gboolean has_since_time;
    char newest_text[G_ASCII_DTOSTR_BUF_SIZE];
    Subscriber *sub;

    plegd_http_get_target(msg, &path, &query);
    soup_message_headers_replace(headers, "Plegd-Instance", events->instance);
    /* A stream without since starts after it: since=it resumes one that ended before its first
     * event. */
    g_snprintf(newest_text, sizeof newest_text, "%" G_GUINT64_FORMAT, next - 1);
    soup_message_headers_replace(headers, "Plegd-Newest-Seq", newest_text);
    if (!parse_query(query, now_ns, &request, &error)) {
        respond(msg, SOUP_STATUS_BAD_REQUEST, TEXT_CONTENT_TYPE,
                g_strconcat(error->message, "\n", NULL));
        return FALSE;
    }
    has_since_time = request.filter && plegd_event_filter_get_since_time(request.filter, &since_ns);
    /* A UUID: its hex digits in either case are the same id. */
    if (request.instance && g_ascii_strcasecmp(request.instance, events->instance) != 0) {
        g_autofree char *shown = pleg_log_text(request.instance, -1, 0);

        g_set_error(&error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                    "instance %s is not this plegd's history (%s): plegd restarted without the "
                    "state it had (its state was lost, or it keeps none: --state-dir); relist, "
                    "then follow /events",
                    shown, events->instance);
    }
    /* After since, since_time only selects: the ring holds everything after since. */
    if (error ||
        (request.has_since && !plegd_event_ring_check_since(events->ring, request.since, &error)) ||
        (!request.has_since && has_since_time &&
         !plegd_event_ring_check_since_time(events->ring, since_ns, &error))) {
        respond_gone(events, msg, error->message);
        return FALSE;
    }
    if (events->n_subscribers >= events->max_clients) {
        const char *const labels[] = {REASON_TOO_MANY_CLIENTS};

        pleg_metric_inc(events->refused, labels);
        soup_message_headers_replace(headers, "Retry-After", "10");
        respond(msg, SOUP_STATUS_SERVICE_UNAVAILABLE, TEXT_CONTENT_TYPE,
                g_strdup_printf("plegd serves at most %u /events streams at once "
                                "(--events-max-clients)\n",
                                events->max_clients));
        return FALSE;
    }

    soup_server_message_set_status(msg, SOUP_STATUS_OK, NULL);
    soup_message_headers_set_content_type(headers, NDJSON_CONTENT_TYPE, NULL);
    soup_message_headers_replace(headers, "Cache-Control", "no-store");
    /* A stream is the last answer on its connection; HTTP/1.0 knows no chunks, its end is the
     * end of the connection.  HEAD gets the same headers, without the body. */
    soup_message_headers_replace(headers, "Connection", "close");
    soup_message_headers_set_encoding(headers,
                                      soup_server_message_get_http_version(msg) == SOUP_HTTP_1_0
                                          ? SOUP_ENCODING_EOF
                                          : SOUP_ENCODING_CHUNKED);
    if (head)
        return FALSE;

    soup_message_body_set_accumulate(soup_server_message_get_response_body(msg), FALSE);

    sub = g_new0(Subscriber, 1);
    sub->events = events;
    sub->msg = g_object_ref(msg);
    sub->socket = socket ? g_object_ref(socket) : NULL;
    if (sub->socket && !g_socket_set_option(sub->socket, SOL_SOCKET, SO_SNDBUF,
                                            PLEGD_EVENTS_SOCKET_SNDBUF, &error))
        g_debug("cannot set SO_SNDBUF of an /events connection: %s, ignoring", error->message);
    sub->follow = request.follow;
    sub->history_end = next;
    if (request.filter)
        sub->has_until = plegd_event_filter_get_until_time(request.filter, &sub->until_ns);
    sub->filter = g_steal_pointer(&request.filter);
    if (sub->has_until && sub->follow) {
        if (sub->until_ns <= now_ns) {
            sub->follow = FALSE; /* it passed: the history until then */
        } else {
            sub->until_timer =
                g_timeout_source_new((guint)MIN((sub->until_ns - now_ns) / 1000000 + 1, G_MAXUINT));
            g_source_set_callback(sub->until_timer, on_until, sub, NULL);
            g_source_attach(sub->until_timer, events->context);
        }
    }
    /* Without since: live events only, unless since_time or a bounded read asks for history.
     * since=0 is the whole history, whose first seq is not 1 (a fresh history starts at the
     * wall clock in microseconds, a resumed one where its state file starts). */
    if (request.has_since)
        sub->next_seq = request.since == 0 ? plegd_event_ring_get_first_seq(events->ring)
                                           : request.since + 1;
    else if (has_since_time || !sub->follow)
        sub->next_seq = plegd_event_ring_get_oldest_seq(events->ring);
    else
        sub->next_seq = next;
    events->subscribers = g_list_prepend(events->subscribers, sub);
    sub->link = events->subscribers;
    events->n_subscribers++;
    pleg_metric_set(events->clients, NULL, events->n_subscribers);
    g_signal_connect(msg, "wrote-chunk", G_CALLBACK(on_wrote_chunk), sub);
    g_signal_connect(msg, "finished", G_CALLBACK(on_finished), sub);
    if (sub->socket) {
        sub->watch = g_socket_create_source(sub->socket, G_IO_IN | G_IO_HUP | G_IO_ERR, NULL);
        g_source_set_callback(sub->watch, G_SOURCE_FUNC(on_socket_readable), sub, NULL);
        g_source_attach(sub->watch, events->context);
    }
    g_debug("an /events stream starts at seq %" G_GUINT64_FORMAT "%s%s", sub->next_seq,
            sub->filter ? ", filtered" : "", sub->follow ? "" : ", bounded");
    if (sub->next_seq < next || !sub->follow)
        schedule_flush(events);
    return TRUE;
}
