/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every event plegd publishes, also as a structured entry of the systemd journal, sent by a
 * thread of its own: libsystemd's sd_journal_sendv() writes to a blocking socket, and a journald
 * that does not read would otherwise stop plegd's main thread.  The queue before it is bounded;
 * what does not fit, or cannot be sent, is counted and dropped, never waited for.
 */
#include <errno.h>
#include <string.h>
/* CODE_FILE= and the like would name this file, not anything about the event. */
#define SD_JOURNAL_SUPPRESS_LOCATION
#include <systemd/sd-journal.h>
#include <unistd.h>

#include "plegd.h"

/* Where sd_journal_sendv() sends, fixed in libsystemd. */
#define JOURNAL_SOCKET "/run/systemd/journal/socket"

/* The most fields an entry has: MESSAGE to PLEG_TIME. */
#define MAX_FIELDS 21

/* One per event type, as systemd's catalog ids are: `journalctl MESSAGE_ID=...` finds every
 * event of a type whatever its text. */
static const char *const message_ids[] = {
    [PLEG_CONTAINER_STARTED] = "MESSAGE_ID=eb875ddb9d3f4c1591690f9d77effef2",
    [PLEG_CONTAINER_DIED] = "MESSAGE_ID=ff9250e6f84a497083e4cf0c74b23978",
    [PLEG_CONTAINER_REMOVED] = "MESSAGE_ID=ca920fe301a64dedb30c17e4b7e66672",
    [PLEG_POD_SYNC] = "MESSAGE_ID=43e4cbc0b2dc43c8b2d82ae6c8c904de",
    [PLEG_CONTAINER_CHANGED] = "MESSAGE_ID=c869e629687f44e4a3b5d634d6dfbed3",
};

gboolean
plegd_events_journal_wanted(PlegdEventsJournal mode, const char *invocation_id)
{
    switch (mode) {
    case PLEGD_EVENTS_JOURNAL_YES:
        return TRUE;
    case PLEGD_EVENTS_JOURNAL_NO:
        return FALSE;
    case PLEGD_EVENTS_JOURNAL_AUTO:
    default:
        return invocation_id && invocation_id[0] != '\0';
    }
}

/* ---- an event's fields ---- */

struct _PlegdJournalEntry {
    char *data; /* the fields one after the other, "NAME=value" without separators */
    int n_fields;
    struct iovec fields[MAX_FIELDS];
};

typedef struct {
    GString *text;
    gsize starts[MAX_FIELDS];
    int n_fields;
} EntryBuilder;

static void
field_begin(EntryBuilder *b)
{
    g_assert(b->n_fields < MAX_FIELDS);
    b->starts[b->n_fields++] = b->text->len;
}

/* @name_eq: "NAME=".  An unknown (NULL) or empty value leaves the field out. */
static void
add_field(EntryBuilder *b, const char *name_eq, const char *value)
{
    if (!value || value[0] == '\0')
        return;
    field_begin(b);
    g_string_append(b->text, name_eq);
    g_string_append(b->text, value);
}

static void
add_time_field(EntryBuilder *b, const char *name_eq, gint64 unix_ns)
{
    char text[PLEG_TIME_RFC3339_SIZE];

    pleg_time_format_rfc3339_to_buffer(unix_ns, text);
    add_field(b, name_eq, text);
}

static void
append_decimal(GString *text, gint64 value)
{
    char buf[PLEGD_DECIMAL_SIZE];
    const char *p = plegd_int64_to_decimal(value, buf);

    g_string_append_len(text, p, buf + PLEGD_DECIMAL_SIZE - p);
}

/* @name_eq: "NAME=". */
static void
add_decimal_field(EntryBuilder *b, const char *name_eq, gint64 value)
{
    field_begin(b);
    g_string_append(b->text, name_eq);
    append_decimal(b->text, value);
}

