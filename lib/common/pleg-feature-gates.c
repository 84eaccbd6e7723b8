/* SPDX-License-Identifier: Apache-2.0 */
/* Feature gates: the built-in ones, those plugins declare at run time, and their parsing. */
#include "pleg/pleg-util.h"

#include <string.h>

#include "pleg-quark.h"

typedef struct {
    const char *name;
    PlegFeatureStage stage;
    gboolean default_enabled;
} FeatureSpec;

static const FeatureSpec known_features[] = {
    {PLEG_FEATURE_EVENTED_PLEG, PLEG_FEATURE_ALPHA, FALSE},
    {PLEG_FEATURE_SYSTEMD_WATCHDOG, PLEG_FEATURE_BETA, TRUE},
    {PLEG_FEATURE_KUBELET_WATCHDOG_DIAGNOSTICS, PLEG_FEATURE_ALPHA, FALSE},
    {PLEG_FEATURE_CRI_LIST_STREAMING, PLEG_FEATURE_ALPHA, FALSE},
};

/* A gate registered at run time (a plugin's declaration). */
typedef struct {
    char *name;
    PlegFeatureStage stage;
    gboolean default_enabled;
    char *origin;
} DeclaredSpec;

struct _PlegFeatureGates {
    gboolean enabled[G_N_ELEMENTS(known_features)];
    GPtrArray *declared;       /* DeclaredSpec, in registration order */
    GArray *declared_enabled;  /* gboolean, parallel to @declared */
};

static void
declared_spec_free(DeclaredSpec *spec)
{
    g_free(spec->name);
    g_free(spec->origin);
    g_free(spec);
}

static int
feature_index(const char *name)
{
    if (!name)
        return -1;
    for (gsize i = 0; i < G_N_ELEMENTS(known_features); i++)
        if (g_str_equal(known_features[i].name, name))
            return (int)i;
    return -1;
}

static int
declared_index(const PlegFeatureGates *gates, const char *name)
{
    if (!name)
        return -1;
    for (guint i = 0; i < gates->declared->len; i++) {
        const DeclaredSpec *spec = g_ptr_array_index(gates->declared, i);

        if (g_str_equal(spec->name, name))
            return (int)i;
    }
    return -1;
}

/* The flag of gate @name, built in or declared; NULL when unknown. */
static gboolean *
gate_slot(PlegFeatureGates *gates, const char *name)
{
    int idx = feature_index(name);

    if (idx >= 0)
        return &gates->enabled[idx];
    idx = declared_index(gates, name);
    if (idx >= 0)
        return &g_array_index(gates->declared_enabled, gboolean, idx);
    return NULL;
}

/* clang-format off */
PLEG_DEFINE_QUARK("pleg-feature-gate-error-quark", pleg_feature_gate_error)
/* clang-format on */

static gboolean
unknown_gate_error(GError **error, const char *name)
{
    g_autofree char *shown = pleg_log_text(name, -1, 0);

    g_set_error(error, PLEG_FEATURE_GATE_ERROR, PLEG_FEATURE_GATE_ERROR_UNKNOWN,
                "unrecognized feature gate: %s", shown);
    return FALSE;
}

PlegFeatureGates *
pleg_feature_gates_new(void)
{
    PlegFeatureGates *gates = g_new0(PlegFeatureGates, 1);

    for (gsize i = 0; i < G_N_ELEMENTS(known_features); i++)
        gates->enabled[i] = known_features[i].default_enabled;
    gates->declared = g_ptr_array_new_with_free_func((GDestroyNotify)declared_spec_free);
    gates->declared_enabled = g_array_new(FALSE, TRUE, sizeof(gboolean));
    return gates;
}

void
pleg_feature_gates_free(PlegFeatureGates *gates)
{
    if (!gates)
        return;
    g_ptr_array_unref(gates->declared);
    g_array_unref(gates->declared_enabled);
    g_free(gates);
}

static const char *const stage_names[] = {
    [PLEG_FEATURE_ALPHA] = "Alpha",
    [PLEG_FEATURE_BETA] = "Beta",
    [PLEG_FEATURE_GA] = "GA",
    [PLEG_FEATURE_DEPRECATED] = "Deprecated",
};

