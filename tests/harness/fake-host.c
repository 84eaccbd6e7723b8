/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A fake plugin host: a real PlegHostServices table whose services record what a plugin does.
 * The table, the health checkers and the log records' fields are the host's own
 * (lib/host/pleg-services.h); gates, RequestRelist and the runtime endpoint are the fake's.
 */
#include "fake-host.h"

#include "pleg-services.h"

struct _FakeHost {
    PlegServiceHost base; /* first: the plugin's PlegPluginHost points here */
    PlegHostServices services;
    GMainContext *context;
    PlegMetricsRegistry *metrics;
    PlegHealthRegistry *health;
    PlegStatusBoard *statuses; /* one row, the plugin's */
    char *log_domain;

    GMutex lock;
    GHashTable *gates; /* name -> GINT_TO_POINTER(enabled) */
    char *endpoint;
    GPtrArray *old_endpoints;
    CriChannel *channel;
    int relist_result;
    GPtrArray *relist_calls; /* FakeRelistCall */
    GPtrArray *logs;         /* GHashTable */

    const PlegPluginDescriptor *descriptor;
    gpointer state;
};

#define FAKE_HOST(h) ((FakeHost *)(h))

static void
relist_call_free(gpointer data)
{
    FakeRelistCall *call = data;

    g_free(call->pod_uid);
    g_free(call);
}

static gboolean
service_feature_enabled(PlegPluginHost *host, const char *gate)
{
    FakeHost *self = FAKE_HOST(host);
    gboolean enabled;

    if (!gate)
        return FALSE;
    g_mutex_lock(&self->lock);
    enabled = GPOINTER_TO_INT(g_hash_table_lookup(self->gates, gate));
    g_mutex_unlock(&self->lock);
    return enabled;
}

static int
service_request_relist(PlegPluginHost *host, const char *pod_uid, PlegPluginRelistSource source)
{
    FakeHost *self = FAKE_HOST(host);
    FakeRelistCall *call = g_new0(FakeRelistCall, 1);
    int result;

    call->pod_uid = g_strdup(pod_uid);
    call->source = source;
    call->monotonic_usec = g_get_monotonic_time();

    g_mutex_lock(&self->lock);
    g_ptr_array_add(self->relist_calls, call);
    result = self->relist_result;
    g_mutex_unlock(&self->lock);

    /* A waiter iterating the context re-checks its condition. */
    g_main_context_wakeup(self->context);
    return result;
}

static char *
field_value(const GLogField *field)
{
    if (!field->value)
        return g_strdup("");
    if (field->length < 0)
        return g_strdup(field->value);
    return g_strndup(field->value, field->length);
}

/* Records what the host's log service passes on to GLib, GLIB_DOMAIN and PRIORITY filled in. */
static void
record_log(PlegPluginHost *host, GLogLevelFlags level, const GLogField *fields, gsize n_fields)
{
    FakeHost *self = FAKE_HOST(host);
    GHashTable *record = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);

    for (gsize i = 0; i < n_fields; i++)
        g_hash_table_insert(record, g_strdup(fields[i].key), field_value(&fields[i]));
    if (!g_hash_table_contains(record, "MESSAGE"))
        g_hash_table_insert(record, g_strdup("MESSAGE"), g_strdup(""));

    g_mutex_lock(&self->lock);
    g_ptr_array_add(self->logs, record);
    g_mutex_unlock(&self->lock);
    g_main_context_wakeup(self->context);
}

static const char *
service_get_runtime_endpoint(PlegPluginHost *host)
{
    FakeHost *self = FAKE_HOST(host);
    const char *endpoint;

    g_mutex_lock(&self->lock);
    endpoint = self->endpoint ? self->endpoint : "";
    g_mutex_unlock(&self->lock);
    return endpoint;
}

