/* SPDX-License-Identifier: Apache-2.0 */
#include "pleg-config.h"

#include <pleg/pleg-cri-client.h>
#include <pleg/pleg-runtime.h>

#include "pleg-private.h"

/* Whether @vtable, as compiled by its implementation, has the optional @slot set. */
#define HAS_SLOT(vtable, slot)                                                                     \
    ((vtable)->size >= G_STRUCT_OFFSET(PlegRuntimeVTable, slot) + sizeof((vtable)->slot) &&        \
     (vtable)->slot)

struct _PlegRuntime {
    gatomicrefcount ref_count;
    const PlegRuntimeVTable *vtable;
    gpointer impl;
    PlegRuntimeVisitFunc visit; /* NULL for runtimes built on the public API alone */
    PlegRuntimeDriveFunc drive; /* likewise */
    PlegStatusPool *pool;       /* drives the status calls of a runtime without @drive */
};

PlegRuntime *
pleg_runtime_new(const PlegRuntimeVTable *vtable, gpointer impl)
{
    PlegRuntime *runtime;

    g_return_val_if_fail(vtable != NULL, NULL);
    g_return_val_if_fail(vtable->size >= G_STRUCT_OFFSET(PlegRuntimeVTable, finalize) +
                                             sizeof(vtable->finalize),
                         NULL);

    runtime = g_new0(PlegRuntime, 1);
    g_atomic_ref_count_init(&runtime->ref_count);
    runtime->vtable = vtable;
    runtime->impl = impl;
    runtime->pool = pleg_status_pool_new(runtime);
    return runtime;
}

PlegRuntime *
pleg_runtime_ref(PlegRuntime *runtime)
{
    g_return_val_if_fail(runtime != NULL, NULL);
    g_atomic_ref_count_inc(&runtime->ref_count);
    return runtime;
}

void
pleg_runtime_unref(PlegRuntime *runtime)
{
    if (!runtime || !g_atomic_ref_count_dec(&runtime->ref_count))
        return;
    /* Waits for the pool's tasks, which hold no reference: each belongs to a drive still under
     * way, whose caller holds one. */
    pleg_status_pool_free(runtime->pool);
    if (runtime->vtable->finalize)
        runtime->vtable->finalize(runtime->impl);
    g_free(runtime);
}

gboolean
pleg_runtime_list_pod_sandboxes(PlegRuntime *runtime, GPtrArray **ret_sandboxes,
                                GCancellable *cancellable, GError **error)
{
    g_return_val_if_fail(runtime != NULL && ret_sandboxes != NULL, FALSE);
    return runtime->vtable->list_pod_sandboxes(runtime->impl, ret_sandboxes, cancellable, error);
}

void
pleg_runtime_set_visit_func(PlegRuntime *runtime, PlegRuntimeVisitFunc func)
{
    g_return_if_fail(runtime != NULL);
    runtime->visit = func;
}

gboolean
pleg_runtime_visit_listing(PlegRuntime *runtime, const PlegListingVisitor *visitor, gpointer data,
                           GCancellable *cancellable, GError **error)
{
    g_autoptr(GPtrArray) sandboxes = NULL;
    g_autoptr(GPtrArray) containers = NULL;

    g_return_val_if_fail(runtime != NULL && visitor != NULL, FALSE);

    if (runtime->visit)
        return runtime->visit(runtime->impl, visitor, data, cancellable, error);
    if (!pleg_runtime_list_pod_sandboxes(runtime, &sandboxes, cancellable, error) ||
        !pleg_runtime_list_containers(runtime, NULL, &containers, cancellable, error))
        return FALSE;
    for (guint i = 0; i < sandboxes->len; i++)
        visitor->sandbox(sandboxes->pdata[i], data);
    for (guint i = 0; i < containers->len; i++)
        visitor->container(containers->pdata[i], data);
    return TRUE;
}

