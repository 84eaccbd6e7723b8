/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz-make-seeds DIR: writes the binary seeds of the cri-listing and container-events targets
 * into DIR/cri-listing/ and DIR/container-events/ (tests/fuzz/corpus in the source tree; see
 * README.md).  Run it again after changing a seed here, and commit the bytes.
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cri-private.h"

/* cri-listing record kinds (cri-listing.c). */
enum { SANDBOXES, CONTAINERS, SANDBOX_STATUS, CONTAINER_STATUS, RELIST, RELIST_POD };

#define T0 G_GINT64_CONSTANT(1764547200000000000) /* 2025-12-01, in ns */

static void
add_record(GByteArray *out, guint8 kind, const guint8 *payload, gsize len)
{
    guint8 header[3] = {kind, (guint8)(len & 0xff), (guint8)(len >> 8)};

    g_assert(len <= 0xffff);
    g_byte_array_append(out, header, sizeof header);
    g_byte_array_append(out, payload, (guint)len);
}

/* @key: for a status answer, the id whose next status call it answers; else NULL. */
static void
add_message(GByteArray *out, guint8 kind, const char *key, const ProtobufCMessage *message)
{
    gsize key_len = key ? strlen(key) : 0;
    gsize prefix = key ? 1 + key_len : 0;
    gsize len = protobuf_c_message_get_packed_size(message);
    g_autofree guint8 *buf = g_malloc(prefix + len + 1);

    if (key) {
        g_assert(key_len <= 0xff);
        buf[0] = (guint8)key_len;
        memcpy(buf + 1, key, key_len);
    }
    protobuf_c_message_pack(message, buf + prefix);
    add_record(out, kind, buf, prefix + len);
}

/* A status answer for @key that is not a message. */
static void
add_raw_answer(GByteArray *out, guint8 kind, const char *key, const guint8 *bytes, gsize len)
{
    g_autoptr(GByteArray) payload = g_byte_array_new();
    guint8 key_len = (guint8)strlen(key);

    g_byte_array_append(payload, &key_len, 1);
    g_byte_array_append(payload, (const guint8 *)key, key_len);
    g_byte_array_append(payload, bytes, (guint)len);
    add_record(out, kind, payload->data, payload->len);
}

static void
add_relist(GByteArray *out)
{
    add_record(out, RELIST, NULL, 0);
}

/* ---- listings ---- */

typedef struct {
    const char *id;
    const char *uid;
    gboolean ready;
} SandboxSpec;

typedef struct {
    const char *id;
    const char *sandbox_id;
    const char *uid_label; /* NULL: none */
    Runtime__V1__ContainerState state;
} ContainerSpec;

static void
add_sandboxes(GByteArray *out, const SandboxSpec *specs, gsize n)
{
    Runtime__V1__ListPodSandboxResponse response = RUNTIME__V1__LIST_POD_SANDBOX_RESPONSE__INIT;
    g_autofree Runtime__V1__PodSandbox *items = g_new0(Runtime__V1__PodSandbox, n + 1);
    g_autofree Runtime__V1__PodSandboxMetadata *metas = g_new0(Runtime__V1__PodSandboxMetadata, n + 1);
    g_autofree Runtime__V1__PodSandbox **ptrs = g_new0(Runtime__V1__PodSandbox *, n + 1);

    for (gsize i = 0; i < n; i++) {
        items[i] = (Runtime__V1__PodSandbox)RUNTIME__V1__POD_SANDBOX__INIT;
        metas[i] = (Runtime__V1__PodSandboxMetadata)RUNTIME__V1__POD_SANDBOX_METADATA__INIT;
        metas[i].name = (char *)"pod";
        metas[i].uid = (char *)specs[i].uid;
        metas[i].namespace_ = (char *)"default";
        items[i].id = (char *)specs[i].id;
        items[i].metadata = &metas[i];
        items[i].state = specs[i].ready ? RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_READY
                                        : RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_NOTREADY;
        items[i].created_at = T0 + (gint64)i;
        ptrs[i] = &items[i];
    }
    response.n_items = n;
    response.items = ptrs;
    add_message(out, SANDBOXES, NULL, &response.base);
}

