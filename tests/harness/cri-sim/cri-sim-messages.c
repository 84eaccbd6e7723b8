/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cri-sim: CRI messages built from the model (pod sandbox and container items and statuses,
 * filtered listings, container events).  Nothing here changes state or talks to gRPC; callers
 * hold the lock while a message points into the model.
 */
#include <string.h>

#include "cri-sim-private.h"

#define PADDING_KEY "cri-sim.io/padding"
#define IMAGE_REF   "sha256:0123456789abcdef"

/* ---- label selectors ---- */

/* Every protobuf-c map<string, string> entry has this layout. */
typedef struct {
    ProtobufCMessage base;
    char *key;
    char *value;
} MapEntry;

static gboolean
labels_match(GPtrArray *labels, MapEntry **selector, size_t n_selector)
{
    for (size_t i = 0; i < n_selector; i++)
        if (g_strcmp0(sim_labels_get(labels, selector[i]->key), selector[i]->value) != 0)
            return FALSE;
    return TRUE;
}

/* ---- building messages ---- */

/* Messages are built from the state without copies: the pieces live in a scratch list until the
 * message is packed, under the lock. */
static gpointer
scratch_alloc(GPtrArray *scratch, gsize size)
{
    gpointer p = g_malloc0(size);

    g_ptr_array_add(scratch, p);
    return p;
}

#define SCRATCH_NEW(scratch, Type)    ((Type *)scratch_alloc((scratch), sizeof(Type)))
#define SCRATCH_ARRAY(scratch, T, n)  ((T *)scratch_alloc((scratch), sizeof(T) * MAX((n), 1)))

static MapEntry **
build_map(GPtrArray *scratch, GPtrArray *labels, const ProtobufCMessageDescriptor *descriptor,
          size_t *ret_n)
{
    guint n = labels->len / 2;
    MapEntry **entries = SCRATCH_ARRAY(scratch, MapEntry *, n);

    for (guint i = 0; i < n; i++) {
        MapEntry *entry = SCRATCH_NEW(scratch, MapEntry);

        protobuf_c_message_init(descriptor, entry);
        entry->key = labels->pdata[2 * i];
        entry->value = labels->pdata[2 * i + 1];
        entries[i] = entry;
    }
    *ret_n = n;
    return entries;
}

GBytes *
sim_pack(const ProtobufCMessage *message)
{
    gsize size = protobuf_c_message_get_packed_size(message);
    guint8 *data = g_malloc(MAX(size, 1));

    protobuf_c_message_pack(message, data);
    return g_bytes_new_take(data, size);
}

static Runtime__V1__PodSandboxMetadata *
build_sandbox_metadata(GPtrArray *scratch, Pod *pod)
{
    Runtime__V1__PodSandboxMetadata *metadata = SCRATCH_NEW(scratch, Runtime__V1__PodSandboxMetadata);

    runtime__v1__pod_sandbox_metadata__init(metadata);
    metadata->name = pod->name;
    metadata->uid = pod->uid;
    metadata->namespace_ = pod->namespace_;
    metadata->attempt = pod->attempt;
    return metadata;
}

static Runtime__V1__PodSandboxState
pod_state(Pod *pod)
{
    return pod->not_ready ? RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_NOTREADY
                          : RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_READY;
}

static Runtime__V1__PodSandbox *
build_sandbox(GPtrArray *scratch, Pod *pod)
{
    Runtime__V1__PodSandbox *item = SCRATCH_NEW(scratch, Runtime__V1__PodSandbox);

    runtime__v1__pod_sandbox__init(item);
    item->id = pod->id;
    item->metadata = build_sandbox_metadata(scratch, pod);
    item->state = pod_state(pod);
    item->created_at = pod->created_at;
    item->labels = (Runtime__V1__PodSandbox__LabelsEntry **)build_map(
        scratch, pod->labels, &runtime__v1__pod_sandbox__labels_entry__descriptor, &item->n_labels);
    return item;
}

