/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd: runs the Generic PLEG against a CRI runtime, prints every PodLifecycleEvent as a JSON
 * line on stdout and serves /metrics and /healthz.
 */
#include <glib-unix.h>
#include <locale.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "pleg-config.h"
#include "plegd.h"

#define EXIT_BAD_FLAG 2

#define DEFAULT_RUNTIME_REQUEST_TIMEOUT "2m"
#define DEFAULT_RELIST_PERIOD           "1s"
#define DEFAULT_RELIST_THRESHOLD        "3m"
#define DEFAULT_METRICS_BIND_ADDRESS    "127.0.0.1:10388"

typedef struct {
    char *endpoint;
    gint64 runtime_request_timeout_usec;
    gint64 relist_period_usec;
    gint64 relist_threshold_usec;
    GInetSocketAddress *metrics_address; /* NULL: no HTTP server */
    PlegFeatureGates *feature_gates;
    gboolean version;
} Options;

static void
options_clear(Options *options)
{
    g_clear_pointer(&options->endpoint, g_free);
    g_clear_object(&options->metrics_address);
    g_clear_pointer(&options->feature_gates, pleg_feature_gates_free);
}
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(Options, options_clear)

typedef struct {
    GMainLoop *loop;
    int exit_status;
    PlegGeneric *pleg;
    PlegdRelistMonitor *monitor;
    gboolean output_failed;
    gboolean stopping;
} App;

/* ---- logging ---- */

static gboolean
is_own_domain(const GLogField *fields, gsize n_fields)
{
    for (gsize i = 0; i < n_fields; i++) {
        if (g_str_equal(fields[i].key, "GLIB_DOMAIN"))
            return fields[i].length < 0 && g_strcmp0(fields[i].value, G_LOG_DOMAIN) == 0;
    }
    return FALSE;
}

/* GLib's default writer hides info unless G_MESSAGES_DEBUG asks; plegd's own info is for the
 * operator, so show it.  Everything else (the library logs at debug) keeps the default rules. */
static GLogWriterOutput
log_writer(GLogLevelFlags log_level, const GLogField *fields, gsize n_fields, gpointer user_data)
{
    if ((log_level & G_LOG_LEVEL_MASK) == G_LOG_LEVEL_INFO && is_own_domain(fields, n_fields)) {
        if (g_log_writer_is_journald(fileno(stderr)) &&
            g_log_writer_journald(log_level, fields, n_fields, user_data) == G_LOG_WRITER_HANDLED)
            return G_LOG_WRITER_HANDLED;
        return g_log_writer_standard_streams(log_level, fields, n_fields, user_data);
    }
    return g_log_writer_default(log_level, fields, n_fields, user_data);
}

static void
setup_logging(void)
{
    /* stdout carries the events. */
    g_log_writer_default_set_use_stderr(TRUE);
    g_log_set_writer_func(log_writer, NULL, NULL);
}

/* ---- command line ---- */

static gboolean
bad_flag(GError **error, const char *flag, const char *value, const char *why)
{
    g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "invalid --%s \"%s\": %s", flag,
                value, why);
    return FALSE;
}

static gboolean
parse_period(const char *flag, const char *text, gint64 *ret_usec, GError **error)
{
    g_autoptr(GError) local_error = NULL;
    gint64 usec;

    if (!pleg_duration_parse(text, &usec, &local_error))
        return bad_flag(error, flag, text, local_error->message);
    if (usec <= 0)
        return bad_flag(error, flag, text, "must be a positive duration");
    *ret_usec = usec;
    return TRUE;
}

