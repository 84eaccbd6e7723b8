/* SPDX-License-Identifier: Apache-2.0 */
/* The transition table: two snapshots of a pod in, transitions out.  Pure: no PlegGeneric,
 * no lock, no runtime; tests/core/test-transitions.c asserts it. */
#include "pleg-config.h"

#include "pleg-generic-private.h"

/* kubelet's table: (old, new) -> events, Died before Removed. */
void
add_transitions(GArray *out, const char *id, PlegState before, PlegState after)
{
    Transition t = {.id = id, .before = before, .after = after};

    if (before == after)
        return;
    switch (after) {
    case STATE_RUNNING:
        t.type = PLEG_CONTAINER_STARTED;
        break;
    case STATE_EXITED:
        t.type = PLEG_CONTAINER_DIED;
        break;
    case STATE_UNKNOWN:
        t.type = PLEG_CONTAINER_CHANGED;
        break;
    case STATE_NON_EXISTENT:
        if (before != STATE_EXITED) {
            Transition died = {PLEG_CONTAINER_DIED, id, before, STATE_EXITED};
            g_array_append_val(out, died);
            t.before = STATE_EXITED;
        }
        t.type = PLEG_CONTAINER_REMOVED;
        break;
    }
    g_array_append_val(out, t);
}

/* @entries are @pod's containers or sandboxes.  An id that @pod lists more than once (CRI ids
 * are unique, a runtime's answer need not be) counts once, in the state of the entry that
 * stands for it, as kubelet's getContainersFromPods() takes each id once: otherwise every
 * relist of an unchanged listing would compare a later entry with the first one again. */
static void
add_entries_transitions(GArray *out, const PodSnapshot *pod, GPtrArray *entries,
                        const PodSnapshot *other, gboolean old_side)
{
    for (guint i = 0; i < entries->len; i++) {
        const PodEntry *e = g_ptr_array_index(entries, i);
        PlegState other_state;

        if (pod_snapshot_find(pod, e->id) != e)
            continue;
        other_state = pod_snapshot_state(other, e->id);
        if (old_side) {
            if (other_state == STATE_NON_EXISTENT)
                add_transitions(out, e->id, e->state, STATE_NON_EXISTENT);
        } else {
            add_transitions(out, e->id, other_state, e->state);
        }
    }
}

/* Transitions from @old to @current; ids point into the snapshots, which outlive the array. */
GArray *
compute_transitions(const PodSnapshot *old, const PodSnapshot *current)
{
    GArray *out = g_array_new(FALSE, FALSE, sizeof(Transition));

    if (current) {
        add_entries_transitions(out, current, current->containers, old, FALSE);
        add_entries_transitions(out, current, current->sandboxes, old, FALSE);
    }
    if (old) {
        add_entries_transitions(out, old, old->containers, current, TRUE);
        add_entries_transitions(out, old, old->sandboxes, current, TRUE);
    }
    return out;
}
