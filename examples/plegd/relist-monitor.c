/* SPDX-License-Identifier: Apache-2.0 */
#include <systemd/sd-daemon.h>

#include "plegd.h"

struct _PlegdRelistMonitor {
    char *endpoint;
    PlegdNotifyFunc notify;
    gpointer notify_data;

    gboolean ready;
    char *status; /* the last STATUS= sent */

    guint64 n_failures; /* consecutive failed relists */
    guint64 n_unlogged; /* of those, how many since the last log line */
    gint64 last_log_usec;
    char *last_error;
};

static void
notify_service_manager(const char *state, gpointer user_data)
{
    int r = sd_notify(0, state);

    if (r < 0)
        g_debug("sd_notify failed: %s, ignoring", g_strerror(-r));
}

PlegdRelistMonitor *
plegd_relist_monitor_new(const char *endpoint, PlegdNotifyFunc notify, gpointer notify_data)
{
    PlegdRelistMonitor *monitor = g_new0(PlegdRelistMonitor, 1);

    monitor->endpoint = g_strdup(endpoint);
    monitor->notify = notify ? notify : notify_service_manager;
    monitor->notify_data = notify_data;
    return monitor;
}

void
plegd_relist_monitor_free(PlegdRelistMonitor *monitor)
{
    if (!monitor)
        return;
    g_free(monitor->endpoint);
    g_free(monitor->status);
    g_free(monitor->last_error);
    g_free(monitor);
}

gboolean
plegd_relist_monitor_is_ready(PlegdRelistMonitor *monitor)
{
    return monitor->ready;
}

/* @assignments go first (READY=1, STOPPING=1); STATUS= only when it changed. */
static void
send_status(PlegdRelistMonitor *monitor, const char *assignments, const char *status)
{
    g_autofree char *line = g_strdup(status);
    g_autoptr(GString) state = g_string_new(assignments);

    /* A newline would end the assignment early. */
    g_strdelimit(line, "\r\n", ' ');
    if (g_strcmp0(line, monitor->status) != 0) {
        if (state->len > 0)
            g_string_append_c(state, '\n');
        g_string_append_printf(state, "STATUS=%s", line);
        g_free(monitor->status);
        monitor->status = g_steal_pointer(&line);
    }
    if (state->len > 0)
        monitor->notify(state->str, monitor->notify_data);
}

/* The CRI client's errors name the endpoint; other runtimes' may not. */
static char *
describe_error(PlegdRelistMonitor *monitor, const GError *error)
{
    if (strstr(error->message, monitor->endpoint))
        return g_strdup(error->message);
    return g_strdup_printf("%s: %s", monitor->endpoint, error->message);
}

static gboolean
is_unreachable(const GError *error)
{
    return g_error_matches(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_UNAVAILABLE) ||
           g_error_matches(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_DEADLINE_EXCEEDED);
}

static void
logged(PlegdRelistMonitor *monitor, gint64 now_usec)
{
    monitor->n_unlogged = 0;
    monitor->last_log_usec = now_usec;
}

static void
relist_failed(PlegdRelistMonitor *monitor, const GError *error, gint64 now_usec)
{
    g_autofree char *what = describe_error(monitor, error);
    g_autofree char *status = NULL;

    monitor->n_failures++;
    monitor->n_unlogged++;

    if (monitor->n_failures == 1) {
        g_message("relist failed: %s; retrying", what);
        logged(monitor, now_usec);
    } else if (!g_str_equal(what, monitor->last_error)) {
        g_message("relist failed with a different error: %s", what);
        logged(monitor, now_usec);
    } else if (now_usec - monitor->last_log_usec >= PLEGD_FAILURE_LOG_INTERVAL_USEC) {
        g_autofree char *since = pleg_duration_format(now_usec - monitor->last_log_usec);

        g_message("relist still failing: %" G_GUINT64_FORMAT " failures in the last %s: %s",
                  monitor->n_unlogged, since, what);
        logged(monitor, now_usec);
    }

    status = g_strdup_printf(
        "%s: %s", is_unreachable(error) ? "runtime unreachable" : "relist failing", what);
    send_status(monitor, NULL, status);

    g_debug("relist failure %" G_GUINT64_FORMAT ": %s", monitor->n_failures, what);
    g_free(monitor->last_error);
    monitor->last_error = g_steal_pointer(&what);
}

static void
relist_succeeded(PlegdRelistMonitor *monitor, guint n_pods)
{
    g_autofree char *status =
        g_strdup_printf("relisting %u %s", n_pods, n_pods == 1 ? "pod" : "pods");

    if (monitor->n_failures > 0) {
        g_message("relist succeeded after %" G_GUINT64_FORMAT " failed relist%s",
                  monitor->n_failures, monitor->n_failures == 1 ? "" : "s");
        monitor->n_failures = 0;
        monitor->n_unlogged = 0;
        g_clear_pointer(&monitor->last_error, g_free);
    }

    if (!monitor->ready) {
        monitor->ready = TRUE;
        g_info("first relist succeeded with %u %s; ready", n_pods, n_pods == 1 ? "pod" : "pods");
        send_status(monitor, "READY=1", status);
    } else
        send_status(monitor, NULL, status);
}

void
plegd_relist_monitor_update(PlegdRelistMonitor *monitor, const GError *error, guint n_pods,
                            gint64 now_usec)
{
    if (error)
        relist_failed(monitor, error, now_usec);
    else
        relist_succeeded(monitor, n_pods);
}

void
plegd_relist_monitor_stopping(PlegdRelistMonitor *monitor)
{
    send_status(monitor, "STOPPING=1", "stopping");
}
