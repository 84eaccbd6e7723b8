/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The watchdog's schedule, retry and KEP-6247 records (plugins/watchdog/watchdog-loop.c) under a
 * fake clock: every op is scripted, so timings are exact and the tests take no wall time.
 */
#include <check.h>
#include <errno.h>
#include <pleg/pleg.h>
#include <string.h>

#include "watchdog-loop.h"

#define SEC G_GINT64_CONSTANT(1000000)
#define MS  G_GINT64_CONSTANT(1000)

typedef struct {
    gint64 now;
    gint64 armed; /* -1: disarmed */
    gboolean gate;
    double random;

    /* Scripts: the next results, consumed in order; when empty, healthy and sent (1). */
    GQueue check_script; /* GINT_TO_POINTER(1) ok, GINT_TO_POINTER(2) fail */
    GQueue notify_script; /* GINT_TO_POINTER(r + 1000) */
    int notify_default;

    GString *trace; /* "<ms> check ok|fail; <ms> notify <r>; ..." */
    GPtrArray *records; /* GHashTable: fields + LEVEL */
} Fake;

static gint64
fake_now(gpointer data)
{
    return ((Fake *)data)->now;
}

static void
fake_arm(gpointer data, gint64 ready_usec)
{
    ((Fake *)data)->armed = ready_usec;
}

static gboolean
fake_check(gpointer data, char **ret_checker, GError **error)
{
    Fake *fake = data;
    int step = GPOINTER_TO_INT(g_queue_pop_head(&fake->check_script));

    if (step == 2) {
        g_string_append_printf(fake->trace, "%" G_GINT64_FORMAT " check fail; ", fake->now / MS);
        *ret_checker = g_strdup("syncloop");
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_FAILED, "syncloop stalled for 10m0s");
        return FALSE;
    }
    g_string_append_printf(fake->trace, "%" G_GINT64_FORMAT " check ok; ", fake->now / MS);
    return TRUE;
}

static int
fake_notify(gpointer data)
{
    Fake *fake = data;
    int r = fake->notify_default;

    if (!g_queue_is_empty(&fake->notify_script))
        r = GPOINTER_TO_INT(g_queue_pop_head(&fake->notify_script)) - 1000;
    g_string_append_printf(fake->trace, "%" G_GINT64_FORMAT " notify %d; ", fake->now / MS, r);
    return r;
}

static gboolean
fake_gate(gpointer data)
{
    return ((Fake *)data)->gate;
}

static double
fake_random(gpointer data)
{
    return ((Fake *)data)->random;
}

static void
fake_log(gpointer data, GLogLevelFlags level, const GLogField *fields, gsize n_fields)
{
    Fake *fake = data;
    GHashTable *record = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);

    for (gsize i = 0; i < n_fields; i++) {
        ck_assert_int_lt(fields[i].length, 0);
        g_hash_table_insert(record, g_strdup(fields[i].key), g_strdup(fields[i].value));
    }
    g_hash_table_insert(record, g_strdup("LEVEL"), g_strdup_printf("%d", level));
    g_ptr_array_add(fake->records, record);
}

static const WatchdogOps fake_ops = {
    .now_usec = fake_now,
    .arm = fake_arm,
    .check_health = fake_check,
    .notify = fake_notify,
    .diagnostics_enabled = fake_gate,
    .random = fake_random,
    .log = fake_log,
};

static Fake *
fake_new(gboolean gate)
{
    Fake *fake = g_new0(Fake, 1);

    fake->now = 1000 * SEC;
    fake->armed = -1;
    fake->gate = gate;
    fake->notify_default = 1;
    g_queue_init(&fake->check_script);
    g_queue_init(&fake->notify_script);
    fake->trace = g_string_new(NULL);
    fake->records = g_ptr_array_new_with_free_func((GDestroyNotify)g_hash_table_unref);
    return fake;
}

static void
fake_free(Fake *fake)
{
    g_queue_clear(&fake->check_script);
    g_queue_clear(&fake->notify_script);
    g_string_free(fake->trace, TRUE);
    g_ptr_array_unref(fake->records);
    g_free(fake);
}
G_DEFINE_AUTOPTR_CLEANUP_FUNC(Fake, fake_free)

static void
script_checks(Fake *fake, const char *steps)
{
    for (const char *p = steps; *p; p++)
        g_queue_push_tail(&fake->check_script, GINT_TO_POINTER(*p == 'x' ? 2 : 1));
}

