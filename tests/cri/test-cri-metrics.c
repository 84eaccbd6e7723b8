/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the CRI client counts (pleg_cri_client_set_metrics()): kubelet's runtime operation
 * metrics by operation_type, with kubelet's buckets; a listing as one operation whatever RPCs
 * it took; each status call timed on its own; the event stream's end; and the Generic PLEG's
 * pleg_relist_failures_total by the gRPC code that failed a relist.  Against cri-sim.
 */
#include <check.h>
#include <string.h>

#include <glib/gstdio.h>
#include <pleg/pleg.h>

#include "cri-private.h"
#include "cri-sim.h"

#define LV(...) ((const char *const[]){__VA_ARGS__, NULL})

typedef struct {
    char *dir;
    char *path;
    CriSim *sim;
    PlegMetricsRegistry *registry;
    PlegCriClient *client;
    PlegRuntime *runtime;
} Fixture;

static Fixture *
fixture_new(void)
{
    Fixture *fx = g_new0(Fixture, 1);
    g_autoptr(GError) error = NULL;

    fx->dir = g_dir_make_tmp("pleg-cri-metrics-XXXXXX", &error);
    ck_assert_ptr_nonnull(fx->dir);
    fx->path = g_build_filename(fx->dir, "cri.sock", NULL);
    fx->sim = cri_sim_new(fx->path, &error);
    ck_assert_msg(fx->sim != NULL, "cri-sim: %s", error ? error->message : "?");
    ck_assert(cri_sim_add_pod(fx->sim, "u1", "web", &error));
    ck_assert(cri_sim_add_container(fx->sim, "u1", "c1", "app", &error));
    ck_assert(cri_sim_start_container(fx->sim, "c1", &error));

    fx->registry = pleg_metrics_registry_new();
    fx->client = pleg_cri_client_new(fx->path, 30 * G_USEC_PER_SEC, &error);
    ck_assert_ptr_nonnull(fx->client);
    pleg_cri_client_set_metrics(fx->client, fx->registry);
    fx->runtime = pleg_cri_client_as_runtime(fx->client);
    return fx;
}

static void
fixture_free(Fixture *fx)
{
    pleg_runtime_unref(fx->runtime);
    pleg_cri_client_unref(fx->client);
    pleg_metrics_registry_unref(fx->registry);
    cri_sim_free(fx->sim);
    g_unlink(fx->path);
    g_rmdir(fx->dir);
    g_free(fx->path);
    g_free(fx->dir);
    g_free(fx);
}
G_DEFINE_AUTOPTR_CLEANUP_FUNC(Fixture, fixture_free)

static double
ops(Fixture *fx, const char *operation_type)
{
    return pleg_metric_get(pleg_metrics_lookup(fx->registry, "kubelet_runtime_operations_total"),
                           LV(operation_type));
}

static double
errors(Fixture *fx, const char *operation_type)
{
    return pleg_metric_get(
        pleg_metrics_lookup(fx->registry, "kubelet_runtime_operations_errors_total"),
        LV(operation_type));
}

static PlegMetric *
durations(Fixture *fx)
{
    return pleg_metrics_lookup(fx->registry, "kubelet_runtime_operations_duration_seconds");
}

#define ck_assert_contains(haystack, needle)                                                       \
    ck_assert_msg(strstr((haystack), (needle)) != NULL, "expected \"%s\" in:\n%s", (needle),       \
                  (haystack))

/* Every operation type is shown at 0 before any call, with kubelet's names. */
START_TEST(test_series_from_the_start)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autofree char *text = pleg_metrics_registry_expose(fx->registry);
    static const char *const types[] = {"version",          "list_podsandbox",
                                        "list_containers",  "podsandbox_status",
                                        "container_status", "get_container_events"};

    for (gsize i = 0; i < G_N_ELEMENTS(types); i++) {
        g_autofree char *total =
            g_strdup_printf("\nkubelet_runtime_operations_total{operation_type=\"%s\"} 0\n",
                            types[i]);
        g_autofree char *failed = g_strdup_printf(
            "\nkubelet_runtime_operations_errors_total{operation_type=\"%s\"} 0\n", types[i]);

        ck_assert_contains(text, total);
        ck_assert_contains(text, failed);
    }
    ck_assert_contains(text, "# TYPE kubelet_runtime_operations_duration_seconds histogram\n");
    ck_assert_contains(text, "# TYPE pleg_cri_listing_over_limit_total counter\n");
}
END_TEST

/* Each call is one operation of kubelet's type; a failed one is an error too, NOT_FOUND
 * included; every one is timed. */
