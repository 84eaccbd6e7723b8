/* SPDX-License-Identifier: Apache-2.0 */
#include <gio/gunixsocketaddress.h>
#include <glib/gstdio.h>
#include <libsoup/soup.h>
#include <signal.h>
#include <unistd.h>

#include "plegd-runner.h"

struct _PlegdRunner {
    GSubprocess *process;
    char *socket_dir; /* made for the runner's --socket; NULL: the test gave its own */
    char *socket_path;
    GMutex lock;
    GCond cond;
    GString *out;
    GString *err;
    gboolean out_eof;
    gboolean err_eof;
    GThread *out_reader;
    GThread *err_reader;
};

typedef struct {
    PlegdRunner *runner;
    GInputStream *stream;
    GString *text;
    gboolean *eof;
} Reader;

/* The runner is built like plegd: with -fsanitize=address, gcc defines this for both. */
#ifdef __SANITIZE_ADDRESS__
#define BUILT_WITH_ASAN TRUE
#else
#define BUILT_WITH_ASAN FALSE
#endif

static gint64
deadline_usec(void)
{
    /* Generous: a wrapper like valgrind slows plegd down a lot, and so do ASan (a first relist
     * of many pods is several times slower) and ThreadSanitizer (meson test --setup=tsan),
     * which this file is built with too then. */
#ifdef __SANITIZE_THREAD__
    /* Seen: a plegd that needed more than 60 s to stop on SIGTERM in a loaded tsan stage. */
    gint64 timeout = 120 * G_USEC_PER_SEC;
#else
    gint64 timeout =
        (g_getenv("PLEGD_TEST_WRAPPER") || BUILT_WITH_ASAN ? 60 : 15) * G_USEC_PER_SEC;
#endif

    return g_get_monotonic_time() + timeout;
}

static gpointer
read_stream(gpointer data)
{
    Reader *reader = data;
    PlegdRunner *runner = reader->runner;
    char buffer[4096];
    gssize n;

    while ((n = g_input_stream_read(reader->stream, buffer, sizeof buffer, NULL, NULL)) > 0) {
        g_mutex_lock(&runner->lock);
        g_string_append_len(reader->text, buffer, n);
        g_cond_broadcast(&runner->cond);
        g_mutex_unlock(&runner->lock);
    }
    g_mutex_lock(&runner->lock);
    *reader->eof = TRUE;
    g_cond_broadcast(&runner->cond);
    g_mutex_unlock(&runner->lock);
    g_free(reader);
    return NULL;
}

static GThread *
start_reader(PlegdRunner *runner, GInputStream *stream, GString *text, gboolean *eof)
{
    Reader *reader = g_new0(Reader, 1);

    reader->runner = runner;
    reader->stream = stream;
    reader->text = text;
    reader->eof = eof;
    return g_thread_new("plegd-reader", read_stream, reader);
}

PlegdRunner *
plegd_runner_spawn_full(const char *const *env, int stdout_fd, const char *const *args)
{
    const char *binary = g_getenv("PLEGD");

    ck_assert_msg(binary, "PLEGD must name the plegd binary");
    return plegd_runner_spawn_program(binary, env, stdout_fd, args);
}

static PlegdRunner *spawn(const char *binary, const char *const *env, int stdout_fd,
                          GSpawnChildSetupFunc child_setup, gpointer data,
                          const char *const *args);

PlegdRunner *
plegd_runner_spawn_with_setup(const char *const *env, int stdout_fd,
                              GSpawnChildSetupFunc child_setup, gpointer data,
                              const char *const *args)
{
    const char *binary = g_getenv("PLEGD");

    ck_assert_msg(binary, "PLEGD must name the plegd binary");
    return spawn(binary, env, stdout_fd, child_setup, data, args);
}

PlegdRunner *
plegd_runner_spawn_program(const char *binary, const char *const *env, int stdout_fd,
                           const char *const *args)
{
    return spawn(binary, env, stdout_fd, NULL, NULL, args);
}