const char *
pleg_feature_stage_to_string(PlegFeatureStage stage)
{
    if ((guint)stage < G_N_ELEMENTS(stage_names))
        return stage_names[stage];
    return "unknown";
}

gboolean
pleg_feature_stage_from_string(const char *text, PlegFeatureStage *ret_stage)
{
    g_return_val_if_fail(text != NULL, FALSE);

    for (gsize i = 0; i < G_N_ELEMENTS(stage_names); i++) {
        if (g_str_equal(text, stage_names[i])) {
            if (ret_stage)
                *ret_stage = (PlegFeatureStage)i;
            return TRUE;
        }
    }
    return FALSE;
}

/* kubelet's gate names are CamelCase identifiers: "EventedPLEG", "SystemdWatchdog". */
static gboolean
valid_gate_name(const char *name)
{
    if (!g_ascii_isupper(name[0]))
        return FALSE;
    for (const char *p = name; *p; p++)
        if (!g_ascii_isalnum(*p))
            return FALSE;
    return TRUE;
}

gboolean
pleg_feature_gates_register(PlegFeatureGates *gates, const char *name, PlegFeatureStage stage,
                            gboolean default_enabled, const char *origin, GError **error)
{
    g_autofree char *shown_origin = NULL;
    DeclaredSpec *spec;
    int idx;

    g_return_val_if_fail(gates != NULL, FALSE);
    g_return_val_if_fail(name != NULL, FALSE);
    g_return_val_if_fail(error == NULL || *error == NULL, FALSE);

    /* Only for messages: a path, escaped once here (it may come from a folder's listing). */
    shown_origin = pleg_log_text(origin ? origin : "(unnamed)", -1, 4096);
    origin = shown_origin;
    default_enabled = !!default_enabled;
    if (!valid_gate_name(name)) {
        g_autofree char *shown = pleg_log_text(name, -1, 0);

        g_set_error(error, PLEG_FEATURE_GATE_ERROR, PLEG_FEATURE_GATE_ERROR_BAD_NAME,
                    "invalid feature gate name \"%s\" declared by %s: want an upper-case letter "
                    "followed by letters and digits",
                    shown, origin);
        return FALSE;
    }
    if ((guint)stage >= G_N_ELEMENTS(stage_names)) {
        g_set_error(error, PLEG_FEATURE_GATE_ERROR, PLEG_FEATURE_GATE_ERROR_BAD_STAGE,
                    "invalid stage %d of feature gate %s declared by %s", (int)stage, name, origin);
        return FALSE;
    }
    if (feature_index(name) >= 0) {
        g_set_error(error, PLEG_FEATURE_GATE_ERROR, PLEG_FEATURE_GATE_ERROR_REDEFINED,
                    "feature gate %s is built in: %s may not redefine it", name, origin);
        return FALSE;
    }
    idx = declared_index(gates, name);
    if (idx >= 0) {
        const DeclaredSpec *old = g_ptr_array_index(gates->declared, idx);

        if (old->stage == stage && old->default_enabled == default_enabled)
            return TRUE;
        g_set_error(error, PLEG_FEATURE_GATE_ERROR, PLEG_FEATURE_GATE_ERROR_CONFLICT,
                    "feature gate %s is declared differently: %s, default %s by %s; %s, default "
                    "%s by %s",
                    name, stage_names[old->stage], old->default_enabled ? "true" : "false",
                    old->origin, stage_names[stage], default_enabled ? "true" : "false", origin);
        return FALSE;
    }

    spec = g_new0(DeclaredSpec, 1);
    spec->name = g_strdup(name);
    spec->stage = stage;
    spec->default_enabled = default_enabled;
    spec->origin = g_strdup(origin);
    g_ptr_array_add(gates->declared, spec);
    g_array_append_val(gates->declared_enabled, default_enabled);
    g_debug("feature gate %s (%s, default %s) declared by %s", name, stage_names[stage],
            default_enabled ? "true" : "false", origin);
    return TRUE;
}

/* The spellings Go's strconv.ParseBool accepts. */
static gboolean
parse_bool(const char *text, gboolean *ret)
{
    static const char *const yes[] = {"1", "t", "T", "TRUE", "true", "True"};
    static const char *const no[] = {"0", "f", "F", "FALSE", "false", "False"};

    for (gsize i = 0; i < G_N_ELEMENTS(yes); i++) {
        if (g_str_equal(text, yes[i])) {
            *ret = TRUE;
            return TRUE;
        }
        if (g_str_equal(text, no[i])) {
            *ret = FALSE;
            return TRUE;
        }
    }
    return FALSE;
}