static void
add_containers(GByteArray *out, const ContainerSpec *specs, gsize n)
{
    Runtime__V1__ListContainersResponse response = RUNTIME__V1__LIST_CONTAINERS_RESPONSE__INIT;
    g_autofree Runtime__V1__Container *items = g_new0(Runtime__V1__Container, n + 1);
    g_autofree Runtime__V1__ContainerMetadata *metas = g_new0(Runtime__V1__ContainerMetadata, n + 1);
    g_autofree Runtime__V1__ImageSpec *images = g_new0(Runtime__V1__ImageSpec, n + 1);
    g_autofree Runtime__V1__Container__LabelsEntry *labels =
        g_new0(Runtime__V1__Container__LabelsEntry, n + 1);
    g_autofree Runtime__V1__Container__LabelsEntry **label_ptrs =
        g_new0(Runtime__V1__Container__LabelsEntry *, n + 1);
    g_autofree Runtime__V1__Container **ptrs = g_new0(Runtime__V1__Container *, n + 1);

    for (gsize i = 0; i < n; i++) {
        items[i] = (Runtime__V1__Container)RUNTIME__V1__CONTAINER__INIT;
        metas[i] = (Runtime__V1__ContainerMetadata)RUNTIME__V1__CONTAINER_METADATA__INIT;
        images[i] = (Runtime__V1__ImageSpec)RUNTIME__V1__IMAGE_SPEC__INIT;
        metas[i].name = (char *)"c";
        images[i].image = (char *)"localhost/pleg-test:latest";
        items[i].id = (char *)specs[i].id;
        items[i].pod_sandbox_id = (char *)specs[i].sandbox_id;
        items[i].metadata = &metas[i];
        items[i].image = &images[i];
        items[i].image_ref = (char *)"sha256:0123";
        items[i].state = specs[i].state;
        items[i].created_at = T0 + 1000 + (gint64)i;
        if (specs[i].uid_label) {
            labels[i] = (Runtime__V1__Container__LabelsEntry)RUNTIME__V1__CONTAINER__LABELS_ENTRY__INIT;
            labels[i].key = (char *)"io.kubernetes.pod.uid";
            labels[i].value = (char *)specs[i].uid_label;
            label_ptrs[i] = &labels[i];
            items[i].n_labels = 1;
            items[i].labels = &label_ptrs[i];
        }
        ptrs[i] = &items[i];
    }
    response.n_containers = n;
    response.containers = ptrs;
    add_message(out, CONTAINERS, NULL, &response.base);
}

static Runtime__V1__PodSandboxMetadata pod_metadata = RUNTIME__V1__POD_SANDBOX_METADATA__INIT;

static void
init_pod_metadata(const char *uid)
{
    pod_metadata = (Runtime__V1__PodSandboxMetadata)RUNTIME__V1__POD_SANDBOX_METADATA__INIT;
    pod_metadata.name = (char *)"pod";
    pod_metadata.uid = (char *)uid;
    pod_metadata.namespace_ = (char *)"default";
}

static void
add_sandbox_status(GByteArray *out, const char *id, const char *uid)
{
    Runtime__V1__PodSandboxStatusResponse response =
        RUNTIME__V1__POD_SANDBOX_STATUS_RESPONSE__INIT;
    Runtime__V1__PodSandboxStatus status = RUNTIME__V1__POD_SANDBOX_STATUS__INIT;
    Runtime__V1__PodSandboxNetworkStatus network = RUNTIME__V1__POD_SANDBOX_NETWORK_STATUS__INIT;
    Runtime__V1__PodIP ip = RUNTIME__V1__POD_IP__INIT;
    Runtime__V1__PodIP *ips[] = {&ip};

    init_pod_metadata(uid);
    status.id = (char *)id;
    status.metadata = &pod_metadata;
    status.state = RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_READY;
    status.created_at = T0;
    network.ip = (char *)"10.0.0.7";
    ip.ip = (char *)"fd00::7";
    network.n_additional_ips = 1;
    network.additional_ips = ips;
    status.network = &network;
    response.status = &status;
    add_message(out, SANDBOX_STATUS, id, &response.base);
}

