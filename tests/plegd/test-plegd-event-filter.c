/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The filters of GET /events on events built here: each key alone and combined, repeated keys,
 * since_time and its syntax, the errors that name the key, and the key the ring keeps.
 */
#include <check.h>
#include <stdlib.h>

#include "plegd.h"

/* 2026-12-04T17:00:00Z */
#define T0_NS G_GINT64_CONSTANT(1796403600000000000)

typedef struct {
    PlegPodLifecycleEvent event;
    PlegdEventKey *key;
} TestEvent;

/* An event of the pod @ns/@pod (uid "uid-@pod"), container @container (NULL: its sandbox). */
static void
test_event_init(TestEvent *te, PlegPodLifecycleEventType type, const char *ns, const char *pod,
                const char *container, gint64 time_ns)
{
    g_autofree char *uid = pod ? g_strconcat("uid-", pod, NULL) : NULL;

    te->event = (PlegPodLifecycleEvent){
        .pod_uid = uid,
        .type = type,
        .container_id = (char *)"c0ffee",
        .time_ns = time_ns,
        .details =
            {
                .pod_namespace = (char *)ns,
                .pod_name = (char *)pod,
                .container_name = (char *)container,
                .sandbox = type != PLEG_POD_SYNC && ns != NULL && container == NULL,
            },
    };
    te->key = plegd_event_key_new(&te->event);
    te->event.pod_uid = NULL; /* the key holds copies */
}

/* A filter of "name=value&..." (split here, not by the HTTP parser). */
static PlegdEventFilter *
filter_of(const char *query)
{
    g_auto(GStrv) params = g_strsplit(query, "&", -1);
    PlegdEventFilter *filter = plegd_event_filter_new(T0_NS);

    for (char **p = params; *p && **p; p++) {
        g_auto(GStrv) nv = g_strsplit(*p, "=", 2);
        g_autoptr(GError) error = NULL;

        ck_assert_msg(plegd_event_filter_add(filter, nv[0], nv[1] ? nv[1] : "", &error), "%s: %s",
                      *p, error ? error->message : "");
    }
    return filter;
}

/* The events of the tests, and which of them @query selects ("01101..."). */
static void
assert_selects(const char *query, const char *expected)
{
    TestEvent events[8];
    g_autoptr(PlegdEventFilter) filter = filter_of(query);
    char got[G_N_ELEMENTS(events) + 1] = {0};

    test_event_init(&events[0], PLEG_CONTAINER_STARTED, "shop", "web", NULL, T0_NS);
    test_event_init(&events[1], PLEG_CONTAINER_STARTED, "shop", "web", "nginx", T0_NS + 1);
    test_event_init(&events[2], PLEG_CONTAINER_DIED, "shop", "web", "nginx", T0_NS + 2);
    test_event_init(&events[3], PLEG_CONTAINER_DIED, "shop", "cart", "redis", T0_NS + 3);
    test_event_init(&events[4], PLEG_CONTAINER_DIED, "default", "web", "nginx", T0_NS + 4);
    test_event_init(&events[5], PLEG_CONTAINER_REMOVED, "shop", "web", NULL, T0_NS + 5);
    test_event_init(&events[6], PLEG_POD_SYNC, "shop", "cart", NULL, T0_NS + 6);
    /* Names not known (a libpleg that does not fill them, a runtime that gave none). */
    test_event_init(&events[7], PLEG_CONTAINER_DIED, NULL, NULL, NULL, T0_NS + 7);

    for (guint i = 0; i < G_N_ELEMENTS(events); i++) {
        got[i] = plegd_event_filter_match(filter, events[i].key) ? '1' : '0';
        plegd_event_key_free(events[i].key);
    }
    ck_assert_msg(g_str_equal(got, expected), "%s selects %s, expected %s", query, got, expected);
}

