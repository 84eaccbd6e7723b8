/* SPDX-License-Identifier: Apache-2.0 */
#include "evented-host-fixture.h"

#include <glib/gstdio.h>

static void
on_event(PlegPodLifecycleEvent *event, gpointer user_data)
{
    HostFixture *fx = user_data;

    if (fx->keep_events)
        g_ptr_array_add(fx->events, pleg_pod_lifecycle_event_ref(event));
    if (fx->on_event)
        fx->on_event(event, fx->on_event_data);
}

static void
on_relist(const GError *error, gint64 relist_time_ns, gpointer user_data)
{
    HostFixture *fx = user_data;
    HostRelist relist = {relist_time_ns, g_get_real_time() * 1000, error == NULL};

    g_array_append_val(fx->relists, relist);
}

HostFixture *
host_fixture_new(void)
{
    HostFixture *fx = g_new0(HostFixture, 1);
    g_autoptr(GError) error = NULL;

    fx->dir = g_dir_make_tmp("evented-host-XXXXXX", &error);
    g_assert_no_error(error);
    fx->socket_path = g_build_filename(fx->dir, "cri.sock", NULL);
    fx->sim = cri_sim_new(fx->socket_path, &error);
    g_assert_no_error(error);
    fx->events = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_lifecycle_event_unref);
    fx->relists = g_array_new(FALSE, FALSE, sizeof(HostRelist));
    fx->keep_events = TRUE;
    fx->context = g_main_context_new();
    g_main_context_push_thread_default(fx->context);
    return fx;
}

void
host_fixture_start(HostFixture *fx, gboolean evented, gint64 relist_period_usec)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *endpoint = g_strconcat("unix://", fx->socket_path, NULL);
    PlegHostConfig config;

    fx->gates = pleg_feature_gates_new();
    g_assert_true(pleg_feature_gates_set(fx->gates, "EventedPLEG", evented, &error));

    pleg_host_config_init(&config);
    config.runtime_endpoint = endpoint;
    if (relist_period_usec > 0)
        config.generic.relist_period_usec = relist_period_usec;
    config.plugin_dir = EVENTED_PLUGIN_DIR;

    fx->host = pleg_host_new(&config, fx->gates, fx->context, &error);
    g_assert_no_error(error);
    pleg_host_add_event_callback(fx->host, on_event, fx, NULL);
    pleg_host_set_relist_callback(fx->host, on_relist, fx, NULL);
    g_assert_true(pleg_host_start(fx->host, &error));
    g_assert_no_error(error);
}

void
host_fixture_free(HostFixture *fx)
{
    if (!fx)
        return;
    if (fx->host)
        pleg_host_stop(fx->host);
    g_clear_pointer(&fx->host, pleg_host_free);
    while (g_main_context_iteration(fx->context, FALSE))
        ;
    g_main_context_pop_thread_default(fx->context);
    g_main_context_unref(fx->context);
    g_clear_pointer(&fx->gates, pleg_feature_gates_free);
    cri_sim_free(fx->sim);
    g_rmdir(fx->dir);
    g_ptr_array_unref(fx->events);
    g_array_unref(fx->relists);
    g_free(fx->socket_path);
    g_free(fx->dir);
    g_free(fx);
}

gboolean
host_fixture_wait(HostFixture *fx, gboolean (*func)(gpointer data), gpointer data,
                  gint64 timeout_usec)
{
    gint64 deadline = g_get_monotonic_time() + timeout_usec;
    gboolean done;

    while (!(done = func(data))) {
        gint64 remaining = deadline - g_get_monotonic_time();
        GSource *tick;

        if (remaining <= 0)
            break;
        /* Conditions may change on other threads (cri-sim, plugins) without waking us. */
        tick = g_timeout_source_new(MAX(1, MIN(remaining / 1000, 5)));
        g_source_set_dummy_callback(tick);
        g_source_attach(tick, fx->context);
        g_main_context_iteration(fx->context, TRUE);
        g_source_destroy(tick);
        g_source_unref(tick);
    }
    return done;
}

typedef struct {
    HostFixture *fx;
    PlegPodLifecycleEventType type;
    const char *container_id;
    PlegPodLifecycleEvent *found;
} EventWait;

static gboolean
event_found(gpointer data)
{
    EventWait *w = data;

    for (guint i = 0; i < w->fx->events->len; i++) {
        PlegPodLifecycleEvent *event = g_ptr_array_index(w->fx->events, i);

        if (event->type == w->type && g_strcmp0(event->container_id, w->container_id) == 0) {
            w->found = event;
            return TRUE;
        }
    }
    return FALSE;
}

PlegPodLifecycleEvent *
host_fixture_wait_event(HostFixture *fx, PlegPodLifecycleEventType type, const char *container_id,
                        gint64 timeout_usec)
{
    EventWait w = {fx, type, container_id, NULL};

    host_fixture_wait(fx, event_found, &w, timeout_usec);
    return w.found;
}

guint
host_fixture_count_relists(HostFixture *fx)
{
    guint n = 0;

    for (guint i = 0; i < fx->relists->len; i++)
        if (g_array_index(fx->relists, HostRelist, i).ok)
            n++;
    return n;
}

double
host_fixture_metric(HostFixture *fx, const char *name, const char *const *labels)
{
    PlegMetric *metric = pleg_metrics_lookup(pleg_host_get_metrics(fx->host), name);

    return metric ? pleg_metric_get(metric, labels) : 0;
}
