/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cri-sim: the runtime model.  Pod sandboxes and containers in memory, their labels, and every
 * state change the C API, the commands and the RPCs make; each change emits its natural events
 * (cri-sim-events.c).  Functions without "cri_sim_" run with the lock held.
 */
#include "cri-sim-private.h"

#define DEFAULT_IMAGE "docker.io/library/busybox:latest"

/* ---- labels: a flat key, value list ---- */

static GPtrArray *
labels_new(const char *const *pairs)
{
    GPtrArray *labels = g_ptr_array_new_with_free_func(g_free);

    for (gsize i = 0; pairs && pairs[i] && pairs[i + 1]; i += 2) {
        g_ptr_array_add(labels, g_strdup(pairs[i]));
        g_ptr_array_add(labels, g_strdup(pairs[i + 1]));
    }
    return labels;
}

const char *
sim_labels_get(GPtrArray *labels, const char *key)
{
    for (guint i = 0; i + 1 < labels->len; i += 2)
        if (g_str_equal(labels->pdata[i], key))
            return labels->pdata[i + 1];
    return NULL;
}

static void
labels_set(GPtrArray *labels, const char *key, const char *value)
{
    for (guint i = 0; i + 1 < labels->len; i += 2) {
        if (!g_str_equal(labels->pdata[i], key))
            continue;
        if (value) {
            g_free(labels->pdata[i + 1]);
            labels->pdata[i + 1] = g_strdup(value);
        } else {
            g_ptr_array_remove_range(labels, i, 2);
        }
        return;
    }
    if (value) {
        g_ptr_array_add(labels, g_strdup(key));
        g_ptr_array_add(labels, g_strdup(value));
    }
}

/* ---- pods and containers ---- */

void
sim_container_free(Container *container)
{
    g_free(container->id);
    g_free(container->name);
    g_free(container->image);
    g_free(container->reason);
    g_ptr_array_unref(container->labels);
    g_free(container);
}

void
sim_pod_free(Pod *pod)
{
    g_free(pod->id);
    g_free(pod->uid);
    g_free(pod->name);
    g_free(pod->namespace_);
    g_free(pod->ip);
    g_free(pod->additional_ip);
    g_ptr_array_unref(pod->labels);
    g_ptr_array_unref(pod->containers);
    g_free(pod);
}

char *
sim_generate_id(CriSim *self, const char *prefix)
{
    for (;;) {
        char *id = g_strdup_printf("%s%u", prefix, ++self->next_id);

        if (!g_hash_table_contains(self->pods_by_id, id) &&
            !g_hash_table_contains(self->containers_by_id, id))
            return id;
        g_free(id);
    }
}

static Pod *
find_pod_by_uid(CriSim *self, const char *uid, GError **error)
{
    Pod *pod = uid ? g_hash_table_lookup(self->pods_by_uid, uid) : NULL;

    if (!pod)
        g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_NOT_FOUND, "no pod with uid \"%s\"",
                    uid ? uid : "");
    return pod;
}

static Container *
find_container(CriSim *self, const char *id, GError **error)
{
    Container *container = id ? g_hash_table_lookup(self->containers_by_id, id) : NULL;

    if (!container)
        g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_NOT_FOUND, "no container \"%s\"",
                    id ? id : "");
    return container;
}

static const char *
container_state_name(CriSimContainerState state)
{
    static const char *const names[] = {"CREATED", "RUNNING", "EXITED", "UNKNOWN"};

    return (guint)state < G_N_ELEMENTS(names) ? names[state] : "?";
}

/* ---- state changes (lock held) ---- */

