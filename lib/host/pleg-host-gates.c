/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Feature gates from key files: a [FeatureGates] group of Name=true|false lines, and the
 * gates that .plugin files declare in [FeatureGate <Name>] groups.
 */
#include <string.h>

#include <pleg/pleg-host.h>

#include "pleg-config.h"
#include "pleg-host-private.h"

gboolean
pleg_feature_gates_load_key_file(PlegFeatureGates *gates, GKeyFile *key_file, GError **error)
{
    g_auto(GStrv) keys = NULL;
    g_autoptr(GString) text = g_string_new(NULL);
    g_autoptr(GError) local_error = NULL;

    g_return_val_if_fail(gates != NULL, FALSE);
    g_return_val_if_fail(key_file != NULL, FALSE);
    g_return_val_if_fail(error == NULL || *error == NULL, FALSE);

    if (!g_key_file_has_group(key_file, FEATURE_GATES_GROUP))
        return TRUE;
    keys = g_key_file_get_keys(key_file, FEATURE_GATES_GROUP, NULL, NULL);
    if (!keys)
        return TRUE;

    /* One --feature-gates string, applied by pleg_feature_gates_parse() at once: same names,
     * same values, same messages, all or nothing. */
    for (guint i = 0; keys[i]; i++) {
        g_autofree char *value = g_key_file_get_value(key_file, FEATURE_GATES_GROUP, keys[i], NULL);

        if (strchr(keys[i], ',') || strchr(keys[i], '=')) {
            g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                        "[" FEATURE_GATES_GROUP "]: unrecognized feature gate: %s", keys[i]);
            return FALSE;
        }
        if (!value || strchr(value, ',')) {
            g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                        "[" FEATURE_GATES_GROUP "]: invalid value of %s=%s, err: not a boolean "
                        "(want true or false)",
                        keys[i], value ? value : "");
            return FALSE;
        }
        if (text->len > 0)
            g_string_append_c(text, ',');
        g_string_append_printf(text, "%s=%s", keys[i], value);
    }

    if (!pleg_feature_gates_parse(gates, text->str, &local_error)) {
        g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG, "[" FEATURE_GATES_GROUP "]: %s",
                    local_error->message);
        return FALSE;
    }
    return TRUE;
}

/* ---- gates declared by .plugin files ---- */

typedef struct {
    const char *name; /* points into the group name */
    PlegFeatureStage stage;
    gboolean default_enabled;
} GateDeclaration;

/* Reads one "[FeatureGate <Name>]" group: Stage= and Default=, nothing else. */
static gboolean
read_gate_declaration(GKeyFile *key_file, const char *group, GateDeclaration *ret, GError **error)
{
    g_auto(GStrv) keys = g_key_file_get_keys(key_file, group, NULL, NULL);
    g_autofree char *stage = g_key_file_get_value(key_file, group, "Stage", NULL);
    g_autofree char *value = g_key_file_get_value(key_file, group, "Default", NULL);
    /* Everything below comes from the .plugin file: shown escaped and cut. */
    g_autofree char *shown_group = pleg_log_text(group, -1, 0);

    ret->name = group + strlen(GATE_DECLARATION_PREFIX);
    for (char **key = keys; key && *key; key++) {
        if (!g_str_equal(*key, "Stage") && !g_str_equal(*key, "Default")) {
            g_autofree char *shown_key = pleg_log_text(*key, -1, 0);

            g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                        "[%s]: unknown key %s (expected Stage and Default)", shown_group,
                        shown_key);
            return FALSE;
        }
    }
    if (!stage || !pleg_feature_stage_from_string(stage, &ret->stage)) {
        g_autofree char *shown = stage ? pleg_log_text(stage, -1, 0) : NULL;

        g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                    "[%s]: %s%s: want Stage=Alpha, Beta, GA or Deprecated", shown_group,
                    stage ? "invalid Stage=" : "no Stage", stage ? shown : "");
        return FALSE;
    }
    if (g_strcmp0(value, "true") == 0) {
        ret->default_enabled = TRUE;
    } else if (g_strcmp0(value, "false") == 0) {
        ret->default_enabled = FALSE;
    } else {
        g_autofree char *shown = value ? pleg_log_text(value, -1, 0) : NULL;

        g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                    "[%s]: %s%s: want Default=true or Default=false", shown_group,
                    value ? "invalid Default=" : "no Default", value ? shown : "");
        return FALSE;
    }
    return TRUE;
}

