/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "plegd.h"

/*
 * The event line is written directly, not through JSON-GLib: JSON-GLib writes only from a
 * JsonNode tree (an object's hash table, a node, a GValue and a copy per member, then a
 * generator walking it), about 45,000 instructions a line against this writer's ~3,400
 * (tests/perf/bench-event-line.c).  The text is the one JSON-GLib 1.6 wrote, byte for byte:
 * members in the documented order without spaces, integers in decimal, strings with `\"`,
 * `\\`, `\b`, `\f`, `\n`, `\r`, `\t` and `\u00xx` (lower-case hex) for the other control
 * characters and DEL, everything else as it is, a missing string as `null`.  One deliberate
 * difference: JSON-GLib 1.6 leaves U+001F unescaped, which is not JSON; it is `\u001f` here.
 * tests/plegd/test-plegd-units.c compares the two on every byte and on the events' shapes.
 */

/* The line being written: a buffer that grows by doubling, appended to without a call into
 * GLib per piece. */
typedef struct {
    char *data;
    gsize len;
    gsize size;
} Line;

static inline void
line_reserve(Line *line, gsize more)
{
    if (line->len + more <= line->size)
        return;
    while (line->len + more > line->size)
        line->size *= 2;
    line->data = g_realloc(line->data, line->size);
}

static inline void
line_append_len(Line *line, const char *text, gsize len)
{
    line_reserve(line, len);
    memcpy(line->data + line->len, text, len);
    line->len += len;
}

/* @literal: a string literal. */
#define line_append_literal(line, literal) line_append_len((line), "" literal, sizeof(literal) - 1)

const char *
plegd_int64_to_decimal(gint64 value, char buf[PLEGD_DECIMAL_SIZE])
{
    char *p = buf + PLEGD_DECIMAL_SIZE;
    guint64 u = value < 0 ? (guint64)(-(value + 1)) + 1 : (guint64)value;

    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u > 0);
    if (value < 0)
        *--p = '-';
    return p;
}

static void
line_append_int64(Line *line, gint64 value)
{
    char buf[PLEGD_DECIMAL_SIZE];
    const char *p = plegd_int64_to_decimal(value, buf);

    line_append_len(line, p, buf + PLEGD_DECIMAL_SIZE - p);
}

/* The escape of each byte below 0x80: 0 for none, 'u' for \u00xx, else the letter after \. */
static const char json_escapes[0x80] = {
    ['\b'] = 'b', ['\t'] = 't', ['\n'] = 'n',  ['\f'] = 'f', ['\r'] = 'r', [0x01] = 'u',
    [0x02] = 'u', [0x03] = 'u', [0x04] = 'u',  [0x05] = 'u', [0x06] = 'u', [0x07] = 'u',
    [0x0b] = 'u', [0x0e] = 'u', [0x0f] = 'u',  [0x10] = 'u', [0x11] = 'u', [0x12] = 'u',
    [0x13] = 'u', [0x14] = 'u', [0x15] = 'u',  [0x16] = 'u', [0x17] = 'u', [0x18] = 'u',
    [0x19] = 'u', [0x1a] = 'u', [0x1b] = 'u',  [0x1c] = 'u', [0x1d] = 'u', [0x1e] = 'u',
    [0x1f] = 'u', ['"'] = '"',  ['\\'] = '\\', [0x7f] = 'u',
};

#define BYTES(b) (G_GUINT64_CONSTANT(0x0101010101010101) * (b))

/* Whether one of the 8 bytes in @x may need a look of its own: a control character, '"', '\',
 * DEL or a byte above 0x7f.  Exact for "none", which is what lets whole words be copied. */
static inline gboolean
word_has_special(guint64 x)
{
    guint64 high = BYTES(0x80);
    guint64 below_space = (x - BYTES(0x20)) & ~x & high;
    guint64 quote = ((x ^ BYTES('"')) - BYTES(1)) & ~(x ^ BYTES('"')) & high;
    guint64 backslash = ((x ^ BYTES('\\')) - BYTES(1)) & ~(x ^ BYTES('\\')) & high;
    guint64 del_or_high = (x | (x + BYTES(1))) & high;

    return (below_space | quote | backslash | del_or_high) != 0;
}

/* Appends @len bytes of @value escaped; FALSE, with @line partly written, at the first byte
 * above 0x7f when @ascii_only. */
