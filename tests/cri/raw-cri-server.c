/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The raw CRI runtime of raw-cri-server.h.  One thread takes the calls one after another; each
 * call's operations run one batch at a time on a queue of its own, so a client that stops
 * reading holds the sender in flow control until it cancels.
 */
#include <string.h>

#include <glib/gstdio.h>
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include "raw-cri-server.h"

typedef struct {
    GBytes *message;
    guint n_messages;
    guint n_sent;
    guint n_ended;
} Answer;

struct _RawCriServer {
    grpc_server *server;
    grpc_completion_queue *cq;      /* new calls and the server's shutdown */
    grpc_completion_queue *call_cq; /* the operations of the call being served */
    GThread *thread;
    int request_tag, shutdown_tag, op_tag;
    gboolean shutdown_taken; /* the serving thread took the shutdown's tag (read after join) */

    GMutex lock;
    GHashTable *answers; /* method -> Answer, under lock */
};

static void
answer_free(gpointer data)
{
    Answer *answer = data;

    g_bytes_unref(answer->message);
    g_free(answer);
}

/* @method's entry, made on first use; under lock. */
static Answer *
answer_for(RawCriServer *self, const char *method)
{
    Answer *answer = g_hash_table_lookup(self->answers, method);

    if (!answer) {
        answer = g_new0(Answer, 1);
        g_hash_table_insert(self->answers, g_strdup(method), answer);
    }
    return answer;
}

