/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd's log: the lines plegd_log_format_record() makes of records built here, then plegd as a
 * process: its stderr in the text and the JSON format, what --v shows, bad values of the flags,
 * and a burst of relist failures that stays one line, with a count when it ends.  (Records in
 * the journal: test-plegd-journal.)
 */
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <signal.h>
#include <unistd.h>

#include "cri-sim.h"
#include "plegd-runner.h"
#include "plegd.h"

/* 2026-12-04T23:41:07.123456Z */
#define SAMPLE_TIME_USEC G_GINT64_CONSTANT(1796427667123456)

static const char *const level_words[] = {"ERROR", "WARN", "NOTICE", "INFO", "DEBUG"};

static JsonObject *
parse_object(const char *text)
{
    g_autoptr(JsonParser) parser = json_parser_new();
    g_autoptr(GError) error = NULL;
    JsonNode *root;

    ck_assert_msg(json_parser_load_from_data(parser, text, -1, &error), "not JSON (%s): %s",
                  error ? error->message : "", text);
    root = json_parser_get_root(parser);
    ck_assert_msg(JSON_NODE_HOLDS_OBJECT(root), "not an object: %s", text);
    return json_object_ref(json_node_get_object(root));
}

static char *
format(PlegdLogFormat fmt, GLogLevelFlags level, const GLogField *fields, gsize n_fields,
       const char *zone_id)
{
    g_autoptr(GTimeZone) zone = g_time_zone_new_identifier(zone_id);

    ck_assert_ptr_nonnull(zone);
    return plegd_log_format_record(fmt, level, fields, n_fields, SAMPLE_TIME_USEC, zone);
}

/* ---- the formats, on records built here ---- */

/* A plugin's record: the time in the zone asked for, the level word, the domain, the message
 * with its newline escaped and its backslash left alone, every field of the plugin, quoted
 * where needed, and none of GLib's. */
START_TEST(test_text_format)
{
    static const char bytes[] = {'\xff', 'x', '\x01'};
    const GLogField fields[] = {
        {"MESSAGE", "started\nnow \\x", -1},
        {"PRIORITY", "6", -1},
        {"GLIB_DOMAIN", "pleg-hello", -1},
        {"CODE_FILE", "../hello.c", -1},
        {"CODE_LINE", "42", -1},
        {"CODE_FUNC", "hello_start", -1},
        {"GLIB_OLD_LOG_API", "1", -1},
        {"PLUGIN", "hello", -1},
        {"EMPTY", "", -1},
        {"SPACED", "a b", -1},
        {"QUOTED", "say \"hi\" \\ x=1", -1},
        {"NEWLINE", "a\nb", -1},
        {"BYTES", bytes, sizeof bytes},
        {"UNITS", "5µs", -1},
    };
    g_autofree char *utc =
        format(PLEGD_LOG_FORMAT_TEXT, G_LOG_LEVEL_INFO, fields, G_N_ELEMENTS(fields), "UTC");
    g_autofree char *india = format(PLEGD_LOG_FORMAT_TEXT, G_LOG_LEVEL_INFO, fields, 3, "+05:30");
    g_autofree char *stamp = g_strndup(utc, strcspn(utc, " "));
    g_autoptr(GDateTime) parsed = g_date_time_new_from_iso8601(stamp, NULL);

    ck_assert_str_eq(utc, "2026-12-04T23:41:07.123456+00:00 INFO pleg-hello: started\\nnow \\x "
                          "plugin=hello empty=\"\" spaced=\"a b\" "
                          "quoted=\"say \\\"hi\\\" \\\\ x=1\" newline=\"a\\nb\" "
                          "bytes=\"\\xffx\\x01\" units=5µs\n");
    ck_assert_str_eq(india,
                     "2026-12-05T05:11:07.123456+05:30 INFO pleg-hello: started\\nnow \\x\n");
    /* The stamp reads back as the record's time. */
    ck_assert_ptr_nonnull(parsed);
    ck_assert_int_eq(g_date_time_to_unix(parsed) * G_USEC_PER_SEC +
                         g_date_time_get_microsecond(parsed),
                     SAMPLE_TIME_USEC);
}
END_TEST

/* The level word is the record's priority: PRIORITY when given (an operator warning is
 * message level with priority 4, and loses its "warning: " prefix), else GLib's for the level;
 * GLib's warning and critical levels (a bug) are ERROR; a record without a domain has no
 * "DOMAIN: ". */
