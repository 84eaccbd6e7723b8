/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The watchdog's scheduling and diagnostics, free of I/O: time, the timer, the health check,
 * sd_notify(), the feature gate, randomness and logging all come through #WatchdogOps, so the
 * same code runs in the plugin (GSource, libsystemd, host services) and under a unit test's
 * fake clock.  Internal to plugins/watchdog: nothing here is exported from the module.
 *
 * Behaviour (kubelet's systemd watchdog; KEP-6247 for the diagnostics):
 *  - a tick every interval (timeout / 2) on a fixed-rate schedule anchored at start; the first
 *    tick is due at start;
 *  - each tick runs the health checkers; a failure skips the notification of that tick;
 *  - otherwise WATCHDOG=1 with kubelet's backoff: 1 s, factor 2, jitter 0.1, 2 steps (so two
 *    attempts, a pause of 1-1.1 s between them); the pause is a timer, not a sleep;
 *  - sd_notify() returning 0 (no NOTIFY_SOCKET) ends that tick's notification without retry and
 *    is said once, until a notification succeeds again;
 *  - a tick that falls due while a retry is pending is not run: the next tick is the first slot
 *    of the schedule after the notification ends;
 *  - with KubeletWatchdogDiagnostics on (asked at every record), the three KEP-6247 records,
 *    rate-limited per kind (operation, checker, attempt, result): the first of a kind in a
 *    window is written, the next one written says how many were suppressed; with the gate off,
 *    debug lines only, the rate limit forgets everything, and every op is called exactly as
 *    with it on.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define WATCHDOG_MIN_TIMEOUT_USEC    G_USEC_PER_SEC
#define WATCHDOG_RETRY_DURATION_USEC G_USEC_PER_SEC
#define WATCHDOG_RETRY_FACTOR        2.0
#define WATCHDOG_RETRY_JITTER        0.1
#define WATCHDOG_RETRY_STEPS         2
/* Window of the diagnostics rate limit: the first record of a kind per window is kept. */
#define WATCHDOG_LOG_WINDOW_USEC (60 * G_USEC_PER_SEC)

/* Stable values of the records' fields (doc/watchdog.md). */
#define WATCHDOG_OPERATION_HEALTH_CHECK "watchdog_health_check"
#define WATCHDOG_OPERATION_NOTIFY       "watchdog_notify"
#define WATCHDOG_RESULT_ERROR           "error"
#define WATCHDOG_RESULT_EXHAUSTED       "retries_exhausted"

/* Journal field names of the records (journald accepts only upper case); a terminal gets the
 * lower-case spelling as key=value text in MESSAGE. */
#define WATCHDOG_FIELD_OPERATION         "OPERATION"
#define WATCHDOG_FIELD_CHECKER           "CHECKER"
#define WATCHDOG_FIELD_ATTEMPT           "ATTEMPT"
#define WATCHDOG_FIELD_WATCHDOG_INTERVAL "WATCHDOG_INTERVAL"
#define WATCHDOG_FIELD_RESULT            "RESULT"
#define WATCHDOG_FIELD_ERROR             "ERROR"
#define WATCHDOG_FIELD_SUPPRESSED        "SUPPRESSED"

/**
 * WatchdogOps:
 * @now_usec: monotonic time in microseconds.
 * @arm: (re)arms the one timer of the loop to fire at monotonic @ready_usec, or disarms it when
 *   @ready_usec is -1.  When it fires, call watchdog_loop_dispatch().
 * @check_health: runs the health checkers in order, stopping at the first failure (the host's
 *   check_health service).
 * @notify: sends WATCHDOG=1: > 0 sent, 0 not supported (no NOTIFY_SOCKET), < 0 -errno.
 * @diagnostics_enabled: whether KubeletWatchdogDiagnostics is on; asked at every record.
 * @random: a number in [0, 1) for the jitter.
 * @log: writes one structured record; @fields hold MESSAGE and the record's own fields.
 */
typedef struct {
    gint64 (*now_usec)(gpointer user_data);
    void (*arm)(gpointer user_data, gint64 ready_usec);
    gboolean (*check_health)(gpointer user_data, char **ret_checker, GError **error);
    int (*notify)(gpointer user_data);
    gboolean (*diagnostics_enabled)(gpointer user_data);
    double (*random)(gpointer user_data);
    void (*log)(gpointer user_data, GLogLevelFlags level, const GLogField *fields, gsize n_fields);
} WatchdogOps;

/* What the loop did, for tests. */
typedef struct {
    guint64 ticks;           /* ticks run */
    guint64 check_failures;  /* ticks whose health check failed */
    guint64 notify_attempts; /* calls to @notify */
    guint64 heartbeats;      /* calls to @notify that returned > 0 */
    guint64 notify_errors;   /* calls to @notify that returned < 0 */
    guint64 unsupported;     /* calls to @notify that returned 0 */
    guint64 retries;         /* pauses before a further attempt */
    guint64 exhausted;       /* notifications that failed at every attempt */
    guint64 records;         /* KEP-6247 records written */
    guint64 suppressed;      /* KEP-6247 records suppressed by the rate limit */
} WatchdogStats;

typedef struct _WatchdogLoop WatchdogLoop;

/**
 * watchdog_timeout_to_interval:
 * @sd_result: what sd_watchdog_enabled() returned.
 * @timeout_usec: the timeout it stored (ignored unless @sd_result > 0).
 * @ret_interval_usec: (out): timeout / 2 when enabled; untouched otherwise.
 * @error: %G_IO_ERROR_INVALID_ARGUMENT naming the value when the environment is invalid or the
 *   timeout is 1 s or less.
 *
 * Returns: 1 enabled, 0 not enabled (WATCHDOG_USEC unset or WATCHDOG_PID another process),
 *   -1 configuration error.
 */
int watchdog_timeout_to_interval(int sd_result, guint64 timeout_usec, gint64 *ret_interval_usec,
                                 GError **error);

/** watchdog_log_message: a record with only a MESSAGE, through @ops->log. */
void watchdog_log_message(const WatchdogOps *ops, gpointer user_data, GLogLevelFlags level,
                          const char *format, ...) G_GNUC_PRINTF(4, 5);

/* watchdog_append_pair: " key=value" onto a record's MESSAGE text: @journal_key in lower case,
 * @value quoted and escaped when empty or holding spaces, quotes, '=', '\\' or controls. */
void watchdog_append_pair(GString *text, const char *journal_key, const char *value);

/** watchdog_format_duration: Go's time.Duration.String() of @usec >= 0 ("1s", "1.5s", "500ms"). */
char *watchdog_format_duration(gint64 usec);

/* @ops must outlive the loop.  @interval_usec > 0. */
WatchdogLoop *watchdog_loop_new(const WatchdogOps *ops, gpointer user_data, gint64 interval_usec);
void watchdog_loop_free(WatchdogLoop *loop);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(WatchdogLoop, watchdog_loop_free)

/* Arms the first tick for now.  Restarting after stop starts a fresh schedule. */
void watchdog_loop_start(WatchdogLoop *loop);
/* The timer fired. */
void watchdog_loop_dispatch(WatchdogLoop *loop);
/* Disarms and forgets any notification in progress.  Idempotent. */
void watchdog_loop_stop(WatchdogLoop *loop);

gint64 watchdog_loop_get_interval(WatchdogLoop *loop);
void watchdog_loop_get_stats(WatchdogLoop *loop, WatchdogStats *ret_stats);

G_END_DECLS
