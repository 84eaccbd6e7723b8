/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reconnect policy of the Evented PLEG watcher (KEP-3386, "Design Details"), as pure functions
 * of the times and the random generator they are given, so that a test drives them with a fake
 * clock and a seeded GRand.  Compiled into the plugin and into tests/evented/test-backoff.
 *
 * Backoff: the first reconnect after a failure is immediate; each further consecutive failure
 * waits base * factor^(n-1), capped at max, with downward jitter (a delay d becomes uniform in
 * [d * (1 - jitter), d], so the cap is never exceeded); forever.  The failure count resets only
 * when the connection that failed had been healthy for at least reset_after.  UNIMPLEMENTED
 * always waits the (jittered) cap: a runtime upgrade may make the stream available later.
 *
 * Rate limit: the first record of a kind is logged, then at most one per interval, which carries
 * the number of records suppressed since the previous one.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The production policy: base 500 ms, factor 2, jitter 20 %, cap 60 s, reset after 60 s. */
#define EVENTED_BACKOFF_BASE_USEC        (500 * 1000)
#define EVENTED_BACKOFF_FACTOR           2.0
#define EVENTED_BACKOFF_JITTER           0.2
#define EVENTED_BACKOFF_MAX_USEC         (60 * G_USEC_PER_SEC)
#define EVENTED_BACKOFF_RESET_AFTER_USEC (60 * G_USEC_PER_SEC)

typedef struct {
    gint64 base_usec;
    double factor;
    double jitter; /* in [0, 1) */
    gint64 max_usec;
    gint64 reset_after_usec;
} EventedBackoffConfig;

typedef struct {
    EventedBackoffConfig config;
    guint failures; /* consecutive failures since the last healthy period */
} EventedBackoff;

void evented_backoff_config_init(EventedBackoffConfig *config);
void evented_backoff_init(EventedBackoff *backoff, const EventedBackoffConfig *config);

/*
 * A connection attempt failed (error, EOF or clean close) at @now_usec (monotonic).
 * @healthy_since_usec: when that connection became healthy, or -1 if it never did.
 * Returns the delay in microseconds before the next attempt (0: reconnect now).
 */
gint64 evented_backoff_failure(EventedBackoff *backoff, gint64 now_usec, gint64 healthy_since_usec,
                               GRand *rand);

/* The runtime answered UNIMPLEMENTED: returns the jittered cap. */
gint64 evented_backoff_unimplemented(EventedBackoff *backoff, GRand *rand);

guint evented_backoff_get_failures(const EventedBackoff *backoff);

typedef struct {
    gint64 interval_usec;
    gint64 last_usec; /* when the last record was let through; valid when @logged */
    gboolean logged;
    guint64 suppressed;
} EventedRateLimit;

void evented_rate_limit_init(EventedRateLimit *limit, gint64 interval_usec);

/*
 * One occurrence at @now_usec (monotonic).  Returns %TRUE when it should be logged; then
 * @ret_suppressed is set to the number of occurrences suppressed since the last record.
 */
gboolean evented_rate_limit_check(EventedRateLimit *limit, gint64 now_usec,
                                  guint64 *ret_suppressed);

G_END_DECLS