static PlegdRunner *
spawn(const char *binary, const char *const *env, int stdout_fd, GSpawnChildSetupFunc child_setup,
      gpointer data, const char *const *args)
{
    GSubprocessFlags flags = G_SUBPROCESS_FLAGS_STDERR_PIPE;
    g_autoptr(GSubprocessLauncher) launcher = NULL;
    g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
    g_autoptr(GError) error = NULL;
    const char *wrapper = g_getenv("PLEGD_TEST_WRAPPER");
    g_autofree char *socket_dir = NULL;
    g_autofree char *own_socket = NULL;
    const char *socket_path = NULL;
    PlegdRunner *runner;

    if (wrapper && *wrapper) {
        g_auto(GStrv) words = NULL;

        ck_assert(g_shell_parse_argv(wrapper, NULL, &words, NULL));
        for (char **w = words; *w; w++)
            g_ptr_array_add(argv, g_strdup(*w));
    }
    g_ptr_array_add(argv, g_strdup(binary));
    for (const char *const *a = args; *a; a++) {
        g_ptr_array_add(argv, g_strdup(*a));
        if (g_str_has_prefix(*a, "--socket="))
            socket_path = *a + strlen("--socket=");
        else if (g_str_equal(*a, "--socket"))
            socket_path = a[1];
    }
    /* plegd's default socket is the node's: each plegd of the tests gets one of its own. */
    if (!socket_path && g_strcmp0(binary, g_getenv("PLEGD")) == 0) {
        socket_dir = make_tmpdir();
        own_socket = g_build_filename(socket_dir, "plegd.sock", NULL);
        socket_path = own_socket;
        g_ptr_array_add(argv, g_strconcat("--socket=", own_socket, NULL));
    }
    g_ptr_array_add(argv, NULL);

    if (stdout_fd < 0)
        flags |= G_SUBPROCESS_FLAGS_STDOUT_PIPE;
    launcher = g_subprocess_launcher_new(flags);
    if (stdout_fd >= 0)
        g_subprocess_launcher_take_stdout_fd(launcher, stdout_fd);
    if (child_setup)
        g_subprocess_launcher_set_child_setup(launcher, child_setup, data, NULL);

    /* Nothing from the environment the tests run in. */
    g_subprocess_launcher_unsetenv(launcher, "NOTIFY_SOCKET");
    g_subprocess_launcher_unsetenv(launcher, "G_MESSAGES_DEBUG");
    for (const char *const *e = env; e && *e; e++) {
        g_auto(GStrv) pair = g_strsplit(*e, "=", 2);

        g_subprocess_launcher_setenv(launcher, pair[0], pair[1], TRUE);
    }

    runner = g_new0(PlegdRunner, 1);
    g_mutex_init(&runner->lock);
    g_cond_init(&runner->cond);
    runner->out = g_string_new(NULL);
    runner->err = g_string_new(NULL);
    runner->socket_dir = g_steal_pointer(&socket_dir);
    runner->socket_path = socket_path && *socket_path ? g_strdup(socket_path) : NULL;
    runner->process =
        g_subprocess_launcher_spawnv(launcher, (const char *const *)argv->pdata, &error);
    ck_assert_msg(runner->process, "spawning %s: %s", binary, error ? error->message : "");
    if (stdout_fd < 0)
        runner->out_reader = start_reader(runner, g_subprocess_get_stdout_pipe(runner->process),
                                          runner->out, &runner->out_eof);
    else
        runner->out_eof = TRUE;
    runner->err_reader = start_reader(runner, g_subprocess_get_stderr_pipe(runner->process),
                                      runner->err, &runner->err_eof);
    return runner;
}

void
plegd_runner_free(PlegdRunner *runner)
{
    if (!runner)
        return;
    /* A plegd still running is asked to stop first, so that a sanitizer finishes what it writes
     * (a ThreadSanitizer report cut off by SIGKILL fails the check with nothing to judge); one
     * that does not stop in time is killed. */
    if (g_subprocess_get_identifier(runner->process)) {
        g_subprocess_send_signal(runner->process, SIGTERM);
        if (!subprocess_wait_reaped(runner->process)) {
            g_subprocess_force_exit(runner->process);
            subprocess_wait_reaped(runner->process);
        }
    }
    g_clear_pointer(&runner->out_reader, g_thread_join);
    g_clear_pointer(&runner->err_reader, g_thread_join);
    g_object_unref(runner->process);
    g_string_free(runner->out, TRUE);
    g_string_free(runner->err, TRUE);
    g_mutex_clear(&runner->lock);
    g_cond_clear(&runner->cond);
    /* A plegd killed leaves its socket. */
    if (runner->socket_dir)
        remove_tmpdir(runner->socket_dir);
    g_free(runner->socket_dir);
    g_free(runner->socket_path);
    g_free(runner);
}

