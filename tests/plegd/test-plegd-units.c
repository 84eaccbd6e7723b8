/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd's pieces driven directly: the JSON event lines and their writer thread, the journal's
 * entries and its sender (with a stand-in for journald),
 * --metrics-bind-address parsing, the relist monitor (readiness, STATUS= and rate-limited failure
 * logs, on a fake clock), notifications that never block, and what plegd says about each plugin.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
#include <gio/gunixsocketaddress.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>

#include "pleg-config.h"
#include "plegd.h"
#include "sample-events.h"

#define ENDPOINT "unix:///run/test/cri.sock"

/* ---- JSON lines ---- */

static JsonObject *
parse_line(const char *line)
{
    g_autoptr(JsonParser) parser = json_parser_new();
    g_autoptr(GError) error = NULL;
    JsonNode *root;

    ck_assert_ptr_null(strchr(line, '\n'));
    ck_assert_msg(json_parser_load_from_data(parser, line, -1, &error), "%s: %s", line,
                  error ? error->message : "");
    root = json_parser_get_root(parser);
    ck_assert(JSON_NODE_HOLDS_OBJECT(root));
    return json_object_ref(json_node_get_object(root));
}

static void
assert_string_member(JsonObject *object, const char *name, const char *expected)
{
    ck_assert_msg(json_object_has_member(object, name), "missing %s", name);
    ck_assert_str_eq(json_object_get_string_member(object, name), expected);
}

START_TEST(test_json_container_died)
{
    PlegPodLifecycleEvent event = sample_died_event();
    g_autofree char *line = plegd_event_to_json(&event);
    g_autoptr(JsonObject) object = parse_line(line);
    g_autofree char *time = pleg_time_format_rfc3339(event.time_ns);
    g_autofree char *finished = pleg_time_format_rfc3339(event.finished_at_ns);

    assert_string_member(object, "time", time);
    assert_string_member(object, "pod_uid", "uid-1");
    assert_string_member(object, "type", "ContainerDied");
    assert_string_member(object, "container_id", "c0ffee");
    assert_string_member(object, "relist_source", "post_sync");
    ck_assert_int_eq(json_object_get_int_member(object, "exit_code"), 7);
    assert_string_member(object, "reason", "Error");
    assert_string_member(object, "finished_at", finished);
    /* Without names only what every container event says: not a sandbox, attempt 0. */
    ck_assert(!json_object_get_boolean_member(object, "sandbox"));
    ck_assert_int_eq(json_object_get_int_member(object, "attempt"), 0);
    ck_assert(!json_object_has_member(object, "namespace"));
    ck_assert(!json_object_has_member(object, "pod"));
    ck_assert(!json_object_has_member(object, "container"));
    ck_assert(!json_object_has_member(object, "image"));
    ck_assert_uint_eq(json_object_get_size(object), 10);

    /* The documented member order: time first, then pod_uid, type, ... */
    ck_assert(g_str_has_prefix(line, "{\"time\":"));
    ck_assert(strstr(line, "\"pod_uid\"") < strstr(line, "\"type\""));
    ck_assert(strstr(line, "\"container_id\"") < strstr(line, "\"relist_source\""));
    ck_assert(strstr(line, "\"relist_source\"") < strstr(line, "\"exit_code\""));
}
END_TEST

START_TEST(test_json_container_died_partial_exit)
{
    PlegPodLifecycleEvent event = {
        .pod_uid = "uid-1",
        .type = PLEG_CONTAINER_DIED,
        .container_id = "c1",
        .time_ns = 1,
        .has_exit = TRUE,
        .exit_code = -1,
    };
    g_autofree char *line = plegd_event_to_json(&event);
    g_autoptr(JsonObject) object = parse_line(line);

    ck_assert_int_eq(json_object_get_int_member(object, "exit_code"), -1);
    ck_assert(!json_object_has_member(object, "reason"));
    ck_assert(!json_object_has_member(object, "finished_at"));
    assert_string_member(object, "relist_source", "global");
}
END_TEST

START_TEST(test_json_container_died_without_exit)
{
    PlegPodLifecycleEvent event = {
        .pod_uid = "uid-1",
        .type = PLEG_CONTAINER_DIED,
        .container_id = "c1",
        .time_ns = 1,
        .exit_code = 3,
        .reason = "Error",
    };
    g_autofree char *line = plegd_event_to_json(&event);
    g_autoptr(JsonObject) object = parse_line(line);

    ck_assert(!json_object_has_member(object, "exit_code"));
    ck_assert(!json_object_has_member(object, "reason"));
    ck_assert(!json_object_has_member(object, "finished_at"));
}
END_TEST

/* A runtime's bytes that are not UTF-8 still give a line of valid JSON (U+FFFD in their place),
 * as a finding of a newcomer's try showed: Python's json refused plegd's line. */
START_TEST(test_json_not_utf8)
{
    PlegPodLifecycleEvent event = {
        .pod_uid = "uid-\xff\xfe",
        .type = PLEG_CONTAINER_DIED,
        .container_id = "c\xc3",
        .relist_source = PLEG_RELIST_SOURCE_GLOBAL,
        .time_ns = 5,
        .has_exit = TRUE,
        .exit_code = 1,
        .reason = "Err\x80or",
    };
    g_autofree char *line = plegd_event_to_json(&event);
    g_autoptr(JsonObject) object = NULL;

    ck_assert_msg(g_utf8_validate(line, -1, NULL), "not UTF-8: %s", line);
    object = parse_line(line);
    assert_string_member(object, "pod_uid", "uid-\xef\xbf\xbd\xef\xbf\xbd");
    assert_string_member(object, "container_id", "c\xef\xbf\xbd");
    assert_string_member(object, "reason", "Err\xef\xbf\xbdor");
}
END_TEST

START_TEST(test_json_other_types)
{
    static const struct {
        PlegPodLifecycleEventType type;
        const char *name;
        gboolean has_container;
    } cases[] = {
        {PLEG_CONTAINER_STARTED, "ContainerStarted", TRUE},
        {PLEG_CONTAINER_REMOVED, "ContainerRemoved", TRUE},
        {PLEG_POD_SYNC, "PodSync", FALSE},
    };

    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        PlegPodLifecycleEvent event = {
            .pod_uid = "uid-\"quoted\"\n",
            .type = cases[i].type,
            .container_id = cases[i].has_container ? "c2" : NULL,
            .relist_source = PLEG_RELIST_SOURCE_EVENTED_PLEG,
            .time_ns = 5,
            /* Exit data is only for ContainerDied. */
            .has_exit = TRUE,
            .exit_code = 1,
        };
        g_autofree char *line = plegd_event_to_json(&event);
        g_autoptr(JsonObject) object = parse_line(line);

        assert_string_member(object, "type", cases[i].name);
        assert_string_member(object, "pod_uid", "uid-\"quoted\"\n");
        assert_string_member(object, "relist_source", "evented_pleg");
        ck_assert_int_eq(json_object_has_member(object, "container_id"), cases[i].has_container);
        ck_assert(!json_object_has_member(object, "exit_code"));
    }
}
END_TEST

/* The identity of the event, in the documented order, with a death's exit. */
START_TEST(test_json_details)
{
    PlegPodLifecycleEvent event = sample_died_event();
    static const char *const order[] = {
        "\"seq\"",         "\"time\"",          "\"pod_uid\"",   "\"namespace\"",
        "\"pod\"",         "\"type\"",          "\"container_id\"", "\"container\"",
        "\"sandbox\"",     "\"attempt\"",       "\"image\"",     "\"relist_source\"",
        "\"exit_code\"",   "\"reason\"",        "\"finished_at\"",
    };
    g_autofree char *line = NULL;
    g_autoptr(JsonObject) object = NULL;

    event.details = sample_nginx_details();
    line = plegd_event_to_json_with_seq(&event, 9);
    object = parse_line(line);
    assert_string_member(object, "namespace", "shop");
    assert_string_member(object, "pod", "web");
    assert_string_member(object, "container", "nginx");
    ck_assert(!json_object_get_boolean_member(object, "sandbox"));
    ck_assert_int_eq(json_object_get_int_member(object, "attempt"), 3);
    assert_string_member(object, "image", "docker.io/library/nginx:1.27");
    ck_assert_int_eq(json_object_get_int_member(object, "exit_code"), 7);
    ck_assert(!json_object_has_member(object, "started_at"));
    ck_assert_uint_eq(json_object_get_size(object), G_N_ELEMENTS(order));
    for (gsize i = 1; i < G_N_ELEMENTS(order); i++)
        ck_assert_msg(strstr(line, order[i - 1]) < strstr(line, order[i]), "%s before %s in %s",
                      order[i - 1], order[i], line);
}
END_TEST

/* A sandbox says so and has no container name, even one the runtime gave; a start says when. */
START_TEST(test_json_details_sandbox_and_start)
{
    PlegPodLifecycleEvent event = sample_died_event();
    g_autofree char *started = NULL;
    g_autofree char *line = NULL;
    g_autoptr(JsonObject) object = NULL;
    g_autoptr(JsonObject) sync = NULL;
    g_autofree char *sync_line = NULL;

    event.type = PLEG_CONTAINER_STARTED;
    event.container_id = (char *)"sb-1";
    event.details = sample_sandbox_details();
    event.details.started_at_ns = G_GINT64_CONSTANT(1795966735000000000);
    started = pleg_time_format_rfc3339(event.details.started_at_ns);
    line = plegd_event_to_json(&event);
    object = parse_line(line);

    ck_assert(json_object_get_boolean_member(object, "sandbox"));
    ck_assert_int_eq(json_object_get_int_member(object, "attempt"), 1);
    ck_assert(!json_object_has_member(object, "container"));
    ck_assert(!json_object_has_member(object, "image"));
    assert_string_member(object, "started_at", started);
    ck_assert(!json_object_has_member(object, "exit_code"));
    ck_assert(strstr(line, "\"relist_source\"") < strstr(line, "\"started_at\""));

    /* PodSync: the pod's names, nothing of a container. */
    event.type = PLEG_POD_SYNC;
    event.container_id = NULL;
    sync_line = plegd_event_to_json(&event);
    sync = parse_line(sync_line);
    assert_string_member(sync, "namespace", "shop");
    assert_string_member(sync, "pod", "web");
    ck_assert(!json_object_has_member(sync, "sandbox"));
    ck_assert(!json_object_has_member(sync, "attempt"));
    ck_assert(!json_object_has_member(sync, "started_at"));
}
END_TEST

