/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-state-relist: plegd's CPU per steady relist with the state directory on this machine's
 * disk against without it, side by side in one run.
 *
 *   bench-state-relist CRI-SIM PLEGD [--pods=1000] [--period-ms=100] [--churn-ms=200]
 *                      [--seconds=10] [--rounds=5] [--state-parent=/var/tmp] [--json=FILE]
 *
 * cri-sim runs out of process with --pods pods of 3 running containers.  Each of --rounds
 * rounds runs plegd twice (relist period --period-ms, /metrics on a free port, the build tree's
 * plugins), once with --state-dir in a new folder under --state-parent and once without,
 * alternating which goes first.  Once plegd printed every container started, light churn runs
 * at the same pace in both: every --churn-ms one pod's first container exits, a new one is
 * started in its place and the container the previous step exited is removed (a ContainerDied,
 * a ContainerStarted and a ContainerRemoved line a step, each written and fdatasync'ed first
 * with the state directory).  After 2 s of it, plegd's CPU time (user + system of every thread,
 * /proc/PID/stat) and its global relists (kubelet_pleg_relist_duration_seconds_count) are
 * taken over --seconds: CPU per relist.
 *
 * Goal: the median over the rounds with the state directory <= 1.1x the median without.
 * Exits 1 when it is missed, 77 (skipped) when --state-parent is a tmpfs.
 */
#include <json-glib/json-glib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf-common.h"
#include "perf-plegd.h"

#define CONTAINERS_PER_POD 3
#define GOAL_RATIO         1.1
/* Every running container is reported started by plegd's first relist (sandboxes too). */
#define STARTED "\"type\":\"ContainerStarted\""

typedef struct {
    double cpu_per_relist_ms;
    double relists;
    double lines;
    double commits;
} Sample;

typedef struct {
    PerfSim *sim;
    guint n_pods;
    guint step;        /* churn steps so far, over the whole run */
    char *last_exited; /* the container the last step exited, removed by the next */
    char **current;    /* per pod: the container id churn replaces next, or NULL */
} Churn;

static G_NORETURN void
fail(const char *what)
{
    g_printerr("bench-state-relist: %s\n", what);
    exit(2);
}

/* One step: a pod's first container exits, a new one starts in its place, and the container
 * the step before exited is removed. */
static void
churn_step(Churn *churn)
{
    guint pod = churn->step % churn->n_pods;
    g_autofree char *old =
        churn->current[pod] ? g_strdup(churn->current[pod]) : g_strdup_printf("bulk-%u-0", pod);
    g_autofree char *fresh = g_strdup_printf("churn-%u", churn->step);
    g_autofree char *exit_cmd = g_strdup_printf("exit %s 1", old);
    g_autofree char *add_cmd = g_strdup_printf("container bulk-%u %s app", pod, fresh);
    g_autofree char *start_cmd = g_strdup_printf("start %s", fresh);

    perf_sim_run(churn->sim, exit_cmd);
    perf_sim_run(churn->sim, add_cmd);
    perf_sim_run(churn->sim, start_cmd);
    if (churn->last_exited) {
        g_autofree char *rm_cmd = g_strdup_printf("rm %s", churn->last_exited);

        perf_sim_run(churn->sim, rm_cmd);
    }
    g_free(churn->last_exited);
    churn->last_exited = g_steal_pointer(&old);
    g_free(churn->current[pod]);
    churn->current[pod] = g_steal_pointer(&fresh);
    churn->step++;
}

/* Churns at its pace (none with @churn_usec 0) until @until_usec (monotonic). */
static void
churn_until(Churn *churn, gint64 churn_usec, gint64 until_usec)
{
    gint64 next = g_get_monotonic_time();

    for (;;) {
        gint64 now = g_get_monotonic_time();

        if (now >= until_usec)
            return;
        if (churn_usec > 0 && now >= next) {
            churn_step(churn);
            next += churn_usec;
            continue;
        }
        /* Paced by the clock: the next step, or the end of the window. */
        g_usleep((gulong)(MIN(churn_usec > 0 ? next : until_usec, until_usec) - now));
    }
}

static void
on_line(const char *line, gsize len, gint64 read_usec, gpointer user_data)
{
    g_atomic_int_inc((gint *)user_data);
}

static double
scrape(const char *url, const char *series)
{
    g_autofree char *text = perf_http_get(url);
    double value = text ? perf_metric_value(text, series) : -1;

    if (value < 0)
        fail("no relist count in /metrics");
    return value;
}

