/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CRI response bytes -> libpleg's decoding (lib/cri/cri-decode.c) -> a Generic PLEG relist.
 *
 * The input is a sequence of records, each one byte of kind, a 16-bit little-endian length
 * and that many bytes of payload (a short last record takes what is left):
 *   kind % 6 == 0  ListPodSandboxResponse: the runtime's sandbox listing from now on
 *               1  ListContainersResponse: the container listing from now on
 *               2  the answer to the next PodSandboxStatus call for one id: a byte of
 *                  length, the id, then a PodSandboxStatusResponse
 *               3  the same for ContainerStatus, with a ContainerStatusResponse
 *               4  a global relist (payload ignored)
 *               5  a per-pod relist of the pod whose UID is the payload
 * A payload that does not unpack makes the calls it answers fail, as a runtime answering
 * garbage would (the real client fails them the same way).  Status calls with no recorded
 * answer are answered from the listing, or NOT_FOUND.  Bytes come from the runtime: anything
 * goes, including answers about other ids than the one asked.  The PLEG reconciles pods on
 * several threads: answers are per id, so that an input decides the same way every run.
 *
 * Checked: no crash or sanitizer report; a global relist succeeds exactly when both listings
 * decoded, and a failed one leaves the last relist time alone; every delivered event has a
 * deliverable type, names a pod UID and (but for PodSync) an id that some listing held; and
 * once the runtime is stable (same listing, every status answered), a relist finds nothing,
 * global or per pod (a per-pod relist sees the pod as a global one does, unless the listing
 * gives one sandbox id to two pods).
 */
#include <glib.h>
#include <string.h>

#include <pleg/pleg.h>

#include "cri-private.h"
#include "fuzz-target.h"

#define MAX_RELISTS 32

typedef enum {
    RECORD_SANDBOXES,
    RECORD_CONTAINERS,
    RECORD_SANDBOX_STATUS,
    RECORD_CONTAINER_STATUS,
    RECORD_RELIST,
    RECORD_RELIST_POD,
    N_RECORDS,
} RecordKind;

/* A status call's answer: a decoded status, or NULL for an error. */
typedef struct {
    gpointer status;
    char *error;
} Answer;

typedef struct {
    GPtrArray *sandboxes;  /* PlegPodSandbox, or NULL: the listing fails */
    GPtrArray *containers; /* PlegContainer, or NULL: the listing fails */
    GMutex lock;                  /* the answers are taken from reconciling threads */
    GHashTable *sandbox_answers;   /* id -> GQueue of Answer */
    GHashTable *container_answers; /* id -> GQueue of Answer */
    /* Every id and pod UID any listing held (listing ids, event names). */
    GHashTable *ids;
    GHashTable *uids;
    /* The sandbox listing names one sandbox id for two pods. */
    gboolean ambiguous_sandboxes;
} FuzzRuntime;

static void
answer_free(gpointer data, gboolean sandbox)
{
    Answer *answer = data;

    if (sandbox)
        pleg_pod_sandbox_status_free(answer->status);
    else
        pleg_container_status_free(answer->status);
    g_free(answer->error);
    g_free(answer);
}

static void
sandbox_answer_free(gpointer data)
{
    answer_free(data, TRUE);
}

static void
container_answer_free(gpointer data)
{
    answer_free(data, FALSE);
}

static void
sandbox_queue_free(gpointer queue)
{
    g_queue_free_full(queue, sandbox_answer_free);
}

static void
container_queue_free(gpointer queue)
{
    g_queue_free_full(queue, container_answer_free);
}

static Answer *
take_answer(FuzzRuntime *rt, GHashTable *answers, const char *id)
{
    GQueue *queue;
    Answer *answer = NULL;

    g_mutex_lock(&rt->lock);
    queue = g_hash_table_lookup(answers, id);
    if (queue)
        answer = g_queue_pop_head(queue);
    g_mutex_unlock(&rt->lock);
    return answer;
}

static void
put_answer(GHashTable *answers, const char *id, Answer *answer)
{
    GQueue *queue = g_hash_table_lookup(answers, id);

    if (!queue) {
        queue = g_queue_new();
        g_hash_table_insert(answers, g_strdup(id), queue);
    }
    g_queue_push_tail(queue, answer);
}

