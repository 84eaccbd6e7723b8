/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hello: a minimal libpleg plugin, built out of tree against the installed <pleg/pleg-plugin.h>
 * (doc/plugins.md walks through it).  While running it counts a tick every second in its own
 * GMainContext and registers a health checker; it never touches the host except through the
 * services table.
 */
#include <pleg/pleg-plugin.h>

typedef struct {
    const PlegHostServices *services;
    PlegMetric *ticks;
    GSource *timer;
    guint health_checker;
} Hello;

static void
hello_log(Hello *hello, GLogLevelFlags level, const char *message)
{
    const GLogField fields[] = {
        {"MESSAGE", message, -1},
        {"PLUGIN", "hello", -1},
    };

    hello->services->log(hello->services->host, level, fields, G_N_ELEMENTS(fields));
}

static gboolean
on_tick(gpointer user_data)
{
    Hello *hello = user_data;

    hello->services->metric_add(hello->ticks, NULL, 1);
    hello_log(hello, G_LOG_LEVEL_DEBUG, "tick");
    return G_SOURCE_CONTINUE;
}

static gboolean
hello_healthy(gpointer user_data, GError **error)
{
    return TRUE;
}

/* No sources, threads or I/O here: only state and metrics. */
static gboolean
hello_init(const PlegHostServices *services, gpointer *ret_state, GError **error)
{
    Hello *hello;
    PlegMetric *ticks;

    ticks = services->metric_register(services->host, PLEG_METRIC_COUNTER, "pleg_hello_ticks_total",
                                      "Seconds the hello plugin has been running.", NULL, NULL, 0);
    if (!ticks) {
        g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_EXISTS,
                            "cannot register pleg_hello_ticks_total");
        return FALSE;
    }
    hello = g_new0(Hello, 1);
    hello->services = services;
    hello->ticks = ticks;
    *ret_state = hello;
    return TRUE;
}

static gboolean
hello_start(gpointer state, GError **error)
{
    Hello *hello = state;
    GMainContext *context = hello->services->get_main_context(hello->services->host);

    hello->timer = g_timeout_source_new_seconds(1);
    g_source_set_callback(hello->timer, on_tick, hello, NULL);
    g_source_attach(hello->timer, context);
    hello->health_checker = hello->services->add_health_checker(hello->services->host, "hello",
                                                                hello_healthy, hello, NULL);
    hello_log(hello, G_LOG_LEVEL_INFO, "started: counting seconds in pleg_hello_ticks_total");
    return TRUE;
}

/* Idempotent, and safe after a failed start. */
static void
hello_stop(gpointer state)
{
    Hello *hello = state;

    if (hello->health_checker) {
        hello->services->remove_health_checker(hello->services->host, hello->health_checker);
        hello->health_checker = 0;
    }
    if (hello->timer) {
        g_source_destroy(hello->timer);
        g_clear_pointer(&hello->timer, g_source_unref);
    }
}

static void
hello_free(gpointer state)
{
    g_free(state);
}

PLEG_PLUGIN_DEFINE(.name = "hello",
                   .description = "Example plugin: counts seconds, always healthy",
                   .feature_gate = "HelloPlugin", /* declared in hello.plugin */
                   .init = hello_init,
                   .start = hello_start,
                   .stop = hello_stop,
                   .free = hello_free);
