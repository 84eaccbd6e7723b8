/* SPDX-License-Identifier: Apache-2.0 */
/* The transition table alone (lib/core/pleg-transitions.c): two snapshots of a pod in,
 * transitions out, with no PLEG, runtime or lock.  The table is kubelet's generic PLEG
 * (pkg/kubelet/pleg/generic.go, generateEvents(), kept by KEP-3386): for a container or sandbox
 * going from an old state to a new one among none, running, exited and unknown,
 *   -> running: ContainerStarted;  -> exited: ContainerDied;  -> unknown: ContainerChanged;
 *   -> none: ContainerRemoved, preceded by ContainerDied unless it was exited;
 *   no change: nothing. */
#include "pleg-config.h"

#include "core-test.h"
#include "pleg-generic-private.h"

/* Test-side names of PlegState, in the enum's order; "none" is STATE_NON_EXISTENT. */
static const char *
state_name(PlegState state)
{
    switch (state) {
    case STATE_RUNNING:
        return "running";
    case STATE_EXITED:
        return "exited";
    case STATE_UNKNOWN:
        return "unknown";
    case STATE_NON_EXISTENT:
        return "none";
    }
    return "?";
}

static void
add_entry(GPtrArray *entries, const char *id, PlegState state, gint64 created_at_ns)
{
    const PodEntry fields = {.id = id, .state = state, .created_at_ns = created_at_ns};

    g_ptr_array_add(entries, pod_entry_new(&fields));
}

/* A pod "pod1" holding @id as a container (or a sandbox) in @state; nothing for "none". */
static PodSnapshot *
snapshot_with(const char *id, gboolean sandbox, PlegState state)
{
    PodSnapshot *pod = pod_snapshot_new("pod1");

    if (state != STATE_NON_EXISTENT)
        add_entry(sandbox ? pod->sandboxes : pod->containers, id, state, 1);
    return pod;
}

/* "ContainerDied c1 running>exited,ContainerRemoved c1 exited>none"; "" when empty. */
static char *
transitions_str(GArray *transitions)
{
    GString *s = g_string_new(NULL);

    for (guint i = 0; i < transitions->len; i++) {
        const Transition *t = &g_array_index(transitions, Transition, i);

        g_string_append_printf(s, "%s%s %s %s>%s", i ? "," : "",
                               pleg_pod_lifecycle_event_type_to_string(t->type), t->id,
                               state_name(t->before), state_name(t->after));
    }
    return g_string_free(s, FALSE);
}

static char *
compute_str(const PodSnapshot *old, const PodSnapshot *current)
{
    g_autoptr(GArray) transitions = compute_transitions(old, current);

    return transitions_str(transitions);
}

static const struct {
    PlegState before;
    PlegState after;
    const char *events; /* for id "c1" */
} table[] = {
    {STATE_NON_EXISTENT, STATE_NON_EXISTENT, ""},
    {STATE_NON_EXISTENT, STATE_RUNNING, "ContainerStarted c1 none>running"},
    {STATE_NON_EXISTENT, STATE_EXITED, "ContainerDied c1 none>exited"},
    {STATE_NON_EXISTENT, STATE_UNKNOWN, "ContainerChanged c1 none>unknown"},

    {STATE_RUNNING, STATE_NON_EXISTENT,
     "ContainerDied c1 running>exited,ContainerRemoved c1 exited>none"},
    {STATE_RUNNING, STATE_RUNNING, ""},
    {STATE_RUNNING, STATE_EXITED, "ContainerDied c1 running>exited"},
    {STATE_RUNNING, STATE_UNKNOWN, "ContainerChanged c1 running>unknown"},

    {STATE_EXITED, STATE_NON_EXISTENT, "ContainerRemoved c1 exited>none"},
    {STATE_EXITED, STATE_RUNNING, "ContainerStarted c1 exited>running"},
    {STATE_EXITED, STATE_EXITED, ""},
    {STATE_EXITED, STATE_UNKNOWN, "ContainerChanged c1 exited>unknown"},

    {STATE_UNKNOWN, STATE_NON_EXISTENT,
     "ContainerDied c1 unknown>exited,ContainerRemoved c1 exited>none"},
    {STATE_UNKNOWN, STATE_RUNNING, "ContainerStarted c1 unknown>running"},
    {STATE_UNKNOWN, STATE_EXITED, "ContainerDied c1 unknown>exited"},
    {STATE_UNKNOWN, STATE_UNKNOWN, ""},
};

