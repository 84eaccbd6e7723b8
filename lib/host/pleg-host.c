/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plugin host: CRI client, Generic PLEG, metrics, health checkers and the plugin loader.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pleg/pleg-host.h>

#include "pleg-config.h"
#include "pleg-host-private.h"
#include "pleg-plugin-abi.h"
#include "pleg-private.h"
#include "pleg-quark.h"

PLEG_DEFINE_QUARK(pleg-host-error-quark, pleg_host_error)

#define PLUGIN_GROUP        "Plugin"
#define FEATURE_GATES_GROUP "FeatureGates"
/* A .plugin file declares a gate of its own in a group "[FeatureGate <Name>]". */
#define GATE_DECLARATION_PREFIX "FeatureGate "

typedef struct _PluginEntry PluginEntry;

typedef struct {
    guint id;
    char *name;
    PlegHealthCheckFunc func;
    gpointer user_data;
    GDestroyNotify destroy;
    PluginEntry *owner;  /* NULL for the host's own checker */
    PlegHealthKind kind; /* readiness checkers are left out of liveness rounds */
} Checker;

typedef struct {
    PlegEventChannel *channel;
    GSource *source;
} Subscription;

struct _PluginEntry {
    PlegPluginInfo info; /* handed out by pleg_host_get_plugins() */
    PlegHost *host;
    char *dir; /* the plugin directory the .plugin file is in */
    char *plugin_file;
    char *feature_gate;
    char *log_domain;
    GKeyFile *key_file; /* the .plugin file, for its gate declarations */
    const PlegPluginDescriptor *descriptor;
    PlegHostServices services;

    GThread *thread;
    GMainContext *context;
    GMainLoop *loop;
    gpointer state;
    gboolean initialized;
};

struct _PlegHost {
    GMainContext *context;
    PlegFeatureGates *gates;
    PlegFeatureGates *own_gates;
    char *endpoint;
    PlegCriClient *client;
    PlegRuntime *runtime;
    PlegMetricsRegistry *metrics;
    PlegGeneric *pleg;
    char *plugin_dir;
    GStrv disabled_plugins;
    GStrv required_plugins;

    /* A health round holds the reader lock, so that a checker is never removed (and its
     * plugin freed) while it runs. */
    GRWLock health_lock;
    GPtrArray *checkers;
    guint next_checker_id;
    int pleg_running;
    PlegClockFunc clock;
    gpointer clock_data;
    gint64 relist_threshold_usec;
    gint64 pleg_started_ns;
    PlegMetric *cri_streaming;   /* kubelet_cri_streaming_enabled, with CRIListStreaming on */
    char *list_probe_interval_text;

    GPtrArray *subscriptions;
    GPtrArray *plugins; /* PluginEntry, in load order */
    gboolean started;
};

#define ENTRY(h) ((PluginEntry *)(h))

const char *
pleg_plugin_state_to_string(PlegPluginState state)
{
    switch (state) {
    case PLEG_PLUGIN_STATE_DISABLED_GATE:
        return "disabled-gate";
    case PLEG_PLUGIN_STATE_DISABLED_BY_NAME:
        return "disabled-by-name";
    case PLEG_PLUGIN_STATE_FAILED:
        return "failed";
    case PLEG_PLUGIN_STATE_RUNNING:
        return "running";
    case PLEG_PLUGIN_STATE_STOPPED:
        return "stopped";
    }
    return "unknown";
}

void
pleg_host_config_init(PlegHostConfig *config)
{
    g_return_if_fail(config != NULL);

    memset(config, 0, sizeof(*config));
    pleg_generic_config_init(&config->generic);
}

gboolean
pleg_feature_gates_load_key_file(PlegFeatureGates *gates, GKeyFile *key_file, GError **error)
{
    g_auto(GStrv) keys = NULL;
    g_autoptr(GString) text = g_string_new(NULL);
    g_autoptr(GError) local_error = NULL;

    g_return_val_if_fail(gates != NULL, FALSE);
    g_return_val_if_fail(key_file != NULL, FALSE);
    g_return_val_if_fail(error == NULL || *error == NULL, FALSE);

    if (!g_key_file_has_group(key_file, FEATURE_GATES_GROUP))
        return TRUE;
    keys = g_key_file_get_keys(key_file, FEATURE_GATES_GROUP, NULL, NULL);
    if (!keys)
        return TRUE;

    /* One --feature-gates string, applied by pleg_feature_gates_parse() at once: same names,
     * same values, same messages, all or nothing. */
    for (guint i = 0; keys[i]; i++) {
        g_autofree char *value = g_key_file_get_value(key_file, FEATURE_GATES_GROUP, keys[i], NULL);

        if (strchr(keys[i], ',') || strchr(keys[i], '=')) {
            g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                        "[" FEATURE_GATES_GROUP "]: unrecognized feature gate: %s", keys[i]);
            return FALSE;
        }
        if (!value || strchr(value, ',')) {
            g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                        "[" FEATURE_GATES_GROUP "]: invalid value of %s=%s, err: not a boolean "
                        "(want true or false)",
                        keys[i], value ? value : "");
            return FALSE;
        }
        if (text->len > 0)
            g_string_append_c(text, ',');
        g_string_append_printf(text, "%s=%s", keys[i], value);
    }

    if (!pleg_feature_gates_parse(gates, text->str, &local_error)) {
        g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG, "[" FEATURE_GATES_GROUP "]: %s",
                    local_error->message);
        return FALSE;
    }
    return TRUE;
}

/* ---- health checkers ---- */

static void
checker_free(Checker *checker)
{
    if (checker->destroy)
        checker->destroy(checker->user_data);
    g_free(checker->name);
    g_free(checker);
}

static guint
add_checker(PlegHost *self, PluginEntry *owner, PlegHealthKind kind, const char *name,
            PlegHealthCheckFunc func, gpointer user_data, GDestroyNotify destroy)
{
    Checker *checker;
    guint id;

    g_return_val_if_fail(name != NULL, 0);
    g_return_val_if_fail(func != NULL, 0);

    checker = g_new0(Checker, 1);
    checker->name = g_strdup(name);
    checker->func = func;
    checker->user_data = user_data;
    checker->destroy = destroy;
    checker->owner = owner;
    checker->kind = kind;

    g_rw_lock_writer_lock(&self->health_lock);
    id = checker->id = ++self->next_checker_id;
    g_ptr_array_add(self->checkers, checker);
    g_rw_lock_writer_unlock(&self->health_lock);
    return id;
}

/* Removes the checker @id (when != 0) or every checker of @owner (when @id == 0). */
static void
remove_checkers(PlegHost *self, guint id, PluginEntry *owner)
{
    g_autoptr(GPtrArray) removed = g_ptr_array_new_with_free_func((GDestroyNotify)checker_free);

    g_rw_lock_writer_lock(&self->health_lock);
    for (guint i = 0; i < self->checkers->len;) {
        Checker *checker = g_ptr_array_index(self->checkers, i);

        if (id != 0 ? checker->id == id : checker->owner == owner)
            g_ptr_array_add(removed, g_ptr_array_steal_index(self->checkers, i));
        else
            i++;
    }
    g_rw_lock_writer_unlock(&self->health_lock);
    /* Destroy notifies run unlocked: they may call back into the host. */
}

