/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The runtime interface: the small slice of the CRI RuntimeService that the Generic PLEG reads.
 *
 * The PLEG never talks gRPC itself.  It calls a #PlegRuntime, which is either the CRI client
 * (pleg_cri_client_as_runtime()) or an in-process implementation such as the unit tests' fake.
 */
#pragma once

#include <gio/gio.h>
#include <pleg/pleg-types.h>

G_BEGIN_DECLS

typedef struct _PlegRuntime PlegRuntime;

/**
 * PlegStatusQuery:
 * @pod_sandbox_id: ask for this sandbox's status (CRI PodSandboxStatus), or %NULL.
 * @container_id: ask for this container's status (CRI ContainerStatus), or %NULL.  Exactly one
 *   of @pod_sandbox_id and @container_id is set.
 * @pod_sandbox_status: (out) (transfer full): the sandbox's status, or %NULL.
 * @container_status: (out) (transfer full): the container's status, or %NULL.
 * @error: (out) (transfer full): why there is no status, or %NULL.  An object that no longer
 *   exists is %G_IO_ERROR_NOT_FOUND or %PLEG_CRI_ERROR_NOT_FOUND, as from the single calls.
 *
 * One status asked of pleg_runtime_get_statuses().  The caller sets the id and zeroes the
 * rest; pleg_status_query_clear() frees what came back.
 */
typedef struct {
    const char *pod_sandbox_id;
    const char *container_id;
    PlegPodSandboxStatus *pod_sandbox_status;
    PlegContainerStatus *container_status;
    GError *error;
} PlegStatusQuery;

/**
 * PlegRuntimeVTable:
 * @size: sizeof (PlegRuntimeVTable) as compiled by the implementation; lets the table grow.
 * @list_pod_sandboxes: CRI ListPodSandbox with no filter.  On success stores a new
 *   #GPtrArray of #PlegPodSandbox (with a free function) in @ret_sandboxes.
 * @list_containers: CRI ListContainers.  @pod_sandbox_id, when not %NULL, becomes
 *   `ContainerFilter.pod_sandbox_id`.  Stores a #GPtrArray of #PlegContainer.
 * @pod_sandbox_status: CRI PodSandboxStatus (verbose = false).  Returns a new status or
 *   %NULL with @error set.  A sandbox that no longer exists is %G_IO_ERROR_NOT_FOUND or,
 *   from the CRI client, %PLEG_CRI_ERROR_NOT_FOUND.
 * @container_status: CRI ContainerStatus (verbose = false), like @pod_sandbox_status.
 * @finalize: frees @impl; may be %NULL.
 * @list_pod_sandboxes_of_pod: (nullable): ListPodSandbox of one pod's sandboxes, for targeted
 *   relists.  The CRI client asks with kubelet's label selector `io.kubernetes.pod.uid=<uid>`.
 *   Implementations may return more than the pod's sandboxes; callers keep only those whose
 *   @uid matches.  %NULL (or a table whose @size predates the slot) lists every sandbox.
 * @get_statuses: (nullable): answers every query of an array, each with a status or an error,
 *   with the calls in flight together where the implementation can.  The CRI client
 *   puts up to 32 PodSandboxStatus and ContainerStatus calls on its connection at once, all
 *   under one deadline (its timeout, from the start of the array).  %NULL (or a table whose
 *   @size predates the slot) asks @pod_sandbox_status and @container_status one query after
 *   another; see pleg_runtime_get_statuses().  The PLEG inspects a pod as kubelet's
 *   GetPodStatus does, its sandboxes then its containers; with a runtime built on this table
 *   it asks each query alone (an array of one) on a thread of a pool the #PlegRuntime keeps,
 *   as many at once as #PlegGenericConfig.max_status_calls_in_flight allows over all the pods
 *   of a relist.  The CRI client's runtime (pleg_cri_client_as_runtime()) instead keeps them
 *   all in flight from the relist's own thread, each call with its own deadline.
 *
 * Every call is synchronous, may be made from any thread, and honours @cancellable and the
 * implementation's own per-call deadline.  Failures set @error; the PLEG treats every error
 * alike (the relist or pod inspection fails and is retried later).
 *
 * Thread safety: the PLEG calls the slots on its dispatcher thread, on the threads of the
 * runtime's status pool (each with its own query; as many at once as
 * #PlegGenericConfig.max_status_calls_in_flight allows) and on any thread that calls
 * pleg_generic_relist() or pleg_generic_relist_pod(), so an implementation must take calls
 * from several threads at once.  No lock of the PLEG other than its relist lock is held during
 * a call; an operation must not call pleg_generic_relist(), pleg_generic_relist_pod(),
 * pleg_generic_stop() or pleg_generic_free() of the #PlegGeneric that reads it.  @finalize runs
 * on the thread that drops the last reference.
 */
typedef struct {
    gsize size;
    gboolean (*list_pod_sandboxes)(gpointer impl, GPtrArray **ret_sandboxes,
                                   GCancellable *cancellable, GError **error);
    gboolean (*list_containers)(gpointer impl, const char *pod_sandbox_id,
                                GPtrArray **ret_containers, GCancellable *cancellable,
                                GError **error);
    PlegPodSandboxStatus *(*pod_sandbox_status)(gpointer impl, const char *pod_sandbox_id,
                                                GCancellable *cancellable, GError **error);
    PlegContainerStatus *(*container_status)(gpointer impl, const char *container_id,
                                             GCancellable *cancellable, GError **error);
    void (*finalize)(gpointer impl);
    gboolean (*list_pod_sandboxes_of_pod)(gpointer impl, const char *pod_uid,
                                          GPtrArray **ret_sandboxes, GCancellable *cancellable,
                                          GError **error);
    void (*get_statuses)(gpointer impl, PlegStatusQuery *queries, guint n_queries,
                         GCancellable *cancellable);
} PlegRuntimeVTable;

