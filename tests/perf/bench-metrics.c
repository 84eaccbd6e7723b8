/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-metrics: the instructions of one metric update on the relist path, by label values and
 * through a series handle, counted by callgrind.
 *
 *   bench-metrics [--updates=100000] [--valgrind=PATH] [--json=FILE]
 *
 * The benchmark runs itself under `valgrind --tool=callgrind --separate-threads=yes` once per
 * case, collecting only inside that case's function: a labelled counter increment
 * (kubelet_pleg_events_total{relist_source}) and an unlabelled histogram observation
 * (kubelet_pleg_relist_duration_seconds), each by label values (pleg_metric_inc(),
 * pleg_metric_observe()) and through the series resolved once (pleg_metric_series_inc(),
 * pleg_metric_series_observe()).  The count is callgrind's Ir over --updates updates, divided.
 *
 * Goal (issue "Relists at the CRI floor", metrics off the hot path's back): an update through a
 * handle costs at most a quarter of the same update by label values.  Exits 1 when it is missed,
 * 77 (skipped) when valgrind cannot be run.
 */
#include <json-glib/json-glib.h>
#include <stdio.h>

#include <pleg/pleg.h>

#include "perf-common.h"

#define GOAL_RATIO 0.25

/* ---- the child: callgrind counts only inside measured_*() ---- */

typedef struct {
    PlegMetric *counter;
    PlegMetric *hist;
    PlegMetricSeries *counter_series[2];
    PlegMetricSeries *hist_series;
} Metrics;

static const char *const sources[] = {"global", "evented_pleg"};

G_GNUC_NO_INLINE void measured_labelled_inc(Metrics *m, guint n);
G_GNUC_NO_INLINE void measured_series_inc(Metrics *m, guint n);
G_GNUC_NO_INLINE void measured_labelled_observe(Metrics *m, guint n);
G_GNUC_NO_INLINE void measured_series_observe(Metrics *m, guint n);

G_GNUC_NO_INLINE void
measured_labelled_inc(Metrics *m, guint n)
{
    for (guint i = 0; i < n; i++)
        pleg_metric_inc(m->counter, (const char *[]){sources[i % 2]});
}

G_GNUC_NO_INLINE void
measured_series_inc(Metrics *m, guint n)
{
    for (guint i = 0; i < n; i++)
        pleg_metric_series_inc(m->counter_series[i % 2]);
}

G_GNUC_NO_INLINE void
measured_labelled_observe(Metrics *m, guint n)
{
    for (guint i = 0; i < n; i++)
        pleg_metric_observe(m->hist, NULL, (double)(i % 1000) / 1000);
}

G_GNUC_NO_INLINE void
measured_series_observe(Metrics *m, guint n)
{
    for (guint i = 0; i < n; i++)
        pleg_metric_series_observe(m->hist_series, (double)(i % 1000) / 1000);
}

static const struct {
    const char *name;
    void (*run)(Metrics *m, guint n);
} cases[] = {
    {"labelled_inc", measured_labelled_inc},
    {"series_inc", measured_series_inc},
    {"labelled_observe", measured_labelled_observe},
    {"series_observe", measured_series_observe},
};

static int
child(const char *name, guint updates)
{
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    Metrics m = {0};

    m.counter = pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "kubelet_pleg_events_total",
                                      "E.", (const char *const[]){"relist_source", NULL}, NULL, 0);
    m.hist = pleg_metrics_register(registry, PLEG_METRIC_HISTOGRAM,
                                   "kubelet_pleg_relist_duration_seconds", "D.", NULL, NULL, 0);
    for (guint i = 0; i < 2; i++)
        m.counter_series[i] = pleg_metric_get_series(m.counter, (const char *[]){sources[i]});
    m.hist_series = pleg_metric_get_series(m.hist, NULL);

    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        if (!g_str_equal(name, cases[i].name))
            continue;
        cases[i].run(&m, 100); /* every series created, every lazy initialisation done */
        cases[i].run(&m, updates);
        return 0;
    }
    g_printerr("bench-metrics: no case %s\n", name);
    return 2;
}

