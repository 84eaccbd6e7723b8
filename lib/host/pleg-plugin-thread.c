/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Plugin threads: each plugin runs on a thread of its own with its own GMainContext, and
 * its init, start, stop and free run there.
 */
#include <pleg/pleg-host.h>

#include "pleg-host-private.h"

typedef void (*PluginFunc)(PluginEntry *entry, gpointer data);

/* Shared by the caller and the plugin's thread: a caller that stops waiting (a plugin whose
 * stop does not return) lets go of it, and the plugin's thread frees it when the call ends. */
typedef struct {
    gatomicrefcount refs;
    PluginEntry *entry;
    PluginFunc func;
    gpointer data;
    GMutex lock;
    GCond cond;
    gboolean done;
} PluginCall;

static void
plugin_call_unref(PluginCall *call)
{
    if (!g_atomic_ref_count_dec(&call->refs))
        return;
    g_cond_clear(&call->cond);
    g_mutex_clear(&call->lock);
    g_free(call);
}

static gboolean
plugin_call_dispatch(gpointer user_data)
{
    PluginCall *call = user_data;

    call->func(call->entry, call->data);
    g_mutex_lock(&call->lock);
    call->done = TRUE;
    g_cond_signal(&call->cond);
    g_mutex_unlock(&call->lock);
    return G_SOURCE_REMOVE;
}

/* Runs @func in the plugin's thread and waits for it, until @deadline (monotonic usec; -1:
 * for as long as it takes).  Returns: whether it ran to its end; when not, @func may still
 * run or finish later, so @data must then outlive the caller.  A source rather than
 * g_main_context_invoke(), which would run @func right here if the plugin thread had not
 * acquired its context yet. */
static gboolean
run_in_plugin_thread(PluginEntry *entry, PluginFunc func, gpointer data, gint64 deadline)
{
    PluginCall *call = g_new0(PluginCall, 1);
    GSource *source;
    gboolean done;

    g_atomic_ref_count_init(&call->refs);
    call->entry = entry;
    call->func = func;
    call->data = data;
    g_mutex_init(&call->lock);
    g_cond_init(&call->cond);

    source = g_idle_source_new();
    g_source_set_priority(source, G_PRIORITY_DEFAULT);
    g_atomic_ref_count_inc(&call->refs);
    g_source_set_callback(source, plugin_call_dispatch, call, (GDestroyNotify)plugin_call_unref);
    g_source_attach(source, entry->context);
    g_source_unref(source);

    g_mutex_lock(&call->lock);
    while (!call->done) {
        if (deadline < 0)
            g_cond_wait(&call->cond, &call->lock);
        else if (!g_cond_wait_until(&call->cond, &call->lock, deadline))
            break;
    }
    done = call->done;
    g_mutex_unlock(&call->lock);
    plugin_call_unref(call);
    return done;
}

static gpointer
plugin_thread(gpointer user_data)
{
    PluginEntry *entry = user_data;

    g_main_context_push_thread_default(entry->context);
    g_main_loop_run(entry->loop);
    g_main_context_pop_thread_default(entry->context);
    return NULL;
}

static gboolean
quit_loop(gpointer user_data)
{
    g_main_loop_quit(user_data);
    return G_SOURCE_REMOVE;
}

static gboolean
start_plugin_thread(PluginEntry *entry, GError **error)
{
    g_autofree char *thread_name = g_strdup_printf("pleg-%s", entry->info.name);

    entry->context = g_main_context_new();
    entry->loop = g_main_loop_new(entry->context, FALSE);
    entry->thread = g_thread_try_new(thread_name, plugin_thread, entry, error);
    if (!entry->thread) {
        g_clear_pointer(&entry->loop, g_main_loop_unref);
        g_clear_pointer(&entry->context, g_main_context_unref);
        return FALSE;
    }
    return TRUE;
}

static void
stop_plugin_thread(PluginEntry *entry)
{
    GSource *source;

    if (!entry->thread || entry->abandoned)
        return;

    /* Posted as a source: processed only once the loop runs, so it cannot be lost. */
    source = g_idle_source_new();
    g_source_set_priority(source, G_PRIORITY_LOW);
    g_source_set_callback(source, quit_loop, entry->loop, NULL);
    g_source_attach(source, entry->context);
    g_source_unref(source);
    g_thread_join(g_steal_pointer(&entry->thread));
    g_clear_pointer(&entry->loop, g_main_loop_unref);
    g_clear_pointer(&entry->context, g_main_context_unref);
}

