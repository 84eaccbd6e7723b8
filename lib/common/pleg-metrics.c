/* SPDX-License-Identifier: Apache-2.0 */
/* The metrics registry: registration and its checks, series, updates, reads, reset and
 * collectors.  The text exposition is pleg-metrics-exposition.c. */
#include "pleg/pleg-metrics.h"
#include "pleg/pleg-util.h"

#include <math.h>
#include <string.h>

#include "pleg-metrics-private.h"

static const double default_buckets[11] = {
    .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10,
};

const double *
pleg_metrics_default_buckets(gsize *ret_n_buckets)
{
    g_return_val_if_fail(ret_n_buckets != NULL, NULL);

    *ret_n_buckets = G_N_ELEMENTS(default_buckets);
    return default_buckets;
}

static const char *const histogram_suffixes[] = {"_bucket", "_sum", "_count"};

static void
series_free(PlegMetricSeries *series)
{
    if (!series)
        return;
    g_strfreev(series->label_values);
    g_free(series->bucket_counts);
    g_mutex_clear(&series->lock);
    g_free(series);
}

static guint64
double_to_bits(double value)
{
    guint64 bits;

    if (isnan(value))
        value = NAN;
    memcpy(&bits, &value, sizeof(bits));
    return bits;
}

double
pleg_metric_bits_to_double(guint64 bits)
{
    double value;

    if (bits == SERIES_ABSENT)
        return 0;
    memcpy(&value, &bits, sizeof(value));
    return value;
}

static void
metric_free(PlegMetric *metric)
{
    if (!metric)
        return;
    g_clear_pointer(&metric->series, g_hash_table_unref);
    g_free(metric->name);
    g_free(metric->help);
    g_strfreev(metric->label_names);
    g_free(metric->buckets);
    g_free(metric);
}

static void
collector_unref(PlegMetricsCollector *collector)
{
    if (!g_atomic_ref_count_dec(&collector->ref_count))
        return;
    if (collector->destroy)
        collector->destroy(collector->user_data);
    g_free(collector);
}

PlegMetricsRegistry *
pleg_metrics_registry_new(void)
{
    PlegMetricsRegistry *registry = g_new0(PlegMetricsRegistry, 1);

    g_atomic_ref_count_init(&registry->ref_count);
    g_mutex_init(&registry->lock);
    registry->metrics =
        g_hash_table_new_full(g_str_hash, g_str_equal, NULL, (GDestroyNotify)metric_free);
    registry->collectors = g_ptr_array_new_with_free_func((GDestroyNotify)collector_unref);
    return registry;
}

PlegMetricsRegistry *
pleg_metrics_registry_ref(PlegMetricsRegistry *registry)
{
    g_return_val_if_fail(registry != NULL, NULL);
    g_atomic_ref_count_inc(&registry->ref_count);
    return registry;
}

void
pleg_metrics_registry_unref(PlegMetricsRegistry *registry)
{
    if (!registry)
        return;
    if (!g_atomic_ref_count_dec(&registry->ref_count))
        return;
    /* Before the metrics: a destroy notify may still read them. */
    g_ptr_array_unref(registry->collectors);
    g_hash_table_unref(registry->metrics);
    g_mutex_clear(&registry->lock);
    g_free(registry);
}

guint
pleg_metrics_registry_add_collector(PlegMetricsRegistry *registry, PlegMetricsCollectFunc func,
                                    gpointer user_data, GDestroyNotify destroy)
{
    PlegMetricsCollector *collector;
    guint id;

    g_return_val_if_fail(registry != NULL, 0);
    g_return_val_if_fail(func != NULL, 0);

    collector = g_new0(PlegMetricsCollector, 1);
    g_atomic_ref_count_init(&collector->ref_count);
    collector->func = func;
    collector->user_data = user_data;
    collector->destroy = destroy;
    g_mutex_lock(&registry->lock);
    /* Ids are not reused, so that removing twice cannot remove another collector. */
    id = collector->id = ++registry->last_collector_id;
    g_ptr_array_add(registry->collectors, collector);
    g_mutex_unlock(&registry->lock);
    return id;
}

void
pleg_metrics_registry_remove_collector(PlegMetricsRegistry *registry, guint id)
{
    PlegMetricsCollector *collector = NULL;

    g_return_if_fail(registry != NULL);

    g_mutex_lock(&registry->lock);
    for (guint i = 0; i < registry->collectors->len; i++) {
        PlegMetricsCollector *c = registry->collectors->pdata[i];

        if (c->id == id) {
            collector = g_ptr_array_steal_index(registry->collectors, i);
            break;
        }
    }
    g_mutex_unlock(&registry->lock);
    if (!collector) {
        g_critical("metrics: no collector with id %u to remove", id);
        return;
    }
    /* Outside the lock: the destroy notify may use the registry. */
    collector_unref(collector);
}

