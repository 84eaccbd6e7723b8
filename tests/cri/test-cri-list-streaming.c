/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CRI list streaming (KEP-5825, gate CRIListStreaming): the CRI client lists through
 * StreamPodSandboxes / StreamContainers, falls back to the unary RPCs on UNIMPLEMENTED and
 * probes the streams again, and a Generic PLEG on top of it gives the same events, and fails
 * a relist the same way, whichever path it lists by.  Against cri-sim over real gRPC.
 */
#include <check.h>
#include <string.h>

#include <glib/gstdio.h>

#include <pleg/pleg.h>

#include "cri-sim.h"

#define PROBE_USEC   (200 * 1000)
#define WAIT_USEC    (20 * G_USEC_PER_SEC)
#define STATUS_UNAVAILABLE 14

typedef struct {
    char *dir;
    CriSim *sim;
    char *endpoint;
    /* the notices a client gave, as "streaming", "fallback" or "too-large" */
    GPtrArray *notices;
    GMutex notices_lock;
} Fixture;

static Fixture *
fixture_new(void)
{
    Fixture *fx = g_new0(Fixture, 1);
    g_autoptr(GError) error = NULL;
    g_autofree char *socket_path = NULL;

    fx->dir = g_dir_make_tmp("pleg-list-streaming-XXXXXX", &error);
    ck_assert_ptr_nonnull(fx->dir);
    socket_path = g_build_filename(fx->dir, "cri.sock", NULL);
    fx->sim = cri_sim_new(socket_path, &error);
    ck_assert_msg(fx->sim, "%s", error ? error->message : "");
    fx->endpoint = g_strconcat("unix://", socket_path, NULL);
    fx->notices = g_ptr_array_new_with_free_func(g_free);
    g_mutex_init(&fx->notices_lock);
    return fx;
}

static void
fixture_free(Fixture *fx)
{
    cri_sim_free(fx->sim);
    g_rmdir(fx->dir);
    g_free(fx->dir);
    g_free(fx->endpoint);
    g_ptr_array_unref(fx->notices);
    g_mutex_clear(&fx->notices_lock);
    g_free(fx);
}
G_DEFINE_AUTOPTR_CLEANUP_FUNC(Fixture, fixture_free)

static void
on_notice(PlegCriClient *client, PlegCriListNotice notice, const GError *reason,
          gpointer user_data)
{
    Fixture *fx = user_data;
    static const char *const names[] = {"streaming", "fallback", "too-large"};

    g_mutex_lock(&fx->notices_lock);
    g_ptr_array_add(fx->notices, g_strdup(names[notice]));
    g_mutex_unlock(&fx->notices_lock);
}

static char *
notices_str(Fixture *fx)
{
    g_autoptr(GString) text = g_string_new(NULL);

    g_mutex_lock(&fx->notices_lock);
    for (guint i = 0; i < fx->notices->len; i++)
        g_string_append_printf(text, "%s%s", i ? "," : "", (char *)fx->notices->pdata[i]);
    g_mutex_unlock(&fx->notices_lock);
    return g_string_free(g_steal_pointer(&text), FALSE);
}

/* A client with the gate on (@streaming) or off, noticing into @fx. */
static PlegCriClient *
client_new(Fixture *fx, gboolean streaming)
{
    g_autoptr(GError) error = NULL;
    PlegCriClient *client = pleg_cri_client_new(fx->endpoint, 10 * G_USEC_PER_SEC, &error);

    ck_assert_msg(client, "%s", error ? error->message : "");
    pleg_cri_client_set_list_streaming(client, streaming, PROBE_USEC);
    pleg_cri_client_set_list_notice_func(client, on_notice, fx, NULL);
    return client;
}

static int
compare_strings(gconstpointer a, gconstpointer b)
{
    return g_strcmp0(*(char *const *)a, *(char *const *)b);
}

