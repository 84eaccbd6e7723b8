/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fake plugin host (tests/harness/fake-host.h) driving a small in-test plugin.
 */
#include <check.h>
#include <malloc.h>
#include <glib/gstdio.h>

#include "fake-cri-server.h"
#include "fake-host.h"
#include "pleg-services.h"

#define WAIT_USEC (5 * G_USEC_PER_SEC)

typedef struct {
    const PlegHostServices *services;
    GSource *idle;
    GThread *thread;
    PlegMetric *counter;
    gboolean healthy;
    gboolean in_context_init;
    gboolean in_context_idle;
} Demo;

/* The state of the last demo plugin initialised, for assertions. */
static Demo *last_demo;

static gboolean
demo_check(gpointer user_data, GError **error)
{
    Demo *demo = user_data;

    if (!demo->healthy)
        g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_FAILED, "demo is sick");
    return demo->healthy;
}

static gboolean
demo_init(const PlegHostServices *services, gpointer *ret_state, GError **error)
{
    Demo *demo = g_new0(Demo, 1);
    const char *labels[] = {"reason", NULL};
    const GLogField fields[] = {
        {"MESSAGE", "demo initialised", -1},
        {"DEMO_FIELD", "xyz", 3},
    };

    demo->services = services;
    demo->healthy = TRUE;
    demo->in_context_init =
        g_main_context_is_owner(services->get_main_context(services->host)) &&
        g_main_context_get_thread_default() == services->get_main_context(services->host);
    demo->counter = services->metric_register(services->host, PLEG_METRIC_COUNTER,
                                              "demo_things_total", "Things.", labels, NULL, 0);
    services->add_health_checker(services->host, "demo", demo_check, demo, NULL);
    services->log(services->host, G_LOG_LEVEL_DEBUG, fields, G_N_ELEMENTS(fields));
    last_demo = demo;
    *ret_state = demo;
    return TRUE;
}

static gboolean
demo_idle(gpointer user_data)
{
    Demo *demo = user_data;
    const char *values[] = {"idle", NULL};

    demo->in_context_idle =
        g_main_context_is_owner(demo->services->get_main_context(demo->services->host));
    demo->services->request_relist(demo->services->host, "uid-idle",
                                   PLEG_PLUGIN_RELIST_SOURCE_EVENTED_PLEG);
    demo->services->metric_add(demo->counter, values, 1);
    return G_SOURCE_REMOVE;
}

static gpointer
demo_thread(gpointer user_data)
{
    Demo *demo = user_data;

    demo->services->request_relist(demo->services->host, "uid-thread",
                                   PLEG_PLUGIN_RELIST_SOURCE_POST_SYNC);
    return NULL;
}

static gboolean
demo_start(gpointer state, GError **error)
{
    Demo *demo = state;

    demo->idle = g_idle_source_new();
    g_source_set_callback(demo->idle, demo_idle, demo, NULL);
    g_source_attach(demo->idle, demo->services->get_main_context(demo->services->host));
    demo->thread = g_thread_new("demo", demo_thread, demo);
    return TRUE;
}

static void
demo_stop(gpointer state)
{
    Demo *demo = state;

    if (demo->idle) {
        g_source_destroy(demo->idle);
        g_clear_pointer(&demo->idle, g_source_unref);
    }
    if (demo->thread)
        g_thread_join(g_steal_pointer(&demo->thread));
}

static void
demo_free(gpointer state)
{
    g_free(state);
}

static const PlegPluginDescriptor demo_descriptor = {
    .abi_major = PLEG_PLUGIN_ABI_MAJOR,
    .abi_minor = PLEG_PLUGIN_ABI_MINOR,
    .size = sizeof(PlegPluginDescriptor),
    .name = "demo",
    .init = demo_init,
    .start = demo_start,
    .stop = demo_stop,
    .free = demo_free,
};

static gboolean
fail_start(gpointer state, GError **error)
{
    g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_FAILED, "no");
    return FALSE;
}

