/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The evented plugin inside the real host (loader, Generic PLEG, CRI client) against cri-sim:
 * end to end, and public bug report (a).
 */
#include <check.h>
#include <stdlib.h>

#include "evented-host-fixture.h"

#define WAIT_USEC (10 * G_USEC_PER_SEC)
#define HOUR_USEC ((gint64)3600 * G_USEC_PER_SEC)

static void
add_running(HostFixture *fx, const char *uid, const char *id)
{
    g_autoptr(GError) error = NULL;
    CriSimContainerSpec spec = {
        .id = id,
        .pod_uid = uid,
        .state = CRI_SIM_CONTAINER_RUNNING,
    };

    ck_assert_msg(cri_sim_add_container_full(fx->sim, &spec, NULL, &error), "%s",
                  error ? error->message : "");
}

static HostFixture *
fixture_with_pod(void)
{
    HostFixture *fx = host_fixture_new();
    g_autoptr(GError) error = NULL;

    ck_assert(cri_sim_add_pod(fx->sim, "uid-a", "pod-a", &error));
    add_running(fx, "uid-a", "c1");
    add_running(fx, "uid-a", "c2");
    return fx;
}

static const PlegPluginInfo *
plugin_info(HostFixture *fx, const char *name)
{
    g_autoptr(GPtrArray) plugins = pleg_host_get_plugins(fx->host);

    for (guint i = 0; i < plugins->len; i++) {
        const PlegPluginInfo *info = g_ptr_array_index(plugins, i);

        if (g_strcmp0(info->name, name) == 0)
            return info;
    }
    return NULL;
}

static gboolean
subscribed(gpointer data)
{
    HostFixture *fx = data;

    return cri_sim_get_n_subscribers(fx->sim) == 1;
}

static void
wait_started(HostFixture *fx)
{
    ck_assert(host_fixture_wait_event(fx, PLEG_CONTAINER_STARTED, "c1", WAIT_USEC));
    ck_assert(host_fixture_wait_event(fx, PLEG_CONTAINER_STARTED, "c2", WAIT_USEC));
}

/* With the gate on, a container exit reaches the host as ContainerDied from an evented_pleg
 * relist; the relist period is an hour, so nothing else could have found it.  Invalid events
 * before it (public report (b)) change nothing. */
START_TEST(test_exit_through_evented)
{
    g_autoptr(HostFixture) fx = fixture_with_pod();
    g_autoptr(GError) error = NULL;
    const PlegPluginInfo *info;
    PlegPodLifecycleEvent *died;
    static const CriSimEventFlags invalid[] = {CRI_SIM_EVENT_NO_SANDBOX, CRI_SIM_EVENT_NO_METADATA,
                                               CRI_SIM_EVENT_EMPTY_UID};
    const char *stopped[] = {"stopped", NULL};

    host_fixture_start(fx, TRUE, HOUR_USEC);
    info = plugin_info(fx, "evented");
    ck_assert_ptr_nonnull(info);
    ck_assert_msg(info->state == PLEG_PLUGIN_STATE_RUNNING, "evented: %s (%s)",
                  pleg_plugin_state_to_string(info->state),
                  info->error ? info->error->message : "");
    wait_started(fx);
    ck_assert(host_fixture_wait(fx, subscribed, fx, WAIT_USEC));

    for (guint i = 0; i < G_N_ELEMENTS(invalid); i++) {
        CriSimEvent event = {
            .type = CRI_SIM_EVENT_STOPPED, .container_id = "c1", .flags = invalid[i]};

        ck_assert_int_eq(cri_sim_emit(fx->sim, &event), 1);
    }
    ck_assert(cri_sim_exit_container(fx->sim, "c1", 42, "Error", &error));
    died = host_fixture_wait_event(fx, PLEG_CONTAINER_DIED, "c1", WAIT_USEC);
    ck_assert_ptr_nonnull(died);
    ck_assert_str_eq(died->pod_uid, "uid-a");
    ck_assert_int_eq(died->relist_source, PLEG_RELIST_SOURCE_EVENTED_PLEG);
    ck_assert(died->has_exit);
    ck_assert_int_eq(died->exit_code, 42);

    ck_assert_double_eq(
        host_fixture_metric(fx, "kubelet_evented_pleg_events_received_total", stopped), 4);
    /* Only the first global relist ran. */
    ck_assert_uint_eq(host_fixture_count_relists(fx), 1);
    /* The watcher adds no health checker: health is the Generic PLEG's. */
    ck_assert(pleg_host_check_health(fx->host, NULL, NULL));
}
END_TEST