void
pleg_metrics_registry_collect(PlegMetricsRegistry *registry)
{
    g_autoptr(GPtrArray) running = NULL;

    g_mutex_lock(&registry->lock);
    if (registry->collectors->len > 0) {
        running = g_ptr_array_new_full(registry->collectors->len,
                                       (GDestroyNotify)collector_unref);
        for (guint i = 0; i < registry->collectors->len; i++) {
            PlegMetricsCollector *collector = registry->collectors->pdata[i];

            g_atomic_ref_count_inc(&collector->ref_count);
            g_ptr_array_add(running, collector);
        }
    }
    g_mutex_unlock(&registry->lock);

    for (guint i = 0; running && i < running->len; i++) {
        PlegMetricsCollector *collector = running->pdata[i];

        collector->func(registry, collector->user_data);
    }
}

static gboolean
valid_metric_name(const char *name)
{
    if (!name || !name[0])
        return FALSE;
    for (const char *p = name; *p; p++) {
        gboolean ok =
            g_ascii_isalpha(*p) || *p == '_' || *p == ':' || (p != name && g_ascii_isdigit(*p));
        if (!ok)
            return FALSE;
    }
    return TRUE;
}

/* NULL when @name may label a metric of @type, else why not.  (transfer none) */
static const char *
label_name_problem(const char *name, PlegMetricType type)
{
    if (!name || !name[0])
        return "is empty";
    for (const char *p = name; *p; p++) {
        gboolean ok = g_ascii_isalpha(*p) || *p == '_' || (p != name && g_ascii_isdigit(*p));
        if (!ok)
            return "is not [a-zA-Z_][a-zA-Z0-9_]*";
    }
    /* "__" is reserved for Prometheus' internal labels; "le" carries histogram bucket bounds. */
    if (g_str_has_prefix(name, "__"))
        return "starts with \"__\", which Prometheus reserves";
    if (type == PLEG_METRIC_HISTOGRAM && g_str_equal(name, "le"))
        return "is \"le\", which a histogram uses for its buckets";
    return NULL;
}

/* NULL when the label names are valid, else why not.  (transfer full) */
static char *
label_names_problem(PlegMetricType type, const char *const *label_names)
{
    for (guint i = 0; label_names && label_names[i]; i++) {
        const char *problem = label_name_problem(label_names[i], type);
        g_autofree char *shown = NULL;

        if (!problem) {
            for (guint j = 0; j < i && !problem; j++)
                if (g_str_equal(label_names[i], label_names[j]))
                    problem = "is given twice";
        }
        if (problem) {
            shown = pleg_log_text(label_names[i], -1, 0);
            return g_strdup_printf("label name \"%s\" %s", shown, problem);
        }
    }
    return NULL;
}

/* Validates @buckets and copies them without a trailing +Inf, which is implicit. */
static gboolean
copy_buckets(const double *buckets, gsize n_buckets, double **ret_buckets, gsize *ret_n_buckets)
{
    if (!buckets) {
        buckets = default_buckets;
        n_buckets = G_N_ELEMENTS(default_buckets);
    }
    if (n_buckets > 0 && isinf(buckets[n_buckets - 1]) && buckets[n_buckets - 1] > 0)
        n_buckets--;
    for (gsize i = 0; i < n_buckets; i++) {
        if (!isfinite(buckets[i]) || (i > 0 && !(buckets[i] > buckets[i - 1])))
            return FALSE;
    }
    *ret_buckets = n_buckets > 0 ? g_memdup2(buckets, n_buckets * sizeof(double)) : NULL;
    *ret_n_buckets = n_buckets;
    return TRUE;
}

static gboolean
same_label_names(char **a, const char *const *b)
{
    guint n_b = b ? g_strv_length((char **)b) : 0;

    if (g_strv_length(a) != n_b)
        return FALSE;
    for (guint i = 0; i < n_b; i++)
        if (!g_str_equal(a[i], b[i]))
            return FALSE;
    return TRUE;
}

/* "(a, b)" or "no labels".  (transfer full) */
static char *
describe_labels(const char *const *label_names)
{
    g_autofree char *joined = NULL;

    if (!label_names || !label_names[0])
        return g_strdup("no labels");
    joined = g_strjoinv(", ", (char **)label_names);
    return g_strdup_printf("labels (%s)", joined);
}