static void
script_notify(Fake *fake, int r)
{
    g_queue_push_tail(&fake->notify_script, GINT_TO_POINTER(r + 1000));
}

/* Fires the timer at its ready times up to @usec after the start of the fake clock. */
static void
run_until(Fake *fake, WatchdogLoop *loop, gint64 usec)
{
    gint64 until = 1000 * SEC + usec;

    while (fake->armed >= 0 && fake->armed <= until) {
        ck_assert_int_ge(fake->armed, fake->now);
        fake->now = fake->armed;
        fake->armed = -1;
        watchdog_loop_dispatch(loop);
    }
    fake->now = until;
}

/* Records with an OPERATION field: the KEP-6247 records. */
static guint
count_records(Fake *fake, const char *field, const char *value)
{
    guint n = 0;

    for (guint i = 0; i < fake->records->len; i++) {
        GHashTable *record = g_ptr_array_index(fake->records, i);

        if (!g_hash_table_contains(record, WATCHDOG_FIELD_OPERATION))
            continue;
        if (!field || g_strcmp0(g_hash_table_lookup(record, field), value) == 0)
            n++;
    }
    return n;
}

static GHashTable *
find_record(Fake *fake, const char *operation, const char *result, guint nth)
{
    for (guint i = 0; i < fake->records->len; i++) {
        GHashTable *record = g_ptr_array_index(fake->records, i);

        if (g_strcmp0(g_hash_table_lookup(record, WATCHDOG_FIELD_OPERATION), operation) == 0 &&
            g_strcmp0(g_hash_table_lookup(record, WATCHDOG_FIELD_RESULT), result) == 0 &&
            nth-- == 0)
            return record;
    }
    return NULL;
}

/* Number of records above debug level. */
static guint
count_visible(Fake *fake)
{
    guint n = 0;

    for (guint i = 0; i < fake->records->len; i++) {
        GHashTable *record = g_ptr_array_index(fake->records, i);
        int level = atoi(g_hash_table_lookup(record, "LEVEL"));

        if (level != G_LOG_LEVEL_DEBUG)
            n++;
    }
    return n;
}

static void
assert_field(GHashTable *record, const char *field, const char *value)
{
    ck_assert_ptr_nonnull(record);
    ck_assert_str_eq(g_hash_table_lookup(record, field) ?: "(none)", value);
}

/* ---- configuration ---- */

START_TEST(test_gate_disabled_by_default)
{
    g_autoptr(PlegFeatureGates) gates = pleg_feature_gates_new();
    PlegFeatureStage stage;
    gboolean def = TRUE;

    ck_assert(pleg_feature_gates_known(gates, PLEG_FEATURE_KUBELET_WATCHDOG_DIAGNOSTICS, &stage,
                                       &def));
    ck_assert(!def);
    ck_assert_int_eq(stage, PLEG_FEATURE_ALPHA);
    ck_assert(!pleg_feature_gates_enabled(gates, PLEG_FEATURE_KUBELET_WATCHDOG_DIAGNOSTICS));
    /* The heartbeat itself is on by default. */
    ck_assert(pleg_feature_gates_enabled(gates, PLEG_FEATURE_SYSTEMD_WATCHDOG));
}
END_TEST

START_TEST(test_timeout_to_interval)
{
    g_autoptr(GError) error = NULL;
    gint64 interval = 42;

    ck_assert_int_eq(watchdog_timeout_to_interval(0, 0, &interval, &error), 0);
    ck_assert_ptr_null(error);
    ck_assert_int_eq(interval, 42);

    ck_assert_int_eq(watchdog_timeout_to_interval(1, 2 * SEC, &interval, &error), 1);
    ck_assert_int_eq(interval, SEC);
    ck_assert_int_eq(watchdog_timeout_to_interval(1, SEC + 2, &interval, &error), 1);
    ck_assert_int_eq(interval, SEC / 2 + 1);

    interval = 42;
    ck_assert_int_eq(watchdog_timeout_to_interval(1, SEC, &interval, &error), -1);
    ck_assert_int_eq(interval, 42);
    ck_assert(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT));
    ck_assert_str_eq(error->message, "systemd watchdog timeout WATCHDOG_USEC=1000000 (1s) is too "
                                     "small: it must be more than 1s (WatchdogSec=)");
    g_clear_error(&error);

    ck_assert_int_eq(watchdog_timeout_to_interval(1, 500 * MS, &interval, &error), -1);
    ck_assert_ptr_nonnull(strstr(error->message, "WATCHDOG_USEC=500000 (500ms) is too small"));
    g_clear_error(&error);

    ck_assert_int_eq(watchdog_timeout_to_interval(-EINVAL, 0, &interval, &error), -1);
    ck_assert_ptr_nonnull(strstr(error->message, "invalid systemd watchdog environment"));
    ck_assert_int_eq(interval, 42);
}
END_TEST