static const PlegPluginDescriptor failing_descriptor = {
    .abi_major = PLEG_PLUGIN_ABI_MAJOR,
    .name = "failing",
    .init = demo_init,
    .start = fail_start,
    .stop = demo_stop,
    .free = demo_free,
};

static gboolean
find_call(GPtrArray *calls, const char *uid, PlegPluginRelistSource source)
{
    for (guint i = 0; i < calls->len; i++) {
        const FakeRelistCall *call = g_ptr_array_index(calls, i);

        if (g_str_equal(call->pod_uid, uid) && call->source == source && call->monotonic_usec > 0)
            return TRUE;
    }
    return FALSE;
}

static void
note_progress(const char *checker, gpointer user_data)
{
    g_string_append_printf(user_data, "%s,", checker);
}

START_TEST(test_services_recorded)
{
    g_autoptr(GString) progress = g_string_new(NULL);
    g_autoptr(FakeHost) host = fake_host_new();
    const PlegHostServices *services = fake_host_get_services(host);
    g_autoptr(GError) error = NULL;
    g_autoptr(GPtrArray) calls = NULL;
    g_autoptr(GPtrArray) logs = NULL;
    g_autofree char *names = NULL;
    g_autofree char *checker = NULL;
    const char *values[] = {"idle", NULL};
    Demo *demo;

    ck_assert_uint_eq(services->size, sizeof(PlegHostServices));
    ck_assert_ptr_eq(services->get_main_context(services->host), fake_host_get_context(host));
    ck_assert_ptr_ne(fake_host_get_context(host), g_main_context_default());
    fake_host_set_gate(host, "EventedPLEG", TRUE);
    ck_assert(services->feature_enabled(services->host, "EventedPLEG"));
    ck_assert(!services->feature_enabled(services->host, "Unknown"));
    fake_host_set_request_relist_result(host, 1);

    ck_assert(fake_host_start_plugin(host, &demo_descriptor, &error));
    ck_assert(fake_host_wait_relist_count(host, 2, WAIT_USEC));
    calls = fake_host_get_relist_calls(host);
    ck_assert(find_call(calls, "uid-idle", PLEG_PLUGIN_RELIST_SOURCE_EVENTED_PLEG));
    ck_assert(find_call(calls, "uid-thread", PLEG_PLUGIN_RELIST_SOURCE_POST_SYNC));
    ck_assert_int_eq(services->request_relist(services->host, "x", 2), 1);
    ck_assert_uint_eq(fake_host_get_relist_count(host), 3);
    fake_host_clear_relist_calls(host);
    ck_assert_uint_eq(fake_host_get_relist_count(host), 0);

    ck_assert_double_eq(
        pleg_metric_get(pleg_metrics_lookup(fake_host_get_metrics(host), "demo_things_total"),
                        values),
        1);

    names = fake_host_get_health_checker_names(host);
    ck_assert_str_eq(names, "demo");
    ck_assert(services->check_health(services->host, NULL, NULL));
    demo = last_demo;
    ck_assert(demo->in_context_init);
    ck_assert(demo->in_context_idle);
    demo->healthy = FALSE;
    ck_assert(!services->check_health(services->host, &checker, &error));
    ck_assert_str_eq(checker, "demo");
    ck_assert_str_eq(error->message, "demo is sick");
    g_clear_error(&error);
    g_clear_pointer(&checker, g_free);
    /* ABI 1.1: the same round, naming each checker before it runs. */
    ck_assert_uint_ge(services->abi_minor, 1);
    ck_assert(!services->check_health_progress(services->host, note_progress, progress,
                                               &checker, &error));
    ck_assert_str_eq(progress->str, "demo,");
    ck_assert_str_eq(checker, "demo");
    g_clear_error(&error);
    demo->healthy = TRUE;
    ck_assert(services->check_health_progress(services->host, NULL, NULL, NULL, NULL));
    demo->healthy = FALSE;
    logs = fake_host_get_logs(host);
    ck_assert_uint_eq(logs->len, 1);
    ck_assert_str_eq(g_hash_table_lookup(logs->pdata[0], "MESSAGE"), "demo initialised");
    ck_assert_str_eq(g_hash_table_lookup(logs->pdata[0], "DEMO_FIELD"), "xyz");
    ck_assert_str_eq(g_hash_table_lookup(logs->pdata[0], "GLIB_DOMAIN"), "pleg-demo");
    ck_assert_str_eq(g_hash_table_lookup(logs->pdata[0], "PRIORITY"), "7");
    ck_assert_uint_eq(fake_host_count_logs(host, "DEMO_FIELD", "xyz"), 1);
    ck_assert_uint_eq(fake_host_get_log_count(host), 1);
    fake_host_clear_logs(host);
    ck_assert_uint_eq(fake_host_get_log_count(host), 0);

    fake_host_stop_plugin(host);
    fake_host_stop_plugin(host);
    g_clear_pointer(&names, g_free);
    names = fake_host_get_health_checker_names(host);
    /* The demo plugin does not remove its checker: the fake keeps what was registered. */
    ck_assert_str_eq(names, "demo");
}
END_TEST

