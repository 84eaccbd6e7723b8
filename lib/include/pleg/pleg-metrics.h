/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A small metrics registry with Prometheus text exposition (format 0.0.4).
 *
 * Counters, gauges and histograms, each with a fixed list of label names.  Label values must
 * come from small closed sets (relist_source, container_state, reason): never a pod UID,
 * container id, error text or endpoint.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct _PlegMetricsRegistry PlegMetricsRegistry;
typedef struct _PlegMetric PlegMetric;

typedef enum {
    PLEG_METRIC_COUNTER,
    PLEG_METRIC_GAUGE,
    PLEG_METRIC_HISTOGRAM,
} PlegMetricType;

/**
 * pleg_metrics_default_buckets:
 * @ret_n_buckets: (out): the number of buckets, 11
 *
 * Prometheus' default histogram buckets in seconds, the ones kubelet's PLEG histograms use:
 * .005 .01 .025 .05 .1 .25 .5 1 2.5 5 10.  A function rather than an exported array, so that
 * libpleg exports no data symbol.
 *
 * Returns: (transfer none) (array length=ret_n_buckets): the buckets, static and constant.
 *
 * Thread safety: callable from any thread.
 */
const double *pleg_metrics_default_buckets(gsize *ret_n_buckets);

/**
 * pleg_metrics_registry_new:
 *
 * Returns: (transfer full): an empty registry.  Every function in this header is thread-safe.
 */
PlegMetricsRegistry *pleg_metrics_registry_new(void);
PlegMetricsRegistry *pleg_metrics_registry_ref(PlegMetricsRegistry *registry);
void pleg_metrics_registry_unref(PlegMetricsRegistry *registry);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegMetricsRegistry, pleg_metrics_registry_unref)

/**
 * pleg_metrics_register:
 * @registry: the registry.
 * @type: the metric type.
 * @name: metric name, `[a-zA-Z_:][a-zA-Z0-9_:]*`, kubelet's spelling where kubelet has one.
 * @help: one-line help text.
 * @label_names: (nullable) (array zero-terminated=1): label names, or %NULL for none.
 * @buckets: (nullable) (array length=n_buckets): for histograms, strictly increasing upper
 *   bounds in the metric's unit (+Inf is implicit); %NULL selects
 *   pleg_metrics_default_buckets().  Ignored for other types.
 * @n_buckets: number of @buckets.
 *
 * Registering a name again with the same type and label names returns the existing metric, so a
 * plugin that is started twice keeps its series.
 *
 * Returns: (transfer none): the metric, owned by the registry and valid as long as it; %NULL
 *   when @name is invalid or already registered with another type or other labels.
 */
PlegMetric *pleg_metrics_register(PlegMetricsRegistry *registry, PlegMetricType type,
                                  const char *name, const char *help,
                                  const char *const *label_names, const double *buckets,
                                  gsize n_buckets);

/**
 * pleg_metrics_lookup:
 *
 * Returns: (transfer none) (nullable): the metric called @name.
 */
PlegMetric *pleg_metrics_lookup(PlegMetricsRegistry *registry, const char *name);

/*
 * Updating a series.  @label_values lists one value per label name, in order (%NULL when the
 * metric has no labels).  A NULL @metric is ignored, so optional metrics cost nothing.
 */
void pleg_metric_add(PlegMetric *metric, const char *const *label_values, double value);
void pleg_metric_inc(PlegMetric *metric, const char *const *label_values);
void pleg_metric_set(PlegMetric *metric, const char *const *label_values, double value);
void pleg_metric_observe(PlegMetric *metric, const char *const *label_values, double value);

/**
 * pleg_metric_get:
 *
 * Returns: a counter's or gauge's value, or a histogram's sum; 0 for a series never touched.
 */
double pleg_metric_get(PlegMetric *metric, const char *const *label_values);

/**
 * pleg_metric_get_count:
 *
 * Returns: a histogram's observation count (a counter's value for counters).
 */
guint64 pleg_metric_get_count(PlegMetric *metric, const char *const *label_values);

/**
 * pleg_metric_reset:
 *
 * Removes every series of @metric (used by gauges that are recomputed, like
 * kubelet_running_containers).
 */
void pleg_metric_reset(PlegMetric *metric);

/**
 * pleg_metrics_registry_expose:
 *
 * Renders every metric in Prometheus text format 0.0.4, sorted by name, with `# HELP` and
 * `# TYPE` lines; histograms as `_bucket{le=...}`, `_sum` and `_count`.  Metrics without a
 * series are rendered with their HELP/TYPE lines only (unlabelled ones with a zero sample).
 *
 * Returns: (transfer full): the text.
 */
char *pleg_metrics_registry_expose(PlegMetricsRegistry *registry);

G_END_DECLS