Pod *
sim_pod_add(CriSim *self, const CriSimPodSpec *spec, GError **error)
{
    g_autofree char *id = NULL;
    Pod *pod;

    if (!spec->uid || !*spec->uid) {
        g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_SYNTAX, "a pod needs a uid");
        return NULL;
    }
    id = spec->id ? g_strdup(spec->id) : g_strconcat("sb-", spec->uid, NULL);
    if (g_hash_table_contains(self->pods_by_id, id) ||
        g_hash_table_contains(self->containers_by_id, id)) {
        g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_EXISTS, "id \"%s\" is taken", id);
        return NULL;
    }

    pod = g_new0(Pod, 1);
    pod->id = g_steal_pointer(&id);
    pod->uid = g_strdup(spec->uid);
    pod->name = spec->name ? g_strdup(spec->name) : g_strconcat("pod-", spec->uid, NULL);
    pod->namespace_ = g_strdup(spec->namespace_ ? spec->namespace_ : "default");
    pod->attempt = spec->attempt;
    pod->not_ready = spec->not_ready;
    pod->created_at = spec->created_at_ns ? spec->created_at_ns : sim_now_ns();
    pod->ip = g_strdup(spec->ip);
    pod->additional_ip = g_strdup(spec->additional_ip);
    if (spec->labels) {
        pod->labels = labels_new(spec->labels);
    } else {
        pod->labels = labels_new(NULL);
        labels_set(pod->labels, LABEL_POD_UID, pod->uid);
        labels_set(pod->labels, LABEL_POD_NAME, pod->name);
        labels_set(pod->labels, LABEL_POD_NS, pod->namespace_);
    }
    pod->containers = g_ptr_array_new();
    g_ptr_array_add(self->pods, pod);
    g_hash_table_insert(self->pods_by_id, pod->id, pod);
    g_hash_table_insert(self->pods_by_uid, pod->uid, pod);

    sim_sandbox_event(self, CRI_SIM_EVENT_CREATED, pod);
    if (!pod->not_ready)
        sim_sandbox_event(self, CRI_SIM_EVENT_STARTED, pod);
    return pod;
}

Container *
sim_container_add(CriSim *self, Pod *pod, const CriSimContainerSpec *spec, char *generated_id,
              GError **error)
{
    g_autofree char *id = generated_id;
    Container *container;
    gint64 now = sim_now_ns();

    if (!id)
        id = spec->id ? g_strdup(spec->id) : sim_generate_id(self, self->container_prefix);
    if (g_hash_table_contains(self->pods_by_id, id) ||
        g_hash_table_contains(self->containers_by_id, id)) {
        g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_EXISTS, "id \"%s\" is taken", id);
        return NULL;
    }

    container = g_new0(Container, 1);
    container->id = g_steal_pointer(&id);
    container->pod = pod;
    container->name = g_strdup(spec->name ? spec->name : container->id);
    container->image = g_strdup(spec->image ? spec->image : DEFAULT_IMAGE);
    container->attempt = spec->attempt;
    container->state = spec->state;
    container->created_at = spec->created_at_ns ? spec->created_at_ns : now;
    if (spec->state == CRI_SIM_CONTAINER_RUNNING || spec->state == CRI_SIM_CONTAINER_EXITED)
        container->started_at = spec->started_at_ns ? spec->started_at_ns : container->created_at;
    if (spec->state == CRI_SIM_CONTAINER_EXITED) {
        container->finished_at = spec->finished_at_ns ? spec->finished_at_ns : now;
        container->exit_code = spec->exit_code;
    }
    container->reason = g_strdup(spec->reason);
    if (spec->labels) {
        container->labels = labels_new(spec->labels);
    } else {
        container->labels = labels_new(NULL);
        labels_set(container->labels, LABEL_POD_UID, pod->uid);
        labels_set(container->labels, LABEL_POD_NAME, pod->name);
        labels_set(container->labels, LABEL_POD_NS, pod->namespace_);
        labels_set(container->labels, LABEL_CONTAINER, container->name);
    }
    g_ptr_array_add(self->containers, container);
    g_ptr_array_add(pod->containers, container);
    g_hash_table_insert(self->containers_by_id, container->id, container);

    sim_natural_event(self, CRI_SIM_EVENT_CREATED, container->id, NULL);
    if (container->state == CRI_SIM_CONTAINER_RUNNING || container->state == CRI_SIM_CONTAINER_EXITED)
        sim_natural_event(self, CRI_SIM_EVENT_STARTED, container->id, NULL);
    if (container->state == CRI_SIM_CONTAINER_EXITED)
        sim_natural_event(self, CRI_SIM_EVENT_STOPPED, container->id, NULL);
    return container;
}

gboolean
sim_container_start(CriSim *self, Container *container, GError **error)
{
    if (container->state != CRI_SIM_CONTAINER_CREATED) {
        g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_STATE,
                    "container \"%s\" is %s, not CREATED", container->id,
                    container_state_name(container->state));
        return FALSE;
    }
    container->state = CRI_SIM_CONTAINER_RUNNING;
    container->started_at = sim_now_ns();
    sim_natural_event(self, CRI_SIM_EVENT_STARTED, container->id, NULL);
    return TRUE;
}

