/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The services table a plugin gets (PlegHostServices): each slot reaches the host through
 * the plugin's entry.
 */
#include <pleg/pleg-host.h>

#include "pleg-host-private.h"

static GMainContext *
service_get_main_context(PlegPluginHost *host)
{
    return ENTRY(host)->context;
}

static gboolean
service_feature_enabled(PlegPluginHost *host, const char *gate)
{
    return gate && pleg_feature_gates_enabled(ENTRY(host)->host->gates, gate);
}

static int
service_request_relist(PlegPluginHost *host, const char *pod_uid, PlegPluginRelistSource source)
{
    PluginEntry *entry = ENTRY(host);

    if (!pod_uid || source < PLEG_PLUGIN_RELIST_SOURCE_EVENTED_PLEG ||
        source > PLEG_PLUGIN_RELIST_SOURCE_POST_ALLOCATION) {
        g_debug("plugin %s: RequestRelist with %s, dropped", entry->info.name,
                pod_uid ? "an invalid source" : "no pod uid");
        return PLEG_RELIST_REQUEST_DROPPED;
    }
    /* PlegPluginRelistSource has PlegRelistSource's numbers. */
    return pleg_generic_request_relist(entry->host->pleg, pod_uid, (PlegRelistSource)source);
}

static PlegMetric *
service_metric_register(PlegPluginHost *host, PlegMetricType type, const char *name,
                        const char *help, const char *const *label_names, const double *buckets,
                        gsize n_buckets)
{
    return pleg_metrics_register(ENTRY(host)->host->metrics, type, name, help, label_names, buckets,
                                 n_buckets);
}

static guint
service_add_health_checker(PlegPluginHost *host, const char *name, PlegHealthCheckFunc func,
                           gpointer user_data, GDestroyNotify destroy)
{
    return pleg_host_add_checker(ENTRY(host)->host, ENTRY(host), PLEG_HEALTH_LIVENESS, name, func,
                       user_data, destroy);
}

static void
service_remove_health_checker(PlegPluginHost *host, guint id)
{
    if (id != 0)
        pleg_host_remove_checkers(ENTRY(host)->host, id, NULL);
}

static gboolean
service_check_health(PlegPluginHost *host, char **ret_checker, GError **error)
{
    return pleg_host_check_health(ENTRY(host)->host, ret_checker, error);
}

static gboolean
service_check_health_progress(PlegPluginHost *host, PlegHealthProgressFunc progress,
                              gpointer progress_data, char **ret_checker, GError **error)
{
    return pleg_host_run_health_round(ENTRY(host)->host, PLEG_HEALTH_LIVENESS, progress, progress_data,
                        ret_checker, error);
}

static const char *
level_to_priority(GLogLevelFlags level)
{
    if (level & G_LOG_LEVEL_ERROR)
        return "3";
    if (level & (G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING))
        return "4";
    if (level & G_LOG_LEVEL_MESSAGE)
        return "5";
    if (level & G_LOG_LEVEL_INFO)
        return "6";
    return "7";
}

static void
service_log(PlegPluginHost *host, GLogLevelFlags level, const GLogField *fields, gsize n_fields)
{
    PluginEntry *entry = ENTRY(host);
    g_autofree GLogField *all = g_new0(GLogField, n_fields + 2);
    gboolean has_domain = FALSE, has_priority = FALSE;
    gsize n = 0;

    for (gsize i = 0; i < n_fields; i++) {
        if (g_str_equal(fields[i].key, "GLIB_DOMAIN"))
            has_domain = TRUE;
        else if (g_str_equal(fields[i].key, "PRIORITY"))
            has_priority = TRUE;
        all[n++] = fields[i];
    }
    if (!has_domain)
        all[n++] = (GLogField){"GLIB_DOMAIN", entry->log_domain, -1};
    if (!has_priority)
        all[n++] = (GLogField){"PRIORITY", level_to_priority(level), -1};
    g_log_structured_array(level, all, n);
}

static const char *
service_get_runtime_endpoint(PlegPluginHost *host)
{
    PlegHost *self = ENTRY(host)->host;

    return self->endpoint ? self->endpoint : "";
}

static PlegContainerEventStream *
service_container_events_open(PlegPluginHost *host, GError **error)
{
    PlegHost *self = ENTRY(host)->host;

    if (!self->client) {
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_UNIMPLEMENTED,
                    "GetContainerEvents: the host runs on an in-process runtime, not CRI");
        return NULL;
    }
    return cri_container_events_open(cri_client_get_channel(self->client), error);
}

void
pleg_host_init_services(PluginEntry *entry)
{
    entry->services = (PlegHostServices){
        .size = sizeof(PlegHostServices),
        .abi_minor = PLEG_PLUGIN_ABI_MINOR,
        .host = (PlegPluginHost *)entry,
        .get_main_context = service_get_main_context,
        .feature_enabled = service_feature_enabled,
        .request_relist = service_request_relist,
        .metric_register = service_metric_register,
        .metric_add = pleg_metric_add,
        .metric_set = pleg_metric_set,
        .metric_observe = pleg_metric_observe,
        .add_health_checker = service_add_health_checker,
        .remove_health_checker = service_remove_health_checker,
        .check_health = service_check_health,
        .log = service_log,
        .get_runtime_endpoint = service_get_runtime_endpoint,
        .container_events_open = service_container_events_open,
        .container_events_read = cri_container_events_read,
        .container_events_cancel = cri_container_events_cancel,
        .container_events_free = cri_container_events_free,
        .container_event_free = cri_container_event_free,
        .check_health_progress = service_check_health_progress,
    };
}
