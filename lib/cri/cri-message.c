/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The read of a received message: unpacked whole (with malloc or into an arena), or item by item
 * (cri-items.c) over the slices of its byte buffer, under a listing's bounds.
 */
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>

#include <string.h>

#include "cri-transport.h"

/* Unpacks into @arena straight from the received slice when there is one, else from a copy of
 * the slices in the arena: neither the wire bytes nor the message take a malloc.  A failed unpack
 * leaves the arena as it was. */
static ProtobufCMessage *
unpack_in_arena(grpc_byte_buffer_reader *reader, const ProtobufCMessageDescriptor *descriptor,
                CriArena *arena)
{
    CriArenaMark mark = cri_arena_mark(arena);
    grpc_slice *first = NULL, *second = NULL;
    ProtobufCMessage *message;

    if (grpc_byte_buffer_reader_peek(reader, &first) &&
        !grpc_byte_buffer_reader_peek(reader, &second)) {
        message =
            protobuf_c_message_unpack(descriptor, cri_arena_get_allocator(arena),
                                      GRPC_SLICE_LENGTH(*first), GRPC_SLICE_START_PTR(*first));
    } else {
        gsize length = grpc_byte_buffer_length(reader->buffer_out), copied = 0;
        guint8 *data = cri_arena_alloc(arena, length);
        grpc_byte_buffer *buffer = reader->buffer_in;
        grpc_slice slice;

        /* Peeking moved the reader on: start again from the first slice. */
        grpc_byte_buffer_reader_destroy(reader);
        if (!grpc_byte_buffer_reader_init(reader, buffer))
            g_assert_not_reached(); /* it succeeded a moment ago on the same buffer */
        while (grpc_byte_buffer_reader_next(reader, &slice)) {
            memcpy(data + copied, GRPC_SLICE_START_PTR(slice), GRPC_SLICE_LENGTH(slice));
            copied += GRPC_SLICE_LENGTH(slice);
            grpc_slice_unref(slice);
        }
        g_assert(copied == length);
        message = protobuf_c_message_unpack(descriptor, cri_arena_get_allocator(arena), length,
                                            data);
    }
    if (!message)
        cri_arena_rewind(arena, &mark);
    return message;
}

ProtobufCMessage *
cri_unpack_message(CriChannel *self, const char *method, grpc_byte_buffer *buffer,
                   const ProtobufCMessageDescriptor *descriptor, CriArena *arena, GError **error)
{
    grpc_byte_buffer_reader reader;
    ProtobufCMessage *message;
    grpc_slice slice;

    if (!grpc_byte_buffer_reader_init(&reader, buffer)) {
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "%s: %s: cannot read the response of type %s",
                    cri_channel_get_shown_endpoint(self), method, descriptor->name);
        return NULL;
    }
    if (arena) {
        message = unpack_in_arena(&reader, descriptor, arena);
        grpc_byte_buffer_reader_destroy(&reader);
    } else {
        slice = grpc_byte_buffer_reader_readall(&reader);
        grpc_byte_buffer_reader_destroy(&reader);
        message = protobuf_c_message_unpack(descriptor, NULL, GRPC_SLICE_LENGTH(slice),
                                            GRPC_SLICE_START_PTR(slice));
        grpc_slice_unref(slice);
    }
    if (!message)
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "%s: %s: cannot decode the response as %s",
                    cri_channel_get_shown_endpoint(self), method, descriptor->name);
    return message;
}

/* ---- an answer item by item (cri-items.c) over the slices of a byte buffer ---- */

const char *
cri_limit_to_string(CriLimit limit)
{
    switch (limit) {
    case CRI_LIMIT_BYTES:
        return "bytes";
    case CRI_LIMIT_ITEMS:
        return "items";
    case CRI_LIMIT_NONE:
        break;
    }
    return NULL;
}

typedef struct {
    grpc_byte_buffer_reader reader;
    grpc_slice slice; /* a reference while `have_slice` */
    gboolean have_slice;
    const gboolean *stop; /* no slice is read once it is set */
} SliceSource;

