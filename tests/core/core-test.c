/* SPDX-License-Identifier: Apache-2.0 */
#include "core-test.h"

#include <stdarg.h>
#include <stdlib.h>

Fixture *
fixture_new_full(const PlegGenericConfig *config, guint capacity, gboolean fake_clock)
{
    Fixture *fx = g_new0(Fixture, 1);
    PlegGenericConfig cfg;

    if (config)
        cfg = *config;
    else
        pleg_generic_config_init(&cfg);
    fx->clock.now_ns = T0_NS;
    if (fake_clock) {
        cfg.clock = fake_clock_now;
        cfg.clock_data = &fx->clock;
    }
    fx->fake = fake_runtime_new();
    fx->runtime = fake_runtime_as_runtime(fx->fake);
    fx->pleg = pleg_generic_new(fx->runtime, &cfg, NULL);
    fx->channel = pleg_generic_subscribe(fx->pleg, capacity);
    return fx;
}

Fixture *
fixture_new(void)
{
    return fixture_new_full(NULL, 0, TRUE);
}

void
fixture_free(Fixture *fx)
{
    if (!fx)
        return;
    g_clear_pointer(&fx->pleg, pleg_generic_free);
    g_clear_pointer(&fx->runtime, pleg_runtime_unref);
    g_clear_pointer(&fx->fake, fake_runtime_free);
    g_free(fx);
}

void
fixture_add_pod(Fixture *fx, const char *pod_uid, const char *sandbox_id, ...)
{
    va_list ap;
    const char *id;

    fake_runtime_add_sandbox(fx->fake, sandbox_id, pod_uid, PLEG_POD_SANDBOX_STATE_READY);
    va_start(ap, sandbox_id);
    while ((id = va_arg(ap, const char *)))
        fake_runtime_add_container(fx->fake, id, sandbox_id, PLEG_CONTAINER_STATE_RUNNING);
    va_end(ap);
}

void
relist(Fixture *fx)
{
    g_autoptr(GError) error = NULL;
    gboolean ok = pleg_generic_relist(fx->pleg, &error);

    ck_assert_msg(ok, "relist failed: %s", error ? error->message : "(no error)");
    ck_assert(error == NULL);
}

void
relist_fails(Fixture *fx)
{
    g_autoptr(GError) error = NULL;

    ck_assert(!pleg_generic_relist(fx->pleg, &error));
    ck_assert(error != NULL);
}

GPtrArray *
drain(Fixture *fx)
{
    GPtrArray *events =
        g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_lifecycle_event_unref);
    PlegPodLifecycleEvent *event;

    while ((event = pleg_event_channel_pop(fx->channel, 0)))
        g_ptr_array_add(events, event);
    return events;
}

GPtrArray *
wait_events(Fixture *fx, guint n, gint64 timeout_usec)
{
    GPtrArray *events =
        g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_lifecycle_event_unref);
    gint64 end_time = g_get_monotonic_time() + timeout_usec;

    while (events->len < n) {
        gint64 left = end_time - g_get_monotonic_time();
        PlegPodLifecycleEvent *event;

        if (left <= 0)
            break;
        event = pleg_event_channel_pop(fx->channel, left);
        if (!event)
            break;
        g_ptr_array_add(events, event);
    }
    return events;
}

PlegPodLifecycleEvent *
wait_event_for(Fixture *fx, const char *pod_uid, PlegPodLifecycleEventType type,
               const char *container_id, gint64 timeout_usec, GPtrArray *others)
{
    gint64 end_time = g_get_monotonic_time() + timeout_usec;

    for (;;) {
        gint64 left = end_time - g_get_monotonic_time();
        PlegPodLifecycleEvent *event;

        if (left <= 0)
            return NULL;
        event = pleg_event_channel_pop(fx->channel, left);
        if (!event)
            return NULL;
        if (g_str_equal(event->pod_uid, pod_uid) && event->type == type &&
            (!container_id || g_strcmp0(event->container_id, container_id) == 0))
            return event;
        if (others)
            g_ptr_array_add(others, event);
        else
            pleg_pod_lifecycle_event_unref(event);
    }
}

char *
event_str(const PlegPodLifecycleEvent *event)
{
    const char *type = pleg_pod_lifecycle_event_type_to_string(event->type);

    if (!event->container_id)
        return g_strdup(type);
    return g_strdup_printf("%s %s", type, event->container_id);
}

char *
events_str(GPtrArray *events, const char *pod_uid)
{
    g_autoptr(GString) out = g_string_new(NULL);

    for (guint i = 0; i < events->len; i++) {
        const PlegPodLifecycleEvent *event = g_ptr_array_index(events, i);
        g_autofree char *text = NULL;

        if (pod_uid && !g_str_equal(event->pod_uid, pod_uid))
            continue;
        text = event_str(event);
        if (out->len)
            g_string_append_c(out, ',');
        if (!pod_uid)
            g_string_append_printf(out, "%s ", event->pod_uid);
        g_string_append(out, text);
    }
    return g_string_free(g_steal_pointer(&out), FALSE);
}

typedef struct {
    const PlegPodLifecycleEvent *event;
    guint index;
} SortItem;

static int
compare_items(gconstpointer a, gconstpointer b)
{
    const SortItem *x = a, *y = b;
    int r = g_strcmp0(x->event->pod_uid, y->event->pod_uid);

    if (r == 0)
        r = g_strcmp0(x->event->container_id, y->event->container_id);
    if (r == 0)
        r = x->index < y->index ? -1 : x->index > y->index;
    return r;
}

