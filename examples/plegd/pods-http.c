/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GET /pods: what plegd believes, read from the Generic PLEG's pod cache, as one JSON document
 * (the shape is in doc/pods.md).  The cache is read pod by pod, each entry under
 * the cache's lock, while the dispatcher may be writing it: the answer is a set of entries each
 * consistent in itself, with the time it was read from the runtime, not a snapshot of one instant
 * (kubelet's read-only /pods is no more than that either).  Runs in the HTTP server's context.
 */
#include <json-glib/json-glib.h>

#include "http-private.h"

/* One pod's cache entry: a status, or the error its last inspection failed with, and its
 * names (from the status, or from the listing when the inspection failed). */
typedef struct {
    char *uid;
    PlegPodStatus *status;
    GError *error;
    char *namespace_;
    char *name;
    gint64 modified_ns;
} PodEntry;

static void
pod_entry_free(PodEntry *entry)
{
    g_free(entry->uid);
    pleg_pod_status_unref(entry->status);
    g_clear_error(&entry->error);
    g_free(entry->namespace_);
    g_free(entry->name);
    g_free(entry);
}

static const char *
entry_namespace(const PodEntry *entry)
{
    return entry->namespace_;
}

static const char *
entry_name(const PodEntry *entry)
{
    return entry->name;
}

/* A pod whose names are unknown (its inspection failed, or the runtime gave none) sorts after
 * every named one. */
static int
compare_names(const char *a, const char *b)
{
    if (!a || !b)
        return (a == NULL) - (b == NULL);
    return strcmp(a, b);
}

static int
compare_entries(gconstpointer pa, gconstpointer pb)
{
    const PodEntry *a = *(PodEntry *const *)pa;
    const PodEntry *b = *(PodEntry *const *)pb;
    int cmp = compare_names(entry_namespace(a), entry_namespace(b));

    if (cmp == 0)
        cmp = compare_names(entry_name(a), entry_name(b));
    return cmp != 0 ? cmp : strcmp(a->uid, b->uid);
}

/* ---- the document ---- */

/* JSON text is UTF-8; a runtime's names are bytes it chose: others become U+FFFD, as in the
 * event lines.  %NULL is null. */
void
plegd_json_add_string(JsonBuilder *builder, const char *name, const char *value)
{
    json_builder_set_member_name(builder, name);
    if (!value) {
        json_builder_add_null_value(builder);
    } else if (g_utf8_validate(value, -1, NULL)) {
        json_builder_add_string_value(builder, value);
    } else {
        g_autofree char *valid = g_utf8_make_valid(value, -1);

        json_builder_add_string_value(builder, valid);
    }
}

/* Only when @value is set and not empty: CRI's "" is "none". */
static void
add_optional_string(JsonBuilder *builder, const char *name, const char *value)
{
    if (value && value[0] != '\0')
        plegd_json_add_string(builder, name, value);
}

/* Only when set: 0 is CRI's "not set"; 1970 would be a lie. */
void
plegd_json_add_time(JsonBuilder *builder, const char *name, gint64 unix_ns)
{
    char text[PLEG_TIME_RFC3339_SIZE];

    if (unix_ns == 0)
        return;
    pleg_time_format_rfc3339_to_buffer(unix_ns, text);
    json_builder_set_member_name(builder, name);
    json_builder_add_string_value(builder, text);
}

static void
add_int(JsonBuilder *builder, const char *name, gint64 value)
{
    json_builder_set_member_name(builder, name);
    json_builder_add_int_value(builder, value);
}

static const char *
sandbox_state_to_string(PlegPodSandboxState state)
{
    return state == PLEG_POD_SANDBOX_STATE_READY ? "ready" : "notready";
}

static void
add_sandbox(JsonBuilder *builder, const PlegPodSandboxStatus *sandbox)
{
    json_builder_begin_object(builder);
    plegd_json_add_string(builder, "id", sandbox->id);
    plegd_json_add_string(builder, "state", sandbox_state_to_string(sandbox->state));
    add_int(builder, "attempt", sandbox->attempt);
    plegd_json_add_time(builder, "created_at", sandbox->created_at_ns);
    json_builder_end_object(builder);
}

static void
add_container(JsonBuilder *builder, const PlegContainerStatus *container)
{
    json_builder_begin_object(builder);
    plegd_json_add_string(builder, "name", container->name);
    plegd_json_add_string(builder, "id", container->id);
    plegd_json_add_string(builder, "state", pleg_container_state_to_string(container->state));
    add_int(builder, "attempt", container->attempt);
    plegd_json_add_string(builder, "image", container->image);
    add_optional_string(builder, "image_ref", container->image_ref);
    /* CRI's exit_code means something only once the container exited. */
    if (container->state == PLEG_CONTAINER_STATE_EXITED)
        add_int(builder, "exit_code", container->exit_code);
    add_optional_string(builder, "reason", container->reason);
    add_optional_string(builder, "message", container->message);
    plegd_json_add_time(builder, "created_at", container->created_at_ns);
    plegd_json_add_time(builder, "started_at", container->started_at_ns);
    plegd_json_add_time(builder, "finished_at", container->finished_at_ns);
    json_builder_end_object(builder);
}

static void
add_pod(JsonBuilder *builder, const PodEntry *entry)
{
    const PlegPodStatus *status = entry->status;

    json_builder_begin_object(builder);
    plegd_json_add_string(builder, "uid", entry->uid);
    plegd_json_add_string(builder, "namespace", entry_namespace(entry));
    plegd_json_add_string(builder, "name", entry_name(entry));
    plegd_json_add_time(builder, "observed_at", entry->modified_ns);
    if (entry->error)
        plegd_json_add_string(builder, "error", entry->error->message);
    json_builder_set_member_name(builder, "ips");
    json_builder_begin_array(builder);
    for (char **ip = status ? status->ips : NULL; ip && *ip; ip++)
        json_builder_add_string_value(builder, *ip);
    json_builder_end_array(builder);
    json_builder_set_member_name(builder, "sandboxes");
    json_builder_begin_array(builder);
    for (guint i = 0; status && i < status->sandbox_statuses->len; i++)
        add_sandbox(builder, g_ptr_array_index(status->sandbox_statuses, i));
    json_builder_end_array(builder);
    json_builder_set_member_name(builder, "containers");
    json_builder_begin_array(builder);
    for (guint i = 0; status && i < status->container_statuses->len; i++)
        add_container(builder, g_ptr_array_index(status->container_statuses, i));
    json_builder_end_array(builder);
    json_builder_end_object(builder);
}

/* /events' filter, of which /pods takes the namespace key: a pod is what an event of it names. */
static gboolean
namespace_wanted(const PlegdEventFilter *filter, const PodEntry *entry)
{
    const PlegdEventKey key = {.pod_namespace = entry_namespace(entry)};

    return !filter || plegd_event_filter_match(filter, &key);
}

char *
plegd_pods_to_json(PlegPodCache *cache, const PlegdEventFilter *filter)
{
    g_auto(GStrv) uids = pleg_pod_cache_list_pod_uids(cache);
    g_autoptr(GPtrArray) entries = g_ptr_array_new_with_free_func((GDestroyNotify)pod_entry_free);
    g_autoptr(JsonBuilder) builder = json_builder_new();
    g_autoptr(JsonGenerator) generator = json_generator_new();
    g_autoptr(JsonNode) root = NULL;
    gint64 relisted_ns = pleg_pod_cache_get_global_timestamp(cache);
    g_autofree char *text = NULL;

    for (char **uid = uids; *uid; uid++) {
        PodEntry *entry = g_new0(PodEntry, 1);

        entry->uid = g_strdup(*uid);
        /* Gone since it was listed (removed meanwhile), or in another namespace.  The two
         * reads may straddle an update of the entry: the names of a pod do not change. */
        if (!pleg_pod_cache_get(cache, *uid, &entry->status, &entry->error, &entry->modified_ns) ||
            !pleg_pod_cache_get_pod_names(cache, *uid, &entry->namespace_, &entry->name) ||
            !namespace_wanted(filter, entry)) {
            pod_entry_free(entry);
            continue;
        }
        g_ptr_array_add(entries, entry);
    }
    g_ptr_array_sort(entries, compare_entries);

    json_builder_begin_object(builder);
    plegd_json_add_time(builder, "relisted_at", relisted_ns);
    json_builder_set_member_name(builder, "pods");
    json_builder_begin_array(builder);
    for (guint i = 0; i < entries->len; i++)
        add_pod(builder, g_ptr_array_index(entries, i));
    json_builder_end_array(builder);
    json_builder_end_object(builder);

    root = json_builder_get_root(builder);
    json_generator_set_root(generator, root);
    text = json_generator_to_data(generator, NULL);
    return g_strconcat(text, "\n", NULL);
}

/* ---- requests ---- */

#define PARAMETERS "namespace"

/* namespace=NS, any number of times (each one more that a pod may be in), checked as /events
 * checks its filters' values; nothing else.  @ret_filter: (out) (transfer full): %NULL: every
 * pod. */
static gboolean
parse_query(const char *query, PlegdEventFilter **ret_filter, GError **error)
{
    g_autoptr(GPtrArray) params = plegd_http_parse_query(query, error);
    g_autoptr(PlegdEventFilter) filter = plegd_event_filter_new(0);

    if (!params)
        return FALSE;
    for (guint i = 0; i < params->len; i += 2) {
        const char *name = params->pdata[i];

        if (!g_str_equal(name, "namespace")) {
            g_autofree char *shown = pleg_log_text(name, -1, 0);

            g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                        "unknown query parameter \"%s\" (/pods takes " PARAMETERS ")", shown);
            return FALSE;
        }
        if (!plegd_event_filter_add(filter, name, params->pdata[i + 1], error))
            return FALSE;
    }
    *ret_filter = plegd_event_filter_is_empty(filter) ? NULL : g_steal_pointer(&filter);
    return TRUE;
}

void
plegd_pods_serve(PlegGeneric *pleg, SoupServerMessage *msg)
{
    g_autofree char *path = NULL, *query = NULL;
    g_autoptr(PlegdEventFilter) filter = NULL;
    g_autoptr(GError) error = NULL;

    plegd_http_get_target(msg, &path, &query);
    if (!parse_query(query, &filter, &error)) {
        plegd_http_respond(msg, SOUP_STATUS_BAD_REQUEST, TEXT_CONTENT_TYPE,
                           g_strconcat(error->message, "\n", NULL));
        return;
    }
    /* What plegd believes changes with every relist: no cache may answer for it. */
    soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Cache-Control",
                                 "no-store");
    plegd_http_respond(
        msg, SOUP_STATUS_OK, JSON_CONTENT_TYPE,
        plegd_pods_to_json(pleg_generic_get_cache(pleg), filter));
}
