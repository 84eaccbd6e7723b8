/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cri-sim: a scriptable fake CRI runtime over real gRPC (the C-core server on a unix socket).
 * Installed in libpleg-harness (`#include <pleg/harness/cri-sim.h>`, pkg-config libpleg-harness)
 * with the cri-sim binary; doc/cri-sim.md (installed with libpleg's documents) is the guide, and
 * the one place that describes the command language.
 *
 * It serves the RuntimeService subset a PLEG needs over in-memory pod sandboxes and containers:
 * Version, Status, RunPodSandbox, StopPodSandbox, RemovePodSandbox, PodSandboxStatus,
 * ListPodSandbox (filters: id, state, label selector), CreateContainer, StartContainer,
 * StopContainer, RemoveContainer, ListContainers (filters: id, pod_sandbox_id, state, label
 * selector), ContainerStatus, the server stream GetContainerEvents and the list streams of
 * KEP-5825, StreamPodSandboxes and StreamContainers (the same filters; the listing in messages of
 * 5,000 items, as containerd sends them).  Any other method is answered UNIMPLEMENTED.
 *
 * Events: every state change (through the C API, a command or an RPC) emits the natural container
 * event (CREATED, STARTED, STOPPED, DELETED) carrying the pod sandbox status (with metadata) and
 * the statuses of the pod's containers, to every GetContainerEvents subscriber (or to one of them
 * in turn, see cri_sim_set_deliver_one()).  Sandboxes emit no events unless
 * cri_sim_set_sandbox_events() turns them on (containerd does send them).  Anything else is
 * emitted by hand with cri_sim_emit().
 *
 * Threads: one server thread polls the completion queue and answers calls; there are no
 * callbacks.  Every function here but cri_sim_free() is thread-safe and may be called from any
 * thread; an emitted event is handed to gRPC from the calling thread at once.  Functions that
 * take a pod take its uid; a uid names the newest sandbox with it.
 *
 * Ids: the binary and scripts reach pods by uid ("pod u1" is sandbox "sb-u1"); sandboxes
 * and containers made by RPC get ids from a counter (cri_sim_set_id_prefixes()).
 *
 * Errors: functions that can fail take a GError (domain %CRI_SIM_ERROR) naming the reason, and
 * return %FALSE (or %NULL) with it set; nothing is changed then.
 *
 * Times: "_ns" values are nanoseconds since the Unix epoch, as the CRI carries them; "_ms" values
 * are milliseconds of the monotonic clock.
 *
 * The same behaviours are reachable as text commands: cri_sim_run_command(), cri_sim_run_script()
 * and the cri-sim binary (`cri-sim --socket PATH [--script FILE]`), whose `--help` lists them
 * (cri_sim_command_help()).
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/**
 * CRI_SIM_ERROR:
 *
 * The error domain of cri-sim; codes are #CriSimError.
 */
#define CRI_SIM_ERROR (cri_sim_error_quark())
/**
 * cri_sim_error_quark:
 *
 * Returns: the #GQuark of %CRI_SIM_ERROR.  Thread safety: callable from any thread.
 */
GQuark cri_sim_error_quark(void);

/**
 * CriSimError:
 * @CRI_SIM_ERROR_FAILED: the server could not listen, and the like.
 * @CRI_SIM_ERROR_NOT_FOUND: no such pod or container.
 * @CRI_SIM_ERROR_EXISTS: the id or uid is taken.
 * @CRI_SIM_ERROR_STATE: not allowed in the current state (starting a container that is not
 *   CREATED, going away while not serving, a wait that timed out in a command).
 * @CRI_SIM_ERROR_SYNTAX: a command that does not parse, or a pod spec without a uid.
 *
 * Error codes of %CRI_SIM_ERROR.
 */
typedef enum {
    CRI_SIM_ERROR_FAILED,    /* server could not listen, and the like */
    CRI_SIM_ERROR_NOT_FOUND, /* no such pod or container */
    CRI_SIM_ERROR_EXISTS,    /* the id or uid is taken */
    CRI_SIM_ERROR_STATE,     /* not allowed in the current state */
    CRI_SIM_ERROR_SYNTAX,    /* a command that does not parse */
} CriSimError;

/**
 * CriSimContainerState:
 * @CRI_SIM_CONTAINER_CREATED: created, not started.
 * @CRI_SIM_CONTAINER_RUNNING: running.
 * @CRI_SIM_CONTAINER_EXITED: exited, with an exit code.
 * @CRI_SIM_CONTAINER_UNKNOWN: the runtime does not know.
 *
 * A container's state; the values are runtime.v1.ContainerState's.
 */
