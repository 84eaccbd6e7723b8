/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Exit-to-ContainerDied latency with EventedPLEG off and on (issue 3): 1000 container exits at
 * 100 pods in cri-sim, through the real host with the Generic PLEG at kubelet's 1 s period.
 *
 * Each pod runs one container.  A pacer thread exits one container every --spacing-us, pods in
 * turn, noting the time just before the exit, and starts its replacement at once (as kubelet
 * restarts a crashed container); when the host reports ContainerDied for it, this thread (the
 * host context) notes the time.  Dead containers stay, as kubelet's GC removes them minutes
 * later, so each pod ends with 10 dead ones; with --remove-dead the dead container is removed
 * at once instead, and every pod changes between two global relists.  Prints p50/p99/max per
 * mode, the ratios and the Generic PLEG's own timings.  The goal is p99 < 5 ms with the stream
 * healthy; the benchmark fails when it is missed or an exit is never reported.
 *
 *   bench-evented [--exits=N] [--pods=N] [--spacing-us=N] [--remove-dead]
 */
#include <stdlib.h>
#include <string.h>

#include "evented-host-fixture.h"

#define GOAL_P99_MS 5.0

typedef struct {
    HostFixture *fx;
    GHashTable *index; /* container id -> exit index + 1 */
    GPtrArray *ids;    /* container exited by exit i */
    guint n_pods;
    guint n_exits;
    gint64 spacing_usec;
    gboolean remove_dead;

    GMutex lock;
    gint64 *exited_usec; /* 0: not yet */
    gint64 *exited_ns;   /* Unix ns, to compare with global relists */
    gint64 *died_usec;
    guint n_died;
    guint n_by_source[PLEG_RELIST_SOURCE_N];
    gboolean pacer_done;
} Bench;

static char *
container_id(guint pod, guint round)
{
    return g_strdup_printf("bench-%u-%u", pod, round);
}

static gboolean
add_running(CriSim *sim, guint pod, guint round, GError **error)
{
    g_autofree char *uid = g_strdup_printf("bench-%u", pod);
    g_autofree char *id = container_id(pod, round);
    CriSimContainerSpec spec = {
        .id = id,
        .pod_uid = uid,
        .name = "app",
        .attempt = round,
        .state = CRI_SIM_CONTAINER_RUNNING,
    };

    return cri_sim_add_container_full(sim, &spec, NULL, error);
}

static void
bench_on_event(PlegPodLifecycleEvent *event, gpointer user_data)
{
    Bench *b = user_data;
    gint64 now = g_get_monotonic_time();
    gboolean first = FALSE;
    gpointer value;
    guint i;

    if (event->type != PLEG_CONTAINER_DIED || !event->container_id)
        return;
    value = g_hash_table_lookup(b->index, event->container_id);
    if (!value)
        return;
    i = GPOINTER_TO_UINT(value) - 1;

    g_mutex_lock(&b->lock);
    if (b->exited_usec[i] && !b->died_usec[i]) {
        b->died_usec[i] = now;
        b->n_by_source[event->relist_source]++;
        b->n_died++;
        first = TRUE;
    }
    g_mutex_unlock(&b->lock);

    if (first && b->remove_dead)
        cri_sim_remove_container(b->fx->sim, event->container_id, NULL);
}

static gpointer
pacer(gpointer data)
{
    Bench *b = data;
    gint64 start = g_get_monotonic_time();

    for (guint i = 0; i < b->n_exits; i++) {
        gint64 due = start + (gint64)i * b->spacing_usec;
        gint64 now = g_get_monotonic_time();
        g_autoptr(GError) error = NULL;

        if (due > now)
            g_usleep(due - now);
        g_mutex_lock(&b->lock);
        b->exited_usec[i] = g_get_monotonic_time();
        b->exited_ns[i] = g_get_real_time() * 1000;
        g_mutex_unlock(&b->lock);
        if (!cri_sim_exit_container(b->fx->sim, g_ptr_array_index(b->ids, i), 1, NULL, &error) ||
            !add_running(b->fx->sim, i % b->n_pods, i / b->n_pods + 1, &error))
            g_error("exit %s: %s", (char *)g_ptr_array_index(b->ids, i), error->message);
    }
    g_mutex_lock(&b->lock);
    b->pacer_done = TRUE;
    g_mutex_unlock(&b->lock);
    return NULL;
}

static gboolean
all_died(gpointer data)
{
    Bench *b = data;
    gboolean done;

    g_mutex_lock(&b->lock);
    done = b->pacer_done && b->n_died == b->n_exits;
    g_mutex_unlock(&b->lock);
    return done;
}

