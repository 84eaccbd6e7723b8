/* SPDX-License-Identifier: Apache-2.0 */
#include <check.h>
#include <gio/gio.h>
#include <math.h>
#include <string.h>

#include "pleg/pleg-metrics.h"

#define LV(...) ((const char *const[]){__VA_ARGS__, NULL})

/*
 * Tests run with G_DEBUG=fatal-warnings; a test that provokes a g_critical on purpose arms
 * this writer, which swallows (and counts) criticals instead of aborting.  A test that provokes
 * refused registrations arms it for warnings, which it keeps (their MESSAGE) instead.
 */
static gboolean expect_criticals;
static guint n_criticals;
static GPtrArray *warnings;

static GLogWriterOutput
log_writer(GLogLevelFlags level, const GLogField *fields, gsize n_fields, gpointer user_data)
{
    if (expect_criticals && (level & G_LOG_LEVEL_CRITICAL)) {
        n_criticals++;
        return G_LOG_WRITER_HANDLED;
    }
    if (warnings && (level & G_LOG_LEVEL_WARNING)) {
        for (gsize i = 0; i < n_fields; i++)
            if (g_str_equal(fields[i].key, "MESSAGE"))
                g_ptr_array_add(warnings, g_strdup(fields[i].value));
        return G_LOG_WRITER_HANDLED;
    }
    return g_log_writer_default(level, fields, n_fields, user_data);
}

static void
expect_warnings_begin(void)
{
    g_clear_pointer(&warnings, g_ptr_array_unref);
    warnings = g_ptr_array_new_with_free_func(g_free);
}

/* The warnings since expect_warnings_begin(), in order.  (transfer full) */
static GPtrArray *
expect_warnings_end(void)
{
    return g_steal_pointer(&warnings);
}

static void
expect_critical_begin(void)
{
    n_criticals = 0;
    expect_criticals = TRUE;
}

static guint
expect_critical_end(void)
{
    expect_criticals = FALSE;
    return n_criticals;
}

static char *
expose(PlegMetricsRegistry *registry)
{
    return pleg_metrics_registry_expose(registry);
}

#define ck_assert_contains(haystack, needle)                                                       \
    ck_assert_msg(strstr((haystack), (needle)) != NULL, "expected \"%s\" in:\n%s", (needle),       \
                  (haystack))

START_TEST(test_counter)
{
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    g_autofree char *text0 = NULL, *text1 = NULL;
    PlegMetric *counter;

    counter = pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "test_events_total",
                                    "Events seen.", NULL, NULL, 0);
    ck_assert_ptr_nonnull(counter);
    ck_assert_ptr_eq(pleg_metrics_lookup(registry, "test_events_total"), counter);
    ck_assert_ptr_null(pleg_metrics_lookup(registry, "test_other"));

    text0 = expose(registry);
    ck_assert_str_eq(text0, "# HELP test_events_total Events seen.\n"
                            "# TYPE test_events_total counter\n"
                            "test_events_total 0\n");

    pleg_metric_inc(counter, NULL);
    pleg_metric_inc(counter, NULL);
    pleg_metric_add(counter, NULL, 3);
    pleg_metric_add(counter, LV(NULL), 0.5); /* an empty array is as good as NULL */
    ck_assert_double_eq(pleg_metric_get(counter, NULL), 5.5);
    ck_assert_uint_eq(pleg_metric_get_count(counter, NULL), 5);

    text1 = expose(registry);
    ck_assert_contains(text1, "\ntest_events_total 5.5\n");

    /* A counter never goes down. */
    expect_critical_begin();
    pleg_metric_add(counter, NULL, -1);
    pleg_metric_set(counter, NULL, 1);
    pleg_metric_observe(counter, NULL, 1);
    ck_assert_uint_eq(expect_critical_end(), 3);
    ck_assert_double_eq(pleg_metric_get(counter, NULL), 5.5);

    /* A NULL metric costs nothing. */
    pleg_metric_inc(NULL, NULL);
    pleg_metric_add(NULL, NULL, 1);
    pleg_metric_set(NULL, NULL, 1);
    pleg_metric_observe(NULL, NULL, 1);
    pleg_metric_reset(NULL);
    ck_assert_double_eq(pleg_metric_get(NULL, NULL), 0);
    ck_assert_uint_eq(pleg_metric_get_count(NULL, NULL), 0);
}
END_TEST

START_TEST(test_gauge)
{
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    g_autofree char *text = NULL;
    PlegMetric *gauge;

    gauge = pleg_metrics_register(registry, PLEG_METRIC_GAUGE, "test_running_pods", "Running pods.",
                                  NULL, NULL, 0);
    ck_assert_ptr_nonnull(gauge);
    ck_assert_double_eq(pleg_metric_get(gauge, NULL), 0);

    pleg_metric_set(gauge, NULL, 7);
    pleg_metric_add(gauge, NULL, -2);
    pleg_metric_inc(gauge, NULL);
    ck_assert_double_eq(pleg_metric_get(gauge, NULL), 6);
    pleg_metric_set(gauge, NULL, -3.25);
    ck_assert_double_eq(pleg_metric_get(gauge, NULL), -3.25);
    ck_assert_uint_eq(pleg_metric_get_count(gauge, NULL), 0);

    text = expose(registry);
    ck_assert_str_eq(text, "# HELP test_running_pods Running pods.\n"
                           "# TYPE test_running_pods gauge\n"
                           "test_running_pods -3.25\n");

    expect_critical_begin();
    pleg_metric_observe(gauge, NULL, 1);
    ck_assert_uint_eq(expect_critical_end(), 1);

    /* reset drops the series; an unlabelled metric then shows zero again. */
    pleg_metric_reset(gauge);
    ck_assert_double_eq(pleg_metric_get(gauge, NULL), 0);
}
END_TEST

START_TEST(test_histogram)
{
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    static const double buckets[] = {0.1, 1, 10};
    g_autofree char *text = NULL, *empty = NULL;
    PlegMetric *hist;

    hist = pleg_metrics_register(registry, PLEG_METRIC_HISTOGRAM, "test_duration_seconds",
                                 "Durations.", NULL, buckets, G_N_ELEMENTS(buckets));
    ck_assert_ptr_nonnull(hist);

    empty = expose(registry);
    ck_assert_str_eq(empty, "# HELP test_duration_seconds Durations.\n"
                            "# TYPE test_duration_seconds histogram\n"
                            "test_duration_seconds_bucket{le=\"0.1\"} 0\n"
                            "test_duration_seconds_bucket{le=\"1\"} 0\n"
                            "test_duration_seconds_bucket{le=\"10\"} 0\n"
                            "test_duration_seconds_bucket{le=\"+Inf\"} 0\n"
                            "test_duration_seconds_sum 0\n"
                            "test_duration_seconds_count 0\n");

    pleg_metric_observe(hist, NULL, 0.05);
    pleg_metric_observe(hist, NULL, 0.1); /* bounds are inclusive */
    pleg_metric_observe(hist, NULL, 0.5);
    pleg_metric_observe(hist, NULL, 20);
    ck_assert_uint_eq(pleg_metric_get_count(hist, NULL), 4);
    ck_assert_double_eq_tol(pleg_metric_get(hist, NULL), 20.65, 1e-9);

    text = expose(registry);
    ck_assert_contains(text, "test_duration_seconds_bucket{le=\"0.1\"} 2\n"
                             "test_duration_seconds_bucket{le=\"1\"} 3\n"
                             "test_duration_seconds_bucket{le=\"10\"} 3\n"
                             "test_duration_seconds_bucket{le=\"+Inf\"} 4\n"
                             "test_duration_seconds_sum 20.65\n"
                             "test_duration_seconds_count 4\n");

    expect_critical_begin();
    pleg_metric_inc(hist, NULL);
    pleg_metric_set(hist, NULL, 1);
    ck_assert_uint_eq(expect_critical_end(), 2);
    ck_assert_uint_eq(pleg_metric_get_count(hist, NULL), 4);
}
END_TEST

