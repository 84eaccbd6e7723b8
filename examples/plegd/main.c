/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd: runs libpleg's plugin host (the Generic PLEG and the plugins) against a CRI runtime,
 * prints every PodLifecycleEvent as a JSON line on stdout and serves /metrics and /healthz.
 */
#include <errno.h>
#include <fcntl.h>
#include <glib-unix.h>
#include <locale.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "pleg-config.h"
#include "plegd.h"

#define EXIT_BAD_FLAG 2


/* On SIGTERM, how long events already generated may take to reach a slow reader of stdout, and
 * then the journal. */
#define STOP_FLUSH_TIMEOUT_USEC (1 * G_USEC_PER_SEC)
/* On SIGTERM, how long /events clients may take to read their last line. */
#define STREAMS_END_TIMEOUT_USEC (200 * 1000)
/* At exit, how long a health round still running may take to leave the host's checkers. */
#define HEALTH_ROUNDS_WAIT_USEC (1 * G_USEC_PER_SEC)
/* On SIGTERM, how long the events generated before the stop may take to be written to the
 * state directory (then they are published; those not written are found again after the
 * restart, as the records say they never happened). */
#define STATE_CLOSE_TIMEOUT_USEC (5 * G_USEC_PER_SEC)

/* A host left allocated at exit for a health round that did not return (run()). */
static PlegHost *abandoned_host;


typedef struct {
    GMainLoop *loop;
    int exit_status;
    PlegHost *host;
    PlegdHttp *http; /* NULL: no HTTP server */
    gboolean tls;    /* --tls-cert-file: SIGHUP reloads the TLS files */
    PlegdRelistMonitor *monitor;
    PlegdOutput *output;
    PlegdEvents *events;
    PlegdJournal *journal; /* NULL: events do not go to the journal */
    PlegdState *state;     /* NULL: no --state-dir */
    GPtrArray *batch;      /* PlegdStateEntry: events given seqs, to commit next */
    GSource *commit_source;
    gboolean output_failed;
    gboolean stopping;
} App;

/* ---- command line and configuration file ---- */

/* ---- main loop callbacks ---- */

/* Hands an event with its seq and line to every consumer: the /events ring and its streams,
 * the journal, stdout. */
static void
publish(App *app, const PlegPodLifecycleEvent *event, guint64 seq, GBytes *line)
{
    g_autoptr(GError) error = NULL;

    if (app->output_failed)
        return;
    plegd_events_publish_line(app->events, event, seq, line);
    if (app->journal)
        plegd_journal_publish(app->journal, event, seq);
    if (plegd_output_write_bytes(app->output, line, &error))
        return;

    /* Whoever reads stdout is stuck: better restarted (by systemd) than grow or block. */
    app->output_failed = TRUE;
    g_message("stdout is not being read: %s; exiting", error->message);
    app->exit_status = EXIT_FAILURE;
    g_main_loop_quit(app->loop);
}

/* From the state's writer, through the main context: the batch is on disk (or could not be
 * written, and is served from memory). */
static void
on_committed(GPtrArray *batch, const PlegdStateCommit *commit, gpointer user_data)
{
    App *app = user_data;

    if (commit->instance)
        plegd_events_break_history(app->events, commit->instance, commit->first_seq,
                                   commit->renumbered_from);

    for (guint i = 0; i < batch->len; i++) {
        const PlegdStateEntry *entry = g_ptr_array_index(batch, i);

        publish(app, entry->event, entry->seq, entry->line);
    }
}

/* Runs once the events that were waiting have all been taken (a lower priority than the
 * channel's): one group commit for them, one fdatasync() however many there were. */
static gboolean
on_commit(gpointer user_data)
{
    App *app = user_data;

    g_clear_pointer(&app->commit_source, g_source_unref);
    plegd_state_commit(app->state, g_steal_pointer(&app->batch), on_committed, app);
    return G_SOURCE_REMOVE;
}

