/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd's health endpoints (/livez, /healthz, /readyz, and /status, whose round runs both
 * kinds): rounds of the host's health checkers on threads of their own, the requests that wait
 * for them, and their bounds.
 */
#include <libsoup/soup.h>

#include "http-private.h"

/* Kubernetes components' health endpoints: /livez (with /healthz as its alias) fails only for
 * what restarting plegd can fix, and the systemd watchdog follows the same round; /readyz also
 * fails before the first successful relist and while the runtime is unreachable.  The plain
 * answer names the first failing check; ?verbose lists every check, and ?exclude=NAME (any
 * number of times) leaves a check out of the verdict, as kube-apiserver's do.
 *
 * Checkers run on a worker thread, one round of each kind at a time: a plugin's checker that
 * blocks must not block the main context, and with it every scrape and /events stream.  A
 * request that comes while a round runs waits for that round's verdicts. */
typedef struct _HealthRound HealthRound;

typedef struct _HealthWaiter {
    SoupServerMessage *msg; /* a reference; paused until the round ends */
    gulong disconnected_id;
    HealthRound *round; /* NULL once it left the round's list */
    Connection *conn;   /* (nullable) its connection, which points back at it */
    gboolean verbose;
    gboolean as_healthz; /* asked as /healthz, the alias of /livez */
    GPtrArray *excluded; /* the names of ?exclude=, each once */
} HealthWaiter;

/* The rounds' threads, counted so that plegd_http_wait_rounds() can tell whether one still
 * runs (a hung checker) before the host is freed.  Shared: a thread outlives the server. */
typedef struct _RoundThreads {
    gatomicrefcount refs;
    GMutex lock;
    GCond cond;
    guint running;
} RoundThreads;

struct _HealthRound {
    PlegdHttp *http; /* NULL once the server is freed */
    PlegHost *host;
    RoundThreads *threads;
    RoundKind kind;
    GMainContext *context; /* the server's, where the answers go out */
    GPtrArray *waiters;    /* HealthWaiter; only the server's context touches them */
    /* By PlegHealthKind: PlegHealthResult, set by the round's thread; a status round sets
     * both, the others their own kind's. */
    GPtrArray *results[2];
};

static const struct {
    const char *endpoint;
    guint failure_status;
} health_answers[] = {
    [ROUND_LIVENESS] = {"livez", SOUP_STATUS_INTERNAL_SERVER_ERROR},
    [ROUND_READINESS] = {"readyz", SOUP_STATUS_SERVICE_UNAVAILABLE},
    [ROUND_STATUS] = {"status", 0}, /* 200 whatever the verdicts (status-http.c) */
};

static gboolean
str_ptr_array_remove(GPtrArray *array, const char *name)
{
    guint index;

    return g_ptr_array_find_with_equal_func(array, name, g_str_equal, &index) &&
           g_ptr_array_remove_index(array, index);
}

/* Answers @waiter's request from a round's @results. */
static void
health_answer(PlegdHttp *http, const HealthWaiter *waiter, GPtrArray *results,
              PlegHealthKind kind)
{
    /* The endpoint's name as asked: "healthz" is the alias of "livez". */
    const char *endpoint = waiter->as_healthz ? "healthz" : health_answers[kind].endpoint;
    g_autoptr(GString) body = g_string_new(NULL);
    /* The names of @waiter->excluded, borrowed, that no check has matched yet. */
    g_autoptr(GPtrArray) unmatched = g_ptr_array_new();
    const PlegHealthResult *failed = NULL;
    gboolean verbose = waiter->verbose;

    g_ptr_array_extend(unmatched, waiter->excluded, NULL, NULL);

    for (guint i = 0; i < results->len; i++) {
        const PlegHealthResult *result = g_ptr_array_index(results, i);
        /* A plugin's reason is its own text: escaped and cut, like everything untrusted. */
        g_autofree char *reason =
            result->error ? pleg_log_text(result->error->message, -1, 1024) : NULL;

        /* Excluded: it ran with the round, but its verdict does not count. */
        if (str_ptr_array_remove(unmatched, result->name)) {
            if (verbose)
                g_string_append_printf(body, "[+]%s excluded: ok\n", result->name);
            continue;
        }
        if (result->error && !failed) {
            failed = result;
            if (!verbose)
                g_string_append_printf(body, "%s failed: %s", result->name, reason);
        }
        if (!verbose)
            continue;
        if (result->error)
            g_string_append_printf(body, "[-]%s failed: %s\n", result->name, reason);
        else
            g_string_append_printf(body, "[+]%s ok\n", result->name);
    }
    if (verbose && unmatched->len > 0) {
        /* A name no check has: a typo, or a check of another component's. */
        g_string_append(body, "warn: some health checks cannot be excluded: no matches for ");
        for (guint i = 0; i < unmatched->len; i++) {
            g_autofree char *shown = pleg_log_text(unmatched->pdata[i], -1, 256);

            g_string_append_printf(body, "%s\"%s\"", i ? "," : "", shown);
        }
        g_string_append_c(body, '\n');
    }
    /* What readiness shows without counting it (a state directory that cannot be written). */
    for (guint i = 0; verbose && kind == PLEG_HEALTH_READINESS && i < http->readiness_infos->len;
         i++) {
        const ReadinessInfo *info = g_ptr_array_index(http->readiness_infos, i);
        g_autofree char *text = info->func(info->data);

        g_string_append_printf(body, "[+]%s ok (informational): %s\n", info->name, text);
    }
    if (verbose)
        g_string_append_printf(body, "%s check %s\n", endpoint, failed ? "failed" : "passed");
    else if (!failed)
        g_string_append(body, "ok");
    plegd_http_respond(waiter->msg, failed ? health_answers[kind].failure_status : SOUP_STATUS_OK,
            TEXT_CONTENT_TYPE, g_string_free(g_steal_pointer(&body), FALSE));
}

