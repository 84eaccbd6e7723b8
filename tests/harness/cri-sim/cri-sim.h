/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cri-sim: a scriptable fake CRI runtime over real gRPC (the C-core server on a unix socket).
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
 * callbacks.  Every function here is thread-safe and may be called from any thread; an emitted
 * event is handed to gRPC from the calling thread at once.  Functions that take a pod take its
 * uid; a uid names the newest sandbox with it.
 *
 * Ids: the binary and scripts reach pods by uid ("pod u1" is sandbox "sb-u1"); sandboxes
 * and containers made by RPC get ids from a counter (cri_sim_set_id_prefixes()).
 *
 * Errors: functions that can fail take a GError (domain CRI_SIM_ERROR) naming the reason.
 *
 * The same behaviours are reachable as text commands (cri_sim_run_command(), and the cri-sim
 * binary reading stdin or a script file).  One command a line; '#' starts a comment:
 *
 *   pod UID [NAME]                 add a READY pod sandbox "sb-UID" (namespace "default")
 *   container POD_UID CID [NAME]   add a CREATED container CID to the pod        -> CREATED
 *   start CID                      CREATED -> RUNNING                             -> STARTED
 *   exit CID CODE [REASON]         -> EXITED with CODE (reason: Completed/Error)  -> STOPPED
 *   rm CID                         remove the container                           -> DELETED
 *   stopp UID                      stop the pod: running containers exit 137, NOTREADY
 *   rmp UID                        stop and remove the pod and its containers
 *   event TYPE CID [FLAG...]       emit one event, no state change; TYPE is CREATED, STARTED,
 *                                  STOPPED or DELETED; FLAGs: no-sandbox, no-metadata,
 *                                  empty-uid, unknown-id, no-containers, old-created-at=NS
 *   end-stream ok|error CODE [MSG] end every open GetContainerEvents stream (after what is queued)
 *   events-unimplemented on|off    GetContainerEvents answers UNIMPLEMENTED
 *   auto-events on|off             natural events on state changes (default on)
 *   sandbox-events on|off          natural events for sandboxes too (default off)
 *   away MS [stale-socket]         stop serving for MS ms (-1: until "back"): streams end with
 *                                  UNAVAILABLE; the socket is removed, or left stale
 *   back                           serve again now
 *   delay METHOD MS                answer METHOD ("*": every unary method and list stream)
 *                                  after MS ms; -1: never
 *                                  (until the client gives up); 0: clear
 *   fail METHOD CODE [TIMES]       answer METHOD with gRPC status CODE, TIMES times (default:
 *                                  until cleared with CODE 0)
 *   deliver-one on|off             each event goes to one subscriber, round-robin
 *   bulk N [CONTAINERS [BYTES]]    add N pods "bulk-K" with CONTAINERS (default 1) RUNNING
 *                                  containers "bulk-K-I" each, silently (no events); each
 *                                  container listed with an annotation of BYTES bytes
 *   list-streams on|unimplemented  StreamPodSandboxes and StreamContainers are served (default)
 *                                  or answered UNIMPLEMENTED
 *   list-batch N                   items a list stream message carries (default 5000)
 *   list-stream-fail AFTER CODE    list streams end with gRPC status CODE after AFTER messages
 *                                  (at the end when there are fewer); CODE 0 clears
 *   wait-subscribers N [MS]        pause until exactly N subscribers (an error after MS ms,
 *                                  default 10000)
 *   sleep MS                       pause the script
 *   quit                           stop (the binary exits)
 *
 * The binary: `cri-sim --socket PATH [--script FILE]` prints "ready" once it listens; without
 * --script it answers each stdin line with "ok" or "error: MESSAGE" and quits at end of input;
 * with --script it runs the file, then serves until "quit", SIGINT or SIGTERM (a failing line
 * prints "cri-sim: FILE:LINE: MESSAGE" and exits 1).
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define CRI_SIM_ERROR (cri_sim_error_quark())
GQuark cri_sim_error_quark(void);

typedef enum {
    CRI_SIM_ERROR_FAILED,    /* server could not listen, and the like */
    CRI_SIM_ERROR_NOT_FOUND, /* no such pod or container */
    CRI_SIM_ERROR_EXISTS,    /* the id or uid is taken */
    CRI_SIM_ERROR_STATE,     /* not allowed in the current state */
    CRI_SIM_ERROR_SYNTAX,    /* a command that does not parse */
} CriSimError;

/* Values as in the CRI (runtime.v1.ContainerState / ContainerEventType). */
typedef enum {
    CRI_SIM_CONTAINER_CREATED = 0,
    CRI_SIM_CONTAINER_RUNNING = 1,
    CRI_SIM_CONTAINER_EXITED = 2,
    CRI_SIM_CONTAINER_UNKNOWN = 3,
} CriSimContainerState;