START_TEST(test_format_duration)
{
    static const gint64 values[] = {
        0, 1, 999, 1000, 1500, 500 * MS, 999999, SEC, SEC + 1, 1500 * MS, 30 * SEC, 60 * SEC,
        90 * SEC, 3600 * SEC, 3661 * SEC + 250 * MS,
    };

    for (gsize i = 0; i < G_N_ELEMENTS(values); i++) {
        g_autofree char *ours = watchdog_format_duration(values[i]);
        g_autofree char *pleg = pleg_duration_format(values[i]);

        ck_assert_str_eq(ours, pleg);
    }
}
END_TEST

/* ---- heartbeat ---- */

START_TEST(test_success_schedule)
{
    for (int gate = 0; gate <= 1; gate++) {
        g_autoptr(Fake) fake = fake_new(gate);
        g_autoptr(WatchdogLoop) loop = watchdog_loop_new(&fake_ops, fake, SEC);
        WatchdogStats stats;

        watchdog_loop_start(loop);
        /* The first tick is due at start. */
        ck_assert_int_eq(fake->armed, fake->now);
        run_until(fake, loop, 3500 * MS);
        ck_assert_str_eq(fake->trace->str,
                         "1000000 check ok; 1000000 notify 1; 1001000 check ok; 1001000 notify 1; "
                         "1002000 check ok; 1002000 notify 1; 1003000 check ok; 1003000 notify 1; ");
        watchdog_loop_get_stats(loop, &stats);
        ck_assert_uint_eq(stats.heartbeats, 4);
        ck_assert_uint_eq(stats.records, 0);
        /* Successful heartbeats log at debug only. */
        ck_assert_uint_eq(count_visible(fake), 0);
        ck_assert_uint_eq(fake->records->len, 4);

        watchdog_loop_stop(loop);
        ck_assert_int_eq(fake->armed, -1);
        watchdog_loop_stop(loop);
    }
}
END_TEST

/* A tick that runs late does not pull the schedule: ticks stay on the slots of the start. */
START_TEST(test_fixed_rate)
{
    g_autoptr(Fake) fake = fake_new(FALSE);
    g_autoptr(WatchdogLoop) loop = watchdog_loop_new(&fake_ops, fake, SEC);

    watchdog_loop_start(loop);
    run_until(fake, loop, 0);
    ck_assert_int_eq(fake->armed, 1001 * SEC);
    /* The timer fires 300 ms late. */
    fake->now = 1001 * SEC + 300 * MS;
    fake->armed = -1;
    watchdog_loop_dispatch(loop);
    ck_assert_int_eq(fake->armed, 1002 * SEC);
    /* ... or 2.5 intervals late: the missed slots are skipped, not run in a burst. */
    fake->now = 1004 * SEC + 500 * MS;
    fake->armed = -1;
    watchdog_loop_dispatch(loop);
    ck_assert_int_eq(fake->armed, 1005 * SEC);
}
END_TEST

START_TEST(test_restart)
{
    g_autoptr(Fake) fake = fake_new(FALSE);
    g_autoptr(WatchdogLoop) loop = watchdog_loop_new(&fake_ops, fake, SEC);

    watchdog_loop_start(loop);
    run_until(fake, loop, 1500 * MS);
    watchdog_loop_stop(loop);
    /* A stray dispatch after stop does nothing. */
    watchdog_loop_dispatch(loop);
    fake->now += 10 * SEC;
    watchdog_loop_start(loop);
    ck_assert_int_eq(fake->armed, fake->now);
    g_string_truncate(fake->trace, 0);
    run_until(fake, loop, 11500 * MS);
    ck_assert_str_eq(fake->trace->str, "1011500 check ok; 1011500 notify 1; ");
}
END_TEST

/* ---- health checker failure ---- */

