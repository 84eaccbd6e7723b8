/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What every plegctl subcommand shares: its options (the common ones beside its own), their
 * checks, and writing to stdout.
 */
#include <errno.h>
#include <pleg/pleg.h>
#include <stdio.h>
#include <unistd.h>

#include "plegctl.h"

static gboolean
parse_command(PlegctlCommon *common, const GOptionEntry *entries, int *argc, char ***argv,
              GError **error)
{
    const GOptionEntry common_entries[] = {
        {"address", 0, 0, G_OPTION_ARG_STRING, &common->address,
         "plegd's HTTP address: http://HOST:PORT or unix:PATH (default: $PLEGCTL_ADDRESS, else "
         PLEGCTL_DEFAULT_ADDRESS ")",
         "ADDRESS"},
        {"timeout", 0, 0, G_OPTION_ARG_STRING, &common->timeout,
         "How long to wait for an answer, e.g. 30s; 0: no limit (default: 15s)", "DURATION"},
        {"output", 'o', 0, G_OPTION_ARG_STRING, &common->output,
         "table or json (default: table on a terminal, else json)", "FORMAT"},
        G_OPTION_ENTRY_NULL,
    };
    g_autofree char *parameter = g_strconcat("- ", common->summary, NULL);
    g_autofree char *program = g_strconcat("plegctl ", common->command, NULL);
    g_autoptr(GOptionContext) context = g_option_context_new(parameter);
    g_autoptr(GError) local_error = NULL;

    /* --help says "Usage: plegctl events [OPTION...] - ...". */
    g_set_prgname(program);
    g_option_context_add_main_entries(context, entries, NULL);
    g_option_context_add_main_entries(context, common_entries, NULL);
    g_option_context_set_description(context, "See plegctl(1).");
    if (!g_option_context_parse(context, argc, argv, &local_error)) {
        g_set_error(error, PLEGCTL_ERROR, PLEGCTL_EXIT_USAGE, "%s", local_error->message);
        return FALSE;
    }
    if (*argc > 1) {
        g_autofree char *shown = pleg_log_text((*argv)[1], -1, 0);

        g_set_error(error, PLEGCTL_ERROR, PLEGCTL_EXIT_USAGE,
                    "unexpected argument \"%s\" (plegctl %s takes options only)", shown,
                    common->command);
        return FALSE;
    }

    common->timeout_usec = PLEGCTL_DEFAULT_TIMEOUT_USEC;
    if (common->timeout &&
        (!pleg_duration_parse(common->timeout, &common->timeout_usec, &local_error) ||
         common->timeout_usec < 0)) {
        g_autofree char *shown = pleg_log_text(common->timeout, -1, 0);

        g_set_error(error, PLEGCTL_ERROR, PLEGCTL_EXIT_USAGE,
                    "invalid --timeout \"%s\": expected a duration such as 10s or 1m30s", shown);
        return FALSE;
    }
    if (!common->output)
        common->format = isatty(STDOUT_FILENO) ? PLEGCTL_OUTPUT_TABLE : PLEGCTL_OUTPUT_JSON;
    else if (g_str_equal(common->output, "table"))
        common->format = PLEGCTL_OUTPUT_TABLE;
    else if (g_str_equal(common->output, "json"))
        common->format = PLEGCTL_OUTPUT_JSON;
    else {
        g_autofree char *shown = pleg_log_text(common->output, -1, 0);

        g_set_error(error, PLEGCTL_ERROR, PLEGCTL_EXIT_USAGE,
                    "invalid --output \"%s\": expected table or json", shown);
        return FALSE;
    }
    return TRUE;
}

gboolean
plegctl_print(const char *text, gssize length, GError **error)
{
    gsize size = length < 0 ? strlen(text) : (gsize)length;

    if ((size > 0 && fwrite(text, 1, size, stdout) != size) || fflush(stdout) != 0) {
        g_set_error(error, PLEGCTL_ERROR, PLEGCTL_EXIT_ERROR, "cannot write to stdout: %s",
                    g_strerror(errno));
        return FALSE;
    }
    return TRUE;
}

gboolean
plegctl_parse_command(PlegctlCommon *common, const GOptionEntry *entries, int *argc,
                      char ***argv, GError **error)
{
    g_autoptr(GError) local_error = NULL;

    if (parse_command(common, entries, argc, argv, &local_error))
        return TRUE;
    g_set_error(error, PLEGCTL_ERROR, PLEGCTL_EXIT_USAGE,
                "%s\nRun 'plegctl %s --help' to list its options.", local_error->message,
                common->command);
    return FALSE;
}


gboolean
plegctl_print_answer(PlegctlCommon *common, GBytes *body, const char *table, GError **error)
{
    gsize size;
    const char *data;

    if (common->format == PLEGCTL_OUTPUT_TABLE)
        return plegctl_print(table, -1, error);
    data = g_bytes_get_data(body, &size);
    return plegctl_print(data ? data : "", (gssize)size, error);
}
