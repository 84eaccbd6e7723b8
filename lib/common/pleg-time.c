/* SPDX-License-Identifier: Apache-2.0 */
/* Go durations (parse and format, as Go's time package) and RFC 3339 times. */
#include "pleg/pleg-util.h"

#include <string.h>

#include "pleg-quark.h"

#define NSEC_PER_USEC G_GUINT64_CONSTANT(1000)
#define USEC_PER_MSEC G_GUINT64_CONSTANT(1000)
#define USEC_PER_SEC  G_GUINT64_CONSTANT(1000000)
#define DURATION_MAX  (G_GUINT64_CONSTANT(1) << 63) /* |INT64_MIN| nanoseconds */

typedef struct {
    const char *name;
    guint64 nsec;
} DurationUnit;

static const DurationUnit duration_units[] = {
    {"ns", 1},
    {"us", 1000},
    {"\u00b5s", 1000}, /* micro sign */
    {"\u03bcs", 1000}, /* Greek small letter mu */
    {"ms", 1000000},
    {"s", G_GUINT64_CONSTANT(1000000000)},
    {"m", G_GUINT64_CONSTANT(60000000000)},
    {"h", G_GUINT64_CONSTANT(3600000000000)},
};

/* clang-format off */
PLEG_DEFINE_QUARK("pleg-duration-error-quark", pleg_duration_error)
/* clang-format on */

static gboolean
duration_error(GError **error, const char *text, const char *what)
{
    g_autofree char *shown = pleg_log_text(text, -1, 0);

    g_set_error(error, PLEG_DURATION_ERROR, PLEG_DURATION_ERROR_INVALID, "%s in duration \"%s\"",
                what, shown);
    return FALSE;
}

/* Leading decimal integer; FALSE on overflow past 2^63. */
static gboolean
leading_int(const char **p, guint64 *ret)
{
    guint64 x = 0;

    for (; g_ascii_isdigit(**p); (*p)++) {
        if (x > DURATION_MAX / 10)
            return FALSE;
        x = x * 10 + (guint64)(**p - '0');
        if (x > DURATION_MAX)
            return FALSE;
    }
    *ret = x;
    return TRUE;
}

/* Fraction digits after the dot; digits that would overflow are dropped, not an error. */
static void
leading_fraction(const char **p, guint64 *ret, double *ret_scale)
{
    guint64 x = 0;
    double scale = 1;
    gboolean overflow = FALSE;

    for (; g_ascii_isdigit(**p); (*p)++) {
        guint64 y;

        if (overflow)
            continue;
        if (x > (DURATION_MAX - 1) / 10) {
            overflow = TRUE;
            continue;
        }
        y = x * 10 + (guint64)(**p - '0');
        if (y > DURATION_MAX) {
            overflow = TRUE;
            continue;
        }
        x = y;
        scale *= 10;
    }
    *ret = x;
    *ret_scale = scale;
}

gboolean
pleg_duration_parse(const char *text, gint64 *ret_usec, GError **error)
{
    const char *p = text;
    gboolean negative = FALSE;
    guint64 total = 0;
    gint64 nsec;

    g_return_val_if_fail(text != NULL, FALSE);
    g_return_val_if_fail(error == NULL || *error == NULL, FALSE);

    if (*p == '-' || *p == '+') {
        negative = *p == '-';
        p++;
    }
    if (g_str_equal(p, "0")) {
        if (ret_usec)
            *ret_usec = 0;
        return TRUE;
    }
    if (!*p)
        return duration_error(error, text, "invalid syntax");

    while (*p) {
        const char *start;
        const DurationUnit *unit = NULL;
        guint64 value, fraction = 0;
        double scale = 1;
        gboolean have_int, have_fraction = FALSE;
        gsize unit_len;

        if (*p != '.' && !g_ascii_isdigit(*p))
            return duration_error(error, text, "invalid syntax");

        start = p;
        if (!leading_int(&p, &value))
            return duration_error(error, text, "overflow");
        have_int = p != start;
        if (*p == '.') {
            p++;
            start = p;
            leading_fraction(&p, &fraction, &scale);
            have_fraction = p != start;
        }
        if (!have_int && !have_fraction)
            return duration_error(error, text, "invalid syntax");

        unit_len = strcspn(p, ".0123456789");
        if (unit_len == 0)
            return duration_error(error, text, "missing unit");
        for (gsize i = 0; i < G_N_ELEMENTS(duration_units); i++) {
            if (strlen(duration_units[i].name) == unit_len &&
                strncmp(duration_units[i].name, p, unit_len) == 0) {
                unit = &duration_units[i];
                break;
            }
        }
        if (!unit) {
            g_autofree char *name = pleg_log_text(p, unit_len, 0);
            g_autofree char *what = g_strdup_printf("unknown unit \"%s\"", name);

            return duration_error(error, text, what);
        }
        p += unit_len;

        if (value > DURATION_MAX / unit->nsec)
            return duration_error(error, text, "overflow");
        value *= unit->nsec;
        if (fraction > 0) {
            value += (guint64)((double)fraction * ((double)unit->nsec / scale));
            if (value > DURATION_MAX)
                return duration_error(error, text, "overflow");
        }
        total += value;
        if (total > DURATION_MAX)
            return duration_error(error, text, "overflow");
    }

    if (negative) {
        nsec = total == DURATION_MAX ? G_MININT64 : -(gint64)total;
    } else {
        if (total > DURATION_MAX - 1)
            return duration_error(error, text, "overflow");
        nsec = (gint64)total;
    }
    if (ret_usec)
        *ret_usec = nsec / (gint64)NSEC_PER_USEC; /* C division truncates toward zero */
    return TRUE;
}

