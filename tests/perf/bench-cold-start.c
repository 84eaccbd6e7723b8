/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-cold-start: the first global relist of a Generic PLEG on a node whose runtime answers
 * every ContainerStatus late.
 *
 *   bench-cold-start CRI-SIM [--pods=500] [--containers=3] [--delay-ms=150] [--bound=64]
 *                    [--rounds=3] [--json=FILE]
 *
 * cri-sim runs out of process with --pods pods of --containers exited containers each, and
 * answers every ContainerStatus after --delay-ms.  Each round builds a new CRI client and PLEG
 * (max_status_calls_in_flight = --bound) and times its first relist, which must inspect every
 * pod.  Beside it stands the floor that the bound allows: ContainerStatus calls x delay / bound.
 * Goal: the median first relist is at most 1.25x that floor; every container is reported once,
 * as a ContainerDied with its exit code; the PLEG is healthy afterwards (kubelet's rule: the
 * last relist started within the threshold).  Exits 1 when a goal is missed.
 */
#include <gio/gio.h>
#include <json-glib/json-glib.h>
#include <stdio.h>
#include <stdlib.h>

#include <pleg/pleg.h>

#include "perf-common.h"

#define GOAL 1.25

/* Exit code given to the container I of pod P: spread, and never 0. */
static int
exit_code_of(int pod, int i)
{
    return 1 + (pod * 7 + i) % 250;
}

/* One first relist: returns its wall time in ms, or a negative value after printing why the
 * events were wrong. */
static double
first_relist(const char *endpoint, int pods, int containers, guint bound, gboolean *ret_healthy)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegCriClient) client = pleg_cri_client_new(endpoint, 60 * G_USEC_PER_SEC, &error);
    g_autoptr(PlegRuntime) runtime = NULL;
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    g_autoptr(GHashTable) died = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    PlegGenericConfig config;
    PlegEventChannel *channel;
    PlegPodLifecycleEvent *event;
    PlegGeneric *pleg;
    gint64 start;
    double ms;
    guint bad = 0;

    if (!client) {
        g_printerr("bench-cold-start: %s\n", error->message);
        exit(2);
    }
    runtime = pleg_cri_client_as_runtime(client);
    pleg_generic_config_init(&config);
    config.max_status_calls_in_flight = bound;
    pleg = pleg_generic_new(runtime, &config, registry);
    channel = pleg_generic_subscribe(pleg, (guint)(pods * (containers + 1) * 2));

    start = g_get_monotonic_time();
    if (!pleg_generic_relist(pleg, &error)) {
        g_printerr("bench-cold-start: first relist: %s\n", error->message);
        exit(2);
    }
    ms = (double)(g_get_monotonic_time() - start) / 1000.0;
    *ret_healthy = pleg_generic_healthy(pleg, NULL);

    while ((event = pleg_event_channel_pop(channel, 0))) {
        if (event->type == PLEG_CONTAINER_DIED) {
            int pod, i;

            if (sscanf(event->container_id, "c-%d-%d", &pod, &i) != 2 || !event->has_exit ||
                event->exit_code != exit_code_of(pod, i) ||
                !g_hash_table_add(died, g_strdup(event->container_id)))
                bad++;
        }
        pleg_pod_lifecycle_event_unref(event);
    }
    pleg_generic_free(pleg);
    if (bad > 0 || g_hash_table_size(died) != (guint)(pods * containers)) {
        printf("GOAL MISSED: %u ContainerDied with the right exit code, %u wrong or repeated, "
               "%d containers\n",
               g_hash_table_size(died), bad, pods * containers);
        return -1;
    }
    return ms;
}