static Sample
measure(const char *plegd_path, const char *endpoint, const char *state_dir, guint n_pods,
        Churn *churn, gint64 period_usec, gint64 churn_usec, gint64 window_usec)
{
    g_autofree char *endpoint_arg = g_strconcat("--container-runtime-endpoint=", endpoint, NULL);
    g_autofree char *period_arg =
        g_strdup_printf("--relist-period=%" G_GINT64_FORMAT "ms", period_usec / 1000);
    g_autofree char *state_arg = state_dir ? g_strconcat("--state-dir=", state_dir, NULL) : NULL;
    g_autofree char *base = NULL, *url = NULL, *text = NULL;
    /* No socket: the node's default may be taken. */
    const char *argv[] = {plegd_path, endpoint_arg, period_arg,
                          "--metrics-bind-address=127.0.0.1:0", "--socket=", state_arg, NULL};
    gint lines = 0, lines_start;
    double cpu_start, relists_start, commits_start = 0, count, mean, p50, p99;
    Sample sample = {0};
    PerfPlegd *plegd;
    GPid pid;

    plegd = perf_plegd_spawn(argv, NULL, STARTED, on_line, &lines);
    base = perf_plegd_wait_metrics_url(plegd, 30 * G_USEC_PER_SEC);
    url = g_strconcat(base, "/metrics", NULL);
    if (!perf_plegd_wait_count(plegd, n_pods * CONTAINERS_PER_POD, 60 * G_USEC_PER_SEC)) {
        g_autofree char *err = perf_plegd_get_stderr(plegd);

        g_printerr("bench-state-relist: plegd did not report its containers; its stderr:\n%s", err);
        exit(2);
    }
    pid = perf_plegd_get_pid(plegd);
    /* Warm-up: the churn's first steps, the first commits. */
    churn_until(churn, churn_usec, g_get_monotonic_time() + 2 * G_USEC_PER_SEC);

    relists_start = scrape(url, "kubelet_pleg_relist_duration_seconds_count");
    if (state_dir) {
        text = perf_http_get(url);
        if (text && perf_histogram_summary(text, "plegd_state_commit_duration_seconds", &count,
                                           &mean, &p50, &p99))
            commits_start = count;
        g_clear_pointer(&text, g_free);
    }
    lines_start = g_atomic_int_get(&lines);
    cpu_start = perf_process_cpu_ms(pid);
    churn_until(churn, churn_usec, g_get_monotonic_time() + window_usec);
    sample.cpu_per_relist_ms = perf_process_cpu_ms(pid) - cpu_start;
    sample.lines = g_atomic_int_get(&lines) - lines_start;
    sample.relists = scrape(url, "kubelet_pleg_relist_duration_seconds_count") - relists_start;
    if (state_dir) {
        text = perf_http_get(url);
        if (text && perf_histogram_summary(text, "plegd_state_commit_duration_seconds", &count,
                                           &mean, &p50, &p99))
            sample.commits = count - commits_start;
    }
    if (sample.relists < 1)
        fail("plegd did not relist during the window");
    sample.cpu_per_relist_ms /= sample.relists;
    perf_plegd_stop(plegd, SIGTERM, NULL);
    return sample;
}