static void
on_event(PlegPodLifecycleEvent *event, gpointer user_data)
{
    App *app = user_data;
    g_autoptr(GBytes) line = NULL;
    guint64 seq;

    g_assert(g_main_context_is_owner(g_main_context_default()));
    if (app->output_failed)
        return;

    /* The seq is given once: the state, stdout and every /events client see the same one. */
    seq = plegd_events_take_seq(app->events);
    line = plegd_event_to_line(event, seq);
    if (!app->state) {
        publish(app, event, seq, line);
        return;
    }
    /* Write-ahead: no consumer sees an event before it is durable. */
    if (!app->batch)
        app->batch = g_ptr_array_new_with_free_func((GDestroyNotify)plegd_state_entry_free);
    g_ptr_array_add(app->batch, plegd_state_entry_new(seq, line, event));
    if (!app->commit_source) {
        app->commit_source = g_idle_source_new();
        g_source_set_priority(app->commit_source, G_PRIORITY_HIGH_IDLE);
        g_source_set_callback(app->commit_source, on_commit, app, NULL);
        g_source_attach(app->commit_source, NULL);
    }
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

/* The TLS files, when plegd has them; a file that does not load leaves the ones in use. */
static void
reload(App *app)
{
    g_autoptr(GError) error = NULL;

    if (!app->tls) {
        g_info("received SIGHUP: nothing to reload (no --tls-cert-file)");
        return;
    }
    if (!plegd_http_reload_tls(app->http, &error)) {
        g_message("received SIGHUP: cannot reload the TLS files: %s; keeping the ones in use",
                  error->message);
        return;
    }
    g_info("received SIGHUP: reloaded the TLS files");
}

static void
quit(App *app, const char *signal_name)
{
    g_info("received %s, shutting down", signal_name);
    g_main_loop_quit(app->loop);
}

/* SIGINT and SIGTERM end plegd cleanly; SIGHUP reads the TLS files again (a rotated
 * certificate, a CA removed), as daemons reload on it.  SIGUSR1 and SIGUSR2 mean nothing to
 * plegd, and their default
 * would kill it too: a stray one (a log-reopen habit, a script meant for another daemon) is
 * logged and ignored.  All five are blocked in every thread from the start of main(),
 * before any thread exists, so that every thread plegd, GLib, gRPC or a plugin creates inherits
 * the mask, and the main loop reads them from a signalfd.  With a handler instead the kernel
 * picks the thread, and a signal that lands on a thread asleep in a raw futex wait can stay
 * undelivered (ThreadSanitizer runs handlers only at its interceptors: plegd then ignored
 * SIGTERM until that thread woke). */
static void
handled_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGHUP);
    sigaddset(set, SIGUSR1);
    sigaddset(set, SIGUSR2);
}

static const char *
signal_name(guint32 signum)
{
    switch (signum) {
    case SIGINT:
        return "SIGINT";
    case SIGTERM:
        return "SIGTERM";
    case SIGHUP:
        return "SIGHUP";
    case SIGUSR1:
        return "SIGUSR1";
    case SIGUSR2:
        return "SIGUSR2";
    default:
        return "a signal";
    }
}

static gboolean
on_signal(int fd, GIOCondition condition, gpointer user_data)
{
    struct signalfd_siginfo info;

    while (read(fd, &info, sizeof info) == sizeof info) {
        if (info.ssi_signo == SIGUSR1 || info.ssi_signo == SIGUSR2)
            g_message("received %s from pid %" G_GUINT32_FORMAT
                      ": plegd has no use for it, ignored",
                      signal_name(info.ssi_signo), info.ssi_pid);
        else if (info.ssi_signo == SIGHUP)
            reload(user_data);
        else
            quit(user_data, signal_name(info.ssi_signo));
    }
    return G_SOURCE_CONTINUE;
}

/* The source that reads the shutdown signals, or NULL with @error set. */
static GSource *
add_signal_source(App *app, int *ret_fd, GError **error)
{
    sigset_t set;
    GSource *source;
    int fd;

    handled_signals(&set);
    fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd < 0) {
        int errsv = errno;

        g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errsv), "signalfd: %s",
                    g_strerror(errsv));
        return NULL;
    }
    source = g_unix_fd_source_new(fd, G_IO_IN);
    g_source_set_callback(source, G_SOURCE_FUNC(on_signal), app, NULL);
    g_source_attach(source, NULL);
    *ret_fd = fd;
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

/* What the operator must see at the default level: the folders searched, each plugin's fate,
 * and a warning when a folder gives nothing (a mistyped --plugin-dir, a missing install). */
/* A name in --disable-plugins that no plugin of the path has is most likely a typo, which would
 * silently leave the plugin running. */