START_TEST(test_histogram_buckets)
{
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    static const double with_inf[] = {1, 2, INFINITY};
    static const double unsorted[] = {1, 0.5};
    static const double repeated[] = {1, 1};
    static const double with_nan[] = {1, NAN};
    g_autofree char *text = NULL;
    PlegMetric *def, *inf;
    gsize n_default;
    const double *default_buckets = pleg_metrics_default_buckets(&n_default);

    ck_assert_uint_eq(n_default, 11);
    ck_assert_double_eq(default_buckets[0], 0.005);
    ck_assert_double_eq(default_buckets[10], 10);
    expect_warnings_begin();

    def = pleg_metrics_register(registry, PLEG_METRIC_HISTOGRAM, "test_default_seconds", "D.", NULL,
                                NULL, 0);
    ck_assert_ptr_nonnull(def);
    inf = pleg_metrics_register(registry, PLEG_METRIC_HISTOGRAM, "test_inf_seconds", "I.", NULL,
                                with_inf, G_N_ELEMENTS(with_inf));
    ck_assert_ptr_nonnull(inf);
    ck_assert_ptr_null(pleg_metrics_register(registry, PLEG_METRIC_HISTOGRAM, "test_a", "", NULL,
                                             unsorted, G_N_ELEMENTS(unsorted)));
    ck_assert_ptr_null(pleg_metrics_register(registry, PLEG_METRIC_HISTOGRAM, "test_b", "", NULL,
                                             repeated, G_N_ELEMENTS(repeated)));
    ck_assert_ptr_null(pleg_metrics_register(registry, PLEG_METRIC_HISTOGRAM, "test_c", "", NULL,
                                             with_nan, G_N_ELEMENTS(with_nan)));
    {
        g_autoptr(GPtrArray) said = expect_warnings_end();

        /* Each refusal says which metric and why. */
        ck_assert_uint_eq(said->len, 3);
        ck_assert_str_eq(g_ptr_array_index(said, 0),
                         "metrics: refusing to register test_a: histogram buckets must be finite "
                         "and strictly increasing");
        ck_assert_contains((char *)g_ptr_array_index(said, 1), "test_b: histogram buckets");
        ck_assert_contains((char *)g_ptr_array_index(said, 2), "test_c: histogram buckets");
    }

    pleg_metric_observe(def, NULL, 0.3);
    pleg_metric_observe(inf, NULL, 3);
    text = expose(registry);
    ck_assert_contains(text, "test_default_seconds_bucket{le=\"0.005\"} 0\n"
                             "test_default_seconds_bucket{le=\"0.01\"} 0\n"
                             "test_default_seconds_bucket{le=\"0.025\"} 0\n"
                             "test_default_seconds_bucket{le=\"0.05\"} 0\n"
                             "test_default_seconds_bucket{le=\"0.1\"} 0\n"
                             "test_default_seconds_bucket{le=\"0.25\"} 0\n"
                             "test_default_seconds_bucket{le=\"0.5\"} 1\n"
                             "test_default_seconds_bucket{le=\"1\"} 1\n"
                             "test_default_seconds_bucket{le=\"2.5\"} 1\n"
                             "test_default_seconds_bucket{le=\"5\"} 1\n"
                             "test_default_seconds_bucket{le=\"10\"} 1\n"
                             "test_default_seconds_bucket{le=\"+Inf\"} 1\n"
                             "test_default_seconds_sum 0.3\n");
    /* An explicit +Inf bound is the implicit one, not a second bucket. */
    ck_assert_contains(text, "test_inf_seconds_bucket{le=\"2\"} 0\n"
                             "test_inf_seconds_bucket{le=\"+Inf\"} 1\n"
                             "test_inf_seconds_sum 3\n");
}
END_TEST

