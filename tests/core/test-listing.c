/* SPDX-License-Identifier: Apache-2.0 */
/* The global relist's listing alone (lib/core/pleg-listing.c): it must group a listing exactly
 * as group_pods() does, keep a record's snapshot when its pod is listed as before, and drop
 * what a restarted listing had handed. */
#include "pleg-config.h"

#include "core-test.h"
#include "pleg-generic-private.h"

static const PlegPodSandbox sandboxes[] = {
    {.id = "s1", .uid = "pod1", .state = PLEG_POD_SANDBOX_STATE_NOTREADY, .created_at_ns = 10},
    {.id = "s2", .uid = "pod1", .state = PLEG_POD_SANDBOX_STATE_READY, .created_at_ns = 20},
    {.id = "s3", .uid = "pod1", .state = PLEG_POD_SANDBOX_STATE_READY, .created_at_ns = 20},
    {.id = "s4", .uid = "pod2", .state = PLEG_POD_SANDBOX_STATE_READY, .created_at_ns = 5},
    {.id = "s5", .uid = "", .state = PLEG_POD_SANDBOX_STATE_READY},
    {.id = NULL, .uid = "pod3"},
    /* The same id again: the last one listed names the pod of its containers. */
    {.id = "s4", .uid = "pod4", .state = PLEG_POD_SANDBOX_STATE_NOTREADY, .created_at_ns = 7},
};

static const PlegContainer containers[] = {
    {.id = "c1", .pod_sandbox_id = "s2", .state = PLEG_CONTAINER_STATE_RUNNING, .created_at_ns = 3},
    {.id = "c2", .pod_sandbox_id = "s1", .state = PLEG_CONTAINER_STATE_EXITED},
    {.id = "c3", .pod_sandbox_id = "s4", .state = PLEG_CONTAINER_STATE_CREATED},
    {.id = "c4",
     .pod_sandbox_id = "gone",
     .pod_uid_label = "pod5",
     .state = PLEG_CONTAINER_STATE_UNKNOWN},
    {.id = "c5",
     .pod_sandbox_id = NULL,
     .pod_uid_label = "pod1",
     .state = PLEG_CONTAINER_STATE_RUNNING},
    {.id = "c6", .pod_sandbox_id = "gone"},
    {.id = NULL, .pod_sandbox_id = "s2"},
};

static GPtrArray *
sandbox_array(void)
{
    GPtrArray *ret = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_sandbox_free);

    for (guint i = 0; i < G_N_ELEMENTS(sandboxes); i++)
        g_ptr_array_add(ret, pleg_pod_sandbox_copy(&sandboxes[i]));
    return ret;
}

static GPtrArray *
container_array(void)
{
    GPtrArray *ret = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_container_free);

    for (guint i = 0; i < G_N_ELEMENTS(containers); i++)
        g_ptr_array_add(ret, pleg_container_copy(&containers[i]));
    return ret;
}

static void
list_all(PlegListing *listing)
{
    pleg_listing_reset(listing);
    for (guint i = 0; i < G_N_ELEMENTS(sandboxes); i++)
        pleg_listing_visitor.sandbox(&sandboxes[i], listing);
    for (guint i = 0; i < G_N_ELEMENTS(containers); i++)
        pleg_listing_visitor.container(&containers[i], listing);
}

static void
test_record_free(PodRecord *rec)
{
    pod_snapshot_unref(rec->old);
    pod_snapshot_unref(rec->current);
    g_free(rec);
}

static GHashTable *
records_new(void)
{
    return g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)test_record_free);
}

static void
assert_entries_equal(GPtrArray *a, GPtrArray *b)
{
    ck_assert_uint_eq(a->len, b->len);
    for (guint i = 0; i < a->len; i++) {
        const PodEntry *ea = a->pdata[i], *eb = b->pdata[i];

        ck_assert_str_eq(ea->id, eb->id);
        ck_assert_pstr_eq(ea->sandbox_id, eb->sandbox_id);
        ck_assert_int_eq(ea->state, eb->state);
        ck_assert_int_eq(ea->created_at_ns, eb->created_at_ns);
    }
}

