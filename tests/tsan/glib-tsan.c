/* SPDX-License-Identifier: Apache-2.0 */
/*
 * glib-tsan: makes GLib's synchronisation visible to ThreadSanitizer.
 *
 * Debian's libglib is not built with -fsanitize=thread: GMutex and GCond are futexes and atomics
 * that TSan never sees, and GLib's hand-offs between threads (GThreadPool, GMainContext sources,
 * GCancellable handlers, reference counts that free memory) happen in code it does not
 * instrument.  Without help every object passed between libpleg's threads shows up as a data
 * race.  This library is LD_PRELOADed into the TSan test processes (meson test --setup=tsan):
 * each function below takes the place of GLib's for calls from instrumented code, calls GLib's
 * own (dlsym RTLD_NEXT) and tells TSan what GLib did, with its annotation interface:
 *
 *   GMutex, GRecMutex, GRWLock   a TSan mutex at the lock's address (also lock-order checks)
 *   GCond wait                   releases and re-takes the mutex, as pthread_cond_wait does
 *   g_atomic_ref_count_dec,      release on every decrement, acquire before the last one frees
 *   g_atomic_rc_box_release*,
 *   g_bytes_unref
 *   g_once_init_enter/leave      release on leave, acquire when enter finds it done
 *   GThreadPool (every pool,     push -> the worker that runs the item; the workers -> a waiting
 *   GTask's too)                 g_thread_pool_free()
 *   GSource (idle, timeout and   set_callback / attach / set_ready_time / wakeup -> the callback
 *   unix signal callbacks),      where the context dispatches it; the callback -> its destroy
 *   g_main_context_invoke*       notify; invoke -> the function in the owning thread; an attach
 *                                and what GLib allocates in it -> the dispatch or destroy (a
 *                                real lock of this library's stands in for the context's, and
 *                                every attach, GIO's and libsoup's too, runs under it)
 *   GCancellable                 connect and cancel -> the handler; the handler -> disconnect;
 *                                cancel -> is_cancelled() seeing TRUE; connects and disconnects
 *                                under one lock of this library's (GObject's signal lock)
 *
 * GThread needs nothing: g_thread_new and g_thread_join are pthread_create and pthread_join,
 * which TSan intercepts, as it does the pthread locks inside GRecMutex and GRWLock.  GLib's calls
 * to its own functions (it links with -Bsymbolic-functions) never come here, and calls from GIO,
 * GObject and the rest of the uninstrumented GLib stack are forwarded without annotations (see
 * caller_instrumented(); the two exceptions are marked above), so what happens entirely inside
 * GLib stays invisible, and is not reported either.
 *
 * The library itself is not instrumented and refers to TSan weakly: in a process without TSan
 * it only forwards.  Every edge above is one that GLib really establishes with a lock or an
 * atomic operation; none is added for convenience, so a race between libpleg threads that GLib
 * does not order is still reported.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <glib.h>
#include <gio/gio.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC visibility push(default)

/* TSan's annotation interface (sanitizer/tsan_interface.h), bound only when TSan is loaded. */
extern void __tsan_acquire(void *addr) __attribute__((weak));
extern void __tsan_release(void *addr) __attribute__((weak));
extern void __tsan_mutex_create(void *addr, unsigned flags) __attribute__((weak));
extern void __tsan_mutex_destroy(void *addr, unsigned flags) __attribute__((weak));
extern void __tsan_mutex_pre_lock(void *addr, unsigned flags) __attribute__((weak));
extern void __tsan_mutex_post_lock(void *addr, unsigned flags, int recursion) __attribute__((weak));
extern int __tsan_mutex_pre_unlock(void *addr, unsigned flags) __attribute__((weak));
extern void __tsan_mutex_post_unlock(void *addr, unsigned flags) __attribute__((weak));
extern void __tsan_ignore_thread_begin(void) __attribute__((weak));
extern void __tsan_ignore_thread_end(void) __attribute__((weak));

#define MUTEX_WRITE_REENTRANT (1u << 1)
#define MUTEX_READ_REENTRANT  (1u << 2)
#define MUTEX_READ_LOCK       (1u << 3)
#define MUTEX_TRY_LOCK        (1u << 4)
#define MUTEX_TRY_LOCK_FAILED (1u << 5)

static gboolean
tsan_present(void)
{
    return __tsan_acquire != NULL;
}

static void
acquire(const void *addr)
{
    if (tsan_present())
        __tsan_acquire((void *)addr);
}

static void
release(const void *addr)
{
    if (tsan_present())
        __tsan_release((void *)addr);
}

