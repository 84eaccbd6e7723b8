/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CRI client over the gRPC C core (service runtime.v1.RuntimeService).
 */
#pragma once

#include <gio/gio.h>
#include <pleg/pleg-runtime.h>

G_BEGIN_DECLS

/**
 * PLEG_CRI_ERROR:
 *
 * Error domain of the CRI client.  The code is the gRPC status code of the failed call
 * (#PlegCriError), the message names the endpoint and the method and carries the gRPC status
 * message, e.g. "unix:///run/containerd/containerd.sock: ListContainers: connection refused".
 */
#define PLEG_CRI_ERROR (pleg_cri_error_quark())
GQuark pleg_cri_error_quark(void);

/**
 * PlegCriError:
 *
 * gRPC status codes, numbered as gRPC numbers them.
 */
typedef enum {
    PLEG_CRI_ERROR_CANCELLED = 1,
    PLEG_CRI_ERROR_UNKNOWN = 2,
    PLEG_CRI_ERROR_INVALID_ARGUMENT = 3,
    PLEG_CRI_ERROR_DEADLINE_EXCEEDED = 4,
    PLEG_CRI_ERROR_NOT_FOUND = 5,
    PLEG_CRI_ERROR_ALREADY_EXISTS = 6,
    PLEG_CRI_ERROR_PERMISSION_DENIED = 7,
    PLEG_CRI_ERROR_RESOURCE_EXHAUSTED = 8,
    PLEG_CRI_ERROR_FAILED_PRECONDITION = 9,
    PLEG_CRI_ERROR_ABORTED = 10,
    PLEG_CRI_ERROR_OUT_OF_RANGE = 11,
    PLEG_CRI_ERROR_UNIMPLEMENTED = 12,
    PLEG_CRI_ERROR_INTERNAL = 13,
    PLEG_CRI_ERROR_UNAVAILABLE = 14,
    PLEG_CRI_ERROR_DATA_LOSS = 15,
    PLEG_CRI_ERROR_UNAUTHENTICATED = 16,
} PlegCriError;

/** PLEG_CRI_DEFAULT_TIMEOUT_USEC: kubelet's default --runtime-request-timeout, 2 minutes. */
#define PLEG_CRI_DEFAULT_TIMEOUT_USEC (2 * 60 * G_USEC_PER_SEC)
/** PLEG_CRI_MAX_RECEIVE_BYTES: kubelet's max gRPC message size, 16 MiB. */
#define PLEG_CRI_MAX_RECEIVE_BYTES (16 * 1024 * 1024)

typedef struct _PlegCriClient PlegCriClient;

/**
 * pleg_cri_client_new:
 * @endpoint: CRI endpoint: `unix:///path`, `unix:/path` or a bare absolute path.
 * @timeout_usec: per-call deadline in microseconds (kubelet's --runtime-request-timeout);
 *   0 selects %PLEG_CRI_DEFAULT_TIMEOUT_USEC.
 * @error: return location for a #G_IO_ERROR_INVALID_ARGUMENT when the endpoint is not a
 *   unix socket endpoint.
 *
 * Creates the channel lazily: no connection is made here, so a runtime that is not up yet is
 * not an error.  The channel reconnects with kubelet's backoff (base 100 ms, max 3 s, minimum
 * connect timeout 5 s) and accepts answers up to %PLEG_CRI_MAX_RECEIVE_BYTES.
 *
 * Thread safety: every call below may be made concurrently from any thread.
 *
 * Returns: (transfer full): the client, or %NULL with @error set.
 */
PlegCriClient *pleg_cri_client_new(const char *endpoint, gint64 timeout_usec, GError **error);
PlegCriClient *pleg_cri_client_ref(PlegCriClient *client);
void pleg_cri_client_unref(PlegCriClient *client);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegCriClient, pleg_cri_client_unref)

/**
 * pleg_cri_client_get_endpoint:
 *
 * Returns: (transfer none): the endpoint as given to pleg_cri_client_new().
 */
const char *pleg_cri_client_get_endpoint(PlegCriClient *client);

/**
 * pleg_cri_client_version:
 * @ret_runtime_name: (out) (transfer full) (optional): `VersionResponse.runtime_name`.
 * @ret_runtime_version: (out) (transfer full) (optional): `runtime_version`.
 *
 * CRI Version.  Untouched outputs on failure.
 */
gboolean pleg_cri_client_version(PlegCriClient *client, char **ret_runtime_name,
                                 char **ret_runtime_version, GCancellable *cancellable,
                                 GError **error);

/**
 * pleg_cri_client_as_runtime:
 *
 * Returns: (transfer full): a #PlegRuntime that forwards to @client and holds a reference on
 * it.
 */
PlegRuntime *pleg_cri_client_as_runtime(PlegCriClient *client);

G_END_DECLS
