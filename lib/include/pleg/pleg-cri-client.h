/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CRI client over the gRPC C core (service runtime.v1.RuntimeService).
 */
#pragma once

#include <gio/gio.h>
#include <pleg/pleg-metrics.h>
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

/**
 * pleg_cri_error_quark:
 *
 * Its string is the plugin ABI's %PLEG_PLUGIN_CRI_ERROR_DOMAIN, so that plugins, which cannot
 * link libpleg, compare domains by name.
 *
 * Thread safety: callable from any thread.
 *
 * Returns: the quark of %PLEG_CRI_ERROR.
 */
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

/**
 * PLEG_CRI_MAX_LISTING_BYTES:
 *
 * What one listing (ListPodSandbox or ListContainers, or its KEP-5825 stream, whatever the
 * number of messages) may bring, as received and decompressed: 256 MiB.  A 5,000-pod node
 * lists about 10 MiB, so this is over 20 times what a large node needs; it keeps a runtime
 * that streams without end from growing the relist past memory or the 4 GiB that the
 * listing's 32-bit text offsets hold.  A listing past it fails with
 * %PLEG_CRI_ERROR_RESOURCE_EXHAUSTED ("... the listing passed its limit of 268435456 bytes
 * (N bytes received)"), the stream cancelled, as any runtime error fails the relist.
 */
#define PLEG_CRI_MAX_LISTING_BYTES ((gsize)256 * 1024 * 1024)
/**
 * PLEG_CRI_MAX_LISTING_ITEMS:
 *
 * How many pod sandboxes or containers one listing may bring: 1,000,000, 200 times a
 * 5,000-pod node's sandboxes and thousands of times kubelet's 110 pods a node.  Past it the
 * listing fails as past %PLEG_CRI_MAX_LISTING_BYTES ("... items (N items received)") and no
 * further item is decoded: an item can be 2 bytes on the wire and costs far more decoded.
 */
#define PLEG_CRI_MAX_LISTING_ITEMS G_GUINT64_CONSTANT(1000000)

typedef struct _PlegCriClient PlegCriClient;

/**
 * pleg_cri_endpoint_check:
 * @endpoint: a CRI endpoint as pleg_cri_client_new() takes it.
 * @error: return location for a %PLEG_CRI_ERROR_INVALID_ARGUMENT naming @endpoint (escaped)
 *   when it is not a unix socket endpoint with an absolute path.
 *
 * Checks @endpoint as pleg_cri_client_new() would, without gRPC: for a configuration that is
 * read before it is used, or whose value is overridden (kubelet's
 * `--container-runtime-endpoint` and its config file's `containerRuntimeEndpoint`).
 *
 * Thread safety: callable from any thread.
 *
 * Returns: whether pleg_cri_client_new() would accept @endpoint.
 */
gboolean pleg_cri_endpoint_check(const char *endpoint, GError **error);

/**
 * pleg_cri_client_new:
 * @endpoint: CRI endpoint: `unix:///path`, `unix:/path` or a bare absolute path.
 * @timeout_usec: per-call deadline in microseconds (kubelet's --runtime-request-timeout);
 *   0 selects %PLEG_CRI_DEFAULT_TIMEOUT_USEC.
 * @error: return location for a %PLEG_CRI_ERROR_INVALID_ARGUMENT when the endpoint is not a
 *   unix socket endpoint.
 *
 * Creates the channel lazily: no connection is made here, so a runtime that is not up yet is
 * not an error.  The channel reconnects with kubelet's backoff (base 100 ms, max 3 s, minimum
 * connect timeout 5 s) and accepts answers up to %PLEG_CRI_MAX_RECEIVE_BYTES, and listings up to
 * %PLEG_CRI_MAX_LISTING_BYTES and %PLEG_CRI_MAX_LISTING_ITEMS.
 *
 * Thread safety: callable from any thread; every call on the client may be made concurrently
 *   from any thread unless its documentation says otherwise.  Calls block the calling thread
 *   until the runtime answers, @timeout_usec passes or their #GCancellable is cancelled.
 *
 * Returns: (transfer full): the client, or %NULL with @error set.
 */
PlegCriClient *pleg_cri_client_new(const char *endpoint, gint64 timeout_usec, GError **error);

/**
 * pleg_cri_client_ref:
 * @client: a client.
 *
 * Thread safety: callable from any thread.
 *
 * Returns: (transfer full): @client.
 */
PlegCriClient *pleg_cri_client_ref(PlegCriClient *client);

/**
 * pleg_cri_client_unref:
 * @client: (nullable) (transfer full): a client; %NULL is ignored.
 *
 * Drops a reference; the last one closes the channel and runs the notice function's destroy
 * notify.
 *
 * Thread safety: callable from any thread; the last unref not while a call on the client is in
 *   progress (a #PlegRuntime from pleg_cri_client_as_runtime() holds its own reference).
 */
void pleg_cri_client_unref(PlegCriClient *client);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegCriClient, pleg_cri_client_unref)