static void
fill_container_status(Runtime__V1__ContainerStatus *status, Runtime__V1__ContainerMetadata *meta,
                      const char *id, Runtime__V1__ContainerState state, int exit_code)
{
    *status = (Runtime__V1__ContainerStatus)RUNTIME__V1__CONTAINER_STATUS__INIT;
    *meta = (Runtime__V1__ContainerMetadata)RUNTIME__V1__CONTAINER_METADATA__INIT;
    meta->name = (char *)"c";
    status->id = (char *)id;
    status->metadata = meta;
    status->state = state;
    status->created_at = T0 + 1000;
    status->started_at = T0 + 2000;
    if (state == RUNTIME__V1__CONTAINER_STATE__CONTAINER_EXITED) {
        status->finished_at = T0 + 3000;
        status->exit_code = exit_code;
        status->reason = (char *)"Error";
        status->message = (char *)"exited";
    }
}

static void
add_container_status(GByteArray *out, const char *key, const char *id,
                     Runtime__V1__ContainerState state, int exit_code)
{
    Runtime__V1__ContainerStatusResponse response = RUNTIME__V1__CONTAINER_STATUS_RESPONSE__INIT;
    Runtime__V1__ContainerStatus status;
    Runtime__V1__ContainerMetadata meta;

    fill_container_status(&status, &meta, id, state, exit_code);
    response.status = &status;
    add_message(out, CONTAINER_STATUS, key, &response.base);
}

#define RUNNING RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING
#define EXITED  RUNTIME__V1__CONTAINER_STATE__CONTAINER_EXITED
#define CREATED RUNTIME__V1__CONTAINER_STATE__CONTAINER_CREATED
#define UNKNOWN RUNTIME__V1__CONTAINER_STATE__CONTAINER_UNKNOWN

static void
write_seed(const char *dir, const char *name, GByteArray *bytes)
{
    g_autofree char *path = g_build_filename(dir, name, NULL);
    g_autoptr(GError) error = NULL;

    if (!g_file_set_contents(path, (const char *)bytes->data, bytes->len, &error)) {
        fprintf(stderr, "make-seeds: %s\n", error->message);
        exit(EXIT_FAILURE);
    }
    printf("%s (%u bytes)\n", path, bytes->len);
    g_byte_array_set_size(bytes, 0);
}