/* ---- set_status (ABI 1.2) ---- */

static gpointer
set_status_late(gpointer user_data)
{
    const PlegHostServices *services = user_data;

    services->set_status(services->host, "late", "from another thread");
    return NULL;
}

/* Waits until the wall clock has moved past @usec (microseconds), so that a change of state
 * is seen as a later time. */
static void
wait_real_time_after(gint64 usec)
{
    gint64 deadline = g_get_monotonic_time() + WAIT_USEC;

    while (g_get_real_time() <= usec && g_get_monotonic_time() < deadline)
        g_usleep(100);
    ck_assert_int_gt(g_get_real_time(), usec);
}

/* The host's status of the plugin is @state with @message; returns when the state changed. */
static gint64
assert_status(FakeHost *host, const char *state, const char *message)
{
    g_autofree char *got_state = NULL;
    g_autofree char *got_message = NULL;
    gint64 since = 0;

    ck_assert(fake_host_get_status(host, &got_state, &got_message, &since));
    ck_assert_str_eq(got_state, state);
    ck_assert_str_eq(got_message, message);
    return since;
}

/* The status keeps the time of the last change of state, not of the last call; invalid words
 * change nothing; it goes with the plugin's free. */
START_TEST(test_status)
{
    g_autoptr(FakeHost) host = fake_host_new();
    const PlegHostServices *services = fake_host_get_services(host);
    g_autoptr(GError) error = NULL;
    g_autofree char *longest = g_strnfill(PLEG_PLUGIN_STATUS_STATE_MAX, 'a');
    g_autofree char *too_long = g_strnfill(PLEG_PLUGIN_STATUS_STATE_MAX + 1, 'a');
    const char *const invalid[] = {"Connected", "", "a b", "-x", "9lives", "caf\xc3\xa9", too_long};
    gint64 before, since, since2;
    GThread *thread;

    ck_assert_uint_ge(services->abi_minor, 2);
    ck_assert_ptr_nonnull(services->set_status);
    ck_assert(fake_host_start_plugin(host, &demo_descriptor, &error));
    ck_assert(!fake_host_get_status(host, NULL, NULL, NULL));

    before = g_get_real_time();
    services->set_status(services->host, "connected", "connected since then");
    since = assert_status(host, "connected", "connected since then");
    ck_assert_int_ge(since, before);
    ck_assert_int_le(since, g_get_real_time());

    /* The same state again: a new message, the same time. */
    wait_real_time_after(since);
    services->set_status(services->host, "connected", "still connected");
    ck_assert_int_eq(assert_status(host, "connected", "still connected"), since);

    /* Another state: a later time; no message is "". */
    services->set_status(services->host, "disconnected", NULL);
    since2 = assert_status(host, "disconnected", "");
    ck_assert_int_gt(since2, since);

    /* Not lowercase words: ignored. */
    for (guint i = 0; i < G_N_ELEMENTS(invalid); i++)
        services->set_status(services->host, invalid[i], "ignored");
    services->set_status(services->host, NULL, "ignored");
    ck_assert_int_eq(assert_status(host, "disconnected", ""), since2);
    services->set_status(services->host, longest, "the longest word");
    assert_status(host, longest, "the longest word");
    services->set_status(services->host, "re-try2", "digits and dashes");
    assert_status(host, "re-try2", "digits and dashes");

    /* From a plugin's own thread, seen by a waiter. */
    thread = g_thread_new("late", set_status_late, (gpointer)services);
    ck_assert(fake_host_wait_status(host, "late", WAIT_USEC));
    g_thread_join(thread);

    fake_host_stop_plugin(host);
    ck_assert(!fake_host_get_status(host, NULL, NULL, NULL));
}
END_TEST