static gboolean
parse_options(int *argc, char ***argv, Options *ret_options, GError **error)
{
    g_autofree char *endpoint = NULL;
    g_autofree char *timeout = NULL;
    g_autofree char *period = NULL;
    g_autofree char *threshold = NULL;
    g_autofree char *metrics_address = NULL;
    g_autofree char *feature_gates = NULL;
    gboolean version = FALSE;
    const GOptionEntry entries[] = {
        {"container-runtime-endpoint", 0, 0, G_OPTION_ARG_STRING, &endpoint,
         "CRI endpoint (default " PLEG_DEFAULT_CRI_ENDPOINT ")", "ENDPOINT"},
        {"runtime-request-timeout", 0, 0, G_OPTION_ARG_STRING, &timeout,
         "Deadline of each CRI call (default " DEFAULT_RUNTIME_REQUEST_TIMEOUT ")", "DURATION"},
        {"relist-period", 0, 0, G_OPTION_ARG_STRING, &period,
         "Time between global relists (default " DEFAULT_RELIST_PERIOD ")", "DURATION"},
        {"relist-threshold", 0, 0, G_OPTION_ARG_STRING, &threshold,
         "PLEG health threshold (default " DEFAULT_RELIST_THRESHOLD ")", "DURATION"},
        {"metrics-bind-address", 0, 0, G_OPTION_ARG_STRING, &metrics_address,
         "Serve /metrics and /healthz here; \"\" disables, port 0 picks a free port "
         "(default " DEFAULT_METRICS_BIND_ADDRESS ")",
         "IP:PORT"},
        {"feature-gates", 0, 0, G_OPTION_ARG_STRING, &feature_gates,
         "Feature gates, e.g. EventedPLEG=false", "NAME=BOOL,..."},
        {"version", 0, 0, G_OPTION_ARG_NONE, &version, "Print the version and exit", NULL},
        {NULL},
    };
    g_autoptr(GOptionContext) context = g_option_context_new(NULL);
    g_autoptr(PlegFeatureGates) gates = pleg_feature_gates_new();
    g_autoptr(GInetSocketAddress) address = NULL;
    g_autoptr(GError) local_error = NULL;
    Options parsed = {0};

    g_option_context_set_summary(
        context, "Runs libpleg's Generic PLEG against a CRI runtime and prints each "
                 "PodLifecycleEvent as a JSON line on stdout.");
    g_option_context_set_description(context,
                                     "Logs go to stderr; G_MESSAGES_DEBUG=plegd,pleg shows debug "
                                     "logs.\nDurations use Go syntax: 500ms, 1s, 3m, 1h30m.");
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

    if (!parse_period("runtime-request-timeout", timeout ?: DEFAULT_RUNTIME_REQUEST_TIMEOUT,
                      &parsed.runtime_request_timeout_usec, error) ||
        !parse_period("relist-period", period ?: DEFAULT_RELIST_PERIOD, &parsed.relist_period_usec,
                      error) ||
        !parse_period("relist-threshold", threshold ?: DEFAULT_RELIST_THRESHOLD,
                      &parsed.relist_threshold_usec, error))
        return FALSE;

    if (!metrics_address)
        metrics_address = g_strdup(DEFAULT_METRICS_BIND_ADDRESS);
    if (metrics_address[0] != '\0' &&
        !plegd_parse_bind_address(metrics_address, &address, &local_error))
        return bad_flag(error, "metrics-bind-address", metrics_address, local_error->message);

    if (feature_gates && !pleg_feature_gates_parse(gates, feature_gates, &local_error))
        return bad_flag(error, "feature-gates", feature_gates, local_error->message);

    parsed.endpoint = endpoint ? g_steal_pointer(&endpoint) : g_strdup(PLEG_DEFAULT_CRI_ENDPOINT);
    parsed.metrics_address = g_steal_pointer(&address);
    parsed.feature_gates = g_steal_pointer(&gates);
    *ret_options = parsed;
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
    if (plegd_write_line(stdout, line, &error))
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
    n_pods = error ? 0 : pleg_pod_cache_get_size(pleg_generic_get_cache(app->pleg));
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

/* Events generated before the PLEG stopped are still printed. */
static void
drain_channel(App *app, PlegEventChannel *channel)
{
    PlegPodLifecycleEvent *event;

    while (!app->output_failed && (event = pleg_event_channel_pop(channel, 0))) {
        on_event(event, app);
        pleg_pod_lifecycle_event_unref(event);
    }
}

/* ---- the program ---- */

static int
run(const Options *options)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegCriClient) client = NULL;
    g_autoptr(PlegRuntime) runtime = NULL;
    g_autoptr(PlegMetricsRegistry) metrics = NULL;
    g_autoptr(PlegGeneric) pleg = NULL;
    g_autoptr(PlegdHttp) http = NULL;
    g_autoptr(PlegdRelistMonitor) monitor = NULL;
    g_autoptr(GMainLoop) loop = NULL;
    g_autofree char *period = NULL;
    PlegGenericConfig config;
    PlegEventChannel *channel;
    GSource *event_source = NULL;
    GSource *sigint_source = NULL;
    GSource *sigterm_source = NULL;
    App app = {0};

    client = pleg_cri_client_new(options->endpoint, options->runtime_request_timeout_usec, &error);
    if (!client) {
        g_printerr("plegd: invalid --container-runtime-endpoint \"%s\": %s\n", options->endpoint,
                   error->message);
        return EXIT_BAD_FLAG;
    }
    runtime = pleg_cri_client_as_runtime(client);
    metrics = pleg_metrics_registry_new();

    pleg_generic_config_init(&config);
    config.relist_period_usec = options->relist_period_usec;
    config.relist_threshold_usec = options->relist_threshold_usec;
    pleg = pleg_generic_new(runtime, &config, metrics);

    if (options->metrics_address) {
        g_autofree char *url = NULL;

        http = plegd_http_new(pleg, metrics);
        if (!plegd_http_listen(http, options->metrics_address, &url, &error)) {
            g_printerr("plegd: %s\n", error->message);
            return EXIT_FAILURE;
        }
        g_info("serving metrics on %s", url);
    }

    loop = g_main_loop_new(NULL, FALSE);
    monitor = plegd_relist_monitor_new(options->endpoint, NULL, NULL);
    app.loop = loop;
    app.pleg = pleg;
    app.monitor = monitor;
    app.exit_status = EXIT_SUCCESS;

    channel = pleg_generic_subscribe(pleg, 0);
    event_source = pleg_event_channel_attach(channel, NULL, on_event, &app, NULL);
    pleg_generic_set_relist_callback(pleg, NULL, on_relist, &app, NULL);
    sigint_source = add_signal_source(SIGINT, on_sigint, &app);
    sigterm_source = add_signal_source(SIGTERM, on_sigterm, &app);

    /* g_main_context_invoke() runs a callback on the calling thread when no thread owns the
     * context: own it from before the PLEG starts until after it stopped, so that relist
     * callbacks only ever run here. */
    g_main_context_acquire(NULL);

    period = pleg_duration_format(options->relist_period_usec);
    g_info("plegd %s: relisting %s every %s", PLEG_VERSION, options->endpoint, period);
    pleg_generic_start(pleg);

    g_main_loop_run(loop);

    app.stopping = TRUE;
    plegd_relist_monitor_stopping(monitor);
    pleg_generic_stop(pleg);
    destroy_source(&event_source);
    drain_channel(&app, channel);
    pleg_generic_unsubscribe(pleg, channel);
    destroy_source(&sigint_source);
    destroy_source(&sigterm_source);

    /* Relist callbacks still queued hold memory until dispatched. */
    while (g_main_context_iteration(NULL, FALSE))
        ;
    g_main_context_release(NULL);
    g_info("stopped");
    return app.exit_status;
}

int
main(int argc, char **argv)
{
    g_auto(Options) options = {0};
    g_autoptr(GError) error = NULL;

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

    /* A reader that goes away must show up as EPIPE on stdout, not kill us. */
    signal(SIGPIPE, SIG_IGN);

    return run(&options);
}
