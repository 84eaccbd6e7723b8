/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegctl status: GET /status (doc/status.md): is plegd live and ready, and why; is the fast
 * path (the evented watcher) on; its relists, events and plugins.  The exit status is the
 * verdict: 0 live and ready, 3 not ready, 4 not live.
 */
#include <pleg/pleg.h>

#include "plegctl.h"

/* "yes", or "no: CHECK failed: REASON" for the first check that failed. */
static char *
describe_verdict(JsonObject *verdict, gboolean ok)
{
    JsonArray *checks = plegctl_json_array(verdict, "checks");

    if (ok)
        return g_strdup("yes");
    for (guint i = 0; checks && i < json_array_get_length(checks); i++) {
        JsonObject *check = plegctl_json_element(checks, i);
        gboolean check_ok = TRUE;
        g_autofree char *name = NULL, *reason = NULL;

        if (!plegctl_json_bool(check, "ok", &check_ok) || check_ok)
            continue;
        name = plegctl_cell(plegctl_json_string(check, "name"));
        reason = plegctl_cell(plegctl_json_string(check, "reason"));
        return g_strdup_printf("no: %s failed: %s", name, reason);
    }
    return g_strdup("no");
}

static void
append_checks(GString *out, const char *title, JsonObject *verdict)
{
    JsonArray *checks = plegctl_json_array(verdict, "checks");
    JsonArray *infos = plegctl_json_array(verdict, "informational");

    g_string_append_printf(out, "\n%s:\n", title);
    for (guint i = 0; checks && i < json_array_get_length(checks); i++) {
        JsonObject *check = plegctl_json_element(checks, i);
        gboolean ok = FALSE;
        g_autofree char *name = plegctl_cell(plegctl_json_string(check, "name"));

        plegctl_json_bool(check, "ok", &ok);
        if (ok) {
            g_string_append_printf(out, "  [+] %s\n", name);
        } else {
            g_autofree char *reason = plegctl_cell(plegctl_json_string(check, "reason"));

            g_string_append_printf(out, "  [-] %s: %s\n", name, reason);
        }
    }
    for (guint i = 0; infos && i < json_array_get_length(infos); i++) {
        JsonObject *info = plegctl_json_element(infos, i);
        g_autofree char *name = plegctl_cell(plegctl_json_string(info, "name"));
        g_autofree char *message = plegctl_cell(plegctl_json_string(info, "message"));

        g_string_append_printf(out, "  [i] %s: %s\n", name, message);
    }
}

/* The fast path is the evented watcher (EventedPLEG): whether its plugin runs, and how its CRI
 * event stream fares, as it says in its status (connected, connecting, unimplemented,
 * disconnected: plegd(8)).  Only "connected" is on. */
static char *
describe_fast_path(JsonObject *root)
{
    JsonArray *plugins = plegctl_json_array(root, "plugins");
    JsonObject *evented = NULL, *status;
    const char *word, *message;
    g_autofree char *text = NULL;

    for (guint i = 0; plugins && i < json_array_get_length(plugins) && !evented; i++) {
        JsonObject *plugin = plegctl_json_element(plugins, i);

        if (g_strcmp0(plegctl_json_string(plugin, "name"), "evented") == 0)
            evented = plugin;
    }
    if (!evented)
        return g_strdup("off: no evented plugin (relists every period only)");
    if (g_strcmp0(plegctl_json_string(evented, "state"), "running") != 0) {
        g_autofree char *detail = plegctl_cell(plegctl_json_string(evented, "detail"));

        return g_strdup_printf("off: evented %s", detail);
    }
    status = plegctl_json_object(evented, "status");
    word = plegctl_json_string(status, "state");
    if (!word)
        return g_strdup("on: evented running");
    message = plegctl_json_string(status, "message");
    text = plegctl_cell(message ? message : word);
    if (g_str_equal(word, "connected"))
        return g_strdup_printf("on: %s", text);
    if (g_str_equal(word, "connecting"))
        return g_strdup_printf("starting: %s", text);
    return g_strdup_printf("off: %s", text);
}

/* "every 1s (threshold 3m0s); last success 2026-12-05 10:15:02, 150ms ago" and the error. */
static char *
describe_relists(JsonObject *relist)
{
    GString *out = g_string_new(NULL);
    gint64 period = 0, threshold = 0, age = 0;
    const char *last_success = plegctl_json_string(relist, "last_success");
    const char *last_error = plegctl_json_string(relist, "last_error");

    if (plegctl_json_int(relist, "period_ms", &period)) {
        g_autofree char *text = pleg_duration_format(period * 1000);

        g_string_append_printf(out, "every %s", text);
    }
    if (plegctl_json_int(relist, "threshold_ms", &threshold)) {
        g_autofree char *text = pleg_duration_format(threshold * 1000);

        g_string_append_printf(out, " (threshold %s)", text);
    }
    if (out->len > 0)
        g_string_append(out, "; ");
    if (last_success) {
        g_autofree char *time = plegctl_format_time(last_success);

        g_string_append_printf(out, "last success %s", time);
        if (plegctl_json_int(relist, "last_success_age_ms", &age)) {
            g_autofree char *text = pleg_duration_format(age * 1000);

            g_string_append_printf(out, ", %s ago", text);
        }
    } else {
        g_string_append(out, "none has succeeded yet");
    }
    if (last_error) {
        g_autofree char *error = plegctl_cell(last_error);

        g_string_append_printf(out, "; the last failed: %s", error);
    }
    return g_string_free(out, FALSE);
}