START_TEST(test_labels)
{
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    static const char *const labels[] = {"relist_source", "kind", NULL};
    g_autofree char *empty = NULL, *text = NULL, *after_reset = NULL;
    PlegMetric *counter, *hist;

    counter = pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "test_events_total", "E.",
                                    labels, NULL, 0);
    hist =
        pleg_metrics_register(registry, PLEG_METRIC_HISTOGRAM, "test_latency_seconds", "L.",
                              (const char *const[]){"relist_source", NULL}, (const double[]){1}, 1);
    ck_assert_ptr_nonnull(counter);
    ck_assert_ptr_nonnull(hist);

    /* A labelled metric without series shows only its HELP and TYPE lines. */
    empty = expose(registry);
    ck_assert_str_eq(empty, "# HELP test_events_total E.\n"
                            "# TYPE test_events_total counter\n"
                            "# HELP test_latency_seconds L.\n"
                            "# TYPE test_latency_seconds histogram\n");

    pleg_metric_inc(counter, LV("global", "b"));
    pleg_metric_add(counter, LV("global", "a"), 2);
    pleg_metric_add(counter, LV("evented_pleg", "z"), 4);
    pleg_metric_inc(counter, LV("global", "b"));
    pleg_metric_observe(hist, LV("post_sync"), 0.5);
    pleg_metric_observe(hist, LV("global"), 2);

    ck_assert_double_eq(pleg_metric_get(counter, LV("global", "b")), 2);
    ck_assert_double_eq(pleg_metric_get(counter, LV("global", "a")), 2);
    ck_assert_double_eq(pleg_metric_get(counter, LV("evented_pleg", "z")), 4);
    ck_assert_double_eq(pleg_metric_get(counter, LV("global", "c")), 0);
    ck_assert_uint_eq(pleg_metric_get_count(hist, LV("global")), 1);

    /* Series come sorted by label values, label names in registration order, le last. */
    text = expose(registry);
    ck_assert_str_eq(text,
                     "# HELP test_events_total E.\n"
                     "# TYPE test_events_total counter\n"
                     "test_events_total{relist_source=\"evented_pleg\",kind=\"z\"} 4\n"
                     "test_events_total{relist_source=\"global\",kind=\"a\"} 2\n"
                     "test_events_total{relist_source=\"global\",kind=\"b\"} 2\n"
                     "# HELP test_latency_seconds L.\n"
                     "# TYPE test_latency_seconds histogram\n"
                     "test_latency_seconds_bucket{relist_source=\"global\",le=\"1\"} 0\n"
                     "test_latency_seconds_bucket{relist_source=\"global\",le=\"+Inf\"} 1\n"
                     "test_latency_seconds_sum{relist_source=\"global\"} 2\n"
                     "test_latency_seconds_count{relist_source=\"global\"} 1\n"
                     "test_latency_seconds_bucket{relist_source=\"post_sync\",le=\"1\"} 1\n"
                     "test_latency_seconds_bucket{relist_source=\"post_sync\",le=\"+Inf\"} 1\n"
                     "test_latency_seconds_sum{relist_source=\"post_sync\"} 0.5\n"
                     "test_latency_seconds_count{relist_source=\"post_sync\"} 1\n");

    /* Wrong number of label values is a bug: a critical, and nothing changes. */
    expect_critical_begin();
    pleg_metric_inc(counter, NULL);
    pleg_metric_inc(counter, LV("global"));
    pleg_metric_observe(hist, NULL, 1);
    ck_assert_double_eq(pleg_metric_get(counter, LV("global")), 0);
    ck_assert_uint_eq(expect_critical_end(), 4);
    {
        g_autofree char *again = expose(registry);
        ck_assert_str_eq(again, text);
    }

    expect_critical_begin();
    pleg_metric_inc(pleg_metrics_lookup(registry, "test_events_total"), LV("\xff", "a"));
    ck_assert_uint_eq(expect_critical_end(), 1);

    pleg_metric_reset(counter);
    ck_assert_double_eq(pleg_metric_get(counter, LV("global", "b")), 0);
    after_reset = expose(registry);
    ck_assert_str_eq(after_reset,
                     "# HELP test_events_total E.\n"
                     "# TYPE test_events_total counter\n"
                     "# HELP test_latency_seconds L.\n"
                     "# TYPE test_latency_seconds histogram\n"
                     "test_latency_seconds_bucket{relist_source=\"global\",le=\"1\"} 0\n"
                     "test_latency_seconds_bucket{relist_source=\"global\",le=\"+Inf\"} 1\n"
                     "test_latency_seconds_sum{relist_source=\"global\"} 2\n"
                     "test_latency_seconds_count{relist_source=\"global\"} 1\n"
                     "test_latency_seconds_bucket{relist_source=\"post_sync\",le=\"1\"} 1\n"
                     "test_latency_seconds_bucket{relist_source=\"post_sync\",le=\"+Inf\"} 1\n"
                     "test_latency_seconds_sum{relist_source=\"post_sync\"} 0.5\n"
                     "test_latency_seconds_count{relist_source=\"post_sync\"} 1\n");
}
END_TEST

/* Label values that would be ambiguous if joined naively stay separate series. */
START_TEST(test_label_keys)
{
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    PlegMetric *gauge;

    gauge = pleg_metrics_register(registry, PLEG_METRIC_GAUGE, "test_g", "G.",
                                  (const char *const[]){"a", "b", NULL}, NULL, 0);
    pleg_metric_set(gauge, LV("x1:", "y"), 1);
    pleg_metric_set(gauge, LV("x", "1:y"), 2);
    pleg_metric_set(gauge, LV("", ""), 3);
    ck_assert_double_eq(pleg_metric_get(gauge, LV("x1:", "y")), 1);
    ck_assert_double_eq(pleg_metric_get(gauge, LV("x", "1:y")), 2);
    ck_assert_double_eq(pleg_metric_get(gauge, LV("", "")), 3);
}
END_TEST

START_TEST(test_registration)
{
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    static const char *const labels[] = {"container_state", NULL};
    static const char *const other_labels[] = {"state", NULL};
    static const char *const two_labels[] = {"container_state", "x", NULL};
    PlegMetric *gauge, *hist;

    gauge = pleg_metrics_register(registry, PLEG_METRIC_GAUGE, "kubelet_running_containers",
                                  "Running containers.", labels, NULL, 0);
    ck_assert_ptr_nonnull(gauge);
    pleg_metric_set(gauge, LV("running"), 3);

    /* The same registration returns the same metric and keeps its series. */
    ck_assert_ptr_eq(pleg_metrics_register(registry, PLEG_METRIC_GAUGE,
                                           "kubelet_running_containers", "Other help.",
                                           (const char *const[]){"container_state", NULL}, NULL, 0),
                     gauge);
    ck_assert_double_eq(pleg_metric_get(gauge, LV("running")), 3);

    /* Another type or other labels conflict. */
    expect_warnings_begin();
    ck_assert_ptr_null(pleg_metrics_register(registry, PLEG_METRIC_COUNTER,
                                             "kubelet_running_containers", "", labels, NULL, 0));
    ck_assert_ptr_null(pleg_metrics_register(
        registry, PLEG_METRIC_GAUGE, "kubelet_running_containers", "", other_labels, NULL, 0));
    ck_assert_ptr_null(pleg_metrics_register(
        registry, PLEG_METRIC_GAUGE, "kubelet_running_containers", "", two_labels, NULL, 0));
    ck_assert_ptr_null(pleg_metrics_register(registry, PLEG_METRIC_GAUGE,
                                             "kubelet_running_containers", "", NULL, NULL, 0));
    ck_assert_ptr_eq(pleg_metrics_lookup(registry, "kubelet_running_containers"), gauge);

    /* Metric names. */
    ck_assert_ptr_nonnull(
        pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "ns:sub_x9", "", NULL, NULL, 0));
    ck_assert_ptr_nonnull(
        pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "_x", "", NULL, NULL, 0));
    ck_assert_ptr_null(pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "", "", NULL, NULL, 0));
    ck_assert_ptr_null(
        pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "9abc", "", NULL, NULL, 0));
    ck_assert_ptr_null(
        pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "a-b", "", NULL, NULL, 0));
    ck_assert_ptr_null(
        pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "a b", "", NULL, NULL, 0));
    ck_assert_ptr_null(
        pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "caf\xc3\xa9", "", NULL, NULL, 0));

    /* Label names: no colon, no leading digit, "__" reserved, "le" only outside histograms. */
    ck_assert_ptr_nonnull(pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "test_le_ok", "",
                                                (const char *const[]){"le", NULL}, NULL, 0));
    ck_assert_ptr_null(pleg_metrics_register(registry, PLEG_METRIC_HISTOGRAM, "test_le_bad", "",
                                             (const char *const[]){"le", NULL}, NULL, 0));
    ck_assert_ptr_null(pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "test_l1", "",
                                             (const char *const[]){"__name", NULL}, NULL, 0));
    ck_assert_ptr_null(pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "test_l2", "",
                                             (const char *const[]){"a:b", NULL}, NULL, 0));
    ck_assert_ptr_null(pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "test_l3", "",
                                             (const char *const[]){"1a", NULL}, NULL, 0));
    ck_assert_ptr_null(pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "test_l4", "",
                                             (const char *const[]){"", NULL}, NULL, 0));
    ck_assert_ptr_null(pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "test_l5", "",
                                             (const char *const[]){"a", "a", NULL}, NULL, 0));
    ck_assert_ptr_nonnull(pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "test_l6", "",
                                                (const char *const[]){"_a", "B9", NULL}, NULL, 0));
    ck_assert_ptr_null(pleg_metrics_lookup(registry, "test_l1"));

    /* A histogram's derived series names are taken, both ways round. */
    hist =
        pleg_metrics_register(registry, PLEG_METRIC_HISTOGRAM, "test_h_seconds", "", NULL, NULL, 0);
    ck_assert_ptr_nonnull(hist);
    ck_assert_ptr_null(pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "test_h_seconds_count",
                                             "", NULL, NULL, 0));
    ck_assert_ptr_null(pleg_metrics_register(registry, PLEG_METRIC_GAUGE, "test_h_seconds_sum", "",
                                             NULL, NULL, 0));
    ck_assert_ptr_null(pleg_metrics_register(registry, PLEG_METRIC_GAUGE, "test_h_seconds_bucket",
                                             "", NULL, NULL, 0));
    ck_assert_ptr_nonnull(
        pleg_metrics_register(registry, PLEG_METRIC_GAUGE, "test_q_sum", "", NULL, NULL, 0));
    ck_assert_ptr_null(
        pleg_metrics_register(registry, PLEG_METRIC_HISTOGRAM, "test_q", "", NULL, NULL, 0));
    {
        g_autoptr(GPtrArray) said = expect_warnings_end();

        /* One warning a refusal, none for the registrations that succeeded. */
        ck_assert_uint_eq(said->len, 19);
    }
}
END_TEST