static RoundThreads *
round_threads_ref(RoundThreads *threads)
{
    g_atomic_ref_count_inc(&threads->refs);
    return threads;
}

static void
round_threads_unref(RoundThreads *threads)
{
    if (!threads || !g_atomic_ref_count_dec(&threads->refs))
        return;
    g_cond_clear(&threads->cond);
    g_mutex_clear(&threads->lock);
    g_free(threads);
}

static void
health_waiter_free(HealthWaiter *waiter)
{
    if (waiter->conn)
        waiter->conn->waiter = NULL;
    g_signal_handler_disconnect(waiter->msg, waiter->disconnected_id);
    g_object_unref(waiter->msg);
    g_ptr_array_unref(waiter->excluded);
    g_free(waiter);
}

static void
count_waiters(PlegdHttp *http, RoundKind kind)
{
    const char *labels[] = {health_answers[kind].endpoint, NULL};
    HealthRound *round = http->rounds[kind];

    pleg_metric_set(http->health_waiters, labels, round ? round->waiters->len : 0);
}

/* Takes @waiter out of its round and frees it, unanswered (its client or its connection is
 * gone).  A waiter no longer in a round's list is being answered: left alone. */
static void
health_waiter_leave(HealthWaiter *waiter)
{
    HealthRound *round = waiter->round;

    if (!round)
        return;
    waiter->round = NULL;
    g_ptr_array_remove_fast(round->waiters, waiter);
    if (round->http)
        count_waiters(round->http, round->kind);
}

void
plegd_http_health_waiter_lose_connection(HealthWaiter *waiter)
{
    waiter->conn = NULL;
    health_waiter_leave(waiter);
}

void
plegd_http_health_waiter_time_out(HealthWaiter *waiter, gint64 waited_usec)
{
    SoupServerMessage *msg = g_object_ref(waiter->msg);
    g_autofree char *waited = pleg_duration_format(waited_usec);

    plegd_http_respond(msg, SOUP_STATUS_SERVICE_UNAVAILABLE, TEXT_CONTENT_TYPE,
            g_strdup_printf("the health checks did not finish within %s (a health checker does "
                            "not return)\n",
                            waited));
    health_waiter_leave(waiter);
    soup_server_message_unpause(msg);
    g_object_unref(msg);
}

static void
on_health_waiter_gone(SoupServerMessage *msg, gpointer user_data)
{
    health_waiter_leave(user_data);
}

static void
health_round_free(HealthRound *round)
{
    g_clear_pointer(&round->waiters, g_ptr_array_unref); /* NULL once the round ended */
    g_clear_pointer(&round->results[PLEG_HEALTH_LIVENESS], g_ptr_array_unref);
    g_clear_pointer(&round->results[PLEG_HEALTH_READINESS], g_ptr_array_unref);
    round_threads_unref(round->threads);
    g_main_context_unref(round->context);
    g_free(round);
}

