/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Evented PLEG watcher (KEP-3386, "Design Details"): reads CRI GetContainerEvents and turns
 * each valid CONTAINER_STOPPED_EVENT into RequestRelist(pod UID, evented_pleg).  The payload is a
 * hint only and goes nowhere else; the Generic PLEG stays the only writer of pod state.
 *
 * Threads: one reader thread blocks in container_events_read() and posts what it reads to an
 * inbox source in the plugin's context, where validation, metrics, RequestRelist and the
 * reconnect policy run.  The reader connects only when the context asks it to, so every timer
 * (retry backoff, "connected" settling) lives in the plugin's context.  stop() cancels the call,
 * wakes the reader, joins it and destroys the sources.
 *
 * "Connected" (gauge 1, success count, healthy-since for the backoff reset): the stream
 * delivered its first event, or stayed open for EVENTED_CONNECTED_AFTER_USEC (1 s) without
 * failing; whichever comes first.  A runtime that answers with an immediate error, EOF or
 * UNIMPLEMENTED never counts as connected, so a flapping runtime never resets the backoff.  The
 * host opens the stream fail-fast: while the runtime is away it ends with UNAVAILABLE instead of
 * waiting, so a stream that stays open is one the channel carried to the runtime (READY).
 *
 * Status (set_status, plugin ABI 1.2, shown by plegd in /readyz?verbose): "connecting" from
 * start until the first outcome, then "connected", "unimplemented" (the runtime answered
 * UNIMPLEMENTED: container exits wait for the global relist) or "disconnected" (any other end
 * of the stream, retried with backoff).  Each change of state is logged once at info level;
 * retries that end in the same state only refresh the message (the latest error).
 *
 * Builds with -DEVENTED_TEST_FAST_BACKOFF (tests/evented only, never installed) use a policy in
 * microseconds so that tests can run a thousand reconnects; the logic is the same.
 */
#include <pleg/pleg-plugin.h>

#include <stdarg.h>
#include <time.h>

#include "backoff.h"
#include "pleg-timer-source.h"
#include "decision.h"

#ifdef EVENTED_TEST_FAST_BACKOFF
#define EVENTED_BASE_USEC            100
#define EVENTED_MAX_USEC             (2 * 1000)
#define EVENTED_RESET_AFTER_USEC     (300 * 1000)
/* Under ThreadSanitizer a runtime's UNIMPLEMENTED can take longer than 100 ms to arrive, which
 * would count as a stream that stayed open; 1 s as in the real policy. */
#ifdef __SANITIZE_THREAD__
#define EVENTED_CONNECTED_AFTER_USEC G_USEC_PER_SEC
#else
#define EVENTED_CONNECTED_AFTER_USEC (100 * 1000)
#endif
#else
#define EVENTED_BASE_USEC            EVENTED_BACKOFF_BASE_USEC
#define EVENTED_MAX_USEC             EVENTED_BACKOFF_MAX_USEC
#define EVENTED_RESET_AFTER_USEC     EVENTED_BACKOFF_RESET_AFTER_USEC
#define EVENTED_CONNECTED_AFTER_USEC G_USEC_PER_SEC
#endif

#define EVENTED_LOG_INTERVAL_USEC (60 * G_USEC_PER_SEC)

/* The watcher's states, as set_status words. */
typedef enum {
    EVENTED_STATE_NONE = -1,
    EVENTED_STATE_CONNECTING,
    EVENTED_STATE_CONNECTED,
    EVENTED_STATE_UNIMPLEMENTED,
    EVENTED_STATE_DISCONNECTED,
} EventedState;

static const char *const state_words[] = {
    [EVENTED_STATE_CONNECTING] = "connecting",
    [EVENTED_STATE_CONNECTED] = "connected",
    [EVENTED_STATE_UNIMPLEMENTED] = "unimplemented",
    [EVENTED_STATE_DISCONNECTED] = "disconnected",
};

typedef enum {
    MESSAGE_OPENED,
    MESSAGE_EVENT,
    MESSAGE_ENDED,
} MessageKind;

