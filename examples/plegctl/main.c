/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegctl: asks plegd, over its HTTP API, what died (events), what it sees (pods) and whether it
 * is healthy and why (status); tables on a terminal, plegd's own JSON for scripts, and exit
 * statuses a script can branch on (plegctl(1)).
 */
#include <locale.h>
#include <pleg/pleg.h>
#include <stdio.h>
#include <unistd.h>

#include "pleg-config.h"
#include "plegctl.h"

typedef int (*CommandFunc)(PlegctlCommon *common, int argc, char **argv, GError **error);

static const struct {
    const char *name;
    CommandFunc func;
    const char *summary;
} commands[] = {
    {"events", plegctl_events, "the pod lifecycle events plegd holds, or follows them (-f)"},
    {"pods", plegctl_pods, "what plegd sees: each pod, its sandbox and its containers"},
    {"status", plegctl_status, "whether plegd is live and ready and why, its fast path, relists "
                               "and plugins"},
};

/* Options of every command that take a value in the next argument when given without '='. */
static const char *const valued_options[] = {"--address", "--timeout", "-o", "--output", NULL};

static void
usage(FILE *out)
{
    fprintf(out, "Usage: plegctl COMMAND [OPTION...]\n\n"
                 "Asks plegd, over its HTTP API, what it sees.\n\nCommands:\n");
    for (gsize i = 0; i < G_N_ELEMENTS(commands); i++)
        fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\nRun 'plegctl COMMAND --help' for its options; see plegctl(1).\n");
}

/* The command word: the first argument that is neither an option nor an option's value. */
static int
find_command(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] != '-')
            return i;
        if (g_str_equal(argv[i], "--"))
            return i + 1 < argc ? i + 1 : -1;
        if (g_strv_contains(valued_options, argv[i]))
            i++;
    }
    return -1;
}

int
main(int argc, char **argv)
{
    g_autoptr(GError) error = NULL;
    PlegctlCommon common = {0};
    CommandFunc func = NULL;
    int index, status;

    setlocale(LC_ALL, "");
    if (argc == 2 && (g_str_equal(argv[1], "--version") || g_str_equal(argv[1], "version"))) {
        printf("plegctl %s\n", PLEG_VERSION);
        return PLEGCTL_EXIT_OK;
    }
    if (argc == 2 && (g_str_equal(argv[1], "--help") || g_str_equal(argv[1], "-h") ||
                      g_str_equal(argv[1], "help"))) {
        usage(stdout);
        return PLEGCTL_EXIT_OK;
    }
    index = find_command(argc, argv);
    for (gsize i = 0; index > 0 && i < G_N_ELEMENTS(commands); i++) {
        if (g_str_equal(argv[index], commands[i].name)) {
            func = commands[i].func;
            common.command = commands[i].name;
            common.summary = commands[i].summary;
        }
    }
    if (!func) {
        if (index > 0) {
            g_autofree char *shown = pleg_log_text(argv[index], -1, 0);

            g_printerr("plegctl: unknown command \"%s\"\n", shown);
        } else {
            g_printerr("plegctl: no command given\n");
        }
        usage(stderr);
        return PLEGCTL_EXIT_USAGE;
    }
    /* The command's options are parsed from the rest, before or after its word. */
    memmove(&argv[index], &argv[index + 1], (gsize)(argc - index) * sizeof *argv);
    argc--;

    status = func(&common, argc, argv, &error);
    if (error) {
        g_printerr("plegctl: %s\n", error->message);
        status = error->domain == PLEGCTL_ERROR ? error->code : PLEGCTL_EXIT_ERROR;
    }
    g_free(common.address);
    g_free(common.timeout);
    g_free(common.output);
    return status;
}
