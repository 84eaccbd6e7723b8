/* SPDX-License-Identifier: Apache-2.0 */
#include "pleg-config.h"

#include "pleg-private.h"

typedef struct {
    PlegPodStatus *status;
    GError *error;
    /* With @error: the pod's names as the relist listed them (the status has them otherwise). */
    char *namespace_;
    char *name;
    gint64 modified_ns;
} CacheEntry;

struct _PlegPodCache {
    GMutex lock;
    GHashTable *entries; /* pod uid -> CacheEntry */
    gint64 global_timestamp_ns;
};

static void
cache_entry_free(CacheEntry *entry)
{
    pleg_pod_status_unref(entry->status);
    g_clear_error(&entry->error);
    g_free(entry->namespace_);
    g_free(entry->name);
    g_free(entry);
}

PlegPodCache *
pleg_pod_cache_new(void)
{
    PlegPodCache *cache = g_new0(PlegPodCache, 1);

    g_mutex_init(&cache->lock);
    cache->entries =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)cache_entry_free);
    return cache;
}

void
pleg_pod_cache_free(PlegPodCache *cache)
{
    if (!cache)
        return;
    g_hash_table_unref(cache->entries);
    g_mutex_clear(&cache->lock);
    g_free(cache);
}

static void
cache_put(PlegPodCache *cache, const char *pod_uid, CacheEntry *entry)
{
    g_mutex_lock(&cache->lock);
    g_hash_table_replace(cache->entries, g_strdup(pod_uid), entry);
    g_mutex_unlock(&cache->lock);
}

void
pleg_pod_cache_set(PlegPodCache *cache, const char *pod_uid, PlegPodStatus *status,
                   const GError *error, gint64 modified_ns)
{
    CacheEntry *entry = g_new0(CacheEntry, 1);

    g_return_if_fail((status != NULL) != (error != NULL));

    entry->status = status ? pleg_pod_status_ref(status) : NULL;
    entry->error = error ? g_error_copy(error) : NULL;
    entry->modified_ns = modified_ns;
    cache_put(cache, pod_uid, entry);
}

void
pleg_pod_cache_set_failed(PlegPodCache *cache, const char *pod_uid, const GError *error,
                          const char *namespace_, const char *name, gint64 modified_ns)
{
    CacheEntry *entry = g_new0(CacheEntry, 1);

    g_return_if_fail(error != NULL);

    entry->error = g_error_copy(error);
    entry->namespace_ = g_strdup(namespace_);
    entry->name = g_strdup(name);
    entry->modified_ns = modified_ns;
    cache_put(cache, pod_uid, entry);
}

void
pleg_pod_cache_touch(PlegPodCache *cache, const char *pod_uid, gint64 modified_ns)
{
    CacheEntry *entry;

    g_mutex_lock(&cache->lock);
    entry = g_hash_table_lookup(cache->entries, pod_uid);
    if (entry && entry->modified_ns < modified_ns)
        entry->modified_ns = modified_ns;
    g_mutex_unlock(&cache->lock);
}

void
pleg_pod_cache_delete(PlegPodCache *cache, const char *pod_uid)
{
    g_mutex_lock(&cache->lock);
    g_hash_table_remove(cache->entries, pod_uid);
    g_mutex_unlock(&cache->lock);
}

void
pleg_pod_cache_set_global_timestamp(PlegPodCache *cache, gint64 timestamp_ns)
{
    g_mutex_lock(&cache->lock);
    cache->global_timestamp_ns = timestamp_ns;
    g_mutex_unlock(&cache->lock);
}

gboolean
pleg_pod_cache_get(PlegPodCache *cache, const char *pod_uid, PlegPodStatus **ret_status,
                   GError **ret_error, gint64 *ret_modified_ns)
{
    CacheEntry *entry;

    g_return_val_if_fail(cache != NULL && pod_uid != NULL, FALSE);

    g_mutex_lock(&cache->lock);
    entry = g_hash_table_lookup(cache->entries, pod_uid);
    if (entry) {
        if (ret_status)
            *ret_status = entry->status ? pleg_pod_status_ref(entry->status) : NULL;
        if (ret_error)
            *ret_error = entry->error ? g_error_copy(entry->error) : NULL;
        if (ret_modified_ns)
            *ret_modified_ns = entry->modified_ns;
    }
    g_mutex_unlock(&cache->lock);
    return entry != NULL;
}

gboolean
pleg_pod_cache_get_pod_names(PlegPodCache *cache, const char *pod_uid, char **ret_namespace,
                             char **ret_name)
{
    CacheEntry *entry;

    g_return_val_if_fail(cache != NULL && pod_uid != NULL, FALSE);

    g_mutex_lock(&cache->lock);
    entry = g_hash_table_lookup(cache->entries, pod_uid);
    if (entry) {
        if (ret_namespace)
            *ret_namespace = g_strdup(entry->status ? entry->status->namespace_ : entry->namespace_);
        if (ret_name)
            *ret_name = g_strdup(entry->status ? entry->status->name : entry->name);
    }
    g_mutex_unlock(&cache->lock);
    return entry != NULL;
}

gint64
pleg_pod_cache_get_global_timestamp(PlegPodCache *cache)
{
    gint64 ts;

    g_return_val_if_fail(cache != NULL, 0);
    g_mutex_lock(&cache->lock);
    ts = cache->global_timestamp_ns;
    g_mutex_unlock(&cache->lock);
    return ts;
}

guint
pleg_pod_cache_get_size(PlegPodCache *cache)
{
    guint size;

    g_return_val_if_fail(cache != NULL, 0);
    g_mutex_lock(&cache->lock);
    size = g_hash_table_size(cache->entries);
    g_mutex_unlock(&cache->lock);
    return size;
}

char **
pleg_pod_cache_list_pod_uids(PlegPodCache *cache)
{
    GHashTableIter iter;
    gpointer uid;
    g_autoptr(GStrvBuilder) builder = NULL;

    g_return_val_if_fail(cache != NULL, NULL);
    builder = g_strv_builder_new();
    g_mutex_lock(&cache->lock);
    g_hash_table_iter_init(&iter, cache->entries);
    while (g_hash_table_iter_next(&iter, &uid, NULL))
        g_strv_builder_add(builder, uid);
    g_mutex_unlock(&cache->lock);
    return g_strv_builder_end(builder);
}