/* Names from the runtime, shown in the human text as every untrusted text plegd logs is
 * (pleg_log_text()); the fields keep the bytes as they are.  Printable ASCII without a
 * backslash, the usual name, is what pleg_log_text() would give, without its cost. */
static void
append_shown(GString *text, const char *value)
{
    g_autofree char *shown = NULL;
    gsize len = 0;

    if (value) {
        while (len < PLEG_LOG_TEXT_MAX && value[len] >= 0x20 && value[len] < 0x7f &&
               value[len] != '\\')
            len++;
        if (value[len] == '\0') {
            g_string_append_len(text, value, len);
            return;
        }
    }
    shown = pleg_log_text(value, -1, 0);
    g_string_append(text, shown);
}

static gboolean
is_known(const char *value)
{
    return value && value[0] != '\0';
}

/* "ContainerDied shop/web container nginx exited 137 (OOMKilled)"; the pod UID when the pod's
 * names are unknown, the container ID when its name is. */
static void
add_message(EntryBuilder *b, const PlegPodLifecycleEvent *event, const PlegEventDetails *details)
{
    field_begin(b);
    g_string_append(b->text, "MESSAGE=");
    g_string_append(b->text, pleg_pod_lifecycle_event_type_to_string(event->type));
    g_string_append_c(b->text, ' ');
    if (is_known(details->pod_namespace) && is_known(details->pod_name)) {
        append_shown(b->text, details->pod_namespace);
        g_string_append_c(b->text, '/');
        append_shown(b->text, details->pod_name);
    } else {
        append_shown(b->text, event->pod_uid);
    }
    if (event->type == PLEG_POD_SYNC)
        return;
    if (details->sandbox) {
        g_string_append(b->text, " sandbox");
    } else {
        g_string_append(b->text, " container ");
        append_shown(b->text, is_known(details->container_name) ? details->container_name
                                                                 : event->container_id);
    }
    if (details->attempt > 0) {
        g_string_append(b->text, " attempt ");
        append_decimal(b->text, details->attempt);
    }
    if (event->type == PLEG_CONTAINER_DIED && event->has_exit) {
        g_string_append(b->text, " exited ");
        append_decimal(b->text, event->exit_code);
        if (is_known(event->reason)) {
            g_string_append(b->text, " (");
            append_shown(b->text, event->reason);
            g_string_append_c(b->text, ')');
        }
    }
}

PlegdJournalEntry *
plegd_journal_entry_new(const PlegPodLifecycleEvent *event, guint64 seq)
{
    const PlegEventDetails *details = pleg_pod_lifecycle_event_get_details(event);
    gboolean container = event->type != PLEG_POD_SYNC;
    EntryBuilder b = {.text = g_string_sized_new(768)};
    PlegdJournalEntry *entry;
    gsize total;

    add_message(&b, event, details);
    if ((guint)event->type < G_N_ELEMENTS(message_ids))
        add_field(&b, "", message_ids[event->type]);
    add_field(&b, "", "PRIORITY=6");
    add_field(&b, "", "SYSLOG_IDENTIFIER=plegd");
    /* As in the JSON line, a gint64: 2^63 events are out of reach. */
    add_decimal_field(&b, "PLEG_SEQ=", (gint64)seq);
    add_field(&b, "PLEG_TYPE=", pleg_pod_lifecycle_event_type_to_string(event->type));
    add_field(&b, "POD_NAMESPACE=", details->pod_namespace);
    add_field(&b, "POD_NAME=", details->pod_name);
    add_field(&b, "POD_UID=", event->pod_uid);
    if (container) {
        if (!details->sandbox)
            add_field(&b, "CONTAINER_NAME=", details->container_name);
        add_field(&b, "CONTAINER_ID=", event->container_id);
        add_field(&b, "PLEG_SANDBOX=", details->sandbox ? "true" : "false");
        add_decimal_field(&b, "PLEG_ATTEMPT=", details->attempt);
        add_field(&b, "PLEG_IMAGE=", details->image);
    }
    if (event->type == PLEG_CONTAINER_DIED && event->has_exit) {
        add_decimal_field(&b, "PLEG_EXIT_CODE=", event->exit_code);
        add_field(&b, "PLEG_REASON=", event->reason);
        /* 0 is CRI's "not set". */
        if (event->finished_at_ns != 0)
            add_time_field(&b, "PLEG_FINISHED_AT=", event->finished_at_ns);
    }
    if (event->type == PLEG_CONTAINER_STARTED && details->started_at_ns != 0)
        add_time_field(&b, "PLEG_STARTED_AT=", details->started_at_ns);
    add_field(&b, "PLEG_RELIST_SOURCE=", pleg_relist_source_to_string(event->relist_source));
    if (pleg_pod_lifecycle_event_is_initial(event))
        add_field(&b, "PLEG_INITIAL=", "true");
    add_time_field(&b, "PLEG_TIME=", event->time_ns);

    entry = g_new0(PlegdJournalEntry, 1);
    entry->n_fields = b.n_fields;
    total = b.text->len;
    entry->data = g_string_free(b.text, FALSE);
    for (int i = 0; i < b.n_fields; i++) {
        gsize end = i + 1 < b.n_fields ? b.starts[i + 1] : total;

        entry->fields[i].iov_base = entry->data + b.starts[i];
        entry->fields[i].iov_len = end - b.starts[i];
    }
    return entry;
}

