/* SPDX-License-Identifier: Apache-2.0 */
/* The relist callback: each global relist's outcome, called back in the host's GMainContext. */
#include "pleg-config.h"

#include "pleg-generic-private.h"

typedef struct {
    PlegGeneric *pleg;
    GSource *source; /* owns the notice */
    GError *error;
    gint64 timestamp_ns;
} RelistNotice;

static gboolean
relist_notice_dispatch(gpointer data)
{
    RelistNotice *notice = data;
    PlegGeneric *pleg = notice->pleg;
    g_autoptr(GError) error = NULL;
    gint64 timestamp_ns;

    PlegRelistFunc func;
    gpointer func_data;

    /* notify_relist() may have updated the newest notice until now.  The callback is read
     * here, under the lock that pleg_generic_set_relist_callback() changes it under, and that
     * waits for notice_thread before it destroys the callback's data or the PLEG goes. */
    g_mutex_lock(&pleg->queue_lock);
    g_ptr_array_remove(pleg->notices, notice);
    error = g_steal_pointer(&notice->error);
    timestamp_ns = notice->timestamp_ns;
    func = pleg->callback;
    func_data = pleg->callback_data;
    if (func)
        pleg->notice_thread = g_thread_self();
    g_mutex_unlock(&pleg->queue_lock);
    if (!func)
        return G_SOURCE_REMOVE;

    func(error, timestamp_ns, func_data);

    g_mutex_lock(&pleg->queue_lock);
    pleg->notice_thread = NULL;
    g_cond_broadcast(&pleg->notice_done);
    g_mutex_unlock(&pleg->queue_lock);
    return G_SOURCE_REMOVE;
}

static void
relist_notice_free(gpointer data)
{
    RelistNotice *notice = data;

    g_clear_error(&notice->error);
    g_free(notice);
}

#define MAX_PENDING_NOTICES 64

void
notify_relist(PlegGeneric *pleg, const GError *error, gint64 timestamp_ns)
{
    RelistNotice *notice;
    GSource *source;

    /* A host whose context is not iterated must not make notices pile up: past a bound, the
     * newest queued notice takes the newest outcome instead (older outcomes are superseded). */
    g_mutex_lock(&pleg->queue_lock);
    if (!pleg->callback) {
        g_mutex_unlock(&pleg->queue_lock);
        return;
    }
    if (pleg->notices->len >= MAX_PENDING_NOTICES) {
        notice = g_ptr_array_index(pleg->notices, pleg->notices->len - 1);
        g_clear_error(&notice->error);
        notice->error = error ? g_error_copy(error) : NULL;
        notice->timestamp_ns = timestamp_ns;
        g_mutex_unlock(&pleg->queue_lock);
        return;
    }
    g_mutex_unlock(&pleg->queue_lock);

    notice = g_new0(RelistNotice, 1);
    notice->pleg = pleg;
    notice->error = error ? g_error_copy(error) : NULL;
    notice->timestamp_ns = timestamp_ns;
    /* Not g_main_context_invoke(): it would run the callback right here when nobody owns
     * the context, and the header promises the callback context. */
    source = g_idle_source_new();
    g_source_set_name(source, "pleg relist notice");
    g_source_set_priority(source, G_PRIORITY_DEFAULT);
    g_source_set_callback(source, relist_notice_dispatch, notice, relist_notice_free);
    notice->source = source;
    g_mutex_lock(&pleg->queue_lock);
    g_ptr_array_add(pleg->notices, notice);
    g_source_attach(source, pleg->callback_context);
    g_mutex_unlock(&pleg->queue_lock);
    g_source_unref(source);
}

void
pleg_generic_set_relist_callback(PlegGeneric *pleg, GMainContext *context, PlegRelistFunc func,
                                 gpointer user_data, GDestroyNotify destroy)
{
    g_return_if_fail(pleg != NULL);
    g_return_if_fail(pleg->thread == NULL);

    GMainContext *old_context;
    gpointer old_data;
    GDestroyNotify old_destroy;

    /* Notices still queued would call into a PLEG that may be about to be freed, and one
     * running now (in the callback context's thread) must return before the old data is
     * destroyed.  From inside the callback itself there is nothing to wait for. */
    g_mutex_lock(&pleg->queue_lock);
    while (pleg->notices->len > 0) {
        RelistNotice *notice = g_ptr_array_steal_index_fast(pleg->notices, 0);
        g_source_destroy(notice->source); /* frees the notice */
    }
    while (pleg->notice_thread && pleg->notice_thread != g_thread_self())
        g_cond_wait(&pleg->notice_done, &pleg->queue_lock);
    old_context = pleg->callback_context;
    old_data = pleg->callback_data;
    old_destroy = pleg->callback_destroy;
    pleg->callback = func;
    pleg->callback_data = user_data;
    pleg->callback_destroy = destroy;
    pleg->callback_context =
        !func     ? NULL
        : context ? g_main_context_ref(context)
                  : g_main_context_ref_thread_default();
    g_mutex_unlock(&pleg->queue_lock);

    if (old_destroy)
        old_destroy(old_data);
    if (old_context)
        g_main_context_unref(old_context);
}
