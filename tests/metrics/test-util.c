/* SPDX-License-Identifier: Apache-2.0 */
#include <check.h>
#include <glib.h>
#include <string.h>

#include "pleg/pleg.h"

static const struct {
    const char *text;
    gint64 usec;
} good_durations[] = {
    {"0", 0},
    {"+0", 0},
    {"-0", 0},
    {"0s", 0},
    {"5s", 5000000},
    {"30s", 30000000},
    {"1478s", 1478000000},
    {"-5s", -5000000},
    {"+5s", 5000000},
    {"-0s", 0},
    {"+0s", 0},
    {"5.0s", 5000000},
    {"5.6s", 5600000},
    {"5.s", 5000000},
    {".5s", 500000},
    {"1.0s", 1000000},
    {"1.00s", 1000000},
    {"1.004s", 1004000},
    {"1.0040s", 1004000},
    {"100.00100s", 100001000},
    {"10ns", 0},
    {"1999ns", 1},
    {"-1999ns", -1},
    {"11us", 11},
    {"12\u00b5s", 12}, /* micro sign */
    {"12\u03bcs", 12}, /* Greek mu */
    {"13ms", 13000},
    {"14s", 14000000},
    {"15m", 900000000},
    {"16h", G_GINT64_CONSTANT(57600000000)},
    {"3h30m", G_GINT64_CONSTANT(12600000000)},
    {"10.5s4m", 250500000},
    {"-2m3.4s", -123400000},
    {"1h2m3s4ms5us6ns", G_GINT64_CONSTANT(3723004005)},
    {"39h9m14.425s", G_GINT64_CONSTANT(140954425000)},
    {"52763797000ns", 52763797},
    {"0.3333333333333333333h", G_GINT64_CONSTANT(1200000000)},
    {"1.5µs", 1},
    {"0.5ms", 500},
    {"9007199254740993ns", G_GINT64_CONSTANT(9007199254740)},
    {"9223372036854775807ns", G_GINT64_CONSTANT(9223372036854775)},
    {"9223372036854775.807us", G_GINT64_CONSTANT(9223372036854775)},
    {"9223372036s854ms775us807ns", G_GINT64_CONSTANT(9223372036854775)},
    {"-9223372036854775808ns", G_GINT64_CONSTANT(-9223372036854775)},
    {"-9223372036854775.808us", G_GINT64_CONSTANT(-9223372036854775)},
    {"0.100000000000000000000h", G_GINT64_CONSTANT(360000000)},
    {"0.830103483285477580700h", G_GINT64_CONSTANT(2988372539)},
    {"2562047h", G_GINT64_CONSTANT(9223369200000000)},
};

static const char *const bad_durations[] = {
    "",
    "3",
    "-",
    "+",
    "s",
    ".",
    "-.",
    ".s",
    "+.s",
    "1d",
    "1.1.1s",
    "\u00b5s",
    "1 s",
    " 1s",
    "1s ",
    "1sx",
    "1S",
    "1s2",
    "x",
    "--1s",
    "9223372036854775808ns",
    "9223372036854775807ns1ns",
    "-9223372036854775809ns",
    "2562048h",
    "3000000h",
    "9223372036854775.808us",
    "99999999999999999999s",
};

/* Error domains are matched by quark, and a quark by its name across the plugin ABI and in
 * logs: the names are part of the interface. */
START_TEST(test_error_domain_names)
{
    ck_assert_str_eq(g_quark_to_string(PLEG_DURATION_ERROR), "pleg-duration-error-quark");
    ck_assert_str_eq(g_quark_to_string(PLEG_FEATURE_GATE_ERROR), "pleg-feature-gate-error-quark");
    ck_assert_str_eq(g_quark_to_string(PLEG_HOST_ERROR), "pleg-host-error-quark");
    ck_assert_str_eq(g_quark_to_string(PLEG_CRI_ERROR), "pleg-cri-error-quark");
}
END_TEST

