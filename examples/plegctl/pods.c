/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegctl pods: GET /pods (doc/pods.md), what plegd sees: each pod with its newest sandbox's
 * state, its address and its containers' states and exits, one row a pod.
 */
#include "plegctl.h"

/* "app running, init exited 0 (Completed)": each container, its state, and its exit. */
static char *
describe_containers(JsonArray *containers)
{
    GString *out = g_string_new(NULL);

    for (guint i = 0; containers && i < json_array_get_length(containers); i++) {
        JsonObject *container = plegctl_json_element(containers, i);
        g_autofree char *name = plegctl_cell(plegctl_json_string(container, "name"));
        g_autofree char *state = plegctl_cell(plegctl_json_string(container, "state"));
        const char *reason = plegctl_json_string(container, "reason");
        gint64 exit_code;

        g_string_append_printf(out, "%s%s %s", i ? ", " : "", name, state);
        if (plegctl_json_int(container, "exit_code", &exit_code))
            g_string_append_printf(out, " %" G_GINT64_FORMAT, exit_code);
        if (reason) {
            g_autofree char *shown = plegctl_cell(reason);

            g_string_append_printf(out, " (%s)", shown);
        }
    }
    if (out->len == 0)
        g_string_append(out, "-");
    return g_string_free(out, FALSE);
}

static char *
format_pods(JsonArray *pods)
{
    const char *const headers[] = {"NAMESPACE", "NAME", "UID", "SANDBOX", "IP", "CONTAINERS",
                                   NULL};
    g_autoptr(PlegctlTable) table = plegctl_table_new(headers);

    for (guint i = 0; pods && i < json_array_get_length(pods); i++) {
        JsonObject *pod = plegctl_json_element(pods, i);
        JsonArray *ips = plegctl_json_array(pod, "ips");
        JsonObject *sandbox = plegctl_json_element(plegctl_json_array(pod, "sandboxes"), 0);
        const char *error = plegctl_json_string(pod, "error");
        g_autofree char *ns = plegctl_cell(plegctl_json_string(pod, "namespace"));
        g_autofree char *name = plegctl_cell(plegctl_json_string(pod, "name"));
        g_autofree char *uid = plegctl_cell(plegctl_json_string(pod, "uid"));
        g_autofree char *state = plegctl_cell(error ? "error" : plegctl_json_string(sandbox, "state"));
        g_autofree char *ip = plegctl_cell(
            ips && json_array_get_length(ips) > 0 ? json_array_get_string_element(ips, 0) : NULL);
        g_autofree char *containers = NULL;

        if (error) {
            g_autofree char *shown = plegctl_cell(error);

            containers = g_strdup_printf("inspection failed: %s", shown);
        } else {
            containers = describe_containers(plegctl_json_array(pod, "containers"));
        }
        plegctl_table_add_row(table, (const char *const[]){ns, name, uid, state, ip, containers,
                                                            NULL});
    }
    return plegctl_table_format(table);
}

int
plegctl_pods(PlegctlCommon *common, int argc, char **argv, GError **error)
{
    g_auto(GStrv) namespaces = NULL;
    const GOptionEntry entries[] = {
        {"namespace", 'n', 0, G_OPTION_ARG_STRING_ARRAY, &namespaces,
         "Only pods in namespace NS (repeat for several)", "NS"},
        G_OPTION_ENTRY_NULL,
    };
    g_autoptr(PlegctlClient) client = NULL;
    g_autoptr(GString) path = g_string_new("/pods");
    g_autoptr(JsonNode) node = NULL;
    g_autoptr(GBytes) body = NULL;
    g_autofree char *table = NULL;
    JsonArray *pods;

    if (!plegctl_parse_command(common, entries, &argc, &argv, error))
        return PLEGCTL_EXIT_USAGE;
    client = plegctl_client_new(common, error);
    if (!client)
        return PLEGCTL_EXIT_USAGE;
    for (char **ns = namespaces; ns && *ns; ns++)
        plegctl_query_add(path, "namespace", *ns);
    node = plegctl_client_get_json(client, path->str, &body, error);
    if (!node)
        return PLEGCTL_EXIT_ERROR;
    pods = plegctl_json_array(json_node_get_object(node), "pods");
    if (!pods) {
        g_autofree char *address = plegctl_cell(plegctl_client_get_address(client));

        g_set_error(error, PLEGCTL_ERROR, PLEGCTL_EXIT_ERROR,
                    "%s answered /pods without a pods array: not plegd's /pods", address);
        return PLEGCTL_EXIT_ERROR;
    }

    if (common->format == PLEGCTL_OUTPUT_TABLE)
        table = format_pods(pods);
    return plegctl_print_answer(common, body, table, error) ? PLEGCTL_EXIT_OK
                                                            : PLEGCTL_EXIT_ERROR;
}