static gboolean
run_checker(Checker *checker, GError **error)
{
    g_autoptr(GError) local_error = NULL;

    if (checker->func(checker->user_data, &local_error))
        return TRUE;
    if (!local_error)
        local_error = g_error_new(G_IO_ERROR, G_IO_ERROR_FAILED, "health checker %s failed",
                                  checker->name);
    g_propagate_error(error, g_steal_pointer(&local_error));
    return FALSE;
}

/* The checkers of a @kind round: every one for readiness, the liveness ones for liveness. */
static gboolean
in_round(const Checker *checker, PlegHealthKind kind)
{
    return kind == PLEG_HEALTH_READINESS || checker->kind == PLEG_HEALTH_LIVENESS;
}

static gboolean
check_health(PlegHost *self, PlegHealthKind kind, PlegHealthProgressFunc progress,
             gpointer progress_data, char **ret_checker, GError **error)
{
    g_rw_lock_reader_lock(&self->health_lock);
    for (guint i = 0; i < self->checkers->len; i++) {
        Checker *checker = g_ptr_array_index(self->checkers, i);

        if (!in_round(checker, kind))
            continue;
        if (progress)
            progress(checker->name, progress_data);
        if (run_checker(checker, error))
            continue;
        if (ret_checker)
            *ret_checker = g_strdup(checker->name);
        g_rw_lock_reader_unlock(&self->health_lock);
        return FALSE;
    }
    g_rw_lock_reader_unlock(&self->health_lock);
    return TRUE;
}

gboolean
pleg_host_check_health(PlegHost *self, char **ret_checker, GError **error)
{
    g_return_val_if_fail(self != NULL, FALSE);

    return check_health(self, PLEG_HEALTH_LIVENESS, NULL, NULL, ret_checker, error);
}

gboolean
pleg_host_check_readiness(PlegHost *self, char **ret_checker, GError **error)
{
    g_return_val_if_fail(self != NULL, FALSE);

    return check_health(self, PLEG_HEALTH_READINESS, NULL, NULL, ret_checker, error);
}

void
pleg_health_result_free(PlegHealthResult *result)
{
    if (!result)
        return;
    g_free(result->name);
    g_clear_error(&result->error);
    g_free(result);
}

GPtrArray *
pleg_host_check_all(PlegHost *self, PlegHealthKind kind)
{
    GPtrArray *results;

    g_return_val_if_fail(self != NULL, NULL);

    results = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_health_result_free);
    g_rw_lock_reader_lock(&self->health_lock);
    for (guint i = 0; i < self->checkers->len; i++) {
        Checker *checker = g_ptr_array_index(self->checkers, i);
        PlegHealthResult *result;

        if (!in_round(checker, kind))
            continue;
        result = g_new0(PlegHealthResult, 1);
        result->name = g_strdup(checker->name);
        run_checker(checker, &result->error);
        g_ptr_array_add(results, result);
    }
    g_rw_lock_reader_unlock(&self->health_lock);
    return results;
}

static gint64
now_ns(PlegHost *self)
{
    return self->clock ? self->clock(self->clock_data) : g_get_real_time() * 1000;
}

/* Liveness: what restarting this process can fix.  Before the first successful relist the PLEG
 * gets the health threshold from its start, as if it had been seen active then: a runtime slow
 * to answer at start-up, or not there yet, must not stop the systemd watchdog heartbeat
 * (kubelet's slow-start report), and restarting plegd would not bring the runtime up.  After
 * it, kubelet's rule: unhealthy once the last successful relist started longer ago than the
 * threshold. */
static gboolean
pleg_health_check(gpointer user_data, GError **error)
{
    PlegHost *self = user_data;
    g_autofree char *message = NULL;

    /* Not started yet (or stopped): nothing to be late for. */
    if (!g_atomic_int_get(&self->pleg_running))
        return TRUE;
    if (pleg_generic_get_last_relist_time(self->pleg) == 0 &&
        now_ns(self) - self->pleg_started_ns <= self->relist_threshold_usec * 1000)
        return TRUE;
    if (pleg_generic_healthy(self->pleg, &message))
        return TRUE;
    g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_FAILED, message);
    return FALSE;
}

/* Readiness: a global relist has succeeded since start, so the pod cache holds the node. */
static gboolean
first_relist_check(gpointer user_data, GError **error)
{
    PlegHost *self = user_data;

    if (!g_atomic_int_get(&self->pleg_running) || pleg_generic_get_last_relist_time(self->pleg) != 0)
        return TRUE;
    g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_FAILED, "pleg has yet to be successful");
    return FALSE;
}

/* The runtime's reachability joins once its subject exists: until the runtime has answered a
 * global relist once (a runtime slow to come up at start-up is not a failure here; the "pleg"
 * checker's threshold covers that), then unhealthy while the last global relist could not
 * reach it. */
static gboolean
runtime_health_check(gpointer user_data, GError **error)
{
    PlegHost *self = user_data;
    g_autoptr(GError) last_error = NULL;
    gboolean ever_reached;

    if (!g_atomic_int_get(&self->pleg_running))
        return TRUE;
    pleg_generic_get_runtime_state(self->pleg, &ever_reached, &last_error);
    if (!ever_reached || !last_error)
        return TRUE;
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_FAILED, "container runtime is not reachable: %s",
                last_error->message);
    return FALSE;
}

/* ---- host services ---- */

static GMainContext *
service_get_main_context(PlegPluginHost *host)
{
    return ENTRY(host)->context;
}

static gboolean
service_feature_enabled(PlegPluginHost *host, const char *gate)
{
    return gate && pleg_feature_gates_enabled(ENTRY(host)->host->gates, gate);
}

static int
service_request_relist(PlegPluginHost *host, const char *pod_uid, PlegPluginRelistSource source)
{
    PluginEntry *entry = ENTRY(host);

    if (!pod_uid || source < PLEG_PLUGIN_RELIST_SOURCE_EVENTED_PLEG ||
        source > PLEG_PLUGIN_RELIST_SOURCE_POST_ALLOCATION) {
        g_debug("plugin %s: RequestRelist with %s, dropped", entry->info.name,
                pod_uid ? "an invalid source" : "no pod uid");
        return PLEG_RELIST_REQUEST_DROPPED;
    }
    /* PlegPluginRelistSource has PlegRelistSource's numbers. */
    return pleg_generic_request_relist(entry->host->pleg, pod_uid, (PlegRelistSource)source);
}

static PlegMetric *
service_metric_register(PlegPluginHost *host, PlegMetricType type, const char *name,
                        const char *help, const char *const *label_names, const double *buckets,
                        gsize n_buckets)
{
    return pleg_metrics_register(ENTRY(host)->host->metrics, type, name, help, label_names, buckets,
                                 n_buckets);
}

