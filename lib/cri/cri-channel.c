/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CRI transport on the gRPC C core: the channel to a runtime.  Its endpoint is parsed and
 * checked here, and it is made lazy, with kubelet's connection parameters.  No thread polls
 * between calls: with gRPC 1.51 the core's timer threads run the reconnect backoff anyway, and a
 * connectivity watch polled by a helper thread did not bring a restarted runtime back any sooner
 * (measured: both within the 3 s maximum backoff).
 */
#include "pleg-config.h"

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>

#include <string.h>
#include <sys/un.h>

#include <pleg/pleg-util.h>

#include "cri-transport.h"
#include "pleg/pleg-plugin.h"

/* Spelled once, in the plugin ABI, so that the name plugins compare with cannot drift. */
GQuark
pleg_cri_error_quark(void)
{
    return g_quark_from_static_string(PLEG_PLUGIN_CRI_ERROR_DOMAIN);
}

/* kubelet's connection parameters (its remote runtime client); the C core calls its minimum connect timeout
 * "min_reconnect_backoff". */
#define CRI_BACKOFF_INITIAL_MS     100
#define CRI_BACKOFF_MAX_MS         3000
#define CRI_MIN_CONNECT_TIMEOUT_MS 5000

struct _CriChannel {
    gint ref_count;
    char *endpoint;
    char *shown_endpoint; /* escaped and cut (pleg_log_text()), for messages */
    char *target;
    grpc_channel *channel;
    CriArenaPool *arena_pool;
};

gboolean
cri_endpoint_parse(const char *endpoint, char **ret_target, GError **error)
{
    const char *path = NULL;
    g_autofree char *shown = pleg_log_text(endpoint ? endpoint : "", -1, 0);

    g_return_val_if_fail(ret_target != NULL, FALSE);

    if (endpoint) {
        if (g_str_has_prefix(endpoint, "unix://"))
            path = endpoint + strlen("unix://");
        else if (g_str_has_prefix(endpoint, "unix:"))
            path = endpoint + strlen("unix:");
        else
            path = endpoint;
    }

    if (!path || path[0] != '/' || path[1] == '\0') {
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INVALID_ARGUMENT,
                    "invalid CRI endpoint \"%s\": expected a unix socket, "
                    "unix:///path/to/socket or an absolute path",
                    shown);
        return FALSE;
    }

    /* The kernel's limit for a socket path; gRPC would only log it and fail every call. */
    if (strlen(path) >= sizeof(((struct sockaddr_un *)NULL)->sun_path)) {
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INVALID_ARGUMENT,
                    "invalid CRI endpoint \"%s\": a unix socket path has at most %zu bytes",
                    shown, sizeof(((struct sockaddr_un *)NULL)->sun_path) - 1);
        return FALSE;
    }
    /* gRPC reads the target as a URI: these would silently name another socket. */
    if (strpbrk(path, "?#%")) {
        g_set_error(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INVALID_ARGUMENT,
                    "invalid CRI endpoint \"%s\": '?', '#' and '%%' are not supported in a socket "
                    "path",
                    shown);
        return FALSE;
    }

    *ret_target = g_strconcat("unix:", path, NULL);
    return TRUE;
}

CriChannel *
cri_channel_new(const char *endpoint, GError **error)
{
    g_autofree char *target = NULL;
    grpc_channel_credentials *credentials;
    CriChannel *self;
    grpc_arg args[] = {
        {.type = GRPC_ARG_INTEGER,
         .key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         .value.integer = PLEG_CRI_MAX_RECEIVE_BYTES},
        {.type = GRPC_ARG_INTEGER,
         .key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH,
         .value.integer = PLEG_CRI_MAX_RECEIVE_BYTES},
        {.type = GRPC_ARG_INTEGER,
         .key = (char *)GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
         .value.integer = CRI_BACKOFF_INITIAL_MS},
        {.type = GRPC_ARG_INTEGER,
         .key = (char *)GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
         .value.integer = CRI_BACKOFF_MAX_MS},
        {.type = GRPC_ARG_INTEGER,
         .key = (char *)GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
         .value.integer = CRI_MIN_CONNECT_TIMEOUT_MS},
    };
    grpc_channel_args channel_args = {.num_args = G_N_ELEMENTS(args), .args = args};

    if (!cri_endpoint_parse(endpoint, &target, error))
        return NULL;

    grpc_init();

    self = g_new0(CriChannel, 1);
    self->ref_count = 1;
    self->endpoint = g_strdup(endpoint);
    self->shown_endpoint = pleg_log_text(endpoint, -1, 0);
    self->target = g_steal_pointer(&target);
    self->arena_pool = cri_arena_pool_new(CRI_ARENA_POOL_CAP_BYTES);

    credentials = grpc_insecure_credentials_create();
    self->channel = grpc_channel_create(self->target, credentials, &channel_args);
    grpc_channel_credentials_release(credentials);

    g_debug("%s: created CRI channel to %s", self->shown_endpoint, self->target);
    return self;
}

CriChannel *
cri_channel_ref(CriChannel *self)
{
    g_return_val_if_fail(self != NULL, NULL);
    g_atomic_int_inc(&self->ref_count);
    return self;
}

void
cri_channel_unref(CriChannel *self)
{
    if (!self || !g_atomic_int_dec_and_test(&self->ref_count))
        return;

    grpc_channel_destroy(self->channel);
    cri_arena_pool_free(self->arena_pool);
    g_free(self->endpoint);
    g_free(self->shown_endpoint);
    g_free(self->target);
    g_free(self);

    grpc_shutdown();
}

const char *
cri_channel_get_endpoint(CriChannel *self)
{
    g_return_val_if_fail(self != NULL, NULL);
    return self->endpoint;
}

CriArenaPool *
cri_channel_get_arena_pool(CriChannel *self)
{
    g_return_val_if_fail(self != NULL, NULL);
    return self->arena_pool;
}

const char *
cri_channel_get_shown_endpoint(CriChannel *self)
{
    return self->shown_endpoint;
}

grpc_call *
cri_channel_create_call(CriChannel *self, const char *method, grpc_completion_queue *cq,
                        gpr_timespec deadline)
{
    g_autofree char *path = g_strconcat("/" CRI_RUNTIME_SERVICE "/", method, NULL);
    grpc_slice method_slice = grpc_slice_from_copied_string(path);
    grpc_call *call;

    call = grpc_channel_create_call(self->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq, method_slice,
                                    NULL, deadline, NULL);
    grpc_slice_unref(method_slice);
    return call;
}