void
plegd_journal_entry_free(PlegdJournalEntry *entry)
{
    if (!entry)
        return;
    g_free(entry->data);
    g_free(entry);
}

const struct iovec *
plegd_journal_entry_get_fields(const PlegdJournalEntry *entry, int *ret_n_fields)
{
    *ret_n_fields = entry->n_fields;
    return entry->fields;
}

int
plegd_journal_send(const struct iovec *fields, int n_fields, gpointer user_data)
{
    /* sd_journal_sendv() answers 0 when the socket does not exist (to libsystemd a missing
     * journal is no error): look first, so that such events are counted as dropped. */
    if (access(JOURNAL_SOCKET, F_OK) < 0)
        return -errno;
    return sd_journal_sendv(fields, n_fields);
}

/* ---- the sender thread ---- */

typedef enum {
    DROP_QUEUE_FULL,
    DROP_NO_JOURNAL,
    DROP_ERROR,
    N_DROP_REASONS,
} DropReason;

static const char *const drop_reasons[N_DROP_REASONS] = {
    [DROP_QUEUE_FULL] = "queue_full",
    [DROP_NO_JOURNAL] = "no_journal",
    [DROP_ERROR] = "error",
};

struct _PlegdJournal {
    gatomicrefcount ref; /* plegd_journal_free()'s and the sender thread's */
    guint max_queue;
    PlegdJournalSendFunc send;
    gpointer send_data;
    PlegMetricsRegistry *metrics;
    PlegMetricSeries *sent;
    PlegMetricSeries *dropped[N_DROP_REASONS];
    GThread *thread;

    GMutex lock;
    GCond cond;
    GQueue entries; /* PlegdJournalEntry, oldest first */
    gboolean sending;
    gboolean stop;
    /* The rate-limited log of drops. */
    gboolean failing;       /* the last event was dropped */
    guint64 dropped_unlogged; /* since the last log line */
    guint64 dropped_in_all;
    gint64 last_log_usec;
    gboolean logged;
    DropReason last_reason; /* of the last line logged */
    int last_error;
};

static PlegdJournal *
journal_ref(PlegdJournal *journal)
{
    g_atomic_ref_count_inc(&journal->ref);
    return journal;
}

static void
journal_unref(PlegdJournal *journal)
{
    if (!g_atomic_ref_count_dec(&journal->ref))
        return;
    g_queue_clear_full(&journal->entries, (GDestroyNotify)plegd_journal_entry_free);
    pleg_metrics_registry_unref(journal->metrics);
    g_mutex_clear(&journal->lock);
    g_cond_clear(&journal->cond);
    g_free(journal);
}

