/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Evented PLEG watcher (plugins/evented) alone: the fake host records its RequestRelist
 * calls, logs and metrics, and cri-sim plays the runtime over real gRPC.
 *
 * Most tests load libpleg-evented-fast.so, the same sources built with
 * -DEVENTED_TEST_FAST_BACKOFF (backoff base 100 us, cap 2 ms, reset after 300 ms healthy,
 * "connected" after 100 ms open) so that reconnects can be counted in thousands; the installed
 * module (60 s cap) is used where the real policy matters (descriptor, stop with a retry
 * pending).
 */
#include <check.h>
#include <dirent.h>
#include <glib/gstdio.h>
#include <gmodule.h>
#include <malloc.h>
#include <string.h>
#include <stdlib.h>

#include "cri-sim.h"
#include "fake-host.h"

#ifdef HAVE_VALGRIND_H
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

#define WAIT_USEC (10 * G_USEC_PER_SEC)

/* Fast build policy, see the file comment. */
#define FAST_MAX_USEC 2000

#define METRIC_ERRORS     "kubelet_evented_pleg_connection_error_count"
#define METRIC_SUCCESSES  "kubelet_evented_pleg_connection_success_count"
#define METRIC_LATENCY    "kubelet_evented_pleg_connection_latency_seconds"
#define METRIC_STATE      "kubelet_evented_pleg_connection_state"
#define METRIC_RECONNECTS "kubelet_evented_pleg_reconnect_attempts_total"
#define METRIC_RECEIVED   "kubelet_evented_pleg_events_received_total"
#define METRIC_IGNORED    "kubelet_evented_pleg_events_ignored_total"

static const PlegPluginDescriptor *
load_descriptor(const char *path)
{
    GModule *module;
    gpointer symbol = NULL;

    module = g_module_open(path, G_MODULE_BIND_LOCAL);
    ck_assert_msg(module, "%s: %s", path, g_module_error());
    ck_assert(g_module_symbol(module, "pleg_plugin_descriptor", &symbol));
    ck_assert_ptr_nonnull(symbol);
    g_module_make_resident(module);
    return symbol;
}

typedef struct {
    char *dir;
    char *socket_path;
    CriSim *sim;
    FakeHost *host;
    const PlegPluginDescriptor *descriptor;
} Fixture;

static void
fixture_free(Fixture *fx)
{
    if (!fx)
        return;
    fake_host_free(fx->host);
    cri_sim_free(fx->sim);
    g_rmdir(fx->dir);
    g_free(fx->socket_path);
    g_free(fx->dir);
    g_free(fx);
}
G_DEFINE_AUTOPTR_CLEANUP_FUNC(Fixture, fixture_free)

/* A runtime with pod "uid-a" (container "c1" CREATED) and a host, the plugin not started. */
static Fixture *
fixture_new_stopped(const char *module_path)
{
    Fixture *fx = g_new0(Fixture, 1);
    g_autoptr(GError) error = NULL;
    g_autofree char *endpoint = NULL;

    fx->dir = g_dir_make_tmp("evented-XXXXXX", &error);
    ck_assert_msg(fx->dir, "%s", error ? error->message : "");
    fx->socket_path = g_build_filename(fx->dir, "cri.sock", NULL);
    fx->sim = cri_sim_new(fx->socket_path, &error);
    ck_assert_msg(fx->sim, "%s", error ? error->message : "");
    ck_assert(cri_sim_add_pod(fx->sim, "uid-a", "pod-a", &error));
    ck_assert(cri_sim_add_container(fx->sim, "uid-a", "c1", "app", &error));

    fx->host = fake_host_new();
    fake_host_set_gate(fx->host, "EventedPLEG", TRUE);
    endpoint = g_strconcat("unix://", fx->socket_path, NULL);
    fake_host_set_runtime_endpoint(fx->host, endpoint);
    fx->descriptor = load_descriptor(module_path);
    return fx;
}

static gboolean
has_subscriber(gpointer data)
{
    Fixture *fx = data;

    return cri_sim_get_n_subscribers(fx->sim) == 1;
}

static void
wait_subscribed(Fixture *fx)
{
    ck_assert_msg(fake_host_wait(fx->host, has_subscriber, fx, WAIT_USEC), "no subscriber");
}

static void
fixture_start(Fixture *fx)
{
    g_autoptr(GError) error = NULL;

    ck_assert_msg(fake_host_start_plugin(fx->host, fx->descriptor, &error), "%s",
                  error ? error->message : "");
}

/* Plugin started and subscribed. */
static Fixture *
fixture_new_with(const char *module_path)
{
    Fixture *fx = fixture_new_stopped(module_path);

    fixture_start(fx);
    wait_subscribed(fx);
    return fx;
}

static Fixture *
fixture_new(void)
{
    return fixture_new_with(EVENTED_FAST_MODULE);
}

static double
metric(Fixture *fx, const char *name, const char *label)
{
    PlegMetric *m = pleg_metrics_lookup(fake_host_get_metrics(fx->host), name);
    const char *values[] = {label, NULL};

    ck_assert_msg(m, "metric %s not registered", name);
    return pleg_metric_get(m, label ? values : NULL);
}

static guint64
metric_count(Fixture *fx, const char *name)
{
    PlegMetric *m = pleg_metrics_lookup(fake_host_get_metrics(fx->host), name);

    ck_assert_msg(m, "metric %s not registered", name);
    return pleg_metric_get_count(m, NULL);
}

typedef struct {
    Fixture *fx;
    const char *name;
    const char *label;
    double value;
} MetricWait;

static gboolean
metric_reached(gpointer data)
{
    MetricWait *w = data;

    return metric(w->fx, w->name, w->label) >= w->value;
}

