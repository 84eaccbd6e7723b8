/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-state-restart: plegd's restart-to-ready at 5,000 pods resuming from its state directory,
 * against a fresh start without one, side by side in one run.
 *
 *   bench-state-restart CRI-SIM PLEGD [--pods=5000] [--rounds=3] [--state-parent=/var/tmp]
 *                       [--json=FILE]
 *
 * cri-sim runs out of process with --pods pods of 3 running containers; nothing changes.  Each
 * of --rounds rounds starts plegd (default options, the build tree's plugins) three times and
 * times each from its spawn to READY=1 on its NOTIFY_SOCKET, which plegd sends once its first
 * relist succeeded (what /readyz and systemd wait for):
 *
 *  - fresh: without --state-dir, as plegd ran before the state directory existed;
 *  - first: with --state-dir in a new, empty folder under --state-parent: what creates the
 *    state (every container reported started, written and fdatasync'ed before it is
 *    published), then stopped with SIGTERM;
 *  - resumed: the same folder again: the file is read back (every line parsed, the records
 *    rebuilt, the ring refilled), the Generic PLEG restored from the records, and the first
 *    relist reports nothing, as nothing changed.
 *
 * fresh goes first in odd rounds and last in even ones.  For fresh and first it also times
 * spawn -> the last initial ContainerStarted line on stdout.  The benchmark fails (status 2)
 * when the resumed plegd prints any ContainerStarted: it would not have resumed.
 *
 * Goal: the median resumed time <= 1.25x the median fresh time.  A restored pod is still
 * inspected by the first relist (pleg_generic_restore()), so a resumed start does all a fresh
 * start does plus reading the file; the goal bounds that reading at a quarter of a fresh start.
 * Exits 1 when it is missed, 77 (skipped) when --state-parent is a tmpfs.
 */
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf-common.h"
#include "perf-plegd.h"

#define CONTAINERS_PER_POD 3
#define GOAL_RATIO         1.25
#define STARTED            "\"type\":\"ContainerStarted\",\"container_id\":\"bulk-"

typedef enum {
    MODE_FRESH,
    MODE_FIRST,
    MODE_RESUMED,
    N_MODES,
} Mode;

static const char *const mode_names[N_MODES] = {"fresh", "first", "resumed"};

typedef struct {
    double ready_ms;
    double events_ms; /* the last initial ContainerStarted; 0 for resumed */
} Sample;

/* Starts plegd, times it to READY=1 (and to @expected_started lines, if any), stops it.
 * Returns the ContainerStarted lines it printed. */
static guint
start_once(const char *plegd_path, const char *endpoint, const char *state_dir,
           guint expected_started, Sample *ret)
{
    g_autofree char *endpoint_arg = g_strconcat("--container-runtime-endpoint=", endpoint, NULL);
    g_autofree char *state_arg = state_dir ? g_strconcat("--state-dir=", state_dir, NULL) : NULL;
    g_autofree char *notify_env = NULL;
    /* No socket: the node's default may be taken. */
    const char *argv[] = {plegd_path, endpoint_arg, "--socket=", state_arg, NULL};
    GSocket *notify = perf_notify_socket_new(&notify_env);
    const char *env[] = {notify_env, NULL};
    gint64 start, ready;
    PerfPlegd *plegd;
    guint started;
    int status;

    start = g_get_monotonic_time();
    plegd = perf_plegd_spawn(argv, env, STARTED, NULL, NULL);
    ready = perf_notify_wait_ready(notify, 120 * G_USEC_PER_SEC);
    if (!ready) {
        g_autofree char *err = perf_plegd_get_stderr(plegd);

        g_printerr("bench-state-restart: plegd never sent READY=1; its stderr:\n%s", err);
        exit(2);
    }
    ret->ready_ms = (double)(ready - start) / 1000.0;
    ret->events_ms = 0;
    if (expected_started) {
        if (!perf_plegd_wait_count(plegd, expected_started, 120 * G_USEC_PER_SEC)) {
            g_printerr("bench-state-restart: plegd reported %u of %u containers started\n",
                       perf_plegd_get_count(plegd), expected_started);
            exit(2);
        }
        ret->events_ms = (double)(g_get_monotonic_time() - start) / 1000.0;
    }
    /* Every line is read once plegd exited: the count is final. */
    status = perf_plegd_stop(plegd, SIGTERM, &started);
    perf_notify_socket_free(notify);
    if (status != 0) {
        g_printerr("bench-state-restart: plegd exited with status %d\n", status);
        exit(2);
    }
    return started;
}

int
main(int argc, char **argv)
{
    int pods = 5000, rounds = 3;
    g_autofree char *state_parent = g_strdup("/var/tmp");
    g_autofree char *json_path = NULL;
    const GOptionEntry entries[] = {
        {"pods", 0, 0, G_OPTION_ARG_INT, &pods, "Pods of 3 running containers (5000)", "N"},
        {"rounds", 0, 0, G_OPTION_ARG_INT, &rounds, "Rounds of the three starts (3)", "N"},
        {"state-parent", 0, 0, G_OPTION_ARG_FILENAME, &state_parent,
         "Where the state directories are made, on the disk measured (/var/tmp)", "DIR"},
        {"json", 0, 0, G_OPTION_ARG_FILENAME, &json_path, "Write the figures here", "FILE"},
        {NULL},
    };
    g_autoptr(GOptionContext) context = g_option_context_new("CRI-SIM PLEGD");
    g_autoptr(JsonBuilder) builder = json_builder_new();
    g_autoptr(GError) error = NULL;
    g_autofree char *bulk = NULL, *fs = NULL;
    Sample *samples[N_MODES];
    double med[N_MODES], min[N_MODES], max[N_MODES];
    double ev_med[N_MODES], ev_min[N_MODES], ev_max[N_MODES];
    double ratio, file_kib = 0;
    guint expected;
    PerfSim *sim;
    gboolean ok;

    g_option_context_add_main_entries(context, entries, NULL);
    if (!g_option_context_parse(context, &argc, &argv, &error)) {
        g_printerr("bench-state-restart: %s\n", error->message);
        return 2;
    }
    if (argc != 3 || pods < 1 || rounds < 1) {
        g_printerr("usage: bench-state-restart CRI-SIM PLEGD [--pods=N] [--rounds=N] "
                   "[--state-parent=DIR] [--json=FILE]\n");
        return 2;
    }
    for (int m = 0; m < N_MODES; m++)
        samples[m] = g_new0(Sample, rounds);
    expected = (guint)pods * CONTAINERS_PER_POD;

    bulk = g_strdup_printf("bulk %d %d", pods, CONTAINERS_PER_POD);
    sim = perf_sim_start(argv[1], bulk);
    printf("state-restart: %d pods x %d containers, spawn -> READY=1, %d rounds\n", pods,
           CONTAINERS_PER_POD, rounds);

    for (int r = 0; r < rounds; r++) {
        g_autofree char *dir = NULL;
        gboolean tmpfs = FALSE;
        guint replayed;
        GStatBuf st;

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
        if (r % 2 == 0)
            start_once(argv[2], perf_sim_get_endpoint(sim), NULL, expected,
                       &samples[MODE_FRESH][r]);
        start_once(argv[2], perf_sim_get_endpoint(sim), dir, expected, &samples[MODE_FIRST][r]);
        {
            g_autofree char *path = g_build_filename(dir, "state.jsonl", NULL);

            if (g_stat(path, &st) == 0)
                file_kib = (double)st.st_size / 1024.0;
        }
        replayed =
            start_once(argv[2], perf_sim_get_endpoint(sim), dir, 0, &samples[MODE_RESUMED][r]);
        if (replayed > 0) {
            g_printerr("bench-state-restart: the resumed plegd reported %u containers started "
                       "again: it did not resume\n",
                       replayed);
            return 2;
        }
        if (r % 2 == 1)
            start_once(argv[2], perf_sim_get_endpoint(sim), NULL, expected,
                       &samples[MODE_FRESH][r]);
        perf_state_dir_remove(dir);
        printf("  round %d: fresh %.1f ms (events %.1f ms), first %.1f ms (events %.1f ms), "
               "resumed %.1f ms\n",
               r + 1, samples[MODE_FRESH][r].ready_ms, samples[MODE_FRESH][r].events_ms,
               samples[MODE_FIRST][r].ready_ms, samples[MODE_FIRST][r].events_ms,
               samples[MODE_RESUMED][r].ready_ms);
    }
    perf_sim_stop(sim);

    for (int m = 0; m < N_MODES; m++) {
        perf_stats_of(samples[m], sizeof(Sample), (guint)rounds, G_STRUCT_OFFSET(Sample, ready_ms),
                      &med[m], &min[m], &max[m]);
        perf_stats_of(samples[m], sizeof(Sample), (guint)rounds, G_STRUCT_OFFSET(Sample, events_ms),
                      &ev_med[m], &ev_min[m], &ev_max[m]);
    }
    ratio = med[MODE_FRESH] > 0 ? med[MODE_RESUMED] / med[MODE_FRESH] : 0;
    ok = med[MODE_FRESH] > 0 && ratio <= GOAL_RATIO;
    printf("  spawn -> READY=1, median [min-max] over %d rounds:\n", rounds);
    printf("    fresh, no --state-dir:   %8.1f ms [%.1f-%.1f]; all started lines out %.1f ms\n",
           med[MODE_FRESH], min[MODE_FRESH], max[MODE_FRESH], ev_med[MODE_FRESH]);
    printf("    first, empty state dir:  %8.1f ms [%.1f-%.1f]; all started lines out %.1f ms "
           "(written and fdatasync'ed first)\n",
           med[MODE_FIRST], min[MODE_FIRST], max[MODE_FIRST], ev_med[MODE_FIRST]);
    printf("    resumed from the state:  %8.1f ms [%.1f-%.1f] (state.jsonl %.0f KiB on %s)\n",
           med[MODE_RESUMED], min[MODE_RESUMED], max[MODE_RESUMED], file_kib, fs ? fs : "?");
    printf("goal resumed / fresh <= %.2fx: %s (%.3fx)\n", GOAL_RATIO, ok ? "met" : "MISSED", ratio);

    if (json_path) {
        json_builder_begin_object(builder);
        json_builder_set_member_name(builder, "benchmark");
        json_builder_add_string_value(builder, "state-restart");
        json_builder_set_member_name(builder, "pods");
        json_builder_add_int_value(builder, pods);
        for (int m = 0; m < N_MODES; m++) {
            g_autofree char *name = g_strconcat(mode_names[m], "_ready_ms", NULL);

            perf_json_add_stat(builder, name, med[m], min[m], max[m]);
        }
        json_builder_set_member_name(builder, "state_file_kib");
        json_builder_add_double_value(builder, file_kib);
        json_builder_set_member_name(builder, "ratio");
        json_builder_add_double_value(builder, ratio);
        json_builder_set_member_name(builder, "goal_met");
        json_builder_add_boolean_value(builder, ok);
        json_builder_end_object(builder);
        if (!perf_json_write(builder, json_path, &error)) {
            g_printerr("bench-state-restart: %s\n", error->message);
            return 2;
        }
    }
    for (int m = 0; m < N_MODES; m++)
        g_free(samples[m]);
    return ok ? 0 : 1;
}
