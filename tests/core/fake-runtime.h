/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An in-process, scriptable fake of the runtime interface (pleg-runtime.h) for the Generic PLEG
 * unit tests.  Thread-safe: the test thread scripts it while the PLEG's dispatcher reads it.
 */
#pragma once

#include <pleg/pleg.h>

G_BEGIN_DECLS

typedef struct _FakeRuntime FakeRuntime;

typedef enum {
    FAKE_OP_LIST_POD_SANDBOXES,
    FAKE_OP_LIST_CONTAINERS, /* id = the pod_sandbox_id filter, NULL when unfiltered */
    FAKE_OP_POD_SANDBOX_STATUS,
    FAKE_OP_CONTAINER_STATUS,
    FAKE_OP_N,
} FakeRuntimeOp;

FakeRuntime *fake_runtime_new(void);
void fake_runtime_free(FakeRuntime *fake);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(FakeRuntime, fake_runtime_free)

/* A new PlegRuntime forwarding to @fake; @fake must outlive it. */
PlegRuntime *fake_runtime_as_runtime(FakeRuntime *fake);

/* State.  Sandboxes get name "pod-<uid>" and namespace "default"; created_at is the call order. */
void fake_runtime_add_sandbox(FakeRuntime *fake, const char *sandbox_id, const char *pod_uid,
                              PlegPodSandboxState state);
/* Replaces the sandbox's namespace and name (NULL: the defaults above) and its attempt. */
void fake_runtime_set_sandbox_metadata(FakeRuntime *fake, const char *sandbox_id,
                                       const char *namespace_, const char *name, guint32 attempt);
void fake_runtime_set_sandbox_state(FakeRuntime *fake, const char *sandbox_id,
                                    PlegPodSandboxState state);
/* NULL-terminated; NULL clears. */
void fake_runtime_set_sandbox_ips(FakeRuntime *fake, const char *sandbox_id,
                                  const char *const *ips);
void fake_runtime_remove_sandbox(FakeRuntime *fake, const char *sandbox_id);

void fake_runtime_add_container(FakeRuntime *fake, const char *container_id, const char *sandbox_id,
                                PlegContainerState state);
/* A second container under @container_id, which the fake already lists: a runtime breaking
 * CRI's unique ids.  Listings hold both, in the order they were added; every other call about
 * the id reaches the first. */
void fake_runtime_add_duplicate_container(FakeRuntime *fake, const char *container_id,
                                          const char *sandbox_id, PlegContainerState state);
/* Replaces the container's name (NULL: its id), attempt and image (NULL: "fake/image:1"). */
void fake_runtime_set_container_metadata(FakeRuntime *fake, const char *container_id,
                                         const char *name, guint32 attempt, const char *image);
void fake_runtime_set_container_state(FakeRuntime *fake, const char *container_id,
                                      PlegContainerState state);
/* Sets state EXITED with the exit code, reason and finished_at (Unix ns) that ContainerStatus
 * reports from now on. */
void fake_runtime_exit_container(FakeRuntime *fake, const char *container_id, gint32 exit_code,
                                 const char *reason, gint64 finished_at_ns);
void fake_runtime_remove_container(FakeRuntime *fake, const char *container_id);
/* Whether @container_id exists now, and its state. */
gboolean fake_runtime_lookup_container(FakeRuntime *fake, const char *container_id,
                                       PlegContainerState *ret_state);

/* Faults.  @id NULL matches every call of @op; otherwise the sandbox or container id the call
 * is about.  @times: how many matching calls fail, -1 for all until cleared. */
void fake_runtime_fail(FakeRuntime *fake, FakeRuntimeOp op, const char *id, int times);
/* Matching calls block until @cancellable fires or @timeout_usec passes (then fail with
 * G_IO_ERROR_TIMED_OUT, like a call that hits its deadline). */
void fake_runtime_hang(FakeRuntime *fake, FakeRuntimeOp op, const char *id, gint64 timeout_usec,
                       int times);
/* Matching calls block until fake_runtime_unblock(); fake_runtime_wait_blocked() waits until
 * one is blocked (returns FALSE after @timeout_usec).  For deterministic race tests. */
void fake_runtime_block(FakeRuntime *fake, FakeRuntimeOp op, const char *id);
gboolean fake_runtime_wait_blocked(FakeRuntime *fake, gint64 timeout_usec);
void fake_runtime_unblock(FakeRuntime *fake);
/* Like fake_runtime_wait_blocked(), until at least @n calls are blocked at once. */
gboolean fake_runtime_wait_blocked_count(FakeRuntime *fake, guint n, gint64 timeout_usec);
void fake_runtime_clear_faults(FakeRuntime *fake);

/* How many calls of @op were made (including failed ones). */
guint fake_runtime_get_call_count(FakeRuntime *fake, FakeRuntimeOp op);
/* How many calls of @op were about @id (the sandbox or container id, or the ListContainers
 * filter). */
guint fake_runtime_get_call_count_for(FakeRuntime *fake, FakeRuntimeOp op, const char *id);
/* The most PodSandboxStatus and ContainerStatus calls that were under way at once. */
guint fake_runtime_get_max_status_in_flight(FakeRuntime *fake);

/* A settable wall clock for PlegGenericConfig.clock: pass fake_clock_now and a FakeClock *. */
typedef struct {
    gint64 now_ns;
} FakeClock;
gint64 fake_clock_now(gpointer clock);
/* Atomic updates, safe while the dispatcher reads the clock. */
void fake_clock_set(FakeClock *clock, gint64 now_ns);
void fake_clock_advance(FakeClock *clock, gint64 usec);

G_END_DECLS
