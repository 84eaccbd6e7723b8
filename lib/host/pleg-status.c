/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Plugins' informational statuses (set_status, plugin ABI 1.2): one row per plugin under one
 * lock, copied out for readers on any thread.
 */
#include "pleg-services.h"

typedef struct {
    gconstpointer owner;
    char *name;
    char *state; /* NULL: no status */
    char *message;
    gint64 since_unix_usec;
} StatusRow;

struct _PlegStatusBoard {
    gatomicrefcount refs;
    GMutex lock;
    GPtrArray *rows; /* StatusRow, in the order they were added */
};

void
pleg_plugin_status_free(PlegPluginStatus *status)
{
    if (!status)
        return;
    g_free(status->name);
    g_free(status->state);
    g_free(status->message);
    g_free(status);
}

static void
status_row_free(StatusRow *row)
{
    g_free(row->name);
    g_free(row->state);
    g_free(row->message);
    g_free(row);
}

PlegStatusBoard *
pleg_status_board_new(void)
{
    PlegStatusBoard *board = g_new0(PlegStatusBoard, 1);

    g_atomic_ref_count_init(&board->refs);
    g_mutex_init(&board->lock);
    board->rows = g_ptr_array_new_with_free_func((GDestroyNotify)status_row_free);
    return board;
}

PlegStatusBoard *
pleg_status_board_ref(PlegStatusBoard *board)
{
    g_atomic_ref_count_inc(&board->refs);
    return board;
}

void
pleg_status_board_unref(PlegStatusBoard *board)
{
    if (!board || !g_atomic_ref_count_dec(&board->refs))
        return;
    g_ptr_array_unref(board->rows);
    g_mutex_clear(&board->lock);
    g_free(board);
}

/* Under the lock.  (transfer none) (nullable) */
static StatusRow *
find_row(PlegStatusBoard *board, gconstpointer owner, guint *ret_index)
{
    for (guint i = 0; i < board->rows->len; i++) {
        StatusRow *row = g_ptr_array_index(board->rows, i);

        if (row->owner == owner) {
            if (ret_index)
                *ret_index = i;
            return row;
        }
    }
    return NULL;
}

void
pleg_status_board_add(PlegStatusBoard *board, gconstpointer owner, const char *name)
{
    StatusRow *row = g_new0(StatusRow, 1);

    row->owner = owner;
    row->name = g_strdup(name);
    g_mutex_lock(&board->lock);
    g_ptr_array_add(board->rows, row);
    g_mutex_unlock(&board->lock);
}

void
pleg_status_board_remove(PlegStatusBoard *board, gconstpointer owner)
{
    guint index;

    g_mutex_lock(&board->lock);
    if (find_row(board, owner, &index))
        g_ptr_array_remove_index(board->rows, index);
    g_mutex_unlock(&board->lock);
}

/* "a short stable lowercase word": [a-z][a-z0-9-]*, at most PLEG_PLUGIN_STATUS_STATE_MAX. */
static gboolean
is_state_word(const char *state)
{
    gsize n;

    if (!state || !g_ascii_islower(state[0]))
        return FALSE;
    for (n = 1; state[n]; n++) {
        if (n >= PLEG_PLUGIN_STATUS_STATE_MAX)
            return FALSE;
        if (!g_ascii_islower(state[n]) && !g_ascii_isdigit(state[n]) && state[n] != '-')
            return FALSE;
    }
    return TRUE;
}

gboolean
pleg_status_board_set(PlegStatusBoard *board, gconstpointer owner, const char *state,
                      const char *message)
{
    StatusRow *row;

    if (!is_state_word(state))
        return FALSE;
    g_mutex_lock(&board->lock);
    row = find_row(board, owner, NULL);
    if (row) {
        if (g_strcmp0(row->state, state) != 0) {
            g_free(row->state);
            row->state = g_strdup(state);
            row->since_unix_usec = g_get_real_time();
        }
        g_free(row->message);
        row->message = g_strdup(message ? message : "");
    }
    g_mutex_unlock(&board->lock);
    return TRUE;
}

void
pleg_status_board_clear(PlegStatusBoard *board, gconstpointer owner)
{
    StatusRow *row;

    g_mutex_lock(&board->lock);
    row = find_row(board, owner, NULL);
    if (row) {
        g_clear_pointer(&row->state, g_free);
        g_clear_pointer(&row->message, g_free);
        row->since_unix_usec = 0;
    }
    g_mutex_unlock(&board->lock);
}

GPtrArray *
pleg_status_board_list(PlegStatusBoard *board, const char *name)
{
    GPtrArray *list = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_plugin_status_free);

    g_mutex_lock(&board->lock);
    for (guint i = 0; i < board->rows->len; i++) {
        const StatusRow *row = g_ptr_array_index(board->rows, i);
        PlegPluginStatus *status;

        if (!row->state || (name && g_strcmp0(row->name, name) != 0))
            continue;
        status = g_new0(PlegPluginStatus, 1);
        status->name = g_strdup(row->name);
        status->state = g_strdup(row->state);
        status->message = g_strdup(row->message);
        status->since_unix_usec = row->since_unix_usec;
        g_ptr_array_add(list, status);
    }
    g_mutex_unlock(&board->lock);
    return list;
}