START_TEST(test_text_levels)
{
    static const struct {
        GLogLevelFlags level;
        const char *priority; /* NULL: none */
        const char *domain;   /* NULL: none */
        const char *message;
        const char *expected; /* after the stamp and a space */
    } cases[] = {
        {G_LOG_LEVEL_MESSAGE, "4", "plegd", "warning: no plugins loaded from /x",
         "WARN plegd: no plugins loaded from /x\n"},
        {G_LOG_LEVEL_MESSAGE, "5", "plegd", "warning: kept", "NOTICE plegd: warning: kept\n"},
        {G_LOG_LEVEL_MESSAGE, NULL, "plegd", "relist failed", "NOTICE plegd: relist failed\n"},
        {G_LOG_LEVEL_WARNING, NULL, "GLib", "a bug", "ERROR GLib: a bug\n"},
        {G_LOG_LEVEL_CRITICAL, NULL, "GLib", "a bug", "ERROR GLib: a bug\n"},
        {G_LOG_LEVEL_WARNING, "4", "pleg-x", "a bug", "ERROR pleg-x: a bug\n"},
        {G_LOG_LEVEL_ERROR, NULL, "plegd", "fatal", "ERROR plegd: fatal\n"},
        {G_LOG_LEVEL_MESSAGE, "2", "plegd", "critical", "ERROR plegd: critical\n"},
        {G_LOG_LEVEL_INFO, NULL, NULL, "no domain", "INFO no domain\n"},
        {G_LOG_LEVEL_DEBUG, NULL, "pleg", "tick", "DEBUG pleg: tick\n"},
    };

    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        GLogField fields[3];
        gsize n = 0;
        g_autofree char *line = NULL;

        fields[n++] = (GLogField){"MESSAGE", cases[i].message, -1};
        if (cases[i].priority)
            fields[n++] = (GLogField){"PRIORITY", cases[i].priority, -1};
        if (cases[i].domain)
            fields[n++] = (GLogField){"GLIB_DOMAIN", cases[i].domain, -1};
        line = format(PLEGD_LOG_FORMAT_TEXT, cases[i].level, fields, n, "UTC");
        ck_assert_str_eq(line + strlen("2026-12-04T23:41:07.123456+00:00 "), cases[i].expected);
    }
}
END_TEST

/* The watchdog writes its fields into MESSAGE as " key=value" for writers that show only
 * MESSAGE: those are not repeated, the others are added. */
START_TEST(test_text_fields_in_message)
{
    const GLogField fields[] = {
        {"MESSAGE", "Watchdog notification failed: operation=watchdog_notify result=error", -1},
        {"GLIB_DOMAIN", "pleg-watchdog", -1},
        {"PRIORITY", "5", -1},
        {"OPERATION", "watchdog_notify", -1},
        {"RESULT", "error", -1},
        {"ATTEMPT", "1", -1},
    };
    g_autofree char *line =
        format(PLEGD_LOG_FORMAT_TEXT, G_LOG_LEVEL_MESSAGE, fields, G_N_ELEMENTS(fields), "UTC");

    ck_assert_str_eq(line, "2026-12-04T23:41:07.123456+00:00 NOTICE pleg-watchdog: Watchdog "
                           "notification failed: operation=watchdog_notify result=error "
                           "attempt=1\n");
}
END_TEST

/* One object per line, kubelet's keys: ts in milliseconds, level, logger, caller, msg, v (not
 * on a warning), then the fields in lower case as strings; a field named like a key of the
 * record keeps its upper-case name; bytes that are not UTF-8 become U+FFFD. */