typedef struct {
    gboolean *slot;
    gboolean enabled;
} StagedGate;

gboolean
pleg_feature_gates_parse(PlegFeatureGates *gates, const char *text, GError **error)
{
    g_auto(GStrv) items = NULL;
    g_autoptr(GArray) staged = g_array_new(FALSE, FALSE, sizeof(StagedGate));

    g_return_val_if_fail(gates != NULL, FALSE);
    g_return_val_if_fail(text != NULL, FALSE);
    g_return_val_if_fail(error == NULL || *error == NULL, FALSE);

    items = g_strsplit(text, ",", -1);
    for (guint i = 0; items[i]; i++) {
        char *item = g_strstrip(items[i]);
        char *eq, *name, *value;
        StagedGate change;

        if (!*item)
            continue;
        eq = strchr(item, '=');
        if (!eq) {
            g_autofree char *shown = pleg_log_text(item, -1, 0);

            g_set_error(error, PLEG_FEATURE_GATE_ERROR, PLEG_FEATURE_GATE_ERROR_MALFORMED,
                        "malformed feature gate \"%s\", expected Name=true|false", shown);
            return FALSE;
        }
        *eq = '\0';
        name = g_strstrip(item);
        value = g_strstrip(eq + 1);

        change.slot = gate_slot(gates, name);
        if (!change.slot)
            return unknown_gate_error(error, name);
        if (!parse_bool(value, &change.enabled)) {
            g_autofree char *shown = pleg_log_text(value, -1, 0);

            g_set_error(error, PLEG_FEATURE_GATE_ERROR, PLEG_FEATURE_GATE_ERROR_BAD_VALUE,
                        "invalid value of %s=%s, err: not a boolean (want true or false)", name,
                        shown);
            return FALSE;
        }
        g_array_append_val(staged, change);
    }

    /* All or nothing: nothing is changed before every item parsed. */
    for (guint i = 0; i < staged->len; i++) {
        const StagedGate *change = &g_array_index(staged, StagedGate, i);

        *change->slot = change->enabled;
    }
    return TRUE;
}

gboolean
pleg_feature_gates_set(PlegFeatureGates *gates, const char *name, gboolean enabled, GError **error)
{
    gboolean *slot;

    g_return_val_if_fail(gates != NULL, FALSE);
    g_return_val_if_fail(name != NULL, FALSE);
    g_return_val_if_fail(error == NULL || *error == NULL, FALSE);

    slot = gate_slot(gates, name);
    if (!slot)
        return unknown_gate_error(error, name);
    *slot = !!enabled;
    return TRUE;
}

gboolean
pleg_feature_gates_enabled(const PlegFeatureGates *gates, const char *name)
{
    gboolean *slot;

    g_return_val_if_fail(gates != NULL, FALSE);

    slot = gate_slot((PlegFeatureGates *)gates, name);
    if (!slot) {
        g_debug("feature gate %s is unknown, taking it as disabled", name ? name : "(null)");
        return FALSE;
    }
    return *slot;
}

gboolean
pleg_feature_gates_known(const PlegFeatureGates *gates, const char *name,
                         PlegFeatureStage *ret_stage, gboolean *ret_default)
{
    int idx = feature_index(name);

    if (idx >= 0) {
        if (ret_stage)
            *ret_stage = known_features[idx].stage;
        if (ret_default)
            *ret_default = known_features[idx].default_enabled;
        return TRUE;
    }
    if (!gates)
        return FALSE;
    idx = declared_index(gates, name);
    if (idx < 0)
        return FALSE;
    if (ret_stage)
        *ret_stage = ((const DeclaredSpec *)g_ptr_array_index(gates->declared, idx))->stage;
    if (ret_default)
        *ret_default =
            ((const DeclaredSpec *)g_ptr_array_index(gates->declared, idx))->default_enabled;
    return TRUE;
}

gboolean
pleg_feature_gates_is_builtin(const char *name)
{
    return feature_index(name) >= 0;
}