typedef enum {
    CRI_SIM_CONTAINER_CREATED = 0,
    CRI_SIM_CONTAINER_RUNNING = 1,
    CRI_SIM_CONTAINER_EXITED = 2,
    CRI_SIM_CONTAINER_UNKNOWN = 3,
} CriSimContainerState;

/**
 * CriSimEventType:
 * @CRI_SIM_EVENT_CREATED: CONTAINER_CREATED_EVENT.
 * @CRI_SIM_EVENT_STARTED: CONTAINER_STARTED_EVENT.
 * @CRI_SIM_EVENT_STOPPED: CONTAINER_STOPPED_EVENT.
 * @CRI_SIM_EVENT_DELETED: CONTAINER_DELETED_EVENT.
 *
 * A container event's type; the values are runtime.v1.ContainerEventType's.
 */
typedef enum {
    CRI_SIM_EVENT_CREATED = 0,
    CRI_SIM_EVENT_STARTED = 1,
    CRI_SIM_EVENT_STOPPED = 2,
    CRI_SIM_EVENT_DELETED = 3,
} CriSimEventType;

/**
 * CriSimEventFlags:
 * @CRI_SIM_EVENT_FLAGS_NONE: a well-formed event.
 * @CRI_SIM_EVENT_NO_SANDBOX: no pod_sandbox_status.
 * @CRI_SIM_EVENT_NO_METADATA: a pod_sandbox_status without metadata.
 * @CRI_SIM_EVENT_EMPTY_UID: metadata.uid "".
 * @CRI_SIM_EVENT_UNKNOWN_ID: container_id "<id>-unknown", with the statuses of <id>'s pod.
 * @CRI_SIM_EVENT_NO_CONTAINERS: no containers_statuses.
 *
 * How cri_sim_emit() spoils an event, as broken or older runtimes send them.
 */
typedef enum {
    CRI_SIM_EVENT_FLAGS_NONE = 0,
    CRI_SIM_EVENT_NO_SANDBOX = 1 << 0,    /* no pod_sandbox_status */
    CRI_SIM_EVENT_NO_METADATA = 1 << 1,   /* pod_sandbox_status without metadata */
    CRI_SIM_EVENT_EMPTY_UID = 1 << 2,     /* metadata.uid "" */
    CRI_SIM_EVENT_UNKNOWN_ID = 1 << 3,    /* container_id "<id>-unknown", statuses of <id>'s pod */
    CRI_SIM_EVENT_NO_CONTAINERS = 1 << 4, /* no containers_statuses */
} CriSimEventFlags;

/**
 * CriSim:
 *
 * One fake runtime serving on one unix socket, with its pods, containers, event subscribers
 * and scripted faults.  Opaque.
 */
typedef struct _CriSim CriSim;

/**
 * cri_sim_new:
 * @socket_path: unix socket to listen on (a file system path, not a "unix:" URI); an existing
 *   file there is removed first.  Copied.
 * @error: return location for a #GError, or %NULL.
 *
 * Starts an empty runtime (no pods) serving from a thread of its own.  Takes a gRPC library
 * reference (grpc_init()); cri_sim_free() drops it.  A process that wants to be clean under
 * valgrind calls grpc_shutdown_blocking() after its last gRPC user is gone.
 *
 * Returns: (transfer full): the runtime, or %NULL with @error set (%CRI_SIM_ERROR_FAILED: the
 *   file could not be removed, or the server could not listen).  Thread safety: callable from
 *   any thread.
 */
CriSim *cri_sim_new(const char *socket_path, GError **error);
/**
 * cri_sim_free:
 * @sim: (nullable) (transfer full): the runtime.
 *
 * Ends every open stream with UNAVAILABLE (waiting up to half a second for the statuses to
 * leave), cancels every other call in flight, stops serving and the server thread, removes the
 * socket and frees.  NULL-safe.
 *
 * Thread safety: any one thread, once no other thread uses @sim any more.
 */
void cri_sim_free(CriSim *sim);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CriSim, cri_sim_free)

/**
 * cri_sim_get_socket_path:
 * @sim: the runtime.
 *
 * Returns: (transfer none): the path given to cri_sim_new(), valid until cri_sim_free().
 *   Thread safety: callable from any thread.
 */