static guint
service_add_health_checker(PlegPluginHost *host, const char *name, PlegHealthCheckFunc func,
                           gpointer user_data, GDestroyNotify destroy)
{
    return add_checker(ENTRY(host)->host, ENTRY(host), PLEG_HEALTH_LIVENESS, name, func,
                       user_data, destroy);
}

static void
service_remove_health_checker(PlegPluginHost *host, guint id)
{
    if (id != 0)
        remove_checkers(ENTRY(host)->host, id, NULL);
}

static gboolean
service_check_health(PlegPluginHost *host, char **ret_checker, GError **error)
{
    return pleg_host_check_health(ENTRY(host)->host, ret_checker, error);
}

static gboolean
service_check_health_progress(PlegPluginHost *host, PlegHealthProgressFunc progress,
                              gpointer progress_data, char **ret_checker, GError **error)
{
    return check_health(ENTRY(host)->host, PLEG_HEALTH_LIVENESS, progress, progress_data,
                        ret_checker, error);
}

static const char *
level_to_priority(GLogLevelFlags level)
{
    if (level & G_LOG_LEVEL_ERROR)
        return "3";
    if (level & (G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING))
        return "4";
    if (level & G_LOG_LEVEL_MESSAGE)
        return "5";
    if (level & G_LOG_LEVEL_INFO)
        return "6";
    return "7";
}

static void
service_log(PlegPluginHost *host, GLogLevelFlags level, const GLogField *fields, gsize n_fields)
{
    PluginEntry *entry = ENTRY(host);
    g_autofree GLogField *all = g_new0(GLogField, n_fields + 2);
    gboolean has_domain = FALSE, has_priority = FALSE;
    gsize n = 0;

    for (gsize i = 0; i < n_fields; i++) {
        if (g_str_equal(fields[i].key, "GLIB_DOMAIN"))
            has_domain = TRUE;
        else if (g_str_equal(fields[i].key, "PRIORITY"))
            has_priority = TRUE;
        all[n++] = fields[i];
    }
    if (!has_domain)
        all[n++] = (GLogField){"GLIB_DOMAIN", entry->log_domain, -1};
    if (!has_priority)
        all[n++] = (GLogField){"PRIORITY", level_to_priority(level), -1};
    g_log_structured_array(level, all, n);
}

static const char *
service_get_runtime_endpoint(PlegPluginHost *host)
{
    PlegHost *self = ENTRY(host)->host;

    return self->endpoint ? self->endpoint : "";
}

static PlegContainerEventStream *
service_container_events_open(PlegPluginHost *host, GError **error)
{
    PlegHost *self = ENTRY(host)->host;

    if (!self->client) {
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_UNIMPLEMENTED,
                    "GetContainerEvents: the host runs on an in-process runtime, not CRI");
        return NULL;
    }
    return cri_container_events_open(cri_client_get_channel(self->client), error);
}

static void
init_services(PluginEntry *entry)
{
    entry->services = (PlegHostServices){
        .size = sizeof(PlegHostServices),
        .abi_minor = PLEG_PLUGIN_ABI_MINOR,
        .host = (PlegPluginHost *)entry,
        .get_main_context = service_get_main_context,
        .feature_enabled = service_feature_enabled,
        .request_relist = service_request_relist,
        .metric_register = service_metric_register,
        .metric_add = pleg_metric_add,
        .metric_set = pleg_metric_set,
        .metric_observe = pleg_metric_observe,
        .add_health_checker = service_add_health_checker,
        .remove_health_checker = service_remove_health_checker,
        .check_health = service_check_health,
        .log = service_log,
        .get_runtime_endpoint = service_get_runtime_endpoint,
        .container_events_open = service_container_events_open,
        .container_events_read = cri_container_events_read,
        .container_events_cancel = cri_container_events_cancel,
        .container_events_free = cri_container_events_free,
        .container_event_free = cri_container_event_free,
        .check_health_progress = service_check_health_progress,
    };
}

/* ---- plugin threads ---- */

typedef void (*PluginFunc)(PluginEntry *entry, gpointer data);

typedef struct {
    PluginEntry *entry;
    PluginFunc func;
    gpointer data;
    GMutex lock;
    GCond cond;
    gboolean done;
} PluginCall;

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

/* Runs @func in the plugin's thread and waits for it.  A source rather than
 * g_main_context_invoke(), which would run @func right here if the plugin thread had not
 * acquired its context yet. */
static void
run_in_plugin_thread(PluginEntry *entry, PluginFunc func, gpointer data)
{
    PluginCall call = {entry, func, data};
    GSource *source;

    g_mutex_init(&call.lock);
    g_cond_init(&call.cond);

    source = g_idle_source_new();
    g_source_set_priority(source, G_PRIORITY_DEFAULT);
    g_source_set_callback(source, plugin_call_dispatch, &call, NULL);
    g_source_attach(source, entry->context);
    g_source_unref(source);

    g_mutex_lock(&call.lock);
    while (!call.done)
        g_cond_wait(&call.cond, &call.lock);
    g_mutex_unlock(&call.lock);

    g_cond_clear(&call.cond);
    g_mutex_clear(&call.lock);
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

    if (!entry->thread)
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
    /* Checkers the plugin left behind must not outlive its state. */
    remove_checkers(entry->host, 0, entry);
    if (entry->descriptor->free)
        entry->descriptor->free(entry->state);
    entry->state = NULL;
    entry->initialized = FALSE;
}

/* Runs stop and free in the plugin thread, then ends the thread. */
static void
shutdown_plugin(PluginEntry *entry)
{
    if (entry->initialized)
        run_in_plugin_thread(entry, call_stop_free, NULL);
    else if (entry->thread)
        remove_checkers(entry->host, 0, entry);
    stop_plugin_thread(entry);
}

/* ---- loader ---- */

static void
plugin_entry_free(PluginEntry *entry)
{
    if (!entry)
        return;
    g_free(entry->info.name);
    g_free(entry->info.path);
    g_clear_error(&entry->info.error);
    g_free(entry->dir);
    g_free(entry->plugin_file);
    g_free(entry->feature_gate);
    g_free(entry->log_domain);
    g_clear_pointer(&entry->key_file, g_key_file_unref);
    g_free(entry);
}

G_GNUC_PRINTF(3, 4)
static void
plugin_fail(PluginEntry *entry, PlegHostError code, const char *format, ...)
{
    g_autofree char *reason = NULL;
    g_autofree char *name = pleg_log_text(entry->info.name, -1, 0);
    g_autofree char *path = pleg_log_text(entry->info.path, -1, 4096);
    va_list args;

    va_start(args, format);
    reason = g_strdup_vprintf(format, args);
    va_end(args);

    /* Untrusted parts of @format's arguments (a .plugin file's bytes, a plugin's message) are
     * escaped by the callers; the name and path come from file names and Module=. */
    entry->info.state = PLEG_PLUGIN_STATE_FAILED;
    g_clear_error(&entry->info.error);
    entry->info.error = g_error_new(PLEG_HOST_ERROR, code, "plugin %s (%s): %s", name, path,
                                    reason);
}

