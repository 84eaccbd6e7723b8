/* SPDX-License-Identifier: Apache-2.0 */
#include "perf-plegd.h"

#include <errno.h>
#include <gio/gunixsocketaddress.h>
#include <glib/gstdio.h>
#include <libsoup/soup.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>

struct _PerfPlegd {
    GSubprocess *process;
    char *needle;
    PerfPlegdLineFunc func;
    gpointer user_data;

    GMutex lock;
    GCond cond;
    guint count;
    gboolean out_eof;
    GString *err;
    gboolean err_eof;
    GThread *out_reader;
    GThread *err_reader;
};

static G_NORETURN void die(const char *format, ...) G_GNUC_PRINTF(1, 2);

static void
die(const char *format, ...)
{
    va_list args;

    va_start(args, format);
    fputs("perf-plegd: ", stderr);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    va_end(args);
    exit(2);
}

static gpointer
read_stdout(gpointer data)
{
    PerfPlegd *plegd = data;
    g_autoptr(GDataInputStream) in =
        g_data_input_stream_new(g_subprocess_get_stdout_pipe(plegd->process));
    char *line;
    gsize len;

    /* Lines of up to some kilobytes: a larger buffer than the default 4 KiB reads a burst in
     * fewer calls. */
    g_buffered_input_stream_set_buffer_size(G_BUFFERED_INPUT_STREAM(in), 64 * 1024);
    while ((line = g_data_input_stream_read_line(in, &len, NULL, NULL))) {
        gint64 now = g_get_monotonic_time();

        if (plegd->func)
            plegd->func(line, len, now, plegd->user_data);
        if (plegd->needle && strstr(line, plegd->needle)) {
            g_mutex_lock(&plegd->lock);
            plegd->count++;
            g_cond_broadcast(&plegd->cond);
            g_mutex_unlock(&plegd->lock);
        }
        g_free(line);
    }
    g_mutex_lock(&plegd->lock);
    plegd->out_eof = TRUE;
    g_cond_broadcast(&plegd->cond);
    g_mutex_unlock(&plegd->lock);
    return NULL;
}

static gpointer
read_stderr(gpointer data)
{
    PerfPlegd *plegd = data;
    GInputStream *in = g_subprocess_get_stderr_pipe(plegd->process);
    char buffer[4096];
    gssize n;

    while ((n = g_input_stream_read(in, buffer, sizeof buffer, NULL, NULL)) > 0) {
        g_mutex_lock(&plegd->lock);
        g_string_append_len(plegd->err, buffer, n);
        g_cond_broadcast(&plegd->cond);
        g_mutex_unlock(&plegd->lock);
    }
    g_mutex_lock(&plegd->lock);
    plegd->err_eof = TRUE;
    g_cond_broadcast(&plegd->cond);
    g_mutex_unlock(&plegd->lock);
    return NULL;
}

PerfPlegd *
perf_plegd_spawn(const char *const *argv, const char *const *env_extra, const char *needle,
                 PerfPlegdLineFunc func, gpointer user_data)
{
    g_autoptr(GSubprocessLauncher) launcher =
        g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
    g_autoptr(GError) error = NULL;
    PerfPlegd *plegd = g_new0(PerfPlegd, 1);

    /* Not the caller's service manager, nor its debug logging. */
    g_subprocess_launcher_unsetenv(launcher, "NOTIFY_SOCKET");
    g_subprocess_launcher_unsetenv(launcher, "G_MESSAGES_DEBUG");
    g_subprocess_launcher_unsetenv(launcher, "INVOCATION_ID");
    for (guint i = 0; env_extra && env_extra[i]; i++) {
        g_auto(GStrv) pair = g_strsplit(env_extra[i], "=", 2);

        if (pair[0] && pair[1])
            g_subprocess_launcher_setenv(launcher, pair[0], pair[1], TRUE);
    }
    g_mutex_init(&plegd->lock);
    g_cond_init(&plegd->cond);
    plegd->err = g_string_new(NULL);
    plegd->needle = g_strdup(needle);
    plegd->func = func;
    plegd->user_data = user_data;
    plegd->process = g_subprocess_launcher_spawnv(launcher, argv, &error);
    if (!plegd->process)
        die("%s: %s", argv[0], error->message);
    plegd->out_reader = g_thread_new("plegd-stdout", read_stdout, plegd);
    plegd->err_reader = g_thread_new("plegd-stderr", read_stderr, plegd);
    return plegd;
}

