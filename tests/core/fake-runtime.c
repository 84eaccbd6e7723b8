/* SPDX-License-Identifier: Apache-2.0 */
#include "fake-runtime.h"

typedef struct {
    char *id;
    char *uid;
    PlegPodSandboxState state;
    char **ips;
    gint64 created_at_ns;
    char *namespace_; /* NULL: "default" */
    char *name;       /* NULL: "pod-<uid>" */
    guint32 attempt;
} FakeSandbox;

typedef struct {
    char *id;
    char *sandbox_id;
    char *pod_uid;
    PlegContainerState state;
    gint64 created_at_ns;
    gint64 started_at_ns;
    gint64 finished_at_ns;
    gint32 exit_code;
    char *reason;
    char *name;  /* NULL: the id */
    char *image; /* NULL: "fake/image:1" */
    guint32 attempt;
} FakeContainer;

typedef enum {
    FAULT_FAIL,
    FAULT_HANG,
    FAULT_BLOCK,
} FaultKind;

typedef struct {
    FaultKind kind;
    FakeRuntimeOp op;
    char *id;
    gint64 timeout_usec;
    int times;
} Fault;

struct _FakeRuntime {
    GMutex lock;
    GCond cond;
    GPtrArray *sandboxes;
    GPtrArray *containers;
    GPtrArray *faults;
    guint n_blocked;
    guint unblock_generation;
    guint status_in_flight;     /* PodSandboxStatus and ContainerStatus calls under way */
    guint max_status_in_flight; /* the most there were at once */
    guint call_counts[FAKE_OP_N];
    GHashTable *call_counts_by_id[FAKE_OP_N];
    gint64 next_time;
};

static const char *const op_names[FAKE_OP_N] = {
    [FAKE_OP_LIST_POD_SANDBOXES] = "ListPodSandbox",
    [FAKE_OP_LIST_CONTAINERS] = "ListContainers",
    [FAKE_OP_POD_SANDBOX_STATUS] = "PodSandboxStatus",
    [FAKE_OP_CONTAINER_STATUS] = "ContainerStatus",
};

static void
fake_sandbox_free(FakeSandbox *sandbox)
{
    g_free(sandbox->id);
    g_free(sandbox->uid);
    g_strfreev(sandbox->ips);
    g_free(sandbox->namespace_);
    g_free(sandbox->name);
    g_free(sandbox);
}

static void
fake_container_free(FakeContainer *container)
{
    g_free(container->id);
    g_free(container->sandbox_id);
    g_free(container->pod_uid);
    g_free(container->reason);
    g_free(container->name);
    g_free(container->image);
    g_free(container);
}

static void
fault_free(Fault *fault)
{
    g_free(fault->id);
    g_free(fault);
}

FakeRuntime *
fake_runtime_new(void)
{
    FakeRuntime *fake = g_new0(FakeRuntime, 1);

    g_mutex_init(&fake->lock);
    g_cond_init(&fake->cond);
    fake->sandboxes = g_ptr_array_new_with_free_func((GDestroyNotify)fake_sandbox_free);
    fake->containers = g_ptr_array_new_with_free_func((GDestroyNotify)fake_container_free);
    fake->faults = g_ptr_array_new_with_free_func((GDestroyNotify)fault_free);
    for (guint i = 0; i < FAKE_OP_N; i++)
        fake->call_counts_by_id[i] = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    fake->next_time = 1;
    return fake;
}

void
fake_runtime_free(FakeRuntime *fake)
{
    if (!fake)
        return;
    g_ptr_array_unref(fake->sandboxes);
    g_ptr_array_unref(fake->containers);
    g_ptr_array_unref(fake->faults);
    for (guint i = 0; i < FAKE_OP_N; i++)
        g_hash_table_unref(fake->call_counts_by_id[i]);
    g_cond_clear(&fake->cond);
    g_mutex_clear(&fake->lock);
    g_free(fake);
}

static FakeSandbox *
find_sandbox(FakeRuntime *fake, const char *id)
{
    for (guint i = 0; i < fake->sandboxes->len; i++) {
        FakeSandbox *sandbox = g_ptr_array_index(fake->sandboxes, i);
        if (g_str_equal(sandbox->id, id))
            return sandbox;
    }
    return NULL;
}

