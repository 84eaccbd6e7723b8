/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd on a node whose listing no longer fits one unary answer (over the 16 MiB a CRI client
 * accepts): with CRIListStreaming it relists through the list streams (KEP-5825); without it,
 * it says once, clearly, that the node has outgrown unary listing and names the gate; and a
 * runtime that answers the streams UNIMPLEMENTED is said once and listed unary.  Against
 * cri-sim in this process.
 */
#include <signal.h>
#include <string.h>

#include "cri-sim.h"
#include "plegd-runner.h"

/* 50 pods of 40 containers, each listed with a 13,000-byte annotation: ListContainers answers
 * about 26 MiB, while the first relist inspects only 2,050 objects (fast enough under
 * ThreadSanitizer too). */
#define HUGE_PODS         50
#define HUGE_CONTAINERS   40
#define HUGE_ANNOTATION   13000
#define OUTGROWN          "outgrown unary listing"
#define FALLBACK          "does not serve the CRI list streams"
#define STREAMING         "through the CRI list streams"

typedef struct {
    char *dir;
    char *endpoint_arg;
    CriSim *sim;
} Fixture;

static Fixture fixture;

static void
setup(void)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *socket_path = NULL;

    fixture.dir = make_tmpdir();
    socket_path = g_build_filename(fixture.dir, "cri.sock", NULL);
    fixture.endpoint_arg = g_strdup_printf("--container-runtime-endpoint=unix://%s", socket_path);
    fixture.sim = cri_sim_new(socket_path, &error);
    ck_assert_msg(fixture.sim, "%s", error ? error->message : "");
}

static void
teardown(void)
{
    g_clear_pointer(&fixture.sim, cri_sim_free);
    remove_tmpdir(fixture.dir);
    g_clear_pointer(&fixture.dir, g_free);
    g_clear_pointer(&fixture.endpoint_arg, g_free);
}

/* Lines of @text that contain @needle. */
static guint
count_lines(const char *text, const char *needle)
{
    g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
    guint n = 0;

    for (char **line = lines; *line; line++)
        if (strstr(*line, needle))
            n++;
    return n;
}

/* Waits until cri-sim has answered @method at least @n times. */
static void
wait_calls(const char *method, guint n)
{
    gint64 deadline = g_get_monotonic_time() + 60 * G_USEC_PER_SEC;

    while (cri_sim_get_n_calls(fixture.sim, method) < n && g_get_monotonic_time() < deadline)
        g_usleep(20 * 1000);
    ck_assert_msg(cri_sim_get_n_calls(fixture.sim, method) >= n, "%s: %u calls, not %u", method,
                  cri_sim_get_n_calls(fixture.sim, method), n);
}

static char *
metrics(PlegdRunner *plegd)
{
    g_autofree char *url = plegd_runner_wait_metrics_url(plegd);
    g_autofree char *metrics_url = g_strconcat(url, "/metrics", NULL);
    char *body = NULL;

    ck_assert_uint_eq(http_request("GET", metrics_url, &body, NULL), 200);
    return body;
}

START_TEST(test_huge_listing_streams)
{
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autofree char *body = NULL;
    g_autofree char *err = NULL;

    cri_sim_bulk_full(fixture.sim, HUGE_PODS, HUGE_CONTAINERS, HUGE_ANNOTATION);
    /* 500 of these containers a message, 6.6 MiB: each message must fit what a client accepts
     * (containerd's 5,000 a message assume containers of about 1 KiB). */
    cri_sim_set_list_batch(fixture.sim, 500);
    plegd = plegd_runner_spawn(NULL, fixture.endpoint_arg, "--relist-period=1s",
                               "--metrics-bind-address=127.0.0.1:0", "--plugin-dir=",
                               "--feature-gates=CRIListStreaming=true");
    assert_stderr_shows(plegd, "first relist succeeded with 50 pods; ready");
    ck_assert_uint_eq(cri_sim_get_n_calls(fixture.sim, "ListContainers"), 0);
    ck_assert_uint_ge(cri_sim_get_n_calls(fixture.sim, "StreamContainers"), 1);
    body = metrics(plegd);
    ck_assert_msg(strstr(body, "kubelet_cri_streaming_enabled{service=\"runtime\"} 1\n"), "%s",
                  body);
    /* The host exports the CRI client's count of listings stopped at their bounds. */
    ck_assert_msg(strstr(body, "# TYPE pleg_cri_listing_over_limit_total counter\n"), "%s", body);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(count_lines(err, STREAMING) == 1, "%s", err);
    ck_assert_msg(count_lines(err, OUTGROWN) == 0, "%s", err);
}
END_TEST

START_TEST(test_huge_listing_without_the_gate)
{
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autofree char *body = NULL;
    g_autofree char *err = NULL;

    cri_sim_bulk_full(fixture.sim, HUGE_PODS, HUGE_CONTAINERS, HUGE_ANNOTATION);
    plegd = plegd_runner_spawn(NULL, fixture.endpoint_arg, "--relist-period=200ms",
                               "--metrics-bind-address=127.0.0.1:0", "--plugin-dir=");
    assert_stderr_shows(plegd, OUTGROWN);
    /* Three more relists that fail the same way say nothing more; plegd keeps retrying. */
    wait_calls("ListContainers", 4);
    body = metrics(plegd);
    ck_assert_msg(!strstr(body, "kubelet_cri_streaming_enabled"), "%s", body);
    ck_assert_uint_eq(cri_sim_get_n_calls(fixture.sim, "StreamContainers"), 0);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(count_lines(err, OUTGROWN) == 1, "%s", err);
    ck_assert_msg(count_lines(err, "--feature-gates=CRIListStreaming=true") == 1, "%s", err);
    ck_assert_msg(count_lines(err, "; ready") == 0, "%s", err);
}
END_TEST

START_TEST(test_unimplemented_said_once)
{
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autofree char *body = NULL;
    g_autofree char *err = NULL;

    cri_sim_bulk(fixture.sim, 3, 2);
    cri_sim_set_list_streams_unimplemented(fixture.sim, TRUE);
    plegd = plegd_runner_spawn(NULL, fixture.endpoint_arg, "--relist-period=100ms",
                               "--metrics-bind-address=127.0.0.1:0", "--plugin-dir=",
                               "--feature-gates=CRIListStreaming=true");
    assert_stderr_shows(plegd, "first relist succeeded with 3 pods; ready");
    wait_calls("ListContainers", 5);
    body = metrics(plegd);
    ck_assert_msg(strstr(body, "kubelet_cri_streaming_enabled{service=\"runtime\"} 0\n"), "%s",
                  body);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(count_lines(err, FALLBACK) == 1, "%s", err);
    ck_assert_msg(strstr(err, "trying the streams again every 5m0s"), "%s", err);
    /* The first listing asked, and within the probe interval the streams are not asked again. */
    ck_assert_uint_eq(cri_sim_get_n_calls(fixture.sim, "StreamPodSandboxes") +
                          cri_sim_get_n_calls(fixture.sim, "StreamContainers"),
                      1);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("plegd-list-streaming");
    TCase *tc = tcase_create("huge");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_huge_listing_streams);
    tcase_add_test(tc, test_huge_listing_without_the_gate);
    tcase_add_test(tc, test_unimplemented_said_once);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *runner = srunner_create(suite());
    int failed;

    srunner_run_all(runner, CK_NORMAL);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