static char *
describe_events(JsonObject *events)
{
    gint64 oldest = 0, newest = 0, clients = 0;
    g_autofree char *instance = plegctl_cell(plegctl_json_string(events, "instance"));

    if (!plegctl_json_int(events, "oldest_seq", &oldest) ||
        !plegctl_json_int(events, "newest_seq", &newest))
        return g_strdup("-");
    plegctl_json_int(events, "clients", &clients);
    if (newest < oldest)
        return g_strdup_printf("none held yet; %" G_GINT64_FORMAT " followers; history %s",
                               clients, instance);
    return g_strdup_printf("seqs %" G_GINT64_FORMAT "..%" G_GINT64_FORMAT " held; %" G_GINT64_FORMAT
                           " followers; history %s",
                           oldest, newest, clients, instance);
}

static char *
format_plugins(JsonArray *plugins)
{
    const char *const headers[] = {"PLUGIN", "STATE", "DETAIL", NULL};
    g_autoptr(PlegctlTable) table = plegctl_table_new(headers);

    for (guint i = 0; plugins && i < json_array_get_length(plugins); i++) {
        JsonObject *plugin = plegctl_json_element(plugins, i);
        g_autofree char *name = plegctl_cell(plegctl_json_string(plugin, "name"));
        g_autofree char *state = plegctl_cell(plegctl_json_string(plugin, "state"));
        g_autofree char *detail = plegctl_cell(plegctl_json_string(plugin, "detail"));
        const char *const cells[] = {name, state, detail, NULL};

        plegctl_table_add_row(table, cells);
    }
    return plegctl_table_format(table);
}

static char *
format_status(PlegctlClient *client, JsonObject *root, gboolean live, gboolean ready)
{
    GString *out = g_string_new(NULL);
    JsonObject *relist = plegctl_json_object(root, "relist");
    JsonObject *events = plegctl_json_object(root, "events");
    g_autofree char *version = plegctl_cell(plegctl_json_string(root, "version"));
    g_autofree char *address = plegctl_cell(plegctl_client_get_address(client));
    g_autofree char *live_text = describe_verdict(plegctl_json_object(root, "live"), live);
    g_autofree char *ready_text = describe_verdict(plegctl_json_object(root, "ready"), ready);
    g_autofree char *fast_path = describe_fast_path(root);
    g_autofree char *runtime = plegctl_cell(plegctl_json_string(root, "runtime_endpoint"));
    g_autofree char *relists = describe_relists(relist);
    g_autofree char *events_text = describe_events(events);
    g_autofree char *plugins = format_plugins(plegctl_json_array(root, "plugins"));
    gint64 pods = 0;

    g_string_append_printf(out, "plegd %s at %s\n", version, address);
    g_string_append_printf(out, "  Live:       %s\n", live_text);
    g_string_append_printf(out, "  Ready:      %s\n", ready_text);
    g_string_append_printf(out, "  Fast path:  %s\n", fast_path);
    g_string_append_printf(out, "  Runtime:    %s\n", runtime);
    g_string_append_printf(out, "  Relists:    %s\n", relists);
    if (plegctl_json_int(root, "pods", &pods))
        g_string_append_printf(out, "  Pods:       %" G_GINT64_FORMAT "\n", pods);
    g_string_append_printf(out, "  Events:     %s\n", events_text);
    append_checks(out, "Liveness checks", plegctl_json_object(root, "live"));
    append_checks(out, "Readiness checks", plegctl_json_object(root, "ready"));
    g_string_append_printf(out, "\n%s", plugins);
    return g_string_free(out, FALSE);
}

int
plegctl_status(PlegctlCommon *common, int argc, char **argv, GError **error)
{
    const GOptionEntry entries[] = {G_OPTION_ENTRY_NULL};
    g_autoptr(PlegctlClient) client = NULL;
    g_autoptr(JsonNode) node = NULL;
    g_autoptr(GBytes) body = NULL;
    g_autofree char *table = NULL;
    JsonObject *root;
    gboolean live = FALSE, ready = FALSE;

    if (!plegctl_parse_command(common, entries, &argc, &argv, error))
        return PLEGCTL_EXIT_USAGE;
    client = plegctl_client_new(common, error);
    if (!client)
        return PLEGCTL_EXIT_USAGE;
    node = plegctl_client_get_json(client, "/status", &body, error);
    if (!node)
        return PLEGCTL_EXIT_ERROR;
    root = json_node_get_object(node);
    if (!plegctl_json_bool(plegctl_json_object(root, "live"), "ok", &live) ||
        !plegctl_json_bool(plegctl_json_object(root, "ready"), "ok", &ready)) {
        g_autofree char *address = plegctl_cell(plegctl_client_get_address(client));

        g_set_error(error, PLEGCTL_ERROR, PLEGCTL_EXIT_ERROR,
                    "%s answered /status without the verdicts live.ok and ready.ok: not plegd's "
                    "/status",
                    address);
        return PLEGCTL_EXIT_ERROR;
    }

    if (common->format == PLEGCTL_OUTPUT_TABLE)
        table = format_status(client, root, live, ready);
    if (!plegctl_print_answer(common, body, table, error))
        return PLEGCTL_EXIT_ERROR;
    if (!live)
        return PLEGCTL_EXIT_NOT_LIVE;
    return ready ? PLEGCTL_EXIT_OK : PLEGCTL_EXIT_NOT_READY;
}
