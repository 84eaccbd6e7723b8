/* SPDX-License-Identifier: Apache-2.0 */
/* Pod snapshots: a listing grouped into pods by UID, as kubelet's kubecontainer.Pod. */
#include "pleg-config.h"

#include "pleg-generic-private.h"

PlegState
pleg_state_from_container(PlegContainerState state)
{
    switch (state) {
    case PLEG_CONTAINER_STATE_RUNNING:
        return STATE_RUNNING;
    case PLEG_CONTAINER_STATE_EXITED:
        return STATE_EXITED;
    case PLEG_CONTAINER_STATE_CREATED:
    case PLEG_CONTAINER_STATE_UNKNOWN:
        break;
    }
    return STATE_UNKNOWN;
}

static void
pod_entry_free(PodEntry *entry)
{
    g_free(entry->id);
    g_free(entry->sandbox_id);
    g_free(entry);
}

static void
pod_snapshot_clear(PodSnapshot *pod)
{
    g_free(pod->uid);
    g_ptr_array_unref(pod->containers);
    g_ptr_array_unref(pod->sandboxes);
}

PodSnapshot *
pod_snapshot_new(const char *uid)
{
    PodSnapshot *pod = g_rc_box_new0(PodSnapshot);

    pod->uid = g_strdup(uid);
    pod->containers = g_ptr_array_new_with_free_func((GDestroyNotify)pod_entry_free);
    pod->sandboxes = g_ptr_array_new_with_free_func((GDestroyNotify)pod_entry_free);
    return pod;
}

PodSnapshot *
pod_snapshot_ref(PodSnapshot *pod)
{
    return pod ? g_rc_box_acquire(pod) : NULL;
}

void
pod_snapshot_unref(PodSnapshot *pod)
{
    if (pod)
        g_rc_box_release_full(pod, (GDestroyNotify)pod_snapshot_clear);
}

const PodEntry *
pod_snapshot_find(const PodSnapshot *pod, const char *id)
{
    if (!pod)
        return NULL;
    for (guint i = 0; i < pod->containers->len; i++) {
        const PodEntry *e = g_ptr_array_index(pod->containers, i);
        if (g_str_equal(e->id, id))
            return e;
    }
    for (guint i = 0; i < pod->sandboxes->len; i++) {
        const PodEntry *e = g_ptr_array_index(pod->sandboxes, i);
        if (g_str_equal(e->id, id))
            return e;
    }
    return NULL;
}

PlegState
pod_snapshot_state(const PodSnapshot *pod, const char *id)
{
    const PodEntry *e = pod_snapshot_find(pod, id);

    return e ? e->state : STATE_NON_EXISTENT;
}

static gint
entry_newest_first(gconstpointer a, gconstpointer b)
{
    const PodEntry *ea = *(const PodEntry *const *)a;
    const PodEntry *eb = *(const PodEntry *const *)b;

    return (ea->created_at_ns < eb->created_at_ns) - (ea->created_at_ns > eb->created_at_ns);
}

/* Groups a listing into pods by UID: a container belongs to its sandbox's pod, or, when its
 * sandbox is not listed, to the pod named by its io.kubernetes.pod.uid label. */
GHashTable *
group_pods(GPtrArray *sandboxes, GPtrArray *containers)
{
    GHashTable *pods =
        g_hash_table_new_full(g_str_hash, g_str_equal, NULL, (GDestroyNotify)pod_snapshot_unref);
    g_autoptr(GHashTable) sandbox_uids = g_hash_table_new(g_str_hash, g_str_equal);

    for (guint i = 0; i < sandboxes->len; i++) {
        const PlegPodSandbox *s = g_ptr_array_index(sandboxes, i);
        PodSnapshot *pod;
        PodEntry *entry;

        if (!s->id || !s->uid || !*s->uid) {
            g_debug("sandbox %s has no pod UID, ignoring", s->id ? s->id : "(no id)");
            continue;
        }
        pod = g_hash_table_lookup(pods, s->uid);
        if (!pod) {
            pod = pod_snapshot_new(s->uid);
            g_hash_table_insert(pods, pod->uid, pod);
        }
        entry = g_new0(PodEntry, 1);
        entry->id = g_strdup(s->id);
        entry->state = s->state == PLEG_POD_SANDBOX_STATE_READY ? STATE_RUNNING : STATE_EXITED;
        entry->created_at_ns = s->created_at_ns;
        g_ptr_array_add(pod->sandboxes, entry);
        g_hash_table_insert(sandbox_uids, s->id, s->uid);
    }

    for (guint i = 0; i < containers->len; i++) {
        const PlegContainer *c = g_ptr_array_index(containers, i);
        const char *uid =
            c->pod_sandbox_id ? g_hash_table_lookup(sandbox_uids, c->pod_sandbox_id) : NULL;
        PodSnapshot *pod;
        PodEntry *entry;

        if (!uid)
            uid = c->pod_uid_label;
        if (!c->id || !uid || !*uid) {
            g_debug("container %s belongs to no known pod, ignoring", c->id ? c->id : "(no id)");
            continue;
        }
        pod = g_hash_table_lookup(pods, uid);
        if (!pod) {
            pod = pod_snapshot_new(uid);
            g_hash_table_insert(pods, pod->uid, pod);
        }
        entry = g_new0(PodEntry, 1);
        entry->id = g_strdup(c->id);
        entry->sandbox_id = g_strdup(c->pod_sandbox_id);
        entry->state = pleg_state_from_container(c->state);
        entry->created_at_ns = c->created_at_ns;
        g_ptr_array_add(pod->containers, entry);
    }

    GHashTableIter iter;
    PodSnapshot *pod;
    g_hash_table_iter_init(&iter, pods);
    while (g_hash_table_iter_next(&iter, NULL, (gpointer *)&pod))
        g_ptr_array_sort(pod->sandboxes, entry_newest_first);
    return pods;
}