/* A histogram's exposition also uses name_bucket, name_sum and name_count: keep them unique.
 * NULL when @name is free, else why not.  (transfer full) */
static char *
name_collision(PlegMetricsRegistry *registry, const char *name, PlegMetricType type)
{
    for (gsize i = 0; i < G_N_ELEMENTS(histogram_suffixes); i++) {
        const char *suffix = histogram_suffixes[i];

        if (type == PLEG_METRIC_HISTOGRAM) {
            g_autofree char *derived = g_strconcat(name, suffix, NULL);

            if (g_hash_table_contains(registry->metrics, derived))
                return g_strdup_printf("the histogram's series %s is already a metric", derived);
        }
        if (g_str_has_suffix(name, suffix)) {
            g_autofree char *base = g_strndup(name, strlen(name) - strlen(suffix));
            PlegMetric *other = g_hash_table_lookup(registry->metrics, base);

            if (other && other->type == PLEG_METRIC_HISTOGRAM)
                return g_strdup_printf("it is a series of histogram %s", base);
        }
    }
    return NULL;
}

/* A refused registration is a bug of the caller (a plugin's name, or two plugins that disagree
 * on one metric): say which metric and why, once per call. */
static PlegMetric *
refuse(const char *name, const char *reason)
{
    g_autofree char *shown = pleg_log_text(name, -1, 0);

    g_warning("metrics: refusing to register %s: %s", shown, reason);
    return NULL;
}

PlegMetric *
pleg_metrics_register(PlegMetricsRegistry *registry, PlegMetricType type, const char *name,
                      const char *help, const char *const *label_names, const double *buckets,
                      gsize n_buckets)
{
    g_autofree double *bucket_copy = NULL;
    g_autofree char *problem = NULL;
    gsize n_bucket_copy = 0;
    PlegMetric *metric;

    g_return_val_if_fail(registry != NULL, NULL);
    g_return_val_if_fail(name != NULL, NULL);
    g_return_val_if_fail(type == PLEG_METRIC_COUNTER || type == PLEG_METRIC_GAUGE ||
                             type == PLEG_METRIC_HISTOGRAM,
                         NULL);

    if (!valid_metric_name(name))
        return refuse(name, "invalid metric name (want [a-zA-Z_:][a-zA-Z0-9_:]*)");
    problem = label_names_problem(type, label_names);
    if (problem)
        return refuse(name, problem);
    if (type == PLEG_METRIC_HISTOGRAM &&
        !copy_buckets(buckets, n_buckets, &bucket_copy, &n_bucket_copy))
        return refuse(name, "histogram buckets must be finite and strictly increasing");

    g_mutex_lock(&registry->lock);

    metric = g_hash_table_lookup(registry->metrics, name);
    if (metric) {
        if (metric->type != type || !same_label_names(metric->label_names, label_names)) {
            g_autofree char *had = describe_labels((const char *const *)metric->label_names);
            g_autofree char *wants = describe_labels(label_names);

            problem = g_strdup_printf("already registered as a %s with %s, not a %s with %s",
                                      pleg_metric_type_name(metric->type), had,
                                      pleg_metric_type_name(type), wants);
            metric = NULL;
        }
        g_mutex_unlock(&registry->lock);
        return problem ? refuse(name, problem) : metric;
    }
    problem = name_collision(registry, name, type);
    if (problem) {
        g_mutex_unlock(&registry->lock);
        return refuse(name, problem);
    }

    metric = g_new0(PlegMetric, 1);
    metric->lock = &registry->lock;
    metric->type = type;
    metric->name = g_strdup(name);
    metric->help = g_strdup(help ? help : "");
    metric->label_names = g_strdupv((char **)label_names);
    if (!metric->label_names)
        metric->label_names = g_new0(char *, 1);
    metric->n_labels = g_strv_length(metric->label_names);
    metric->buckets = g_steal_pointer(&bucket_copy);
    metric->n_buckets = n_bucket_copy;
    metric->series =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)series_free);
    g_hash_table_insert(registry->metrics, metric->name, metric);

    g_mutex_unlock(&registry->lock);
    return metric;
}

PlegMetric *
pleg_metrics_lookup(PlegMetricsRegistry *registry, const char *name)
{
    PlegMetric *metric;

    g_return_val_if_fail(registry != NULL, NULL);
    g_return_val_if_fail(name != NULL, NULL);

    g_mutex_lock(&registry->lock);
    metric = g_hash_table_lookup(registry->metrics, name);
    g_mutex_unlock(&registry->lock);
    return metric;
}

/*
 * Only the first n_labels values are read, so callers may pass arrays without a terminator; a
 * NULL among them means too few values.
 */
