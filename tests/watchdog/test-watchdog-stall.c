/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Issue 14 through the plugin module, the fake host and a real NOTIFY_SOCKET: with
 * WatchdogStallDiagnostics on, a health checker or an sd_notify() call that has not returned
 * after half the notification interval gets one default-visible record before systemd's
 * deadline, and one more when it returns; nothing else changes.  With the gate off no monitor
 * thread exists and no record is written.
 *
 * The fake host runs the plugin's context on the test thread, so a blocked checker blocks the
 * test thread: the checkers below wait on conditions with deadlines (they are the hang under
 * test), and a helper thread plays the part of whoever unblocks sd_notify().
 */
#include <check.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <pleg/pleg-util.h>

#include "watchdog-test.h"

#define STALL_THREAD "pleg-wd-stall"

static WatchdogTest *
stall_test_new(gboolean gate)
{
    WatchdogTest *test = watchdog_test_new(TRUE);

    fake_host_set_gate(test->host, "WatchdogStallDiagnostics", gate);
    return test;
}

/* Threads of this process named @name (/proc/self/task/<tid>/comm). */
static guint
count_threads(const char *name)
{
    g_autoptr(GDir) dir = g_dir_open("/proc/self/task", 0, NULL);
    const char *tid;
    guint n = 0;

    ck_assert_ptr_nonnull(dir);
    while ((tid = g_dir_read_name(dir))) {
        g_autofree char *path = g_strdup_printf("/proc/self/task/%s/comm", tid);
        g_autofree char *comm = NULL;

        if (g_file_get_contents(path, &comm, NULL, NULL) && g_str_equal(g_strstrip(comm), name))
            n++;
    }
    return n;
}

static gboolean
stall_thread_named(gpointer data)
{
    return count_threads(STALL_THREAD) == 1;
}

/* GLib names a thread from inside it, just after it starts: wait for that. */
static void
assert_stall_thread(WatchdogTest *test)
{
    ck_assert_msg(fake_host_wait(test->host, stall_thread_named, NULL, 2 * SEC),
                  "%u threads named " STALL_THREAD, count_threads(STALL_THREAD));
}

static guint
count_stall_records(WatchdogTest *test)
{
    return watchdog_test_count_records(test, "RESULT", "stalled") +
           watchdog_test_count_records(test, "RESULT", "returned");
}

static gint64
parse_duration_field(GHashTable *record)
{
    gint64 usec = -1;

    ck_assert_ptr_nonnull(record);
    ck_assert(pleg_duration_parse(g_hash_table_lookup(record, "DURATION"), &usec, NULL));
    return usec;
}

static void
assert_field(GHashTable *record, const char *field, const char *value)
{
    ck_assert_ptr_nonnull(record);
    ck_assert_str_eq(g_hash_table_lookup(record, field) ?: "(none)", value);
}

/* A checker that, once armed, blocks the round until @block_usec passed or (with
 * @until_record) the stall record appeared; it notes when that record was first seen. */
typedef struct {
    WatchdogTest *test;
    gboolean armed;
    gint64 block_usec;
    gboolean until_record;
    guint calls;
    gint64 blocked_at;
    gint64 record_seen_at; /* 0: never while blocked */
} BlockingChecker;

static gboolean
blocking_check(gpointer user_data, GError **error)
{
    BlockingChecker *checker = user_data;
    gint64 deadline;

    checker->calls++;
    if (!checker->armed)
        return TRUE;
    checker->armed = FALSE;
    checker->blocked_at = g_get_monotonic_time();
    deadline = checker->blocked_at + checker->block_usec;
    /* The hang under test: a busy wait with a deadline, watching for the record that the
     * monitor thread writes meanwhile. */
    while (g_get_monotonic_time() < deadline) {
        if (!checker->record_seen_at &&
            watchdog_test_count_records(checker->test, "RESULT", "stalled") > 0) {
            checker->record_seen_at = g_get_monotonic_time();
            if (checker->until_record)
                break;
        }
        g_usleep(2 * MS);
    }
    return TRUE;
}

