/* SPDX-License-Identifier: Apache-2.0 */
/* Internal interfaces between the Generic PLEG, its pod cache and its event channels. */
#pragma once

#include <pleg/pleg-generic.h>

/* pleg-event.c */
PlegPodLifecycleEvent *pleg_pod_lifecycle_event_new(const char *pod_uid,
                                                    PlegPodLifecycleEventType type,
                                                    const char *container_id,
                                                    PlegRelistSource source, gint64 time_ns);
PlegEventChannel *pleg_event_channel_new(guint capacity);
/* Non-blocking; takes a new reference on success.  FALSE when full or closed. */
gboolean pleg_event_channel_try_push(PlegEventChannel *channel, PlegPodLifecycleEvent *event);
void pleg_event_channel_close(PlegEventChannel *channel);
void pleg_event_channel_free(PlegEventChannel *channel);

/* pleg-cache.c */
PlegPodCache *pleg_pod_cache_new(void);
void pleg_pod_cache_free(PlegPodCache *cache);
/* Stores @status (a new reference is taken) or @error (copied); exactly one is non-NULL. */
void pleg_pod_cache_set(PlegPodCache *cache, const char *pod_uid, PlegPodStatus *status,
                        const GError *error, gint64 modified_ns);
/* Updates only the modified time of an existing entry. */
void pleg_pod_cache_touch(PlegPodCache *cache, const char *pod_uid, gint64 modified_ns);
void pleg_pod_cache_delete(PlegPodCache *cache, const char *pod_uid);
void pleg_pod_cache_set_global_timestamp(PlegPodCache *cache, gint64 timestamp_ns);

/* pleg-generic.c: what the last global relist learnt of the runtime, for the host's "runtime"
 * health checker.  @ret_ever_reached: a global relist has succeeded at least once.
 * @ret_error: (transfer full): a copy of the last global relist's error, NULL when it succeeded
 * (or none ran). */
void pleg_generic_get_runtime_state(PlegGeneric *pleg, gboolean *ret_ever_reached,
                                    GError **ret_error);
