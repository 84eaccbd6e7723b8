/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What every fuzz target in tests/fuzz defines.  Built with -Dfuzzing=true, libFuzzer calls
 * them; otherwise replay-main.c does, once per file of the corpora named on its command line.
 */
#pragma once

#include <glib.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* One input: must return 0; anything wrong aborts (g_assert, a sanitizer, a crash). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Optional one-time setup, called before the first input. */
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A failed invariant: says which and aborts, which libFuzzer reports as a crash and saves the
 * input of (it does not catch the SIGTRAP of g_error()). */
G_GNUC_PRINTF(1, 2) G_GNUC_NORETURN static inline void
fuzz_fail(const char *format, ...)
{
    va_list ap;

    fputs("fuzz invariant failed: ", stderr);
    va_start(ap, format);
    vfprintf(stderr, format, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

/* An invariant of a target, checked in every build type (g_assert() may be compiled out). */
#define FUZZ_CHECK(expr, what)                                                                     \
    do {                                                                                           \
        if (!(expr))                                                                               \
            fuzz_fail("%s (%s)", what, #expr);                                                     \
    } while (0)
