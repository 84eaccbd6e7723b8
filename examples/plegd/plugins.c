/* SPDX-License-Identifier: Apache-2.0 */
#include <stdarg.h>
#include <stdlib.h>

#include "pleg-config.h"
#include "plegd.h"

char *
plegd_describe_plugin(const PlegPluginInfo *info)
{
    switch (info->state) {
    case PLEG_PLUGIN_STATE_RUNNING:
        return g_strdup("running");
    case PLEG_PLUGIN_STATE_STOPPED:
        return g_strdup("stopped");
    case PLEG_PLUGIN_STATE_DISABLED_BY_NAME:
        return g_strdup("disabled (--disable-plugins)");
    case PLEG_PLUGIN_STATE_DISABLED_GATE:
        if (info->feature_gate) {
            g_autofree char *shown = pleg_log_text(info->feature_gate, -1, 0);

            return g_strdup_printf("disabled (feature gate %s off)", shown);
        }
        return g_strdup("disabled (feature gate off)");
    case PLEG_PLUGIN_STATE_FAILED:
        /* The reason without the plugin's name and path, which plegd's line already says. */
        if (info->reason_message)
            return g_strdup_printf("failed: %s", info->reason_message);
        if (info->error)
            return g_strdup_printf("failed: %s", info->error->message);
        return g_strdup("failed: unknown error");
    }
    return g_strdup_printf("unknown state %d", info->state);
}

char *
plegd_check_plugin_dir(const char *dir)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(GDir) handle = NULL;
    g_autofree char *shown = NULL;
    const char *name;

    handle = g_dir_open(dir, 0, &error);
    if (!handle) {
        if (g_error_matches(error, G_FILE_ERROR, G_FILE_ERROR_NOENT))
            return g_strdup("does not exist");
        if (g_error_matches(error, G_FILE_ERROR, G_FILE_ERROR_NOTDIR))
            return g_strdup("is not a folder");
        /* GLib's message repeats the path, which the caller already shows, cut. */
        shown = pleg_log_text(error->message, -1, 0);
        return g_strdup_printf("cannot be read: %s", shown);
    }
    while ((name = g_dir_read_name(handle))) {
        if (g_str_has_suffix(name, ".plugin"))
            return NULL;
    }
    return g_strdup("has no .plugin files");
}

/* What one /readyz?verbose line of a plugin's status reads. */
typedef struct {
    PlegHost *host;
    char *name;
} StatusLine;

static void
status_line_free(StatusLine *line)
{
    g_free(line->name);
    g_free(line);
}

/* The plugin's message as it is now: its own text, escaped and cut like a checker's reason. */
static char *
describe_status(gpointer data)
{
    StatusLine *line = data;
    g_autoptr(PlegPluginStatus) status = pleg_host_get_plugin_status(line->host, line->name);

    if (!status)
        return g_strdup("no status");
    return pleg_log_text(*status->message ? status->message : status->state, -1, 1024);
}

GPtrArray *
plegd_show_plugin_statuses(PlegdHttp *http, PlegHost *host)
{
    g_autoptr(GPtrArray) statuses = pleg_host_get_plugin_statuses(host);
    GPtrArray *lines = g_ptr_array_new_with_free_func((GDestroyNotify)status_line_free);

    for (guint i = 0; i < statuses->len; i++) {
        const PlegPluginStatus *status = g_ptr_array_index(statuses, i);
        StatusLine *line = g_new0(StatusLine, 1);

        line->host = host;
        line->name = g_strdup(status->name);
        g_ptr_array_add(lines, line);
        plegd_http_add_readiness_info(http, line->name, describe_status, line);
    }
    return lines;
}

/* Without --plugin-dir, a plegd run from its build tree loads that tree's plugins: nobody has
 * to know where meson put them, and an installed plegd never looks into a build tree. */
const char *
plegd_default_plugin_dir(const char *exe_path, const char **ret_origin)
{
#if defined(PLEGD_BUILD_PATH) && defined(PLEGD_BUILD_PLUGIN_DIR)
    g_autofree char *built = realpath(PLEGD_BUILD_PATH, NULL);

    if (exe_path && (g_str_equal(exe_path, PLEGD_BUILD_PATH) || g_strcmp0(exe_path, built) == 0)) {
        *ret_origin = "the build tree's plugins";
        return PLEGD_BUILD_PLUGIN_DIR;
    }
#endif
    *ret_origin = "the installed plugin folder";
    return PLEG_PLUGIN_DIR;
}

char *
plegd_get_exe_path(void)
{
    g_autofree char *link = g_file_read_link("/proc/self/exe", NULL);
    char *real;

    if (!link)
        return NULL;
    real = realpath(link, NULL);
    if (!real)
        return g_steal_pointer(&link);
    return real;
}
