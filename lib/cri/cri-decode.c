/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CRI runtime.v1 messages -> libpleg types.
 */
#include "pleg-config.h"

#include "cri-private.h"

/* protobuf-c decodes an absent proto3 string as "": optional texts become NULL instead. */
static const char *
nonempty(const char *text)
{
    return text && *text ? text : NULL;
}

static char *
dup_nonempty(const char *text)
{
    return g_strdup(nonempty(text));
}

static PlegPodSandboxState
decode_sandbox_state(Runtime__V1__PodSandboxState state)
{
    return state == RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_READY ? PLEG_POD_SANDBOX_STATE_READY
                                                                  : PLEG_POD_SANDBOX_STATE_NOTREADY;
}

static PlegContainerState
decode_container_state(Runtime__V1__ContainerState state)
{
    switch (state) {
    case RUNTIME__V1__CONTAINER_STATE__CONTAINER_CREATED:
        return PLEG_CONTAINER_STATE_CREATED;
    case RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING:
        return PLEG_CONTAINER_STATE_RUNNING;
    case RUNTIME__V1__CONTAINER_STATE__CONTAINER_EXITED:
        return PLEG_CONTAINER_STATE_EXITED;
    default:
        return PLEG_CONTAINER_STATE_UNKNOWN;
    }
}

static const char *
find_label(Runtime__V1__Container__LabelsEntry *const *labels, size_t n_labels, const char *key)
{
    for (size_t i = 0; i < n_labels; i++)
        if (labels[i]->key && g_str_equal(labels[i]->key, key))
            return labels[i]->value;
    return NULL;
}

void
cri_view_pod_sandbox(const Runtime__V1__PodSandbox *sandbox, PlegPodSandbox *ret)
{
    g_return_if_fail(sandbox != NULL && ret != NULL);

    *ret = (PlegPodSandbox){.id = sandbox->id};
    if (sandbox->metadata) {
        ret->name = sandbox->metadata->name;
        ret->uid = sandbox->metadata->uid;
        ret->namespace_ = sandbox->metadata->namespace_;
        ret->attempt = sandbox->metadata->attempt;
    }
    ret->state = decode_sandbox_state(sandbox->state);
    ret->created_at_ns = sandbox->created_at;
}

PlegPodSandbox *
cri_decode_pod_sandbox(const Runtime__V1__PodSandbox *sandbox)
{
    PlegPodSandbox *ret;

    g_return_val_if_fail(sandbox != NULL, NULL);

    ret = g_new(PlegPodSandbox, 1);
    cri_view_pod_sandbox(sandbox, ret);
    ret->id = g_strdup(ret->id);
    ret->name = g_strdup(ret->name);
    ret->uid = g_strdup(ret->uid);
    ret->namespace_ = g_strdup(ret->namespace_);
    return ret;
}

void
cri_view_container(const Runtime__V1__Container *container, PlegContainer *ret)
{
    g_return_if_fail(container != NULL && ret != NULL);

    *ret = (PlegContainer){.id = container->id, .pod_sandbox_id = container->pod_sandbox_id};
    if (container->metadata) {
        ret->name = container->metadata->name;
        ret->attempt = container->metadata->attempt;
    }
    if (container->image)
        ret->image = (char *)nonempty(container->image->image);
    ret->image_ref = (char *)nonempty(container->image_ref);
    ret->state = decode_container_state(container->state);
    ret->created_at_ns = container->created_at;
    ret->pod_uid_label =
        (char *)find_label(container->labels, container->n_labels, "io.kubernetes.pod.uid");
}

PlegContainer *
cri_decode_container(const Runtime__V1__Container *container)
{
    PlegContainer *ret;

    g_return_val_if_fail(container != NULL, NULL);

    ret = g_new(PlegContainer, 1);
    cri_view_container(container, ret);
    ret->id = g_strdup(ret->id);
    ret->pod_sandbox_id = g_strdup(ret->pod_sandbox_id);
    ret->name = g_strdup(ret->name);
    ret->image = g_strdup(ret->image);
    ret->image_ref = g_strdup(ret->image_ref);
    ret->pod_uid_label = g_strdup(ret->pod_uid_label);
    return ret;
}

PlegPodSandboxStatus *
cri_decode_pod_sandbox_status(const Runtime__V1__PodSandboxStatus *status)
{
    PlegPodSandboxStatus *ret;
    GPtrArray *ips;

    g_return_val_if_fail(status != NULL, NULL);

    ret = g_new0(PlegPodSandboxStatus, 1);
    ret->id = g_strdup(status->id);
    if (status->metadata) {
        ret->name = g_strdup(status->metadata->name);
        ret->uid = g_strdup(status->metadata->uid);
        ret->namespace_ = g_strdup(status->metadata->namespace_);
        ret->attempt = status->metadata->attempt;
    }
    ret->state = decode_sandbox_state(status->state);
    ret->created_at_ns = status->created_at;

    ips = g_ptr_array_new();
    if (status->network) {
        if (status->network->ip && *status->network->ip)
            g_ptr_array_add(ips, g_strdup(status->network->ip));
        for (size_t i = 0; i < status->network->n_additional_ips; i++) {
            const Runtime__V1__PodIP *ip = status->network->additional_ips[i];

            if (ip && ip->ip && *ip->ip)
                g_ptr_array_add(ips, g_strdup(ip->ip));
        }
    }
    g_ptr_array_add(ips, NULL);
    ret->ips = (char **)g_ptr_array_free(ips, FALSE);
    return ret;
}

PlegContainerStatus *
cri_decode_container_status(const Runtime__V1__ContainerStatus *status)
{
    PlegContainerStatus *ret;

    g_return_val_if_fail(status != NULL, NULL);

    ret = g_new0(PlegContainerStatus, 1);
    ret->id = g_strdup(status->id);
    if (status->metadata) {
        ret->name = g_strdup(status->metadata->name);
        ret->attempt = status->metadata->attempt;
    }
    ret->state = decode_container_state(status->state);
    ret->created_at_ns = status->created_at;
    ret->started_at_ns = status->started_at;
    ret->finished_at_ns = status->finished_at;
    ret->exit_code = status->exit_code;
    if (status->image)
        ret->image = dup_nonempty(status->image->image);
    ret->image_ref = dup_nonempty(status->image_ref);
    ret->reason = dup_nonempty(status->reason);
    ret->message = dup_nonempty(status->message);
    return ret;
}
