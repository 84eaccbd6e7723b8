/* SPDX-License-Identifier: Apache-2.0 */
/* The watcher's reconnect policy and log rate limit (plugins/evented/backoff.h), with a fake
 * clock (times passed in) and seeded random generators. */
#include <check.h>
#include <glib.h>
#include <stdlib.h>

#include "backoff.h"

#define SEC ((gint64)G_USEC_PER_SEC)
#define MS  ((gint64)1000)

static void
backoff_new(EventedBackoff *backoff, double jitter)
{
    EventedBackoffConfig config;

    evented_backoff_config_init(&config);
    config.jitter = jitter;
    evented_backoff_init(backoff, &config);
}

/* Without jitter: 0 (immediate), then 0.5 s doubling up to the 60 s cap. */
START_TEST(test_sequence_exact)
{
    static const gint64 expected[] = {0,        500 * MS, 1 * SEC,  2 * SEC,  4 * SEC, 8 * SEC,
                                      16 * SEC, 32 * SEC, 60 * SEC, 60 * SEC, 60 * SEC};
    EventedBackoff backoff;
    gint64 now = 1000 * SEC;

    backoff_new(&backoff, 0.0);
    for (guint i = 0; i < G_N_ELEMENTS(expected); i++) {
        gint64 delay = evented_backoff_failure(&backoff, now, -1, NULL);

        ck_assert_msg(delay == expected[i], "failure %u: delay %" G_GINT64_FORMAT, i, delay);
        now += delay + 10 * MS;
    }
}
END_TEST

/* With the production jitter every delay lies in [0.8 d, d]: never above the cap. */
START_TEST(test_sequence_jitter)
{
    g_autoptr(GRand) rand = g_rand_new_with_seed(42);
    EventedBackoff backoff;
    gint64 now = 0;
    gboolean below_nominal = FALSE;

    backoff_new(&backoff, EVENTED_BACKOFF_JITTER);
    ck_assert_int_eq(evented_backoff_failure(&backoff, now, -1, rand), 0);
    for (guint i = 1; i < 200; i++) {
        gint64 nominal = MIN((gint64)500 * MS << MIN(i - 1, 20), 60 * SEC);
        gint64 delay = evented_backoff_failure(&backoff, now, -1, rand);

        ck_assert_int_le(delay, nominal);
        ck_assert_int_ge(delay, (gint64)(0.8 * (double)nominal));
        ck_assert_int_le(delay, EVENTED_BACKOFF_MAX_USEC);
        if (delay < nominal)
            below_nominal = TRUE;
        now += delay;
    }
    ck_assert(below_nominal);
}
END_TEST

/* The same seed gives the same delays; another seed gives others. */
START_TEST(test_jitter_seeded)
{
    g_autoptr(GRand) a = g_rand_new_with_seed(7);
    g_autoptr(GRand) b = g_rand_new_with_seed(7);
    g_autoptr(GRand) c = g_rand_new_with_seed(8);
    EventedBackoff ba, bb, bc;
    gboolean differ = FALSE;

    backoff_new(&ba, EVENTED_BACKOFF_JITTER);
    backoff_new(&bb, EVENTED_BACKOFF_JITTER);
    backoff_new(&bc, EVENTED_BACKOFF_JITTER);
    for (guint i = 0; i < 20; i++) {
        gint64 da = evented_backoff_failure(&ba, 0, -1, a);
        gint64 db = evented_backoff_failure(&bb, 0, -1, b);
        gint64 dc = evented_backoff_failure(&bc, 0, -1, c);

        ck_assert_int_eq(da, db);
        if (da != dc)
            differ = TRUE;
    }
    ck_assert(differ);
}
END_TEST

/* The count resets only after 60 s of healthy connection; a flapping runtime keeps backing
 * off. */