gboolean
sim_container_exit(CriSim *self, Container *container, int exit_code, const char *reason,
               GError **error)
{
    if (container->state == CRI_SIM_CONTAINER_EXITED) {
        g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_STATE, "container \"%s\" has exited",
                    container->id);
        return FALSE;
    }
    container->state = CRI_SIM_CONTAINER_EXITED;
    container->finished_at = sim_now_ns();
    container->exit_code = exit_code;
    g_free(container->reason);
    container->reason = g_strdup(reason ? reason : exit_code == 0 ? "Completed" : "Error");
    sim_natural_event(self, CRI_SIM_EVENT_STOPPED, container->id, NULL);
    return TRUE;
}

void
sim_container_remove(CriSim *self, Container *container)
{
    Pod *pod = container->pod;
    g_autofree char *id = g_strdup(container->id);

    g_ptr_array_remove(pod->containers, container);
    g_hash_table_remove(self->containers_by_id, container->id);
    g_ptr_array_remove(self->containers, container); /* frees */
    sim_natural_event(self, CRI_SIM_EVENT_DELETED, id, pod);
}

void
sim_pod_stop(CriSim *self, Pod *pod)
{
    for (guint i = 0; i < pod->containers->len; i++) {
        Container *container = pod->containers->pdata[i];

        if (container->state == CRI_SIM_CONTAINER_RUNNING)
            sim_container_exit(self, container, 137, "Error", NULL);
    }
    if (!pod->not_ready) {
        pod->not_ready = TRUE;
        sim_sandbox_event(self, CRI_SIM_EVENT_STOPPED, pod);
    }
}

void
sim_pod_remove(CriSim *self, Pod *pod)
{
    sim_pod_stop(self, pod);
    while (pod->containers->len > 0)
        sim_container_remove(self, pod->containers->pdata[pod->containers->len - 1]);
    sim_sandbox_event(self, CRI_SIM_EVENT_DELETED, pod);

    g_hash_table_remove(self->pods_by_id, pod->id);
    if (g_hash_table_lookup(self->pods_by_uid, pod->uid) == pod) {
        g_hash_table_remove(self->pods_by_uid, pod->uid);
        /* An older sandbox of the same pod becomes the one its uid names. */
        for (guint i = self->pods->len; i > 0; i--) {
            Pod *other = self->pods->pdata[i - 1];

            if (other != pod && g_str_equal(other->uid, pod->uid)) {
                g_hash_table_insert(self->pods_by_uid, other->uid, other);
                break;
            }
        }
    }
    g_ptr_array_remove(self->pods, pod); /* frees */
}

/* ---- public state changes ---- */

gboolean
cri_sim_add_pod_full(CriSim *self, const CriSimPodSpec *spec, char **ret_id, GError **error)
{
    Pod *pod;

    g_mutex_lock(&self->lock);
    pod = sim_pod_add(self, spec, error);
    if (pod && ret_id)
        *ret_id = g_strdup(pod->id);
    g_mutex_unlock(&self->lock);
    return pod != NULL;
}

gboolean
cri_sim_add_pod(CriSim *self, const char *uid, const char *name, GError **error)
{
    CriSimPodSpec spec = {.uid = uid, .name = name};
    gboolean ok;

    g_mutex_lock(&self->lock);
    if (uid && g_hash_table_contains(self->pods_by_uid, uid)) {
        g_set_error(error, CRI_SIM_ERROR, CRI_SIM_ERROR_EXISTS, "pod \"%s\" exists", uid);
        ok = FALSE;
    } else {
        ok = sim_pod_add(self, &spec, error) != NULL;
    }
    g_mutex_unlock(&self->lock);
    return ok;
}

gboolean
cri_sim_add_container_full(CriSim *self, const CriSimContainerSpec *spec, char **ret_id,
                           GError **error)
{
    Container *container = NULL;
    Pod *pod;

    g_mutex_lock(&self->lock);
    pod = find_pod_by_uid(self, spec->pod_uid, error);
    if (pod)
        container = sim_container_add(self, pod, spec, NULL, error);
    if (container && ret_id)
        *ret_id = g_strdup(container->id);
    g_mutex_unlock(&self->lock);
    return container != NULL;
}

gboolean
cri_sim_add_container(CriSim *self, const char *pod_uid, const char *id, const char *name,
                      GError **error)
{
    CriSimContainerSpec spec = {.pod_uid = pod_uid, .id = id, .name = name};

    return cri_sim_add_container_full(self, &spec, NULL, error);
}

gboolean
cri_sim_start_container(CriSim *self, const char *id, GError **error)
{
    Container *container;
    gboolean ok;

    g_mutex_lock(&self->lock);
    container = find_container(self, id, error);
    ok = container && sim_container_start(self, container, error);
    g_mutex_unlock(&self->lock);
    return ok;
}