static void
warn_unknown_disabled(GPtrArray *plugins, const char *const *disabled)
{
    for (gsize i = 0; disabled && disabled[i]; i++) {
        gboolean found = FALSE;

        for (guint j = 0; j < plugins->len && !found; j++)
            found = g_str_equal(((const PlegPluginInfo *)plugins->pdata[j])->name, disabled[i]);
        if (!found) {
            g_autofree char *shown = pleg_log_text(disabled[i], -1, 0);

            plegd_log_warning("--disable-plugins names %s, but no plugin in the search path has "
                              "that name",
                              shown);
        }
    }
}

static void
log_plugins(PlegHost *host, const char *plugin_dir, const char *origin,
            const char *const *disabled)
{
    g_autoptr(GPtrArray) plugins = pleg_host_get_plugins(host);
    g_autofree char *shown_dir = pleg_log_text(plugin_dir, -1, 4096);
    g_autofree char *shown_origin = NULL;
    g_auto(GStrv) dirs = NULL;

    if (plugin_dir[0] == '\0') {
        g_info("plugins: none (the plugin search path is empty)");
        return;
    }
    shown_origin = pleg_log_text(origin, -1, 1024);
    g_info("plugins: searching %s (%s)", shown_dir, shown_origin);
    dirs = g_strsplit(plugin_dir, G_SEARCHPATH_SEPARATOR_S, -1);
    for (char **dir = dirs; *dir; dir++) {
        g_autofree char *problem = NULL;
        g_autofree char *shown = NULL;

        if (**dir == '\0')
            continue;
        problem = plegd_check_plugin_dir(*dir);
        if (!problem)
            continue;
        shown = pleg_log_text(*dir, -1, 4096);
        plegd_log_warning("plugin folder %s %s: no plugins from it", shown, problem);
    }

    for (guint i = 0; i < plugins->len; i++) {
        const PlegPluginInfo *info = plugins->pdata[i];
        g_autofree char *detail = plegd_describe_plugin(info);
        g_autofree char *name = pleg_log_text(info->name, -1, 0);

        if (info->state == PLEG_PLUGIN_STATE_FAILED)
            g_message("plugin %s: %s", name, detail);
        else
            g_info("plugin %s: %s", name, detail);
    }
    if (plugins->len == 0)
        plegd_log_warning("no plugins loaded from %s", shown_dir);
    warn_unknown_disabled(plugins, disabled);
}

static gboolean
on_tick(gpointer user_data)
{
    return G_SOURCE_CONTINUE;
}

/* Streams end with a line that says why, and the end of the chunked body, for clients that
 * keep up; plegd waits STREAMS_END_TIMEOUT_USEC at most. */
static void
end_streams(PlegdEvents *events)
{
    gint64 deadline = g_get_monotonic_time() + STREAMS_END_TIMEOUT_USEC;
    GSource *tick;

    plegd_events_end_all(events);
    if (plegd_events_get_n_clients(events) == 0)
        return;
    /* Wakes the loop below to look at the clock. */
    tick = g_timeout_source_new(10);
    g_source_set_callback(tick, on_tick, NULL, NULL);
    g_source_attach(tick, NULL);
    while (plegd_events_get_n_clients(events) > 0 && g_get_monotonic_time() < deadline)
        g_main_context_iteration(NULL, TRUE);
    destroy_source(&tick);
}

/* ---- the program ---- */

static void
restore_line(guint64 seq, GBytes *line, const PlegdEventKey *key, gpointer user_data)
{
    plegd_events_restore_line(user_data, seq, line,
                              plegd_event_key_new_full(key->time_ns, key->type, key->sandbox,
                                                       key->pod_namespace, key->pod_name,
                                                       key->pod_uid, key->container_name));
}

/* Places the events in the state's history and gives the PLEG the records it resumes from;
 * without a state, a fresh history whose seqs start above any a plegd on this node gave. */