static FakeContainer *
find_container(FakeRuntime *fake, const char *id)
{
    for (guint i = 0; i < fake->containers->len; i++) {
        FakeContainer *container = g_ptr_array_index(fake->containers, i);
        if (g_str_equal(container->id, id))
            return container;
    }
    return NULL;
}

static void
on_cancelled(GCancellable *cancellable, FakeRuntime *fake)
{
    g_mutex_lock(&fake->lock);
    g_cond_broadcast(&fake->cond);
    g_mutex_unlock(&fake->lock);
}

static Fault *
find_fault(FakeRuntime *fake, FaultKind kind, FakeRuntimeOp op, const char *id)
{
    for (guint i = 0; i < fake->faults->len; i++) {
        Fault *fault = g_ptr_array_index(fake->faults, i);
        if (fault->kind != kind || fault->op != op || fault->times == 0)
            continue;
        if (fault->id && g_strcmp0(fault->id, id) != 0)
            continue;
        return fault;
    }
    return NULL;
}

static void
fault_consume(FakeRuntime *fake, Fault *fault)
{
    if (fault->times > 0 && --fault->times == 0)
        g_ptr_array_remove(fake->faults, fault);
}

/* Counts the call and plays the scripted faults.  Called and returns with the lock held.
 * Returns FALSE with @error when the call must fail. */
static gboolean
enter_call(FakeRuntime *fake, FakeRuntimeOp op, const char *id, GCancellable *cancellable,
           GError **error)
{
    Fault *fault;

    fake->call_counts[op]++;
    if (id) {
        GHashTable *counts = fake->call_counts_by_id[op];
        guint n = GPOINTER_TO_UINT(g_hash_table_lookup(counts, id));
        g_hash_table_insert(counts, g_strdup(id), GUINT_TO_POINTER(n + 1));
    }

    if (find_fault(fake, FAULT_BLOCK, op, id)) {
        guint generation = fake->unblock_generation;

        fake->n_blocked++;
        g_cond_broadcast(&fake->cond);
        while (generation == fake->unblock_generation && !g_cancellable_is_cancelled(cancellable))
            g_cond_wait(&fake->cond, &fake->lock);
        fake->n_blocked--;
    }

    if (g_cancellable_set_error_if_cancelled(cancellable, error))
        return FALSE;

    fault = find_fault(fake, FAULT_HANG, op, id);
    if (fault) {
        gint64 end_time = g_get_monotonic_time() + fault->timeout_usec;

        fault_consume(fake, fault);
        while (!g_cancellable_is_cancelled(cancellable)) {
            if (!g_cond_wait_until(&fake->cond, &fake->lock, end_time))
                break;
        }
        if (g_cancellable_set_error_if_cancelled(cancellable, error))
            return FALSE;
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT, "fake %s: deadline exceeded",
                    op_names[op]);
        return FALSE;
    }

    fault = find_fault(fake, FAULT_FAIL, op, id);
    if (fault) {
        fault_consume(fake, fault);
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_FAILED, "fake %s: injected failure",
                    op_names[op]);
        return FALSE;
    }
    return TRUE;
}

static gulong
connect_cancellable(FakeRuntime *fake, GCancellable *cancellable)
{
    if (!cancellable)
        return 0;
    return g_cancellable_connect(cancellable, G_CALLBACK(on_cancelled), fake, NULL);
}

static char *
sandbox_name(const FakeSandbox *sandbox)
{
    return sandbox->name ? g_strdup(sandbox->name) : g_strdup_printf("pod-%s", sandbox->uid);
}

static PlegPodSandbox *
sandbox_to_pleg(const FakeSandbox *sandbox)
{
    PlegPodSandbox *out = g_new0(PlegPodSandbox, 1);

    out->id = g_strdup(sandbox->id);
    out->name = sandbox_name(sandbox);
    out->uid = g_strdup(sandbox->uid);
    out->namespace_ = g_strdup(sandbox->namespace_ ? sandbox->namespace_ : "default");
    out->attempt = sandbox->attempt;
    out->state = sandbox->state;
    out->created_at_ns = sandbox->created_at_ns;
    return out;
}