const char *cri_sim_get_socket_path(CriSim *sim);

/**
 * cri_sim_set_version:
 * @sim: the runtime.
 * @runtime_name: Version's runtime_name (default "cri-sim"); copied.
 * @runtime_version: Version's runtime_version (default "0.1.0"); copied.
 *
 * What Version answers from now on.  Thread safety: callable from any thread.
 */
void cri_sim_set_version(CriSim *sim, const char *runtime_name, const char *runtime_version);
/**
 * cri_sim_set_id_prefixes:
 * @sim: the runtime.
 * @sandbox_prefix: prefix of the ids of sandboxes made by RunPodSandbox (default "sb-"); copied.
 * @container_prefix: prefix of the ids of containers made by CreateContainer or without an id
 *   (default "ctr-"); copied.
 *
 * Generated ids are a prefix and a counter shared by both; ids in use are skipped.  Thread
 * safety: callable from any thread.
 */
void cri_sim_set_id_prefixes(CriSim *sim, const char *sandbox_prefix,
                             const char *container_prefix);

/* ---- pods and containers ---- */

/**
 * CriSimPodSpec:
 * @id: the sandbox id; %NULL: "sb-<uid>".
 * @uid: the pod's uid (metadata.uid); required.
 * @name: metadata.name; %NULL: "pod-<uid>".
 * @namespace_: metadata.namespace; %NULL: "default".
 * @attempt: metadata.attempt.
 * @not_ready: SANDBOX_NOTREADY instead of SANDBOX_READY.
 * @ip: the network status's ip; %NULL: no network status.
 * @additional_ip: one additional ip (with @ip only); %NULL: none.
 * @labels: %NULL: kubelet's io.kubernetes.pod.{uid,name,namespace}; else key, value, ...,
 *   %NULL (an empty list for none).
 * @created_at_ns: created_at; 0: now.
 *
 * A pod sandbox for cri_sim_add_pod_full().  Every string is copied.
 */
typedef struct {
    const char *id;         /* NULL: "sb-<uid>" */
    const char *uid;        /* required */
    const char *name;       /* NULL: "pod-<uid>" */
    const char *namespace_; /* NULL: "default" */
    guint32 attempt;
    gboolean not_ready;
    const char *ip; /* NULL: no network status */
    const char *additional_ip;
    /* NULL: kubelet's io.kubernetes.pod.{uid,name,namespace}; else key, value, ..., NULL
     * (an empty list for none). */
    const char *const *labels;
    gint64 created_at_ns; /* 0: now */
} CriSimPodSpec;

/**
 * CriSimContainerSpec:
 * @id: the container id; %NULL: a generated id (cri_sim_set_id_prefixes()).
 * @pod_uid: the uid of its pod (the newest sandbox with it); required.
 * @name: metadata.name; %NULL: the id.
 * @image: image.image; %NULL: "docker.io/library/busybox:latest".
 * @attempt: metadata.attempt.
 * @state: its state.
 * @exit_code: the exit code, for %CRI_SIM_CONTAINER_EXITED.
 * @reason: the status's reason; %NULL: none.
 * @labels: %NULL: kubelet's io.kubernetes.pod.{uid,name,namespace} and
 *   io.kubernetes.container.name; else key, value, ..., %NULL (an empty list for none).
 * @created_at_ns: created_at; 0: now.
 * @started_at_ns: started_at when RUNNING or EXITED; 0: created_at.
 * @finished_at_ns: finished_at when EXITED; 0: now.
 *
 * A container for cri_sim_add_container_full().  Every string is copied.
 */
typedef struct {
    const char *id; /* NULL: a generated id */
    const char *pod_uid;
    const char *name;  /* NULL: the id */
    const char *image; /* NULL: "docker.io/library/busybox:latest" */
    guint32 attempt;
    CriSimContainerState state;
    gint32 exit_code;
    const char *reason; /* NULL: none */
    /* NULL: kubelet's io.kubernetes.pod.{uid,name,namespace} and io.kubernetes.container.name;
     * else key, value, ..., NULL (an empty list for none). */
    const char *const *labels;
    gint64 created_at_ns;  /* 0: now */
    gint64 started_at_ns;  /* 0: created_at when RUNNING or EXITED */
    gint64 finished_at_ns; /* 0: now when EXITED */
} CriSimContainerSpec;

