/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <json-glib/json-glib.h>
#include <poll.h>
#include <unistd.h>

#include "plegd.h"

/* JSON text is UTF-8, and a runtime's ids and reasons are bytes it chose: bytes that are not
 * UTF-8 become U+FFFD, so that every line parses as JSON. */
static void
add_string(JsonBuilder *builder, const char *name, const char *value)
{
    json_builder_set_member_name(builder, name);
    if (value && !g_utf8_validate(value, -1, NULL)) {
        g_autofree char *valid = g_utf8_make_valid(value, -1);

        json_builder_add_string_value(builder, valid);
        return;
    }
    json_builder_add_string_value(builder, value);
}

static void
add_time(JsonBuilder *builder, const char *name, gint64 unix_ns)
{
    g_autofree char *text = pleg_time_format_rfc3339(unix_ns);

    add_string(builder, name, text);
}

/* @seq 0: none. */
static char *
event_to_json(const PlegPodLifecycleEvent *event, guint64 seq)
{
    g_autoptr(JsonBuilder) builder = json_builder_new();
    g_autoptr(JsonGenerator) generator = json_generator_new();
    g_autoptr(JsonNode) root = NULL;

    json_builder_begin_object(builder);
    if (seq > 0) {
        json_builder_set_member_name(builder, "seq");
        /* JSON-GLib's integers are gint64: 2^63 events are out of reach. */
        json_builder_add_int_value(builder, (gint64)seq);
    }
    add_time(builder, "time", event->time_ns);
    add_string(builder, "pod_uid", event->pod_uid);
    add_string(builder, "type", pleg_pod_lifecycle_event_type_to_string(event->type));
    if (event->type != PLEG_POD_SYNC && event->container_id)
        add_string(builder, "container_id", event->container_id);
    add_string(builder, "relist_source", pleg_relist_source_to_string(event->relist_source));
    if (event->type == PLEG_CONTAINER_DIED && event->has_exit) {
        json_builder_set_member_name(builder, "exit_code");
        json_builder_add_int_value(builder, event->exit_code);
        if (event->reason)
            add_string(builder, "reason", event->reason);
        /* 0 is CRI's "not set"; 1970 would be a lie. */
        if (event->finished_at_ns != 0)
            add_time(builder, "finished_at", event->finished_at_ns);
    }
    json_builder_end_object(builder);

    root = json_builder_get_root(builder);
    json_generator_set_root(generator, root);
    return json_generator_to_data(generator, NULL);
}

char *
plegd_event_to_json(const PlegPodLifecycleEvent *event)
{
    return event_to_json(event, 0);
}

char *
plegd_event_to_json_with_seq(const PlegPodLifecycleEvent *event, guint64 seq)
{
    g_return_val_if_fail(seq > 0, NULL);
    return event_to_json(event, seq);
}

/* ---- the writer thread ---- */

struct _PlegdOutput {
    gatomicrefcount ref; /* plegd_output_free()'s, the writer thread's, a queued error report's */
    int fd;
    gsize max_backlog;
    GMainContext *context;
    GThread *thread;

    GMutex lock;
    GCond cond;
    GQueue lines;  /* char *, each with its newline */
    gsize backlog; /* bytes in @lines and in the line being written */
    gboolean writing;
    gboolean stop;
    GError *error; /* the write that failed; nothing is written after it */

    /* The context's thread only. */
    PlegdOutputErrorFunc error_func; /* NULL once freed */
    gpointer error_data;
    gboolean above_warn_mark;
    gint64 last_warning_usec;
};

static PlegdOutput *
output_ref(PlegdOutput *output)
{
    g_atomic_ref_count_inc(&output->ref);
    return output;
}

static void
output_unref(gpointer data)
{
    PlegdOutput *output = data;

    if (!g_atomic_ref_count_dec(&output->ref))
        return;
    g_queue_clear_full(&output->lines, g_free);
    g_clear_error(&output->error);
    g_main_context_unref(output->context);
    g_mutex_clear(&output->lock);
    g_cond_clear(&output->cond);
    g_free(output);
}

static gboolean
write_all(int fd, const char *data, gsize len, GError **error)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);

        if (n < 0) {
            int errsv = errno;

            if (errsv == EINTR)
                continue;
            /* Whoever started us may have made stdout non-blocking: waiting is this thread's job. */
            if (errsv == EAGAIN || errsv == EWOULDBLOCK) {
                struct pollfd pfd = {.fd = fd, .events = POLLOUT};

                (void)poll(&pfd, 1, -1);
                continue;
            }
            g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errsv), "%s", g_strerror(errsv));
            return FALSE;
        }
        data += n;
        len -= (gsize)n;
    }
    return TRUE;
}

static gboolean
report_error(gpointer data)
{
    PlegdOutput *output = data;
    g_autoptr(GError) error = NULL;

    if (!output->error_func)
        return G_SOURCE_REMOVE;
    g_mutex_lock(&output->lock);
    error = g_error_copy(output->error);
    g_mutex_unlock(&output->lock);
    output->error_func(error, output->error_data);
    return G_SOURCE_REMOVE;
}

