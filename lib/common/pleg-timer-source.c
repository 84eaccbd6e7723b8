/* SPDX-License-Identifier: Apache-2.0 */
#include "pleg-timer-source.h"

static gboolean
timer_dispatch(GSource *source, GSourceFunc callback, gpointer user_data)
{
    /* Disarmed before the callback, so that a callback that arms it again is not undone. */
    g_source_set_ready_time(source, -1);
    return callback ? callback(user_data) : G_SOURCE_REMOVE;
}

static GSourceFuncs timer_funcs = {
    .dispatch = timer_dispatch,
};

GSource *
pleg_timer_source_new(void)
{
    GSource *source = g_source_new(&timer_funcs, sizeof(GSource));

    g_source_set_ready_time(source, -1);
    return source;
}
