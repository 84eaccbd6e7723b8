/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The services libpleg's host gives a plugin its own way (feature gates, RequestRelist, the
 * runtime endpoint and its event stream); the rest of the table is pleg-services.c's.
 */
#include <pleg/pleg-host.h>

#include "pleg-host-private.h"

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
    return cri_client_container_events_open(self->client, error);
}

static const PlegServiceHostFuncs host_funcs = {
    .feature_enabled = service_feature_enabled,
    .request_relist = service_request_relist,
    .get_runtime_endpoint = service_get_runtime_endpoint,
    .container_events_open = service_container_events_open,
};

void
pleg_host_init_services(PluginEntry *entry)
{
    entry->base = (PlegServiceHost){
        .funcs = &host_funcs,
        .context = entry->context,
        .metrics = entry->host->metrics,
        .health = pleg_health_registry_ref(entry->host->health),
        .log_domain = entry->log_domain,
        .status = pleg_status_board_ref(entry->host->statuses),
    };
    pleg_status_board_add(entry->base.status, &entry->base, entry->info.name);
    pleg_services_init(&entry->services, &entry->base);
}