typedef struct {
    Bench *bench;
    gboolean evented;
} ReadyWait;

static gboolean
ready(gpointer data)
{
    ReadyWait *w = data;
    HostFixture *fx = w->bench->fx;

    return host_fixture_count_relists(fx) >= 2 &&
           (!w->evented || cri_sim_get_n_subscribers(fx->sim) == 1);
}

static int
compare_gint64(gconstpointer a, gconstpointer b)
{
    gint64 x = *(const gint64 *)a, y = *(const gint64 *)b;

    return x < y ? -1 : x > y;
}

typedef struct {
    double p50_ms;
    double p99_ms;
    double max_ms;
    guint n;
    guint n_by_source[PLEG_RELIST_SOURCE_N];
    double mean_relist_ms;
    double mean_pod_relist_ms;
    double mean_stream_ms;
    guint n_during_relist; /* exits that happened while a global relist ran */
    double p99_outside_ms; /* p99 of the other exits */
} Result;

static double
percentile_ms(const GArray *sorted, double p)
{
    guint i;

    if (sorted->len == 0)
        return 0;
    i = (guint)(p * (double)(sorted->len - 1) + 0.5);
    return (double)g_array_index(sorted, gint64, MIN(i, sorted->len - 1)) / 1000.0;
}

/* Mean of an unlabelled histogram in ms, or 0. */
static double
mean_ms(HostFixture *fx, const char *name)
{
    PlegMetric *metric = pleg_metrics_lookup(pleg_host_get_metrics(fx->host), name);
    guint64 count = metric ? pleg_metric_get_count(metric, NULL) : 0;

    return count ? pleg_metric_get(metric, NULL) / (double)count * 1000.0 : 0;
}

static gboolean remove_dead;

static gboolean
run(gboolean evented, guint n_pods, guint n_exits, gint64 spacing_usec, Result *ret)
{
    HostFixture *fx = host_fixture_new();
    g_autoptr(GArray) latencies = g_array_new(FALSE, FALSE, sizeof(gint64));
    g_autoptr(GArray) outside = g_array_new(FALSE, FALSE, sizeof(gint64));
    g_autoptr(GError) error = NULL;
    Bench b = {.fx = fx,
               .n_pods = n_pods,
               .n_exits = n_exits,
               .spacing_usec = spacing_usec,
               .remove_dead = remove_dead};
    ReadyWait w = {&b, evented};
    GThread *thread;
    gboolean ok;

    g_mutex_init(&b.lock);
    b.index = g_hash_table_new(g_str_hash, g_str_equal);
    b.ids = g_ptr_array_new_with_free_func(g_free);
    b.exited_usec = g_new0(gint64, n_exits);
    b.died_usec = g_new0(gint64, n_exits);
    b.exited_ns = g_new0(gint64, n_exits);

    for (guint p = 0; p < n_pods; p++) {
        g_autofree char *uid = g_strdup_printf("bench-%u", p);

        if (!cri_sim_add_pod(fx->sim, uid, NULL, &error) || !add_running(fx->sim, p, 0, &error))
            g_error("setup: %s", error->message);
    }
    for (guint i = 0; i < n_exits; i++) {
        g_ptr_array_add(b.ids, container_id(i % n_pods, i / n_pods));
        g_hash_table_insert(b.index, g_ptr_array_index(b.ids, i), GUINT_TO_POINTER(i + 1));
    }

    fx->keep_events = FALSE;
    fx->on_event = bench_on_event;
    fx->on_event_data = &b;
    host_fixture_start(fx, evented, 0);
    if (!host_fixture_wait(fx, ready, &w, 30 * G_USEC_PER_SEC))
        g_error("host not ready");

    thread = g_thread_new("bench-pacer", pacer, &b);
    ok = host_fixture_wait(fx, all_died, &b, (gint64)n_exits * spacing_usec + 30 * G_USEC_PER_SEC);
    g_thread_join(thread);

    for (guint i = 0; i < n_exits; i++) {
        gboolean during = FALSE;
        gint64 latency;

        if (!b.died_usec[i])
            continue;
        latency = b.died_usec[i] - b.exited_usec[i];
        g_array_append_val(latencies, latency);
        for (guint r = 0; r < fx->relists->len && !during; r++) {
            const HostRelist *relist = &g_array_index(fx->relists, HostRelist, r);

            during = b.exited_ns[i] >= relist->relist_time_ns && b.exited_ns[i] <= relist->done_ns;
        }
        if (during)
            ret->n_during_relist++;
        else
            g_array_append_val(outside, latency);
    }
    g_array_sort(outside, compare_gint64);
    ret->p99_outside_ms = percentile_ms(outside, 0.99);
    g_array_sort(latencies, compare_gint64);
    ret->n = latencies->len;
    ret->p50_ms = percentile_ms(latencies, 0.50);
    ret->p99_ms = percentile_ms(latencies, 0.99);
    ret->max_ms = percentile_ms(latencies, 1.0);
    memcpy(ret->n_by_source, b.n_by_source, sizeof(ret->n_by_source));
    ret->mean_relist_ms = mean_ms(fx, "kubelet_pleg_relist_duration_seconds");
    ret->mean_pod_relist_ms = mean_ms(fx, "kubelet_pleg_pod_relist_duration_seconds");
    ret->mean_stream_ms = mean_ms(fx, "kubelet_evented_pleg_connection_latency_seconds");

    fx->on_event = NULL;
    host_fixture_free(fx);
    g_hash_table_unref(b.index);
    g_ptr_array_unref(b.ids);
    g_free(b.exited_usec);
    g_free(b.died_usec);
    g_free(b.exited_ns);
    g_mutex_clear(&b.lock);
    return ok;
}

