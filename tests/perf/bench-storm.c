/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-storm: a termination storm with EventedPLEG on, through the real host (the Generic
 * PLEG and the evented plugin) against cri-sim in process.
 *
 *   bench-storm [--pods=1000] [--containers=5] [--window-ms=500] [--rounds=3] [--json=FILE]
 *
 * Every pod runs --containers containers; a pacer thread exits them all, evenly spread over
 * --window-ms, each with its own exit code, noting the time just before each exit.  The evented
 * plugin asks a targeted relist for each CRI event; the host context notes when each
 * ContainerDied arrives.  After every exit is reported, two more global relists pass, so that
 * a repeated report would show.  Beside the storm, in the same run, stands the runtime's own
 * answer time: the status calls (PodSandboxStatus, ContainerStatus) that the relists made from
 * the first exit to the last report, made again by a bare CRI client, 64 in flight, while the
 * PLEG is idle.  Figures per round: requests dropped by the RequestRelist queue (of all the
 * evented plugin made), p50/p99/max exit -> ContainerDied, the status calls and the runtime's
 * time for them.  Goals, by the medians over the rounds: drops <= 5 %; p99 <= 300 ms or, when
 * the runtime is the bound, <= 1.25x its answer time; in every round exactly one ContainerDied
 * per exit, with its exit code.  Exits 1 when a goal is missed.
 */
#include <json-glib/json-glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pleg/pleg.h>

#include "../evented/evented-host-fixture.h"
#include "perf-common.h"

#define GOAL_DROPS         0.05
#define GOAL_P99_MS        300.0
#define GOAL_RUNTIME_RATIO 1.25
#define BARE_IN_FLIGHT     64
#define BARE_ARRAY         32 /* the CRI client's calls in flight for one array */

typedef struct {
    HostFixture *fx;
    GHashTable *index; /* container id -> exit index + 1 */
    GPtrArray *ids;
    guint n_exits;
    gint64 window_usec;

    GMutex lock;
    gint64 *exited_usec; /* 0: not yet */
    gint64 *died_usec;
    guint *n_reports;
    guint n_died;
    guint n_wrong_code;
    gboolean pacer_done;
} Storm;

typedef struct {
    double drops;
    double p50_ms, p99_ms, max_ms;
    guint n_died, n_repeated, n_wrong_code;
    double requests;
    double mean_pod_relist_ms;
    guint64 pod_relists;
    guint status_calls;
    double runtime_ms; /* the bare client's time for status_calls */
} Round;

static int
exit_code_of(guint i)
{
    return 1 + (int)(i % 250);
}

static void
on_event(PlegPodLifecycleEvent *event, gpointer user_data)
{
    Storm *s = user_data;
    gint64 now = g_get_monotonic_time();
    gpointer value;
    guint i;

    if (event->type != PLEG_CONTAINER_DIED || !event->container_id)
        return;
    value = g_hash_table_lookup(s->index, event->container_id);
    if (!value)
        return;
    i = GPOINTER_TO_UINT(value) - 1;

    g_mutex_lock(&s->lock);
    if (s->n_reports[i]++ == 0) {
        s->died_usec[i] = now;
        s->n_died++;
        if (!event->has_exit || event->exit_code != exit_code_of(i))
            s->n_wrong_code++;
    }
    g_mutex_unlock(&s->lock);
}

static gpointer
pacer(gpointer data)
{
    Storm *s = data;
    gint64 start = g_get_monotonic_time();

    for (guint i = 0; i < s->n_exits; i++) {
        gint64 due = start + (gint64)i * s->window_usec / s->n_exits;
        gint64 now = g_get_monotonic_time();
        g_autoptr(GError) error = NULL;

        if (due > now)
            g_usleep(due - now);
        g_mutex_lock(&s->lock);
        s->exited_usec[i] = g_get_monotonic_time();
        g_mutex_unlock(&s->lock);
        if (!cri_sim_exit_container(s->fx->sim, g_ptr_array_index(s->ids, i), exit_code_of(i),
                                    NULL, &error))
            g_error("exit %s: %s", (char *)g_ptr_array_index(s->ids, i), error->message);
    }
    g_mutex_lock(&s->lock);
    s->pacer_done = TRUE;
    g_mutex_unlock(&s->lock);
    return NULL;
}

