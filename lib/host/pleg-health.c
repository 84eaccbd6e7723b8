/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Health checkers: the registry and its liveness and readiness rounds, and the host's own
 * checkers (pleg, first-relist, runtime).
 */
#include <pleg/pleg-host.h>

#include "pleg-host-private.h"
#include "pleg-private.h"

void
pleg_host_checker_free(Checker *checker)
{
    if (checker->destroy)
        checker->destroy(checker->user_data);
    g_free(checker->name);
    g_free(checker);
}

guint
pleg_host_add_checker(PlegHost *self, PluginEntry *owner, PlegHealthKind kind, const char *name,
            PlegHealthCheckFunc func, gpointer user_data, GDestroyNotify destroy)
{
    Checker *checker;
    guint id;

    g_return_val_if_fail(name != NULL, 0);
    g_return_val_if_fail(func != NULL, 0);

    checker = g_new0(Checker, 1);
    checker->name = g_strdup(name);
    checker->func = func;
    checker->user_data = user_data;
    checker->destroy = destroy;
    checker->owner = owner;
    checker->kind = kind;

    g_rw_lock_writer_lock(&self->health_lock);
    id = checker->id = ++self->next_checker_id;
    g_ptr_array_add(self->checkers, checker);
    g_rw_lock_writer_unlock(&self->health_lock);
    return id;
}

/* Removes the checker @id (when != 0) or every checker of @owner (when @id == 0). */
void
pleg_host_remove_checkers(PlegHost *self, guint id, PluginEntry *owner)
{
    g_autoptr(GPtrArray) removed = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_host_checker_free);

    g_rw_lock_writer_lock(&self->health_lock);
    for (guint i = 0; i < self->checkers->len;) {
        Checker *checker = g_ptr_array_index(self->checkers, i);

        if (id != 0 ? checker->id == id : checker->owner == owner)
            g_ptr_array_add(removed, g_ptr_array_steal_index(self->checkers, i));
        else
            i++;
    }
    g_rw_lock_writer_unlock(&self->health_lock);
    /* Destroy notifies run unlocked: they may call back into the host. */
}

static gboolean
run_checker(Checker *checker, GError **error)
{
    g_autoptr(GError) local_error = NULL;

    if (checker->func(checker->user_data, &local_error))
        return TRUE;
    if (!local_error)
        local_error = g_error_new(G_IO_ERROR, G_IO_ERROR_FAILED, "health checker %s failed",
                                  checker->name);
    g_propagate_error(error, g_steal_pointer(&local_error));
    return FALSE;
}

/* The checkers of a @kind round: every one for readiness, the liveness ones for liveness. */
static gboolean
in_round(const Checker *checker, PlegHealthKind kind)
{
    return kind == PLEG_HEALTH_READINESS || checker->kind == PLEG_HEALTH_LIVENESS;
}

gboolean
pleg_host_run_health_round(PlegHost *self, PlegHealthKind kind, PlegHealthProgressFunc progress,
             gpointer progress_data, char **ret_checker, GError **error)
{
    g_rw_lock_reader_lock(&self->health_lock);
    for (guint i = 0; i < self->checkers->len; i++) {
        Checker *checker = g_ptr_array_index(self->checkers, i);

        if (!in_round(checker, kind))
            continue;
        if (progress)
            progress(checker->name, progress_data);
        if (run_checker(checker, error))
            continue;
        if (ret_checker)
            *ret_checker = g_strdup(checker->name);
        g_rw_lock_reader_unlock(&self->health_lock);
        return FALSE;
    }
    g_rw_lock_reader_unlock(&self->health_lock);
    return TRUE;
}

gboolean
pleg_host_check_health(PlegHost *self, char **ret_checker, GError **error)
{
    g_return_val_if_fail(self != NULL, FALSE);

    return pleg_host_run_health_round(self, PLEG_HEALTH_LIVENESS, NULL, NULL, ret_checker, error);
}