static PlegContainer *
container_to_pleg(const FakeContainer *container)
{
    PlegContainer *out = g_new0(PlegContainer, 1);

    out->id = g_strdup(container->id);
    out->pod_sandbox_id = g_strdup(container->sandbox_id);
    out->name = g_strdup(container->name ? container->name : container->id);
    out->attempt = container->attempt;
    out->image = g_strdup(container->image ? container->image : "fake/image:1");
    out->image_ref = g_strdup("sha256:fake");
    out->state = container->state;
    out->created_at_ns = container->created_at_ns;
    out->pod_uid_label = g_strdup(container->pod_uid);
    return out;
}

static gboolean
fake_list_pod_sandboxes(gpointer impl, GPtrArray **ret_sandboxes, GCancellable *cancellable,
                        GError **error)
{
    FakeRuntime *fake = impl;
    gulong handler = connect_cancellable(fake, cancellable);
    GPtrArray *sandboxes = NULL;

    g_mutex_lock(&fake->lock);
    if (enter_call(fake, FAKE_OP_LIST_POD_SANDBOXES, NULL, cancellable, error)) {
        sandboxes = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_sandbox_free);
        for (guint i = 0; i < fake->sandboxes->len; i++)
            g_ptr_array_add(sandboxes, sandbox_to_pleg(g_ptr_array_index(fake->sandboxes, i)));
    }
    g_mutex_unlock(&fake->lock);
    g_cancellable_disconnect(cancellable, handler);

    if (!sandboxes)
        return FALSE;
    *ret_sandboxes = sandboxes;
    return TRUE;
}

static gboolean
fake_list_containers(gpointer impl, const char *pod_sandbox_id, GPtrArray **ret_containers,
                     GCancellable *cancellable, GError **error)
{
    FakeRuntime *fake = impl;
    gulong handler = connect_cancellable(fake, cancellable);
    GPtrArray *containers = NULL;

    g_mutex_lock(&fake->lock);
    if (enter_call(fake, FAKE_OP_LIST_CONTAINERS, pod_sandbox_id, cancellable, error)) {
        containers = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_container_free);
        for (guint i = 0; i < fake->containers->len; i++) {
            FakeContainer *container = g_ptr_array_index(fake->containers, i);
            if (pod_sandbox_id && !g_str_equal(container->sandbox_id, pod_sandbox_id))
                continue;
            g_ptr_array_add(containers, container_to_pleg(container));
        }
    }
    g_mutex_unlock(&fake->lock);
    g_cancellable_disconnect(cancellable, handler);

    if (!containers)
        return FALSE;
    *ret_containers = containers;
    return TRUE;
}

/* Called with the lock held; the call leaves with status_in_flight-- before unlocking. */
static void
status_call_enter(FakeRuntime *fake)
{
    fake->status_in_flight++;
    fake->max_status_in_flight = MAX(fake->max_status_in_flight, fake->status_in_flight);
}

static PlegPodSandboxStatus *
fake_pod_sandbox_status(gpointer impl, const char *pod_sandbox_id, GCancellable *cancellable,
                        GError **error)
{
    FakeRuntime *fake = impl;
    gulong handler = connect_cancellable(fake, cancellable);
    PlegPodSandboxStatus *status = NULL;

    g_mutex_lock(&fake->lock);
    status_call_enter(fake);
    if (enter_call(fake, FAKE_OP_POD_SANDBOX_STATUS, pod_sandbox_id, cancellable, error)) {
        FakeSandbox *sandbox = find_sandbox(fake, pod_sandbox_id);

        if (!sandbox) {
            g_set_error(error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                        "fake PodSandboxStatus: sandbox %s not found", pod_sandbox_id);
        } else {
            status = g_new0(PlegPodSandboxStatus, 1);
            status->id = g_strdup(sandbox->id);
            status->name = sandbox_name(sandbox);
            status->uid = g_strdup(sandbox->uid);
            status->namespace_ =
                g_strdup(sandbox->namespace_ ? sandbox->namespace_ : "default");
            status->attempt = sandbox->attempt;
            status->state = sandbox->state;
            status->created_at_ns = sandbox->created_at_ns;
            status->ips = sandbox->ips ? g_strdupv(sandbox->ips) : g_new0(char *, 1);
        }
    }
    fake->status_in_flight--;
    g_mutex_unlock(&fake->lock);
    g_cancellable_disconnect(cancellable, handler);
    return status;
}

