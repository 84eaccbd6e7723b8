/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegctl's pure parts, driven directly: the --address forms (TCP, a unix socket, what is
 * refused), the tables (aligned columns, no trailing blanks, a stream's growing columns, cells
 * escaped), and reading plegd's JSON members of the wrong type without a critical.
 */
#include <check.h>

#include "plegctl.h"

static void
assert_address(const char *text, const char *base, const char *socket)
{
    g_autofree char *got_base = NULL, *got_socket = NULL;
    g_autoptr(GError) error = NULL;

    ck_assert_msg(plegctl_parse_address(text, &got_base, &got_socket, &error), "%s: %s", text,
                  error ? error->message : "");
    ck_assert_str_eq(got_base, base);
    ck_assert_str_eq(got_socket ? got_socket : "(tcp)", socket ? socket : "(tcp)");
}

static void
assert_bad_address(const char *text, const char *why)
{
    g_autofree char *base = NULL, *socket = NULL;
    g_autoptr(GError) error = NULL;

    ck_assert_msg(!plegctl_parse_address(text, &base, &socket, &error), "%s was taken", text);
    ck_assert(g_error_matches(error, PLEGCTL_ERROR, PLEGCTL_EXIT_USAGE));
    ck_assert_msg(strstr(error->message, why), "%s: %s", text, error->message);
}

START_TEST(test_addresses)
{
    assert_address("http://127.0.0.1:10388", "http://127.0.0.1:10388", NULL);
    assert_address("http://127.0.0.1:10388/", "http://127.0.0.1:10388", NULL);
    assert_address("127.0.0.1:10388", "http://127.0.0.1:10388", NULL);
    assert_address("[::1]:10388", "http://[::1]:10388", NULL);
    assert_address("http://localhost:8080", "http://localhost:8080", NULL);
    assert_address("unix:/run/plegd/http.sock", "http://localhost", "/run/plegd/http.sock");
    assert_address("unix:///run/plegd/http.sock", "http://localhost", "/run/plegd/http.sock");
    assert_address("unix:relative.sock", "http://localhost", "relative.sock");

    assert_bad_address("unix:", "no socket path");
    assert_bad_address("unix://host/x.sock", "has no host");
    assert_bad_address("ftp://host:21", "not an http:// URL");
    assert_bad_address("https://host:443", "not an http:// URL");
    assert_bad_address("http://127.0.0.1", "no port");
    assert_bad_address("http://127.0.0.1:10388/metrics", "only a scheme, a host and a port");
    assert_bad_address("http://127.0.0.1:10388?x=1", "only a scheme, a host and a port");
    assert_bad_address("http://:10388", "no host");
}
END_TEST

START_TEST(test_table)
{
    g_autoptr(PlegctlTable) table = plegctl_table_new((const char *const[]){"A", "LONGER", "C",
                                                                            NULL});
    g_autofree char *text = NULL;

    plegctl_table_add_row(table, (const char *const[]){"wide-cell", "x", "", NULL});
    plegctl_table_add_row(table, (const char *const[]){NULL, "y", "end", NULL});
    text = plegctl_table_format(table);
    /* Two spaces apart, each column as wide as its widest cell, NULL as "-", nothing after the
     * last cell. */
    ck_assert_str_eq(text, "A          LONGER  C\n"
                           "wide-cell  x\n"
                           "-          y       end\n");
}
END_TEST

START_TEST(test_table_stream)
{
    g_autoptr(PlegctlTable) table = plegctl_table_new((const char *const[]){"A", "B", NULL});
    g_autofree char *first = NULL, *second = NULL, *third = NULL;

    plegctl_table_widen(table, (const char *const[]){"123", "", NULL});
    first = plegctl_table_format_row(table, (const char *const[]){"1", "x", NULL});
    second = plegctl_table_format_row(table, (const char *const[]){"12345", "y", NULL});
    third = plegctl_table_format_row(table, (const char *const[]){"1", "z", NULL});
    /* The headers once, with the first row; columns only grow. */
    ck_assert_str_eq(first, "A    B\n1    x\n");
    ck_assert_str_eq(second, "12345  y\n");
    ck_assert_str_eq(third, "1      z\n");
}
END_TEST

START_TEST(test_cells)
{
    g_autofree char *escaped = plegctl_cell("a\nb\tc\x1b[31m");
    g_autofree char *dash = plegctl_cell(NULL);
    g_autofree char *utf8 = plegctl_cell("café");
    g_autofree char *not_a_time = plegctl_format_time("yesterday");
    g_autofree char *no_time = plegctl_format_time(NULL);
    g_autofree char *time = plegctl_format_time("2026-12-04T17:00:00.123456789Z");

    ck_assert_str_eq(escaped, "a\\nb\\tc\\x1b[31m");
    ck_assert_str_eq(dash, "-");
    ck_assert_str_eq(utf8, "café");
    ck_assert_str_eq(not_a_time, "yesterday");
    ck_assert_str_eq(no_time, "-");
    /* Local time to the second ("YYYY-MM-DD HH:MM:SS"); the zone is the test machine's. */
    ck_assert_int_eq(strlen(time), 19);
    ck_assert_msg(g_str_has_prefix(time, "2026-12-0"), "%s", time);
}
END_TEST

START_TEST(test_json_members)
{
    g_autoptr(JsonParser) parser = json_parser_new();
    JsonObject *object;
    gint64 number = 0;
    gboolean flag = FALSE;

    ck_assert(json_parser_load_from_data(
        parser, "{\"s\":\"x\",\"n\":7,\"b\":true,\"o\":{},\"a\":[1,{}],\"null\":null}", -1,
        NULL));
    object = json_node_get_object(json_parser_get_root(parser));
    ck_assert_str_eq(plegctl_json_string(object, "s"), "x");
    ck_assert_ptr_null(plegctl_json_string(object, "n"));
    ck_assert_ptr_null(plegctl_json_string(object, "null"));
    ck_assert_ptr_null(plegctl_json_string(object, "missing"));
    ck_assert_ptr_null(plegctl_json_string(NULL, "s"));
    ck_assert(plegctl_json_int(object, "n", &number));
    ck_assert_int_eq(number, 7);
    ck_assert(!plegctl_json_int(object, "s", &number));
    ck_assert(plegctl_json_bool(object, "b", &flag) && flag);
    ck_assert(!plegctl_json_bool(object, "n", &flag));
    ck_assert_ptr_nonnull(plegctl_json_object(object, "o"));
    ck_assert_ptr_null(plegctl_json_object(object, "a"));
    ck_assert_ptr_null(plegctl_json_array(object, "o"));
    ck_assert_ptr_null(plegctl_json_element(plegctl_json_array(object, "a"), 0));
    ck_assert_ptr_nonnull(plegctl_json_element(plegctl_json_array(object, "a"), 1));
    ck_assert_ptr_null(plegctl_json_element(plegctl_json_array(object, "a"), 2));
    ck_assert_ptr_null(plegctl_json_element(NULL, 0));
}
END_TEST

static Suite *
units_suite(void)
{
    Suite *suite = suite_create("plegctl-units");
    TCase *tc = tcase_create("units");

    tcase_add_test(tc, test_addresses);
    tcase_add_test(tc, test_table);
    tcase_add_test(tc, test_table_stream);
    tcase_add_test(tc, test_cells);
    tcase_add_test(tc, test_json_members);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    SRunner *runner = srunner_create(units_suite());
    int failed;

    srunner_run_all(runner, CK_NORMAL);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? 0 : 1;
}