/**
 * cri_sim_add_pod_full:
 * @sim: the runtime.
 * @spec: the sandbox; read during the call only.
 * @ret_id: (out) (optional) (transfer full): its sandbox id, to g_free().
 * @error: return location for a #GError, or %NULL.
 *
 * Adds a pod sandbox; emits nothing (sandbox events on: CREATED, and STARTED for a READY one).
 * A uid that has a sandbox already gets a second one, which the uid names from then on.
 *
 * Returns: %FALSE with @error set: %CRI_SIM_ERROR_SYNTAX without a uid, %CRI_SIM_ERROR_EXISTS
 *   when the id is taken (by a sandbox or a container).  Thread safety: callable from any thread.
 */
gboolean cri_sim_add_pod_full(CriSim *sim, const CriSimPodSpec *spec, char **ret_id,
                              GError **error);
/**
 * cri_sim_add_pod:
 * @sim: the runtime.
 * @uid: the pod's uid.
 * @name: (nullable): its name; %NULL: "pod-<uid>".
 * @error: return location for a #GError, or %NULL.
 *
 * The command "pod UID [NAME]": a READY pod "sb-UID" in namespace "default".
 *
 * Returns: %FALSE with @error set: %CRI_SIM_ERROR_EXISTS when the uid has a pod or the id is
 *   taken, %CRI_SIM_ERROR_SYNTAX for an empty uid.  Thread safety: callable from any thread.
 */
gboolean cri_sim_add_pod(CriSim *sim, const char *uid, const char *name, GError **error);
/**
 * cri_sim_add_container_full:
 * @sim: the runtime.
 * @spec: the container; read during the call only.
 * @ret_id: (out) (optional) (transfer full): its id, to g_free().
 * @error: return location for a #GError, or %NULL.
 *
 * Adds a container in any state; emits CREATED (and STARTED, STOPPED as the state implies).
 *
 * Returns: %FALSE with @error set: %CRI_SIM_ERROR_NOT_FOUND when no pod has the uid,
 *   %CRI_SIM_ERROR_EXISTS when the id is taken.  Thread safety: callable from any thread.
 */
gboolean cri_sim_add_container_full(CriSim *sim, const CriSimContainerSpec *spec, char **ret_id,
                                    GError **error);
/**
 * cri_sim_add_container:
 * @sim: the runtime.
 * @pod_uid: the uid of its pod.
 * @id: (nullable): its id; %NULL: a generated one.
 * @name: (nullable): its name; %NULL: the id.
 * @error: return location for a #GError, or %NULL.
 *
 * The command "container POD_UID CID [NAME]": a CREATED container; emits CREATED.
 *
 * Returns: %FALSE with @error set, as cri_sim_add_container_full().  Thread safety: callable
 *   from any thread.
 */
gboolean cri_sim_add_container(CriSim *sim, const char *pod_uid, const char *id, const char *name,
                               GError **error);
/**
 * cri_sim_start_container:
 * @sim: the runtime.
 * @id: the container.
 * @error: return location for a #GError, or %NULL.
 *
 * CREATED -> RUNNING, started_at now; emits STARTED.
 *
 * Returns: %FALSE with @error set: %CRI_SIM_ERROR_NOT_FOUND, or %CRI_SIM_ERROR_STATE when the
 *   container is not CREATED.  Thread safety: callable from any thread.
 */
gboolean cri_sim_start_container(CriSim *sim, const char *id, GError **error);
/**
 * cri_sim_exit_container:
 * @sim: the runtime.
 * @id: the container.
 * @exit_code: its exit code.
 * @reason: (nullable): the status's reason; %NULL: "Completed" for 0, else "Error".
 * @error: return location for a #GError, or %NULL.
 *
 * CREATED, RUNNING or UNKNOWN -> EXITED, finished_at now; emits STOPPED.
 *
 * Returns: %FALSE with @error set: %CRI_SIM_ERROR_NOT_FOUND, or %CRI_SIM_ERROR_STATE when it
 *   has exited already.  Thread safety: callable from any thread.
 */
gboolean cri_sim_exit_container(CriSim *sim, const char *id, int exit_code, const char *reason,
                                GError **error);
/**
 * cri_sim_remove_container:
 * @sim: the runtime.
 * @id: the container.
 * @error: return location for a #GError, or %NULL.
 *
 * Removes a container in any state; emits DELETED (with its pod's remaining containers).
 *
 * Returns: %FALSE with %CRI_SIM_ERROR_NOT_FOUND.  Thread safety: callable from any thread.
 */