/* Memory accesses of this thread not recorded (synchronisation still is), nestable. */
static __thread int ignoring;

static void
ignore_begin(void)
{
    if (tsan_present() && __tsan_ignore_thread_begin) {
        __tsan_ignore_thread_begin();
        ignoring++;
    }
}

static void
ignore_end(void)
{
    if (ignoring > 0) {
        ignoring--;
        __tsan_ignore_thread_end();
    }
}

static void
pre_lock(void *m, unsigned flags)
{
    if (tsan_present())
        __tsan_mutex_pre_lock(m, flags);
}

static void
post_lock(void *m, unsigned flags)
{
    if (tsan_present())
        __tsan_mutex_post_lock(m, flags, 0);
}

static void
pre_unlock(void *m, unsigned flags)
{
    if (tsan_present())
        __tsan_mutex_pre_unlock(m, flags);
}

static void
post_unlock(void *m, unsigned flags)
{
    if (tsan_present())
        __tsan_mutex_post_unlock(m, flags);
}

/* Whether the code at @pc was built with TSan.  GIO, GObject, libsoup and the rest of the GLib
 * stack call these functions too, and their other synchronisation is as invisible as GLib's:
 * annotating only their locks would show TSan half of what they do.  So only calls from the
 * objects under $GLIB_TSAN_INSTRUMENTED (the build tree; the test setup sets it) are annotated,
 * every call when it is unset.  Verdicts are cached per call site. */
#define CALLER_SLOTS 4096

static uintptr_t caller_pc[CALLER_SLOTS];
static int caller_verdict[CALLER_SLOTS]; /* 1 instrumented, 2 not; written before the pc */

static gboolean
caller_instrumented(const void *pc)
{
    static const char *root;
    static size_t root_len;
    static int root_state; /* 0 unknown, 1 root set, 2 unset */
    uintptr_t key = (uintptr_t)pc;
    guint slot = (guint)((key >> 2) * 2654435761u) % CALLER_SLOTS;
    Dl_info info;
    int verdict;

    if (!tsan_present())
        return FALSE;
    if (__atomic_load_n(&root_state, __ATOMIC_ACQUIRE) == 0) {
        const char *env = getenv("GLIB_TSAN_INSTRUMENTED");

        root = env && *env ? env : NULL;
        root_len = root ? strlen(root) : 0;
        __atomic_store_n(&root_state, root ? 1 : 2, __ATOMIC_RELEASE);
    }
    if (root_state == 2)
        return TRUE;
    for (guint i = 0; i < 8; i++) {
        guint at = (slot + i) % CALLER_SLOTS;
        uintptr_t seen = __atomic_load_n(&caller_pc[at], __ATOMIC_ACQUIRE);

        if (seen == key)
            return __atomic_load_n(&caller_verdict[at], __ATOMIC_RELAXED) == 1;
        if (seen == 0) {
            verdict = dladdr(pc, &info) && info.dli_fname &&
                              strncmp(info.dli_fname, root, root_len) == 0
                          ? 1
                          : 2;
            __atomic_store_n(&caller_verdict[at], verdict, __ATOMIC_RELAXED);
            uintptr_t expected = 0;
            if (__atomic_compare_exchange_n(&caller_pc[at], &expected, key, FALSE,
                                            __ATOMIC_RELEASE, __ATOMIC_RELAXED) ||
                expected == key)
                return verdict == 1;
        }
    }
    return dladdr(pc, &info) && info.dli_fname && strncmp(info.dli_fname, root, root_len) == 0;
}

#define FROM_INSTRUMENTED() caller_instrumented(__builtin_return_address(0))

/* The locks this thread holds with annotations.  The call site of an unlock does not say who
 * took the lock: GIO may take one itself and release it in a tail call from a function that
 * libpleg called, so an unlock (or a wait) is annotated exactly when its lock was. */
#define MAX_HELD 64

static __thread const void *held[MAX_HELD];
static __thread guint n_held;

static gboolean
hold(const void *lock)
{
    if (n_held == MAX_HELD)
        return FALSE;
    held[n_held++] = lock;
    return TRUE;
}

static gboolean
holding(const void *lock)
{
    for (guint i = n_held; i > 0; i--) {
        if (held[i - 1] == lock)
            return TRUE;
    }
    return FALSE;
}

static gboolean
unhold(const void *lock)
{
    for (guint i = n_held; i > 0; i--) {
        if (held[i - 1] == lock) {
            held[i - 1] = held[--n_held];
            return TRUE;
        }
    }
    return FALSE;
}