/* ---- --metrics-bind-address ---- */

START_TEST(test_bind_address_valid)
{
    static const struct {
        const char *text;
        const char *host;
        guint port;
    } cases[] = {
        {"127.0.0.1:10388", "127.0.0.1", 10388},
        {"0.0.0.0:0", "0.0.0.0", 0},
        {"[::1]:9090", "::1", 9090},
        {"[::]:65535", "::", 65535},
    };

    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autoptr(GInetSocketAddress) address = NULL;
        g_autoptr(GError) error = NULL;
        g_autofree char *host = NULL;

        ck_assert_msg(plegd_parse_bind_address(cases[i].text, &address, &error), "%s: %s",
                      cases[i].text, error ? error->message : "");
        host = g_inet_address_to_string(g_inet_socket_address_get_address(address));
        ck_assert_str_eq(host, cases[i].host);
        ck_assert_uint_eq(g_inet_socket_address_get_port(address), cases[i].port);
    }
}
END_TEST

START_TEST(test_bind_address_invalid)
{
    static const char *const cases[] = {
        "",
        "127.0.0.1",
        "127.0.0.1:",
        "127.0.0.1:65536",
        "127.0.0.1:-1",
        "127.0.0.1:+80",
        "127.0.0.1:80x",
        "localhost:80",
        ":80",
        "::1:80",
        "[::1]",
        "[::1]80",
        "[127.0.0.1]:80",
        "[::1:80",
        "300.0.0.1:80",
    };

    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autoptr(GInetSocketAddress) address = NULL;
        g_autoptr(GError) error = NULL;

        ck_assert_msg(!plegd_parse_bind_address(cases[i], &address, &error), "accepted \"%s\"",
                      cases[i]);
        ck_assert(g_error_matches(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE));
        ck_assert_ptr_null(address);
    }
}
END_TEST

/* ---- relist monitor ---- */

typedef struct {
    GPtrArray *notified; /* sd_notify states, also those that could not be sent */
    gboolean notify_blocked; /* the socket's queue is full */
    GPtrArray *logged;   /* plegd messages at info level and above */
    GPtrArray *debug;
} Recorder;

static Recorder recorder;

static gboolean
record_notify(const char *state, gpointer user_data)
{
    g_ptr_array_add(recorder.notified, g_strdup(state));
    return !recorder.notify_blocked;
}

/* While set, every field of each record goes here instead ("KEY=VALUE" of the last one). */
static GPtrArray *captured_fields;
static GLogWriterOutput capture_writer(GLogLevelFlags level, const GLogField *fields,
                                       gsize n_fields, gpointer data);

static GLogWriterOutput
record_log(GLogLevelFlags log_level, const GLogField *fields, gsize n_fields, gpointer user_data)
{
    /* The journal's sender thread logs too. */
    static GMutex lock;
    g_autoptr(GMutexLocker) locker = g_mutex_locker_new(&lock);
    const char *message = NULL;
    const char *domain = NULL;

    if (captured_fields)
        return capture_writer(log_level, fields, n_fields, user_data);
    for (gsize i = 0; i < n_fields; i++) {
        if (g_str_equal(fields[i].key, "MESSAGE"))
            message = fields[i].value;
        else if (g_str_equal(fields[i].key, "GLIB_DOMAIN"))
            domain = fields[i].value;
    }
    if (g_strcmp0(domain, "plegd") != 0)
        return g_log_writer_default(log_level, fields, n_fields, user_data);
    g_ptr_array_add((log_level & G_LOG_LEVEL_DEBUG) ? recorder.debug : recorder.logged,
                    g_strdup(message));
    return G_LOG_WRITER_HANDLED;
}

static void
recorder_setup(void)
{
    recorder.notified = g_ptr_array_new_with_free_func(g_free);
    recorder.logged = g_ptr_array_new_with_free_func(g_free);
    recorder.debug = g_ptr_array_new_with_free_func(g_free);
    recorder.notify_blocked = FALSE;
}

static void
recorder_teardown(void)
{
    g_clear_pointer(&recorder.notified, g_ptr_array_unref);
    g_clear_pointer(&recorder.logged, g_ptr_array_unref);
    g_clear_pointer(&recorder.debug, g_ptr_array_unref);
}

static const char *
last(GPtrArray *array)
{
    ck_assert_uint_gt(array->len, 0);
    return g_ptr_array_index(array, array->len - 1);
}

static GError *
unreachable(const char *why)
{
    return g_error_new(PLEG_CRI_ERROR, PLEG_CRI_ERROR_UNAVAILABLE, "%s: ListPodSandbox: %s",
                       ENDPOINT, why);
}

#define SEC G_USEC_PER_SEC

START_TEST(test_monitor_rate_limits_failures)
{
    g_autoptr(PlegdRelistMonitor) monitor = plegd_relist_monitor_new(ENDPOINT, record_notify, NULL);
    g_autoptr(GError) refused = unreachable("connection refused");
    g_autoptr(GError) missing = unreachable("no such file");
    gint64 now = 1000 * SEC;

    /* The first failure is logged, naming the endpoint, and sets STATUS=. */
    plegd_relist_monitor_update(monitor, refused, 0, now);
    ck_assert_uint_eq(recorder.logged->len, 1);
    ck_assert_ptr_nonnull(
        strstr(last(recorder.logged), ENDPOINT ": ListPodSandbox: connection refused"));
    ck_assert_uint_eq(recorder.notified->len, 1);
    ck_assert_str_eq(last(recorder.notified), "STATUS=runtime unreachable: " ENDPOINT
                                              ": ListPodSandbox: connection refused");

    /* The same error every second for a minute: nothing more, to the log or the manager. */
    for (int i = 1; i < 60; i++)
        plegd_relist_monitor_update(monitor, refused, 0, now + i * SEC);
    ck_assert_uint_eq(recorder.logged->len, 1);
    ck_assert_uint_eq(recorder.notified->len, 1);
    ck_assert_uint_eq(recorder.debug->len, 60);

    /* A minute after the last log line: one line with the count since. */
    plegd_relist_monitor_update(monitor, refused, 0, now + 60 * SEC);
    ck_assert_uint_eq(recorder.logged->len, 2);
    ck_assert_ptr_nonnull(strstr(last(recorder.logged), "60 failures"));
    ck_assert_ptr_nonnull(strstr(last(recorder.logged), "connection refused"));
    plegd_relist_monitor_update(monitor, refused, 0, now + 61 * SEC);
    ck_assert_uint_eq(recorder.logged->len, 2);

    /* A different error is logged at once, and changes the status. */
    plegd_relist_monitor_update(monitor, missing, 0, now + 62 * SEC);
    ck_assert_uint_eq(recorder.logged->len, 3);
    ck_assert_ptr_nonnull(strstr(last(recorder.logged), "no such file"));
    ck_assert_uint_eq(recorder.notified->len, 2);
    ck_assert_ptr_nonnull(strstr(last(recorder.notified), "no such file"));

    ck_assert(!plegd_relist_monitor_is_ready(monitor));
    for (guint i = 0; i < recorder.notified->len; i++)
        ck_assert_ptr_null(strstr(g_ptr_array_index(recorder.notified, i), "READY=1"));
}
END_TEST

/* A runtime whose error text alternates between two messages: each is said once, then the
 * minute line; not a line at every flip. */
START_TEST(test_monitor_alternating_errors)
{
    g_autoptr(PlegdRelistMonitor) monitor = plegd_relist_monitor_new(ENDPOINT, record_notify, NULL);
    g_autoptr(GError) a = unreachable("window of 4194308");
    g_autoptr(GError) b = unreachable("window of 4194303");
    gint64 now = 1000 * SEC;

    for (int i = 0; i < 120; i++)
        plegd_relist_monitor_update(monitor, i % 2 ? b : a, 0, now + i * SEC);
    /* a, b, then one line a minute. */
    ck_assert_uint_eq(recorder.logged->len, 3);
    ck_assert_ptr_nonnull(strstr(g_ptr_array_index(recorder.logged, 1), "4194303"));
    ck_assert_ptr_nonnull(strstr(last(recorder.logged), "failures in the last"));

    /* After a success, a new run of failures says its errors again. */
    plegd_relist_monitor_update(monitor, NULL, 1, now + 121 * SEC);
    plegd_relist_monitor_update(monitor, a, 0, now + 122 * SEC);
    ck_assert_ptr_nonnull(strstr(last(recorder.logged), "relist failed: "));
}
END_TEST