static void
add_blocking_checker(WatchdogTest *test, const char *name, BlockingChecker *checker)
{
    const PlegHostServices *services = fake_host_get_services(test->host);

    checker->test = test;
    ck_assert_uint_gt(
        services->add_health_checker(services->host, name, blocking_check, checker, NULL), 0);
}

static gboolean
calls_reached(gpointer data)
{
    BlockingChecker *checker = data;

    return checker->calls >= 2 && !checker->armed;
}

/* A checker that blocks for three intervals, then returns: one "stalled" record, written while
 * it blocked at about half an interval, and one "returned" record with its duration. */
START_TEST(test_checker_blocks_three_intervals)
{
    g_autoptr(WatchdogTest) test = stall_test_new(TRUE);
    BlockingChecker fast = {0};
    BlockingChecker slow = {.block_usec = 3 * SEC};
    g_autoptr(GHashTable) stalled = NULL;
    g_autoptr(GHashTable) returned = NULL;
    gint64 stalled_after, returned_after;

    add_blocking_checker(test, "fast", &fast);
    add_blocking_checker(test, "slow", &slow);
    watchdog_test_bind(test);
    ck_assert(watchdog_test_start(test, NULL));
    ck_assert(watchdog_test_wait_heartbeats(test, 1, 2 * SEC));
    assert_stall_thread(test);

    slow.armed = TRUE;
    ck_assert(fake_host_wait(test->host, calls_reached, &slow, 6 * SEC));
    ck_assert(watchdog_test_wait_records(test, "RESULT", "returned", 1, SEC));

    /* Written while the checker still blocked, before systemd's deadline (two intervals). */
    ck_assert_int_gt(slow.record_seen_at, 0);
    ck_assert_int_ge(slow.record_seen_at - slow.blocked_at, 400 * MS);
    ck_assert_int_le(slow.record_seen_at - slow.blocked_at, 2 * SEC);

    ck_assert_uint_eq(watchdog_test_count_records(test, "RESULT", "stalled"), 1);
    ck_assert_uint_eq(watchdog_test_count_records(test, "RESULT", "returned"), 1);
    stalled = watchdog_test_find_record(test, "watchdog_stall", "stalled", 0);
    assert_field(stalled, "CHECKER", "slow");
    assert_field(stalled, "WATCHDOG_INTERVAL", "1s");
    assert_field(stalled, "PRIORITY", "5");
    assert_field(stalled, "GLIB_DOMAIN", "pleg-watchdog");
    stalled_after = parse_duration_field(stalled);
    ck_assert_int_ge(stalled_after, 500 * MS);
    ck_assert_int_le(stalled_after, 2 * SEC);
    ck_assert_ptr_nonnull(strstr(g_hash_table_lookup(stalled, "MESSAGE"),
                                 "operation=watchdog_stall checker=slow duration="));
    ck_assert_ptr_nonnull(strstr(g_hash_table_lookup(stalled, "MESSAGE"),
                                 " watchdog_interval=1s result=stalled"));

    returned = watchdog_test_find_record(test, "watchdog_stall", "returned", 0);
    assert_field(returned, "CHECKER", "slow");
    assert_field(returned, "PRIORITY", "5");
    returned_after = parse_duration_field(returned);
    ck_assert_int_ge(returned_after, 3 * SEC);
    ck_assert_int_le(returned_after, 4 * SEC);

    /* Nothing else changed: the tick waited, no extra heartbeat, heartbeats go on. */
    ck_assert(watchdog_test_wait_heartbeats(test, watchdog_test_heartbeat_count(test) + 2,
                                            3 * SEC));
    ck_assert_uint_eq(watchdog_test_count_records(test, NULL, NULL), 2);
}
END_TEST

