/* SPDX-License-Identifier: Apache-2.0 */
#include "watchdog-loop.h"

#include <gio/gio.h>
#include <string.h>

typedef enum {
    STATE_IDLE,
    STATE_WAIT_TICK,
    STATE_WAIT_RETRY,
} State;

typedef struct {
    gint64 window_start_usec;
    guint64 suppressed;
} RateLimit;

struct _WatchdogLoop {
    const WatchdogOps *ops;
    gpointer user_data;
    gint64 interval_usec;
    char *interval_text;

    State state;
    gint64 next_tick_usec; /* due time of the next tick on the fixed-rate schedule */
    guint attempt;         /* attempts made by the notification in progress */
    gint64 retry_base_usec;

    gboolean unsupported_said;
    GHashTable *limits; /* kind key -> RateLimit */
    WatchdogStats stats;
};

int
watchdog_timeout_to_interval(int sd_result, guint64 timeout_usec, gint64 *ret_interval_usec,
                             GError **error)
{
    g_autofree char *text = NULL;

    if (sd_result < 0) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                    "invalid systemd watchdog environment (WATCHDOG_USEC=\"%s\", "
                    "WATCHDOG_PID=\"%s\"): %s",
                    g_getenv("WATCHDOG_USEC") ?: "", g_getenv("WATCHDOG_PID") ?: "",
                    g_strerror(-sd_result));
        return -1;
    }
    if (sd_result == 0)
        return 0;

    text = watchdog_format_duration((gint64)MIN(timeout_usec, (guint64)G_MAXINT64));
    if (timeout_usec <= WATCHDOG_MIN_TIMEOUT_USEC) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                    "systemd watchdog timeout WATCHDOG_USEC=%" G_GUINT64_FORMAT
                    " (%s) is too small: it must be more than 1s (WatchdogSec=)",
                    timeout_usec, text);
        return -1;
    }
    if (timeout_usec > (guint64)G_MAXINT64) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                    "systemd watchdog timeout WATCHDOG_USEC=%" G_GUINT64_FORMAT " is too large",
                    timeout_usec);
        return -1;
    }
    *ret_interval_usec = (gint64)(timeout_usec / 2);
    return 1;
}

static void
append_fraction(GString *out, guint64 value, int digits)
{
    char buf[16];

    if (value == 0)
        return;
    g_snprintf(buf, sizeof(buf), "%0*" G_GUINT64_FORMAT, digits, value);
    for (int i = digits - 1; i > 0 && buf[i] == '0'; i--)
        buf[i] = '\0';
    g_string_append_printf(out, ".%s", buf);
}

char *
watchdog_format_duration(gint64 usec)
{
    GString *out = g_string_new(NULL);
    guint64 u = usec > 0 ? (guint64)usec : 0;

    if (u == 0) {
        g_string_append(out, "0s");
    } else if (u < 1000) {
        g_string_append_printf(out, "%" G_GUINT64_FORMAT "\u00b5s", u);
    } else if (u < G_USEC_PER_SEC) {
        g_string_append_printf(out, "%" G_GUINT64_FORMAT, u / 1000);
        append_fraction(out, u % 1000, 3);
        g_string_append(out, "ms");
    } else {
        guint64 s = u / G_USEC_PER_SEC;

        if (s >= 3600)
            g_string_append_printf(out, "%" G_GUINT64_FORMAT "h", s / 3600);
        if (s >= 60)
            g_string_append_printf(out, "%" G_GUINT64_FORMAT "m", s / 60 % 60);
        g_string_append_printf(out, "%" G_GUINT64_FORMAT, s % 60);
        append_fraction(out, u % G_USEC_PER_SEC, 6);
        g_string_append_c(out, 's');
    }
    return g_string_free(out, FALSE);
}

WatchdogLoop *
watchdog_loop_new(const WatchdogOps *ops, gpointer user_data, gint64 interval_usec)
{
    WatchdogLoop *loop;

    g_return_val_if_fail(ops, NULL);
    g_return_val_if_fail(interval_usec > 0, NULL);

    loop = g_new0(WatchdogLoop, 1);
    loop->ops = ops;
    loop->user_data = user_data;
    loop->interval_usec = interval_usec;
    loop->interval_text = watchdog_format_duration(interval_usec);
    loop->limits = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    return loop;
}

void
watchdog_loop_free(WatchdogLoop *loop)
{
    if (!loop)
        return;
    watchdog_loop_stop(loop);
    g_hash_table_unref(loop->limits);
    g_free(loop->interval_text);
    g_free(loop);
}

gint64
watchdog_loop_get_interval(WatchdogLoop *loop)
{
    return loop->interval_usec;
}

void
watchdog_loop_get_stats(WatchdogLoop *loop, WatchdogStats *ret_stats)
{
    *ret_stats = loop->stats;
}

/* ---- records ---- */

