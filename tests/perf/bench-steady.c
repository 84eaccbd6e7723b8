/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-steady: what plegd costs a node in steady state, against a bare client making the same
 * CRI calls at the same rate, side by side in one run.
 *
 *   bench-steady CRI-SIM PLEGD [--pods=250] [--seconds=60] [--windows=6] [--json=FILE]
 *
 * cri-sim runs out of process with --pods pods of 3 running containers; nothing changes.  plegd
 * (the binary, its plugins as it finds them, /metrics on a free port, stdout into a pipe) relists
 * every second; once it has reported every container started and two more periods passed, its
 * CPU time (user + system, every thread, from /proc/PID/stat) is sampled over --seconds, cut
 * into --windows windows.  Then a child of this benchmark makes a global relist's calls
 * (ListPodSandbox and ListContainers, unpacked and freed with protobuf-c) once a second for the
 * same time, sampled the same way.
 *
 * Goal (issue "Relists at the CRI floor"): plegd's CPU over the whole time <= 0.5 % of one core.
 * The bare client's figure is beside it to say how much of that the CRI calls themselves cost.
 * Exits 1 when the goal is missed.
 */
#include <errno.h>
#include <json-glib/json-glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "perf-bare.h"
#include "perf-common.h"

#define CONTAINERS_PER_POD 3
#define GOAL_PERCENT       0.5

static G_NORETURN void
fail(const char *what, const GError *error)
{
    g_printerr("bench-steady: %s: %s\n", what, error ? error->message : "failed");
    exit(2);
}

/* User + system CPU time of process @pid, every thread, in milliseconds. */
static double
process_cpu_ms(GPid pid)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/stat", (int)pid);
    g_autofree char *text = NULL;
    g_autoptr(GError) error = NULL;
    unsigned long utime, stime;
    const char *fields;

    if (!g_file_get_contents(path, &text, NULL, &error))
        fail("reading the CPU time", error);
    /* "PID (COMM) STATE ..." where COMM may hold spaces: the fields start after the last ')'. */
    fields = strrchr(text, ')');
    if (!fields || sscanf(fields + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
                          &utime, &stime) != 2)
        fail("parsing /proc/PID/stat", NULL);
    return (double)(utime + stime) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}

/* Percent of one core that @pid used in each of @n windows of @window_usec, one after the other. */
static void
sample_windows(GPid pid, guint n, gint64 window_usec, double *ret_percent)
{
    gint64 start = g_get_monotonic_time();
    double cpu = process_cpu_ms(pid);

    for (guint i = 0; i < n; i++) {
        gint64 due = start + (gint64)(i + 1) * window_usec, now = g_get_monotonic_time();
        double cpu_end;

        if (due > now)
            g_usleep((gulong)(due - now));
        cpu_end = process_cpu_ms(pid);
        ret_percent[i] = (cpu_end - cpu) / ((double)window_usec / 1000.0) * 100.0;
        cpu = cpu_end;
    }
}

/* ---- the bare child: a global relist's calls once a second, until its stdin ends ---- */

static int
child_bare(const char *endpoint)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(CriChannel) channel = cri_channel_new(endpoint, &error);
    gint64 next = g_get_monotonic_time();
    char byte;

    if (!channel)
        fail("channel", error);
    printf("ready\n");
    fflush(stdout);
    /* The parent ends the child by closing its stdin; until then one listing a second. */
    for (;;) {
        GPollFD in = {.fd = STDIN_FILENO, .events = G_IO_IN};
        gint64 now = g_get_monotonic_time();

        if (now >= next) {
            perf_bare_listing(channel);
            next += G_USEC_PER_SEC;
            continue;
        }
        if (g_poll(&in, 1, (int)((next - now + 999) / 1000)) > 0 &&
            read(STDIN_FILENO, &byte, 1) <= 0)
            return 0;
    }
}

/* ---- the parent ---- */