START_TEST(test_duration_parse_good)
{
    for (gsize i = 0; i < G_N_ELEMENTS(good_durations); i++) {
        g_autoptr(GError) error = NULL;
        gint64 usec = 42;

        ck_assert_msg(pleg_duration_parse(good_durations[i].text, &usec, &error), "\"%s\": %s",
                      good_durations[i].text, error ? error->message : "?");
        ck_assert_msg(usec == good_durations[i].usec,
                      "\"%s\": got %" G_GINT64_FORMAT ", want %" G_GINT64_FORMAT,
                      good_durations[i].text, usec, good_durations[i].usec);
    }
    /* The result is optional. */
    ck_assert(pleg_duration_parse("1s", NULL, NULL));
}
END_TEST

START_TEST(test_duration_parse_bad)
{
    for (gsize i = 0; i < G_N_ELEMENTS(bad_durations); i++) {
        g_autoptr(GError) error = NULL;
        gint64 usec = 42;

        ck_assert_msg(!pleg_duration_parse(bad_durations[i], &usec, &error), "\"%s\" parsed",
                      bad_durations[i]);
        ck_assert_int_eq(usec, 42);
        ck_assert_ptr_nonnull(error);
        ck_assert_msg(g_error_matches(error, PLEG_DURATION_ERROR, PLEG_DURATION_ERROR_INVALID),
                      "\"%s\": wrong error %s", bad_durations[i], error->message);
        {
            g_autofree char *quoted = g_strdup_printf("\"%s\"", bad_durations[i]);
            ck_assert_msg(strstr(error->message, quoted) != NULL,
                          "error \"%s\" does not name the text", error->message);
        }
    }
}
END_TEST

START_TEST(test_duration_parse_messages)
{
    g_autoptr(GError) e1 = NULL, e2 = NULL, e3 = NULL;

    ck_assert(!pleg_duration_parse("3", NULL, &e1));
    ck_assert_str_eq(e1->message, "missing unit in duration \"3\"");
    ck_assert(!pleg_duration_parse("2d", NULL, &e2));
    ck_assert_str_eq(e2->message, "unknown unit \"d\" in duration \"2d\"");
    ck_assert(!pleg_duration_parse("3000000h", NULL, &e3));
    ck_assert_str_eq(e3->message, "overflow in duration \"3000000h\"");
}
END_TEST

static const struct {
    gint64 usec;
    const char *text;
} formats[] = {
    {0, "0s"},
    {1, "1\u00b5s"},
    {999, "999\u00b5s"},
    {1000, "1ms"},
    {1001, "1.001ms"},
    {1500, "1.5ms"},
    {500000, "500ms"},
    {999999, "999.999ms"},
    {1000000, "1s"},
    {1000001, "1.000001s"},
    {1500000, "1.5s"},
    {59000000, "59s"},
    {60000000, "1m0s"},
    {180000000, "3m0s"},
    {G_GINT64_CONSTANT(3600000000), "1h0m0s"},
    {G_GINT64_CONSTANT(3723000000), "1h2m3s"},
    {G_GINT64_CONSTANT(3723500000), "1h2m3.5s"},
    {G_GINT64_CONSTANT(90061000000), "25h1m1s"},
    {-1, "-1\u00b5s"},
    {-1500, "-1.5ms"},
    {-1500000, "-1.5s"},
    {-180000000, "-3m0s"},
    {G_MAXINT64, "2562047788h0m54.775807s"},
    {G_MININT64, "-2562047788h0m54.775808s"},
};

START_TEST(test_duration_format)
{
    for (gsize i = 0; i < G_N_ELEMENTS(formats); i++) {
        g_autofree char *text = pleg_duration_format(formats[i].usec);

        ck_assert_str_eq(text, formats[i].text);
    }
}
END_TEST

/* What format writes, parse reads back, within parse's range. */
START_TEST(test_duration_round_trip)
{
    static const gint64 values[] = {
        1,
        7,
        999,
        1000,
        1234,
        999999,
        1000000,
        1000001,
        61000001,
        G_GINT64_CONSTANT(86400000000),
        G_GINT64_CONSTANT(9223372036854775),
        -5,
        -G_GINT64_CONSTANT(9223372036854775),
    };

    for (gsize i = 0; i < G_N_ELEMENTS(values); i++) {
        g_autofree char *text = pleg_duration_format(values[i]);
        g_autoptr(GError) error = NULL;
        gint64 usec = 0;

        ck_assert_msg(pleg_duration_parse(text, &usec, &error), "%s: %s", text,
                      error ? error->message : "?");
        ck_assert_int_eq(usec, values[i]);
    }
}
END_TEST

