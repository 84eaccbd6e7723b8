/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The TSan setup's own test: run with --setup=tsan, each mode must come out as the shim and the
 * checker promise.
 *
 *   test-glib-tsan clean   GLib hand-offs libpleg relies on, each ordered only by GLib: no
 *                          report (without glib-tsan.c every one of them is reported)
 *   test-glib-tsan racy    a plain int incremented from two threads: must fail
 */
#include <glib.h>
#include <string.h>

#define ROUNDS 2000

typedef struct {
    GMutex lock;
    int guarded;
    int plain;
} Counter;

static gpointer
count_locked(gpointer data)
{
    Counter *c = data;

    for (int i = 0; i < ROUNDS; i++) {
        g_mutex_lock(&c->lock);
        c->guarded++;
        g_mutex_unlock(&c->lock);
    }
    return NULL;
}

static gpointer
count_plain(gpointer data)
{
    Counter *c = data;

    for (int i = 0; i < ROUNDS; i++)
        c->plain++;
    return NULL;
}

typedef struct {
    int input;
    int output;
} Item;

static void
pool_work(gpointer data, gpointer user_data)
{
    Item *item = data;

    item->output = item->input * 2;
}

typedef struct {
    int value;
} Box;

static void
box_clear(Box *box)
{
    g_assert_cmpint(box->value, ==, 42);
}

static gpointer
box_user(gpointer data)
{
    Box *box = data;

    g_assert_cmpint(box->value, ==, 41);
    box->value = 42;
    g_atomic_rc_box_release_full(box, (GDestroyNotify)box_clear);
    return NULL;
}

typedef struct {
    GMainContext *context;
    int value;
    gboolean done; /* main thread only */
} Idle;

static gboolean
idle_read(gpointer data)
{
    Idle *idle = data;

    g_assert_cmpint(idle->value, ==, 7);
    idle->done = TRUE;
    return G_SOURCE_REMOVE;
}

static gpointer
idle_poster(gpointer data)
{
    Idle *idle = data;
    GSource *source = g_idle_source_new();

    idle->value = 7;
    g_source_set_callback(source, idle_read, idle, NULL);
    g_source_attach(source, idle->context);
    g_source_unref(source);
    return NULL;
}

typedef struct {
    GMutex lock;
    GCond cond;
    gboolean ready;
    int value;
} Signal;

static gpointer
cond_waiter(gpointer data)
{
    Signal *sig = data;
    int value;

    g_mutex_lock(&sig->lock);
    while (!sig->ready)
        g_cond_wait(&sig->cond, &sig->lock);
    value = sig->value;
    g_mutex_unlock(&sig->lock);
    sig->value = value + 1; /* ordered by the join only */
    return NULL;
}

static void
clean(void)
{
    Counter c = {0};
    GThread *threads[2];
    GThreadPool *pool;
    Item items[8];
    Box *box;
    GThread *user;
    Idle idle = {.context = g_main_context_new()};
    GThread *poster;
    Signal sig = {0};
    GThread *waiter;

    /* GMutex */
    g_mutex_init(&c.lock);
    for (int i = 0; i < 2; i++)
        threads[i] = g_thread_new("locked", count_locked, &c);
    for (int i = 0; i < 2; i++)
        g_thread_join(threads[i]);
    g_assert_cmpint(c.guarded, ==, 2 * ROUNDS);
    g_mutex_clear(&c.lock);

    /* GThreadPool: push -> worker -> a waiting free */
    pool = g_thread_pool_new(pool_work, NULL, 3, FALSE, NULL);
    for (int i = 0; i < 8; i++) {
        items[i].input = i;
        g_thread_pool_push(pool, &items[i], NULL);
    }
    g_thread_pool_free(pool, FALSE, TRUE);
    for (int i = 0; i < 8; i++)
        g_assert_cmpint(items[i].output, ==, 2 * i);

    /* g_atomic_rc_box: the last release frees after every other holder's accesses */
    box = g_atomic_rc_box_new0(Box);
    box->value = 41;
    user = g_thread_new("box", box_user, g_atomic_rc_box_acquire(box));
    g_atomic_rc_box_release_full(box, (GDestroyNotify)box_clear);
    g_thread_join(user);

    /* An idle source attached from another thread: only the source orders the callback */
    poster = g_thread_new("poster", idle_poster, &idle);
    while (!idle.done)
        g_main_context_iteration(idle.context, TRUE);
    g_thread_join(poster);
    g_main_context_unref(idle.context);

    /* GCond: the wait gives the mutex up and takes it again */
    g_mutex_init(&sig.lock);
    g_cond_init(&sig.cond);
    waiter = g_thread_new("waiter", cond_waiter, &sig);
    g_mutex_lock(&sig.lock);
    sig.value = 5;
    sig.ready = TRUE;
    g_cond_signal(&sig.cond);
    g_mutex_unlock(&sig.lock);
    g_thread_join(waiter);
    g_assert_cmpint(sig.value, ==, 6);
    g_cond_clear(&sig.cond);
    g_mutex_clear(&sig.lock);
}

static void
racy(void)
{
    Counter c = {0};
    GThread *threads[2];

    for (int i = 0; i < 2; i++)
        threads[i] = g_thread_new("plain", count_plain, &c);
    for (int i = 0; i < 2; i++)
        g_thread_join(threads[i]);
    g_print("plain counter: %d of %d\n", c.plain, 2 * ROUNDS);
}

int
main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "clean") == 0)
        clean();
    else if (argc == 2 && strcmp(argv[1], "racy") == 0)
        racy();
    else
        g_error("usage: %s clean|racy", argv[0]);
    return 0;
}