typedef struct {
    gboolean ok;
    GError *error;
} CallResult;

static void
call_init(PluginEntry *entry, gpointer data)
{
    CallResult *result = data;
    gpointer state = NULL;

    if (!entry->descriptor->init) {
        result->ok = TRUE;
        return;
    }
    result->ok = entry->descriptor->init(&entry->services, &state, &result->error);
    if (result->ok)
        entry->state = state;
}

static void
call_start(PluginEntry *entry, gpointer data)
{
    CallResult *result = data;

    result->ok =
        !entry->descriptor->start || entry->descriptor->start(entry->state, &result->error);
}

static void
call_stop_free(PluginEntry *entry, gpointer data)
{
    if (entry->descriptor->stop)
        entry->descriptor->stop(entry->state);
    /* Checkers the plugin left behind must not outlive its state.  The entry's own reference
     * on the registry: an abandoned plugin (below) may get here after the host is gone. */
    pleg_health_registry_remove(entry->base.health, 0, &entry->base);
    if (entry->descriptor->free)
        entry->descriptor->free(entry->state);
    entry->state = NULL;
    entry->initialized = FALSE;
}

/* Runs stop and free in the plugin thread, then ends the thread.  A plugin whose stop has not
 * returned after PLEG_PLUGIN_STOP_TIMEOUT_USEC (a hung health checker that stop must wait for,
 * a stop that blocks) is abandoned: its thread is left to itself and the entry, its state and
 * everything the thread can reach stay allocated (pleg_plugin_entry_free(),
 * pleg_host_free()), so the host's shutdown ends in bounded time whatever the plugin does. */
void
pleg_plugin_entry_shutdown(PluginEntry *entry)
{
    if (entry->initialized) {
        gint64 deadline = g_get_monotonic_time() + PLEG_PLUGIN_STOP_TIMEOUT_USEC;

        if (!run_in_plugin_thread(entry, call_stop_free, NULL, deadline)) {
            g_autofree char *name = pleg_log_text(entry->info.name, -1, 0);

            entry->abandoned = TRUE;
            g_atomic_int_inc(&entry->host->n_abandoned);
            g_message("plugin %s did not stop within %d s (a health checker or its stop does not "
                      "return): abandoning it, its thread left running",
                      name, (int)(PLEG_PLUGIN_STOP_TIMEOUT_USEC / G_USEC_PER_SEC));
        }
    } else if (entry->thread) {
        pleg_health_registry_remove(entry->base.health, 0, &entry->base);
    }
    /* Its free returned (or its init failed): what it said of itself no longer holds.  An
     * abandoned plugin still runs, and keeps its status. */
    if (entry->base.status && !entry->abandoned)
        pleg_status_board_clear(entry->base.status, &entry->base);
    stop_plugin_thread(entry);
}

void
pleg_plugin_entry_init(PluginEntry *entry)
{
    g_autoptr(GError) local_error = NULL;
    CallResult result = {0};

    if (!start_plugin_thread(entry, &local_error)) {
        pleg_plugin_entry_fail(entry, PLEG_HOST_ERROR_PLUGIN_INIT, "cannot start its thread: %s",
                               local_error->message);
        return;
    }
    /* After the thread: the services hand out its context. */
    pleg_host_init_services(entry);

    run_in_plugin_thread(entry, call_init, &result, -1);
    if (!result.ok) {
        g_autofree char *why =
            pleg_log_text(result.error ? result.error->message : "no reason given", -1, 1024);

        pleg_plugin_entry_fail(entry, PLEG_HOST_ERROR_PLUGIN_INIT, "init failed: %s", why);
        g_clear_error(&result.error);
        pleg_plugin_entry_shutdown(entry);
        return;
    }
    g_clear_error(&result.error);
    entry->initialized = TRUE;
}

void
pleg_plugin_entry_start(PluginEntry *entry)
{
    CallResult result = {0};

    run_in_plugin_thread(entry, call_start, &result, -1);
    if (!result.ok) {
        g_autofree char *why =
            pleg_log_text(result.error ? result.error->message : "no reason given", -1, 1024);

        pleg_plugin_entry_fail(entry, PLEG_HOST_ERROR_PLUGIN_START, "start failed: %s", why);
        g_clear_error(&result.error);
        pleg_plugin_entry_shutdown(entry);
        return;
    }
    g_clear_error(&result.error);
    entry->info.state = PLEG_PLUGIN_STATE_RUNNING;
    g_debug("plugin %s (%s) running", entry->info.name, entry->info.path);
}
