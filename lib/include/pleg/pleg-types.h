/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libpleg's own view of CRI runtime objects.
 *
 * These types are decoded from CRI `runtime.v1` messages (ListPodSandbox, ListContainers,
 * PodSandboxStatus, ContainerStatus).  No protobuf-c or gRPC type appears in a public header:
 * the CRI client converts at its edge, and the in-process test runtime builds these directly.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/**
 * PlegPodSandboxState:
 * @PLEG_POD_SANDBOX_STATE_READY: CRI `SANDBOX_READY` (0).
 * @PLEG_POD_SANDBOX_STATE_NOTREADY: CRI `SANDBOX_NOTREADY` (1).
 *
 * The CRI `PodSandboxState`, numbered as on the wire.
 */
typedef enum {
    PLEG_POD_SANDBOX_STATE_READY = 0,
    PLEG_POD_SANDBOX_STATE_NOTREADY = 1,
} PlegPodSandboxState;

/**
 * PlegContainerState:
 * @PLEG_CONTAINER_STATE_CREATED: CRI `CONTAINER_CREATED` (0).
 * @PLEG_CONTAINER_STATE_RUNNING: CRI `CONTAINER_RUNNING` (1).
 * @PLEG_CONTAINER_STATE_EXITED: CRI `CONTAINER_EXITED` (2).
 * @PLEG_CONTAINER_STATE_UNKNOWN: CRI `CONTAINER_UNKNOWN` (3).
 *
 * The CRI `ContainerState`, numbered as on the wire.
 */
typedef enum {
    PLEG_CONTAINER_STATE_CREATED = 0,
    PLEG_CONTAINER_STATE_RUNNING = 1,
    PLEG_CONTAINER_STATE_EXITED = 2,
    PLEG_CONTAINER_STATE_UNKNOWN = 3,
} PlegContainerState;

/**
 * pleg_container_state_to_string:
 * @state: a container state.
 *
 * Returns: (transfer none): "created", "running", "exited" or "unknown" (also for a value out
 *   of range); the `container_state` label of kubelet_running_containers.
 *
 * Thread safety: any thread.
 */
const char *pleg_container_state_to_string(PlegContainerState state);

/**
 * PlegPodSandbox:
 * @id: sandbox id (CRI `PodSandbox.id`).
 * @name: pod name (`PodSandbox.metadata.name`), may be %NULL.
 * @uid: pod UID (`PodSandbox.metadata.uid`), may be %NULL or empty when the runtime lies.
 * @namespace_: pod namespace (`PodSandbox.metadata.namespace`), may be %NULL.
 * @attempt: `PodSandbox.metadata.attempt`.
 * @state: `PodSandbox.state`.
 * @created_at_ns: `PodSandbox.created_at`, Unix time in nanoseconds.
 *
 * One entry of a ListPodSandbox answer.  Plain data; every string is owned by the struct and
 * freed by pleg_pod_sandbox_free().  Like every plain struct of this header, it has no lock: one
 * thread may write it, or any number read it.
 */
typedef struct {
    char *id;
    char *name;
    char *uid;
    char *namespace_;
    guint32 attempt;
    PlegPodSandboxState state;
    gint64 created_at_ns;
} PlegPodSandbox;

/**
 * pleg_pod_sandbox_copy:
 * @sandbox: (nullable): the struct to copy.
 *
 * Returns: (transfer full) (nullable): a deep copy, %NULL when @sandbox is %NULL.  Free it
 *   with pleg_pod_sandbox_free().
 *
 * Thread safety: any thread, while no thread modifies @sandbox.
 */
PlegPodSandbox *pleg_pod_sandbox_copy(const PlegPodSandbox *sandbox);
/**
 * pleg_pod_sandbox_free:
 * @sandbox: (nullable) (transfer full): the struct to free, with its strings.
 *
 * NULL-safe.
 *
 * Thread safety: any thread, once no other thread uses @sandbox.
 */