typedef struct {
    GSubprocess *process;
    GDataInputStream *out;
} Child;

static Child
spawn(const char *const *argv, GSubprocessFlags flags)
{
    g_autoptr(GError) error = NULL;
    Child child = {0};

    child.process = g_subprocess_newv(argv, G_SUBPROCESS_FLAGS_STDOUT_PIPE | flags, &error);
    if (!child.process)
        fail(argv[0], error);
    child.out = g_data_input_stream_new(g_subprocess_get_stdout_pipe(child.process));
    return child;
}

static char *
read_line(Child *child, const char *what)
{
    g_autoptr(GError) error = NULL;
    char *line = g_data_input_stream_read_line(child->out, NULL, NULL, &error);

    if (!line)
        fail(what, error);
    return line;
}

static GPid
pid_of(Child *child)
{
    const char *id = g_subprocess_get_identifier(child->process);

    if (!id)
        fail("the child exited early", NULL);
    return (GPid)atoi(id);
}

static void
end(Child *child, gboolean by_stdin)
{
    g_autoptr(GError) error = NULL;

    if (by_stdin)
        g_output_stream_close(g_subprocess_get_stdin_pipe(child->process), NULL, NULL);
    else
        g_subprocess_send_signal(child->process, SIGTERM);
    if (!g_subprocess_wait(child->process, NULL, &error))
        fail("waiting for a child", error);
    g_clear_object(&child->out);
    g_clear_object(&child->process);
}

static double
total_percent(const double *windows, guint n)
{
    double sum = 0;

    for (guint i = 0; i < n; i++)
        sum += windows[i];
    return sum / n;
}