START_TEST(test_monitor_ready_and_recovery)
{
    g_autoptr(PlegdRelistMonitor) monitor = plegd_relist_monitor_new(ENDPOINT, record_notify, NULL);
    g_autoptr(GError) refused = unreachable("connection refused");
    gint64 now = 0;

    plegd_relist_monitor_update(monitor, refused, 0, now += SEC);
    plegd_relist_monitor_update(monitor, refused, 0, now += SEC);
    ck_assert_uint_eq(recorder.logged->len, 1);

    /* First success: READY=1 with the status, and recovery logged once. */
    plegd_relist_monitor_update(monitor, NULL, 2, now += SEC);
    ck_assert(plegd_relist_monitor_is_ready(monitor));
    ck_assert_str_eq(last(recorder.notified), "READY=1\nSTATUS=relisting 2 pods");
    ck_assert_uint_eq(recorder.notified->len, 2);
    ck_assert_uint_eq(recorder.logged->len, 3); /* recovery, ready */
    ck_assert_ptr_nonnull(strstr(g_ptr_array_index(recorder.logged, 1), "2 failed relists"));

    /* Steady state: nothing sent, nothing logged. */
    plegd_relist_monitor_update(monitor, NULL, 2, now += SEC);
    ck_assert_uint_eq(recorder.notified->len, 2);
    ck_assert_uint_eq(recorder.logged->len, 3);

    /* A new pod count is a new status, never a second READY=1. */
    plegd_relist_monitor_update(monitor, NULL, 1, now += SEC);
    ck_assert_str_eq(last(recorder.notified), "STATUS=relisting 1 pod");

    /* Failing again after being ready: logged at once, then recovery once. */
    plegd_relist_monitor_update(monitor, refused, 0, now += SEC);
    ck_assert_uint_eq(recorder.logged->len, 4);
    ck_assert(g_str_has_prefix(last(recorder.notified), "STATUS=runtime unreachable: "));
    plegd_relist_monitor_update(monitor, NULL, 1, now += SEC);
    ck_assert_uint_eq(recorder.logged->len, 5);
    ck_assert_ptr_nonnull(strstr(last(recorder.logged), "after 1 failed relist"));
    ck_assert_str_eq(last(recorder.notified), "STATUS=relisting 1 pod");

    plegd_relist_monitor_stopping(monitor);
    ck_assert_str_eq(last(recorder.notified), "STOPPING=1\nSTATUS=stopping");

    for (guint i = 0, n_ready = 0; i < recorder.notified->len; i++) {
        if (strstr(g_ptr_array_index(recorder.notified, i), "READY=1"))
            ck_assert_uint_eq(++n_ready, 1);
    }
}
END_TEST

START_TEST(test_monitor_foreign_error)
{
    g_autoptr(PlegdRelistMonitor) monitor = plegd_relist_monitor_new(ENDPOINT, record_notify, NULL);
    g_autoptr(GError) error =
        g_error_new_literal(G_IO_ERROR, G_IO_ERROR_FAILED, "broken\nin two lines");

    /* An error that does not name the endpoint gets it; STATUS= stays one line. */
    plegd_relist_monitor_update(monitor, error, 0, 0);
    ck_assert_ptr_nonnull(strstr(last(recorder.logged), ENDPOINT ": broken"));
    ck_assert_str_eq(last(recorder.notified),
                     "STATUS=relist failing: " ENDPOINT ": broken in two lines");
}
END_TEST

/* A full notification socket: what could not be sent goes out with the next update. */
START_TEST(test_monitor_notify_retry)
{
    g_autoptr(PlegdRelistMonitor) monitor = plegd_relist_monitor_new(ENDPOINT, record_notify, NULL);
    gint64 now = 0;

    recorder.notify_blocked = TRUE;
    plegd_relist_monitor_update(monitor, NULL, 2, now += SEC);
    ck_assert(plegd_relist_monitor_is_ready(monitor));
    ck_assert_str_eq(last(recorder.notified), "READY=1\nSTATUS=relisting 2 pods");
    plegd_relist_monitor_update(monitor, NULL, 3, now += SEC);
    ck_assert_uint_eq(recorder.notified->len, 2);
    ck_assert_str_eq(last(recorder.notified), "READY=1\nSTATUS=relisting 3 pods");

    recorder.notify_blocked = FALSE;
    plegd_relist_monitor_update(monitor, NULL, 3, now += SEC);
    ck_assert_uint_eq(recorder.notified->len, 3);
    ck_assert_str_eq(last(recorder.notified), "READY=1\nSTATUS=relisting 3 pods");

    /* Sent: nothing more. */
    plegd_relist_monitor_update(monitor, NULL, 3, now += SEC);
    ck_assert_uint_eq(recorder.notified->len, 3);

    /* An unsent status alone is sent again too. */
    recorder.notify_blocked = TRUE;
    plegd_relist_monitor_update(monitor, NULL, 1, now += SEC);
    recorder.notify_blocked = FALSE;
    plegd_relist_monitor_update(monitor, NULL, 1, now += SEC);
    ck_assert_uint_eq(recorder.notified->len, 5);
    ck_assert_str_eq(last(recorder.notified), "STATUS=relisting 1 pod");
    plegd_relist_monitor_stopping(monitor);
    ck_assert_str_eq(last(recorder.notified), "STOPPING=1\nSTATUS=stopping");
}
END_TEST

/* ---- notifications that never block ---- */

START_TEST(test_notify_nonblocking)
{
    g_autofree char *dir = g_dir_make_tmp("plegd-units-XXXXXX", NULL);
    g_autofree char *path = g_build_filename(dir, "notify.sock", NULL);
    g_autofree char *abstract = g_strdup_printf("@plegd-units-%d", getpid());
    g_autoptr(GSocketAddress) address = g_unix_socket_address_new(path);
    g_autoptr(GSocket) socket = g_socket_new(G_SOCKET_FAMILY_UNIX, G_SOCKET_TYPE_DATAGRAM, 0, NULL);
    g_autoptr(GSocketAddress) abstract_address = g_unix_socket_address_new_with_type(
        abstract + 1, -1, G_UNIX_SOCKET_ADDRESS_ABSTRACT);
    g_autoptr(GSocket) abstract_socket =
        g_socket_new(G_SOCKET_FAMILY_UNIX, G_SOCKET_TYPE_DATAGRAM, 0, NULL);
    char buffer[64];
    int r = 0;
    guint n_sent = 0;

    ck_assert_int_eq(plegd_notify_nonblocking(NULL, "READY=1"), 0);
    ck_assert_int_eq(plegd_notify_nonblocking("", "READY=1"), 0);
    ck_assert_int_eq(plegd_notify_nonblocking("relative.sock", "READY=1"), -EAFNOSUPPORT);

    ck_assert(g_socket_bind(socket, address, FALSE, NULL));
    ck_assert_int_eq(plegd_notify_nonblocking(path, "READY=1"), 1);
    ck_assert_int_eq(g_socket_receive(socket, buffer, sizeof buffer, NULL, NULL), 7);
    ck_assert_int_eq(memcmp(buffer, "READY=1", 7), 0);

    /* Nobody reads: the queue fills, and then sending says so instead of waiting. */
    while (n_sent < 100000 && (r = plegd_notify_nonblocking(path, "STATUS=x")) == 1)
        n_sent++;
    ck_assert_int_eq(r, -EAGAIN);
    ck_assert_uint_gt(n_sent, 0);
    ck_assert_int_gt(g_socket_receive(socket, buffer, sizeof buffer, NULL, NULL), 0);
    ck_assert_int_eq(plegd_notify_nonblocking(path, "STATUS=y"), 1);

    ck_assert(g_socket_bind(abstract_socket, abstract_address, FALSE, NULL));
    ck_assert_int_eq(plegd_notify_nonblocking(abstract, "WATCHDOG=1"), 1);
    ck_assert_int_eq(g_socket_receive(abstract_socket, buffer, sizeof buffer, NULL, NULL), 10);

    g_unlink(path);
    g_rmdir(dir);
}
END_TEST

/* ---- the writer of stdout ---- */

typedef struct {
    GError *error;
    guint n_calls;
} OutputErrors;

static void
record_output_error(const GError *error, gpointer user_data)
{
    OutputErrors *errors = user_data;

    errors->n_calls++;
    g_clear_error(&errors->error);
    errors->error = g_error_copy(error);
}

static char *
read_all(int fd, gsize size)
{
    g_autoptr(GString) text = g_string_new(NULL);
    gint64 deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;

    while (text->len < size && g_get_monotonic_time() < deadline) {
        char buffer[4096];
        ssize_t n = read(fd, buffer, sizeof buffer);

        ck_assert_int_gt(n, 0);
        g_string_append_len(text, buffer, n);
    }
    return g_string_free(g_steal_pointer(&text), FALSE);
}

START_TEST(test_output_lines_in_order)
{
    g_autoptr(GMainContext) context = g_main_context_new();
    g_autoptr(GString) expected = g_string_new(NULL);
    g_autoptr(PlegdOutput) output = NULL;
    OutputErrors errors = {0};
    g_autofree char *written = NULL;
    int fds[2];

    ck_assert_int_eq(pipe(fds), 0);
    output = plegd_output_new(fds[1], 1024 * 1024, context, record_output_error, &errors);
    for (int i = 0; i < 2000; i++) {
        g_autofree char *line = g_strdup_printf("{\"n\":%d}", i);
        g_autoptr(GError) error = NULL;

        ck_assert(plegd_output_write_line(output, line, &error));
        g_string_append_printf(expected, "%s\n", line);
    }
    /* More than a pipe holds: read while it writes. */
    written = read_all(fds[0], expected->len);
    ck_assert_str_eq(written, expected->str);
    ck_assert(plegd_output_flush(output, 10 * G_USEC_PER_SEC));
    ck_assert_uint_eq(plegd_output_get_backlog(output), 0);
    g_clear_pointer(&output, plegd_output_free);
    while (g_main_context_iteration(context, FALSE))
        ;
    ck_assert_uint_eq(errors.n_calls, 0);
    close(fds[0]);
    close(fds[1]);
}
END_TEST

