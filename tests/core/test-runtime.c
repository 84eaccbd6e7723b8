/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pleg_runtime_get_statuses() over runtimes that lack the get_statuses slot, that were compiled
 * before it existed, that time out, or that answer a query with neither a status nor an error
 * or with a status of the wrong kind.
 */
#include "core-test.h"

/* A runtime knowing sandbox "s1" and container "c1", timing out on container "c-hung"; counts
 * its calls. */
typedef struct {
    guint n_single_calls;
    guint n_batch_calls;
} Counts;

static gboolean
no_list(gpointer impl, GPtrArray **ret, GCancellable *cancellable, GError **error)
{
    g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED, "not listed here");
    return FALSE;
}

static gboolean
no_list_containers(gpointer impl, const char *sandbox_id, GPtrArray **ret,
                   GCancellable *cancellable, GError **error)
{
    return no_list(impl, ret, cancellable, error);
}

static PlegPodSandboxStatus *
sandbox_status(gpointer impl, const char *id, GCancellable *cancellable, GError **error)
{
    Counts *counts = impl;
    PlegPodSandboxStatus *status;

    counts->n_single_calls++;
    if (g_strcmp0(id, "s1") != 0) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND, "no sandbox %s", id);
        return NULL;
    }
    status = g_new0(PlegPodSandboxStatus, 1);
    status->id = g_strdup(id);
    return status;
}

static PlegContainerStatus *
container_status(gpointer impl, const char *id, GCancellable *cancellable, GError **error)
{
    Counts *counts = impl;
    PlegContainerStatus *status;

    counts->n_single_calls++;
    if (g_strcmp0(id, "c-hung") == 0) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT, "container %s: deadline exceeded", id);
        return NULL;
    }
    if (g_strcmp0(id, "c1") != 0) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND, "no container %s", id);
        return NULL;
    }
    status = g_new0(PlegContainerStatus, 1);
    status->id = g_strdup(id);
    return status;
}

/* Answers sandbox queries, and container queries with a sandbox status: a broken runtime. */
static void
forgetful_get_statuses(gpointer impl, PlegStatusQuery *queries, guint n_queries,
                       GCancellable *cancellable)
{
    Counts *counts = impl;

    counts->n_batch_calls++;
    for (guint i = 0; i < n_queries; i++)
        queries[i].pod_sandbox_status = sandbox_status(impl, "s1", cancellable, NULL);
}

#define BASE_SLOTS                                                                                 \
    .list_pod_sandboxes = no_list, .list_containers = no_list_containers,                          \
    .pod_sandbox_status = sandbox_status, .container_status = container_status

static const PlegRuntimeVTable without_slot = {.size = sizeof(PlegRuntimeVTable), BASE_SLOTS};

/* As compiled before get_statuses existed: whatever lies past @size is never read. */
static const PlegRuntimeVTable before_slot = {
    .size = G_STRUCT_OFFSET(PlegRuntimeVTable, get_statuses),
    BASE_SLOTS,
    .get_statuses = forgetful_get_statuses,
};

static const PlegRuntimeVTable forgetful = {
    .size = sizeof(PlegRuntimeVTable),
    BASE_SLOTS,
    .get_statuses = forgetful_get_statuses,
};

static void
ask(const PlegRuntimeVTable *vtable, Counts *counts, PlegStatusQuery *queries, guint n_queries)
{
    g_autoptr(PlegRuntime) runtime = pleg_runtime_new(vtable, counts);

    ck_assert_ptr_nonnull(runtime);
    pleg_runtime_get_statuses(runtime, queries, n_queries, NULL);
}

static void
assert_one_by_one(const PlegRuntimeVTable *vtable)
{
    Counts counts = {0};
    PlegStatusQuery queries[] = {
        {.pod_sandbox_id = "s1"},
        {.container_id = "c1"},
        {.container_id = "c-gone"},
    };

    ask(vtable, &counts, queries, G_N_ELEMENTS(queries));
    ck_assert_uint_eq(counts.n_batch_calls, 0);
    ck_assert_uint_eq(counts.n_single_calls, 3);
    ck_assert_str_eq(queries[0].pod_sandbox_status->id, "s1");
    ck_assert_ptr_null(queries[0].error);
    ck_assert_str_eq(queries[1].container_status->id, "c1");
    ck_assert_ptr_null(queries[1].error);
    ck_assert_ptr_null(queries[2].container_status);
    ck_assert(g_error_matches(queries[2].error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND));
    for (gsize i = 0; i < G_N_ELEMENTS(queries); i++)
        pleg_status_query_clear(&queries[i]);
}

START_TEST(test_without_slot_one_by_one)
{
    assert_one_by_one(&without_slot);
}
END_TEST

START_TEST(test_older_table_one_by_one)
{
    assert_one_by_one(&before_slot);
}
END_TEST

/* One by one, the first failure that is not "not found" ends the asking: the rest get it too. */
START_TEST(test_one_by_one_stops_at_failure)
{
    Counts counts = {0};
    PlegStatusQuery queries[] = {
        {.container_id = "c-gone"}, {.pod_sandbox_id = "s1"}, {.container_id = "c-hung"},
        {.container_id = "c1"},     {.pod_sandbox_id = "s1"},
    };

    ask(&without_slot, &counts, queries, G_N_ELEMENTS(queries));
    ck_assert_uint_eq(counts.n_single_calls, 3);
    ck_assert(g_error_matches(queries[0].error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND));
    ck_assert_str_eq(queries[1].pod_sandbox_status->id, "s1");
    for (gsize i = 2; i < G_N_ELEMENTS(queries); i++) {
        ck_assert(!queries[i].pod_sandbox_status && !queries[i].container_status);
        ck_assert(g_error_matches(queries[i].error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT));
        ck_assert_str_eq(queries[i].error->message, "container c-hung: deadline exceeded");
    }
    for (gsize i = 0; i < G_N_ELEMENTS(queries); i++)
        pleg_status_query_clear(&queries[i]);
}
END_TEST

START_TEST(test_unanswered_query_gets_error)
{
    Counts counts = {0};
    PlegStatusQuery queries[] = {
        {.pod_sandbox_id = "s1"},
        {.container_id = "c1"},
    };

    ask(&forgetful, &counts, queries, G_N_ELEMENTS(queries));
    ck_assert_uint_eq(counts.n_batch_calls, 1);
    ck_assert_str_eq(queries[0].pod_sandbox_status->id, "s1");
    ck_assert_ptr_null(queries[0].error);
    ck_assert_ptr_null(queries[1].container_status);
    ck_assert_ptr_null(queries[1].pod_sandbox_status); /* the wrong kind is dropped */
    ck_assert(g_error_matches(queries[1].error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL));
    ck_assert_str_eq(queries[1].error->message,
                     "the runtime gave neither a status nor an error for container c1");
    for (gsize i = 0; i < G_N_ELEMENTS(queries); i++)
        pleg_status_query_clear(&queries[i]);
}
END_TEST

int
main(void)
{
    Suite *suite = suite_create("runtime");
    TCase *tc = tcase_create("get-statuses");

    tcase_add_test(tc, test_without_slot_one_by_one);
    tcase_add_test(tc, test_older_table_one_by_one);
    tcase_add_test(tc, test_one_by_one_stops_at_failure);
    tcase_add_test(tc, test_unanswered_query_gets_error);
    suite_add_tcase(suite, tc);
    return run_suite(suite);
}