/* What a refusal says: the metric, and the reason (the plugin ABI's metric_register has no
 * GError, so the warning is where a plugin's author learns it). */
START_TEST(test_registration_reasons)
{
#define REFUSED   "metrics: refusing to register "
#define BAD_NAME  ": invalid metric name (want [a-zA-Z_:][a-zA-Z0-9_:]*)"
#define HAD_GAUGE ": already registered as a gauge with labels (container_state), not a "
    static const char *const expected[] = {
        REFUSED "9abc" BAD_NAME,
        /* Untrusted text is escaped. */
        REFUSED "a\\nb" BAD_NAME,
        REFUSED "test_running" HAD_GAUGE "counter with labels (container_state)",
        REFUSED "test_running" HAD_GAUGE "gauge with no labels",
        REFUSED "test_l: label name \"__x\" starts with \"__\", which Prometheus reserves",
        REFUSED "test_l: label name \"a\" is given twice",
        REFUSED "test_l: label name \"le\" is \"le\", which a histogram uses for its buckets",
        REFUSED "test_b: histogram buckets must be finite and strictly increasing",
        REFUSED "test_h_count: it is a series of histogram test_h",
        REFUSED "test_running" HAD_GAUGE "histogram with no labels",
        REFUSED "test_g: the histogram's series test_g_sum is already a metric",
    };
#undef REFUSED
#undef BAD_NAME
#undef HAD_GAUGE
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    static const char *const labels[] = {"container_state", NULL};
    g_autoptr(GPtrArray) said = NULL;

    ck_assert_ptr_nonnull(
        pleg_metrics_register(registry, PLEG_METRIC_GAUGE, "test_running", "R.", labels, NULL, 0));
    ck_assert_ptr_nonnull(
        pleg_metrics_register(registry, PLEG_METRIC_HISTOGRAM, "test_h", "H.", NULL, NULL, 0));
    expect_warnings_begin();
    ck_assert_ptr_null(
        pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "9abc", "", NULL, NULL, 0));
    ck_assert_ptr_null(
        pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "a\nb", "", NULL, NULL, 0));
    ck_assert_ptr_null(
        pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "test_running", "", labels, NULL, 0));
    ck_assert_ptr_null(
        pleg_metrics_register(registry, PLEG_METRIC_GAUGE, "test_running", "", NULL, NULL, 0));
    ck_assert_ptr_null(pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "test_l", "",
                                             (const char *const[]){"__x", NULL}, NULL, 0));
    ck_assert_ptr_null(pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "test_l", "",
                                             (const char *const[]){"a", "a", NULL}, NULL, 0));
    ck_assert_ptr_null(pleg_metrics_register(registry, PLEG_METRIC_HISTOGRAM, "test_l", "",
                                             (const char *const[]){"le", NULL}, NULL, 0));
    ck_assert_ptr_null(pleg_metrics_register(registry, PLEG_METRIC_HISTOGRAM, "test_b", "", NULL,
                                             (const double[]){2, 1}, 2));
    ck_assert_ptr_null(
        pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "test_h_count", "", NULL, NULL, 0));
    ck_assert_ptr_null(
        pleg_metrics_register(registry, PLEG_METRIC_HISTOGRAM, "test_running", "", NULL, NULL, 0));
    ck_assert_ptr_nonnull(
        pleg_metrics_register(registry, PLEG_METRIC_GAUGE, "test_g_sum", "", NULL, NULL, 0));
    ck_assert_ptr_null(
        pleg_metrics_register(registry, PLEG_METRIC_HISTOGRAM, "test_g", "", NULL, NULL, 0));
    said = expect_warnings_end();

    for (guint i = 0; i < G_N_ELEMENTS(expected) && i < said->len; i++)
        ck_assert_str_eq(g_ptr_array_index(said, i), expected[i]);
    ck_assert_uint_eq(said->len, G_N_ELEMENTS(expected));
}
END_TEST

START_TEST(test_escaping)
{
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    g_autofree char *text = NULL;
    PlegMetric *gauge;

    gauge = pleg_metrics_register(registry, PLEG_METRIC_GAUGE, "test_escape",
                                  "Back\\slash, \"quotes\" and\nnewline.",
                                  (const char *const[]){"reason", NULL}, NULL, 0);
    pleg_metric_set(gauge, LV("a\\b \"c\"\nd"), 1);
    text = expose(registry);
    ck_assert_str_eq(text, "# HELP test_escape Back\\\\slash, \"quotes\" and\\nnewline.\n"
                           "# TYPE test_escape gauge\n"
                           "test_escape{reason=\"a\\\\b \\\"c\\\"\\nd\"} 1\n");
}
END_TEST

START_TEST(test_number_format)
{
    static const struct {
        double value;
        const char *text;
    } cases[] = {
        {0, "0"},
        {-0.0, "0"},
        {1, "1"},
        {-7, "-7"},
        {123456789, "123456789"},
        {1795966735, "1795966735"},
        {0.1, "0.1"},
        {2.5, "2.5"},
        {-0.005, "-0.005"},
        {1.0 / 3, "0.3333333333333333"},
        {1e20, "1e+20"},
        {1.5e-9, "1.5e-09"},
        {INFINITY, "+Inf"},
        {-INFINITY, "-Inf"},
        {NAN, "NaN"},
    };
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    PlegMetric *gauge;

    gauge = pleg_metrics_register(registry, PLEG_METRIC_GAUGE, "test_value", "V.", NULL, NULL, 0);
    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autofree char *text = NULL;
        g_autofree char *expected = g_strdup_printf("\ntest_value %s\n", cases[i].text);

        pleg_metric_set(gauge, NULL, cases[i].value);
        text = expose(registry);
        ck_assert_contains(text, expected);
    }
}
END_TEST