GPid
perf_plegd_get_pid(PerfPlegd *plegd)
{
    const char *id = g_subprocess_get_identifier(plegd->process);
    g_autofree char *err = NULL;

    if (!id) {
        err = perf_plegd_get_stderr(plegd);
        die("plegd exited early; its stderr:\n%s", err);
    }
    return (GPid)atoi(id);
}

guint
perf_plegd_get_count(PerfPlegd *plegd)
{
    guint count;

    g_mutex_lock(&plegd->lock);
    count = plegd->count;
    g_mutex_unlock(&plegd->lock);
    return count;
}

gboolean
perf_plegd_wait_count(PerfPlegd *plegd, guint n, gint64 timeout_usec)
{
    gint64 deadline = g_get_monotonic_time() + timeout_usec;
    gboolean reached;

    g_mutex_lock(&plegd->lock);
    while (plegd->count < n && !plegd->out_eof &&
           g_cond_wait_until(&plegd->cond, &plegd->lock, deadline))
        ;
    reached = plegd->count >= n;
    g_mutex_unlock(&plegd->lock);
    return reached;
}

char *
perf_plegd_wait_metrics_url(PerfPlegd *plegd, gint64 timeout_usec)
{
    static const char prefix[] = "serving metrics on ";
    gint64 deadline = g_get_monotonic_time() + timeout_usec;
    char *url = NULL;

    g_mutex_lock(&plegd->lock);
    for (;;) {
        const char *at = strstr(plegd->err->str, prefix);
        const char *end;

        if (at && (end = strchr(at, '\n'))) {
            at += strlen(prefix);
            url = g_strndup(at, (gsize)(end - at));
            break;
        }
        if (plegd->err_eof || !g_cond_wait_until(&plegd->cond, &plegd->lock, deadline))
            break;
    }
    g_mutex_unlock(&plegd->lock);
    if (!url) {
        g_autofree char *err = perf_plegd_get_stderr(plegd);

        die("plegd never said where it serves metrics; its stderr:\n%s", err);
    }
    return url;
}

char *
perf_plegd_get_stderr(PerfPlegd *plegd)
{
    char *copy;

    g_mutex_lock(&plegd->lock);
    copy = g_strdup(plegd->err->str);
    g_mutex_unlock(&plegd->lock);
    return copy;
}

static gboolean
on_wait_timeout(gpointer data)
{
    *(gboolean *)data = TRUE;
    return G_SOURCE_REMOVE;
}

static void
on_waited(GObject *source, GAsyncResult *result, gpointer data)
{
    g_subprocess_wait_finish(G_SUBPROCESS(source), result, NULL);
    *(gboolean *)data = TRUE;
}

int
perf_plegd_stop(PerfPlegd *plegd, int signum, guint *ret_count)
{
    g_autoptr(GMainContext) context = g_main_context_new();
    g_autoptr(GSource) timeout = g_timeout_source_new_seconds(60);
    gboolean exited = FALSE, timed_out = FALSE;
    int status;

    g_main_context_push_thread_default(context);
    g_source_set_callback(timeout, on_wait_timeout, &timed_out, NULL);
    g_source_attach(timeout, context);
    g_subprocess_send_signal(plegd->process, signum);
    g_subprocess_wait_async(plegd->process, NULL, on_waited, &exited);
    while (!exited && !timed_out)
        g_main_context_iteration(context, TRUE);
    if (!exited) {
        g_printerr("perf-plegd: plegd did not exit within 60 s of signal %d: killing it\n", signum);
        g_subprocess_force_exit(plegd->process);
        while (!exited)
            g_main_context_iteration(context, TRUE);
    }
    g_source_destroy(timeout);
    g_main_context_pop_thread_default(context);

    g_thread_join(plegd->out_reader);
    g_thread_join(plegd->err_reader);
    if (ret_count)
        *ret_count = plegd->count;
    status = g_subprocess_get_if_signaled(plegd->process)
                 ? 128 + g_subprocess_get_term_sig(plegd->process)
                 : g_subprocess_get_exit_status(plegd->process);
    g_object_unref(plegd->process);
    g_string_free(plegd->err, TRUE);
    g_free(plegd->needle);
    g_mutex_clear(&plegd->lock);
    g_cond_clear(&plegd->cond);
    g_free(plegd);
    return status;
}

