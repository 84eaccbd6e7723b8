/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-list-streaming: a Generic PLEG's global relist through the CRI list streams (KEP-5825)
 * against the same relist through the unary RPCs, side by side in one run.
 *
 *   bench-list-streaming CRI-SIM [--containers=N] [--rounds=N] [--relists=N] [--huge=N]
 *
 * cri-sim runs out of process with N containers (40 a pod, each listed with a 1100-byte
 * annotation: about 14 MiB at 10,000, which a unary answer still carries).  Each round runs one
 * child process per path, the paths alternating, so both see the same machine: the child makes
 * the first relist (which inspects every pod) and then --relists steady relists, and reports
 * the process CPU time of the steady relists and its peak RSS (VmHWM) above its RSS before the
 * first relist.  Goal (issue "Huge nodes"): streaming costs at most 1.1x the unary CPU per relist
 * and has the lower peak memory, by the medians.  Then one streaming child at --huge containers
 * (default 20,000, about 28 MiB: past what a unary answer may carry) shows that it relists there.
 * Exits 1 when a goal is missed.
 */
#include <gio/gio.h>
#include <glib/gstdio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <pleg/pleg.h>

#define CONTAINERS_PER_POD 40
#define ANNOTATION_BYTES   1100
#define CPU_GOAL           1.10

typedef struct {
    double cpu_ms; /* per steady relist */
    double peak_mib;
} Sample;

static double
cpu_ms_now(void)
{
    struct rusage usage;

    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_utime.tv_sec * 1e3 + usage.ru_utime.tv_usec / 1e3 +
           usage.ru_stime.tv_sec * 1e3 + usage.ru_stime.tv_usec / 1e3;
}

/* A field of /proc/self/status in KiB ("VmRSS", "VmHWM"). */
static double
status_kib(const char *field)
{
    g_autofree char *text = NULL;
    const char *line;

    if (!g_file_get_contents("/proc/self/status", &text, NULL, NULL))
        return 0;
    line = strstr(text, field);
    return line ? g_ascii_strtod(line + strlen(field) + 1, NULL) : 0;
}

/* The child: relists through one path and prints "CPU_MS PEAK_MIB". */
static int
child(const char *endpoint, gboolean streaming, int relists)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegCriClient) client = pleg_cri_client_new(endpoint, 60 * G_USEC_PER_SEC, &error);
    g_autoptr(PlegRuntime) runtime = NULL;
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    PlegGenericConfig config;
    PlegGeneric *pleg;
    double rss_kib, cpu_start, cpu_ms;

    if (!client || !pleg_cri_client_version(client, NULL, NULL, NULL, &error)) {
        g_printerr("bench-list-streaming: %s\n", error->message);
        return 2;
    }
    pleg_cri_client_set_list_streaming(client, streaming, 0);
    runtime = pleg_cri_client_as_runtime(client);
    pleg_generic_config_init(&config);
    pleg = pleg_generic_new(runtime, &config, registry);

    rss_kib = status_kib("VmRSS:");
    if (!pleg_generic_relist(pleg, &error)) {
        g_printerr("bench-list-streaming: first relist: %s\n", error->message);
        pleg_generic_free(pleg);
        return 2;
    }
    cpu_start = cpu_ms_now();
    for (int i = 0; i < relists; i++) {
        if (!pleg_generic_relist(pleg, &error)) {
            g_printerr("bench-list-streaming: relist: %s\n", error->message);
            pleg_generic_free(pleg);
            return 2;
        }
    }
    cpu_ms = (cpu_ms_now() - cpu_start) / relists;
    if (streaming && pleg_cri_client_get_list_path(client) != PLEG_CRI_LIST_STREAMING) {
        g_printerr("bench-list-streaming: the relists did not stream\n");
        pleg_generic_free(pleg);
        return 2;
    }
    printf("%.3f %.2f\n", cpu_ms, (status_kib("VmHWM:") - rss_kib) / 1024.0);
    pleg_generic_free(pleg);
    return 0;
}