Runtime__V1__PodSandboxStatus *
sim_build_sandbox_status(GPtrArray *scratch, Pod *pod)
{
    Runtime__V1__PodSandboxStatus *status = SCRATCH_NEW(scratch, Runtime__V1__PodSandboxStatus);

    runtime__v1__pod_sandbox_status__init(status);
    status->id = pod->id;
    status->metadata = build_sandbox_metadata(scratch, pod);
    status->state = pod_state(pod);
    status->created_at = pod->created_at;
    status->labels = (Runtime__V1__PodSandboxStatus__LabelsEntry **)build_map(
        scratch, pod->labels, &runtime__v1__pod_sandbox_status__labels_entry__descriptor,
        &status->n_labels);
    if (pod->ip) {
        Runtime__V1__PodSandboxNetworkStatus *network =
            SCRATCH_NEW(scratch, Runtime__V1__PodSandboxNetworkStatus);

        runtime__v1__pod_sandbox_network_status__init(network);
        network->ip = pod->ip;
        if (pod->additional_ip) {
            Runtime__V1__PodIP *extra = SCRATCH_NEW(scratch, Runtime__V1__PodIP);

            runtime__v1__pod_ip__init(extra);
            extra->ip = pod->additional_ip;
            network->additional_ips = SCRATCH_ARRAY(scratch, Runtime__V1__PodIP *, 1);
            network->additional_ips[0] = extra;
            network->n_additional_ips = 1;
        }
        status->network = network;
    }
    return status;
}

static Runtime__V1__ContainerMetadata *
build_container_metadata(GPtrArray *scratch, Container *container)
{
    Runtime__V1__ContainerMetadata *metadata = SCRATCH_NEW(scratch, Runtime__V1__ContainerMetadata);

    runtime__v1__container_metadata__init(metadata);
    metadata->name = container->name;
    metadata->attempt = container->attempt;
    return metadata;
}

static Runtime__V1__ImageSpec *
build_image(GPtrArray *scratch, Container *container)
{
    Runtime__V1__ImageSpec *image = SCRATCH_NEW(scratch, Runtime__V1__ImageSpec);

    runtime__v1__image_spec__init(image);
    image->image = container->image;
    return image;
}

static Runtime__V1__Container *
build_container(GPtrArray *scratch, Container *container)
{
    Runtime__V1__Container *item = SCRATCH_NEW(scratch, Runtime__V1__Container);

    runtime__v1__container__init(item);
    item->id = container->id;
    item->pod_sandbox_id = container->pod->id;
    item->metadata = build_container_metadata(scratch, container);
    item->image = build_image(scratch, container);
    item->image_ref = (char *)IMAGE_REF;
    item->state = (Runtime__V1__ContainerState)container->state;
    item->created_at = container->created_at;
    item->labels = (Runtime__V1__Container__LabelsEntry **)build_map(
        scratch, container->labels, &runtime__v1__container__labels_entry__descriptor,
        &item->n_labels);
    if (container->padding_bytes > 0) {
        Runtime__V1__Container__AnnotationsEntry *entry =
            SCRATCH_NEW(scratch, Runtime__V1__Container__AnnotationsEntry);
        char *value = scratch_alloc(scratch, container->padding_bytes + 1);

        runtime__v1__container__annotations_entry__init(entry);
        memset(value, 'x', container->padding_bytes);
        entry->key = (char *)PADDING_KEY;
        entry->value = value;
        item->annotations = SCRATCH_ARRAY(scratch, Runtime__V1__Container__AnnotationsEntry *, 1);
        item->annotations[0] = entry;
        item->n_annotations = 1;
    }
    return item;
}

Runtime__V1__ContainerStatus *
sim_build_container_status(GPtrArray *scratch, Container *container)
{
    Runtime__V1__ContainerStatus *status = SCRATCH_NEW(scratch, Runtime__V1__ContainerStatus);

    runtime__v1__container_status__init(status);
    status->id = container->id;
    status->metadata = build_container_metadata(scratch, container);
    status->image = build_image(scratch, container);
    status->image_ref = (char *)IMAGE_REF;
    status->state = (Runtime__V1__ContainerState)container->state;
    status->created_at = container->created_at;
    status->started_at = container->started_at;
    status->finished_at = container->finished_at;
    status->exit_code = container->exit_code;
    status->reason = container->reason ? container->reason : (char *)"";
    status->labels = (Runtime__V1__ContainerStatus__LabelsEntry **)build_map(
        scratch, container->labels, &runtime__v1__container_status__labels_entry__descriptor,
        &status->n_labels);
    return status;
}