START_TEST(test_output_broken_pipe)
{
    g_autoptr(GMainContext) context = g_main_context_new();
    g_autoptr(PlegdOutput) output = NULL;
    g_autoptr(GError) error = NULL;
    OutputErrors errors = {0};
    gint64 deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
    int fds[2];

    signal(SIGPIPE, SIG_IGN);
    ck_assert_int_eq(pipe(fds), 0);
    close(fds[0]);
    output = plegd_output_new(fds[1], 1024 * 1024, context, record_output_error, &errors);
    ck_assert(plegd_output_write_line(output, "{}", &error));

    /* Reported once, in the context given. */
    ck_assert(!plegd_output_flush(output, 10 * G_USEC_PER_SEC));
    while (errors.n_calls == 0 && g_get_monotonic_time() < deadline)
        g_main_context_iteration(context, FALSE);
    ck_assert_uint_eq(errors.n_calls, 1);
    ck_assert_msg(g_error_matches(errors.error, G_IO_ERROR, G_IO_ERROR_BROKEN_PIPE), "%s",
                  errors.error->message);

    /* Later lines are dropped quietly. */
    ck_assert(plegd_output_write_line(output, "{}", &error));
    ck_assert_uint_eq(plegd_output_get_backlog(output), 0);
    while (g_main_context_iteration(context, FALSE))
        ;
    ck_assert_uint_eq(errors.n_calls, 1);
    g_clear_error(&errors.error);
    close(fds[1]);
}
END_TEST

/* Nobody reads: queuing never blocks, the backlog is bounded, and freeing does not wait. */
START_TEST(test_output_stalled_reader)
{
    g_autoptr(GMainContext) context = g_main_context_new();
    g_autoptr(PlegdOutput) output = NULL;
    g_autoptr(GError) error = NULL;
    g_autofree char *line = g_strnfill(1023, 'x');
    OutputErrors errors = {0};
    gsize max_backlog = 64 * 1024;
    guint n_queued = 0;
    guint n_warnings = 0;
    int fds[2];

    signal(SIGPIPE, SIG_IGN);
    ck_assert_int_eq(pipe(fds), 0);
    ck_assert_int_eq(fcntl(fds[1], F_SETPIPE_SZ, 4096), 4096);
    output = plegd_output_new(fds[1], max_backlog, context, record_output_error, &errors);

    while (n_queued < 1000 && plegd_output_write_line(output, line, &error))
        n_queued++;
    ck_assert_msg(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_NO_SPACE), "%s",
                  error ? error->message : "no error");
    /* What the pipe took, plus the maximum. */
    ck_assert_uint_le(n_queued, (4096 + max_backlog) / 1024 + 1);
    ck_assert_uint_le(plegd_output_get_backlog(output), max_backlog);
    ck_assert(!plegd_output_flush(output, 50 * 1000));

    /* Passing an eighth of the maximum was logged, once. */
    for (guint i = 0; i < recorder.logged->len; i++) {
        if (strstr(g_ptr_array_index(recorder.logged, i), "stdout is not read fast enough"))
            n_warnings++;
    }
    ck_assert_uint_eq(n_warnings, 1);

    g_clear_pointer(&output, plegd_output_free);
    /* The writer left behind sees EPIPE and ends. */
    close(fds[0]);
    ck_assert_uint_eq(errors.n_calls, 0);
}
END_TEST

/* ---- plugin states ---- */

static char *
describe(const char *name, const char *path, PlegPluginState state, GError *error,
         const char *feature_gate, const char *reason_message)
{
    PlegPluginInfo info = {
        .name = (char *)name,
        .path = (char *)path,
        .state = state,
        .error = error,
        .feature_gate = (char *)feature_gate,
        .reason_message = (char *)reason_message,
    };

    return plegd_describe_plugin(&info);
}

START_TEST(test_describe_plugin)
{
    g_autoptr(GError) error =
        g_error_new_literal(PLEG_HOST_ERROR, PLEG_HOST_ERROR_PLUGIN_OPEN, "not a shared object");
    g_autoptr(GError) local_error = NULL;
    g_autofree char *dir = g_dir_make_tmp("plegd-units-XXXXXX", &local_error);
    g_autofree char *key_path = NULL;
    g_autofree char *module_path = NULL;
    g_autofree char *text = NULL;

    ck_assert_ptr_nonnull(dir);
    key_path = g_build_filename(dir, "evented.plugin", NULL);
    module_path = g_build_filename(dir, "libpleg-evented.so", NULL);
    /* A .plugin file that names another gate: plegd takes the host's word, not the file's. */
    ck_assert(g_file_set_contents(key_path,
                                  "[Plugin]\nName=evented\nModule=libpleg-evented.so\n"
                                  "FeatureGate=SomethingElse\n",
                                  -1, NULL));

    text = describe("evented", module_path, PLEG_PLUGIN_STATE_RUNNING, NULL, "EventedPLEG", NULL);
    ck_assert_str_eq(text, "running");
    g_free(text);
    text = describe("evented", module_path, PLEG_PLUGIN_STATE_STOPPED, NULL, "EventedPLEG", NULL);
    ck_assert_str_eq(text, "stopped");
    g_free(text);
    text = describe("evented", module_path, PLEG_PLUGIN_STATE_DISABLED_BY_NAME, NULL, NULL,
                    "disabled by name");
    ck_assert_str_eq(text, "disabled (--disable-plugins)");
    g_free(text);
    /* No reason in words: the error's message as it is. */
    text = describe("evented", module_path, PLEG_PLUGIN_STATE_FAILED, error, NULL, NULL);
    ck_assert_str_eq(text, "failed: not a shared object");
    g_free(text);
    g_clear_error(&error);
    /* The reason in words, which leaves out the name and path that plegd's line says. */
    error = g_error_new(PLEG_HOST_ERROR, PLEG_HOST_ERROR_PLUGIN_ABI,
                        "plugin evented (%s): ABI major 2, host speaks 1", module_path);
    text = describe("evented", module_path, PLEG_PLUGIN_STATE_FAILED, error, NULL,
                    "ABI major 2, host speaks 1");
    ck_assert_str_eq(text, "failed: ABI major 2, host speaks 1");
    g_free(text);
    text = describe("evented", module_path, PLEG_PLUGIN_STATE_FAILED, NULL, NULL, NULL);
    ck_assert_str_eq(text, "failed: unknown error");
    g_free(text);

    /* The gate is the one the host reports, whatever the path names. */
    text = describe("evented", module_path, PLEG_PLUGIN_STATE_DISABLED_GATE, NULL, "EventedPLEG",
                    "feature gate EventedPLEG is off");
    ck_assert_str_eq(text, "disabled (feature gate EventedPLEG off)");
    g_free(text);
    text = describe("evented", key_path, PLEG_PLUGIN_STATE_DISABLED_GATE, NULL, "EventedPLEG",
                    "feature gate EventedPLEG is off");
    ck_assert_str_eq(text, "disabled (feature gate EventedPLEG off)");
    g_free(text);
    text = describe("evented", NULL, PLEG_PLUGIN_STATE_DISABLED_GATE, NULL, NULL, NULL);
    ck_assert_str_eq(text, "disabled (feature gate off)");

    g_unlink(key_path);
    g_rmdir(dir);
}
END_TEST

/* ---- operator warnings and plugin folders ---- */

static GLogWriterOutput
capture_writer(GLogLevelFlags level, const GLogField *fields, gsize n_fields, gpointer data)
{
    g_ptr_array_set_size(captured_fields, 0);
    g_ptr_array_add(captured_fields, g_strdup_printf("LEVEL=%d", level & G_LOG_LEVEL_MASK));
    for (gsize i = 0; i < n_fields; i++) {
        if (fields[i].length < 0)
            g_ptr_array_add(captured_fields,
                            g_strdup_printf("%s=%s", fields[i].key, (const char *)fields[i].value));
    }
    return G_LOG_WRITER_HANDLED;
}

static guint
count_fields(const char *field)
{
    guint n = 0;

    for (guint i = 0; i < captured_fields->len; i++)
        n += g_str_equal(g_ptr_array_index(captured_fields, i), field);
    return n;
}

/* Message level (GLib's warning level means a bug), journald priority 4, once. */
START_TEST(test_log_warning)
{
    captured_fields = g_ptr_array_new_with_free_func(g_free);
    plegd_log_warning("plugin folder %s does not exist", "/x");
    ck_assert_uint_eq(count_fields("MESSAGE=warning: plugin folder /x does not exist"), 1);
    ck_assert_uint_eq(count_fields("PRIORITY=4"), 1);
    ck_assert_uint_eq(count_fields("GLIB_DOMAIN=plegd"), 1);
    {
        g_autofree char *level = g_strdup_printf("LEVEL=%d", G_LOG_LEVEL_MESSAGE);

        ck_assert_uint_eq(count_fields(level), 1);
    }
    g_clear_pointer(&captured_fields, g_ptr_array_unref);
}
END_TEST

START_TEST(test_check_plugin_dir)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *dir = g_dir_make_tmp("plegd-units-XXXXXX", &error);
    g_autofree char *file = g_build_filename(dir, "a.plugin", NULL);
    g_autofree char *missing = g_build_filename(dir, "missing", NULL);
    g_autofree char *empty = plegd_check_plugin_dir(dir);
    g_autofree char *none = plegd_check_plugin_dir(missing);
    g_autofree char *not_dir = NULL;
    g_autofree char *fine = NULL;

    ck_assert_str_eq(empty, "has no .plugin files");
    ck_assert_str_eq(none, "does not exist");
    ck_assert(g_file_set_contents(file, "[Plugin]\n", -1, &error));
    not_dir = plegd_check_plugin_dir(file);
    ck_assert_str_eq(not_dir, "is not a folder");
    fine = plegd_check_plugin_dir(dir);
    ck_assert_ptr_null(fine);
    g_unlink(file);
    g_rmdir(dir);
}
END_TEST

