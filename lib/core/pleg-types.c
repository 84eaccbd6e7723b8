/* SPDX-License-Identifier: Apache-2.0 */
#include "pleg-config.h"

#include <pleg/pleg-types.h>

const char *
pleg_container_state_to_string(PlegContainerState state)
{
    switch (state) {
    case PLEG_CONTAINER_STATE_CREATED:
        return "created";
    case PLEG_CONTAINER_STATE_RUNNING:
        return "running";
    case PLEG_CONTAINER_STATE_EXITED:
        return "exited";
    case PLEG_CONTAINER_STATE_UNKNOWN:
        return "unknown";
    }
    return "unknown";
}

PlegPodSandbox *
pleg_pod_sandbox_copy(const PlegPodSandbox *sandbox)
{
    PlegPodSandbox *copy;

    if (!sandbox)
        return NULL;
    copy = g_memdup2(sandbox, sizeof(*sandbox));
    copy->id = g_strdup(sandbox->id);
    copy->name = g_strdup(sandbox->name);
    copy->uid = g_strdup(sandbox->uid);
    copy->namespace_ = g_strdup(sandbox->namespace_);
    return copy;
}

void
pleg_pod_sandbox_free(PlegPodSandbox *sandbox)
{
    if (!sandbox)
        return;
    g_free(sandbox->id);
    g_free(sandbox->name);
    g_free(sandbox->uid);
    g_free(sandbox->namespace_);
    g_free(sandbox);
}

PlegContainer *
pleg_container_copy(const PlegContainer *container)
{
    PlegContainer *copy;

    if (!container)
        return NULL;
    copy = g_memdup2(container, sizeof(*container));
    copy->id = g_strdup(container->id);
    copy->pod_sandbox_id = g_strdup(container->pod_sandbox_id);
    copy->name = g_strdup(container->name);
    copy->image = g_strdup(container->image);
    copy->image_ref = g_strdup(container->image_ref);
    copy->pod_uid_label = g_strdup(container->pod_uid_label);
    return copy;
}

void
pleg_container_free(PlegContainer *container)
{
    if (!container)
        return;
    g_free(container->id);
    g_free(container->pod_sandbox_id);
    g_free(container->name);
    g_free(container->image);
    g_free(container->image_ref);
    g_free(container->pod_uid_label);
    g_free(container);
}

PlegPodSandboxStatus *
pleg_pod_sandbox_status_copy(const PlegPodSandboxStatus *status)
{
    PlegPodSandboxStatus *copy;

    if (!status)
        return NULL;
    copy = g_memdup2(status, sizeof(*status));
    copy->id = g_strdup(status->id);
    copy->name = g_strdup(status->name);
    copy->uid = g_strdup(status->uid);
    copy->namespace_ = g_strdup(status->namespace_);
    copy->ips = status->ips ? g_strdupv(status->ips) : g_new0(char *, 1);
    return copy;
}

void
pleg_pod_sandbox_status_free(PlegPodSandboxStatus *status)
{
    if (!status)
        return;
    g_free(status->id);
    g_free(status->name);
    g_free(status->uid);
    g_free(status->namespace_);
    g_strfreev(status->ips);
    g_free(status);
}

PlegContainerStatus *
pleg_container_status_copy(const PlegContainerStatus *status)
{
    PlegContainerStatus *copy;

    if (!status)
        return NULL;
    copy = g_memdup2(status, sizeof(*status));
    copy->id = g_strdup(status->id);
    copy->name = g_strdup(status->name);
    copy->image = g_strdup(status->image);
    copy->image_ref = g_strdup(status->image_ref);
    copy->reason = g_strdup(status->reason);
    copy->message = g_strdup(status->message);
    return copy;
}

void
pleg_container_status_free(PlegContainerStatus *status)
{
    if (!status)
        return;
    g_free(status->id);
    g_free(status->name);
    g_free(status->image);
    g_free(status->image_ref);
    g_free(status->reason);
    g_free(status->message);
    g_free(status);
}

static void
pod_status_clear(PlegPodStatus *status)
{
    g_free(status->uid);
    g_free(status->name);
    g_free(status->namespace_);
    g_strfreev(status->ips);
    g_ptr_array_unref(status->sandbox_statuses);
    g_ptr_array_unref(status->container_statuses);
}

PlegPodStatus *
pleg_pod_status_new(const char *uid)
{
    PlegPodStatus *status = g_atomic_rc_box_new0(PlegPodStatus);

    status->uid = g_strdup(uid);
    status->ips = g_new0(char *, 1);
    status->sandbox_statuses =
        g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_sandbox_status_free);
    status->container_statuses =
        g_ptr_array_new_with_free_func((GDestroyNotify)pleg_container_status_free);
    return status;
}

PlegPodStatus *
pleg_pod_status_ref(PlegPodStatus *status)
{
    g_return_val_if_fail(status != NULL, NULL);
    return g_atomic_rc_box_acquire(status);
}

void
pleg_pod_status_unref(PlegPodStatus *status)
{
    if (status)
        g_atomic_rc_box_release_full(status, (GDestroyNotify)pod_status_clear);
}

const PlegContainerStatus *
pleg_pod_status_find_container(const PlegPodStatus *status, const char *container_id)
{
    g_return_val_if_fail(status != NULL && container_id != NULL, NULL);

    for (guint i = 0; i < status->container_statuses->len; i++) {
        const PlegContainerStatus *c = g_ptr_array_index(status->container_statuses, i);
        if (g_strcmp0(c->id, container_id) == 0)
            return c;
    }
    return NULL;
}