static gboolean
append_escaped(Line *line, const char *value, gsize len, gboolean ascii_only)
{
    static const char hex[] = "0123456789abcdef";
    const char *end = value + len;
    const char *run = value;
    const char *p = value;

    line_reserve(line, len);
    while (p < end) {
        guchar c;
        char esc;

        if (end - p >= 8) {
            guint64 word;

            memcpy(&word, p, sizeof(word));
            if (!word_has_special(word)) {
                p += 8;
                continue;
            }
        }
        c = (guchar)*p;
        if (c >= 0x80) {
            if (ascii_only)
                return FALSE;
            p++;
            continue;
        }
        esc = json_escapes[c];
        if (!esc) {
            p++;
            continue;
        }
        line_append_len(line, run, p - run);
        run = ++p;
        if (esc == 'u') {
            char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 0xf]};

            line_append_len(line, u, sizeof(u));
        } else {
            char two[2] = {'\\', esc};

            line_append_len(line, two, sizeof(two));
        }
    }
    line_append_len(line, run, end - run);
    return TRUE;
}

/* JSON text is UTF-8, and a runtime's ids and reasons are bytes it chose: bytes that are not
 * UTF-8 become U+FFFD, so that every line parses as JSON.  ASCII, the usual text, is written in
 * one pass; only text with other bytes is validated. */
static void
append_string(Line *line, const char *value)
{
    gsize start = line->len;
    gsize len;

    if (!value) {
        line_append_literal(line, "null");
        return;
    }
    len = strlen(value);
    line_append_literal(line, "\"");
    if (!append_escaped(line, value, len, TRUE)) {
        line->len = start + 1;
        if (g_utf8_validate_len(value, len, NULL)) {
            append_escaped(line, value, len, FALSE);
        } else {
            g_autofree char *valid = g_utf8_make_valid(value, len);

            append_escaped(line, valid, strlen(valid), FALSE);
        }
    }
    line_append_literal(line, "\"");
}

/* RFC 3339 text is ASCII digits and "-:.TZ": nothing to escape. */
static void
append_time(Line *line, gint64 unix_ns)
{
    char text[PLEG_TIME_RFC3339_SIZE];
    gsize len = pleg_time_format_rfc3339_to_buffer(unix_ns, text);

    line_append_literal(line, "\"");
    line_append_len(line, text, len);
    line_append_literal(line, "\"");
}

/* @seq 0: none.  Returns: (transfer full): the text, NUL-terminated, and its length in
 * @ret_len; with its newline when @newline. */
static char *
event_to_json(const PlegPodLifecycleEvent *event, guint64 seq, gboolean newline, gsize *ret_len)
{
    const PlegEventDetails *details = pleg_pod_lifecycle_event_get_details(event);
    Line line = {.size = 512};

    line.data = g_malloc(line.size);
    line_append_literal(&line, "{");
    if (seq > 0) {
        line_append_literal(&line, "\"seq\":");
        /* As JSON-GLib's integers were, a gint64: 2^63 events are out of reach. */
        line_append_int64(&line, (gint64)seq);
        line_append_literal(&line, ",");
    }
    line_append_literal(&line, "\"time\":");
    append_time(&line, event->time_ns);
    line_append_literal(&line, ",\"pod_uid\":");
    append_string(&line, event->pod_uid);
    if (details->pod_namespace) {
        line_append_literal(&line, ",\"namespace\":");
        append_string(&line, details->pod_namespace);
    }
    if (details->pod_name) {
        line_append_literal(&line, ",\"pod\":");
        append_string(&line, details->pod_name);
    }
    line_append_literal(&line, ",\"type\":");
    append_string(&line, pleg_pod_lifecycle_event_type_to_string(event->type));
    if (event->type != PLEG_POD_SYNC) {
        if (event->container_id) {
            line_append_literal(&line, ",\"container_id\":");
            append_string(&line, event->container_id);
        }
        /* A sandbox has no container name, whatever the runtime filled in. */
        if (!details->sandbox && details->container_name) {
            line_append_literal(&line, ",\"container\":");
            append_string(&line, details->container_name);
        }
        if (details->sandbox)
            line_append_literal(&line, ",\"sandbox\":true,\"attempt\":");
        else
            line_append_literal(&line, ",\"sandbox\":false,\"attempt\":");
        line_append_int64(&line, details->attempt);
        if (details->image) {
            line_append_literal(&line, ",\"image\":");
            append_string(&line, details->image);
        }
    }
    line_append_literal(&line, ",\"relist_source\":");
    append_string(&line, pleg_relist_source_to_string(event->relist_source));
    if (pleg_pod_lifecycle_event_is_initial(event))
        line_append_literal(&line, ",\"initial\":true");
    if (event->type == PLEG_CONTAINER_STARTED && details->started_at_ns != 0) {
        line_append_literal(&line, ",\"started_at\":");
        append_time(&line, details->started_at_ns);
    }
    if (event->type == PLEG_CONTAINER_DIED && event->has_exit) {
        line_append_literal(&line, ",\"exit_code\":");
        line_append_int64(&line, event->exit_code);
        if (event->reason) {
            line_append_literal(&line, ",\"reason\":");
            append_string(&line, event->reason);
        }
        /* 0 is CRI's "not set"; 1970 would be a lie. */
        if (event->finished_at_ns != 0) {
            line_append_literal(&line, ",\"finished_at\":");
            append_time(&line, event->finished_at_ns);
        }
    }
    if (newline)
        line_append_literal(&line, "}\n");
    else
        line_append_literal(&line, "}");
    *ret_len = line.len;
    line_append_len(&line, "", 1);
    return line.data;
}

