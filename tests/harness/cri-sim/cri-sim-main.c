/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cri-sim: the standalone fake CRI runtime.
 *
 *   cri-sim --socket PATH [--script FILE]
 *
 * Prints "ready" on stdout once it listens.  Without --script it reads commands from stdin and
 * answers each with "ok" or "error: MESSAGE" (a line that is not UTF-8 included); end of input
 * quits, and a read error exits with status 1 after saying so on stderr.  With --script it runs the
 * file (sleeps included) and then keeps serving until "quit", SIGINT or SIGTERM; a failing command
 * prints "cri-sim: FILE:LINE: MESSAGE" on stderr and exits with status 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glib-unix.h>
#include <grpc/grpc.h>

#include "cri-sim.h"

typedef struct {
    CriSim *sim;
    GMainLoop *loop;
    int exit_status;
    /* script mode */
    char *script_path;
    char **lines;
    guint next_line;
    GSource *sleep_source; /* the next step: idle or a sleep's timeout */
    /* stdin mode */
    GIOChannel *input;
    GSource *input_source;
} App;

static void
app_quit(App *app, int exit_status)
{
    if (exit_status != 0)
        app->exit_status = exit_status;
    g_main_loop_quit(app->loop);
}

static gboolean
on_signal(gpointer data)
{
    app_quit(data, 0);
    return G_SOURCE_CONTINUE;
}

static gboolean script_step(gpointer data);

/* Runs script lines until a sleep (resumed from a timeout, so signals are served meanwhile), a
 * quit, an error or the end. */
static gboolean
script_step(gpointer data)
{
    App *app = data;

    g_clear_pointer(&app->sleep_source, g_source_unref);
    while (app->lines[app->next_line]) {
        guint number = app->next_line + 1;
        const char *line = app->lines[app->next_line++];
        g_auto(GStrv) words = g_strsplit_set(g_strstrip((char *)line), " \t", -1);
        g_autoptr(GError) error = NULL;
        gboolean quit = FALSE;
        guint64 ms;

        if (words[0] && g_str_equal(words[0], "sleep") && words[1] && !words[2] &&
            g_ascii_string_to_unsigned(words[1], 10, 0, G_MAXINT32, &ms, NULL)) {
            app->sleep_source = g_timeout_source_new(ms);
            g_source_set_callback(app->sleep_source, script_step, app, NULL);
            g_source_attach(app->sleep_source, NULL);
            return G_SOURCE_REMOVE;
        }
        if (!cri_sim_run_command(app->sim, line, &quit, &error)) {
            g_printerr("cri-sim: %s:%u: %s\n", app->script_path, number, error->message);
            app_quit(app, EXIT_FAILURE);
            return G_SOURCE_REMOVE;
        }
        if (quit) {
            app_quit(app, 0);
            return G_SOURCE_REMOVE;
        }
    }
    return G_SOURCE_REMOVE;
}

static gboolean
on_input(GIOChannel *channel, GIOCondition condition, gpointer data)
{
    App *app = data;

    for (;;) {
        g_autofree char *line = NULL;
        g_autoptr(GError) error = NULL;
        gboolean quit = FALSE;
        GIOStatus status = g_io_channel_read_line(channel, &line, NULL, NULL, &error);

        if (status == G_IO_STATUS_AGAIN)
            return G_SOURCE_CONTINUE;
        if (status != G_IO_STATUS_NORMAL) {
            if (status == G_IO_STATUS_ERROR)
                g_printerr("cri-sim: reading commands from stdin: %s\n", error->message);
            app_quit(app, status == G_IO_STATUS_EOF ? 0 : EXIT_FAILURE);
            g_clear_pointer(&app->input_source, g_source_unref);
            return G_SOURCE_REMOVE;
        }
        if (cri_sim_run_command(app->sim, line, &quit, &error))
            g_print("ok\n");
        else
            g_print("error: %s\n", error->message);
        if (quit) {
            app_quit(app, 0);
            g_clear_pointer(&app->input_source, g_source_unref);
            return G_SOURCE_REMOVE;
        }
    }
}

int
main(int argc, char **argv)
{
    g_autofree char *socket_path = NULL;
    g_autofree char *script_path = NULL;
    g_autofree char *contents = NULL;
    g_autoptr(GOptionContext) context = NULL;
    g_autoptr(GError) error = NULL;
    const GOptionEntry entries[] = {
        {"socket", 0, 0, G_OPTION_ARG_FILENAME, &socket_path, "Unix socket to serve on", "PATH"},
        {"script", 0, 0, G_OPTION_ARG_FILENAME, &script_path,
         "Run the commands of FILE instead of reading stdin", "FILE"},
        {NULL},
    };
    App app = {0};
    guint sigint, sigterm;

    setvbuf(stdout, NULL, _IOLBF, 0);
    context = g_option_context_new("- a scriptable fake CRI runtime");
    g_option_context_add_main_entries(context, entries, NULL);
    g_option_context_set_description(context, cri_sim_command_help());
    if (!g_option_context_parse(context, &argc, &argv, &error)) {
        g_printerr("cri-sim: %s\n", error->message);
        return 2;
    }
    if (!socket_path || argc > 1) {
        g_printerr("cri-sim: usage: cri-sim --socket PATH [--script FILE]\n");
        return 2;
    }
    if (script_path && !g_file_get_contents(script_path, &contents, NULL, &error)) {
        g_printerr("cri-sim: %s\n", error->message);
        return 2;
    }

    /* Our own reference, so the last one is dropped with grpc_shutdown_blocking() below. */
    grpc_init();
    app.sim = cri_sim_new(socket_path, &error);
    if (!app.sim) {
        g_printerr("cri-sim: %s\n", error->message);
        grpc_shutdown_blocking();
        return 1;
    }
    app.loop = g_main_loop_new(NULL, FALSE);
    sigint = g_unix_signal_add(SIGINT, on_signal, &app);
    sigterm = g_unix_signal_add(SIGTERM, on_signal, &app);
    g_print("ready\n");

    if (script_path) {
        app.script_path = script_path;
        app.lines = g_strsplit(contents, "\n", -1);
        app.sleep_source = g_idle_source_new();
        g_source_set_callback(app.sleep_source, script_step, &app, NULL);
        g_source_attach(app.sleep_source, NULL);
    } else {
        app.input = g_io_channel_unix_new(0);
        /* Lines as bytes: a command that is not UTF-8 is answered with an error, like any
         * other malformed command, instead of ending the input as a conversion error. */
        g_io_channel_set_encoding(app.input, NULL, NULL);
        g_io_channel_set_flags(app.input, G_IO_FLAG_NONBLOCK, NULL);
        app.input_source = g_io_create_watch(app.input, G_IO_IN | G_IO_HUP | G_IO_ERR);
        g_source_set_callback(app.input_source, (GSourceFunc)(void (*)(void))on_input, &app, NULL);
        g_source_attach(app.input_source, NULL);
    }

    g_main_loop_run(app.loop);

    if (app.sleep_source) {
        g_source_destroy(app.sleep_source);
        g_source_unref(app.sleep_source);
    }
    if (app.input_source) {
        g_source_destroy(app.input_source);
        g_source_unref(app.input_source);
    }
    g_clear_pointer(&app.input, g_io_channel_unref);
    g_strfreev(app.lines);
    g_source_remove(sigint);
    g_source_remove(sigterm);
    g_main_loop_unref(app.loop);
    cri_sim_free(app.sim);
    grpc_shutdown_blocking();
    return app.exit_status;
}