/* Only the plegd of this build tree takes the tree's plugins. */
START_TEST(test_default_plugin_dir)
{
    const char *origin = NULL;
    const char *dir = plegd_default_plugin_dir("/usr/local/bin/plegd", &origin);

    ck_assert_str_eq(dir, PLEG_PLUGIN_DIR);
    ck_assert_str_eq(origin, "the installed plugin folder");
    dir = plegd_default_plugin_dir(NULL, &origin);
    ck_assert_str_eq(dir, PLEG_PLUGIN_DIR);
    dir = plegd_default_plugin_dir(g_getenv("PLEGD"), &origin);
    ck_assert_str_eq(origin, "the build tree's plugins");
    ck_assert_msg(strstr(dir, "/plugins/watchdog"), "%s", dir);
}
END_TEST

/* ---- the event ring (GET /events?since=) ---- */

/* The event of every line pushed here: the ring keeps its key, which these tests do not read. */
static const PlegPodLifecycleEvent ring_event = {
    .pod_uid = (char *)"uid-ring",
    .type = PLEG_CONTAINER_STARTED,
    .container_id = (char *)"c0ffee",
};

static GBytes *
ring_line(guint64 n)
{
    char *text = g_strdup_printf("line %" G_GUINT64_FORMAT "\n", n);

    return g_bytes_new_take(text, strlen(text));
}

static void
assert_ring_holds(PlegdEventRing *ring, guint64 seq, gboolean held)
{
    GBytes *line = plegd_event_ring_lookup(ring, seq);
    g_autofree char *expected = g_strdup_printf("line %" G_GUINT64_FORMAT "\n", seq);

    if (!held) {
        ck_assert_msg(line == NULL, "seq %" G_GUINT64_FORMAT " should be gone", seq);
        return;
    }
    ck_assert_msg(line != NULL, "seq %" G_GUINT64_FORMAT " missing", seq);
    ck_assert_uint_eq(g_bytes_get_size(line), strlen(expected));
    ck_assert(memcmp(g_bytes_get_data(line, NULL), expected, strlen(expected)) == 0);
}

START_TEST(test_ring_seq_and_eviction)
{
    g_autoptr(PlegdEventRing) ring = plegd_event_ring_new(3);
    guint64 evicted = 99;

    ck_assert_uint_eq(plegd_event_ring_get_next_seq(ring), 1);
    ck_assert_uint_eq(plegd_event_ring_get_oldest_seq(ring), 1);
    ck_assert_ptr_null(plegd_event_ring_lookup(ring, 0));
    ck_assert_ptr_null(plegd_event_ring_lookup(ring, 1));

    for (guint64 n = 1; n <= 3; n++) {
        g_autoptr(GBytes) line = ring_line(n);

        ck_assert_uint_eq(plegd_event_ring_push(ring, line, &ring_event, &evicted), n);
        ck_assert_uint_eq(evicted, 0);
    }
    for (guint64 n = 1; n <= 3; n++)
        assert_ring_holds(ring, n, TRUE);
    assert_ring_holds(ring, 4, FALSE);

    /* Full: each push drops the oldest, and says which. */
    for (guint64 n = 4; n <= 7; n++) {
        g_autoptr(GBytes) line = ring_line(n);

        ck_assert_uint_eq(plegd_event_ring_push(ring, line, &ring_event, &evicted), n);
        ck_assert_uint_eq(evicted, n - 3);
    }
    ck_assert_uint_eq(plegd_event_ring_get_oldest_seq(ring), 5);
    ck_assert_uint_eq(plegd_event_ring_get_next_seq(ring), 8);
    assert_ring_holds(ring, 4, FALSE);
    for (guint64 n = 5; n <= 7; n++)
        assert_ring_holds(ring, n, TRUE);
    assert_ring_holds(ring, 8, FALSE);
}
END_TEST

START_TEST(test_ring_check_since)
{
    g_autoptr(PlegdEventRing) ring = plegd_event_ring_new(3);
    g_autoptr(GError) error = NULL;

    /* Nothing yet: since=0 waits for seq 1; anything newer was never assigned. */
    ck_assert(plegd_event_ring_check_since(ring, 0, NULL));
    ck_assert(!plegd_event_ring_check_since(ring, 1, &error));
    ck_assert(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND));
    ck_assert_msg(strstr(error->message, "seq 1 was never assigned: the newest event is seq 0"),
                  "%s", error->message);
    g_clear_error(&error);

    for (guint64 n = 1; n <= 5; n++) {
        g_autoptr(GBytes) line = ring_line(n);

        plegd_event_ring_push(ring, line, &ring_event, NULL);
    }
    /* Holds 3, 4, 5: after 2 the client misses nothing, after 1 it would miss 2. */
    ck_assert(plegd_event_ring_check_since(ring, 2, NULL));
    ck_assert(plegd_event_ring_check_since(ring, 5, NULL));
    ck_assert(!plegd_event_ring_check_since(ring, 1, &error));
    ck_assert_msg(strstr(error->message, "events after seq 1 are no longer kept: the oldest event "
                                         "kept is seq 3"),
                  "%s", error->message);
    g_clear_error(&error);
    ck_assert(!plegd_event_ring_check_since(ring, 0, &error));
    g_clear_error(&error);
    ck_assert(!plegd_event_ring_check_since(ring, 6, &error));
    ck_assert_msg(strstr(error->message, "newest event is seq 5"), "%s", error->message);
    g_clear_error(&error);
    ck_assert(!plegd_event_ring_check_since(ring, G_MAXUINT64, &error));
}
END_TEST

START_TEST(test_json_seq_first)
{
    PlegPodLifecycleEvent event = {
        .pod_uid = "uid-1",
        .type = PLEG_CONTAINER_STARTED,
        .container_id = "c0ffee",
        .relist_source = PLEG_RELIST_SOURCE_GLOBAL,
        .time_ns = G_GINT64_CONSTANT(1795966735123456789),
    };
    g_autofree char *plain = plegd_event_to_json(&event);
    g_autofree char *line = plegd_event_to_json_with_seq(&event, 42);
    g_autofree char *expected = g_strconcat("{\"seq\":42,", plain + 1, NULL);

    /* The same object as without, the seq in front. */
    ck_assert_str_eq(line, expected);
}
END_TEST

/* plegd's event line as JSON-GLib 1.6 wrote it before plegd wrote it directly: the reference the
 * writer must match byte for byte. */
static void
reference_add_string(JsonBuilder *builder, const char *name, const char *value)
{
    g_autofree char *valid = NULL;

    json_builder_set_member_name(builder, name);
    if (value && !g_utf8_validate(value, -1, NULL))
        value = valid = g_utf8_make_valid(value, -1);
    json_builder_add_string_value(builder, value);
}

static void
reference_add_time(JsonBuilder *builder, const char *name, gint64 unix_ns)
{
    g_autofree char *text = pleg_time_format_rfc3339(unix_ns);

    reference_add_string(builder, name, text);
}

static char *
reference_json(const PlegPodLifecycleEvent *event, guint64 seq)
{
    const PlegEventDetails *details = &event->details;
    g_autoptr(JsonBuilder) builder = json_builder_new();
    g_autoptr(JsonGenerator) generator = json_generator_new();
    g_autoptr(JsonNode) root = NULL;
    g_autofree char *text = NULL;
    GString *fixed = g_string_new(NULL);

    json_builder_begin_object(builder);
    if (seq > 0) {
        json_builder_set_member_name(builder, "seq");
        json_builder_add_int_value(builder, (gint64)seq);
    }
    reference_add_time(builder, "time", event->time_ns);
    reference_add_string(builder, "pod_uid", event->pod_uid);
    if (details->pod_namespace)
        reference_add_string(builder, "namespace", details->pod_namespace);
    if (details->pod_name)
        reference_add_string(builder, "pod", details->pod_name);
    reference_add_string(builder, "type", pleg_pod_lifecycle_event_type_to_string(event->type));
    if (event->type != PLEG_POD_SYNC) {
        if (event->container_id)
            reference_add_string(builder, "container_id", event->container_id);
        if (!details->sandbox && details->container_name)
            reference_add_string(builder, "container", details->container_name);
        json_builder_set_member_name(builder, "sandbox");
        json_builder_add_boolean_value(builder, details->sandbox);
        json_builder_set_member_name(builder, "attempt");
        json_builder_add_int_value(builder, details->attempt);
        if (details->image)
            reference_add_string(builder, "image", details->image);
    }
    reference_add_string(builder, "relist_source",
                         pleg_relist_source_to_string(event->relist_source));
    if (event->type == PLEG_CONTAINER_STARTED && details->started_at_ns != 0)
        reference_add_time(builder, "started_at", details->started_at_ns);
    if (event->type == PLEG_CONTAINER_DIED && event->has_exit) {
        json_builder_set_member_name(builder, "exit_code");
        json_builder_add_int_value(builder, event->exit_code);
        if (event->reason)
            reference_add_string(builder, "reason", event->reason);
        if (event->finished_at_ns != 0)
            reference_add_time(builder, "finished_at", event->finished_at_ns);
    }
    json_builder_end_object(builder);
    root = json_builder_get_root(builder);
    json_generator_set_root(generator, root);
    text = json_generator_to_data(generator, NULL);

    /* JSON-GLib 1.6 leaves U+001F raw, which is not JSON: the one byte plegd writes otherwise. */
    for (const char *p = text; *p; p++) {
        if (*p == '\x1f')
            g_string_append(fixed, "\\u001f");
        else
            g_string_append_c(fixed, *p);
    }
    return g_string_free(fixed, FALSE);
}

static void
assert_as_reference(const PlegPodLifecycleEvent *event, guint64 seq)
{
    g_autofree char *line =
        seq > 0 ? plegd_event_to_json_with_seq(event, seq) : plegd_event_to_json(event);
    g_autofree char *expected = reference_json(event, seq);
    g_autoptr(JsonObject) object = NULL;

    ck_assert_str_eq(line, expected);
    object = parse_line(line);
}