static PlegContainerEventStream *
service_container_events_open(PlegPluginHost *host, GError **error)
{
    FakeHost *self = FAKE_HOST(host);
    g_autoptr(CriChannel) channel = NULL;

    g_mutex_lock(&self->lock);
    if (!self->channel && self->endpoint) {
        self->channel = cri_channel_new(self->endpoint, error);
        if (!self->channel) {
            g_mutex_unlock(&self->lock);
            return NULL;
        }
    }
    if (self->channel)
        channel = cri_channel_ref(self->channel);
    g_mutex_unlock(&self->lock);

    if (!channel) {
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_UNIMPLEMENTED,
                    "fake host: GetContainerEvents: no runtime endpoint set");
        return NULL;
    }
    return cri_container_events_open(channel, error);
}

static const PlegServiceHostFuncs fake_funcs = {
    .feature_enabled = service_feature_enabled,
    .request_relist = service_request_relist,
    .get_runtime_endpoint = service_get_runtime_endpoint,
    .container_events_open = service_container_events_open,
    .log_record = record_log,
};

FakeHost *
fake_host_new(void)
{
    FakeHost *self = g_new0(FakeHost, 1);

    self->context = g_main_context_new();
    self->metrics = pleg_metrics_registry_new();
    g_mutex_init(&self->lock);
    self->gates = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    self->relist_calls = g_ptr_array_new_with_free_func(relist_call_free);
    self->logs = g_ptr_array_new_with_free_func((GDestroyNotify)g_hash_table_unref);
    self->health = pleg_health_registry_new();
    self->statuses = pleg_status_board_new();
    pleg_status_board_add(self->statuses, &self->base, "plugin");
    self->old_endpoints = g_ptr_array_new_with_free_func(g_free);

    self->log_domain = g_strdup("pleg-plugin");
    self->base = (PlegServiceHost){
        .funcs = &fake_funcs,
        .context = self->context,
        .metrics = self->metrics,
        .health = self->health,
        .log_domain = self->log_domain,
        .status = self->statuses,
    };
    pleg_services_init(&self->services, &self->base);
    return self;
}

void
fake_host_free(FakeHost *self)
{
    if (!self)
        return;

    fake_host_stop_plugin(self);

    pleg_health_registry_unref(self->health);
    pleg_status_board_unref(self->statuses);

    /* Let sources the plugin destroyed in stop run their finalizers. */
    while (g_main_context_iteration(self->context, FALSE))
        ;
    g_main_context_unref(self->context);

    g_clear_pointer(&self->channel, cri_channel_unref);
    g_free(self->endpoint);
    g_ptr_array_unref(self->old_endpoints);
    g_ptr_array_unref(self->relist_calls);
    g_ptr_array_unref(self->logs);
    g_hash_table_unref(self->gates);
    g_free(self->log_domain);
    pleg_metrics_registry_unref(self->metrics);
    g_mutex_clear(&self->lock);
    g_free(self);
}

const PlegHostServices *
fake_host_get_services(FakeHost *self)
{
    return &self->services;
}

GMainContext *
fake_host_get_context(FakeHost *self)
{
    return self->context;
}

PlegMetricsRegistry *
fake_host_get_metrics(FakeHost *self)
{
    return self->metrics;
}

void
fake_host_set_gate(FakeHost *self, const char *gate, gboolean enabled)
{
    g_mutex_lock(&self->lock);
    g_hash_table_insert(self->gates, g_strdup(gate), GINT_TO_POINTER(!!enabled));
    g_mutex_unlock(&self->lock);
}

void
fake_host_set_runtime_endpoint(FakeHost *self, const char *endpoint)
{
    g_mutex_lock(&self->lock);
    /* The old string may still be held by a caller of get_runtime_endpoint: keep it until the
     * host goes (a test sets the endpoint once or twice). */
    if (self->endpoint)
        g_ptr_array_add(self->old_endpoints, g_steal_pointer(&self->endpoint));
    self->endpoint = g_strdup(endpoint);
    g_clear_pointer(&self->channel, cri_channel_unref);
    g_mutex_unlock(&self->lock);
}