gboolean
pleg_runtime_list_pod_sandboxes_of_pod(PlegRuntime *runtime, const char *pod_uid,
                                       GPtrArray **ret_sandboxes, GCancellable *cancellable,
                                       GError **error)
{
    const PlegRuntimeVTable *vtable;
    g_autoptr(GPtrArray) all = NULL;
    GPtrArray *mine;
    gboolean ok;

    g_return_val_if_fail(runtime != NULL && pod_uid != NULL && ret_sandboxes != NULL, FALSE);

    vtable = runtime->vtable;
    if (HAS_SLOT(vtable, list_pod_sandboxes_of_pod))
        ok = vtable->list_pod_sandboxes_of_pod(runtime->impl, pod_uid, &all, cancellable, error);
    else
        ok = vtable->list_pod_sandboxes(runtime->impl, &all, cancellable, error);
    if (!ok)
        return FALSE;

    mine = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_sandbox_free);
    for (guint i = 0; i < all->len; i++) {
        PlegPodSandbox *sandbox = g_ptr_array_index(all, i);
        /* Moved, not copied: what stays in @all is freed with it. */
        if (g_strcmp0(sandbox->uid, pod_uid) == 0)
            g_ptr_array_add(mine, g_steal_pointer(&all->pdata[i]));
    }
    *ret_sandboxes = mine;
    return TRUE;
}

gboolean
pleg_runtime_list_containers(PlegRuntime *runtime, const char *pod_sandbox_id,
                             GPtrArray **ret_containers, GCancellable *cancellable, GError **error)
{
    g_return_val_if_fail(runtime != NULL && ret_containers != NULL, FALSE);
    return runtime->vtable->list_containers(runtime->impl, pod_sandbox_id, ret_containers,
                                            cancellable, error);
}

PlegPodSandboxStatus *
pleg_runtime_pod_sandbox_status(PlegRuntime *runtime, const char *pod_sandbox_id,
                                GCancellable *cancellable, GError **error)
{
    g_return_val_if_fail(runtime != NULL && pod_sandbox_id != NULL, NULL);
    return runtime->vtable->pod_sandbox_status(runtime->impl, pod_sandbox_id, cancellable, error);
}

PlegContainerStatus *
pleg_runtime_container_status(PlegRuntime *runtime, const char *container_id,
                              GCancellable *cancellable, GError **error)
{
    g_return_val_if_fail(runtime != NULL && container_id != NULL, NULL);
    return runtime->vtable->container_status(runtime->impl, container_id, cancellable, error);
}

gboolean
pleg_error_is_not_found(const GError *error)
{
    return g_error_matches(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_NOT_FOUND) ||
           g_error_matches(error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND);
}

/* Asks in order; after the first failure other than "not found" (a timeout, a runtime gone),
 * the queries left get that error without being asked, so that a hung runtime costs one
 * deadline, not one per query. */
static void
get_statuses_one_by_one(PlegRuntime *runtime, PlegStatusQuery *queries, guint n_queries,
                        GCancellable *cancellable)
{
    const PlegRuntimeVTable *vtable = runtime->vtable;
    const GError *failure = NULL;

    for (guint i = 0; i < n_queries; i++) {
        PlegStatusQuery *q = &queries[i];

        if (failure) {
            q->error = g_error_copy(failure);
            continue;
        }
        if (q->pod_sandbox_id)
            q->pod_sandbox_status = vtable->pod_sandbox_status(runtime->impl, q->pod_sandbox_id,
                                                               cancellable, &q->error);
        else
            q->container_status =
                vtable->container_status(runtime->impl, q->container_id, cancellable, &q->error);
        if (q->error && !pleg_error_is_not_found(q->error))
            failure = q->error;
    }
}

/* Each query ends with exactly one of a status of its kind and an error, whatever the runtime
 * did. */