START_TEST(test_json_format)
{
    static const char bytes[] = {'o', 'k', '\xff'};
    const GLogField fields[] = {
        {"MESSAGE", "tick\n", -1},         {"PRIORITY", "7", -1},
        {"GLIB_DOMAIN", "pleg-hello", -1}, {"CODE_FILE", "../plugins/hello/hello.c", -1},
        {"CODE_LINE", "42", -1},           {"CODE_FUNC", "on_tick", -1},
        {"PLUGIN", "hello", -1},           {"TS", "not the time", -1},
        {"BYTES", bytes, sizeof bytes},
    };
    const GLogField warning[] = {
        {"MESSAGE", "warning: plugin folder /x does not exist", -1},
        {"PRIORITY", "4", -1},
        {"GLIB_DOMAIN", "plegd", -1},
    };
    g_autofree char *line =
        format(PLEGD_LOG_FORMAT_JSON, G_LOG_LEVEL_DEBUG, fields, G_N_ELEMENTS(fields), "UTC");
    g_autofree char *warning_line =
        format(PLEGD_LOG_FORMAT_JSON, G_LOG_LEVEL_MESSAGE, warning, G_N_ELEMENTS(warning), "UTC");
    g_autoptr(JsonObject) object = NULL;
    g_autoptr(JsonObject) warning_object = NULL;

    ck_assert(g_str_has_suffix(line, "}\n"));
    ck_assert_ptr_eq(strchr(line, '\n'), line + strlen(line) - 1);
    object = parse_object(line);
    ck_assert_double_eq_tol(json_object_get_double_member(object, "ts"), SAMPLE_TIME_USEC / 1000.0,
                            0.0005);
    ck_assert_str_eq(json_object_get_string_member(object, "level"), "DEBUG");
    ck_assert_str_eq(json_object_get_string_member(object, "logger"), "pleg-hello");
    ck_assert_str_eq(json_object_get_string_member(object, "caller"), "hello.c:42");
    ck_assert_str_eq(json_object_get_string_member(object, "msg"), "tick\n");
    ck_assert_int_eq(json_object_get_int_member(object, "v"), PLEGD_LOG_V_DEBUG);
    ck_assert_str_eq(json_object_get_string_member(object, "plugin"), "hello");
    ck_assert_str_eq(json_object_get_string_member(object, "TS"), "not the time");
    ck_assert_str_eq(json_object_get_string_member(object, "bytes"), "ok\xef\xbf\xbd");
    ck_assert(!json_object_has_member(object, "code_func") &&
              !json_object_has_member(object, "priority") &&
              !json_object_has_member(object, "glib_domain"));
    ck_assert_uint_eq(json_object_get_size(object), 9);

    warning_object = parse_object(warning_line);
    ck_assert_str_eq(json_object_get_string_member(warning_object, "level"), "WARN");
    ck_assert_str_eq(json_object_get_string_member(warning_object, "msg"),
                     "plugin folder /x does not exist");
    ck_assert(!json_object_has_member(warning_object, "v"));
    ck_assert(!json_object_has_member(warning_object, "caller"));
}
END_TEST

/* The --v each record needs (plegd(8), LOGS). */
START_TEST(test_verbosity_of_records)
{
    static const struct {
        GLogLevelFlags level;
        const char *domain;
        const char *priority;
        guint v;
    } cases[] = {
        {G_LOG_LEVEL_ERROR, "pleg", NULL, 0},
        {G_LOG_LEVEL_WARNING, "GLib", NULL, 0},
        {G_LOG_LEVEL_MESSAGE, "libsoup", NULL, 0},
        {G_LOG_LEVEL_MESSAGE, "plegd", "4", 0},
        {G_LOG_LEVEL_INFO, "plegd", NULL, 0},
        {G_LOG_LEVEL_INFO, "pleg-evented", NULL, 0},
        {G_LOG_LEVEL_INFO, "pleg", NULL, PLEGD_LOG_V_INFO},
        {G_LOG_LEVEL_INFO, "GLib-GIO", NULL, PLEGD_LOG_V_INFO},
        {G_LOG_LEVEL_INFO, "plegd", "5", 0},
        {G_LOG_LEVEL_DEBUG, "plegd", NULL, PLEGD_LOG_V_DEBUG},
        {G_LOG_LEVEL_DEBUG, "pleg", NULL, PLEGD_LOG_V_DEBUG},
        {G_LOG_LEVEL_DEBUG, "pleg-watchdog", NULL, PLEGD_LOG_V_DEBUG},
        {G_LOG_LEVEL_DEBUG, "plegdx", NULL, PLEGD_LOG_V_TRACE},
        {G_LOG_LEVEL_DEBUG, "libsoup", NULL, PLEGD_LOG_V_TRACE},
        {G_LOG_LEVEL_DEBUG, NULL, NULL, PLEGD_LOG_V_TRACE},
    };

    ck_assert_uint_lt(PLEGD_LOG_V_INFO, PLEGD_LOG_V_DEBUG);
    ck_assert_uint_lt(PLEGD_LOG_V_DEBUG, PLEGD_LOG_V_TRACE);
    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        GLogField fields[3] = {{"MESSAGE", "m", -1}};
        gsize n = 1;

        if (cases[i].domain)
            fields[n++] = (GLogField){"GLIB_DOMAIN", cases[i].domain, -1};
        if (cases[i].priority)
            fields[n++] = (GLogField){"PRIORITY", cases[i].priority, -1};
        ck_assert_msg(plegd_log_record_verbosity(cases[i].level, fields, n) == cases[i].v,
                      "case %zu (%s)", i, cases[i].domain ? cases[i].domain : "no domain");
    }
}
END_TEST

