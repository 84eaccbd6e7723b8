/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <glib.h>

/* Like G_DEFINE_QUARK, whose cache is a plain static that the first callers on two threads
 * both write and read: a data race in C11 terms, which ThreadSanitizer reports with libpleg on
 * both sides.  The same cache, read and written atomically (g_quark_from_static_string() is
 * idempotent, so a second writer stores the same value).  @name is a string literal (a token
 * list as G_DEFINE_QUARK takes is spaced apart by code formatters). */
#define PLEG_DEFINE_QUARK(name, q_n)                                                             \
    GQuark q_n##_quark(void)                                                                   \
    {                                                                                          \
        static gint quark;                                                                     \
        gint q = g_atomic_int_get(&quark);                                                     \
                                                                                               \
        if (G_UNLIKELY(q == 0)) {                                                              \
            q = (gint)g_quark_from_static_string(name);                                         \
            g_atomic_int_set(&quark, q);                                                       \
        }                                                                                      \
        return (GQuark)q;                                                                      \
    }
