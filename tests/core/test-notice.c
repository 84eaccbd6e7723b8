/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The relist callback's notices (lib/core/pleg-relist-notice.c) against pleg_generic_free() and
 * a new callback: a notice that GLib has begun to dispatch, held in the test hook before it
 * takes any lock, must neither touch the freed PLEG nor call a callback that is gone.
 */
#include "core-test.h"

#include "pleg-generic-private.h"

/* The hook's gate: a notice stops in it until the test lets it go. */
typedef struct {
    GMutex lock;
    GCond cond;
    guint held;       /* notices that have stopped in the hook so far */
    gboolean release; /* let them go */
} Gate;

static Gate gate;

static void
hold_notice(void)
{
    gint64 end_time = g_get_monotonic_time() + 2 * WAIT_USEC;

    g_mutex_lock(&gate.lock);
    gate.held++;
    g_cond_broadcast(&gate.cond);
    /* The deadline only keeps a broken test from hanging the host thread forever. */
    while (!gate.release && g_cond_wait_until(&gate.cond, &gate.lock, end_time))
        ;
    g_mutex_unlock(&gate.lock);
}

static gboolean
gate_wait_held(void)
{
    gint64 end_time = g_get_monotonic_time() + WAIT_USEC;
    gboolean held;

    g_mutex_lock(&gate.lock);
    while (gate.held == 0 && g_cond_wait_until(&gate.cond, &gate.lock, end_time))
        ;
    held = gate.held > 0;
    g_mutex_unlock(&gate.lock);
    return held;
}

static void
gate_release(void)
{
    g_mutex_lock(&gate.lock);
    gate.release = TRUE;
    g_cond_broadcast(&gate.cond);
    g_mutex_unlock(&gate.lock);
}

static void
setup(void)
{
    g_mutex_init(&gate.lock);
    g_cond_init(&gate.cond);
    gate.held = 0;
    gate.release = FALSE;
    relist_notice_dispatch_hook = hold_notice;
}

static void
teardown(void)
{
    relist_notice_dispatch_hook = NULL;
    g_cond_clear(&gate.cond);
    g_mutex_clear(&gate.lock);
}

/* The callback context, iterated by a host thread of its own. */
typedef struct {
    GMainContext *context;
    GThread *thread;
    gint quit;
    gint calls;     /* relist callbacks run (atomic) */
    gint destroyed; /* destroy notifies run (atomic) */
} Host;

static gpointer
host_thread(gpointer data)
{
    Host *host = data;

    g_main_context_push_thread_default(host->context);
    while (!g_atomic_int_get(&host->quit))
        g_main_context_iteration(host->context, TRUE);
    g_main_context_pop_thread_default(host->context);
    return NULL;
}

static void
host_start(Host *host)
{
    host->context = g_main_context_new();
    host->thread = g_thread_new("callback-host", host_thread, host);
}

/* Returns once the host thread has finished what it was dispatching. */
static void
host_stop(Host *host)
{
    g_atomic_int_set(&host->quit, 1);
    g_main_context_wakeup(host->context);
    g_thread_join(host->thread);
    g_main_context_unref(host->context);
}

static void
on_relist(const GError *error, gint64 relist_time_ns, gpointer user_data)
{
    Host *host = user_data;

    g_atomic_int_inc(&host->calls);
}

static void
on_destroy(gpointer user_data)
{
    Host *host = user_data;

    g_atomic_int_inc(&host->destroyed);
}

static Fixture *
started_fixture(Host *host)
{
    PlegGenericConfig config;
    Fixture *fx;

    pleg_generic_config_init(&config);
    config.relist_period_usec = G_GINT64_CONSTANT(3600) * G_USEC_PER_SEC;
    fx = fixture_new_full(&config, 0, FALSE);
    fixture_add_pod(fx, "pod1", "s1", "c1", NULL);
    pleg_generic_set_relist_callback(fx->pleg, host->context, on_relist, host, on_destroy);
    pleg_generic_start(fx->pleg);
    return fx;
}

/* Issue 24, point 4: GLib has started the notice on the host thread, the PLEG is freed before
 * the notice takes its lock, then the notice goes on.  Before the fix it locked and read the
 * freed PLEG (ASan: heap-use-after-free). */
START_TEST(test_free_while_notice_dispatched)
{
    Host host = {0};
    g_autoptr(Fixture) fx = NULL;

    host_start(&host);
    fx = started_fixture(&host);
    ck_assert(gate_wait_held());

    /* The callback has not started, so freeing does not wait for it: the notice is held. */
    pleg_generic_free(g_steal_pointer(&fx->pleg));
    ck_assert_int_eq(g_atomic_int_get(&host.destroyed), 1);

    gate_release();
    host_stop(&host);
    ck_assert_int_eq(g_atomic_int_get(&host.calls), 0);
    ck_assert_int_eq(g_atomic_int_get(&host.destroyed), 1);
}
END_TEST

static void
on_relist_new(const GError *error, gint64 relist_time_ns, gpointer user_data)
{
    gint *calls = user_data;

    g_atomic_int_inc(calls);
}

/* A notice of the old callback, held the same way while the callback is replaced, calls
 * neither the old callback nor the new one: it was not dispatched to the callback yet, and
 * the header drops such notices. */
START_TEST(test_new_callback_while_notice_dispatched)
{
    Host host = {0};
    g_autoptr(Fixture) fx = NULL;
    gint new_calls = 0;

    host_start(&host);
    fx = started_fixture(&host);
    ck_assert(gate_wait_held());

    pleg_generic_stop(fx->pleg);
    pleg_generic_set_relist_callback(fx->pleg, host.context, on_relist_new, &new_calls, NULL);
    ck_assert_int_eq(g_atomic_int_get(&host.destroyed), 1);

    gate_release();
    host_stop(&host);
    ck_assert_int_eq(g_atomic_int_get(&host.calls), 0);
    ck_assert_int_eq(g_atomic_int_get(&new_calls), 0);
}
END_TEST

static Suite *
notice_suite(void)
{
    Suite *suite = suite_create("notice");
    TCase *tc = tcase_create("notice");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_free_while_notice_dispatched);
    tcase_add_test(tc, test_new_callback_while_notice_dispatched);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    return run_suite(notice_suite());
}