/* What the reader thread hands to the plugin's context. */
typedef struct {
    MessageKind kind;
    gint64 monotonic_usec;     /* when the reader saw it */
    gint64 received_ns;        /* EVENT: Unix ns of receipt */
    PlegContainerEvent *event; /* EVENT */
    GError *error;             /* ENDED: NULL for a clean close by the runtime */
} Message;

typedef struct {
    const PlegHostServices *services;
    GMainContext *context;

    PlegMetric *error_count;
    PlegMetric *success_count;
    PlegMetric *latency;
    PlegMetric *state;
    PlegMetric *reconnects;
    PlegMetric *received;
    PlegMetric *ignored;

    /* Plugin context only. */
    gboolean started;
    GRand *rand;
    EventedBackoff backoff;
    EventedRateLimit ignore_limits[EVENTED_IGNORE_N];
    GSource *inbox;
    GSource *retry;
    GSource *settle;
    gboolean open;
    gboolean connected;
    gint64 connected_usec;
    EventedState status;
    gint64 status_since_unix_usec; /* wall clock of the last change of status */

    /* Shared with the reader thread, under mutex. */
    GMutex mutex;
    GCond cond;
    GThread *reader;
    gboolean stopping;
    gboolean connect_requested;
    PlegContainerEventStream *stream;
    GQueue messages;
} Evented;

static void
message_free(Evented *self, Message *message)
{
    if (!message)
        return;
    self->services->container_event_free(message->event);
    g_clear_error(&message->error);
    g_free(message);
}

static void log_record(Evented *self, GLogLevelFlags level, const char *message,
                       ...) G_GNUC_NULL_TERMINATED;

/* Structured record: MESSAGE plus NULL-terminated (field, value) pairs. */
static void
log_record(Evented *self, GLogLevelFlags level, const char *message, ...)
{
    GLogField fields[12];
    gsize n = 0;
    const char *key;
    va_list ap;

    fields[n++] = (GLogField){"MESSAGE", message, -1};
    va_start(ap, message);
    while ((key = va_arg(ap, const char *)) && n < G_N_ELEMENTS(fields)) {
        const char *value = va_arg(ap, const char *);
        fields[n++] = (GLogField){key, value ? value : "", -1};
    }
    va_end(ap);
    self->services->log(self->services->host, level, fields, n);
}

static gint64
now_unix_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (gint64)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* RFC 3339 in UTC with milliseconds: "2026-12-04T23:41:07.123Z".  (transfer full) */
static char *
format_wall_time(gint64 unix_usec)
{
    g_autoptr(GDateTime) date = g_date_time_new_from_unix_utc(unix_usec / G_USEC_PER_SEC);
    g_autofree char *seconds = date ? g_date_time_format(date, "%Y-%m-%dT%H:%M:%S") : NULL;

    if (!seconds)
        return g_strdup("an unknown time");
    return g_strdup_printf("%s.%03dZ", seconds, (int)(unix_usec % G_USEC_PER_SEC / 1000));
}

/* How often UNIMPLEMENTED is retried: the jittered cap, "48-60 s".  (transfer full) */
static char *
format_unimplemented_interval(void)
{
    gboolean seconds = EVENTED_MAX_USEC >= G_USEC_PER_SEC;
    double unit = seconds ? G_USEC_PER_SEC : 1000;
    char low[G_ASCII_DTOSTR_BUF_SIZE], high[G_ASCII_DTOSTR_BUF_SIZE];

    g_ascii_formatd(low, sizeof low, "%g", EVENTED_MAX_USEC * (1 - EVENTED_BACKOFF_JITTER) / unit);
    g_ascii_formatd(high, sizeof high, "%g", EVENTED_MAX_USEC / unit);
    return g_strdup_printf("%s-%s %s", low, high, seconds ? "s" : "ms");
}

static gboolean
has_set_status(const PlegHostServices *services)
{
    return services->abi_minor >= 2 && services->set_status;
}

/* Plugin context.  Enters @state, @error (nullable) saying why it left the stream: the status
 * the host shows, and one info record when the state changes (the retries that end in the
 * same state refresh the message with the latest error, and log nothing at info level). */