START_TEST(test_check_error_skips_notification)
{
    for (int gate = 0; gate <= 1; gate++) {
        g_autoptr(Fake) fake = fake_new(gate);
        g_autoptr(WatchdogLoop) loop = watchdog_loop_new(&fake_ops, fake, SEC);
        WatchdogStats stats;
        GHashTable *record;

        script_checks(fake, "oxo");
        watchdog_loop_start(loop);
        run_until(fake, loop, 2500 * MS);
        ck_assert_str_eq(fake->trace->str,
                         "1000000 check ok; 1000000 notify 1; 1001000 check fail; "
                         "1002000 check ok; 1002000 notify 1; ");
        watchdog_loop_get_stats(loop, &stats);
        ck_assert_uint_eq(stats.check_failures, 1);
        ck_assert_uint_eq(stats.heartbeats, 2);

        if (!gate) {
            ck_assert_uint_eq(count_records(fake, NULL, NULL), 0);
            ck_assert_uint_eq(count_visible(fake), 0);
            continue;
        }
        ck_assert_uint_eq(count_records(fake, NULL, NULL), 1);
        record = find_record(fake, WATCHDOG_OPERATION_HEALTH_CHECK, WATCHDOG_RESULT_ERROR, 0);
        assert_field(record, WATCHDOG_FIELD_CHECKER, "syncloop");
        assert_field(record, WATCHDOG_FIELD_ERROR, "syncloop stalled for 10m0s");
        assert_field(record, WATCHDOG_FIELD_WATCHDOG_INTERVAL, "1s");
        assert_field(record, "LEVEL", "32"); /* G_LOG_LEVEL_MESSAGE: default-visible */
        ck_assert(!g_hash_table_contains(record, WATCHDOG_FIELD_ATTEMPT));
        ck_assert(!g_hash_table_contains(record, WATCHDOG_FIELD_SUPPRESSED));
        assert_field(record, "MESSAGE",
                     "Watchdog health checker failed; skipping this notification: "
                     "operation=watchdog_health_check checker=syncloop watchdog_interval=1s "
                     "result=error error=\"syncloop stalled for 10m0s\"");
    }
}
END_TEST

/* ---- notification failure ---- */

START_TEST(test_notify_error_then_retry_succeeds)
{
    for (int gate = 0; gate <= 1; gate++) {
        g_autoptr(Fake) fake = fake_new(gate);
        g_autoptr(WatchdogLoop) loop = watchdog_loop_new(&fake_ops, fake, SEC);
        WatchdogStats stats;
        GHashTable *record;

        fake->random = 0.5;
        script_notify(fake, -ECONNREFUSED);
        watchdog_loop_start(loop);
        run_until(fake, loop, 2500 * MS);
        /* Retry after 1 s + 0.5 * 10 % jitter; the tick due at 1 s falls inside the retry and is
         * not run; the schedule goes on at 2 s. */
        ck_assert_str_eq(fake->trace->str,
                         "1000000 check ok; 1000000 notify -111; 1001050 notify 1; "
                         "1002000 check ok; 1002000 notify 1; ");
        watchdog_loop_get_stats(loop, &stats);
        ck_assert_uint_eq(stats.notify_attempts, 3);
        ck_assert_uint_eq(stats.retries, 1);
        ck_assert_uint_eq(stats.heartbeats, 2);
        ck_assert_uint_eq(stats.exhausted, 0);

        if (!gate) {
            ck_assert_uint_eq(count_records(fake, NULL, NULL), 0);
            ck_assert_uint_eq(count_visible(fake), 0);
            continue;
        }
        ck_assert_uint_eq(count_records(fake, NULL, NULL), 1);
        record = find_record(fake, WATCHDOG_OPERATION_NOTIFY, WATCHDOG_RESULT_ERROR, 0);
        assert_field(record, WATCHDOG_FIELD_ATTEMPT, "1");
        assert_field(record, WATCHDOG_FIELD_ERROR, g_strerror(ECONNREFUSED));
        assert_field(record, WATCHDOG_FIELD_WATCHDOG_INTERVAL, "1s");
        assert_field(record, "LEVEL", "32");
        ck_assert(!g_hash_table_contains(record, WATCHDOG_FIELD_CHECKER));
        ck_assert_ptr_null(find_record(fake, WATCHDOG_OPERATION_NOTIFY, WATCHDOG_RESULT_EXHAUSTED, 0));
    }
}
END_TEST