typedef enum {
    CRI_SIM_EVENT_CREATED = 0,
    CRI_SIM_EVENT_STARTED = 1,
    CRI_SIM_EVENT_STOPPED = 2,
    CRI_SIM_EVENT_DELETED = 3,
} CriSimEventType;

typedef enum {
    CRI_SIM_EVENT_FLAGS_NONE = 0,
    CRI_SIM_EVENT_NO_SANDBOX = 1 << 0,    /* no pod_sandbox_status */
    CRI_SIM_EVENT_NO_METADATA = 1 << 1,   /* pod_sandbox_status without metadata */
    CRI_SIM_EVENT_EMPTY_UID = 1 << 2,     /* metadata.uid "" */
    CRI_SIM_EVENT_UNKNOWN_ID = 1 << 3,    /* container_id "<id>-unknown", statuses of <id>'s pod */
    CRI_SIM_EVENT_NO_CONTAINERS = 1 << 4, /* no containers_statuses */
} CriSimEventFlags;

typedef struct _CriSim CriSim;

/**
 * cri_sim_new:
 * @socket_path: unix socket to listen on; an existing file there is removed first.
 *
 * Starts an empty runtime (no pods) serving from a thread of its own.  Takes a gRPC library
 * reference (grpc_init()); cri_sim_free() drops it.  A process that wants to be clean under
 * valgrind calls grpc_shutdown_blocking() after its last gRPC user is gone.
 *
 * Returns: (transfer full): the runtime, or %NULL with @error set.
 */
CriSim *cri_sim_new(const char *socket_path, GError **error);
/**
 * cri_sim_free:
 *
 * Cancels every call in flight, stops serving, removes the socket and frees.  NULL-safe.
 */
void cri_sim_free(CriSim *sim);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CriSim, cri_sim_free)

/**
 * cri_sim_get_socket_path:
 *
 * Returns: (transfer none): the path given to cri_sim_new().
 */
const char *cri_sim_get_socket_path(CriSim *sim);

/**
 * cri_sim_set_version:
 *
 * Version's runtime_name and runtime_version (default "cri-sim", "0.1.0").
 */
void cri_sim_set_version(CriSim *sim, const char *runtime_name, const char *runtime_version);
/**
 * cri_sim_set_id_prefixes:
 *
 * Ids given to sandboxes and containers made by RPC or without an id: prefix + a counter shared by
 * both (default "sb-", "ctr-"); ids in use are skipped.
 */
void cri_sim_set_id_prefixes(CriSim *sim, const char *sandbox_prefix,
                             const char *container_prefix);

/* ---- pods and containers ---- */

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
 * @ret_id: (out) (optional) (transfer full): its sandbox id.
 *
 * Adds a pod sandbox; emits nothing (sandbox events on: CREATED and STARTED for a READY one).
 */
gboolean cri_sim_add_pod_full(CriSim *sim, const CriSimPodSpec *spec, char **ret_id,
                              GError **error);
/**
 * cri_sim_add_pod:
 *
 * "pod UID [NAME]": a READY pod "sb-UID".
 */
gboolean cri_sim_add_pod(CriSim *sim, const char *uid, const char *name, GError **error);
/**
 * cri_sim_add_container_full:
 * @ret_id: (out) (optional) (transfer full): its id.
 *
 * Adds a container in any state; emits CREATED (and STARTED, STOPPED as the state implies).
 */
gboolean cri_sim_add_container_full(CriSim *sim, const CriSimContainerSpec *spec, char **ret_id,
                                    GError **error);
/**
 * cri_sim_add_container:
 *
 * "container POD_UID CID [NAME]": a CREATED container.
 */
gboolean cri_sim_add_container(CriSim *sim, const char *pod_uid, const char *id, const char *name,
                               GError **error);
/**
 * cri_sim_start_container:
 *
 * CREATED -> RUNNING; emits STARTED.
 */
gboolean cri_sim_start_container(CriSim *sim, const char *id, GError **error);
/**
 * cri_sim_exit_container:
 *
 * CREATED or RUNNING -> EXITED with @exit_code; @reason NULL: "Completed" for 0, else "Error".
 * Emits STOPPED.
 */
gboolean cri_sim_exit_container(CriSim *sim, const char *id, int exit_code, const char *reason,
                                GError **error);
/**
 * cri_sim_remove_container:
 *
 * Removes a container in any state; emits DELETED.
 */
