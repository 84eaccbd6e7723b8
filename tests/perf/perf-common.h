/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers of the perf benchmarks: cri-sim out of process, child processes that measure one
 * thing each, process CPU time, page faults and RSS, medians with their spread.
 */
#pragma once

#include <gio/gio.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

/* cri-sim (the binary at @cri_sim) on a socket in a new temporary folder, after running
 * @commands (one per line, each answered "ok").  Exits the benchmark with status 2 when cri-sim
 * cannot start or refuses a command. */
typedef struct _PerfSim PerfSim;
PerfSim *perf_sim_start(const char *cri_sim, const char *commands);
/* "unix:///.../cri.sock" (transfer none). */
const char *perf_sim_get_endpoint(PerfSim *sim);
/* One more command, answered "ok" or exiting the benchmark. */
void perf_sim_run(PerfSim *sim, const char *command);
/* Ends cri-sim (end of its input) and removes its folder. */
void perf_sim_stop(PerfSim *sim);

/* Process CPU time (user + system) in milliseconds, and minor page faults, so far. */
double perf_cpu_ms(void);
gint64 perf_minor_faults(void);
/* A field of /proc/self/status in KiB ("VmRSS:", "VmHWM:"). */
double perf_status_kib(const char *field);

/* Runs @argv (a child mode of the same benchmark) and returns what it printed on stdout;
 * exits the benchmark with status 2 when it fails. */
char *perf_run_child(const char *const *argv);

/* Median, minimum and maximum of @n values (sorted in place). */
void perf_stats(double *values, guint n, double *ret_median, double *ret_min, double *ret_max);
/* The same over one double field, at @offset, of @n samples of @stride bytes each. */
void perf_stats_of(const void *samples, gsize stride, guint n, gsize offset, double *ret_median,
                   double *ret_min, double *ret_max);

/* Runs @argv (a child mode of the same benchmark) under `valgrind --tool=callgrind` (@valgrind),
 * counting only inside the functions that match @toggle_function (callgrind's
 * --toggle-collect, `*` a wildcard) on the main thread.  Returns the instructions executed
 * there (Ir), or 0 after printing why on stderr when valgrind fails. */
guint64 perf_callgrind_count(const char *valgrind, const char *const *argv,
                             const char *toggle_function);
/* A member @name of the object being built: {"median": ..., "min": ..., "max": ...}. */
void perf_json_add_stat(JsonBuilder *builder, const char *name, double median, double min,
                        double max);
/* Writes the builder's root, pretty, to @path.  FALSE with @error when it cannot. */
gboolean perf_json_write(JsonBuilder *builder, const char *path, GError **error);

G_END_DECLS