START_TEST(test_rfc3339)
{
    static const struct {
        gint64 ns;
        const char *text;
    } cases[] = {
        {0, "1970-01-01T00:00:00Z"},
        {1, "1970-01-01T00:00:00.000000001Z"},
        {1500000000, "1970-01-01T00:00:01.5Z"},
        {G_GINT64_CONSTANT(1795966735000000000), "2026-11-29T15:38:55Z"},
        {G_GINT64_CONSTANT(1795966735123456789), "2026-11-29T15:38:55.123456789Z"},
        {G_GINT64_CONSTANT(1795966735900000000), "2026-11-29T15:38:55.9Z"},
        {G_GINT64_CONSTANT(1795966735120000000), "2026-11-29T15:38:55.12Z"},
        {G_GINT64_CONSTANT(1795966735000001000), "2026-11-29T15:38:55.000001Z"},
        {-1, "1969-12-31T23:59:59.999999999Z"},
        {-G_GINT64_CONSTANT(1000000000), "1969-12-31T23:59:59Z"},
        {G_GINT64_CONSTANT(951782400000000000), "2000-02-29T00:00:00Z"},
        {G_MAXINT64, "2262-04-11T23:47:16.854775807Z"},
        {G_MININT64, "1677-09-21T00:12:43.145224192Z"},
    };

    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autofree char *text = pleg_time_format_rfc3339(cases[i].ns);
        /* Guard bytes after the documented size: the buffer variant writes no further. */
        char buffer[PLEG_TIME_RFC3339_SIZE + 4];
        gsize len;

        memset(buffer, '#', sizeof(buffer));
        len = pleg_time_format_rfc3339_to_buffer(cases[i].ns, buffer);
        ck_assert_str_eq(text, cases[i].text);
        ck_assert_str_eq(buffer, cases[i].text);
        ck_assert_uint_eq(len, strlen(cases[i].text));
        ck_assert_uint_lt(len, PLEG_TIME_RFC3339_SIZE);
        ck_assert(memcmp(buffer + PLEG_TIME_RFC3339_SIZE, "####", 4) == 0);
    }
    /* The longest text there is fills the buffer exactly. */
    {
        char buffer[PLEG_TIME_RFC3339_SIZE];

        ck_assert_uint_eq(pleg_time_format_rfc3339_to_buffer(G_MAXINT64, buffer),
                          PLEG_TIME_RFC3339_SIZE - 1);
    }
}
END_TEST

/* The hand-written formatter agrees with GDateTime's calendar on any instant. */
static char *
rfc3339_by_gdatetime(gint64 ns)
{
    gint64 secs = ns / 1000000000, nsec = ns % 1000000000;
    g_autoptr(GDateTime) dt = NULL;
    g_autofree char *base = NULL;
    GString *out;

    if (nsec < 0) {
        nsec += 1000000000;
        secs--;
    }
    dt = g_date_time_new_from_unix_utc(secs);
    base = g_date_time_format(dt, "%Y-%m-%dT%H:%M:%S");
    out = g_string_new(base);
    if (nsec != 0) {
        g_autofree char *fraction = g_strdup_printf("%09" G_GINT64_FORMAT, nsec);
        gsize len = strlen(fraction);

        while (len > 0 && fraction[len - 1] == '0')
            len--;
        g_string_append_c(out, '.');
        g_string_append_len(out, fraction, len);
    }
    g_string_append_c(out, 'Z');
    return g_string_free(out, FALSE);
}

START_TEST(test_rfc3339_calendar)
{
    g_autoptr(GRand) rand = g_rand_new_with_seed(3386);

    for (guint i = 0; i < 200000; i++) {
        gint64 ns;
        g_autofree char *text = NULL, *expected = NULL;

        if (i % 4 == 0) /* whole seconds, days and leap days: every date of every year */
            ns = (gint64)g_rand_int_range(rand, -106750, 106750) * 86400 * 1000000000 +
                 (gint64)g_rand_int_range(rand, 0, 86400) * 1000000000;
        else
            ns = (gint64)(((guint64)g_rand_int(rand) << 32) | g_rand_int(rand));
        text = pleg_time_format_rfc3339(ns);
        expected = rfc3339_by_gdatetime(ns);
        ck_assert_str_eq(text, expected);
    }
}
END_TEST