static void
settle(PlegStatusQuery *q)
{
    gboolean answered;

    if (q->pod_sandbox_id)
        g_clear_pointer(&q->container_status, pleg_container_status_free);
    else
        g_clear_pointer(&q->pod_sandbox_status, pleg_pod_sandbox_status_free);
    answered = q->pod_sandbox_status || q->container_status;
    if (answered && q->error)
        g_clear_error(&q->error);
    else if (!answered && !q->error)
        g_set_error(&q->error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "the runtime gave neither a status nor an error for %s %s",
                    q->pod_sandbox_id ? "pod sandbox" : "container",
                    q->pod_sandbox_id ? q->pod_sandbox_id : q->container_id);
}

void
pleg_runtime_get_statuses(PlegRuntime *runtime, PlegStatusQuery *queries, guint n_queries,
                          GCancellable *cancellable)
{
    const PlegRuntimeVTable *vtable;

    g_return_if_fail(runtime != NULL);
    g_return_if_fail(n_queries == 0 || queries != NULL);
    for (guint i = 0; i < n_queries; i++) {
        g_return_if_fail(!queries[i].pod_sandbox_id != !queries[i].container_id);
        g_return_if_fail(!queries[i].pod_sandbox_status && !queries[i].container_status &&
                         !queries[i].error);
    }

    vtable = runtime->vtable;
    if (HAS_SLOT(vtable, get_statuses))
        vtable->get_statuses(runtime->impl, queries, n_queries, cancellable);
    else
        get_statuses_one_by_one(runtime, queries, n_queries, cancellable);

    for (guint i = 0; i < n_queries; i++)
        settle(&queries[i]);
}

void
pleg_status_query_clear(PlegStatusQuery *query)
{
    g_return_if_fail(query != NULL);
    g_clear_pointer(&query->pod_sandbox_status, pleg_pod_sandbox_status_free);
    g_clear_pointer(&query->container_status, pleg_container_status_free);
    g_clear_error(&query->error);
}

/* --- driving status calls ----------------------------------------------------------------- */

void
pleg_runtime_set_drive_func(PlegRuntime *runtime, PlegRuntimeDriveFunc func)
{
    g_return_if_fail(runtime != NULL);
    runtime->drive = func;
}

/* One drive: the feed it serves, and what the runtime's driver owes it. */
typedef struct {
    const PlegStatusFeed *feed;
    gpointer data;
    guint in_flight; /* queries given to the driver and not handed back */
} Drive;

static PlegStatusQuery *
drive_next(gpointer data)
{
    Drive *drive = data;
    PlegStatusQuery *q;

    /* A query without exactly one id is answered at once with an error, never asked. */
    while ((q = drive->feed->next(drive->data)) && !q->pod_sandbox_id == !q->container_id) {
        g_set_error(&q->error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "a status query needs exactly one of a pod sandbox id and a container id");
        drive->feed->answered(q, drive->data);
    }
    if (q)
        drive->in_flight++;
    return q;
}

static void
drive_answered(PlegStatusQuery *q, gpointer data)
{
    Drive *drive = data;

    drive->in_flight--;
    settle(q);
    drive->feed->answered(q, drive->data);
}

static const PlegStatusFeed drive_feed = {drive_next, drive_answered};

void
pleg_runtime_drive_statuses(PlegRuntime *runtime, const PlegStatusFeed *feed, gpointer data,
                            guint max_in_flight, GCancellable *cancellable)
{
    Drive drive = {feed, data, 0};
    PlegStatusQuery *q;

    g_return_if_fail(runtime != NULL && feed != NULL && max_in_flight > 0);

    if (runtime->drive)
        runtime->drive(runtime->impl, &drive_feed, &drive, max_in_flight, cancellable);
    else
        pleg_status_pool_drive(runtime->pool, &drive_feed, &drive, max_in_flight, cancellable);
    /* A driver must hand back what it asked and ask until the feed is empty.  What it never
     * asked fails here rather than wait forever; what it asked and kept is lost with its pods,
     * and said so. */
    if (drive.in_flight > 0)
        g_critical("a runtime's status driver returned with %u queries not handed back",
                   drive.in_flight);
    while ((q = drive_next(&drive))) {
        g_set_error(&q->error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "the runtime stopped asking status queries before the last");
        drive_answered(q, &drive);
    }
}
