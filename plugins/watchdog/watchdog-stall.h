/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The stall record (issue 14, gate WatchdogStallDiagnostics): a monitor thread, apart from the
 * heartbeat's thread, that notices a health check round or an sd_notify() call running longer
 * than half the notification interval and writes one record, then one more when the call
 * returns.  It only watches: no timeout, no cancellation, no extra heartbeat; the tick still
 * waits for the call (KEP-6247's non-goals stay non-goals).  Created only when the gate is on,
 * so with it off no thread exists.  Internal to plugins/watchdog.
 *
 * Records go through WatchdogOps.log (from the monitor thread for "stalled", from the caller's
 * thread for "returned"), at G_LOG_LEVEL_MESSAGE like KEP-6247's, with the fields OPERATION
 * (watchdog_stall for a health checker, watchdog_notify for sd_notify()), CHECKER (the checker
 * running, for watchdog_stall), DURATION (how long the call has run, or ran), WATCHDOG_INTERVAL
 * and RESULT (stalled, returned).  Time is the real monotonic clock.
 */
#pragma once

#include "watchdog-loop.h"

G_BEGIN_DECLS

#define WATCHDOG_OPERATION_STALL "watchdog_stall"
#define WATCHDOG_RESULT_STALLED  "stalled"
#define WATCHDOG_RESULT_RETURNED "returned"
#define WATCHDOG_FIELD_DURATION  "DURATION"
/* The monitor thread's name (Linux shows it in /proc/<pid>/task/<tid>/comm). */
#define WATCHDOG_STALL_THREAD_NAME "pleg-wd-stall"

typedef struct _WatchdogStall WatchdogStall;

/* Starts the monitor thread.  @ops->log must be callable from any thread and outlive the
 * monitor; @interval_usec > 0 is the notification interval; the threshold is half of it. */
WatchdogStall *watchdog_stall_new(const WatchdogOps *ops, gpointer user_data,
                                  gint64 interval_usec, GError **error);
/* Stops and joins the thread.  NULL-safe. */
void watchdog_stall_free(WatchdogStall *stall);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(WatchdogStall, watchdog_stall_free)

/* A watched call starts now: @operation is WATCHDOG_OPERATION_STALL (a health check round) or
 * WATCHDOG_OPERATION_NOTIFY. */
void watchdog_stall_begin(WatchdogStall *stall, const char *operation);
/* The round moved on to checker @checker (the host's progress callback). */
void watchdog_stall_set_checker(WatchdogStall *stall, const char *checker);
/* The call returned: writes the "returned" record when a "stalled" one was written. */
void watchdog_stall_end(WatchdogStall *stall);

/* Records written so far ("stalled" and "returned"), for tests. */
guint64 watchdog_stall_get_records(WatchdogStall *stall);

G_END_DECLS
