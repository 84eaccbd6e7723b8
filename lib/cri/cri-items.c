/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A CRI listing read item by item: the answer's top-level fields walked on the received pieces,
 * each item of field 1 unpacked alone into an arena and dropped once decoded.  The arena then
 * holds one item, not the unpacked answer (about 1 KiB a container) nor a contiguous copy of the
 * wire bytes.  The walk accepts and refuses what protobuf-c 1.4's unpack of the whole message
 * does (tags of at most 5 bytes and not 0, varints of at most 10, lengths of at most 5 bytes and
 * INT_MAX, no groups): tests/fuzz/cri-listing.c compares the two.
 */
#include "pleg-config.h"

#include <limits.h>
#include <string.h>

#include "cri-private.h"

typedef struct {
    CriPieceFunc next_piece;
    gpointer source;
    const guint8 *p, *end;
    gsize remaining; /* bytes of the message not read yet: no length may ask for more */
} Cursor;

static void
cursor_advance(Cursor *c, gsize n)
{
    c->p += n;
    c->remaining -= MIN(n, c->remaining);
}

/* Moves to the next non-empty piece when the current one is used up; FALSE at the end. */
static gboolean
cursor_fill(Cursor *c)
{
    while (c->p == c->end) {
        gsize length = 0;

        if (!c->next_piece(c->source, &c->p, &length)) {
            c->p = c->end = NULL;
            return FALSE;
        }
        c->end = c->p + length;
    }
    return TRUE;
}

/* A varint of at most @max_bytes bytes, low 64 bits kept. */
static gboolean
cursor_varint(Cursor *c, guint max_bytes, guint64 *ret, guint8 *ret_first)
{
    guint64 value = 0;

    for (guint i = 0; i < max_bytes; i++) {
        guint8 byte;

        if (!cursor_fill(c))
            return FALSE;
        byte = *c->p;
        cursor_advance(c, 1);
        if (i == 0 && ret_first)
            *ret_first = byte;
        if (i < 10)
            value |= (guint64)(byte & 0x7f) << (7 * i);
        if (!(byte & 0x80)) {
            *ret = value;
            return TRUE;
        }
    }
    return FALSE;
}

static gboolean
cursor_skip(Cursor *c, guint64 length)
{
    if (length > c->remaining)
        return FALSE;
    while (length > 0) {
        gsize n;

        if (!cursor_fill(c))
            return FALSE;
        n = (gsize)MIN((guint64)(c->end - c->p), length);
        cursor_advance(c, n);
        length -= n;
    }
    return TRUE;
}

/* The next @length bytes in one piece: in place when the current piece holds them, else copied
 * into @arena.  NULL when the message ends first: a length past the message's end is refused
 * before anything is allocated for it (a runtime's lie must not cost 2 GiB). */
static const guint8 *
cursor_take(Cursor *c, gsize length, CriArena *arena)
{
    guint8 *copy;
    gsize copied = 0;

    if (length == 0)
        return (const guint8 *)"";
    if (length > c->remaining)
        return NULL;
    if (cursor_fill(c) && (gsize)(c->end - c->p) >= length) {
        const guint8 *ret = c->p;

        cursor_advance(c, length);
        return ret;
    }
    copy = cri_arena_alloc(arena, length);
    if (!copy)
        return NULL;
    while (copied < length) {
        gsize n;

        if (!cursor_fill(c))
            return NULL;
        n = MIN((gsize)(c->end - c->p), length - copied);
        memcpy(copy + copied, c->p, n);
        cursor_advance(c, n);
        copied += n;
    }
    return copy;
}

/* A length prefix as protobuf-c reads one: at most 5 bytes, at most INT_MAX. */
static gboolean
cursor_length(Cursor *c, gsize *ret)
{
    guint64 length;

    if (!cursor_varint(c, 5, &length, NULL) || length > INT_MAX)
        return FALSE;
    *ret = (gsize)length;
    return TRUE;
}

static const ProtobufCMessageDescriptor *
item_descriptor_of(const ProtobufCMessageDescriptor *descriptor)
{
    const ProtobufCFieldDescriptor *field = protobuf_c_message_descriptor_get_field(descriptor, 1);

    if (field && field->label == PROTOBUF_C_LABEL_REPEATED &&
        field->type == PROTOBUF_C_TYPE_MESSAGE)
        return field->descriptor;
    return NULL;
}

gboolean
cri_unpack_items(CriPieceFunc next_piece, gpointer source, gsize length,
                 const ProtobufCMessageDescriptor *descriptor, CriArena *arena,
                 CriItemFunc item_func, gpointer item_data)
{
    const ProtobufCMessageDescriptor *item_descriptor;
    Cursor c = {.next_piece = next_piece, .source = source, .remaining = length};

    g_return_val_if_fail(next_piece != NULL && descriptor != NULL, FALSE);
    g_return_val_if_fail(arena != NULL && item_func != NULL, FALSE);
    item_descriptor = item_descriptor_of(descriptor);
    g_return_val_if_fail(item_descriptor != NULL, FALSE);

    while (cursor_fill(&c)) {
        guint64 tag, value;
        guint8 first = 0;
        gsize field_length;

        /* A tag whose first byte holds no field number bits is refused, as protobuf-c does. */
        if (!cursor_varint(&c, 5, &tag, &first) || (first & 0xf8) == 0)
            return FALSE;
        if ((tag >> 3) == 1) {
            CriArenaMark mark = cri_arena_mark(arena);
            const guint8 *bytes;
            ProtobufCMessage *item;

            if ((tag & 7) != PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED ||
                !cursor_length(&c, &field_length) ||
                !(bytes = cursor_take(&c, field_length, arena)))
                return FALSE;
            item = protobuf_c_message_unpack(item_descriptor, cri_arena_get_allocator(arena),
                                             field_length, bytes);
            if (item)
                item_func(item, item_data);
            cri_arena_rewind(arena, &mark);
            if (!item)
                return FALSE;
            continue;
        }
        switch (tag & 7) {
        case PROTOBUF_C_WIRE_TYPE_VARINT:
            if (!cursor_varint(&c, 10, &value, NULL))
                return FALSE;
            break;
        case PROTOBUF_C_WIRE_TYPE_64BIT:
            if (!cursor_skip(&c, 8))
                return FALSE;
            break;
        case PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED:
            if (!cursor_length(&c, &field_length) || !cursor_skip(&c, field_length))
                return FALSE;
            break;
        case PROTOBUF_C_WIRE_TYPE_32BIT:
            if (!cursor_skip(&c, 4))
                return FALSE;
            break;
        default: /* groups and wire types 6, 7 */
            return FALSE;
        }
    }
    return TRUE;
}