/* An event about @id; @pod (nullable) supplies the statuses, looked up from @id when NULL. */
GBytes *
sim_build_event(CriSim *self, CriSimEventType type, const char *id, Pod *pod, CriSimEventFlags flags,
            gint64 created_at)
{
    g_autoptr(GPtrArray) scratch = g_ptr_array_new_with_free_func(g_free);
    Runtime__V1__ContainerEventResponse event = RUNTIME__V1__CONTAINER_EVENT_RESPONSE__INIT;
    g_autofree char *unknown_id = NULL;

    if (!pod) {
        Container *container = g_hash_table_lookup(self->containers_by_id, id);

        pod = container ? container->pod : g_hash_table_lookup(self->pods_by_id, id);
    }
    if (flags & CRI_SIM_EVENT_UNKNOWN_ID)
        unknown_id = g_strconcat(id, "-unknown", NULL);

    event.container_id = unknown_id ? unknown_id : (char *)id;
    event.container_event_type = (Runtime__V1__ContainerEventType)type;
    event.created_at = created_at ? created_at : sim_now_ns();
    if (pod && !(flags & CRI_SIM_EVENT_NO_SANDBOX)) {
        Runtime__V1__PodSandboxStatus *status = sim_build_sandbox_status(scratch, pod);

        if (flags & CRI_SIM_EVENT_NO_METADATA)
            status->metadata = NULL;
        else if (flags & CRI_SIM_EVENT_EMPTY_UID)
            status->metadata->uid = (char *)"";
        event.pod_sandbox_status = status;
    }
    if (pod && !(flags & CRI_SIM_EVENT_NO_CONTAINERS)) {
        event.n_containers_statuses = pod->containers->len;
        event.containers_statuses =
            SCRATCH_ARRAY(scratch, Runtime__V1__ContainerStatus *, pod->containers->len);
        for (guint i = 0; i < pod->containers->len; i++)
            event.containers_statuses[i] = sim_build_container_status(scratch, pod->containers->pdata[i]);
    }
    return sim_pack(&event.base);
}

/* The sandboxes @filter lets through, as ListPodSandbox and StreamPodSandboxes answer them. */
Runtime__V1__PodSandbox **
sim_collect_sandboxes(CriSim *self, const Runtime__V1__PodSandboxFilter *filter, GPtrArray *scratch,
                  size_t *ret_n)
{
    Runtime__V1__PodSandbox **items =
        SCRATCH_ARRAY(scratch, Runtime__V1__PodSandbox *, self->pods->len);
    size_t n = 0;

    for (guint i = 0; i < self->pods->len; i++) {
        Pod *pod = self->pods->pdata[i];

        if (filter) {
            if (filter->id && *filter->id && !g_str_equal(filter->id, pod->id))
                continue;
            if (filter->state && filter->state->state != pod_state(pod))
                continue;
            if (!labels_match(pod->labels, (MapEntry **)filter->label_selector,
                              filter->n_label_selector))
                continue;
        }
        items[n++] = build_sandbox(scratch, pod);
    }
    *ret_n = n;
    return items;
}

/* The containers @filter lets through, as ListContainers and StreamContainers answer them. */
Runtime__V1__Container **
sim_collect_containers(CriSim *self, const Runtime__V1__ContainerFilter *filter, GPtrArray *scratch,
                   size_t *ret_n)
{
    GPtrArray *candidates = self->containers;
    Runtime__V1__Container **items;
    size_t n = 0;

    /* The common per-pod listing need not walk every container. */
    if (filter && filter->pod_sandbox_id && *filter->pod_sandbox_id) {
        Pod *pod = g_hash_table_lookup(self->pods_by_id, filter->pod_sandbox_id);

        candidates = pod ? pod->containers : NULL;
    }
    items = SCRATCH_ARRAY(scratch, Runtime__V1__Container *, candidates ? candidates->len : 0);
    for (guint i = 0; candidates && i < candidates->len; i++) {
        Container *container = candidates->pdata[i];

        if (filter) {
            if (filter->id && *filter->id && !g_str_equal(filter->id, container->id))
                continue;
            if (filter->state && filter->state->state != (Runtime__V1__ContainerState)container->state)
                continue;
            if (!labels_match(container->labels, (MapEntry **)filter->label_selector,
                              filter->n_label_selector))
                continue;
        }
        items[n++] = build_container(scratch, container);
    }
    *ret_n = n;
    return items;
}