/* ---- the writer, in a process of Check's own ---- */

/* Records logged before plegd_log_start() (a --config warning) are held, then written in the
 * format and at the verbosity it gives, in order, with the time they were logged. */
START_TEST(test_held_until_start)
{
    int fds[2];
    g_autoptr(GString) out = g_string_new(NULL);
    g_auto(GStrv) lines = NULL;
    g_autoptr(JsonObject) before = NULL;
    g_autoptr(JsonObject) after = NULL;
    char buffer[4096];
    gssize n;

    ck_assert_int_eq(pipe(fds), 0);
    ck_assert_int_eq(dup2(fds[1], STDERR_FILENO), STDERR_FILENO);
    close(fds[1]);
    plegd_log_init();
    g_message("before start");
    g_debug("a debug record, below --v=0");
    g_usleep(2000);
    plegd_log_start(PLEGD_LOG_FORMAT_JSON, 0);
    g_message("after start");
    close(STDERR_FILENO);
    while ((n = read(fds[0], buffer, sizeof buffer)) > 0)
        g_string_append_len(out, buffer, n);
    close(fds[0]);

    lines = g_strsplit(out->str, "\n", -1);
    ck_assert_msg(g_strv_length(lines) == 3 && lines[2][0] == '\0', "%s", out->str);
    before = parse_object(lines[0]);
    after = parse_object(lines[1]);
    ck_assert_str_eq(json_object_get_string_member(before, "msg"), "before start");
    ck_assert_str_eq(json_object_get_string_member(after, "msg"), "after start");
    ck_assert_double_gt(json_object_get_double_member(after, "ts") -
                            json_object_get_double_member(before, "ts"),
                        1.5);
}
END_TEST

/* G_DEBUG=fatal-warnings still makes a warning abort (tests rely on it to catch bugs), after
 * the record is written, and before plegd_log_start() too. */
START_TEST(test_fatal_warning)
{
    g_log_set_always_fatal(G_LOG_LEVEL_WARNING | G_LOG_LEVEL_CRITICAL);
    plegd_log_init();
    if (_i == 1)
        plegd_log_start(PLEGD_LOG_FORMAT_TEXT, 0);
    g_warning("a bug (the test expects this abort)");
}
END_TEST

/* ---- plegd as a process ---- */

typedef struct {
    char *dir;
    char *endpoint_arg;
    char *plugin_dir_arg;
} Fixture;

static Fixture fx;

/* A directory with the example plugin hello (an info record with a PLUGIN field at start, a
 * debug "tick" every second), and an endpoint nobody serves. */
static void
setup(void)
{
    g_autofree char *plugin_dir = NULL;

    fx.dir = make_tmpdir();
    plugin_dir = g_build_filename(fx.dir, "plugins", NULL);
    ck_assert_int_eq(g_mkdir(plugin_dir, 0755), 0);
    add_hello_plugin(plugin_dir);
    fx.endpoint_arg = g_strdup_printf("--container-runtime-endpoint=unix://%s/cri.sock", fx.dir);
    fx.plugin_dir_arg = g_strconcat("--plugin-dir=", plugin_dir, NULL);
}

static void
teardown(void)
{
    g_autofree char *plugin_dir = g_build_filename(fx.dir, "plugins", NULL);

    remove_tmpdir(plugin_dir);
    remove_tmpdir(fx.dir);
    g_clear_pointer(&fx.dir, g_free);
    g_clear_pointer(&fx.endpoint_arg, g_free);
    g_clear_pointer(&fx.plugin_dir_arg, g_free);
}

/* plegd with hello and HTTP on a free port, @extra (NULL-terminated) last. */
static PlegdRunner *
spawn_hello(const char *const *env, const char *const *extra)
{
    g_autoptr(GPtrArray) args = g_ptr_array_new();

    g_ptr_array_add(args, fx.endpoint_arg);
    g_ptr_array_add(args, fx.plugin_dir_arg);
    g_ptr_array_add(args, "--feature-gates=HelloPlugin=true");
    g_ptr_array_add(args, "--relist-period=100ms");
    g_ptr_array_add(args, "--metrics-bind-address=127.0.0.1:0");
    for (const char *const *a = extra; a && *a; a++)
        g_ptr_array_add(args, (gpointer)*a);
    g_ptr_array_add(args, NULL);
    return plegd_runner_spawn_full(env, -1, (const char *const *)args->pdata);
}