int
main(int argc, char **argv)
{
    int pods = 1000, period_ms = 100, churn_ms = 200, seconds = 10, rounds = 5;
    g_autofree char *state_parent = g_strdup("/var/tmp");
    g_autofree char *json_path = NULL;
    const GOptionEntry entries[] = {
        {"pods", 0, 0, G_OPTION_ARG_INT, &pods, "Pods of 3 running containers (1000)", "N"},
        {"period-ms", 0, 0, G_OPTION_ARG_INT, &period_ms, "plegd's relist period (100)", "MS"},
        {"churn-ms", 0, 0, G_OPTION_ARG_INT, &churn_ms,
         "Time between churn steps, 0 for none (200)", "MS"},
        {"seconds", 0, 0, G_OPTION_ARG_INT, &seconds, "Time measured a run (10)", "S"},
        {"rounds", 0, 0, G_OPTION_ARG_INT, &rounds, "Runs of each mode (5)", "N"},
        {"state-parent", 0, 0, G_OPTION_ARG_FILENAME, &state_parent,
         "Where the state directories are made, on the disk measured (/var/tmp)", "DIR"},
        {"json", 0, 0, G_OPTION_ARG_FILENAME, &json_path, "Write the figures here", "FILE"},
        {NULL},
    };
    g_autoptr(GOptionContext) context = g_option_context_new("CRI-SIM PLEGD");
    g_autoptr(JsonBuilder) builder = json_builder_new();
    g_autoptr(GError) error = NULL;
    g_autofree char *bulk = NULL, *fs = NULL;
    g_autofree Sample *none = NULL, *disk = NULL;
    double none_med, none_min, none_max, disk_med, disk_min, disk_max, ratio;
    double lines_med, lines_min, lines_max, commits_med, commits_min, commits_max;
    double relists_med, relists_min, relists_max;
    Churn churn = {0};
    gboolean ok;

    g_option_context_add_main_entries(context, entries, NULL);
    if (!g_option_context_parse(context, &argc, &argv, &error)) {
        g_printerr("bench-state-relist: %s\n", error->message);
        return 2;
    }
    if (argc != 3 || pods < 1 || period_ms < 1 || churn_ms < 0 || seconds < 1 || rounds < 1) {
        g_printerr("usage: bench-state-relist CRI-SIM PLEGD [--pods=N] [--period-ms=MS] "
                   "[--churn-ms=MS] [--seconds=S] [--rounds=N] [--state-parent=DIR] "
                   "[--json=FILE]\n");
        return 2;
    }
    none = g_new0(Sample, rounds);
    disk = g_new0(Sample, rounds);

    bulk = g_strdup_printf("bulk %d %d", pods, CONTAINERS_PER_POD);
    churn.sim = perf_sim_start(argv[1], bulk);
    churn.n_pods = (guint)pods;
    churn.current = g_new0(char *, pods + 1);
    printf("state-relist: %d pods x %d containers, relist period %d ms, a churn step every %d ms "
           "(exit, start, remove), %d s measured a run, %d rounds\n",
           pods, CONTAINERS_PER_POD, period_ms, churn_ms, seconds, rounds);

    for (int r = 0; r < rounds; r++) {
        for (int m = 0; m < 2; m++) {
            gboolean with_state = (m == 0) == (r % 2 == 1);
            g_autofree char *dir = NULL;
            gboolean tmpfs = FALSE;

            if (with_state) {
                g_clear_pointer(&fs, g_free);
                dir = perf_state_dir_new(state_parent, &fs, &tmpfs);
                if (!dir)
                    return 2;
                if (tmpfs) {
                    printf("SKIP: %s is a %s, not a disk; give --state-parent a folder on one\n",
                           state_parent, fs);
                    perf_state_dir_remove(dir);
                    return 77;
                }
            }
            (with_state ? disk : none)[r] =
                measure(argv[2], perf_sim_get_endpoint(churn.sim), dir, (guint)pods, &churn,
                        (gint64)period_ms * 1000, (gint64)churn_ms * 1000,
                        (gint64)seconds * G_USEC_PER_SEC);
            if (dir)
                perf_state_dir_remove(dir);
            {
                const Sample *done = &(with_state ? disk : none)[r];
                g_autofree char *commits =
                    with_state ? g_strdup_printf(", %.0f commits", done->commits) : g_strdup("");

                printf("  round %d %-20s %.3f ms CPU a relist (%.0f relists, %.0f event lines%s)\n",
                       r + 1,
                       with_state ? "with --state-dir:" : "without:", done->cpu_per_relist_ms,
                       done->relists, done->lines, commits);
            }
        }
    }
    perf_sim_stop(churn.sim);
    g_strfreev(churn.current);
    g_free(churn.last_exited);

    perf_stats_of(none, sizeof(Sample), (guint)rounds, G_STRUCT_OFFSET(Sample, cpu_per_relist_ms),
                  &none_med, &none_min, &none_max);
    perf_stats_of(disk, sizeof(Sample), (guint)rounds, G_STRUCT_OFFSET(Sample, cpu_per_relist_ms),
                  &disk_med, &disk_min, &disk_max);
    perf_stats_of(disk, sizeof(Sample), (guint)rounds, G_STRUCT_OFFSET(Sample, lines), &lines_med,
                  &lines_min, &lines_max);
    perf_stats_of(disk, sizeof(Sample), (guint)rounds, G_STRUCT_OFFSET(Sample, commits),
                  &commits_med, &commits_min, &commits_max);
    perf_stats_of(disk, sizeof(Sample), (guint)rounds, G_STRUCT_OFFSET(Sample, relists),
                  &relists_med, &relists_min, &relists_max);
    ratio = none_med > 0 ? disk_med / none_med : 0;
    ok = none_med > 0 && ratio <= GOAL_RATIO;
    printf("  CPU a steady relist, median [min-max] over %d rounds:\n", rounds);
    printf("    without --state-dir: %.3f ms [%.3f-%.3f]\n", none_med, none_min, none_max);
    printf("    with --state-dir (%s, %s): %.3f ms [%.3f-%.3f]; %.0f relists, %.0f event lines "
           "and %.0f commits a window (medians)\n",
           state_parent, fs ? fs : "?", disk_med, disk_min, disk_max, relists_med, lines_med,
           commits_med);
    printf("goal with / without <= %.2fx: %s (%.3fx)\n", GOAL_RATIO, ok ? "met" : "MISSED", ratio);

    if (json_path) {
        json_builder_begin_object(builder);
        json_builder_set_member_name(builder, "benchmark");
        json_builder_add_string_value(builder, "state-relist");
        json_builder_set_member_name(builder, "pods");
        json_builder_add_int_value(builder, pods);
        perf_json_add_stat(builder, "without_state_cpu_ms_per_relist", none_med, none_min,
                           none_max);
        perf_json_add_stat(builder, "with_state_cpu_ms_per_relist", disk_med, disk_min, disk_max);
        json_builder_set_member_name(builder, "ratio");
        json_builder_add_double_value(builder, ratio);
        json_builder_set_member_name(builder, "goal_met");
        json_builder_add_boolean_value(builder, ok);
        json_builder_end_object(builder);
        if (!perf_json_write(builder, json_path, &error)) {
            g_printerr("bench-state-relist: %s\n", error->message);
            return 2;
        }
    }
    return ok ? 0 : 1;
}