START_TEST(test_gates_defaults)
{
    g_autoptr(PlegFeatureGates) gates = pleg_feature_gates_new();
    PlegFeatureStage stage = PLEG_FEATURE_GA;
    gboolean def = TRUE;

    ck_assert(!pleg_feature_gates_enabled(gates, PLEG_FEATURE_EVENTED_PLEG));
    ck_assert(pleg_feature_gates_enabled(gates, PLEG_FEATURE_SYSTEMD_WATCHDOG));
    ck_assert(!pleg_feature_gates_enabled(gates, PLEG_FEATURE_KUBELET_WATCHDOG_DIAGNOSTICS));
    ck_assert(!pleg_feature_gates_enabled(gates, "NoSuchGate"));

    ck_assert(pleg_feature_gates_known(gates, "EventedPLEG", &stage, &def));
    ck_assert_int_eq(stage, PLEG_FEATURE_ALPHA);
    ck_assert(!def);
    ck_assert(pleg_feature_gates_known(gates, "SystemdWatchdog", &stage, &def));
    ck_assert_int_eq(stage, PLEG_FEATURE_BETA);
    ck_assert(def);
    ck_assert(pleg_feature_gates_known(gates, "KubeletWatchdogDiagnostics", &stage, &def));
    ck_assert_int_eq(stage, PLEG_FEATURE_ALPHA);
    ck_assert(!def);
    ck_assert(pleg_feature_gates_known(gates, "EventedPLEG", NULL, NULL));

    stage = PLEG_FEATURE_GA;
    def = TRUE;
    ck_assert(!pleg_feature_gates_known(gates, "eventedpleg", &stage, &def));
    ck_assert_int_eq(stage, PLEG_FEATURE_GA);
    ck_assert(def);

    pleg_feature_gates_free(NULL);
}
END_TEST

START_TEST(test_gates_set)
{
    g_autoptr(PlegFeatureGates) gates = pleg_feature_gates_new();
    g_autoptr(GError) error = NULL;

    ck_assert(pleg_feature_gates_set(gates, "EventedPLEG", TRUE, NULL));
    ck_assert(pleg_feature_gates_enabled(gates, "EventedPLEG"));
    ck_assert(pleg_feature_gates_set(gates, "SystemdWatchdog", FALSE, NULL));
    ck_assert(!pleg_feature_gates_enabled(gates, "SystemdWatchdog"));

    ck_assert(!pleg_feature_gates_set(gates, "Bogus", TRUE, &error));
    ck_assert(g_error_matches(error, PLEG_FEATURE_GATE_ERROR, PLEG_FEATURE_GATE_ERROR_UNKNOWN));
    ck_assert_str_eq(error->message, "unrecognized feature gate: Bogus");
}
END_TEST

START_TEST(test_gates_parse)
{
    g_autoptr(PlegFeatureGates) gates = pleg_feature_gates_new();

    ck_assert(pleg_feature_gates_parse(gates, "", NULL));
    ck_assert(!pleg_feature_gates_enabled(gates, "EventedPLEG"));
    ck_assert(pleg_feature_gates_enabled(gates, "SystemdWatchdog"));

    ck_assert(pleg_feature_gates_parse(gates, "EventedPLEG=true,SystemdWatchdog=false", NULL));
    ck_assert(pleg_feature_gates_enabled(gates, "EventedPLEG"));
    ck_assert(!pleg_feature_gates_enabled(gates, "SystemdWatchdog"));
    ck_assert(!pleg_feature_gates_enabled(gates, "KubeletWatchdogDiagnostics"));

    ck_assert(pleg_feature_gates_parse(
        gates, "  EventedPLEG = false ,\tKubeletWatchdogDiagnostics=1 , ,", NULL));
    ck_assert(!pleg_feature_gates_enabled(gates, "EventedPLEG"));
    ck_assert(pleg_feature_gates_enabled(gates, "KubeletWatchdogDiagnostics"));

    /* The last setting of a gate wins. */
    ck_assert(pleg_feature_gates_parse(gates, "EventedPLEG=true,EventedPLEG=false", NULL));
    ck_assert(!pleg_feature_gates_enabled(gates, "EventedPLEG"));
}
END_TEST

