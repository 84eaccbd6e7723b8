/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cri-sim: the text commands (cri-sim.h lists them), on top of the C API.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cri-sim.h"

static const char help[] =
    "Commands (one a line, '#' starts a comment; doc/cri-sim.md describes each):\n"
    "  pod UID [NAME]                 add a READY pod sandbox \"sb-UID\"\n"
    "  container POD_UID CID [NAME]   add a CREATED container (event CREATED)\n"
    "  start CID                      CREATED -> RUNNING (event STARTED)\n"
    "  exit CID CODE [REASON]         -> EXITED with CODE (event STOPPED)\n"
    "  rm CID                         remove a container (event DELETED)\n"
    "  stopp UID                      stop a pod: running containers exit 137\n"
    "  rmp UID                        stop and remove a pod and its containers\n"
    "  event TYPE CID [FLAG...]       emit an event, no state change; TYPE: CREATED, STARTED,\n"
    "                                 STOPPED, DELETED; FLAG: no-sandbox, no-metadata,\n"
    "                                 empty-uid, unknown-id, no-containers, old-created-at=NS\n"
    "  end-stream ok|error CODE [MSG]\n"
    "                                 end every open GetContainerEvents stream\n"
    "  events-unimplemented on|off    GetContainerEvents answers UNIMPLEMENTED\n"
    "  auto-events on|off             events on state changes (default on)\n"
    "  sandbox-events on|off          events for sandboxes too (default off)\n"
    "  away MS [stale-socket]         stop serving for MS ms (-1: until 'back'); streams end\n"
    "                                 UNAVAILABLE; the socket is removed or left stale\n"
    "  back                           serve again now\n"
    "  delay METHOD MS                answer METHOD ('*': every unary method and list\n"
    "                                 stream) after MS ms; -1: never; 0: clear\n"
    "  fail METHOD CODE [TIMES]       answer METHOD with gRPC status CODE (TIMES times;\n"
    "                                 default until cleared with CODE 0)\n"
    "  deliver-one on|off             each event to one subscriber, round-robin\n"
    "  bulk N [CONTAINERS [BYTES]]    add N pods bulk-K with CONTAINERS (default 1) RUNNING\n"
    "                                 containers bulk-K-I, without events; each listed with\n"
    "                                 an annotation of BYTES bytes\n"
    "  list-streams on|unimplemented  StreamPodSandboxes and StreamContainers served (default)\n"
    "                                 or answered UNIMPLEMENTED\n"
    "  list-batch N                   items a list stream message carries (default 5000)\n"
    "  list-stream-fail AFTER CODE    list streams end with status CODE after AFTER messages\n"
    "                                 (at the end if fewer); CODE 0 clears\n"
    "  wait-subscribers N [MS]        pause until exactly N event subscribers (fails after\n"
    "                                 MS ms, default 10000)\n"
    "  sleep MS                       pause\n"
    "  quit                           stop\n";

const char *
cri_sim_command_help(void)
{
    return help;
}

static gboolean
syntax_error(GError **error, const char *command, const char *usage)
{
    g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_SYNTAX, "usage: %s %s", command, usage);
    return FALSE;
}

static gboolean
parse_int(const char *text, gint64 min, gint64 max, gint64 *ret_value, GError **error)
{
    g_autoptr(GError) local = NULL;
    gint64 value;

    if (!g_ascii_string_to_signed(text, 10, min, max, &value, &local)) {
        g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_SYNTAX, "\"%s\": %s", text,
                    local->message);
        return FALSE;
    }
    *ret_value = value;
    return TRUE;
}

static gboolean
parse_switch(const char *text, gboolean *ret_value, GError **error)
{
    if (g_strcmp0(text, "on") == 0)
        *ret_value = TRUE;
    else if (g_strcmp0(text, "off") == 0)
        *ret_value = FALSE;
    else {
        g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_SYNTAX, "\"%s\": expected on or off",
                    text ? text : "");
        return FALSE;
    }
    return TRUE;
}