static void
wait_metric(Fixture *fx, const char *name, const char *label, double value)
{
    MetricWait w = {fx, name, label, value};

    ck_assert_msg(fake_host_wait(fx->host, metric_reached, &w, WAIT_USEC),
                  "%s{%s} is %g, waited for %g", name, label ? label : "", metric(fx, name, label),
                  value);
}

/* Waits until the plugin has processed @n events of @type in total. */
static void
wait_received(Fixture *fx, const char *type, double n)
{
    wait_metric(fx, METRIC_RECEIVED, type, n);
}

static void
emit(Fixture *fx, CriSimEventType type, const char *container_id, CriSimEventFlags flags)
{
    CriSimEvent event = {.type = type, .container_id = container_id, .flags = flags};

    ck_assert_int_eq(cri_sim_emit(fx->sim, &event), 1);
}

static void
assert_relists(Fixture *fx, const char *expected_uids)
{
    g_autoptr(GPtrArray) calls = fake_host_get_relist_calls(fx->host);
    g_autoptr(GString) uids = g_string_new(NULL);

    for (guint i = 0; i < calls->len; i++) {
        const FakeRelistCall *call = g_ptr_array_index(calls, i);

        ck_assert_int_eq(call->source, PLEG_PLUGIN_RELIST_SOURCE_EVENTED_PLEG);
        g_string_append_printf(uids, "%s%s", i ? "," : "", call->pod_uid);
    }
    ck_assert_str_eq(uids->str, expected_uids);
}

/* The recorded log records whose @field is @value.  (transfer full) */
static GPtrArray *
find_logs(Fixture *fx, const char *field, const char *value)
{
    g_autoptr(GPtrArray) logs = fake_host_get_logs(fx->host);
    GPtrArray *found = g_ptr_array_new_with_free_func((GDestroyNotify)g_hash_table_unref);

    for (guint i = 0; i < logs->len; i++) {
        GHashTable *record = g_ptr_array_index(logs, i);

        if (g_strcmp0(g_hash_table_lookup(record, field), value) == 0)
            g_ptr_array_add(found, g_hash_table_ref(record));
    }
    return found;
}

/* RETRY_DELAY_USEC of every "reconnect scheduled" record, in order. */
static GArray *
retry_delays(Fixture *fx, GArray **ret_unimplemented)
{
    g_autoptr(GPtrArray) logs = fake_host_get_logs(fx->host);
    GArray *delays = g_array_new(FALSE, FALSE, sizeof(gint64));
    GArray *unimplemented = g_array_new(FALSE, FALSE, sizeof(gboolean));

    for (guint i = 0; i < logs->len; i++) {
        GHashTable *record = g_ptr_array_index(logs, i);
        const char *delay = g_hash_table_lookup(record, "RETRY_DELAY_USEC");
        gboolean unimpl;
        gint64 value;

        if (!delay)
            continue;
        value = g_ascii_strtoll(delay, NULL, 10);
        unimpl = g_strcmp0(g_hash_table_lookup(record, "UNIMPLEMENTED"), "true") == 0;
        g_array_append_val(delays, value);
        g_array_append_val(unimplemented, unimpl);
    }
    if (ret_unimplemented)
        *ret_unimplemented = unimplemented;
    else
        g_array_unref(unimplemented);
    return delays;
}

/* The plugin's status (set_status) is @state, with @message (a GRegex pattern, anchored);
 * returns when the state last changed. */
static gint64
assert_status(Fixture *fx, const char *state, const char *message)
{
    g_autofree char *got_state = NULL;
    g_autofree char *got_message = NULL;
    g_autofree char *pattern = g_strconcat("^", message, "$", NULL);
    gint64 since = 0;

    ck_assert_msg(fake_host_get_status(fx->host, &got_state, &got_message, &since), "no status");
    ck_assert_str_eq(got_state, state);
    ck_assert_msg(g_regex_match_simple(pattern, got_message, 0, 0), "%s: \"%s\" is not \"%s\"",
                  state, got_message, message);
    return since;
}

static void
wait_status(Fixture *fx, const char *state)
{
    g_autofree char *got = NULL;

    if (!fake_host_wait_status(fx->host, state, WAIT_USEC)) {
        fake_host_get_status(fx->host, &got, NULL, NULL);
        ck_abort_msg("the status never became %s; it is %s", state, got ? got : "(none)");
    }
}

/* The number of records at info level that say the state changed to @state. */
static guint
count_state_logs(Fixture *fx, const char *state)
{
    g_autoptr(GPtrArray) logs = find_logs(fx, "STATE", state);
    guint n = 0;

    for (guint i = 0; i < logs->len; i++)
        n += g_strcmp0(g_hash_table_lookup(logs->pdata[i], "PRIORITY"), "6") == 0;
    return n;
}

/* ---- the descriptor and the key file ---- */

