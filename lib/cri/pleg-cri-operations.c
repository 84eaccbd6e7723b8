/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kubelet's runtime operation metrics for the CRI client: every operation counted, its failures
 * counted, its duration observed, by kubelet's operation_type (pkg/kubelet/metrics, as its
 * instrumented runtime service records them).  Series are resolved once, so that a record is
 * two atomic adds and one histogram observation.
 */
#include <pleg/pleg-cri-client.h>

#include "cri-private.h"

/* kubelet's buckets for kubelet_runtime_operations_duration_seconds: 14 exponential buckets
 * from 5 ms, factor 2.5 (up to 745 s). */
#define N_BUCKETS 14

static const char *const operation_types[CRI_OPERATION_N] = {
    [CRI_OPERATION_VERSION] = "version",
    [CRI_OPERATION_LIST_PODSANDBOX] = "list_podsandbox",
    [CRI_OPERATION_LIST_CONTAINERS] = "list_containers",
    [CRI_OPERATION_PODSANDBOX_STATUS] = "podsandbox_status",
    [CRI_OPERATION_CONTAINER_STATUS] = "container_status",
    [CRI_OPERATION_GET_CONTAINER_EVENTS] = "get_container_events",
};

struct _CriOperations {
    PlegMetricsRegistry *registry;
    PlegMetricSeries *total[CRI_OPERATION_N];
    PlegMetricSeries *errors[CRI_OPERATION_N];
    PlegMetricSeries *duration[CRI_OPERATION_N];
};

const char *
cri_operation_to_string(CriOperation operation)
{
    g_return_val_if_fail(operation < CRI_OPERATION_N, "unknown");
    return operation_types[operation];
}

CriOperations *
cri_operations_new(PlegMetricsRegistry *registry)
{
    static const char *const labels[] = {"operation_type", NULL};
    CriOperations *ops = g_new0(CriOperations, 1);
    double buckets[N_BUCKETS];
    PlegMetric *total, *errors, *duration;

    buckets[0] = 0.005;
    for (guint i = 1; i < N_BUCKETS; i++)
        buckets[i] = buckets[i - 1] * 2.5;

    ops->registry = pleg_metrics_registry_ref(registry);
    total = pleg_metrics_register(registry, PLEG_METRIC_COUNTER,
                                  "kubelet_runtime_operations_total",
                                  "Cumulative number of runtime operations by operation type.",
                                  labels, NULL, 0);
    errors = pleg_metrics_register(
        registry, PLEG_METRIC_COUNTER, "kubelet_runtime_operations_errors_total",
        "Cumulative number of runtime operation errors by operation type.", labels, NULL, 0);
    duration = pleg_metrics_register(
        registry, PLEG_METRIC_HISTOGRAM, "kubelet_runtime_operations_duration_seconds",
        "Duration in seconds of runtime operations. Broken down by operation type.", labels,
        buckets, N_BUCKETS);
    for (CriOperation op = 0; op < CRI_OPERATION_N; op++) {
        const char *values[] = {operation_types[op], NULL};

        ops->total[op] = pleg_metric_get_series(total, values);
        ops->errors[op] = pleg_metric_get_series(errors, values);
        ops->duration[op] = pleg_metric_get_series(duration, values);
        /* Shown at 0 from the start: an error series that appeared with its first error would
         * hide that error from increase() and rate(). */
        pleg_metric_series_add(ops->total[op], 0);
        pleg_metric_series_add(ops->errors[op], 0);
    }
    return ops;
}

void
cri_operations_free(CriOperations *ops)
{
    if (!ops)
        return;
    pleg_metrics_registry_unref(ops->registry);
    g_free(ops);
}

void
cri_operations_record(CriOperations *ops, CriOperation operation, gint64 duration_usec,
                      const GError *error)
{
    if (!ops)
        return;
    g_return_if_fail(operation < CRI_OPERATION_N);

    pleg_metric_series_inc(ops->total[operation]);
    if (error && !g_error_matches(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_CANCELLED))
        pleg_metric_series_inc(ops->errors[operation]);
    pleg_metric_series_observe(ops->duration[operation],
                               (double)MAX(duration_usec, 0) / G_USEC_PER_SEC);
}