static gboolean
parse_event_type(const char *text, CriSimEventType *ret_type, GError **error)
{
    static const char *const names[] = {"CREATED", "STARTED", "STOPPED", "DELETED"};

    for (guint i = 0; i < G_N_ELEMENTS(names); i++) {
        g_autofree char *long_name = g_strdup_printf("CONTAINER_%s_EVENT", names[i]);

        if (g_ascii_strcasecmp(text, names[i]) == 0 || g_ascii_strcasecmp(text, long_name) == 0) {
            *ret_type = i;
            return TRUE;
        }
    }
    g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_SYNTAX,
                "\"%s\": expected CREATED, STARTED, STOPPED or DELETED", text);
    return FALSE;
}

static gboolean
run_event(CriSim *sim, char **args, guint n_args, GError **error)
{
    CriSimEvent event = {0};

    if (n_args < 2)
        return syntax_error(error, "event", "TYPE CID [FLAG...]");
    if (!parse_event_type(args[0], &event.type, error))
        return FALSE;
    event.container_id = args[1];
    for (guint i = 2; i < n_args; i++) {
        const char *flag = args[i];

        if (g_str_equal(flag, "no-sandbox"))
            event.flags |= CRI_SIM_EVENT_NO_SANDBOX;
        else if (g_str_equal(flag, "no-metadata"))
            event.flags |= CRI_SIM_EVENT_NO_METADATA;
        else if (g_str_equal(flag, "empty-uid"))
            event.flags |= CRI_SIM_EVENT_EMPTY_UID;
        else if (g_str_equal(flag, "unknown-id"))
            event.flags |= CRI_SIM_EVENT_UNKNOWN_ID;
        else if (g_str_equal(flag, "no-containers"))
            event.flags |= CRI_SIM_EVENT_NO_CONTAINERS;
        else if (g_str_has_prefix(flag, "old-created-at=") || g_str_has_prefix(flag, "created-at=")) {
            if (!parse_int(strchr(flag, '=') + 1, 1, G_MAXINT64, &event.created_at_ns, error))
                return FALSE;
        } else {
            g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_SYNTAX, "unknown event flag \"%s\"",
                        flag);
            return FALSE;
        }
    }
    cri_sim_emit(sim, &event);
    return TRUE;
}