gboolean
cri_sim_exit_container(CriSim *self, const char *id, int exit_code, const char *reason,
                       GError **error)
{
    Container *container;
    gboolean ok;

    g_mutex_lock(&self->lock);
    container = find_container(self, id, error);
    ok = container && sim_container_exit(self, container, exit_code, reason, error);
    g_mutex_unlock(&self->lock);
    return ok;
}

gboolean
cri_sim_remove_container(CriSim *self, const char *id, GError **error)
{
    Container *container;

    g_mutex_lock(&self->lock);
    container = find_container(self, id, error);
    if (container)
        sim_container_remove(self, container);
    g_mutex_unlock(&self->lock);
    return container != NULL;
}

gboolean
cri_sim_stop_pod(CriSim *self, const char *pod_uid, GError **error)
{
    Pod *pod;

    g_mutex_lock(&self->lock);
    pod = find_pod_by_uid(self, pod_uid, error);
    if (pod)
        sim_pod_stop(self, pod);
    g_mutex_unlock(&self->lock);
    return pod != NULL;
}

gboolean
cri_sim_remove_pod(CriSim *self, const char *pod_uid, GError **error)
{
    Pod *pod;

    g_mutex_lock(&self->lock);
    pod = find_pod_by_uid(self, pod_uid, error);
    if (pod)
        sim_pod_remove(self, pod);
    g_mutex_unlock(&self->lock);
    return pod != NULL;
}

gboolean
cri_sim_set_container_label(CriSim *self, const char *id, const char *key, const char *value,
                            GError **error)
{
    Container *container;

    g_mutex_lock(&self->lock);
    container = find_container(self, id, error);
    if (container)
        labels_set(container->labels, key, value);
    g_mutex_unlock(&self->lock);
    return container != NULL;
}

void
cri_sim_bulk(CriSim *self, guint n_pods, guint containers_per_pod)
{
    cri_sim_bulk_full(self, n_pods, containers_per_pod, 0);
}

void
cri_sim_bulk_full(CriSim *self, guint n_pods, guint containers_per_pod, guint annotation_bytes)
{
    gboolean auto_events;

    g_mutex_lock(&self->lock);
    auto_events = self->auto_events;
    self->auto_events = FALSE;
    for (guint i = 0; i < n_pods; i++) {
        g_autofree char *uid = NULL;
        g_autofree char *sandbox_id = NULL;
        CriSimPodSpec pod_spec = {0};
        Pod *pod;

        do {
            g_free(uid);
            uid = g_strdup_printf("bulk-%u", self->next_bulk++);
        } while (g_hash_table_contains(self->pods_by_uid, uid));
        sandbox_id = sim_generate_id(self, "sb-bulk-");
        pod_spec.id = sandbox_id;
        pod_spec.uid = uid;
        pod = sim_pod_add(self, &pod_spec, NULL);
        g_assert(pod);
        for (guint c = 0; c < containers_per_pod; c++) {
            CriSimContainerSpec spec = {.state = CRI_SIM_CONTAINER_RUNNING};
            g_autofree char *id = g_strdup_printf("%s-%u", uid, c);

            Container *container;

            spec.name = id;
            container = sim_container_add(self, pod, &spec, g_steal_pointer(&id), NULL);
            if (container)
                container->padding_bytes = annotation_bytes;
            else
                g_debug("bulk: container of %s not added", uid);
        }
    }
    self->auto_events = auto_events;
    g_mutex_unlock(&self->lock);
}

char *
cri_sim_get_sandbox_id(CriSim *self, const char *pod_uid)
{
    Pod *pod;
    char *id;

    g_mutex_lock(&self->lock);
    pod = g_hash_table_lookup(self->pods_by_uid, pod_uid);
    id = pod ? g_strdup(pod->id) : NULL;
    g_mutex_unlock(&self->lock);
    return id;
}

gboolean
cri_sim_get_container_state(CriSim *self, const char *id, CriSimContainerState *ret_state)
{
    Container *container;

    g_mutex_lock(&self->lock);
    container = g_hash_table_lookup(self->containers_by_id, id);
    if (container && ret_state)
        *ret_state = container->state;
    g_mutex_unlock(&self->lock);
    return container != NULL;
}

guint
cri_sim_get_n_pods(CriSim *self)
{
    guint n;

    g_mutex_lock(&self->lock);
    n = self->pods->len;
    g_mutex_unlock(&self->lock);
    return n;
}

guint
cri_sim_get_n_containers(CriSim *self)
{
    guint n;

    g_mutex_lock(&self->lock);
    n = self->containers->len;
    g_mutex_unlock(&self->lock);
    return n;
}
