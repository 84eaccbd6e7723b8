/* SPDX-License-Identifier: Apache-2.0 */
/* Internal interfaces between the Generic PLEG, its pod cache and its event channels.
 * G_GNUC_INTERNAL keeps them out of libpleg's ABI although libpleg.map exports pleg_*. */
#pragma once

#include <pleg/pleg-generic.h>

/* pleg-event.c */
G_GNUC_INTERNAL PlegPodLifecycleEvent *pleg_pod_lifecycle_event_new(const char *pod_uid,
                                                    PlegPodLifecycleEventType type,
                                                    const char *container_id,
                                                    PlegRelistSource source, gint64 time_ns);
G_GNUC_INTERNAL PlegEventChannel *pleg_event_channel_new(guint capacity);
/* Non-blocking; takes a new reference on success.  FALSE when full or closed. */
G_GNUC_INTERNAL gboolean pleg_event_channel_try_push(PlegEventChannel *channel, PlegPodLifecycleEvent *event);
G_GNUC_INTERNAL void pleg_event_channel_close(PlegEventChannel *channel);
G_GNUC_INTERNAL void pleg_event_channel_free(PlegEventChannel *channel);

/* pleg-cache.c */
G_GNUC_INTERNAL PlegPodCache *pleg_pod_cache_new(void);
G_GNUC_INTERNAL void pleg_pod_cache_free(PlegPodCache *cache);
/* Stores @status (a new reference is taken) or @error (copied); exactly one is non-NULL. */
G_GNUC_INTERNAL void pleg_pod_cache_set(PlegPodCache *cache, const char *pod_uid, PlegPodStatus *status,
                        const GError *error, gint64 modified_ns);
/* Stores @error (copied) with the pod's names as its relist listed them (nullable). */
G_GNUC_INTERNAL void pleg_pod_cache_set_failed(PlegPodCache *cache, const char *pod_uid,
                                               const GError *error, const char *namespace_,
                                               const char *name, gint64 modified_ns);
/* Updates only the modified time of an existing entry. */
G_GNUC_INTERNAL void pleg_pod_cache_touch(PlegPodCache *cache, const char *pod_uid, gint64 modified_ns);
G_GNUC_INTERNAL void pleg_pod_cache_delete(PlegPodCache *cache, const char *pod_uid);
G_GNUC_INTERNAL void pleg_pod_cache_set_global_timestamp(PlegPodCache *cache, gint64 timestamp_ns);

/* pleg-runtime.c: whether @error says the sandbox or container asked for no longer exists
 * (%PLEG_CRI_ERROR_NOT_FOUND or %G_IO_ERROR_NOT_FOUND, see #PlegRuntimeVTable). */
G_GNUC_INTERNAL gboolean pleg_error_is_not_found(const GError *error);

/* pleg-runtime.c: a global listing (every sandbox, then every container) handed item by item,
 * for the Generic PLEG's global relist.  The items and their texts are borrowed for the call
 * only, so a runtime that decodes its answers need not copy each text into its own allocation
 * and free it moments later.  @restart drops what was handed of @sandboxes' kind (sandboxes, or
 * containers) when a runtime starts that listing again. */
typedef struct {
    void (*sandbox)(const PlegPodSandbox *sandbox, gpointer data);
    void (*container)(const PlegContainer *container, gpointer data);
    void (*restart)(gboolean sandboxes, gpointer data);
} PlegListingVisitor;

typedef gboolean (*PlegRuntimeVisitFunc)(gpointer impl, const PlegListingVisitor *visitor,
                                         gpointer data, GCancellable *cancellable, GError **error);

/* Gives @runtime a way to hand a listing borrowed; before it is shared only. */
G_GNUC_INTERNAL void pleg_runtime_set_visit_func(PlegRuntime *runtime, PlegRuntimeVisitFunc func);
/* Through the visit function when @runtime has one, else listed through the vtable and each
 * item handed from the arrays. */
G_GNUC_INTERNAL gboolean pleg_runtime_visit_listing(PlegRuntime *runtime,
                                                    const PlegListingVisitor *visitor,
                                                    gpointer data, GCancellable *cancellable,
                                                    GError **error);

/* pleg-runtime.c: the status calls of a relist's inspections, fed to the runtime one query at a
 * time and answered one at a time, so that one thread can keep up to a bound of calls in flight
 * and each pod is published as soon as its own calls are answered.  @next gives the next query
 * to ask (its id set, the rest zeroed), or NULL when none is ready until one in flight is
 * answered; @answered hands back each query asked, once, with exactly one of a status of its
 * kind and an error.  Both are called on the thread that called pleg_runtime_drive_statuses(). */
typedef struct {
    PlegStatusQuery *(*next)(gpointer data);
    void (*answered)(PlegStatusQuery *query, gpointer data);
} PlegStatusFeed;

/* Asks what @feed gives, at most @max_in_flight at once, each call with its own deadline; returns
 * once @feed gives NULL with nothing in flight.  Cancelling @cancellable fails the calls in
 * flight and those still to come, which must still be handed back. */
typedef void (*PlegRuntimeDriveFunc)(gpointer impl, const PlegStatusFeed *feed, gpointer data,
                                     guint max_in_flight, GCancellable *cancellable);

/* Gives @runtime a way to drive status calls from one thread; before it is shared only. */
G_GNUC_INTERNAL void pleg_runtime_set_drive_func(PlegRuntime *runtime, PlegRuntimeDriveFunc func);
/* Through the drive function when @runtime has one, else through its status pool.  Answers are
 * settled as pleg_runtime_get_statuses() settles them. */
G_GNUC_INTERNAL void pleg_runtime_drive_statuses(PlegRuntime *runtime, const PlegStatusFeed *feed,
                                                 gpointer data, guint max_in_flight,
                                                 GCancellable *cancellable);

/* pleg-status-pool.c: each query asked on a thread of a GLib pool, at most the bound of a drive
 * at once, for a runtime without a drive function.  A PlegRuntime owns one; @runtime is not
 * referenced.  Free waits for the tasks of drives under way. */
typedef struct _PlegStatusPool PlegStatusPool;
G_GNUC_INTERNAL PlegStatusPool *pleg_status_pool_new(PlegRuntime *runtime);
G_GNUC_INTERNAL void pleg_status_pool_free(PlegStatusPool *pool);
/* A PlegRuntimeDriveFunc; @impl is the pool. */
G_GNUC_INTERNAL void pleg_status_pool_drive(gpointer impl, const PlegStatusFeed *feed,
                                            gpointer data, guint max_in_flight,
                                            GCancellable *cancellable);
