/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cri-sim: the hub.  cri_sim_new() and cri_sim_free() set up and tear down the parts
 * (cri-sim-private.h lists them) and start and stop the server thread.
 */
#include <glib/gstdio.h>
#include <grpc/support/time.h>

#include "cri-sim-private.h"

#define DEFAULT_LIST_BATCH 5000

G_DEFINE_QUARK(cri-sim-error-quark, cri_sim_error)

CriSim *
cri_sim_new(const char *socket_path, GError **error)
{
    CriSim *self;

    g_return_val_if_fail(socket_path && *socket_path, NULL);

    grpc_init();
    self = g_new0(CriSim, 1);
    self->socket_path = g_strdup(socket_path);
    self->address = g_strconcat("unix:", socket_path, NULL);
    g_mutex_init(&self->lock);
    g_cond_init(&self->cond);
    self->state = SERVER_AWAY;
    self->pods = g_ptr_array_new_with_free_func((GDestroyNotify)sim_pod_free);
    self->containers = g_ptr_array_new_with_free_func((GDestroyNotify)sim_container_free);
    self->pods_by_id = g_hash_table_new(g_str_hash, g_str_equal);
    self->pods_by_uid = g_hash_table_new(g_str_hash, g_str_equal);
    self->containers_by_id = g_hash_table_new(g_str_hash, g_str_equal);
    self->sandbox_prefix = g_strdup("sb-");
    self->container_prefix = g_strdup("ctr-");
    self->runtime_name = g_strdup("cri-sim");
    self->runtime_version = g_strdup("0.1.0");
    self->n_calls = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    self->last_requests =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)g_bytes_unref);
    self->rules = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    self->calls = g_ptr_array_new();
    self->subscribers = g_ptr_array_new();
    g_queue_init(&self->timers);
    self->auto_events = TRUE;
    self->greeting = g_array_new(FALSE, TRUE, sizeof(CriSimEvent));
    self->list_batch = DEFAULT_LIST_BATCH;
    self->list_fail_after = -1;
    self->cq = grpc_completion_queue_create_for_next(NULL);

    g_mutex_lock(&self->lock);
    if (!sim_server_start(self, error)) {
        g_mutex_unlock(&self->lock);
        self->state = SERVER_STOPPED;
        cri_sim_free(self);
        return NULL;
    }
    g_mutex_unlock(&self->lock);
    self->thread = g_thread_new("cri-sim", sim_server_thread_main, self);
    return self;
}

void
cri_sim_free(CriSim *self)
{
    if (!self)
        return;

    g_mutex_lock(&self->lock);
    while (self->state == SERVER_STOPPING)
        g_cond_wait(&self->cond, &self->lock);
    if (self->state == SERVER_SERVING)
        sim_server_stop(self);
    self->state = SERVER_STOPPED;
    g_mutex_unlock(&self->lock);

    grpc_completion_queue_shutdown(self->cq);
    if (self->thread)
        g_thread_join(self->thread);
    else
        while (grpc_completion_queue_next(self->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL)
                   .type != GRPC_QUEUE_SHUTDOWN)
            ;
    grpc_completion_queue_destroy(self->cq);
    g_unlink(self->socket_path);

    g_assert(self->n_live == 0);
    g_ptr_array_unref(self->calls);
    g_ptr_array_unref(self->subscribers);
    g_hash_table_unref(self->pods_by_id);
    g_hash_table_unref(self->pods_by_uid);
    g_hash_table_unref(self->containers_by_id);
    g_ptr_array_unref(self->containers);
    g_ptr_array_unref(self->pods);
    g_hash_table_unref(self->n_calls);
    g_hash_table_unref(self->last_requests);
    g_hash_table_unref(self->rules);
    sim_greeting_clear(self);
    g_array_unref(self->greeting);
    g_free(self->sandbox_prefix);
    g_free(self->container_prefix);
    g_free(self->runtime_name);
    g_free(self->runtime_version);
    g_free(self->socket_path);
    g_free(self->address);
    g_cond_clear(&self->cond);
    g_mutex_clear(&self->lock);
    g_free(self);

    grpc_shutdown();
}

const char *
cri_sim_get_socket_path(CriSim *self)
{
    return self->socket_path;
}

void
cri_sim_set_version(CriSim *self, const char *runtime_name, const char *runtime_version)
{
    g_mutex_lock(&self->lock);
    g_free(self->runtime_name);
    g_free(self->runtime_version);
    self->runtime_name = g_strdup(runtime_name);
    self->runtime_version = g_strdup(runtime_version);
    g_mutex_unlock(&self->lock);
}

void
cri_sim_set_id_prefixes(CriSim *self, const char *sandbox_prefix, const char *container_prefix)
{
    g_mutex_lock(&self->lock);
    g_free(self->sandbox_prefix);
    g_free(self->container_prefix);
    self->sandbox_prefix = g_strdup(sandbox_prefix);
    self->container_prefix = g_strdup(container_prefix);
    g_mutex_unlock(&self->lock);
}