/* GLib's definition of NAME, found once; racing lookups find the same pointer. */
static void *
real_symbol(void **slot, const char *name)
{
    void *fn = __atomic_load_n(slot, __ATOMIC_ACQUIRE);

    if (!fn) {
        fn = dlsym(RTLD_NEXT, name);
        if (!fn) {
            fprintf(stderr, "glib-tsan: %s not found after this library: %s\n", name, dlerror());
            abort();
        }
        __atomic_store_n(slot, fn, __ATOMIC_RELEASE);
    }
    return fn;
}

#define REAL(ret, name, params)                                                              \
    static ret (*real_##name) params;                                                        \
    static ret (*get_##name(void)) params                                                    \
    {                                                                                        \
        return (ret(*) params)real_symbol((void **)&real_##name, #name);                     \
    }

/* --- GMutex ----------------------------------------------------------------------------- */

REAL(void, g_mutex_init, (GMutex *))
REAL(void, g_mutex_clear, (GMutex *))
REAL(void, g_mutex_lock, (GMutex *))
REAL(void, g_mutex_unlock, (GMutex *))
REAL(gboolean, g_mutex_trylock, (GMutex *))

void
g_mutex_init(GMutex *mutex)
{
    if (!FROM_INSTRUMENTED()) {
        get_g_mutex_init()(mutex);
        return;
    }

    get_g_mutex_init()(mutex);
    if (tsan_present())
        __tsan_mutex_create(mutex, 0);
}

void
g_mutex_clear(GMutex *mutex)
{
    if (!FROM_INSTRUMENTED()) {
        get_g_mutex_clear()(mutex);
        return;
    }

    if (tsan_present())
        __tsan_mutex_destroy(mutex, 0);
    get_g_mutex_clear()(mutex);
}

void
g_mutex_lock(GMutex *mutex)
{
    if (!FROM_INSTRUMENTED() || !hold(mutex)) {
        get_g_mutex_lock()(mutex);
        return;
    }

    pre_lock(mutex, 0);
    get_g_mutex_lock()(mutex);
    post_lock(mutex, 0);
}

void
g_mutex_unlock(GMutex *mutex)
{
    if (!unhold(mutex)) {
        get_g_mutex_unlock()(mutex);
        return;
    }

    pre_unlock(mutex, 0);
    get_g_mutex_unlock()(mutex);
    post_unlock(mutex, 0);
}

gboolean
g_mutex_trylock(GMutex *mutex)
{
    if (!FROM_INSTRUMENTED() || !hold(mutex))
        return get_g_mutex_trylock()(mutex);

    gboolean locked;

    pre_lock(mutex, MUTEX_TRY_LOCK);
    locked = get_g_mutex_trylock()(mutex);
    post_lock(mutex, MUTEX_TRY_LOCK | (locked ? 0 : MUTEX_TRY_LOCK_FAILED));
    if (!locked)
        unhold(mutex);
    return locked;
}

/* --- GRecMutex -------------------------------------------------------------------------- */

REAL(void, g_rec_mutex_init, (GRecMutex *))
REAL(void, g_rec_mutex_clear, (GRecMutex *))
REAL(void, g_rec_mutex_lock, (GRecMutex *))
REAL(void, g_rec_mutex_unlock, (GRecMutex *))
REAL(gboolean, g_rec_mutex_trylock, (GRecMutex *))

void
g_rec_mutex_init(GRecMutex *rec_mutex)
{
    if (!FROM_INSTRUMENTED()) {
        get_g_rec_mutex_init()(rec_mutex);
        return;
    }

    get_g_rec_mutex_init()(rec_mutex);
    if (tsan_present())
        __tsan_mutex_create(rec_mutex, MUTEX_WRITE_REENTRANT);
}

void
g_rec_mutex_clear(GRecMutex *rec_mutex)
{
    if (!FROM_INSTRUMENTED()) {
        get_g_rec_mutex_clear()(rec_mutex);
        return;
    }

    if (tsan_present())
        __tsan_mutex_destroy(rec_mutex, 0);
    get_g_rec_mutex_clear()(rec_mutex);
}

void
g_rec_mutex_lock(GRecMutex *rec_mutex)
{
    if (!FROM_INSTRUMENTED() || !hold(rec_mutex)) {
        get_g_rec_mutex_lock()(rec_mutex);
        return;
    }

    pre_lock(rec_mutex, MUTEX_WRITE_REENTRANT);
    get_g_rec_mutex_lock()(rec_mutex);
    post_lock(rec_mutex, MUTEX_WRITE_REENTRANT);
}

void
g_rec_mutex_unlock(GRecMutex *rec_mutex)
{
    if (!unhold(rec_mutex)) {
        get_g_rec_mutex_unlock()(rec_mutex);
        return;
    }

    pre_unlock(rec_mutex, 0);
    get_g_rec_mutex_unlock()(rec_mutex);
    post_unlock(rec_mutex, 0);
}

gboolean
g_rec_mutex_trylock(GRecMutex *rec_mutex)
{
    if (!FROM_INSTRUMENTED() || !hold(rec_mutex))
        return get_g_rec_mutex_trylock()(rec_mutex);

    gboolean locked;

    pre_lock(rec_mutex, MUTEX_WRITE_REENTRANT | MUTEX_TRY_LOCK);
    locked = get_g_rec_mutex_trylock()(rec_mutex);
    post_lock(rec_mutex, MUTEX_WRITE_REENTRANT | MUTEX_TRY_LOCK |
                             (locked ? 0 : MUTEX_TRY_LOCK_FAILED));
    if (!locked)
        unhold(rec_mutex);
    return locked;
}

/* --- GRWLock ---------------------------------------------------------------------------- */

REAL(void, g_rw_lock_init, (GRWLock *))
REAL(void, g_rw_lock_clear, (GRWLock *))
REAL(void, g_rw_lock_writer_lock, (GRWLock *))
REAL(gboolean, g_rw_lock_writer_trylock, (GRWLock *))
REAL(void, g_rw_lock_writer_unlock, (GRWLock *))
REAL(void, g_rw_lock_reader_lock, (GRWLock *))
REAL(gboolean, g_rw_lock_reader_trylock, (GRWLock *))
REAL(void, g_rw_lock_reader_unlock, (GRWLock *))

void
g_rw_lock_init(GRWLock *rw_lock)
{
    if (!FROM_INSTRUMENTED()) {
        get_g_rw_lock_init()(rw_lock);
        return;
    }

    get_g_rw_lock_init()(rw_lock);
    if (tsan_present())
        __tsan_mutex_create(rw_lock, MUTEX_READ_REENTRANT);
}

void
g_rw_lock_clear(GRWLock *rw_lock)
{
    if (!FROM_INSTRUMENTED()) {
        get_g_rw_lock_clear()(rw_lock);
        return;
    }

    if (tsan_present())
        __tsan_mutex_destroy(rw_lock, 0);
    get_g_rw_lock_clear()(rw_lock);
}

void
g_rw_lock_writer_lock(GRWLock *rw_lock)
{
    if (!FROM_INSTRUMENTED() || !hold(rw_lock)) {
        get_g_rw_lock_writer_lock()(rw_lock);
        return;
    }

    pre_lock(rw_lock, 0);
    get_g_rw_lock_writer_lock()(rw_lock);
    post_lock(rw_lock, 0);
}

gboolean
g_rw_lock_writer_trylock(GRWLock *rw_lock)
{
    if (!FROM_INSTRUMENTED() || !hold(rw_lock))
        return get_g_rw_lock_writer_trylock()(rw_lock);

    gboolean locked;

    pre_lock(rw_lock, MUTEX_TRY_LOCK);
    locked = get_g_rw_lock_writer_trylock()(rw_lock);
    post_lock(rw_lock, MUTEX_TRY_LOCK | (locked ? 0 : MUTEX_TRY_LOCK_FAILED));
    if (!locked)
        unhold(rw_lock);
    return locked;
}

void
g_rw_lock_writer_unlock(GRWLock *rw_lock)
{
    if (!unhold(rw_lock)) {
        get_g_rw_lock_writer_unlock()(rw_lock);
        return;
    }

    pre_unlock(rw_lock, 0);
    get_g_rw_lock_writer_unlock()(rw_lock);
    post_unlock(rw_lock, 0);
}

void
g_rw_lock_reader_lock(GRWLock *rw_lock)
{
    if (!FROM_INSTRUMENTED() || !hold(rw_lock)) {
        get_g_rw_lock_reader_lock()(rw_lock);
        return;
    }

    pre_lock(rw_lock, MUTEX_READ_LOCK);
    get_g_rw_lock_reader_lock()(rw_lock);
    post_lock(rw_lock, MUTEX_READ_LOCK);
}

gboolean
g_rw_lock_reader_trylock(GRWLock *rw_lock)
{
    if (!FROM_INSTRUMENTED() || !hold(rw_lock))
        return get_g_rw_lock_reader_trylock()(rw_lock);

    gboolean locked;

    pre_lock(rw_lock, MUTEX_READ_LOCK | MUTEX_TRY_LOCK);
    locked = get_g_rw_lock_reader_trylock()(rw_lock);
    post_lock(rw_lock, MUTEX_READ_LOCK | MUTEX_TRY_LOCK | (locked ? 0 : MUTEX_TRY_LOCK_FAILED));
    if (!locked)
        unhold(rw_lock);
    return locked;
}

void
g_rw_lock_reader_unlock(GRWLock *rw_lock)
{
    if (!unhold(rw_lock)) {
        get_g_rw_lock_reader_unlock()(rw_lock);
        return;
    }

    pre_unlock(rw_lock, MUTEX_READ_LOCK);
    get_g_rw_lock_reader_unlock()(rw_lock);
    post_unlock(rw_lock, MUTEX_READ_LOCK);
}

/* --- GCond: a wait gives the mutex up and takes it again -------------------------------- */

REAL(void, g_cond_wait, (GCond *, GMutex *))
REAL(gboolean, g_cond_wait_until, (GCond *, GMutex *, gint64))

void
g_cond_wait(GCond *cond, GMutex *mutex)
{
    if (!holding(mutex)) {
        get_g_cond_wait()(cond, mutex);
        return;
    }

    pre_unlock(mutex, 0);
    post_unlock(mutex, 0);
    get_g_cond_wait()(cond, mutex);
    pre_lock(mutex, 0);
    post_lock(mutex, 0);
}

gboolean
g_cond_wait_until(GCond *cond, GMutex *mutex, gint64 end_time)
{
    if (!holding(mutex))
        return get_g_cond_wait_until()(cond, mutex, end_time);

    gboolean signalled;

    pre_unlock(mutex, 0);
    post_unlock(mutex, 0);
    signalled = get_g_cond_wait_until()(cond, mutex, end_time);
    pre_lock(mutex, 0);
    post_lock(mutex, 0);
    return signalled;
}

/* --- reference counts that free: release on each drop, acquire before the free ---------- */

REAL(gboolean, g_atomic_ref_count_dec, (gatomicrefcount *))
REAL(void, g_atomic_rc_box_release_full, (gpointer, GDestroyNotify))
REAL(void, g_once_init_leave, (volatile void *, gsize))
REAL(gboolean, g_once_init_enter, (volatile void *))

gboolean
g_atomic_ref_count_dec(gatomicrefcount *arc)
{
    if (!FROM_INSTRUMENTED())
        return get_g_atomic_ref_count_dec()(arc);

    gboolean last;

    release(arc);
    last = get_g_atomic_ref_count_dec()(arc);
    if (last)
        acquire(arc);
    return last;
}

/* GLib calls the clear function of the last reference from inside release_full(): the
 * acquire has to come first, so the real call gets a clear function of ours.  Clear
 * functions may release other boxes, hence the saved and restored per-thread slot. */
typedef struct {
    gpointer mem;
    GDestroyNotify clear_func;
} RcBoxRelease;

static __thread RcBoxRelease *current_rc_box_release;

static void
rc_box_clear_forward(gpointer mem)
{
    RcBoxRelease *r = current_rc_box_release;
    GDestroyNotify clear_func = r->clear_func;

    acquire(mem);
    r->clear_func = NULL;
    if (clear_func)
        clear_func(mem);
}

void
g_atomic_rc_box_release_full(gpointer mem_block, GDestroyNotify clear_func)
{
    if (!FROM_INSTRUMENTED()) {
        get_g_atomic_rc_box_release_full()(mem_block, clear_func);
        return;
    }

    RcBoxRelease r = {mem_block, clear_func};
    RcBoxRelease *saved = current_rc_box_release;

    release(mem_block);
    current_rc_box_release = &r;
    get_g_atomic_rc_box_release_full()(mem_block, rc_box_clear_forward);
    current_rc_box_release = saved;
}

void
g_atomic_rc_box_release(gpointer mem_block)
{
    if (!FROM_INSTRUMENTED()) {
        get_g_atomic_rc_box_release_full()(mem_block, NULL);
        return;
    }

    g_atomic_rc_box_release_full(mem_block, NULL);
}

/* GBytes: g_bytes_unref() decrements its count atomically inside GLib; the one that drops the
 * last reference frees the data that other threads read before their own unref. */
REAL(void, g_bytes_unref, (GBytes *))

void
g_bytes_unref(GBytes *bytes)
{
    if (FROM_INSTRUMENTED() && bytes) {
        release(bytes);
        acquire(bytes);
    }
    get_g_bytes_unref()(bytes);
}

gboolean
(g_once_init_enter)(volatile void *location)
{
    if (!FROM_INSTRUMENTED())
        return get_g_once_init_enter()(location);

    gboolean enter = get_g_once_init_enter()(location);

    if (!enter)
        acquire((const void *)location);
    return enter;
}

void
(g_once_init_leave)(volatile void *location, gsize result)
{
    if (!FROM_INSTRUMENTED()) {
        get_g_once_init_leave()(location, result);
        return;
    }

    release((const void *)location);
    get_g_once_init_leave()(location, result);
}

/* --- GThreadPool: the item's push -> its worker; the workers -> a waiting free ------------ */

/* Every pool, GIO's too: GTask runs g_task_run_in_thread() work (libsoup closing a chunked
 * response body, writing its last chunk into the buffer the loop's thread wrote the others
 * into) on a pool GIO made, and GLib's queue orders the push before the work. */

typedef struct {
    GFunc func;
    gpointer user_data;
} PoolFunc;

static void
pool_worker(gpointer data, gpointer user_data)
{
    PoolFunc *pf = user_data;

    acquire(data);
    pf->func(data, pf->user_data);
    release(pf);
}

REAL(GThreadPool *, g_thread_pool_new, (GFunc, gpointer, gint, gboolean, GError **))
REAL(gboolean, g_thread_pool_push, (GThreadPool *, gpointer, GError **))
REAL(void, g_thread_pool_free, (GThreadPool *, gboolean, gboolean))

GThreadPool *
g_thread_pool_new(GFunc func, gpointer user_data, gint max_threads, gboolean exclusive,
                  GError **error)
{
    PoolFunc *pf = malloc(sizeof *pf);
    GThreadPool *pool;

    if (!pf)
        abort();
    pf->func = func;
    pf->user_data = user_data;
    pool = get_g_thread_pool_new()(pool_worker, pf, max_threads, exclusive, error);
    if (!pool)
        free(pf);
    return pool;
}

gboolean
g_thread_pool_push(GThreadPool *pool, gpointer data, GError **error)
{
    release(data);
    return get_g_thread_pool_push()(pool, data, error);
}

void
g_thread_pool_free(GThreadPool *pool, gboolean immediate, gboolean wait_)
{
    PoolFunc *pf = pool->func == pool_worker ? pool->user_data : NULL;

    get_g_thread_pool_free()(pool, immediate, wait_);
    /* Without wait_ the workers may still run: the wrapper stays (a few bytes). */
    if (pf && wait_) {
        acquire(pf);
        free(pf);
    }
}

/* --- GSource callbacks and g_main_context_invoke ----------------------------------------- */

/* A GSourceFunc callback of ours in front of the caller's: acquire the source before it runs,
 * release after, for whoever destroys the source; the destroy notify runs after that. */
typedef struct {
    GSource *source;
    GSourceFunc func;
    gpointer data;
    GDestroyNotify notify;
} SourceCallback;

/* g_source_attach() allocates inside GLib (the context's list for the source's priority) after
 * any release this library could make before it, and the thread that later dispatches or
 * destroys the source frees that memory.  GLib orders the two with its context lock, which TSan
 * cannot see; this lock stands in for it: an attach from instrumented code runs under it and
 * releases the source before letting go, and the dispatch or destroy acquires the source under
 * it, so it waits for an attach still in progress. */
static pthread_mutex_t handoff_lock = PTHREAD_MUTEX_INITIALIZER;

static void
acquire_handoff(const void *edge)
{
    pthread_mutex_lock(&handoff_lock);
    acquire(edge);
    pthread_mutex_unlock(&handoff_lock);
}

static gboolean
source_callback(gpointer data)
{
    SourceCallback *sc = data;
    gboolean again;

    acquire_handoff(sc->source);
    again = sc->func(sc->data);
    release(sc->source);
    return again;
}

static void
source_callback_free(gpointer data)
{
    SourceCallback *sc = data;

    acquire_handoff(sc->source);
    acquire(sc);
    if (sc->notify)
        sc->notify(sc->data);
    free(sc);
}

REAL(void, g_source_set_callback, (GSource *, GSourceFunc, gpointer, GDestroyNotify))
REAL(guint, g_source_attach, (GSource *, GMainContext *))
REAL(void, g_source_set_ready_time, (GSource *, gint64))
REAL(void, g_source_destroy, (GSource *))
REAL(void, g_main_context_wakeup, (GMainContext *))

/* The sources whose callbacks GLib calls as GSourceFunc. */
static gboolean
takes_source_func(GSource *source)
{
    return source->source_funcs == &g_idle_funcs || source->source_funcs == &g_timeout_funcs ||
           source->source_funcs == &g_unix_signal_funcs;
}

void
g_source_set_callback(GSource *source, GSourceFunc func, gpointer data, GDestroyNotify notify)
{
    SourceCallback *sc;

    if (!FROM_INSTRUMENTED() || !func || !takes_source_func(source)) {
        get_g_source_set_callback()(source, func, data, notify);
        return;
    }
    sc = malloc(sizeof *sc);
    if (!sc)
        abort();
    *sc = (SourceCallback){source, func, data, notify};
    release(source);
    release(sc);
    get_g_source_set_callback()(source, source_callback, sc, source_callback_free);
}

/* Attaches @source under the hand-off lock, then releases @edge (see handoff_lock). */
static guint
attach_handoff(GSource *source, GMainContext *context, const void *edge)
{
    guint id;

    pthread_mutex_lock(&handoff_lock);
    release(source);
    id = get_g_source_attach()(source, context);
    release(edge);
    pthread_mutex_unlock(&handoff_lock);
    return id;
}

/* Every attach runs under the hand-off lock, GIO's and libsoup's too: each grows the context's
 * tables (g_realloc) under the context's lock, so an attach by GIO on the loop's thread and one
 * by libpleg from another thread are ordered by GLib, and TSan must see that order.  Only those
 * from instrumented code release anything: the uninstrumented rest publishes nothing of ours. */
guint
g_source_attach(GSource *source, GMainContext *context)
{
    guint id;

    if (FROM_INSTRUMENTED())
        return attach_handoff(source, context, source);

    pthread_mutex_lock(&handoff_lock);
    id = get_g_source_attach()(source, context);
    pthread_mutex_unlock(&handoff_lock);
    return id;
}

void
g_source_set_ready_time(GSource *source, gint64 ready_time)
{
    if (!FROM_INSTRUMENTED()) {
        get_g_source_set_ready_time()(source, ready_time);
        return;
    }

    release(source);
    get_g_source_set_ready_time()(source, ready_time);
}

void
g_source_destroy(GSource *source)
{
    if (!FROM_INSTRUMENTED()) {
        get_g_source_destroy()(source);
        return;
    }

    acquire_handoff(source);
    release(source);
    get_g_source_destroy()(source);
}

void
g_main_context_wakeup(GMainContext *context)
{
    if (!FROM_INSTRUMENTED()) {
        get_g_main_context_wakeup()(context);
        return;
    }

    release(context);
    get_g_main_context_wakeup()(context);
}

typedef struct {
    GSourceFunc func;
    gpointer data;
    GDestroyNotify notify;
} Invoke;

static gboolean
invoke_func(gpointer data)
{
    Invoke *inv = data;
    gboolean again;

    acquire_handoff(inv);
    again = inv->func(inv->data);
    release(inv);
    return again;
}

static void
invoke_free(gpointer data)
{
    Invoke *inv = data;

    acquire_handoff(inv);
    if (inv->notify)
        inv->notify(inv->data);
    free(inv);
}

REAL(void, g_main_context_invoke_full,
     (GMainContext *, gint, GSourceFunc, gpointer, GDestroyNotify))

/* g_main_context_invoke_full() as GLib documents it: the function runs at once in a thread that
 * owns @context, or that can acquire it when it is the thread's default; anywhere else an idle
 * source runs it.  That source is made here, before the release, rather than inside GLib's
 * invoke after it: the thread that dispatches it frees it, and TSan must see the allocation
 * ordered before that free. */
void
g_main_context_invoke_full(GMainContext *context, gint priority, GSourceFunc function,
                           gpointer data, GDestroyNotify notify)
{
    GMainContext *thread_default;
    GSource *source;

    if (!FROM_INSTRUMENTED()) {
        get_g_main_context_invoke_full()(context, priority, function, data, notify);
        return;
    }

    if (!context)
        context = g_main_context_default();
    thread_default = g_main_context_get_thread_default();
    if (!thread_default)
        thread_default = g_main_context_default();
    if (g_main_context_is_owner(context)) {
        get_g_main_context_invoke_full()(context, priority, function, data, notify);
        return;
    }
    if (thread_default == context && g_main_context_acquire(context)) {
        while (function(data))
            ;
        g_main_context_release(context);
        if (notify)
            notify(data);
        return;
    }

    Invoke *inv = malloc(sizeof *inv);

    if (!inv)
        abort();
    *inv = (Invoke){function, data, notify};
    source = g_idle_source_new();
    g_source_set_priority(source, priority);
    get_g_source_set_callback()(source, invoke_func, inv, invoke_free);
    release(inv);
    attach_handoff(source, context, inv);
    g_source_unref(source);
}

void
g_main_context_invoke(GMainContext *context, GSourceFunc function, gpointer data)
{
    if (!FROM_INSTRUMENTED()) {
        get_g_main_context_invoke_full()(context, G_PRIORITY_DEFAULT, function, data, NULL);
        return;
    }

    g_main_context_invoke_full(context, G_PRIORITY_DEFAULT, function, data, NULL);
}

/* --- GCancellable: connect and cancel -> the handler -> disconnect ----------------------- */

/* GObject keeps every instance's signal handlers in global tables that connect and disconnect
 * grow and shrink (g_realloc) under its global signal lock, which TSan cannot see: two threads
 * connecting to one relist's GCancellable were reported, and so was a connect of libpleg's
 * dispatcher against GIO's own on plegd's main thread (libsoup's sockets), which no wrapper
 * sees.  So GLib's connect and disconnect run with this thread's memory accesses ignored
 * (GObject touches only its own tables there; the handler's data is ordered by the edges
 * below, which are still recorded), and connects and disconnects from instrumented code take
 * this lock around GLib's, as the stand-in of GObject's.  (A handler must then not connect or
 * disconnect a cancellable itself: libpleg's only cancel the gRPC call.) */
static pthread_mutex_t signal_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct {
    GCancellable *cancellable;
    GCallback callback;
    gpointer data;
    GDestroyNotify destroy;
} CancelHandler;

static void
cancel_handler(GCancellable *cancellable, gpointer data)
{
    CancelHandler *h = data;

    /* On a cancellable cancelled already, GLib's connect calls the handler at once: its own
     * accesses count. */
    int ignored = ignoring;

    for (int i = 0; i < ignored; i++)
        ignore_end();
    acquire(h);
    acquire(cancellable);
    ((void (*)(GCancellable *, gpointer))h->callback)(cancellable, h->data);
    release(cancellable);
    release(h);
    for (int i = 0; i < ignored; i++)
        ignore_begin();
}

static void
cancel_handler_free(gpointer data)
{
    CancelHandler *h = data;

    acquire(h);
    if (h->destroy)
        h->destroy(h->data);
    free(h);
}

REAL(gulong, g_cancellable_connect, (GCancellable *, GCallback, gpointer, GDestroyNotify))
REAL(void, g_cancellable_disconnect, (GCancellable *, gulong))
REAL(void, g_cancellable_cancel, (GCancellable *))
REAL(gboolean, g_cancellable_is_cancelled, (GCancellable *))

gulong
g_cancellable_connect(GCancellable *cancellable, GCallback callback, gpointer data,
                      GDestroyNotify data_destroy_func)
{
    CancelHandler *h;
    gulong id;

    if (!FROM_INSTRUMENTED() || !cancellable || !callback)
        return get_g_cancellable_connect()(cancellable, callback, data, data_destroy_func);
    h = malloc(sizeof *h);
    if (!h)
        abort();
    *h = (CancelHandler){cancellable, callback, data, data_destroy_func};
    release(h);
    pthread_mutex_lock(&signal_lock);
    ignore_begin();
    id = get_g_cancellable_connect()(cancellable, G_CALLBACK(cancel_handler), h,
                                     cancel_handler_free);
    ignore_end();
    pthread_mutex_unlock(&signal_lock);
    return id;
}

/* GLib's disconnect waits for a handler running in another thread to return. */
void
g_cancellable_disconnect(GCancellable *cancellable, gulong handler_id)
{
    if (!FROM_INSTRUMENTED()) {
        get_g_cancellable_disconnect()(cancellable, handler_id);
        return;
    }

    pthread_mutex_lock(&signal_lock);
    ignore_begin();
    get_g_cancellable_disconnect()(cancellable, handler_id);
    ignore_end();
    pthread_mutex_unlock(&signal_lock);
    if (cancellable)
        acquire(cancellable);
}

void
g_cancellable_cancel(GCancellable *cancellable)
{
    if (!FROM_INSTRUMENTED()) {
        get_g_cancellable_cancel()(cancellable);
        return;
    }

    if (cancellable)
        release(cancellable);
    get_g_cancellable_cancel()(cancellable);
}

gboolean
g_cancellable_is_cancelled(GCancellable *cancellable)
{
    if (!FROM_INSTRUMENTED())
        return get_g_cancellable_is_cancelled()(cancellable);

    gboolean cancelled = get_g_cancellable_is_cancelled()(cancellable);

    if (cancelled)
        acquire(cancellable);
    return cancelled;
}

#pragma GCC visibility pop
