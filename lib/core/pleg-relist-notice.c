/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The relist callback: each global relist's outcome, called back in the host's GMainContext.
 *
 * A notice is a GSource in the host's context, and GLib may begin to dispatch it on the host's
 * thread at any moment, also while the PLEG is being freed there or elsewhere.  So a notice
 * never reaches into the PLEG: it holds a reference to the RelistNotices of the callback it was
 * queued for, which has its own lock.  Replacing the callback or freeing the PLEG retires that
 * box (a notice that takes its lock later does nothing), waits for a callback running in
 * another thread, and drops the PLEG's reference; the last notice frees the box.
 */
#include "pleg-config.h"

#include "pleg-generic-private.h"

struct _RelistNotices {
    GMutex lock; /* a leaf, but for the context's lock under g_source_attach/destroy */
    GCond done;  /* running went back to NULL */
    gboolean retired;
    GThread *running;      /* the thread running func, NULL when none */
    GPtrArray *queued;     /* RelistNotice attached and not dispatched yet, oldest first */
    GMainContext *context; /* NULL once retired */
    /* Set before the first notice and never changed: read without the lock. */
    PlegRelistFunc func;
    gpointer data;
    GDestroyNotify destroy;
};

typedef struct {
    RelistNotices *notices; /* a reference */
    GSource *source;        /* owns the notice; valid while the notice is queued */
    GError *error;
    gint64 timestamp_ns;
} RelistNotice;

void (*relist_notice_dispatch_hook)(void);

static void
notices_clear(gpointer data)
{
    RelistNotices *notices = data;

    g_ptr_array_unref(notices->queued);
    g_clear_pointer(&notices->context, g_main_context_unref);
    g_cond_clear(&notices->done);
    g_mutex_clear(&notices->lock);
}

static void
notices_unref(RelistNotices *notices)
{
    g_atomic_rc_box_release_full(notices, notices_clear);
}

static gboolean
relist_notice_dispatch(gpointer data)
{
    RelistNotice *notice = data;
    RelistNotices *notices = notice->notices;
    g_autoptr(GError) error = NULL;
    gint64 timestamp_ns;

    if (relist_notice_dispatch_hook)
        relist_notice_dispatch_hook();

    /* notify_relist() may have updated the newest notice until now. */
    g_mutex_lock(&notices->lock);
    g_ptr_array_remove(notices->queued, notice);
    if (notices->retired) {
        g_mutex_unlock(&notices->lock);
        return G_SOURCE_REMOVE;
    }
    error = g_steal_pointer(&notice->error);
    timestamp_ns = notice->timestamp_ns;
    notices->running = g_thread_self();
    g_mutex_unlock(&notices->lock);

    notices->func(error, timestamp_ns, notices->data);

    g_mutex_lock(&notices->lock);
    notices->running = NULL;
    g_cond_broadcast(&notices->done);
    g_mutex_unlock(&notices->lock);
    return G_SOURCE_REMOVE;
}

/* The source's destroy notify: it may run under g_source_destroy() in notices_retire(), with
 * the box's lock held, so it takes no lock. */
static void
relist_notice_free(gpointer data)
{
    RelistNotice *notice = data;

    g_clear_error(&notice->error);
    notices_unref(notice->notices);
    g_free(notice);
}

#define MAX_PENDING_NOTICES 64

void
notify_relist(PlegGeneric *pleg, const GError *error, gint64 timestamp_ns)
{
    RelistNotices *notices = pleg->notices;
    RelistNotice *notice;
    GSource *source;

    if (!notices)
        return;

    /* A host whose context is not iterated must not make notices pile up: past a bound, the
     * newest queued notice takes the newest outcome instead (older outcomes are superseded). */
    g_mutex_lock(&notices->lock);
    if (notices->queued->len >= MAX_PENDING_NOTICES) {
        notice = g_ptr_array_index(notices->queued, notices->queued->len - 1);
        g_clear_error(&notice->error);
        notice->error = error ? g_error_copy(error) : NULL;
        notice->timestamp_ns = timestamp_ns;
        g_mutex_unlock(&notices->lock);
        return;
    }
    g_mutex_unlock(&notices->lock);

    notice = g_new0(RelistNotice, 1);
    notice->notices = g_atomic_rc_box_acquire(notices);
    notice->error = error ? g_error_copy(error) : NULL;
    notice->timestamp_ns = timestamp_ns;
    /* Not g_main_context_invoke(): it would run the callback right here when nobody owns
     * the context, and the header promises the callback context. */
    source = g_idle_source_new();
    g_source_set_name(source, "pleg relist notice");
    g_source_set_priority(source, G_PRIORITY_DEFAULT);
    g_source_set_callback(source, relist_notice_dispatch, notice, relist_notice_free);
    notice->source = source;
    /* Only the dispatcher queues notices, and a box is retired only while it does not run. */
    g_mutex_lock(&notices->lock);
    g_ptr_array_add(notices->queued, notice);
    g_source_attach(source, notices->context);
    g_mutex_unlock(&notices->lock);
    g_source_unref(source);
}

/* Drops the notices not dispatched yet, makes those GLib is dispatching now do nothing, waits
 * for the callback running in another thread (from inside the callback there is nothing to
 * wait for), then destroys the callback's data and drops the PLEG's reference. */
static void
notices_retire(RelistNotices *notices)
{
    GMainContext *context;

    g_mutex_lock(&notices->lock);
    notices->retired = TRUE;
    while (notices->queued->len > 0) {
        RelistNotice *notice = g_ptr_array_steal_index(notices->queued, notices->queued->len - 1);
        g_source_destroy(notice->source);
    }
    while (notices->running && notices->running != g_thread_self())
        g_cond_wait(&notices->done, &notices->lock);
    context = g_steal_pointer(&notices->context);
    g_mutex_unlock(&notices->lock);

    if (notices->destroy)
        notices->destroy(notices->data);
    g_main_context_unref(context);
    notices_unref(notices);
}

void
pleg_generic_set_relist_callback(PlegGeneric *pleg, GMainContext *context, PlegRelistFunc func,
                                 gpointer user_data, GDestroyNotify destroy)
{
    RelistNotices *notices;

    g_return_if_fail(pleg != NULL);
    g_return_if_fail(pleg->thread == NULL);

    if (pleg->notices)
        notices_retire(g_steal_pointer(&pleg->notices));
    if (!func)
        return;

    notices = g_atomic_rc_box_new0(RelistNotices);
    g_mutex_init(&notices->lock);
    g_cond_init(&notices->done);
    notices->queued = g_ptr_array_new(); /* RelistNotice, owned by their sources */
    notices->context = context ? g_main_context_ref(context) : g_main_context_ref_thread_default();
    notices->func = func;
    notices->data = user_data;
    notices->destroy = destroy;
    pleg->notices = notices;
}