static void
resume(PlegdState *state, PlegdEvents *events, PlegGeneric *pleg, guint64 test_first_seq)
{
    g_autoptr(GPtrArray) records = NULL;
    g_autoptr(GError) error = NULL;
    g_autofree char *instance = NULL;
    guint64 first_seq;

    if (!state) {
        /* The wall clock in microseconds: later than any seq handed out by an earlier plegd
         * (which started earlier and gave fewer than a seq a microsecond). */
        first_seq = test_first_seq ? test_first_seq : (guint64)g_get_real_time();
        instance = g_uuid_string_random();
        plegd_events_start_history(events, instance, first_seq, first_seq);
        return;
    }
    plegd_events_start_history(events, plegd_state_get_instance(state),
                               plegd_state_get_first_seq(state), plegd_state_get_next_seq(state));
    plegd_state_foreach_line(state, restore_line, events);
    if (!plegd_state_is_resumed(state))
        return;

    records = plegd_state_get_records(state);
    if (!pleg_generic_restore(pleg, &error))
        g_error("cannot restore the PLEG's records: %s", error->message);
    for (guint i = 0; i < records->len; i++) {
        const PlegdStateRecord *r = g_ptr_array_index(records, i);
        PlegEventDetails names = {
            .pod_namespace = r->pod_namespace,
            .pod_name = r->pod_name,
            .container_name = r->container_name,
            .attempt = r->attempt,
            .image = r->image,
        };

        if (!pleg_generic_restore_record(pleg, r->pod_uid, r->id, r->sandbox, r->state, &names,
                                         &error)) {
            g_autofree char *shown = pleg_log_text(error->message, -1, 1024);

            plegd_log_warning("state: a record is not restored: %s", shown);
            g_clear_error(&error);
        }
    }
    g_info("state: resuming history %s at seq %" G_GUINT64_FORMAT " with %u records",
           plegd_state_get_instance(state), plegd_state_get_next_seq(state), records->len);
}

static void
set_plugin_metrics(PlegHost *host)
{
    g_autoptr(GPtrArray) plugins = pleg_host_get_plugins(host);

    plegd_plugin_state_metrics_set(pleg_host_get_metrics(host), plugins);
}

static char *
describe_state(gpointer data)
{
    return plegd_state_describe(data);
}

/* The unix socket first: a second plegd started by mistake stops there, before it binds the
 * TCP address. */
static gboolean
listen_http(PlegdHttp *http, const PlegdOptions *options, GError **error)
{
    g_autofree char *url = NULL;

    plegd_http_set_tcp_events(http, options->tcp_events);
    if (options->socket_path) {
        if (!plegd_http_listen_unix(http, options->socket_path, options->socket_gid, error))
            return FALSE;
        g_info("serving the API on unix:%s", options->socket_path);
    }
    if (!options->metrics_address)
        return TRUE;
    if (!plegd_http_listen(http, options->metrics_address, &url, error))
        return FALSE;
    g_info("serving metrics on %s%s", url,
           options->tcp_events == PLEGD_TCP_EVENTS_TLS
               ? " (and /events, /pods and /status to clients with a certificate of "
                 "--client-ca-file)"
               : "");
    if (options->tcp_events == PLEGD_TCP_EVENTS_LOOPBACK_UNAUTHENTICATED)
        plegd_log_warning("serving /events, /pods and /status on %s without authentication "
                          "(--serve-events-over-tcp=loopback-unauthenticated): every local user "
                          "and every host-network pod can read them",
                          url);
    return TRUE;
}

