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
typedef struct _PlegMetricSeries PlegMetricSeries;

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
 * One lock per registry guards its names and the table of series of each metric; no function of
 * this header calls out with it held, so it nests inside any other lock.  An update through a
 * #PlegMetricSeries takes no registry lock: a counter's or gauge's series is one atomic value,
 * a histogram's series has a small lock of its own.
 *
 * Thread safety: callable from any thread, as is every function in this header on a registry
 * or metric that is still referenced.
 *
 * Returns: (transfer full): an empty registry.
 */
PlegMetricsRegistry *pleg_metrics_registry_new(void);

/**
 * pleg_metrics_registry_ref:
 * @registry: a registry.
 *
 * Thread safety: callable from any thread.
 *
 * Returns: (transfer full): @registry.
 */
PlegMetricsRegistry *pleg_metrics_registry_ref(PlegMetricsRegistry *registry);

/**
 * pleg_metrics_registry_unref:
 * @registry: (nullable) (transfer full): a registry; %NULL is ignored.
 *
 * Drops a reference; the last one frees the registry and its metrics, after which no
 * #PlegMetric it returned may be used.
 *
 * Thread safety: callable from any thread; the last unref not while another thread uses the
 *   registry or one of its metrics.
 */
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
 * plugin that is started twice keeps its series.  A registration that is refused (an invalid
 * metric or label name, histogram buckets that are not finite and strictly increasing, the name
 * registered before with another type or other labels, or a name that a histogram's `_bucket`,
 * `_sum` or `_count` series takes) is a bug of the caller: it logs a warning naming the metric
 * and the reason, and returns %NULL, which every update function ignores.
 *
 * Thread safety: callable from any thread.
 *
 * Returns: (transfer none) (nullable): the metric, owned by the registry and valid as long as
 *   it; %NULL when refused.
 */
PlegMetric *pleg_metrics_register(PlegMetricsRegistry *registry, PlegMetricType type,
                                  const char *name, const char *help,
                                  const char *const *label_names, const double *buckets,
                                  gsize n_buckets);

/**
 * pleg_metrics_lookup:
 * @registry: a registry.
 * @name: a metric name.
 *
 * Thread safety: callable from any thread.
 *
 * Returns: (transfer none) (nullable): the metric called @name.
 */
PlegMetric *pleg_metrics_lookup(PlegMetricsRegistry *registry, const char *name);

/**
 * pleg_metric_add:
 * @metric: (nullable): a counter or gauge; %NULL is ignored, so optional metrics cost nothing.
 * @label_values: (nullable) (array): one value per label name, in order (%NULL when the metric
 *   has no labels); values come from closed sets.
 * @value: what to add, in the metric's unit; a counter takes no negative value.
 *
 * Adds to a series, creating it at 0.  Wrong label values, a histogram or a negative counter
 * increment are a bug of the caller (a critical; the series is unchanged).
 *
 * Thread safety: callable from any thread.
 */
void pleg_metric_add(PlegMetric *metric, const char *const *label_values, double value);

/**
 * pleg_metric_inc:
 * @metric: (nullable): a counter or gauge.
 * @label_values: (nullable) (array): as for pleg_metric_add().
 *
 * pleg_metric_add() of 1.
 *
 * Thread safety: callable from any thread.
 */
void pleg_metric_inc(PlegMetric *metric, const char *const *label_values);

/**
 * pleg_metric_set:
 * @metric: (nullable): a gauge.
 * @label_values: (nullable) (array): as for pleg_metric_add().
 * @value: the new value, in the metric's unit.
 *
 * Thread safety: callable from any thread.
 */
void pleg_metric_set(PlegMetric *metric, const char *const *label_values, double value);

/**
 * pleg_metric_observe:
 * @metric: (nullable): a histogram.
 * @label_values: (nullable) (array): as for pleg_metric_add().
 * @value: one observation, in the unit of the buckets.
 *
 * Thread safety: callable from any thread.
 */
void pleg_metric_observe(PlegMetric *metric, const char *const *label_values, double value);

/**
 * pleg_metric_get_series:
 * @metric: (nullable): a metric; %NULL gives %NULL.
 * @label_values: (nullable) (array): one value per label name, in order (%NULL when the metric
 *   has no labels); values come from closed sets.
 *
 * Resolves label values to their series once, so that later updates through the handle neither
 * hash nor check strings (as Prometheus clients' `WithLabelValues()` children).  Resolving does
 * not show the series: it appears in pleg_metrics_registry_expose() at its first update, as with
 * pleg_metric_add().  Wrong label values are a bug of the caller (a critical, %NULL).
 *
 * Thread safety: callable from any thread.
 *
 * Returns: (transfer none) (nullable): the series, owned by @metric and valid as long as the
 *   registry, pleg_metric_reset() included (a reset hides it until its next update).  Every
 *   series function ignores %NULL.
 */
PlegMetricSeries *pleg_metric_get_series(PlegMetric *metric, const char *const *label_values);

