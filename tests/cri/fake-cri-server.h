/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A small in-process CRI runtime on the gRPC C-core server, listening on a unix socket.
 *
 * It starts with two pod sandboxes and three containers:
 *   sb-a  pod "pod-a" uid "uid-a" ns "default", READY, ips 10.0.0.1 and fd00::1
 *     ctr-1  "app"     RUNNING, label io.kubernetes.pod.uid=uid-a
 *     ctr-2  "init"    EXITED, exit code 7, reason "Error", finished at FAKE_CRI_FINISHED_AT_NS
 *   sb-b  pod "pod-b" uid "uid-b" ns "kube-system", NOTREADY, no address
 *     ctr-3  "sidecar" CREATED, no labels
 * and serves Version, ListPodSandbox, PodSandboxStatus, ListContainers, ContainerStatus,
 * RunPodSandbox, StopPodSandbox, RemovePodSandbox, CreateContainer, StartContainer,
 * StopContainer, RemoveContainer and GetContainerEvents.  Any other method is UNIMPLEMENTED.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define FAKE_CRI_RUNTIME_NAME    "fake-cri"
#define FAKE_CRI_RUNTIME_VERSION "1.2.3"
#define FAKE_CRI_FINISHED_AT_NS  G_GINT64_CONSTANT(1700000000123456789)

typedef struct _FakeCriServer FakeCriServer;

/* Listens on @socket_path (removed first if it exists) and serves from a thread of its own;
 * nothing connects before all of the pods above are there. */
FakeCriServer *fake_cri_server_new(const char *socket_path);
/* Cancels every call in flight, stops and frees.  NULL-safe. */
void fake_cri_server_free(FakeCriServer *server);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(FakeCriServer, fake_cri_server_free)

/* Unary calls never answer while set; they end when the client gives up. */
void fake_cri_server_set_hang(FakeCriServer *server, gboolean hang);
/* GetContainerEvents: number of events sent, then the stream stays open (hang) or ends OK. */
void fake_cri_server_set_events(FakeCriServer *server, guint n_events, gboolean hang_after);
/* GetContainerEvents answers UNIMPLEMENTED, as containerd 1.6 does. */
void fake_cri_server_set_events_unimplemented(FakeCriServer *server, gboolean unimplemented);
/* ListContainers adds a label of this many bytes to ctr-1 (to exceed message size limits). */
void fake_cri_server_set_padding(FakeCriServer *server, gsize bytes);

/* Number of calls received so far (any method, answered or not). */
guint fake_cri_server_get_n_calls(FakeCriServer *server);

/* Last request of these kinds, packed; NULL when none yet.  (transfer full) */
GBytes *fake_cri_server_get_last_request(FakeCriServer *server, const char *method);

G_END_DECLS