/* In the server's context, once the round's thread has the verdicts. */
static gboolean
health_round_done(gpointer data)
{
    HealthRound *round = data;
    g_autoptr(GPtrArray) waiters = g_steal_pointer(&round->waiters);

    /* Answering may disconnect a client: no waiter leaves the list while it is walked. */
    for (guint i = 0; i < waiters->len; i++)
        ((HealthWaiter *)g_ptr_array_index(waiters, i))->round = NULL;
    if (round->http) {
        round->http->rounds[round->kind] = NULL;
        count_waiters(round->http, round->kind);
    }
    for (guint i = 0; i < waiters->len && round->http; i++) {
        HealthWaiter *waiter = g_ptr_array_index(waiters, i);

        if (round->kind == ROUND_STATUS)
            plegd_status_respond(round->http, waiter->msg,
                                 round->results[PLEG_HEALTH_LIVENESS],
                                 round->results[PLEG_HEALTH_READINESS]);
        else
            health_answer(round->http, waiter, round->results[round->kind],
                          (PlegHealthKind)round->kind);
        soup_server_message_unpause(waiter->msg);
    }
    return G_SOURCE_REMOVE;
}

/* A thread of its own for each round (at most one per kind at a time): GLib's and libpleg's
 * hand-offs are what ThreadSanitizer's shim sees, GTask's internal pool is not. */
static gpointer
health_round_thread(gpointer data)
{
    HealthRound *round = data;
    /* Its own reference: the round may be done and freed in the server's context before this
     * thread has said it is no longer running. */
    RoundThreads *threads = round_threads_ref(round->threads);

    if (round->kind != ROUND_READINESS)
        round->results[PLEG_HEALTH_LIVENESS] =
            pleg_host_check_all(round->host, PLEG_HEALTH_LIVENESS);
    if (round->kind != ROUND_LIVENESS)
        round->results[PLEG_HEALTH_READINESS] =
            pleg_host_check_all(round->host, PLEG_HEALTH_READINESS);
    g_main_context_invoke_full(round->context, G_PRIORITY_DEFAULT, health_round_done, round,
                               (GDestroyNotify)health_round_free);
    /* Last, so that plegd_http_wait_rounds() returns only once this thread is done with GLib
     * and with the round: what it allocated and freed happens before what the caller does
     * next, as ThreadSanitizer sees it too. */
    g_mutex_lock(&threads->lock);
    threads->running--;
    g_cond_broadcast(&threads->cond);
    g_mutex_unlock(&threads->lock);
    round_threads_unref(threads);
    return NULL;
}

static void
start_round(PlegdHttp *http, RoundKind kind)
{
    HealthRound *round = g_new0(HealthRound, 1);

    round->http = http;
    round->host = http->host;
    round->threads = round_threads_ref(http->round_threads);
    round->kind = kind;
    round->context = g_main_context_ref_thread_default();
    round->waiters = g_ptr_array_new_with_free_func((GDestroyNotify)health_waiter_free);
    http->rounds[kind] = round;
    g_mutex_lock(&http->round_threads->lock);
    http->round_threads->running++;
    g_mutex_unlock(&http->round_threads->lock);
    g_thread_unref(g_thread_new("plegd-health", health_round_thread, round));
}