void
fake_host_set_request_relist_result(FakeHost *self, int result)
{
    g_mutex_lock(&self->lock);
    self->relist_result = result;
    g_mutex_unlock(&self->lock);
}

gboolean
fake_host_start_plugin(FakeHost *self, const PlegPluginDescriptor *descriptor, GError **error)
{
    gpointer state = NULL;
    gboolean ok = TRUE;

    g_return_val_if_fail(descriptor != NULL, FALSE);
    g_return_val_if_fail(self->descriptor == NULL, FALSE);

    self->descriptor = descriptor;
    /* Records that name no domain get the plugin's, as from the real host; set while no plugin
     * code runs. */
    g_free(self->log_domain);
    self->log_domain = g_strdup_printf("pleg-%s", descriptor->name ? descriptor->name : "plugin");
    self->base.log_domain = self->log_domain;
    /* The plugin's status row, under its name. */
    pleg_status_board_remove(self->statuses, &self->base);
    pleg_status_board_add(self->statuses, &self->base,
                          descriptor->name ? descriptor->name : "plugin");
    /* Lifecycle functions run with the plugin context acquired and thread-default, as in the
     * real host's plugin thread. */
    g_main_context_push_thread_default(self->context);
    if (descriptor->init && !descriptor->init(&self->services, &state, error)) {
        ok = FALSE;
    } else if (descriptor->start && !descriptor->start(state, error)) {
        if (descriptor->stop)
            descriptor->stop(state);
        if (descriptor->free)
            descriptor->free(state);
        ok = FALSE;
    }
    g_main_context_pop_thread_default(self->context);

    if (!ok) {
        self->descriptor = NULL;
        return FALSE;
    }
    self->state = state;
    return TRUE;
}

void
fake_host_stop_plugin(FakeHost *self)
{
    const PlegPluginDescriptor *descriptor = self->descriptor;

    if (!descriptor)
        return;

    g_main_context_push_thread_default(self->context);
    if (descriptor->stop)
        descriptor->stop(self->state);
    if (descriptor->free)
        descriptor->free(self->state);
    g_main_context_pop_thread_default(self->context);
    /* As the real host: a status goes with the plugin's free. */
    pleg_status_board_clear(self->statuses, &self->base);
    self->state = NULL;
    self->descriptor = NULL;
}

guint
fake_host_get_relist_count(FakeHost *self)
{
    guint n;

    g_mutex_lock(&self->lock);
    n = self->relist_calls->len;
    g_mutex_unlock(&self->lock);
    return n;
}

GPtrArray *
fake_host_get_relist_calls(FakeHost *self)
{
    GPtrArray *copy = g_ptr_array_new_with_free_func(relist_call_free);

    g_mutex_lock(&self->lock);
    for (guint i = 0; i < self->relist_calls->len; i++) {
        const FakeRelistCall *call = g_ptr_array_index(self->relist_calls, i);
        FakeRelistCall *dup = g_new0(FakeRelistCall, 1);

        *dup = *call;
        dup->pod_uid = g_strdup(call->pod_uid);
        g_ptr_array_add(copy, dup);
    }
    g_mutex_unlock(&self->lock);
    return copy;
}

void
fake_host_clear_relist_calls(FakeHost *self)
{
    g_mutex_lock(&self->lock);
    g_ptr_array_set_size(self->relist_calls, 0);
    g_mutex_unlock(&self->lock);
}

guint
fake_host_get_log_count(FakeHost *self)
{
    guint n;

    g_mutex_lock(&self->lock);
    n = self->logs->len;
    g_mutex_unlock(&self->lock);
    return n;
}