static void
set_state(Evented *self, EventedState state, const char *error)
{
    const PlegHostServices *services = self->services;
    gboolean changed = state != self->status;
    GLogLevelFlags level;
    g_autofree char *since = NULL;
    g_autofree char *text = NULL;
    g_autofree char *record = NULL;

    if (changed) {
        self->status = state;
        self->status_since_unix_usec = g_get_real_time();
    }
    since = format_wall_time(self->status_since_unix_usec);
    switch (state) {
    case EVENTED_STATE_UNIMPLEMENTED: {
        g_autofree char *interval = format_unimplemented_interval();

        text = g_strdup_printf("the runtime answered UNIMPLEMENTED to GetContainerEvents; "
                               "retrying every %s; container exits are detected by the global "
                               "relist",
                               interval);
        break;
    }
    case EVENTED_STATE_DISCONNECTED:
        text = g_strdup_printf("disconnected since %s: %s; retrying with backoff", since,
                               error ? error : "stream closed by the runtime");
        break;
    default:
        text = g_strdup_printf("%s since %s", state_words[state], since);
        break;
    }
    if (has_set_status(services))
        services->set_status(services->host, state_words[state], text);
    if (!changed)
        return;
    /* Connecting is where every start begins, not news. */
    level = state == EVENTED_STATE_CONNECTING ? G_LOG_LEVEL_DEBUG : G_LOG_LEVEL_INFO;
    record = g_strconcat("Container event stream: ", text, NULL);
    if (error)
        log_record(self, level, record, "STATE", state_words[state], "ERROR", error, NULL);
    else
        log_record(self, level, record, "STATE", state_words[state], NULL);
}

/* A source that dispatches when its ready time is reached, then waits to be armed again. */
static GSource *
wakeup_source_new(Evented *self, const char *name, GSourceFunc func)
{
    GSource *source = pleg_timer_source_new();

    g_source_set_name(source, name);
    g_source_set_callback(source, func, self, NULL);
    g_source_attach(source, self->context);
    return source;
}

static void
source_clear(GSource **source)
{
    if (*source) {
        g_source_destroy(*source);
        g_clear_pointer(source, g_source_unref);
    }
}

static void
source_arm(GSource *source, gint64 delay_usec)
{
    g_source_set_ready_time(source, delay_usec <= 0 ? 0 : g_get_monotonic_time() + delay_usec);
}

/* Reader thread. */
static void
post(Evented *self, Message *message)
{
    g_mutex_lock(&self->mutex);
    g_queue_push_tail(&self->messages, message);
    g_mutex_unlock(&self->mutex);
    g_source_set_ready_time(self->inbox, 0);
}

static void
post_ended(Evented *self, GError *error)
{
    Message *message = g_new0(Message, 1);

    message->kind = MESSAGE_ENDED;
    message->monotonic_usec = g_get_monotonic_time();
    message->error = error;
    post(self, message);
}

static gpointer
reader_main(gpointer data)
{
    Evented *self = data;
    const PlegHostServices *services = self->services;

    for (;;) {
        PlegContainerEventStream *stream;
        GError *error = NULL;
        Message *message;

        g_mutex_lock(&self->mutex);
        while (!self->stopping && !self->connect_requested)
            g_cond_wait(&self->cond, &self->mutex);
        if (self->stopping) {
            g_mutex_unlock(&self->mutex);
            break;
        }
        self->connect_requested = FALSE;
        g_mutex_unlock(&self->mutex);

        stream = services->container_events_open(services->host, &error);
        if (!stream) {
            post_ended(self, error);
            continue;
        }

        g_mutex_lock(&self->mutex);
        if (self->stopping) {
            g_mutex_unlock(&self->mutex);
            services->container_events_free(stream);
            break;
        }
        self->stream = stream;
        g_mutex_unlock(&self->mutex);

        message = g_new0(Message, 1);
        message->kind = MESSAGE_OPENED;
        message->monotonic_usec = g_get_monotonic_time();
        post(self, message);

        for (;;) {
            PlegContainerEvent *event = NULL;

            if (!services->container_events_read(stream, &event, &error)) {
                post_ended(self, error);
                break;
            }
            if (!event) {
                post_ended(self, NULL);
                break;
            }
            message = g_new0(Message, 1);
            message->kind = MESSAGE_EVENT;
            message->received_ns = now_unix_ns();
            message->monotonic_usec = g_get_monotonic_time();
            message->event = event;
            post(self, message);
        }

        g_mutex_lock(&self->mutex);
        self->stream = NULL;
        g_mutex_unlock(&self->mutex);
        services->container_events_free(stream);
    }
    return NULL;
}