static void
assert_table_row(guint row, gboolean sandbox)
{
    g_autoptr(PodSnapshot) old = snapshot_with("c1", sandbox, table[row].before);
    g_autoptr(PodSnapshot) current = snapshot_with("c1", sandbox, table[row].after);
    g_autofree char *got = compute_str(old, current);

    ck_assert_msg(g_str_equal(got, table[row].events), "%s %s -> %s: got \"%s\", want \"%s\"",
                  sandbox ? "sandbox" : "container", state_name(table[row].before),
                  state_name(table[row].after), got, table[row].events);
}

START_TEST(test_container_table)
{
    assert_table_row(_i, FALSE);
}
END_TEST

START_TEST(test_sandbox_table)
{
    assert_table_row(_i, TRUE);
}
END_TEST

/* add_transitions() is the same table for one id (missed-event collapse uses it directly). */
START_TEST(test_add_transitions_table)
{
    g_autoptr(GArray) transitions = g_array_new(FALSE, FALSE, sizeof(Transition));
    g_autofree char *got = NULL;

    add_transitions(transitions, "c1", table[_i].before, table[_i].after);
    got = transitions_str(transitions);
    ck_assert_str_eq(got, table[_i].events);
}
END_TEST

/* One container of a pod disappears while the rest stays: only it dies and is removed. */
START_TEST(test_container_disappears)
{
    g_autoptr(PodSnapshot) old = pod_snapshot_new("pod1");
    g_autoptr(PodSnapshot) current = pod_snapshot_new("pod1");
    g_autofree char *got = NULL;

    add_entry(old->sandboxes, "s1", STATE_RUNNING, 1);
    add_entry(old->containers, "c1", STATE_RUNNING, 2);
    add_entry(old->containers, "c2", STATE_RUNNING, 3);
    add_entry(current->sandboxes, "s1", STATE_RUNNING, 1);
    add_entry(current->containers, "c2", STATE_RUNNING, 3);

    got = compute_str(old, current);
    ck_assert_str_eq(got, "ContainerDied c1 running>exited,ContainerRemoved c1 exited>none");
}
END_TEST

/* A pod seen for the first time (no old snapshot) and a pod gone (no current one).  Order:
 * what the current snapshot holds (containers, then sandboxes), then what vanished
 * (containers, then sandboxes). */
START_TEST(test_pod_appears_and_vanishes)
{
    g_autoptr(PodSnapshot) pod = pod_snapshot_new("pod1");
    g_autofree char *appeared = NULL;
    g_autofree char *vanished = NULL;
    g_autofree char *none = NULL;

    add_entry(pod->sandboxes, "s1", STATE_RUNNING, 1);
    add_entry(pod->containers, "c1", STATE_EXITED, 2);
    add_entry(pod->containers, "c2", STATE_RUNNING, 3);

    appeared = compute_str(NULL, pod);
    ck_assert_str_eq(appeared, "ContainerDied c1 none>exited,ContainerStarted c2 none>running,"
                               "ContainerStarted s1 none>running");
    vanished = compute_str(pod, NULL);
    ck_assert_str_eq(vanished, "ContainerRemoved c1 exited>none,"
                               "ContainerDied c2 running>exited,ContainerRemoved c2 exited>none,"
                               "ContainerDied s1 running>exited,ContainerRemoved s1 exited>none");
    none = compute_str(NULL, NULL);
    ck_assert_str_eq(none, "");
}
END_TEST

/* An id a snapshot repeats (a runtime breaking CRI's unique ids) counts once, in the state of
 * its first container entry, else its first sandbox entry, as kubelet's getContainersFromPods()
 * and getContainerState() take it: the same snapshot twice gives nothing, and the id gone one
 * Died and one Removed. */
