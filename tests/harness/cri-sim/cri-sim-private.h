/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cri-sim's parts, as they see one another (not installed).
 *
 *   cri-sim.c           the hub: cri_sim_new() and cri_sim_free() wire the parts together
 *   cri-sim-model.c     the runtime model: pods, containers, their labels and state changes
 *   cri-sim-messages.c  CRI messages built from the model: statuses, listings, events (pure)
 *   cri-sim-server.c    the gRPC server: its thread, the completion queue, every call's batches
 *   cri-sim-methods.c   the RuntimeService methods: what a call gets, the method table, list streams
 *   cri-sim-events.c    the GetContainerEvents stream: subscribers, natural and emitted events
 *   cri-sim-faults.c    fault injection: delays, scripted failures, going away and coming back
 *   cri-sim-script.c    the command language on top of the public API (cri-sim.h only)
 *
 * Everything here runs with CriSim.lock held unless it says otherwise; the public functions of
 * each part take the lock themselves.
 */
#pragma once

#include <grpc/grpc.h>

#include "api.pb-c.h"
#include "cri-sim.h"

#define SERVICE           "runtime.v1.RuntimeService"
#define EVENTS_METHOD     "GetContainerEvents"
#define STREAM_SANDBOXES  "StreamPodSandboxes"
#define STREAM_CONTAINERS "StreamContainers"
#define LABEL_POD_UID     "io.kubernetes.pod.uid"
#define LABEL_POD_NAME    "io.kubernetes.pod.name"
#define LABEL_POD_NS      "io.kubernetes.pod.namespace"
#define LABEL_CONTAINER   "io.kubernetes.container.name"
#define GOING_AWAY        "cri-sim: runtime going away"

/* ---- the model ---- */

typedef struct _Pod Pod;

typedef struct {
    char *id;
    Pod *pod;
    char *name;
    char *image;
    guint32 attempt;
    CriSimContainerState state;
    gint64 created_at;
    gint64 started_at;
    gint64 finished_at;
    gint32 exit_code;
    char *reason;
    GPtrArray *labels; /* key, value, key, value... */
    guint padding_bytes; /* one annotation of this many bytes, for listings of a large size */
} Container;

struct _Pod {
    char *id;
    char *uid;
    char *name;
    char *namespace_;
    guint32 attempt;
    gboolean not_ready;
    gint64 created_at;
    char *ip;
    char *additional_ip;
    GPtrArray *labels;
    GPtrArray *containers; /* Container *, not owned, creation order */
};

/* ---- calls ---- */

typedef enum { OP_REQUEST, OP_RECV, OP_CLOSE, OP_SEND, OP_STATUS, N_OPS, OP_SHUTDOWN } OpKind;

typedef struct _Call Call;

typedef struct {
    Call *call;
    OpKind kind;
} Op;

struct _Call {
    CriSim *sim;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array metadata;
    Op ops[N_OPS];
    guint n_pending;
    char *method;
    grpc_byte_buffer *request;
    int cancelled;
    gboolean closed;
    gboolean metadata_sent;
    gboolean status_sent;
    gboolean sending;
    gboolean sending_message;
    gboolean is_stream; /* GetContainerEvents or a list stream */
    gboolean is_events; /* GetContainerEvents */
    gboolean ending;
    grpc_status_code end_status;
    char *end_details;
    /* Decided on arrival: a scripted failure, answered when due. */
    grpc_status_code fail_status;
    char *fail_details;
    gint64 due; /* monotonic usec; 0: no timer */
    GQueue outbox; /* GBytes, packed events */
    grpc_byte_buffer *send_buffer;
    grpc_slice status_details;
};

/* A method's scripted behaviour (cri-sim-faults.c). */
typedef struct {
    int delay_ms;
    int fail_code;
    int fail_times;
} Rule;

typedef enum { SERVER_SERVING, SERVER_STOPPING, SERVER_AWAY, SERVER_STOPPED } ServerState;

struct _CriSim {
    char *socket_path;
    char *address;
    grpc_completion_queue *cq;
    GThread *thread;

    GMutex lock; /* everything below */
    GCond cond;
    grpc_server *server;
    ServerState state;
    gboolean shutdown_seen;
    gint64 come_back_at; /* monotonic usec; 0: on request */
    guint n_live;        /* Call objects of the current server */
    guint n_stream_calls;

    GPtrArray *pods;       /* Pod *, owned, creation order */
    GPtrArray *containers; /* Container *, owned, creation order */
    GHashTable *pods_by_id;
    GHashTable *pods_by_uid; /* the newest sandbox of each uid */
    GHashTable *containers_by_id;
    guint next_id;
    guint next_bulk;
    char *sandbox_prefix;
    char *container_prefix;
    char *runtime_name;
    char *runtime_version;

    GHashTable *n_calls; /* method -> GUINT_TO_POINTER(count) */
    guint n_calls_total;
    guint n_streams;
    guint n_events_sent;
    GHashTable *last_requests;
    GHashTable *rules; /* method or "*" -> Rule */