START_TEST(test_operations_counted)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GError) error = NULL;
    g_autoptr(GPtrArray) sandboxes = NULL;
    g_autoptr(GPtrArray) containers = NULL;
    g_autoptr(GPtrArray) of_pod = NULL;
    g_autoptr(PlegPodSandboxStatus) sandbox = NULL;
    g_autoptr(PlegContainerStatus) container = NULL;
    g_autoptr(PlegContainerStatus) gone = NULL;
    g_autofree char *sandbox_id = cri_sim_get_sandbox_id(fx->sim, "u1");

    ck_assert(pleg_cri_client_version(fx->client, NULL, NULL, NULL, &error));
    ck_assert(pleg_runtime_list_pod_sandboxes(fx->runtime, &sandboxes, NULL, &error));
    ck_assert(pleg_runtime_list_containers(fx->runtime, NULL, &containers, NULL, &error));
    ck_assert(pleg_runtime_list_containers(fx->runtime, sandbox_id, &of_pod, NULL, &error));
    sandbox = pleg_runtime_pod_sandbox_status(fx->runtime, sandbox_id, NULL, &error);
    ck_assert_ptr_nonnull(sandbox);
    container = pleg_runtime_container_status(fx->runtime, "c1", NULL, &error);
    ck_assert_ptr_nonnull(container);
    gone = pleg_runtime_container_status(fx->runtime, "no-such", NULL, &error);
    ck_assert(g_error_matches(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_NOT_FOUND));

    ck_assert_double_eq(ops(fx, "version"), 1);
    ck_assert_double_eq(ops(fx, "list_podsandbox"), 1);
    ck_assert_double_eq(ops(fx, "list_containers"), 2);
    ck_assert_double_eq(ops(fx, "podsandbox_status"), 1);
    ck_assert_double_eq(ops(fx, "container_status"), 2);
    ck_assert_double_eq(ops(fx, "get_container_events"), 0);
    ck_assert_double_eq(errors(fx, "container_status"), 1);
    ck_assert_double_eq(errors(fx, "list_containers"), 0);
    ck_assert_double_eq(errors(fx, "version"), 0);
    ck_assert_uint_eq(pleg_metric_get_count(durations(fx), LV("list_containers")), 2);
    ck_assert_uint_eq(pleg_metric_get_count(durations(fx), LV("container_status")), 2);
    ck_assert_uint_eq(pleg_metric_get_count(durations(fx), LV("version")), 1);

    /* A runtime that answers with an error: UNAVAILABLE, then DEADLINE_EXCEEDED. */
    cri_sim_set_fail(fx->sim, "ListPodSandbox", 14, 1);
    g_clear_error(&error);
    ck_assert(!pleg_runtime_list_pod_sandboxes(fx->runtime, &sandboxes, NULL, &error));
    cri_sim_set_fail(fx->sim, "Version", 4, 1);
    g_clear_error(&error);
    ck_assert(!pleg_cri_client_version(fx->client, NULL, NULL, NULL, &error));
    ck_assert_double_eq(ops(fx, "list_podsandbox"), 2);
    ck_assert_double_eq(errors(fx, "list_podsandbox"), 1);
    ck_assert_double_eq(errors(fx, "version"), 1);
}
END_TEST

/* kubelet's buckets for the durations: 5 ms times 2.5 to the power 0 to 13, as kubelet's
 * exposition spells them. */
START_TEST(test_kubelet_buckets)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GError) error = NULL;
    g_autoptr(GPtrArray) sandboxes = NULL;
    g_autofree char *text = NULL;
    static const char *const le[] = {
        "0.005",          "0.0125",          "0.03125",           "0.078125",
        "0.1953125",      "0.48828125",      "1.220703125",       "3.0517578125",
        "7.62939453125",  "19.073486328125", "47.6837158203125",  "119.20928955078125",
        "298.0232238769531", "745.0580596923828", "+Inf",
    };
    const char *p;

    ck_assert(pleg_runtime_list_pod_sandboxes(fx->runtime, &sandboxes, NULL, &error));
    text = pleg_metrics_registry_expose(fx->registry);
    p = text;
    /* How many fall below each bound depends on the runtime's speed: the +Inf bucket has it. */
    for (gsize i = 0; i < G_N_ELEMENTS(le); i++) {
        g_autofree char *line = g_strdup_printf(
            "kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"list_podsandbox\","
            "le=\"%s\"} %s",
            le[i], i == G_N_ELEMENTS(le) - 1 ? "1\n" : "");

        p = strstr(p, line);
        ck_assert_msg(p != NULL, "no bucket line \"%s\" (in order) in:\n%s", line, text);
    }
}
END_TEST

/* With CRIListStreaming on and a runtime without the streams, a listing asks the stream, is
 * answered UNIMPLEMENTED and asks the unary RPC: one operation, no error, as kubelet counts its
 * ListPodSandbox. */
