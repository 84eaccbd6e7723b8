/* SPDX-License-Identifier: Apache-2.0 */
#include "watchdog-test.h"

#include <check.h>
#include <errno.h>
#include <glib-unix.h>
#include <glib/gstdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

const PlegPluginDescriptor *
watchdog_test_descriptor(void)
{
    static const PlegPluginDescriptor *descriptor;
    const char *path = g_getenv("PLEG_WATCHDOG_PLUGIN");
    GModule *module;
    gpointer symbol = NULL;

    if (descriptor)
        return descriptor;
    ck_assert_msg(path, "PLEG_WATCHDOG_PLUGIN is not set");
    module = g_module_open(path, G_MODULE_BIND_LOCAL);
    ck_assert_msg(module, "%s", g_module_error());
    ck_assert(g_module_symbol(module, PLEG_PLUGIN_DESCRIPTOR_SYMBOL, &symbol));
    ck_assert_ptr_nonnull(symbol);
    g_module_make_resident(module);
    descriptor = symbol;
    return descriptor;
}

static gboolean
on_datagram(int fd, GIOCondition condition, gpointer user_data)
{
    WatchdogTest *test = user_data;
    char buf[256];
    ssize_t n;

    while ((n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT)) >= 0) {
        gint64 now = g_get_monotonic_time();

        buf[n] = '\0';
        if (g_str_equal(buf, "WATCHDOG=1"))
            g_array_append_val(test->heartbeats, now);
        else
            test->other_messages++;
    }
    ck_assert_int_eq(errno, EAGAIN);
    return G_SOURCE_CONTINUE;
}

WatchdogTest *
watchdog_test_new(gboolean diagnostics)
{
    WatchdogTest *test = g_new0(WatchdogTest, 1);
    g_autoptr(GError) error = NULL;

    test->dir = g_dir_make_tmp("pleg-watchdog-XXXXXX", &error);
    ck_assert_ptr_null(error);
    test->socket_path = g_build_filename(test->dir, "notify", NULL);
    test->fd = -1;
    test->heartbeats = g_array_new(FALSE, FALSE, sizeof(gint64));

    test->host = fake_host_new();
    fake_host_set_gate(test->host, "SystemdWatchdog", TRUE);
    fake_host_set_gate(test->host, "KubeletWatchdogDiagnostics", diagnostics);

    g_setenv("WATCHDOG_USEC", "2000000", TRUE);
    g_unsetenv("WATCHDOG_PID");
    g_setenv("NOTIFY_SOCKET", test->socket_path, TRUE);
    return test;
}

void
watchdog_test_bind(WatchdogTest *test)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};

    ck_assert_int_lt(test->fd, 0);
    test->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    ck_assert_int_ge(test->fd, 0);
    ck_assert_uint_lt(strlen(test->socket_path), sizeof(addr.sun_path));
    strcpy(addr.sun_path, test->socket_path);
    ck_assert_int_eq(bind(test->fd, (struct sockaddr *)&addr, sizeof(addr)), 0);

    test->source = g_unix_fd_source_new(test->fd, G_IO_IN);
    g_source_set_callback(test->source, G_SOURCE_FUNC(on_datagram), test, NULL);
    g_source_attach(test->source, fake_host_get_context(test->host));
}

void
watchdog_test_break(WatchdogTest *test)
{
    if (test->source) {
        g_source_destroy(test->source);
        g_clear_pointer(&test->source, g_source_unref);
    }
    if (test->fd >= 0) {
        close(test->fd);
        test->fd = -1;
    }
}

void
watchdog_test_free(WatchdogTest *test)
{
    if (!test)
        return;
    fake_host_free(test->host);
    watchdog_test_break(test);
    g_unlink(test->socket_path);
    g_rmdir(test->dir);
    g_free(test->socket_path);
    g_free(test->dir);
    g_array_unref(test->heartbeats);
    g_free(test);
}

gboolean
watchdog_test_start(WatchdogTest *test, GError **error)
{
    const PlegPluginDescriptor *descriptor = watchdog_test_descriptor();

    test->start_usec = g_get_monotonic_time();
    return fake_host_start_plugin(test->host, descriptor, error);
}