/* Plugin context from here on. */
static void
request_connect(Evented *self)
{
    g_mutex_lock(&self->mutex);
    self->connect_requested = TRUE;
    g_cond_signal(&self->cond);
    g_mutex_unlock(&self->mutex);
}

static void
mark_connected(Evented *self, gint64 now_usec)
{
    if (self->connected)
        return;
    self->connected = TRUE;
    self->connected_usec = now_usec;
    g_source_set_ready_time(self->settle, -1);
    self->services->metric_add(self->success_count, NULL, 1);
    self->services->metric_set(self->state, NULL, 1);
    set_state(self, EVENTED_STATE_CONNECTED, NULL);
}

static gboolean
settle_cb(gpointer data)
{
    Evented *self = data;

    if (self->open)
        mark_connected(self, g_get_monotonic_time());
    return G_SOURCE_CONTINUE;
}

static gboolean
retry_cb(gpointer data)
{
    Evented *self = data;

    self->services->metric_add(self->reconnects, NULL, 1);
    request_connect(self);
    return G_SOURCE_CONTINUE;
}

/* "" or " (N more since the last report)".  (transfer full) */
static char *
suppressed_note(guint64 suppressed)
{
    if (suppressed == 0)
        return g_strdup("");
    return g_strdup_printf(" (%" G_GUINT64_FORMAT " more since the last report)", suppressed);
}

static void
handle_event(Evented *self, const Message *message)
{
    const PlegHostServices *services = self->services;
    const PlegContainerEvent *event = message->event;
    const char *container_id = event->container_id ? event->container_id : "";
    EventedDecision decision;

    evented_decide(event, message->received_ns, &decision);
    mark_connected(self, message->monotonic_usec);

    services->metric_add(self->received, (const char *const[]){decision.type_label, NULL}, 1);
    if (decision.has_latency)
        services->metric_observe(self->latency, NULL, decision.latency_seconds);

    if (decision.ignore_reason >= 0) {
        EventedIgnoreReason reason = decision.ignore_reason;
        const char *label = evented_ignore_reason_label(reason);
        guint64 suppressed = 0;

        services->metric_add(self->ignored, (const char *const[]){label, NULL}, 1);
        if (evented_rate_limit_check(&self->ignore_limits[reason], message->monotonic_usec,
                                     &suppressed)) {
            g_autofree char *note = suppressed_note(suppressed);
            g_autofree char *text = g_strdup_printf(
                "Container event %s, ignoring (container %s, type %s)%s",
                evented_ignore_reason_message(reason), container_id, decision.type_label, note);
            g_autofree char *suppressed_text = g_strdup_printf("%" G_GUINT64_FORMAT, suppressed);

            log_record(self, G_LOG_LEVEL_INFO, text, "REASON", label, "CONTAINER_ID",
                       container_id, "EVENT_TYPE", decision.type_label, "SUPPRESSED",
                       suppressed_text, NULL);
        }
        return;
    }

    if (decision.relist_pod_uid) {
        int result = services->request_relist(services->host, decision.relist_pod_uid,
                                              PLEG_PLUGIN_RELIST_SOURCE_EVENTED_PLEG);
        static const char *const results[] = {"queued", "coalesced", "dropped"};

        log_record(self, G_LOG_LEVEL_DEBUG, "Container stopped, relist requested", "POD_UID",
                   decision.relist_pod_uid, "CONTAINER_ID", container_id, "RESULT",
                   result >= 0 && result < (int)G_N_ELEMENTS(results) ? results[result] : "unknown",
                   NULL);
    }
}

