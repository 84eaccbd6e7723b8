/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plugin host: CRI client, Generic PLEG and metrics; start and stop of the PLEG and the
 * plugins, CRI list streaming, callbacks.  The parts live beside it: pleg-host-gates.c,
 * pleg-health.c, pleg-services.c, pleg-plugin-thread.c, pleg-plugin-loader.c.
 */
#include <pleg/pleg-host.h>

#include "cri-private.h"
#include "pleg-config.h"
#include "pleg-host-private.h"
#include "pleg-private.h"
#include "pleg-quark.h"

PLEG_DEFINE_QUARK("pleg-host-error-quark", pleg_host_error)

void
pleg_host_config_init(PlegHostConfig *config)
{
    g_return_if_fail(config != NULL);

    memset(config, 0, sizeof(*config));
    pleg_generic_config_init(&config->generic);
}

/* The PLEG first: no event, relist or relist callback comes after it, whatever the plugins'
 * stops then take (each bounded, pleg_plugin_entry_shutdown()). */
static void
stop_all(PlegHost *self)
{
    pleg_generic_stop(self->pleg);
    g_atomic_int_set(&self->pleg_running, FALSE);
    for (guint i = self->plugins->len; i > 0; i--) {
        PluginEntry *entry = g_ptr_array_index(self->plugins, i - 1);

        if (!entry->thread)
            continue;
        pleg_plugin_entry_shutdown(entry);
        if (entry->info.state == PLEG_PLUGIN_STATE_RUNNING)
            entry->info.state = PLEG_PLUGIN_STATE_STOPPED;
    }
}

gboolean
pleg_host_start(PlegHost *self, GError **error)
{
    g_return_val_if_fail(self != NULL, FALSE);
    g_return_val_if_fail(error == NULL || *error == NULL, FALSE);

    if (self->started)
        return TRUE;

    /* A restart loads the plugins again (their modules are still resident). */
    g_ptr_array_set_size(self->plugins, 0);
    pleg_host_load_plugins(self);
    if (!pleg_host_check_required(self, FALSE, error)) {
        stop_all(self);
        return FALSE;
    }

    pleg_generic_start(self->pleg);
    g_atomic_int_set(&self->pleg_running, TRUE);

    for (guint i = 0; i < self->plugins->len; i++) {
        PluginEntry *entry = g_ptr_array_index(self->plugins, i);

        if (!entry->initialized)
            continue;
        pleg_plugin_entry_start(entry);
        pleg_host_report_failure(self, entry);
    }
    if (!pleg_host_check_required(self, TRUE, error)) {
        stop_all(self);
        return FALSE;
    }

    self->started = TRUE;
    return TRUE;
}

void
pleg_host_stop(PlegHost *self)
{
    g_return_if_fail(self != NULL);

    if (!self->started)
        return;
    stop_all(self);
    self->started = FALSE;
}

/* ---- the host ---- */

/* ---- CRI list streaming (KEP-5825) ---- */

/* Says each change of listing path once, at the default level, and keeps kubelet's gauge:
 * 1 while listings stream, 0 while they fall back to unary RPCs. */
static void
list_notice(PlegCriClient *client, PlegCriListNotice notice, const GError *reason,
            gpointer user_data)
{
    PlegHost *self = user_data;
    static const char *const labels[] = {"runtime", NULL};

    switch (notice) {
    case PLEG_CRI_LIST_NOTICE_STREAMING:
        g_message("listing pod sandboxes and containers through the CRI list streams "
                  "(StreamPodSandboxes, StreamContainers)");
        pleg_metric_set(self->cri_streaming, labels, 1);
        break;
    case PLEG_CRI_LIST_NOTICE_FALLBACK:
        g_message("the runtime does not serve the CRI list streams (%s): listing with "
                  "ListPodSandbox and ListContainers, and trying the streams again every %s",
                  reason->message, self->list_probe_interval_text);
        pleg_metric_set(self->cri_streaming, labels, 0);
        break;
    case PLEG_CRI_LIST_NOTICE_TOO_LARGE:
        g_message("the runtime's listing no longer fits in one answer (%s): this node has "
                  "outgrown unary listing, and every relist fails until the runtime serves the "
                  "CRI list streams that CRIListStreaming uses",
                  reason->message);
        break;
    }
}

