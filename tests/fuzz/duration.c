/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Go durations (lib/common/pleg-time.c): pleg_duration_parse() on arbitrary text never crashes,
 * fails only with a PLEG_DURATION_ERROR_INVALID that quotes the text and leaves its output alone;
 * every parsed value formats to text that parses back to the same value; and the first 8
 * bytes, read as any int64 of microseconds, format to text that parses back to it exactly when
 * it fits Go's range (|x| * 1000 ns in an int64), and is refused as an overflow otherwise.
 */
#include <glib.h>
#include <string.h>

#include <pleg/pleg-util.h>

#include "fuzz-target.h"

#define UNTOUCHED G_GINT64_CONSTANT(0x5eed5eed5eed)

static void
check_round_trip(gint64 usec)
{
    g_autofree char *text = pleg_duration_format(usec);
    g_autoptr(GError) error = NULL;
    gint64 back = UNTOUCHED;
    gboolean fits = usec >= G_MININT64 / 1000 && usec <= G_MAXINT64 / 1000;

    FUZZ_CHECK(text && *text, "format gives text");
    if (fits) {
        if (!pleg_duration_parse(text, &back, &error))
            fuzz_fail("format(%" G_GINT64_FORMAT ") = \"%s\" does not parse: %s", usec, text,
                    error->message);
        if (back != usec)
            fuzz_fail("parse(format(%" G_GINT64_FORMAT ")) = parse(\"%s\") = %" G_GINT64_FORMAT,
                    usec, text, back);
    } else {
        FUZZ_CHECK(!pleg_duration_parse(text, &back, &error), "out of range is refused");
        FUZZ_CHECK(back == UNTOUCHED, "output untouched on failure");
        FUZZ_CHECK(strstr(error->message, "overflow") != NULL, "out of range is an overflow");
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    g_autofree char *text = g_strndup((const char *)data, size);
    g_autoptr(GError) error = NULL;
    gint64 usec = UNTOUCHED;

    if (pleg_duration_parse(text, &usec, &error)) {
        FUZZ_CHECK(error == NULL, "no error on success");
        check_round_trip(usec);
    } else {
        FUZZ_CHECK(usec == UNTOUCHED, "output untouched on failure");
        FUZZ_CHECK(g_error_matches(error, PLEG_DURATION_ERROR, PLEG_DURATION_ERROR_INVALID),
                   "a bad duration is PLEG_DURATION_ERROR_INVALID");
        /* Quoted as logs show text (escaped, maybe shortened): only the frame is checked. */
        FUZZ_CHECK(strstr(error->message, " in duration \"") != NULL, "the error names the text");
    }

    if (size >= sizeof(gint64)) {
        gint64 raw;

        memcpy(&raw, data, sizeof raw);
        check_round_trip(raw);
    }
    return 0;
}
