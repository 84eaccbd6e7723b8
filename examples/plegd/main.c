/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd: runs libpleg's plugin host (the Generic PLEG and the plugins) against a CRI runtime,
 * prints every PodLifecycleEvent as a JSON line on stdout and serves /metrics and /healthz.
 */
#include <errno.h>
#include <fcntl.h>
#include <glib-unix.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "pleg-config.h"
#include "plegd.h"

#define EXIT_BAD_FLAG 2

#define DEFAULT_RUNTIME_REQUEST_TIMEOUT "2m"
#define DEFAULT_RELIST_PERIOD           "1s"
#define DEFAULT_RELIST_THRESHOLD        "3m"
#define DEFAULT_METRICS_BIND_ADDRESS    "127.0.0.1:10388"

/* On SIGTERM, how long events already generated may take to reach a slow reader of stdout. */
#define STOP_FLUSH_TIMEOUT_USEC (1 * G_USEC_PER_SEC)

/* Settings that the command line and the [plegd] group of --config share; a key of the group
 * is the long flag without its dashes, with the same syntax. */
typedef enum {
    SETTING_ENDPOINT,
    SETTING_TIMEOUT,
    SETTING_PERIOD,
    SETTING_THRESHOLD,
    SETTING_METRICS_ADDRESS,
    SETTING_PLUGIN_DIR,
    SETTING_DISABLE_PLUGINS,
    SETTING_REQUIRE_PLUGINS,
    N_SETTINGS,
} SettingId;

static const char *const setting_names[N_SETTINGS] = {
    [SETTING_ENDPOINT] = "container-runtime-endpoint",
    [SETTING_TIMEOUT] = "runtime-request-timeout",
    [SETTING_PERIOD] = "relist-period",
    [SETTING_THRESHOLD] = "relist-threshold",
    [SETTING_METRICS_ADDRESS] = "metrics-bind-address",
    [SETTING_PLUGIN_DIR] = "plugin-dir",
    [SETTING_DISABLE_PLUGINS] = "disable-plugins",
    [SETTING_REQUIRE_PLUGINS] = "require-plugins",
};

#define CONFIG_GROUP       "plegd"
#define CONFIG_GATES_GROUP "FeatureGates"

typedef struct {
    char *values[N_SETTINGS];         /* NULL: not set */
    const char *origins[N_SETTINGS]; /* the --config file a value came from, NULL: command line */
} Settings;

typedef struct {
    char *endpoint;
    char *endpoint_origin; /* NULL: command line or default */
    gint64 runtime_request_timeout_usec;
    gint64 relist_period_usec;
    gint64 relist_threshold_usec;
    GInetSocketAddress *metrics_address; /* NULL: no HTTP server */
    PlegFeatureGates *feature_gates;
    char *plugin_dir; /* NULL: the build-time default */
    GStrv disabled_plugins;
    GStrv required_plugins;
    gboolean version;
    /* Test hooks (hidden options), 0: the default. */
    gint64 http_idle_timeout_usec;
    guint64 stdout_max_backlog;
} Options;

static void
options_clear(Options *options)
{
    g_clear_pointer(&options->endpoint, g_free);
    g_clear_pointer(&options->endpoint_origin, g_free);
    g_clear_object(&options->metrics_address);
    g_clear_pointer(&options->feature_gates, pleg_feature_gates_free);
    g_clear_pointer(&options->plugin_dir, g_free);
    g_clear_pointer(&options->disabled_plugins, g_strfreev);
    g_clear_pointer(&options->required_plugins, g_strfreev);
}
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(Options, options_clear)

typedef struct {
    GMainLoop *loop;
    int exit_status;
    PlegHost *host;
    PlegdRelistMonitor *monitor;
    PlegdOutput *output;
    gboolean output_failed;
    gboolean stopping;
} App;

/* ---- logging ---- */