const char *
plegd_runner_get_pid(PlegdRunner *runner)
{
    const char *pid = g_subprocess_get_identifier(runner->process);

    ck_assert_msg(pid, "plegd is not running");
    return pid;
}

guint
plegd_runner_count_fds(PlegdRunner *runner)
{
    const char *pid = plegd_runner_get_pid(runner);
    g_autofree char *path = NULL;
    g_autoptr(GDir) dir = NULL;
    g_autoptr(GError) error = NULL;
    guint n = 0;

    path = g_strdup_printf("/proc/%s/fd", pid);
    dir = g_dir_open(path, 0, &error);
    ck_assert_msg(dir, "%s", error->message);
    while (g_dir_read_name(dir))
        n++;
    return n;
}

guint64
plegd_runner_get_rss_kib(PlegdRunner *runner)
{
    const char *pid = g_subprocess_get_identifier(runner->process);
    g_autofree char *path = NULL;
    g_autofree char *status = NULL;
    g_autoptr(GError) error = NULL;
    const char *line;
    guint64 kib;

    ck_assert_msg(pid, "plegd is not running");
    path = g_strdup_printf("/proc/%s/status", pid);
    ck_assert_msg(g_file_get_contents(path, &status, NULL, &error), "%s", error->message);
    line = strstr(status, "\nVmRSS:");
    ck_assert_msg(line, "no VmRSS in %s", path);
    kib = g_ascii_strtoull(line + strlen("\nVmRSS:"), NULL, 10);
    ck_assert_uint_gt(kib, 0);
    return kib;
}

static char *
copy_text(PlegdRunner *runner, GString *text)
{
    char *copy;

    g_mutex_lock(&runner->lock);
    copy = g_strdup(text->str);
    g_mutex_unlock(&runner->lock);
    return copy;
}

char *
plegd_runner_get_stderr(PlegdRunner *runner)
{
    return copy_text(runner, runner->err);
}

char *
plegd_runner_get_stdout(PlegdRunner *runner)
{
    return copy_text(runner, runner->out);
}

static gboolean
wait_text(PlegdRunner *runner, GString *text, gboolean *eof, const char *needle)
{
    gint64 deadline = deadline_usec();
    gboolean found;

    g_mutex_lock(&runner->lock);
    while (!strstr(text->str, needle) && !*eof) {
        if (!g_cond_wait_until(&runner->cond, &runner->lock, deadline))
            break;
    }
    found = strstr(text->str, needle) != NULL;
    g_mutex_unlock(&runner->lock);
    return found;
}

gboolean
plegd_runner_wait_stderr(PlegdRunner *runner, const char *needle)
{
    return wait_text(runner, runner->err, &runner->err_eof, needle);
}

gboolean
plegd_runner_wait_stdout(PlegdRunner *runner, const char *needle)
{
    return wait_text(runner, runner->out, &runner->out_eof, needle);
}

gboolean
subprocess_wait_reaped(GSubprocess *process)
{
    gint64 deadline = deadline_usec();

    /* GSubprocess reaps the child from GLib's worker thread.  g_subprocess_wait() would hand
     * that thread a main context and a task of this one through GLib's own locks, unseen by
     * ThreadSanitizer, which then reports GLib's worker copying and freeing them. */
    while (g_subprocess_get_identifier(process) && g_get_monotonic_time() < deadline)
        g_usleep(10 * 1000);
    return g_subprocess_get_identifier(process) == NULL;
}

gboolean
plegd_runner_is_running(PlegdRunner *runner)
{
    return g_subprocess_get_identifier(runner->process) != NULL;
}

int
plegd_runner_wait_exit(PlegdRunner *runner)
{
    GSubprocess *process = runner->process;

    if (!subprocess_wait_reaped(process)) {
        g_autofree char *err = plegd_runner_get_stderr(runner);

        g_subprocess_force_exit(process);
        ck_abort_msg("plegd did not exit in time; stderr:\n%s", err);
    }
    g_clear_pointer(&runner->out_reader, g_thread_join);
    g_clear_pointer(&runner->err_reader, g_thread_join);
    if (g_subprocess_get_if_signaled(process))
        return 128 + g_subprocess_get_term_sig(process);
    return g_subprocess_get_exit_status(process);
}

int
plegd_runner_stop(PlegdRunner *runner, int signum)
{
    g_subprocess_send_signal(runner->process, signum);
    return plegd_runner_wait_exit(runner);
}

