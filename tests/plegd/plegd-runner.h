/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test helpers: run the plegd binary named by $PLEGD (wrapped in $PLEGD_TEST_WRAPPER when set,
 * e.g. "valgrind --error-exitcode=99 --leak-check=full"), watch its output, talk HTTP to it.
 * Every wait has a deadline; failures abort the current Check test.
 */
#pragma once

#include <check.h>
#include <gio/gio.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

typedef struct _PlegdRunner PlegdRunner;

/**
 * plegd_runner_spawn_full:
 * @env: (nullable): NULL-terminated "NAME=VALUE" list added to the environment (from which
 *   NOTIFY_SOCKET and G_MESSAGES_DEBUG are removed first).
 * @stdout_fd: -1 to capture stdout, else the fd plegd gets as stdout (taken).
 * @args: NULL-terminated arguments after the program name.
 */
PlegdRunner *plegd_runner_spawn_full(const char *const *env, int stdout_fd,
                                     const char *const *args);
/* The same for another program (e.g. shim-embed) at @binary. */
PlegdRunner *plegd_runner_spawn_program(const char *binary, const char *const *env, int stdout_fd,
                                        const char *const *args);
/* plegd with @child_setup run in the child just before exec (to close an fd, lower a limit). */
PlegdRunner *plegd_runner_spawn_with_setup(const char *const *env, int stdout_fd,
                                           GSpawnChildSetupFunc child_setup, gpointer data,
                                           const char *const *args);
#define plegd_runner_spawn(env, ...)                                                               \
    plegd_runner_spawn_full((env), -1, (const char *const[]){__VA_ARGS__, NULL})

void plegd_runner_free(PlegdRunner *runner);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegdRunner, plegd_runner_free)

/* plegd's process id as a string (g_subprocess_get_identifier()); fails the test when it exited. */
const char *plegd_runner_get_pid(PlegdRunner *runner);
/* Number of open file descriptors of plegd (from /proc). */
guint plegd_runner_count_fds(PlegdRunner *runner);
/* plegd's resident set size in KiB (VmRSS of /proc/PID/status). */
guint64 plegd_runner_get_rss_kib(PlegdRunner *runner);

/* Copies of what was read so far. */
char *plegd_runner_get_stderr(PlegdRunner *runner);
char *plegd_runner_get_stdout(PlegdRunner *runner);

/* Waits until stderr (or stdout) contains @needle; FALSE at the deadline or at end of file. */
gboolean plegd_runner_wait_stderr(PlegdRunner *runner, const char *needle);
gboolean plegd_runner_wait_stdout(PlegdRunner *runner, const char *needle);

#define assert_stderr_shows(runner, needle)                                                        \
    G_STMT_START                                                                                   \
    {                                                                                              \
        if (!plegd_runner_wait_stderr((runner), (needle))) {                                       \
            g_autofree char *_err = plegd_runner_get_stderr(runner);                               \
            ck_abort_msg("stderr never showed \"%s\"; it has:\n%s", (needle), _err);               \
        }                                                                                          \
    }                                                                                              \
    G_STMT_END

/* Whether plegd is still running (GLib has not reaped it); never blocks. */
gboolean plegd_runner_is_running(PlegdRunner *runner);
/* Waits for plegd to exit; returns its exit status, or 128 + signal when killed. */
int plegd_runner_wait_exit(PlegdRunner *runner);
/* Sends @signum and waits for the exit. */
int plegd_runner_stop(PlegdRunner *runner, int signum);
/* Waits (to the runner's deadline) until GLib reaped @process; FALSE if it did not.  Use it
 * instead of g_subprocess_wait(), whose hand-off to GLib's worker thread TSan cannot see. */
gboolean subprocess_wait_reaped(GSubprocess *process);

/* The base URL from plegd's "serving metrics on http://HOST:PORT" (or https://) line. */
char *plegd_runner_wait_metrics_url(PlegdRunner *runner);

/* plegd's --socket: the test's own, or the one the runner gives each plegd it spawns when the
 * test gives none (plegd's default is the node's); NULL with --socket=. */
const char *plegd_runner_get_socket(PlegdRunner *runner);
/* Once plegd serves: "http+unix://PATH" (PATH %-escaped) for http_request(), the whole API. */
char *plegd_runner_get_api_url(PlegdRunner *runner);
/* The socket of an "http+unix://PATH/TARGET" URL; @ret_target: (optional) "/TARGET". */
GSocketAddress *socket_address_from_url(const char *url, char **ret_target);

/* Lines of @text (the text format) that plegd's domain logged at notice or warning level
 * (GLib's message level) containing @needle. */
guint count_messages(const char *text, const char *needle);

/* The value of @series ("name" or "name{labels}") on the /metrics of plegd at @base; fails the
 * test when plegd does not answer or does not have the series. */
double plegd_metric(const char *base, const char *series);

/* Copies the example plugin of examples/out-of-tree-plugin, built in this tree
 * ($PLEG_HELLO_PLUGIN and $PLEG_HELLO_PLUGIN_FILE), into @dir. */
void add_hello_plugin(const char *dir);

/* A fresh temporary directory, and its removal with the files in it. */
char *make_tmpdir(void);
void remove_tmpdir(const char *dir);
/* Writes @contents to @dir/@name with mode 0644; returns the path. */
char *write_file(const char *dir, const char *name, const char *contents);
/* Copies @source to @dir/@name with mode 0644. */
void copy_file(const char *source, const char *dir, const char *name);

/* One HTTP request without proxies, to http://, https:// (no client certificate) or
 * http+unix://PATH/TARGET (over the socket at PATH); returns the status.  Fails the test when no answer comes
 * within the runner's deadline. */
guint http_request(const char *method, const char *url, char **ret_body, char **ret_content_type);

/* @text as a JSON object; fails the test when it is not one. */
JsonNode *parse_json_object(const char *text);

/* A datagram socket bound at @path, for NOTIFY_SOCKET. */
GSocket *bind_notify_socket(const char *path);
/* Every datagram received until none came for @quiet_usec, each followed by a newline. */
char *receive_datagrams(GSocket *socket, gint64 quiet_usec);

G_END_DECLS
