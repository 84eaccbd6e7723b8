/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A CRI runtime that answers with bytes the test chooses: for what a well-behaved runtime never
 * sends (a listing of a million empty items, a stream that does not end), which cri-sim, a
 * runtime with pods, cannot make.  On the gRPC C-core server, one call at a time.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct _RawCriServer RawCriServer;

/* Listens on @socket_path (removed first if it exists) and serves from a thread of its own.
 * Every method answers UNIMPLEMENTED until raw_cri_server_set_answer() says otherwise. */
RawCriServer *raw_cri_server_new(const char *socket_path);
/* Cancels the call in flight, stops and frees.  NULL-safe. */
void raw_cri_server_free(RawCriServer *server);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(RawCriServer, raw_cri_server_free)

/* @method (short name, e.g. "StreamContainers") answers @message, packed bytes of any content,
 * @n_messages times, then status OK, unless the client goes away first. */
void raw_cri_server_set_answer(RawCriServer *server, const char *method, GBytes *message,
                               guint n_messages);

/* Messages of @method's calls sent so far, and its calls that have ended. */
guint raw_cri_server_get_n_sent(RawCriServer *server, const char *method);
guint raw_cri_server_get_n_ended(RawCriServer *server, const char *method);

G_END_DECLS
