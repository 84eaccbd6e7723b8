/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host's health: its own checkers (liveness "pleg-dispatcher"; readiness "first-relist",
 * "runtime", "pleg") and the public liveness and readiness rounds over its registry
 * (pleg-health.c).
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

/* The liveness window: how long the dispatcher may go without finishing a global relist
 * before it counts as stuck.  A runtime that is down refuses at once, and relists keep ending
 * every period.  A runtime that hangs makes each call wait for its deadline (the request
 * timeout T), and no longer: a relist's listing stops at its first failed call (ListPodSandbox
 * or ListContainers), and the status calls of the pods it inspects are in flight together, each
 * with its own deadline, a pod's sandboxes' and then its containers'; so a relist started
 * before or during the hang ends within 2T.  Between the ends of two global relists the
 * dispatcher waits the period, may run one pass of targeted relists that began before the
 * global one was due, then runs the global one: period + 2 x 2T.  The relist threshold is the
 * floor, so that liveness is never stricter than kubelet's own PLEG check.  Kubelet's defaults
 * (1 s, 2 min, 3 min) give 8m1s.  What still exceeds it: more hung status calls at once than
 * max_status_calls_in_flight (64) lets in flight, the rest waiting for a place, or a runtime
 * that answers each call just before its deadline; both are as slow as a stuck dispatcher. */
gint64
pleg_host_liveness_window(gint64 relist_threshold_usec, gint64 relist_period_usec,
                          gint64 runtime_request_timeout_usec)
{
    gint64 hung_runtime_usec = relist_period_usec + 4 * runtime_request_timeout_usec;

    return MAX(relist_threshold_usec, hung_runtime_usec);
}

/* Liveness: what restarting this process can fix.  The dispatcher is stuck when it has not
 * finished a global relist, successful or not, within the liveness window (since its start,
 * before the first).  Whether the runtime answers is readiness ("runtime", "pleg"): restarting
 * plegd would not bring a runtime back, and would empty what the consumers resume from. */
static gboolean
dispatcher_check(gpointer user_data, GError **error)
{
    PlegHost *self = user_data;
    g_autofree char *age_text = NULL;
    g_autofree char *window_text = NULL;
    gint64 age_usec;

    /* Not started yet (or stopped): nothing to be late for. */
    if (!g_atomic_int_get(&self->pleg_running))
        return TRUE;
    age_usec = pleg_generic_get_relist_attempt_age(self->pleg);
    if (age_usec <= self->liveness_window_usec)
        return TRUE;
    age_text = pleg_duration_format(age_usec);
    window_text = pleg_duration_format(self->liveness_window_usec);
    g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_UNHEALTHY,
                "pleg dispatcher is stuck: no global relist has finished for %s; the limit is %s",
                age_text, window_text);
    return FALSE;
}

/* Readiness: kubelet's PLEG health, with its message ("pleg was last seen active 11s ago;
 * threshold is 8s"): the last successful global relist started longer ago than the threshold,
 * as kubelet reports it in its node's Ready condition.  Until the first success "first-relist"
 * says so instead. */
static gboolean
pleg_health_check(gpointer user_data, GError **error)
{
    PlegHost *self = user_data;
    g_auto(PlegRelistState) state = {0};
    g_autofree char *message = NULL;

    if (!g_atomic_int_get(&self->pleg_running))
        return TRUE;
    pleg_generic_get_relist_state(self->pleg, &state);
    if (!state.first_relist_succeeded)
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
    pleg_health_registry_add(self->health, NULL, PLEG_HEALTH_LIVENESS, "pleg-dispatcher",
                             dispatcher_check, self, NULL);
    pleg_health_registry_add(self->health, NULL, PLEG_HEALTH_READINESS, "first-relist",
                             first_relist_check, self, NULL);
    /* The runtime's error first: a plain /readyz names the cause, ?verbose kubelet's verdict. */
    pleg_health_registry_add(self->health, NULL, PLEG_HEALTH_READINESS, "runtime",
                             runtime_health_check, self, NULL);
    pleg_health_registry_add(self->health, NULL, PLEG_HEALTH_READINESS, "pleg", pleg_health_check,
                             self, NULL);
}