static void
set_error(GError **error, int code, const char *what)
{
    g_set_error(error, PLEG_CRI_ERROR, code, "fuzz: %s", what);
}

static GPtrArray *
copy_array(GPtrArray *array, GBoxedCopyFunc copy, GDestroyNotify free_func)
{
    GPtrArray *ret = g_ptr_array_new_full(array->len, free_func);

    for (guint i = 0; i < array->len; i++)
        g_ptr_array_add(ret, copy(array->pdata[i]));
    return ret;
}

static gboolean
rt_list_pod_sandboxes(gpointer impl, GPtrArray **ret_sandboxes, GCancellable *cancellable,
                      GError **error)
{
    FuzzRuntime *rt = impl;

    if (!rt->sandboxes) {
        set_error(error, PLEG_CRI_ERROR_INTERNAL, "ListPodSandbox answer does not unpack");
        return FALSE;
    }
    *ret_sandboxes = copy_array(rt->sandboxes, (GBoxedCopyFunc)pleg_pod_sandbox_copy,
                                (GDestroyNotify)pleg_pod_sandbox_free);
    return TRUE;
}

static gboolean
rt_list_containers(gpointer impl, const char *pod_sandbox_id, GPtrArray **ret_containers,
                   GCancellable *cancellable, GError **error)
{
    FuzzRuntime *rt = impl;
    GPtrArray *ret;

    if (!rt->containers) {
        set_error(error, PLEG_CRI_ERROR_INTERNAL, "ListContainers answer does not unpack");
        return FALSE;
    }
    ret = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_container_free);
    for (guint i = 0; i < rt->containers->len; i++) {
        const PlegContainer *c = rt->containers->pdata[i];

        if (!pod_sandbox_id || g_strcmp0(c->pod_sandbox_id, pod_sandbox_id) == 0)
            g_ptr_array_add(ret, pleg_container_copy(c));
    }
    *ret_containers = ret;
    return TRUE;
}

static PlegPodSandboxStatus *
rt_pod_sandbox_status(gpointer impl, const char *pod_sandbox_id, GCancellable *cancellable,
                      GError **error)
{
    FuzzRuntime *rt = impl;
    Answer *answer = take_answer(rt, rt->sandbox_answers, pod_sandbox_id);

    if (answer) {
        PlegPodSandboxStatus *status = g_steal_pointer(&answer->status);

        if (!status)
            set_error(error, PLEG_CRI_ERROR_INTERNAL, answer->error);
        sandbox_answer_free(answer);
        return status;
    }
    for (guint i = 0; rt->sandboxes && i < rt->sandboxes->len; i++) {
        const PlegPodSandbox *s = rt->sandboxes->pdata[i];
        PlegPodSandboxStatus *status;

        if (g_strcmp0(s->id, pod_sandbox_id) != 0)
            continue;
        status = g_new0(PlegPodSandboxStatus, 1);
        status->id = g_strdup(s->id);
        status->name = g_strdup(s->name);
        status->uid = g_strdup(s->uid);
        status->namespace_ = g_strdup(s->namespace_);
        status->attempt = s->attempt;
        status->state = s->state;
        status->created_at_ns = s->created_at_ns;
        status->ips = g_new0(char *, 1);
        return status;
    }
    set_error(error, PLEG_CRI_ERROR_NOT_FOUND, "no such pod sandbox");
    return NULL;
}

static PlegContainerStatus *
rt_container_status(gpointer impl, const char *container_id, GCancellable *cancellable,
                    GError **error)
{
    FuzzRuntime *rt = impl;
    Answer *answer = take_answer(rt, rt->container_answers, container_id);

    if (answer) {
        PlegContainerStatus *status = g_steal_pointer(&answer->status);

        if (!status)
            set_error(error, PLEG_CRI_ERROR_INTERNAL, answer->error);
        container_answer_free(answer);
        return status;
    }
    for (guint i = 0; rt->containers && i < rt->containers->len; i++) {
        const PlegContainer *c = rt->containers->pdata[i];
        PlegContainerStatus *status;

        if (g_strcmp0(c->id, container_id) != 0)
            continue;
        status = g_new0(PlegContainerStatus, 1);
        status->id = g_strdup(c->id);
        status->name = g_strdup(c->name);
        status->attempt = c->attempt;
        status->state = c->state;
        status->created_at_ns = c->created_at_ns;
        status->image = g_strdup(c->image);
        status->image_ref = g_strdup(c->image_ref);
        return status;
    }
    set_error(error, PLEG_CRI_ERROR_NOT_FOUND, "no such container");
    return NULL;
}