gboolean cri_sim_remove_container(CriSim *sim, const char *id, GError **error);
/**
 * cri_sim_stop_pod:
 * @sim: the runtime.
 * @pod_uid: the pod.
 * @error: return location for a #GError, or %NULL.
 *
 * RUNNING containers exit 137 with reason "Error" (STOPPED each), a READY sandbox becomes
 * NOTREADY (sandbox events on: STOPPED); CREATED containers are left as they are.
 *
 * Returns: %FALSE with %CRI_SIM_ERROR_NOT_FOUND.  Thread safety: callable from any thread.
 */
gboolean cri_sim_stop_pod(CriSim *sim, const char *pod_uid, GError **error);
/**
 * cri_sim_remove_pod:
 * @sim: the runtime.
 * @pod_uid: the pod.
 * @error: return location for a #GError, or %NULL.
 *
 * Stops the pod, then removes its containers (DELETED each, newest first) and the sandbox
 * (sandbox events on: DELETED).  An older sandbox with the same uid becomes the one it names.
 *
 * Returns: %FALSE with %CRI_SIM_ERROR_NOT_FOUND.  Thread safety: callable from any thread.
 */
gboolean cri_sim_remove_pod(CriSim *sim, const char *pod_uid, GError **error);
/**
 * cri_sim_set_container_label:
 * @sim: the runtime.
 * @id: the container.
 * @key: the label's key.
 * @value: (nullable): its value; %NULL removes the label.
 * @error: return location for a #GError, or %NULL.
 *
 * Sets or removes a label of a container; emits nothing.
 *
 * Returns: %FALSE with %CRI_SIM_ERROR_NOT_FOUND.  Thread safety: callable from any thread.
 */
gboolean cri_sim_set_container_label(CriSim *sim, const char *id, const char *key,
                                     const char *value, GError **error);
/**
 * cri_sim_bulk:
 * @sim: the runtime.
 * @n_pods: pods to add.
 * @containers_per_pod: RUNNING containers each.
 *
 * Adds @n_pods READY pods "bulk-K" (K counts on across calls; sandbox ids "sb-bulk-N") with
 * @containers_per_pod RUNNING containers "bulk-K-I" each, emitting nothing.  For benchmarks:
 * 1000 pods take milliseconds.  Thread safety: callable from any thread.
 */
void cri_sim_bulk(CriSim *sim, guint n_pods, guint containers_per_pod);
/**
 * cri_sim_bulk_full:
 * @sim: the runtime.
 * @n_pods: pods to add.
 * @containers_per_pod: RUNNING containers each.
 * @annotation_bytes: size in bytes of one annotation every container is listed with (by
 *   ListContainers and StreamContainers, not in statuses); 0 for none.
 *
 * cri_sim_bulk(), with listings of a size: 20,000 containers with 1,100 bytes each make a
 * ListContainers answer of about 28 MiB, past the 16 MiB a CRI client accepts.  Thread safety:
 * callable from any thread.
 */
void cri_sim_bulk_full(CriSim *sim, guint n_pods, guint containers_per_pod,
                       guint annotation_bytes);

/**
 * cri_sim_get_sandbox_id:
 * @sim: the runtime.
 * @pod_uid: the pod.
 *
 * Returns: (transfer full) (nullable): the id of the newest sandbox with @pod_uid, to g_free();
 *   %NULL when there is none.  Thread safety: callable from any thread.
 */
char *cri_sim_get_sandbox_id(CriSim *sim, const char *pod_uid);
/**
 * cri_sim_get_container_state:
 * @sim: the runtime.
 * @id: the container.
 * @ret_state: (out) (optional): its state; untouched when it does not exist.
 *
 * Returns: whether the container exists.  Thread safety: callable from any thread.
 */
gboolean cri_sim_get_container_state(CriSim *sim, const char *id, CriSimContainerState *ret_state);
/**
 * cri_sim_get_n_pods:
 * @sim: the runtime.
 *
 * Returns: the pod sandboxes it holds (every sandbox, ready or not).  Thread safety: callable
 *   from any thread.
 */
guint cri_sim_get_n_pods(CriSim *sim);
/**
 * cri_sim_get_n_containers:
 * @sim: the runtime.
 *
 * Returns: the containers it holds, in any state.  Thread safety: callable from any thread.
 */
guint cri_sim_get_n_containers(CriSim *sim);

/* ---- events ---- */