void
watchdog_log_message(const WatchdogOps *ops, gpointer user_data, GLogLevelFlags level,
                     const char *format, ...)
{
    g_autofree char *message = NULL;
    va_list args;

    va_start(args, format);
    message = g_strdup_vprintf(format, args);
    va_end(args);

    GLogField field = {"MESSAGE", message, -1};
    ops->log(user_data, level, &field, 1);
}

#define log_text(loop, level, ...)                                                                 \
    watchdog_log_message((loop)->ops, (loop)->user_data, (level), __VA_ARGS__)

typedef struct {
    const char *operation;
    const char *checker; /* nullable */
    guint attempt;       /* 0: not applicable */
    const char *result;
    const char *error; /* nullable */
} Record;

void
watchdog_append_pair(GString *text, const char *journal_key, const char *value)
{
    g_autofree char *key = g_ascii_strdown(journal_key, -1);
    gboolean quote = *value == '\0';

    for (const char *p = value; *p && !quote; p++)
        quote = *p == ' ' || *p == '"' || *p == '=' || *p == '\\' || g_ascii_iscntrl(*p);
    if (quote) {
        g_autofree char *escaped = g_strescape(value, NULL);
        g_string_append_printf(text, " %s=\"%s\"", key, escaped);
    } else {
        g_string_append_printf(text, " %s=%s", key, value);
    }
}

static void
add_field(GLogField *fields, gsize *n_fields, GString *text, const char *key, const char *value)
{
    fields[*n_fields] = (GLogField){key, value, -1};
    (*n_fields)++;
    watchdog_append_pair(text, key, value);
}

/* Whether the record of this kind is kept; @ret_suppressed: how many were dropped before it. */
static gboolean
rate_limit(WatchdogLoop *loop, const Record *record, guint64 *ret_suppressed)
{
    g_autofree char *key = g_strdup_printf("%s\x1f%s\x1f%u\x1f%s", record->operation,
                                           record->checker ?: "", record->attempt, record->result);
    gint64 now = loop->ops->now_usec(loop->user_data);
    RateLimit *limit = g_hash_table_lookup(loop->limits, key);

    if (!limit) {
        limit = g_new0(RateLimit, 1);
        limit->window_start_usec = now;
        g_hash_table_insert(loop->limits, g_steal_pointer(&key), limit);
        *ret_suppressed = 0;
        return TRUE;
    }
    if (now - limit->window_start_usec < WATCHDOG_LOG_WINDOW_USEC) {
        limit->suppressed++;
        return FALSE;
    }
    *ret_suppressed = limit->suppressed;
    limit->window_start_usec = now;
    limit->suppressed = 0;
    return TRUE;
}

static void
emit_record(WatchdogLoop *loop, const Record *record, const char *summary)
{
    g_autoptr(GString) text = g_string_new(summary);
    g_autofree char *attempt = NULL;
    g_autofree char *suppressed_text = NULL;
    guint64 suppressed = 0;
    GLogField fields[9];
    gsize n_fields = 1;

    if (!rate_limit(loop, record, &suppressed)) {
        loop->stats.suppressed++;
        return;
    }

    add_field(fields, &n_fields, text, WATCHDOG_FIELD_OPERATION, record->operation);
    if (record->checker)
        add_field(fields, &n_fields, text, WATCHDOG_FIELD_CHECKER, record->checker);
    if (record->attempt > 0) {
        attempt = g_strdup_printf("%u", record->attempt);
        add_field(fields, &n_fields, text, WATCHDOG_FIELD_ATTEMPT, attempt);
    }
    add_field(fields, &n_fields, text, WATCHDOG_FIELD_WATCHDOG_INTERVAL, loop->interval_text);
    add_field(fields, &n_fields, text, WATCHDOG_FIELD_RESULT, record->result);
    if (record->error)
        add_field(fields, &n_fields, text, WATCHDOG_FIELD_ERROR, record->error);
    if (suppressed > 0) {
        suppressed_text = g_strdup_printf("%" G_GUINT64_FORMAT, suppressed);
        add_field(fields, &n_fields, text, WATCHDOG_FIELD_SUPPRESSED, suppressed_text);
    }
    fields[0] = (GLogField){"MESSAGE", text->str, -1};

    loop->stats.records++;
    loop->ops->log(loop->user_data, G_LOG_LEVEL_MESSAGE, fields, n_fields);
}

/* With the gate off the rate limit forgets everything, so that turning it on again starts
 * afresh (KEP-6247: re-enabling needs no state cleanup). */
static gboolean
diagnostics_enabled(WatchdogLoop *loop)
{
    if (loop->ops->diagnostics_enabled(loop->user_data))
        return TRUE;
    g_hash_table_remove_all(loop->limits);
    return FALSE;
}

static void
record_check_error(WatchdogLoop *loop, const char *checker, const char *error)
{
    const Record record = {
        .operation = WATCHDOG_OPERATION_HEALTH_CHECK,
        .checker = checker,
        .result = WATCHDOG_RESULT_ERROR,
        .error = error,
    };

    if (!diagnostics_enabled(loop)) {
        log_text(loop, G_LOG_LEVEL_DEBUG,
                 "Watchdog health checker %s failed: %s; skipping this notification", checker,
                 error);
        return;
    }
    emit_record(loop, &record, "Watchdog health checker failed; skipping this notification:");
}

