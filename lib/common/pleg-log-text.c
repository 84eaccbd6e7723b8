/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Untrusted text (flag values, plugin files, a peer's messages) made safe for a log line.
 */
#include <string.h>

#include <pleg/pleg-util.h>

static void
append_byte_escape(GString *out, guchar byte)
{
    switch (byte) {
    case '\n':
        g_string_append(out, "\\n");
        break;
    case '\r':
        g_string_append(out, "\\r");
        break;
    case '\t':
        g_string_append(out, "\\t");
        break;
    default:
        g_string_append_printf(out, "\\x%02x", byte);
        break;
    }
}

char *
pleg_log_text(const char *text, gssize length, gsize max_bytes)
{
    g_autoptr(GString) out = NULL;
    const char *p, *end, *cut;
    gsize total;

    if (!text)
        return g_strdup("(null)");
    total = length < 0 ? strlen(text) : (gsize)length;
    if (max_bytes == 0)
        max_bytes = PLEG_LOG_TEXT_MAX;

    out = g_string_sized_new(MIN(total, max_bytes) + 16);
    p = text;
    end = text + total;
    cut = text + MIN(total, max_bytes);
    while (p < cut) {
        gunichar c = g_utf8_get_char_validated(p, end - p);

        if (c == (gunichar)-1 || c == (gunichar)-2) {
            append_byte_escape(out, (guchar)*p);
            p++;
            continue;
        }
        /* A character that would straddle the cut is left out whole. */
        if (p + g_utf8_skip[*(const guchar *)p] > cut)
            break;
        if (c == '\\')
            g_string_append(out, "\\\\");
        else if (c < 0x80 && !g_ascii_isprint((char)c))
            append_byte_escape(out, (guchar)c);
        else if (c >= 0x80 && !g_unichar_isprint(c))
            g_string_append_printf(out, "\\u%04x", c);
        else
            g_string_append_unichar(out, c);
        p = g_utf8_next_char(p);
    }
    if (p < end)
        g_string_append_printf(out, "... (%" G_GSIZE_FORMAT " bytes in all)", total);
    return g_string_free(g_steal_pointer(&out), FALSE);
}