START_TEST(test_gates_bool_spellings)
{
    static const char *const yes[] = {"1", "t", "T", "TRUE", "true", "True"};
    static const char *const no[] = {"0", "f", "F", "FALSE", "false", "False"};
    static const char *const bad[] = {"yes", "no", "on", "tRue", "2", "", "truee", "\"true\""};

    for (gsize i = 0; i < G_N_ELEMENTS(yes); i++) {
        g_autoptr(PlegFeatureGates) gates = pleg_feature_gates_new();
        g_autofree char *text = g_strdup_printf("EventedPLEG=%s", yes[i]);

        ck_assert_msg(pleg_feature_gates_parse(gates, text, NULL), "%s", text);
        ck_assert(pleg_feature_gates_enabled(gates, "EventedPLEG"));
    }
    for (gsize i = 0; i < G_N_ELEMENTS(no); i++) {
        g_autoptr(PlegFeatureGates) gates = pleg_feature_gates_new();
        g_autofree char *text = g_strdup_printf("SystemdWatchdog=%s", no[i]);

        ck_assert_msg(pleg_feature_gates_parse(gates, text, NULL), "%s", text);
        ck_assert(!pleg_feature_gates_enabled(gates, "SystemdWatchdog"));
    }
    for (gsize i = 0; i < G_N_ELEMENTS(bad); i++) {
        g_autoptr(PlegFeatureGates) gates = pleg_feature_gates_new();
        g_autofree char *text = g_strdup_printf("EventedPLEG=%s", bad[i]);
        g_autofree char *named = g_strdup_printf("EventedPLEG=%s", bad[i]);
        g_autoptr(GError) error = NULL;

        ck_assert_msg(!pleg_feature_gates_parse(gates, text, &error), "%s parsed", text);
        ck_assert(
            g_error_matches(error, PLEG_FEATURE_GATE_ERROR, PLEG_FEATURE_GATE_ERROR_BAD_VALUE));
        ck_assert_msg(strstr(error->message, named) != NULL, "\"%s\" does not name %s",
                      error->message, named);
        ck_assert(!pleg_feature_gates_enabled(gates, "EventedPLEG"));
    }
}
END_TEST

START_TEST(test_gates_errors)
{
    g_autoptr(PlegFeatureGates) gates = pleg_feature_gates_new();
    g_autoptr(GError) unknown = NULL, bad = NULL, malformed = NULL, bare = NULL;

    ck_assert(!pleg_feature_gates_parse(gates, "EventedPLEG=true, Bogus=true", &unknown));
    ck_assert(g_error_matches(unknown, PLEG_FEATURE_GATE_ERROR, PLEG_FEATURE_GATE_ERROR_UNKNOWN));
    ck_assert_str_eq(unknown->message, "unrecognized feature gate: Bogus");

    ck_assert(!pleg_feature_gates_parse(gates,
                                        "KubeletWatchdogDiagnostics=true,"
                                        "SystemdWatchdog=maybe",
                                        &bad));
    ck_assert(g_error_matches(bad, PLEG_FEATURE_GATE_ERROR, PLEG_FEATURE_GATE_ERROR_BAD_VALUE));
    ck_assert_msg(g_str_has_prefix(bad->message, "invalid value of SystemdWatchdog=maybe"), "%s",
                  bad->message);

    ck_assert(!pleg_feature_gates_parse(gates, "EventedPLEG=true,SystemdWatchdog", &malformed));
    ck_assert(
        g_error_matches(malformed, PLEG_FEATURE_GATE_ERROR, PLEG_FEATURE_GATE_ERROR_MALFORMED));
    ck_assert_msg(strstr(malformed->message, "SystemdWatchdog") != NULL, "%s", malformed->message);

    ck_assert(!pleg_feature_gates_parse(gates, "=true", &bare));
    /* "" is no gate name. */
    ck_assert(g_error_matches(bare, PLEG_FEATURE_GATE_ERROR, PLEG_FEATURE_GATE_ERROR_UNKNOWN));

    /* All or nothing: the good items before a bad one were not applied. */
    ck_assert(!pleg_feature_gates_enabled(gates, "EventedPLEG"));
    ck_assert(!pleg_feature_gates_enabled(gates, "KubeletWatchdogDiagnostics"));
    ck_assert(pleg_feature_gates_enabled(gates, "SystemdWatchdog"));
}
END_TEST