/* plegd's own domain, and the plugins' ("pleg-<name>", set by the host). */
static gboolean
is_operator_domain(const GLogField *fields, gsize n_fields)
{
    for (gsize i = 0; i < n_fields; i++) {
        g_autofree char *domain = NULL;

        if (!g_str_equal(fields[i].key, "GLIB_DOMAIN") || !fields[i].value)
            continue;
        domain = fields[i].length < 0 ? g_strdup(fields[i].value)
                                      : g_strndup(fields[i].value, fields[i].length);
        return g_str_equal(domain, G_LOG_DOMAIN) || g_str_has_prefix(domain, "pleg-");
    }
    return FALSE;
}

/* GLib's default writer hides info unless G_MESSAGES_DEBUG asks; plegd's own info and its
 * plugins' are for the operator, so show them.  Everything else (the library logs at debug)
 * keeps the default rules. */
static GLogWriterOutput
write_log(GLogLevelFlags log_level, const GLogField *fields, gsize n_fields, gpointer user_data)
{
    if ((log_level & G_LOG_LEVEL_MASK) == G_LOG_LEVEL_INFO && is_operator_domain(fields, n_fields)) {
        if (g_log_writer_is_journald(fileno(stderr)) &&
            g_log_writer_journald(log_level, fields, n_fields, user_data) == G_LOG_WRITER_HANDLED)
            return G_LOG_WRITER_HANDLED;
        return g_log_writer_standard_streams(log_level, fields, n_fields, user_data);
    }
    return g_log_writer_default(log_level, fields, n_fields, user_data);
}

/* plegd logs from several threads (main, plugins, output writer), and GLib's text writer
 * formats each record's time with localtime(), whose result is one static buffer per process:
 * two records written at once could show each other's time (ThreadSanitizer reports it).
 * One record at a time; the writers only format and write a line. */
static GLogWriterOutput
log_writer(GLogLevelFlags log_level, const GLogField *fields, gsize n_fields, gpointer user_data)
{
    static GMutex lock;
    GLogWriterOutput output;

    g_mutex_lock(&lock);
    output = write_log(log_level, fields, n_fields, user_data);
    g_mutex_unlock(&lock);
    return output;
}

static void
setup_logging(void)
{
    /* stdout carries the events. */
    g_log_writer_default_set_use_stderr(TRUE);
    g_log_set_writer_func(log_writer, NULL, NULL);
}

/* ---- command line and configuration file ---- */

static void
settings_clear(Settings *settings)
{
    for (int i = 0; i < N_SETTINGS; i++)
        g_clear_pointer(&settings->values[i], g_free);
}
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(Settings, settings_clear)

static gboolean
bad_setting(GError **error, const Settings *settings, SettingId id, const char *why)
{
    const char *origin = settings->origins[id];

    if (origin)
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "invalid %s \"%s\" in [" CONFIG_GROUP "] of %s: %s", setting_names[id],
                    settings->values[id], origin, why);
    else
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "invalid --%s \"%s\": %s",
                    setting_names[id], settings->values[id], why);
    return FALSE;
}

static gboolean
parse_period(const Settings *settings, SettingId id, const char *fallback, gint64 *ret_usec,
             GError **error)
{
    g_autoptr(GError) local_error = NULL;
    const char *text = settings->values[id] ?: fallback;
    gint64 usec;

    if (!pleg_duration_parse(text, &usec, &local_error))
        return bad_setting(error, settings, id, local_error->message);
    /* Durations are kept in microseconds: 999ns would silently become 0. */
    if (usec <= 0)
        return bad_setting(error, settings, id, "must be at least 1µs");
    *ret_usec = usec;
    return TRUE;
}

static gboolean
is_plugin_name(const char *name)
{
    if (name[0] == '\0')
        return FALSE;
    for (const char *c = name; *c; c++) {
        if (!g_ascii_islower(*c) && !g_ascii_isdigit(*c) && *c != '-')
            return FALSE;
    }
    return TRUE;
}