/* Until hello has ticked @n times (and logged "tick" each time, at debug). */
static void
wait_ticks(const char *base, double n)
{
    gint64 deadline = g_get_monotonic_time() + 60 * G_USEC_PER_SEC;

    while (plegd_metric(base, "pleg_hello_ticks_total") < n) {
        ck_assert_msg(g_get_monotonic_time() < deadline, "hello did not tick %g times", n);
        g_usleep(50 * 1000);
    }
}

static gboolean
is_level_word(const char *word)
{
    for (gsize i = 0; i < G_N_ELEMENTS(level_words); i++) {
        if (g_str_equal(word, level_words[i]))
            return TRUE;
    }
    return FALSE;
}

/* A text line: an RFC 3339 stamp with microseconds and @offset that reads back as a time near
 * now, then a level word.  Returns: (transfer full): what follows the level word. */
static char *
check_text_line(const char *line, const char *offset)
{
    g_auto(GStrv) parts = g_strsplit(line, " ", 3);
    g_autoptr(GDateTime) time = NULL;
    gint64 now = g_get_real_time() / G_USEC_PER_SEC;

    ck_assert_msg(g_strv_length(parts) == 3, "not a log line: %s", line);
    ck_assert_msg(g_regex_match_simple("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"
                                       "\\.[0-9]{6}[+-][0-9]{2}:[0-9]{2}$",
                                       parts[0], 0, 0),
                  "not an RFC 3339 stamp with microseconds and an offset: %s", line);
    ck_assert_msg(g_str_has_suffix(parts[0], offset), "not in the zone %s: %s", offset, line);
    time = g_date_time_new_from_iso8601(parts[0], NULL);
    ck_assert_msg(time, "GLib does not read the stamp of %s", line);
    ck_assert_int_lt(ABS(g_date_time_to_unix(time) - now), 600);
    ck_assert_msg(is_level_word(parts[1]), "no level word: %s", line);
    return g_strdup(parts[2]);
}

/* Every line of stderr is a record of the text format, in the local zone ($TZ). */
START_TEST(test_text_lines)
{
    const char *const env[] = {"TZ=IST-5:30", NULL};
    g_autoptr(PlegdRunner) plegd = spawn_hello(env, NULL);
    g_autofree char *base = plegd_runner_wait_metrics_url(plegd);
    g_autofree char *err = NULL;
    g_auto(GStrv) lines = NULL;
    gboolean found_started = FALSE, found_running = FALSE;

    assert_stderr_shows(plegd, "plugin hello: running");
    assert_stderr_shows(plegd, " NOTICE plegd: relist failed: ");
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(g_str_has_suffix(err, " INFO plegd: stopped\n"), "%s", err);
    lines = g_strsplit(err, "\n", -1);
    ck_assert_uint_gt(g_strv_length(lines), 5);
    for (char **line = lines; *line; line++) {
        g_autofree char *rest = NULL;

        if (**line == '\0' && !line[1])
            break; /* after the last newline */
        rest = check_text_line(*line, "+05:30");
        found_started |= g_str_equal(rest, "pleg-hello: started: counting seconds in "
                                           "pleg_hello_ticks_total plugin=hello");
        found_running |= g_str_equal(rest, "plegd: plugin hello: running");
        ck_assert_msg(!g_str_has_prefix(rest, "DEBUG"), "a debug record at --v=0: %s", *line);
    }
    ck_assert_msg(found_started && found_running, "%s", err);
}
END_TEST

/* --logging-format=json: every line of stderr is one object with kubelet's keys; at --v=4 the
 * plugins' debug records are among them with their fields. */
