/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Feature gates (lib/common/pleg-feature-gates.c, lib/host/pleg-host-gates.c): the input is split at its
 * first NUL into a `--feature-gates` string and a key file.  pleg_feature_gates_parse(),
 * pleg_feature_gates_set() (with each item's name) and pleg_feature_gates_load_key_file() never
 * crash, apply all or nothing (a failure leaves every gate as it was), fail with the documented
 * error, and a success leaves every gate readable as a boolean; a parsed string applied again
 * gives the same gates (it is idempotent).
 */
#include <glib.h>
#include <string.h>

#include <pleg/pleg-host.h>
#include <pleg/pleg-util.h>

#include "fuzz-target.h"

static const char *const gate_names[] = {
    PLEG_FEATURE_EVENTED_PLEG,
    PLEG_FEATURE_SYSTEMD_WATCHDOG,
    PLEG_FEATURE_KUBELET_WATCHDOG_DIAGNOSTICS,
};

typedef struct {
    gboolean enabled[G_N_ELEMENTS(gate_names)];
} GateValues;

static GateValues
read_gates(const PlegFeatureGates *gates)
{
    GateValues values;

    for (gsize i = 0; i < G_N_ELEMENTS(gate_names); i++) {
        values.enabled[i] = pleg_feature_gates_enabled(gates, gate_names[i]);
        FUZZ_CHECK(values.enabled[i] == TRUE || values.enabled[i] == FALSE, "a gate is a boolean");
    }
    return values;
}

static gboolean
same_gates(const GateValues *a, const GateValues *b)
{
    return memcmp(a, b, sizeof *a) == 0;
}

static void
fuzz_parse(const char *text)
{
    g_autoptr(PlegFeatureGates) gates = pleg_feature_gates_new();
    g_autoptr(GError) error = NULL;
    GateValues before = read_gates(gates);
    GateValues after;

    if (!pleg_feature_gates_parse(gates, text, &error)) {
        FUZZ_CHECK(error && error->domain == PLEG_FEATURE_GATE_ERROR,
                   "a bad gate string is a PLEG_FEATURE_GATE_ERROR");
        after = read_gates(gates);
        FUZZ_CHECK(same_gates(&before, &after), "a failed parse changes nothing");
        return;
    }
    after = read_gates(gates);
    FUZZ_CHECK(pleg_feature_gates_parse(gates, text, NULL), "a good string parses again");
    before = read_gates(gates);
    FUZZ_CHECK(same_gates(&before, &after), "parsing is idempotent");
}

/* Each comma-separated item's name, as a caller of pleg_feature_gates_set() would pass it. */
static void
fuzz_set(const char *text)
{
    g_auto(GStrv) items = g_strsplit(text, ",", 16);

    for (guint i = 0; items[i]; i++) {
        g_autoptr(PlegFeatureGates) gates = pleg_feature_gates_new();
        g_autoptr(GError) error = NULL;
        char *eq = strchr(items[i], '=');
        gboolean known;

        if (eq)
            *eq = '\0';
        known = pleg_feature_gates_known(gates, items[i], NULL, NULL);
        if (pleg_feature_gates_set(gates, items[i], TRUE, &error)) {
            FUZZ_CHECK(known, "only a known gate can be set");
            FUZZ_CHECK(pleg_feature_gates_enabled(gates, items[i]), "a set gate reads back");
        } else {
            FUZZ_CHECK(!known, "a known gate can always be set");
            FUZZ_CHECK(g_error_matches(error, PLEG_FEATURE_GATE_ERROR,
                                       PLEG_FEATURE_GATE_ERROR_UNKNOWN),
                       "an unknown gate is PLEG_FEATURE_GATE_ERROR_UNKNOWN");
        }
    }
}

static void
fuzz_key_file(const char *data, gsize size)
{
    g_autoptr(GKeyFile) key_file = g_key_file_new();
    g_autoptr(PlegFeatureGates) gates = pleg_feature_gates_new();
    g_autoptr(GError) error = NULL;
    GateValues before = read_gates(gates);
    GateValues after;

    if (!g_key_file_load_from_data(key_file, data, size, G_KEY_FILE_NONE, NULL))
        return;
    if (!pleg_feature_gates_load_key_file(gates, key_file, &error)) {
        FUZZ_CHECK(g_error_matches(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG),
                   "a bad [FeatureGates] group is PLEG_HOST_ERROR_CONFIG");
        after = read_gates(gates);
        FUZZ_CHECK(same_gates(&before, &after), "a failed load changes nothing");
        return;
    }
    after = read_gates(gates);
    FUZZ_CHECK(pleg_feature_gates_load_key_file(gates, key_file, NULL), "a good file loads again");
    before = read_gates(gates);
    FUZZ_CHECK(same_gates(&before, &after), "loading is idempotent");
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, '\0', size);
    gsize text_len = nul ? (gsize)(nul - data) : size;
    g_autofree char *text = g_strndup((const char *)data, text_len);

    fuzz_parse(text);
    fuzz_set(text);
    if (nul)
        fuzz_key_file((const char *)nul + 1, size - text_len - 1);
    return 0;
}
