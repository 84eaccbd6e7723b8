/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GET /status: plegd's state in one JSON document (doc/status.md): the liveness and readiness
 * verdicts with every check and its reason (the same round of checkers /livez?verbose and
 * /readyz?verbose answer from, run once for both kinds), the informational readiness lines,
 * the relist settings and the last relist, the event history's instance and seqs, the plugins.
 * What plegctl status shows.  Runs in the HTTP server's context, when the status round ends
 * (http-health.c).
 */
#include "http-private.h"
#include "pleg-config.h"

void
plegd_http_set_status_config(PlegdHttp *http, const PlegdStatusConfig *config)
{
    g_free(http->status_config.runtime_endpoint);
    http->status_config = *config;
    http->status_config.runtime_endpoint = g_strdup(config->runtime_endpoint);
}

/* Durations in whole milliseconds: an integer reads the same in every JSON parser. */
static void
add_ms(JsonBuilder *builder, const char *name, gint64 usec)
{
    json_builder_set_member_name(builder, name);
    json_builder_add_int_value(builder, usec / 1000);
}

static void
add_uint(JsonBuilder *builder, const char *name, guint64 value)
{
    json_builder_set_member_name(builder, name);
    json_builder_add_int_value(builder, (gint64)value);
}

/* A time and its age at @now_ns, both left out when unset (0). */
static void
add_time_and_age(JsonBuilder *builder, const char *name, gint64 unix_ns, gint64 now_ns)
{
    g_autofree char *age_name = g_strconcat(name, "_age_ms", NULL);

    if (unix_ns == 0)
        return;
    plegd_json_add_time(builder, name, unix_ns);
    add_ms(builder, age_name, MAX(0, now_ns - unix_ns) / 1000);
}

/* {"ok":B,"checks":[{"name":N,"ok":B,"reason":R},...]} without its closing brace; "ok": every
 * check passed. */
static void
begin_verdict(JsonBuilder *builder, const char *name, GPtrArray *results)
{
    gboolean ok = TRUE;

    for (guint i = 0; i < results->len; i++)
        ok = ok && !((const PlegHealthResult *)g_ptr_array_index(results, i))->error;
    json_builder_set_member_name(builder, name);
    json_builder_begin_object(builder);
    json_builder_set_member_name(builder, "ok");
    json_builder_add_boolean_value(builder, ok);
    json_builder_set_member_name(builder, "checks");
    json_builder_begin_array(builder);
    for (guint i = 0; i < results->len; i++) {
        const PlegHealthResult *result = g_ptr_array_index(results, i);

        json_builder_begin_object(builder);
        plegd_json_add_string(builder, "name", result->name);
        json_builder_set_member_name(builder, "ok");
        json_builder_add_boolean_value(builder, result->error == NULL);
        if (result->error) {
            /* A plugin's reason is its own text: escaped and cut, as /readyz?verbose shows it. */
            g_autofree char *reason = pleg_log_text(result->error->message, -1, 1024);

            plegd_json_add_string(builder, "reason", reason);
        }
        json_builder_end_object(builder);
    }
    json_builder_end_array(builder);
}

/* What readiness shows without counting it: /readyz?verbose's "(informational)" lines. */
static void
add_informational(JsonBuilder *builder, PlegdHttp *http)
{
    json_builder_set_member_name(builder, "informational");
    json_builder_begin_array(builder);
    for (guint i = 0; i < http->readiness_infos->len; i++) {
        const ReadinessInfo *info = g_ptr_array_index(http->readiness_infos, i);
        g_autofree char *text = info->func(info->data);

        json_builder_begin_object(builder);
        plegd_json_add_string(builder, "name", info->name);
        plegd_json_add_string(builder, "message", text);
        json_builder_end_object(builder);
    }
    json_builder_end_array(builder);
}

static void
add_relist(JsonBuilder *builder, PlegdHttp *http, gint64 now_ns)
{
    PlegGeneric *pleg = pleg_host_get_pleg(http->host);
    const PlegdStatusConfig *config = &http->status_config;
    g_auto(PlegRelistState) state = {0};
    gint64 finished_age_usec = pleg_generic_get_relist_attempt_age(pleg);

    pleg_generic_get_relist_state(pleg, &state);
    json_builder_set_member_name(builder, "relist");
    json_builder_begin_object(builder);
    if (config->relist_period_usec > 0) {
        add_ms(builder, "period_ms", config->relist_period_usec);
        add_ms(builder, "threshold_ms", config->relist_threshold_usec);
    }
    add_time_and_age(builder, "last_success", state.last_success_ns, now_ns);
    add_time_and_age(builder, "last_attempt", state.last_attempt_ns, now_ns);
    if (finished_age_usec >= 0)
        add_ms(builder, "last_finished_age_ms", finished_age_usec);
    if (state.last_error) {
        g_autofree char *error = pleg_log_text(state.last_error->message, -1, 1024);

        plegd_json_add_string(builder, "last_error", error);
    }
    json_builder_end_object(builder);
}