/**
 * CriSimEvent:
 * @type: the event's type.
 * @container_id: a container or sandbox id.  Known: the event carries its pod's sandbox status
 *   and its containers' statuses; unknown: neither.
 * @flags: how to spoil it.
 * @created_at_ns: created_at; 0: now.
 *
 * One GetContainerEvents message, for cri_sim_emit() and cri_sim_set_stream_greeting().
 */
typedef struct {
    CriSimEventType type;
    /* A container or sandbox id.  Known: the event carries its pod's sandbox status and its
     * containers' statuses; unknown: neither. */
    const char *container_id;
    CriSimEventFlags flags;
    gint64 created_at_ns; /* 0: now */
} CriSimEvent;

/**
 * cri_sim_emit:
 * @sim: the runtime.
 * @event: the event; read during the call only.
 *
 * Emits one event, with no state change (duplicates, STOPPED before STARTED and the like are the
 * caller's choice), built from the state as it is now.
 *
 * Returns: the number of subscribers it was queued to (at most 1 with cri_sim_set_deliver_one()).
 *   Thread safety: callable from any thread.
 */
guint cri_sim_emit(CriSim *sim, const CriSimEvent *event);
/**
 * cri_sim_set_auto_events:
 * @sim: the runtime.
 * @enabled: whether state changes emit their natural events (default %TRUE).
 *
 * Thread safety: callable from any thread.
 */
void cri_sim_set_auto_events(CriSim *sim, gboolean enabled);
/**
 * cri_sim_set_sandbox_events:
 * @sim: the runtime.
 * @enabled: whether sandboxes emit natural events too (default %FALSE).
 *
 * Sandbox events: CREATED+STARTED on run, STOPPED on stop, DELETED on remove, with the sandbox
 * id as container_id.  Needs auto events on.  Thread safety: callable from any thread.
 */
void cri_sim_set_sandbox_events(CriSim *sim, gboolean enabled);
/**
 * cri_sim_set_deliver_one:
 * @sim: the runtime.
 * @enabled: %TRUE: each event goes to one subscriber, round-robin, instead of all (a
 *   shared-channel runtime); default %FALSE.
 *
 * Thread safety: callable from any thread.
 */
void cri_sim_set_deliver_one(CriSim *sim, gboolean enabled);
/**
 * cri_sim_set_stream_greeting:
 * @sim: the runtime.
 * @events: (array length=n_events) (nullable): the events; copied.
 * @n_events: how many; 0: no greeting.
 * @end_after: end each stream OK after its greeting (it never becomes a subscriber).
 *
 * Every new GetContainerEvents stream first gets these events, built when it opens.  Replaces
 * an earlier greeting.  Thread safety: callable from any thread.
 */
void cri_sim_set_stream_greeting(CriSim *sim, const CriSimEvent *events, guint n_events,
                                 gboolean end_after);
/**
 * cri_sim_end_streams:
 * @sim: the runtime.
 * @status: 0 for a clean end, else a gRPC status code.
 * @message: (nullable): the status message; %NULL: "" for 0, else "cri-sim: stream ended".
 *
 * Ends every open GetContainerEvents stream once its queued events are sent.  Thread safety:
 * callable from any thread.
 */
void cri_sim_end_streams(CriSim *sim, int status, const char *message);
/**
 * cri_sim_set_events_unimplemented:
 * @sim: the runtime.
 * @unimplemented: %TRUE: new GetContainerEvents calls are answered UNIMPLEMENTED, as
 *   containerd 1.6 does; default %FALSE.  Open streams are left alone.
 *
 * Thread safety: callable from any thread.
 */
void cri_sim_set_events_unimplemented(CriSim *sim, gboolean unimplemented);

/* ---- list streams (KEP-5825) ---- */

/**
 * cri_sim_set_list_streams_unimplemented:
 * @sim: the runtime.
 * @unimplemented: %TRUE: StreamPodSandboxes and StreamContainers answer UNIMPLEMENTED, as
 *   runtimes before KEP-5825 do; default %FALSE.
 *
 * Thread safety: callable from any thread.
 */
void cri_sim_set_list_streams_unimplemented(CriSim *sim, gboolean unimplemented);
/**
 * cri_sim_set_list_batch:
 * @sim: the runtime.
 * @items: items a list stream message carries; at least 1 (default 5,000, containerd's batch).
 *
 * Thread safety: callable from any thread.
 */