/* A checker that never returns, as far as systemd can tell: the record is there before the
 * watchdog timeout (WATCHDOG_USEC=2 s) would kill the process.  The checker gives up at that
 * deadline, or as soon as it sees the record. */
START_TEST(test_checker_blocks_forever)
{
    g_autoptr(WatchdogTest) test = stall_test_new(TRUE);
    BlockingChecker hang = {.block_usec = 2 * SEC, .until_record = TRUE};
    g_autoptr(GHashTable) stalled = NULL;

    add_blocking_checker(test, "hang", &hang);
    watchdog_test_bind(test);
    ck_assert(watchdog_test_start(test, NULL));
    ck_assert(watchdog_test_wait_heartbeats(test, 1, 2 * SEC));
    hang.armed = TRUE;
    ck_assert(fake_host_wait(test->host, calls_reached, &hang, 4 * SEC));

    ck_assert_msg(hang.record_seen_at > 0, "no stall record within the watchdog timeout");
    ck_assert_int_lt(hang.record_seen_at - hang.blocked_at, 2 * SEC);
    stalled = watchdog_test_find_record(test, "watchdog_stall", "stalled", 0);
    assert_field(stalled, "CHECKER", "hang");
    assert_field(stalled, "PRIORITY", "5");
}
END_TEST

/* ---- sd_notify() blocked: the receive queue of NOTIFY_SOCKET is full ---- */

typedef struct {
    WatchdogTest *test;
    int fd;           /* the receiving socket, never read until the record is there */
    gboolean drained; /* the helper saw the record and drained the queue */
} Unblocker;

static gboolean
have_notify_stall(WatchdogTest *test)
{
    g_autoptr(GPtrArray) logs = fake_host_get_logs(test->host);

    for (guint i = 0; i < logs->len; i++) {
        GHashTable *record = g_ptr_array_index(logs, i);

        if (g_strcmp0(g_hash_table_lookup(record, "OPERATION"), "watchdog_notify") == 0 &&
            g_strcmp0(g_hash_table_lookup(record, "RESULT"), "stalled") == 0)
            return TRUE;
    }
    return FALSE;
}

static gpointer
unblocker_thread(gpointer data)
{
    Unblocker *unblocker = data;
    gint64 deadline = g_get_monotonic_time() + 5 * SEC;
    char buf[64];

    while (!have_notify_stall(unblocker->test) && g_get_monotonic_time() < deadline)
        g_usleep(5 * MS);
    while (recv(unblocker->fd, buf, sizeof(buf), MSG_DONTWAIT) >= 0)
        ;
    g_atomic_int_set(&unblocker->drained, TRUE);
    return NULL;
}