static char *
describe_drop(PlegdJournal *journal, DropReason reason, int error)
{
    switch (reason) {
    case DROP_QUEUE_FULL:
        return g_strdup_printf("journald does not keep up: %u events wait to be sent",
                               journal->max_queue);
    case DROP_NO_JOURNAL:
        return g_strdup_printf("no journald listens on " JOURNAL_SOCKET " (%s)",
                               g_strerror(error));
    case DROP_ERROR:
    default:
        return g_strdup_printf("sending failed: %s", g_strerror(error));
    }
}

/* Counts one dropped event; called with the lock held.  Returns: (transfer full) (nullable):
 * what to log once the lock is released: the first drop, then at most one line every
 * PLEGD_FAILURE_LOG_INTERVAL_USEC with the count since the last. */
static char *
count_drop(PlegdJournal *journal, DropReason reason, int error)
{
    gint64 now = g_get_monotonic_time();
    g_autofree char *why = NULL;
    char *text;

    pleg_metric_series_inc(journal->dropped[reason]);
    journal->failing = TRUE;
    journal->dropped_unlogged++;
    journal->dropped_in_all++;
    /* A new cause is said at once. */
    if (journal->logged && reason == journal->last_reason && error == journal->last_error &&
        now - journal->last_log_usec < PLEGD_FAILURE_LOG_INTERVAL_USEC)
        return NULL;
    why = describe_drop(journal, reason, error);
    if (journal->dropped_unlogged == 1)
        text = g_strdup_printf("cannot send events to the journal: %s; dropping them "
                               "(counted in plegd_journal_events_dropped_total)",
                               why);
    else
        text = g_strdup_printf("%" G_GUINT64_FORMAT " events not sent to the journal since the "
                               "last report, the last because %s",
                               journal->dropped_unlogged, why);
    journal->logged = TRUE;
    journal->last_reason = reason;
    journal->last_error = error;
    journal->last_log_usec = now;
    journal->dropped_unlogged = 0;
    return text;
}

/* Called with the lock held.  Returns: (transfer full) (nullable): what to log. */
static char *
count_sent(PlegdJournal *journal)
{
    pleg_metric_series_inc(journal->sent);
    if (!journal->failing)
        return NULL;
    journal->failing = FALSE;
    return g_strdup_printf("the journal takes events again (%" G_GUINT64_FORMAT
                           " dropped since plegd started)",
                           journal->dropped_in_all);
}

static gpointer
sender_thread(gpointer data)
{
    PlegdJournal *journal = data;

    g_mutex_lock(&journal->lock);
    for (;;) {
        PlegdJournalEntry *entry;
        g_autofree char *log = NULL;
        int n_fields;
        const struct iovec *fields;
        int r;

        while (!journal->stop && g_queue_is_empty(&journal->entries))
            g_cond_wait(&journal->cond, &journal->lock);
        if (journal->stop)
            break;

        entry = g_queue_pop_head(&journal->entries);
        journal->sending = TRUE;
        g_mutex_unlock(&journal->lock);

        fields = plegd_journal_entry_get_fields(entry, &n_fields);
        r = journal->send(fields, n_fields, journal->send_data);
        plegd_journal_entry_free(entry);

        g_mutex_lock(&journal->lock);
        if (r >= 0)
            log = count_sent(journal);
        else if (r == -ENOENT || r == -ECONNREFUSED)
            log = count_drop(journal, DROP_NO_JOURNAL, -r);
        else
            log = count_drop(journal, DROP_ERROR, -r);
        /* Logged before a flush returns. */
        if (log && !journal->stop) {
            g_mutex_unlock(&journal->lock);
            g_message("%s", log);
            g_mutex_lock(&journal->lock);
        }
        journal->sending = FALSE;
        g_cond_broadcast(&journal->cond);
    }
    g_mutex_unlock(&journal->lock);
    journal_unref(journal);
    return NULL;
}

