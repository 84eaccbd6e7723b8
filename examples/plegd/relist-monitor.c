/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "plegd.h"

struct _PlegdRelistMonitor {
    char *endpoint;
    PlegdNotifyFunc notify;
    gpointer notify_data;

    gboolean ready;
    char *status; /* the last STATUS= sent */
    char *unsent; /* assignments (READY=1) that could not be sent yet, NULL: none */
    gboolean logged_full_socket;

    guint64 n_failures; /* consecutive failed relists */
    guint64 n_unlogged; /* of those, how many since the last log line */
    gint64 last_log_usec;
    char *last_error;
    GHashTable *logged_errors; /* error texts logged in this run of failures */
};

/* Enough distinct errors for any runtime; more are treated as seen (the minute line counts them). */
#define MAX_LOGGED_ERRORS 32

int
plegd_notify_nonblocking(const char *notify_socket, const char *state)
{
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    size_t path_len;
    ssize_t n;
    int errsv;
    int fd;

    if (!notify_socket || notify_socket[0] == '\0')
        return 0;
    if (notify_socket[0] != '/' && notify_socket[0] != '@')
        return -EAFNOSUPPORT;
    path_len = strlen(notify_socket);
    if (path_len >= sizeof address.sun_path)
        return -EINVAL;
    memcpy(address.sun_path, notify_socket, path_len);
    if (address.sun_path[0] == '@')
        address.sun_path[0] = '\0';

    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    n = sendto(fd, state, strlen(state), MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&address,
               (socklen_t)(offsetof(struct sockaddr_un, sun_path) + path_len));
    errsv = errno;
    close(fd);
    if (n < 0)
        return errsv == EWOULDBLOCK ? -EAGAIN : -errsv;
    return 1;
}

static gboolean
notify_service_manager(const char *state, gpointer user_data)
{
    PlegdRelistMonitor *monitor = user_data;
    const char *notify_socket = g_getenv("NOTIFY_SOCKET");
    int r = plegd_notify_nonblocking(notify_socket, state);

    if (r == -EAGAIN) {
        if (!monitor->logged_full_socket)
            g_message("the service manager does not read NOTIFY_SOCKET %s: its queue is full; "
                      "notifying again later",
                      notify_socket);
        else
            g_debug("NOTIFY_SOCKET %s is still full", notify_socket);
        monitor->logged_full_socket = TRUE;
        return FALSE;
    }
    if (r < 0)
        g_debug("notifying the service manager failed: %s, ignoring", g_strerror(-r));
    return TRUE;
}

PlegdRelistMonitor *
plegd_relist_monitor_new(const char *endpoint, PlegdNotifyFunc notify, gpointer notify_data)
{
    PlegdRelistMonitor *monitor = g_new0(PlegdRelistMonitor, 1);

    monitor->endpoint = pleg_log_text(endpoint, -1, 0); /* as the CRI client's errors show it */
    monitor->logged_errors = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    monitor->notify = notify ? notify : notify_service_manager;
    monitor->notify_data = notify ? notify_data : monitor;
    return monitor;
}

void
plegd_relist_monitor_free(PlegdRelistMonitor *monitor)
{
    if (!monitor)
        return;
    g_free(monitor->endpoint);
    g_free(monitor->status);
    g_free(monitor->unsent);
    g_free(monitor->last_error);
    g_hash_table_unref(monitor->logged_errors);
    g_free(monitor);
}

gboolean
plegd_relist_monitor_is_ready(PlegdRelistMonitor *monitor)
{
    return monitor->ready;
}

/* @assignments go first (READY=1, STOPPING=1), after those not sent before; STATUS= only when
 * it changed.  What could not be sent is tried again with the next call. */
static void
send_status(PlegdRelistMonitor *monitor, const char *assignments, const char *status)
{
    g_autofree char *line = g_strdup(status);
    g_autoptr(GString) state = g_string_new(monitor->unsent);
    g_autofree char *pending = NULL;
    gboolean new_status;

    if (assignments) {
        if (state->len > 0)
            g_string_append_c(state, '\n');
        g_string_append(state, assignments);
    }
    pending = state->len > 0 ? g_strdup(state->str) : NULL;

    /* A newline would end the assignment early. */
    g_strdelimit(line, "\r\n", ' ');
    new_status = g_strcmp0(line, monitor->status) != 0;
    if (new_status) {
        if (state->len > 0)
            g_string_append_c(state, '\n');
        g_string_append_printf(state, "STATUS=%s", line);
    }
    if (state->len == 0)
        return;

    if (!monitor->notify(state->str, monitor->notify_data)) {
        g_free(monitor->unsent);
        monitor->unsent = g_steal_pointer(&pending);
        return;
    }
    g_clear_pointer(&monitor->unsent, g_free);
    if (new_status) {
        g_free(monitor->status);
        monitor->status = g_steal_pointer(&line);
    }
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

    /* Each distinct error is said once per run of failures; a runtime whose error text
     * alternates would otherwise be logged at every flip. */
    if (monitor->n_failures == 1) {
        g_message("relist failed: %s; retrying", what);
        logged(monitor, now_usec);
        g_hash_table_add(monitor->logged_errors, g_strdup(what));
    } else if (!g_hash_table_contains(monitor->logged_errors, what) &&
               g_hash_table_size(monitor->logged_errors) < MAX_LOGGED_ERRORS) {
        g_message("relist failed with a different error: %s", what);
        logged(monitor, now_usec);
        g_hash_table_add(monitor->logged_errors, g_strdup(what));
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
        g_hash_table_remove_all(monitor->logged_errors);
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
