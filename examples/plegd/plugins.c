/* SPDX-License-Identifier: Apache-2.0 */
#include "plegd.h"

/* PlegPluginInfo has no gate field: the .plugin key file names it. */
static char *
lookup_feature_gate(const PlegPluginInfo *info)
{
    g_autoptr(GKeyFile) key_file = g_key_file_new();
    g_autofree char *key_path = NULL;

    if (!info->path)
        return NULL;
    if (g_str_has_suffix(info->path, ".plugin")) {
        key_path = g_strdup(info->path);
    } else {
        g_autofree char *dir = g_path_get_dirname(info->path);
        g_autofree char *base = g_strconcat(info->name, ".plugin", NULL);

        key_path = g_build_filename(dir, base, NULL);
    }
    if (!g_key_file_load_from_file(key_file, key_path, G_KEY_FILE_NONE, NULL))
        return NULL;
    return g_key_file_get_string(key_file, "Plugin", "FeatureGate", NULL);
}

/* The host's messages start with "plugin NAME (PATH): ", which plegd's line already says. */
static const char *
strip_plugin_prefix(const PlegPluginInfo *info, const char *message)
{
    g_autofree char *prefix = g_strdup_printf("plugin %s (", info->name);
    const char *end;

    if (!g_str_has_prefix(message, prefix))
        return message;
    end = strstr(message + strlen(prefix), "): ");
    return end ? end + strlen("): ") : message;
}

char *
plegd_describe_plugin(const PlegPluginInfo *info)
{
    g_autofree char *gate = NULL;

    switch (info->state) {
    case PLEG_PLUGIN_STATE_RUNNING:
        return g_strdup("running");
    case PLEG_PLUGIN_STATE_STOPPED:
        return g_strdup("stopped");
    case PLEG_PLUGIN_STATE_DISABLED_BY_NAME:
        return g_strdup("disabled (--disable-plugins)");
    case PLEG_PLUGIN_STATE_DISABLED_GATE:
        gate = lookup_feature_gate(info);
        if (gate)
            return g_strdup_printf("disabled (feature gate %s off)", gate);
        if (info->error)
            return g_strdup_printf("disabled (%s)", info->error->message);
        return g_strdup("disabled (feature gate off)");
    case PLEG_PLUGIN_STATE_FAILED:
        if (!info->error)
            return g_strdup("failed: unknown error");
        return g_strdup_printf("failed: %s", strip_plugin_prefix(info, info->error->message));
    }
    return g_strdup_printf("unknown state %d", info->state);
}