static PlegContainerStatus *
fake_container_status(gpointer impl, const char *container_id, GCancellable *cancellable,
                      GError **error)
{
    FakeRuntime *fake = impl;
    gulong handler = connect_cancellable(fake, cancellable);
    PlegContainerStatus *status = NULL;

    g_mutex_lock(&fake->lock);
    status_call_enter(fake);
    if (enter_call(fake, FAKE_OP_CONTAINER_STATUS, container_id, cancellable, error)) {
        FakeContainer *container = find_container(fake, container_id);

        if (!container) {
            g_set_error(error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                        "fake ContainerStatus: container %s not found", container_id);
        } else {
            status = g_new0(PlegContainerStatus, 1);
            status->id = g_strdup(container->id);
            status->name = g_strdup(container->name ? container->name : container->id);
            status->attempt = container->attempt;
            status->state = container->state;
            status->created_at_ns = container->created_at_ns;
            status->started_at_ns = container->started_at_ns;
            status->finished_at_ns = container->finished_at_ns;
            status->exit_code = container->exit_code;
            status->image = g_strdup(container->image ? container->image : "fake/image:1");
            status->image_ref = g_strdup("sha256:fake");
            status->reason = g_strdup(container->reason);
        }
    }
    fake->status_in_flight--;
    g_mutex_unlock(&fake->lock);
    g_cancellable_disconnect(cancellable, handler);
    return status;
}

static const PlegRuntimeVTable fake_vtable = {
    .size = sizeof(PlegRuntimeVTable),
    .list_pod_sandboxes = fake_list_pod_sandboxes,
    .list_containers = fake_list_containers,
    .pod_sandbox_status = fake_pod_sandbox_status,
    .container_status = fake_container_status,
    .finalize = NULL,
};

PlegRuntime *
fake_runtime_as_runtime(FakeRuntime *fake)
{
    return pleg_runtime_new(&fake_vtable, fake);
}

void
fake_runtime_add_sandbox(FakeRuntime *fake, const char *sandbox_id, const char *pod_uid,
                         PlegPodSandboxState state)
{
    FakeSandbox *sandbox = g_new0(FakeSandbox, 1);

    sandbox->id = g_strdup(sandbox_id);
    sandbox->uid = g_strdup(pod_uid);
    sandbox->state = state;
    g_mutex_lock(&fake->lock);
    g_assert(find_sandbox(fake, sandbox_id) == NULL);
    sandbox->created_at_ns = fake->next_time++;
    g_ptr_array_add(fake->sandboxes, sandbox);
    g_mutex_unlock(&fake->lock);
}

void
fake_runtime_set_sandbox_metadata(FakeRuntime *fake, const char *sandbox_id, const char *namespace_,
                                  const char *name, guint32 attempt)
{
    FakeSandbox *sandbox;

    g_mutex_lock(&fake->lock);
    sandbox = find_sandbox(fake, sandbox_id);
    g_assert(sandbox != NULL);
    g_free(sandbox->namespace_);
    sandbox->namespace_ = g_strdup(namespace_);
    g_free(sandbox->name);
    sandbox->name = g_strdup(name);
    sandbox->attempt = attempt;
    g_mutex_unlock(&fake->lock);
}

void
fake_runtime_set_container_metadata(FakeRuntime *fake, const char *container_id, const char *name,
                                    guint32 attempt, const char *image)
{
    FakeContainer *container;

    g_mutex_lock(&fake->lock);
    container = find_container(fake, container_id);
    g_assert(container != NULL);
    g_free(container->name);
    container->name = g_strdup(name);
    container->attempt = attempt;
    g_free(container->image);
    container->image = g_strdup(image);
    g_mutex_unlock(&fake->lock);
}

void
fake_runtime_set_sandbox_state(FakeRuntime *fake, const char *sandbox_id, PlegPodSandboxState state)
{
    FakeSandbox *sandbox;

    g_mutex_lock(&fake->lock);
    sandbox = find_sandbox(fake, sandbox_id);
    g_assert(sandbox != NULL);
    sandbox->state = state;
    g_mutex_unlock(&fake->lock);
}

void
fake_runtime_set_sandbox_ips(FakeRuntime *fake, const char *sandbox_id, const char *const *ips)
{
    FakeSandbox *sandbox;

    g_mutex_lock(&fake->lock);
    sandbox = find_sandbox(fake, sandbox_id);
    g_assert(sandbox != NULL);
    g_strfreev(sandbox->ips);
    sandbox->ips = g_strdupv((char **)ips);
    g_mutex_unlock(&fake->lock);
}