char *
sorted_events_str(GPtrArray *events)
{
    g_autoptr(GArray) items = g_array_sized_new(FALSE, FALSE, sizeof(SortItem), events->len);
    g_autoptr(GString) out = g_string_new(NULL);

    for (guint i = 0; i < events->len; i++) {
        SortItem item = {g_ptr_array_index(events, i), i};
        g_array_append_val(items, item);
    }
    g_array_sort(items, compare_items);
    for (guint i = 0; i < items->len; i++) {
        const PlegPodLifecycleEvent *event = g_array_index(items, SortItem, i).event;
        g_autofree char *text = event_str(event);

        if (out->len)
            g_string_append_c(out, ',');
        g_string_append_printf(out, "%s %s", event->pod_uid, text);
    }
    return g_string_free(g_steal_pointer(&out), FALSE);
}

char *
drain_str(Fixture *fx)
{
    g_autoptr(GPtrArray) events = drain(fx);

    return sorted_events_str(events);
}

guint
count_events(GPtrArray *events, const char *pod_uid, PlegPodLifecycleEventType type,
             const char *container_id)
{
    guint n = 0;

    for (guint i = 0; i < events->len; i++) {
        const PlegPodLifecycleEvent *event = g_ptr_array_index(events, i);

        if (pod_uid && !g_str_equal(event->pod_uid, pod_uid))
            continue;
        if (event->type != type)
            continue;
        if (container_id && g_strcmp0(event->container_id, container_id) != 0)
            continue;
        n++;
    }
    return n;
}

static PlegMetric *
lookup_metric(Fixture *fx, const char *name, va_list ap, const char **labels, gsize n_labels)
{
    PlegMetric *metric = pleg_metrics_lookup(pleg_generic_get_metrics(fx->pleg), name);
    gsize n = 0;
    const char *label;

    ck_assert_msg(metric != NULL, "metric %s is not registered", name);
    while ((label = va_arg(ap, const char *))) {
        ck_assert(n + 1 < n_labels);
        labels[n++] = label;
    }
    labels[n] = NULL;
    return metric;
}

double
metric_value(Fixture *fx, const char *name, ...)
{
    const char *labels[8];
    PlegMetric *metric;
    va_list ap;

    va_start(ap, name);
    metric = lookup_metric(fx, name, ap, labels, G_N_ELEMENTS(labels));
    va_end(ap);
    return pleg_metric_get(metric, labels[0] ? labels : NULL);
}

guint64
metric_count(Fixture *fx, const char *name, ...)
{
    const char *labels[8];
    PlegMetric *metric;
    va_list ap;

    va_start(ap, name);
    metric = lookup_metric(fx, name, ap, labels, G_N_ELEMENTS(labels));
    va_end(ap);
    return pleg_metric_get_count(metric, labels[0] ? labels : NULL);
}

gboolean
wait_until(gboolean (*cond)(gpointer data), gpointer data, gint64 timeout_usec)
{
    gint64 end_time = g_get_monotonic_time() + timeout_usec;

    while (!cond(data)) {
        if (g_get_monotonic_time() > end_time)
            return cond(data);
        g_usleep(1000);
    }
    return TRUE;
}

PlegPodStatus *
cache_status(Fixture *fx, const char *pod_uid)
{
    PlegPodStatus *status = NULL;

    if (!pleg_pod_cache_get(pleg_generic_get_cache(fx->pleg), pod_uid, &status, NULL, NULL))
        return NULL;
    return status;
}

int
cache_container_state(Fixture *fx, const char *pod_uid, const char *container_id)
{
    g_autoptr(PlegPodStatus) status = cache_status(fx, pod_uid);
    const PlegContainerStatus *container;

    if (!status)
        return -1;
    container = pleg_pod_status_find_container(status, container_id);
    return container ? (int)container->state : -1;
}

int
run_suite(Suite *suite)
{
    SRunner *runner = srunner_create(suite);
    int failed;

    srunner_run_all(runner, CK_ENV);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

double
requests(Fixture *fx, const char *source, const char *outcome)
{
    return metric_value(fx, "kubelet_pleg_relist_requests_total", source, outcome, NULL);
}

gboolean
pod_relists_reach(gpointer data)
{
    CountCond *c = data;

    return metric_count(c->fx, "kubelet_pleg_pod_relist_duration_seconds", NULL) >= c->count;
}

static gpointer
relist_thread_run(gpointer data)
{
    RelistThread *rt = data;

    rt->ok = pleg_generic_relist(rt->pleg, &rt->error);
    return NULL;
}

void
relist_thread_start(RelistThread *rt, PlegGeneric *pleg)
{
    *rt = (RelistThread){.pleg = pleg};
    rt->thread = g_thread_new("relist", relist_thread_run, rt);
}

void
relist_thread_join(RelistThread *rt)
{
    g_thread_join(g_steal_pointer(&rt->thread));
    ck_assert_msg(rt->ok, "relist failed: %s", rt->error ? rt->error->message : "");
    g_clear_error(&rt->error);
}

gboolean
requests_reach(Fixture *fx, const char *source, const char *outcome, double value)
{
    gint64 end_time = g_get_monotonic_time() + WAIT_USEC;

    while (requests(fx, source, outcome) < value) {
        if (g_get_monotonic_time() > end_time)
            return FALSE;
        g_usleep(1000);
    }
    return TRUE;
}