/* The ids of a listing of PlegContainer or PlegPodSandbox (both start with their id), sorted. */
static char *
ids_str(GPtrArray *items)
{
    g_autoptr(GPtrArray) ids = g_ptr_array_new();
    g_autoptr(GString) text = g_string_new(NULL);

    for (guint i = 0; i < items->len; i++)
        g_ptr_array_add(ids, *(char **)items->pdata[i]);
    g_ptr_array_sort(ids, compare_strings);
    for (guint i = 0; i < ids->len; i++)
        g_string_append_printf(text, "%s%s", i ? "," : "", (char *)ids->pdata[i]);
    return g_string_free(g_steal_pointer(&text), FALSE);
}

static char *
list_containers_str(PlegRuntime *runtime, const char *sandbox_id)
{
    g_autoptr(GPtrArray) containers = NULL;
    g_autoptr(GError) error = NULL;

    ck_assert_msg(pleg_runtime_list_containers(runtime, sandbox_id, &containers, NULL, &error),
                  "%s", error ? error->message : "");
    return ids_str(containers);
}

static char *
list_sandboxes_str(PlegRuntime *runtime)
{
    g_autoptr(GPtrArray) sandboxes = NULL;
    g_autoptr(GError) error = NULL;

    ck_assert_msg(pleg_runtime_list_pod_sandboxes(runtime, &sandboxes, NULL, &error), "%s",
                  error ? error->message : "");
    return ids_str(sandboxes);
}

/* ---- the client ---- */

/* The streams carry the same listing as the unary RPCs, in several messages, and targeted
 * listings carry their filter. */
START_TEST(test_streams_list_the_same)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(PlegCriClient) unary = client_new(fx, FALSE);
    g_autoptr(PlegCriClient) streams = client_new(fx, TRUE);
    g_autoptr(PlegRuntime) unary_runtime = pleg_cri_client_as_runtime(unary);
    g_autoptr(PlegRuntime) stream_runtime = pleg_cri_client_as_runtime(streams);
    g_autofree char *unary_containers = NULL, *stream_containers = NULL;
    g_autofree char *unary_sandboxes = NULL, *stream_sandboxes = NULL;
    g_autofree char *unary_one = NULL, *stream_one = NULL;
    g_autofree char *sandbox_id = NULL;
    g_autoptr(GPtrArray) of_pod = NULL;
    g_autoptr(GError) error = NULL;

    cri_sim_bulk(fx->sim, 23, 3);
    cri_sim_set_list_batch(fx->sim, 7); /* 69 containers: 10 messages, 23 sandboxes: 4 */

    unary_containers = list_containers_str(unary_runtime, NULL);
    stream_containers = list_containers_str(stream_runtime, NULL);
    ck_assert_str_eq(stream_containers, unary_containers);
    unary_sandboxes = list_sandboxes_str(unary_runtime);
    stream_sandboxes = list_sandboxes_str(stream_runtime);
    ck_assert_str_eq(stream_sandboxes, unary_sandboxes);
    ck_assert_uint_eq(cri_sim_get_n_calls(fx->sim, "StreamContainers"), 1);
    ck_assert_uint_eq(cri_sim_get_n_calls(fx->sim, "StreamPodSandboxes"), 1);
    ck_assert_uint_eq(cri_sim_get_n_calls(fx->sim, "ListContainers"), 1);
    ck_assert_int_eq(pleg_cri_client_get_list_path(streams), PLEG_CRI_LIST_STREAMING);
    ck_assert_int_eq(pleg_cri_client_get_list_path(unary), PLEG_CRI_LIST_UNARY);

    /* A targeted relist's listings: one pod's sandboxes by label, one sandbox's containers. */
    sandbox_id = cri_sim_get_sandbox_id(fx->sim, "bulk-5");
    unary_one = list_containers_str(unary_runtime, sandbox_id);
    stream_one = list_containers_str(stream_runtime, sandbox_id);
    ck_assert_str_eq(stream_one, "bulk-5-0,bulk-5-1,bulk-5-2");
    ck_assert_str_eq(stream_one, unary_one);
    ck_assert(pleg_runtime_list_pod_sandboxes_of_pod(stream_runtime, "bulk-5", &of_pod, NULL,
                                                     &error));
    ck_assert_uint_eq(of_pod->len, 1);
    ck_assert_str_eq(((PlegPodSandbox *)of_pod->pdata[0])->id, sandbox_id);
    ck_assert_uint_eq(cri_sim_get_n_calls(fx->sim, "StreamPodSandboxes"), 2);
    ck_assert_uint_eq(cri_sim_get_n_calls(fx->sim, "ListPodSandbox"), 1);

    /* The first stream said so, once; the unary client said nothing. */
    g_autofree char *notices = notices_str(fx);
    ck_assert_str_eq(notices, "streaming");
}
END_TEST