START_TEST(test_retry_count_and_backoff)
{
    static const double randoms[] = {0.0, 0.999999};
    static const char *const traces[] = {
        "1000000 check ok; 1000000 notify -2; 1001000 notify -2; "
        "1002000 check ok; 1002000 notify 1; ",
        "1000000 check ok; 1000000 notify -2; 1001099 notify -2; "
        "1002000 check ok; 1002000 notify 1; ",
    };

    for (gsize i = 0; i < G_N_ELEMENTS(randoms); i++) {
        g_autoptr(Fake) fake = fake_new(FALSE);
        g_autoptr(WatchdogLoop) loop = watchdog_loop_new(&fake_ops, fake, SEC);
        WatchdogStats stats;

        fake->random = randoms[i];
        script_notify(fake, -ENOENT);
        script_notify(fake, -ENOENT);
        watchdog_loop_start(loop);
        /* 2 steps: two attempts, one pause of 1 s to 1.1 s, then give up until the next tick. */
        run_until(fake, loop, 2500 * MS);
        ck_assert_str_eq(fake->trace->str, traces[i]);
        watchdog_loop_get_stats(loop, &stats);
        ck_assert_uint_eq(stats.notify_attempts, 3);
        ck_assert_uint_eq(stats.retries, 1);
        ck_assert_uint_eq(stats.exhausted, 1);
    }
}
END_TEST

/* With a timeout of 10 s (interval 5 s) the failed notification still ends on time and the
 * schedule is untouched. */
START_TEST(test_retry_long_interval)
{
    g_autoptr(Fake) fake = fake_new(FALSE);
    g_autoptr(WatchdogLoop) loop = watchdog_loop_new(&fake_ops, fake, 5 * SEC);

    script_notify(fake, -EAGAIN);
    script_notify(fake, -EAGAIN);
    watchdog_loop_start(loop);
    run_until(fake, loop, 5500 * MS);
    ck_assert_str_eq(fake->trace->str, "1000000 check ok; 1000000 notify -11; 1001000 notify -11; "
                                       "1005000 check ok; 1005000 notify 1; ");
}
END_TEST

START_TEST(test_exhausted_summary_once)
{
    g_autoptr(Fake) fake = fake_new(TRUE);
    g_autoptr(WatchdogLoop) loop = watchdog_loop_new(&fake_ops, fake, SEC);
    GHashTable *record;

    script_notify(fake, -ECONNREFUSED);
    script_notify(fake, -ENOENT);
    watchdog_loop_start(loop);
    run_until(fake, loop, 2500 * MS);

    ck_assert_uint_eq(count_records(fake, WATCHDOG_FIELD_RESULT, WATCHDOG_RESULT_EXHAUSTED), 1);
    ck_assert_uint_eq(count_records(fake, WATCHDOG_FIELD_RESULT, WATCHDOG_RESULT_ERROR), 2);
    assert_field(find_record(fake, WATCHDOG_OPERATION_NOTIFY, WATCHDOG_RESULT_ERROR, 0),
                 WATCHDOG_FIELD_ATTEMPT, "1");
    record = find_record(fake, WATCHDOG_OPERATION_NOTIFY, WATCHDOG_RESULT_ERROR, 1);
    assert_field(record, WATCHDOG_FIELD_ATTEMPT, "2");
    assert_field(record, WATCHDOG_FIELD_ERROR, g_strerror(ENOENT));

    record = find_record(fake, WATCHDOG_OPERATION_NOTIFY, WATCHDOG_RESULT_EXHAUSTED, 0);
    assert_field(record, WATCHDOG_FIELD_ATTEMPT, "2");
    assert_field(record, WATCHDOG_FIELD_ERROR, g_strerror(ENOENT));
    assert_field(record, WATCHDOG_FIELD_WATCHDOG_INTERVAL, "1s");
    assert_field(record, "LEVEL", "32");
    /* The summary comes right after the last attempt's record. */
    for (guint i = 1; i < fake->records->len; i++) {
        if (g_ptr_array_index(fake->records, i) == record)
            ck_assert_ptr_eq(g_ptr_array_index(fake->records, i - 1),
                             find_record(fake, WATCHDOG_OPERATION_NOTIFY, WATCHDOG_RESULT_ERROR, 1));
    }
}
END_TEST