static void
record_notify_error(WatchdogLoop *loop, guint attempt, const char *error)
{
    const Record record = {
        .operation = WATCHDOG_OPERATION_NOTIFY,
        .attempt = attempt,
        .result = WATCHDOG_RESULT_ERROR,
        .error = error,
    };

    if (!diagnostics_enabled(loop)) {
        log_text(loop, G_LOG_LEVEL_DEBUG, "Watchdog notification attempt %u failed: %s", attempt,
                 error);
        return;
    }
    emit_record(loop, &record, "Watchdog notification failed:");
}

static void
record_exhausted(WatchdogLoop *loop, guint attempts, const char *error)
{
    const Record record = {
        .operation = WATCHDOG_OPERATION_NOTIFY,
        .attempt = attempts,
        .result = WATCHDOG_RESULT_EXHAUSTED,
        .error = error,
    };

    if (!diagnostics_enabled(loop)) {
        log_text(loop, G_LOG_LEVEL_DEBUG, "Watchdog notification failed after %u attempts: %s",
                 attempts, error);
        return;
    }
    emit_record(loop, &record,
                "Watchdog notification retries exhausted; no heartbeat this interval:");
}

/* ---- schedule ---- */

static void
arm(WatchdogLoop *loop, State state, gint64 ready_usec)
{
    loop->state = state;
    loop->ops->arm(loop->user_data, ready_usec);
}

/* The first slot of the schedule after @now: a late tick does not try to catch up. */
static void
arm_next_tick(WatchdogLoop *loop, gint64 now)
{
    if (loop->next_tick_usec <= now)
        loop->next_tick_usec +=
            ((now - loop->next_tick_usec) / loop->interval_usec + 1) * loop->interval_usec;
    arm(loop, STATE_WAIT_TICK, loop->next_tick_usec);
}

static void
attempt_notify(WatchdogLoop *loop)
{
    int r;

    loop->attempt++;
    loop->stats.notify_attempts++;
    r = loop->ops->notify(loop->user_data);

    if (r > 0) {
        loop->stats.heartbeats++;
        loop->unsupported_said = FALSE;
        log_text(loop, G_LOG_LEVEL_DEBUG, "Watchdog notified (WATCHDOG=1, attempt %u)",
                 loop->attempt);
    } else if (r == 0) {
        loop->stats.unsupported++;
        if (!loop->unsupported_said) {
            log_text(loop, G_LOG_LEVEL_MESSAGE,
                     "Watchdog notification not supported: NOTIFY_SOCKET is not set while "
                     "WATCHDOG_USEC is; heartbeats are not sent (said once)");
            loop->unsupported_said = TRUE;
        }
    } else {
        const char *error = g_strerror(-r);

        loop->stats.notify_errors++;
        record_notify_error(loop, loop->attempt, error);
        if (loop->attempt < WATCHDOG_RETRY_STEPS) {
            double jitter = loop->ops->random(loop->user_data) * WATCHDOG_RETRY_JITTER;
            gint64 delay = loop->retry_base_usec + (gint64)(loop->retry_base_usec * jitter);

            loop->retry_base_usec = (gint64)(loop->retry_base_usec * WATCHDOG_RETRY_FACTOR);
            loop->stats.retries++;
            arm(loop, STATE_WAIT_RETRY, loop->ops->now_usec(loop->user_data) + delay);
            return;
        }
        loop->stats.exhausted++;
        record_exhausted(loop, loop->attempt, error);
    }
    arm_next_tick(loop, loop->ops->now_usec(loop->user_data));
}

static void
tick(WatchdogLoop *loop)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *checker = NULL;

    loop->stats.ticks++;
    if (!loop->ops->check_health(loop->user_data, &checker, &error)) {
        loop->stats.check_failures++;
        record_check_error(loop, checker ?: "unknown", error ? error->message : "unhealthy");
        arm_next_tick(loop, loop->ops->now_usec(loop->user_data));
        return;
    }
    loop->attempt = 0;
    loop->retry_base_usec = WATCHDOG_RETRY_DURATION_USEC;
    attempt_notify(loop);
}

void
watchdog_loop_start(WatchdogLoop *loop)
{
    if (loop->state != STATE_IDLE)
        return;
    loop->next_tick_usec = loop->ops->now_usec(loop->user_data);
    arm(loop, STATE_WAIT_TICK, loop->next_tick_usec);
}

void
watchdog_loop_dispatch(WatchdogLoop *loop)
{
    switch (loop->state) {
    case STATE_IDLE:
        break;
    case STATE_WAIT_TICK:
        tick(loop);
        break;
    case STATE_WAIT_RETRY:
        attempt_notify(loop);
        break;
    }
}

void
watchdog_loop_stop(WatchdogLoop *loop)
{
    if (loop->state == STATE_IDLE)
        return;
    loop->attempt = 0;
    arm(loop, STATE_IDLE, -1);
}
