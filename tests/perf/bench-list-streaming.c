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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pleg/pleg.h>

#include "perf-common.h"

#define CONTAINERS_PER_POD 40
#define ANNOTATION_BYTES   1100
#define CPU_GOAL           1.10

typedef struct {
    double cpu_ms; /* per steady relist */
    double peak_mib;
} Sample;

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

    rss_kib = perf_status_kib("VmRSS:");
    if (!pleg_generic_relist(pleg, &error)) {
        g_printerr("bench-list-streaming: first relist: %s\n", error->message);
        pleg_generic_free(pleg);
        return 2;
    }
    cpu_start = perf_cpu_ms();
    for (int i = 0; i < relists; i++) {
        if (!pleg_generic_relist(pleg, &error)) {
            g_printerr("bench-list-streaming: relist: %s\n", error->message);
            pleg_generic_free(pleg);
            return 2;
        }
    }
    cpu_ms = (perf_cpu_ms() - cpu_start) / relists;
    if (streaming && pleg_cri_client_get_list_path(client) != PLEG_CRI_LIST_STREAMING) {
        g_printerr("bench-list-streaming: the relists did not stream\n");
        pleg_generic_free(pleg);
        return 2;
    }
    printf("%.3f %.2f\n", cpu_ms, (perf_status_kib("VmHWM:") - rss_kib) / 1024.0);
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
    g_autofree char *out = perf_run_child(argv);

    return sscanf(out, "%lf %lf", &ret->cpu_ms, &ret->peak_mib) == 2;
}

/* Median, min and max of one field of @samples. */
static void
stats(const Sample *samples, int n, gsize offset, double *ret_median, double *ret_min,
      double *ret_max)
{
    perf_stats_of(samples, sizeof(Sample), n, offset, ret_median, ret_min, ret_max);
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
    double u_cpu, u_min, u_max, s_cpu, s_min, s_max, u_peak, up_min, up_max, s_peak, sp_min,
        sp_max;
    gboolean ok = TRUE;
    g_autofree char *bulk = NULL;
    PerfSim *sim;

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

    bulk = g_strdup_printf("bulk %d %d %d", containers / CONTAINERS_PER_POD, CONTAINERS_PER_POD,
                           ANNOTATION_BYTES);
    sim = perf_sim_start(argv[1], bulk);
    unary = g_new0(Sample, rounds);
    streams = g_new0(Sample, rounds);
    for (int i = 0; i < rounds; i++) {
        /* Alternate which path goes first, so that neither always follows the other. */
        gboolean streams_first = i % 2;

        const char *endpoint = perf_sim_get_endpoint(sim);

        if (!run_child(argv[0], endpoint, streams_first, relists,
                       streams_first ? &streams[i] : &unary[i]) ||
            !run_child(argv[0], endpoint, !streams_first, relists,
                       streams_first ? &unary[i] : &streams[i]))
            return 2;
    }
    perf_sim_stop(sim);

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
        g_autofree char *huge_bulk = g_strdup_printf(
            "bulk %d %d %d", huge / CONTAINERS_PER_POD, CONTAINERS_PER_POD, ANNOTATION_BYTES);
        Sample sample;

        sim = perf_sim_start(argv[1], huge_bulk);
        if (!run_child(argv[0], perf_sim_get_endpoint(sim), TRUE, relists, &sample))
            return 2;
        perf_sim_stop(sim);
        printf("streaming at %d containers: CPU %.2f ms per relist, peak RSS +%.1f MiB\n", huge,
               sample.cpu_ms, sample.peak_mib);
    }
    return ok ? 0 : 1;
}
