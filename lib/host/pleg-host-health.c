/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host's health: its own checkers ("pleg", "first-relist", "runtime") and the public
 * liveness and readiness rounds over its registry (pleg-health.c).
 */
#include <pleg/pleg-host.h>

#include "pleg-host-private.h"

gboolean
pleg_host_check_health(PlegHost *self, char **ret_checker, GError **error)
{
    g_return_val_if_fail(self != NULL, FALSE);

    return pleg_health_registry_run(self->health, PLEG_HEALTH_LIVENESS, NULL, NULL, ret_checker,
                                    error);
}

gboolean
pleg_host_check_readiness(PlegHost *self, char **ret_checker, GError **error)
{
    g_return_val_if_fail(self != NULL, FALSE);

    return pleg_health_registry_run(self->health, PLEG_HEALTH_READINESS, NULL, NULL, ret_checker,
                                    error);
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
    g_return_val_if_fail(self != NULL, NULL);

    return pleg_health_registry_run_all(self->health, kind);
}

/* The clock of the start-up grace: monotonic, as the PLEG measures its own threshold, so that a
 * step of the wall clock at boot (NTP) neither ends the grace early nor stretches it; a clock
 * a test injected drives both instead. */
gint64
pleg_host_now_ns(PlegHost *self)
{
    return self->clock ? self->clock(self->clock_data) : g_get_monotonic_time() * 1000;
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
    g_auto(PlegRelistState) state = {0};
    g_autofree char *message = NULL;

    /* Not started yet (or stopped): nothing to be late for. */
    if (!g_atomic_int_get(&self->pleg_running))
        return TRUE;
    pleg_generic_get_relist_state(self->pleg, &state);
    if (!state.first_relist_succeeded &&
        pleg_host_now_ns(self) - self->pleg_started_ns <= self->relist_threshold_usec * 1000)
        return TRUE;
    if (pleg_generic_healthy(self->pleg, &message))
        return TRUE;
    g_set_error_literal(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_UNHEALTHY, message);
    return FALSE;
}

/* Readiness: a global relist has succeeded since start, so the pod cache holds the node. */
static gboolean
first_relist_check(gpointer user_data, GError **error)
{
    PlegHost *self = user_data;
    g_auto(PlegRelistState) state = {0};

    if (!g_atomic_int_get(&self->pleg_running))
        return TRUE;
    pleg_generic_get_relist_state(self->pleg, &state);
    if (state.first_relist_succeeded)
        return TRUE;
    g_set_error_literal(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_NOT_READY,
                        "pleg has yet to be successful");
    return FALSE;
}

/* Readiness: unready while the last global relist could not reach the runtime, with the
 * runtime's own error, from the first failed relist on (at start-up too: first-relist then
 * fails as well, and this names why).  Not a liveness check: restarting this process would not
 * bring the runtime back, so the watchdog and /livez do not ask it. */
static gboolean
runtime_health_check(gpointer user_data, GError **error)
{
    PlegHost *self = user_data;
    g_auto(PlegRelistState) state = {0};

    if (!g_atomic_int_get(&self->pleg_running))
        return TRUE;
    pleg_generic_get_relist_state(self->pleg, &state);
    if (!state.last_error)
        return TRUE;
    /* The runtime's own error (PLEG_CRI_ERROR from a CRI client), with its code. */
    g_propagate_prefixed_error(error, g_steal_pointer(&state.last_error),
                               "container runtime is not reachable: ");
    return FALSE;
}

void
pleg_host_add_own_checkers(PlegHost *self)
{
    pleg_health_registry_add(self->health, NULL, PLEG_HEALTH_LIVENESS, "pleg", pleg_health_check,
                             self, NULL);
    pleg_health_registry_add(self->health, NULL, PLEG_HEALTH_READINESS, "first-relist",
                             first_relist_check, self, NULL);
    pleg_health_registry_add(self->health, NULL, PLEG_HEALTH_READINESS, "runtime",
                             runtime_health_check, self, NULL);
}