/* ---- untrusted text for messages ---- */

static const struct {
    const char *text;
    gssize length;
    gsize max_bytes;
    const char *shown;
} log_texts[] = {
    {"plain text, \"quoted\"", -1, 0, "plain text, \"quoted\""},
    {"µs and ✓ stay", -1, 0, "µs and ✓ stay"},
    {"a\nb\rc\td", -1, 0, "a\\nb\\rc\\td"},
    {"\x1b[31mred\x07", -1, 0, "\\x1b[31mred\\x07"},
    {"back\\slash", -1, 0, "back\\\\slash"},
    {"\xff\xfe ok \xc3", -1, 0, "\\xff\\xfe ok \\xc3"},
    {"nul\0inside", 10, 0, "nul\\x00inside"},
    {"\xc2\x85", -1, 0, "\\u0085"},
    {"abcdef", -1, 3, "abc... (6 bytes in all)"},
    {"abcdef", -1, 6, "abcdef"},
    /* A character is never cut in half. */
    {"ab✓", -1, 3, "ab... (5 bytes in all)"},
    {"", -1, 0, ""},
};

START_TEST(test_log_text)
{
    g_autofree char *shown =
        pleg_log_text(log_texts[_i].text, log_texts[_i].length, log_texts[_i].max_bytes);

    ck_assert_str_eq(shown, log_texts[_i].shown);
    ck_assert(g_utf8_validate(shown, -1, NULL));
}
END_TEST

START_TEST(test_log_text_limits)
{
    g_autofree char *huge = g_strnfill(100 * 1024, 'x');
    g_autofree char *shown = pleg_log_text(huge, -1, 0);
    g_autofree char *expected_tail = g_strdup_printf("... (%d bytes in all)", 100 * 1024);
    g_autofree char *null_shown = pleg_log_text(NULL, -1, 0);

    ck_assert_uint_eq(strlen(shown), PLEG_LOG_TEXT_MAX + strlen(expected_tail));
    ck_assert(g_str_has_suffix(shown, expected_tail));
    ck_assert_str_eq(null_shown, "(null)");
}
END_TEST

/* The library's own parse errors quote bad input through it. */
START_TEST(test_errors_escape_input)
{
    g_autoptr(PlegFeatureGates) gates = pleg_feature_gates_new();
    g_autoptr(GError) error = NULL;
    g_autofree char *huge = g_strnfill(100 * 1024, 'x');
    gint64 usec;

    ck_assert(!pleg_duration_parse("1\x1b[2Js", &usec, &error));
    ck_assert_msg(strstr(error->message, "\\x1b[2J") && !strchr(error->message, '\x1b'), "%s",
                  error->message);
    g_clear_error(&error);
    ck_assert(!pleg_duration_parse(huge, &usec, &error));
    ck_assert_uint_lt(strlen(error->message), 400);
    g_clear_error(&error);
    ck_assert(!pleg_feature_gates_parse(gates, huge, &error));
    ck_assert_uint_lt(strlen(error->message), 400);
    g_clear_error(&error);
    ck_assert(!pleg_feature_gates_parse(gates, "Ev\x1bil=true", &error));
    ck_assert_msg(strstr(error->message, "Ev\\x1bil"), "%s", error->message);
}
END_TEST