START_TEST(test_descriptor)
{
    const PlegPluginDescriptor *d = load_descriptor(EVENTED_MODULE);
    g_autoptr(GKeyFile) key_file = g_key_file_new();
    g_autoptr(GError) error = NULL;
    g_autofree char *dir = g_path_get_dirname(EVENTED_MODULE);
    g_autofree char *key_path = g_build_filename(dir, "evented.plugin", NULL);
    g_autofree char *name = NULL;
    g_autofree char *module = NULL;
    g_autofree char *gate = NULL;
    g_autofree char *module_path = NULL;

    ck_assert_int_eq(d->abi_major, PLEG_PLUGIN_ABI_MAJOR);
    ck_assert_int_eq(d->abi_minor, PLEG_PLUGIN_ABI_MINOR);
    ck_assert_int_eq(d->size, sizeof(PlegPluginDescriptor));
    ck_assert_str_eq(d->name, "evented");
    ck_assert_str_eq(d->feature_gate, "EventedPLEG");
    ck_assert_ptr_nonnull(d->description);
    ck_assert(d->init && d->start && d->stop && d->free);
    for (guint i = 0; i < G_N_ELEMENTS(d->reserved); i++)
        ck_assert_ptr_null(d->reserved[i]);

    /* The key file sits next to the module in the build dir, naming it. */
    ck_assert_msg(g_key_file_load_from_file(key_file, key_path, G_KEY_FILE_NONE, &error), "%s",
                  error ? error->message : "");
    name = g_key_file_get_string(key_file, "Plugin", "Name", NULL);
    module = g_key_file_get_string(key_file, "Plugin", "Module", NULL);
    gate = g_key_file_get_string(key_file, "Plugin", "FeatureGate", NULL);
    ck_assert_str_eq(name, "evented");
    ck_assert_str_eq(module, "libpleg-evented.so");
    ck_assert_str_eq(gate, "EventedPLEG");
    module_path = g_build_filename(dir, module, NULL);
    ck_assert(g_file_test(module_path, G_FILE_TEST_IS_REGULAR));
}
END_TEST

/* init registers the metrics and nothing else: no health checker, no relist, no stream. */
START_TEST(test_init_no_side_effects)
{
    g_autoptr(Fixture) fx = fixture_new_stopped(EVENTED_MODULE);
    const PlegHostServices *services = fake_host_get_services(fx->host);
    g_autoptr(GError) error = NULL;
    g_autofree char *checkers = NULL;
    gpointer state = NULL;

    ck_assert(fx->descriptor->init(services, &state, &error));
    ck_assert_ptr_nonnull(state);
    fake_host_run_for(fx->host, 50 * 1000);
    ck_assert_int_eq(cri_sim_get_n_calls(fx->sim, NULL), 0);
    for (const char *const *n =
             (const char *const[]){METRIC_ERRORS, METRIC_SUCCESSES, METRIC_LATENCY, METRIC_STATE,
                                   METRIC_RECONNECTS, METRIC_RECEIVED, METRIC_IGNORED, NULL};
         *n; n++)
        ck_assert_msg(pleg_metrics_lookup(fake_host_get_metrics(fx->host), *n), "%s", *n);

    /* stop before start, twice, then free: all fine. */
    fx->descriptor->stop(state);
    fx->descriptor->stop(state);
    fx->descriptor->free(state);
    fx->descriptor->free(NULL);

    checkers = fake_host_get_health_checker_names(fx->host);
    ck_assert_str_eq(checkers, "");
    ck_assert_int_eq(fake_host_get_relist_count(fx->host), 0);
}
END_TEST

/* ---- events ---- */

/* A container's life: only STOPPED asks for a relist, exactly once, with the pod's uid. */
START_TEST(test_stopped_requests_relist)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GError) error = NULL;
    g_autofree char *checkers = NULL;

    ck_assert(cri_sim_start_container(fx->sim, "c1", &error));
    wait_received(fx, "started", 1);
    ck_assert_int_eq(fake_host_get_relist_count(fx->host), 0);

    ck_assert(cri_sim_exit_container(fx->sim, "c1", 0, NULL, &error));
    ck_assert(cri_sim_remove_container(fx->sim, "c1", &error));
    wait_received(fx, "deleted", 1);
    assert_relists(fx, "uid-a");

    ck_assert_double_eq(metric(fx, METRIC_RECEIVED, "stopped"), 1);
    ck_assert_double_eq(metric(fx, METRIC_RECEIVED, "created"), 0);
    /* Latency recorded for every event. */
    ck_assert_uint_eq(metric_count(fx, METRIC_LATENCY), 3);
    ck_assert_double_eq(metric(fx, METRIC_STATE, NULL), 1);
    ck_assert_double_eq(metric(fx, METRIC_SUCCESSES, NULL), 1);
    ck_assert_double_eq(metric(fx, METRIC_ERRORS, NULL), 0);

    checkers = fake_host_get_health_checker_names(fx->host);
    ck_assert_str_eq(checkers, "");
}
END_TEST

/* CREATED, STARTED and DELETED never ask for a relist, natural or emitted. */
START_TEST(test_other_types_no_relist)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GError) error = NULL;

    ck_assert(cri_sim_add_container(fx->sim, "uid-a", "c2", NULL, &error));
    ck_assert(cri_sim_start_container(fx->sim, "c2", &error));
    emit(fx, CRI_SIM_EVENT_CREATED, "c1", 0);
    emit(fx, CRI_SIM_EVENT_STARTED, "c1", 0);
    emit(fx, CRI_SIM_EVENT_DELETED, "c1", 0);
    emit(fx, CRI_SIM_EVENT_DELETED, "c2", CRI_SIM_EVENT_NO_CONTAINERS);
    wait_received(fx, "deleted", 2);
    ck_assert_double_eq(metric(fx, METRIC_RECEIVED, "created"), 2);
    ck_assert_double_eq(metric(fx, METRIC_RECEIVED, "started"), 2);
    ck_assert_int_eq(fake_host_get_relist_count(fx->host), 0);
}
END_TEST