/**
 * pleg_cri_client_get_endpoint:
 * @client: a client.
 *
 * Thread safety: callable from any thread.
 *
 * Returns: (transfer none): the endpoint as given to pleg_cri_client_new(), valid as long as
 *   @client.
 */
const char *pleg_cri_client_get_endpoint(PlegCriClient *client);

/**
 * pleg_cri_client_version:
 * @ret_runtime_name: (out) (transfer full) (optional): `VersionResponse.runtime_name`.
 * @ret_runtime_version: (out) (transfer full) (optional): `runtime_version`.
 * @cancellable: (nullable): cancels the call (%PLEG_CRI_ERROR_CANCELLED).
 * @error: %PLEG_CRI_ERROR with the call's gRPC status.
 *
 * CRI Version (`RuntimeService.Version`, asking for API version 0.1.0 as kubelet does), under
 * the client's deadline.  Untouched outputs on failure.
 *
 * Thread safety: callable from any thread; blocks until the answer, the deadline or the
 *   cancellation.
 *
 * Returns: %TRUE when the runtime answered.
 */
gboolean pleg_cri_client_version(PlegCriClient *client, char **ret_runtime_name,
                                 char **ret_runtime_version, GCancellable *cancellable,
                                 GError **error);

/**
 * pleg_cri_client_set_metrics:
 * @client: a client that has not made a call yet.
 * @registry: where the metrics are registered; the client keeps a reference.
 *
 * Counts the client's CRI operations on @registry under kubelet's names and label
 * (kubelet's pkg/kubelet/metrics, recorded as its instrumented runtime service does):
 *
 * - `kubelet_runtime_operations_total{operation_type}`, a counter of operations;
 * - `kubelet_runtime_operations_errors_total{operation_type}`, those that failed;
 * - `kubelet_runtime_operations_duration_seconds{operation_type}`, a histogram of their
 *   durations with kubelet's buckets (0.005 s times 2.5 to the power 0 to 13, up to 745 s).
 *
 * `operation_type` is kubelet's: `version`, `list_podsandbox`, `list_containers` (a listing
 * is one operation, through the KEP-5825 stream or the unary RPC or both when the stream is
 * answered UNIMPLEMENTED, as kubelet counts its ListPodSandbox and ListContainers),
 * `podsandbox_status`, `container_status` (each status call, however many are in flight), and
 * `get_container_events`, the CRI event stream of pleg_host's `container_events_open`
 * service: counted when the stream ends, its duration the stream's life, an error when it ends
 * with one, unless its owner cancelled it.  Every operation that fails counts as an error,
 * NOT_FOUND for a container removed since it was listed included, as kubelet counts them; one
 * its caller cancelled (%PLEG_CRI_ERROR_CANCELLED, as pleg_generic_stop() does) counts, but
 * not as an error.  Both counters start at 0 for every operation type, so that their first
 * increase shows in `rate()`.
 *
 * Also registers `pleg_cri_listing_over_limit_total{operation,limit}` (operation:
 * `list_podsandbox` or `list_containers`; limit: `bytes` or `items`): listings stopped at
 * %PLEG_CRI_MAX_LISTING_BYTES or %PLEG_CRI_MAX_LISTING_ITEMS.
 *
 * A #PlegHost calls this on its client with its registry; a program that makes its own client
 * calls it once, before the first call.  A client without it records nothing, at no cost.
 *
 * Thread safety: callable from any thread, once, before any call on @client.
 */
void pleg_cri_client_set_metrics(PlegCriClient *client, PlegMetricsRegistry *registry);

/**
 * PlegCriListPath:
 * @PLEG_CRI_LIST_UNARY: ListPodSandbox and ListContainers, one answer each (the gate is off,
 *   or no listing has gone through the streams yet).
 * @PLEG_CRI_LIST_STREAMING: StreamPodSandboxes and StreamContainers (KEP-5825): the listing in
 *   as many messages as the runtime cuts it into, so no answer is bounded by
 *   %PLEG_CRI_MAX_RECEIVE_BYTES (each message is, and the whole listing is bounded by
 *   %PLEG_CRI_MAX_LISTING_BYTES and %PLEG_CRI_MAX_LISTING_ITEMS).
 * @PLEG_CRI_LIST_UNARY_FALLBACK: the runtime answered the streams UNIMPLEMENTED; listings are
 *   unary until the next probe of the streams.
 *
 * How the client lists, for a #PlegRuntime's listings (global and targeted relists alike).
 */
typedef enum {
    PLEG_CRI_LIST_UNARY,
    PLEG_CRI_LIST_STREAMING,
    PLEG_CRI_LIST_UNARY_FALLBACK,
} PlegCriListPath;

/**
 * pleg_cri_list_path_to_string:
 * @path: a path.
 *
 * Thread safety: callable from any thread.
 *
 * Returns: (transfer none): "unary", "streaming" or "unary-fallback"; "unknown" outside the
 *   enum.
 */
const char *pleg_cri_list_path_to_string(PlegCriListPath path);