static gboolean
is_unimplemented(const GError *error)
{
    return error && error->code == PLEG_PLUGIN_CRI_UNIMPLEMENTED &&
           g_strcmp0(g_quark_to_string(error->domain), PLEG_PLUGIN_CRI_ERROR_DOMAIN) == 0;
}

static void
handle_ended(Evented *self, const Message *message)
{
    const PlegHostServices *services = self->services;
    gboolean unimplemented = is_unimplemented(message->error);
    const char *why = message->error ? message->error->message : "stream closed by the runtime";
    gint64 delay_usec;
    g_autofree char *delay_text = NULL;
    g_autofree char *failures_text = NULL;

    if (unimplemented)
        delay_usec = evented_backoff_unimplemented(&self->backoff, self->rand);
    else
        delay_usec =
            evented_backoff_failure(&self->backoff, message->monotonic_usec,
                                    self->connected ? self->connected_usec : -1, self->rand);

    self->open = FALSE;
    self->connected = FALSE;
    g_source_set_ready_time(self->settle, -1);
    services->metric_add(self->error_count, NULL, 1);
    services->metric_set(self->state, NULL, 0);

    set_state(self, unimplemented ? EVENTED_STATE_UNIMPLEMENTED : EVENTED_STATE_DISCONNECTED, why);
    delay_text = g_strdup_printf("%" G_GINT64_FORMAT, delay_usec);
    failures_text = g_strdup_printf("%u", evented_backoff_get_failures(&self->backoff));
    log_record(self, G_LOG_LEVEL_DEBUG, "Container event stream ended, reconnect scheduled",
               "ERROR", why, "RETRY_DELAY_USEC", delay_text, "FAILURES", failures_text,
               "UNIMPLEMENTED", unimplemented ? "true" : "false", NULL);

    if (delay_usec <= 0) {
        services->metric_add(self->reconnects, NULL, 1);
        request_connect(self);
    } else {
        source_arm(self->retry, delay_usec);
    }
}

static gboolean
inbox_cb(gpointer data)
{
    Evented *self = data;
    GQueue messages = G_QUEUE_INIT;
    Message *message;

    g_mutex_lock(&self->mutex);
    messages = self->messages;
    g_queue_init(&self->messages);
    g_mutex_unlock(&self->mutex);

    while ((message = g_queue_pop_head(&messages))) {
        if (self->started) {
            switch (message->kind) {
            case MESSAGE_OPENED:
                self->open = TRUE;
                source_arm(self->settle, EVENTED_CONNECTED_AFTER_USEC);
                break;
            case MESSAGE_EVENT:
                handle_event(self, message);
                break;
            case MESSAGE_ENDED:
                handle_ended(self, message);
                break;
            }
        }
        message_free(self, message);
    }
    return G_SOURCE_CONTINUE;
}

