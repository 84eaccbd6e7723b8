/* SPDX-License-Identifier: Apache-2.0 */
/* Inspection: kubelet's GetPodStatus for every pod a relist must inspect, their status calls
 * under one bound on calls in flight (max_status_calls_in_flight), counted over all the pods.
 * The calls are fed to the runtime one at a time (pleg_runtime_drive_statuses()): the bound is
 * on calls, not pods or threads, a pod whose call hangs to its deadline holds only its own call's
 * place, and each pod is handed on as one unit as soon as its own calls are answered. */
#include "pleg-config.h"

#include "pleg-generic-private.h"

typedef struct _Inspection Inspection;

/* One status call of a pod; the driver hands back the query, the first member. */
typedef struct {
    PlegStatusQuery query;
    Inspection *pod;
} InspectQuery;

/* One pod being inspected: its sandboxes' calls are asked first, then its containers'. */
struct _Inspection {
    PodWork *work;
    GList link;      /* in Feed.ready while it has queries of its phase to hand out */
    GError *failure; /* the first failure other than not-found: no more queries are asked */
    guint n_sandboxes;
    guint n_queries;
    guint next;      /* the next query to hand out */
    guint phase_end; /* n_sandboxes while the sandboxes are asked, then n_queries */
    guint in_flight;
    InspectQuery queries[]; /* the sandboxes', as listed (newest first), then the containers' */
};

typedef struct {
    PlegGeneric *pleg;
    PodWork *works;
    guint n_works;
    guint next_work; /* the next work to look at for a pod to start */
    /* Pods with queries to hand out: those asking their containers go first, so that a pod
     * started is finished before another starts. */
    GQueue ready;
    PodInspectedFunc func;
    gpointer data;
} Feed;

static gboolean
has_ready_sandbox(const PlegPodStatus *status)
{
    for (guint i = 0; i < status->sandbox_statuses->len; i++) {
        const PlegPodSandboxStatus *s = g_ptr_array_index(status->sandbox_statuses, i);
        if (s->state == PLEG_POD_SANDBOX_STATE_READY)
            return TRUE;
    }
    return FALSE;
}

/* The pod's status from its answers, which it takes: sandboxes in listing order, the pod's name,
 * namespace and IPs from its newest sandbox. */
static PlegPodStatus *
assemble(PlegGeneric *pleg, Inspection *pod)
{
    const char *pod_uid = pod->work->pod_uid;
    PlegPodStatus *status = pleg_pod_status_new(pod_uid);
    g_autoptr(PlegPodStatus) previous = NULL;

    for (guint i = 0; i < pod->n_queries; i++) {
        PlegStatusQuery *q = &pod->queries[i].query;
        PlegPodSandboxStatus *ss = q->pod_sandbox_status;

        if (ss) {
            g_ptr_array_add(status->sandbox_statuses, g_steal_pointer(&q->pod_sandbox_status));
            if (!status->name) {
                status->name = g_strdup(ss->name);
                status->namespace_ = g_strdup(ss->namespace_);
            }
            if (i == 0 && ss->state == PLEG_POD_SANDBOX_STATE_READY && ss->ips && ss->ips[0]) {
                g_strfreev(status->ips);
                status->ips = g_strdupv(ss->ips);
            }
        } else if (q->container_status) {
            g_ptr_array_add(status->container_statuses, g_steal_pointer(&q->container_status));
        }
    }

    /* kubelet keeps the last known IPs of a pod whose sandboxes are all gone or not ready. */
    if (!status->ips[0] && !has_ready_sandbox(status)) {
        pleg_pod_cache_get(pleg->cache, pod_uid, &previous, NULL, NULL);
        if (previous && previous->ips[0]) {
            g_strfreev(status->ips);
            status->ips = g_strdupv(previous->ips);
        }
    }
    return status;
}

