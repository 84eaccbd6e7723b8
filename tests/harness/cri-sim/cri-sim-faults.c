/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cri-sim: fault injection.  Per-method delays and scripted failures (the rules the methods
 * consult when a request arrives), list streams that fail part way, and a runtime that goes away
 * (its socket removed or left stale) and comes back.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "cri-sim-private.h"

/* ---- delays and failures of a method ---- */

static Rule *
rule_get(CriSim *self, const char *method)
{
    Rule *rule = g_hash_table_lookup(self->rules, method);

    if (!rule) {
        rule = g_new0(Rule, 1);
        g_hash_table_insert(self->rules, g_strdup(method), rule);
    }
    return rule;
}

int
sim_rule_delay(CriSim *self, const char *method)
{
    Rule *rule = g_hash_table_lookup(self->rules, method);

    if (rule && rule->delay_ms != 0)
        return rule->delay_ms;
    if (g_str_equal(method, EVENTS_METHOD))
        return 0;
    rule = g_hash_table_lookup(self->rules, "*");
    return rule ? rule->delay_ms : 0;
}

/* Consumes one scripted failure of @method, if any. */
int
sim_rule_take_failure(CriSim *self, const char *method)
{
    const char *keys[] = {method, "*"};

    for (gsize i = 0; i < G_N_ELEMENTS(keys); i++) {
        Rule *rule = g_hash_table_lookup(self->rules, keys[i]);
        int code;

        if (!rule || rule->fail_code == 0)
            continue;
        code = rule->fail_code;
        if (rule->fail_times > 0 && --rule->fail_times == 0)
            rule->fail_code = 0;
        return code;
    }
    return 0;
}

void
cri_sim_set_delay(CriSim *self, const char *method, int delay_ms)
{
    g_mutex_lock(&self->lock);
    rule_get(self, method)->delay_ms = delay_ms;
    g_mutex_unlock(&self->lock);
}

void
cri_sim_set_fail(CriSim *self, const char *method, int code, int times)
{
    Rule *rule;

    g_mutex_lock(&self->lock);
    rule = rule_get(self, method);
    rule->fail_code = times == 0 ? 0 : code;
    rule->fail_times = times;
    g_mutex_unlock(&self->lock);
}

/* ---- list streams that fail part way ---- */

void
cri_sim_set_list_stream_failure(CriSim *self, int after_messages, int status)
{
    g_mutex_lock(&self->lock);
    self->list_fail_after = status == 0 ? -1 : MAX(after_messages, 0);
    self->list_fail_code = status;
    g_mutex_unlock(&self->lock);
}

/* ---- going away ---- */

/* Leaves a socket file nobody listens on, as a killed server does. */
static void
leave_stale_socket(CriSim *self)
{
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    int fd;

    if (g_file_test(self->socket_path, G_FILE_TEST_EXISTS))
        return;
    if (strlen(self->socket_path) >= sizeof(address.sun_path))
        return;
    strcpy(address.sun_path, self->socket_path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    if (bind(fd, (struct sockaddr *)&address, sizeof(address)) < 0)
        g_debug("cannot leave a stale socket at %s: %s", self->socket_path, g_strerror(errno));
    close(fd);
}

gboolean
cri_sim_go_away(CriSim *self, int away_ms, gboolean stale_socket, GError **error)
{
    g_mutex_lock(&self->lock);
    if (self->state != SERVER_SERVING) {
        g_mutex_unlock(&self->lock);
        g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_STATE, "not serving");
        return FALSE;
    }
    sim_server_stop(self);
    if (stale_socket)
        leave_stale_socket(self);
    else
        g_unlink(self->socket_path);
    if (self->state == SERVER_AWAY)
        self->come_back_at =
            away_ms < 0 ? 0 : MAX(g_get_monotonic_time() + (gint64)away_ms * 1000, 1);
    g_mutex_unlock(&self->lock);
    return TRUE;
}

gboolean
cri_sim_come_back(CriSim *self, GError **error)
{
    gboolean ok = TRUE;

    g_mutex_lock(&self->lock);
    while (self->state == SERVER_STOPPING)
        g_cond_wait(&self->cond, &self->lock);
    if (self->state == SERVER_AWAY)
        ok = sim_server_start(self, error);
    g_mutex_unlock(&self->lock);
    return ok;
}
