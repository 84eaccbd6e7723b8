/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tables for a terminal: columns aligned on the widest cell, two spaces apart, as crictl and
 * systemctl print them; for a stream, columns that grow as wider cells come.  And what a cell
 * shows of plegd's JSON (text escaped, times local).  Pure: no I/O.
 */
#include <pleg/pleg.h>

#include "plegctl.h"

#define GAP "  "
/* The most of one value a cell shows, in bytes of the value. */
#define CELL_MAX_BYTES 1024

struct _PlegctlTable {
    guint n_columns;
    char **headers;
    GPtrArray *rows; /* GStrv each */
    guint *widths;   /* in characters */
    gboolean headers_shown; /* plegctl_table_format_row() printed them */
};

PlegctlTable *
plegctl_table_new(const char *const *headers)
{
    PlegctlTable *table = g_new0(PlegctlTable, 1);

    table->headers = g_strdupv((char **)headers);
    table->n_columns = g_strv_length(table->headers);
    table->rows = g_ptr_array_new_with_free_func((GDestroyNotify)g_strfreev);
    table->widths = g_new0(guint, table->n_columns);
    for (guint i = 0; i < table->n_columns; i++)
        table->widths[i] = (guint)g_utf8_strlen(table->headers[i], -1);
    return table;
}

void
plegctl_table_free(PlegctlTable *table)
{
    if (!table)
        return;
    g_strfreev(table->headers);
    g_ptr_array_unref(table->rows);
    g_free(table->widths);
    g_free(table);
}

/* A copy of @cells, "-" for NULL, widening the columns. */
static char **
take_cells(PlegctlTable *table, const char *const *cells)
{
    char **row = g_new0(char *, table->n_columns + 1);

    for (guint i = 0; i < table->n_columns; i++) {
        row[i] = g_strdup(cells[i] ? cells[i] : "-");
        table->widths[i] = MAX(table->widths[i], (guint)g_utf8_strlen(row[i], -1));
    }
    return row;
}

static void
append_line(PlegctlTable *table, GString *out, char **cells)
{
    gsize start = out->len;

    for (guint i = 0; i < table->n_columns; i++) {
        guint width = (guint)g_utf8_strlen(cells[i], -1);

        if (i > 0)
            g_string_append(out, GAP);
        g_string_append(out, cells[i]);
        for (; width < table->widths[i]; width++)
            g_string_append_c(out, ' ');
    }
    /* No trailing blanks after the last non-empty cell. */
    while (out->len > start && out->str[out->len - 1] == ' ')
        g_string_truncate(out, out->len - 1);
    g_string_append_c(out, '\n');
}

void
plegctl_table_widen(PlegctlTable *table, const char *const *cells)
{
    g_strfreev(take_cells(table, cells));
}

void
plegctl_table_add_row(PlegctlTable *table, const char *const *cells)
{
    g_ptr_array_add(table->rows, take_cells(table, cells));
}

char *
plegctl_table_format(PlegctlTable *table)
{
    GString *out = g_string_new(NULL);

    append_line(table, out, table->headers);
    for (guint i = 0; i < table->rows->len; i++)
        append_line(table, out, g_ptr_array_index(table->rows, i));
    return g_string_free(out, FALSE);
}

char *
plegctl_table_format_row(PlegctlTable *table, const char *const *cells)
{
    g_auto(GStrv) row = take_cells(table, cells);
    GString *out = g_string_new(NULL);

    if (!table->headers_shown) {
        append_line(table, out, table->headers);
        table->headers_shown = TRUE;
    }
    append_line(table, out, row);
    return g_string_free(out, FALSE);
}

char *
plegctl_cell(const char *text)
{
    return text ? pleg_log_text(text, -1, CELL_MAX_BYTES) : g_strdup("-");
}

/* ---- what a cell shows of plegd's JSON ---- */

/* @object's member @name when it holds a value of @type. */
static JsonNode *
value_member(JsonObject *object, const char *name, GType type)
{
    JsonNode *node = object ? json_object_get_member(object, name) : NULL;

    if (!node || !JSON_NODE_HOLDS_VALUE(node) || json_node_get_value_type(node) != type)
        return NULL;
    return node;
}

const char *
plegctl_json_string(JsonObject *object, const char *name)
{
    JsonNode *node = value_member(object, name, G_TYPE_STRING);

    return node ? json_node_get_string(node) : NULL;
}

gboolean
plegctl_json_int(JsonObject *object, const char *name, gint64 *ret_value)
{
    JsonNode *node = value_member(object, name, G_TYPE_INT64);

    if (node)
        *ret_value = json_node_get_int(node);
    return node != NULL;
}

gboolean
plegctl_json_bool(JsonObject *object, const char *name, gboolean *ret_value)
{
    JsonNode *node = value_member(object, name, G_TYPE_BOOLEAN);

    if (node)
        *ret_value = json_node_get_boolean(node);
    return node != NULL;
}

JsonObject *
plegctl_json_object(JsonObject *object, const char *name)
{
    JsonNode *node = object ? json_object_get_member(object, name) : NULL;

    return node && JSON_NODE_HOLDS_OBJECT(node) ? json_node_get_object(node) : NULL;
}

JsonArray *
plegctl_json_array(JsonObject *object, const char *name)
{
    JsonNode *node = object ? json_object_get_member(object, name) : NULL;

    return node && JSON_NODE_HOLDS_ARRAY(node) ? json_node_get_array(node) : NULL;
}

JsonObject *
plegctl_json_element(JsonArray *array, guint index)
{
    JsonNode *node = array && index < json_array_get_length(array)
                         ? json_array_get_element(array, index)
                         : NULL;

    return node && JSON_NODE_HOLDS_OBJECT(node) ? json_node_get_object(node) : NULL;
}

char *
plegctl_format_time(const char *text)
{
    g_autoptr(GDateTime) time = text ? g_date_time_new_from_iso8601(text, NULL) : NULL;
    g_autoptr(GDateTime) local = time ? g_date_time_to_local(time) : NULL;

    if (!local)
        return plegctl_cell(text);
    return g_date_time_format(local, "%Y-%m-%d %H:%M:%S");
}