void
fake_runtime_remove_sandbox(FakeRuntime *fake, const char *sandbox_id)
{
    FakeSandbox *sandbox;

    g_mutex_lock(&fake->lock);
    sandbox = find_sandbox(fake, sandbox_id);
    g_assert(sandbox != NULL);
    g_ptr_array_remove(fake->sandboxes, sandbox);
    g_mutex_unlock(&fake->lock);
}

static void
add_container(FakeRuntime *fake, const char *container_id, const char *sandbox_id,
              PlegContainerState state, gboolean duplicate)
{
    FakeContainer *container = g_new0(FakeContainer, 1);
    FakeSandbox *sandbox;

    container->id = g_strdup(container_id);
    container->sandbox_id = g_strdup(sandbox_id);
    container->state = state;
    g_mutex_lock(&fake->lock);
    g_assert((find_container(fake, container_id) != NULL) == duplicate);
    sandbox = find_sandbox(fake, sandbox_id);
    container->pod_uid = sandbox ? g_strdup(sandbox->uid) : NULL;
    container->created_at_ns = fake->next_time++;
    if (state == PLEG_CONTAINER_STATE_RUNNING || state == PLEG_CONTAINER_STATE_EXITED)
        container->started_at_ns = container->created_at_ns;
    g_ptr_array_add(fake->containers, container);
    g_mutex_unlock(&fake->lock);
}

void
fake_runtime_add_container(FakeRuntime *fake, const char *container_id, const char *sandbox_id,
                           PlegContainerState state)
{
    add_container(fake, container_id, sandbox_id, state, FALSE);
}

void
fake_runtime_add_duplicate_container(FakeRuntime *fake, const char *container_id,
                                     const char *sandbox_id, PlegContainerState state)
{
    add_container(fake, container_id, sandbox_id, state, TRUE);
}

void
fake_runtime_set_container_state(FakeRuntime *fake, const char *container_id,
                                 PlegContainerState state)
{
    FakeContainer *container;

    g_mutex_lock(&fake->lock);
    container = find_container(fake, container_id);
    g_assert(container != NULL);
    if (state == PLEG_CONTAINER_STATE_RUNNING && container->started_at_ns == 0)
        container->started_at_ns = fake->next_time++;
    container->state = state;
    g_mutex_unlock(&fake->lock);
}

void
fake_runtime_exit_container(FakeRuntime *fake, const char *container_id, gint32 exit_code,
                            const char *reason, gint64 finished_at_ns)
{
    FakeContainer *container;

    g_mutex_lock(&fake->lock);
    container = find_container(fake, container_id);
    g_assert(container != NULL);
    container->state = PLEG_CONTAINER_STATE_EXITED;
    container->exit_code = exit_code;
    g_free(container->reason);
    container->reason = g_strdup(reason);
    container->finished_at_ns = finished_at_ns;
    g_mutex_unlock(&fake->lock);
}

void
fake_runtime_remove_container(FakeRuntime *fake, const char *container_id)
{
    FakeContainer *container;

    g_mutex_lock(&fake->lock);
    container = find_container(fake, container_id);
    g_assert(container != NULL);
    g_ptr_array_remove(fake->containers, container);
    g_mutex_unlock(&fake->lock);
}

gboolean
fake_runtime_lookup_container(FakeRuntime *fake, const char *container_id,
                              PlegContainerState *ret_state)
{
    FakeContainer *container;
    gboolean found;

    g_mutex_lock(&fake->lock);
    container = find_container(fake, container_id);
    found = container != NULL;
    if (found && ret_state)
        *ret_state = container->state;
    g_mutex_unlock(&fake->lock);
    return found;
}

static void
add_fault(FakeRuntime *fake, FaultKind kind, FakeRuntimeOp op, const char *id, gint64 timeout_usec,
          int times)
{
    Fault *fault;

    g_assert(op < FAKE_OP_N);
    if (times == 0)
        return;
    fault = g_new0(Fault, 1);
    fault->kind = kind;
    fault->op = op;
    fault->id = g_strdup(id);
    fault->timeout_usec = timeout_usec;
    fault->times = times;
    g_mutex_lock(&fake->lock);
    g_ptr_array_add(fake->faults, fault);
    g_mutex_unlock(&fake->lock);
}