static gboolean
run_batch(RawCriServer *self, grpc_call *call, grpc_op *ops, size_t n_ops)
{
    grpc_event event;

    if (grpc_call_start_batch(call, ops, n_ops, &self->op_tag, NULL) != GRPC_CALL_OK)
        g_error("raw CRI server: cannot start a batch");
    event = grpc_completion_queue_next(self->call_cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    g_assert(event.type == GRPC_OP_COMPLETE && event.tag == &self->op_tag);
    return event.success;
}

static void
serve_call(RawCriServer *self, grpc_call *call, const grpc_call_details *details)
{
    g_autofree char *path = g_strndup((const char *)GRPC_SLICE_START_PTR(details->method),
                                      GRPC_SLICE_LENGTH(details->method));
    const char *method = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    g_autoptr(GBytes) message = NULL;
    grpc_byte_buffer *request = NULL;
    grpc_status_code status = GRPC_STATUS_UNIMPLEMENTED;
    grpc_slice slice = grpc_empty_slice();
    grpc_op ops[2];
    guint n_messages = 0;
    int cancelled = 0;

    g_mutex_lock(&self->lock);
    {
        Answer *answer = answer_for(self, method);

        if (answer->message) {
            message = g_bytes_ref(answer->message);
            n_messages = answer->n_messages;
            status = GRPC_STATUS_OK;
        }
    }
    g_mutex_unlock(&self->lock);

    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_RECV_MESSAGE;
    ops[1].data.recv_message.recv_message = &request;
    run_batch(self, call, ops, 2);
    g_clear_pointer(&request, grpc_byte_buffer_destroy);

    /* One slice for every message: each send takes a reference, not a copy. */
    if (message)
        slice = grpc_slice_from_copied_buffer(g_bytes_get_data(message, NULL),
                                              g_bytes_get_size(message));
    for (guint i = 0; i < n_messages; i++) {
        grpc_byte_buffer *buffer = grpc_raw_byte_buffer_create(&slice, 1);
        gboolean sent;

        memset(ops, 0, sizeof(ops));
        ops[0].op = GRPC_OP_SEND_MESSAGE;
        ops[0].data.send_message.send_message = buffer;
        sent = run_batch(self, call, ops, 1);
        grpc_byte_buffer_destroy(buffer);
        if (!sent)
            break;
        g_mutex_lock(&self->lock);
        answer_for(self, method)->n_sent++;
        g_mutex_unlock(&self->lock);
    }
    grpc_slice_unref(slice);

    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[0].data.send_status_from_server.status = status;
    ops[1].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[1].data.recv_close_on_server.cancelled = &cancelled;
    run_batch(self, call, ops, 2);

    g_mutex_lock(&self->lock);
    answer_for(self, method)->n_ended++;
    g_mutex_unlock(&self->lock);
}

static gpointer
serve_main(gpointer data)
{
    RawCriServer *self = data;

    for (;;) {
        grpc_call *call = NULL;
        grpc_call_details details;
        grpc_metadata_array metadata;
        grpc_event event;
        gboolean served = FALSE;

        grpc_call_details_init(&details);
        grpc_metadata_array_init(&metadata);
        if (grpc_server_request_call(self->server, &call, &details, &metadata, self->call_cq,
                                     self->cq, &self->request_tag) == GRPC_CALL_OK) {
            event = grpc_completion_queue_next(self->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                               NULL);
            /* Shutting down: the shutdown's tag may come before the failed request's. */
            while (event.type == GRPC_OP_COMPLETE && event.tag == &self->shutdown_tag) {
                self->shutdown_taken = TRUE;
                event = grpc_completion_queue_next(self->cq,
                                                   gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
            }
            g_assert(event.type == GRPC_OP_COMPLETE && event.tag == &self->request_tag);
            if (event.success) {
                serve_call(self, call, &details);
                grpc_call_unref(call);
                served = TRUE;
            }
        }
        grpc_call_details_destroy(&details);
        grpc_metadata_array_destroy(&metadata);
        /* A request that fails is the server shutting down. */
        if (!served)
            return NULL;
    }
}

RawCriServer *
raw_cri_server_new(const char *socket_path)
{
    RawCriServer *self = g_new0(RawCriServer, 1);
    g_autofree char *address = g_strconcat("unix:", socket_path, NULL);
    grpc_server_credentials *credentials;

    grpc_init();
    g_mutex_init(&self->lock);
    self->answers = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, answer_free);
    self->cq = grpc_completion_queue_create_for_next(NULL);
    self->call_cq = grpc_completion_queue_create_for_next(NULL);
    self->server = grpc_server_create(NULL, NULL);
    grpc_server_register_completion_queue(self->server, self->cq, NULL);
    (void)g_unlink(socket_path);
    credentials = grpc_insecure_server_credentials_create();
    if (!grpc_server_add_http2_port(self->server, address, credentials))
        g_error("raw CRI server: cannot listen on %s", address);
    grpc_server_credentials_release(credentials);
    grpc_server_start(self->server);
    self->thread = g_thread_new("raw-cri-server", serve_main, self);
    return self;
}

static void
drain_queue(grpc_completion_queue *cq)
{
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
}

void
raw_cri_server_free(RawCriServer *self)
{
    if (!self)
        return;

    grpc_server_shutdown_and_notify(self->server, self->cq, &self->shutdown_tag);
    grpc_server_cancel_all_calls(self->server);
    g_thread_join(self->thread);
    /* The thread has taken its failed request; what may be left is the shutdown's tag. */
    while (!self->shutdown_taken &&
           grpc_completion_queue_next(self->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).tag !=
               &self->shutdown_tag)
        ;
    grpc_server_destroy(self->server);
    drain_queue(self->cq);
    drain_queue(self->call_cq);
    g_hash_table_unref(self->answers);
    g_mutex_clear(&self->lock);
    g_free(self);
    grpc_shutdown();
}

void
raw_cri_server_set_answer(RawCriServer *self, const char *method, GBytes *message,
                          guint n_messages)
{
    Answer *answer;

    g_mutex_lock(&self->lock);
    answer = answer_for(self, method);
    g_clear_pointer(&answer->message, g_bytes_unref);
    answer->message = message ? g_bytes_ref(message) : NULL;
    answer->n_messages = n_messages;
    g_mutex_unlock(&self->lock);
}

guint
raw_cri_server_get_n_sent(RawCriServer *self, const char *method)
{
    guint n;

    g_mutex_lock(&self->lock);
    n = answer_for(self, method)->n_sent;
    g_mutex_unlock(&self->lock);
    return n;
}

guint
raw_cri_server_get_n_ended(RawCriServer *self, const char *method)
{
    guint n;

    g_mutex_lock(&self->lock);
    n = answer_for(self, method)->n_ended;
    g_mutex_unlock(&self->lock);
    return n;
}