static gboolean
valid_plugin_name(const char *name)
{
    if (!name || !*name)
        return FALSE;
    for (const char *p = name; *p; p++) {
        if (!g_ascii_islower(*p) && !g_ascii_isdigit(*p) && *p != '-')
            return FALSE;
    }
    return TRUE;
}

static gboolean
is_required(PlegHost *self, const char *name)
{
    return self->required_plugins &&
           g_strv_contains((const char *const *)self->required_plugins, name);
}

static PluginEntry *
find_plugin(PlegHost *self, const char *name)
{
    for (guint i = 0; i < self->plugins->len; i++) {
        PluginEntry *entry = g_ptr_array_index(self->plugins, i);

        if (g_str_equal(entry->info.name, name))
            return entry;
    }
    return NULL;
}

/* ---- gates declared by .plugin files ---- */

typedef struct {
    const char *name; /* points into the group name */
    PlegFeatureStage stage;
    gboolean default_enabled;
} GateDeclaration;

/* Reads one "[FeatureGate <Name>]" group: Stage= and Default=, nothing else. */
static gboolean
read_gate_declaration(GKeyFile *key_file, const char *group, GateDeclaration *ret,
                      GError **error)
{
    g_auto(GStrv) keys = g_key_file_get_keys(key_file, group, NULL, NULL);
    g_autofree char *stage = g_key_file_get_value(key_file, group, "Stage", NULL);
    g_autofree char *value = g_key_file_get_value(key_file, group, "Default", NULL);

    ret->name = group + strlen(GATE_DECLARATION_PREFIX);
    for (char **key = keys; key && *key; key++) {
        if (!g_str_equal(*key, "Stage") && !g_str_equal(*key, "Default")) {
            g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                        "[%s]: unknown key %s (expected Stage and Default)", group, *key);
            return FALSE;
        }
    }
    if (!stage || !pleg_feature_stage_from_string(stage, &ret->stage)) {
        g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                    "[%s]: %s%s: want Stage=Alpha, Beta, GA or Deprecated", group,
                    stage ? "invalid Stage=" : "no Stage", stage ? stage : "");
        return FALSE;
    }
    if (g_strcmp0(value, "true") == 0) {
        ret->default_enabled = TRUE;
    } else if (g_strcmp0(value, "false") == 0) {
        ret->default_enabled = FALSE;
    } else {
        g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                    "[%s]: %s%s: want Default=true or Default=false", group,
                    value ? "invalid Default=" : "no Default", value ? value : "");
        return FALSE;
    }
    return TRUE;
}

/* Registers the gates @key_file (the .plugin file @file) declares into @gates.  With
 * @check_only, registers nothing: fails unless @gates already has each of them as declared. */
static gboolean
declare_plugin_gates(PlegFeatureGates *gates, GKeyFile *key_file, const char *file,
                     gboolean check_only, GError **error)
{
    g_auto(GStrv) groups = g_key_file_get_groups(key_file, NULL);

    for (char **group = groups; *group; group++) {
        g_autoptr(GError) local_error = NULL;
        GateDeclaration declaration;
        PlegFeatureStage stage;
        gboolean default_enabled;

        if (!g_str_has_prefix(*group, GATE_DECLARATION_PREFIX))
            continue;
        if (!read_gate_declaration(key_file, *group, &declaration, error))
            return FALSE;

        if (!check_only || pleg_feature_gates_is_builtin(declaration.name)) {
            if (!pleg_feature_gates_register(gates, declaration.name, declaration.stage,
                                             declaration.default_enabled, file, &local_error)) {
                g_set_error_literal(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                                    local_error->message);
                return FALSE;
            }
            continue;
        }
        if (!pleg_feature_gates_known(gates, declaration.name, &stage, &default_enabled)) {
            g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                        "declares feature gate %s, which the host's gates do not have: "
                        "pleg_feature_gates_register_plugins() must run before the gates are "
                        "parsed",
                        declaration.name);
            return FALSE;
        }
        if (stage != declaration.stage || default_enabled != declaration.default_enabled) {
            g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                        "declares feature gate %s as %s, default %s, but the host has it as %s, "
                        "default %s",
                        declaration.name, pleg_feature_stage_to_string(declaration.stage),
                        declaration.default_enabled ? "true" : "false",
                        pleg_feature_stage_to_string(stage), default_enabled ? "true" : "false");
            return FALSE;
        }
    }
    return TRUE;
}

/* A file a root process may act on: a regular file owned by root (or by the user running the
 * host) and writable by nobody else, as NetworkManager's nm_utils_validate_plugin() checks.
 * Otherwise @what ("plugin file", "module") and the reason in @error. */
static gboolean
check_trusted(const struct stat *st, const char *what, GError **error)
{
    if (!S_ISREG(st->st_mode)) {
        g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_PLUGIN_FILE, "%s not a regular file",
                    what);
        return FALSE;
    }
    if (st->st_uid != 0 && st->st_uid != geteuid()) {
        g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_PLUGIN_FILE,
                    "%s owned by uid %u, not by root or uid %u", what, (unsigned)st->st_uid,
                    (unsigned)geteuid());
        return FALSE;
    }
    if (st->st_mode & (S_IWGRP | S_IWOTH)) {
        g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_PLUGIN_FILE,
                    "%s writable by group or others (mode %04o)", what,
                    (unsigned)(st->st_mode & 07777));
        return FALSE;
    }
    return TRUE;
}

/* Loads a .plugin file only when it passes check_trusted(): it names the module a root host
 * opens, so a file anyone else could write must not be read at all.  The checks are made on
 * the open file, so they hold for the bytes read. */
static gboolean
load_trusted_key_file(GKeyFile *key_file, const char *path, GError **error)
{
    g_autoptr(GError) local_error = NULL;
    g_autoptr(GMappedFile) mapped = NULL;
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);

    if (fd < 0) {
        int errsv = errno;

        g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                    "cannot read the plugin file: %s", g_strerror(errsv));
        return FALSE;
    }
    if (fstat(fd, &st) < 0 || !check_trusted(&st, "plugin file", error)) {
        if (error && !*error)
            g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                        "cannot read the plugin file: %s", g_strerror(errno));
        close(fd);
        return FALSE;
    }
    mapped = g_mapped_file_new_from_fd(fd, FALSE, &local_error);
    close(fd);
    if (!mapped ||
        !g_key_file_load_from_data(key_file, g_mapped_file_get_contents(mapped),
                                   g_mapped_file_get_length(mapped), G_KEY_FILE_NONE,
                                   &local_error)) {
        /* GLib quotes the offending line, whatever its bytes. */
        g_autofree char *why = pleg_log_text(local_error->message, -1, 0);

        g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                    "cannot read the plugin file: %s", why);
        return FALSE;
    }
    return TRUE;
}