/* Whatever the exit code, reason or attached statuses: one relist per STOPPED. */
START_TEST(test_stopped_any_exit)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GError) error = NULL;

    ck_assert(cri_sim_add_pod(fx->sim, "uid-b", NULL, &error));
    ck_assert(cri_sim_add_container(fx->sim, "uid-b", "c2", NULL, &error));
    ck_assert(cri_sim_add_container(fx->sim, "uid-b", "c3", NULL, &error));
    ck_assert(cri_sim_start_container(fx->sim, "c1", &error));
    ck_assert(cri_sim_start_container(fx->sim, "c2", &error));
    ck_assert(cri_sim_start_container(fx->sim, "c3", &error));

    ck_assert(cri_sim_exit_container(fx->sim, "c1", 0, "Completed", &error));
    ck_assert(cri_sim_exit_container(fx->sim, "c2", 1, "Error", &error));
    ck_assert(cri_sim_exit_container(fx->sim, "c3", 137, "OOMKilled", &error));
    emit(fx, CRI_SIM_EVENT_STOPPED, "c3", CRI_SIM_EVENT_NO_CONTAINERS);
    wait_received(fx, "stopped", 4);
    assert_relists(fx, "uid-a,uid-b,uid-b,uid-b");

    /* What the host answers (queued, coalesced, dropped) changes nothing. */
    fake_host_set_request_relist_result(fx->host, 2);
    emit(fx, CRI_SIM_EVENT_STOPPED, "c1", 0);
    wait_received(fx, "stopped", 5);
    ck_assert_int_eq(fake_host_get_relist_count(fx->host), 5);
}
END_TEST

/* Duplicates are two requests: the Generic PLEG finds nothing new the second time. */
START_TEST(test_duplicates)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GError) error = NULL;

    ck_assert(cri_sim_start_container(fx->sim, "c1", &error));
    ck_assert(cri_sim_exit_container(fx->sim, "c1", 2, NULL, &error));
    emit(fx, CRI_SIM_EVENT_STOPPED, "c1", 0);
    wait_received(fx, "stopped", 2);
    assert_relists(fx, "uid-a,uid-a");
}
END_TEST

/* STOPPED before STARTED and an old created_at: order and age do not matter; the latency is
 * measured from created_at. */
START_TEST(test_out_of_order_and_old)
{
    g_autoptr(Fixture) fx = fixture_new();
    CriSimEvent old = {
        .type = CRI_SIM_EVENT_STOPPED,
        .container_id = "c1",
        .created_at_ns = g_get_real_time() * 1000 - (gint64)3600 * 1000000000,
    };

    emit(fx, CRI_SIM_EVENT_STOPPED, "c1", 0);
    emit(fx, CRI_SIM_EVENT_STARTED, "c1", 0);
    ck_assert_int_eq(cri_sim_emit(fx->sim, &old), 1);
    wait_received(fx, "stopped", 2);
    assert_relists(fx, "uid-a,uid-a");
    ck_assert_uint_eq(metric_count(fx, METRIC_LATENCY), 3);
    /* The histogram sum holds the old event's hour. */
    ck_assert_double_ge(metric(fx, METRIC_LATENCY, NULL), 3600);
    ck_assert_double_lt(metric(fx, METRIC_LATENCY, NULL), 3700);
}
END_TEST

/* Public report (b): events with no sandbox status (sandbox deleted while a container was being
 * created), no metadata, an empty uid or an unknown container id.  No crash; the first three
 * are counted by reason and logged once per minute; the unknown id still names a pod and is
 * relisted; later events are processed normally. */
START_TEST(test_invalid_events)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GError) error = NULL;
    static const struct {
        CriSimEventFlags flag;
        const char *reason;
    } cases[] = {
        {CRI_SIM_EVENT_NO_SANDBOX, "no_sandbox_status"},
        {CRI_SIM_EVENT_NO_METADATA, "no_metadata"},
        {CRI_SIM_EVENT_EMPTY_UID, "empty_uid"},
    };

    for (guint round = 0; round < 3; round++) {
        for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
            emit(fx, CRI_SIM_EVENT_STOPPED, "c1", cases[i].flag);
            emit(fx, CRI_SIM_EVENT_CREATED, "c1", cases[i].flag);
        }
    }
    emit(fx, CRI_SIM_EVENT_STOPPED, "c1", CRI_SIM_EVENT_UNKNOWN_ID);
    ck_assert(cri_sim_start_container(fx->sim, "c1", &error));
    ck_assert(cri_sim_exit_container(fx->sim, "c1", 1, NULL, &error));
    wait_received(fx, "stopped", 3 * 3 + 2);

    assert_relists(fx, "uid-a,uid-a");
    for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autoptr(GPtrArray) logs = find_logs(fx, "REASON", cases[i].reason);
        GHashTable *record;

        ck_assert_double_eq(metric(fx, METRIC_IGNORED, cases[i].reason), 6);
        /* Rate limited: the first occurrence only, within the minute. */
        ck_assert_int_eq(logs->len, 1);
        record = g_ptr_array_index(logs, 0);
        ck_assert_str_eq(g_hash_table_lookup(record, "CONTAINER_ID"), "c1");
        ck_assert_str_eq(g_hash_table_lookup(record, "SUPPRESSED"), "0");
        ck_assert_str_eq(g_hash_table_lookup(record, "GLIB_DOMAIN"), "pleg-evented");
        ck_assert_ptr_nonnull(strstr(g_hash_table_lookup(record, "MESSAGE"), "ignoring"));
    }
    /* Every event's latency is recorded, valid or not. */
    ck_assert_uint_eq(metric_count(fx, METRIC_LATENCY), 3 * 3 * 2 + 3);
    ck_assert_double_eq(metric(fx, METRIC_STATE, NULL), 1);
    ck_assert_double_eq(metric(fx, METRIC_ERRORS, NULL), 0);
}
END_TEST

/* ---- the stream ---- */