START_TEST(test_repeated_id)
{
    g_autoptr(PodSnapshot) pod = pod_snapshot_new("pod1");
    g_autofree char *appeared = NULL;
    g_autofree char *same = NULL;
    g_autofree char *vanished = NULL;

    add_entry(pod->sandboxes, "s1", STATE_RUNNING, 1);
    add_entry(pod->containers, "c1", STATE_EXITED, 2);
    add_entry(pod->containers, "c1", STATE_RUNNING, 3);
    add_entry(pod->containers, "s1", STATE_EXITED, 4);

    appeared = compute_str(NULL, pod);
    ck_assert_str_eq(appeared, "ContainerDied c1 none>exited,ContainerDied s1 none>exited");
    same = compute_str(pod, pod);
    ck_assert_str_eq(same, "");
    vanished = compute_str(pod, NULL);
    ck_assert_str_eq(vanished,
                     "ContainerRemoved c1 exited>none,ContainerRemoved s1 exited>none");
}
END_TEST

/* The states the table sees come from the listing: CRI CONTAINER_CREATED and CONTAINER_UNKNOWN
 * are kubelet's unknown, SANDBOX_NOTREADY is exited (pleg-listing.c). */
START_TEST(test_states_from_listing)
{
    static const struct {
        const char *id;
        PlegContainerState state;
    } listed[] = {
        {"created", PLEG_CONTAINER_STATE_CREATED},
        {"running", PLEG_CONTAINER_STATE_RUNNING},
        {"exited", PLEG_CONTAINER_STATE_EXITED},
        {"unknown", PLEG_CONTAINER_STATE_UNKNOWN},
    };
    PlegPodSandbox ready = {.id = "s-ready", .uid = "pod1", .state = PLEG_POD_SANDBOX_STATE_READY};
    PlegPodSandbox notready = {
        .id = "s-notready", .uid = "pod1", .state = PLEG_POD_SANDBOX_STATE_NOTREADY};
    g_autoptr(GHashTable) records =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)record_free);
    PlegListing *listing = pleg_listing_new();
    const PodRecord *rec;
    const PodSnapshot *pod;

    pleg_listing_add_sandbox(listing, &ready);
    pleg_listing_add_sandbox(listing, &notready);
    for (guint i = 0; i < G_N_ELEMENTS(listed); i++) {
        PlegContainer c = {
            .id = (char *)listed[i].id, .pod_sandbox_id = "s-ready", .state = listed[i].state};
        pleg_listing_add_container(listing, &c);
    }

    pleg_listing_publish(listing, records, NULL, FALSE);
    pleg_listing_free(listing);
    rec = g_hash_table_lookup(records, "pod1");
    ck_assert_ptr_nonnull(rec);
    pod = rec->current;
    ck_assert_ptr_nonnull(pod);
    ck_assert_int_eq(pod_snapshot_state(pod, "created"), STATE_UNKNOWN);
    ck_assert_int_eq(pod_snapshot_state(pod, "running"), STATE_RUNNING);
    ck_assert_int_eq(pod_snapshot_state(pod, "exited"), STATE_EXITED);
    ck_assert_int_eq(pod_snapshot_state(pod, "unknown"), STATE_UNKNOWN);
    ck_assert_int_eq(pod_snapshot_state(pod, "s-ready"), STATE_RUNNING);
    ck_assert_int_eq(pod_snapshot_state(pod, "s-notready"), STATE_EXITED);
    ck_assert_int_eq(pod_snapshot_state(pod, "absent"), STATE_NON_EXISTENT);
    ck_assert_int_eq(pod_snapshot_state(NULL, "running"), STATE_NON_EXISTENT);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("transitions");
    TCase *tc = tcase_create("table");

    tcase_add_loop_test(tc, test_container_table, 0, G_N_ELEMENTS(table));
    tcase_add_loop_test(tc, test_sandbox_table, 0, G_N_ELEMENTS(table));
    tcase_add_loop_test(tc, test_add_transitions_table, 0, G_N_ELEMENTS(table));
    tcase_add_test(tc, test_container_disappears);
    tcase_add_test(tc, test_pod_appears_and_vanishes);
    tcase_add_test(tc, test_repeated_id);
    tcase_add_test(tc, test_states_from_listing);
    suite_add_tcase(s, tc);

    return run_suite(s);
}