/* Reads the .plugin file: name, module path, gate.  FALSE when the entry failed. */
static gboolean
read_plugin_file(PlegHost *self, PluginEntry *entry)
{
    g_autoptr(GKeyFile) key_file = g_key_file_new();
    g_autoptr(GError) local_error = NULL;
    g_autofree char *name = NULL;
    g_autofree char *module = NULL;
    g_autofree char *gate = NULL;

    if (!load_trusted_key_file(key_file, entry->plugin_file, &local_error)) {
        plugin_fail(entry, local_error->code, "%s", local_error->message);
        return FALSE;
    }

    name = g_key_file_get_string(key_file, PLUGIN_GROUP, "Name", NULL);
    if (!name) {
        plugin_fail(entry, PLEG_HOST_ERROR_CONFIG, "no Name in [" PLUGIN_GROUP "]");
        return FALSE;
    }
    if (!valid_plugin_name(name)) {
        g_autofree char *shown = pleg_log_text(name, -1, 0);

        plugin_fail(entry, PLEG_HOST_ERROR_CONFIG, "invalid Name=%s, want [a-z0-9-]+", shown);
        return FALSE;
    }
    g_free(entry->info.name);
    entry->info.name = g_strdup(name);

    if (find_plugin(self, name)) {
        plugin_fail(entry, PLEG_HOST_ERROR_CONFIG, "another plugin is named %s", name);
        return FALSE;
    }

    module = g_key_file_get_string(key_file, PLUGIN_GROUP, "Module", NULL);
    if (!module || !*module) {
        plugin_fail(entry, PLEG_HOST_ERROR_CONFIG, "no Module in [" PLUGIN_GROUP "]");
        return FALSE;
    }
    g_free(entry->info.path);
    entry->info.path = g_path_is_absolute(module)
                           ? g_strdup(module)
                           : g_build_filename(entry->dir, module, NULL);

    gate = g_key_file_get_string(key_file, PLUGIN_GROUP, "FeatureGate", NULL);
    if (gate && *gate)
        entry->feature_gate = g_steal_pointer(&gate);

    entry->log_domain = g_strdup_printf("pleg-%s", entry->info.name);
    entry->key_file = g_steal_pointer(&key_file);
    return TRUE;
}

/* Modelled on NetworkManager's nm_utils_validate_plugin(). */
static gboolean
check_module_file(PluginEntry *entry)
{
    g_autoptr(GError) local_error = NULL;
    struct stat st;

    if (stat(entry->info.path, &st) < 0) {
        int errsv = errno;

        plugin_fail(entry, PLEG_HOST_ERROR_PLUGIN_FILE, "cannot stat the module: %s",
                    g_strerror(errsv));
        return FALSE;
    }
    if (!check_trusted(&st, "module", &local_error)) {
        plugin_fail(entry, PLEG_HOST_ERROR_PLUGIN_FILE, "%s", local_error->message);
        return FALSE;
    }
    return TRUE;
}

static gboolean
check_descriptor(PluginEntry *entry, const PlegPluginDescriptor *descriptor)
{
    const gsize reserved_offset = G_STRUCT_OFFSET(PlegPluginDescriptor, reserved);

    /* abi_major, abi_minor and size are at the same place in every ABI version. */
    if (descriptor->abi_major != PLEG_PLUGIN_ABI_MAJOR) {
        plugin_fail(entry, PLEG_HOST_ERROR_PLUGIN_ABI, "ABI major %u, host speaks %u",
                    descriptor->abi_major, PLEG_PLUGIN_ABI_MAJOR);
        return FALSE;
    }
    if (descriptor->abi_minor > PLEG_PLUGIN_ABI_MINOR) {
        plugin_fail(entry, PLEG_HOST_ERROR_PLUGIN_ABI, "ABI minor %u is newer than the host's %u",
                    descriptor->abi_minor, PLEG_PLUGIN_ABI_MINOR);
        return FALSE;
    }
    if (descriptor->size < PLEG_PLUGIN_DESCRIPTOR_SIZE_1_0) {
        plugin_fail(entry, PLEG_HOST_ERROR_PLUGIN_ABI,
                    "descriptor size %u is smaller than the %u bytes of ABI %u.0",
                    descriptor->size, (unsigned)PLEG_PLUGIN_DESCRIPTOR_SIZE_1_0,
                    PLEG_PLUGIN_ABI_MAJOR);
        return FALSE;
    }
    if (!descriptor->name || !g_str_equal(descriptor->name, entry->info.name)) {
        g_autofree char *shown = pleg_log_text(descriptor->name, -1, 0);

        plugin_fail(entry, PLEG_HOST_ERROR_PLUGIN_ABI,
                    "descriptor name %s does not match Name=%s of %s", shown, entry->info.name,
                    entry->plugin_file);
        return FALSE;
    }
    if (g_strcmp0(descriptor->feature_gate, entry->feature_gate) != 0) {
        g_autofree char *shown = pleg_log_text(descriptor->feature_gate ?: "(none)", -1, 0);
        g_autofree char *shown_file = pleg_log_text(entry->feature_gate ?: "", -1, 0);

        plugin_fail(entry, PLEG_HOST_ERROR_PLUGIN_ABI,
                    "descriptor feature gate %s does not match FeatureGate=%s of %s", shown,
                    shown_file, entry->plugin_file);
        return FALSE;
    }
    for (gsize i = 0; i < G_N_ELEMENTS(descriptor->reserved) &&
                      reserved_offset + (i + 1) * sizeof(gpointer) <= descriptor->size;
         i++) {
        if (descriptor->reserved[i]) {
            plugin_fail(entry, PLEG_HOST_ERROR_PLUGIN_ABI, "reserved descriptor fields are set");
            return FALSE;
        }
    }
    return TRUE;
}

/* Opens the module and checks the descriptor.  The module stays resident once it passed. */
static gboolean
open_module(PluginEntry *entry)
{
    g_autoptr(GError) local_error = NULL;
    GModule *module;
    gpointer symbol = NULL;

    module = g_module_open_full(entry->info.path, G_MODULE_BIND_LOCAL | G_MODULE_BIND_LAZY,
                                &local_error);
    if (!module) {
        plugin_fail(entry, PLEG_HOST_ERROR_PLUGIN_OPEN, "cannot open the module: %s",
                    local_error->message);
        return FALSE;
    }

    if (!g_module_symbol(module, PLEG_PLUGIN_DESCRIPTOR_SYMBOL, &symbol)) {
        plugin_fail(entry, PLEG_HOST_ERROR_PLUGIN_SYMBOL,
                    "no symbol " PLEG_PLUGIN_DESCRIPTOR_SYMBOL);
        g_module_close(module);
        return FALSE;
    }
    if (!symbol) {
        plugin_fail(entry, PLEG_HOST_ERROR_PLUGIN_SYMBOL,
                    "symbol " PLEG_PLUGIN_DESCRIPTOR_SYMBOL " is NULL");
        g_module_close(module);
        return FALSE;
    }
    if (!check_descriptor(entry, symbol)) {
        g_module_close(module);
        return FALSE;
    }

    g_module_make_resident(module);
    entry->descriptor = symbol;
    return TRUE;
}

