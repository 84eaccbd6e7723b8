/* SPDX-License-Identifier: Apache-2.0 */
/* pleg_timer_source_new() (lib/common/pleg-timer-source.h): disarmed until armed, dispatched once
 * at its ready time and never before it, disarmed before its callback runs. */
#include <check.h>
#include <glib.h>

#include "pleg-timer-source.h"

#define DEADLINE_USEC (10 * G_USEC_PER_SEC)

typedef struct {
    GSource *source;
    guint calls;
    gint64 armed_for_usec;
    gint64 ready_in_callback;
    gint64 early_usec; /* > 0: dispatched this much before its ready time */
    gint64 rearm_usec; /* > 0: the callback arms the source again this far ahead, once */
    gboolean remove;
} Timer;

static gboolean
on_timer(gpointer data)
{
    Timer *t = data;
    gint64 now = g_get_monotonic_time();

    t->calls++;
    t->ready_in_callback = g_source_get_ready_time(t->source);
    if (now < t->armed_for_usec)
        t->early_usec = t->armed_for_usec - now;
    if (t->rearm_usec > 0) {
        t->armed_for_usec = now + t->rearm_usec;
        g_source_set_ready_time(t->source, t->armed_for_usec);
        t->rearm_usec = 0;
    }
    return t->remove ? G_SOURCE_REMOVE : G_SOURCE_CONTINUE;
}

static gboolean
on_deadline(gpointer data)
{
    *(gboolean *)data = TRUE;
    return G_SOURCE_REMOVE;
}

/* Iterates @context, blocking, until @t has run @calls times or the deadline passes. */
static void
wait_calls(GMainContext *context, Timer *t, guint calls)
{
    g_autoptr(GSource) guard = g_timeout_source_new(DEADLINE_USEC / 1000);
    gboolean expired = FALSE;

    g_source_set_callback(guard, on_deadline, &expired, NULL);
    g_source_attach(guard, context);
    while (t->calls < calls && !expired)
        g_main_context_iteration(context, TRUE);
    g_source_destroy(guard);
    ck_assert_msg(!expired, "timer ran %u times, waited for %u", t->calls, calls);
}

static Timer *
timer_new(GMainContext *context)
{
    Timer *t = g_new0(Timer, 1);

    t->source = pleg_timer_source_new();
    g_source_set_callback(t->source, on_timer, t, NULL);
    g_source_attach(t->source, context);
    return t;
}

static void
timer_free(Timer *t)
{
    g_source_destroy(t->source);
    g_source_unref(t->source);
    g_free(t);
}

START_TEST(test_disarmed_until_armed)
{
    g_autoptr(GMainContext) context = g_main_context_new();
    Timer *t = timer_new(context);

    ck_assert_int_eq(g_source_get_ready_time(t->source), -1);
    ck_assert(!g_main_context_pending(context));
    while (g_main_context_iteration(context, FALSE))
        ;
    ck_assert_uint_eq(t->calls, 0);
    timer_free(t);
}
END_TEST

START_TEST(test_once_at_ready_time)
{
    g_autoptr(GMainContext) context = g_main_context_new();
    Timer *t = timer_new(context);

    t->armed_for_usec = g_get_monotonic_time() + 20 * 1000;
    g_source_set_ready_time(t->source, t->armed_for_usec);
    wait_calls(context, t, 1);
    ck_assert_int_eq(t->early_usec, 0);
    /* Disarmed before the callback ran, and it stays so. */
    ck_assert_int_eq(t->ready_in_callback, -1);
    ck_assert_int_eq(g_source_get_ready_time(t->source), -1);
    while (g_main_context_iteration(context, FALSE))
        ;
    ck_assert_uint_eq(t->calls, 1);
    ck_assert(!g_source_is_destroyed(t->source));
    timer_free(t);
}
END_TEST

/* The callback arms the next deadline itself, as plegd's idle timer and the watchdog do. */
START_TEST(test_rearm_from_callback)
{
    g_autoptr(GMainContext) context = g_main_context_new();
    Timer *t = timer_new(context);

    t->rearm_usec = 10 * 1000;
    g_source_set_ready_time(t->source, 0);
    wait_calls(context, t, 2);
    ck_assert_int_eq(t->early_usec, 0);
    ck_assert_int_eq(g_source_get_ready_time(t->source), -1);
    timer_free(t);
}
END_TEST

/* Moving an armed deadline later: the earlier one does not fire. */
START_TEST(test_move_later)
{
    g_autoptr(GMainContext) context = g_main_context_new();
    Timer *t = timer_new(context);

    g_source_set_ready_time(t->source, g_get_monotonic_time() + 5 * 1000);
    t->armed_for_usec = g_get_monotonic_time() + 30 * 1000;
    g_source_set_ready_time(t->source, t->armed_for_usec);
    wait_calls(context, t, 1);
    ck_assert_int_eq(t->early_usec, 0);
    timer_free(t);
}
END_TEST

START_TEST(test_remove_destroys)
{
    g_autoptr(GMainContext) context = g_main_context_new();
    Timer *t = timer_new(context);

    t->remove = TRUE;
    g_source_set_ready_time(t->source, 0);
    wait_calls(context, t, 1);
    ck_assert(g_source_is_destroyed(t->source));
    timer_free(t);
}
END_TEST

int
main(void)
{
    Suite *suite = suite_create("timer-source");
    TCase *tc = tcase_create("timer-source");
    SRunner *runner;
    int failed;

    tcase_add_test(tc, test_disarmed_until_armed);
    tcase_add_test(tc, test_once_at_ready_time);
    tcase_add_test(tc, test_rearm_from_callback);
    tcase_add_test(tc, test_move_later);
    tcase_add_test(tc, test_remove_destroys);
    suite_add_tcase(suite, tc);
    runner = srunner_create(suite);
    srunner_run_all(runner, CK_ENV);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