/* A unary listing too large to receive, with the gate off: the remedy is the gate. */
static void
list_notice_gate_off(PlegCriClient *client, PlegCriListNotice notice, const GError *reason,
                     gpointer user_data)
{
    if (notice == PLEG_CRI_LIST_NOTICE_TOO_LARGE)
        g_message("the runtime's listing no longer fits in one answer (%s): this node has "
                  "outgrown unary listing, and every relist fails until CRI list streaming is "
                  "on: enable the CRIListStreaming feature gate (--feature-gates="
                  "CRIListStreaming=true) with a runtime that serves it (KEP-5825)",
                  reason->message);
}

static void
list_streaming_setup(PlegHost *self, gboolean enabled, gint64 probe_interval_usec)
{
    if (!enabled) {
        pleg_cri_client_set_list_notice_func(self->client, list_notice_gate_off, NULL, NULL);
        return;
    }
    if (probe_interval_usec <= 0)
        probe_interval_usec = PLEG_CRI_LIST_PROBE_INTERVAL_USEC;
    self->list_probe_interval_text = pleg_duration_format(probe_interval_usec);
    self->cri_streaming = pleg_metrics_register(
        self->metrics, PLEG_METRIC_GAUGE, "kubelet_cri_streaming_enabled",
        "[ALPHA] 1 while CRI listings use the KEP-5825 list streams, 0 while they fall back to "
        "the unary RPCs because the runtime answered UNIMPLEMENTED.",
        (const char *const[]){"service", NULL}, NULL, 0);
    pleg_cri_client_set_list_streaming(self->client, TRUE, probe_interval_usec);
    pleg_cri_client_set_list_notice_func(self->client, list_notice, self, NULL);
}

PlegHost *
pleg_host_new(const PlegHostConfig *config, PlegFeatureGates *gates, GMainContext *context,
              GError **error)
{
    g_autoptr(PlegHost) self = NULL;
    g_autoptr(PlegFeatureGates) own_gates = NULL;

    g_return_val_if_fail(config != NULL, NULL);
    g_return_val_if_fail(error == NULL || *error == NULL, NULL);

    /* Without gates from the caller, the plugins' declared gates at their defaults. */
    if (!gates) {
        own_gates = pleg_feature_gates_new();
        if (!pleg_feature_gates_register_plugins(own_gates, config->plugin_dir, error))
            return NULL;
        gates = own_gates;
    }

    self = g_new0(PlegHost, 1);
    self->context = context ? g_main_context_ref(context) : g_main_context_ref_thread_default();
    self->own_gates = g_steal_pointer(&own_gates);
    self->gates = gates;
    self->health = pleg_health_registry_new();
    self->statuses = pleg_status_board_new();
    self->subscriptions = g_ptr_array_new();
    self->removed = g_ptr_array_new();
    self->plugins = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_plugin_entry_free);
    self->plugin_dir = g_strdup(config->plugin_dir ? config->plugin_dir : PLEG_PLUGIN_DIR);
    self->disabled_plugins = g_strdupv((char **)config->disabled_plugins);
    self->required_plugins = g_strdupv((char **)config->required_plugins);

    if (config->runtime) {
        self->runtime = pleg_runtime_ref(config->runtime);
    } else {
        g_autoptr(GError) local_error = NULL;

        self->endpoint = g_strdup(config->runtime_endpoint ? config->runtime_endpoint
                                                           : PLEG_DEFAULT_CRI_ENDPOINT);
        self->client =
            pleg_cri_client_new(self->endpoint, config->runtime_request_timeout_usec, &local_error);
        if (!self->client) {
            g_set_error_literal(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                                local_error->message);
            return NULL;
        }
        self->runtime = pleg_cri_client_as_runtime(self->client);
    }

    self->relist_threshold_usec = config->generic.relist_threshold_usec > 0
                                      ? config->generic.relist_threshold_usec
                                      : PLEG_DEFAULT_RELIST_THRESHOLD_USEC;
    self->liveness_window_usec = pleg_host_liveness_window(
        self->relist_threshold_usec,
        config->generic.relist_period_usec > 0 ? config->generic.relist_period_usec
                                               : PLEG_DEFAULT_RELIST_PERIOD_USEC,
        config->runtime_request_timeout_usec > 0 ? config->runtime_request_timeout_usec
                                                 : PLEG_CRI_DEFAULT_TIMEOUT_USEC);
    self->metrics = pleg_metrics_registry_new();
    if (self->client) {
        pleg_cri_client_set_metrics(self->client, self->metrics);
        list_streaming_setup(self,
                             pleg_feature_gates_enabled(gates, PLEG_FEATURE_CRI_LIST_STREAMING),
                             config->list_stream_probe_interval_usec);
    }
    self->pleg = pleg_generic_new(self->runtime, &config->generic, self->metrics);
    pleg_host_add_own_checkers(self);

    return g_steal_pointer(&self);
}