static void
print_result(const char *label, const Result *r)
{
    g_print("%-18s p50 %9.3f ms  p99 %9.3f ms  max %9.3f ms  (n=%u; relist_source global=%u "
            "evented_pleg=%u)\n",
            label, r->p50_ms, r->p99_ms, r->max_ms, r->n, r->n_by_source[PLEG_RELIST_SOURCE_GLOBAL],
            r->n_by_source[PLEG_RELIST_SOURCE_EVENTED_PLEG]);
    g_print("%-18s mean global relist %.3f ms, pod relist %.3f ms, "
            "event created_at->receipt %.3f ms\n",
            "", r->mean_relist_ms, r->mean_pod_relist_ms, r->mean_stream_ms);
    g_print("%-18s %u exits happened during a global relist; p99 of the others %.3f ms\n", "",
            r->n_during_relist, r->p99_outside_ms);
}

int
main(int argc, char **argv)
{
    gint n_exits = 1000;
    gint n_pods = 100;
    gint spacing_usec = 3000;
    GOptionEntry entries[] = {
        {"exits", 0, 0, G_OPTION_ARG_INT, &n_exits, "Container exits (1000)", "N"},
        {"pods", 0, 0, G_OPTION_ARG_INT, &n_pods, "Pods, one container each (100)", "N"},
        {"spacing-us", 0, 0, G_OPTION_ARG_INT, &spacing_usec, "Time between exits (3000)", "N"},
        {"remove-dead", 0, 0, G_OPTION_ARG_NONE, &remove_dead,
         "Remove each dead container once reported (default: keep them, as GC runs later)", NULL},
        {NULL},
    };
    g_autoptr(GOptionContext) options = g_option_context_new("- EventedPLEG latency benchmark");
    g_autoptr(GError) error = NULL;
    Result off = {0}, on = {0};
    gboolean ok;

    g_option_context_add_main_entries(options, entries, NULL);
    if (!g_option_context_parse(options, &argc, &argv, &error)) {
        g_printerr("bench-evented: %s\n", error->message);
        return 2;
    }
    n_exits = MAX(n_exits, 1);
    n_pods = MAX(n_pods, 1);
    spacing_usec = MAX(spacing_usec, 0);

    g_print("bench-evented: %d container exits at %d pods in cri-sim, one every %d us, each "
            "container restarted; Generic PLEG period 1 s\n",
            n_exits, n_pods, spacing_usec);
    ok = run(FALSE, n_pods, n_exits, spacing_usec, &off);
    print_result("EventedPLEG=false", &off);
    ok = run(TRUE, n_pods, n_exits, spacing_usec, &on) && ok;
    print_result("EventedPLEG=true", &on);
    if (on.p50_ms > 0 && on.p99_ms > 0)
        g_print("ratio off/on       p50 %9.1fx     p99 %9.1fx\n", off.p50_ms / on.p50_ms,
                off.p99_ms / on.p99_ms);
    g_print("goal p99 < %.0f ms with EventedPLEG=true: %s (%.3f ms)\n", GOAL_P99_MS,
            on.p99_ms < GOAL_P99_MS ? "met" : "NOT met", on.p99_ms);
    if (!ok)
        g_printerr("bench-evented: not every exit was reported\n");
    return ok && on.p99_ms < GOAL_P99_MS ? EXIT_SUCCESS : EXIT_FAILURE;
}
