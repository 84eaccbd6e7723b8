/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The metrics registry's shared state, and the internal functions its files call across.
 * G_GNUC_INTERNAL keeps them out of libpleg's ABI.  The files, one idea each:
 *
 *   pleg-metrics.c             the registry: registration and its checks, series, updates,
 *                              reads, reset, collectors
 *   pleg-metrics-exposition.c  the Prometheus text exposition: every metric rendered, escaped
 *                              and sorted under the registry's lock
 */
#pragma once

#include "pleg/pleg-metrics.h"

G_BEGIN_DECLS

/*
 * A series is created on first use and lives as long as its metric: a handle stays valid
 * across pleg_metric_reset(), which only hides the series again.  Counters and gauges keep
 * their value in one atomic word (the double's bits), SERIES_ABSENT while hidden; a histogram
 * series keeps a lock of its own for its buckets, sum and count.  The registry's lock guards the
 * metric's table of series and orders reset against exposition; no update takes it.
 */
struct _PlegMetricSeries {
    PlegMetric *metric;
    char **label_values; /* n_labels entries, NULL-terminated */
    guint64 bits;        /* counters, gauges: the value's bits, atomically; SERIES_ABSENT hidden */

    GMutex lock;            /* histograms: guards the fields below */
    gboolean present;       /* FALSE until the first observation and after a reset */
    double sum;             /* sum of the observations */
    guint64 count;          /* observations */
    guint64 *bucket_counts; /* per bucket, not cumulative; n_buckets + 1 (the last is +Inf) */
};

/* A signalling NaN no arithmetic produces: values that are NaN are stored as the quiet one. */
#define SERIES_ABSENT G_GUINT64_CONSTANT(0x7ff4a65e0f5e7e55)

struct _PlegMetric {
    GMutex *lock; /* the registry's: guards @series, orders reset against exposition */
    PlegMetricType type;
    char *name;
    char *help;
    char **label_names;
    guint n_labels;
    double *buckets;
    gsize n_buckets;
    GHashTable *series; /* series_key() -> PlegMetricSeries */
};

/* A collector (pleg_metrics_registry_add_collector()): referenced by the registry's list and by
 * each exposition running it, so that a removal never waits and the destroy notify runs once
 * nobody calls it. */
typedef struct {
    gatomicrefcount ref_count;
    guint id;
    PlegMetricsCollectFunc func;
    gpointer user_data;
    GDestroyNotify destroy;
} PlegMetricsCollector;

struct _PlegMetricsRegistry {
    gatomicrefcount ref_count;
    GMutex lock;
    GHashTable *metrics;  /* name -> PlegMetric */
    GPtrArray *collectors; /* PlegMetricsCollector *, in the order added; under @lock */
    guint last_collector_id;
};

/* A counter's or gauge's value from its bits: 0 while hidden. */
G_GNUC_INTERNAL double pleg_metric_bits_to_double(guint64 bits);
/* Runs every collector of @registry, without its lock (pleg-metrics.c). */
G_GNUC_INTERNAL void pleg_metrics_registry_collect(PlegMetricsRegistry *registry);
/* "counter", "gauge", "histogram": the TYPE line's words, also in messages. */
G_GNUC_INTERNAL const char *pleg_metric_type_name(PlegMetricType type);

G_END_DECLS