static void
add_events(JsonBuilder *builder, PlegdEvents *events)
{
    guint64 oldest, newest;

    plegd_events_get_seqs(events, &oldest, &newest);
    json_builder_set_member_name(builder, "events");
    json_builder_begin_object(builder);
    plegd_json_add_string(builder, "instance", plegd_events_get_instance(events));
    add_uint(builder, "oldest_seq", oldest);
    add_uint(builder, "newest_seq", newest);
    add_uint(builder, "clients", plegd_events_get_n_clients(events));
    json_builder_end_object(builder);
}

/* What the plugin says of itself (set_status): {"state":WORD,"message":TEXT,"since":TIME}. */
static void
add_plugin_status(JsonBuilder *builder, const PlegPluginStatus *status)
{
    /* The plugin's own text: escaped and cut, as /readyz?verbose shows it. */
    g_autofree char *message = pleg_log_text(status->message, -1, 1024);

    json_builder_set_member_name(builder, "status");
    json_builder_begin_object(builder);
    plegd_json_add_string(builder, "state", status->state);
    if (message[0] != '\0')
        plegd_json_add_string(builder, "message", message);
    plegd_json_add_time(builder, "since", status->since_unix_usec * 1000);
    json_builder_end_object(builder);
}

static void
add_plugins(JsonBuilder *builder, PlegHost *host)
{
    g_autoptr(GPtrArray) plugins = pleg_host_get_plugins(host);

    json_builder_set_member_name(builder, "plugins");
    json_builder_begin_array(builder);
    for (guint i = 0; i < plugins->len; i++) {
        const PlegPluginInfo *info = g_ptr_array_index(plugins, i);
        g_autofree char *detail = plegd_describe_plugin(info);

        g_autoptr(PlegPluginStatus) status = pleg_host_get_plugin_status(host, info->name);

        json_builder_begin_object(builder);
        plegd_json_add_string(builder, "name", info->name);
        plegd_json_add_string(builder, "state", pleg_plugin_state_to_string(info->state));
        plegd_json_add_string(builder, "detail", detail);
        if (info->feature_gate)
            plegd_json_add_string(builder, "feature_gate", info->feature_gate);
        if (status)
            add_plugin_status(builder, status);
        json_builder_end_object(builder);
    }
    json_builder_end_array(builder);
}

static char *
status_to_json(PlegdHttp *http, GPtrArray *liveness, GPtrArray *readiness)
{
    g_autoptr(JsonBuilder) builder = json_builder_new();
    g_autoptr(JsonGenerator) generator = json_generator_new();
    g_autoptr(JsonNode) root = NULL;
    PlegPodCache *cache = pleg_generic_get_cache(pleg_host_get_pleg(http->host));
    gint64 now_ns = g_get_real_time() * 1000;
    g_autofree char *text = NULL;

    json_builder_begin_object(builder);
    plegd_json_add_string(builder, "version", PLEG_VERSION);
    if (http->status_config.runtime_endpoint)
        plegd_json_add_string(builder, "runtime_endpoint", http->status_config.runtime_endpoint);
    begin_verdict(builder, "live", liveness);
    json_builder_end_object(builder);
    begin_verdict(builder, "ready", readiness);
    add_informational(builder, http);
    json_builder_end_object(builder);
    add_relist(builder, http, now_ns);
    add_uint(builder, "pods", pleg_pod_cache_get_size(cache));
    if (http->events)
        add_events(builder, http->events);
    add_plugins(builder, http->host);
    json_builder_end_object(builder);

    root = json_builder_get_root(builder);
    json_generator_set_root(generator, root);
    text = json_generator_to_data(generator, NULL);
    return g_strconcat(text, "\n", NULL);
}

void
plegd_status_respond(PlegdHttp *http, SoupServerMessage *msg, GPtrArray *liveness,
                     GPtrArray *readiness)
{
    /* The verdicts are in the body: 200 whatever they are, so a client tells "not ready" from
     * "no answer". */
    soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Cache-Control",
                                 "no-store");
    plegd_http_respond(msg, SOUP_STATUS_OK, JSON_CONTENT_TYPE,
                       status_to_json(http, liveness, readiness));
}