gboolean cri_sim_remove_container(CriSim *sim, const char *id, GError **error);
/**
 * cri_sim_stop_pod:
 *
 * RUNNING containers exit 137 (STOPPED each), the sandbox becomes NOTREADY.
 */
gboolean cri_sim_stop_pod(CriSim *sim, const char *pod_uid, GError **error);
/**
 * cri_sim_remove_pod:
 *
 * Stops the pod, then removes its containers (DELETED each) and the sandbox.
 */
gboolean cri_sim_remove_pod(CriSim *sim, const char *pod_uid, GError **error);
/**
 * cri_sim_set_container_label:
 *
 * Sets (@value non-NULL) or removes a label of a container.
 */
gboolean cri_sim_set_container_label(CriSim *sim, const char *id, const char *key,
                                     const char *value, GError **error);
/**
 * cri_sim_bulk:
 *
 * Adds @n_pods READY pods "bulk-K" (K counts on across calls) with @containers_per_pod RUNNING
 * containers "bulk-K-I" each, emitting nothing.  For benchmarks: 1000 pods take milliseconds.
 */
void cri_sim_bulk(CriSim *sim, guint n_pods, guint containers_per_pod);
/**
 * cri_sim_bulk_full:
 * @annotation_bytes: size of one annotation every container is listed with; 0 for none.
 *
 * cri_sim_bulk(), with listings of a size: 20,000 containers with 1,100 bytes each make a
 * ListContainers answer of about 28 MiB, past the 16 MiB a CRI client accepts.
 */
void cri_sim_bulk_full(CriSim *sim, guint n_pods, guint containers_per_pod,
                       guint annotation_bytes);

/**
 * cri_sim_get_sandbox_id:
 *
 * Returns: (transfer full) (nullable): the sandbox id of the pod, %NULL when there is none.
 */
char *cri_sim_get_sandbox_id(CriSim *sim, const char *pod_uid);
/**
 * cri_sim_get_container_state:
 *
 * Whether the container exists; its state in @ret_state.
 */
gboolean cri_sim_get_container_state(CriSim *sim, const char *id, CriSimContainerState *ret_state);
guint cri_sim_get_n_pods(CriSim *sim);
guint cri_sim_get_n_containers(CriSim *sim);