static gboolean
run_child(const char *self, const char *endpoint, gboolean streaming, int relists, Sample *ret)
{
    g_autofree char *relists_arg = g_strdup_printf("--relists=%d", relists);
    g_autofree char *endpoint_arg = g_strdup_printf("--child-endpoint=%s", endpoint);
    const char *argv[] = {self, endpoint_arg, streaming ? "--child-streaming" : "--child-unary",
                          relists_arg, NULL};
    g_autofree char *out = NULL;
    g_autoptr(GError) error = NULL;
    int status;

    if (!g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_CHILD_INHERITS_STDIN, NULL, NULL, &out,
                      NULL, &status, &error) ||
        !g_spawn_check_wait_status(status, &error)) {
        g_printerr("bench-list-streaming: child: %s\n", error->message);
        return FALSE;
    }
    return sscanf(out, "%lf %lf", &ret->cpu_ms, &ret->peak_mib) == 2;
}

static int
compare_doubles(gconstpointer a, gconstpointer b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* Median, min and max of one field of @samples. */
static void
stats(const Sample *samples, int n, gsize offset, double *ret_median, double *ret_min,
      double *ret_max)
{
    g_autofree double *values = g_new(double, n);

    for (int i = 0; i < n; i++)
        values[i] = *(const double *)((const char *)&samples[i] + offset);
    qsort(values, n, sizeof(double), (int (*)(const void *, const void *))compare_doubles);
    *ret_median = n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
    *ret_min = values[0];
    *ret_max = values[n - 1];
}

/* cri-sim on a socket in @dir with @containers containers; returns its stdin to keep open. */
static GSubprocess *
start_sim(const char *cri_sim, const char *dir, int containers, char **ret_endpoint)
{
    g_autofree char *socket_path = g_build_filename(dir, "cri.sock", NULL);
    g_autofree char *bulk = g_strdup_printf("bulk %d %d %d\n", containers / CONTAINERS_PER_POD,
                                            CONTAINERS_PER_POD, ANNOTATION_BYTES);
    g_autoptr(GError) error = NULL;
    g_autoptr(GDataInputStream) out = NULL;
    g_autofree char *line = NULL;
    GSubprocess *sim;

    sim = g_subprocess_new(G_SUBPROCESS_FLAGS_STDIN_PIPE | G_SUBPROCESS_FLAGS_STDOUT_PIPE, &error,
                           cri_sim, "--socket", socket_path, NULL);
    if (!sim) {
        g_printerr("bench-list-streaming: %s\n", error->message);
        exit(2);
    }
    out = g_data_input_stream_new(g_subprocess_get_stdout_pipe(sim));
    line = g_data_input_stream_read_line(out, NULL, NULL, NULL); /* "ready" */
    g_output_stream_write_all(g_subprocess_get_stdin_pipe(sim), bulk, strlen(bulk), NULL, NULL,
                              NULL);
    g_free(line);
    line = g_data_input_stream_read_line(out, NULL, NULL, NULL); /* "ok" */
    if (!line || !g_str_equal(line, "ok")) {
        g_printerr("bench-list-streaming: cri-sim did not take \"%s\"\n", g_strstrip(bulk));
        exit(2);
    }
    *ret_endpoint = g_strconcat("unix://", socket_path, NULL);
    return sim;
}

static void
stop_sim(GSubprocess *sim)
{
    g_output_stream_close(g_subprocess_get_stdin_pipe(sim), NULL, NULL);
    g_subprocess_wait(sim, NULL, NULL);
    g_object_unref(sim);
}

int
main(int argc, char **argv)
{
    int containers = 10000, rounds = 5, relists = 5, huge = 20000;
    gboolean child_streaming = FALSE, child_unary = FALSE;
    g_autofree char *child_endpoint = NULL;
    const GOptionEntry entries[] = {
        {"containers", 0, 0, G_OPTION_ARG_INT, &containers, "Containers for the comparison", "N"},
        {"rounds", 0, 0, G_OPTION_ARG_INT, &rounds, "Children per path", "N"},
        {"relists", 0, 0, G_OPTION_ARG_INT, &relists, "Steady relists a child measures", "N"},
        {"huge", 0, 0, G_OPTION_ARG_INT, &huge, "Containers of the streaming-only run (0: none)",
         "N"},
        {"child-endpoint", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &child_endpoint, NULL,
         NULL},
        {"child-streaming", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_NONE, &child_streaming, NULL,
         NULL},
        {"child-unary", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_NONE, &child_unary, NULL, NULL},
        {NULL},
    };
    g_autoptr(GOptionContext) context = g_option_context_new("CRI-SIM");
    g_autoptr(GError) error = NULL;
    g_autofree Sample *unary = NULL, *streams = NULL;
    g_autofree char *dir = NULL, *endpoint = NULL;
    double u_cpu, u_min, u_max, s_cpu, s_min, s_max, u_peak, up_min, up_max, s_peak, sp_min,
        sp_max;
    gboolean ok = TRUE;
    GSubprocess *sim;

    g_option_context_add_main_entries(context, entries, NULL);
    if (!g_option_context_parse(context, &argc, &argv, &error)) {
        g_printerr("bench-list-streaming: %s\n", error->message);
        return 2;
    }
    if (child_endpoint)
        return child(child_endpoint, child_streaming, relists);
    if (argc != 2 || rounds < 1 || relists < 1 || containers < CONTAINERS_PER_POD) {
        g_printerr("usage: bench-list-streaming CRI-SIM [--containers=N] [--rounds=N] "
                   "[--relists=N] [--huge=N]\n");
        return 2;
    }

    dir = g_dir_make_tmp("bench-list-streaming-XXXXXX", NULL);
    sim = start_sim(argv[1], dir, containers, &endpoint);
    unary = g_new0(Sample, rounds);
    streams = g_new0(Sample, rounds);
    for (int i = 0; i < rounds; i++) {
        /* Alternate which path goes first, so that neither always follows the other. */
        gboolean streams_first = i % 2;

        if (!run_child(argv[0], endpoint, streams_first, relists, streams_first ? &streams[i] : &unary[i]) ||
            !run_child(argv[0], endpoint, !streams_first, relists, streams_first ? &unary[i] : &streams[i]))
            return 2;
    }
    stop_sim(sim);

    stats(unary, rounds, G_STRUCT_OFFSET(Sample, cpu_ms), &u_cpu, &u_min, &u_max);
    stats(streams, rounds, G_STRUCT_OFFSET(Sample, cpu_ms), &s_cpu, &s_min, &s_max);
    stats(unary, rounds, G_STRUCT_OFFSET(Sample, peak_mib), &u_peak, &up_min, &up_max);
    stats(streams, rounds, G_STRUCT_OFFSET(Sample, peak_mib), &s_peak, &sp_min, &sp_max);
    printf("global relist at %d containers (%d rounds of %d steady relists each; median "
           "[min-max]):\n",
           containers, rounds, relists);
    printf("  unary      CPU %8.2f ms [%.2f-%.2f]   peak RSS +%6.1f MiB [%.1f-%.1f]\n", u_cpu,
           u_min, u_max, u_peak, up_min, up_max);
    printf("  streaming  CPU %8.2f ms [%.2f-%.2f]   peak RSS +%6.1f MiB [%.1f-%.1f]\n", s_cpu,
           s_min, s_max, s_peak, sp_min, sp_max);
    printf("  ratio      CPU %.3fx (goal <= %.2fx), peak RSS %.3fx (goal < 1)\n", s_cpu / u_cpu,
           CPU_GOAL, s_peak / u_peak);
    if (s_cpu > CPU_GOAL * u_cpu) {
        printf("GOAL MISSED: streaming CPU per relist is over %.2fx unary\n", CPU_GOAL);
        ok = FALSE;
    }
    if (s_peak >= u_peak) {
        printf("GOAL MISSED: streaming peak RSS is not below unary\n");
        ok = FALSE;
    }

    if (huge > 0) {
        g_autofree char *huge_endpoint = NULL;
        g_autofree char *huge_dir = g_dir_make_tmp("bench-list-streaming-XXXXXX", NULL);
        Sample sample;

        sim = start_sim(argv[1], huge_dir, huge, &huge_endpoint);
        if (!run_child(argv[0], huge_endpoint, TRUE, relists, &sample))
            return 2;
        stop_sim(sim);
        printf("streaming at %d containers: CPU %.2f ms per relist, peak RSS +%.1f MiB\n", huge,
               sample.cpu_ms, sample.peak_mib);
        g_rmdir(huge_dir);
    }
    g_rmdir(dir);
    return ok ? 0 : 1;
}