void pleg_pod_sandbox_free(PlegPodSandbox *sandbox);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegPodSandbox, pleg_pod_sandbox_free)

/**
 * PlegContainer:
 * @id: container id (CRI `Container.id`).
 * @pod_sandbox_id: `Container.pod_sandbox_id`.
 * @name: `Container.metadata.name`, may be %NULL.
 * @attempt: `Container.metadata.attempt`.
 * @image: `Container.image.image`, may be %NULL.
 * @image_ref: `Container.image_ref`, may be %NULL.
 * @state: `Container.state`.
 * @created_at_ns: `Container.created_at`, Unix time in nanoseconds.
 * @pod_uid_label: value of the `io.kubernetes.pod.uid` label, or %NULL; used to place a
 *   container whose sandbox is not listed, as kubelet does.
 *
 * One entry of a ListContainers answer.  Freed by pleg_container_free().
 */
typedef struct {
    char *id;
    char *pod_sandbox_id;
    char *name;
    guint32 attempt;
    char *image;
    char *image_ref;
    PlegContainerState state;
    gint64 created_at_ns;
    char *pod_uid_label;
} PlegContainer;

/**
 * pleg_container_copy:
 * @container: (nullable): the struct to copy.
 *
 * Returns: (transfer full) (nullable): a deep copy, %NULL when @container is %NULL.  Free it
 *   with pleg_container_free().
 *
 * Thread safety: any thread, while no thread modifies @container.
 */
PlegContainer *pleg_container_copy(const PlegContainer *container);
/**
 * pleg_container_free:
 * @container: (nullable) (transfer full): the struct to free, with its strings.
 *
 * NULL-safe.
 *
 * Thread safety: any thread, once no other thread uses @container.
 */
void pleg_container_free(PlegContainer *container);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegContainer, pleg_container_free)

/**
 * PlegPodSandboxStatus:
 * @id: sandbox id (`PodSandboxStatus.id`).
 * @name: `metadata.name`.
 * @uid: `metadata.uid`.
 * @namespace_: `metadata.namespace`.
 * @attempt: `metadata.attempt`.
 * @state: `PodSandboxStatus.state`.
 * @created_at_ns: `PodSandboxStatus.created_at`, Unix ns.
 * @ips: %NULL-terminated list: `network.ip` first, then `network.additional_ips[].ip`; never
 *   %NULL, empty when the sandbox has no address (host network, or not ready).
 *
 * The answer of PodSandboxStatus.  Freed by pleg_pod_sandbox_status_free().
 */
typedef struct {
    char *id;
    char *name;
    char *uid;
    char *namespace_;
    guint32 attempt;
    PlegPodSandboxState state;
    gint64 created_at_ns;
    char **ips;
} PlegPodSandboxStatus;

/**
 * pleg_pod_sandbox_status_copy:
 * @status: (nullable): the struct to copy.
 *
 * Returns: (transfer full) (nullable): a deep copy, %NULL when @status is %NULL.  Free it
 *   with pleg_pod_sandbox_status_free().
 *
 * Thread safety: any thread, while no thread modifies @status.
 */
PlegPodSandboxStatus *pleg_pod_sandbox_status_copy(const PlegPodSandboxStatus *status);
/**
 * pleg_pod_sandbox_status_free:
 * @status: (nullable) (transfer full): the struct to free, with its strings.
 *
 * NULL-safe.
 *
 * Thread safety: any thread, once no other thread uses @status.
 */
void pleg_pod_sandbox_status_free(PlegPodSandboxStatus *status);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegPodSandboxStatus, pleg_pod_sandbox_status_free)