char *
plegd_event_to_json(const PlegPodLifecycleEvent *event)
{
    gsize len;

    return event_to_json(event, 0, FALSE, &len);
}

char *
plegd_event_to_json_with_seq(const PlegPodLifecycleEvent *event, guint64 seq)
{
    gsize len;

    g_return_val_if_fail(seq > 0, NULL);
    return event_to_json(event, seq, FALSE, &len);
}

GBytes *
plegd_event_to_line(const PlegPodLifecycleEvent *event, guint64 seq)
{
    gsize len;
    char *text;

    g_return_val_if_fail(seq > 0, NULL);
    text = event_to_json(event, seq, TRUE, &len);
    return g_bytes_new_take(text, len);
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
    GQueue lines;  /* GBytes, each with its newline */
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
    g_queue_clear_full(&output->lines, (GDestroyNotify)g_bytes_unref);
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
        g_autoptr(GBytes) line = NULL;
        g_autoptr(GError) error = NULL;
        const char *text;
        gsize len;
        gboolean ok;

        while (!output->stop && g_queue_is_empty(&output->lines))
            g_cond_wait(&output->cond, &output->lock);
        if (output->stop)
            break;

        line = g_queue_pop_head(&output->lines);
        text = g_bytes_get_data(line, &len);
        output->writing = TRUE;
        g_mutex_unlock(&output->lock);

        ok = write_all(output->fd, text, len, &error);

        g_mutex_lock(&output->lock);
        output->writing = FALSE;
        output->backlog -= len;
        if (!ok) {
            g_autoptr(GSource) source = g_idle_source_new();

            output->error = g_steal_pointer(&error);
            g_queue_clear_full(&output->lines, (GDestroyNotify)g_bytes_unref);
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
    gsize len = strlen(line);
    char *text = g_malloc(len + 1);
    g_autoptr(GBytes) bytes = NULL;

    memcpy(text, line, len);
    text[len] = '\n';
    bytes = g_bytes_new_take(text, len + 1);
    return plegd_output_write_bytes(output, bytes, error);
}

gboolean
plegd_output_write_bytes(PlegdOutput *output, GBytes *line, GError **error)
{
    gsize len = g_bytes_get_size(line);
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
    g_queue_push_tail(&output->lines, g_bytes_ref(line));
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
    gsize backlog;

    g_mutex_lock(&output->lock);
    backlog = output->backlog;
    g_mutex_unlock(&output->lock);
    return backlog;
}

gboolean
plegd_output_flush(PlegdOutput *output, gint64 timeout_usec)
{
    gint64 deadline = g_get_monotonic_time() + timeout_usec;
    gboolean flushed;

    g_mutex_lock(&output->lock);
    while (output->backlog > 0 && !output->error) {
        if (!g_cond_wait_until(&output->cond, &output->lock, deadline))
            break;
    }
    flushed = output->backlog == 0 && !output->error;
    g_mutex_unlock(&output->lock);
    return flushed;
}