/* A clean end is a failure: counted, reconnected at once, and events flow again. */
START_TEST(test_reconnect_clean_end)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GArray) delays = NULL;

    cri_sim_end_streams(fx->sim, 0, NULL);
    wait_metric(fx, METRIC_ERRORS, NULL, 1);
    ck_assert(fake_host_wait(fx->host, has_subscriber, fx, WAIT_USEC));
    ck_assert_uint_eq(cri_sim_get_n_streams(fx->sim), 2);
    delays = retry_delays(fx, NULL);
    ck_assert_int_eq(delays->len, 1);
    ck_assert_int_eq(g_array_index(delays, gint64, 0), 0);
    ck_assert_double_eq(metric(fx, METRIC_RECONNECTS, NULL), 1);

    emit(fx, CRI_SIM_EVENT_STOPPED, "c1", 0);
    wait_received(fx, "stopped", 1);
    assert_relists(fx, "uid-a");
    ck_assert_double_eq(metric(fx, METRIC_STATE, NULL), 1);
}
END_TEST

/* An error end: the same, and a runtime that keeps failing is backed off (first retry
 * immediate, then growing delays up to the cap), with one log record for the change of state. */
START_TEST(test_reconnect_error_backoff)
{
    g_autoptr(Fixture) fx = fixture_new();
    /* Every new stream ends at once: a flapping runtime. */
    CriSimEvent none[1] = {{0}};
    g_autoptr(GArray) delays = NULL;
    g_autoptr(GPtrArray) info = NULL;

    cri_sim_set_stream_greeting(fx->sim, none, 0, TRUE);
    cri_sim_end_streams(fx->sim, 13, "internal trouble");
    wait_metric(fx, METRIC_ERRORS, NULL, 12);

    delays = retry_delays(fx, NULL);
    ck_assert_int_ge(delays->len, 12);
    ck_assert_int_eq(g_array_index(delays, gint64, 0), 0);
    for (guint i = 1; i < delays->len; i++) {
        gint64 d = g_array_index(delays, gint64, i);

        ck_assert_int_gt(d, 0);
        ck_assert_int_le(d, FAST_MAX_USEC);
    }
    /* It reaches the cap (jittered down by at most 20 %). */
    ck_assert_int_ge(g_array_index(delays, gint64, 11), FAST_MAX_USEC * 8 / 10);

    /* One record of the change to "disconnected", with the error, whatever the retries. */
    info = find_logs(fx, "STATE", "disconnected");
    ck_assert_int_eq(info->len, 1);
    ck_assert_str_eq(g_hash_table_lookup(g_ptr_array_index(info, 0), "PRIORITY"), "6");
    ck_assert_ptr_nonnull(
        strstr(g_hash_table_lookup(g_ptr_array_index(info, 0), "ERROR"), "internal trouble"));
    ck_assert_double_eq(metric(fx, METRIC_STATE, NULL), 0);

    /* The runtime heals: events flow again. */
    cri_sim_set_stream_greeting(fx->sim, NULL, 0, FALSE);
    ck_assert(fake_host_wait(fx->host, has_subscriber, fx, WAIT_USEC));
    emit(fx, CRI_SIM_EVENT_STOPPED, "c1", 0);
    wait_received(fx, "stopped", 1);
    assert_relists(fx, "uid-a");
}
END_TEST

/* After a healthy period (fast build: 300 ms) the next failure is retried at once again. */
START_TEST(test_backoff_resets_after_healthy)
{
    g_autoptr(Fixture) fx = fixture_new();
    CriSimEvent none[1] = {{0}};
    g_autoptr(GArray) delays = NULL;
    gint64 healthy_since;
    guint n;

    /* Flap until the delays are non-zero. */
    cri_sim_set_stream_greeting(fx->sim, none, 0, TRUE);
    cri_sim_end_streams(fx->sim, 0, NULL);
    wait_metric(fx, METRIC_ERRORS, NULL, 5);
    cri_sim_set_stream_greeting(fx->sim, NULL, 0, FALSE);
    ck_assert(fake_host_wait(fx->host, has_subscriber, fx, WAIT_USEC));
    wait_metric(fx, METRIC_STATE, NULL, 1);

    /* Stay connected for longer than the reset period, then fail. */
    healthy_since = g_get_monotonic_time();
    fake_host_run_for(fx->host, 400 * 1000);
    ck_assert_int_ge(g_get_monotonic_time() - healthy_since, 300 * 1000);
    n = (guint)metric(fx, METRIC_ERRORS, NULL);
    cri_sim_end_streams(fx->sim, 14, "restarting");
    wait_metric(fx, METRIC_ERRORS, NULL, n + 1);

    delays = retry_delays(fx, NULL);
    ck_assert_int_gt(g_array_index(delays, gint64, delays->len - 2), 0);
    ck_assert_int_eq(g_array_index(delays, gint64, delays->len - 1), 0);
}
END_TEST

/* UNIMPLEMENTED (containerd 1.6): retried at the cap, forever; once the runtime serves the
 * stream, events flow without restarting anything. */
START_TEST(test_unimplemented_retries_at_cap)
{
    g_autoptr(Fixture) fx = fixture_new_stopped(EVENTED_FAST_MODULE);
    g_autoptr(GArray) delays = NULL;
    g_autoptr(GArray) unimplemented = NULL;

    cri_sim_set_events_unimplemented(fx->sim, TRUE);
    fixture_start(fx);
    wait_metric(fx, METRIC_ERRORS, NULL, 20);

    delays = retry_delays(fx, &unimplemented);
    for (guint i = 0; i < delays->len; i++) {
        gint64 d = g_array_index(delays, gint64, i);

        ck_assert(g_array_index(unimplemented, gboolean, i));
        ck_assert_int_le(d, FAST_MAX_USEC);
        ck_assert_int_ge(d, FAST_MAX_USEC * 8 / 10);
    }
    ck_assert_double_eq(metric(fx, METRIC_SUCCESSES, NULL), 0);
    ck_assert_double_eq(metric(fx, METRIC_STATE, NULL), 0);
    ck_assert_int_eq(fake_host_get_relist_count(fx->host), 0);

    cri_sim_set_events_unimplemented(fx->sim, FALSE);
    wait_subscribed(fx);
    emit(fx, CRI_SIM_EVENT_STOPPED, "c1", 0);
    wait_received(fx, "stopped", 1);
    assert_relists(fx, "uid-a");
}
END_TEST