static gboolean
all_died(gpointer data)
{
    Storm *s = data;
    gboolean done;

    g_mutex_lock(&s->lock);
    done = s->pacer_done && s->n_died == s->n_exits;
    g_mutex_unlock(&s->lock);
    return done;
}

typedef struct {
    HostFixture *fx;
    guint relists;
    gboolean subscribed;
} RelistWait;

static gboolean
relists_reach(gpointer data)
{
    RelistWait *w = data;

    return host_fixture_count_relists(w->fx) >= w->relists &&
           (!w->subscribed || cri_sim_get_n_subscribers(w->fx->sim) == 1);
}

static double
requests(HostFixture *fx, const char *outcome)
{
    return host_fixture_metric(fx, "kubelet_pleg_relist_requests_total",
                               (const char *const[]){"evented_pleg", outcome, NULL});
}

static double
percentile_ms(const GArray *sorted, double p)
{
    guint i;

    if (sorted->len == 0)
        return 0;
    i = (guint)(p * (double)(sorted->len - 1) + 0.5);
    return g_array_index(sorted, double, MIN(i, sorted->len - 1));
}

static int
compare_double(gconstpointer a, gconstpointer b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static guint
status_calls(CriSim *sim)
{
    return cri_sim_get_n_calls(sim, "ContainerStatus") + cri_sim_get_n_calls(sim, "PodSandboxStatus");
}

typedef struct {
    PlegRuntime *runtime;
    GPtrArray *ids; /* container ids to ask, in turn */
    guint first, n;  /* the queries of this thread: ids first .. first + n, wrapping */
} BareThread;

static gpointer
bare_thread(gpointer data)
{
    BareThread *t = data;
    PlegStatusQuery queries[BARE_ARRAY];

    for (guint done = 0; done < t->n;) {
        guint len = MIN(BARE_ARRAY, t->n - done);

        memset(queries, 0, sizeof(queries));
        for (guint i = 0; i < len; i++)
            queries[i].container_id = g_ptr_array_index(t->ids, (t->first + done + i) % t->ids->len);
        pleg_runtime_get_statuses(t->runtime, queries, len, NULL);
        for (guint i = 0; i < len; i++) {
            if (queries[i].error)
                g_error("bare ContainerStatus: %s", queries[i].error->message);
            pleg_status_query_clear(&queries[i]);
        }
        done += len;
    }
    return NULL;
}

/* The runtime's own time for @n status calls: a bare CRI client, BARE_IN_FLIGHT at once. */
static double
runtime_answer_ms(HostFixture *fx, GPtrArray *ids, guint n)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *endpoint = g_strconcat("unix://", fx->socket_path, NULL);
    g_autoptr(PlegCriClient) client = pleg_cri_client_new(endpoint, 60 * G_USEC_PER_SEC, &error);
    g_autoptr(PlegRuntime) runtime = NULL;
    BareThread threads[BARE_IN_FLIGHT / BARE_ARRAY];
    GThread *handles[G_N_ELEMENTS(threads)];
    gint64 start;

    if (!client)
        g_error("bare client: %s", error->message);
    runtime = pleg_cri_client_as_runtime(client);
    start = g_get_monotonic_time();
    for (guint t = 0; t < G_N_ELEMENTS(threads); t++) {
        threads[t] = (BareThread){runtime, ids, t * (n / G_N_ELEMENTS(threads)),
                                  n / G_N_ELEMENTS(threads) +
                                      (t == 0 ? n % G_N_ELEMENTS(threads) : 0)};
        handles[t] = g_thread_new("bare", bare_thread, &threads[t]);
    }
    for (guint t = 0; t < G_N_ELEMENTS(threads); t++)
        g_thread_join(handles[t]);
    return (double)(g_get_monotonic_time() - start) / 1000.0;
}