/* "a, b,c" -> {"a", "b", "c"}; empty items are skipped. */
static gboolean
parse_plugin_list(const Settings *settings, SettingId id, GStrv *ret_names, GError **error)
{
    g_auto(GStrv) items = NULL;
    g_autoptr(GStrvBuilder) names = g_strv_builder_new();

    if (!settings->values[id]) {
        *ret_names = NULL;
        return TRUE;
    }
    items = g_strsplit(settings->values[id], ",", -1);
    for (char **item = items; *item; item++) {
        g_strstrip(*item);
        if ((*item)[0] == '\0')
            continue;
        if (!is_plugin_name(*item)) {
            g_autofree char *why =
                g_strdup_printf("\"%s\" is not a plugin name ([a-z0-9-]+)", *item);

            return bad_setting(error, settings, id, why);
        }
        g_strv_builder_add(names, *item);
    }
    *ret_names = g_strv_builder_end(names);
    return TRUE;
}

/* Fills the settings the command line left unset from the [plegd] group of @path and applies
 * its [FeatureGates] group to @gates. */
static gboolean
load_config_file(const char *path, Settings *settings, PlegFeatureGates *gates, GError **error)
{
    g_autoptr(GKeyFile) key_file = g_key_file_new();
    g_autoptr(GError) local_error = NULL;
    g_auto(GStrv) groups = NULL;
    g_auto(GStrv) keys = NULL;

    if (!g_key_file_load_from_file(key_file, path, G_KEY_FILE_NONE, &local_error)) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "invalid --config \"%s\": %s",
                    path, local_error->message);
        return FALSE;
    }

    /* Anything else is most likely a typo that would silently change nothing. */
    groups = g_key_file_get_groups(key_file, NULL);
    for (char **group = groups; *group; group++) {
        if (!g_str_equal(*group, CONFIG_GROUP) && !g_str_equal(*group, CONFIG_GATES_GROUP)) {
            g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                        "invalid --config \"%s\": unknown group [%s] (expected [" CONFIG_GROUP
                        "] or [" CONFIG_GATES_GROUP "])",
                        path, *group);
            return FALSE;
        }
    }

    keys = g_key_file_get_keys(key_file, CONFIG_GROUP, NULL, NULL);
    for (char **key = keys; key && *key; key++) {
        int id;

        for (id = 0; id < N_SETTINGS; id++) {
            if (g_str_equal(*key, setting_names[id]))
                break;
        }
        if (id == N_SETTINGS) {
            g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                        "invalid --config \"%s\": unknown key \"%s\" in [" CONFIG_GROUP "]", path,
                        *key);
            return FALSE;
        }
        if (settings->values[id])
            continue; /* the command line wins */
        settings->values[id] = g_key_file_get_string(key_file, CONFIG_GROUP, *key, &local_error);
        if (!settings->values[id]) {
            g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                        "invalid --config \"%s\": %s", path, local_error->message);
            return FALSE;
        }
        settings->origins[id] = path;
    }

    if (!pleg_feature_gates_load_key_file(gates, key_file, &local_error)) {
        /* The message names the group. */
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "invalid --config \"%s\": %s",
                    path, local_error->message);
        return FALSE;
    }
    return TRUE;
}

