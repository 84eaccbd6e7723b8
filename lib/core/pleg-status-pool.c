/* SPDX-License-Identifier: Apache-2.0 */
/* The status pool: how a runtime that can only block in its calls (one built on the public
 * vtable) is driven under a bound on status calls in flight.  Each query is asked on a thread of
 * a GLib pool with pleg_runtime_get_statuses(), and its answer handed back on the thread that
 * drives, as they come.  The CRI client drives its own calls instead, from one thread
 * (cri_channel_drive()). */
#include "pleg-config.h"

#include <pleg/pleg-cri-client.h>

#include "pleg-private.h"

struct _PlegStatusPool {
    PlegRuntime *runtime; /* the owner, not referenced */
    GMutex lock;
    GThreadPool *threads; /* made at the first drive, as large as the largest bound asked */
};

/* One drive: the answers its queries' threads hand back. */
typedef struct {
    PlegStatusPool *pool;
    GCancellable *cancellable;
    GMutex lock;
    GCond answered;
    GQueue answers; /* PlegStatusQuery, under lock */
} PoolDrive;

typedef struct {
    PoolDrive *drive;
    PlegStatusQuery *query;
} PoolTask;

PlegStatusPool *
pleg_status_pool_new(PlegRuntime *runtime)
{
    PlegStatusPool *pool = g_new0(PlegStatusPool, 1);

    pool->runtime = runtime;
    g_mutex_init(&pool->lock);
    return pool;
}

void
pleg_status_pool_free(PlegStatusPool *pool)
{
    if (!pool)
        return;
    /* Waits for the tasks: each belongs to a drive still under way. */
    if (pool->threads)
        g_thread_pool_free(pool->threads, FALSE, TRUE);
    g_mutex_clear(&pool->lock);
    g_free(pool);
}

static void
ask(gpointer data, gpointer user_data)
{
    PoolTask *task = data;
    PoolDrive *drive = task->drive;

    pleg_runtime_get_statuses(drive->pool->runtime, task->query, 1, drive->cancellable);
    /* A GQueue under the drive's GMutex, not a GAsyncQueue: glib-tsan sees this hand-off. */
    g_mutex_lock(&drive->lock);
    g_queue_push_tail(&drive->answers, task->query);
    g_cond_signal(&drive->answered);
    g_mutex_unlock(&drive->lock);
    g_free(task);
}

void
pleg_status_pool_drive(gpointer impl, const PlegStatusFeed *feed, gpointer data,
                       guint max_in_flight, GCancellable *cancellable)
{
    PlegStatusPool *pool = impl;
    PoolDrive drive = {.pool = pool, .cancellable = cancellable};
    gint max_threads = (gint)MIN(max_in_flight, G_MAXINT);
    guint in_flight = 0;
    gboolean more = TRUE;

    g_mutex_lock(&pool->lock);
    if (!pool->threads)
        pool->threads = g_thread_pool_new(ask, NULL, max_threads, FALSE, NULL);
    else if (g_thread_pool_get_max_threads(pool->threads) < max_threads)
        g_thread_pool_set_max_threads(pool->threads, max_threads, NULL);
    g_mutex_unlock(&pool->lock);

    g_mutex_init(&drive.lock);
    g_cond_init(&drive.answered);
    g_queue_init(&drive.answers);
    for (;;) {
        PlegStatusQuery *answer;

        while (more && in_flight < max_in_flight) {
            PlegStatusQuery *q = feed->next(data);
            PoolTask *task;

            if (!q) {
                more = FALSE;
                break;
            }
            /* Once cancelled, what is left fails here, even on a runtime that would not
             * notice the cancellable. */
            if (g_cancellable_is_cancelled(cancellable)) {
                g_set_error(&q->error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_CANCELLED,
                            "status call cancelled");
                feed->answered(q, data);
                continue;
            }
            task = g_new(PoolTask, 1);
            task->drive = &drive;
            task->query = q;
            g_thread_pool_push(pool->threads, task, NULL);
            in_flight++;
        }
        if (in_flight == 0)
            break;
        g_mutex_lock(&drive.lock);
        while (!(answer = g_queue_pop_head(&drive.answers)))
            g_cond_wait(&drive.answered, &drive.lock);
        g_mutex_unlock(&drive.lock);
        in_flight--;
        feed->answered(answer, data);
        more = TRUE;
    }
    g_cond_clear(&drive.answered);
    g_mutex_clear(&drive.lock);
}