static gpointer
writer_thread(gpointer data)
{
    PlegdOutput *output = data;

    g_mutex_lock(&output->lock);
    for (;;) {
        g_autofree char *line = NULL;
        g_autoptr(GError) error = NULL;
        gsize len;
        gboolean ok;

        while (!output->stop && g_queue_is_empty(&output->lines))
            g_cond_wait(&output->cond, &output->lock);
        if (output->stop)
            break;

        line = g_queue_pop_head(&output->lines);
        len = strlen(line);
        output->writing = TRUE;
        g_mutex_unlock(&output->lock);

        ok = write_all(output->fd, line, len, &error);

        g_mutex_lock(&output->lock);
        output->writing = FALSE;
        output->backlog -= len;
        if (!ok) {
            g_autoptr(GSource) source = g_idle_source_new();

            output->error = g_steal_pointer(&error);
            g_queue_clear_full(&output->lines, g_free);
            output->backlog = 0;
            g_source_set_callback(source, report_error, output_ref(output), output_unref);
            g_source_attach(source, output->context);
        }
        g_cond_broadcast(&output->cond);
        if (output->error)
            break;
    }
    g_mutex_unlock(&output->lock);
    output_unref(output);
    return NULL;
}

PlegdOutput *
plegd_output_new(int fd, gsize max_backlog, GMainContext *context,
                 PlegdOutputErrorFunc error_func, gpointer user_data)
{
    PlegdOutput *output = g_new0(PlegdOutput, 1);

    g_atomic_ref_count_init(&output->ref);
    output->fd = fd;
    output->max_backlog = max_backlog;
    output->context = context ? g_main_context_ref(context) : g_main_context_ref(g_main_context_default());
    output->error_func = error_func;
    output->error_data = user_data;
    g_mutex_init(&output->lock);
    g_cond_init(&output->cond);
    g_queue_init(&output->lines);
    output->thread = g_thread_new("plegd-output", writer_thread, output_ref(output));
    return output;
}

void
plegd_output_free(PlegdOutput *output)
{
    gboolean stuck;

    if (!output)
        return;
    output->error_func = NULL;

    g_mutex_lock(&output->lock);
    output->stop = TRUE;
    /* Not writing: the thread waits for lines or the lock, and sees the stop before any write. */
    stuck = output->writing;
    g_cond_broadcast(&output->cond);
    g_mutex_unlock(&output->lock);

    if (stuck) {
        g_debug("the writer of stdout is stuck in write(), leaving it behind");
        g_thread_unref(output->thread);
    } else {
        g_thread_join(output->thread);
    }
    output_unref(output);
}

static void
log_backlog(PlegdOutput *output, gsize backlog)
{
    gsize warn_mark = output->max_backlog / PLEGD_OUTPUT_WARN_DIVISOR;
    gint64 now = g_get_monotonic_time();

    if (backlog >= warn_mark && !output->above_warn_mark) {
        output->above_warn_mark = TRUE;
        if (output->last_warning_usec == 0 ||
            now - output->last_warning_usec >= PLEGD_FAILURE_LOG_INTERVAL_USEC) {
            g_autofree char *size = g_format_size(backlog);
            g_autofree char *max = g_format_size(output->max_backlog);

            g_message("stdout is not read fast enough: %s of events wait to be written; "
                      "plegd exits when more than %s wait",
                      size, max);
            output->last_warning_usec = now;
        }
    } else if (backlog < warn_mark / 2 && output->above_warn_mark) {
        output->above_warn_mark = FALSE;
        g_debug("the reader of stdout caught up");
    }
}

gboolean
plegd_output_write_line(PlegdOutput *output, const char *line, GError **error)
{
    gsize len = strlen(line) + 1;
    gsize backlog;

    g_mutex_lock(&output->lock);
    if (output->error) {
        g_mutex_unlock(&output->lock);
        return TRUE;
    }
    if (output->backlog + len > output->max_backlog) {
        g_autofree char *size = g_format_size(output->backlog);
        g_autofree char *max = g_format_size(output->max_backlog);

        g_mutex_unlock(&output->lock);
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_NO_SPACE,
                    "%s of events wait to be written, the most plegd keeps is %s", size, max);
        return FALSE;
    }
    g_queue_push_tail(&output->lines, g_strconcat(line, "\n", NULL));
    output->backlog += len;
    backlog = output->backlog;
    g_cond_broadcast(&output->cond);
    g_mutex_unlock(&output->lock);

    log_backlog(output, backlog);
    return TRUE;
}

gsize
plegd_output_get_backlog(PlegdOutput *output)
{
    g_autoptr(GMutexLocker) locker = g_mutex_locker_new(&output->lock);

    return output->backlog;
}

gboolean
plegd_output_flush(PlegdOutput *output, gint64 timeout_usec)
{
    g_autoptr(GMutexLocker) locker = g_mutex_locker_new(&output->lock);
    gint64 deadline = g_get_monotonic_time() + timeout_usec;

    while (output->backlog > 0 && !output->error) {
        if (!g_cond_wait_until(&output->cond, &output->lock, deadline))
            break;
    }
    return output->backlog == 0 && !output->error;
}