/* Series handles: resolved once, shown at their first update, valid across a reset. */
START_TEST(test_series)
{
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    static const char *const labels[] = {"relist_source", NULL};
    g_autofree char *hidden = NULL, *shown = NULL, *after_reset = NULL, *again = NULL;
    PlegMetric *counter, *gauge, *hist;
    PlegMetricSeries *global, *post_sync, *level, *latency;

    counter = pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "test_events_total", "E.",
                                    labels, NULL, 0);
    gauge = pleg_metrics_register(registry, PLEG_METRIC_GAUGE, "test_level", "L.", NULL, NULL, 0);
    hist = pleg_metrics_register(registry, PLEG_METRIC_HISTOGRAM, "test_seconds", "S.", labels,
                                 (const double[]){1}, 1);

    global = pleg_metric_get_series(counter, LV("global"));
    post_sync = pleg_metric_get_series(counter, LV("post_sync"));
    level = pleg_metric_get_series(gauge, NULL);
    latency = pleg_metric_get_series(hist, LV("global"));
    ck_assert_ptr_nonnull(global);
    ck_assert_ptr_nonnull(level);
    ck_assert_ptr_nonnull(latency);
    ck_assert_ptr_ne(global, post_sync);
    ck_assert_ptr_eq(pleg_metric_get_series(counter, LV("global")), global);

    /* Resolving shows nothing: the text is the one of a registry never updated. */
    hidden = expose(registry);
    ck_assert_str_eq(hidden, "# HELP test_events_total E.\n"
                             "# TYPE test_events_total counter\n"
                             "# HELP test_level L.\n"
                             "# TYPE test_level gauge\n"
                             "test_level 0\n"
                             "# HELP test_seconds S.\n"
                             "# TYPE test_seconds histogram\n");

    pleg_metric_series_inc(global);
    pleg_metric_series_add(global, 2.5);
    pleg_metric_inc(counter, LV("global")); /* the label path updates the same series */
    pleg_metric_series_set(level, -4);
    pleg_metric_series_add(level, 1.5);
    pleg_metric_series_observe(latency, 0.5);
    pleg_metric_series_observe(latency, 3);
    ck_assert_double_eq(pleg_metric_get(counter, LV("global")), 4.5);
    ck_assert_double_eq(pleg_metric_get(counter, LV("post_sync")), 0);
    ck_assert_double_eq(pleg_metric_get(gauge, NULL), -2.5);
    ck_assert_uint_eq(pleg_metric_get_count(hist, LV("global")), 2);
    ck_assert_double_eq(pleg_metric_get(hist, LV("global")), 3.5);

    shown = expose(registry);
    ck_assert_str_eq(shown, "# HELP test_events_total E.\n"
                            "# TYPE test_events_total counter\n"
                            "test_events_total{relist_source=\"global\"} 4.5\n"
                            "# HELP test_level L.\n"
                            "# TYPE test_level gauge\n"
                            "test_level -2.5\n"
                            "# HELP test_seconds S.\n"
                            "# TYPE test_seconds histogram\n"
                            "test_seconds_bucket{relist_source=\"global\",le=\"1\"} 1\n"
                            "test_seconds_bucket{relist_source=\"global\",le=\"+Inf\"} 2\n"
                            "test_seconds_sum{relist_source=\"global\"} 3.5\n"
                            "test_seconds_count{relist_source=\"global\"} 2\n");

    /* A reset hides the series at zero; the handles stay valid and show them again. */
    pleg_metric_reset(counter);
    pleg_metric_reset(gauge);
    pleg_metric_reset(hist);
    after_reset = expose(registry);
    ck_assert_str_eq(after_reset, hidden);
    ck_assert_double_eq(pleg_metric_get(counter, LV("global")), 0);
    ck_assert_uint_eq(pleg_metric_get_count(hist, LV("global")), 0);
    pleg_metric_series_add(global, 4.5);
    pleg_metric_series_set(level, -2.5);
    pleg_metric_series_observe(latency, 3);
    pleg_metric_series_observe(latency, 0.5);
    again = expose(registry);
    ck_assert_str_eq(again, shown);

    /* A gauge set to NaN shows NaN, however the NaN was made. */
    pleg_metric_series_set(level, -NAN);
    {
        g_autofree char *text = expose(registry);
        ck_assert_contains(text, "\ntest_level NaN\n");
    }
}
END_TEST

START_TEST(test_series_misuse)
{
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    g_autofree char *before = NULL, *after = NULL;
    PlegMetric *counter, *gauge, *hist;
    PlegMetricSeries *c, *g, *h;

    counter = pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "test_total", "T.",
                                    (const char *const[]){"reason", NULL}, NULL, 0);
    gauge = pleg_metrics_register(registry, PLEG_METRIC_GAUGE, "test_gauge", "G.", NULL, NULL, 0);
    hist =
        pleg_metrics_register(registry, PLEG_METRIC_HISTOGRAM, "test_seconds", "S.", NULL, NULL, 0);
    c = pleg_metric_get_series(counter, LV("a"));
    g = pleg_metric_get_series(gauge, NULL);
    h = pleg_metric_get_series(hist, NULL);
    pleg_metric_series_inc(c);
    before = expose(registry);

    /* Wrong label values give no handle; a wrong update leaves the series unchanged. */
    expect_critical_begin();
    ck_assert_ptr_null(pleg_metric_get_series(counter, NULL));
    ck_assert_ptr_null(pleg_metric_get_series(counter, LV("\xff")));
    ck_assert_ptr_null(pleg_metric_get_series(gauge, LV("extra")));
    pleg_metric_series_add(c, -1);
    pleg_metric_series_set(c, 5);
    pleg_metric_series_observe(c, 1);
    pleg_metric_series_observe(g, 1);
    pleg_metric_series_add(h, 1);
    pleg_metric_series_inc(h);
    pleg_metric_series_set(h, 1);
    ck_assert_uint_eq(expect_critical_end(), 10);
    after = expose(registry);
    ck_assert_str_eq(after, before);

    /* NULL costs nothing, so a refused metric's handle may be used as any other. */
    ck_assert_ptr_null(pleg_metric_get_series(NULL, NULL));
    pleg_metric_series_add(NULL, 1);
    pleg_metric_series_inc(NULL);
    pleg_metric_series_set(NULL, 1);
    pleg_metric_series_observe(NULL, 1);
}
END_TEST

#define N_THREADS    4
#define N_INCREMENTS 50000