static gboolean
check_label_values(PlegMetric *metric, const char *const *label_values)
{
    if (metric->n_labels == 0) {
        if (label_values && label_values[0]) {
            g_critical("metrics: %s has no labels but label values were given", metric->name);
            return FALSE;
        }
        return TRUE;
    }
    for (guint i = 0; i < metric->n_labels; i++) {
        if (!label_values || !label_values[i]) {
            g_critical("metrics: %s expects %u label values, got %u", metric->name,
                       metric->n_labels, i);
            return FALSE;
        }
        if (!g_utf8_validate(label_values[i], -1, NULL)) {
            g_critical("metrics: %s: label %s has a value that is not UTF-8", metric->name,
                       metric->label_names[i]);
            return FALSE;
        }
    }
    return TRUE;
}

/* Length-prefixed values: unambiguous whatever the values contain. */
static char *
series_key(PlegMetric *metric, const char *const *label_values)
{
    GString *key = g_string_new(NULL);

    for (guint i = 0; i < metric->n_labels; i++)
        g_string_append_printf(key, "%zu:%s", strlen(label_values[i]), label_values[i]);
    return g_string_free(key, FALSE);
}

/* Called with the lock held. */
static PlegMetricSeries *
find_series(PlegMetric *metric, const char *const *label_values, gboolean create)
{
    g_autofree char *key = series_key(metric, label_values);
    PlegMetricSeries *series;

    series = g_hash_table_lookup(metric->series, key);
    if (series || !create)
        return series;

    series = g_new0(PlegMetricSeries, 1);
    series->metric = metric;
    series->label_values = g_new0(char *, metric->n_labels + 1);
    for (guint i = 0; i < metric->n_labels; i++)
        series->label_values[i] = g_strdup(label_values[i]);
    series->bits = SERIES_ABSENT;
    g_mutex_init(&series->lock);
    if (metric->type == PLEG_METRIC_HISTOGRAM)
        series->bucket_counts = g_new0(guint64, metric->n_buckets + 1);
    g_hash_table_insert(metric->series, g_steal_pointer(&key), series);
    return series;
}

/* The series of @label_values, created hidden when new; NULL (after a critical) for wrong
 * label values. */
static PlegMetricSeries *
resolve_series(PlegMetric *metric, const char *const *label_values)
{
    PlegMetricSeries *series;

    if (!check_label_values(metric, label_values))
        return NULL;
    g_mutex_lock(metric->lock);
    series = find_series(metric, label_values, TRUE);
    g_mutex_unlock(metric->lock);
    return series;
}

const char *
pleg_metric_type_name(PlegMetricType type)
{
    switch (type) {
    case PLEG_METRIC_COUNTER:
        return "counter";
    case PLEG_METRIC_GAUGE:
        return "gauge";
    case PLEG_METRIC_HISTOGRAM:
        return "histogram";
    }
    return "untyped";
}

/* The type rules of each update, with a critical when broken. */
static gboolean
can_add(PlegMetric *metric, double value)
{
    if (metric->type == PLEG_METRIC_HISTOGRAM) {
        g_critical("metrics: %s is a histogram, cannot add to it", metric->name);
        return FALSE;
    }
    if (metric->type == PLEG_METRIC_COUNTER && !(value >= 0)) {
        g_critical("metrics: %s is a counter, cannot add %g", metric->name, value);
        return FALSE;
    }
    return TRUE;
}

/* Whether @metric is of @type, the only type that allows what @what says. */
static gboolean
is_type(PlegMetric *metric, PlegMetricType type, const char *what)
{
    if (metric->type == type)
        return TRUE;
    g_critical("metrics: %s is a %s, only %s", metric->name,
               pleg_metric_type_name(metric->type), what);
    return FALSE;
}

static gboolean
can_set(PlegMetric *metric)
{
    return is_type(metric, PLEG_METRIC_GAUGE, "gauges can be set");
}

static gboolean
can_observe(PlegMetric *metric)
{
    return is_type(metric, PLEG_METRIC_HISTOGRAM, "histograms take observations");
}

static void
series_add(PlegMetricSeries *series, double value)
{
    guint64 old = __atomic_load_n(&series->bits, __ATOMIC_RELAXED);
    guint64 new;

    do
        new = double_to_bits(pleg_metric_bits_to_double(old) + value);
    while (!__atomic_compare_exchange_n(&series->bits, &old, new, TRUE, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED));
}

static void
series_set(PlegMetricSeries *series, double value)
{
    __atomic_store_n(&series->bits, double_to_bits(value), __ATOMIC_RELAXED);
}