START_TEST(test_each_key)
{
    assert_selects("type=ContainerStarted", "11000000");
    assert_selects("type=ContainerDied", "00111001");
    assert_selects("type=ContainerRemoved", "00000100");
    assert_selects("type=PodSync", "00000010");
    assert_selects("namespace=shop", "11110110");
    assert_selects("namespace=default", "00001000");
    assert_selects("pod=web", "11101100");
    assert_selects("pod_uid=uid-cart", "00010010");
    assert_selects("container=nginx", "01101000");
    assert_selects("sandbox=true", "10000100");
    assert_selects("sandbox=false", "01111011");
    assert_selects("namespace=nowhere", "00000000");
    /* Exact: no prefix, no case folding. */
    assert_selects("namespace=sho", "00000000");
    assert_selects("pod=WEB", "00000000");
}
END_TEST

START_TEST(test_repeated_and_combined)
{
    /* OR within a key. */
    assert_selects("type=ContainerStarted&type=ContainerRemoved", "11000100");
    assert_selects("pod=web&pod=cart", "11111110");
    assert_selects("sandbox=true&sandbox=false", "11111111");
    /* AND across keys. */
    assert_selects("type=ContainerDied&namespace=shop", "00110000");
    assert_selects("type=ContainerDied&namespace=shop&container=redis", "00010000");
    assert_selects("namespace=shop&pod=web&sandbox=false", "01100000");
    assert_selects("type=ContainerDied&type=ContainerStarted&namespace=default&namespace=shop"
                   "&container=nginx",
                   "01101000");
    /* The empty filter matches everything, names or not. */
    assert_selects("", "11111111");
}
END_TEST

START_TEST(test_since_time)
{
    g_autofree char *rfc = NULL;
    g_autofree char *query = NULL;

    /* At or after: the event at T0 + 3 ns is in. */
    rfc = pleg_time_format_rfc3339(T0_NS + 3);
    query = g_strconcat("since_time=", rfc, NULL);
    assert_selects(query, "00011111");
    g_clear_pointer(&query, g_free);
    query = g_strconcat("since_time=", rfc, "&type=ContainerDied", NULL);
    assert_selects(query, "00011001");
    /* until_time does not select: the stream applies it (it may end there). */
    assert_selects("until_time=2026-12-04T17:00:00Z", "11111111");
    /* A duration counts back from the filter's now (T0). */
    assert_selects("since_time=0s", "11111111");
    assert_selects("since_time=-1us", "00000000");
}
END_TEST

static gint64
parse_time(const char *value)
{
    g_autoptr(GError) error = NULL;
    gint64 ns = 42;

    ck_assert_msg(plegd_event_filter_parse_time("since_time", value, T0_NS, &ns, &error), "%s: %s",
                  value, error ? error->message : "");
    return ns;
}

START_TEST(test_parse_time)
{
    ck_assert_int_eq(parse_time("2026-12-04T17:00:00Z"), T0_NS);
    ck_assert_int_eq(parse_time("2026-12-04T18:00:00+01:00"), T0_NS);
    ck_assert_int_eq(parse_time("2026-12-04T17:00:00.5Z"), T0_NS + 500000000);
    /* Every digit of an event's time counts, past GLib's microseconds. */
    ck_assert_int_eq(parse_time("2026-12-04T17:00:00.123456789Z"), T0_NS + 123456789);
    ck_assert_int_eq(parse_time("2026-12-04T16:59:59.999999999Z"), T0_NS - 1);
    ck_assert_int_eq(parse_time("10m"), T0_NS - 600 * G_GINT64_CONSTANT(1000000000));
    ck_assert_int_eq(parse_time("1h30m"), T0_NS - 5400 * G_GINT64_CONSTANT(1000000000));
    ck_assert_int_eq(parse_time("-5m"), T0_NS + 300 * G_GINT64_CONSTANT(1000000000));
    ck_assert_int_eq(parse_time("0"), T0_NS);
    /* An event's own time gives it back. */
    {
        g_autofree char *text = pleg_time_format_rfc3339(T0_NS + 987654321);

        ck_assert_int_eq(parse_time(text), T0_NS + 987654321);
    }
    /* No overflow at the ends. */
    ck_assert_int_eq(parse_time("-2562047h"), G_MAXINT64);
}
END_TEST