const char *
plegd_runner_get_socket(PlegdRunner *runner)
{
    return runner->socket_path;
}

char *
plegd_runner_get_api_url(PlegdRunner *runner)
{
    g_autofree char *escaped = NULL;

    ck_assert_msg(runner->socket_path, "plegd runs without a socket");
    assert_stderr_shows(runner, "serving the API on unix:");
    escaped = g_uri_escape_string(runner->socket_path, NULL, FALSE);
    return g_strconcat("http+unix://", escaped, NULL);
}

char *
plegd_runner_wait_metrics_url(PlegdRunner *runner)
{
    static const char marker[] = "serving metrics on ";
    gint64 deadline = deadline_usec();
    g_autofree char *err = NULL;

    g_mutex_lock(&runner->lock);
    for (;;) {
        const char *start = strstr(runner->err->str, marker);

        /* The whole line, up to its newline. */
        if (start && strchr(start, '\n')) {
            start += strlen(marker);
            if (g_str_has_prefix(start, "http://") || g_str_has_prefix(start, "https://")) {
                char *url = g_strndup(start, strcspn(start, " \t\r\n\""));

                g_mutex_unlock(&runner->lock);
                return url;
            }
            break;
        }
        if (runner->err_eof || !g_cond_wait_until(&runner->cond, &runner->lock, deadline))
            break;
    }
    err = g_strdup(runner->err->str);
    g_mutex_unlock(&runner->lock);
    ck_abort_msg("no \"%shttp://...\" line on stderr:\n%s", marker, err);
    return NULL;
}

guint
count_messages(const char *text, const char *needle)
{
    g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
    guint n = 0;

    for (char **line = lines; *line; line++) {
        if ((strstr(*line, " NOTICE plegd: ") || strstr(*line, " WARN plegd: ")) &&
            strstr(*line, needle))
            n++;
    }
    return n;
}

double
plegd_metric(const char *base, const char *series)
{
    g_autofree char *url = g_strconcat(base, "/metrics", NULL);
    g_autofree char *body = NULL;
    g_auto(GStrv) lines = NULL;

    ck_assert_uint_eq(http_request("GET", url, &body, NULL), 200);
    lines = g_strsplit(body, "\n", -1);
    for (char **line = lines; *line; line++) {
        if (g_str_has_prefix(*line, series) && (*line)[strlen(series)] == ' ')
            return g_ascii_strtod(*line + strlen(series) + 1, NULL);
    }
    ck_abort_msg("no %s on /metrics:\n%s", series, body);
    return -1;
}

void
add_hello_plugin(const char *dir)
{
    const char *module = g_getenv("PLEG_HELLO_PLUGIN");
    const char *key_file = g_getenv("PLEG_HELLO_PLUGIN_FILE");

    ck_assert_msg(module && key_file, "PLEG_HELLO_PLUGIN(_FILE) must be set");
    copy_file(module, dir, "libpleg-hello.so");
    copy_file(key_file, dir, "hello.plugin");
}

char *
make_tmpdir(void)
{
    g_autoptr(GError) error = NULL;
    char *dir = g_dir_make_tmp("plegd-test-XXXXXX", &error);

    ck_assert_msg(dir, "%s", error ? error->message : "");
    return dir;
}

void
remove_tmpdir(const char *dir)
{
    g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
    const char *name;

    while (d && (name = g_dir_read_name(d))) {
        g_autofree char *path = g_build_filename(dir, name, NULL);

        g_unlink(path);
    }
    g_rmdir(dir);
}

char *
write_file(const char *dir, const char *name, const char *contents)
{
    g_autofree char *path = g_build_filename(dir, name, NULL);
    g_autoptr(GError) error = NULL;

    ck_assert_msg(g_file_set_contents_full(path, contents, -1, G_FILE_SET_CONTENTS_NONE, 0644,
                                           &error),
                  "%s", error ? error->message : "");
    return g_steal_pointer(&path);
}

void
copy_file(const char *source, const char *dir, const char *name)
{
    g_autofree char *contents = NULL;
    g_autofree char *path = g_build_filename(dir, name, NULL);
    g_autoptr(GError) error = NULL;
    gsize length;

    ck_assert_msg(g_file_get_contents(source, &contents, &length, &error), "%s",
                  error ? error->message : "");
    ck_assert_msg(g_file_set_contents_full(path, contents, (gssize)length,
                                           G_FILE_SET_CONTENTS_NONE, 0644, &error),
                  "%s", error ? error->message : "");
}

