/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shim-embed: libpleg's plugin host embedded in a C program, without plegd.
 *
 *   shim-embed ENDPOINT SECONDS [PLUGIN_DIR]
 *
 * Runs the host against the CRI runtime at ENDPOINT for SECONDS (or until SIGINT/SIGTERM) and
 * prints one line per PodLifecycleEvent: "<type> <pod uid> <namespace>/<pod name> <container name,
 * or "sandbox"> <container id> <relist source>".
 * PLUGIN_DIR "" loads no plugin; without it libpleg's plugin directory is used.
 *
 * The host runs in a GMainContext of the program's own, pushed as this thread's default, not
 * in the process-wide default context: a shim can give it any thread it likes.
 */
#include <glib-unix.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <pleg/pleg-host.h>

typedef struct {
    GMainContext *context;
    GMainLoop *loop;
    guint n_events;
} Shim;

static void
on_event(PlegPodLifecycleEvent *event, gpointer user_data)
{
    Shim *shim = user_data;
    /* The names come with the event (libpleg 0.2): no CRI call of the shim's own. */
    const PlegEventDetails *details = pleg_pod_lifecycle_event_get_details(event);

    /* The host calls back in the context it was given, never in the global default one. */
    g_assert(g_main_context_is_owner(shim->context));
    printf("%s %s %s/%s %s %s %s\n", pleg_pod_lifecycle_event_type_to_string(event->type),
           event->pod_uid, details->pod_namespace ? details->pod_namespace : "-",
           details->pod_name ? details->pod_name : "-",
           details->sandbox ? "sandbox" : details->container_name ? details->container_name : "-",
           event->container_id ? event->container_id : "-",
           pleg_relist_source_to_string(event->relist_source));
    fflush(stdout);
    shim->n_events++;
}

static void
on_relist(const GError *error, gint64 relist_time_ns, gpointer user_data)
{
    if (error)
        fprintf(stderr, "shim-embed: relist failed: %s\n", error->message);
}

static gboolean
on_quit(gpointer user_data)
{
    Shim *shim = user_data;

    g_main_loop_quit(shim->loop);
    return G_SOURCE_CONTINUE;
}

static GSource *
add_source(GSource *source, Shim *shim)
{
    g_source_set_callback(source, on_quit, shim, NULL);
    g_source_attach(source, shim->context);
    return source;
}

int
main(int argc, char **argv)
{
    g_autoptr(PlegFeatureGates) gates = pleg_feature_gates_new();
    g_autoptr(GError) error = NULL;
    GSource *sources[3];
    PlegHostConfig config;
    PlegHost *host;
    Shim shim = {0};
    guint64 seconds;

    if (argc < 3 || argc > 4 || !g_ascii_string_to_unsigned(argv[2], 10, 1, 3600, &seconds, NULL)) {
        fprintf(stderr, "usage: shim-embed ENDPOINT SECONDS [PLUGIN_DIR]\n");
        return 2;
    }

    shim.context = g_main_context_new();
    g_main_context_push_thread_default(shim.context);
    shim.loop = g_main_loop_new(shim.context, FALSE);

    pleg_host_config_init(&config);
    config.runtime_endpoint = argv[1];
    config.plugin_dir = argc == 4 ? argv[3] : NULL;
    /* The plugins' own gates join before anything sets gates (a shim would parse its flags or
     * its configuration's [FeatureGates] here). */
    if (!pleg_feature_gates_register_plugins(gates, config.plugin_dir, &error)) {
        fprintf(stderr, "shim-embed: %s\n", error->message);
        return 1;
    }
    host = pleg_host_new(&config, gates, shim.context, &error);
    if (!host) {
        fprintf(stderr, "shim-embed: %s\n", error->message);
        return 1;
    }
    pleg_host_add_event_callback(host, on_event, &shim, NULL);
    pleg_host_set_relist_callback(host, on_relist, &shim, NULL);

    sources[0] = add_source(g_timeout_source_new_seconds((guint)seconds), &shim);
    sources[1] = add_source(g_unix_signal_source_new(SIGINT), &shim);
    sources[2] = add_source(g_unix_signal_source_new(SIGTERM), &shim);

    if (pleg_host_start(host, &error)) {
        g_main_loop_run(shim.loop);
    } else {
        fprintf(stderr, "shim-embed: %s\n", error->message);
    }

    pleg_host_stop(host);
    pleg_host_free(host);
    for (gsize i = 0; i < G_N_ELEMENTS(sources); i++) {
        g_source_destroy(sources[i]);
        g_source_unref(sources[i]);
    }
    g_main_loop_unref(shim.loop);
    g_main_context_pop_thread_default(shim.context);
    g_main_context_unref(shim.context);
    fprintf(stderr, "shim-embed: %u events\n", shim.n_events);
    return error ? 1 : 0;
}