static void
cri_listing_seeds(const char *dir)
{
    g_autoptr(GByteArray) b = g_byte_array_new();
    const SandboxSpec one_pod[] = {{"sb1", "uid-1", TRUE}};
    const SandboxSpec one_pod_down[] = {{"sb1", "uid-1", FALSE}};
    const ContainerSpec running[] = {{"c1", "sb1", "uid-1", RUNNING}, {"c2", "sb1", "uid-1", CREATED}};
    const ContainerSpec exited[] = {{"c1", "sb1", "uid-1", EXITED}, {"c2", "sb1", "uid-1", UNKNOWN}};
    static const guint8 garbage[] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x12};

    /* A pod starts. */
    add_sandboxes(b, one_pod, G_N_ELEMENTS(one_pod));
    add_containers(b, running, G_N_ELEMENTS(running));
    add_relist(b);
    write_seed(dir, "one-pod-running", b);

    /* Started, died, removed: the whole lifecycle, relisting in between. */
    add_sandboxes(b, one_pod, G_N_ELEMENTS(one_pod));
    add_containers(b, running, G_N_ELEMENTS(running));
    add_relist(b);
    add_containers(b, exited, G_N_ELEMENTS(exited));
    add_container_status(b, "c1", "c1", EXITED, 7);
    add_relist(b);
    add_sandboxes(b, one_pod_down, G_N_ELEMENTS(one_pod_down));
    add_containers(b, exited, 1);
    add_relist(b);
    add_sandboxes(b, NULL, 0);
    add_containers(b, NULL, 0);
    add_relist(b);
    write_seed(dir, "lifecycle", b);

    /* Status answers that fail: garbage, none, another container's; then a reinspection. */
    add_sandboxes(b, one_pod, G_N_ELEMENTS(one_pod));
    add_containers(b, running, G_N_ELEMENTS(running));
    add_raw_answer(b, SANDBOX_STATUS, "sb1", garbage, sizeof garbage);
    add_raw_answer(b, CONTAINER_STATUS, "c1", NULL, 0);
    add_container_status(b, "c2", "c-other", RUNNING, 0);
    add_relist(b);
    add_sandbox_status(b, "sb1", "uid-1");
    add_relist(b);
    write_seed(dir, "status-errors", b);

    /* A listing that does not unpack, then one that does. */
    add_record(b, SANDBOXES, garbage, sizeof garbage);
    add_relist(b);
    add_sandboxes(b, one_pod, G_N_ELEMENTS(one_pod));
    add_record(b, CONTAINERS, garbage, sizeof garbage);
    add_relist(b);
    add_containers(b, running, G_N_ELEMENTS(running));
    add_relist(b);
    write_seed(dir, "listing-fails", b);

    /* Containers whose sandbox is not listed (found by their label, or by nothing), and
     * per-pod relists. */
    {
        const ContainerSpec orphans[] = {{"c9", "sb-gone", "uid-9", EXITED},
                                         {"c10", "sb-gone", NULL, RUNNING},
                                         {"c1", "sb1", "uid-1", RUNNING}};

        add_sandboxes(b, one_pod, G_N_ELEMENTS(one_pod));
        add_containers(b, orphans, G_N_ELEMENTS(orphans));
        add_relist(b);
        add_record(b, RELIST_POD, (const guint8 *)"uid-9", 5);
        add_containers(b, orphans, 1);
        add_record(b, RELIST_POD, (const guint8 *)"uid-1", 5);
        add_record(b, RELIST_POD, (const guint8 *)"uid-unknown", 11);
        write_seed(dir, "orphans-and-pod-relists", b);
    }

    /* One sandbox id listed for two pods (CRI ids are unique: a misbehaving runtime). */
    {
        const SandboxSpec twins[] = {{"sb1", "uid-1", TRUE}, {"sb1", "uid-2", TRUE}};

        add_sandboxes(b, twins, G_N_ELEMENTS(twins));
        add_containers(b, running, G_N_ELEMENTS(running));
        add_relist(b);
        add_record(b, RELIST_POD, (const guint8 *)"uid-1", 5);
        add_record(b, RELIST_POD, (const guint8 *)"uid-2", 5);
        write_seed(dir, "one-sandbox-id-two-pods", b);
    }

    /* 8 pods of 2 containers; every other pod's containers exit. */
    {
        g_autoptr(GPtrArray) strings = g_ptr_array_new_with_free_func(g_free);
        SandboxSpec pods[8];
        ContainerSpec containers[16];

        for (int i = 0; i < 8; i++) {
            char *sb = g_strdup_printf("sandbox-%02d", i);
            char *uid = g_strdup_printf("8a1f0c2e-%04d-4e7b-9a53-%012d", i, i);

            g_ptr_array_add(strings, sb);
            g_ptr_array_add(strings, uid);
            pods[i] = (SandboxSpec){sb, uid, TRUE};
            for (int j = 0; j < 2; j++) {
                char *id = g_strdup_printf("container-%02d-%d", i, j);

                g_ptr_array_add(strings, id);
                containers[i * 2 + j] = (ContainerSpec){id, sb, uid, RUNNING};
            }
        }
        add_sandboxes(b, pods, 8);
        add_containers(b, containers, 16);
        add_relist(b);
        for (int i = 0; i < 16; i += 4)
            for (int j = 0; j < 2; j++)
                containers[i + j].state = EXITED;
        add_containers(b, containers, 16);
        add_relist(b);
        write_seed(dir, "eight-pods", b);
    }
}

