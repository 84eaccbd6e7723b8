/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A GSource dispatched once at the ready time it is given, in microseconds: the one timer that
 * plegd and the in-tree plugins arm and re-arm.  Not libpleg API: a plugin does not link
 * libpleg (pleg-plugin.h), so this is a static library that each of them links (lib/meson.build,
 * pleg_timer_source_dep).
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/**
 * pleg_timer_source_new:
 *
 * Creates a source that is disarmed (ready time -1) until g_source_set_ready_time() arms it
 * with a monotonic time in microseconds (g_get_monotonic_time(); 0 means "now").  When the time
 * comes the source disarms itself and then runs its callback once, so the callback may arm it
 * again for the next deadline; returning %G_SOURCE_REMOVE destroys it.  Unlike
 * g_timeout_source_new(), which counts milliseconds from its creation, the deadline is
 * absolute and microsecond precise, and moving it costs no new source.
 *
 * Set the callback with g_source_set_callback() and attach the source to the context it must
 * run in; the callback runs in the thread that iterates that context.
 *
 * Thread safety: callable from any thread; the source is GLib's, so g_source_set_ready_time()
 * may arm it from any thread once it is attached, and wakes its context.
 *
 * Returns: (transfer full): a new, unattached source; g_source_unref() it after
 *   g_source_destroy().
 */
GSource *pleg_timer_source_new(void);

G_END_DECLS