static gboolean
next_slice(gpointer data, const guint8 **ret_data, gsize *ret_length)
{
    SliceSource *source = data;

    if (source->have_slice)
        grpc_slice_unref(source->slice);
    source->have_slice =
        !*source->stop && grpc_byte_buffer_reader_next(&source->reader, &source->slice);
    if (!source->have_slice)
        return FALSE;
    *ret_data = GRPC_SLICE_START_PTR(source->slice);
    *ret_length = GRPC_SLICE_LENGTH(source->slice);
    return TRUE;
}

/* The items of a listing on their way to the caller, counted: past the bound they are
 * dropped, and the walk ends at the next slice. */
typedef struct {
    CriItemFunc item_func;
    gpointer item_data;
    guint64 max_items;
    guint64 *n_items;
    gboolean over;
} ItemCounter;

static void
count_item(const ProtobufCMessage *item, gpointer data)
{
    ItemCounter *counter = data;

    if (counter->max_items > 0 && *counter->n_items >= counter->max_items)
        counter->over = TRUE;
    (*counter->n_items)++;
    if (!counter->over)
        counter->item_func(item, counter->item_data);
}

gboolean
cri_buffer_read_items(struct grpc_byte_buffer *buffer,
                      const ProtobufCMessageDescriptor *descriptor, CriArena *arena,
                      CriItemFunc item_func, gpointer item_data, const CriListingLimits *limits,
                      CriListingCount *count, CriLimit *ret_over)
{
    static const CriListingLimits unbounded = {0};
    ItemCounter counter = {.item_func = item_func, .item_data = item_data};
    SliceSource source = {.stop = &counter.over};
    gsize length;
    gboolean ok;

    g_return_val_if_fail(buffer != NULL && count != NULL && ret_over != NULL, FALSE);

    *ret_over = CRI_LIMIT_NONE;
    if (!limits)
        limits = &unbounded;
    if (!grpc_byte_buffer_reader_init(&source.reader, buffer))
        return FALSE;
    /* The length of what the reader reads, buffer_out: a reader that decompresses (gRPC's did
     * before 1.4x) reads more than @buffer's compressed length, which would cut the walk short.
     * gRPC 1.51's reader hands over @buffer as it is, so today the two are the same. */
    length = grpc_byte_buffer_length(source.reader.buffer_out);
    count->bytes += length;
    if (limits->max_bytes > 0 && count->bytes > limits->max_bytes) {
        grpc_byte_buffer_reader_destroy(&source.reader);
        *ret_over = CRI_LIMIT_BYTES;
        return FALSE;
    }
    counter.max_items = limits->max_items;
    counter.n_items = &count->items;
    ok = cri_unpack_items(next_slice, &source, length, descriptor, arena, count_item, &counter);
    if (source.have_slice)
        grpc_slice_unref(source.slice);
    grpc_byte_buffer_reader_destroy(&source.reader);
    if (counter.over) {
        *ret_over = CRI_LIMIT_ITEMS;
        return FALSE;
    }
    return ok;
}

/* Why cri_buffer_read_items() failed, as the call's error. */
void
cri_set_read_items_error(GError **error, CriChannel *self, const char *method,
                         const ProtobufCMessageDescriptor *descriptor,
                         const CriListingLimits *limits, const CriListingCount *count,
                         CriLimit over)
{
    switch (over) {
    case CRI_LIMIT_BYTES:
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_RESOURCE_EXHAUSTED,
                    "%s: %s: the listing passed its limit of %zu bytes (%zu bytes received)",
                    cri_channel_get_shown_endpoint(self), method, limits->max_bytes, count->bytes);
        break;
    case CRI_LIMIT_ITEMS:
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_RESOURCE_EXHAUSTED,
                    "%s: %s: the listing passed its limit of %" G_GUINT64_FORMAT
                    " items (%" G_GUINT64_FORMAT " items received)",
                    cri_channel_get_shown_endpoint(self), method, limits->max_items, count->items);
        break;
    case CRI_LIMIT_NONE:
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INTERNAL,
                    "%s: %s: cannot decode the response as %s",
                    cri_channel_get_shown_endpoint(self), method, descriptor->name);
        break;
    }
}