/* plegd_event_filter_add(@name, @value) fails with a message containing each of @needles. */
static void
assert_refused(const char *name, const char *value, GOptionError code, const char *needle1,
               const char *needle2)
{
    g_autoptr(PlegdEventFilter) filter = plegd_event_filter_new(T0_NS);
    g_autoptr(GError) error = NULL;

    ck_assert_msg(!plegd_event_filter_add(filter, name, value, &error), "%s=%.40s accepted", name,
                  value);
    ck_assert_msg(g_error_matches(error, G_OPTION_ERROR, (gint)code), "%s", error->message);
    ck_assert_msg(strstr(error->message, needle1), "\"%s\" not in: %s", needle1, error->message);
    if (needle2)
        ck_assert_msg(strstr(error->message, needle2), "\"%s\" not in: %s", needle2,
                      error->message);
    ck_assert_uint_lt(strlen(error->message), 1024);
}

START_TEST(test_bad_values)
{
    g_autofree char *huge = g_strnfill(100 * 1024, 'a');
    g_autoptr(PlegdEventFilter) filter = plegd_event_filter_new(T0_NS);
    g_autoptr(GError) error = NULL;

    assert_refused("type", "ContainerExploded", G_OPTION_ERROR_BAD_VALUE,
                   "invalid type \"ContainerExploded\"",
                   "expected ContainerStarted, ContainerDied, ContainerRemoved or PodSync");
    /* Never delivered, so not a filter either. */
    assert_refused("type", "ContainerChanged", G_OPTION_ERROR_BAD_VALUE, "invalid type", NULL);
    assert_refused("type", "containerdied", G_OPTION_ERROR_BAD_VALUE, "invalid type", NULL);
    assert_refused("sandbox", "maybe", G_OPTION_ERROR_BAD_VALUE, "invalid sandbox \"maybe\"",
                   "expected true or false");
    assert_refused("namespace", "", G_OPTION_ERROR_BAD_VALUE, "invalid namespace \"\"", "empty");
    assert_refused("namespace", huge, G_OPTION_ERROR_BAD_VALUE, "invalid namespace \"aaa",
                   "102400 bytes, at most 1024 accepted");
    assert_refused("since_time", "10x", G_OPTION_ERROR_BAD_VALUE, "invalid since_time \"10x\"",
                   "expected an RFC 3339 time with its offset");
    assert_refused("until_time", "yesterday", G_OPTION_ERROR_BAD_VALUE,
                   "invalid until_time \"yesterday\"", "or a Go duration");
    /* RFC 3339 wants the offset: a local time would depend on plegd's time zone. */
    assert_refused("since_time", "2026-12-04T17:00:00", G_OPTION_ERROR_BAD_VALUE,
                   "invalid since_time", NULL);
    assert_refused("since_time", huge, G_OPTION_ERROR_BAD_VALUE, "invalid since_time",
                   "at most 1024 accepted");
    /* RFC 3339's date-time only, not the rest of ISO 8601 that GLib reads. */
    {
        const char *const not_rfc3339[] = {
            "2026-338T17:00:00Z",       "2026-W49-5T17:00:00Z",   "20261204T170000Z",
            "2026-12-04T17:42:43,5Z",   "2026-12-04T17:00:00+01", "2026-12-04T17:00:00+24:00",
            "2026-12-04T17:42:43.5.5Z", "2026-12-04T17:00Z",      "2026-12-04",
            "2026-12-04T17:00:00.Z",
        };

        for (gsize i = 0; i < G_N_ELEMENTS(not_rfc3339); i++)
            assert_refused("since_time", not_rfc3339[i], G_OPTION_ERROR_BAD_VALUE,
                           "invalid since_time", "expected an RFC 3339 time");
    }
    /* ... but all of it: lower-case t and z, the space RFC 3339's note allows, a fraction. */
    {
        const char *const same[] = {"2026-12-04T17:00:00.5Z", "2026-12-04t17:00:00.5z",
                                    "2026-12-04 17:00:00.5Z", "2026-12-04T18:00:00.5+01:00"};

        for (gsize i = 0; i < G_N_ELEMENTS(same); i++) {
            g_autoptr(GError) local_error = NULL;
            gint64 ns = 0;

            ck_assert_msg(
                plegd_event_filter_parse_time("since_time", same[i], T0_NS, &ns, &local_error),
                "%s: %s", same[i], local_error ? local_error->message : "");
            ck_assert_int_eq(ns, G_GINT64_CONSTANT(1796403600500000000));
        }
    }
    /* Past what an event's gint64 of nanoseconds holds: refused, not overflowed (the fuzzer's
     * find, tests/fuzz/regressions/events-query). */
    assert_refused("since_time", "3255-12-04T17:00:00Z", G_OPTION_ERROR_BAD_VALUE,
                   "invalid since_time", "out of range");
    assert_refused("until_time", "1200-01-01T00:00:00Z", G_OPTION_ERROR_BAD_VALUE,
                   "invalid until_time", "out of range");
    assert_refused("from", "1", G_OPTION_ERROR_UNKNOWN_OPTION, "unknown query parameter \"from\"",
                   NULL);

    /* since_time at most once; at most 64 values in all. */
    ck_assert(plegd_event_filter_add(filter, "since_time", "1m", NULL));
    ck_assert(!plegd_event_filter_add(filter, "since_time", "2m", &error));
    ck_assert_msg(strstr(error->message, "\"since_time\" given more than once"), "%s",
                  error->message);
    g_clear_error(&error);
    for (guint i = 1; i < PLEGD_EVENTS_FILTER_MAX_VALUES; i++)
        ck_assert(plegd_event_filter_add(filter, "pod", "p", NULL));
    ck_assert(!plegd_event_filter_add(filter, "container", "c", &error));
    ck_assert_msg(strstr(error->message, "too many filter values at container: at most 64"), "%s",
                  error->message);
}
END_TEST