double
perf_process_cpu_ms(GPid pid)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/stat", (int)pid);
    g_autofree char *text = NULL;
    g_autoptr(GError) error = NULL;
    unsigned long utime, stime;
    const char *fields;

    if (!g_file_get_contents(path, &text, NULL, &error))
        die("reading the CPU time: %s", error->message);
    /* "PID (COMM) STATE ..." where COMM may hold spaces: the fields start after the last ')'. */
    fields = strrchr(text, ')');
    if (!fields || sscanf(fields + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
                          &utime, &stime) != 2)
        die("cannot parse %s", path);
    return (double)(utime + stime) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}

char *
perf_http_get(const char *url)
{
    g_autoptr(GProxyResolver) direct = g_simple_proxy_resolver_new(NULL, NULL);
    g_autoptr(SoupSession) session =
        soup_session_new_with_options("proxy-resolver", direct, "timeout", 30, NULL);
    g_autoptr(SoupMessage) message = soup_message_new("GET", url);
    g_autoptr(GBytes) body = NULL;
    g_autoptr(GError) error = NULL;

    if (!message) {
        g_printerr("perf-plegd: bad URL %s\n", url);
        return NULL;
    }
    body = soup_session_send_and_read(session, message, NULL, &error);
    /* plegd keeps the connection open for more: close it, as a client that is done does. */
    soup_session_abort(session);
    if (!body || soup_message_get_status(message) != SOUP_STATUS_OK) {
        g_printerr("perf-plegd: GET %s: %s\n", url,
                   error ? error->message : soup_message_get_reason_phrase(message));
        return NULL;
    }
    return g_strndup(g_bytes_get_data(body, NULL), g_bytes_get_size(body));
}

double
perf_metric_value(const char *text, const char *series)
{
    gsize len = strlen(series);

    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');

        if (line[0] != '#' && strncmp(line, series, len) == 0 && line[len] == ' ')
            return g_ascii_strtod(line + len + 1, NULL);
        line = end ? end + 1 : NULL;
    }
    return -1;
}

/* The upper bound of the first bucket whose cumulative count reaches @rank. */
static double
bucket_bound(const char *text, const char *name, double rank)
{
    g_autofree char *prefix = g_strdup_printf("%s_bucket{le=\"", name);
    gsize len = strlen(prefix);

    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');

        if (strncmp(line, prefix, len) == 0) {
            const char *bound = line + len;
            const char *value = strstr(bound, "} ");

            if (value && g_ascii_strtod(value + 2, NULL) >= rank)
                return g_str_has_prefix(bound, "+Inf") ? G_MAXDOUBLE : g_ascii_strtod(bound, NULL);
        }
        line = end ? end + 1 : NULL;
    }
    return G_MAXDOUBLE;
}

gboolean
perf_histogram_summary(const char *text, const char *name, double *ret_count, double *ret_mean,
                       double *ret_p50_bound, double *ret_p99_bound)
{
    g_autofree char *count_name = g_strconcat(name, "_count", NULL);
    g_autofree char *sum_name = g_strconcat(name, "_sum", NULL);
    double count = perf_metric_value(text, count_name);
    double sum = perf_metric_value(text, sum_name);

    if (count <= 0 || sum < 0)
        return FALSE;
    *ret_count = count;
    *ret_mean = sum / count;
    *ret_p50_bound = bucket_bound(text, name, 0.50 * count);
    *ret_p99_bound = bucket_bound(text, name, 0.99 * count);
    return TRUE;
}