/* UNIMPLEMENTED: the same listing answers through the unary RPC, later listings stay unary
 * until the probe interval has passed, and a runtime that starts serving the streams is picked
 * up by the next probe.  Each change is noticed once. */
START_TEST(test_unimplemented_falls_back_and_recovers)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(PlegCriClient) client = client_new(fx, TRUE);
    g_autoptr(PlegRuntime) runtime = pleg_cri_client_as_runtime(client);
    gint64 deadline = g_get_monotonic_time() + WAIT_USEC;
    g_autofree char *first = NULL, *second = NULL, *notices = NULL;
    guint probes;

    cri_sim_bulk(fx->sim, 4, 2);
    cri_sim_set_list_streams_unimplemented(fx->sim, TRUE);

    first = list_containers_str(runtime, NULL);
    ck_assert_str_eq(first, "bulk-0-0,bulk-0-1,bulk-1-0,bulk-1-1,bulk-2-0,bulk-2-1,bulk-3-0,"
                            "bulk-3-1");
    ck_assert_int_eq(pleg_cri_client_get_list_path(client), PLEG_CRI_LIST_UNARY_FALLBACK);
    ck_assert_uint_eq(cri_sim_get_n_calls(fx->sim, "StreamContainers"), 1);
    ck_assert_uint_eq(cri_sim_get_n_calls(fx->sim, "ListContainers"), 1);

    /* Within the probe interval: unary only (the two calls cannot be PROBE_USEC apart on any
     * machine that runs these tests; if they are, the assertion below says so). */
    {
        gint64 start = g_get_monotonic_time();

        second = list_containers_str(runtime, NULL);
        if (g_get_monotonic_time() - start < PROBE_USEC)
            ck_assert_uint_eq(cri_sim_get_n_calls(fx->sim, "StreamContainers"), 1);
    }
    ck_assert_str_eq(second, first);

    /* Probes that fail again say nothing more. */
    while (cri_sim_get_n_calls(fx->sim, "StreamContainers") < 3 &&
           g_get_monotonic_time() < deadline) {
        g_autofree char *again = list_containers_str(runtime, NULL);

        ck_assert_str_eq(again, first);
        g_usleep(PROBE_USEC / 4);
    }
    ck_assert_uint_ge(cri_sim_get_n_calls(fx->sim, "StreamContainers"), 3);
    notices = notices_str(fx);
    ck_assert_str_eq(notices, "fallback");

    /* The runtime is upgraded in place: the next probe streams, and it sticks. */
    cri_sim_set_list_streams_unimplemented(fx->sim, FALSE);
    while (pleg_cri_client_get_list_path(client) != PLEG_CRI_LIST_STREAMING &&
           g_get_monotonic_time() < deadline) {
        g_autofree char *again = list_containers_str(runtime, NULL);

        ck_assert_str_eq(again, first);
        g_usleep(PROBE_USEC / 4);
    }
    ck_assert_int_eq(pleg_cri_client_get_list_path(client), PLEG_CRI_LIST_STREAMING);
    probes = cri_sim_get_n_calls(fx->sim, "StreamContainers");
    {
        g_autofree char *again = list_containers_str(runtime, NULL);

        ck_assert_str_eq(again, first);
    }
    ck_assert_uint_eq(cri_sim_get_n_calls(fx->sim, "StreamContainers"), probes + 1);
    g_free(notices);
    notices = notices_str(fx);
    ck_assert_str_eq(notices, "fallback,streaming");
}
END_TEST