static gpointer
hammer(gpointer data)
{
    PlegMetricsRegistry *registry = data;
    PlegMetric *counter = pleg_metrics_lookup(registry, "test_concurrent_total");
    PlegMetric *hist = pleg_metrics_lookup(registry, "test_concurrent_seconds");
    static const char *const sources[] = {"global", "post_sync"};

    for (guint i = 0; i < N_INCREMENTS; i++) {
        pleg_metric_inc(counter, LV(sources[i % 2]));
        pleg_metric_observe(hist, NULL, 0.25);
        if (i % 5000 == 0)
            g_free(pleg_metrics_registry_expose(registry));
    }
    return NULL;
}

START_TEST(test_concurrent)
{
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    GThread *threads[N_THREADS];
    PlegMetric *counter, *hist;

    counter = pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "test_concurrent_total", "C.",
                                    (const char *const[]){"relist_source", NULL}, NULL, 0);
    hist = pleg_metrics_register(registry, PLEG_METRIC_HISTOGRAM, "test_concurrent_seconds", "H.",
                                 NULL, NULL, 0);

    for (guint i = 0; i < N_THREADS; i++)
        threads[i] = g_thread_new("hammer", hammer, registry);
    for (guint i = 0; i < N_THREADS; i++)
        g_thread_join(threads[i]);

    ck_assert_double_eq(pleg_metric_get(counter, LV("global")), N_THREADS * N_INCREMENTS / 2);
    ck_assert_double_eq(pleg_metric_get(counter, LV("post_sync")), N_THREADS * N_INCREMENTS / 2);
    ck_assert_uint_eq(pleg_metric_get_count(hist, NULL), N_THREADS * N_INCREMENTS);
    ck_assert_double_eq(pleg_metric_get(hist, NULL), N_THREADS * N_INCREMENTS * 0.25);
}
END_TEST

static gpointer
hammer_series(gpointer data)
{
    PlegMetricsRegistry *registry = data;
    PlegMetric *counter = pleg_metrics_lookup(registry, "test_concurrent_total");
    PlegMetric *hist = pleg_metrics_lookup(registry, "test_concurrent_seconds");
    PlegMetricSeries *series[] = {
        pleg_metric_get_series(counter, LV("global")),
        pleg_metric_get_series(counter, LV("post_sync")),
    };
    PlegMetricSeries *observations = pleg_metric_get_series(hist, NULL);

    for (guint i = 0; i < N_INCREMENTS; i++) {
        pleg_metric_series_inc(series[i % 2]);
        pleg_metric_series_observe(observations, 0.25);
    }
    return NULL;
}

/* Lock-free counter updates lose no increment; a histogram's series is always read whole. */
START_TEST(test_concurrent_series)
{
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    GThread *threads[N_THREADS];
    PlegMetric *counter, *hist;
    guint n_exposed = 0;

    counter = pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "test_concurrent_total", "C.",
                                    (const char *const[]){"relist_source", NULL}, NULL, 0);
    hist = pleg_metrics_register(registry, PLEG_METRIC_HISTOGRAM, "test_concurrent_seconds", "H.",
                                 NULL, (const double[]){1}, 1);

    for (guint i = 0; i < N_THREADS; i++)
        threads[i] = g_thread_new("hammer", hammer_series, registry);
    /* While they run: every text has +Inf bucket == count == 4 * sum. */
    while (n_exposed < 200) {
        g_autofree char *text = pleg_metrics_registry_expose(registry);
        const char *inf = strstr(text, "test_concurrent_seconds_bucket{le=\"+Inf\"} ");
        const char *sum = strstr(text, "test_concurrent_seconds_sum ");
        const char *count = strstr(text, "test_concurrent_seconds_count ");
        double n_inf, n_sum, n_count;

        ck_assert(inf && sum && count);
        n_inf = g_ascii_strtod(strchr(inf, ' ') + 1, NULL);
        n_sum = g_ascii_strtod(strchr(sum, ' ') + 1, NULL);
        n_count = g_ascii_strtod(strchr(count, ' ') + 1, NULL);
        ck_assert_double_eq(n_inf, n_count);
        ck_assert_double_eq(n_sum * 4, n_count);
        n_exposed++;
    }
    for (guint i = 0; i < N_THREADS; i++)
        g_thread_join(threads[i]);

    ck_assert_double_eq(pleg_metric_get(counter, LV("global")), N_THREADS * N_INCREMENTS / 2);
    ck_assert_double_eq(pleg_metric_get(counter, LV("post_sync")), N_THREADS * N_INCREMENTS / 2);
    ck_assert_uint_eq(pleg_metric_get_count(hist, NULL), N_THREADS * N_INCREMENTS);
    ck_assert_double_eq(pleg_metric_get(hist, NULL), N_THREADS * N_INCREMENTS * 0.25);
}
END_TEST

START_TEST(test_refcount)
{
    PlegMetricsRegistry *registry = pleg_metrics_registry_new();
    PlegMetric *counter;

    counter =
        pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "test_total", "T.", NULL, NULL, 0);
    ck_assert_ptr_eq(pleg_metrics_registry_ref(registry), registry);
    pleg_metrics_registry_unref(registry);
    pleg_metric_inc(counter, NULL);
    ck_assert_double_eq(pleg_metric_get(counter, NULL), 1);
    pleg_metrics_registry_unref(registry);
    pleg_metrics_registry_unref(NULL);
}
END_TEST

/* A registry holding every kind, labelled and not, with values that need escaping; updated by
 * label values or through series handles, which must expose the same text. */
#define OBSERVE(m, lv, v)                                                                          \
    (through_series ? pleg_metric_series_observe(pleg_metric_get_series((m), (lv)), (v))           \
                    : pleg_metric_observe((m), (lv), (v)))
#define ADD(m, lv, v)                                                                              \
    (through_series ? pleg_metric_series_add(pleg_metric_get_series((m), (lv)), (v))               \
                    : pleg_metric_add((m), (lv), (v)))
#define SET(m, lv, v)                                                                              \
    (through_series ? pleg_metric_series_set(pleg_metric_get_series((m), (lv)), (v))               \
                    : pleg_metric_set((m), (lv), (v)))