static gboolean
run(guint n_pods, guint n_containers, gint64 window_usec, Round *ret)
{
    HostFixture *fx = host_fixture_new();
    g_autoptr(GArray) latencies = g_array_new(FALSE, FALSE, sizeof(double));
    g_autoptr(GError) error = NULL;
    Storm s = {.fx = fx, .n_exits = n_pods * n_containers, .window_usec = window_usec};
    RelistWait w = {fx, 2, TRUE};
    double queued0, dropped0, coalesced0, queued, dropped, coalesced;
    PlegMetric *pod_relist;
    guint64 pod_relists0;
    guint calls0;
    double pod_relist_sum0;
    GThread *thread;
    gboolean ok;

    g_mutex_init(&s.lock);
    s.index = g_hash_table_new(g_str_hash, g_str_equal);
    s.ids = g_ptr_array_new_with_free_func(g_free);
    s.exited_usec = g_new0(gint64, s.n_exits);
    s.died_usec = g_new0(gint64, s.n_exits);
    s.n_reports = g_new0(guint, s.n_exits);

    /* Exit i is of pod i % n_pods: the pods in turn, so that every pod changes again and again
     * during the window. */
    for (guint i = 0; i < s.n_exits; i++) {
        guint pod = i % n_pods, c = i / n_pods;

        g_ptr_array_add(s.ids, g_strdup_printf("storm-%u-%u", pod, c));
        g_hash_table_insert(s.index, g_ptr_array_index(s.ids, i), GUINT_TO_POINTER(i + 1));
    }
    for (guint p = 0; p < n_pods; p++) {
        g_autofree char *uid = g_strdup_printf("storm-%u", p);

        if (!cri_sim_add_pod(fx->sim, uid, NULL, &error))
            g_error("setup: %s", error->message);
        for (guint c = 0; c < n_containers; c++) {
            g_autofree char *id = g_strdup_printf("storm-%u-%u", p, c);
            CriSimContainerSpec spec = {
                .id = id,
                .pod_uid = uid,
                .name = id,
                .state = CRI_SIM_CONTAINER_RUNNING,
            };

            if (!cri_sim_add_container_full(fx->sim, &spec, NULL, &error))
                g_error("setup: %s", error->message);
        }
    }

    fx->keep_events = FALSE;
    fx->on_event = on_event;
    fx->on_event_data = &s;
    host_fixture_start(fx, TRUE, 0);
    if (!host_fixture_wait(fx, relists_reach, &w, 60 * G_USEC_PER_SEC))
        g_error("host not ready");

    queued0 = requests(fx, "queued");
    dropped0 = requests(fx, "dropped");
    coalesced0 = requests(fx, "coalesced");
    pod_relist = pleg_metrics_lookup(pleg_host_get_metrics(fx->host),
                                     "kubelet_pleg_pod_relist_duration_seconds");
    pod_relists0 = pleg_metric_get_count(pod_relist, NULL);
    pod_relist_sum0 = pleg_metric_get(pod_relist, NULL);

    calls0 = status_calls(fx->sim);
    thread = g_thread_new("storm-pacer", pacer, &s);
    ok = host_fixture_wait(fx, all_died, &s, window_usec + 60 * G_USEC_PER_SEC);
    g_thread_join(thread);
    ret->status_calls = status_calls(fx->sim) - calls0;
    /* Two global relists more: a second report of an exit would come by then. */
    w = (RelistWait){fx, host_fixture_count_relists(fx) + 2, FALSE};
    if (!host_fixture_wait(fx, relists_reach, &w, 30 * G_USEC_PER_SEC))
        g_error("no global relist after the storm");

    queued = requests(fx, "queued") - queued0;
    dropped = requests(fx, "dropped") - dropped0;
    coalesced = requests(fx, "coalesced") - coalesced0;
    ret->requests = queued + dropped + coalesced;
    ret->drops = ret->requests > 0 ? dropped / ret->requests : 0;
    ret->pod_relists = pleg_metric_get_count(pod_relist, NULL) - pod_relists0;
    ret->mean_pod_relist_ms = ret->pod_relists ? (pleg_metric_get(pod_relist, NULL) -
                                                  pod_relist_sum0) /
                                                     (double)ret->pod_relists * 1000.0
                                               : 0;

    g_mutex_lock(&s.lock);
    for (guint i = 0; i < s.n_exits; i++) {
        if (s.n_reports[i] > 1)
            ret->n_repeated++;
        if (s.died_usec[i]) {
            double ms = (double)(s.died_usec[i] - s.exited_usec[i]) / 1000.0;

            g_array_append_val(latencies, ms);
        }
    }
    ret->n_died = s.n_died;
    ret->n_wrong_code = s.n_wrong_code;
    g_mutex_unlock(&s.lock);
    g_array_sort(latencies, compare_double);
    ret->p50_ms = percentile_ms(latencies, 0.50);
    ret->p99_ms = percentile_ms(latencies, 0.99);
    ret->max_ms = percentile_ms(latencies, 1.0);

    /* The PLEG is idle now: its global relists find nothing to inspect. */
    ret->runtime_ms = runtime_answer_ms(fx, s.ids, ret->status_calls);

    fx->on_event = NULL;
    host_fixture_free(fx);
    g_hash_table_unref(s.index);
    g_ptr_array_unref(s.ids);
    g_free(s.exited_usec);
    g_free(s.died_usec);
    g_free(s.n_reports);
    g_mutex_clear(&s.lock);
    return ok && ret->n_repeated == 0 && ret->n_wrong_code == 0;
}

