/* SPDX-License-Identifier: Apache-2.0 */
#include "backoff.h"

#include <math.h>

void
evented_backoff_config_init(EventedBackoffConfig *config)
{
    *config = (EventedBackoffConfig){
        .base_usec = EVENTED_BACKOFF_BASE_USEC,
        .factor = EVENTED_BACKOFF_FACTOR,
        .jitter = EVENTED_BACKOFF_JITTER,
        .max_usec = EVENTED_BACKOFF_MAX_USEC,
        .reset_after_usec = EVENTED_BACKOFF_RESET_AFTER_USEC,
    };
}

void
evented_backoff_init(EventedBackoff *backoff, const EventedBackoffConfig *config)
{
    g_return_if_fail(config->base_usec > 0 && config->max_usec >= config->base_usec);
    g_return_if_fail(config->factor >= 1.0);
    g_return_if_fail(config->jitter >= 0.0 && config->jitter < 1.0);

    *backoff = (EventedBackoff){.config = *config};
}

static gint64
jittered(const EventedBackoff *backoff, gint64 delay_usec, GRand *rand)
{
    double scale;

    if (backoff->config.jitter <= 0.0 || !rand)
        return delay_usec;
    scale = 1.0 - backoff->config.jitter * g_rand_double(rand);
    return MAX((gint64)((double)delay_usec * scale), 1);
}

gint64
evented_backoff_failure(EventedBackoff *backoff, gint64 now_usec, gint64 healthy_since_usec,
                        GRand *rand)
{
    const EventedBackoffConfig *c = &backoff->config;
    double delay;

    if (healthy_since_usec >= 0 && now_usec - healthy_since_usec >= c->reset_after_usec)
        backoff->failures = 0;

    if (backoff->failures == 0) {
        backoff->failures = 1;
        return 0;
    }

    /* failures >= 1: the (failures)th delayed attempt waits base * factor^(failures - 1). */
    delay = (double)c->base_usec * pow(c->factor, (double)(backoff->failures - 1));
    if (backoff->failures < G_MAXUINT)
        backoff->failures++;
    if (!(delay < (double)c->max_usec))
        return jittered(backoff, c->max_usec, rand);
    return jittered(backoff, (gint64)delay, rand);
}

gint64
evented_backoff_unimplemented(EventedBackoff *backoff, GRand *rand)
{
    if (backoff->failures < G_MAXUINT)
        backoff->failures++;
    return jittered(backoff, backoff->config.max_usec, rand);
}

guint
evented_backoff_get_failures(const EventedBackoff *backoff)
{
    return backoff->failures;
}

void
evented_rate_limit_init(EventedRateLimit *limit, gint64 interval_usec)
{
    *limit = (EventedRateLimit){.interval_usec = interval_usec};
}

gboolean
evented_rate_limit_check(EventedRateLimit *limit, gint64 now_usec, guint64 *ret_suppressed)
{
    if (limit->logged && now_usec - limit->last_usec < limit->interval_usec) {
        limit->suppressed++;
        return FALSE;
    }
    if (ret_suppressed)
        *ret_suppressed = limit->suppressed;
    limit->logged = TRUE;
    limit->last_usec = now_usec;
    limit->suppressed = 0;
    return TRUE;
}