/* The ring keeps each line's key, and drops it with the line. */
START_TEST(test_ring_keeps_keys)
{
    g_autoptr(PlegdEventRing) ring = plegd_event_ring_new(2);

    for (guint i = 0; i < 3; i++) {
        g_autoptr(GBytes) line = g_bytes_new_static("x\n", 2);
        g_autofree char *pod = g_strdup_printf("pod-%u", i);
        TestEvent te;

        test_event_init(&te, PLEG_CONTAINER_DIED, "shop", pod, "app", T0_NS + i);
        plegd_event_key_free(te.key);
        te.event.pod_uid = (char *)"uid";
        plegd_event_ring_push(ring, line, &te.event, NULL);
    }
    ck_assert_ptr_null(plegd_event_ring_lookup_key(ring, 1));
    for (guint64 seq = 2; seq <= 3; seq++) {
        const PlegdEventKey *key = plegd_event_ring_lookup_key(ring, seq);
        g_autofree char *pod = g_strdup_printf("pod-%u", (guint)seq - 1);

        ck_assert_ptr_nonnull(key);
        ck_assert_str_eq(key->pod_namespace, "shop");
        ck_assert_str_eq(key->pod_name, pod);
        ck_assert_str_eq(key->pod_uid, "uid");
        ck_assert_str_eq(key->container_name, "app");
        ck_assert_int_eq(key->type, PLEG_CONTAINER_DIED);
        ck_assert(!key->sandbox);
        ck_assert_int_eq(key->time_ns, T0_NS + (gint64)seq - 1);
    }
    ck_assert_ptr_null(plegd_event_ring_lookup_key(ring, 4));
}
END_TEST

static Suite *
event_filter_suite(void)
{
    Suite *suite = suite_create("plegd-event-filter");
    TCase *tc = tcase_create("event-filter");

    tcase_add_test(tc, test_each_key);
    tcase_add_test(tc, test_repeated_and_combined);
    tcase_add_test(tc, test_since_time);
    tcase_add_test(tc, test_parse_time);
    tcase_add_test(tc, test_bad_values);
    tcase_add_test(tc, test_ring_keeps_keys);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    SRunner *runner = srunner_create(event_filter_suite());
    int n_failed;

    srunner_run_all(runner, CK_NORMAL);
    n_failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return n_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
