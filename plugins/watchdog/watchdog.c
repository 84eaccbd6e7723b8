/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The systemd watchdog heartbeat (kubelet's SystemdWatchdog) with KEP-6247's diagnostics: the
 * glue between watchdog-loop.c and the world (libsystemd, a GSource on the plugin's context,
 * the host's health checkers, gates and log).
 */
#include <pleg/pleg-plugin.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include "pleg-timer-source.h"
#include "watchdog-loop.h"
#include "watchdog-stall.h"

#define GATE_DIAGNOSTICS "KubeletWatchdogDiagnostics"
/* Declared in watchdog.plugin (Alpha, off): the stall record of issue 14. */
#define GATE_STALL_DIAGNOSTICS "WatchdogStallDiagnostics"

/* kubelet_watchdog_failures_total{operation,result}: one series per kind of KEP-6247 record.
 * KEP-6247 writes records to the log only; Prometheus cannot alert on a log, so the same
 * failures are counted here too, whether or not the gate writes the records and before their
 * rate limit.  Labels come from the records' closed sets, never a checker name or error text. */
#define METRIC_FAILURES "kubelet_watchdog_failures_total"

typedef enum {
    FAILURE_CHECK_ERROR,
    FAILURE_NOTIFY_ERROR,
    FAILURE_NOTIFY_EXHAUSTED,
    N_FAILURES,
} FailureKind;

static const char *const failure_labels[N_FAILURES][2] = {
    [FAILURE_CHECK_ERROR] = {WATCHDOG_OPERATION_HEALTH_CHECK, WATCHDOG_RESULT_ERROR},
    [FAILURE_NOTIFY_ERROR] = {WATCHDOG_OPERATION_NOTIFY, WATCHDOG_RESULT_ERROR},
    [FAILURE_NOTIFY_EXHAUSTED] = {WATCHDOG_OPERATION_NOTIFY, WATCHDOG_RESULT_EXHAUSTED},
};

typedef struct {
    const PlegHostServices *services;
    GSource *timer;
    WatchdogLoop *loop;
    WatchdogStall *stall; /* only while the heartbeat runs with WatchdogStallDiagnostics on */
    PlegMetric *failures; /* NULL: the host refused the name */
    guint64 counted[N_FAILURES]; /* of the current loop's stats */
} Watchdog;

/* ---- WatchdogOps ---- */

static gint64
op_now_usec(gpointer user_data)
{
    return g_get_monotonic_time();
}

static void
op_arm(gpointer user_data, gint64 ready_usec)
{
    Watchdog *self = user_data;

    if (self->timer)
        g_source_set_ready_time(self->timer, ready_usec);
}

static void
on_checker_progress(const char *checker, gpointer user_data)
{
    watchdog_stall_set_checker(user_data, checker);
}

/* Whether the host has check_health_progress (ABI 1.1). */
static gboolean
has_check_health_progress(const PlegHostServices *services)
{
    return services->abi_minor >= 1 &&
           services->size >= G_STRUCT_OFFSET(PlegHostServices, check_health_progress) +
                                 sizeof(services->check_health_progress) &&
           services->check_health_progress;
}

static gboolean
op_check_health(gpointer user_data, char **ret_checker, GError **error)
{
    Watchdog *self = user_data;
    gboolean ok;

    if (!self->stall)
        return self->services->check_health(self->services->host, ret_checker, error);

    watchdog_stall_begin(self->stall, WATCHDOG_OPERATION_STALL);
    if (has_check_health_progress(self->services))
        ok = self->services->check_health_progress(self->services->host, on_checker_progress,
                                                   self->stall, ret_checker, error);
    else
        ok = self->services->check_health(self->services->host, ret_checker, error);
    watchdog_stall_end(self->stall);
    return ok;
}

static int
op_notify(gpointer user_data)
{
    Watchdog *self = user_data;
    int r;

    if (!self->stall)
        return sd_notify(0, "WATCHDOG=1");

    /* libsystemd 252's sd_notify() sends on a blocking socket: it waits while the receiver's
     * queue is full. */
    watchdog_stall_begin(self->stall, WATCHDOG_OPERATION_NOTIFY);
    r = sd_notify(0, "WATCHDOG=1");
    watchdog_stall_end(self->stall);
    return r;
}

static gboolean
op_diagnostics_enabled(gpointer user_data)
{
    Watchdog *self = user_data;

    return self->services->feature_enabled(self->services->host, GATE_DIAGNOSTICS);
}

static double
op_random(gpointer user_data)
{
    return g_random_double();
}

static void
op_log(gpointer user_data, GLogLevelFlags level, const GLogField *fields, gsize n_fields)
{
    Watchdog *self = user_data;

    self->services->log(self->services->host, level, fields, n_fields);
}

static const WatchdogOps watchdog_ops = {
    .now_usec = op_now_usec,
    .arm = op_arm,
    .check_health = op_check_health,
    .notify = op_notify,
    .diagnostics_enabled = op_diagnostics_enabled,
    .random = op_random,
    .log = op_log,
};

/* The loop's stats only change in watchdog_loop_dispatch(): count what it added. */
static void
count_failures(Watchdog *self)
{
    WatchdogStats stats;
    guint64 now[N_FAILURES];

    if (!self->failures)
        return;
    watchdog_loop_get_stats(self->loop, &stats);
    now[FAILURE_CHECK_ERROR] = stats.check_failures;
    now[FAILURE_NOTIFY_ERROR] = stats.notify_errors;
    now[FAILURE_NOTIFY_EXHAUSTED] = stats.exhausted;
    for (int kind = 0; kind < N_FAILURES; kind++) {
        if (now[kind] > self->counted[kind])
            self->services->metric_add(self->failures, failure_labels[kind],
                                       (double)(now[kind] - self->counted[kind]));
        self->counted[kind] = now[kind];
    }
}

static gboolean
on_timer(gpointer user_data)
{
    Watchdog *self = user_data;

    watchdog_loop_dispatch(self->loop);
    count_failures(self);
    return G_SOURCE_CONTINUE;
}

/* ---- lifecycle ---- */

static gboolean
watchdog_init(const PlegHostServices *services, gpointer *ret_state, GError **error)
{
    Watchdog *self;

    if (services->size < G_STRUCT_OFFSET(PlegHostServices, get_runtime_endpoint)) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED,
                    "host services table too small (%u bytes)", services->size);
        return FALSE;
    }
    self = g_new0(Watchdog, 1);
    self->services = services;
    self->failures = services->metric_register(
        services->host, PLEG_METRIC_COUNTER, METRIC_FAILURES,
        "Watchdog failures by KEP-6247 record kind (health checker error, notification error, "
        "retries exhausted), counted with or without KubeletWatchdogDiagnostics.",
        (const char *const[]){"operation", "result", NULL}, NULL, 0);
    /* Every series from the start, so that rates and increase() work from the first scrape. */
    for (int kind = 0; self->failures && kind < N_FAILURES; kind++)
        services->metric_add(self->failures, failure_labels[kind], 0);
    *ret_state = self;
    return TRUE;
}