/* sd_notify() returning 0: no retry, said once however many ticks, and again only after a
 * successful notification. */
START_TEST(test_unsupported_terminal)
{
    for (int gate = 0; gate <= 1; gate++) {
        g_autoptr(Fake) fake = fake_new(gate);
        g_autoptr(WatchdogLoop) loop = watchdog_loop_new(&fake_ops, fake, SEC);
        WatchdogStats stats;

        fake->notify_default = 0;
        watchdog_loop_start(loop);
        run_until(fake, loop, 4500 * MS);
        ck_assert_str_eq(fake->trace->str,
                         "1000000 check ok; 1000000 notify 0; 1001000 check ok; 1001000 notify 0; "
                         "1002000 check ok; 1002000 notify 0; 1003000 check ok; 1003000 notify 0; "
                         "1004000 check ok; 1004000 notify 0; ");
        watchdog_loop_get_stats(loop, &stats);
        ck_assert_uint_eq(stats.retries, 0);
        ck_assert_uint_eq(stats.unsupported, 5);
        ck_assert_uint_eq(count_records(fake, NULL, NULL), 0);
        ck_assert_uint_eq(count_visible(fake), 1);

        fake->notify_default = 1;
        run_until(fake, loop, 5500 * MS);
        fake->notify_default = 0;
        run_until(fake, loop, 7500 * MS);
        ck_assert_uint_eq(count_visible(fake), 2);
        ck_assert_uint_eq(count_records(fake, NULL, NULL), 0);
    }
}
END_TEST

/* ---- the gate ---- */

/* One fault script, gate off then on: same calls at the same times; only the records differ. */
static void
run_fault_script(Fake *fake)
{
    g_autoptr(WatchdogLoop) loop = watchdog_loop_new(&fake_ops, fake, SEC);

    fake->random = 0.25;
    script_checks(fake, "ooxoxxoooo");
    script_notify(fake, 1);
    script_notify(fake, -ECONNREFUSED); /* at 1 s, retried at 2.025 s: sent */
    script_notify(fake, 1);
    script_notify(fake, -EPIPE); /* at 4 s, retried at 5.025 s: exhausted */
    script_notify(fake, -EPIPE);
    script_notify(fake, 0); /* at 8 s: not supported */
    watchdog_loop_start(loop);
    run_until(fake, loop, 12 * SEC);
}

START_TEST(test_gate_same_control_flow)
{
    g_autoptr(Fake) off = fake_new(FALSE);
    g_autoptr(Fake) on = fake_new(TRUE);

    run_fault_script(off);
    run_fault_script(on);
    ck_assert_str_eq(off->trace->str, on->trace->str);
    ck_assert_int_eq(off->armed, on->armed);

    ck_assert_uint_eq(count_records(off, NULL, NULL), 0);
    /* Off: only the existing "not supported" line is default-visible. */
    ck_assert_uint_eq(count_visible(off), 1);

    /* On: the three KEP-6247 paths. */
    ck_assert_uint_eq(count_records(on, WATCHDOG_FIELD_OPERATION,
                                    WATCHDOG_OPERATION_HEALTH_CHECK),
                      1 + 0 /* the second and third failures are rate-limited */);
    ck_assert_uint_eq(count_records(on, WATCHDOG_FIELD_RESULT, WATCHDOG_RESULT_ERROR), 1 + 2);
    ck_assert_uint_eq(count_records(on, WATCHDOG_FIELD_RESULT, WATCHDOG_RESULT_EXHAUSTED), 1);
    ck_assert_uint_eq(count_visible(on), count_visible(off) + 4);
}
END_TEST