/* Every byte in every string member, and every shape of event, as JSON-GLib wrote them. */
START_TEST(test_json_as_json_glib)
{
    static const PlegPodLifecycleEventType types[] = {
        PLEG_CONTAINER_STARTED, PLEG_CONTAINER_DIED, PLEG_CONTAINER_REMOVED,
        PLEG_CONTAINER_CHANGED, PLEG_POD_SYNC,
    };
    static const guint64 seqs[] = {0, 1, 42, G_MAXINT64, G_MAXUINT64};
    static const gint64 times[] = {
        0, 1, -1, G_GINT64_CONSTANT(1795966735123456789), G_MAXINT64, G_MININT64};
    static const int exit_codes[] = {0, 1, -1, 137, G_MAXINT, G_MININT};
    g_autoptr(GRand) rand = g_rand_new_with_seed(10);

    /* Each byte alone and at every place of a word, as the writer copies text a word at a time. */
    for (guint b = 1; b < 256; b++) {
        for (guint at = 0; at < 17; at++) {
            char text[] = "abcdefghijklmnopq";
            char alone[] = {(char)b, 0};
            PlegPodLifecycleEvent event = {
                .pod_uid = text,
                .type = PLEG_CONTAINER_DIED,
                .container_id = text + at / 2,
                .relist_source = PLEG_RELIST_SOURCE_GLOBAL,
                .time_ns = 5,
                .has_exit = TRUE,
                .exit_code = 1,
                .reason = alone,
            };

            text[at] = (char)b;
            assert_as_reference(&event, b);
        }
    }
    for (gsize t = 0; t < G_N_ELEMENTS(types); t++)
        for (PlegRelistSource src = 0; src < PLEG_RELIST_SOURCE_N; src++)
            for (guint shape = 0; shape < 16; shape++) {
                PlegPodLifecycleEvent event = {
                    .pod_uid = shape & 1 ? NULL : (char *)"uid-1",
                    .type = types[t],
                    .container_id = shape & 2 ? NULL : (char *)"c0ffee",
                    .relist_source = src,
                    .time_ns = times[shape % G_N_ELEMENTS(times)],
                    .has_exit = (shape & 4) != 0,
                    .exit_code = exit_codes[shape % G_N_ELEMENTS(exit_codes)],
                    .reason = shape & 8 ? NULL : (char *)"OOMKilled",
                    .finished_at_ns = shape & 3 ? 0 : times[(shape + 1) % G_N_ELEMENTS(times)],
                };

                assert_as_reference(&event, seqs[shape % G_N_ELEMENTS(seqs)]);
            }
    /* The same shapes with names: each member present or not, a sandbox or not, a start. */
    for (gsize t = 0; t < G_N_ELEMENTS(types); t++)
        for (guint shape = 0; shape < 128; shape++) {
            PlegPodLifecycleEvent event = {
                .pod_uid = (char *)"8d3f0c1e-5a1e-4c0d-9b7f-0000000000a1",
                .type = types[t],
                .container_id = shape & 64 ? NULL : (char *)"c0ffee",
                .relist_source = shape % PLEG_RELIST_SOURCE_N,
                .time_ns = times[shape % G_N_ELEMENTS(times)],
                .has_exit = (shape & 2) != 0,
                .exit_code = exit_codes[shape % G_N_ELEMENTS(exit_codes)],
                .reason = shape & 4 ? NULL : (char *)"OOMKilled",
                .finished_at_ns = shape & 8 ? 0 : times[(shape + 1) % G_N_ELEMENTS(times)],
                .details =
                    {
                        .pod_namespace = shape & 1 ? NULL : (char *)"kube-system",
                        .pod_name = shape & 2 ? NULL : (char *)"coredns-7db6d8ff4d-x2x9q",
                        .container_name = shape & 4 ? NULL : (char *)"coredns",
                        .attempt = shape & 8 ? 0 : (guint32)shape * 1000003u,
                        .image = shape & 16 ? NULL : (char *)"registry.k8s.io/coredns/coredns:v1.11.1",
                        .sandbox = (shape & 32) != 0,
                        .started_at_ns = shape & 8 ? 0 : times[(shape + 2) % G_N_ELEMENTS(times)],
                    },
            };

            assert_as_reference(&event, seqs[shape % G_N_ELEMENTS(seqs)]);
        }
    /* Random bytes, most of them not UTF-8, and random valid text. */
    for (guint i = 0; i < 2000; i++) {
        char bytes[24];
        g_autofree char *valid = NULL;
        PlegPodLifecycleEvent event = {
            .type = PLEG_CONTAINER_DIED,
            .relist_source = PLEG_RELIST_SOURCE_EVENTED_PLEG,
            .time_ns = (gint64)(((guint64)g_rand_int(rand) << 32) | g_rand_int(rand)),
            .has_exit = TRUE,
            .exit_code = (int)g_rand_int(rand),
            .finished_at_ns = g_rand_int(rand),
        };
        gsize n = g_rand_int_range(rand, 0, sizeof(bytes));

        for (gsize k = 0; k < n; k++)
            bytes[k] = (char)g_rand_int_range(rand, 1, 256);
        bytes[n] = 0;
        valid = g_utf8_make_valid(bytes, -1);
        event.pod_uid = bytes;
        event.container_id = valid;
        event.reason = i % 2 ? bytes : valid;
        event.details.pod_namespace = i % 3 ? valid : bytes;
        event.details.pod_name = i % 2 ? valid : bytes;
        event.details.container_name = i % 5 ? bytes : NULL;
        event.details.image = i % 2 ? bytes : valid;
        event.details.attempt = g_rand_int(rand);
        assert_as_reference(&event, i);
    }
}
END_TEST

/* A line holds no raw control character, so strict JSON parsers take it. */
START_TEST(test_json_control_characters_escaped)
{
    char all[32];
    PlegPodLifecycleEvent event = {
        .pod_uid = all,
        .type = PLEG_POD_SYNC,
        .relist_source = PLEG_RELIST_SOURCE_GLOBAL,
        .time_ns = 5,
    };
    g_autofree char *line = NULL;
    g_autoptr(JsonObject) object = NULL;

    for (int c = 1; c < 32; c++)
        all[c - 1] = (char)c;
    all[31] = 0;
    line = plegd_event_to_json(&event);
    for (const char *p = line; *p; p++)
        ck_assert_msg((guchar)*p >= 0x20, "raw control character 0x%02x in %s", *p, line);
    ck_assert(strstr(line, "\"\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n"
                           "\\u000b\\f\\r\\u000e"));
    ck_assert(strstr(line, "\\u001e\\u001f\""));
    object = parse_line(line);
    assert_string_member(object, "pod_uid", all);
}
END_TEST

/* ---- the journal ---- */

/* An entry's fields, one a line. */
static char *
entry_text(const PlegPodLifecycleEvent *event, guint64 seq)
{
    g_autoptr(PlegdJournalEntry) entry = plegd_journal_entry_new(event, seq);
    GString *text = g_string_new(NULL);
    const struct iovec *fields;
    int n_fields;

    fields = plegd_journal_entry_get_fields(entry, &n_fields);
    for (int i = 0; i < n_fields; i++) {
        g_string_append_len(text, fields[i].iov_base, fields[i].iov_len);
        g_string_append_c(text, '\n');
    }
    return g_string_free(text, FALSE);
}

START_TEST(test_journal_entry_fields)
{
    PlegPodLifecycleEvent event = sample_died_event();
    g_autofree char *time = pleg_time_format_rfc3339(event.time_ns);
    g_autofree char *finished = pleg_time_format_rfc3339(event.finished_at_ns);
    g_autofree char *expected = NULL;
    g_autofree char *text = NULL;

    event.exit_code = 137;
    event.reason = (char *)"OOMKilled";
    event.details = sample_nginx_details();
    text = entry_text(&event, 9);
    expected = g_strdup_printf("MESSAGE=ContainerDied shop/web container nginx attempt 3 exited "
                               "137 (OOMKilled)\n"
                               "MESSAGE_ID=ff9250e6f84a497083e4cf0c74b23978\n"
                               "PRIORITY=6\n"
                               "SYSLOG_IDENTIFIER=plegd\n"
                               "PLEG_SEQ=9\n"
                               "PLEG_TYPE=ContainerDied\n"
                               "POD_NAMESPACE=shop\n"
                               "POD_NAME=web\n"
                               "POD_UID=uid-1\n"
                               "CONTAINER_NAME=nginx\n"
                               "CONTAINER_ID=c0ffee\n"
                               "PLEG_SANDBOX=false\n"
                               "PLEG_ATTEMPT=3\n"
                               "PLEG_IMAGE=docker.io/library/nginx:1.27\n"
                               "PLEG_EXIT_CODE=137\n"
                               "PLEG_REASON=OOMKilled\n"
                               "PLEG_FINISHED_AT=%s\n"
                               "PLEG_RELIST_SOURCE=post_sync\n"
                               "PLEG_TIME=%s\n",
                               finished, time);
    ck_assert_str_eq(text, expected);
}
END_TEST