static PlegMetricsRegistry *
full_registry_updated(gboolean through_series)
{
    PlegMetricsRegistry *registry = pleg_metrics_registry_new();
    PlegMetric *m;

    m = pleg_metrics_register(registry, PLEG_METRIC_HISTOGRAM,
                              "kubelet_pleg_relist_duration_seconds",
                              "Duration in seconds for relisting pods in PLEG.", NULL, NULL, 0);
    OBSERVE(m, NULL, 0.007);
    OBSERVE(m, NULL, 0.3);
    OBSERVE(m, NULL, 42);

    pleg_metrics_register(registry, PLEG_METRIC_HISTOGRAM,
                          "kubelet_pleg_pod_relist_duration_seconds",
                          "Duration in seconds for relisting one pod.", NULL, NULL, 0);

    m = pleg_metrics_register(
        registry, PLEG_METRIC_HISTOGRAM, "kubelet_evented_pleg_connection_latency_seconds",
        "Latency, by source.", (const char *const[]){"source", NULL}, (const double[]){0.1, 1}, 2);
    OBSERVE(m, LV("a"), 0.05);
    OBSERVE(m, LV("b\\\"\n"), 5);

    m = pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "kubelet_pleg_events_total",
                              "Events by relist source.\nSecond line with a \\ backslash.",
                              (const char *const[]){"relist_source", NULL}, NULL, 0);
    ADD(m, LV("global"), 12);
    ADD(m, LV("post_sync"), 3);
    ADD(m, LV("evented_pleg"), 0.5);

    pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "kubelet_pleg_unused_total",
                          "Never incremented.", NULL, NULL, 0);
    pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "kubelet_pleg_labelled_unused_total",
                          "Labelled, never incremented.", (const char *const[]){"reason", NULL},
                          NULL, 0);

    m = pleg_metrics_register(registry, PLEG_METRIC_GAUGE, "kubelet_pleg_last_seen_seconds",
                              "Timestamp in seconds when PLEG was last seen active.", NULL, NULL,
                              0);
    SET(m, NULL, 1795966735.123456);

    m = pleg_metrics_register(registry, PLEG_METRIC_GAUGE, "kubelet_running_containers",
                              "Number of containers currently running.",
                              (const char *const[]){"container_state", NULL}, NULL, 0);
    SET(m, LV("running"), 3);
    SET(m, LV("exited"), 1);
    SET(m, LV("unknown"), NAN);
    SET(m, LV("created"), -INFINITY);

    m = pleg_metrics_register(registry, PLEG_METRIC_GAUGE, "kubelet_running_pods",
                              "Number of pods that have a running pod sandbox.", NULL, NULL, 0);
    SET(m, NULL, 2);
    return registry;
}

static PlegMetricsRegistry *
full_registry(void)
{
    return full_registry_updated(FALSE);
}

/* Updating by label values and through handles renders the same text, byte for byte. */
START_TEST(test_series_golden)
{
    g_autoptr(PlegMetricsRegistry) by_labels = full_registry_updated(FALSE);
    g_autoptr(PlegMetricsRegistry) by_series = full_registry_updated(TRUE);
    g_autofree char *a = pleg_metrics_registry_expose(by_labels);
    g_autofree char *b = pleg_metrics_registry_expose(by_series);

    ck_assert_str_eq(b, a);
}
END_TEST

START_TEST(test_promtool)
{
    g_autoptr(PlegMetricsRegistry) registry = full_registry();
    g_autofree char *text = pleg_metrics_registry_expose(registry);
    g_autofree char *promtool = g_find_program_in_path("promtool");
    g_autoptr(GSubprocess) proc = NULL;
    g_autoptr(GError) error = NULL;
    g_autofree char *out = NULL, *err = NULL;
    gboolean ok;

    /* CI installs prometheus: a missing promtool is a failure, not a reason to skip. */
    ck_assert_msg(promtool != NULL, "promtool not found in PATH (install prometheus)");

    proc = g_subprocess_new(G_SUBPROCESS_FLAGS_STDIN_PIPE | G_SUBPROCESS_FLAGS_STDOUT_PIPE |
                                G_SUBPROCESS_FLAGS_STDERR_PIPE,
                            &error, promtool, "check", "metrics", NULL);
    ck_assert_msg(proc != NULL, "spawning %s: %s", promtool, error ? error->message : "?");
    ck_assert_msg(g_subprocess_communicate_utf8(proc, text, NULL, &out, &err, &error),
                  "promtool: %s", error ? error->message : "?");
    g_subprocess_wait(proc, NULL, NULL);
    ok = g_subprocess_get_if_exited(proc) && g_subprocess_get_exit_status(proc) == 0;
    /* Check limits the size of a failure message: the details go to stderr. */
    if (!ok)
        g_printerr("promtool check metrics failed.\nInput:\n%s\nstdout:\n%s\nstderr:\n%s\n", text,
                   out, err);
    ck_assert_msg(ok, "promtool check metrics failed (details on stderr)");
}
END_TEST

START_TEST(test_golden)
{
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    g_autofree char *text = NULL;
    PlegMetric *m;

    /* Registered out of order on purpose: exposition sorts by name. */
    m = pleg_metrics_register(registry, PLEG_METRIC_GAUGE, "kubelet_running_pods",
                              "Number of pods that have a running pod sandbox", NULL, NULL, 0);
    pleg_metric_set(m, NULL, 4);
    m = pleg_metrics_register(
        registry, PLEG_METRIC_HISTOGRAM, "kubelet_pleg_relist_interval_seconds",
        "Interval in seconds between relisting in PLEG.", NULL, (const double[]){0.5, 1, 2.5}, 3);
    pleg_metric_observe(m, NULL, 1.0);
    pleg_metric_observe(m, NULL, 1.25);
    m = pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "kubelet_pleg_discard_events",
                              "The number of discard events in PLEG.", NULL, NULL, 0);
    m = pleg_metrics_register(registry, PLEG_METRIC_COUNTER, "kubelet_pleg_events_total",
                              "PLEG events by relist source",
                              (const char *const[]){"relist_source", NULL}, NULL, 0);
    pleg_metric_add(m, LV("post_sync"), 2);
    pleg_metric_add(m, LV("global"), 10);

    text = pleg_metrics_registry_expose(registry);
    ck_assert_str_eq(text,
                     "# HELP kubelet_pleg_discard_events The number of discard events in PLEG.\n"
                     "# TYPE kubelet_pleg_discard_events counter\n"
                     "kubelet_pleg_discard_events 0\n"
                     "# HELP kubelet_pleg_events_total PLEG events by relist source\n"
                     "# TYPE kubelet_pleg_events_total counter\n"
                     "kubelet_pleg_events_total{relist_source=\"global\"} 10\n"
                     "kubelet_pleg_events_total{relist_source=\"post_sync\"} 2\n"
                     "# HELP kubelet_pleg_relist_interval_seconds Interval in seconds between "
                     "relisting in PLEG.\n"
                     "# TYPE kubelet_pleg_relist_interval_seconds histogram\n"
                     "kubelet_pleg_relist_interval_seconds_bucket{le=\"0.5\"} 0\n"
                     "kubelet_pleg_relist_interval_seconds_bucket{le=\"1\"} 1\n"
                     "kubelet_pleg_relist_interval_seconds_bucket{le=\"2.5\"} 2\n"
                     "kubelet_pleg_relist_interval_seconds_bucket{le=\"+Inf\"} 2\n"
                     "kubelet_pleg_relist_interval_seconds_sum 2.25\n"
                     "kubelet_pleg_relist_interval_seconds_count 2\n"
                     "# HELP kubelet_running_pods Number of pods that have a running pod "
                     "sandbox\n"
                     "# TYPE kubelet_running_pods gauge\n"
                     "kubelet_running_pods 4\n");
}
END_TEST

/* ---- collectors ---- */