void
watchdog_test_stop(WatchdogTest *test)
{
    fake_host_stop_plugin(test->host);
}

guint
watchdog_test_heartbeat_count(WatchdogTest *test)
{
    return test->heartbeats->len;
}

gint64
watchdog_test_heartbeat_offset(WatchdogTest *test, guint i)
{
    ck_assert_uint_lt(i, test->heartbeats->len);
    return g_array_index(test->heartbeats, gint64, i) - test->start_usec;
}

typedef struct {
    WatchdogTest *test;
    const char *field;
    const char *value;
    guint n;
} Wait;

static gboolean
have_heartbeats(gpointer data)
{
    Wait *wait = data;

    return wait->test->heartbeats->len >= wait->n;
}

gboolean
watchdog_test_wait_heartbeats(WatchdogTest *test, guint n, gint64 timeout_usec)
{
    Wait wait = {.test = test, .n = n};

    return fake_host_wait(test->host, have_heartbeats, &wait, timeout_usec);
}

static gboolean
record_matches(GHashTable *record, const char *field, const char *value)
{
    if (!g_hash_table_contains(record, "OPERATION"))
        return FALSE;
    if (!field)
        return TRUE;
    if (!value)
        return g_hash_table_contains(record, field);
    return g_strcmp0(g_hash_table_lookup(record, field), value) == 0;
}

guint
watchdog_test_count_records(WatchdogTest *test, const char *field, const char *value)
{
    g_autoptr(GPtrArray) logs = fake_host_get_logs(test->host);
    guint n = 0;

    for (guint i = 0; i < logs->len; i++)
        n += record_matches(g_ptr_array_index(logs, i), field, value);
    return n;
}

static gboolean
have_records(gpointer data)
{
    Wait *wait = data;

    return watchdog_test_count_records(wait->test, wait->field, wait->value) >= wait->n;
}

gboolean
watchdog_test_wait_records(WatchdogTest *test, const char *field, const char *value, guint n,
                           gint64 timeout_usec)
{
    Wait wait = {.test = test, .field = field, .value = value, .n = n};

    return fake_host_wait(test->host, have_records, &wait, timeout_usec);
}

GHashTable *
watchdog_test_find_record(WatchdogTest *test, const char *operation, const char *result,
                          guint nth)
{
    g_autoptr(GPtrArray) logs = fake_host_get_logs(test->host);

    for (guint i = 0; i < logs->len; i++) {
        GHashTable *record = g_ptr_array_index(logs, i);

        if (record_matches(record, "OPERATION", operation) &&
            record_matches(record, "RESULT", result) && nth-- == 0)
            return g_hash_table_ref(record);
    }
    return NULL;
}

guint
watchdog_test_count_visible(WatchdogTest *test)
{
    g_autoptr(GPtrArray) logs = fake_host_get_logs(test->host);
    guint n = 0;

    for (guint i = 0; i < logs->len; i++) {
        const char *priority = g_hash_table_lookup(g_ptr_array_index(logs, i), "PRIORITY");

        ck_assert_ptr_nonnull(priority);
        n += atoi(priority) <= 5;
    }
    return n;
}

guint
watchdog_test_count_messages(WatchdogTest *test, const char *text)
{
    g_autoptr(GPtrArray) logs = fake_host_get_logs(test->host);
    guint n = 0;

    for (guint i = 0; i < logs->len; i++) {
        const char *message = g_hash_table_lookup(g_ptr_array_index(logs, i), "MESSAGE");

        n += message && strstr(message, text) != NULL;
    }
    return n;
}

static gboolean
test_checker_run(gpointer user_data, GError **error)
{
    TestChecker *checker = user_data;

    checker->calls++;
    if (checker->fail_times == 0)
        return TRUE;
    if (checker->fail_times > 0)
        checker->fail_times--;
    checker->failures++;
    g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_FAILED, checker->message);
    return FALSE;
}

void
watchdog_test_add_checker(WatchdogTest *test, TestChecker *checker)
{
    const PlegHostServices *services = fake_host_get_services(test->host);

    ck_assert_uint_gt(services->add_health_checker(services->host, checker->name,
                                                   test_checker_run, checker, NULL),
                      0);
}
