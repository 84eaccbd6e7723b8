/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-events-filter: plegd's CPU per event for 100 /events clients with a filter that matches
 * about 10 % of the events, against 100 clients without a filter, side by side in one run.
 *
 *   bench-events-filter [--events=10000] [--clients=100] [--rounds=5] [--json=FILE]
 *
 * Each round runs three child processes one after the other, in turn forwards and backwards:
 * "unfiltered" (GET /events), "filtered" (GET /events?namespace=shop, every tenth pod's
 * namespace) and "all" (a filter of type and sandbox that every event passes: what matching
 * costs when it saves no writing; printed, not a goal).  A child serves /events with plegd's own
 * code (plegd_events_serve() on a SoupServer on loopback), connects the clients, and publishes
 * --events events through plegd_events_publish() in batches of 200, as plegd does with what it
 * takes from the PLEG; after each batch its main thread runs the main context until every client
 * has read every line it is owed.  The clients read on a thread of their own, so that the main
 * thread's CPU time (CLOCK_THREAD_CPUTIME_ID) is plegd's side alone: the seq, the JSON line, the
 * ring and its key, the filters, libsoup's chunks and the kernel's send().
 *
 * Goal (issue 20): the filtered clients cost no more CPU per event than the unfiltered ones
 * (median over the rounds).  Exits 1 when it is missed, 2 when a client misses a line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "perf-common.h"
#include "plegd.h"

#define BATCH     200
#define RING_SIZE 10000
#define SHOP      "shop"

typedef struct {
    char pod_uid[37];
    char container_id[65];
    char pod_name[32];
    char container_name[16];
    PlegPodLifecycleEvent event;
} BenchEvent;

/* Pods of four events each (ContainerStarted, ContainerDied, ContainerRemoved, PodSync); every
 * tenth pod is in namespace "shop". */
static void
bench_event_init(BenchEvent *be, guint i)
{
    static const PlegPodLifecycleEventType types[] = {
        PLEG_CONTAINER_STARTED,
        PLEG_CONTAINER_DIED,
        PLEG_CONTAINER_REMOVED,
        PLEG_POD_SYNC,
    };
    static const char *const namespaces[] = {SHOP,    "default", "kube-system", "monitoring",
                                             "batch", "web",     "payments",    "search",
                                             "mail",  "ci"};
    guint pod = i / 4;

    g_snprintf(be->pod_uid, sizeof(be->pod_uid), "%08x-5a1e-4c0d-9b7f-%012x", pod * 2654435761u,
               pod);
    for (guint k = 0; k < 64; k += 8)
        g_snprintf(be->container_id + k, 9, "%08x", (pod + k) * 2246822519u);
    g_snprintf(be->pod_name, sizeof(be->pod_name), "web-%u", pod);
    g_snprintf(be->container_name, sizeof(be->container_name), "app");
    be->event = (PlegPodLifecycleEvent){
        .pod_uid = be->pod_uid,
        .type = types[i % 4],
        .container_id = be->container_id,
        .relist_source = PLEG_RELIST_SOURCE_GLOBAL,
        .time_ns = g_get_real_time() * 1000,
        .details =
            {
                .pod_namespace = (char *)namespaces[pod % G_N_ELEMENTS(namespaces)],
                .pod_name = be->pod_name,
                .container_name = be->container_name,
                .attempt = 0,
            },
    };
    if (be->event.type == PLEG_CONTAINER_DIED) {
        be->event.has_exit = TRUE;
        be->event.exit_code = (int)(i % 256);
        be->event.reason = (char *)"Error";
        be->event.finished_at_ns = be->event.time_ns - 250000000;
    }
}

/* ---- the child ---- */

typedef struct {
    GSocket *socket;
    guint64 lines;
    char last; /* the last byte read: a line ends with "}\n", split or not */
} BenchClient;

