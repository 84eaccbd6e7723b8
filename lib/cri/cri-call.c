/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What every CRI call does on the wire, unary or streamed: its deadline, the request packed, the
 * operations of its batches and what they write into, the final status as a GError, and the
 * completion queue it ends with.
 */
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include <string.h>

#include <pleg/pleg-util.h>

#include "cri-transport.h"

static const char *
status_code_name(grpc_status_code code)
{
    static const char *const names[] = {
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    };

    if ((guint)code < G_N_ELEMENTS(names))
        return names[code];
    return "UNKNOWN";
}

void
cri_set_status_error(GError **error, CriChannel *self, const char *method, grpc_status_code code,
                     grpc_slice details)
{
    g_autofree char *text = NULL;
    int error_code = code;

    /* The runtime's own words: any bytes, any length. */
    if (GRPC_SLICE_LENGTH(details) > 0)
        text = pleg_log_text((const char *)GRPC_SLICE_START_PTR(details),
                             (gssize)GRPC_SLICE_LENGTH(details), 1024);
    if (error_code <= GRPC_STATUS_OK || error_code > PLEG_CRI_ERROR_UNAUTHENTICATED)
        error_code = PLEG_CRI_ERROR_UNKNOWN;

    g_set_error(error, PLEG_CRI_ERROR, error_code, "%s: %s: %s",
                cri_channel_get_shown_endpoint(self), method,
                text && *text ? text : status_code_name(code));
}

gpr_timespec
cri_deadline_from_timeout(gint64 timeout_usec)
{
    if (timeout_usec <= 0)
        return gpr_inf_future(GPR_CLOCK_MONOTONIC);
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                        gpr_time_from_micros(timeout_usec, GPR_TIMESPAN));
}

static grpc_byte_buffer *
pack_message(const ProtobufCMessage *message)
{
    size_t size = protobuf_c_message_get_packed_size(message);
    grpc_slice slice = grpc_slice_malloc(size);
    grpc_byte_buffer *buffer;

    protobuf_c_message_pack(message, GRPC_SLICE_START_PTR(slice));
    buffer = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return buffer;
}

void
cri_queue_destroy(grpc_completion_queue *cq)
{
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
}

void
cri_call_io_init(CriCallIo *io, const ProtobufCMessage *request)
{
    io->request_buffer = pack_message(request);
    io->response_buffer = NULL;
    grpc_metadata_array_init(&io->initial_metadata);
    grpc_metadata_array_init(&io->trailing_metadata);
    io->status = GRPC_STATUS_UNKNOWN;
    io->details = grpc_empty_slice();
    io->error_string = NULL;
}

/* Fills @ops with the four operations that send the request and receive the initial metadata. */
void
cri_call_io_send_ops(CriCallIo *io, grpc_op ops[4])
{
    memset(ops, 0, 4 * sizeof(grpc_op));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = io->request_buffer;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &io->initial_metadata;
}

void
cri_call_io_status_op(CriCallIo *io, grpc_op *op)
{
    memset(op, 0, sizeof(*op));
    op->op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op->data.recv_status_on_client.trailing_metadata = &io->trailing_metadata;
    op->data.recv_status_on_client.status = &io->status;
    op->data.recv_status_on_client.status_details = &io->details;
    op->data.recv_status_on_client.error_string = &io->error_string;
}

void
cri_call_io_clear(CriCallIo *io)
{
    g_clear_pointer(&io->request_buffer, grpc_byte_buffer_destroy);
    g_clear_pointer(&io->response_buffer, grpc_byte_buffer_destroy);
    grpc_metadata_array_destroy(&io->initial_metadata);
    grpc_metadata_array_destroy(&io->trailing_metadata);
    grpc_slice_unref(io->details);
    io->details = grpc_empty_slice();
    gpr_free((void *)io->error_string);
    io->error_string = NULL;
}