static void
handle_health(PlegdHttp *http, SoupServerMessage *msg, RoundKind kind)
{
    g_autofree char *path = NULL, *query = NULL;
    g_autoptr(GPtrArray) params = NULL;
    g_autoptr(GError) error = NULL;
    HealthWaiter *waiter;
    Connection *conn;

    plegd_http_get_target(msg, &path, &query);
    params = plegd_http_parse_query(query, &error);
    if (!params) {
        plegd_http_respond(msg, SOUP_STATUS_BAD_REQUEST, TEXT_CONTENT_TYPE,
                g_strconcat(error->message, "\n", NULL));
        return;
    }
    /* /status has no options; a parameter is a mistake (a typo of another endpoint's). */
    if (kind == ROUND_STATUS && params->len > 0) {
        g_autofree char *shown = pleg_log_text(params->pdata[0], -1, 0);

        plegd_http_respond(msg, SOUP_STATUS_BAD_REQUEST, TEXT_CONTENT_TYPE,
                g_strdup_printf("unknown query parameter \"%s\" (/status takes none)\n",
                                shown));
        return;
    }
    /* No round starts once the host may be freed. */
    if (http->stopping) {
        plegd_http_respond(msg, SOUP_STATUS_SERVICE_UNAVAILABLE, TEXT_CONTENT_TYPE,
                g_strdup("plegd is shutting down\n"));
        return;
    }
    if (http->rounds[kind] && http->rounds[kind]->waiters->len >= PLEGD_HEALTH_MAX_WAITERS) {
        plegd_http_respond(msg, SOUP_STATUS_SERVICE_UNAVAILABLE, TEXT_CONTENT_TYPE,
                g_strdup_printf("%u %s requests already wait for a health check that has not "
                                "finished (a health checker does not return)\n",
                                PLEGD_HEALTH_MAX_WAITERS, health_answers[kind].endpoint));
        return;
    }
    waiter = g_new0(HealthWaiter, 1);
    waiter->as_healthz = g_str_equal(path, "/healthz");
    waiter->excluded = g_ptr_array_new_with_free_func(g_free);
    /* Other parameters are ignored, as kube-apiserver ignores them. */
    for (guint i = 0; i < params->len; i += 2) {
        const char *name = params->pdata[i], *value = params->pdata[i + 1];

        if (g_str_equal(name, "verbose"))
            waiter->verbose = TRUE;
        else if (g_str_equal(name, "exclude") &&
                 !g_ptr_array_find_with_equal_func(waiter->excluded, value, g_str_equal, NULL))
            g_ptr_array_add(waiter->excluded, g_strdup(value));
    }
    waiter->msg = g_object_ref(msg);
    waiter->disconnected_id =
        g_signal_connect(msg, "disconnected", G_CALLBACK(on_health_waiter_gone), waiter);
    soup_server_message_pause(msg);

    if (!http->rounds[kind])
        start_round(http, kind);
    waiter->round = http->rounds[kind];
    g_ptr_array_add(waiter->round->waiters, waiter);
    count_waiters(http, kind);
    /* A client that closes its end may still want the answer (a half-close after pipelined
     * requests): the waiter stays until the round ends, or until the idle timeout closes its
     * connection (plegd_http_connection_free()). */
    conn = plegd_http_lookup_connection(http, msg);
    if (conn) {
        waiter->conn = conn;
        conn->waiter = waiter;
    }
}

void
plegd_http_handle_livez(PlegdHttp *http, SoupServerMessage *msg)
{
    handle_health(http, msg, ROUND_LIVENESS);
}

void
plegd_http_handle_readyz(PlegdHttp *http, SoupServerMessage *msg)
{
    handle_health(http, msg, ROUND_READINESS);
}

void
plegd_http_handle_status(PlegdHttp *http, SoupServerMessage *msg)
{
    handle_health(http, msg, ROUND_STATUS);
}


void
plegd_http_health_init(PlegdHttp *http)
{
    http->round_threads = g_new0(RoundThreads, 1);
    g_atomic_ref_count_init(&http->round_threads->refs);
    g_mutex_init(&http->round_threads->lock);
    g_cond_init(&http->round_threads->cond);
    http->health_waiters = pleg_metrics_register(
        http->metrics, PLEG_METRIC_GAUGE, "plegd_health_waiters",
        "Health requests waiting for the health check round under way, by endpoint; at "
        "the bound further requests are answered 503 at once.",
        (const char *const[]){"endpoint", NULL}, NULL, 0);
    for (RoundKind kind = 0; kind < N_ROUNDS; kind++)
        count_waiters(http, kind);
}

/* A round still running answers nobody. */
void
plegd_http_health_detach(PlegdHttp *http)
{
    for (gsize i = 0; i < G_N_ELEMENTS(http->rounds); i++)
        if (http->rounds[i])
            http->rounds[i]->http = NULL;
}

void
plegd_http_health_clear(PlegdHttp *http)
{
    round_threads_unref(http->round_threads);
}

gboolean
plegd_http_wait_rounds(PlegdHttp *http, gint64 timeout_usec)
{
    RoundThreads *threads = http->round_threads;
    gint64 deadline = g_get_monotonic_time() + timeout_usec;
    gboolean idle;

    g_mutex_lock(&threads->lock);
    while (threads->running > 0 && g_cond_wait_until(&threads->cond, &threads->lock, deadline))
        ;
    idle = threads->running == 0;
    g_mutex_unlock(&threads->lock);
    return idle;
}

static void
readiness_info_free(ReadinessInfo *info)
{
    g_free(info->name);
    g_free(info);
}

GPtrArray *
plegd_http_readiness_infos_new(void)
{
    return g_ptr_array_new_with_free_func((GDestroyNotify)readiness_info_free);
}

void
plegd_http_add_readiness_info(PlegdHttp *http, const char *name, PlegdReadinessInfoFunc func,
                              gpointer data)
{
    ReadinessInfo *info = g_new0(ReadinessInfo, 1);

    info->name = g_strdup(name);
    info->func = func;
    info->data = data;
    g_ptr_array_add(http->readiness_infos, info);
}