static gboolean
parse_options(int *argc, char ***argv, Options *ret_options, GError **error)
{
    g_auto(Settings) settings = {0};
    g_autofree char *config_file = NULL;
    g_autofree char *feature_gates = NULL;
    g_autofree char *http_idle_timeout = NULL;
    g_autofree char *stdout_max_backlog = NULL;
    gboolean version = FALSE;
    const GOptionEntry entries[] = {
        {"config", 0, 0, G_OPTION_ARG_FILENAME, &config_file,
         "Read settings from this key file (see below)", "FILE"},
        {"container-runtime-endpoint", 0, 0, G_OPTION_ARG_STRING,
         &settings.values[SETTING_ENDPOINT],
         "CRI endpoint (default " PLEG_DEFAULT_CRI_ENDPOINT ")", "ENDPOINT"},
        {"runtime-request-timeout", 0, 0, G_OPTION_ARG_STRING, &settings.values[SETTING_TIMEOUT],
         "Deadline of each CRI call (default " DEFAULT_RUNTIME_REQUEST_TIMEOUT ")", "DURATION"},
        {"relist-period", 0, 0, G_OPTION_ARG_STRING, &settings.values[SETTING_PERIOD],
         "Time between global relists (default " DEFAULT_RELIST_PERIOD ")", "DURATION"},
        {"relist-threshold", 0, 0, G_OPTION_ARG_STRING, &settings.values[SETTING_THRESHOLD],
         "PLEG health threshold (default " DEFAULT_RELIST_THRESHOLD ")", "DURATION"},
        {"metrics-bind-address", 0, 0, G_OPTION_ARG_STRING,
         &settings.values[SETTING_METRICS_ADDRESS],
         "Serve /metrics and /healthz here; \"\" disables, port 0 picks a free port "
         "(default " DEFAULT_METRICS_BIND_ADDRESS ")",
         "IP:PORT"},
        {"feature-gates", 0, 0, G_OPTION_ARG_STRING, &feature_gates,
         "Feature gates, e.g. EventedPLEG=true", "NAME=BOOL,..."},
        {"plugin-dir", 0, 0, G_OPTION_ARG_FILENAME, &settings.values[SETTING_PLUGIN_DIR],
         "Load plugins from DIR (several: DIR1:DIR2, searched in order); \"\" loads none (default: libpleg's plugin directory)", "DIR"},
        {"disable-plugins", 0, 0, G_OPTION_ARG_STRING, &settings.values[SETTING_DISABLE_PLUGINS],
         "Do not load these plugins", "NAME,..."},
        {"require-plugins", 0, 0, G_OPTION_ARG_STRING, &settings.values[SETTING_REQUIRE_PLUGINS],
         "Exit when one of these plugins does not start", "NAME,..."},
        {"version", 0, 0, G_OPTION_ARG_NONE, &version, "Print the version and exit", NULL},
        /* Test hooks: limits that tests cannot wait for or fill at their defaults. */
        {"http-idle-timeout", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &http_idle_timeout,
         "Close HTTP connections idle for this long", "DURATION"},
        {"stdout-max-backlog", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &stdout_max_backlog,
         "Exit when this many bytes of events wait for the reader of stdout", "BYTES"},
        {NULL},
    };
    g_autoptr(GOptionContext) context = g_option_context_new(NULL);
    g_autoptr(PlegFeatureGates) gates = pleg_feature_gates_new();
    g_autoptr(GInetSocketAddress) address = NULL;
    g_autoptr(GError) local_error = NULL;
    const char *metrics_address;
    g_auto(Options) parsed = {0};

    g_option_context_set_summary(
        context, "Runs libpleg's plugin host (the Generic PLEG and its plugins) against a CRI "
                 "runtime and prints each PodLifecycleEvent as a JSON line on stdout.");
    g_option_context_set_description(
        context,
        "--config FILE is a key file: its [plegd] group takes the long options above without "
        "their\ndashes (e.g. relist-period=500ms, disable-plugins=evented), its [FeatureGates] "
        "group\nName=true|false lines.  The command line wins over the file; --feature-gates is "
        "applied\nafter [FeatureGates].\n"
        "Logs go to stderr; G_MESSAGES_DEBUG=plegd,pleg shows debug logs.\n"
        "Durations use Go syntax: 500ms, 1s, 3m, 1h30m.");
    g_option_context_add_main_entries(context, entries, NULL);
    if (!g_option_context_parse(context, argc, argv, error))
        return FALSE;
    if (*argc > 1) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_FAILED, "unexpected argument \"%s\"",
                    (*argv)[1]);
        return FALSE;
    }
    if (version) {
        ret_options->version = TRUE;
        return TRUE;
    }

    if (config_file && !load_config_file(config_file, &settings, gates, error))
        return FALSE;
    if (feature_gates && !pleg_feature_gates_parse(gates, feature_gates, &local_error)) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "invalid --feature-gates \"%s\": %s", feature_gates, local_error->message);
        return FALSE;
    }

    if (!parse_period(&settings, SETTING_TIMEOUT, DEFAULT_RUNTIME_REQUEST_TIMEOUT,
                      &parsed.runtime_request_timeout_usec, error) ||
        !parse_period(&settings, SETTING_PERIOD, DEFAULT_RELIST_PERIOD,
                      &parsed.relist_period_usec, error) ||
        !parse_period(&settings, SETTING_THRESHOLD, DEFAULT_RELIST_THRESHOLD,
                      &parsed.relist_threshold_usec, error))
        return FALSE;
    /* A threshold shorter than the period would report a healthy PLEG unhealthy between relists. */
    if (parsed.relist_threshold_usec < parsed.relist_period_usec)
        return bad_setting(error, &settings, SETTING_THRESHOLD,
                           "must not be shorter than --relist-period");

    metrics_address = settings.values[SETTING_METRICS_ADDRESS] ?: DEFAULT_METRICS_BIND_ADDRESS;
    if (metrics_address[0] != '\0' &&
        !plegd_parse_bind_address(metrics_address, &address, &local_error))
        return bad_setting(error, &settings, SETTING_METRICS_ADDRESS, local_error->message);

    if (!parse_plugin_list(&settings, SETTING_DISABLE_PLUGINS, &parsed.disabled_plugins, error) ||
        !parse_plugin_list(&settings, SETTING_REQUIRE_PLUGINS, &parsed.required_plugins, error))
        return FALSE;
    for (char **name = parsed.required_plugins; name && *name; name++) {
        if (parsed.disabled_plugins &&
            g_strv_contains((const char *const *)parsed.disabled_plugins, *name)) {
            g_autofree char *why =
                g_strdup_printf("plugin %s is also in disable-plugins", *name);

            return bad_setting(error, &settings, SETTING_REQUIRE_PLUGINS, why);
        }
    }

    if (http_idle_timeout &&
        (!pleg_duration_parse(http_idle_timeout, &parsed.http_idle_timeout_usec, &local_error) ||
         parsed.http_idle_timeout_usec <= 0)) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "invalid --http-idle-timeout \"%s\": %s", http_idle_timeout,
                    local_error ? local_error->message : "must be a positive duration");
        return FALSE;
    }
    if (stdout_max_backlog &&
        !g_ascii_string_to_unsigned(stdout_max_backlog, 10, 1, G_MAXSIZE,
                                    &parsed.stdout_max_backlog, &local_error)) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "invalid --stdout-max-backlog \"%s\": %s", stdout_max_backlog,
                    local_error->message);
        return FALSE;
    }

    parsed.endpoint = g_strdup(settings.values[SETTING_ENDPOINT] ?: PLEG_DEFAULT_CRI_ENDPOINT);
    parsed.endpoint_origin = g_strdup(settings.origins[SETTING_ENDPOINT]);
    parsed.plugin_dir = g_steal_pointer(&settings.values[SETTING_PLUGIN_DIR]);
    parsed.metrics_address = g_steal_pointer(&address);
    parsed.feature_gates = g_steal_pointer(&gates);
    *ret_options = parsed;
    memset(&parsed, 0, sizeof parsed);
    return TRUE;
}

