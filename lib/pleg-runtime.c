/* SPDX-License-Identifier: Apache-2.0 */
#include "pleg-config.h"

#include <pleg/pleg-runtime.h>

struct _PlegRuntime {
    gatomicrefcount ref_count;
    const PlegRuntimeVTable *vtable;
    gpointer impl;
};

PlegRuntime *
pleg_runtime_new(const PlegRuntimeVTable *vtable, gpointer impl)
{
    PlegRuntime *runtime;

    g_return_val_if_fail(vtable != NULL, NULL);
    g_return_val_if_fail(vtable->size >= sizeof(PlegRuntimeVTable), NULL);

    runtime = g_new0(PlegRuntime, 1);
    g_atomic_ref_count_init(&runtime->ref_count);
    runtime->vtable = vtable;
    runtime->impl = impl;
    return runtime;
}

PlegRuntime *
pleg_runtime_ref(PlegRuntime *runtime)
{
    g_return_val_if_fail(runtime != NULL, NULL);
    g_atomic_ref_count_inc(&runtime->ref_count);
    return runtime;
}

void
pleg_runtime_unref(PlegRuntime *runtime)
{
    if (!runtime || !g_atomic_ref_count_dec(&runtime->ref_count))
        return;
    if (runtime->vtable->finalize)
        runtime->vtable->finalize(runtime->impl);
    g_free(runtime);
}

gboolean
pleg_runtime_list_pod_sandboxes(PlegRuntime *runtime, GPtrArray **ret_sandboxes,
                                GCancellable *cancellable, GError **error)
{
    g_return_val_if_fail(runtime != NULL && ret_sandboxes != NULL, FALSE);
    return runtime->vtable->list_pod_sandboxes(runtime->impl, ret_sandboxes, cancellable, error);
}

gboolean
pleg_runtime_list_pod_sandboxes_of_pod(PlegRuntime *runtime, const char *pod_uid,
                                       GPtrArray **ret_sandboxes, GCancellable *cancellable,
                                       GError **error)
{
    const PlegRuntimeVTable *vtable;
    g_autoptr(GPtrArray) all = NULL;
    GPtrArray *mine;
    gboolean ok;

    g_return_val_if_fail(runtime != NULL && pod_uid != NULL && ret_sandboxes != NULL, FALSE);

    vtable = runtime->vtable;
    if (vtable->size >= G_STRUCT_OFFSET(PlegRuntimeVTable, list_pod_sandboxes_of_pod) +
                            sizeof(vtable->list_pod_sandboxes_of_pod) &&
        vtable->list_pod_sandboxes_of_pod)
        ok = vtable->list_pod_sandboxes_of_pod(runtime->impl, pod_uid, &all, cancellable, error);
    else
        ok = vtable->list_pod_sandboxes(runtime->impl, &all, cancellable, error);
    if (!ok)
        return FALSE;

    mine = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_sandbox_free);
    for (guint i = 0; i < all->len; i++) {
        PlegPodSandbox *sandbox = g_ptr_array_index(all, i);
        /* Moved, not copied: what stays in @all is freed with it. */
        if (g_strcmp0(sandbox->uid, pod_uid) == 0)
            g_ptr_array_add(mine, g_steal_pointer(&all->pdata[i]));
    }
    *ret_sandboxes = mine;
    return TRUE;
}

gboolean
pleg_runtime_list_containers(PlegRuntime *runtime, const char *pod_sandbox_id,
                             GPtrArray **ret_containers, GCancellable *cancellable, GError **error)
{
    g_return_val_if_fail(runtime != NULL && ret_containers != NULL, FALSE);
    return runtime->vtable->list_containers(runtime->impl, pod_sandbox_id, ret_containers,
                                            cancellable, error);
}

PlegPodSandboxStatus *
pleg_runtime_pod_sandbox_status(PlegRuntime *runtime, const char *pod_sandbox_id,
                                GCancellable *cancellable, GError **error)
{
    g_return_val_if_fail(runtime != NULL && pod_sandbox_id != NULL, NULL);
    return runtime->vtable->pod_sandbox_status(runtime->impl, pod_sandbox_id, cancellable, error);
}

PlegContainerStatus *
pleg_runtime_container_status(PlegRuntime *runtime, const char *container_id,
                              GCancellable *cancellable, GError **error)
{
    g_return_val_if_fail(runtime != NULL && container_id != NULL, NULL);
    return runtime->vtable->container_status(runtime->impl, container_id, cancellable, error);
}