/* Gate off: the plugin runs no code; the runtime never sees GetContainerEvents. */
START_TEST(test_gate_off)
{
    g_autoptr(HostFixture) fx = fixture_with_pod();
    const PlegPluginInfo *info;

    host_fixture_start(fx, FALSE, 0);
    info = plugin_info(fx, "evented");
    ck_assert_ptr_nonnull(info);
    ck_assert_int_eq(info->state, PLEG_PLUGIN_STATE_DISABLED_GATE);
    wait_started(fx);
    ck_assert_uint_eq(cri_sim_get_n_calls(fx->sim, "GetContainerEvents"), 0);
    ck_assert_ptr_null(pleg_metrics_lookup(pleg_host_get_metrics(fx->host),
                                           "kubelet_evented_pleg_connection_state"));
}
END_TEST

typedef struct {
    HostFixture *fx;
    gint64 after_ns;
} RelistAfterWait;

static gboolean
relist_after(gpointer data)
{
    RelistAfterWait *w = data;

    for (guint i = 0; i < w->fx->relists->len; i++) {
        const HostRelist *r = &g_array_index(w->fx->relists, HostRelist, i);

        if (r->ok && r->relist_time_ns > w->after_ns)
            return TRUE;
    }
    return FALSE;
}

static gboolean
reconnected(gpointer data)
{
    HostFixture *fx = data;

    return cri_sim_get_n_subscribers(fx->sim) == 1 &&
           host_fixture_metric(fx, "kubelet_evented_pleg_connection_state", NULL) == 1;
}

static gboolean
one_stopped_received(gpointer data)
{
    const char *stopped[] = {"stopped", NULL};

    return host_fixture_metric(data, "kubelet_evented_pleg_events_received_total", stopped) >= 1;
}

/* Public report (a): the runtime restarts in ~0.4 s and a container exits during the gap.  The
 * stream cannot replay the STOPPED event; the exit arrives through the first successful global
 * relist after it (within one period), and the watcher does not give up: it reconnects and the
 * next exit comes through it again. */
START_TEST(test_restart_gap)
{
    g_autoptr(HostFixture) fx = fixture_with_pod();
    g_autoptr(GError) error = NULL;
    PlegPodLifecycleEvent *died;
    RelistAfterWait w = {fx, 0};
    gint64 exit_ns;
    guint covering = 0;

    host_fixture_start(fx, TRUE, 0);
    wait_started(fx);
    ck_assert(host_fixture_wait(fx, reconnected, fx, WAIT_USEC));

    ck_assert_msg(cri_sim_go_away(fx->sim, 400, FALSE, &error), "%s", error ? error->message : "");
    exit_ns = g_get_real_time() * 1000;
    ck_assert(cri_sim_exit_container(fx->sim, "c1", 1, NULL, &error));

    died = host_fixture_wait_event(fx, PLEG_CONTAINER_DIED, "c1", WAIT_USEC);
    ck_assert_ptr_nonnull(died);
    ck_assert_int_eq(died->relist_source, PLEG_RELIST_SOURCE_GLOBAL);
    ck_assert(died->has_exit);
    ck_assert_int_eq(died->exit_code, 1);

    /* Found by the first successful global relist that started after the exit. */
    w.after_ns = died->time_ns;
    ck_assert(host_fixture_wait(fx, relist_after, &w, WAIT_USEC));
    for (guint i = 0; i < fx->relists->len; i++) {
        const HostRelist *r = &g_array_index(fx->relists, HostRelist, i);

        if (r->ok && r->relist_time_ns > exit_ns && r->relist_time_ns <= died->time_ns)
            covering++;
    }
    ck_assert_uint_le(covering, 1);

    /* The watcher reconnected by itself and keeps delivering. */
    ck_assert(host_fixture_wait(fx, reconnected, fx, WAIT_USEC));
    ck_assert_double_ge(
        host_fixture_metric(fx, "kubelet_evented_pleg_connection_error_count", NULL), 1);
    ck_assert_double_ge(
        host_fixture_metric(fx, "kubelet_evented_pleg_connection_success_count", NULL), 2);
    ck_assert(cri_sim_exit_container(fx->sim, "c2", 0, NULL, &error));
    ck_assert(host_fixture_wait_event(fx, PLEG_CONTAINER_DIED, "c2", WAIT_USEC));
    ck_assert(host_fixture_wait(fx, one_stopped_received, fx, WAIT_USEC));
    ck_assert(pleg_host_check_health(fx->host, NULL, NULL));
}
END_TEST

static Suite *
evented_host_suite(void)
{
    Suite *suite = suite_create("evented-host");
    TCase *tc = tcase_create("evented-host");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_exit_through_evented);
    tcase_add_test(tc, test_gate_off);
    tcase_add_test(tc, test_restart_gap);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    SRunner *runner = srunner_create(evented_host_suite());
    int failed;

    srunner_run_all(runner, CK_ENV);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