/* The runtime goes away for ~0.4 s (socket removed, or left stale) and comes back: the watcher
 * reconnects by itself and keeps delivering. */
static void
check_runtime_away(gboolean stale_socket)
{
    g_autoptr(Fixture) fx = fixture_new();
    g_autoptr(GError) error = NULL;

    ck_assert(cri_sim_start_container(fx->sim, "c1", &error));
    wait_received(fx, "started", 1);

    ck_assert_msg(cri_sim_go_away(fx->sim, 400, stale_socket, &error), "%s",
                  error ? error->message : "");
    wait_metric(fx, METRIC_ERRORS, NULL, 1);
    ck_assert(cri_sim_wait_serving(fx->sim, 10 * 1000));
    wait_subscribed(fx);

    ck_assert(cri_sim_exit_container(fx->sim, "c1", 3, NULL, &error));
    wait_received(fx, "stopped", 1);
    assert_relists(fx, "uid-a");
    ck_assert_double_ge(metric(fx, METRIC_RECONNECTS, NULL), 1);
}

START_TEST(test_runtime_away)
{
    check_runtime_away(FALSE);
}
END_TEST

START_TEST(test_runtime_away_stale_socket)
{
    check_runtime_away(TRUE);
}
END_TEST

/* While the runtime's socket is absent the stream is not established: the gauge stays 0 and no
 * success is counted, however long the watcher waits; once the runtime appears it connects once.
 * The real module, so that its 1 s "connected" settling would have fired during the wait. */
typedef struct {
    Fixture *fx;
    gint64 since_usec;
    double errors;
    guint violations;
} AbsentWait;

static gboolean
absent_window_passed(gpointer data)
{
    AbsentWait *w = data;

    if (metric(w->fx, METRIC_STATE, NULL) != 0 || metric(w->fx, METRIC_SUCCESSES, NULL) != 0)
        w->violations++;
    /* Two failed attempts after the first, and past the settling time since the start. */
    return metric(w->fx, METRIC_ERRORS, NULL) >= w->errors &&
           g_get_monotonic_time() - w->since_usec > 2 * G_USEC_PER_SEC;
}

static gboolean
connected_once(gpointer data)
{
    Fixture *fx = data;

    return metric(fx, METRIC_STATE, NULL) == 1;
}

START_TEST(test_runtime_absent_not_connected)
{
    g_autoptr(Fixture) fx = fixture_new_stopped(EVENTED_MODULE);
    g_autoptr(GError) error = NULL;
    AbsentWait w = {fx, 0, 3, 0};

    ck_assert_msg(cri_sim_go_away(fx->sim, -1, FALSE, &error), "%s", error ? error->message : "");
    ck_assert(!g_file_test(fx->socket_path, G_FILE_TEST_EXISTS));
    w.since_usec = g_get_monotonic_time();
    fixture_start(fx);
    ck_assert_msg(fake_host_wait(fx->host, absent_window_passed, &w, 30 * G_USEC_PER_SEC),
                  "errors %g after %" G_GINT64_FORMAT " us", metric(fx, METRIC_ERRORS, NULL),
                  g_get_monotonic_time() - w.since_usec);
    ck_assert_uint_eq(w.violations, 0);
    ck_assert_double_eq(metric(fx, METRIC_STATE, NULL), 0);
    ck_assert_double_eq(metric(fx, METRIC_SUCCESSES, NULL), 0);

    ck_assert_msg(cri_sim_come_back(fx->sim, &error), "%s", error ? error->message : "");
    ck_assert_msg(fake_host_wait(fx->host, connected_once, fx, 30 * G_USEC_PER_SEC),
                  "not connected after the runtime appeared");
    ck_assert_double_eq(metric(fx, METRIC_SUCCESSES, NULL), 1);
    ck_assert_int_eq(cri_sim_get_n_subscribers(fx->sim), 1);
}
END_TEST

static guint
count_dir(const char *path)
{
    g_autoptr(GDir) dir = g_dir_open(path, 0, NULL);
    guint n = 0;

    ck_assert_ptr_nonnull(dir);
    while (g_dir_read_name(dir))
        n++;
    return n;
}

typedef struct {
    Fixture *fx;
    guint streams;
} StreamsWait;

static gboolean
streams_reached(gpointer data)
{
    StreamsWait *w = data;

    /* Keep the recorded logs from growing: they belong to the fake host, not the plugin. */
    if (fake_host_get_log_count(w->fx->host) > 20)
        fake_host_clear_logs(w->fx->host);
    return cri_sim_get_n_streams(w->fx->sim) >= w->streams;
}