START_TEST(test_listing_is_one_operation)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GError) error = NULL;
    g_autoptr(GPtrArray) sandboxes = NULL;
    g_autoptr(GPtrArray) containers = NULL;

    cri_sim_set_list_streams_unimplemented(fx->sim, TRUE);
    pleg_cri_client_set_list_streaming(fx->client, TRUE, 0);
    ck_assert(pleg_runtime_list_pod_sandboxes(fx->runtime, &sandboxes, NULL, &error));
    ck_assert_uint_eq(cri_sim_get_n_calls(fx->sim, "StreamPodSandboxes"), 1);
    ck_assert_uint_eq(cri_sim_get_n_calls(fx->sim, "ListPodSandbox"), 1);
    ck_assert_double_eq(ops(fx, "list_podsandbox"), 1);
    ck_assert_double_eq(errors(fx, "list_podsandbox"), 0);

    /* Through the stream, which fails mid-listing: one operation, one error. */
    cri_sim_set_list_streams_unimplemented(fx->sim, FALSE);
    pleg_cri_client_set_list_streaming(fx->client, TRUE, 0);
    cri_sim_set_list_stream_failure(fx->sim, 0, 14);
    ck_assert(!pleg_runtime_list_containers(fx->runtime, NULL, &containers, NULL, &error));
    ck_assert_uint_eq(cri_sim_get_n_calls(fx->sim, "StreamContainers"), 1);
    ck_assert_uint_eq(cri_sim_get_n_calls(fx->sim, "ListContainers"), 0);
    ck_assert_double_eq(ops(fx, "list_containers"), 1);
    ck_assert_double_eq(errors(fx, "list_containers"), 1);
}
END_TEST

/* Status calls in flight together are each timed from their own start to their own end: a
 * slow ContainerStatus does not lengthen the PodSandboxStatus beside it. */
START_TEST(test_status_calls_timed_each)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autofree char *sandbox_id = cri_sim_get_sandbox_id(fx->sim, "u1");
    PlegStatusQuery queries[2] = {{.pod_sandbox_id = sandbox_id}, {.container_id = "c1"}};

    g_autoptr(GPtrArray) sandboxes = NULL;

    /* Connected first, so that neither call carries the connection's setup. */
    ck_assert(pleg_runtime_list_pod_sandboxes(fx->runtime, &sandboxes, NULL, NULL));
    cri_sim_set_delay(fx->sim, "ContainerStatus", 600);
    pleg_runtime_get_statuses(fx->runtime, queries, G_N_ELEMENTS(queries), NULL);
    ck_assert_ptr_null(queries[0].error);
    ck_assert_ptr_null(queries[1].error);
    ck_assert_double_ge(pleg_metric_get(durations(fx), LV("container_status")), 0.6);
    ck_assert_double_lt(pleg_metric_get(durations(fx), LV("podsandbox_status")), 0.4);
    ck_assert_double_eq(ops(fx, "podsandbox_status"), 1);
    ck_assert_double_eq(ops(fx, "container_status"), 1);
    for (gsize i = 0; i < G_N_ELEMENTS(queries); i++)
        pleg_status_query_clear(&queries[i]);
}
END_TEST

/* A call its caller cancelled counts, but not as an error. */
START_TEST(test_cancelled_no_error)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GError) error = NULL;
    g_autoptr(GCancellable) cancellable = g_cancellable_new();
    g_autoptr(GPtrArray) containers = NULL;

    g_cancellable_cancel(cancellable);
    ck_assert(!pleg_runtime_list_containers(fx->runtime, NULL, &containers, cancellable, &error));
    ck_assert(g_error_matches(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_CANCELLED));
    ck_assert_double_eq(ops(fx, "list_containers"), 1);
    ck_assert_double_eq(errors(fx, "list_containers"), 0);
}
END_TEST

/* A Generic PLEG over the client counts each failed global relist by the gRPC code of the
 * call that failed it, and nothing for one that succeeds. */