static gboolean
sick_check(gpointer user_data, GError **error)
{
    g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_FAILED, "sick");
    return FALSE;
}

static gboolean
ok_check(gpointer user_data, GError **error)
{
    (*(int *)user_data)++;
    return TRUE;
}

static void
count_destroy(gpointer user_data)
{
    (*(int *)user_data) += 100;
}

/* Fails without saying why. */
static gboolean
mute_check(gpointer user_data, GError **error)
{
    return FALSE;
}

START_TEST(test_health_checkers)
{
    g_autoptr(FakeHost) host = fake_host_new();
    const PlegHostServices *services = fake_host_get_services(host);
    g_autoptr(GError) error = NULL;
    g_autofree char *failed = NULL;
    g_autofree char *names = NULL;
    int calls = 0;
    guint a, b;

    names = fake_host_get_health_checker_names(host);
    ck_assert_str_eq(names, "");
    a = services->add_health_checker(services->host, "first", ok_check, &calls, count_destroy);
    b = services->add_health_checker(services->host, "second", sick_check, NULL, NULL);
    ck_assert_uint_gt(a, 0);
    ck_assert_uint_ne(a, b);
    g_clear_pointer(&names, g_free);
    names = fake_host_get_health_checker_names(host);
    ck_assert_str_eq(names, "first,second");

    ck_assert(!services->check_health(services->host, &failed, &error));
    ck_assert_str_eq(failed, "second");
    ck_assert_str_eq(error->message, "sick");
    ck_assert_int_eq(calls, 1);

    services->remove_health_checker(services->host, b);
    ck_assert(services->check_health(services->host, NULL, NULL));
    ck_assert_int_eq(calls, 2);
    services->remove_health_checker(services->host, a);
    ck_assert_int_eq(calls, 102);

    /* A checker that gives no reason gets the host's: its name, in the host's domain. */
    b = services->add_health_checker(services->host, "mute", mute_check, NULL, NULL);
    g_clear_pointer(&failed, g_free);
    g_clear_error(&error);
    ck_assert(!services->check_health(services->host, &failed, &error));
    ck_assert_str_eq(failed, "mute");
    ck_assert(g_error_matches(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CHECK_FAILED));
    ck_assert_str_eq(error->message, "health checker mute failed");
    services->remove_health_checker(services->host, b);
}
END_TEST

START_TEST(test_start_failure)
{
    g_autoptr(FakeHost) host = fake_host_new();
    g_autoptr(GError) error = NULL;

    ck_assert(!fake_host_start_plugin(host, &failing_descriptor, &error));
    ck_assert_str_eq(error->message, "no");
    g_clear_error(&error);
    /* The host is usable again. */
    ck_assert(fake_host_start_plugin(host, &demo_descriptor, &error));
}
END_TEST

static char *
make_socket_path(void)
{
    g_autofree char *dir = g_dir_make_tmp("fake-host-XXXXXX", NULL);

    ck_assert_ptr_nonnull(dir);
    return g_build_filename(dir, "cri.sock", NULL);
}

