/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What a runtime can make the CRI client hold (issue 24): one listing, unary or streamed, is
 * bounded in bytes and in items, and a listing past a bound fails with RESOURCE_EXHAUSTED, the
 * stream cancelled, rather than growing without end.  The public client at its documented
 * bounds, the transport at small ones, against a runtime that sends raw bytes.
 */
#include <check.h>
#include <string.h>

#include <glib/gstdio.h>
#include <pleg/pleg-cri-client.h>

#include "cri-private.h"
#include "raw-cri-server.h"

#define WAIT_USEC (60 * G_USEC_PER_SEC)

static char *tmpdir;

static void
setup(void)
{
    g_autoptr(GError) error = NULL;

    tmpdir = g_dir_make_tmp("pleg-cri-limits-XXXXXX", &error);
    ck_assert_ptr_nonnull(tmpdir);
}

static void
teardown(void)
{
    g_autofree char *path = g_build_filename(tmpdir, "cri.sock", NULL);

    g_unlink(path);
    g_rmdir(tmpdir);
    g_clear_pointer(&tmpdir, g_free);
}

static char *
socket_path(void)
{
    return g_build_filename(tmpdir, "cri.sock", NULL);
}

/* @n_items empty items in field 1 (2 bytes each), then @padding bytes in an unknown field 2,
 * which a reader skips without holding anything. */
static GBytes *
listing_message(gsize n_items, gsize padding)
{
    GByteArray *bytes = g_byte_array_sized_new(2 * n_items + padding + 8);
    static const guint8 empty_item[] = {0x0a, 0x00};

    for (gsize i = 0; i < n_items; i++)
        g_byte_array_append(bytes, empty_item, sizeof(empty_item));
    if (padding > 0) {
        guint8 header[8] = {0x12};
        gsize n = 1, length = padding;
        g_autofree guint8 *zeros = g_malloc0(padding);

        do {
            header[n++] = (length & 0x7f) | (length >= 0x80 ? 0x80 : 0);
            length >>= 7;
        } while (length > 0);
        g_byte_array_append(bytes, header, n);
        g_byte_array_append(bytes, zeros, padding);
    }
    return g_byte_array_free_to_bytes(bytes);
}

static void
assert_over_limit(const GError *error, const char *path, const char *method, const char *what)
{
    g_autofree char *expected =
        g_strdup_printf("%s: %s: the listing passed its limit of %s", path, method, what);

    ck_assert_ptr_nonnull(error);
    ck_assert_msg(g_error_matches(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_RESOURCE_EXHAUSTED),
                  "expected RESOURCE_EXHAUSTED, got %d: %s", error->code, error->message);
    ck_assert_msg(g_str_has_prefix(error->message, expected), "\"%s\" does not start with \"%s\"",
                  error->message, expected);
}

static gboolean
wait_call_ended(RawCriServer *server, const char *method)
{
    gint64 deadline = g_get_monotonic_time() + WAIT_USEC;

    while (raw_cri_server_get_n_ended(server, method) == 0) {
        if (g_get_monotonic_time() > deadline)
            return FALSE;
        g_usleep(5000);
    }
    return TRUE;
}

/* ---- the public client at its bounds ---- */

/* A unary answer of 2-byte items, 2 MB, well under the 16 MiB a message may carry: each item
 * was a heap PlegContainer before. */
START_TEST(test_unary_items_past_limit)
{
    g_autofree char *path = socket_path();
    g_autoptr(RawCriServer) server = raw_cri_server_new(path);
    g_autoptr(GBytes) message = listing_message(PLEG_CRI_MAX_LISTING_ITEMS + 1, 0);
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegCriClient) client = pleg_cri_client_new(path, 60 * G_USEC_PER_SEC, &error);
    g_autoptr(PlegRuntime) runtime = pleg_cri_client_as_runtime(client);
    g_autofree char *limit = g_strdup_printf("%" G_GUINT64_FORMAT " items",
                                             (guint64)PLEG_CRI_MAX_LISTING_ITEMS);
    GPtrArray *containers = NULL, *sandboxes = NULL;

    raw_cri_server_set_answer(server, "ListContainers", message, 1);
    raw_cri_server_set_answer(server, "ListPodSandbox", message, 1);

    ck_assert(!pleg_runtime_list_containers(runtime, NULL, &containers, NULL, &error));
    ck_assert_ptr_null(containers);
    assert_over_limit(error, path, "ListContainers", limit);
    g_clear_error(&error);

    /* A targeted relist's listing, whose items are copied one by one. */
    ck_assert(!pleg_runtime_list_containers(runtime, "sb-1", &containers, NULL, &error));
    assert_over_limit(error, path, "ListContainers", limit);
    g_clear_error(&error);

    ck_assert(!pleg_runtime_list_pod_sandboxes(runtime, &sandboxes, NULL, &error));
    ck_assert_ptr_null(sandboxes);
    assert_over_limit(error, path, "ListPodSandbox", limit);
}
END_TEST