static int
run(const PlegdOptions *options)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegdRelistMonitor) monitor = NULL;
    g_autoptr(GMainLoop) loop = NULL;
    g_autoptr(PlegHost) host = NULL;
    /* Freed after the server that shows them. */
    g_autoptr(GPtrArray) plugin_statuses = NULL;
    g_autoptr(PlegdHttp) http = NULL;
    g_autoptr(PlegdOutput) output = NULL;
    g_autoptr(PlegdEvents) events = NULL;
    g_autoptr(PlegdJournal) journal = NULL;
    g_autoptr(PlegdState) state = NULL;
    g_autofree char *period = NULL;
    g_autofree char *shown_endpoint = NULL;
    PlegHostConfig config;
    GSource *signal_source = NULL;
    int signal_fd = -1;
    App app = {0};
    gboolean started;
    g_autofree char *exe_path = NULL;
    const char *plugin_dir;
    const char *plugin_dir_origin;

    pleg_host_config_init(&config);
    config.runtime_endpoint = options->endpoint;
    config.runtime_request_timeout_usec = options->runtime_request_timeout_usec;
    config.generic.relist_period_usec = options->relist_period_usec;
    config.generic.relist_threshold_usec = options->relist_threshold_usec;
    config.generic.max_status_calls_in_flight = options->max_status_calls_in_flight;
    if (options->plugin_dir) {
        plugin_dir = options->plugin_dir;
        plugin_dir_origin = options->plugin_dir_origin ? options->plugin_dir_origin : "--plugin-dir";
    } else {
        exe_path = plegd_get_exe_path();
        plugin_dir = plegd_default_plugin_dir(exe_path, &plugin_dir_origin);
    }
    config.plugin_dir = plugin_dir;
    config.disabled_plugins = (const char *const *)options->disabled_plugins;
    config.required_plugins = (const char *const *)options->required_plugins;

    /* No thread-default context is pushed: the host's callbacks run in the default one. */
    host = pleg_host_new(&config, options->feature_gates, NULL, &error);
    if (!host) {
        /* The reason names the endpoint. */
        if (options->endpoint_origin) {
            g_autofree char *origin = pleg_log_text(options->endpoint_origin, -1, 1024);

            g_printerr("plegd: invalid container-runtime-endpoint in [" PLEGD_CONFIG_GROUP
                       "] of %s: %s\n",
                       origin, error->message);
        } else {
            g_printerr("plegd: invalid --container-runtime-endpoint: %s\n", error->message);
        }
        return EXIT_BAD_FLAG;
    }

    plegd_exporter_metrics_register(pleg_host_get_metrics(host));
    events = plegd_events_new(options->events_ring_size, options->events_max_clients,
                              pleg_host_get_metrics(host));
    if (options->state_dir) {
        g_autofree char *description = NULL;

        state = plegd_state_open(options->state_dir, options->events_ring_size,
                                 pleg_host_get_metrics(host), NULL);
        description = plegd_state_describe(state);
        g_info("state: %s", description);
    }
    resume(state, events, pleg_host_get_pleg(host), options->events_first_seq);
    if (options->http_idle_timeout_usec > 0)
        plegd_events_set_cutoff_grace(events, options->http_idle_timeout_usec);
    if (options->metrics_address || options->socket_path) {
        PlegdStatusConfig status = {
            .runtime_endpoint = options->endpoint,
            .relist_period_usec = options->relist_period_usec,
            .relist_threshold_usec = options->relist_threshold_usec,
        };

        http = plegd_http_new(host);
        plegd_http_set_events(http, events);
        plegd_http_set_status_config(http, &status);
        if (state)
            plegd_http_add_readiness_info(http, "state", describe_state, state);
        if (options->http_idle_timeout_usec > 0)
            plegd_http_set_idle_timeout(http, options->http_idle_timeout_usec);
        /* A TLS file that does not load is a bad flag, as a --config file that does not. */
        if (options->tls_cert_file &&
            !plegd_http_set_tls(http, options->tls_cert_file, options->tls_key_file,
                                options->client_ca_file, &error)) {
            g_printerr("plegd: %s\n", error->message);
            return EXIT_BAD_FLAG;
        }
        if (!listen_http(http, options, &error)) {
            plegd_log_error("%s", error->message);
            return EXIT_FAILURE;
        }
    }

    loop = g_main_loop_new(NULL, FALSE);
    monitor = plegd_relist_monitor_new(options->endpoint, NULL, NULL);
    app.loop = loop;
    app.host = host;
    app.http = http;
    app.tls = http && options->tls_cert_file;
    app.monitor = monitor;
    app.exit_status = EXIT_SUCCESS;
    /* The main thread never waits for the reader of stdout: /healthz, signals and the service
     * manager must not depend on it. */
    output = plegd_output_new(STDOUT_FILENO,
                              options->stdout_max_backlog ? options->stdout_max_backlog
                                                          : PLEGD_OUTPUT_MAX_BACKLOG,
                              NULL, on_output_error, &app);
    app.output = output;
    app.events = events;
    app.state = state;
    /* Under systemd the journal keeps the events (the shipped unit discards stdout). */
    if (plegd_events_journal_wanted(options->events_journal, g_getenv("INVOCATION_ID"))) {
        journal = plegd_journal_new(options->journal_max_queue ? options->journal_max_queue
                                                               : PLEGD_JOURNAL_MAX_QUEUE,
                                    pleg_host_get_metrics(host), NULL, NULL);
        app.journal = journal;
        g_info("sending events to the journal");
    }

    pleg_host_add_event_callback(host, on_event, &app, NULL);
    pleg_host_set_relist_callback(host, on_relist, &app, NULL);
    signal_source = add_signal_source(&app, &signal_fd, &error);
    if (!signal_source) {
        plegd_log_error("%s", error->message);
        return EXIT_FAILURE;
    }

    /* g_main_context_invoke() runs a callback on the calling thread when no thread owns the
     * context: own it from before the host starts until after it stopped, so that callbacks
     * only ever run here. */
    g_main_context_acquire(NULL);

    period = pleg_duration_format(options->relist_period_usec);
    shown_endpoint = pleg_log_text(options->endpoint, -1, 1024);
    g_info("plegd %s: relisting %s every %s", PLEG_VERSION, shown_endpoint, period);
    started = pleg_host_start(host, &error);
    log_plugins(host, plugin_dir, plugin_dir_origin, config.disabled_plugins);
    if (started && http)
        plugin_statuses = plegd_show_plugin_statuses(http, host);
    set_plugin_metrics(host);
    if (started) {
        g_main_loop_run(loop);
    } else {
        plegd_log_error("%s", error->message);
        app.exit_status = EXIT_FAILURE;
    }

    /* Shutdown ends in bounded time whatever a plugin does: no connection or health round
     * starts from here on; the host stops the PLEG first (no event after it), then each plugin,
     * abandoning one whose stop does not return (PLEG_PLUGIN_STOP_TIMEOUT_USEC). */
    app.stopping = TRUE;
    if (http)
        plegd_http_stop_accepting(http);
    plegd_relist_monitor_stopping(monitor);
    pleg_host_stop(host);
    destroy_source(&signal_source);
    close(signal_fd);

    /* Events generated before the stop are still printed, and queued relist callbacks hold
     * memory until dispatched.  With a state directory, they are written first. */
    while (g_main_context_iteration(NULL, FALSE))
        ;
    if (state) {
        if (app.commit_source) {
            destroy_source(&app.commit_source);
            on_commit(&app);
        }
        if (!plegd_state_close(state, STATE_CLOSE_TIMEOUT_USEC))
            g_message("the state directory does not take events: the last ones are not "
                      "published, and will be found again at the next start");
        while (g_main_context_iteration(NULL, FALSE))
            ;
    }
    end_streams(events);
    if (!app.output_failed && !plegd_output_flush(output, STOP_FLUSH_TIMEOUT_USEC)) {
        g_autofree char *size = g_format_size(plegd_output_get_backlog(output));

        g_message("stdout is not being read: dropping %s of events", size);
    }
    g_clear_pointer(&output, plegd_output_free);
    if (journal && !plegd_journal_flush(journal, STOP_FLUSH_TIMEOUT_USEC))
        g_message("the journal does not take events: dropping %u of them",
                  plegd_journal_get_queued(journal));
    g_clear_pointer(&journal, plegd_journal_free);
    /* A health round in a checker that does not return still reaches the host's checkers: the
     * host is then left allocated (the process ends in a moment), never freed under it. */
    if (http && !plegd_http_wait_rounds(http, HEALTH_ROUNDS_WAIT_USEC)) {
        g_message("a health checker has not returned: leaving the host allocated at exit");
        abandoned_host = g_steal_pointer(&host);
    }
    g_clear_pointer(&http, plegd_http_free);
    g_clear_pointer(&events, plegd_events_free);
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
    g_auto(PlegdOptions) options = {0};
    g_autoptr(GError) error = NULL;
    gboolean stdout_closed = open_standard_fds();
    sigset_t signals;

    /* First, before any thread exists (see handled_signals()). */
    handled_signals(&signals);
    pthread_sigmask(SIG_BLOCK, &signals, NULL);
    setlocale(LC_ALL, "");
    plegd_log_init();

    if (!plegd_options_parse(&argc, &argv, &options, &error)) {
        /* What was logged while reading them (a --config warning) comes first. */
        plegd_log_start(PLEGD_LOG_FORMAT_TEXT, 0);
        g_printerr("plegd: %s\n", error->message);
        g_printerr("Run 'plegd --help' to list the options.\n");
        return EXIT_BAD_FLAG;
    }
    plegd_log_start(options.logging_format, options.verbosity);
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