gboolean
cri_sim_run_command(CriSim *sim, const char *line, gboolean *ret_quit, GError **error)
{
    g_autofree char *text = g_strdup(line);
    g_auto(GStrv) words = NULL;
    g_autoptr(GPtrArray) argv = g_ptr_array_new();
    const char *command;
    char **args;
    guint n;
    gint64 a, b;
    gboolean on;
    char *hash = strchr(text, '#');

    /* Ids and names end up in protobuf strings, which must be UTF-8. */
    if (!g_utf8_validate(line, -1, NULL)) {
        g_set_error_literal(error, CRI_SIM_ERROR, CRI_SIM_ERROR_SYNTAX,
                            "a command is UTF-8 text, and this line is not");
        return FALSE;
    }
    if (hash)
        *hash = '\0';
    words = g_strsplit_set(g_strstrip(text), " \t", -1);
    for (guint i = 0; words[i]; i++)
        if (*words[i])
            g_ptr_array_add(argv, words[i]);
    if (argv->len == 0)
        return TRUE;
    n = argv->len - 1;
    g_ptr_array_add(argv, NULL);
    command = argv->pdata[0];
    args = (char **)argv->pdata + 1;

    if (g_str_equal(command, "pod")) {
        if (n < 1 || n > 2)
            return syntax_error(error, command, "UID [NAME]");
        return cri_sim_add_pod(sim, args[0], n > 1 ? args[1] : NULL, error);
    }
    if (g_str_equal(command, "container")) {
        if (n < 2 || n > 3)
            return syntax_error(error, command, "POD_UID CID [NAME]");
        return cri_sim_add_container(sim, args[0], args[1], n > 2 ? args[2] : NULL, error);
    }
    if (g_str_equal(command, "start")) {
        if (n != 1)
            return syntax_error(error, command, "CID");
        return cri_sim_start_container(sim, args[0], error);
    }
    if (g_str_equal(command, "exit")) {
        g_autofree char *reason = NULL;

        if (n < 2)
            return syntax_error(error, command, "CID CODE [REASON]");
        if (!parse_int(args[1], G_MININT32, G_MAXINT32, &a, error))
            return FALSE;
        if (n > 2)
            reason = g_strjoinv(" ", args + 2);
        return cri_sim_exit_container(sim, args[0], (int)a, reason, error);
    }
    if (g_str_equal(command, "rm")) {
        if (n != 1)
            return syntax_error(error, command, "CID");
        return cri_sim_remove_container(sim, args[0], error);
    }
    if (g_str_equal(command, "stopp")) {
        if (n != 1)
            return syntax_error(error, command, "UID");
        return cri_sim_stop_pod(sim, args[0], error);
    }
    if (g_str_equal(command, "rmp")) {
        if (n != 1)
            return syntax_error(error, command, "UID");
        return cri_sim_remove_pod(sim, args[0], error);
    }
    if (g_str_equal(command, "event"))
        return run_event(sim, args, n, error);
    if (g_str_equal(command, "end-stream")) {
        g_autofree char *message = NULL;

        if (n == 1 && g_str_equal(args[0], "ok")) {
            cri_sim_end_streams(sim, 0, NULL);
            return TRUE;
        }
        if (n < 2 || !g_str_equal(args[0], "error"))
            return syntax_error(error, command, "ok|error CODE [MESSAGE]");
        if (!parse_int(args[1], 1, 16, &a, error))
            return FALSE;
        if (n > 2)
            message = g_strjoinv(" ", args + 2);
        cri_sim_end_streams(sim, (int)a, message);
        return TRUE;
    }
    if (g_str_equal(command, "events-unimplemented") || g_str_equal(command, "auto-events") ||
        g_str_equal(command, "sandbox-events") || g_str_equal(command, "deliver-one")) {
        if (n != 1)
            return syntax_error(error, command, "on|off");
        if (!parse_switch(args[0], &on, error))
            return FALSE;
        if (g_str_equal(command, "events-unimplemented"))
            cri_sim_set_events_unimplemented(sim, on);
        else if (g_str_equal(command, "auto-events"))
            cri_sim_set_auto_events(sim, on);
        else if (g_str_equal(command, "sandbox-events"))
            cri_sim_set_sandbox_events(sim, on);
        else
            cri_sim_set_deliver_one(sim, on);
        return TRUE;
    }
    if (g_str_equal(command, "away")) {
        if (n < 1 || n > 2 || (n == 2 && !g_str_equal(args[1], "stale-socket")))
            return syntax_error(error, command, "MS [stale-socket]");
        if (!parse_int(args[0], -1, G_MAXINT32, &a, error))
            return FALSE;
        return cri_sim_go_away(sim, (int)a, n == 2, error);
    }
    if (g_str_equal(command, "back")) {
        if (n != 0)
            return syntax_error(error, command, "");
        return cri_sim_come_back(sim, error);
    }
    if (g_str_equal(command, "delay")) {
        if (n != 2)
            return syntax_error(error, command, "METHOD MS");
        if (!parse_int(args[1], -1, G_MAXINT32, &a, error))
            return FALSE;
        cri_sim_set_delay(sim, args[0], (int)a);
        return TRUE;
    }
    if (g_str_equal(command, "fail")) {
        if (n < 2 || n > 3)
            return syntax_error(error, command, "METHOD CODE [TIMES]");
        if (!parse_int(args[1], 0, 16, &a, error))
            return FALSE;
        b = -1;
        if (n > 2 && !parse_int(args[2], 1, G_MAXINT32, &b, error))
            return FALSE;
        cri_sim_set_fail(sim, args[0], (int)a, (int)b);
        return TRUE;
    }
    if (g_str_equal(command, "bulk")) {
        gint64 bytes = 0;

        if (n < 1 || n > 3)
            return syntax_error(error, command, "N [CONTAINERS [BYTES]]");
        if (!parse_int(args[0], 0, 1000000, &a, error))
            return FALSE;
        b = 1;
        if (n > 1 && !parse_int(args[1], 0, 1000, &b, error))
            return FALSE;
        if (n > 2 && !parse_int(args[2], 0, 1024 * 1024, &bytes, error))
            return FALSE;
        cri_sim_bulk_full(sim, (guint)a, (guint)b, (guint)bytes);
        return TRUE;
    }
    if (g_str_equal(command, "list-streams")) {
        if (n != 1 || (!g_str_equal(args[0], "on") && !g_str_equal(args[0], "unimplemented")))
            return syntax_error(error, command, "on|unimplemented");
        cri_sim_set_list_streams_unimplemented(sim, g_str_equal(args[0], "unimplemented"));
        return TRUE;
    }
    if (g_str_equal(command, "list-batch")) {
        if (n != 1)
            return syntax_error(error, command, "N");
        if (!parse_int(args[0], 1, G_MAXINT32, &a, error))
            return FALSE;
        cri_sim_set_list_batch(sim, (guint)a);
        return TRUE;
    }
    if (g_str_equal(command, "list-stream-fail")) {
        if (n != 2)
            return syntax_error(error, command, "AFTER CODE");
        if (!parse_int(args[0], 0, G_MAXINT32, &a, error) || !parse_int(args[1], 0, 16, &b, error))
            return FALSE;
        cri_sim_set_list_stream_failure(sim, (int)a, (int)b);
        return TRUE;
    }
    if (g_str_equal(command, "wait-subscribers")) {
        if (n < 1 || n > 2)
            return syntax_error(error, command, "N [MS]");
        if (!parse_int(args[0], 0, G_MAXINT32, &a, error))
            return FALSE;
        b = 10000;
        if (n > 1 && !parse_int(args[1], 0, G_MAXINT32, &b, error))
            return FALSE;
        if (!cri_sim_wait_subscribers(sim, (guint)a, (int)b)) {
            g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_STATE,
                        "%u subscribers, not %" G_GINT64_FORMAT ", after %" G_GINT64_FORMAT " ms",
                        cri_sim_get_n_subscribers(sim), a, b);
            return FALSE;
        }
        return TRUE;
    }
    if (g_str_equal(command, "sleep")) {
        if (n != 1)
            return syntax_error(error, command, "MS");
        if (!parse_int(args[0], 0, G_MAXINT32, &a, error))
            return FALSE;
        g_usleep(a * 1000);
        return TRUE;
    }
    if (g_str_equal(command, "quit")) {
        if (n != 0)
            return syntax_error(error, command, "");
        if (ret_quit)
            *ret_quit = TRUE;
        return TRUE;
    }
    g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_SYNTAX, "unknown command \"%s\"", command);
    return FALSE;
}

gboolean
cri_sim_run_script(CriSim *sim, const char *path, gboolean *ret_quit, GError **error)
{
    g_autofree char *contents = NULL;
    g_auto(GStrv) lines = NULL;

    if (!g_file_get_contents(path, &contents, NULL, error))
        return FALSE;
    lines = g_strsplit(contents, "\n", -1);
    for (guint i = 0; lines[i]; i++) {
        g_autoptr(GError) local = NULL;
        gboolean quit = FALSE;

        if (!cri_sim_run_command(sim, lines[i], &quit, &local)) {
            g_set_error(error, CRI_SIM_ERROR, local->code, "%s:%u: %s", path, i + 1,
                        local->message);
            return FALSE;
        }
        if (quit) {
            if (ret_quit)
                *ret_quit = TRUE;
            break;
        }
    }
    return TRUE;
}