typedef struct {
    PlegMetric *gauge;
    guint n_calls;
    guint n_destroyed;
    char *order; /* which collectors ran, in order */
    const char *name;
} Collected;

static void
collect_count(PlegMetricsRegistry *registry, gpointer data)
{
    Collected *c = data;
    PlegMetric *late;

    c->n_calls++;
    pleg_metric_set(c->gauge, NULL, c->n_calls);
    /* No lock of the registry is held: registering from a collector does not deadlock. */
    late = pleg_metrics_register(registry, PLEG_METRIC_GAUGE, "test_collected_late", "L.", NULL,
                                 NULL, 0);
    pleg_metric_set(late, NULL, 7);
}

static void
collected_destroyed(gpointer data)
{
    Collected *c = data;

    c->n_destroyed++;
}

/* A collector runs before every exposition and what it sets is in that exposition; removed,
 * it runs no more and its destroy notify runs once. */
START_TEST(test_collector)
{
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    Collected c = {0};
    g_autofree char *first = NULL, *second = NULL, *third = NULL;
    guint id;

    c.gauge = pleg_metrics_register(registry, PLEG_METRIC_GAUGE, "test_collected", "C.", NULL,
                                    NULL, 0);
    id = pleg_metrics_registry_add_collector(registry, collect_count, &c, collected_destroyed);
    ck_assert_uint_ne(id, 0);
    ck_assert_uint_eq(c.n_calls, 0);

    first = pleg_metrics_registry_expose(registry);
    ck_assert_contains(first, "\ntest_collected 1\n");
    ck_assert_contains(first, "\ntest_collected_late 7\n");
    second = pleg_metrics_registry_expose(registry);
    ck_assert_contains(second, "\ntest_collected 2\n");

    pleg_metrics_registry_remove_collector(registry, id);
    ck_assert_uint_eq(c.n_destroyed, 1);
    third = pleg_metrics_registry_expose(registry);
    ck_assert_uint_eq(c.n_calls, 2);
    ck_assert_contains(third, "\ntest_collected 2\n");

    /* Removing it again is a bug of the caller, and changes nothing. */
    expect_critical_begin();
    pleg_metrics_registry_remove_collector(registry, id);
    ck_assert_uint_eq(expect_critical_end(), 1);
    ck_assert_uint_eq(c.n_destroyed, 1);
}
END_TEST

#define ORDER_SIZE 16

static void
collect_named(PlegMetricsRegistry *registry, gpointer data)
{
    Collected *c = data;

    g_strlcat(c->order, c->name, ORDER_SIZE);
}

/* Collectors run in the order added; the registry's last unref destroys those left. */
START_TEST(test_collector_order_and_unref)
{
    PlegMetricsRegistry *registry = pleg_metrics_registry_new();
    char order[ORDER_SIZE] = "";
    Collected a = {.order = order, .name = "a"}, b = {.order = order, .name = "b"},
              c = {.order = order, .name = "c"};
    guint id_b;

    pleg_metrics_registry_add_collector(registry, collect_named, &a, collected_destroyed);
    id_b = pleg_metrics_registry_add_collector(registry, collect_named, &b, collected_destroyed);
    pleg_metrics_registry_add_collector(registry, collect_named, &c, NULL);
    g_free(pleg_metrics_registry_expose(registry));
    ck_assert_str_eq(order, "abc");

    pleg_metrics_registry_remove_collector(registry, id_b);
    order[0] = '\0';
    g_free(pleg_metrics_registry_expose(registry));
    ck_assert_str_eq(order, "ac");

    pleg_metrics_registry_unref(registry);
    ck_assert_uint_eq(a.n_destroyed, 1);
    ck_assert_uint_eq(b.n_destroyed, 1);
}
END_TEST

/* A collector blocked in one thread's exposition while another thread removes it. */
typedef struct {
    GMutex lock;
    GCond cond;
    gboolean entered;
    gboolean go;
    guint n_destroyed;
} Blocking;

static void
collect_blocking(PlegMetricsRegistry *registry, gpointer data)
{
    Blocking *b = data;

    g_mutex_lock(&b->lock);
    b->entered = TRUE;
    g_cond_broadcast(&b->cond);
    while (!b->go)
        g_cond_wait(&b->cond, &b->lock);
    g_mutex_unlock(&b->lock);
}

static void
blocking_destroyed(gpointer data)
{
    Blocking *b = data;

    g_mutex_lock(&b->lock);
    b->n_destroyed++;
    g_mutex_unlock(&b->lock);
}

static gpointer
expose_thread(gpointer registry)
{
    return pleg_metrics_registry_expose(registry);
}

/* Removing a collector never waits for one that runs; its data lives until it returns. */
START_TEST(test_collector_remove_while_running)
{
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    Blocking b = {0};
    g_autofree char *text = NULL;
    GThread *thread;
    gint64 deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
    guint id;

    g_mutex_init(&b.lock);
    g_cond_init(&b.cond);
    id = pleg_metrics_registry_add_collector(registry, collect_blocking, &b, blocking_destroyed);
    thread = g_thread_new("expose", expose_thread, registry);

    g_mutex_lock(&b.lock);
    while (!b.entered)
        ck_assert_msg(g_cond_wait_until(&b.cond, &b.lock, deadline), "the collector never ran");
    g_mutex_unlock(&b.lock);

    pleg_metrics_registry_remove_collector(registry, id);
    g_mutex_lock(&b.lock);
    ck_assert_uint_eq(b.n_destroyed, 0);
    b.go = TRUE;
    g_cond_broadcast(&b.cond);
    g_mutex_unlock(&b.lock);

    text = g_thread_join(thread);
    ck_assert_uint_eq(b.n_destroyed, 1);
    g_mutex_clear(&b.lock);
    g_cond_clear(&b.cond);
}
END_TEST

static Suite *
metrics_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, test_counter);
    tcase_add_test(tc, test_gauge);
    tcase_add_test(tc, test_histogram);
    tcase_add_test(tc, test_histogram_buckets);
    tcase_add_test(tc, test_labels);
    tcase_add_test(tc, test_label_keys);
    tcase_add_test(tc, test_registration);
    tcase_add_test(tc, test_registration_reasons);
    tcase_add_test(tc, test_escaping);
    tcase_add_test(tc, test_number_format);
    tcase_add_test(tc, test_series);
    tcase_add_test(tc, test_series_misuse);
    tcase_add_test(tc, test_series_golden);
    tcase_add_test(tc, test_concurrent);
    tcase_add_test(tc, test_concurrent_series);
    tcase_add_test(tc, test_refcount);
    tcase_add_test(tc, test_promtool);
    tcase_add_test(tc, test_golden);
    tcase_add_test(tc, test_collector);
    tcase_add_test(tc, test_collector_order_and_unref);
    tcase_add_test(tc, test_collector_remove_while_running);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *runner = srunner_create(metrics_suite());
    int failed;

    g_log_set_writer_func(log_writer, NULL, NULL);
    srunner_run_all(runner, CK_NORMAL);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