static void
watchdog_stop(gpointer state)
{
    Watchdog *self = state;

    if (self->timer) {
        g_source_destroy(self->timer);
        g_clear_pointer(&self->timer, g_source_unref);
    }
    g_clear_pointer(&self->loop, watchdog_loop_free);
    g_clear_pointer(&self->stall, watchdog_stall_free);
}

static gboolean
watchdog_start(gpointer state, GError **error)
{
    Watchdog *self = state;
    g_autofree char *timeout_text = NULL;
    g_autofree char *interval_text = NULL;
    guint64 timeout_usec = 0;
    gint64 interval_usec = 0;
    int r;

    if (self->loop)
        return TRUE;

    /* WATCHDOG_USEC and WATCHDOG_PID stay set: a child or a re-exec decides for itself. */
    r = sd_watchdog_enabled(0, &timeout_usec);
    r = watchdog_timeout_to_interval(r, timeout_usec, &interval_usec, error);
    if (r < 0)
        return FALSE;
    if (r == 0) {
        watchdog_log_message(
            &watchdog_ops, self, G_LOG_LEVEL_INFO,
            "systemd watchdog not enabled for this process (WATCHDOG_USEC not set, or "
            "WATCHDOG_PID names another process): no heartbeat");
        return TRUE;
    }

    /* sd_notify() would answer "not supported" on every tick: say so once, and do not claim
     * a heartbeat that is never sent. */
    if (!g_getenv("NOTIFY_SOCKET") || !*g_getenv("NOTIFY_SOCKET")) {
        timeout_text = watchdog_format_duration((gint64)timeout_usec);
        watchdog_log_message(&watchdog_ops, self, G_LOG_LEVEL_MESSAGE,
                             "systemd watchdog timeout %s is set (WATCHDOG_USEC) but NOTIFY_SOCKET "
                             "is not set: no heartbeat is sent",
                             timeout_text);
        return TRUE;
    }

    self->timer = pleg_timer_source_new();
    g_source_set_static_name(self->timer, "pleg-watchdog timer");
    g_source_set_priority(self->timer, G_PRIORITY_HIGH);
    g_source_set_callback(self->timer, on_timer, self, NULL);
    g_source_attach(self->timer, self->services->get_main_context(self->services->host));

    /* With the gate off nothing of it runs: no thread, no extra call per tick. */
    if (self->services->feature_enabled(self->services->host, GATE_STALL_DIAGNOSTICS)) {
        self->stall = watchdog_stall_new(&watchdog_ops, self, interval_usec, error);
        if (!self->stall) {
            watchdog_stop(self);
            return FALSE;
        }
    }
    self->loop = watchdog_loop_new(&watchdog_ops, self, interval_usec);
    memset(self->counted, 0, sizeof self->counted);

    timeout_text = watchdog_format_duration((gint64)timeout_usec);
    interval_text = watchdog_format_duration(interval_usec);
    watchdog_log_message(&watchdog_ops, self, G_LOG_LEVEL_INFO,
                         "systemd watchdog enabled: timeout %s, WATCHDOG=1 every %s%s%s",
                         timeout_text, interval_text,
                         op_diagnostics_enabled(self) ? ", " GATE_DIAGNOSTICS " records on" : "",
                         self->stall ? ", " GATE_STALL_DIAGNOSTICS " records on" : "");

    watchdog_loop_start(self->loop);
    return TRUE;
}

static void
watchdog_free(gpointer state)
{
    Watchdog *self = state;

    if (!self)
        return;
    watchdog_stop(self);
    g_free(self);
}

PLEG_PLUGIN_DEFINE(.name = "watchdog",
                   .description = "systemd watchdog heartbeat (SystemdWatchdog, KEP-6247 "
                                  "diagnostics)",
                   .feature_gate = "SystemdWatchdog", .init = watchdog_init,
                   .start = watchdog_start, .stop = watchdog_stop, .free = watchdog_free);
