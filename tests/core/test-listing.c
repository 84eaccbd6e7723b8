/* SPDX-License-Identifier: Apache-2.0 */
/* A relist's listing alone (lib/core/pleg-listing.c): it must group a listing into pods as
 * kubelet does, keep a record's snapshot when its pod is listed as before, publish only the pods
 * a targeted relist asked for, and drop what a restarted listing had handed. */
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

static void
list_all(PlegListing *listing)
{
    pleg_listing_reset(listing);
    for (guint i = 0; i < G_N_ELEMENTS(sandboxes); i++)
        pleg_listing_visitor.sandbox(&sandboxes[i], listing);
    for (guint i = 0; i < G_N_ELEMENTS(containers); i++)
        pleg_listing_visitor.container(&containers[i], listing);
}

static GHashTable *
records_new(void)
{
    return g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)record_free);
}

/* How the listing above groups, by index into sandboxes[] and containers[] (-1 ends a list):
 * containers in listing order, sandboxes newest first (s2 and s3 as listed).  c3 goes to pod4,
 * whose s4 was listed last; c4 and c5 go by their label; s5, the sandbox without an id, c6 and
 * the container without an id are ignored. */
static const struct {
    const char *uid;
    int containers[4];
    int sandboxes[4];
} grouped[] = {
    {"pod1", {0, 1, 4, -1}, {1, 2, 0, -1}},
    {"pod2", {-1}, {3, -1}},
    {"pod4", {2, -1}, {6, -1}},
    {"pod5", {3, -1}, {-1}},
};

static void
assert_pod_grouped(GHashTable *records, guint g)
{
    const PodRecord *rec = g_hash_table_lookup(records, grouped[g].uid);
    const PodSnapshot *pod;
    guint n = 0;

    ck_assert_msg(rec && rec->current, "%s has no current snapshot", grouped[g].uid);
    pod = rec->current;
    ck_assert_str_eq(pod->uid, grouped[g].uid);
    for (; grouped[g].containers[n] >= 0; n++) {
        const PlegContainer *c = &containers[grouped[g].containers[n]];
        const PodEntry *e;

        ck_assert_uint_gt(pod->containers->len, n);
        e = pod->containers->pdata[n];
        ck_assert_str_eq(e->id, c->id);
        ck_assert_pstr_eq(e->sandbox_id, c->pod_sandbox_id);
        ck_assert_int_eq(e->state, pleg_state_from_container(c->state));
        ck_assert_int_eq(e->created_at_ns, c->created_at_ns);
    }
    ck_assert_uint_eq(pod->containers->len, n);
    for (n = 0; grouped[g].sandboxes[n] >= 0; n++) {
        const PlegPodSandbox *s = &sandboxes[grouped[g].sandboxes[n]];
        const PodEntry *e;

        ck_assert_uint_gt(pod->sandboxes->len, n);
        e = pod->sandboxes->pdata[n];
        ck_assert_str_eq(e->id, s->id);
        ck_assert_ptr_null(e->sandbox_id);
        ck_assert_int_eq(e->state,
                         s->state == PLEG_POD_SANDBOX_STATE_READY ? STATE_RUNNING : STATE_EXITED);
        ck_assert_int_eq(e->created_at_ns, s->created_at_ns);
    }
    ck_assert_uint_eq(pod->sandboxes->len, n);
}

/* Every record's current snapshot is its pod as grouped[] says, and there is no other record. */
static void
assert_grouped(GHashTable *records)
{
    ck_assert_uint_eq(g_hash_table_size(records), G_N_ELEMENTS(grouped));
    for (guint g = 0; g < G_N_ELEMENTS(grouped); g++)
        assert_pod_grouped(records, g);
}

START_TEST(test_groups_by_uid)
{
    PlegListing *listing = pleg_listing_new();
    g_autoptr(GHashTable) records = records_new();
    const guint *states;

    list_all(listing);
    /* Ready sandboxes: pod1's s2 and s3, pod2's s4; c3 goes to pod4, whose s4 was listed last. */
    ck_assert_uint_eq(pleg_listing_publish(listing, records, NULL, FALSE), 2);
    assert_grouped(records);
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
    pleg_listing_publish(listing, records, NULL, FALSE);
    rec = g_hash_table_lookup(records, "pod1");
    before = rec->current;

    list_all(listing);
    pleg_listing_publish(listing, records, NULL, FALSE);
    ck_assert_ptr_eq(((PodRecord *)g_hash_table_lookup(records, "pod1"))->current, before);
    assert_grouped(records);

    /* One more sandbox of pod1: a new snapshot for it, the others kept. */
    before = ((PodRecord *)g_hash_table_lookup(records, "pod2"))->current;
    list_all(listing);
    pleg_listing_visitor.sandbox(&sandbox, listing);
    pleg_listing_publish(listing, records, NULL, FALSE);
    rec = g_hash_table_lookup(records, "pod1");
    ck_assert_uint_eq(rec->current->sandboxes->len, 4);
    ck_assert_ptr_eq(((PodRecord *)g_hash_table_lookup(records, "pod2"))->current, before);

    /* An empty listing leaves every record without a current snapshot. */
    pleg_listing_reset(listing);
    ck_assert_uint_eq(pleg_listing_publish(listing, records, NULL, FALSE), 0);
    ck_assert_ptr_null(((PodRecord *)g_hash_table_lookup(records, "pod1"))->current);
    pleg_listing_free(listing);
}
END_TEST

/* A targeted relist publishes only the pods it asked for: a pod asked for and not listed loses
 * its current snapshot, a pod listed and not asked for is left as it was, a new pod asked for
 * gets a record. */
START_TEST(test_publishes_only_pods_asked)
{
    PlegListing *listing = pleg_listing_new();
    g_autoptr(GHashTable) records = records_new();
    g_autoptr(GHashTable) only = g_hash_table_new(g_str_hash, g_str_equal);
    PodRecord *pod2 = g_new0(PodRecord, 1), *pod7 = g_new0(PodRecord, 1);
    PodSnapshot *kept = pod_snapshot_new("pod2");

    pod2->current = kept;
    pod7->current = pod_snapshot_new("pod7");
    g_hash_table_insert(records, g_strdup("pod2"), pod2);
    g_hash_table_insert(records, g_strdup("pod7"), pod7);
    g_hash_table_add(only, "pod1");
    g_hash_table_add(only, "pod7");
    g_hash_table_add(only, "pod-unknown");

    list_all(listing);
    /* pod1's sandboxes s2 and s3 are ready; pod2's s4 is not counted, pod2 not being asked. */
    ck_assert_uint_eq(pleg_listing_publish(listing, records, only, FALSE), 1);
    ck_assert_uint_eq(g_hash_table_size(records), 3);
    assert_pod_grouped(records, 0);
    ck_assert_ptr_eq(pod2->current, kept);
    ck_assert_ptr_null(pod7->current);
    ck_assert(!g_hash_table_contains(records, "pod-unknown"));
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
    pleg_listing_publish(listing, records, NULL, FALSE);
    assert_grouped(records);
    ck_assert_uint_eq(pleg_listing_get_container_states(listing)[PLEG_CONTAINER_STATE_CREATED], 3);
    pleg_listing_free(listing);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("listing");
    TCase *tc = tcase_create("listing");

    tcase_add_test(tc, test_groups_by_uid);
    tcase_add_test(tc, test_unchanged_pod_keeps_snapshot);
    tcase_add_test(tc, test_publishes_only_pods_asked);
    tcase_add_test(tc, test_restart_drops_what_was_handed);
    suite_add_tcase(s, tc);

    return run_suite(s);
}