static GMainContext *main_context;
static gint64 lines_read;   /* atomic: lines every client read */
static gint64 lines_target; /* atomic: the main thread waits for this many */

static gboolean
on_client_readable(GSocket *socket, GIOCondition condition, gpointer data)
{
    BenchClient *client = data;
    char buffer[65536];
    gssize n = g_socket_receive(socket, buffer, sizeof buffer, NULL, NULL);
    guint found = 0;

    if (n <= 0)
        return G_SOURCE_REMOVE;
    for (gssize i = 0; i < n; i++) {
        if (buffer[i] == '\n' && (i > 0 ? buffer[i - 1] : client->last) == '}')
            found++;
    }
    client->last = buffer[n - 1];
    client->lines += found;
    if (found > 0 && g_atomic_pointer_add((gssize *)&lines_read, found) + found >=
                         (gssize)g_atomic_pointer_get((gssize *)&lines_target))
        g_main_context_wakeup(main_context);
    return G_SOURCE_CONTINUE;
}

static gpointer
reader_thread(gpointer data)
{
    GMainContext *context = data;

    for (;;)
        g_main_context_iteration(context, TRUE);
    return NULL;
}

static void
on_events_request(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *query,
                  gpointer data)
{
    plegd_events_serve(data, msg, NULL);
}

static gint64
thread_cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (gint64)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The filter of each mode: "all" matches every event, to show what matching alone costs. */
static const char *
mode_query(const char *mode)
{
    if (g_str_equal(mode, "filtered"))
        return "?namespace=" SHOP;
    if (g_str_equal(mode, "all"))
        return "?type=ContainerStarted&type=ContainerDied&type=ContainerRemoved&type=PodSync"
               "&sandbox=false";
    return "";
}

static int
child(const char *mode, guint n_events, guint n_clients)
{
    gboolean filtered = g_str_equal(mode, "filtered");
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    g_autoptr(SoupServer) server = soup_server_new(NULL, NULL);
    g_autoptr(GError) error = NULL;
    GMainContext *reader_context = g_main_context_new();
    g_autofree BenchEvent *bench = g_new0(BenchEvent, n_events);
    g_autofree BenchClient *clients = g_new0(BenchClient, n_clients);
    PlegdEvents *events;
    GSList *uris;
    guint port;
    g_autofree char *request =
        g_strdup_printf("GET /events%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", mode_query(mode));
    guint64 owed = 0;
    gint64 start_ns, cpu_ns;

    main_context = g_main_context_default();
    events = plegd_events_new(RING_SIZE, n_clients, registry);
    soup_server_add_handler(server, "/events", on_events_request, events, NULL);
    if (!soup_server_listen_local(server, 0, SOUP_SERVER_LISTEN_IPV4_ONLY, &error)) {
        g_printerr("bench-events-filter: %s\n", error->message);
        return 2;
    }
    uris = soup_server_get_uris(server);
    port = (guint)g_uri_get_port(uris->data);
    g_slist_free_full(uris, (GDestroyNotify)g_uri_unref);

    for (guint i = 0; i < n_events; i++)
        bench_event_init(&bench[i], i);

    for (guint i = 0; i < n_clients; i++) {
        g_autoptr(GInetAddress) loopback = g_inet_address_new_loopback(G_SOCKET_FAMILY_IPV4);
        g_autoptr(GSocketAddress) address = g_inet_socket_address_new(loopback, (guint16)port);
        GSource *source;

        clients[i].socket =
            g_socket_new(G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_TCP, &error);
        if (!clients[i].socket || !g_socket_connect(clients[i].socket, address, NULL, &error) ||
            g_socket_send(clients[i].socket, request, strlen(request), NULL, &error) < 0) {
            g_printerr("bench-events-filter: %s\n", error->message);
            return 2;
        }
        /* One at a time: the listening socket's backlog is short. */
        while (plegd_events_get_n_clients(events) < i + 1)
            g_main_context_iteration(main_context, TRUE);
        g_socket_set_blocking(clients[i].socket, FALSE);
        source = g_socket_create_source(clients[i].socket, G_IO_IN, NULL);
        g_source_set_callback(source, G_SOURCE_FUNC(on_client_readable), &clients[i], NULL);
        g_source_attach(source, reader_context);
        g_source_unref(source);
    }
    g_thread_unref(g_thread_new("readers", reader_thread, reader_context));

    start_ns = thread_cpu_ns();
    for (guint i = 0; i < n_events; i += BATCH) {
        for (guint k = i; k < i + BATCH && k < n_events; k++) {
            g_autoptr(GBytes) line = plegd_events_publish(events, &bench[k].event, NULL);

            if (!filtered || g_str_equal(bench[k].event.details.pod_namespace, SHOP))
                owed += n_clients;
        }
        g_atomic_pointer_set((gssize *)&lines_target, (gssize)owed);
        while ((guint64)g_atomic_pointer_get((gssize *)&lines_read) < owed)
            g_main_context_iteration(main_context, TRUE);
    }
    cpu_ns = thread_cpu_ns() - start_ns;

    for (guint i = 0; i < n_clients; i++) {
        if (clients[i].lines != owed / n_clients) {
            g_printerr("bench-events-filter: client %u read %" G_GUINT64_FORMAT
                       " lines of %" G_GUINT64_FORMAT "\n",
                       i, clients[i].lines, owed / n_clients);
            return 2;
        }
    }
    printf("%.1f %" G_GUINT64_FORMAT "\n", (double)cpu_ns / n_events, owed / n_clients);
    fflush(stdout);
    /* The reader thread still polls the sockets: leave without tearing down. */
    _exit(0);
}