GPtrArray *
fake_host_get_logs(FakeHost *self)
{
    GPtrArray *copy = g_ptr_array_new_with_free_func((GDestroyNotify)g_hash_table_unref);

    g_mutex_lock(&self->lock);
    for (guint i = 0; i < self->logs->len; i++) {
        GHashTable *record = g_ptr_array_index(self->logs, i);
        GHashTable *dup = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
        GHashTableIter iter;
        gpointer key, value;

        g_hash_table_iter_init(&iter, record);
        while (g_hash_table_iter_next(&iter, &key, &value))
            g_hash_table_insert(dup, g_strdup(key), g_strdup(value));
        g_ptr_array_add(copy, dup);
    }
    g_mutex_unlock(&self->lock);
    return copy;
}

guint
fake_host_count_logs(FakeHost *self, const char *field, const char *value)
{
    guint n = 0;

    g_mutex_lock(&self->lock);
    for (guint i = 0; i < self->logs->len; i++) {
        const char *v = g_hash_table_lookup(g_ptr_array_index(self->logs, i), field);

        if (v && g_str_equal(v, value))
            n++;
    }
    g_mutex_unlock(&self->lock);
    return n;
}

void
fake_host_clear_logs(FakeHost *self)
{
    g_mutex_lock(&self->lock);
    g_ptr_array_set_size(self->logs, 0);
    g_mutex_unlock(&self->lock);
}

gboolean
fake_host_get_status(FakeHost *self, char **ret_state, char **ret_message,
                     gint64 *ret_since_unix_usec)
{
    g_autoptr(GPtrArray) list = pleg_status_board_list(self->statuses, NULL);
    PlegPluginStatus *status;

    if (list->len == 0)
        return FALSE;
    status = g_ptr_array_index(list, 0);
    if (ret_state)
        *ret_state = g_steal_pointer(&status->state);
    if (ret_message)
        *ret_message = g_steal_pointer(&status->message);
    if (ret_since_unix_usec)
        *ret_since_unix_usec = status->since_unix_usec;
    return TRUE;
}

typedef struct {
    FakeHost *host;
    const char *state;
} StatusWait;

static gboolean
status_reached(gpointer data)
{
    StatusWait *wait = data;
    g_autofree char *state = NULL;

    return fake_host_get_status(wait->host, &state, NULL, NULL) && g_str_equal(state, wait->state);
}

gboolean
fake_host_wait_status(FakeHost *self, const char *state, gint64 timeout_usec)
{
    StatusWait wait = {self, state};

    return fake_host_wait(self, status_reached, &wait, timeout_usec);
}

char *
fake_host_get_health_checker_names(FakeHost *self)
{
    return pleg_health_registry_get_names(self->health);
}

gboolean
fake_host_wait(FakeHost *self, gboolean (*func)(gpointer data), gpointer data, gint64 timeout_usec)
{
    gint64 deadline = g_get_monotonic_time() + timeout_usec;
    gboolean done;

    g_main_context_push_thread_default(self->context);
    while (!(done = func(data))) {
        gint64 remaining = deadline - g_get_monotonic_time();
        GSource *tick;

        if (remaining <= 0)
            break;
        /* Conditions may change on other threads without waking the context: re-check at
         * least every few milliseconds. */
        tick = g_timeout_source_new(MAX(1, MIN(remaining / 1000, 5)));
        g_source_set_dummy_callback(tick);
        g_source_attach(tick, self->context);
        g_main_context_iteration(self->context, TRUE);
        g_source_destroy(tick);
        g_source_unref(tick);
    }
    g_main_context_pop_thread_default(self->context);
    return done;
}

typedef struct {
    FakeHost *host;
    guint count;
} RelistCountWait;

static gboolean
relist_count_reached(gpointer data)
{
    RelistCountWait *wait = data;

    return fake_host_get_relist_count(wait->host) >= wait->count;
}

gboolean
fake_host_wait_relist_count(FakeHost *self, guint count, gint64 timeout_usec)
{
    RelistCountWait wait = {self, count};

    return fake_host_wait(self, relist_count_reached, &wait, timeout_usec);
}

static gboolean
never(gpointer data)
{
    return FALSE;
}

void
fake_host_run_for(FakeHost *self, gint64 usec)
{
    fake_host_wait(self, never, NULL, usec);
}