void cri_sim_set_list_batch(CriSim *sim, guint items);
/**
 * cri_sim_set_list_stream_failure:
 * @sim: the runtime.
 * @after_messages: messages sent before the failure (all of them when the listing has fewer);
 *   below 0 counts as 0.
 * @status: the gRPC status code the stream ends with; 0 clears the failure.
 *
 * List streams fail part way, as a runtime that restarts while it answers; every stream until
 * cleared.  Thread safety: callable from any thread.
 */
void cri_sim_set_list_stream_failure(CriSim *sim, int after_messages, int status);

/* ---- the server ---- */

/**
 * cri_sim_go_away:
 * @sim: the runtime.
 * @away_ms: how long, in milliseconds; < 0 until cri_sim_come_back().
 * @stale_socket: leave a socket file that nobody listens on (connect is refused) instead of
 *   removing it, as a killed runtime does.
 * @error: return location for a #GError, or %NULL.
 *
 * Stops accepting, ends every open stream with UNAVAILABLE (after the events already queued
 * for it), cancels the other calls and destroys the server; returns once it is down.  After
 * @away_ms a new server listens on the same path (state is kept; events meanwhile reach nobody).
 * cri_sim_free() ends streams the same way.
 *
 * Returns: %FALSE with %CRI_SIM_ERROR_STATE when not serving.  Thread safety: callable from any
 *   thread; it blocks until the server is down.
 */
gboolean cri_sim_go_away(CriSim *sim, int away_ms, gboolean stale_socket, GError **error);
/**
 * cri_sim_come_back:
 * @sim: the runtime.
 * @error: return location for a #GError, or %NULL.
 *
 * Serves again now (no-op when serving; waits for a cri_sim_go_away() under way).
 *
 * Returns: %FALSE with %CRI_SIM_ERROR_FAILED when it cannot listen.  Thread safety: callable
 *   from any thread.
 */
gboolean cri_sim_come_back(CriSim *sim, GError **error);
/**
 * cri_sim_is_serving:
 * @sim: the runtime.
 *
 * Returns: whether it listens now.  Thread safety: callable from any thread.
 */
gboolean cri_sim_is_serving(CriSim *sim);
/**
 * cri_sim_wait_serving:
 * @sim: the runtime.
 * @timeout_ms: the deadline, in milliseconds from now.
 *
 * Waits until serving (after a timed cri_sim_go_away()).
 *
 * Returns: %FALSE at the deadline.  Thread safety: callable from any thread; blocks it.
 */
gboolean cri_sim_wait_serving(CriSim *sim, int timeout_ms);

/**
 * cri_sim_set_delay:
 * @sim: the runtime.
 * @method: a method's short name ("ListContainers"), or "*": every unary method and list
 *   stream (not GetContainerEvents, which takes only its own rule).
 * @delay_ms: answer after this many milliseconds from the request's arrival; < 0 never (the
 *   call ends when the client gives up); 0 clears.
 *
 * A method's own delay wins over "*".  For GetContainerEvents it delays the subscription.
 * Thread safety: callable from any thread; calls already received keep what they got.
 */
void cri_sim_set_delay(CriSim *sim, const char *method, int delay_ms);
/**
 * cri_sim_set_fail:
 * @sim: the runtime.
 * @method: a method's short name, or "*" for every method.
 * @code: the gRPC status code to answer with; 0 clears.
 * @times: how many calls fail (< 0: until cleared; 0 clears).
 *
 * A call takes its failure on arrival, from the method's own rule before "*"; a unary call
 * answers it after its delay, a stream at once.  UNIMPLEMENTED is answered as for an unknown
 * method.  Thread safety: callable from any thread.
 */
void cri_sim_set_fail(CriSim *sim, const char *method, int code, int times);

/* ---- counters ---- */

/**
 * cri_sim_get_n_calls:
 * @sim: the runtime.
 * @method: (nullable): a method's short name; %NULL: all methods.
 *
 * Returns: the calls received (answered or not) since cri_sim_new().  Thread safety: callable
 *   from any thread.
 */
guint cri_sim_get_n_calls(CriSim *sim, const char *method);
/**
 * cri_sim_get_n_subscribers:
 * @sim: the runtime.
 *
 * Returns: the open GetContainerEvents streams that receive events.  Thread safety: callable
 *   from any thread.
 */
guint cri_sim_get_n_subscribers(CriSim *sim);
/**
 * cri_sim_get_n_streams:
 * @sim: the runtime.
 *
 * Returns: the GetContainerEvents streams accepted since the start (counts reconnects).
 *   Thread safety: callable from any thread.
 */