START_TEST(test_notify_blocked)
{
    g_autoptr(WatchdogTest) test = stall_test_new(TRUE);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    g_autoptr(GHashTable) stalled = NULL;
    g_autoptr(GHashTable) returned = NULL;
    Unblocker unblocker = {.test = test};
    GThread *thread;
    int rcvbuf = 1, sender, queued = 0;

    /* A receiver with a tiny buffer that nobody reads, filled up by another sender: the
     * plugin's sd_notify() then blocks in sendmsg() (libsystemd uses a blocking socket). */
    unblocker.fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(unblocker.fd, 0);
    ck_assert_int_eq(setsockopt(unblocker.fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)), 0);
    strcpy(addr.sun_path, test->socket_path);
    ck_assert_int_eq(bind(unblocker.fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    sender = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    while (sendto(sender, "X", 1, 0, (struct sockaddr *)&addr, sizeof(addr)) == 1)
        queued++;
    ck_assert_int_eq(errno, EAGAIN);
    ck_assert_int_gt(queued, 0);
    close(sender);

    thread = g_thread_new("unblocker", unblocker_thread, &unblocker);
    ck_assert(watchdog_test_start(test, NULL));
    /* The first tick's sd_notify() blocked on this thread until the helper drained the queue. */
    ck_assert(watchdog_test_wait_records(test, "RESULT", "returned", 1, 6 * SEC));
    g_thread_join(thread);
    ck_assert(g_atomic_int_get(&unblocker.drained));

    stalled = watchdog_test_find_record(test, "watchdog_notify", "stalled", 0);
    ck_assert_ptr_nonnull(stalled);
    ck_assert(!g_hash_table_contains(stalled, "CHECKER"));
    assert_field(stalled, "WATCHDOG_INTERVAL", "1s");
    assert_field(stalled, "PRIORITY", "5");
    ck_assert_int_ge(parse_duration_field(stalled), 500 * MS);
    returned = watchdog_test_find_record(test, "watchdog_notify", "returned", 0);
    ck_assert_ptr_nonnull(returned);
    ck_assert_int_ge(parse_duration_field(returned), parse_duration_field(stalled));
    ck_assert_uint_eq(watchdog_test_count_records(test, "RESULT", "stalled"), 1);
    close(unblocker.fd);
}
END_TEST

/* Gate off: no monitor thread, and the same three-interval hang gives no record. */
START_TEST(test_gate_off)
{
    g_autoptr(WatchdogTest) test = stall_test_new(FALSE);
    BlockingChecker slow = {.block_usec = 3 * SEC};

    ck_assert_uint_eq(count_threads(STALL_THREAD), 0);
    add_blocking_checker(test, "slow", &slow);
    watchdog_test_bind(test);
    ck_assert(watchdog_test_start(test, NULL));
    ck_assert(watchdog_test_wait_heartbeats(test, 1, 2 * SEC));
    ck_assert_uint_eq(count_threads(STALL_THREAD), 0);
    slow.armed = TRUE;
    ck_assert(fake_host_wait(test->host, calls_reached, &slow, 6 * SEC));
    ck_assert(watchdog_test_wait_heartbeats(test, 2, 2 * SEC));
    ck_assert_uint_eq(count_stall_records(test), 0);
    ck_assert_uint_eq(watchdog_test_count_messages(test, "watchdog_stall"), 0);
    ck_assert_uint_eq(count_threads(STALL_THREAD), 0);
}
END_TEST

/* Gate on, healthy checks: no record over 30 s.  The interval is the shortest systemd allows
 * (WATCHDOG_USEC just above 1 s, a tick every 500.5 ms), so that 30 s hold as many ticks as
 * they can: 60 heartbeats, more than 30 s at WatchdogSec=4s would give. */
START_TEST(test_healthy_no_record)
{
    g_autoptr(WatchdogTest) test = stall_test_new(TRUE);
    TestChecker healthy = {.name = "healthy"};

    g_setenv("WATCHDOG_USEC", "1001000", TRUE);
    watchdog_test_add_checker(test, &healthy);
    watchdog_test_bind(test);
    ck_assert(watchdog_test_start(test, NULL));
    assert_stall_thread(test);
    ck_assert(watchdog_test_wait_heartbeats(test, 60, 45 * SEC));
    ck_assert_uint_ge(healthy.calls, 60);
    ck_assert_uint_eq(count_stall_records(test), 0);
    ck_assert_uint_eq(watchdog_test_count_records(test, NULL, NULL), 0);

    /* stop joins the monitor thread. */
    watchdog_test_stop(test);
    ck_assert_uint_eq(count_threads(STALL_THREAD), 0);
}
END_TEST

static Suite *
stall_suite(void)
{
    Suite *s = suite_create("watchdog-stall");
    TCase *tc = tcase_create("stall");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_checker_blocks_three_intervals);
    tcase_add_test(tc, test_checker_blocks_forever);
    tcase_add_test(tc, test_notify_blocked);
    tcase_add_test(tc, test_gate_off);
    tcase_add_test(tc, test_healthy_no_record);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *runner = srunner_create(stall_suite());
    int failed;

    srunner_run_all(runner, CK_NORMAL);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