/* ---- the parent ---- */

int
main(int argc, char **argv)
{
    g_autofree char *json_path = NULL;
    g_autofree char *valgrind = NULL;
    g_autofree char *child_case = NULL;
    int updates = 100000;
    const GOptionEntry entries[] = {
        {"updates", 0, 0, G_OPTION_ARG_INT, &updates, "Updates counted per case", "N"},
        {"valgrind", 0, 0, G_OPTION_ARG_FILENAME, &valgrind, "valgrind to run", "PATH"},
        {"json", 0, 0, G_OPTION_ARG_FILENAME, &json_path, "Write the figures here", "FILE"},
        {"child", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &child_case, NULL, NULL},
        {NULL},
    };
    g_autoptr(GOptionContext) context = g_option_context_new(NULL);
    g_autoptr(JsonBuilder) builder = json_builder_new();
    g_autoptr(GError) error = NULL;
    double per_update[G_N_ELEMENTS(cases)];
    gboolean ok = TRUE;

    g_option_context_add_main_entries(context, entries, NULL);
    if (!g_option_context_parse(context, &argc, &argv, &error)) {
        g_printerr("bench-metrics: %s\n", error->message);
        return 2;
    }
    if (updates < 1 || argc != 1) {
        g_printerr("usage: bench-metrics [--updates=N] [--valgrind=PATH] [--json=FILE]\n");
        return 2;
    }
    if (child_case)
        return child(child_case, (guint)updates);

    if (!valgrind)
        valgrind = g_find_program_in_path("valgrind");
    if (!valgrind) {
        g_printerr("bench-metrics: valgrind not found, skipping\n");
        return 77;
    }
    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autofree char *case_arg = g_strdup_printf("--child=%s", cases[i].name);
        g_autofree char *updates_arg = g_strdup_printf("--updates=%d", updates);
        g_autofree char *toggle = g_strdup_printf("measured_%s*", cases[i].name);
        const char *child_argv[] = {argv[0], case_arg, updates_arg, NULL};
        guint64 ir = perf_callgrind_count(valgrind, child_argv, toggle);

        if (ir == 0)
            return 2;
        /* The warm-up's 100 updates ran inside the function too. */
        per_update[i] = (double)ir / (updates + 100);
    }

    json_builder_begin_object(builder);
    json_builder_set_member_name(builder, "benchmark");
    json_builder_add_string_value(builder, "metrics");
    json_builder_set_member_name(builder, "instructions_per_update");
    json_builder_begin_object(builder);
    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        printf("%-17s %6.0f instructions per update\n", cases[i].name, per_update[i]);
        json_builder_set_member_name(builder, cases[i].name);
        json_builder_add_double_value(builder, per_update[i]);
    }
    json_builder_end_object(builder);
    for (gsize i = 0; i < G_N_ELEMENTS(cases); i += 2) {
        double ratio = per_update[i + 1] / per_update[i];

        printf("%s / %s: %.3f (goal <= %.2f)\n", cases[i + 1].name, cases[i].name, ratio,
               GOAL_RATIO);
        if (ratio > GOAL_RATIO) {
            printf("GOAL MISSED: %s costs %.2fx %s (goal <= %.2f)\n", cases[i + 1].name, ratio,
                   cases[i].name, GOAL_RATIO);
            ok = FALSE;
        }
    }
    json_builder_set_member_name(builder, "goals_met");
    json_builder_add_boolean_value(builder, ok);
    json_builder_end_object(builder);

    if (json_path) {
        g_autoptr(JsonGenerator) generator = json_generator_new();
        g_autoptr(JsonNode) root = json_builder_get_root(builder);

        json_generator_set_root(generator, root);
        json_generator_set_pretty(generator, TRUE);
        if (!json_generator_to_file(generator, json_path, &error)) {
            g_printerr("bench-metrics: %s\n", error->message);
            return 2;
        }
    }
    return ok ? 0 : 1;
}