START_TEST(test_json_lines)
{
    const char *const extra[] = {"--logging-format=json", "--v=4", NULL};
    g_autoptr(PlegdRunner) plegd = spawn_hello(NULL, extra);
    g_autofree char *base = plegd_runner_wait_metrics_url(plegd);
    g_autofree char *err = NULL;
    g_auto(GStrv) lines = NULL;
    guint n_ticks = 0, n_started = 0, n_relist_debug = 0;
    double now_ms = g_get_real_time() / 1000.0;

    assert_stderr_shows(plegd, "\"msg\":\"tick\"");
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    lines = g_strsplit(err, "\n", -1);
    for (char **line = lines; *line; line++) {
        g_autoptr(JsonObject) object = NULL;
        const char *level, *msg, *logger;

        if (**line == '\0' && !line[1])
            break;
        object = parse_object(*line);
        ck_assert_msg(json_node_get_value_type(json_object_get_member(object, "ts")) ==
                          G_TYPE_DOUBLE,
                      "ts is not a number: %s", *line);
        ck_assert_double_lt(ABS(json_object_get_double_member(object, "ts") - now_ms),
                            600 * 1000.0);
        level = json_object_get_string_member(object, "level");
        ck_assert_msg(is_level_word(level), "%s", *line);
        msg = json_object_get_string_member(object, "msg");
        logger = json_object_get_string_member_with_default(object, "logger", "");
        ck_assert_msg(msg, "%s", *line);
        if (g_str_equal(level, "ERROR") || g_str_equal(level, "WARN"))
            ck_assert_msg(!json_object_has_member(object, "v"), "%s", *line);
        else
            ck_assert_msg(json_object_has_member(object, "v"), "%s", *line);

        if (g_str_equal(logger, "pleg-hello") && g_str_equal(msg, "tick")) {
            ck_assert_str_eq(level, "DEBUG");
            ck_assert_int_eq(json_object_get_int_member(object, "v"), PLEGD_LOG_V_DEBUG);
            ck_assert_str_eq(json_object_get_string_member(object, "plugin"), "hello");
            n_ticks++;
        } else if (g_str_equal(logger, "pleg-hello")) {
            ck_assert_str_eq(msg, "started: counting seconds in pleg_hello_ticks_total");
            ck_assert_str_eq(level, "INFO");
            ck_assert_int_eq(json_object_get_int_member(object, "v"), 0);
            n_started++;
        } else if (g_str_equal(logger, "plegd") && g_str_has_prefix(msg, "relist failure ")) {
            ck_assert_str_eq(level, "DEBUG");
            ck_assert(g_str_has_prefix(json_object_get_string_member(object, "caller"),
                                       "relist-monitor.c:"));
            n_relist_debug++;
        }
    }
    ck_assert_uint_ge(n_ticks, 1);
    ck_assert_uint_eq(n_started, 1);
    ck_assert_uint_ge(n_relist_debug, 1);
}
END_TEST

/* Whether hello's debug "tick" shows: --v=4 and up shows the plugins' debug, less does not;
 * G_MESSAGES_DEBUG naming the domain shows it at any --v. */
static const struct {
    const char *v;
    const char *env;
    gboolean shown;
} tick_cases[] = {
    {"--v=0", NULL, FALSE},
    {"--v=3", NULL, FALSE},
    {"--v=4", NULL, TRUE},
    {"--v=0", "G_MESSAGES_DEBUG=pleg-hello", TRUE},
};

START_TEST(test_verbosity)
{
    const char *const env[] = {tick_cases[_i].env, NULL};
    const char *const extra[] = {tick_cases[_i].v, NULL};
    g_autoptr(PlegdRunner) plegd = spawn_hello(env, extra);
    g_autofree char *base = plegd_runner_wait_metrics_url(plegd);
    g_autofree char *err = NULL;

    if (tick_cases[_i].shown) {
        assert_stderr_shows(plegd, " DEBUG pleg-hello: tick plugin=hello\n");
        ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
        return;
    }
    wait_ticks(base, 2);
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
    err = plegd_runner_get_stderr(plegd);
    ck_assert_msg(!strstr(err, "pleg-hello: tick") && !strstr(err, " DEBUG "), "%s: %s",
                  tick_cases[_i].v, err);
    /* What --v=0 shows all the same: the plugin's info. */
    ck_assert_msg(strstr(err, " INFO pleg-hello: started: "), "%s", err);
}
END_TEST

static const struct {
    const char *arg;
    const char *shown; /* in the message, with the flag's name */
} bad_values[] = {
    {"--logging-format=xml", "invalid --logging-format \"xml\": expected text or json"},
    {"--logging-format=", "invalid --logging-format \"\": expected text or json"},
    {"--logging-format=JSON", "invalid --logging-format \"JSON\""},
    {"--v=-1", "invalid --v \"-1\""},
    {"--v=abc", "invalid --v \"abc\""},
    {"--v=", "invalid --v \"\""},
    {"--v=4294967296", "invalid --v \"4294967296\""},
};

/* A bad value is refused before anything runs: exit status 2, the flag and the value named. */
START_TEST(test_bad_values)
{
    g_autoptr(PlegdRunner) plegd = plegd_runner_spawn(NULL, bad_values[_i].arg);
    g_autofree char *err = NULL;
    g_autofree char *out = NULL;

    ck_assert_int_eq(plegd_runner_wait_exit(plegd), 2);
    err = plegd_runner_get_stderr(plegd);
    out = plegd_runner_get_stdout(plegd);
    ck_assert_msg(strstr(err, bad_values[_i].shown), "%s: %s", bad_values[_i].arg, err);
    ck_assert_str_eq(out, "");
}
END_TEST