/* ---- main loop callbacks ---- */

static void
on_event(PlegPodLifecycleEvent *event, gpointer user_data)
{
    App *app = user_data;
    g_autofree char *line = NULL;
    g_autoptr(GError) error = NULL;

    g_assert(g_main_context_is_owner(g_main_context_default()));
    if (app->output_failed)
        return;

    line = plegd_event_to_json(event);
    if (plegd_output_write_line(app->output, line, &error))
        return;

    /* Whoever reads stdout is stuck: better restarted (by systemd) than grow or block. */
    app->output_failed = TRUE;
    g_message("stdout is not being read: %s; exiting", error->message);
    app->exit_status = EXIT_FAILURE;
    g_main_loop_quit(app->loop);
}

/* From the writer thread, through the main context. */
static void
on_output_error(const GError *error, gpointer user_data)
{
    App *app = user_data;

    if (app->output_failed)
        return;
    app->output_failed = TRUE;
    if (g_error_matches(error, G_IO_ERROR, G_IO_ERROR_BROKEN_PIPE)) {
        g_message("stdout was closed, shutting down");
    } else {
        g_message("cannot write events to stdout: %s, shutting down", error->message);
        app->exit_status = EXIT_FAILURE;
    }
    g_main_loop_quit(app->loop);
}