static void
init_plugin(PluginEntry *entry)
{
    g_autoptr(GError) local_error = NULL;
    CallResult result = {0};

    init_services(entry);
    if (!start_plugin_thread(entry, &local_error)) {
        plugin_fail(entry, PLEG_HOST_ERROR_PLUGIN_INIT, "cannot start its thread: %s",
                    local_error->message);
        return;
    }

    run_in_plugin_thread(entry, call_init, &result);
    if (!result.ok) {
        g_autofree char *why =
            pleg_log_text(result.error ? result.error->message : "no reason given", -1, 1024);

        plugin_fail(entry, PLEG_HOST_ERROR_PLUGIN_INIT, "init failed: %s", why);
        g_clear_error(&result.error);
        shutdown_plugin(entry);
        return;
    }
    g_clear_error(&result.error);
    entry->initialized = TRUE;
}

static void
start_plugin(PluginEntry *entry)
{
    CallResult result = {0};

    run_in_plugin_thread(entry, call_start, &result);
    if (!result.ok) {
        g_autofree char *why =
            pleg_log_text(result.error ? result.error->message : "no reason given", -1, 1024);

        plugin_fail(entry, PLEG_HOST_ERROR_PLUGIN_START, "start failed: %s", why);
        g_clear_error(&result.error);
        shutdown_plugin(entry);
        return;
    }
    g_clear_error(&result.error);
    entry->info.state = PLEG_PLUGIN_STATE_RUNNING;
    g_debug("plugin %s (%s) running", entry->info.name, entry->info.path);
}

static void
report_failure(PlegHost *self, PluginEntry *entry)
{
    if (entry->info.state != PLEG_PLUGIN_STATE_FAILED)
        return;
    /* The library logs at debug: the program decides what its operator sees (plegd logs each
     * plugin's state once, pleg_host_get_plugins() has the error). */
    if (is_required(self, entry->info.name))
        g_debug("%s", entry->info.error->message);
    else
        g_debug("%s, ignoring", entry->info.error->message);
}

static GPtrArray *
list_plugin_files(const char *dir)
{
    g_autoptr(GPtrArray) files = g_ptr_array_new_with_free_func(g_free);
    g_autoptr(GError) local_error = NULL;
    g_autoptr(GDir) handle = NULL;
    const char *name;

    handle = g_dir_open(dir, 0, &local_error);
    if (!handle) {
        g_debug("plugin directory %s: %s, no plugins", dir, local_error->message);
        return g_steal_pointer(&files);
    }
    while ((name = g_dir_read_name(handle))) {
        if (g_str_has_suffix(name, ".plugin"))
            g_ptr_array_add(files, g_strdup(name));
    }
    return g_steal_pointer(&files);
}

static int
compare_file_names(gconstpointer a, gconstpointer b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The gates of the .plugin file agree with the host's: what it declares is registered as
 * declared, and its FeatureGate is built in or registered. */
static gboolean
check_plugin_gates(PlegHost *self, PluginEntry *entry)
{
    g_autoptr(GError) local_error = NULL;

    if (!declare_plugin_gates(self->gates, entry->key_file, entry->plugin_file, TRUE,
                              &local_error)) {
        plugin_fail(entry, PLEG_HOST_ERROR_CONFIG, "%s: %s", entry->plugin_file,
                    local_error->message);
        return FALSE;
    }
    if (entry->feature_gate &&
        !pleg_feature_gates_known(self->gates, entry->feature_gate, NULL, NULL)) {
        plugin_fail(entry, PLEG_HOST_ERROR_CONFIG,
                    "FeatureGate=%s is not a known feature gate: neither built in nor declared "
                    "in a [" GATE_DECLARATION_PREFIX "%s] group",
                    entry->feature_gate, entry->feature_gate);
        return FALSE;
    }
    return TRUE;
}

gboolean
pleg_feature_gates_register_plugins(PlegFeatureGates *gates, const char *plugin_dir,
                                    GError **error)
{
    g_auto(GStrv) dirs = NULL;

    g_return_val_if_fail(gates != NULL, FALSE);
    g_return_val_if_fail(error == NULL || *error == NULL, FALSE);

    if (!plugin_dir)
        plugin_dir = PLEG_PLUGIN_DIR;
    dirs = g_strsplit(plugin_dir, G_SEARCHPATH_SEPARATOR_S, -1);
    for (guint d = 0; dirs[d]; d++) {
        g_autoptr(GPtrArray) files = NULL;

        if (!*dirs[d])
            continue;
        files = list_plugin_files(dirs[d]);
        g_ptr_array_sort(files, compare_file_names);
        for (guint i = 0; i < files->len; i++) {
            g_autofree char *path = g_build_filename(dirs[d], g_ptr_array_index(files, i), NULL);
            g_autoptr(GKeyFile) key_file = g_key_file_new();
            g_autoptr(GError) local_error = NULL;

            /* The loader reports a file it cannot read or may not trust; it declares nothing. */
            if (!load_trusted_key_file(key_file, path, &local_error)) {
                g_debug("%s: %s, no feature gates from it", path, local_error->message);
                continue;
            }
            if (!declare_plugin_gates(gates, key_file, path, FALSE, &local_error)) {
                g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG, "%s: %s", path,
                            local_error->message);
                return FALSE;
            }
        }
    }
    return TRUE;
}

static void
load_plugins_from(PlegHost *self, const char *dir)
{
    g_autoptr(GPtrArray) files = list_plugin_files(dir);

    g_ptr_array_sort(files, compare_file_names);
    for (guint i = 0; i < files->len; i++) {
        const char *file_name = g_ptr_array_index(files, i);
        PluginEntry *entry = g_new0(PluginEntry, 1);

        entry->host = self;
        entry->dir = g_strdup(dir);
        entry->plugin_file = g_build_filename(dir, file_name, NULL);
        entry->info.name = g_strndup(file_name, strlen(file_name) - strlen(".plugin"));
        entry->info.path = g_strdup(entry->plugin_file);
        entry->info.state = PLEG_PLUGIN_STATE_STOPPED;

        if (!read_plugin_file(self, entry)) {
            g_ptr_array_add(self->plugins, entry);
            report_failure(self, entry);
            continue;
        }
        g_ptr_array_add(self->plugins, entry);

        /* Both checks come before the module is opened: a disabled plugin runs no code. */
        if (self->disabled_plugins &&
            g_strv_contains((const char *const *)self->disabled_plugins, entry->info.name)) {
            entry->info.state = PLEG_PLUGIN_STATE_DISABLED_BY_NAME;
            g_debug("plugin %s disabled by name, not loaded", entry->info.name);
            continue;
        }
        if (!check_plugin_gates(self, entry)) {
            report_failure(self, entry);
            continue;
        }
        if (entry->feature_gate && !pleg_feature_gates_enabled(self->gates, entry->feature_gate)) {
            entry->info.state = PLEG_PLUGIN_STATE_DISABLED_GATE;
            g_debug("plugin %s disabled: feature gate %s is off, not loaded", entry->info.name,
                    entry->feature_gate);
            continue;
        }

        if (check_module_file(entry) && open_module(entry))
            init_plugin(entry);
        report_failure(self, entry);
    }
}