/**
 * PlegContainerStatus:
 * @id: `ContainerStatus.id`.
 * @name: `metadata.name`.
 * @attempt: `metadata.attempt`.
 * @state: `ContainerStatus.state`.
 * @created_at_ns: `created_at`, Unix ns.
 * @started_at_ns: `started_at`, Unix ns, 0 when not started.
 * @finished_at_ns: `finished_at`, Unix ns, 0 when not finished.
 * @exit_code: `exit_code`, meaningful when @state is %PLEG_CONTAINER_STATE_EXITED.
 * @image: `image.image`.
 * @image_ref: `image_ref`.
 * @reason: `reason` (for example "Completed", "Error", "OOMKilled"), may be %NULL.
 * @message: `message`, may be %NULL.
 *
 * The answer of ContainerStatus.  Freed by pleg_container_status_free().
 */
typedef struct {
    char *id;
    char *name;
    guint32 attempt;
    PlegContainerState state;
    gint64 created_at_ns;
    gint64 started_at_ns;
    gint64 finished_at_ns;
    gint32 exit_code;
    char *image;
    char *image_ref;
    char *reason;
    char *message;
} PlegContainerStatus;

/**
 * pleg_container_status_copy:
 * @status: (nullable): the struct to copy.
 *
 * Returns: (transfer full) (nullable): a deep copy, %NULL when @status is %NULL.  Free it
 *   with pleg_container_status_free().
 *
 * Thread safety: any thread, while no thread modifies @status.
 */
PlegContainerStatus *pleg_container_status_copy(const PlegContainerStatus *status);
/**
 * pleg_container_status_free:
 * @status: (nullable) (transfer full): the struct to free, with its strings.
 *
 * NULL-safe.
 *
 * Thread safety: any thread, once no other thread uses @status.
 */
void pleg_container_status_free(PlegContainerStatus *status);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegContainerStatus, pleg_container_status_free)

/**
 * PlegPodStatus:
 * @uid: pod UID.
 * @name: pod name, from the newest sandbox, may be %NULL.
 * @namespace_: pod namespace, may be %NULL.
 * @ips: %NULL-terminated pod IPs, never %NULL.  Kept from the previous status when every
 *   sandbox is not ready and the runtime no longer reports an address (kubelet's IP
 *   preservation).
 * @sandbox_statuses: (element-type PlegPodSandboxStatus): newest first.
 * @container_statuses: (element-type PlegContainerStatus).
 *
 * The pod status that the Generic PLEG stores in the pod cache.  Reference counted and
 * immutable once published: readers on any thread hold a reference with
 * pleg_pod_status_ref() and never modify it.
 */
typedef struct {
    char *uid;
    char *name;
    char *namespace_;
    char **ips;
    GPtrArray *sandbox_statuses;
    GPtrArray *container_statuses;
} PlegPodStatus;

/**
 * pleg_pod_status_new:
 * @uid: the pod's UID, copied.
 *
 * An empty status to fill before publishing it: no IPs, no sandbox or container statuses.
 *
 * Returns: (transfer full): a status with one reference.
 *
 * Thread safety: any thread.  Until it is published, only the thread that filled it may use it.
 */
PlegPodStatus *pleg_pod_status_new(const char *uid);

/**
 * pleg_pod_status_ref:
 * @status: a status.
 *
 * Returns: (transfer full): @status, with one more reference.
 *
 * Thread safety: any thread; the count is atomic.
 */
PlegPodStatus *pleg_pod_status_ref(PlegPodStatus *status);

/**
 * pleg_pod_status_unref:
 * @status: (nullable) (transfer full): a status.
 *
 * Drops one reference, freeing the status with the last one.  NULL-safe.
 *
 * Thread safety: any thread; the count is atomic.
 */
void pleg_pod_status_unref(PlegPodStatus *status);

/**
 * pleg_pod_status_find_container:
 * @status: a status.
 * @container_id: the container's id.
 *
 * Returns: (transfer none) (nullable): the status of @container_id in @status, valid while
 *   @status is; %NULL when it holds none.
 *
 * Thread safety: any thread holding a reference to a published (immutable) @status.
 */
const PlegContainerStatus *pleg_pod_status_find_container(const PlegPodStatus *status,
                                                          const char *container_id);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegPodStatus, pleg_pod_status_unref)

G_END_DECLS