int
main(int argc, char **argv)
{
    int pods = 1000, containers = 5, window_ms = 500, rounds = 3;
    g_autofree char *json_path = NULL;
    const GOptionEntry entries[] = {
        {"pods", 0, 0, G_OPTION_ARG_INT, &pods, "Pods", "N"},
        {"containers", 0, 0, G_OPTION_ARG_INT, &containers, "Running containers a pod", "N"},
        {"window-ms", 0, 0, G_OPTION_ARG_INT, &window_ms, "All exits within", "MS"},
        {"rounds", 0, 0, G_OPTION_ARG_INT, &rounds, "Storms", "N"},
        {"json", 0, 0, G_OPTION_ARG_FILENAME, &json_path, "Write the figures here", "FILE"},
        {NULL},
    };
    g_autoptr(GOptionContext) context = g_option_context_new("- termination storm benchmark");
    g_autoptr(GError) error = NULL;
    g_autofree Round *results = NULL;
    g_autofree double *drops = NULL, *p99 = NULL, *p50 = NULL, *runtime = NULL;
    double drops_med, drops_min, drops_max, p99_med, p99_min, p99_max, p50_med, p50_min, p50_max;
    double rt_med, rt_min, rt_max;
    gboolean ok = TRUE;

    g_option_context_add_main_entries(context, entries, NULL);
    if (!g_option_context_parse(context, &argc, &argv, &error)) {
        g_printerr("bench-storm: %s\n", error->message);
        return 2;
    }
    if (argc != 1 || pods < 1 || containers < 1 || window_ms < 0 || rounds < 1) {
        g_printerr("usage: bench-storm [--pods=N] [--containers=N] [--window-ms=MS] "
                   "[--rounds=N] [--json=FILE]\n");
        return 2;
    }

    results = g_new0(Round, rounds);
    drops = g_new0(double, rounds);
    p99 = g_new0(double, rounds);
    p50 = g_new0(double, rounds);
    runtime = g_new0(double, rounds);
    printf("storm: %d pods x %d containers, all exiting within %d ms, EventedPLEG on, queue of "
           "%d:\n",
           pods, containers, window_ms, PLEG_DEFAULT_RELIST_QUEUE_CAPACITY);
    for (int r = 0; r < rounds; r++) {
        Round *x = &results[r];

        if (!run((guint)pods, (guint)containers, (gint64)window_ms * 1000, x)) {
            printf("GOAL MISSED: round %d: %u of %d exits reported, %u reported more than once, "
                   "%u with a wrong exit code\n",
                   r + 1, x->n_died, pods * containers, x->n_repeated, x->n_wrong_code);
            ok = FALSE;
        }
        printf("  round %d: requests %.0f, dropped %.2f %%, p50 %.1f ms, p99 %.1f ms, max %.1f "
               "ms; %" G_GUINT64_FORMAT " requests served, %.1f ms a pass on average; %u status "
               "calls, the runtime's own time for them %.1f ms\n",
               r + 1, x->requests, x->drops * 100, x->p50_ms, x->p99_ms, x->max_ms,
               x->pod_relists, x->mean_pod_relist_ms, x->status_calls, x->runtime_ms);
        runtime[r] = x->runtime_ms;
        drops[r] = x->drops;
        p99[r] = x->p99_ms;
        p50[r] = x->p50_ms;
    }
    perf_stats(drops, rounds, &drops_med, &drops_min, &drops_max);
    perf_stats(p99, rounds, &p99_med, &p99_min, &p99_max);
    perf_stats(p50, rounds, &p50_med, &p50_min, &p50_max);
    perf_stats(runtime, rounds, &rt_med, &rt_min, &rt_max);
    printf("  median [min-max]: dropped %.2f %% [%.2f-%.2f] (goal <= %.0f %%), p50 %.1f ms "
           "[%.1f-%.1f], p99 %.1f ms [%.1f-%.1f] (goal <= %.0f ms)\n",
           drops_med * 100, drops_min * 100, drops_max * 100, GOAL_DROPS * 100, p50_med,
           p50_min, p50_max, p99_med, p99_min, p99_max, GOAL_P99_MS);
    if (drops_med > GOAL_DROPS) {
        printf("GOAL MISSED: over %.0f %% of the relist requests were dropped\n",
               GOAL_DROPS * 100);
        ok = FALSE;
    }
    printf("  runtime's own answer time %.1f ms [%.1f-%.1f]; p99 / that %.3fx (goal <= %.2fx when "
           "p99 > %.0f ms)\n",
           rt_med, rt_min, rt_max, p99_med / rt_med, GOAL_RUNTIME_RATIO, GOAL_P99_MS);
    if (p99_med > GOAL_P99_MS && p99_med > GOAL_RUNTIME_RATIO * rt_med) {
        printf("GOAL MISSED: p99 exit -> ContainerDied over %.0f ms and over %.2fx the runtime's "
               "own answer time\n",
               GOAL_P99_MS, GOAL_RUNTIME_RATIO);
        ok = FALSE;
    }

    if (json_path) {
        g_autoptr(JsonBuilder) builder = json_builder_new();

        json_builder_begin_object(builder);
        json_builder_set_member_name(builder, "benchmark");
        json_builder_add_string_value(builder, "storm");
        json_builder_set_member_name(builder, "pods");
        json_builder_add_int_value(builder, pods);
        json_builder_set_member_name(builder, "containers_per_pod");
        json_builder_add_int_value(builder, containers);
        json_builder_set_member_name(builder, "window_ms");
        json_builder_add_int_value(builder, window_ms);
        perf_json_add_stat(builder, "dropped_fraction", drops_med, drops_min, drops_max);
        perf_json_add_stat(builder, "p50_ms", p50_med, p50_min, p50_max);
        perf_json_add_stat(builder, "p99_ms", p99_med, p99_min, p99_max);
        perf_json_add_stat(builder, "runtime_answer_ms", rt_med, rt_min, rt_max);
        json_builder_set_member_name(builder, "goal_met");
        json_builder_add_boolean_value(builder, ok);
        json_builder_end_object(builder);
        if (!perf_json_write(builder, json_path, &error)) {
            g_printerr("bench-storm: %s\n", error->message);
            return 2;
        }
    }
    return ok ? 0 : 1;
}
