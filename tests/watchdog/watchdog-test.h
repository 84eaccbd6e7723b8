/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The watchdog plugin module (loaded from the build dir like the host does) under the fake host,
 * with a real AF_UNIX datagram socket as NOTIFY_SOCKET.  Datagrams are read on the plugin's
 * context, which the test thread iterates (fake-host.h), so arrival times are taken as they
 * are sent.
 */
#pragma once

#include <fake-host.h>

G_BEGIN_DECLS

#define SEC G_GINT64_CONSTANT(1000000)
#define MS  G_GINT64_CONSTANT(1000)

/* The PlegPluginDescriptor exported by $PLEG_WATCHDOG_PLUGIN. */
const PlegPluginDescriptor *watchdog_test_descriptor(void);

typedef struct {
    FakeHost *host;
    char *dir;
    char *socket_path; /* NOTIFY_SOCKET; not bound until watchdog_test_bind() */
    int fd;
    GSource *source;
    GArray *heartbeats; /* gint64: monotonic arrival of each WATCHDOG=1 */
    guint other_messages;
    gint64 start_usec;
} WatchdogTest;

/* A fake host with KubeletWatchdogDiagnostics set to @diagnostics, WATCHDOG_USEC=2000000 (1 s
 * interval), no WATCHDOG_PID, NOTIFY_SOCKET pointing at a path nobody listens on yet. */
WatchdogTest *watchdog_test_new(gboolean diagnostics);
void watchdog_test_free(WatchdogTest *test);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(WatchdogTest, watchdog_test_free)

void watchdog_test_bind(WatchdogTest *test);
/* Closes the socket and leaves its file: sending gets ECONNREFUSED. */
void watchdog_test_break(WatchdogTest *test);

/* Starts the plugin (init + start) and notes the time. */
gboolean watchdog_test_start(WatchdogTest *test, GError **error);
void watchdog_test_stop(WatchdogTest *test);

guint watchdog_test_heartbeat_count(WatchdogTest *test);
/* Arrival of heartbeat @i relative to the start, in µs. */
gint64 watchdog_test_heartbeat_offset(WatchdogTest *test, guint i);
gboolean watchdog_test_wait_heartbeats(WatchdogTest *test, guint n, gint64 timeout_usec);

/* KEP-6247 records (those with an OPERATION field) whose @field equals @value (@field NULL: all;
 * @value NULL: @field present). */
guint watchdog_test_count_records(WatchdogTest *test, const char *field, const char *value);
gboolean watchdog_test_wait_records(WatchdogTest *test, const char *field, const char *value,
                                    guint n, gint64 timeout_usec);
/* (transfer full) (nullable) the @nth record with this OPERATION and RESULT. */
GHashTable *watchdog_test_find_record(WatchdogTest *test, const char *operation,
                                      const char *result, guint nth);
/* Records at PRIORITY 5 (message) or more urgent: what an operator sees by default. */
guint watchdog_test_count_visible(WatchdogTest *test);
/* Records of any level whose MESSAGE contains @text. */
guint watchdog_test_count_messages(WatchdogTest *test, const char *text);

/* A health checker failing its next @fail_times rounds (-1: always). */
typedef struct {
    const char *name;
    const char *message;
    int fail_times;
    guint calls;
    guint failures;
} TestChecker;

void watchdog_test_add_checker(WatchdogTest *test, TestChecker *checker);

G_END_DECLS