START_TEST(test_reset_after_healthy)
{
    EventedBackoff backoff;
    gint64 now = 5000 * SEC;

    backoff_new(&backoff, 0.0);
    ck_assert_int_eq(evented_backoff_failure(&backoff, now, -1, NULL), 0);
    ck_assert_int_eq(evented_backoff_failure(&backoff, now, -1, NULL), 500 * MS);
    ck_assert_int_eq(evented_backoff_failure(&backoff, now, -1, NULL), 1 * SEC);

    /* Healthy for 59.999 s: no reset. */
    now += 100 * SEC;
    ck_assert_int_eq(evented_backoff_failure(&backoff, now, now - 60 * SEC + 1, NULL), 2 * SEC);
    /* Never healthy, long ago: no reset either. */
    now += 1000 * SEC;
    ck_assert_int_eq(evented_backoff_failure(&backoff, now, -1, NULL), 4 * SEC);
    /* Healthy for exactly 60 s: reset, and the first reconnect is immediate again. */
    ck_assert_int_eq(evented_backoff_failure(&backoff, now, now - 60 * SEC, NULL), 0);
    ck_assert_int_eq(evented_backoff_get_failures(&backoff), 1);
    ck_assert_int_eq(evented_backoff_failure(&backoff, now, -1, NULL), 500 * MS);

    /* Flapping: healthy for 30 s each time, the delays keep growing to the cap. */
    for (guint i = 0; i < 20; i++) {
        now += 30 * SEC;
        evented_backoff_failure(&backoff, now, now - 30 * SEC, NULL);
    }
    ck_assert_int_eq(evented_backoff_failure(&backoff, now, now - 30 * SEC, NULL), 60 * SEC);
}
END_TEST

/* UNIMPLEMENTED waits the cap, also the first time, and afterwards an ordinary failure still
 * backs off rather than retrying at once. */
START_TEST(test_unimplemented)
{
    g_autoptr(GRand) rand = g_rand_new_with_seed(1);
    EventedBackoff backoff;

    backoff_new(&backoff, 0.0);
    ck_assert_int_eq(evented_backoff_unimplemented(&backoff, NULL), 60 * SEC);
    ck_assert_int_eq(evented_backoff_unimplemented(&backoff, NULL), 60 * SEC);
    ck_assert_int_gt(evented_backoff_failure(&backoff, 0, -1, NULL), 0);

    backoff_new(&backoff, EVENTED_BACKOFF_JITTER);
    for (guint i = 0; i < 100; i++) {
        gint64 delay = evented_backoff_unimplemented(&backoff, rand);

        ck_assert_int_le(delay, 60 * SEC);
        ck_assert_int_ge(delay, 48 * SEC);
    }
}
END_TEST

/* Forever: a very long run of failures stays at the cap without overflowing. */
START_TEST(test_forever)
{
    EventedBackoff backoff;

    backoff_new(&backoff, 0.0);
    for (guint i = 0; i < 100000; i++)
        evented_backoff_failure(&backoff, 0, -1, NULL);
    ck_assert_int_eq(evented_backoff_failure(&backoff, 0, -1, NULL), 60 * SEC);
    backoff.failures = G_MAXUINT;
    ck_assert_int_eq(evented_backoff_failure(&backoff, 0, -1, NULL), 60 * SEC);
    ck_assert_int_eq(evented_backoff_get_failures(&backoff), G_MAXUINT);
}
END_TEST

/* First record logged, then at most one per minute carrying the suppressed count. */
START_TEST(test_rate_limit)
{
    EventedRateLimit limit;
    guint64 suppressed = 99;
    gint64 now = 10 * SEC;

    evented_rate_limit_init(&limit, 60 * SEC);
    ck_assert(evented_rate_limit_check(&limit, now, &suppressed));
    ck_assert_int_eq(suppressed, 0);

    for (guint i = 0; i < 5; i++) {
        now += 10 * SEC;
        suppressed = 99;
        ck_assert(!evented_rate_limit_check(&limit, now, &suppressed));
        ck_assert_int_eq(suppressed, 99); /* untouched when suppressed */
    }
    now = 10 * SEC + 60 * SEC - 1;
    ck_assert(!evented_rate_limit_check(&limit, now, &suppressed));

    now = 10 * SEC + 60 * SEC;
    ck_assert(evented_rate_limit_check(&limit, now, &suppressed));
    ck_assert_int_eq(suppressed, 6);

    /* A quiet hour, then one occurrence: logged at once with nothing suppressed. */
    now += 3600 * SEC;
    ck_assert(evented_rate_limit_check(&limit, now, &suppressed));
    ck_assert_int_eq(suppressed, 0);
}
END_TEST

static Suite *
backoff_suite(void)
{
    Suite *suite = suite_create("evented-backoff");
    TCase *tc = tcase_create("backoff");

    tcase_add_test(tc, test_sequence_exact);
    tcase_add_test(tc, test_sequence_jitter);
    tcase_add_test(tc, test_jitter_seeded);
    tcase_add_test(tc, test_reset_after_healthy);
    tcase_add_test(tc, test_unimplemented);
    tcase_add_test(tc, test_forever);
    tcase_add_test(tc, test_rate_limit);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    SRunner *runner = srunner_create(backoff_suite());
    int failed;

    srunner_run_all(runner, CK_ENV);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