START_TEST(test_relist_failures_by_reason)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GError) error = NULL;
    PlegGenericConfig config;
    PlegGeneric *pleg;
    PlegMetric *failures;

    pleg_generic_config_init(&config);
    pleg = pleg_generic_new(fx->runtime, &config, fx->registry);
    failures = pleg_metrics_lookup(fx->registry, "pleg_relist_failures_total");
    ck_assert(pleg_generic_relist(pleg, &error));

    cri_sim_set_fail(fx->sim, "ListPodSandbox", 14, 2);
    ck_assert(!pleg_generic_relist(pleg, NULL));
    ck_assert(!pleg_generic_relist(pleg, NULL));
    cri_sim_set_fail(fx->sim, "ListContainers", 4, 1);
    ck_assert(!pleg_generic_relist(pleg, NULL));
    ck_assert(pleg_generic_relist(pleg, &error));

    ck_assert_double_eq(pleg_metric_get(failures, LV("unavailable")), 2);
    ck_assert_double_eq(pleg_metric_get(failures, LV("deadline_exceeded")), 1);
    ck_assert_double_eq(pleg_metric_get(failures, LV("other")), 0);
    ck_assert_double_eq(errors(fx, "list_podsandbox"), 2);
    ck_assert_double_eq(errors(fx, "list_containers"), 1);
    pleg_generic_free(pleg);
}
END_TEST

/* ---- the event stream's end (the hook the host counts get_container_events with) ---- */

typedef struct {
    guint n_calls;
    gint64 duration_usec;
    GError *error;
    gboolean destroyed;
} Ended;

static void
on_ended(gint64 duration_usec, const GError *error, gpointer data)
{
    Ended *ended = data;

    ended->n_calls++;
    ended->duration_usec = duration_usec;
    g_clear_error(&ended->error);
    ended->error = error ? g_error_copy(error) : NULL;
}

static void
on_ended_destroy(gpointer data)
{
    Ended *ended = data;

    ended->destroyed = TRUE;
}

/* Opens a stream on @fx's runtime with on_ended() watching it, and waits until cri-sim has it. */
static PlegContainerEventStream *
open_watched(Fixture *fx, CriChannel *channel, Ended *ended)
{
    g_autoptr(GError) error = NULL;
    PlegContainerEventStream *stream = cri_container_events_open(channel, &error);

    ck_assert_msg(stream != NULL, "%s", error ? error->message : "?");
    cri_container_events_set_end_func(stream, on_ended, ended, on_ended_destroy);
    ck_assert(cri_sim_wait_subscribers(fx->sim, 1, 10000));
    return stream;
}

START_TEST(test_events_end)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GError) error = NULL;
    g_autoptr(CriChannel) channel = cri_channel_new(fx->path, &error);
    PlegContainerEventStream *stream;
    PlegContainerEvent *event = NULL;
    Ended ended = {0};

    /* Ended by the runtime with an error: told once, with the error, however often read. */
    stream = open_watched(fx, channel, &ended);
    cri_sim_end_streams(fx->sim, 14, "going away");
    ck_assert(!cri_container_events_read(stream, &event, &error));
    g_clear_error(&error);
    ck_assert(!cri_container_events_read(stream, &event, &error));
    g_clear_error(&error);
    ck_assert_uint_eq(ended.n_calls, 1);
    ck_assert(g_error_matches(ended.error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_UNAVAILABLE));
    ck_assert_int_ge(ended.duration_usec, 0);
    ck_assert(!ended.destroyed);
    cri_container_events_free(stream);
    ck_assert_uint_eq(ended.n_calls, 1);
    ck_assert(ended.destroyed);
    ck_assert(cri_sim_wait_subscribers(fx->sim, 0, 10000));

    /* A clean end: no error. */
    g_clear_error(&ended.error);
    ended = (Ended){0};
    stream = open_watched(fx, channel, &ended);
    cri_sim_end_streams(fx->sim, 0, NULL);
    ck_assert(cri_container_events_read(stream, &event, &error));
    ck_assert_ptr_null(event);
    ck_assert_uint_eq(ended.n_calls, 1);
    ck_assert_ptr_null(ended.error);
    cri_container_events_free(stream);
    ck_assert_uint_eq(ended.n_calls, 1);
    ck_assert(cri_sim_wait_subscribers(fx->sim, 0, 10000));

    /* Freed while open: ended then, without an error. */
    ended = (Ended){0};
    stream = open_watched(fx, channel, &ended);
    cri_container_events_free(stream);
    ck_assert_uint_eq(ended.n_calls, 1);
    ck_assert_ptr_null(ended.error);
    ck_assert(ended.destroyed);
}
END_TEST

static Suite *
cri_metrics_suite(void)
{
    Suite *s = suite_create("cri-metrics");
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_series_from_the_start);
    tcase_add_test(tc, test_operations_counted);
    tcase_add_test(tc, test_kubelet_buckets);
    tcase_add_test(tc, test_listing_is_one_operation);
    tcase_add_test(tc, test_status_calls_timed_each);
    tcase_add_test(tc, test_cancelled_no_error);
    tcase_add_test(tc, test_relist_failures_by_reason);
    tcase_add_test(tc, test_events_end);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *runner = srunner_create(cri_metrics_suite());
    int failed;

    srunner_run_all(runner, CK_NORMAL);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