/* Off, on, off, on within one rate-limit window: every "on" logs the first failure again. */
START_TEST(test_gate_toggle_no_leftover)
{
    g_autoptr(Fake) fake = fake_new(FALSE);
    g_autoptr(WatchdogLoop) loop = watchdog_loop_new(&fake_ops, fake, SEC);
    static const gboolean phases[] = {FALSE, TRUE, FALSE, TRUE};
    guint expected = 0;

    fake->notify_default = -EIO;
    script_checks(fake, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
    watchdog_loop_start(loop);
    for (gsize i = 0; i < G_N_ELEMENTS(phases); i++) {
        fake->gate = phases[i];
        run_until(fake, loop, (gint64)(i + 1) * 3 * SEC - 500 * MS);
        if (phases[i])
            expected++;
        ck_assert_uint_eq(count_records(fake, NULL, NULL), expected);
    }
    /* Each "on" phase started afresh: no SUPPRESSED count carried over. */
    for (guint i = 0; i < fake->records->len; i++)
        ck_assert(!g_hash_table_contains(g_ptr_array_index(fake->records, i),
                                         WATCHDOG_FIELD_SUPPRESSED));
}
END_TEST

/* ---- rate limit ---- */

START_TEST(test_rate_limit)
{
    g_autoptr(Fake) fake = fake_new(TRUE);
    g_autoptr(WatchdogLoop) loop = watchdog_loop_new(&fake_ops, fake, SEC);
    WatchdogStats stats;
    GHashTable *record;

    /* A checker failing at every tick for 70 s: one record in the first 60 s window, then one
     * saying how many were suppressed. */
    for (int i = 0; i < 80; i++)
        script_checks(fake, "x");
    watchdog_loop_start(loop);
    run_until(fake, loop, 59500 * MS);
    ck_assert_uint_eq(count_records(fake, NULL, NULL), 1);
    run_until(fake, loop, 70500 * MS);
    ck_assert_uint_eq(count_records(fake, NULL, NULL), 2);
    record = find_record(fake, WATCHDOG_OPERATION_HEALTH_CHECK, WATCHDOG_RESULT_ERROR, 1);
    assert_field(record, WATCHDOG_FIELD_SUPPRESSED, "59");
    ck_assert_ptr_nonnull(strstr(g_hash_table_lookup(record, "MESSAGE"), " suppressed=59"));
    watchdog_loop_get_stats(loop, &stats);
    ck_assert_uint_eq(stats.check_failures, 71);
    ck_assert_uint_eq(stats.records, 2);
    ck_assert_uint_eq(stats.suppressed, 69);

    /* A different kind (here notification errors) has its own window. */
    g_queue_clear(&fake->check_script);
    fake->notify_default = -ECONNREFUSED;
    run_until(fake, loop, 75500 * MS);
    ck_assert_uint_eq(count_records(fake, WATCHDOG_FIELD_OPERATION, WATCHDOG_OPERATION_NOTIFY),
                      3 /* attempt 1, attempt 2, summary: each kept once */);
    /* Ticks at 71, 73 and 75 s, each retried once (at 72, 74, 76 s): the records never change
     * the schedule or the retries. */
    watchdog_loop_get_stats(loop, &stats);
    ck_assert_uint_eq(stats.retries, 3);
    ck_assert_uint_eq(stats.exhausted, 2);
}
END_TEST

/* A second checker (another name) is a different kind. */
START_TEST(test_rate_limit_per_checker)
{
    g_autoptr(Fake) fake = fake_new(TRUE);
    g_autoptr(WatchdogLoop) loop = watchdog_loop_new(&fake_ops, fake, SEC);

    script_checks(fake, "xxx");
    watchdog_loop_start(loop);
    run_until(fake, loop, 2500 * MS);
    ck_assert_uint_eq(count_records(fake, WATCHDOG_FIELD_CHECKER, "syncloop"), 1);
}
END_TEST

static Suite *
watchdog_loop_suite(void)
{
    Suite *s = suite_create("watchdog-loop");
    TCase *tc = tcase_create("loop");

    tcase_add_test(tc, test_gate_disabled_by_default);
    tcase_add_test(tc, test_timeout_to_interval);
    tcase_add_test(tc, test_format_duration);
    tcase_add_test(tc, test_success_schedule);
    tcase_add_test(tc, test_fixed_rate);
    tcase_add_test(tc, test_restart);
    tcase_add_test(tc, test_check_error_skips_notification);
    tcase_add_test(tc, test_notify_error_then_retry_succeeds);
    tcase_add_test(tc, test_retry_count_and_backoff);
    tcase_add_test(tc, test_retry_long_interval);
    tcase_add_test(tc, test_exhausted_summary_once);
    tcase_add_test(tc, test_unsupported_terminal);
    tcase_add_test(tc, test_gate_same_control_flow);
    tcase_add_test(tc, test_gate_toggle_no_leftover);
    tcase_add_test(tc, test_rate_limit);
    tcase_add_test(tc, test_rate_limit_per_checker);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *runner = srunner_create(watchdog_loop_suite());
    int failed;

    srunner_run_all(runner, CK_NORMAL);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? 0 : 1;
}