static void
remove_socket_path(const char *path)
{
    g_autofree char *dir = g_path_get_dirname(path);

    g_unlink(path);
    g_rmdir(dir);
}

START_TEST(test_container_events)
{
    g_autofree char *path = make_socket_path();
    g_autoptr(FakeCriServer) server = fake_cri_server_new(path);
    g_autoptr(FakeHost) host = fake_host_new();
    const PlegHostServices *services = fake_host_get_services(host);
    g_autoptr(GError) error = NULL;
    g_autofree char *endpoint = g_strconcat("unix://", path, NULL);
    PlegContainerEventStream *stream;
    PlegContainerEvent *event = NULL;

    /* No endpoint: UNIMPLEMENTED at open. */
    ck_assert_ptr_null(services->container_events_open(services->host, &error));
    ck_assert(g_error_matches(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_UNIMPLEMENTED));
    g_clear_error(&error);

    fake_host_set_runtime_endpoint(host, endpoint);
    ck_assert_str_eq(services->get_runtime_endpoint(services->host), endpoint);
    fake_cri_server_set_events(server, 2, FALSE);
    stream = services->container_events_open(services->host, &error);
    ck_assert_ptr_nonnull(stream);
    for (guint i = 0; i < 2; i++) {
        g_autofree char *id = g_strdup_printf("ctr-event-%u", i);

        ck_assert(services->container_events_read(stream, &event, &error));
        ck_assert_ptr_nonnull(event);
        ck_assert_str_eq(event->container_id, id);
        ck_assert_int_eq(event->type, PLEG_CONTAINER_STOPPED_EVENT);
        ck_assert_int_eq(event->created_at_ns, 1000 + i);
        ck_assert_ptr_null(event->pod_sandbox_status);
        ck_assert(!event->has_metadata);
        ck_assert_uint_eq(event->container_statuses->len, 0);
        services->container_event_free(event);
        event = NULL;
    }
    ck_assert(services->container_events_read(stream, &event, &error));
    ck_assert_ptr_null(event);
    services->container_events_free(stream);

    fake_cri_server_set_events_unimplemented(server, TRUE);
    stream = services->container_events_open(services->host, &error);
    ck_assert_ptr_nonnull(stream);
    ck_assert(!services->container_events_read(stream, &event, &error));
    ck_assert(g_error_matches(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_UNIMPLEMENTED));
    g_clear_error(&error);
    services->container_events_free(stream);
    services->container_events_free(NULL);
    services->container_event_free(NULL);

    g_clear_pointer(&server, fake_cri_server_free);
    remove_socket_path(path);
}
END_TEST

typedef struct {
    const PlegHostServices *services;
    PlegContainerEventStream *stream;
    GError *error;
    gboolean ok;
} Reader;

static gpointer
reader_thread(gpointer user_data)
{
    Reader *reader = user_data;
    PlegContainerEvent *event = NULL;

    reader->ok = reader->services->container_events_read(reader->stream, &event, &reader->error);
    reader->services->container_event_free(event);
    return NULL;
}

START_TEST(test_container_events_cancel)
{
    g_autofree char *path = make_socket_path();
    g_autoptr(FakeCriServer) server = fake_cri_server_new(path);
    g_autoptr(FakeHost) host = fake_host_new();
    const PlegHostServices *services = fake_host_get_services(host);
    g_autofree char *endpoint = g_strconcat("unix://", path, NULL);
    Reader reader = {services};
    GThread *thread;

    fake_host_set_runtime_endpoint(host, endpoint);
    fake_cri_server_set_events(server, 0, TRUE);
    reader.stream = services->container_events_open(services->host, NULL);
    ck_assert_ptr_nonnull(reader.stream);
    thread = g_thread_new("reader", reader_thread, &reader);
    /* Cancel whether or not the read has begun: either way it must end CANCELLED. */
    services->container_events_cancel(reader.stream);
    g_thread_join(thread);
    ck_assert(!reader.ok);
    ck_assert(g_error_matches(reader.error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_CANCELLED));
    g_clear_error(&reader.error);
    services->container_events_free(reader.stream);

    g_clear_pointer(&server, fake_cri_server_free);
    remove_socket_path(path);
}
END_TEST