static void
rt_finalize(gpointer impl)
{
}

static const PlegRuntimeVTable fuzz_runtime_vtable = {
    .size = sizeof(PlegRuntimeVTable),
    .list_pod_sandboxes = rt_list_pod_sandboxes,
    .list_containers = rt_list_containers,
    .pod_sandbox_status = rt_pod_sandbox_status,
    .container_status = rt_container_status,
    .finalize = rt_finalize,
};

static void
remember(GHashTable *set, const char *text)
{
    if (text)
        g_hash_table_add(set, g_strdup(text));
}

/* ---- the client's item-by-item reading (lib/cri/cri-items.c) against protobuf-c's ---- */

/* The payload in pieces of 0 to 63 bytes, as the slices of a received message might come. */
typedef struct {
    const uint8_t *data;
    gsize len, at;
    guint32 seed;
} Pieces;

static gboolean
next_piece(gpointer data, const guint8 **ret_data, gsize *ret_length)
{
    Pieces *pieces = data;
    gsize n;

    if (pieces->at >= pieces->len)
        return FALSE;
    pieces->seed = pieces->seed * 1103515245u + 12345u;
    n = MIN(pieces->len - pieces->at, (pieces->seed >> 16) % 64);
    *ret_data = pieces->data + pieces->at;
    *ret_length = n;
    pieces->at += n;
    return TRUE;
}

static void
add_sandbox_item(const ProtobufCMessage *item, gpointer sandboxes)
{
    g_ptr_array_add(sandboxes, cri_decode_pod_sandbox((gconstpointer)item));
}

static void
add_container_item(const ProtobufCMessage *item, gpointer containers)
{
    g_ptr_array_add(containers, cri_decode_container((gconstpointer)item));
}

/* Decodes @payload item by item as the CRI client does; NULL when that refuses it. */
static GPtrArray *
decode_items(const uint8_t *payload, gsize len, const ProtobufCMessageDescriptor *descriptor,
             CriItemFunc add, GDestroyNotify free_func)
{
    CriArenaPool *pool = cri_arena_pool_new(CRI_ARENA_POOL_CAP_BYTES);
    CriArena *arena = cri_arena_new(pool);
    Pieces pieces = {.data = payload, .len = len, .seed = (guint32)len};
    GPtrArray *items = g_ptr_array_new_with_free_func(free_func);

    if (!cri_unpack_items(next_piece, &pieces, len, descriptor, arena, add, items))
        g_clear_pointer(&items, g_ptr_array_unref);
    cri_arena_free(arena);
    cri_arena_pool_free(pool);
    return items;
}

static void
assert_same_sandboxes(const Runtime__V1__ListPodSandboxResponse *whole, GPtrArray *items)
{
    g_assert((whole != NULL) == (items != NULL));
    if (!whole)
        return;
    g_assert_cmpuint(whole->n_items, ==, items->len);
    for (size_t i = 0; i < whole->n_items; i++) {
        g_autoptr(PlegPodSandbox) a = cri_decode_pod_sandbox(whole->items[i]);
        const PlegPodSandbox *b = items->pdata[i];

        g_assert_cmpstr(a->id, ==, b->id);
        g_assert_cmpstr(a->name, ==, b->name);
        g_assert_cmpstr(a->uid, ==, b->uid);
        g_assert_cmpstr(a->namespace_, ==, b->namespace_);
        g_assert_cmpuint(a->attempt, ==, b->attempt);
        g_assert_cmpint(a->state, ==, b->state);
        g_assert_cmpint(a->created_at_ns, ==, b->created_at_ns);
    }
}