/* What each kind of event says, and what it leaves out. */
START_TEST(test_journal_entry_messages)
{
    PlegPodLifecycleEvent event = sample_died_event();
    g_autofree char *started_at = NULL;
    g_autofree char *text = NULL;

    /* No names: the pod UID and the container ID; a death without its exit. */
    event.has_exit = FALSE;
    event.type = PLEG_CONTAINER_REMOVED;
    text = entry_text(&event, 1);
    ck_assert_msg(g_str_has_prefix(text, "MESSAGE=ContainerRemoved uid-1 container c0ffee\n"), "%s",
                  text);
    ck_assert(strstr(text, "MESSAGE_ID=ca920fe301a64dedb30c17e4b7e66672\n"));
    ck_assert(!strstr(text, "POD_NAME="));
    ck_assert(!strstr(text, "CONTAINER_NAME="));
    ck_assert(!strstr(text, "PLEG_EXIT_CODE="));
    ck_assert(strstr(text, "PLEG_SANDBOX=false\nPLEG_ATTEMPT=0\n"));
    g_clear_pointer(&text, g_free);

    /* A sandbox, with the name a runtime may give it; started_at is a container's. */
    event.type = PLEG_CONTAINER_STARTED;
    event.details = sample_sandbox_details();
    text = entry_text(&event, 2);
    ck_assert_msg(g_str_has_prefix(text, "MESSAGE=ContainerStarted shop/web sandbox attempt 1\n"),
                  "%s", text);
    ck_assert(strstr(text, "MESSAGE_ID=eb875ddb9d3f4c1591690f9d77effef2\n"));
    ck_assert(strstr(text, "CONTAINER_ID=c0ffee\nPLEG_SANDBOX=true\nPLEG_ATTEMPT=1\n"));
    ck_assert(!strstr(text, "CONTAINER_NAME="));
    ck_assert(!strstr(text, "PLEG_STARTED_AT="));
    g_clear_pointer(&text, g_free);

    event.details.sandbox = FALSE;
    event.details.container_name = (char *)"nginx";
    event.details.attempt = 0;
    event.details.started_at_ns = G_GINT64_CONSTANT(1795966735000000000);
    started_at = pleg_time_format_rfc3339(event.details.started_at_ns);
    text = entry_text(&event, 3);
    ck_assert_msg(g_str_has_prefix(text, "MESSAGE=ContainerStarted shop/web container nginx\n"), "%s",
                  text);
    ck_assert(strstr(text, "CONTAINER_NAME=nginx\n"));
    ck_assert(strstr(text, started_at));
    g_clear_pointer(&text, g_free);

    /* PodSync: the pod, nothing of a container. */
    event.type = PLEG_POD_SYNC;
    event.container_id = NULL;
    text = entry_text(&event, 4);
    ck_assert_msg(g_str_has_prefix(text, "MESSAGE=PodSync shop/web\n"), "%s", text);
    ck_assert(strstr(text, "MESSAGE_ID=43e4cbc0b2dc43c8b2d82ae6c8c904de\n"));
    ck_assert(!strstr(text, "CONTAINER_"));
    ck_assert(!strstr(text, "PLEG_SANDBOX="));
    ck_assert(!strstr(text, "PLEG_ATTEMPT="));
    ck_assert(!strstr(text, "PLEG_STARTED_AT="));
    g_clear_pointer(&text, g_free);

    /* The runtime's bytes: escaped in the message, as they are in the fields. */
    event = sample_died_event();
    event.reason = (char *)"Killed\nby \x1b[31moom";
    event.details.pod_namespace = (char *)"shop";
    event.details.pod_name = (char *)"we\nb";
    text = entry_text(&event, 5);
    ck_assert_msg(g_str_has_prefix(text, "MESSAGE=ContainerDied shop/we\\nb container c0ffee exited 7 "
                                         "(Killed\\nby \\x1b[31moom)\n"),
                  "%s", text);
    ck_assert(strstr(text, "\nPOD_NAME=we\nb\n"));
    ck_assert(strstr(text, "\nPLEG_REASON=Killed\nby \x1b[31moom\n"));

    /* Shown as pleg_log_text() shows it: cut, a backslash doubled; whole in the field. */
    for (gsize len = PLEG_LOG_TEXT_MAX - 1; len <= PLEG_LOG_TEXT_MAX + 1; len++) {
        g_autofree char *name = g_strnfill(len, 'a');
        g_autofree char *shown = pleg_log_text(name, -1, 0);
        g_autofree char *message = g_strdup_printf("MESSAGE=ContainerDied shop/%s container", shown);
        g_autofree char *field = g_strdup_printf("\nPOD_NAME=%s\n", name);

        g_clear_pointer(&text, g_free);
        event.details.pod_name = name;
        text = entry_text(&event, 6);
        ck_assert_msg(g_str_has_prefix(text, message), "%s", text);
        ck_assert(strstr(text, field));
    }
    g_clear_pointer(&text, g_free);
    event.details.pod_name = (char *)"a\\b";
    text = entry_text(&event, 7);
    ck_assert_msg(g_str_has_prefix(text, "MESSAGE=ContainerDied shop/a\\\\b container"), "%s", text);
}
END_TEST

/* A stand-in for sd_journal_sendv(): answers @result, or waits while @blocked. */
typedef struct {
    GMutex lock;
    GCond cond;
    gboolean blocked;
    guint entered;
    int result;
} FakeJournal;

static int
fake_send(const struct iovec *fields, int n_fields, gpointer user_data)
{
    FakeJournal *fake = user_data;
    int result;

    g_mutex_lock(&fake->lock);
    fake->entered++;
    g_cond_broadcast(&fake->cond);
    while (fake->blocked)
        g_cond_wait(&fake->cond, &fake->lock);
    result = fake->result;
    g_mutex_unlock(&fake->lock);
    return result;
}

static double
dropped(PlegMetricsRegistry *registry, const char *reason)
{
    const char *const value[] = {reason};

    return pleg_metric_get(pleg_metrics_lookup(registry, "plegd_journal_events_dropped_total"),
                           value);
}

/* A journald that does not read, then none, then one that fails: plegd's side never waits,
 * counts each drop, and says so once for each cause (then at most once a minute). */
START_TEST(test_journal_drops)
{
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    FakeJournal fake = {.blocked = TRUE};
    PlegPodLifecycleEvent event = sample_died_event();
    g_autoptr(PlegdJournal) journal = plegd_journal_new(2, registry, fake_send, &fake);
    gint64 deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;

    /* One in the sender, two queued, three dropped. */
    plegd_journal_publish(journal, &event, 1);
    g_mutex_lock(&fake.lock);
    while (fake.entered == 0)
        ck_assert(g_cond_wait_until(&fake.cond, &fake.lock, deadline));
    g_mutex_unlock(&fake.lock);
    for (guint64 seq = 2; seq <= 6; seq++)
        plegd_journal_publish(journal, &event, seq);
    ck_assert_uint_eq(plegd_journal_get_queued(journal), 2);
    ck_assert(dropped(registry, "queue_full") == 3);
    ck_assert(!plegd_journal_flush(journal, 1000));
    ck_assert_uint_eq(recorder.logged->len, 1);
    ck_assert_msg(strstr(last(recorder.logged), "cannot send events to the journal: journald does "
                                                "not keep up: 2 events wait to be sent"),
                  "%s", last(recorder.logged));

    g_mutex_lock(&fake.lock);
    fake.blocked = FALSE;
    g_cond_broadcast(&fake.cond);
    g_mutex_unlock(&fake.lock);
    ck_assert(plegd_journal_flush(journal, 10 * G_USEC_PER_SEC));
    ck_assert(pleg_metric_get(pleg_metrics_lookup(registry, "plegd_journal_events_total"), NULL) ==
              3);
    ck_assert_uint_eq(recorder.logged->len, 2);
    ck_assert_msg(strstr(last(recorder.logged), "the journal takes events again (3 dropped"), "%s",
                  last(recorder.logged));

    /* No socket: a new cause, said at once; the same again is not. */
    fake.result = -ENOENT;
    plegd_journal_publish(journal, &event, 7);
    plegd_journal_publish(journal, &event, 8);
    ck_assert(plegd_journal_flush(journal, 10 * G_USEC_PER_SEC));
    ck_assert(dropped(registry, "no_journal") == 2);
    ck_assert_uint_eq(recorder.logged->len, 3);
    ck_assert_msg(strstr(last(recorder.logged), "no journald listens on "
                                                "/run/systemd/journal/socket (No such file or "
                                                "directory)"),
                  "%s", last(recorder.logged));

    fake.result = -EAGAIN;
    plegd_journal_publish(journal, &event, 9);
    ck_assert(plegd_journal_flush(journal, 10 * G_USEC_PER_SEC));
    ck_assert(dropped(registry, "error") == 1);
    ck_assert_uint_eq(recorder.logged->len, 4);
    ck_assert_msg(strstr(last(recorder.logged), "2 events not sent to the journal since the last "
                                                "report, the last because sending failed"),
                  "%s", last(recorder.logged));
    ck_assert(dropped(registry, "queue_full") == 3);
}
END_TEST

START_TEST(test_journal_wanted)
{
    ck_assert(plegd_events_journal_wanted(PLEGD_EVENTS_JOURNAL_AUTO, "0f7c5a0b9e2d4b8f"));
    ck_assert(!plegd_events_journal_wanted(PLEGD_EVENTS_JOURNAL_AUTO, NULL));
    ck_assert(!plegd_events_journal_wanted(PLEGD_EVENTS_JOURNAL_AUTO, ""));
    ck_assert(plegd_events_journal_wanted(PLEGD_EVENTS_JOURNAL_YES, NULL));
    ck_assert(!plegd_events_journal_wanted(PLEGD_EVENTS_JOURNAL_NO, "0f7c5a0b9e2d4b8f"));
}
END_TEST

/* The seq plegd_events_publish() says an event got (the journal's PLEG_SEQ) is the one its line
 * carries, event after event. */
START_TEST(test_event_line_seq)
{
    PlegPodLifecycleEvent event = sample_died_event();
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    g_autoptr(PlegdEvents) events = plegd_events_new(PLEGD_EVENTS_MIN_RING_SIZE, 1, registry);

    for (guint64 expected = 1; expected <= 3; expected++) {
        guint64 seq = 0;
        g_autoptr(GBytes) line = plegd_events_publish(events, &event, &seq);
        g_autofree char *prefix = g_strdup_printf("{\"seq\":%" G_GUINT64_FORMAT ",", expected);

        ck_assert_uint_eq(seq, expected);
        ck_assert(g_bytes_get_size(line) > strlen(prefix));
        ck_assert(memcmp(g_bytes_get_data(line, NULL), prefix, strlen(prefix)) == 0);
    }
}
END_TEST

/* ---- exporter metrics ---- */

