/* SPDX-License-Identifier: Apache-2.0 */
/* Pod snapshots: a pod as last listed or published, as kubelet's kubecontainer.Pod (grouped by
 * pleg-listing.c). */
#include "pleg-config.h"

#include <string.h>

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

/* Copies @text (NULL stays NULL) to *@next, moving it past the copy. */
static const char *
copy_into(char **next, const char *text)
{
    char *copy = *next;
    gsize size;

    if (!text)
        return NULL;
    size = strlen(text) + 1;
    memcpy(copy, text, size);
    *next += size;
    return copy;
}

PodEntry *
pod_entry_new(const PodEntry *fields)
{
    const char *texts[] = {fields->id, fields->sandbox_id, fields->names.name,
                           fields->names.namespace_, fields->names.image};
    gsize size = sizeof(PodEntry);
    PodEntry *entry;
    char *next;

    for (guint i = 0; i < G_N_ELEMENTS(texts); i++)
        size += texts[i] ? strlen(texts[i]) + 1 : 0;
    entry = g_malloc(size);
    *entry = *fields;
    next = (char *)(entry + 1);
    entry->id = copy_into(&next, fields->id);
    entry->sandbox_id = copy_into(&next, fields->sandbox_id);
    entry->names.name = copy_into(&next, fields->names.name);
    entry->names.namespace_ = copy_into(&next, fields->names.namespace_);
    entry->names.image = copy_into(&next, fields->names.image);
    return entry;
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
    pod->containers = g_ptr_array_new_with_free_func(g_free);
    pod->sandboxes = g_ptr_array_new_with_free_func(g_free);
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

/* The newest sandbox of @pod that names the pod, NULL when none does. */
static const PodEntry *
pod_sandbox_naming(const PodSnapshot *pod)
{
    if (!pod)
        return NULL;
    for (guint i = 0; i < pod->sandboxes->len; i++) {
        const PodEntry *e = g_ptr_array_index(pod->sandboxes, i);

        if (e->names.name || e->names.namespace_)
            return e;
    }
    return NULL;
}

void
pod_snapshot_fill_details(PlegEventDetails *details, const char *id, const PodSnapshot *current,
                          const PodSnapshot *previous)
{
    const PodEntry *pod = pod_sandbox_naming(current);
    const PodEntry *entry = NULL;

    if (!pod)
        pod = pod_sandbox_naming(previous);
    if (pod) {
        details->pod_namespace = g_strdup(pod->names.namespace_);
        details->pod_name = g_strdup(pod->names.name);
    }
    if (!id)
        return;
    entry = pod_snapshot_find(current, id);
    if (!entry)
        entry = pod_snapshot_find(previous, id);
    if (!entry)
        return;
    details->sandbox = entry->is_sandbox;
    details->attempt = entry->names.attempt;
    if (!entry->is_sandbox) {
        details->container_name = g_strdup(entry->names.name);
        details->image = g_strdup(entry->names.image);
    }
}