    GPtrArray *calls;       /* Call *, every call that arrived and is not freed */
    GPtrArray *subscribers; /* Call *, streams that receive events */
    GQueue timers;          /* Call *, by due time */
    guint next_subscriber;
    gboolean auto_events;
    gboolean sandbox_events;
    gboolean deliver_one;
    gboolean events_unimplemented;
    gboolean list_streams_unimplemented;
    guint list_batch;          /* items a list stream message carries */
    int list_fail_after;       /* list streams fail after this many messages; -1: never */
    grpc_status_code list_fail_code;
    GArray *greeting; /* CriSimEvent with owned ids */
    gboolean greeting_end;
};

static inline gint64
sim_now_ns(void)
{
    return g_get_real_time() * 1000;
}

/* ---- cri-sim-model.c: state changes; each emits its natural events ---- */

G_GNUC_INTERNAL const char *sim_labels_get(GPtrArray *labels, const char *key);
G_GNUC_INTERNAL void sim_container_free(Container *container);
G_GNUC_INTERNAL void sim_pod_free(Pod *pod);
/* @prefix + the shared counter, skipping ids in use. */
G_GNUC_INTERNAL char *sim_generate_id(CriSim *self, const char *prefix);
G_GNUC_INTERNAL Pod *sim_pod_add(CriSim *self, const CriSimPodSpec *spec, GError **error);
/* @generated_id (transfer full, nullable) wins over spec->id. */
G_GNUC_INTERNAL Container *sim_container_add(CriSim *self, Pod *pod,
                                             const CriSimContainerSpec *spec, char *generated_id,
                                             GError **error);
G_GNUC_INTERNAL gboolean sim_container_start(CriSim *self, Container *container, GError **error);
G_GNUC_INTERNAL gboolean sim_container_exit(CriSim *self, Container *container, int exit_code,
                                            const char *reason, GError **error);
G_GNUC_INTERNAL void sim_container_remove(CriSim *self, Container *container);
G_GNUC_INTERNAL void sim_pod_stop(CriSim *self, Pod *pod);
G_GNUC_INTERNAL void sim_pod_remove(CriSim *self, Pod *pod);

/* ---- cri-sim-messages.c: built under the lock, pointing into the model ---- */

G_GNUC_INTERNAL GBytes *sim_pack(const ProtobufCMessage *message);
/* The pieces are allocated in @scratch (g_free each), which must outlive the message. */
G_GNUC_INTERNAL Runtime__V1__PodSandboxStatus *sim_build_sandbox_status(GPtrArray *scratch,
                                                                         Pod *pod);
G_GNUC_INTERNAL Runtime__V1__ContainerStatus *sim_build_container_status(GPtrArray *scratch,
                                                                          Container *container);
/* An event about @id; @pod (nullable) supplies the statuses, looked up from @id when NULL. */
G_GNUC_INTERNAL GBytes *sim_build_event(CriSim *self, CriSimEventType type, const char *id,
                                        Pod *pod, CriSimEventFlags flags, gint64 created_at);
G_GNUC_INTERNAL Runtime__V1__PodSandbox **
sim_collect_sandboxes(CriSim *self, const Runtime__V1__PodSandboxFilter *filter,
                      GPtrArray *scratch, size_t *ret_n);
G_GNUC_INTERNAL Runtime__V1__Container **
sim_collect_containers(CriSim *self, const Runtime__V1__ContainerFilter *filter,
                       GPtrArray *scratch, size_t *ret_n);

/* ---- cri-sim-server.c: the calls' batches, and the server's life ---- */

G_GNUC_INTERNAL void sim_stream_kick(Call *call);
G_GNUC_INTERNAL void sim_stream_end(CriSim *self, Call *call, grpc_status_code status,
                                    const char *details);
G_GNUC_INTERNAL void sim_call_finish(Call *call, grpc_status_code status, const char *details,
                                     GBytes *message);
G_GNUC_INTERNAL void sim_timer_add(CriSim *self, Call *call, int delay_ms);
G_GNUC_INTERNAL gboolean sim_server_start(CriSim *self, GError **error);
/* Waits with the lock released meanwhile. */
G_GNUC_INTERNAL void sim_server_stop(CriSim *self);
/* The server thread; takes the lock itself. */
G_GNUC_INTERNAL gpointer sim_server_thread_main(gpointer data);

/* ---- cri-sim-methods.c ---- */

/* The request message of @call is in (server thread). */
G_GNUC_INTERNAL void sim_call_received(CriSim *self, Call *call);
/* @call is due: a subscription, a list stream or its answer. */
G_GNUC_INTERNAL void sim_call_start(CriSim *self, Call *call);

/* ---- cri-sim-events.c ---- */

G_GNUC_INTERNAL void sim_natural_event(CriSim *self, CriSimEventType type, const char *id,
                                       Pod *pod);
G_GNUC_INTERNAL void sim_sandbox_event(CriSim *self, CriSimEventType type, Pod *pod);
G_GNUC_INTERNAL void sim_subscribe(CriSim *self, Call *call);
G_GNUC_INTERNAL void sim_remove_subscriber(CriSim *self, Call *call);
G_GNUC_INTERNAL void sim_greeting_clear(CriSim *self);

/* ---- cri-sim-faults.c ---- */

G_GNUC_INTERNAL int sim_rule_delay(CriSim *self, const char *method);
/* Consumes one scripted failure of @method: its gRPC status code, 0 for none. */
G_GNUC_INTERNAL int sim_rule_take_failure(CriSim *self, const char *method);
