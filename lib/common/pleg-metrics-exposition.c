/* SPDX-License-Identifier: Apache-2.0 */
/* The Prometheus text exposition (format 0.0.4) of a metrics registry. */
#include "pleg/pleg-metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pleg-metrics-private.h"

static gboolean
series_present(PlegMetricSeries *series)
{
    gboolean present;

    if (series->metric->type != PLEG_METRIC_HISTOGRAM)
        return __atomic_load_n(&series->bits, __ATOMIC_RELAXED) != SERIES_ABSENT;
    g_mutex_lock(&series->lock);
    present = series->present;
    g_mutex_unlock(&series->lock);
    return present;
}

/* Integers print without exponent; anything else as the shortest text that reads back exactly. */
static void
append_value(GString *out, double value)
{
    char buf[G_ASCII_DTOSTR_BUF_SIZE];

    if (isnan(value)) {
        g_string_append(out, "NaN");
        return;
    }
    if (isinf(value)) {
        g_string_append(out, value > 0 ? "+Inf" : "-Inf");
        return;
    }
    if (fabs(value) < 1e15 && value == (double)(gint64)value) {
        g_string_append_printf(out, "%" G_GINT64_FORMAT, (gint64)value);
        return;
    }
    for (int precision = 1; precision <= 17; precision++) {
        char format[8];

        snprintf(format, sizeof(format), "%%.%dg", precision);
        g_ascii_formatd(buf, sizeof(buf), format, value);
        if (g_ascii_strtod(buf, NULL) == value)
            break;
    }
    g_string_append(out, buf);
}

static void
append_escaped(GString *out, const char *text, gboolean quote)
{
    for (const char *p = text; *p; p++) {
        switch (*p) {
        case '\\':
            g_string_append(out, "\\\\");
            break;
        case '\n':
            g_string_append(out, "\\n");
            break;
        case '"':
            g_string_append(out, quote ? "\\\"" : "\"");
            break;
        default:
            g_string_append_c(out, *p);
        }
    }
}

/* One sample line; @le, when given, adds the histogram bucket bound as the last label. */
static void
append_sample(GString *out, PlegMetric *metric, const char *suffix, PlegMetricSeries *series,
              const double *le, double value)
{
    gboolean any = FALSE;

    g_string_append(out, metric->name);
    g_string_append(out, suffix);
    for (guint i = 0; series && i < metric->n_labels; i++) {
        g_string_append_c(out, any ? ',' : '{');
        g_string_append_printf(out, "%s=\"", metric->label_names[i]);
        append_escaped(out, series->label_values[i], TRUE);
        g_string_append_c(out, '"');
        any = TRUE;
    }
    if (le) {
        g_string_append(out, any ? ",le=\"" : "{le=\"");
        append_value(out, *le);
        g_string_append_c(out, '"');
        any = TRUE;
    }
    if (any)
        g_string_append_c(out, '}');
    g_string_append_c(out, ' ');
    append_value(out, value);
    g_string_append_c(out, '\n');
}

/* @series NULL: the zero sample of an unlabelled metric never updated. */
static void
append_series(GString *out, PlegMetric *metric, PlegMetricSeries *series)
{
    guint64 cumulative = 0;
    double inf = INFINITY;

    if (metric->type != PLEG_METRIC_HISTOGRAM) {
        double value =
            series ? pleg_metric_bits_to_double(__atomic_load_n(&series->bits, __ATOMIC_RELAXED))
                   : 0;

        append_sample(out, metric, "", series, NULL, value);
        return;
    }
    if (series)
        g_mutex_lock(&series->lock);
    for (gsize i = 0; i <= metric->n_buckets; i++) {
        cumulative += series ? series->bucket_counts[i] : 0;
        append_sample(out, metric, "_bucket", series,
                      i < metric->n_buckets ? &metric->buckets[i] : &inf, (double)cumulative);
    }
    append_sample(out, metric, "_sum", series, NULL, series ? series->sum : 0);
    append_sample(out, metric, "_count", series, NULL, series ? (double)series->count : 0);
    if (series)
        g_mutex_unlock(&series->lock);
}

static int
compare_series(gconstpointer a, gconstpointer b, gpointer user_data)
{
    const PlegMetricSeries *sa = *(PlegMetricSeries *const *)a;
    const PlegMetricSeries *sb = *(PlegMetricSeries *const *)b;
    guint n_labels = GPOINTER_TO_UINT(user_data);

    for (guint i = 0; i < n_labels; i++) {
        int r = strcmp(sa->label_values[i], sb->label_values[i]);

        if (r != 0)
            return r;
    }
    return 0;
}

static int
compare_names(gconstpointer a, gconstpointer b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void
append_metric(GString *out, PlegMetric *metric)
{
    g_autoptr(GPtrArray) series = g_ptr_array_new();
    GHashTableIter iter;
    gpointer value;

    g_string_append_printf(out, "# HELP %s ", metric->name);
    append_escaped(out, metric->help, FALSE);
    g_string_append_printf(out, "\n# TYPE %s %s\n", metric->name,
                           pleg_metric_type_name(metric->type));

    /* A hidden series stays hidden: only a reset, which waits for this lock, hides one. */
    g_hash_table_iter_init(&iter, metric->series);
    while (g_hash_table_iter_next(&iter, NULL, &value))
        if (series_present(value))
            g_ptr_array_add(series, value);

    if (series->len == 0) {
        if (metric->n_labels == 0)
            append_series(out, metric, NULL);
        return;
    }
    g_ptr_array_sort_with_data(series, compare_series, GUINT_TO_POINTER(metric->n_labels));
    for (guint i = 0; i < series->len; i++)
        append_series(out, metric, series->pdata[i]);
}

char *
pleg_metrics_registry_expose(PlegMetricsRegistry *registry)
{
    g_autofree gpointer *names = NULL;
    GString *out = g_string_new(NULL);
    guint n_names;

    g_return_val_if_fail(registry != NULL, NULL);

    pleg_metrics_registry_collect(registry);
    g_mutex_lock(&registry->lock);
    names = g_hash_table_get_keys_as_array(registry->metrics, &n_names);
    qsort(names, n_names, sizeof(gpointer), compare_names);
    for (guint i = 0; i < n_names; i++)
        append_metric(out, g_hash_table_lookup(registry->metrics, names[i]));
    g_mutex_unlock(&registry->lock);

    return g_string_free(out, FALSE);
}
