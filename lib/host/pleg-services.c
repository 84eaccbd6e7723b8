/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The services table a plugin gets (PlegHostServices), the same for every host: each slot
 * reaches the host through the PlegServiceHost its PlegPluginHost points at, and the
 * services that differ between hosts come from its PlegServiceHostFuncs.
 */
#include "pleg-services.h"

#define BASE(h) ((PlegServiceHost *)(h))

static GMainContext *
service_get_main_context(PlegPluginHost *host)
{
    return BASE(host)->context;
}

static PlegMetric *
service_metric_register(PlegPluginHost *host, PlegMetricType type, const char *name,
                        const char *help, const char *const *label_names, const double *buckets,
                        gsize n_buckets)
{
    return pleg_metrics_register(BASE(host)->metrics, type, name, help, label_names, buckets,
                                 n_buckets);
}

static guint
service_add_health_checker(PlegPluginHost *host, const char *name, PlegHealthCheckFunc func,
                           gpointer user_data, GDestroyNotify destroy)
{
    return pleg_health_registry_add(BASE(host)->health, BASE(host), PLEG_HEALTH_LIVENESS, name,
                                    func, user_data, destroy);
}

static void
service_remove_health_checker(PlegPluginHost *host, guint id)
{
    if (id != 0)
        pleg_health_registry_remove(BASE(host)->health, id, NULL);
}

static gboolean
service_check_health_progress(PlegPluginHost *host, PlegHealthProgressFunc progress,
                              gpointer progress_data, char **ret_checker, GError **error)
{
    return pleg_health_registry_run(BASE(host)->health, PLEG_HEALTH_LIVENESS, progress,
                                    progress_data, ret_checker, error);
}

static gboolean
service_check_health(PlegPluginHost *host, char **ret_checker, GError **error)
{
    return service_check_health_progress(host, NULL, NULL, ret_checker, error);
}

static void
service_set_status(PlegPluginHost *host, const char *state, const char *message)
{
    PlegServiceHost *base = BASE(host);

    if (!pleg_status_board_set(base->status, base, state, message)) {
        g_autofree char *shown = state ? pleg_log_text(state, -1, 64) : g_strdup("(null)");

        g_debug("%s: set_status with an invalid state \"%s\" (want a lowercase word), ignoring",
                base->log_domain, shown);
    }
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
    PlegServiceHost *base = BASE(host);
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
        all[n++] = (GLogField){"GLIB_DOMAIN", base->log_domain, -1};
    if (!has_priority)
        all[n++] = (GLogField){"PRIORITY", level_to_priority(level), -1};
    if (base->funcs->log_record)
        base->funcs->log_record(host, level, all, n);
    g_log_structured_array(level, all, n);
}

void
pleg_services_init(PlegHostServices *services, PlegServiceHost *base)
{
    *services = (PlegHostServices){
        .size = sizeof(PlegHostServices),
        .abi_minor = PLEG_PLUGIN_ABI_MINOR,
        .host = (PlegPluginHost *)base,
        .get_main_context = service_get_main_context,
        .feature_enabled = base->funcs->feature_enabled,
        .request_relist = base->funcs->request_relist,
        .metric_register = service_metric_register,
        .metric_add = pleg_metric_add,
        .metric_set = pleg_metric_set,
        .metric_observe = pleg_metric_observe,
        .add_health_checker = service_add_health_checker,
        .remove_health_checker = service_remove_health_checker,
        .check_health = service_check_health,
        .log = service_log,
        .get_runtime_endpoint = base->funcs->get_runtime_endpoint,
        .container_events_open = base->funcs->container_events_open,
        .container_events_read = cri_container_events_read,
        .container_events_cancel = cri_container_events_cancel,
        .container_events_free = cri_container_events_free,
        .container_event_free = cri_container_event_free,
        .check_health_progress = service_check_health_progress,
        .set_status = service_set_status,
    };
}