/* 1000 reconnects leave no thread, file descriptor or heap growth behind. */
START_TEST(test_reconnects_no_growth)
{
    g_autoptr(Fixture) fx = fixture_new();
    CriSimEvent none[1] = {{0}};
    StreamsWait w = {fx, 0};
    guint threads0, fds0, threads1, fds1;
    gsize heap0, heap1;

    cri_sim_set_stream_greeting(fx->sim, none, 0, TRUE);
    cri_sim_end_streams(fx->sim, 0, NULL);

    /* Warm up: gRPC starts its own threads and caches lazily. */
    w.streams = 100;
    ck_assert(fake_host_wait(fx->host, streams_reached, &w, 30 * G_USEC_PER_SEC));
    fake_host_clear_logs(fx->host);
    threads0 = count_dir("/proc/self/task");
    fds0 = count_dir("/proc/self/fd");
    heap0 = mallinfo2().uordblks;

    w.streams = 1100;
    ck_assert(fake_host_wait(fx->host, streams_reached, &w, 60 * G_USEC_PER_SEC));
    fake_host_clear_logs(fx->host);
    threads1 = count_dir("/proc/self/task");
    fds1 = count_dir("/proc/self/fd");
    heap1 = mallinfo2().uordblks;

    ck_assert_double_ge(metric(fx, METRIC_RECONNECTS, NULL), 1000);
    ck_assert_msg(threads1 <= threads0, "threads %u -> %u", threads0, threads1);
    ck_assert_msg(fds1 <= fds0, "fds %u -> %u", fds0, fds1);
    /* Less than 64 bytes per reconnect (one leaked message would be more). */
    ck_assert_msg(heap1 < heap0 + 64 * 1000, "heap %zu -> %zu", heap0, heap1);
}
END_TEST

/* ---- the status the host shows (set_status, issue 22 point 2) ---- */

/* RFC 3339 in UTC, with milliseconds. */
#define TIME_PATTERN "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z"
#define UNIMPLEMENTED_FAST                                                                         \
    "the runtime answered UNIMPLEMENTED to GetContainerEvents; retrying every 1\\.6-2 ms; "        \
    "container exits are detected by the global relist"

/* connecting -> connected -> disconnected -> unimplemented -> disconnected -> connected: each
 * state in words, one info record per change, none for the retries that stay in a state (the
 * fast policy retries twenty times and more meanwhile), and the time of a state kept over them. */
START_TEST(test_status_states)
{
    g_autoptr(Fixture) fx = fixture_new_stopped(EVENTED_FAST_MODULE);
    g_autoptr(GError) error = NULL;
    g_autofree char *message = NULL;
    gint64 since, since2;
    double errors;

    ck_assert(!fake_host_get_status(fx->host, NULL, NULL, NULL));
    fixture_start(fx);
    /* Set by start itself, before anything was tried; not worth an info record. */
    assert_status(fx, "connecting", "connecting since " TIME_PATTERN);
    ck_assert_uint_eq(count_state_logs(fx, "connecting"), 0);

    wait_status(fx, "connected");
    assert_status(fx, "connected", "connected since " TIME_PATTERN);
    ck_assert_uint_eq(count_state_logs(fx, "connected"), 1);

    /* The runtime is upgraded away from the stream: the open one ends (disconnected), the
     * immediate retry is answered UNIMPLEMENTED, and so is every retry after it. */
    cri_sim_set_events_unimplemented(fx->sim, TRUE);
    cri_sim_end_streams(fx->sim, 14, "restarting");
    wait_status(fx, "unimplemented");
    errors = metric(fx, METRIC_ERRORS, NULL);
    wait_metric(fx, METRIC_ERRORS, NULL, errors + 20);
    assert_status(fx, "unimplemented", UNIMPLEMENTED_FAST);
    ck_assert_uint_eq(count_state_logs(fx, "disconnected"), 1);
    ck_assert_uint_eq(count_state_logs(fx, "unimplemented"), 1);
    ck_assert_double_eq(metric(fx, METRIC_STATE, NULL), 0);

    /* The runtime goes away: every retry fails UNAVAILABLE; one record, the first time. */
    fake_host_clear_logs(fx->host);
    ck_assert_msg(cri_sim_go_away(fx->sim, -1, FALSE, &error), "%s", error ? error->message : "");
    wait_status(fx, "disconnected");
    since = assert_status(fx, "disconnected",
                          "disconnected since " TIME_PATTERN ": .+; retrying with backoff");
    errors = metric(fx, METRIC_ERRORS, NULL);
    wait_metric(fx, METRIC_ERRORS, NULL, errors + 20);
    since2 = assert_status(fx, "disconnected",
                           "disconnected since " TIME_PATTERN ": .+; retrying with backoff");
    ck_assert_int_eq(since2, since);
    ck_assert_uint_eq(count_state_logs(fx, "disconnected"), 1);
    ck_assert_uint_eq(fake_host_count_logs(fx->host, "PRIORITY", "6"), 1);
    fake_host_get_status(fx->host, NULL, &message, NULL);
    {
        g_autoptr(GPtrArray) logs = find_logs(fx, "STATE", "disconnected");
        const char *error_field = g_hash_table_lookup(logs->pdata[0], "ERROR");

        /* The error is the runtime's, in the record and in the status. */
        ck_assert_ptr_nonnull(error_field);
        ck_assert_ptr_nonnull(strstr(message, error_field));
    }

    /* Back, serving the stream again: connected, once. */
    cri_sim_set_events_unimplemented(fx->sim, FALSE);
    ck_assert_msg(cri_sim_come_back(fx->sim, &error), "%s", error ? error->message : "");
    wait_status(fx, "connected");
    ck_assert_uint_eq(count_state_logs(fx, "connected"), 1);
    ck_assert_uint_eq(fake_host_count_logs(fx->host, "PRIORITY", "6"), 2);

    /* The host forgets it with the plugin. */
    fake_host_stop_plugin(fx->host);
    ck_assert(!fake_host_get_status(fx->host, NULL, NULL, NULL));
}
END_TEST

/* ---- stop ---- */