static void
assert_same_containers(const Runtime__V1__ListContainersResponse *whole, GPtrArray *items)
{
    g_assert((whole != NULL) == (items != NULL));
    if (!whole)
        return;
    g_assert_cmpuint(whole->n_containers, ==, items->len);
    for (size_t i = 0; i < whole->n_containers; i++) {
        g_autoptr(PlegContainer) a = cri_decode_container(whole->containers[i]);
        const PlegContainer *b = items->pdata[i];

        g_assert_cmpstr(a->id, ==, b->id);
        g_assert_cmpstr(a->pod_sandbox_id, ==, b->pod_sandbox_id);
        g_assert_cmpstr(a->name, ==, b->name);
        g_assert_cmpuint(a->attempt, ==, b->attempt);
        g_assert_cmpstr(a->image, ==, b->image);
        g_assert_cmpstr(a->image_ref, ==, b->image_ref);
        g_assert_cmpint(a->state, ==, b->state);
        g_assert_cmpint(a->created_at_ns, ==, b->created_at_ns);
        g_assert_cmpstr(a->pod_uid_label, ==, b->pod_uid_label);
    }
}

/* Replaces the sandbox listing with the decoded @payload, or with a failing one. */
static void
set_sandboxes(FuzzRuntime *rt, const uint8_t *payload, gsize len)
{
    g_autoptr(Runtime__V1__ListPodSandboxResponse) response =
        runtime__v1__list_pod_sandbox_response__unpack(NULL, len, payload);

    g_autoptr(GHashTable) pods_by_id = g_hash_table_new(g_str_hash, g_str_equal);
    g_autoptr(GPtrArray) items =
        decode_items(payload, len, &runtime__v1__list_pod_sandbox_response__descriptor,
                     add_sandbox_item, (GDestroyNotify)pleg_pod_sandbox_free);

    assert_same_sandboxes(response, items);
    g_clear_pointer(&rt->sandboxes, g_ptr_array_unref);
    rt->ambiguous_sandboxes = FALSE;
    if (!response)
        return;
    rt->sandboxes = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_sandbox_free);
    for (size_t i = 0; i < response->n_items; i++) {
        PlegPodSandbox *s = cri_decode_pod_sandbox(response->items[i]);
        const char *other_uid;

        if (s->id && s->uid && *s->uid) {
            if (g_hash_table_lookup_extended(pods_by_id, s->id, NULL, (gpointer *)&other_uid) &&
                g_strcmp0(other_uid, s->uid) != 0)
                rt->ambiguous_sandboxes = TRUE;
            g_hash_table_insert(pods_by_id, s->id, s->uid);
        }

        g_debug("sandbox %s pod %s state %d", s->id, s->uid ? s->uid : "-", s->state);

        remember(rt->ids, s->id);
        remember(rt->uids, s->uid);
        g_ptr_array_add(rt->sandboxes, s);
    }
}

static void
set_containers(FuzzRuntime *rt, const uint8_t *payload, gsize len)
{
    g_autoptr(Runtime__V1__ListContainersResponse) response =
        runtime__v1__list_containers_response__unpack(NULL, len, payload);
    g_autoptr(GPtrArray) items =
        decode_items(payload, len, &runtime__v1__list_containers_response__descriptor,
                     add_container_item, (GDestroyNotify)pleg_container_free);

    assert_same_containers(response, items);
    g_clear_pointer(&rt->containers, g_ptr_array_unref);
    if (!response)
        return;
    rt->containers = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_container_free);
    for (size_t i = 0; i < response->n_containers; i++) {
        PlegContainer *c = cri_decode_container(response->containers[i]);

        g_debug("container %s sandbox %s label %s state %d", c->id, c->pod_sandbox_id,
                c->pod_uid_label ? c->pod_uid_label : "-", c->state);

        remember(rt->ids, c->id);
        remember(rt->uids, c->pod_uid_label);
        g_ptr_array_add(rt->containers, c);
    }
}

/* Splits a status record into the id it answers for and the response bytes. */
static char *
answer_key(const uint8_t **payload, gsize *len)
{
    gsize id_len = *len > 0 ? MIN((gsize)(*payload)[0], *len - 1) : 0;
    char *id = g_strndup(*len > 0 ? (const char *)*payload + 1 : "", id_len);

    if (*len > 0) {
        *payload += 1 + id_len;
        *len -= 1 + id_len;
    }
    return id;
}

/* The real client's answers to a status call (lib/cri/pleg-cri-client.c): an unpack failure or a
 * response without a status is an error. */