gboolean
pleg_host_check_readiness(PlegHost *self, char **ret_checker, GError **error)
{
    g_return_val_if_fail(self != NULL, FALSE);

    return pleg_host_run_health_round(self, PLEG_HEALTH_READINESS, NULL, NULL, ret_checker, error);
}

void
pleg_health_result_free(PlegHealthResult *result)
{
    if (!result)
        return;
    g_free(result->name);
    g_clear_error(&result->error);
    g_free(result);
}

GPtrArray *
pleg_host_check_all(PlegHost *self, PlegHealthKind kind)
{
    GPtrArray *results;

    g_return_val_if_fail(self != NULL, NULL);

    results = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_health_result_free);
    g_rw_lock_reader_lock(&self->health_lock);
    for (guint i = 0; i < self->checkers->len; i++) {
        Checker *checker = g_ptr_array_index(self->checkers, i);
        PlegHealthResult *result;

        if (!in_round(checker, kind))
            continue;
        result = g_new0(PlegHealthResult, 1);
        result->name = g_strdup(checker->name);
        run_checker(checker, &result->error);
        g_ptr_array_add(results, result);
    }
    g_rw_lock_reader_unlock(&self->health_lock);
    return results;
}

gint64
pleg_host_now_ns(PlegHost *self)
{
    return self->clock ? self->clock(self->clock_data) : g_get_real_time() * 1000;
}

/* Liveness: what restarting this process can fix.  Before the first successful relist the PLEG
 * gets the health threshold from its start, as if it had been seen active then: a runtime slow
 * to answer at start-up, or not there yet, must not stop the systemd watchdog heartbeat
 * (kubelet's slow-start report), and restarting plegd would not bring the runtime up.  After
 * it, kubelet's rule: unhealthy once the last successful relist started longer ago than the
 * threshold. */
static gboolean
pleg_health_check(gpointer user_data, GError **error)
{
    PlegHost *self = user_data;
    g_autofree char *message = NULL;

    /* Not started yet (or stopped): nothing to be late for. */
    if (!g_atomic_int_get(&self->pleg_running))
        return TRUE;
    if (pleg_generic_get_last_relist_time(self->pleg) == 0 &&
        pleg_host_now_ns(self) - self->pleg_started_ns <= self->relist_threshold_usec * 1000)
        return TRUE;
    if (pleg_generic_healthy(self->pleg, &message))
        return TRUE;
    g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_FAILED, message);
    return FALSE;
}

/* Readiness: a global relist has succeeded since start, so the pod cache holds the node. */
static gboolean
first_relist_check(gpointer user_data, GError **error)
{
    PlegHost *self = user_data;

    if (!g_atomic_int_get(&self->pleg_running) || pleg_generic_get_last_relist_time(self->pleg) != 0)
        return TRUE;
    g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_FAILED, "pleg has yet to be successful");
    return FALSE;
}

/* The runtime's reachability joins once its subject exists: until the runtime has answered a
 * global relist once (a runtime slow to come up at start-up is not a failure here; the "pleg"
 * checker's threshold covers that), then unhealthy while the last global relist could not
 * reach it. */
static gboolean
runtime_health_check(gpointer user_data, GError **error)
{
    PlegHost *self = user_data;
    g_autoptr(GError) last_error = NULL;
    gboolean ever_reached;

    if (!g_atomic_int_get(&self->pleg_running))
        return TRUE;
    pleg_generic_get_runtime_state(self->pleg, &ever_reached, &last_error);
    if (!ever_reached || !last_error)
        return TRUE;
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_FAILED, "container runtime is not reachable: %s",
                last_error->message);
    return FALSE;
}

void
pleg_host_add_own_checkers(PlegHost *self)
{
    pleg_host_add_checker(self, NULL, PLEG_HEALTH_LIVENESS, "pleg", pleg_health_check, self, NULL);
    pleg_host_add_checker(self, NULL, PLEG_HEALTH_READINESS, "first-relist", first_relist_check, self, NULL);
    pleg_host_add_checker(self, NULL, PLEG_HEALTH_READINESS, "runtime", runtime_health_check, self, NULL);
}