/* Opening, reading to the end and freeing streams leaves no heap behind. */
START_TEST(test_container_events_no_growth)
{
    g_autofree char *path = make_socket_path();
    g_autoptr(FakeCriServer) server = fake_cri_server_new(path);
    g_autoptr(FakeHost) host = fake_host_new();
    const PlegHostServices *services = fake_host_get_services(host);
    g_autofree char *endpoint = g_strconcat("unix://", path, NULL);
    gsize heap0 = 0, heap1;

    fake_host_set_runtime_endpoint(host, endpoint);
    fake_cri_server_set_events(server, 1, FALSE);
    for (guint i = 0; i < 1100; i++) {
        PlegContainerEventStream *stream = services->container_events_open(services->host, NULL);
        PlegContainerEvent *event = NULL;

        ck_assert(services->container_events_read(stream, &event, NULL));
        services->container_event_free(event);
        ck_assert(services->container_events_read(stream, &event, NULL));
        ck_assert_ptr_null(event);
        services->container_events_free(stream);
        if (i == 99)
            heap0 = mallinfo2().uordblks;
    }
    heap1 = mallinfo2().uordblks;
    ck_assert_msg(heap1 < heap0 + 64 * 1000, "heap %zu -> %zu", heap0, heap1);

    g_clear_pointer(&server, fake_cri_server_free);
    remove_socket_path(path);
}
END_TEST

START_TEST(test_decode_event)
{
    Runtime__V1__ContainerEventResponse message = RUNTIME__V1__CONTAINER_EVENT_RESPONSE__INIT;
    Runtime__V1__PodSandboxStatus sandbox = RUNTIME__V1__POD_SANDBOX_STATUS__INIT;
    Runtime__V1__PodSandboxMetadata metadata = RUNTIME__V1__POD_SANDBOX_METADATA__INIT;
    Runtime__V1__ContainerStatus status = RUNTIME__V1__CONTAINER_STATUS__INIT;
    Runtime__V1__ContainerStatus *statuses[] = {&status};
    PlegContainerEvent *event;

    message.container_id = "c1";
    message.container_event_type = 7; /* outside the enum: passed through */
    message.created_at = 42;
    sandbox.id = "sb";
    message.pod_sandbox_status = &sandbox;
    status.id = "c1";
    message.n_containers_statuses = 1;
    message.containers_statuses = statuses;

    event = cri_decode_container_event(&message);
    ck_assert_str_eq(event->container_id, "c1");
    ck_assert_int_eq(event->type, 7);
    ck_assert_int_eq(event->created_at_ns, 42);
    ck_assert_ptr_nonnull(event->pod_sandbox_status);
    ck_assert_str_eq(event->pod_sandbox_status->id, "sb");
    ck_assert(!event->has_metadata);
    ck_assert_uint_eq(event->container_statuses->len, 1);
    cri_container_event_free(event);

    metadata.uid = "u1";
    sandbox.metadata = &metadata;
    event = cri_decode_container_event(&message);
    ck_assert(event->has_metadata);
    ck_assert_str_eq(event->pod_sandbox_status->uid, "u1");
    cri_container_event_free(event);
}
END_TEST

static Suite *
fake_host_suite(void)
{
    Suite *s = suite_create("fake-host");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, test_services_recorded);
    tcase_add_test(tc, test_status);
    tcase_add_test(tc, test_health_checkers);
    tcase_add_test(tc, test_start_failure);
    tcase_add_test(tc, test_container_events);
    tcase_add_test(tc, test_container_events_cancel);
    tcase_add_test(tc, test_container_events_no_growth);
    tcase_add_test(tc, test_decode_event);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *runner = srunner_create(fake_host_suite());
    int failed;

    srunner_run_all(runner, CK_ENV);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