/* ---- events ---- */

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
 *
 * Emits one event (duplicates, STOPPED before STARTED and the like are the caller's choice).
 * Returns: the number of subscribers it was queued to.
 */
guint cri_sim_emit(CriSim *sim, const CriSimEvent *event);
/**
 * cri_sim_set_auto_events:
 *
 * Natural events on state changes (default TRUE).
 */
void cri_sim_set_auto_events(CriSim *sim, gboolean enabled);
/**
 * cri_sim_set_sandbox_events:
 *
 * Natural events for sandboxes: CREATED+STARTED on run, STOPPED on stop, DELETED on remove
 * (default FALSE).
 */
void cri_sim_set_sandbox_events(CriSim *sim, gboolean enabled);
/**
 * cri_sim_set_deliver_one:
 *
 * Each event goes to one subscriber in turn instead of all (a shared-channel runtime).
 */
void cri_sim_set_deliver_one(CriSim *sim, gboolean enabled);
/**
 * cri_sim_set_stream_greeting:
 *
 * Every new stream first gets these events (copied), then ends OK if @end_after.
 */
void cri_sim_set_stream_greeting(CriSim *sim, const CriSimEvent *events, guint n_events,
                                 gboolean end_after);
/**
 * cri_sim_end_streams:
 *
 * Ends every open stream once its queued events are sent: @status 0 is a clean end, else a gRPC
 * status code with @message (NULL: a default).
 */
void cri_sim_end_streams(CriSim *sim, int status, const char *message);
/**
 * cri_sim_set_events_unimplemented:
 *
 * GetContainerEvents answers UNIMPLEMENTED, as containerd 1.6 does.
 */
void cri_sim_set_events_unimplemented(CriSim *sim, gboolean unimplemented);

/* ---- list streams (KEP-5825) ---- */

/**
 * cri_sim_set_list_streams_unimplemented:
 *
 * StreamPodSandboxes and StreamContainers answer UNIMPLEMENTED, as runtimes before KEP-5825 do.
 */
void cri_sim_set_list_streams_unimplemented(CriSim *sim, gboolean unimplemented);
/**
 * cri_sim_set_list_batch:
 * @items: items a list stream message carries; at least 1 (default 5,000, containerd's batch).
 */
void cri_sim_set_list_batch(CriSim *sim, guint items);
/**
 * cri_sim_set_list_stream_failure:
 * @after_messages: messages sent before the failure (all of them when the listing has fewer).
 * @status: the gRPC status code the stream ends with; 0 clears the failure.
 *
 * List streams fail part way, as a runtime that restarts while it answers.
 */
void cri_sim_set_list_stream_failure(CriSim *sim, int after_messages, int status);

/* ---- the server ---- */

/**
 * cri_sim_go_away:
 * @away_ms: how long; < 0 until cri_sim_come_back().
 * @stale_socket: leave a socket file that nobody listens on (connect is refused) instead of
 *   removing it, as a killed runtime does.
 *
 * Stops accepting, ends every open stream with UNAVAILABLE (after the events already queued
 * for it), cancels the other calls and destroys the server; returns once it is down.  After
 * @away_ms a new server listens on the same path (state is kept; events meanwhile reach nobody).
 * Fails if not serving.  cri_sim_free() ends streams the same way.
 */
gboolean cri_sim_go_away(CriSim *sim, int away_ms, gboolean stale_socket, GError **error);
/**
 * cri_sim_come_back:
 *
 * Serves again now (no-op when serving).
 */
gboolean cri_sim_come_back(CriSim *sim, GError **error);
gboolean cri_sim_is_serving(CriSim *sim);
/**
 * cri_sim_wait_serving:
 *
 * Waits until serving; FALSE at the deadline.
 */
gboolean cri_sim_wait_serving(CriSim *sim, int timeout_ms);

/**
 * cri_sim_set_delay:
 *
 * Answers @method (short name; "*" every unary method) after @delay_ms; < 0 never (the call ends
 * when the client gives up); 0 clears.  For GetContainerEvents it delays the subscription.
 */
void cri_sim_set_delay(CriSim *sim, const char *method, int delay_ms);
/**
 * cri_sim_set_fail:
 *
 * Answers @method ("*" every method) with gRPC status @code (0 clears) @times times (< 0: until
 * cleared).
 */
void cri_sim_set_fail(CriSim *sim, const char *method, int code, int times);

/* ---- counters ---- */

/**
 * cri_sim_get_n_calls:
 *
 * Calls received (answered or not) for @method, or for all methods when NULL.
 */
guint cri_sim_get_n_calls(CriSim *sim, const char *method);
/**
 * cri_sim_get_n_subscribers:
 *
 * Open GetContainerEvents streams that receive events.
 */
guint cri_sim_get_n_subscribers(CriSim *sim);
/**
 * cri_sim_get_n_streams:
 *
 * GetContainerEvents streams accepted since the start (counts reconnects).
 */
guint cri_sim_get_n_streams(CriSim *sim);
/**
 * cri_sim_get_n_events_sent:
 *
 * Event messages sent to subscribers so far.  A message counts once gRPC reports it written, which
 * may be after the subscriber has read it: wait with cri_sim_wait_events_sent().
 */
guint cri_sim_get_n_events_sent(CriSim *sim);
/**
 * cri_sim_wait_events_sent:
 *
 * Waits until at least @n event messages were sent; FALSE at the deadline.
 */
gboolean cri_sim_wait_events_sent(CriSim *sim, guint n, int timeout_ms);
/**
 * cri_sim_wait_subscribers:
 *
 * Waits until exactly @n subscribers; FALSE at the deadline.
 */
gboolean cri_sim_wait_subscribers(CriSim *sim, guint n, int timeout_ms);
/**
 * cri_sim_wait_calls:
 *
 * Waits until at least @n calls of @method (NULL: any); FALSE at the deadline.
 */
gboolean cri_sim_wait_calls(CriSim *sim, const char *method, guint n, int timeout_ms);
/**
 * cri_sim_get_last_request:
 *
 * Returns: (transfer full) (nullable): the last request of @method, packed; %NULL when none yet.
 */
GBytes *cri_sim_get_last_request(CriSim *sim, const char *method);

/* ---- commands ---- */

/**
 * cri_sim_run_command:
 * @line: one command (see above), UTF-8 text; blank lines and comments do nothing.
 * @ret_quit: (out) (optional): set TRUE by "quit".
 *
 * Returns: %FALSE with @error set when the command is malformed (%CRI_SIM_ERROR_SYNTAX, a line
 * that is not UTF-8 too) or fails.
 */
gboolean cri_sim_run_command(CriSim *sim, const char *line, gboolean *ret_quit, GError **error);
/**
 * cri_sim_run_script:
 *
 * Runs the commands of @path in order, stopping at "quit" (@ret_quit) or at the first error, which
 * names the line.
 */
gboolean cri_sim_run_script(CriSim *sim, const char *path, gboolean *ret_quit, GError **error);
/**
 * cri_sim_command_help:
 *
 * Returns: (transfer none): the command summary above, for --help.
 */
const char *cri_sim_command_help(void);

G_END_DECLS