guint cri_sim_get_n_streams(CriSim *sim);
/**
 * cri_sim_get_n_events_sent:
 * @sim: the runtime.
 *
 * Event messages sent to subscribers so far.  A message counts once gRPC reports it written, which
 * may be after the subscriber has read it: wait with cri_sim_wait_events_sent().
 *
 * Returns: the count.  Thread safety: callable from any thread.
 */
guint cri_sim_get_n_events_sent(CriSim *sim);
/**
 * cri_sim_wait_events_sent:
 * @sim: the runtime.
 * @n: event messages to wait for.
 * @timeout_ms: the deadline, in milliseconds from now.
 *
 * Waits until at least @n event messages were sent.
 *
 * Returns: %FALSE at the deadline.  Thread safety: callable from any thread; blocks it.
 */
gboolean cri_sim_wait_events_sent(CriSim *sim, guint n, int timeout_ms);
/**
 * cri_sim_wait_subscribers:
 * @sim: the runtime.
 * @n: subscribers to wait for.
 * @timeout_ms: the deadline, in milliseconds from now.
 *
 * Waits until exactly @n subscribers.
 *
 * Returns: %FALSE at the deadline.  Thread safety: callable from any thread; blocks it.
 */
gboolean cri_sim_wait_subscribers(CriSim *sim, guint n, int timeout_ms);
/**
 * cri_sim_wait_calls:
 * @sim: the runtime.
 * @method: (nullable): a method's short name; %NULL: any.
 * @n: calls to wait for.
 * @timeout_ms: the deadline, in milliseconds from now.
 *
 * Waits until at least @n calls of @method were received.
 *
 * Returns: %FALSE at the deadline.  Thread safety: callable from any thread; blocks it.
 */
gboolean cri_sim_wait_calls(CriSim *sim, const char *method, guint n, int timeout_ms);
/**
 * cri_sim_get_last_request:
 * @sim: the runtime.
 * @method: a method's short name.
 *
 * Returns: (transfer full) (nullable): the request of the last call of @method that was served,
 *   packed as received (a call answered with a scripted failure or not answered yet, a
 *   GetContainerEvents call and a method cri-sim does not serve leave none); %NULL when none yet.
 *   Unpack it with the protobuf-c code of the CRI schema.  Thread safety: callable from any
 *   thread.
 */
GBytes *cri_sim_get_last_request(CriSim *sim, const char *method);

/* ---- commands ---- */

/**
 * cri_sim_run_command:
 * @sim: the runtime.
 * @line: one command (doc/cri-sim.md; cri_sim_command_help()), UTF-8 text; blank lines and
 *   comments do nothing.
 * @ret_quit: (out) (optional): set %TRUE by "quit", untouched otherwise.
 * @error: return location for a #GError, or %NULL.
 *
 * Runs one command on the calling thread; "sleep" and "wait-subscribers" block it.
 *
 * Returns: %FALSE with @error set when the command is malformed (%CRI_SIM_ERROR_SYNTAX, a line
 *   that is not UTF-8 too) or fails (the code of the C function it calls;
 *   %CRI_SIM_ERROR_STATE for a "wait-subscribers" that timed out).  Thread safety: callable
 *   from any thread.
 */
gboolean cri_sim_run_command(CriSim *sim, const char *line, gboolean *ret_quit, GError **error);
/**
 * cri_sim_run_script:
 * @sim: the runtime.
 * @path: a file of commands, one a line.
 * @ret_quit: (out) (optional): set %TRUE when the script ran "quit".
 * @error: return location for a #GError, or %NULL.
 *
 * Runs the commands of @path in order on the calling thread, sleeps included, stopping at
 * "quit" or at the first error.
 *
 * Returns: %FALSE with @error set: a #GFileError when @path cannot be read, or the failing
 *   command's %CRI_SIM_ERROR code with a message "PATH:LINE: MESSAGE".  Commands before the
 *   failing one keep their effect.  Thread safety: callable from any thread.
 */
gboolean cri_sim_run_script(CriSim *sim, const char *path, gboolean *ret_quit, GError **error);
/**
 * cri_sim_command_help:
 *
 * Returns: (transfer none): the summary of every command, one or more lines each, as `cri-sim
 *   --help` prints it; static.  Thread safety: callable from any thread.
 */
const char *cri_sim_command_help(void);

G_END_DECLS