/* The same keys in --config: the file and the key named; a good value there applies. */
START_TEST(test_config_keys)
{
    g_autofree char *bad = write_file(fx.dir, "bad.conf", "[plegd]\nlogging-format=xml\n");
    g_autofree char *good = write_file(fx.dir, "good.conf", "[plegd]\nlogging-format=json\nv=4\n");
    g_autofree char *bad_arg = g_strconcat("--config=", bad, NULL);
    g_autofree char *good_arg = g_strconcat("--config=", good, NULL);
    g_autoptr(PlegdRunner) refused = plegd_runner_spawn(NULL, bad_arg);
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autofree char *err = NULL;
    g_autofree char *expected = NULL;
    const char *const extra[] = {good_arg, NULL};

    ck_assert_int_eq(plegd_runner_wait_exit(refused), 2);
    err = plegd_runner_get_stderr(refused);
    expected = g_strdup_printf("invalid logging-format \"xml\" in [plegd] of %s: expected text "
                               "or json",
                               bad);
    ck_assert_msg(strstr(err, expected), "%s", err);

    plegd = spawn_hello(NULL, extra);
    assert_stderr_shows(plegd, "\"level\":\"DEBUG\",\"logger\":\"pleg-hello\"");
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);
}
END_TEST

/* Why plegd stops with a failure is a record too, an error: in the format asked for, and with
 * priority 3 in the journal. */
START_TEST(test_exit_error)
{
    g_autoptr(GInetAddress) loopback = g_inet_address_new_loopback(G_SOCKET_FAMILY_IPV4);
    g_autoptr(GSocketAddress) any_port = g_inet_socket_address_new(loopback, 0);
    g_autoptr(GSocketAddress) bound = NULL;
    g_autoptr(GSocket) socket = NULL;
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autoptr(JsonObject) last = NULL;
    g_autofree char *address = NULL;
    g_autofree char *address_arg = NULL;
    g_autofree char *err = NULL;
    g_auto(GStrv) lines = NULL;
    guint n;

    socket =
        g_socket_new(G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_TCP, &error);
    ck_assert_msg(socket && g_socket_bind(socket, any_port, TRUE, &error) &&
                      g_socket_listen(socket, &error),
                  "%s", error ? error->message : "");
    bound = g_socket_get_local_address(socket, &error);
    address = g_strdup_printf("127.0.0.1:%u",
                              g_inet_socket_address_get_port(G_INET_SOCKET_ADDRESS(bound)));
    address_arg = g_strconcat("--metrics-bind-address=", address, NULL);

    plegd = plegd_runner_spawn(NULL, fx.endpoint_arg, address_arg,
                               "--plugin-dir=", "--logging-format=json");
    ck_assert_int_eq(plegd_runner_wait_exit(plegd), 1);
    err = plegd_runner_get_stderr(plegd);
    lines = g_strsplit(err, "\n", -1);
    n = g_strv_length(lines);
    ck_assert_msg(n >= 2 && lines[n - 1][0] == '\0', "%s", err);
    last = parse_object(lines[n - 2]);
    ck_assert_str_eq(json_object_get_string_member(last, "level"), "ERROR");
    ck_assert_str_eq(json_object_get_string_member(last, "logger"), "plegd");
    ck_assert_msg(strstr(json_object_get_string_member(last, "msg"), address), "%s", err);
    ck_assert(!json_object_has_member(last, "v"));
}
END_TEST

/* A record of either format: its level, domain and message. */
typedef struct {
    char *level;
    char *domain;
    char *msg;
} Record;

static void
record_clear(Record *record)
{
    g_clear_pointer(&record->level, g_free);
    g_clear_pointer(&record->domain, g_free);
    g_clear_pointer(&record->msg, g_free);
}
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(Record, record_clear)

static void
parse_record(PlegdLogFormat fmt, const char *line, Record *ret_record)
{
    if (fmt == PLEGD_LOG_FORMAT_JSON) {
        g_autoptr(JsonObject) object = parse_object(line);

        ret_record->level = g_strdup(json_object_get_string_member(object, "level"));
        ret_record->domain =
            g_strdup(json_object_get_string_member_with_default(object, "logger", ""));
        ret_record->msg = g_strdup(json_object_get_string_member(object, "msg"));
    } else {
        g_autofree char *rest = NULL;
        g_auto(GStrv) parts = g_strsplit(line, " ", 3);
        const char *colon;

        ck_assert_uint_eq(g_strv_length(parts), 3);
        rest = g_strdup(parts[2]);
        colon = strstr(rest, ": ");
        ck_assert_ptr_nonnull(colon);
        ret_record->level = g_strdup(parts[1]);
        ret_record->domain = g_strndup(rest, colon - rest);
        ret_record->msg = g_strdup(colon + 2);
    }
}