static void
on_relist(const GError *error, gint64 relist_time_ns, gpointer user_data)
{
    App *app = user_data;
    guint n_pods;

    g_assert(g_main_context_is_owner(g_main_context_default()));

    /* A relist cut short by the stop is no news. */
    if (app->stopping)
        return;
    n_pods = error ? 0
                   : pleg_pod_cache_get_size(pleg_generic_get_cache(pleg_host_get_pleg(app->host)));
    plegd_relist_monitor_update(app->monitor, error, n_pods, g_get_monotonic_time());
}

static void
quit(App *app, const char *signal_name)
{
    g_info("received %s, shutting down", signal_name);
    g_main_loop_quit(app->loop);
}

static gboolean
on_sigint(gpointer user_data)
{
    quit(user_data, "SIGINT");
    return G_SOURCE_CONTINUE;
}

static gboolean
on_sigterm(gpointer user_data)
{
    quit(user_data, "SIGTERM");
    return G_SOURCE_CONTINUE;
}

static GSource *
add_signal_source(int signum, GSourceFunc func, App *app)
{
    GSource *source = g_unix_signal_source_new(signum);

    g_source_set_callback(source, func, app, NULL);
    g_source_attach(source, NULL);
    return source;
}

static void
destroy_source(GSource **source)
{
    if (*source) {
        g_source_destroy(*source);
        g_clear_pointer(source, g_source_unref);
    }
}

static void
log_plugins(PlegHost *host)
{
    g_autoptr(GPtrArray) plugins = pleg_host_get_plugins(host);

    for (guint i = 0; i < plugins->len; i++) {
        const PlegPluginInfo *info = plugins->pdata[i];
        g_autofree char *detail = plegd_describe_plugin(info);

        g_info("plugin %s: %s", info->name, detail);
    }
    if (plugins->len == 0)
        g_debug("no plugins found");
}

/* ---- the program ---- */