static gboolean
evented_init(const PlegHostServices *services, gpointer *ret_state, GError **error)
{
    static const char *const type_labels[] = {"event_type", NULL};
    static const char *const reason_labels[] = {"reason", NULL};
    Evented *self;
    PlegPluginHost *host;

    if (services->size < G_STRUCT_OFFSET(PlegHostServices, reserved)) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED,
                    "host services table too small (%u bytes)", services->size);
        return FALSE;
    }
    host = services->host;

    self = g_new0(Evented, 1);
    self->services = services;
    g_mutex_init(&self->mutex);
    g_cond_init(&self->cond);
    g_queue_init(&self->messages);
    self->rand = g_rand_new();

    self->error_count = services->metric_register(
        host, PLEG_METRIC_COUNTER, "kubelet_evented_pleg_connection_error_count",
        "Failed CRI GetContainerEvents streams: open errors, stream errors, EOF and clean closes.",
        NULL, NULL, 0);
    self->success_count = services->metric_register(
        host, PLEG_METRIC_COUNTER, "kubelet_evented_pleg_connection_success_count",
        "CRI GetContainerEvents streams that connected (first event, or open for a while).", NULL,
        NULL, 0);
    self->latency = services->metric_register(
        host, PLEG_METRIC_HISTOGRAM, "kubelet_evented_pleg_connection_latency_seconds",
        "Time from a container event's created_at to its receipt by the watcher, in seconds.", NULL,
        NULL, 0);
    self->state = services->metric_register(
        host, PLEG_METRIC_GAUGE, "kubelet_evented_pleg_connection_state",
        "Whether the CRI container event stream is connected (1) or not (0).", NULL, NULL, 0);
    self->reconnects = services->metric_register(
        host, PLEG_METRIC_COUNTER, "kubelet_evented_pleg_reconnect_attempts_total",
        "The number of reconnections of the CRI container event stream.", NULL, NULL, 0);
    self->received = services->metric_register(
        host, PLEG_METRIC_COUNTER, "kubelet_evented_pleg_events_received_total",
        "The number of CRI container events received, by type.", type_labels, NULL, 0);
    self->ignored = services->metric_register(
        host, PLEG_METRIC_COUNTER, "kubelet_evented_pleg_events_ignored_total",
        "The number of CRI container events ignored because they name no pod, by reason.",
        reason_labels, NULL, 0);

    *ret_state = self;
    return TRUE;
}

static gboolean
evented_start(gpointer data, GError **error)
{
    Evented *self = data;
    EventedBackoffConfig config;

    if (self->started)
        return TRUE;

    evented_backoff_config_init(&config);
    config.base_usec = EVENTED_BASE_USEC;
    config.max_usec = EVENTED_MAX_USEC;
    config.reset_after_usec = EVENTED_RESET_AFTER_USEC;
    evented_backoff_init(&self->backoff, &config);

    self->context = self->services->get_main_context(self->services->host);
    for (guint i = 0; i < EVENTED_IGNORE_N; i++)
        evented_rate_limit_init(&self->ignore_limits[i], EVENTED_LOG_INTERVAL_USEC);
    self->open = FALSE;
    self->connected = FALSE;
    self->services->metric_set(self->state, NULL, 0);
    self->status = EVENTED_STATE_NONE;
    set_state(self, EVENTED_STATE_CONNECTING, NULL);

    self->inbox = wakeup_source_new(self, "pleg-evented inbox", inbox_cb);
    self->retry = wakeup_source_new(self, "pleg-evented retry", retry_cb);
    self->settle = wakeup_source_new(self, "pleg-evented connected", settle_cb);

    self->stopping = FALSE;
    self->connect_requested = TRUE;
    self->started = TRUE;
    self->reader = g_thread_try_new("pleg-evented", reader_main, self, error);
    return self->reader != NULL;
}

static void
evented_stop(gpointer data)
{
    Evented *self = data;
    Message *message;

    if (!self->started)
        return;

    g_mutex_lock(&self->mutex);
    self->stopping = TRUE;
    if (self->stream)
        self->services->container_events_cancel(self->stream);
    g_cond_signal(&self->cond);
    g_mutex_unlock(&self->mutex);
    if (self->reader)
        g_thread_join(g_steal_pointer(&self->reader));

    source_clear(&self->inbox);
    source_clear(&self->retry);
    source_clear(&self->settle);
    while ((message = g_queue_pop_head(&self->messages)))
        message_free(self, message);

    if (self->connected || self->open)
        log_record(self, G_LOG_LEVEL_DEBUG, "Container event stream closed", NULL);
    self->open = FALSE;
    self->connected = FALSE;
    self->services->metric_set(self->state, NULL, 0);
    self->started = FALSE;
}

static void
evented_free(gpointer data)
{
    Evented *self = data;

    if (!self)
        return;
    evented_stop(self);
    g_rand_free(self->rand);
    g_mutex_clear(&self->mutex);
    g_cond_clear(&self->cond);
    g_free(self);
}

PLEG_PLUGIN_DEFINE(.name = "evented", .description = "Evented PLEG watcher (KEP-3386)",
                   .feature_gate = "EventedPLEG", .init = evented_init, .start = evented_start,
                   .stop = evented_stop, .free = evented_free);