/* plugin_dir is a search path, like GST_PLUGIN_PATH: directories separated by ':', searched in
 * order; a later plugin with a name already loaded fails as a duplicate. */
static void
load_plugins(PlegHost *self)
{
    g_auto(GStrv) dirs = NULL;

    if (!self->plugin_dir || !*self->plugin_dir)
        return;

    dirs = g_strsplit(self->plugin_dir, G_SEARCHPATH_SEPARATOR_S, -1);
    for (guint i = 0; dirs[i]; i++) {
        if (*dirs[i])
            load_plugins_from(self, dirs[i]);
    }
}

/* Whether every required plugin is (still) on its way to running. */
static gboolean
check_required(PlegHost *self, gboolean started, GError **error)
{
    if (!self->required_plugins)
        return TRUE;

    for (guint i = 0; self->required_plugins[i]; i++) {
        const char *name = self->required_plugins[i];
        PluginEntry *entry = find_plugin(self, name);

        if (!entry) {
            g_autofree char *dir = pleg_log_text(self->plugin_dir && *self->plugin_dir
                                                     ? self->plugin_dir
                                                     : "(no plugin directory)",
                                                 -1, 4096);

            g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_REQUIRED_PLUGIN,
                        "required plugin %s was not found in %s", name, dir);
            return FALSE;
        }
        switch (entry->info.state) {
        case PLEG_PLUGIN_STATE_FAILED:
            g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_REQUIRED_PLUGIN, "required %s",
                        entry->info.error->message);
            return FALSE;
        case PLEG_PLUGIN_STATE_DISABLED_GATE:
            g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_REQUIRED_PLUGIN,
                        "required plugin %s is disabled: feature gate %s is off", name,
                        entry->feature_gate);
            return FALSE;
        case PLEG_PLUGIN_STATE_DISABLED_BY_NAME:
            g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_REQUIRED_PLUGIN,
                        "required plugin %s is disabled by name", name);
            return FALSE;
        case PLEG_PLUGIN_STATE_RUNNING:
        case PLEG_PLUGIN_STATE_STOPPED:
            if (started && entry->info.state != PLEG_PLUGIN_STATE_RUNNING) {
                g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_REQUIRED_PLUGIN,
                            "required plugin %s is not running", name);
                return FALSE;
            }
            break;
        }
    }
    return TRUE;
}

static void
stop_all(PlegHost *self)
{
    for (guint i = self->plugins->len; i > 0; i--) {
        PluginEntry *entry = g_ptr_array_index(self->plugins, i - 1);

        if (!entry->thread)
            continue;
        shutdown_plugin(entry);
        if (entry->info.state == PLEG_PLUGIN_STATE_RUNNING)
            entry->info.state = PLEG_PLUGIN_STATE_STOPPED;
    }
    pleg_generic_stop(self->pleg);
    g_atomic_int_set(&self->pleg_running, FALSE);
}

gboolean
pleg_host_start(PlegHost *self, GError **error)
{
    g_return_val_if_fail(self != NULL, FALSE);
    g_return_val_if_fail(error == NULL || *error == NULL, FALSE);

    if (self->started)
        return TRUE;

    /* A restart loads the plugins again (their modules are still resident). */
    g_ptr_array_set_size(self->plugins, 0);
    load_plugins(self);
    if (!check_required(self, FALSE, error)) {
        stop_all(self);
        return FALSE;
    }

    self->pleg_started_ns = now_ns(self);
    pleg_generic_start(self->pleg);
    g_atomic_int_set(&self->pleg_running, TRUE);

    for (guint i = 0; i < self->plugins->len; i++) {
        PluginEntry *entry = g_ptr_array_index(self->plugins, i);

        if (!entry->initialized)
            continue;
        start_plugin(entry);
        report_failure(self, entry);
    }
    if (!check_required(self, TRUE, error)) {
        stop_all(self);
        return FALSE;
    }

    self->started = TRUE;
    return TRUE;
}

void
pleg_host_stop(PlegHost *self)
{
    g_return_if_fail(self != NULL);

    if (!self->started)
        return;
    stop_all(self);
    self->started = FALSE;
}

/* ---- the host ---- */

/* ---- CRI list streaming (KEP-5825) ---- */

/* Says each change of listing path once, at the default level, and keeps kubelet's gauge:
 * 1 while listings stream, 0 while they fall back to unary RPCs. */
static void
list_notice(PlegCriClient *client, PlegCriListNotice notice, const GError *reason,
            gpointer user_data)
{
    PlegHost *self = user_data;
    static const char *const labels[] = {"runtime", NULL};

    switch (notice) {
    case PLEG_CRI_LIST_NOTICE_STREAMING:
        g_message("listing pod sandboxes and containers through the CRI list streams "
                  "(StreamPodSandboxes, StreamContainers)");
        pleg_metric_set(self->cri_streaming, labels, 1);
        break;
    case PLEG_CRI_LIST_NOTICE_FALLBACK:
        g_message("the runtime does not serve the CRI list streams (%s): listing with "
                  "ListPodSandbox and ListContainers, and trying the streams again every %s",
                  reason->message, self->list_probe_interval_text);
        pleg_metric_set(self->cri_streaming, labels, 0);
        break;
    case PLEG_CRI_LIST_NOTICE_TOO_LARGE:
        g_message("the runtime's listing no longer fits in one answer (%s): this node has "
                  "outgrown unary listing, and every relist fails until the runtime serves the "
                  "CRI list streams that CRIListStreaming uses",
                  reason->message);
        break;
    }
}

/* A unary listing too large to receive, with the gate off: the remedy is the gate. */
static void
list_notice_gate_off(PlegCriClient *client, PlegCriListNotice notice, const GError *reason,
                     gpointer user_data)
{
    if (notice == PLEG_CRI_LIST_NOTICE_TOO_LARGE)
        g_message("the runtime's listing no longer fits in one answer (%s): this node has "
                  "outgrown unary listing, and every relist fails until CRI list streaming is "
                  "on: enable the CRIListStreaming feature gate (--feature-gates="
                  "CRIListStreaming=true) with a runtime that serves it (KEP-5825)",
                  reason->message);
}

