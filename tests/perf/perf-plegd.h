/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers of the benchmarks that run plegd as a process: its stdout and stderr read on threads
 * of their own (stdout line by line, each line handed to a callback with the time it was read),
 * waits on what it printed with deadlines, its CPU time from /proc, its /metrics, READY=1 on a
 * NOTIFY_SOCKET, and a state directory on a real disk.
 */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

typedef struct _PerfPlegd PerfPlegd;

/* Called on the stdout reader thread for every line plegd prints (without its newline), with
 * g_get_monotonic_time() just after the read that completed it. */
typedef void (*PerfPlegdLineFunc)(const char *line, gsize len, gint64 read_usec,
                                  gpointer user_data);

/* Runs @argv (plegd and its arguments) with @env_extra ("NAME=VALUE", NULL-terminated, may be
 * NULL) added to the environment.  Stdout lines that contain @needle (may be NULL) are counted;
 * @func (may be NULL) sees every line.  Exits the benchmark with status 2 when plegd cannot be
 * spawned. */
PerfPlegd *perf_plegd_spawn(const char *const *argv, const char *const *env_extra,
                            const char *needle, PerfPlegdLineFunc func, gpointer user_data);
GPid perf_plegd_get_pid(PerfPlegd *plegd);
/* The lines read so far that held the needle. */
guint perf_plegd_get_count(PerfPlegd *plegd);
/* Waits until at least @n lines held the needle; FALSE at @timeout_usec or when stdout ended. */
gboolean perf_plegd_wait_count(PerfPlegd *plegd, guint n, gint64 timeout_usec);
/* The base URL of plegd's "serving metrics on URL" log line; exits the benchmark with status 2
 * when it does not come within @timeout_usec. */
char *perf_plegd_wait_metrics_url(PerfPlegd *plegd, gint64 timeout_usec);
/* Sends @signum, waits for the exit (up to 60 s, then SIGKILL) and frees; returns the exit
 * status, or 128 + signal.  @ret_count (nullable): the lines that held the needle, every line
 * read. */
int perf_plegd_stop(PerfPlegd *plegd, int signum, guint *ret_count);
/* A copy of what plegd wrote on stderr so far. */
char *perf_plegd_get_stderr(PerfPlegd *plegd);

/* User + system CPU time of process @pid, every thread, in milliseconds (/proc/PID/stat, in
 * clock ticks). */
double perf_process_cpu_ms(GPid pid);

/* GET @url; returns the body, or NULL after printing why on stderr. */
char *perf_http_get(const char *url);
/* The value of the sample @series ("name" or "name{labels}", exactly as exposed) in Prometheus
 * text @text, or -1 when it is absent. */
double perf_metric_value(const char *text, const char *series);
/* A histogram @name's figures from @text: count, mean (sum / count) and the upper bounds of the
 * buckets that hold the 50th and 99th percentiles (+Inf as G_MAXDOUBLE), all in the histogram's
 * unit.  FALSE when the histogram is absent or empty. */
gboolean perf_histogram_summary(const char *text, const char *name, double *ret_count,
                                double *ret_mean, double *ret_p50_bound, double *ret_p99_bound);

/* A datagram socket at a new temporary path for NOTIFY_SOCKET; "NOTIFY_SOCKET=PATH" in
 * @ret_env (free it).  Exits the benchmark with status 2 when it cannot. */
GSocket *perf_notify_socket_new(char **ret_env);
/* Waits until a datagram holding "READY=1" arrives; returns g_get_monotonic_time() at its
 * receipt, or 0 at @timeout_usec. */
gint64 perf_notify_wait_ready(GSocket *socket, gint64 timeout_usec);
/* Closes the socket and removes its path and folder. */
void perf_notify_socket_free(GSocket *socket);

/* A new folder under @parent (a folder on the disk being measured) for --state-dir; @ret_fs
 * names its file system type (e.g. "ext4", "tmpfs", or the magic number).  NULL, with the
 * reason on stderr, when it cannot be made. */
char *perf_state_dir_new(const char *parent, char **ret_fs, gboolean *ret_tmpfs);
/* Removes the folder and the files in it (not recursive: a state dir holds files only). */
void perf_state_dir_remove(const char *dir);

G_END_DECLS