#define ck_assert_contains(haystack, needle)                                                       \
    ck_assert_msg(strstr((haystack), (needle)) != NULL, "expected \"%s\" in:\n%s", (needle),       \
                  (haystack))

/* The fields after the command, whose parentheses and spaces do not shift them. */
START_TEST(test_proc_stat_parse)
{
    static const char *const bad[] = {
        "",
        "1234 plegd S 1",
        "1234 (plegd) S 1 2 3",
        "1234 (plegd)S 1 1234 1234 0 -1 4194560 1 0 0 0 7 3 0 0 20 0 5 0 100 2000 300 18446744073709551615",
        "1234 (plegd) S 1 1234 1234 0 -1 4194560 1 0 0 0 x 3 0 0 20 0 5 0 100 2000 300 1",
        "1234 (plegd) S 1 1234 1234 0 -1 4194560 1 0 0 0 7 3 0 0 20 0 5 0 100 2000 -300 1",
    };
    PlegdProcStat stat = {0};
    g_autofree char *self = NULL;

    ck_assert(plegd_proc_stat_parse("1234 (a) b) (c d) R 1 1234 1234 0 -1 4194560 1 0 0 0 "
                                    "700 30 5 6 20 0 5 0 4242 123456789 321 18446744073709551615 1",
                                    &stat));
    ck_assert_uint_eq(stat.utime_ticks, 700);
    ck_assert_uint_eq(stat.stime_ticks, 30);
    ck_assert_uint_eq(stat.starttime_ticks, 4242);
    ck_assert_uint_eq(stat.vsize_bytes, 123456789);
    ck_assert_uint_eq(stat.rss_pages, 321);

    for (gsize i = 0; i < G_N_ELEMENTS(bad); i++) {
        PlegdProcStat untouched = {.rss_pages = 99};

        ck_assert_msg(!plegd_proc_stat_parse(bad[i], &untouched), "accepted \"%s\"", bad[i]);
        ck_assert_uint_eq(untouched.rss_pages, 99);
    }
    ck_assert(!plegd_proc_stat_parse(NULL, &stat));

    /* This process's own line reads, and it has used some CPU and memory. */
    ck_assert(g_file_get_contents("/proc/self/stat", &self, NULL, NULL));
    ck_assert(plegd_proc_stat_parse(self, &stat));
    ck_assert_uint_gt(stat.rss_pages, 0);
    ck_assert_uint_ge(stat.vsize_bytes, stat.rss_pages * 4096);
    ck_assert_uint_gt(stat.starttime_ticks, 0);
}
END_TEST

static double
exposed_value(const char *text, const char *series)
{
    g_autofree char *needle = g_strconcat("\n", series, " ", NULL);
    const char *at = strstr(text, needle);

    ck_assert_msg(at != NULL, "no %s in:\n%s", series, text);
    return g_ascii_strtod(at + strlen(needle), NULL);
}

/* The process metrics are read at each exposition: an fd opened between two shows. */
START_TEST(test_exporter_metrics)
{
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    g_autofree char *before = NULL, *after = NULL;
    g_autofree char *info = NULL;
    double start, now = g_get_real_time() / 1e6;
    int fd;

    plegd_exporter_metrics_register(registry);
    before = pleg_metrics_registry_expose(registry);
    fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    after = pleg_metrics_registry_expose(registry);
    close(fd);

    ck_assert_double_eq(exposed_value(after, "process_open_fds"),
                        exposed_value(before, "process_open_fds") + 1);
    ck_assert_double_ge(exposed_value(after, "process_max_fds"),
                        exposed_value(after, "process_open_fds"));
    ck_assert_double_gt(exposed_value(after, "process_resident_memory_bytes"), 0);
    ck_assert_double_ge(exposed_value(after, "process_virtual_memory_bytes"),
                        exposed_value(after, "process_resident_memory_bytes"));
    ck_assert_double_ge(exposed_value(after, "process_cpu_seconds_total"),
                        exposed_value(before, "process_cpu_seconds_total"));
    /* This test binary started less than a minute ago (the tick is 10 ms). */
    start = exposed_value(after, "process_start_time_seconds");
    ck_assert_double_le(start, now + 1);
    ck_assert_double_gt(start, now - 60);
    info = g_strdup_printf("\nplegd_build_info{version=\"%s\",libpleg_version=\"%s\",glib_version=\"%u.%u.%u\",",
                           PLEG_VERSION, pleg_get_version(), glib_major_version,
                           glib_minor_version, glib_micro_version);
    ck_assert_contains(after, info);
    ck_assert_contains(after, "# TYPE process_cpu_seconds_total counter\n");
}
END_TEST

/* 1 for each plugin's state, 0 for its other states; a name that is not UTF-8 is escaped. */
START_TEST(test_plugin_state_metrics)
{
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    g_autoptr(GPtrArray) plugins = g_ptr_array_new();
    PlegPluginInfo evented = {.name = (char *)"evented", .state = PLEG_PLUGIN_STATE_DISABLED_GATE};
    PlegPluginInfo watchdog = {.name = (char *)"watchdog", .state = PLEG_PLUGIN_STATE_RUNNING};
    PlegPluginInfo odd = {.name = (char *)"odd\xff", .state = PLEG_PLUGIN_STATE_FAILED};
    g_autofree char *text = NULL;

    g_ptr_array_add(plugins, &evented);
    g_ptr_array_add(plugins, &watchdog);
    g_ptr_array_add(plugins, &odd);
    plegd_plugin_state_metrics_set(registry, plugins);
    text = pleg_metrics_registry_expose(registry);
    ck_assert_contains(text, "\nplegd_plugin_state{plugin=\"evented\",state=\"disabled-gate\"} 1\n");
    ck_assert_contains(text, "\nplegd_plugin_state{plugin=\"evented\",state=\"running\"} 0\n");
    ck_assert_contains(text, "\nplegd_plugin_state{plugin=\"watchdog\",state=\"running\"} 1\n");
    ck_assert_contains(text, "\nplegd_plugin_state{plugin=\"watchdog\",state=\"failed\"} 0\n");
    ck_assert_contains(text, "\nplegd_plugin_state{plugin=\"odd\\\\xff\",state=\"failed\"} 1\n");
    ck_assert_contains(text,
                       "\nplegd_plugin_state{plugin=\"watchdog\",state=\"disabled-by-name\"} 0\n");
    ck_assert_contains(text, "\nplegd_plugin_state{plugin=\"watchdog\",state=\"stopped\"} 0\n");
}
END_TEST

static Suite *
plegd_units_suite(void)
{
    Suite *suite = suite_create("plegd-units");
    TCase *tc;

    tc = tcase_create("json");
    tcase_add_test(tc, test_json_container_died);
    tcase_add_test(tc, test_json_container_died_partial_exit);
    tcase_add_test(tc, test_json_container_died_without_exit);
    tcase_add_test(tc, test_json_other_types);
    tcase_add_test(tc, test_json_not_utf8);
    tcase_add_test(tc, test_json_details);
    tcase_add_test(tc, test_json_details_sandbox_and_start);
    suite_add_tcase(suite, tc);

    tc = tcase_create("event-ring");
    tcase_add_test(tc, test_ring_seq_and_eviction);
    tcase_add_test(tc, test_ring_check_since);
    tcase_add_test(tc, test_json_seq_first);
    tcase_add_test(tc, test_json_as_json_glib);
    tcase_add_test(tc, test_json_control_characters_escaped);
    suite_add_tcase(suite, tc);

    tc = tcase_create("output");
    tcase_add_checked_fixture(tc, recorder_setup, recorder_teardown);
    tcase_add_test(tc, test_output_lines_in_order);
    tcase_add_test(tc, test_output_broken_pipe);
    tcase_add_test(tc, test_output_stalled_reader);
    suite_add_tcase(suite, tc);

    tc = tcase_create("journal");
    tcase_add_checked_fixture(tc, recorder_setup, recorder_teardown);
    tcase_add_test(tc, test_journal_entry_fields);
    tcase_add_test(tc, test_journal_entry_messages);
    tcase_add_test(tc, test_journal_drops);
    tcase_add_test(tc, test_journal_wanted);
    tcase_add_test(tc, test_event_line_seq);
    suite_add_tcase(suite, tc);

    tc = tcase_create("bind-address");
    tcase_add_test(tc, test_bind_address_valid);
    tcase_add_test(tc, test_bind_address_invalid);
    suite_add_tcase(suite, tc);

    tc = tcase_create("relist-monitor");
    tcase_add_checked_fixture(tc, recorder_setup, recorder_teardown);
    tcase_add_test(tc, test_monitor_rate_limits_failures);
    tcase_add_test(tc, test_monitor_alternating_errors);
    tcase_add_test(tc, test_monitor_ready_and_recovery);
    tcase_add_test(tc, test_monitor_foreign_error);
    tcase_add_test(tc, test_monitor_notify_retry);
    suite_add_tcase(suite, tc);

    tc = tcase_create("notify");
    tcase_add_test(tc, test_notify_nonblocking);
    suite_add_tcase(suite, tc);

    tc = tcase_create("plugins");
    tcase_add_test(tc, test_describe_plugin);
    tcase_add_test(tc, test_log_warning);
    tcase_add_test(tc, test_check_plugin_dir);
    tcase_add_test(tc, test_default_plugin_dir);
    suite_add_tcase(suite, tc);

    tc = tcase_create("exporter-metrics");
    tcase_add_test(tc, test_proc_stat_parse);
    tcase_add_test(tc, test_exporter_metrics);
    tcase_add_test(tc, test_plugin_state_metrics);
    suite_add_tcase(suite, tc);

    return suite;
}

int
main(void)
{
    SRunner *runner;
    int n_failed;

    g_log_set_writer_func(record_log, NULL, NULL);
    runner = srunner_create(plegd_units_suite());
    srunner_run_all(runner, CK_NORMAL);
    n_failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return n_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
