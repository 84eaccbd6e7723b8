/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <json-glib/json-glib.h>

#include "plegd.h"

static void
add_string(JsonBuilder *builder, const char *name, const char *value)
{
    json_builder_set_member_name(builder, name);
    json_builder_add_string_value(builder, value);
}

static void
add_time(JsonBuilder *builder, const char *name, gint64 unix_ns)
{
    g_autofree char *text = pleg_time_format_rfc3339(unix_ns);

    add_string(builder, name, text);
}

char *
plegd_event_to_json(const PlegPodLifecycleEvent *event)
{
    g_autoptr(JsonBuilder) builder = json_builder_new();
    g_autoptr(JsonGenerator) generator = json_generator_new();
    g_autoptr(JsonNode) root = NULL;

    json_builder_begin_object(builder);
    add_time(builder, "time", event->time_ns);
    add_string(builder, "pod_uid", event->pod_uid);
    add_string(builder, "type", pleg_pod_lifecycle_event_type_to_string(event->type));
    if (event->type != PLEG_POD_SYNC && event->container_id)
        add_string(builder, "container_id", event->container_id);
    add_string(builder, "relist_source", pleg_relist_source_to_string(event->relist_source));
    if (event->type == PLEG_CONTAINER_DIED && event->has_exit) {
        json_builder_set_member_name(builder, "exit_code");
        json_builder_add_int_value(builder, event->exit_code);
        if (event->reason)
            add_string(builder, "reason", event->reason);
        /* 0 is CRI's "not set"; 1970 would be a lie. */
        if (event->finished_at_ns != 0)
            add_time(builder, "finished_at", event->finished_at_ns);
    }
    json_builder_end_object(builder);

    root = json_builder_get_root(builder);
    json_generator_set_root(generator, root);
    return json_generator_to_data(generator, NULL);
}

gboolean
plegd_write_line(FILE *stream, const char *line, GError **error)
{
    size_t len = strlen(line);

    errno = 0;
    if (fwrite(line, 1, len, stream) != len || fputc('\n', stream) == EOF ||
        fflush(stream) == EOF) {
        int errsv = errno ? errno : EIO;

        g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errsv), "%s", g_strerror(errsv));
        return FALSE;
    }
    return TRUE;
}