/* The promptness bound of stop (issue 3), stretched under valgrind. */
/* valgrind and ThreadSanitizer (meson test --setup=tsan) slow everything down 5-20 times. */
#ifdef __SANITIZE_THREAD__
#define STOP_BOUND_USEC (1000 * 1000)
#else
#define STOP_BOUND_USEC (RUNNING_ON_VALGRIND ? 1000 * 1000 : 100 * 1000)
#endif

static gint64
timed_stop(Fixture *fx)
{
    gint64 start = g_get_monotonic_time();

    fake_host_stop_plugin(fx->host);
    return g_get_monotonic_time() - start;
}

/* Stop cancels the open call within 100 ms. */
START_TEST(test_stop_cancels_stream)
{
    g_autoptr(Fixture) fx = fixture_new_with(EVENTED_MODULE);
    gint64 took;

    took = timed_stop(fx);
    ck_assert_msg(took < STOP_BOUND_USEC, "stop took %" G_GINT64_FORMAT " us", took);
    ck_assert(cri_sim_wait_subscribers(fx->sim, 0, 5000));
    ck_assert_double_eq(metric(fx, METRIC_STATE, NULL), 0);
}
END_TEST

/* Stop with a 48-60 s retry pending (the real module, runtime UNIMPLEMENTED). */
START_TEST(test_stop_cancels_retry)
{
    g_autoptr(Fixture) fx = fixture_new_stopped(EVENTED_MODULE);
    guint streams;
    gint64 took;

    cri_sim_set_events_unimplemented(fx->sim, TRUE);
    fixture_start(fx);
    wait_metric(fx, METRIC_ERRORS, NULL, 1);
    /* The installed policy's words: the jittered 60 s cap. */
    assert_status(fx, "unimplemented",
                  "the runtime answered UNIMPLEMENTED to GetContainerEvents; retrying every "
                  "48-60 s; container exits are detected by the global relist");
    took = timed_stop(fx);
    ck_assert_msg(took < STOP_BOUND_USEC, "stop took %" G_GINT64_FORMAT " us", took);

    /* Nothing retries afterwards. */
    streams = cri_sim_get_n_calls(fx->sim, "GetContainerEvents");
    fake_host_run_for(fx->host, 50 * 1000);
    ck_assert_uint_eq(cri_sim_get_n_calls(fx->sim, "GetContainerEvents"), streams);
}
END_TEST

/* Stop while the stream waits for a runtime that is away. */
START_TEST(test_stop_while_runtime_away)
{
    g_autoptr(Fixture) fx = fixture_new_with(EVENTED_MODULE);
    g_autoptr(GError) error = NULL;
    gint64 took;

    ck_assert(cri_sim_go_away(fx->sim, -1, FALSE, &error));
    wait_metric(fx, METRIC_ERRORS, NULL, 1);
    took = timed_stop(fx);
    ck_assert_msg(took < STOP_BOUND_USEC, "stop took %" G_GINT64_FORMAT " us", took);
    ck_assert(cri_sim_come_back(fx->sim, &error));
}
END_TEST

/* Start, stop, start again (the host may restart a plugin): metrics keep their series and
 * events flow again. */
START_TEST(test_restart)
{
    g_autoptr(Fixture) fx = fixture_new_stopped(EVENTED_FAST_MODULE);
    const PlegHostServices *services = fake_host_get_services(fx->host);
    g_autoptr(GError) error = NULL;
    gpointer state = NULL;

    g_main_context_push_thread_default(fake_host_get_context(fx->host));
    ck_assert(fx->descriptor->init(services, &state, &error));
    for (guint i = 0; i < 3; i++) {
        ck_assert(fx->descriptor->start(state, &error));
        wait_subscribed(fx);
        emit(fx, CRI_SIM_EVENT_STOPPED, "c1", 0);
        wait_received(fx, "stopped", i + 1);
        fx->descriptor->stop(state);
        fx->descriptor->stop(state);
        ck_assert(cri_sim_wait_subscribers(fx->sim, 0, 5000));
    }
    fx->descriptor->free(state);
    g_main_context_pop_thread_default(fake_host_get_context(fx->host));
    assert_relists(fx, "uid-a,uid-a,uid-a");
}
END_TEST

static Suite *
evented_suite(void)
{
    Suite *suite = suite_create("evented");
    TCase *tc = tcase_create("evented");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_descriptor);
    tcase_add_test(tc, test_init_no_side_effects);
    tcase_add_test(tc, test_stopped_requests_relist);
    tcase_add_test(tc, test_other_types_no_relist);
    tcase_add_test(tc, test_stopped_any_exit);
    tcase_add_test(tc, test_duplicates);
    tcase_add_test(tc, test_out_of_order_and_old);
    tcase_add_test(tc, test_invalid_events);
    tcase_add_test(tc, test_reconnect_clean_end);
    tcase_add_test(tc, test_reconnect_error_backoff);
    tcase_add_test(tc, test_backoff_resets_after_healthy);
    tcase_add_test(tc, test_unimplemented_retries_at_cap);
    tcase_add_test(tc, test_runtime_away);
    tcase_add_test(tc, test_runtime_away_stale_socket);
    tcase_add_test(tc, test_runtime_absent_not_connected);
    tcase_add_test(tc, test_reconnects_no_growth);
    tcase_add_test(tc, test_status_states);
    tcase_add_test(tc, test_stop_cancels_stream);
    tcase_add_test(tc, test_stop_cancels_retry);
    tcase_add_test(tc, test_stop_while_runtime_away);
    tcase_add_test(tc, test_restart);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    SRunner *runner = srunner_create(evented_suite());
    int failed;

    srunner_run_all(runner, CK_ENV);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