/* The same through StreamContainers (CRIListStreaming): past the bound over many messages
 * that each hold far fewer items. */
START_TEST(test_stream_items_past_limit)
{
    g_autofree char *path = socket_path();
    g_autoptr(RawCriServer) server = raw_cri_server_new(path);
    g_autoptr(GBytes) message = listing_message(50000, 0);
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegCriClient) client = pleg_cri_client_new(path, 60 * G_USEC_PER_SEC, &error);
    g_autoptr(PlegRuntime) runtime = pleg_cri_client_as_runtime(client);
    g_autofree char *limit = g_strdup_printf("%" G_GUINT64_FORMAT " items",
                                             (guint64)PLEG_CRI_MAX_LISTING_ITEMS);
    guint n_messages = PLEG_CRI_MAX_LISTING_ITEMS / 50000 + 10;
    GPtrArray *containers = NULL;

    pleg_cri_client_set_list_streaming(client, TRUE, 0);
    raw_cri_server_set_answer(server, "StreamContainers", message, n_messages);

    ck_assert(!pleg_runtime_list_containers(runtime, "sb-1", &containers, NULL, &error));
    ck_assert_ptr_null(containers);
    assert_over_limit(error, path, "StreamContainers", limit);
    /* A failure other than UNIMPLEMENTED: no unary listing after it. */
    ck_assert_uint_eq(raw_cri_server_get_n_ended(server, "ListContainers"), 0);
    ck_assert(wait_call_ended(server, "StreamContainers"));
}
END_TEST

/* A stream that goes on past 256 MiB, in 8 MiB messages that hold no item: cancelled at the
 * message that passes the bound, where before the whole stream was read. */
START_TEST(test_stream_bytes_past_limit)
{
    g_autofree char *path = socket_path();
    g_autoptr(RawCriServer) server = raw_cri_server_new(path);
    gsize message_bytes = 8 * 1024 * 1024;
    g_autoptr(GBytes) message = listing_message(0, message_bytes - 8);
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegCriClient) client = pleg_cri_client_new(path, 120 * G_USEC_PER_SEC, &error);
    g_autoptr(PlegRuntime) runtime = pleg_cri_client_as_runtime(client);
    g_autofree char *limit = g_strdup_printf("%zu bytes", (gsize)PLEG_CRI_MAX_LISTING_BYTES);
    guint n_messages = 2 * (PLEG_CRI_MAX_LISTING_BYTES / message_bytes);
    GPtrArray *containers = NULL;

    pleg_cri_client_set_list_streaming(client, TRUE, 0);
    raw_cri_server_set_answer(server, "StreamContainers", message, n_messages);

    ck_assert(!pleg_runtime_list_containers(runtime, NULL, &containers, NULL, &error));
    assert_over_limit(error, path, "StreamContainers", limit);
    ck_assert(wait_call_ended(server, "StreamContainers"));
    ck_assert_uint_lt(raw_cri_server_get_n_sent(server, "StreamContainers"), n_messages);
}
END_TEST

/* ---- the transport at small bounds ---- */

static void
count_item(const ProtobufCMessage *item, gpointer n_items)
{
    (*(guint *)n_items)++;
}

START_TEST(test_stream_small_byte_limit)
{
    g_autofree char *path = socket_path();
    g_autoptr(RawCriServer) server = raw_cri_server_new(path);
    g_autoptr(GBytes) message = listing_message(10, 64 * 1024 - 24);
    g_autoptr(GError) error = NULL;
    g_autoptr(CriChannel) channel = cri_channel_new(path, &error);
    g_autoptr(CriStream) stream = NULL;
    g_autoptr(CriArena) arena = NULL;
    Runtime__V1__StreamContainersRequest request = RUNTIME__V1__STREAM_CONTAINERS_REQUEST__INIT;
    CriListingLimits limits = {.max_bytes = 1024 * 1024};
    g_autofree char *expected = NULL;
    guint n_items = 0, n_reads = 0;
    gboolean end = FALSE;

    ck_assert_uint_eq(g_bytes_get_size(message), 64 * 1024);
    raw_cri_server_set_answer(server, "StreamContainers", message, 1000);
    stream = cri_stream_start(channel, "StreamContainers", &request.base,
                              &runtime__v1__stream_containers_response__descriptor,
                              60 * G_USEC_PER_SEC, FALSE, &error);
    ck_assert_ptr_nonnull(stream);
    arena = cri_arena_new(cri_channel_get_arena_pool(channel));
    cri_stream_set_arena(stream, arena);
    cri_stream_set_limits(stream, &limits);
    while (cri_stream_read_items(stream, count_item, &n_items, &end, NULL, &error)) {
        ck_assert(!end);
        n_reads++;
    }
    /* 16 messages fit in 1 MiB; the 17th is refused before any of its items. */
    ck_assert_uint_eq(n_reads, 16);
    ck_assert_uint_eq(n_items, 160);
    ck_assert_int_eq(cri_stream_get_over_limit(stream), CRI_LIMIT_BYTES);
    expected = g_strdup_printf("%s: StreamContainers: the listing passed its limit of 1048576 "
                               "bytes (1114112 bytes received)",
                               path);
    ck_assert_str_eq(error->message, expected);
    ck_assert(g_error_matches(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_RESOURCE_EXHAUSTED));
    /* The stream stays failed, and the runtime saw it cancelled long before its end. */
    g_clear_error(&error);
    ck_assert(!cri_stream_read_items(stream, count_item, &n_items, &end, NULL, &error));
    ck_assert(wait_call_ended(server, "StreamContainers"));
    ck_assert_uint_lt(raw_cri_server_get_n_sent(server, "StreamContainers"), 1000);
}
END_TEST

