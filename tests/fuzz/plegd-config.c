/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd's flags and --config file (examples/plegd/options.c, the code plegd runs).  The input
 * is split at NUL bytes: the first piece is the contents of a --config file, given first on
 * the command line when it is not empty; every further piece is one argument.  Arguments that
 * would make the parser leave the process or read another file are dropped: --help and its
 * short forms (GOption prints and exits), and --config (the file could be /dev/stdin).
 *
 * Checked: no crash or sanitizer report; a failure is a G_OPTION_ERROR with a message and
 * leaves the options untouched; a success gives options plegd can run with (an endpoint, whose
 * syntax the host checks, positive durations, a threshold not below the period, gates, plugin names of [a-z0-9-]+,
 * none both required and disabled); and parsing is deterministic.
 */
#include <errno.h>
#include <glib.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz-target.h"
#include "plegd.h"

#define MAX_ARGS 64

/* The --config file: an anonymous file, rewritten for every input. */
static int config_fd = -1;
static char config_path[64];

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    config_fd = memfd_create("plegd-config", MFD_CLOEXEC);
    if (config_fd < 0)
        fuzz_fail("memfd_create: %s", g_strerror(errno));
    g_snprintf(config_path, sizeof config_path, "/proc/self/fd/%d", config_fd);
    return 0;
}

static gboolean
is_dropped(const char *arg)
{
    if (g_str_has_prefix(arg, "--"))
        return g_str_has_prefix(arg, "--help") || g_str_has_prefix(arg, "--config");
    return arg[0] == '-' && (strchr(arg, 'h') || strchr(arg, '?'));
}

static void
write_config(const uint8_t *data, gsize size)
{
    if (ftruncate(config_fd, 0) < 0 || pwrite(config_fd, data, size, 0) != (ssize_t)size)
        fuzz_fail("cannot write the config file: %s", g_strerror(errno));
}

static gboolean
is_plugin_name(const char *name)
{
    if (!*name)
        return FALSE;
    for (const char *c = name; *c; c++)
        if (!g_ascii_islower(*c) && !g_ascii_isdigit(*c) && *c != '-')
            return FALSE;
    return TRUE;
}

static void
check_options(const PlegdOptions *options)
{
    if (options->version)
        return;
    /* Its syntax is the host's to check (pleg_host_new() names it when it is bad). */
    FUZZ_CHECK(options->endpoint != NULL, "an endpoint");
    FUZZ_CHECK(options->runtime_request_timeout_usec > 0, "a positive request timeout");
    FUZZ_CHECK(options->relist_period_usec > 0, "a positive relist period");
    FUZZ_CHECK(options->relist_threshold_usec >= options->relist_period_usec,
               "a threshold not below the period");
    FUZZ_CHECK(options->feature_gates != NULL, "feature gates");
    FUZZ_CHECK(options->max_status_calls_in_flight >= 1 &&
                   options->max_status_calls_in_flight <= PLEGD_MAX_STATUS_CALLS_IN_FLIGHT_MAX,
               "a status call bound in range");
    FUZZ_CHECK(options->http_idle_timeout_usec >= 0, "no negative idle timeout");
    for (char **name = options->disabled_plugins; name && *name; name++)
        FUZZ_CHECK(is_plugin_name(*name), "disabled plugins are plugin names");
    for (char **name = options->required_plugins; name && *name; name++) {
        FUZZ_CHECK(is_plugin_name(*name), "required plugins are plugin names");
        FUZZ_CHECK(!options->disabled_plugins ||
                       !g_strv_contains((const char *const *)options->disabled_plugins, *name),
                   "no plugin is both required and disabled");
    }
}

/* Parses a copy of @args (GOption rearranges argv).  Returns the error message or NULL. */
static char *
parse(GPtrArray *args, PlegdOptions *ret_options)
{
    g_autofree char **argv = g_new0(char *, args->len + 1);
    int argc = (int)args->len;
    g_autoptr(GError) error = NULL;
    char **argv_p = argv;

    memcpy(argv, args->pdata, args->len * sizeof(char *));
    if (plegd_options_parse(&argc, &argv_p, ret_options, &error)) {
        FUZZ_CHECK(error == NULL, "no error on success");
        return NULL;
    }
    FUZZ_CHECK(error != NULL && error->domain == G_OPTION_ERROR, "a failure is a G_OPTION_ERROR");
    FUZZ_CHECK(error->message && *error->message, "a failure says why");
    return g_strdup(error->message);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
    const uint8_t *nul = memchr(data, '\0', size);
    gsize config_len = nul ? (gsize)(nul - data) : size;
    g_auto(PlegdOptions) first = {0};
    g_auto(PlegdOptions) second = {0};
    g_autofree char *first_error = NULL;
    g_autofree char *second_error = NULL;
    gsize pos;

    g_ptr_array_add(args, g_strdup("plegd"));
    if (config_len > 0) {
        write_config(data, config_len);
        g_ptr_array_add(args, g_strdup_printf("--config=%s", config_path));
    }
    pos = config_len + 1;
    while (pos < size && args->len < MAX_ARGS) {
        const uint8_t *end = memchr(data + pos, '\0', size - pos);
        gsize len = end ? (gsize)(end - (data + pos)) : size - pos;
        char *arg = g_strndup((const char *)data + pos, len);

        pos += len + 1;
        /* "--config FILE" as two arguments: the file name goes too. */
        if (g_str_equal(arg, "--config") && pos < size) {
            const uint8_t *next = memchr(data + pos, '\0', size - pos);

            pos = next ? (gsize)(next - data) + 1 : size;
        }
        if (is_dropped(arg))
            g_free(arg);
        else
            g_ptr_array_add(args, arg);
    }

    first_error = parse(args, &first);
    if (first_error) {
        FUZZ_CHECK(first.endpoint == NULL && first.feature_gates == NULL &&
                       first.metrics_address == NULL,
                   "the options are untouched on failure");
    } else {
        check_options(&first);
    }

    second_error = parse(args, &second);
    FUZZ_CHECK(g_strcmp0(first_error, second_error) == 0, "parsing is deterministic");
    if (!first_error && !first.version) {
        FUZZ_CHECK(g_strcmp0(first.endpoint, second.endpoint) == 0 &&
                       first.relist_period_usec == second.relist_period_usec &&
                       first.relist_threshold_usec == second.relist_threshold_usec &&
                       first.runtime_request_timeout_usec == second.runtime_request_timeout_usec,
                   "parsing is deterministic");
    }
    return 0;
}