/* ---- container events ---- */

static void
write_event(const char *dir, const char *name, const char *container_id,
            Runtime__V1__ContainerEventType type, gint64 created_at, gboolean with_status,
            gboolean with_metadata, const char *uid, gboolean with_container_status)
{
    g_autoptr(GByteArray) b = g_byte_array_new();
    Runtime__V1__ContainerEventResponse event = RUNTIME__V1__CONTAINER_EVENT_RESPONSE__INIT;
    Runtime__V1__PodSandboxStatus status = RUNTIME__V1__POD_SANDBOX_STATUS__INIT;
    Runtime__V1__ContainerStatus cstatus;
    Runtime__V1__ContainerMetadata cmeta;
    Runtime__V1__ContainerStatus *cstatuses[] = {&cstatus};
    gsize len;

    init_pod_metadata(uid);
    event.container_id = (char *)container_id;
    event.container_event_type = type;
    event.created_at = created_at;
    if (with_status) {
        status.id = (char *)"sb1";
        status.state = RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_READY;
        status.created_at = T0;
        if (with_metadata)
            status.metadata = &pod_metadata;
        event.pod_sandbox_status = &status;
    }
    if (with_container_status) {
        fill_container_status(&cstatus, &cmeta, container_id, EXITED, 137);
        event.n_containers_statuses = 1;
        event.containers_statuses = cstatuses;
    }
    len = protobuf_c_message_get_packed_size(&event.base);
    g_byte_array_set_size(b, (guint)len);
    protobuf_c_message_pack(&event.base, b->data);
    write_seed(dir, name, b);
}

static void
container_events_seeds(const char *dir)
{
    write_event(dir, "stopped", "c1", RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STOPPED_EVENT,
                T0, TRUE, TRUE, "uid-1", TRUE);
    write_event(dir, "stopped-no-sandbox-status", "c1",
                RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STOPPED_EVENT, T0, FALSE, FALSE,
                "uid-1", FALSE);
    write_event(dir, "stopped-no-metadata", "c1",
                RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STOPPED_EVENT, T0, TRUE, FALSE,
                "uid-1", FALSE);
    write_event(dir, "stopped-empty-uid", "c1",
                RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STOPPED_EVENT, T0, TRUE, TRUE, "",
                FALSE);
    write_event(dir, "started", "c2", RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STARTED_EVENT,
                T0, TRUE, TRUE, "uid-1", TRUE);
    write_event(dir, "deleted-no-created-at", "c3",
                RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_DELETED_EVENT, 0, TRUE, TRUE,
                "uid-1", FALSE);
    write_event(dir, "unknown-type-future-created-at", "",
                (Runtime__V1__ContainerEventType)7, G_MAXINT64, TRUE, TRUE, "uid-1", FALSE);
}

int
main(int argc, char **argv)
{
    g_autofree char *listing_dir = NULL;
    g_autofree char *events_dir = NULL;

    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS-DIR\n", argv[0]);
        return EXIT_FAILURE;
    }
    listing_dir = g_build_filename(argv[1], "cri-listing", NULL);
    events_dir = g_build_filename(argv[1], "container-events", NULL);
    g_mkdir_with_parents(listing_dir, 0755);
    g_mkdir_with_parents(events_dir, 0755);
    cri_listing_seeds(listing_dir);
    container_events_seeds(events_dir);
    return EXIT_SUCCESS;
}