static void
destroy_source(GSource *source)
{
    g_source_destroy(source);
    g_source_unref(source);
}

static void
subscription_free(PlegHost *self, Subscription *subscription)
{
    destroy_source(subscription->source);
    pleg_generic_unsubscribe(self->pleg, subscription->channel);
    g_free(subscription);
}

void
pleg_host_free(PlegHost *self)
{
    if (!self)
        return;

    if (self->pleg)
        pleg_host_stop(self);

    g_clear_pointer(&self->reaper, destroy_source);
    g_ptr_array_extend_and_steal(self->subscriptions, g_steal_pointer(&self->removed));
    for (guint i = 0; i < self->subscriptions->len; i++)
        subscription_free(self, g_ptr_array_index(self->subscriptions, i));
    g_ptr_array_unref(self->subscriptions);

    /* An abandoned plugin's thread reaches the host through its services: the host stays
     * allocated for it.  Nothing of it runs in the caller's context any more. */
    if (g_atomic_int_get(&self->n_abandoned) > 0) {
        g_message("leaving the plugin host allocated: %d plugin(s) did not stop and may still "
                  "use it",
                  g_atomic_int_get(&self->n_abandoned));
        return;
    }

    /* The host's own checkers use the PLEG: gone, and no longer running, before it goes.  A
     * round that a hung plugin checker holds keeps the registry alive, and skips them. */
    pleg_health_registry_remove(self->health, 0, NULL);
    pleg_health_registry_unref(self->health);

    g_ptr_array_unref(self->plugins);
    pleg_status_board_unref(self->statuses);
    pleg_generic_free(self->pleg);
    if (self->metrics)
        pleg_metrics_registry_unref(self->metrics);
    if (self->runtime)
        pleg_runtime_unref(self->runtime);
    if (self->client) {
        /* The notices point at this host; the client may outlive it in a runtime reference. */
        pleg_cri_client_set_list_notice_func(self->client, NULL, NULL, NULL);
        pleg_cri_client_unref(self->client);
    }
    g_free(self->list_probe_interval_text);
    pleg_feature_gates_free(self->own_gates);
    g_strfreev(self->disabled_plugins);
    g_strfreev(self->required_plugins);
    g_free(self->plugin_dir);
    g_free(self->endpoint);
    g_main_context_unref(self->context);
    g_free(self);
}

guint
pleg_host_add_event_callback(PlegHost *self, PlegEventFunc func, gpointer user_data,
                             GDestroyNotify destroy)
{
    Subscription *subscription;

    g_return_val_if_fail(self != NULL, 0);
    g_return_val_if_fail(func != NULL, 0);

    subscription = g_new0(Subscription, 1);
    subscription->id = ++self->next_subscription_id;
    subscription->channel = pleg_generic_subscribe(self->pleg, 0);
    subscription->source =
        pleg_event_channel_attach(subscription->channel, self->context, func, user_data, destroy);
    g_ptr_array_add(self->subscriptions, subscription);
    return subscription->id;
}