/* Every record's current snapshot is group_pods()'s pod, and there is no other record. */
static void
assert_grouped_as_group_pods(GHashTable *records)
{
    g_autoptr(GPtrArray) s = sandbox_array();
    g_autoptr(GPtrArray) c = container_array();
    g_autoptr(GHashTable) pods = group_pods(s, c);
    GHashTableIter iter;
    const char *uid;
    PodSnapshot *pod;

    ck_assert_uint_eq(g_hash_table_size(records), g_hash_table_size(pods));
    g_hash_table_iter_init(&iter, pods);
    while (g_hash_table_iter_next(&iter, (gpointer *)&uid, (gpointer *)&pod)) {
        PodRecord *rec = g_hash_table_lookup(records, uid);

        ck_assert_ptr_nonnull(rec);
        ck_assert_ptr_nonnull(rec->current);
        ck_assert_str_eq(rec->current->uid, uid);
        assert_entries_equal(rec->current->containers, pod->containers);
        assert_entries_equal(rec->current->sandboxes, pod->sandboxes);
    }
}

START_TEST(test_groups_as_group_pods)
{
    PlegListing *listing = pleg_listing_new();
    g_autoptr(GHashTable) records = records_new();
    const guint *states;

    list_all(listing);
    /* Ready sandboxes: pod1's s2 and s3, pod2's s4; c3 goes to pod4, whose s4 was listed last. */
    ck_assert_uint_eq(pleg_listing_publish(listing, records), 2);
    assert_grouped_as_group_pods(records);
    states = pleg_listing_get_container_states(listing);
    ck_assert_uint_eq(states[PLEG_CONTAINER_STATE_RUNNING], 2);
    ck_assert_uint_eq(states[PLEG_CONTAINER_STATE_CREATED], 3);
    pleg_listing_free(listing);
}
END_TEST

START_TEST(test_unchanged_pod_keeps_snapshot)
{
    PlegListing *listing = pleg_listing_new();
    g_autoptr(GHashTable) records = records_new();
    PodRecord *rec;
    PodSnapshot *before;
    PlegPodSandbox sandbox = {.id = "s9", .uid = "pod1", .created_at_ns = 1};

    list_all(listing);
    pleg_listing_publish(listing, records);
    rec = g_hash_table_lookup(records, "pod1");
    before = rec->current;

    list_all(listing);
    pleg_listing_publish(listing, records);
    ck_assert_ptr_eq(((PodRecord *)g_hash_table_lookup(records, "pod1"))->current, before);
    assert_grouped_as_group_pods(records);

    /* One more sandbox of pod1: a new snapshot for it, the others kept. */
    before = ((PodRecord *)g_hash_table_lookup(records, "pod2"))->current;
    list_all(listing);
    pleg_listing_visitor.sandbox(&sandbox, listing);
    pleg_listing_publish(listing, records);
    rec = g_hash_table_lookup(records, "pod1");
    ck_assert_uint_eq(rec->current->sandboxes->len, 4);
    ck_assert_ptr_eq(((PodRecord *)g_hash_table_lookup(records, "pod2"))->current, before);

    /* An empty listing leaves every record without a current snapshot. */
    pleg_listing_reset(listing);
    ck_assert_uint_eq(pleg_listing_publish(listing, records), 0);
    ck_assert_ptr_null(((PodRecord *)g_hash_table_lookup(records, "pod1"))->current);
    pleg_listing_free(listing);
}
END_TEST

START_TEST(test_restart_drops_what_was_handed)
{
    PlegListing *listing = pleg_listing_new();
    g_autoptr(GHashTable) records = records_new();
    PlegContainer stray = {.id = "stray", .pod_uid_label = "pod9"};
    PlegPodSandbox stray_sandbox = {.id = "s-stray", .uid = "pod8"};

    pleg_listing_reset(listing);
    pleg_listing_visitor.sandbox(&stray_sandbox, listing);
    pleg_listing_visitor.restart(TRUE, listing);
    for (guint i = 0; i < G_N_ELEMENTS(sandboxes); i++)
        pleg_listing_visitor.sandbox(&sandboxes[i], listing);
    pleg_listing_visitor.container(&stray, listing);
    pleg_listing_visitor.restart(FALSE, listing);
    for (guint i = 0; i < G_N_ELEMENTS(containers); i++)
        pleg_listing_visitor.container(&containers[i], listing);
    pleg_listing_publish(listing, records);
    assert_grouped_as_group_pods(records);
    ck_assert_uint_eq(pleg_listing_get_container_states(listing)[PLEG_CONTAINER_STATE_CREATED], 3);
    pleg_listing_free(listing);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("listing");
    TCase *tc = tcase_create("listing");

    tcase_add_test(tc, test_groups_as_group_pods);
    tcase_add_test(tc, test_unchanged_pod_keeps_snapshot);
    tcase_add_test(tc, test_restart_drops_what_was_handed);
    suite_add_tcase(s, tc);

    return run_suite(s);
}