GSocket *
perf_notify_socket_new(char **ret_env)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *dir = g_dir_make_tmp("perf-notify-XXXXXX", &error);
    g_autofree char *path = NULL;
    g_autoptr(GSocketAddress) address = NULL;
    GSocket *socket;

    if (!dir)
        die("%s", error->message);
    path = g_build_filename(dir, "notify.sock", NULL);
    address = g_unix_socket_address_new(path);
    socket = g_socket_new(G_SOCKET_FAMILY_UNIX, G_SOCKET_TYPE_DATAGRAM, 0, &error);
    if (!socket || !g_socket_bind(socket, address, FALSE, &error))
        die("NOTIFY_SOCKET %s: %s", path, error->message);
    g_object_set_data_full(G_OBJECT(socket), "perf-path", g_strdup(path), g_free);
    *ret_env = g_strconcat("NOTIFY_SOCKET=", path, NULL);
    return socket;
}

gint64
perf_notify_wait_ready(GSocket *socket, gint64 timeout_usec)
{
    gint64 deadline = g_get_monotonic_time() + timeout_usec;

    for (;;) {
        g_autoptr(GError) error = NULL;
        gint64 left = deadline - g_get_monotonic_time();
        char buffer[4096];
        gssize n;

        if (left <= 0 || !g_socket_condition_timed_wait(socket, G_IO_IN, left, NULL, NULL))
            return 0;
        n = g_socket_receive(socket, buffer, sizeof buffer - 1, NULL, &error);
        if (n < 0)
            die("NOTIFY_SOCKET: %s", error->message);
        buffer[n] = '\0';
        /* One assignment a line; READY=1 is its own line. */
        if (g_str_has_prefix(buffer, "READY=1") || strstr(buffer, "\nREADY=1"))
            return g_get_monotonic_time();
    }
}

void
perf_notify_socket_free(GSocket *socket)
{
    g_autofree char *path = g_strdup(g_object_get_data(G_OBJECT(socket), "perf-path"));
    g_autofree char *dir = g_path_get_dirname(path);

    g_socket_close(socket, NULL);
    g_object_unref(socket);
    g_unlink(path);
    g_rmdir(dir);
}

char *
perf_state_dir_new(const char *parent, char **ret_fs, gboolean *ret_tmpfs)
{
    g_autofree char *template = g_build_filename(parent, "pleg-perf-state-XXXXXX", NULL);
    struct statfs fs;

    if (!g_mkdtemp_full(template, 0700)) {
        g_printerr("perf-plegd: cannot make a folder in %s: %s\n", parent, g_strerror(errno));
        return NULL;
    }
    if (statfs(template, &fs) < 0) {
        g_printerr("perf-plegd: statfs %s: %s\n", template, g_strerror(errno));
        g_rmdir(template);
        return NULL;
    }
    *ret_tmpfs = fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC;
    switch (fs.f_type) {
    case EXT4_SUPER_MAGIC: /* ext2, ext3 and ext4 share it */
        *ret_fs = g_strdup("ext2/3/4");
        break;
    case XFS_SUPER_MAGIC:
        *ret_fs = g_strdup("xfs");
        break;
    case BTRFS_SUPER_MAGIC:
        *ret_fs = g_strdup("btrfs");
        break;
    case TMPFS_MAGIC:
        *ret_fs = g_strdup("tmpfs");
        break;
    case OVERLAYFS_SUPER_MAGIC:
        *ret_fs = g_strdup("overlayfs");
        break;
    default:
        *ret_fs = g_strdup_printf("magic 0x%lx", (unsigned long)fs.f_type);
    }
    return g_steal_pointer(&template);
}

void
perf_state_dir_remove(const char *dir)
{
    g_autoptr(GDir) listing = g_dir_open(dir, 0, NULL);
    const char *name;

    while (listing && (name = g_dir_read_name(listing))) {
        g_autofree char *path = g_build_filename(dir, name, NULL);

        g_unlink(path);
    }
    g_rmdir(dir);
}