/* Unsubscribes the callbacks that removed themselves, once their dispatch is over. */
static gboolean
reap_subscriptions(gpointer user_data)
{
    PlegHost *self = user_data;

    g_clear_pointer(&self->reaper, g_source_unref);
    while (self->removed->len > 0)
        subscription_free(self, g_ptr_array_steal_index(self->removed, 0));
    return G_SOURCE_REMOVE;
}

void
pleg_host_remove_event_callback(PlegHost *self, guint id)
{
    Subscription *subscription = NULL;

    g_return_if_fail(self != NULL);

    for (guint i = 0; i < self->subscriptions->len; i++) {
        if (((Subscription *)g_ptr_array_index(self->subscriptions, i))->id == id) {
            subscription = g_ptr_array_steal_index(self->subscriptions, i);
            break;
        }
    }
    g_return_if_fail(subscription != NULL);

    if (g_main_current_source() != subscription->source) {
        subscription_free(self, subscription);
        return;
    }
    /* From inside its own callback: no call after this one, but the channel may go only once
     * the dispatch that runs the callback has let its source go. */
    g_source_destroy(subscription->source);
    g_ptr_array_add(self->removed, subscription);
    if (!self->reaper) {
        self->reaper = g_idle_source_new();
        g_source_set_callback(self->reaper, reap_subscriptions, self, NULL);
        g_source_attach(self->reaper, self->context);
    }
}

PlegRelistRequestResult
pleg_host_request_relist(PlegHost *self, const char *pod_uid, PlegRelistSource source)
{
    g_return_val_if_fail(self != NULL, PLEG_RELIST_REQUEST_DROPPED);

    return pleg_generic_request_relist(self->pleg, pod_uid, source);
}

void
pleg_host_suspend_pod(PlegHost *self, const char *pod_uid)
{
    g_return_if_fail(self != NULL);

    pleg_generic_suspend_pod(self->pleg, pod_uid);
}

void
pleg_host_resume_pod(PlegHost *self, const char *pod_uid)
{
    g_return_if_fail(self != NULL);

    pleg_generic_resume_pod(self->pleg, pod_uid);
}

void
pleg_host_set_relist_callback(PlegHost *self, PlegRelistFunc func, gpointer user_data,
                              GDestroyNotify destroy)
{
    g_return_if_fail(self != NULL);

    pleg_generic_set_relist_callback(self->pleg, self->context, func, user_data, destroy);
}

PlegGeneric *
pleg_host_get_pleg(PlegHost *self)
{
    g_return_val_if_fail(self != NULL, NULL);
    return self->pleg;
}

PlegMetricsRegistry *
pleg_host_get_metrics(PlegHost *self)
{
    g_return_val_if_fail(self != NULL, NULL);
    return self->metrics;
}

GPtrArray *
pleg_host_get_plugins(PlegHost *self)
{
    GPtrArray *plugins;

    g_return_val_if_fail(self != NULL, NULL);

    plugins = g_ptr_array_sized_new(self->plugins->len);
    for (guint i = 0; i < self->plugins->len; i++) {
        PluginEntry *entry = g_ptr_array_index(self->plugins, i);

        g_ptr_array_add(plugins, &entry->info);
    }
    return plugins;
}

GPtrArray *
pleg_host_get_plugin_statuses(PlegHost *self)
{
    g_return_val_if_fail(self != NULL, NULL);

    return pleg_status_board_list(self->statuses, NULL);
}

PlegPluginStatus *
pleg_host_get_plugin_status(PlegHost *self, const char *name)
{
    g_autoptr(GPtrArray) list = NULL;

    g_return_val_if_fail(self != NULL, NULL);
    g_return_val_if_fail(name != NULL, NULL);

    list = pleg_status_board_list(self->statuses, name);
    return list->len > 0 ? g_ptr_array_steal_index(list, 0) : NULL;
}