/* A stream that fails after some messages fails the listing with the runtime's status, and
 * returns nothing of what had arrived; the path stays streaming (no fallback on errors). */
START_TEST(test_mid_stream_failure_fails_the_listing)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(PlegCriClient) client = client_new(fx, TRUE);
    g_autoptr(PlegRuntime) runtime = pleg_cri_client_as_runtime(client);
    g_autoptr(GPtrArray) containers = NULL;
    g_autoptr(GError) error = NULL;
    g_autofree char *all = NULL;

    cri_sim_bulk(fx->sim, 10, 3);
    cri_sim_set_list_batch(fx->sim, 4);
    all = list_containers_str(runtime, NULL);

    cri_sim_set_list_stream_failure(fx->sim, 2, STATUS_UNAVAILABLE);
    ck_assert(!pleg_runtime_list_containers(runtime, NULL, &containers, NULL, &error));
    ck_assert_ptr_null(containers);
    ck_assert_msg(g_error_matches(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_UNAVAILABLE), "%s",
                  error->message);
    ck_assert_msg(strstr(error->message, "StreamContainers") &&
                      strstr(error->message, "after 2 messages"),
                  "%s", error->message);
    ck_assert_int_eq(pleg_cri_client_get_list_path(client), PLEG_CRI_LIST_STREAMING);
    ck_assert_uint_eq(cri_sim_get_n_calls(fx->sim, "ListContainers"), 0);

    cri_sim_set_list_stream_failure(fx->sim, 0, 0);
    {
        g_autofree char *again = list_containers_str(runtime, NULL);

        ck_assert_str_eq(again, all);
    }
}
END_TEST

/* ---- a Generic PLEG on either path ---- */

typedef struct {
    PlegCriClient *client;
    PlegRuntime *runtime;
    PlegGeneric *pleg;
    PlegEventChannel *channel;
} Pleg;

static Pleg *
pleg_new(Fixture *fx, gboolean streaming)
{
    Pleg *p = g_new0(Pleg, 1);
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    PlegGenericConfig config;

    pleg_generic_config_init(&config);
    p->client = client_new(fx, streaming);
    p->runtime = pleg_cri_client_as_runtime(p->client);
    p->pleg = pleg_generic_new(p->runtime, &config, registry);
    p->channel = pleg_generic_subscribe(p->pleg, 0);
    return p;
}

static void
pleg_free(Pleg *p)
{
    pleg_generic_free(p->pleg);
    pleg_runtime_unref(p->runtime);
    pleg_cri_client_unref(p->client);
    g_free(p);
}
G_DEFINE_AUTOPTR_CLEANUP_FUNC(Pleg, pleg_free)

/* Relists and returns the events it delivered, as "pod type container exit", sorted. */
static char *
relist_events(Pleg *p, gboolean expect_ok)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(GPtrArray) lines = g_ptr_array_new_with_free_func(g_free);
    g_autoptr(GString) text = g_string_new(NULL);
    PlegPodLifecycleEvent *event;

    ck_assert_msg(pleg_generic_relist(p->pleg, &error) == expect_ok, "%s",
                  error ? error->message : "relist succeeded");
    while ((event = pleg_event_channel_pop(p->channel, 0))) {
        g_ptr_array_add(lines, g_strdup_printf(
                                   "%s %s %s %d", event->pod_uid,
                                   pleg_pod_lifecycle_event_type_to_string(event->type),
                                   event->container_id ? event->container_id : "-",
                                   event->has_exit ? event->exit_code : -1));
        pleg_pod_lifecycle_event_unref(event);
    }
    g_ptr_array_sort(lines, compare_strings);
    for (guint i = 0; i < lines->len; i++)
        g_string_append_printf(text, "%s%s", i ? "; " : "", (char *)lines->pdata[i]);
    return g_string_free(g_steal_pointer(&text), FALSE);
}