/* Plugin-declared gates (issue 9): accepted like built-in ones once registered. */
START_TEST(test_gates_register)
{
    g_autoptr(PlegFeatureGates) gates = pleg_feature_gates_new();
    g_autoptr(GError) unknown = NULL, error = NULL;
    PlegFeatureStage stage = PLEG_FEATURE_GA;
    gboolean def = TRUE;

    /* Unknown until registered. */
    ck_assert(!pleg_feature_gates_parse(gates, "ProbeGate=true", &unknown));
    ck_assert_str_eq(unknown->message, "unrecognized feature gate: ProbeGate");
    ck_assert(!pleg_feature_gates_known(gates, "ProbeGate", NULL, NULL));

    ck_assert(pleg_feature_gates_register(gates, "ProbeGate", PLEG_FEATURE_ALPHA, FALSE,
                                          "probe.plugin", &error));
    ck_assert(pleg_feature_gates_known(gates, "ProbeGate", &stage, &def));
    ck_assert_int_eq(stage, PLEG_FEATURE_ALPHA);
    ck_assert(!def);
    ck_assert(!pleg_feature_gates_enabled(gates, "ProbeGate"));
    ck_assert(!pleg_feature_gates_is_builtin("ProbeGate"));
    ck_assert(pleg_feature_gates_is_builtin("EventedPLEG"));

    ck_assert(pleg_feature_gates_parse(gates, "ProbeGate=true,EventedPLEG=true", NULL));
    ck_assert(pleg_feature_gates_enabled(gates, "ProbeGate"));
    ck_assert(pleg_feature_gates_enabled(gates, "EventedPLEG"));
    ck_assert(pleg_feature_gates_set(gates, "ProbeGate", FALSE, NULL));
    ck_assert(!pleg_feature_gates_enabled(gates, "ProbeGate"));

    /* A default-on gate starts on; the same declaration twice is fine and keeps the value. */
    ck_assert(pleg_feature_gates_register(gates, "OtherGate", PLEG_FEATURE_BETA, TRUE, "a", NULL));
    ck_assert(pleg_feature_gates_enabled(gates, "OtherGate"));
    ck_assert(pleg_feature_gates_set(gates, "OtherGate", FALSE, NULL));
    ck_assert(pleg_feature_gates_register(gates, "OtherGate", PLEG_FEATURE_BETA, TRUE, "b", NULL));
    ck_assert(!pleg_feature_gates_enabled(gates, "OtherGate"));

    /* All or nothing holds for declared gates too. */
    ck_assert(!pleg_feature_gates_parse(gates, "OtherGate=true,ProbeGate=maybe", NULL));
    ck_assert(!pleg_feature_gates_enabled(gates, "OtherGate"));

    /* Registered gates belong to their registry only. */
    {
        g_autoptr(PlegFeatureGates) fresh = pleg_feature_gates_new();

        ck_assert(!pleg_feature_gates_known(fresh, "ProbeGate", NULL, NULL));
        ck_assert(!pleg_feature_gates_set(fresh, "ProbeGate", TRUE, NULL));
    }
}
END_TEST