/* A runtime that is not there yet: relists fail every 10 ms, each counted at debug (--v=4),
 * but said once at the default level; when the runtime comes, one line says how many failed.
 * The same in both formats. */
START_TEST(test_burst_is_one_line)
{
    PlegdLogFormat fmt = _i == 0 ? PLEGD_LOG_FORMAT_TEXT : PLEGD_LOG_FORMAT_JSON;
    g_autofree char *socket_path = g_build_filename(fx.dir, "cri.sock", NULL);
    g_autoptr(PlegdRunner) plegd = NULL;
    g_autoptr(CriSim) sim = NULL;
    g_autoptr(GError) error = NULL;
    g_autofree char *err = NULL;
    g_auto(GStrv) lines = NULL;
    guint n_failed_lines = 0, n_debug = 0, n_succeeded = 0;
    guint64 counted = 0;

    plegd = plegd_runner_spawn(NULL, fx.endpoint_arg, "--relist-period=10ms",
                               "--metrics-bind-address=", "--plugin-dir=", "--v=4",
                               fmt == PLEGD_LOG_FORMAT_JSON ? "--logging-format=json"
                                                            : "--logging-format=text");
    assert_stderr_shows(plegd, "relist failure 30: ");
    sim = cri_sim_new(socket_path, &error);
    ck_assert_msg(sim, "%s", error ? error->message : "");
    assert_stderr_shows(plegd, "relist succeeded after ");
    ck_assert_int_eq(plegd_runner_stop(plegd, SIGTERM), 0);

    err = plegd_runner_get_stderr(plegd);
    lines = g_strsplit(err, "\n", -1);
    for (char **line = lines; *line; line++) {
        g_auto(Record) record = {0};

        if (**line == '\0' && !line[1])
            break;
        parse_record(fmt, *line, &record);
        if (!g_str_equal(record.domain, "plegd"))
            continue;
        if (g_str_has_prefix(record.msg, "relist failed: ")) {
            ck_assert_str_eq(record.level, "NOTICE");
            n_failed_lines++;
        } else if (g_str_has_prefix(record.msg, "relist failure ")) {
            ck_assert_str_eq(record.level, "DEBUG");
            n_debug++;
            ck_assert_uint_eq(g_ascii_strtoull(record.msg + strlen("relist failure "), NULL, 10),
                              n_debug);
        } else if (g_str_has_prefix(record.msg, "relist succeeded after ")) {
            ck_assert_str_eq(record.level, "NOTICE");
            counted = g_ascii_strtoull(record.msg + strlen("relist succeeded after "), NULL, 10);
            n_succeeded++;
        }
        ck_assert_msg(!g_str_has_prefix(record.msg, "relist still failing"), "%s", *line);
    }
    ck_assert_msg(n_failed_lines == 1, "%u lines for one burst:\n%s", n_failed_lines, err);
    ck_assert_uint_ge(n_debug, 30);
    ck_assert_uint_eq(n_succeeded, 1);
    ck_assert_uint_eq(counted, n_debug);
}
END_TEST

static Suite *
logs_suite(void)
{
    Suite *suite = suite_create("plegd-logs");
    TCase *tc;

    tc = tcase_create("formats");
    tcase_add_test(tc, test_text_format);
    tcase_add_test(tc, test_text_levels);
    tcase_add_test(tc, test_text_fields_in_message);
    tcase_add_test(tc, test_json_format);
    tcase_add_test(tc, test_verbosity_of_records);
    tcase_add_test(tc, test_held_until_start);
    tcase_add_loop_test_raise_signal(tc, test_fatal_warning, SIGABRT, 0, 2);
    suite_add_tcase(suite, tc);

    tc = tcase_create("plegd");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_text_lines);
    tcase_add_test(tc, test_json_lines);
    tcase_add_loop_test(tc, test_verbosity, 0, G_N_ELEMENTS(tick_cases));
    tcase_add_loop_test(tc, test_bad_values, 0, G_N_ELEMENTS(bad_values));
    tcase_add_test(tc, test_config_keys);
    tcase_add_test(tc, test_exit_error);
    tcase_add_loop_test(tc, test_burst_is_one_line, 0, 2);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    SRunner *runner = srunner_create(logs_suite());
    int failed;

    srunner_run_all(runner, CK_NORMAL);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