/** PLEG_CRI_LIST_PROBE_INTERVAL_USEC: how long a fallback lasts before the streams are tried
 * again, 5 minutes: a runtime upgraded in place is picked up without a restart. */
#define PLEG_CRI_LIST_PROBE_INTERVAL_USEC (5 * 60 * G_USEC_PER_SEC)

/**
 * pleg_cri_client_set_list_streaming:
 * @enabled: the `CRIListStreaming` feature gate (KEP-5825; alpha, off by default in kubelet).
 * @probe_interval_usec: how long an UNIMPLEMENTED answer keeps listings unary before the
 *   streams are tried again; 0 selects %PLEG_CRI_LIST_PROBE_INTERVAL_USEC.
 *
 * With @enabled, every listing goes through StreamPodSandboxes / StreamContainers with the same
 * filter as the unary RPC would carry.  Each message is decoded as it arrives; the whole stream
 * is under the client's call deadline; a failure mid-stream fails the listing as a unary error
 * does, and what had arrived is dropped.  A runtime that answers UNIMPLEMENTED (kubelet's
 * fallback rule) is asked the unary RPC in the same listing and in later ones, and the streams
 * are tried again after @probe_interval_usec.  Resets the path to %PLEG_CRI_LIST_UNARY.
 *
 * Thread safety: callable from any thread; listings in progress finish on the path they took.
 */
void pleg_cri_client_set_list_streaming(PlegCriClient *client, gboolean enabled,
                                        gint64 probe_interval_usec);

/**
 * pleg_cri_client_get_list_path:
 *
 * Returns: the path the last listing took, as far as the streams are concerned: streaming once
 *   a stream has answered, unary-fallback after UNIMPLEMENTED.
 *
 * Thread safety: callable from any thread.
 */
PlegCriListPath pleg_cri_client_get_list_path(PlegCriClient *client);

/**
 * PlegCriListNotice:
 * @PLEG_CRI_LIST_NOTICE_STREAMING: the streams answered; listings go through them (also after a
 *   fallback, once a probe succeeds).
 * @PLEG_CRI_LIST_NOTICE_FALLBACK: the runtime answered the streams UNIMPLEMENTED (@reason);
 *   listings are unary.  Not repeated while later probes fail the same way.
 * @PLEG_CRI_LIST_NOTICE_TOO_LARGE: a whole unary listing failed with RESOURCE_EXHAUSTED
 *   (@reason: "Received message larger than max"): the node's listing no longer fits the
 *   %PLEG_CRI_MAX_RECEIVE_BYTES a unary answer may carry.  Not repeated until that listing fits
 *   again.  The listing itself fails as before and is retried by the next relist.  A listing
 *   stopped at %PLEG_CRI_MAX_LISTING_ITEMS or %PLEG_CRI_MAX_LISTING_BYTES, which streaming would
 *   not lift, gives no notice.
 *
 * What a #PlegCriListNoticeFunc is told.
 */
typedef enum {
    PLEG_CRI_LIST_NOTICE_STREAMING,
    PLEG_CRI_LIST_NOTICE_FALLBACK,
    PLEG_CRI_LIST_NOTICE_TOO_LARGE,
} PlegCriListNotice;

/**
 * PlegCriListNoticeFunc:
 * @reason: (nullable): the runtime's answer behind the notice; %NULL for
 *   %PLEG_CRI_LIST_NOTICE_STREAMING.
 *
 * Called on the thread that made the listing, with no lock of the client held: it must not
 * block, and may call pleg_cri_client_get_list_path().
 */
typedef void (*PlegCriListNoticeFunc)(PlegCriClient *client, PlegCriListNotice notice,
                                      const GError *reason, gpointer user_data);

/**
 * pleg_cri_client_set_list_notice_func:
 * @func: (nullable): called on each change of listing path and on a listing that outgrew unary
 *   answers; %NULL removes it.
 * @destroy: (nullable): frees @user_data when the function is replaced or the client freed.
 *
 * Lets a host say what the library does not log above debug: plegd logs each notice once.
 *
 * Thread safety: call before the client lists (before the #PlegRuntime is handed to a PLEG);
 *   not safe against listings in progress.
 */
void pleg_cri_client_set_list_notice_func(PlegCriClient *client, PlegCriListNoticeFunc func,
                                          gpointer user_data, GDestroyNotify destroy);

/**
 * pleg_cri_client_as_runtime:
 * @client: a client.
 *
 * The four reads the Generic PLEG needs, as CRI calls: ListPodSandbox and ListContainers (or
 * the KEP-5825 streams), PodSandboxStatus and ContainerStatus.
 *
 * Thread safety: callable from any thread; the runtime's reads are callable concurrently from
 *   any thread, as the client's calls are.
 *
 * Returns: (transfer full): a #PlegRuntime that forwards to @client and holds a reference on
 *   it.
 */
PlegRuntime *pleg_cri_client_as_runtime(PlegCriClient *client);

G_END_DECLS
