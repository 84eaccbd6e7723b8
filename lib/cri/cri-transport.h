/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the files of the CRI transport share on the gRPC C core.  cri-private.h is the transport
 * as its users see it (the client, the host, cri-ctl, the tests) and names no gRPC type; this
 * header is the seam between the transport's own files, and includes gRPC.  G_GNUC_INTERNAL keeps
 * it out of libpleg's ABI.  The files, one idea each:
 *
 *   cri-channel.c   the channel: endpoint parsing, kubelet's connection parameters, references
 *   cri-call.c      what every call does on the wire: deadline, request, batch operations, the
 *                   final status as a GError, the completion queue's end
 *   cri-message.c   the read of a received message: whole, or item by item under a listing's
 *                   bounds
 *   cri-unary.c     unary calls, many in flight from one thread on one queue (the drive)
 *   cri-stream.c    server-streaming calls: the list streams and GetContainerEvents
 *
 * with cri-arena.c (arenas), cri-items.c (a message item by item, pure), cri-decode.c and
 * cri-events.c.
 */
#pragma once

#include <grpc/grpc.h>

#include "cri-private.h"

G_BEGIN_DECLS

/* ---- the channel (cri-channel.c) ---- */

/* The endpoint escaped and cut (pleg_log_text()), for messages.  (transfer none) */
G_GNUC_INTERNAL const char *cri_channel_get_shown_endpoint(CriChannel *channel);
/* A call of RuntimeService's @method on @channel, completing on @cq.  (transfer full) */
G_GNUC_INTERNAL grpc_call *cri_channel_create_call(CriChannel *channel, const char *method,
                                                   grpc_completion_queue *cq,
                                                   gpr_timespec deadline);

/* ---- a call on the wire (cri-call.c) ---- */

/* The request a call sends and what its batches write into. */
typedef struct {
    grpc_byte_buffer *request_buffer;
    grpc_byte_buffer *response_buffer;
    grpc_metadata_array initial_metadata;
    grpc_metadata_array trailing_metadata;
    grpc_status_code status;
    grpc_slice details;
    const char *error_string;
} CriCallIo;

/* @timeout_usec from now on the monotonic clock; <= 0: none. */
G_GNUC_INTERNAL gpr_timespec cri_deadline_from_timeout(gint64 timeout_usec);
/* Shuts @cq down, drains it and destroys it. */
G_GNUC_INTERNAL void cri_queue_destroy(grpc_completion_queue *cq);
G_GNUC_INTERNAL void cri_call_io_init(CriCallIo *io, const ProtobufCMessage *request);
/* Fills @ops with the four operations that send the request and receive the initial metadata. */
G_GNUC_INTERNAL void cri_call_io_send_ops(CriCallIo *io, grpc_op ops[4]);
G_GNUC_INTERNAL void cri_call_io_status_op(CriCallIo *io, grpc_op *op);
G_GNUC_INTERNAL void cri_call_io_clear(CriCallIo *io);
/* A failed call's status as a #PLEG_CRI_ERROR: "<endpoint>: <method>: <details or code name>". */
G_GNUC_INTERNAL void cri_set_status_error(GError **error, CriChannel *channel, const char *method,
                                          grpc_status_code code, grpc_slice details);

/* ---- a received message (cri-message.c) ---- */

/* @buffer unpacked whole as @descriptor, into @arena when given, else with malloc.
 * (transfer full) */
G_GNUC_INTERNAL ProtobufCMessage *cri_unpack_message(CriChannel *channel, const char *method,
                                                     grpc_byte_buffer *buffer,
                                                     const ProtobufCMessageDescriptor *descriptor,
                                                     CriArena *arena, GError **error);
/* Why cri_buffer_read_items() failed, as the call's error. */
G_GNUC_INTERNAL void cri_set_read_items_error(GError **error, CriChannel *channel,
                                              const char *method,
                                              const ProtobufCMessageDescriptor *descriptor,
                                              const CriListingLimits *limits,
                                              const CriListingCount *count, CriLimit over);

G_END_DECLS