static void
run(Fixture *fx, const char *command)
{
    g_autoptr(GError) error = NULL;
    gboolean quit;

    ck_assert_msg(cri_sim_run_command(fx->sim, command, &quit, &error), "%s: %s", command,
                  error ? error->message : "");
}

/* The gate on and off give the same events from the same runtime, step by step. */
START_TEST(test_same_events_either_path)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(Pleg) unary = pleg_new(fx, FALSE);
    g_autoptr(Pleg) streams = pleg_new(fx, TRUE);
    static const char *const steps[][4] = {
        {"pod p1", "container p1 c1", "container p1 c2", NULL},
        {"start c1", "start c2", "pod p2", "container p2 c3"},
        {"exit c1 7", "start c3", NULL, NULL},
        {"rm c1", "exit c2 0", "exit c3 137", NULL},
        {"rmp p1", NULL, NULL, NULL},
        {"rmp p2", NULL, NULL, NULL},
    };

    cri_sim_set_list_batch(fx->sim, 1);
    for (gsize i = 0; i < G_N_ELEMENTS(steps); i++) {
        g_autofree char *a = NULL, *b = NULL;

        for (gsize j = 0; j < G_N_ELEMENTS(steps[i]) && steps[i][j]; j++)
            run(fx, steps[i][j]);
        a = relist_events(unary, TRUE);
        b = relist_events(streams, TRUE);
        ck_assert_msg(g_str_equal(a, b), "step %zu: unary \"%s\", streams \"%s\"", i, a, b);
        ck_assert_msg(*a, "step %zu gave no event", i);
    }
    ck_assert_int_eq(pleg_cri_client_get_list_path(streams->client), PLEG_CRI_LIST_STREAMING);
    ck_assert_uint_eq(cri_sim_get_n_calls(fx->sim, "StreamContainers"), G_N_ELEMENTS(steps));
}
END_TEST

/* A global relist hands the PLEG its listing item by item (pleg_runtime_visit_listing()); one
 * whose streams turn out unimplemented lists unary within the same relist, and must give the
 * events a unary PLEG gives.  (What a restart drops is tests/core/test-listing.c's.) */
START_TEST(test_same_events_when_streams_unimplemented)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(Pleg) unary = pleg_new(fx, FALSE);
    g_autoptr(Pleg) streams = pleg_new(fx, TRUE);
    g_autofree char *a = NULL, *b = NULL;

    cri_sim_set_list_streams_unimplemented(fx->sim, TRUE);
    run(fx, "pod p1");
    run(fx, "container p1 c1");
    run(fx, "start c1");
    a = relist_events(unary, TRUE);
    b = relist_events(streams, TRUE);
    ck_assert_str_eq(a, b);
    ck_assert_msg(*a, "the relist gave no event");
    ck_assert_int_eq(pleg_cri_client_get_list_path(streams->client), PLEG_CRI_LIST_UNARY_FALLBACK);
    /* The sandboxes' stream was refused; the containers then went unary with them. */
    ck_assert_uint_eq(cri_sim_get_n_calls(fx->sim, "StreamPodSandboxes"), 1);
}
END_TEST

/* What a relist leaves behind after a listing error: the pod cache entry, the last relist time
 * and health, and the events found once the runtime answers again. */
typedef struct {
    char *events;
    gint64 last_relist_time;
    gint64 global_timestamp;
    gboolean healthy;
    char *cached;
} Outcome;

static void
outcome_clear(Outcome *o)
{
    g_free(o->events);
    g_free(o->cached);
}
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(Outcome, outcome_clear)