/**
 * pleg_runtime_new:
 * @vtable: (transfer none): static table of operations; must outlive the runtime.  Its @size
 *   covers at least the slots up to @finalize, which are required.
 * @impl: (transfer full): implementation data passed to each operation.
 *
 * Returns: (transfer full): a new reference-counted runtime.
 *
 * Thread safety: any thread.
 */
PlegRuntime *pleg_runtime_new(const PlegRuntimeVTable *vtable, gpointer impl);

/**
 * pleg_runtime_ref:
 * @runtime: a runtime.
 *
 * Returns: (transfer full): @runtime, with one more reference.
 *
 * Thread safety: any thread; the count is atomic.
 */
PlegRuntime *pleg_runtime_ref(PlegRuntime *runtime);

/**
 * pleg_runtime_unref:
 * @runtime: (nullable) (transfer full): a runtime.
 *
 * Drops one reference; the last one calls the vtable's finalize, on this thread.  NULL-safe.
 *
 * Thread safety: any thread; the count is atomic.
 */
void pleg_runtime_unref(PlegRuntime *runtime);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegRuntime, pleg_runtime_unref)

/**
 * pleg_runtime_list_pod_sandboxes:
 * @ret_sandboxes: (out) (transfer full) (element-type PlegPodSandbox): every sandbox.
 *
 * CRI ListPodSandbox through the vtable's list_pod_sandboxes.
 *
 * Returns: %FALSE with @error set on failure.
 *
 * Thread safety: any thread, as the implementation allows (see #PlegRuntimeVTable); blocks
 * until the runtime answers, its deadline passes or @cancellable is cancelled.
 */
gboolean pleg_runtime_list_pod_sandboxes(PlegRuntime *runtime, GPtrArray **ret_sandboxes,
                                         GCancellable *cancellable, GError **error);
/**
 * pleg_runtime_list_pod_sandboxes_of_pod:
 *
 * The sandboxes of @pod_uid only (matching `metadata.uid`), through the runtime's
 * list_pod_sandboxes_of_pod when it has one, else by listing every sandbox.
 *
 * Thread safety: as pleg_runtime_list_pod_sandboxes().
 */
gboolean pleg_runtime_list_pod_sandboxes_of_pod(PlegRuntime *runtime, const char *pod_uid,
                                                GPtrArray **ret_sandboxes,
                                                GCancellable *cancellable, GError **error);
/**
 * pleg_runtime_list_containers:
 * @pod_sandbox_id: (nullable): only this sandbox's containers; %NULL lists every container.
 * @ret_containers: (out) (transfer full) (element-type PlegContainer): the containers.
 *
 * CRI ListContainers through the vtable's list_containers.
 *
 * Returns: %FALSE with @error set on failure.
 *
 * Thread safety: as pleg_runtime_list_pod_sandboxes().
 */
gboolean pleg_runtime_list_containers(PlegRuntime *runtime, const char *pod_sandbox_id,
                                      GPtrArray **ret_containers, GCancellable *cancellable,
                                      GError **error);
/**
 * pleg_runtime_pod_sandbox_status:
 *
 * CRI PodSandboxStatus of one sandbox through the vtable's pod_sandbox_status.
 *
 * Returns: (transfer full) (nullable): the status, or %NULL with @error set; a sandbox that no
 *   longer exists is %G_IO_ERROR_NOT_FOUND or %PLEG_CRI_ERROR_NOT_FOUND.
 *
 * Thread safety: as pleg_runtime_list_pod_sandboxes().
 */
PlegPodSandboxStatus *pleg_runtime_pod_sandbox_status(PlegRuntime *runtime,
                                                      const char *pod_sandbox_id,
                                                      GCancellable *cancellable, GError **error);
/**
 * pleg_runtime_container_status:
 *
 * CRI ContainerStatus of one container through the vtable's container_status; errors as
 * pleg_runtime_pod_sandbox_status().
 *
 * Returns: (transfer full) (nullable): the status, or %NULL with @error set.
 *
 * Thread safety: as pleg_runtime_list_pod_sandboxes().
 */
PlegContainerStatus *pleg_runtime_container_status(PlegRuntime *runtime, const char *container_id,
                                                   GCancellable *cancellable, GError **error);

/**
 * pleg_runtime_get_statuses:
 * @queries: (array length=n_queries) (inout): the statuses to ask for; see #PlegStatusQuery.
 * @cancellable: (nullable): cancels the queries not yet answered.
 *
 * Answers every query, in no particular order, through the runtime's get_statuses when it has
 * one, else one pod_sandbox_status or container_status call after another; there the first
 * failure other than not-found (a timeout, a runtime gone) is also given to the queries after
 * it, unasked, so a hung runtime costs one deadline, not one per query.  Each query ends with
 * a status or an error, never both; a query the runtime left unanswered gets an error.
 *
 * Thread safety: as pleg_runtime_list_pod_sandboxes(); @queries belong to the calling thread
 * until it returns.
 */
void pleg_runtime_get_statuses(PlegRuntime *runtime, PlegStatusQuery *queries, guint n_queries,
                               GCancellable *cancellable);

/**
 * pleg_status_query_clear:
 *
 * Frees the status or error of @query and sets them to %NULL; leaves the ids.
 *
 * Thread safety: any thread, on a query no other thread uses.
 */
void pleg_status_query_clear(PlegStatusQuery *query);

G_END_DECLS