START_TEST(test_gates_register_errors)
{
    g_autoptr(PlegFeatureGates) gates = pleg_feature_gates_new();
    g_autoptr(GError) builtin = NULL, conflict = NULL, name = NULL, empty = NULL, stage = NULL;

    ck_assert(!pleg_feature_gates_register(gates, "SystemdWatchdog", PLEG_FEATURE_BETA, TRUE,
                                           "x.plugin", &builtin));
    ck_assert(g_error_matches(builtin, PLEG_FEATURE_GATE_ERROR, PLEG_FEATURE_GATE_ERROR_REDEFINED));
    ck_assert_str_eq(builtin->message,
                     "feature gate SystemdWatchdog is built in: x.plugin may not redefine it");

    ck_assert(pleg_feature_gates_register(gates, "ProbeGate", PLEG_FEATURE_ALPHA, FALSE,
                                          "a.plugin", NULL));
    ck_assert(!pleg_feature_gates_register(gates, "ProbeGate", PLEG_FEATURE_BETA, FALSE,
                                           "b.plugin", &conflict));
    ck_assert(g_error_matches(conflict, PLEG_FEATURE_GATE_ERROR, PLEG_FEATURE_GATE_ERROR_CONFLICT));
    ck_assert_str_eq(conflict->message,
                     "feature gate ProbeGate is declared differently: Alpha, default false by "
                     "a.plugin; Beta, default false by b.plugin");
    /* The first declaration stays. */
    ck_assert(!pleg_feature_gates_enabled(gates, "ProbeGate"));

    ck_assert(!pleg_feature_gates_register(gates, "probe-gate", PLEG_FEATURE_ALPHA, FALSE,
                                           "c.plugin", &name));
    ck_assert(g_error_matches(name, PLEG_FEATURE_GATE_ERROR, PLEG_FEATURE_GATE_ERROR_BAD_NAME));
    ck_assert_str_eq(name->message,
                     "invalid feature gate name \"probe-gate\" declared by c.plugin: want an "
                     "upper-case letter followed by letters and digits");
    ck_assert(!pleg_feature_gates_register(gates, "", PLEG_FEATURE_ALPHA, FALSE, "d", &empty));
    ck_assert(g_error_matches(empty, PLEG_FEATURE_GATE_ERROR, PLEG_FEATURE_GATE_ERROR_BAD_NAME));
    ck_assert(!pleg_feature_gates_register(gates, "StageGate", (PlegFeatureStage)17, FALSE, "e",
                                           &stage));
    ck_assert(g_error_matches(stage, PLEG_FEATURE_GATE_ERROR, PLEG_FEATURE_GATE_ERROR_BAD_STAGE));
    ck_assert_str_eq(stage->message, "invalid stage 17 of feature gate StageGate declared by e");
    ck_assert(!pleg_feature_gates_known(gates, "StageGate", NULL, NULL));
}
END_TEST

START_TEST(test_feature_stage_names)
{
    static const char *const names[] = {"Alpha", "Beta", "GA", "Deprecated"};
    PlegFeatureStage stage;

    for (gsize i = 0; i < G_N_ELEMENTS(names); i++) {
        ck_assert(pleg_feature_stage_from_string(names[i], &stage));
        ck_assert_int_eq(stage, (PlegFeatureStage)i);
        ck_assert_str_eq(pleg_feature_stage_to_string(stage), names[i]);
    }
    stage = PLEG_FEATURE_BETA;
    ck_assert(!pleg_feature_stage_from_string("alpha", &stage));
    ck_assert(!pleg_feature_stage_from_string("ALPHA", &stage));
    ck_assert(!pleg_feature_stage_from_string("", &stage));
    ck_assert_int_eq(stage, PLEG_FEATURE_BETA);
    ck_assert_str_eq(pleg_feature_stage_to_string((PlegFeatureStage)42), "unknown");
}
END_TEST

static Suite *
util_suite(void)
{
    Suite *s = suite_create("util");
    TCase *durations = tcase_create("durations");
    TCase *times = tcase_create("times");
    TCase *gates = tcase_create("gates");
    TCase *log_text = tcase_create("log-text");

    tcase_add_test(durations, test_error_domain_names);
    tcase_add_test(durations, test_duration_parse_good);
    tcase_add_test(durations, test_duration_parse_bad);
    tcase_add_test(durations, test_duration_parse_messages);
    tcase_add_test(durations, test_duration_format);
    tcase_add_test(durations, test_duration_round_trip);
    suite_add_tcase(s, durations);

    tcase_add_test(times, test_rfc3339);
    tcase_add_test(times, test_rfc3339_calendar);
    suite_add_tcase(s, times);

    tcase_add_test(gates, test_gates_defaults);
    tcase_add_test(gates, test_gates_set);
    tcase_add_test(gates, test_gates_parse);
    tcase_add_test(gates, test_gates_bool_spellings);
    tcase_add_test(gates, test_gates_errors);
    tcase_add_test(gates, test_gates_register);
    tcase_add_test(gates, test_gates_register_errors);
    tcase_add_test(gates, test_feature_stage_names);
    suite_add_tcase(s, gates);

    tcase_add_loop_test(log_text, test_log_text, 0, G_N_ELEMENTS(log_texts));
    tcase_add_test(log_text, test_log_text_limits);
    tcase_add_test(log_text, test_errors_escape_input);
    suite_add_tcase(s, log_text);
    return s;
}

int
main(void)
{
    SRunner *runner = srunner_create(util_suite());
    int failed;

    srunner_run_all(runner, CK_NORMAL);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