void
fake_runtime_fail(FakeRuntime *fake, FakeRuntimeOp op, const char *id, int times)
{
    add_fault(fake, FAULT_FAIL, op, id, 0, times);
}

void
fake_runtime_hang(FakeRuntime *fake, FakeRuntimeOp op, const char *id, gint64 timeout_usec,
                  int times)
{
    add_fault(fake, FAULT_HANG, op, id, timeout_usec, times);
}

void
fake_runtime_block(FakeRuntime *fake, FakeRuntimeOp op, const char *id)
{
    add_fault(fake, FAULT_BLOCK, op, id, 0, -1);
}

gboolean
fake_runtime_wait_blocked(FakeRuntime *fake, gint64 timeout_usec)
{
    gint64 end_time = g_get_monotonic_time() + timeout_usec;
    gboolean blocked;

    g_mutex_lock(&fake->lock);
    while (fake->n_blocked == 0) {
        if (!g_cond_wait_until(&fake->cond, &fake->lock, end_time))
            break;
    }
    blocked = fake->n_blocked > 0;
    g_mutex_unlock(&fake->lock);
    return blocked;
}

gboolean
fake_runtime_wait_blocked_count(FakeRuntime *fake, guint n, gint64 timeout_usec)
{
    gint64 end_time = g_get_monotonic_time() + timeout_usec;
    gboolean reached;

    g_mutex_lock(&fake->lock);
    while (fake->n_blocked < n) {
        if (!g_cond_wait_until(&fake->cond, &fake->lock, end_time))
            break;
    }
    reached = fake->n_blocked >= n;
    g_mutex_unlock(&fake->lock);
    return reached;
}

guint
fake_runtime_get_max_status_in_flight(FakeRuntime *fake)
{
    guint n;

    g_mutex_lock(&fake->lock);
    n = fake->max_status_in_flight;
    g_mutex_unlock(&fake->lock);
    return n;
}

static void
remove_faults(FakeRuntime *fake, gboolean only_blocks)
{
    for (guint i = fake->faults->len; i > 0; i--) {
        Fault *fault = g_ptr_array_index(fake->faults, i - 1);
        if (!only_blocks || fault->kind == FAULT_BLOCK)
            g_ptr_array_remove_index(fake->faults, i - 1);
    }
    fake->unblock_generation++;
    g_cond_broadcast(&fake->cond);
}

void
fake_runtime_unblock(FakeRuntime *fake)
{
    g_mutex_lock(&fake->lock);
    remove_faults(fake, TRUE);
    g_mutex_unlock(&fake->lock);
}

void
fake_runtime_clear_faults(FakeRuntime *fake)
{
    g_mutex_lock(&fake->lock);
    remove_faults(fake, FALSE);
    g_mutex_unlock(&fake->lock);
}

guint
fake_runtime_get_call_count(FakeRuntime *fake, FakeRuntimeOp op)
{
    guint n;

    g_assert(op < FAKE_OP_N);
    g_mutex_lock(&fake->lock);
    n = fake->call_counts[op];
    g_mutex_unlock(&fake->lock);
    return n;
}

guint
fake_runtime_get_call_count_for(FakeRuntime *fake, FakeRuntimeOp op, const char *id)
{
    guint n;

    g_assert(op < FAKE_OP_N && id != NULL);
    g_mutex_lock(&fake->lock);
    n = GPOINTER_TO_UINT(g_hash_table_lookup(fake->call_counts_by_id[op], id));
    g_mutex_unlock(&fake->lock);
    return n;
}

gint64
fake_clock_now(gpointer clock)
{
    FakeClock *fake_clock = clock;

    return __atomic_load_n(&fake_clock->now_ns, __ATOMIC_SEQ_CST);
}

void
fake_clock_set(FakeClock *clock, gint64 now_ns)
{
    __atomic_store_n(&clock->now_ns, now_ns, __ATOMIC_SEQ_CST);
}

void
fake_clock_advance(FakeClock *clock, gint64 usec)
{
    __atomic_add_fetch(&clock->now_ns, usec * 1000, __ATOMIC_SEQ_CST);
}