/* ---- the parent ---- */

static double
run_child(const char *self, const char *mode, guint n_events, guint n_clients, guint64 *ret_lines)
{
    g_autofree char *mode_arg = g_strdup_printf("--child=%s", mode);
    g_autofree char *events_arg = g_strdup_printf("--events=%u", n_events);
    g_autofree char *clients_arg = g_strdup_printf("--clients=%u", n_clients);
    const char *argv[] = {self, mode_arg, events_arg, clients_arg, NULL};
    g_autofree char *out = perf_run_child(argv);
    double per_event = 0;

    if (sscanf(out, "%lf %" G_GUINT64_FORMAT, &per_event, ret_lines) != 2) {
        g_printerr("bench-events-filter: %s printed \"%s\"\n", mode, out);
        exit(2);
    }
    return per_event;
}

int
main(int argc, char **argv)
{
    g_autofree char *json_path = NULL;
    g_autofree char *child_mode = NULL;
    int n_events = 10000, n_clients = 100, rounds = 5;
    const GOptionEntry entries[] = {
        {"events", 0, 0, G_OPTION_ARG_INT, &n_events, "Events published per child", "N"},
        {"clients", 0, 0, G_OPTION_ARG_INT, &n_clients, "Clients per child", "N"},
        {"rounds", 0, 0, G_OPTION_ARG_INT, &rounds, "Children per mode", "N"},
        {"json", 0, 0, G_OPTION_ARG_FILENAME, &json_path, "Write the figures here", "FILE"},
        {"child", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &child_mode, NULL, NULL},
        {NULL},
    };
    g_autoptr(GOptionContext) context = g_option_context_new(NULL);
    g_autoptr(GError) error = NULL;
    g_autofree double *unfiltered = NULL;
    g_autofree double *filtered = NULL;
    g_autofree double *all = NULL;
    double u_median, u_min, u_max, f_median, f_min, f_max, a_median, a_min, a_max, ratio;
    guint64 u_lines = 0, f_lines = 0, a_lines = 0;
    gboolean ok;

    g_option_context_add_main_entries(context, entries, NULL);
    if (!g_option_context_parse(context, &argc, &argv, &error)) {
        g_printerr("bench-events-filter: %s\n", error->message);
        return 2;
    }
    if (n_events < 1 || n_clients < 1 || n_clients > PLEGD_EVENTS_MAX_MAX_CLIENTS || rounds < 1 ||
        argc != 1) {
        g_printerr("usage: bench-events-filter [--events=N] [--clients=N] [--rounds=N] "
                   "[--json=FILE]\n");
        return 2;
    }
    if (child_mode)
        return child(child_mode, (guint)n_events, (guint)n_clients);

    unfiltered = g_new(double, rounds);
    filtered = g_new(double, rounds);
    all = g_new(double, rounds);
    for (int r = 0; r < rounds; r++) {
        if (r % 2 == 0) {
            unfiltered[r] = run_child(argv[0], "unfiltered", n_events, n_clients, &u_lines);
            filtered[r] = run_child(argv[0], "filtered", n_events, n_clients, &f_lines);
            all[r] = run_child(argv[0], "all", n_events, n_clients, &a_lines);
        } else {
            all[r] = run_child(argv[0], "all", n_events, n_clients, &a_lines);
            filtered[r] = run_child(argv[0], "filtered", n_events, n_clients, &f_lines);
            unfiltered[r] = run_child(argv[0], "unfiltered", n_events, n_clients, &u_lines);
        }
        printf("round %d: unfiltered %.0f ns, filtered %.0f ns, matching all %.0f ns of plegd's "
               "CPU per event\n",
               r + 1, unfiltered[r], filtered[r], all[r]);
    }
    perf_stats(unfiltered, (guint)rounds, &u_median, &u_min, &u_max);
    perf_stats(filtered, (guint)rounds, &f_median, &f_min, &f_max);
    perf_stats(all, (guint)rounds, &a_median, &a_min, &a_max);
    ratio = f_median / u_median;
    ok = ratio <= 1.0;
    printf("%d clients, %d events: unfiltered %.0f ns per event (%.0f-%.0f), %" G_GUINT64_FORMAT
           " lines a client; namespace=" SHOP " %.0f ns per event (%.0f-%.0f), %" G_GUINT64_FORMAT
           " lines a client; ratio %.2f (goal <= 1)\n",
           n_clients, n_events, u_median, u_min, u_max, u_lines, f_median, f_min, f_max, f_lines,
           ratio);
    printf("a filter that matches every event (not a goal): %.0f ns per event (%.0f-%.0f), "
           "%" G_GUINT64_FORMAT " lines a client, %.2fx unfiltered\n",
           a_median, a_min, a_max, a_lines, a_median / u_median);
    if (!ok)
        printf("GOAL MISSED: a filtered stream costs %.2fx an unfiltered one per event\n", ratio);

    if (json_path) {
        g_autoptr(JsonBuilder) builder = json_builder_new();

        json_builder_begin_object(builder);
        json_builder_set_member_name(builder, "benchmark");
        json_builder_add_string_value(builder, "events-filter");
        json_builder_set_member_name(builder, "events");
        json_builder_add_int_value(builder, n_events);
        json_builder_set_member_name(builder, "clients");
        json_builder_add_int_value(builder, n_clients);
        perf_json_add_stat(builder, "unfiltered_ns_per_event", u_median, u_min, u_max);
        perf_json_add_stat(builder, "filtered_ns_per_event", f_median, f_min, f_max);
        perf_json_add_stat(builder, "match_all_ns_per_event", a_median, a_min, a_max);
        json_builder_set_member_name(builder, "ratio");
        json_builder_add_double_value(builder, ratio);
        json_builder_set_member_name(builder, "goals_met");
        json_builder_add_boolean_value(builder, ok);
        json_builder_end_object(builder);
        if (!perf_json_write(builder, json_path, &error)) {
            g_printerr("bench-events-filter: %s\n", error->message);
            return 2;
        }
    }
    return ok ? 0 : 1;
}