static char *
cached_str(Pleg *p, const char *pod_uid)
{
    g_autoptr(PlegPodStatus) status = NULL;
    g_autoptr(GString) text = g_string_new(NULL);

    if (!pleg_pod_cache_get(pleg_generic_get_cache(p->pleg), pod_uid, &status, NULL, NULL))
        return g_strdup("none");
    for (guint i = 0; i < status->container_statuses->len; i++) {
        const PlegContainerStatus *c = status->container_statuses->pdata[i];

        g_string_append_printf(text, "%s=%s/%d ", c->id, pleg_container_state_to_string(c->state),
                               c->exit_code);
    }
    return g_string_free(g_steal_pointer(&text), FALSE);
}

static void
failed_relist_outcome(Pleg *p, Outcome *o)
{
    o->events = relist_events(p, FALSE);
    o->last_relist_time = pleg_generic_get_last_relist_time(p->pleg);
    o->global_timestamp = pleg_pod_cache_get_global_timestamp(pleg_generic_get_cache(p->pleg));
    o->healthy = pleg_generic_healthy(p->pleg, NULL);
    o->cached = cached_str(p, "p1");
}

/* A stream that fails mid-way leaves records, cache and health exactly as a unary listing error
 * does: no event, last relist time and global timestamp not advanced; and the next good relist
 * finds the same events on both paths. */
START_TEST(test_mid_stream_failure_like_unary_failure)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(Pleg) unary = pleg_new(fx, FALSE);
    g_autoptr(Pleg) streams = pleg_new(fx, TRUE);
    g_auto(Outcome) a = {0}, b = {0};
    g_autofree char *ea = NULL, *eb = NULL, *sa = NULL, *sb = NULL;
    gint64 before_a, before_b;

    cri_sim_bulk(fx->sim, 40, 2);
    run(fx, "pod p1");
    run(fx, "container p1 c1");
    run(fx, "start c1");
    cri_sim_set_list_batch(fx->sim, 10);
    g_free(relist_events(unary, TRUE));
    g_free(relist_events(streams, TRUE));
    before_a = pleg_generic_get_last_relist_time(unary->pleg);
    before_b = pleg_generic_get_last_relist_time(streams->pleg);
    sa = cached_str(unary, "p1");

    run(fx, "exit c1 3");
    /* The unary PLEG's ListContainers fails; the streaming PLEG's stream fails after 3 of 9
     * messages (81 containers, 10 a message). */
    cri_sim_set_fail(fx->sim, "ListContainers", STATUS_UNAVAILABLE, 1);
    failed_relist_outcome(unary, &a);
    cri_sim_set_list_stream_failure(fx->sim, 3, STATUS_UNAVAILABLE);
    failed_relist_outcome(streams, &b);
    cri_sim_set_list_stream_failure(fx->sim, 0, 0);

    ck_assert_str_eq(a.events, "");
    ck_assert_str_eq(b.events, a.events);
    ck_assert_int_eq(a.last_relist_time, before_a);
    ck_assert_int_eq(b.last_relist_time, before_b);
    ck_assert_int_eq(a.global_timestamp, before_a);
    ck_assert_int_eq(b.global_timestamp, before_b);
    ck_assert_int_eq(b.healthy, a.healthy);
    ck_assert_str_eq(a.cached, sa);
    ck_assert_str_eq(b.cached, a.cached);

    ea = relist_events(unary, TRUE);
    eb = relist_events(streams, TRUE);
    ck_assert_str_eq(ea, "p1 ContainerDied c1 3");
    ck_assert_str_eq(eb, ea);
    sb = cached_str(streams, "p1");
    ck_assert_str_eq(sb, "c1=exited/3 ");
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("cri-list-streaming");
    TCase *tc = tcase_create("client");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_streams_list_the_same);
    tcase_add_test(tc, test_unimplemented_falls_back_and_recovers);
    tcase_add_test(tc, test_mid_stream_failure_fails_the_listing);
    suite_add_tcase(s, tc);

    tc = tcase_create("pleg");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_same_events_either_path);
    tcase_add_test(tc, test_same_events_when_streams_unimplemented);
    tcase_add_test(tc, test_mid_stream_failure_like_unary_failure);
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