static int
run(const Options *options)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegdRelistMonitor) monitor = NULL;
    g_autoptr(GMainLoop) loop = NULL;
    g_autoptr(PlegHost) host = NULL;
    g_autoptr(PlegdHttp) http = NULL;
    g_autoptr(PlegdOutput) output = NULL;
    g_autofree char *period = NULL;
    PlegHostConfig config;
    GSource *sigint_source = NULL;
    GSource *sigterm_source = NULL;
    App app = {0};
    gboolean started;

    pleg_host_config_init(&config);
    config.runtime_endpoint = options->endpoint;
    config.runtime_request_timeout_usec = options->runtime_request_timeout_usec;
    config.generic.relist_period_usec = options->relist_period_usec;
    config.generic.relist_threshold_usec = options->relist_threshold_usec;
    config.plugin_dir = options->plugin_dir;
    config.disabled_plugins = (const char *const *)options->disabled_plugins;
    config.required_plugins = (const char *const *)options->required_plugins;

    /* No thread-default context is pushed: the host's callbacks run in the default one. */
    host = pleg_host_new(&config, options->feature_gates, NULL, &error);
    if (!host) {
        if (options->endpoint_origin)
            g_printerr("plegd: invalid container-runtime-endpoint \"%s\" in [" CONFIG_GROUP
                       "] of %s: %s\n",
                       options->endpoint, options->endpoint_origin, error->message);
        else
            g_printerr("plegd: invalid --container-runtime-endpoint \"%s\": %s\n",
                       options->endpoint, error->message);
        return EXIT_BAD_FLAG;
    }

    if (options->metrics_address) {
        g_autofree char *url = NULL;

        http = plegd_http_new(host);
        if (options->http_idle_timeout_usec > 0)
            plegd_http_set_idle_timeout(http, options->http_idle_timeout_usec);
        if (!plegd_http_listen(http, options->metrics_address, &url, &error)) {
            g_printerr("plegd: %s\n", error->message);
            return EXIT_FAILURE;
        }
        g_info("serving metrics on %s", url);
    }

    loop = g_main_loop_new(NULL, FALSE);
    monitor = plegd_relist_monitor_new(options->endpoint, NULL, NULL);
    app.loop = loop;
    app.host = host;
    app.monitor = monitor;
    app.exit_status = EXIT_SUCCESS;
    /* The main thread never waits for the reader of stdout: /healthz, signals and the service
     * manager must not depend on it. */
    output = plegd_output_new(STDOUT_FILENO,
                              options->stdout_max_backlog ? options->stdout_max_backlog
                                                          : PLEGD_OUTPUT_MAX_BACKLOG,
                              NULL, on_output_error, &app);
    app.output = output;

    pleg_host_add_event_callback(host, on_event, &app, NULL);
    pleg_host_set_relist_callback(host, on_relist, &app, NULL);
    sigint_source = add_signal_source(SIGINT, on_sigint, &app);
    sigterm_source = add_signal_source(SIGTERM, on_sigterm, &app);

    /* g_main_context_invoke() runs a callback on the calling thread when no thread owns the
     * context: own it from before the host starts until after it stopped, so that callbacks
     * only ever run here. */
    g_main_context_acquire(NULL);

    period = pleg_duration_format(options->relist_period_usec);
    g_info("plegd %s: relisting %s every %s", PLEG_VERSION, options->endpoint, period);
    started = pleg_host_start(host, &error);
    log_plugins(host);
    if (started) {
        g_main_loop_run(loop);
    } else {
        g_printerr("plegd: %s\n", error->message);
        app.exit_status = EXIT_FAILURE;
    }

    app.stopping = TRUE;
    plegd_relist_monitor_stopping(monitor);
    pleg_host_stop(host);
    destroy_source(&sigint_source);
    destroy_source(&sigterm_source);

    /* Events generated before the stop are still printed, and queued relist callbacks hold
     * memory until dispatched. */
    while (g_main_context_iteration(NULL, FALSE))
        ;
    if (!app.output_failed && !plegd_output_flush(output, STOP_FLUSH_TIMEOUT_USEC)) {
        g_autofree char *size = g_format_size(plegd_output_get_backlog(output));

        g_message("stdout is not being read: dropping %s of events", size);
    }
    g_clear_pointer(&output, plegd_output_free);
    g_clear_pointer(&http, plegd_http_free);
    g_clear_pointer(&host, pleg_host_free);
    g_main_context_release(NULL);
    g_info("stopped");
    return app.exit_status;
}

/* With 0, 1 or 2 closed at exec, the first fds plegd opens (gRPC's epoll fd, an eventfd, a
 * socket to the runtime) would become stdin, stdout or stderr, and events and logs would be
 * written into them.  Returns: whether stdout was closed. */
static gboolean
open_standard_fds(void)
{
    gboolean stdout_closed = FALSE;

    for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; fd++) {
        int null_fd;

        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
            continue;
        /* The lowest free fd: @fd itself, the ones below are open. */
        null_fd = open("/dev/null", fd == STDIN_FILENO ? O_RDONLY : O_WRONLY);
        if (null_fd < 0)
            exit(EXIT_FAILURE);
        if (null_fd != fd) {
            if (dup2(null_fd, fd) < 0)
                exit(EXIT_FAILURE);
            close(null_fd);
        }
        if (fd == STDOUT_FILENO)
            stdout_closed = TRUE;
    }
    return stdout_closed;
}

int
main(int argc, char **argv)
{
    g_auto(Options) options = {0};
    g_autoptr(GError) error = NULL;
    gboolean stdout_closed = open_standard_fds();

    setlocale(LC_ALL, "");
    setup_logging();

    if (!parse_options(&argc, &argv, &options, &error)) {
        g_printerr("plegd: %s\n", error->message);
        g_printerr("Run 'plegd --help' to list the options.\n");
        return EXIT_BAD_FLAG;
    }
    if (options.version) {
        g_print("plegd %s\n", PLEG_VERSION);
        return EXIT_SUCCESS;
    }
    if (stdout_closed)
        g_message("stdout is closed; events are discarded");

    /* A reader that goes away must show up as EPIPE on stdout, not kill us. */
    signal(SIGPIPE, SIG_IGN);

    return run(&options);
}