static void
queue_sandbox_status(FuzzRuntime *rt, const uint8_t *payload, gsize len)
{
    g_autofree char *id = answer_key(&payload, &len);
    g_autoptr(Runtime__V1__PodSandboxStatusResponse) response =
        runtime__v1__pod_sandbox_status_response__unpack(NULL, len, payload);
    Answer *answer = g_new0(Answer, 1);

    if (!response)
        answer->error = g_strdup("PodSandboxStatus answer does not unpack");
    else if (!response->status)
        answer->error = g_strdup("PodSandboxStatus: the runtime answered without a status");
    else
        answer->status = cri_decode_pod_sandbox_status(response->status);
    put_answer(rt->sandbox_answers, id, answer);
}

static void
queue_container_status(FuzzRuntime *rt, const uint8_t *payload, gsize len)
{
    g_autofree char *id = answer_key(&payload, &len);
    g_autoptr(Runtime__V1__ContainerStatusResponse) response =
        runtime__v1__container_status_response__unpack(NULL, len, payload);
    Answer *answer = g_new0(Answer, 1);

    if (!response)
        answer->error = g_strdup("ContainerStatus answer does not unpack");
    else if (!response->status)
        answer->error = g_strdup("ContainerStatus: the runtime answered without a status");
    else
        answer->status = cri_decode_container_status(response->status);
    put_answer(rt->container_answers, id, answer);
}

/* Pops what the last relist delivered and checks each event.  Returns how many there were. */
static guint
check_events(FuzzRuntime *rt, PlegEventChannel *channel)
{
    PlegPodLifecycleEvent *event;
    guint n = 0;

    while ((event = pleg_event_channel_pop(channel, 0))) {
        g_debug("event %s pod %s container %s",
                pleg_pod_lifecycle_event_type_to_string(event->type), event->pod_uid,
                event->container_id ? event->container_id : "-");
        FUZZ_CHECK(event->type == PLEG_CONTAINER_STARTED || event->type == PLEG_CONTAINER_DIED ||
                       event->type == PLEG_CONTAINER_REMOVED || event->type == PLEG_POD_SYNC,
                   "only deliverable event types are delivered");
        FUZZ_CHECK(event->pod_uid && *event->pod_uid, "an event names its pod");
        FUZZ_CHECK(g_hash_table_contains(rt->uids, event->pod_uid),
                   "an event's pod UID was in a listing");
        if (event->type == PLEG_POD_SYNC) {
            FUZZ_CHECK(event->container_id == NULL, "PodSync names no container");
        } else {
            FUZZ_CHECK(event->container_id != NULL, "a container event names its container");
            FUZZ_CHECK(g_hash_table_contains(rt->ids, event->container_id),
                       "an event's container id was in a listing");
        }
        FUZZ_CHECK(event->relist_source < PLEG_RELIST_SOURCE_N, "a known relist source");
        pleg_pod_lifecycle_event_unref(event);
        n++;
    }
    return n;
}