static void
series_observe(PlegMetricSeries *series, double value)
{
    PlegMetric *metric = series->metric;
    gsize i;

    /* Upper bounds are inclusive; NaN lands in no finite bucket, only in +Inf. */
    for (i = 0; i < metric->n_buckets; i++)
        if (value <= metric->buckets[i])
            break;

    g_mutex_lock(&series->lock);
    series->present = TRUE;
    series->bucket_counts[i]++;
    series->count++;
    series->sum += value;
    g_mutex_unlock(&series->lock);
}

void
pleg_metric_add(PlegMetric *metric, const char *const *label_values, double value)
{
    PlegMetricSeries *series;

    if (!metric || !can_add(metric, value))
        return;
    series = resolve_series(metric, label_values);
    if (series)
        series_add(series, value);
}

void
pleg_metric_inc(PlegMetric *metric, const char *const *label_values)
{
    pleg_metric_add(metric, label_values, 1);
}

void
pleg_metric_set(PlegMetric *metric, const char *const *label_values, double value)
{
    PlegMetricSeries *series;

    if (!metric || !can_set(metric))
        return;
    series = resolve_series(metric, label_values);
    if (series)
        series_set(series, value);
}

void
pleg_metric_observe(PlegMetric *metric, const char *const *label_values, double value)
{
    PlegMetricSeries *series;

    if (!metric || !can_observe(metric))
        return;
    series = resolve_series(metric, label_values);
    if (series)
        series_observe(series, value);
}

PlegMetricSeries *
pleg_metric_get_series(PlegMetric *metric, const char *const *label_values)
{
    if (!metric)
        return NULL;
    return resolve_series(metric, label_values);
}

void
pleg_metric_series_add(PlegMetricSeries *series, double value)
{
    if (series && can_add(series->metric, value))
        series_add(series, value);
}

void
pleg_metric_series_inc(PlegMetricSeries *series)
{
    pleg_metric_series_add(series, 1);
}

void
pleg_metric_series_set(PlegMetricSeries *series, double value)
{
    if (series && can_set(series->metric))
        series_set(series, value);
}

void
pleg_metric_series_observe(PlegMetricSeries *series, double value)
{
    if (series && can_observe(series->metric))
        series_observe(series, value);
}

/* What pleg_metric_get() and pleg_metric_get_count() report of one series: a histogram's sum
 * and count, a counter's or gauge's value (and that value as a count, when not negative).
 * Leaves both alone when the label values are wrong or the series does not exist yet. */
static void
read_series(PlegMetric *metric, const char *const *label_values, double *value, guint64 *count)
{
    PlegMetricSeries *series;

    if (!metric || !check_label_values(metric, label_values))
        return;

    g_mutex_lock(metric->lock);
    series = find_series(metric, label_values, FALSE);
    if (series && metric->type == PLEG_METRIC_HISTOGRAM) {
        g_mutex_lock(&series->lock);
        *value = series->sum;
        *count = series->count;
        g_mutex_unlock(&series->lock);
    } else if (series) {
        *value =
            pleg_metric_bits_to_double(__atomic_load_n(&series->bits, __ATOMIC_RELAXED));
        *count = *value >= 0 ? (guint64)*value : 0;
    }
    g_mutex_unlock(metric->lock);
}

double
pleg_metric_get(PlegMetric *metric, const char *const *label_values)
{
    double value = 0;
    guint64 count = 0;

    read_series(metric, label_values, &value, &count);
    return value;
}

guint64
pleg_metric_get_count(PlegMetric *metric, const char *const *label_values)
{
    double value = 0;
    guint64 count = 0;

    read_series(metric, label_values, &value, &count);
    return count;
}

/* Hides @series again, at zero.  Called with the registry's lock held. */
static void
series_reset(PlegMetricSeries *series)
{
    if (series->metric->type != PLEG_METRIC_HISTOGRAM) {
        __atomic_store_n(&series->bits, SERIES_ABSENT, __ATOMIC_RELAXED);
        return;
    }
    g_mutex_lock(&series->lock);
    series->present = FALSE;
    series->sum = 0;
    series->count = 0;
    memset(series->bucket_counts, 0, (series->metric->n_buckets + 1) * sizeof(guint64));
    g_mutex_unlock(&series->lock);
}

void
pleg_metric_reset(PlegMetric *metric)
{
    GHashTableIter iter;
    gpointer series;

    if (!metric)
        return;
    g_mutex_lock(metric->lock);
    g_hash_table_iter_init(&iter, metric->series);
    while (g_hash_table_iter_next(&iter, NULL, &series))
        series_reset(series);
    g_mutex_unlock(metric->lock);
}
