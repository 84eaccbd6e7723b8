/* SPDX-License-Identifier: Apache-2.0 */
#include "watchdog-stall.h"

#include <gio/gio.h>

struct _WatchdogStall {
    const WatchdogOps *ops;
    gpointer user_data;
    gint64 threshold_usec;
    char *interval_text;
    GThread *thread;

    GMutex lock;
    GCond cond;
    gboolean quit;
    gboolean active;     /* a watched call is running */
    gboolean reported;   /* its "stalled" record was written */
    gint64 start_usec;   /* monotonic start of the call */
    const char *operation;
    char *checker;       /* nullable */
    guint64 records;
};

/* One record; @stall->lock is held, so "stalled" always comes before its "returned". */
static void
write_record(WatchdogStall *stall, const char *result, gint64 duration_usec)
{
    g_autofree char *duration = watchdog_format_duration(duration_usec);
    g_autoptr(GString) text = NULL;
    GLogField fields[7];
    gsize n = 1;
    gboolean notify = g_str_equal(stall->operation, WATCHDOG_OPERATION_NOTIFY);
    gboolean returned = g_str_equal(result, WATCHDOG_RESULT_RETURNED);

    if (notify)
        text = g_string_new(returned ? "Watchdog notification (sd_notify) returned late; "
                                       "heartbeats waited for it:"
                                     : "Watchdog notification (sd_notify) has not returned "
                                       "after half the watchdog interval; the heartbeat waits "
                                       "for it:");
    else
        text = g_string_new(returned ? "Watchdog health checker returned late; heartbeats "
                                       "waited for it:"
                                     : "Watchdog health checker has not returned after half "
                                       "the watchdog interval; the heartbeat waits for it:");

    fields[n++] = (GLogField){WATCHDOG_FIELD_OPERATION, stall->operation, -1};
    watchdog_append_pair(text, WATCHDOG_FIELD_OPERATION, stall->operation);
    if (!notify) {
        const char *checker = stall->checker ? stall->checker : "unknown";

        fields[n++] = (GLogField){WATCHDOG_FIELD_CHECKER, checker, -1};
        watchdog_append_pair(text, WATCHDOG_FIELD_CHECKER, checker);
    }
    fields[n++] = (GLogField){WATCHDOG_FIELD_DURATION, duration, -1};
    watchdog_append_pair(text, WATCHDOG_FIELD_DURATION, duration);
    fields[n++] = (GLogField){WATCHDOG_FIELD_WATCHDOG_INTERVAL, stall->interval_text, -1};
    watchdog_append_pair(text, WATCHDOG_FIELD_WATCHDOG_INTERVAL, stall->interval_text);
    fields[n++] = (GLogField){WATCHDOG_FIELD_RESULT, result, -1};
    watchdog_append_pair(text, WATCHDOG_FIELD_RESULT, result);
    fields[0] = (GLogField){"MESSAGE", text->str, -1};

    stall->records++;
    stall->ops->log(stall->user_data, G_LOG_LEVEL_MESSAGE, fields, n);
}

static gpointer
monitor_thread(gpointer user_data)
{
    WatchdogStall *stall = user_data;

    g_mutex_lock(&stall->lock);
    while (!stall->quit) {
        gint64 deadline, now;

        if (!stall->active || stall->reported) {
            g_cond_wait(&stall->cond, &stall->lock);
            continue;
        }
        deadline = stall->start_usec + stall->threshold_usec;
        now = g_get_monotonic_time();
        if (now < deadline) {
            g_cond_wait_until(&stall->cond, &stall->lock, deadline);
            continue;
        }
        stall->reported = TRUE;
        write_record(stall, WATCHDOG_RESULT_STALLED, now - stall->start_usec);
    }
    g_mutex_unlock(&stall->lock);
    return NULL;
}

WatchdogStall *
watchdog_stall_new(const WatchdogOps *ops, gpointer user_data, gint64 interval_usec,
                   GError **error)
{
    WatchdogStall *stall;

    g_return_val_if_fail(ops != NULL, NULL);
    g_return_val_if_fail(interval_usec > 0, NULL);

    stall = g_new0(WatchdogStall, 1);
    stall->ops = ops;
    stall->user_data = user_data;
    stall->threshold_usec = interval_usec / 2;
    stall->interval_text = watchdog_format_duration(interval_usec);
    g_mutex_init(&stall->lock);
    g_cond_init(&stall->cond);
    stall->thread = g_thread_try_new(WATCHDOG_STALL_THREAD_NAME, monitor_thread, stall, error);
    if (!stall->thread) {
        watchdog_stall_free(stall);
        return NULL;
    }
    return stall;
}

void
watchdog_stall_free(WatchdogStall *stall)
{
    if (!stall)
        return;
    if (stall->thread) {
        g_mutex_lock(&stall->lock);
        stall->quit = TRUE;
        g_cond_signal(&stall->cond);
        g_mutex_unlock(&stall->lock);
        g_thread_join(stall->thread);
    }
    g_mutex_clear(&stall->lock);
    g_cond_clear(&stall->cond);
    g_free(stall->checker);
    g_free(stall->interval_text);
    g_free(stall);
}

void
watchdog_stall_begin(WatchdogStall *stall, const char *operation)
{
    g_mutex_lock(&stall->lock);
    stall->active = TRUE;
    stall->reported = FALSE;
    stall->start_usec = g_get_monotonic_time();
    stall->operation = operation;
    g_clear_pointer(&stall->checker, g_free);
    g_cond_signal(&stall->cond);
    g_mutex_unlock(&stall->lock);
}

void
watchdog_stall_set_checker(WatchdogStall *stall, const char *checker)
{
    g_mutex_lock(&stall->lock);
    g_free(stall->checker);
    stall->checker = g_strdup(checker);
    g_mutex_unlock(&stall->lock);
}

void
watchdog_stall_end(WatchdogStall *stall)
{
    g_mutex_lock(&stall->lock);
    if (stall->active && stall->reported)
        write_record(stall, WATCHDOG_RESULT_RETURNED, g_get_monotonic_time() - stall->start_usec);
    stall->active = FALSE;
    stall->reported = FALSE;
    g_cond_signal(&stall->cond);
    g_mutex_unlock(&stall->lock);
}

guint64
watchdog_stall_get_records(WatchdogStall *stall)
{
    guint64 records;

    g_mutex_lock(&stall->lock);
    records = stall->records;
    g_mutex_unlock(&stall->lock);
    return records;
}