static void
global_relist(FuzzRuntime *rt, PlegGeneric *pleg, PlegEventChannel *channel)
{
    g_autoptr(GError) error = NULL;
    gint64 last = pleg_generic_get_last_relist_time(pleg);
    gboolean listable = rt->sandboxes && rt->containers;
    gboolean ok = pleg_generic_relist(pleg, &error);

    FUZZ_CHECK(ok == listable, "a global relist succeeds exactly when the runtime lists");
    FUZZ_CHECK(ok == (error == NULL), "an error exactly on failure");
    if (!ok)
        FUZZ_CHECK(pleg_generic_get_last_relist_time(pleg) == last,
                   "a failed relist does not advance the last relist time");
    else
        FUZZ_CHECK(pleg_pod_cache_get_global_timestamp(pleg_generic_get_cache(pleg)) > 0,
                   "a successful relist sets the cache's global timestamp");
    check_events(rt, channel);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FuzzRuntime rt = {0};
    g_autoptr(PlegRuntime) runtime = NULL;
    g_autoptr(PlegGeneric) pleg = NULL;
    PlegGenericConfig config;
    PlegEventChannel *channel;
    gsize pos = 0;
    guint n_relists = 0;

    rt.sandboxes = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_sandbox_free);
    rt.containers = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_container_free);
    g_mutex_init(&rt.lock);
    rt.sandbox_answers = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, sandbox_queue_free);
    rt.container_answers =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, container_queue_free);
    rt.ids = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    rt.uids = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);

    runtime = pleg_runtime_new(&fuzz_runtime_vtable, &rt);
    /* Four status calls in flight, and GLib's idle pool threads kept: a pool thread new to an
     * input allocates GSlice's per-thread magazines, held only through thread-specific data,
     * which libFuzzer's per-input leak check then reports as a leak of GLib's (2032 bytes from
     * g_slice_alloc on a reconcile thread).  Threading is not this target's subject. */
    g_thread_pool_set_max_unused_threads(-1);
    pleg_generic_config_init(&config);
    config.max_status_calls_in_flight = 4;
    pleg = pleg_generic_new(runtime, &config, NULL);
    /* Drained after every relist, and larger than what one relist of an input can deliver: a
     * full channel is another subject. */
    channel = pleg_generic_subscribe(pleg, 1 << 16);

    while (pos < size) {
        RecordKind kind = data[pos++] % N_RECORDS;
        gsize len = 0;
        const uint8_t *payload;

        if (pos + 2 <= size) {
            len = (gsize)data[pos] | (gsize)data[pos + 1] << 8;
            pos += 2;
        } else {
            pos = size;
        }
        len = MIN(len, size - pos);
        payload = data + pos;
        pos += len;

        g_debug("record %d, %" G_GSIZE_FORMAT " bytes", kind, len);
        switch (kind) {
        case RECORD_SANDBOXES:
            set_sandboxes(&rt, payload, len);
            break;
        case RECORD_CONTAINERS:
            set_containers(&rt, payload, len);
            break;
        case RECORD_SANDBOX_STATUS:
            queue_sandbox_status(&rt, payload, len);
            break;
        case RECORD_CONTAINER_STATUS:
            queue_container_status(&rt, payload, len);
            break;
        case RECORD_RELIST:
            if (n_relists++ < MAX_RELISTS)
                global_relist(&rt, pleg, channel);
            break;
        case RECORD_RELIST_POD:
            if (n_relists++ < MAX_RELISTS) {
                g_autofree char *uid = g_strndup((const char *)payload, len);
                g_autoptr(GError) error = NULL;

                if (*uid && g_utf8_validate(uid, -1, NULL)) {
                    pleg_generic_relist_pod(pleg, uid, PLEG_RELIST_SOURCE_EVENTED_PLEG, &error);
                    check_events(&rt, channel);
                }
            }
            break;
        case N_RECORDS:
            g_assert_not_reached();
        }
    }

    /* A stable runtime: listings that list, every status answered from them.  The first relist
     * delivers what is left (and inspects again what failed); the second finds nothing. */
    g_hash_table_remove_all(rt.sandbox_answers);
    g_hash_table_remove_all(rt.container_answers);
    if (!rt.sandboxes)
        rt.sandboxes = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_pod_sandbox_free);
    if (!rt.containers)
        rt.containers = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_container_free);
    global_relist(&rt, pleg, channel);
    FUZZ_CHECK(pleg_generic_relist(pleg, NULL), "a stable runtime lists");
    FUZZ_CHECK(check_events(&rt, channel) == 0, "a stable runtime gives no events");
    /* A per-pod relist sees each pod as the global relist does.  Not when the runtime lists one
     * sandbox id for two pods: CRI ids are unique, and which pod such a sandbox's containers
     * belong to is a guess that a relist of one pod cannot make as a relist of all does. */
    if (!rt.ambiguous_sandboxes) {
        GHashTableIter iter;
        const char *uid;
        guint n = 0;

        g_hash_table_iter_init(&iter, rt.uids);
        while (g_hash_table_iter_next(&iter, (gpointer *)&uid, NULL) && n++ < 16) {
            FUZZ_CHECK(pleg_generic_relist_pod(pleg, uid, PLEG_RELIST_SOURCE_POST_SYNC, NULL),
                       "a stable runtime lists a pod");
            if (check_events(&rt, channel) != 0)
                fuzz_fail("a per-pod relist of pod %s found events a global relist did not", uid);
        }
    }

    pleg_generic_unsubscribe(pleg, channel);
    g_clear_pointer(&pleg, pleg_generic_free);
    g_clear_pointer(&runtime, pleg_runtime_unref);
    g_ptr_array_unref(rt.sandboxes);
    g_ptr_array_unref(rt.containers);
    g_hash_table_unref(rt.sandbox_answers);
    g_hash_table_unref(rt.container_answers);
    g_hash_table_unref(rt.ids);
    g_hash_table_unref(rt.uids);
    g_mutex_clear(&rt.lock);
    return 0;
}