/* ".5", ".000001": @digits wide, trailing zeros trimmed, nothing when @fraction is 0. */
static void
append_fraction(GString *out, guint64 fraction, int digits)
{
    char buf[32];
    int len;

    if (fraction == 0)
        return;
    len = g_snprintf(buf, sizeof(buf), "%0*" G_GUINT64_FORMAT, digits, fraction);
    while (len > 0 && buf[len - 1] == '0')
        len--;
    g_string_append_c(out, '.');
    g_string_append_len(out, buf, len);
}

char *
pleg_duration_format(gint64 usec)
{
    GString *out;
    guint64 u;

    if (usec == 0)
        return g_strdup("0s");

    out = g_string_new(NULL);
    if (usec < 0) {
        g_string_append_c(out, '-');
        u = (guint64)(-(usec + 1)) + 1; /* also right for G_MININT64 */
    } else {
        u = (guint64)usec;
    }

    if (u < USEC_PER_MSEC) {
        g_string_append_printf(out, "%" G_GUINT64_FORMAT "\u00b5s", u);
    } else if (u < USEC_PER_SEC) {
        g_string_append_printf(out, "%" G_GUINT64_FORMAT, u / USEC_PER_MSEC);
        append_fraction(out, u % USEC_PER_MSEC, 3);
        g_string_append(out, "ms");
    } else {
        guint64 secs = u / USEC_PER_SEC;
        guint64 hours = secs / 3600;
        guint64 minutes = secs / 60 % 60;

        if (hours > 0)
            g_string_append_printf(out, "%" G_GUINT64_FORMAT "h", hours);
        if (hours > 0 || minutes > 0)
            g_string_append_printf(out, "%" G_GUINT64_FORMAT "m", minutes);
        g_string_append_printf(out, "%" G_GUINT64_FORMAT, secs % 60);
        append_fraction(out, u % USEC_PER_SEC, 6);
        g_string_append_c(out, 's');
    }
    return g_string_free(out, FALSE);
}

static char *
put_digits(char *p, guint value, int width)
{
    for (int i = width - 1; i >= 0; i--) {
        p[i] = (char)('0' + value % 10);
        value /= 10;
    }
    return p + width;
}

/* The proleptic Gregorian date of day @days after 1970-01-01, as in Howard Hinnant's
 * "chrono-Compatible Low-Level Date Algorithms" (civil_from_days). */
static void
civil_from_days(gint64 days, gint64 *ret_year, guint *ret_month, guint *ret_day)
{
    gint64 z = days + 719468;
    gint64 era = (z >= 0 ? z : z - 146096) / 146097;
    guint doe = (guint)(z - era * 146097);
    guint yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    guint doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    guint mp = (5 * doy + 2) / 153;
    guint month = mp < 10 ? mp + 3 : mp - 9;

    *ret_year = (gint64)yoe + era * 400 + (month <= 2);
    *ret_month = month;
    *ret_day = doy - (153 * mp + 2) / 5 + 1;
}

/* Written by hand rather than with GDateTime (an allocation, a time zone and a format string
 * parsed per call): plegd formats two per event line.  Every gint64 of nanoseconds falls in the
 * years 1677 to 2262, so the year always has four digits. */
gsize
pleg_time_format_rfc3339_to_buffer(gint64 unix_ns, char buf[PLEG_TIME_RFC3339_SIZE])
{
    char *p = buf;
    gint64 secs = unix_ns / 1000000000;
    gint64 nsec = unix_ns % 1000000000;
    gint64 days, year;
    guint month, day, second_of_day;

    /* Floor division, so times before 1970 keep a positive fraction. */
    if (nsec < 0) {
        nsec += 1000000000;
        secs--;
    }
    days = secs / 86400 - (secs % 86400 < 0);
    second_of_day = (guint)(secs - days * 86400);
    civil_from_days(days, &year, &month, &day);

    p = put_digits(p, (guint)year, 4);
    *p++ = '-';
    p = put_digits(p, month, 2);
    *p++ = '-';
    p = put_digits(p, day, 2);
    *p++ = 'T';
    p = put_digits(p, second_of_day / 3600, 2);
    *p++ = ':';
    p = put_digits(p, second_of_day / 60 % 60, 2);
    *p++ = ':';
    p = put_digits(p, second_of_day % 60, 2);
    /* ".5", ".000001": trailing zeros trimmed, nothing for a whole second. */
    if (nsec != 0) {
        int len = 9;

        *p++ = '.';
        put_digits(p, (guint)nsec, 9);
        while (p[len - 1] == '0')
            len--;
        p += len;
    }
    *p++ = 'Z';
    *p = '\0';
    return (gsize)(p - buf);
}

char *
pleg_time_format_rfc3339(gint64 unix_ns)
{
    char buf[PLEG_TIME_RFC3339_SIZE];
    gsize len = pleg_time_format_rfc3339_to_buffer(unix_ns, buf);

    return g_strndup(buf, len);
}