PlegdJournal *
plegd_journal_new(guint max_queue, PlegMetricsRegistry *metrics, PlegdJournalSendFunc send,
                  gpointer send_data)
{
    static const char *const reason_label[] = {"reason", NULL};
    PlegdJournal *journal;
    PlegMetric *dropped;

    g_return_val_if_fail(max_queue > 0, NULL);
    journal = g_new0(PlegdJournal, 1);
    g_atomic_ref_count_init(&journal->ref);
    journal->max_queue = max_queue;
    journal->send = send ? send : plegd_journal_send;
    journal->send_data = send_data;
    /* A sender left behind in sd_journal_sendv() still counts when it returns. */
    journal->metrics = pleg_metrics_registry_ref(metrics);
    journal->sent = pleg_metric_get_series(
        pleg_metrics_register(metrics, PLEG_METRIC_COUNTER, "plegd_journal_events_total",
                              "Events sent to the systemd journal.", NULL, NULL, 0),
        NULL);
    dropped = pleg_metrics_register(
        metrics, PLEG_METRIC_COUNTER, "plegd_journal_events_dropped_total",
        "Events not sent to the systemd journal: queue_full (journald does not keep up), "
        "no_journal (no journald listening), error (sending failed).",
        reason_label, NULL, 0);
    for (int i = 0; i < N_DROP_REASONS; i++) {
        const char *const value[] = {drop_reasons[i]};

        journal->dropped[i] = pleg_metric_get_series(dropped, value);
        /* Every series from the start, so that rate() sees the first increase. */
        pleg_metric_series_add(journal->dropped[i], 0);
    }
    pleg_metric_series_add(journal->sent, 0);
    g_mutex_init(&journal->lock);
    g_cond_init(&journal->cond);
    g_queue_init(&journal->entries);
    journal->thread = g_thread_new("plegd-journal", sender_thread, journal_ref(journal));
    return journal;
}

void
plegd_journal_free(PlegdJournal *journal)
{
    gboolean stuck;

    if (!journal)
        return;
    g_mutex_lock(&journal->lock);
    journal->stop = TRUE;
    stuck = journal->sending;
    g_cond_broadcast(&journal->cond);
    g_mutex_unlock(&journal->lock);

    if (stuck) {
        g_debug("the journal's sender is stuck in sd_journal_sendv(), leaving it behind");
        g_thread_unref(journal->thread);
    } else {
        g_thread_join(journal->thread);
    }
    journal_unref(journal);
}

void
plegd_journal_publish(PlegdJournal *journal, const PlegPodLifecycleEvent *event, guint64 seq)
{
    g_autofree char *log = NULL;

    g_mutex_lock(&journal->lock);
    if (g_queue_get_length(&journal->entries) >= journal->max_queue) {
        log = count_drop(journal, DROP_QUEUE_FULL, 0);
    } else {
        g_queue_push_tail(&journal->entries, plegd_journal_entry_new(event, seq));
        g_cond_broadcast(&journal->cond);
    }
    g_mutex_unlock(&journal->lock);
    if (log)
        g_message("%s", log);
}

gboolean
plegd_journal_flush(PlegdJournal *journal, gint64 timeout_usec)
{
    gint64 deadline = g_get_monotonic_time() + timeout_usec;
    gboolean flushed;

    g_mutex_lock(&journal->lock);
    while (!g_queue_is_empty(&journal->entries) || journal->sending) {
        if (!g_cond_wait_until(&journal->cond, &journal->lock, deadline))
            break;
    }
    flushed = g_queue_is_empty(&journal->entries) && !journal->sending;
    g_mutex_unlock(&journal->lock);
    return flushed;
}

guint
plegd_journal_get_queued(PlegdJournal *journal)
{
    guint n;

    g_mutex_lock(&journal->lock);
    n = g_queue_get_length(&journal->entries);
    g_mutex_unlock(&journal->lock);
    return n;
}