static void
call_listing(CriChannel *channel, CriUnaryCall *call, const CriListingLimits *limits,
             CriArena *arena, guint *n_items)
{
    static Runtime__V1__ListContainersRequest request = RUNTIME__V1__LIST_CONTAINERS_REQUEST__INIT;

    *call = (CriUnaryCall){
        .method = "ListContainers",
        .request = &request.base,
        .response_descriptor = &runtime__v1__list_containers_response__descriptor,
        .arena = arena,
        .item_func = count_item,
        .item_data = n_items,
        .limits = *limits,
    };
    cri_channel_call_many(channel, call, 1, 60 * G_USEC_PER_SEC, NULL);
}

START_TEST(test_unary_small_limits)
{
    g_autofree char *path = socket_path();
    g_autoptr(RawCriServer) server = raw_cri_server_new(path);
    g_autoptr(GBytes) message = listing_message(100, 800);
    g_autoptr(GError) error = NULL;
    g_autoptr(CriChannel) channel = cri_channel_new(path, &error);
    g_autoptr(CriArena) arena = cri_arena_new(cri_channel_get_arena_pool(channel));
    g_autofree char *expected = NULL;
    CriUnaryCall call;
    guint n_items = 0;

    raw_cri_server_set_answer(server, "ListContainers", message, 1);

    /* Within both: every item. */
    call_listing(channel, &call, &(CriListingLimits){.max_bytes = 1003, .max_items = 100}, arena,
                 &n_items);
    ck_assert_msg(!call.error, "%s", call.error->message);
    ck_assert_int_eq(call.over_limit, CRI_LIMIT_NONE);
    ck_assert_uint_eq(n_items, 100);

    /* Past the items: the first ten given, no more. */
    n_items = 0;
    call_listing(channel, &call, &(CriListingLimits){.max_items = 10}, arena, &n_items);
    ck_assert_int_eq(call.over_limit, CRI_LIMIT_ITEMS);
    ck_assert_uint_eq(n_items, 10);
    assert_over_limit(call.error, path, "ListContainers", "10 items");
    g_clear_error(&call.error);

    /* Past the bytes: not one item. */
    n_items = 0;
    call_listing(channel, &call, &(CriListingLimits){.max_bytes = 1000}, arena, &n_items);
    ck_assert_int_eq(call.over_limit, CRI_LIMIT_BYTES);
    ck_assert_uint_eq(n_items, 0);
    expected = g_strdup_printf("%s: ListContainers: the listing passed its limit of 1000 bytes "
                               "(1003 bytes received)",
                               path);
    ck_assert_str_eq(call.error->message, expected);
    g_clear_error(&call.error);
    ck_assert_uint_eq(cri_arena_get_used_bytes(arena), 0);
}
END_TEST

static Suite *
listing_limits_suite(void)
{
    Suite *s = suite_create("cri-listing-limits");
    TCase *client = tcase_create("client");
    TCase *transport = tcase_create("transport");

    tcase_add_checked_fixture(client, setup, teardown);
    tcase_set_timeout(client, 180);
    tcase_add_test(client, test_unary_items_past_limit);
    tcase_add_test(client, test_stream_items_past_limit);
    tcase_add_test(client, test_stream_bytes_past_limit);
    suite_add_tcase(s, client);

    tcase_add_checked_fixture(transport, setup, teardown);
    tcase_set_timeout(transport, 60);
    tcase_add_test(transport, test_stream_small_byte_limit);
    tcase_add_test(transport, test_unary_small_limits);
    suite_add_tcase(s, transport);

    return s;
}

int
main(void)
{
    SRunner *runner = srunner_create(listing_limits_suite());
    int failed;

    srunner_run_all(runner, CK_NORMAL);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