static void
finish(Feed *feed, Inspection *pod)
{
    g_autoptr(PlegPodStatus) status = NULL;

    if (!pod->failure)
        status = assemble(feed->pleg, pod);
    feed->func(pod->work, status, pod->failure, feed->data);
    for (guint i = 0; i < pod->n_queries; i++)
        pleg_status_query_clear(&pod->queries[i].query);
    g_clear_error(&pod->failure);
    g_free(pod);
}

/* The status of every sandbox the listing placed in the pod, then of every container: the
 * listing that built the pod is moments old, so the containers are not listed again. */
static void
start(Feed *feed, PodWork *work)
{
    const PodSnapshot *snapshot = work->current;
    guint n_sandboxes = snapshot->sandboxes->len;
    guint n_queries = n_sandboxes + snapshot->containers->len;
    Inspection *pod = g_malloc0(sizeof(Inspection) + n_queries * sizeof(InspectQuery));

    pod->work = work;
    pod->link.data = pod;
    pod->n_sandboxes = n_sandboxes;
    pod->n_queries = n_queries;
    pod->phase_end = n_sandboxes > 0 ? n_sandboxes : n_queries;
    for (guint i = 0; i < n_queries; i++) {
        InspectQuery *q = &pod->queries[i];

        q->pod = pod;
        if (i < n_sandboxes)
            q->query.pod_sandbox_id = ((const PodEntry *)snapshot->sandboxes->pdata[i])->id;
        else
            q->query.container_id =
                ((const PodEntry *)snapshot->containers->pdata[i - n_sandboxes])->id;
    }
    if (n_queries == 0)
        finish(feed, pod);
    else
        g_queue_push_tail_link(&feed->ready, &pod->link);
}

static PlegStatusQuery *
feed_next(gpointer data)
{
    Feed *feed = data;
    Inspection *pod;
    InspectQuery *q;

    while (!(pod = g_queue_peek_head(&feed->ready))) {
        PodWork *work;

        do {
            if (feed->next_work == feed->n_works)
                return NULL;
            work = &feed->works[feed->next_work++];
        } while (!work->inspect);
        start(feed, work);
    }
    q = &pod->queries[pod->next++];
    pod->in_flight++;
    if (pod->next == pod->phase_end)
        g_queue_unlink(&feed->ready, &pod->link);
    return &q->query;
}

static void
feed_answered(PlegStatusQuery *query, gpointer data)
{
    Feed *feed = data;
    Inspection *pod = ((InspectQuery *)query)->pod;

    pod->in_flight--;
    /* A failure other than "gone" fails the pod: what it has not asked is not asked, so that a
     * hung runtime costs the pod the deadlines of the calls already in flight, under two. */
    if (query->error && !pleg_error_is_not_found(query->error) && !pod->failure) {
        pod->failure = g_error_copy(query->error);
        if (pod->next < pod->phase_end)
            g_queue_unlink(&feed->ready, &pod->link);
        pod->next = pod->phase_end = pod->n_queries;
    }
    if (pod->in_flight > 0 || pod->next < pod->phase_end)
        return;
    if (pod->phase_end < pod->n_queries) {
        /* The sandboxes are answered: the containers' turn, ahead of pods not started. */
        pod->phase_end = pod->n_queries;
        g_queue_push_head_link(&feed->ready, &pod->link);
        return;
    }
    finish(feed, pod);
}

static const PlegStatusFeed inspect_feed = {feed_next, feed_answered};

void
inspect_pods(PlegGeneric *pleg, PodWork *works, guint n_works, PodInspectedFunc func, gpointer data)
{
    Feed feed = {
        .pleg = pleg,
        .works = works,
        .n_works = n_works,
        .ready = G_QUEUE_INIT,
        .func = func,
        .data = data,
    };

    pleg_runtime_drive_statuses(pleg->runtime, &inspect_feed, &feed,
                                pleg->config.max_status_calls_in_flight, pleg->cancellable);
    g_assert(feed.ready.length == 0);
}