/* Registers the gates @key_file (the .plugin file @file) declares into @gates.  With
 * @check_only, registers nothing: fails unless @gates already has each of them as declared. */
gboolean
pleg_declare_plugin_gates(PlegFeatureGates *gates, GKeyFile *key_file, const char *file,
                          gboolean check_only, GError **error)
{
    g_auto(GStrv) groups = g_key_file_get_groups(key_file, NULL);

    for (char **group = groups; *group; group++) {
        g_autoptr(GError) local_error = NULL;
        GateDeclaration declaration;
        PlegFeatureStage stage;
        gboolean default_enabled;

        if (!g_str_has_prefix(*group, GATE_DECLARATION_PREFIX))
            continue;
        if (!read_gate_declaration(key_file, *group, &declaration, error))
            return FALSE;

        if (!check_only || pleg_feature_gates_is_builtin(declaration.name)) {
            if (!pleg_feature_gates_register(gates, declaration.name, declaration.stage,
                                             declaration.default_enabled, file, &local_error)) {
                g_set_error_literal(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                                    local_error->message);
                return FALSE;
            }
            continue;
        }
        if (!pleg_feature_gates_known(gates, declaration.name, &stage, &default_enabled)) {
            g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                        "declares feature gate %s, which the host's gates do not have: "
                        "pleg_feature_gates_register_plugins() must run before the gates are "
                        "parsed",
                        declaration.name);
            return FALSE;
        }
        if (stage != declaration.stage || default_enabled != declaration.default_enabled) {
            g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                        "declares feature gate %s as %s, default %s, but the host has it as %s, "
                        "default %s",
                        declaration.name, pleg_feature_stage_to_string(declaration.stage),
                        declaration.default_enabled ? "true" : "false",
                        pleg_feature_stage_to_string(stage), default_enabled ? "true" : "false");
            return FALSE;
        }
    }
    return TRUE;
}

gboolean
pleg_feature_gates_register_plugins(PlegFeatureGates *gates, const char *plugin_dir, GError **error)
{
    g_auto(GStrv) dirs = NULL;

    g_return_val_if_fail(gates != NULL, FALSE);
    g_return_val_if_fail(error == NULL || *error == NULL, FALSE);

    if (!plugin_dir)
        plugin_dir = PLEG_PLUGIN_DIR;
    dirs = g_strsplit(plugin_dir, G_SEARCHPATH_SEPARATOR_S, -1);
    for (guint d = 0; dirs[d]; d++) {
        g_autoptr(GPtrArray) files = NULL;

        if (!*dirs[d])
            continue;
        files = pleg_list_plugin_files(dirs[d]);
        g_ptr_array_sort(files, pleg_compare_file_names);
        for (guint i = 0; i < files->len; i++) {
            g_autofree char *path = g_build_filename(dirs[d], g_ptr_array_index(files, i), NULL);
            g_autoptr(GKeyFile) key_file = g_key_file_new();
            g_autoptr(GError) local_error = NULL;

            /* The loader reports a file it cannot read or may not trust; it declares nothing. */
            if (!pleg_load_trusted_key_file(key_file, path, &local_error)) {
                g_debug("%s: %s, no feature gates from it", path, local_error->message);
                continue;
            }
            if (!pleg_declare_plugin_gates(gates, key_file, path, FALSE, &local_error)) {
                g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG, "%s: %s", path,
                            local_error->message);
                return FALSE;
            }
        }
    }
    return TRUE;
}
