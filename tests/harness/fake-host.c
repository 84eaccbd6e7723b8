/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A fake plugin host: a real PlegHostServices table whose services record what a plugin does.
 */
#include "fake-host.h"

#include "pleg-host-private.h"

typedef struct {
    guint id;
    char *name;
    PlegHealthCheckFunc func;
    gpointer user_data;
    GDestroyNotify destroy;
} FakeChecker;

struct _FakeHost {
    PlegHostServices services;
    GMainContext *context;
    PlegMetricsRegistry *metrics;

    GMutex lock;
    GHashTable *gates; /* name -> GINT_TO_POINTER(enabled) */
    char *endpoint;
    GPtrArray *old_endpoints;
    CriChannel *channel;
    int relist_result;
    GPtrArray *relist_calls; /* FakeRelistCall */
    GPtrArray *logs;         /* GHashTable */
    GPtrArray *checkers;     /* FakeChecker */
    guint next_checker_id;

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

static void
checker_free(gpointer data)
{
    FakeChecker *checker = data;

    if (checker->destroy)
        checker->destroy(checker->user_data);
    g_free(checker->name);
    g_free(checker);
}

static GMainContext *
service_get_main_context(PlegPluginHost *host)
{
    return FAKE_HOST(host)->context;
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

static PlegMetric *
service_metric_register(PlegPluginHost *host, PlegMetricType type, const char *name,
                        const char *help, const char *const *label_names, const double *buckets,
                        gsize n_buckets)
{
    return pleg_metrics_register(FAKE_HOST(host)->metrics, type, name, help, label_names, buckets,
                                 n_buckets);
}

static guint
service_add_health_checker(PlegPluginHost *host, const char *name, PlegHealthCheckFunc func,
                           gpointer user_data, GDestroyNotify destroy)
{
    FakeHost *self = FAKE_HOST(host);
    FakeChecker *checker = g_new0(FakeChecker, 1);
    guint id;

    checker->name = g_strdup(name);
    checker->func = func;
    checker->user_data = user_data;
    checker->destroy = destroy;

    g_mutex_lock(&self->lock);
    id = checker->id = ++self->next_checker_id;
    g_ptr_array_add(self->checkers, checker);
    g_mutex_unlock(&self->lock);
    return id;
}

static void
service_remove_health_checker(PlegPluginHost *host, guint id)
{
    FakeHost *self = FAKE_HOST(host);
    FakeChecker *found = NULL;

    g_mutex_lock(&self->lock);
    for (guint i = 0; i < self->checkers->len; i++) {
        FakeChecker *checker = g_ptr_array_index(self->checkers, i);

        if (checker->id == id) {
            found = g_ptr_array_steal_index(self->checkers, i);
            break;
        }
    }
    g_mutex_unlock(&self->lock);

    /* The destroy notify runs unlocked: it may call back into the host. */
    if (found)
        checker_free(found);
}

static gboolean
service_check_health_progress(PlegPluginHost *host, PlegHealthProgressFunc progress,
                              gpointer progress_data, char **ret_checker, GError **error)
{
    FakeHost *self = FAKE_HOST(host);
    g_autoptr(GPtrArray) round = g_ptr_array_new();

    /* Checkers run unlocked (a checker may use other services); the test does not remove
     * checkers while a round runs. */
    g_mutex_lock(&self->lock);
    for (guint i = 0; i < self->checkers->len; i++)
        g_ptr_array_add(round, g_ptr_array_index(self->checkers, i));
    g_mutex_unlock(&self->lock);

    for (guint i = 0; i < round->len; i++) {
        FakeChecker *checker = g_ptr_array_index(round, i);
        g_autoptr(GError) local_error = NULL;

        if (progress)
            progress(checker->name, progress_data);
        if (!checker->func(checker->user_data, &local_error)) {
            if (!local_error)
                local_error =
                    g_error_new(G_IO_ERROR, G_IO_ERROR_FAILED, "%s failed", checker->name);
            if (ret_checker)
                *ret_checker = g_strdup(checker->name);
            g_propagate_error(error, g_steal_pointer(&local_error));
            return FALSE;
        }
    }
    return TRUE;
}

static gboolean
service_check_health(PlegPluginHost *host, char **ret_checker, GError **error)
{
    return service_check_health_progress(host, NULL, NULL, ret_checker, error);
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

static char *
field_value(const GLogField *field)
{
    if (!field->value)
        return g_strdup("");
    if (field->length < 0)
        return g_strdup(field->value);
    return g_strndup(field->value, field->length);
}

static void
service_log(PlegPluginHost *host, GLogLevelFlags level, const GLogField *fields, gsize n_fields)
{
    FakeHost *self = FAKE_HOST(host);
    GHashTable *record = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    g_autofree char *domain = NULL;

    for (gsize i = 0; i < n_fields; i++)
        g_hash_table_insert(record, g_strdup(fields[i].key), field_value(&fields[i]));
    if (!g_hash_table_contains(record, "PRIORITY"))
        g_hash_table_insert(record, g_strdup("PRIORITY"), g_strdup(level_to_priority(level)));
    if (!g_hash_table_contains(record, "GLIB_DOMAIN")) {
        const char *name =
            self->descriptor && self->descriptor->name ? self->descriptor->name : "plugin";

        g_hash_table_insert(record, g_strdup("GLIB_DOMAIN"), g_strdup_printf("pleg-%s", name));
    }
    if (!g_hash_table_contains(record, "MESSAGE"))
        g_hash_table_insert(record, g_strdup("MESSAGE"), g_strdup(""));
    domain = g_strdup(g_hash_table_lookup(record, "GLIB_DOMAIN"));

    g_mutex_lock(&self->lock);
    g_ptr_array_add(self->logs, record);
    g_mutex_unlock(&self->lock);
    g_main_context_wakeup(self->context);

    /* Also pass records on to GLib, as the real host does, so G_MESSAGES_DEBUG shows them. */
    {
        g_autofree GLogField *all = g_new0(GLogField, n_fields + 1);
        gsize n = 0;
        gboolean has_domain = FALSE;

        for (gsize i = 0; i < n_fields; i++) {
            all[n++] = fields[i];
            if (g_str_equal(fields[i].key, "GLIB_DOMAIN"))
                has_domain = TRUE;
        }
        if (!has_domain)
            all[n++] = (GLogField){"GLIB_DOMAIN", domain, -1};
        g_log_structured_array(level, all, n);
    }
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
    self->checkers = g_ptr_array_new();
    self->old_endpoints = g_ptr_array_new_with_free_func(g_free);

    self->services = (PlegHostServices){
        .size = sizeof(PlegHostServices),
        .abi_minor = PLEG_PLUGIN_ABI_MINOR,
        .host = (PlegPluginHost *)self,
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
    return self;
}

void
fake_host_free(FakeHost *self)
{
    if (!self)
        return;

    fake_host_stop_plugin(self);

    while (self->checkers->len > 0)
        checker_free(g_ptr_array_steal_index(self->checkers, self->checkers->len - 1));
    g_ptr_array_unref(self->checkers);

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

char *
fake_host_get_health_checker_names(FakeHost *self)
{
    GString *names = g_string_new(NULL);

    g_mutex_lock(&self->lock);
    for (guint i = 0; i < self->checkers->len; i++) {
        const FakeChecker *checker = g_ptr_array_index(self->checkers, i);

        if (i > 0)
            g_string_append_c(names, ',');
        g_string_append(names, checker->name);
    }
    g_mutex_unlock(&self->lock);
    return g_string_free(names, FALSE);
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