int
main(int argc, char **argv)
{
    int pods = 250, seconds = 60, windows = 6;
    g_autofree char *json_path = NULL;
    g_autofree char *child = NULL;
    g_autofree char *endpoint = NULL;
    const GOptionEntry entries[] = {
        {"pods", 0, 0, G_OPTION_ARG_INT, &pods, "Pods of 3 running containers", "N"},
        {"seconds", 0, 0, G_OPTION_ARG_INT, &seconds, "Time measured, for each", "S"},
        {"windows", 0, 0, G_OPTION_ARG_INT, &windows, "Windows the time is cut into", "N"},
        {"json", 0, 0, G_OPTION_ARG_FILENAME, &json_path, "Write the figures here", "FILE"},
        {"child", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &child, NULL, NULL},
        {"endpoint", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &endpoint, NULL, NULL},
        {NULL},
    };
    g_autoptr(GOptionContext) context = g_option_context_new("CRI-SIM PLEGD");
    g_autoptr(JsonBuilder) builder = json_builder_new();
    g_autoptr(GError) error = NULL;
    g_autofree char *bulk = NULL, *endpoint_arg = NULL, *endpoint_flag = NULL;
    g_autofree double *plegd_windows = NULL, *bare_windows = NULL;
    double plegd_total, bare_total, med, min, max, bare_med, bare_min, bare_max;
    guint started = 0, expected;
    gint64 window_usec;
    PerfSim *sim;
    Child plegd, bare;
    gboolean ok;

    g_option_context_add_main_entries(context, entries, NULL);
    if (!g_option_context_parse(context, &argc, &argv, &error)) {
        g_printerr("bench-steady: %s\n", error->message);
        return 2;
    }
    if (child && g_str_equal(child, "bare"))
        return child_bare(endpoint);
    if (argc != 3 || pods < 1 || seconds < 1 || windows < 1 || windows > seconds) {
        g_printerr("usage: bench-steady CRI-SIM PLEGD [--pods=N] [--seconds=S] [--windows=N] "
                   "[--json=FILE]\n");
        return 2;
    }
    expected = (guint)pods * CONTAINERS_PER_POD;
    window_usec = (gint64)seconds * G_USEC_PER_SEC / windows;
    plegd_windows = g_new0(double, windows);
    bare_windows = g_new0(double, windows);

    bulk = g_strdup_printf("bulk %d %d", pods, CONTAINERS_PER_POD);
    sim = perf_sim_start(argv[1], bulk);
    endpoint_flag = g_strdup_printf("--container-runtime-endpoint=%s", perf_sim_get_endpoint(sim));
    endpoint_arg = g_strdup_printf("--endpoint=%s", perf_sim_get_endpoint(sim));

    /* plegd: every container reported started (the first relist), then two steady periods. */
    plegd = spawn((const char *const[]){argv[2], endpoint_flag, "--relist-period=1s",
                                        "--metrics-bind-address=127.0.0.1:0", "--socket=", NULL},
                  G_SUBPROCESS_FLAGS_NONE);
    while (started < expected) {
        g_autofree char *line = read_line(&plegd, "plegd's first relist");

        if (strstr(line, "\"ContainerStarted\""))
            started++;
    }
    g_usleep(2 * G_USEC_PER_SEC);
    sample_windows(pid_of(&plegd), (guint)windows, window_usec, plegd_windows);
    end(&plegd, FALSE);

    /* The bare client, the same calls at the same rate. */
    bare = spawn((const char *const[]){argv[0], "--child=bare", endpoint_arg, NULL},
                 G_SUBPROCESS_FLAGS_STDIN_PIPE);
    g_free(read_line(&bare, "the bare client"));
    g_usleep(2 * G_USEC_PER_SEC);
    sample_windows(pid_of(&bare), (guint)windows, window_usec, bare_windows);
    end(&bare, TRUE);
    perf_sim_stop(sim);

    plegd_total = total_percent(plegd_windows, (guint)windows);
    bare_total = total_percent(bare_windows, (guint)windows);
    ok = plegd_total <= GOAL_PERCENT;
    perf_stats(plegd_windows, (guint)windows, &med, &min, &max);
    perf_stats(bare_windows, (guint)windows, &bare_med, &bare_min, &bare_max);
    printf("steady state, %d pods x %d containers, relist period 1 s, %d s each in %d windows:\n",
           pods, CONTAINERS_PER_POD, seconds, windows);
    printf("  plegd: %.3f %% of one core (windows: median %.3f [%.3f-%.3f]) (goal <= %.1f %%)\n",
           plegd_total, med, min, max, GOAL_PERCENT);
    printf("  bare client, the same listings: %.3f %% (windows: median %.3f [%.3f-%.3f]); "
           "plegd / bare %.2fx\n",
           bare_total, bare_med, bare_min, bare_max,
           bare_total > 0 ? plegd_total / bare_total : 0.0);
    if (!ok)
        printf("GOAL MISSED: plegd used %.3f %% of one core in steady state (goal <= %.1f %%)\n",
               plegd_total, GOAL_PERCENT);

    if (json_path) {
        json_builder_begin_object(builder);
        json_builder_set_member_name(builder, "benchmark");
        json_builder_add_string_value(builder, "steady");
        json_builder_set_member_name(builder, "pods");
        json_builder_add_int_value(builder, pods);
        json_builder_set_member_name(builder, "seconds");
        json_builder_add_int_value(builder, seconds);
        json_builder_set_member_name(builder, "plegd_percent");
        json_builder_add_double_value(builder, plegd_total);
        perf_json_add_stat(builder, "plegd_window_percent", med, min, max);
        json_builder_set_member_name(builder, "bare_percent");
        json_builder_add_double_value(builder, bare_total);
        perf_json_add_stat(builder, "bare_window_percent", bare_med, bare_min, bare_max);
        json_builder_set_member_name(builder, "goal_met");
        json_builder_add_boolean_value(builder, ok);
        json_builder_end_object(builder);
        if (!perf_json_write(builder, json_path, &error)) {
            g_printerr("bench-steady: %s\n", error->message);
            return 2;
        }
    }
    return ok ? 0 : 1;
}
