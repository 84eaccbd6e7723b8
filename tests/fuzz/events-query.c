/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The query of GET /events as plegd reads it into a filter (examples/plegd/event-filter.c, after
 * plegd_http_parse_query()): arbitrary text never crashes; a refused parameter is a
 * G_OPTION_ERROR whose message names it; and an accepted filter passes exactly the events a
 * plain reading of the documented rules passes (a key's values OR, keys AND, since_time a lower
 * bound), over a fixed set of events with and without names.
 */
#include <glib.h>
#include <string.h>

#include "fuzz-target.h"
#include "plegd.h"

/* A fixed wall clock, so that durations are read the same in every run. */
#define NOW_NS G_GINT64_CONSTANT(1796400000000000000)

static PlegPodLifecycleEvent events[] = {
    {.pod_uid = "uid-web", .type = PLEG_CONTAINER_DIED, .container_id = "c1",
     .time_ns = NOW_NS - G_GINT64_CONSTANT(600000000000),
     .details = {.pod_namespace = "shop", .pod_name = "web", .container_name = "nginx"}},
    {.pod_uid = "uid-web", .type = PLEG_CONTAINER_STARTED, .container_id = "sb1",
     .time_ns = NOW_NS - 1000, .details = {.pod_namespace = "shop", .pod_name = "web",
                                           .sandbox = TRUE, .attempt = 1}},
    {.pod_uid = "uid-x", .type = PLEG_CONTAINER_REMOVED, .container_id = "c2", .time_ns = NOW_NS},
    {.pod_uid = "uid-x", .type = PLEG_POD_SYNC, .time_ns = NOW_NS + 1,
     .details = {.pod_namespace = "default", .pod_name = "x"}},
};

/* What an event offers to the filter key @name, NULL for none. */
static const char *
event_value(const PlegPodLifecycleEvent *event, const char *name)
{
    if (g_str_equal(name, "type"))
        return pleg_pod_lifecycle_event_type_to_string(event->type);
    if (g_str_equal(name, "namespace"))
        return event->details.pod_namespace;
    if (g_str_equal(name, "pod"))
        return event->details.pod_name;
    if (g_str_equal(name, "pod_uid"))
        return event->pod_uid;
    if (g_str_equal(name, "container"))
        return event->details.container_name;
    if (g_str_equal(name, "sandbox"))
        return event->details.sandbox ? "true" : "false";
    return NULL;
}

/* The documented rules, read plainly: every key given (but until_time) must have a value the
 * event offers; since_time is a lower bound on its time. */
static gboolean
expected_match(const PlegPodLifecycleEvent *event, GPtrArray *params)
{
    g_autoptr(GHashTable) keys = g_hash_table_new(g_str_hash, g_str_equal);
    g_autoptr(GHashTable) hits = g_hash_table_new(g_str_hash, g_str_equal);

    for (guint i = 0; i < params->len; i += 2) {
        const char *name = params->pdata[i], *value = params->pdata[i + 1];
        const char *offered = event_value(event, name);

        if (g_str_equal(name, "until_time"))
            continue;
        if (g_str_equal(name, "since_time")) {
            gint64 since = 0;

            FUZZ_CHECK(plegd_event_filter_parse_time(name, value, NOW_NS, &since, NULL),
                       "an accepted since_time parses");
            if (event->time_ns < since)
                return FALSE;
            continue;
        }
        g_hash_table_add(keys, (gpointer)name);
        if (offered && g_str_equal(offered, value))
            g_hash_table_add(hits, (gpointer)name);
    }
    return g_hash_table_size(keys) == g_hash_table_size(hits);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    g_autofree char *query = g_strndup((const char *)data, size);
    g_autoptr(GError) error = NULL;
    g_autoptr(GPtrArray) params = plegd_http_parse_query(query, &error);
    g_autoptr(PlegdEventFilter) filter = plegd_event_filter_new(NOW_NS);

    if (!params) {
        FUZZ_CHECK(g_error_matches(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE),
                   "a malformed query is G_OPTION_ERROR_BAD_VALUE");
        return 0;
    }
    for (guint i = 0; i < params->len; i += 2) {
        const char *name = params->pdata[i], *value = params->pdata[i + 1];

        /* /events' own parameters, not filters. */
        if (g_str_equal(name, "since") || g_str_equal(name, "instance") ||
            g_str_equal(name, "follow"))
            continue;
        if (!plegd_event_filter_add(filter, name, value, &error)) {
            g_autofree char *shown = pleg_log_text(name, -1, 0);

            FUZZ_CHECK(error && error->domain == G_OPTION_ERROR, "a refusal is a G_OPTION_ERROR");
            FUZZ_CHECK(strstr(error->message, shown) != NULL, "a refusal names the parameter");
            return 0;
        }
    }
    for (guint i = 0; i < params->len;) {
        const char *name = params->pdata[i];

        if (g_str_equal(name, "since") || g_str_equal(name, "instance") ||
            g_str_equal(name, "follow"))
            g_ptr_array_remove_range(params, i, 2);
        else
            i += 2;
    }
    FUZZ_CHECK(plegd_event_filter_is_empty(filter) == (params->len == 0),
               "a filter is empty when nothing was added");
    for (guint e = 0; e < G_N_ELEMENTS(events); e++) {
        g_autoptr(PlegdEventKey) key = plegd_event_key_new(&events[e]);

        if (plegd_event_filter_match(filter, key) != expected_match(&events[e], params))
            fuzz_fail("query \"%s\": event %u %s where the rules say otherwise", query, e,
                      plegd_event_filter_match(filter, key) ? "passes" : "does not pass");
    }
    return 0;
}