static void
list_streaming_setup(PlegHost *self, gboolean enabled, gint64 probe_interval_usec)
{
    if (!enabled) {
        pleg_cri_client_set_list_notice_func(self->client, list_notice_gate_off, NULL, NULL);
        return;
    }
    if (probe_interval_usec <= 0)
        probe_interval_usec = PLEG_CRI_LIST_PROBE_INTERVAL_USEC;
    self->list_probe_interval_text = pleg_duration_format(probe_interval_usec);
    self->cri_streaming = pleg_metrics_register(
        self->metrics, PLEG_METRIC_GAUGE, "kubelet_cri_streaming_enabled",
        "[ALPHA] 1 while CRI listings use the KEP-5825 list streams, 0 while they fall back to "
        "the unary RPCs because the runtime answered UNIMPLEMENTED.",
        (const char *const[]){"service", NULL}, NULL, 0);
    pleg_cri_client_set_list_streaming(self->client, TRUE, probe_interval_usec);
    pleg_cri_client_set_list_notice_func(self->client, list_notice, self, NULL);
}

PlegHost *
pleg_host_new(const PlegHostConfig *config, PlegFeatureGates *gates, GMainContext *context,
              GError **error)
{
    g_autoptr(PlegHost) self = NULL;
    g_autoptr(PlegFeatureGates) own_gates = NULL;

    g_return_val_if_fail(config != NULL, NULL);
    g_return_val_if_fail(error == NULL || *error == NULL, NULL);

    /* Without gates from the caller, the plugins' declared gates at their defaults. */
    if (!gates) {
        own_gates = pleg_feature_gates_new();
        if (!pleg_feature_gates_register_plugins(own_gates, config->plugin_dir, error))
            return NULL;
        gates = own_gates;
    }

    self = g_new0(PlegHost, 1);
    self->context = context ? g_main_context_ref(context) : g_main_context_ref_thread_default();
    self->own_gates = g_steal_pointer(&own_gates);
    self->gates = gates;
    g_rw_lock_init(&self->health_lock);
    self->checkers = g_ptr_array_new();
    self->subscriptions = g_ptr_array_new();
    self->plugins = g_ptr_array_new_with_free_func((GDestroyNotify)plugin_entry_free);
    self->plugin_dir = g_strdup(config->plugin_dir ? config->plugin_dir : PLEG_PLUGIN_DIR);
    self->disabled_plugins = g_strdupv((char **)config->disabled_plugins);
    self->required_plugins = g_strdupv((char **)config->required_plugins);

    if (config->runtime) {
        self->runtime = pleg_runtime_ref(config->runtime);
    } else {
        g_autoptr(GError) local_error = NULL;

        self->endpoint = g_strdup(config->runtime_endpoint ? config->runtime_endpoint
                                                           : PLEG_DEFAULT_CRI_ENDPOINT);
        self->client =
            pleg_cri_client_new(self->endpoint, config->runtime_request_timeout_usec, &local_error);
        if (!self->client) {
            g_set_error_literal(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                                local_error->message);
            return NULL;
        }
        self->runtime = pleg_cri_client_as_runtime(self->client);
    }

    self->clock = config->generic.clock;
    self->clock_data = config->generic.clock_data;
    self->relist_threshold_usec = config->generic.relist_threshold_usec > 0
                                      ? config->generic.relist_threshold_usec
                                      : PLEG_DEFAULT_RELIST_THRESHOLD_USEC;
    self->metrics = pleg_metrics_registry_new();
    if (self->client)
        list_streaming_setup(self,
                             pleg_feature_gates_enabled(gates, PLEG_FEATURE_CRI_LIST_STREAMING),
                             config->list_stream_probe_interval_usec);
    self->pleg = pleg_generic_new(self->runtime, &config->generic, self->metrics);
    add_checker(self, NULL, PLEG_HEALTH_LIVENESS, "pleg", pleg_health_check, self, NULL);
    add_checker(self, NULL, PLEG_HEALTH_READINESS, "first-relist", first_relist_check, self, NULL);
    add_checker(self, NULL, PLEG_HEALTH_READINESS, "runtime", runtime_health_check, self, NULL);

    return g_steal_pointer(&self);
}

void
pleg_host_free(PlegHost *self)
{
    if (!self)
        return;

    if (self->pleg)
        pleg_host_stop(self);

    for (guint i = 0; i < self->subscriptions->len; i++) {
        Subscription *subscription = g_ptr_array_index(self->subscriptions, i);

        g_source_destroy(subscription->source);
        g_source_unref(subscription->source);
        pleg_generic_unsubscribe(self->pleg, subscription->channel);
        g_free(subscription);
    }
    g_ptr_array_unref(self->subscriptions);

    /* Any checker left is the host's own. */
    while (self->checkers->len > 0)
        checker_free(g_ptr_array_steal_index(self->checkers, self->checkers->len - 1));
    g_ptr_array_unref(self->checkers);
    g_rw_lock_clear(&self->health_lock);

    g_ptr_array_unref(self->plugins);
    pleg_generic_free(self->pleg);
    if (self->metrics)
        pleg_metrics_registry_unref(self->metrics);
    if (self->runtime)
        pleg_runtime_unref(self->runtime);
    if (self->client) {
        /* The notices point at this host; the client may outlive it in a runtime reference. */
        pleg_cri_client_set_list_notice_func(self->client, NULL, NULL, NULL);
        pleg_cri_client_unref(self->client);
    }
    g_free(self->list_probe_interval_text);
    pleg_feature_gates_free(self->own_gates);
    g_strfreev(self->disabled_plugins);
    g_strfreev(self->required_plugins);
    g_free(self->plugin_dir);
    g_free(self->endpoint);
    g_main_context_unref(self->context);
    g_free(self);
}

void
pleg_host_add_event_callback(PlegHost *self, PlegEventFunc func, gpointer user_data,
                             GDestroyNotify destroy)
{
    Subscription *subscription;

    g_return_if_fail(self != NULL);
    g_return_if_fail(func != NULL);

    subscription = g_new0(Subscription, 1);
    subscription->channel = pleg_generic_subscribe(self->pleg, 0);
    subscription->source =
        pleg_event_channel_attach(subscription->channel, self->context, func, user_data, destroy);
    g_ptr_array_add(self->subscriptions, subscription);
}

void
pleg_host_set_relist_callback(PlegHost *self, PlegRelistFunc func, gpointer user_data,
                              GDestroyNotify destroy)
{
    g_return_if_fail(self != NULL);

    pleg_generic_set_relist_callback(self->pleg, self->context, func, user_data, destroy);
}

PlegGeneric *
pleg_host_get_pleg(PlegHost *self)
{
    g_return_val_if_fail(self != NULL, NULL);
    return self->pleg;
}

PlegMetricsRegistry *
pleg_host_get_metrics(PlegHost *self)
{
    g_return_val_if_fail(self != NULL, NULL);
    return self->metrics;
}

GPtrArray *
pleg_host_get_plugins(PlegHost *self)
{
    GPtrArray *plugins;

    g_return_val_if_fail(self != NULL, NULL);

    plugins = g_ptr_array_sized_new(self->plugins->len);
    for (guint i = 0; i < self->plugins->len; i++) {
        PluginEntry *entry = g_ptr_array_index(self->plugins, i);

        g_ptr_array_add(plugins, &entry->info);
    }
    return plugins;
}
