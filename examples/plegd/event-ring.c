/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ring of recent event lines behind GET /events?since=SEQ, each with the key its filters
 * look at.  Pure: no I/O, no main context.
 */
#include "plegd.h"

typedef struct {
    GBytes *line;
    PlegdEventKey *key;
} Slot;

struct _PlegdEventRing {
    guint capacity;
    Slot *slots;    /* seq s lives in slots[(s - 1) % capacity] */
    guint64 first;  /* seq of the history's first event: no seq before it is plegd's */
    guint64 oldest; /* seq of the oldest line kept; == next when empty */
    guint64 next;   /* seq the next line gets */
};

PlegdEventRing *
plegd_event_ring_new(guint capacity)
{
    PlegdEventRing *ring;

    g_return_val_if_fail(capacity >= 1, NULL);
    ring = g_new0(PlegdEventRing, 1);
    ring->capacity = capacity;
    ring->slots = g_new0(Slot, capacity);
    ring->first = 1;
    ring->oldest = 1;
    ring->next = 1;
    return ring;
}

void
plegd_event_ring_start(PlegdEventRing *ring, guint64 first_seq, guint64 next_seq)
{
    g_return_if_fail(ring->next == ring->oldest);
    g_return_if_fail(first_seq >= 1 && next_seq >= first_seq);

    ring->first = first_seq;
    ring->oldest = next_seq;
    ring->next = next_seq;
}

void
plegd_event_ring_clear(PlegdEventRing *ring)
{
    for (guint i = 0; i < ring->capacity; i++) {
        g_clear_pointer(&ring->slots[i].line, g_bytes_unref);
        g_clear_pointer(&ring->slots[i].key, plegd_event_key_free);
    }
    ring->oldest = ring->next;
}

guint64
plegd_event_ring_get_first_seq(PlegdEventRing *ring)
{
    return ring->first;
}

void
plegd_event_ring_free(PlegdEventRing *ring)
{
    if (!ring)
        return;
    for (guint i = 0; i < ring->capacity; i++) {
        g_clear_pointer(&ring->slots[i].line, g_bytes_unref);
        g_clear_pointer(&ring->slots[i].key, plegd_event_key_free);
    }
    g_free(ring->slots);
    g_free(ring);
}

guint
plegd_event_ring_get_capacity(PlegdEventRing *ring)
{
    return ring->capacity;
}

guint64
plegd_event_ring_get_next_seq(PlegdEventRing *ring)
{
    return ring->next;
}

guint64
plegd_event_ring_get_oldest_seq(PlegdEventRing *ring)
{
    return ring->oldest;
}

guint64
plegd_event_ring_push(PlegdEventRing *ring, GBytes *line, const PlegPodLifecycleEvent *event,
                      guint64 *ret_evicted)
{
    return plegd_event_ring_push_key(ring, line, plegd_event_key_new(event), ret_evicted);
}

guint64
plegd_event_ring_push_key(PlegdEventRing *ring, GBytes *line, PlegdEventKey *key,
                          guint64 *ret_evicted)
{
    guint64 seq = ring->next;
    Slot *slot = &ring->slots[(seq - 1) % ring->capacity];
    guint64 evicted = 0;

    if (ring->next - ring->oldest == ring->capacity) {
        evicted = ring->oldest;
        ring->oldest++;
    }
    g_clear_pointer(&slot->line, g_bytes_unref);
    g_clear_pointer(&slot->key, plegd_event_key_free);
    slot->line = g_bytes_ref(line);
    slot->key = key;
    ring->next++;
    if (ret_evicted)
        *ret_evicted = evicted;
    return seq;
}

GBytes *
plegd_event_ring_lookup(PlegdEventRing *ring, guint64 seq)
{
    if (seq < ring->oldest || seq >= ring->next)
        return NULL;
    return ring->slots[(seq - 1) % ring->capacity].line;
}

const PlegdEventKey *
plegd_event_ring_lookup_key(PlegdEventRing *ring, guint64 seq)
{
    if (seq < ring->oldest || seq >= ring->next)
        return NULL;
    return ring->slots[(seq - 1) % ring->capacity].key;
}

gboolean
plegd_event_ring_check_since(PlegdEventRing *ring, guint64 since, GError **error)
{
    guint64 newest = ring->next - 1;

    /* 0: nothing seen, everything of this history wanted. */
    if (since == 0)
        since = ring->first - 1;
    if (since > newest) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                    "seq %" G_GUINT64_FORMAT " was never assigned: the newest event is seq "
                    "%" G_GUINT64_FORMAT " (a seq of another plegd history: its state was "
                    "lost?); relist, then follow /events",
                    since, newest);
        return FALSE;
    }
    if (since + 1 < ring->first) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                    "seq %" G_GUINT64_FORMAT " is older than this plegd's history, which "
                    "starts at seq %" G_GUINT64_FORMAT " (its state was lost, or it keeps none: "
                    "--state-dir); relist, then follow /events",
                    since, ring->first);
        return FALSE;
    }
    /* since+1 is the first seq the client wants; it may be the next one, not assigned yet. */
    if (since + 1 < ring->oldest) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                    "events after seq %" G_GUINT64_FORMAT " are no longer kept: the oldest "
                    "event kept is seq %" G_GUINT64_FORMAT "; relist, then follow /events",
                    since, ring->oldest);
        return FALSE;
    }
    return TRUE;
}

gboolean
plegd_event_ring_check_since_time(PlegdEventRing *ring, gint64 since_ns, GError **error)
{
    guint64 oldest = plegd_event_ring_get_oldest_seq(ring);
    const PlegdEventKey *key = plegd_event_ring_lookup_key(ring, oldest);
    g_autofree char *since_text = NULL, *oldest_text = NULL;

    if (oldest == ring->first || !key || key->time_ns <= since_ns)
        return TRUE;
    since_text = pleg_time_format_rfc3339(since_ns);
    oldest_text = pleg_time_format_rfc3339(key->time_ns);
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                "events since %s are no longer all kept: the oldest event kept is seq "
                "%" G_GUINT64_FORMAT " of %s; relist, then follow /events",
                since_text, oldest, oldest_text);
    return FALSE;
}