/**
 * pleg_metric_series_add:
 * @series: (nullable): a series of a counter or gauge, from pleg_metric_get_series().
 * @value: what to add, in the metric's unit; a counter takes no negative value.
 *
 * pleg_metric_add() on a resolved series: one atomic compare-and-swap, no lock.  A histogram
 * or a negative counter increment is a bug of the caller (a critical; the series is unchanged).
 *
 * Thread safety: callable from any thread.
 */
void pleg_metric_series_add(PlegMetricSeries *series, double value);

/**
 * pleg_metric_series_inc:
 * @series: (nullable): a series of a counter or gauge.
 *
 * pleg_metric_series_add() of 1.
 *
 * Thread safety: callable from any thread.
 */
void pleg_metric_series_inc(PlegMetricSeries *series);

/**
 * pleg_metric_series_set:
 * @series: (nullable): a series of a gauge.
 * @value: the new value, in the metric's unit.
 *
 * pleg_metric_set() on a resolved series: one atomic store, no lock.
 *
 * Thread safety: callable from any thread.
 */
void pleg_metric_series_set(PlegMetricSeries *series, double value);

/**
 * pleg_metric_series_observe:
 * @series: (nullable): a series of a histogram.
 * @value: one observation, in the unit of the buckets.
 *
 * pleg_metric_observe() on a resolved series, under the series' own lock only.
 *
 * Thread safety: callable from any thread.
 */
void pleg_metric_series_observe(PlegMetricSeries *series, double value);

/**
 * pleg_metric_get:
 *
 * Thread safety: callable from any thread.
 *
 * Returns: a counter's or gauge's value, or a histogram's sum; 0 for a series never touched.
 */
double pleg_metric_get(PlegMetric *metric, const char *const *label_values);

/**
 * pleg_metric_get_count:
 *
 * Thread safety: callable from any thread.
 *
 * Returns: a histogram's observation count (a counter's value for counters).
 */
guint64 pleg_metric_get_count(PlegMetric *metric, const char *const *label_values);

/**
 * pleg_metric_reset:
 *
 * Hides every series of @metric at zero until its next update (used by gauges that are
 * recomputed, like kubelet_running_containers); handles from pleg_metric_get_series() stay
 * valid.
 *
 * Thread safety: callable from any thread; an update racing with the reset lands before or
 *   after it, never half.
 */
void pleg_metric_reset(PlegMetric *metric);

/**
 * PlegMetricsCollectFunc:
 * @registry: the registry being exposed.
 * @user_data: the data given to pleg_metrics_registry_add_collector().
 *
 * Brings metrics that are read rather than counted up to date just before an exposition, as a
 * Prometheus client's collector does (a process's CPU time and open files, read from /proc):
 * it registers, sets and adds through the functions of this header.  Runs on the thread that
 * called pleg_metrics_registry_expose(), with no lock of the registry held; expositions on
 * several threads run it concurrently, so a collector that reads a value and then writes
 * another keeps a lock of its own.  A scrape waits for it: it must be quick and must not block
 * on the network.
 */
typedef void (*PlegMetricsCollectFunc)(PlegMetricsRegistry *registry, gpointer user_data);

/**
 * pleg_metrics_registry_add_collector:
 * @registry: a registry.
 * @func: called at the start of every pleg_metrics_registry_expose(), after the collectors
 *   added before it.
 * @user_data: (nullable): passed to @func.
 * @destroy: (nullable): frees @user_data once the collector is removed (or the registry freed)
 *   and no exposition runs it any more, on the thread that let go of it last.
 *
 * Thread safety: callable from any thread.
 *
 * Returns: the collector's id, never 0, for pleg_metrics_registry_remove_collector().
 */
guint pleg_metrics_registry_add_collector(PlegMetricsRegistry *registry,
                                          PlegMetricsCollectFunc func, gpointer user_data,
                                          GDestroyNotify destroy);

/**
 * pleg_metrics_registry_remove_collector:
 * @registry: a registry.
 * @id: what pleg_metrics_registry_add_collector() returned; an unknown id is a bug of the
 *   caller (a critical).
 *
 * No exposition that starts after this returns runs the collector.  One running it now on
 * another thread finishes with it, and its destroy notify runs after that, on that thread; this
 * function never waits.
 *
 * Thread safety: callable from any thread, @func included.
 */
void pleg_metrics_registry_remove_collector(PlegMetricsRegistry *registry, guint id);

/**
 * pleg_metrics_registry_expose:
 *
 * Runs the collectors (pleg_metrics_registry_add_collector()), then renders every metric in
 * Prometheus text format 0.0.4, sorted by name, with `# HELP` and `# TYPE` lines; histograms as
 * `_bucket{le=...}`, `_sum` and `_count`.  Metrics without a series are rendered with their
 * HELP/TYPE lines only (unlabelled ones with a zero sample).
 *
 * Thread safety: callable from any thread; each series is rendered from one consistent reading
 *   (a histogram's buckets, sum and count agree), and no update waits for the rendering, so two
 *   series may be read an update apart.
 *
 * Returns: (transfer full): the text.
 */
char *pleg_metrics_registry_expose(PlegMetricsRegistry *registry);

G_END_DECLS