GSocketAddress *
socket_address_from_url(const char *url, char **ret_target)
{
    const char *rest = url + strlen("http+unix://");
    const char *slash = strchr(rest, '/');
    g_autofree char *escaped = g_strndup(rest, slash ? (gsize)(slash - rest) : strlen(rest));
    g_autofree char *path = g_uri_unescape_string(escaped, NULL);

    ck_assert_msg(g_str_has_prefix(url, "http+unix://") && path, "bad URL %s", url);
    if (ret_target)
        *ret_target = g_strdup(slash ? slash : "/");
    return g_unix_socket_address_new(path);
}

guint
http_request(const char *method, const char *url, char **ret_body, char **ret_content_type)
{
    g_autoptr(GProxyResolver) direct = g_simple_proxy_resolver_new(NULL, NULL);
    guint timeout_sec = (guint)((deadline_usec() - g_get_monotonic_time()) / G_USEC_PER_SEC);
    g_autoptr(GSocketAddress) unix_address = NULL;
    g_autofree char *unix_url = NULL;
    g_autoptr(SoupSession) session = NULL;
    g_autoptr(SoupMessage) message = NULL;
    g_autoptr(GBytes) body = NULL;
    g_autoptr(GError) error = NULL;

    /* http+unix://PATH/TARGET, PATH %-escaped: the request goes to the socket at PATH. */
    if (g_str_has_prefix(url, "http+unix://")) {
        g_autofree char *target = NULL;

        unix_address = socket_address_from_url(url, &target);
        unix_url = g_strconcat("http://localhost", target, NULL);
    }
    session = soup_session_new_with_options("proxy-resolver", direct, "timeout", timeout_sec,
                                            "remote-connectable", unix_address, NULL);
    message = soup_message_new(method, unix_url ? unix_url : url);
    ck_assert_msg(message, "bad URL %s", url);
    body = soup_session_send_and_read(session, message, NULL, &error);
    ck_assert_msg(body, "%s %s: %s", method, url, error ? error->message : "");
    /* plegd keeps the connection open for more: close it, as a client that is done does (the
     * session alone would close it only from a main context this thread does not run). */
    soup_session_abort(session);
    if (ret_body)
        *ret_body = g_strndup(g_bytes_get_data(body, NULL), g_bytes_get_size(body));
    if (ret_content_type)
        *ret_content_type = g_strdup(soup_message_headers_get_one(
            soup_message_get_response_headers(message), "Content-Type"));
    return soup_message_get_status(message);
}

JsonNode *
parse_json_object(const char *text)
{
    g_autoptr(JsonParser) parser = json_parser_new();
    g_autoptr(GError) error = NULL;

    ck_assert_msg(text && json_parser_load_from_data(parser, text, -1, &error), "%s: %s",
                  error ? error->message : "no text", text ? text : "");
    ck_assert_msg(JSON_NODE_HOLDS_OBJECT(json_parser_get_root(parser)), "not an object: %s", text);
    return json_node_copy(json_parser_get_root(parser));
}

GSocket *
bind_notify_socket(const char *path)
{
    g_autoptr(GSocketAddress) address = g_unix_socket_address_new(path);
    g_autoptr(GError) error = NULL;
    g_autoptr(GSocket) socket =
        g_socket_new(G_SOCKET_FAMILY_UNIX, G_SOCKET_TYPE_DATAGRAM, 0, &error);

    ck_assert_msg(socket, "%s", error ? error->message : "");
    ck_assert_msg(g_socket_bind(socket, address, FALSE, &error), "%s", error->message);
    return g_steal_pointer(&socket);
}

char *
receive_datagrams(GSocket *socket, gint64 quiet_usec)
{
    g_autoptr(GString) received = g_string_new(NULL);

    for (;;) {
        g_autoptr(GError) error = NULL;
        char buffer[4096];
        gssize n;

        if (!g_socket_condition_timed_wait(socket, G_IO_IN, quiet_usec, NULL, &error)) {
            ck_assert(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT));
            break;
        }
        n = g_socket_receive(socket, buffer, sizeof buffer, NULL, &error);
        ck_assert_msg(n >= 0, "%s", error ? error->message : "");
        g_string_append_len(received, buffer, n);
        g_string_append_c(received, '\n');
    }
    return g_string_free(g_steal_pointer(&received), FALSE);
}