int
main(int argc, char **argv)
{
    int pods = 500, containers = 3, delay_ms = 150, bound = 64, rounds = 3;
    g_autofree char *json_path = NULL;
    const GOptionEntry entries[] = {
        {"pods", 0, 0, G_OPTION_ARG_INT, &pods, "Pods", "N"},
        {"containers", 0, 0, G_OPTION_ARG_INT, &containers, "Exited containers a pod", "N"},
        {"delay-ms", 0, 0, G_OPTION_ARG_INT, &delay_ms, "ContainerStatus answered after", "MS"},
        {"bound", 0, 0, G_OPTION_ARG_INT, &bound, "max_status_calls_in_flight", "N"},
        {"rounds", 0, 0, G_OPTION_ARG_INT, &rounds, "First relists measured", "N"},
        {"json", 0, 0, G_OPTION_ARG_FILENAME, &json_path, "Write the figures here", "FILE"},
        {NULL},
    };
    g_autoptr(GOptionContext) context = g_option_context_new("CRI-SIM");
    g_autoptr(GError) error = NULL;
    g_autoptr(GString) commands = g_string_new("auto-events off\n");
    g_autoptr(JsonBuilder) builder = json_builder_new();
    g_autofree double *samples = NULL;
    g_autofree char *delay = NULL;
    double floor_ms, median, min, max;
    gboolean ok = TRUE, healthy = TRUE;
    PerfSim *sim;

    g_option_context_add_main_entries(context, entries, NULL);
    if (!g_option_context_parse(context, &argc, &argv, &error)) {
        g_printerr("bench-cold-start: %s\n", error->message);
        return 2;
    }
    if (argc != 2 || pods < 1 || containers < 1 || delay_ms < 1 || bound < 1 || rounds < 1) {
        g_printerr("usage: bench-cold-start CRI-SIM [--pods=N] [--containers=N] [--delay-ms=MS] "
                   "[--bound=N] [--rounds=N] [--json=FILE]\n");
        return 2;
    }

    for (int p = 0; p < pods; p++) {
        g_string_append_printf(commands, "pod p-%d\n", p);
        for (int i = 0; i < containers; i++)
            g_string_append_printf(commands, "container p-%d c-%d-%d\nstart c-%d-%d\n"
                                             "exit c-%d-%d %d\n",
                                   p, p, i, p, i, p, i, exit_code_of(p, i));
    }
    sim = perf_sim_start(argv[1], commands->str);
    delay = g_strdup_printf("delay ContainerStatus %d", delay_ms);
    perf_sim_run(sim, delay);

    samples = g_new0(double, rounds);
    for (int r = 0; r < rounds; r++) {
        gboolean round_healthy = FALSE;

        samples[r] = first_relist(perf_sim_get_endpoint(sim), pods, containers, (guint)bound,
                                  &round_healthy);
        if (samples[r] < 0)
            ok = FALSE;
        healthy = healthy && round_healthy;
    }
    perf_sim_stop(sim);
    if (!ok)
        return 1;

    floor_ms = (double)pods * containers * delay_ms / bound;
    perf_stats(samples, rounds, &median, &min, &max);
    printf("cold start: %d pods x %d exited containers, ContainerStatus after %d ms, bound %d "
           "(%d rounds; median [min-max]):\n",
           pods, containers, delay_ms, bound, rounds);
    printf("  first relist %9.1f ms [%.1f-%.1f]\n", median, min, max);
    printf("  floor        %9.1f ms (%d ContainerStatus x %d ms / %d)\n", floor_ms,
           pods * containers, delay_ms, bound);
    printf("  ratio        %.3fx (goal <= %.2fx)\n", median / floor_ms, GOAL);
    if (median > GOAL * floor_ms) {
        printf("GOAL MISSED: the first relist is over %.2fx the floor\n", GOAL);
        ok = FALSE;
    }
    if (!healthy) {
        printf("GOAL MISSED: the PLEG is not healthy after its first relist\n");
        ok = FALSE;
    }

    if (json_path) {
        json_builder_begin_object(builder);
        json_builder_set_member_name(builder, "benchmark");
        json_builder_add_string_value(builder, "cold-start");
        json_builder_set_member_name(builder, "pods");
        json_builder_add_int_value(builder, pods);
        json_builder_set_member_name(builder, "containers_per_pod");
        json_builder_add_int_value(builder, containers);
        json_builder_set_member_name(builder, "delay_ms");
        json_builder_add_int_value(builder, delay_ms);
        json_builder_set_member_name(builder, "bound");
        json_builder_add_int_value(builder, bound);
        perf_json_add_stat(builder, "first_relist_ms", median, min, max);
        json_builder_set_member_name(builder, "floor_ms");
        json_builder_add_double_value(builder, floor_ms);
        json_builder_set_member_name(builder, "ratio");
        json_builder_add_double_value(builder, median / floor_ms);
        json_builder_set_member_name(builder, "goal_met");
        json_builder_add_boolean_value(builder, ok);
        json_builder_end_object(builder);
        if (!perf_json_write(builder, json_path, &error)) {
            g_printerr("bench-cold-start: %s\n", error->message);
            return 2;
        }
    }
    return ok ? 0 : 1;
}
