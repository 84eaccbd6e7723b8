/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CRI client: endpoint validation, errors, deadlines, cancellation, concurrency, decoding
 * against the in-process fake runtime, message size limits, server streams and reconnection.
 */
#include <check.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <glib/gstdio.h>
#include <pleg/pleg-cri-client.h>

#include "cri-private.h"
#include "cri-sim.h"
#include "fake-cri-server.h"

static char *tmpdir;

static void
setup(void)
{
    g_autoptr(GError) error = NULL;

    tmpdir = g_dir_make_tmp("pleg-cri-XXXXXX", &error);
    ck_assert_ptr_nonnull(tmpdir);
}

static void
teardown(void)
{
    g_autoptr(GDir) dir = g_dir_open(tmpdir, 0, NULL);
    const char *name;

    while (dir && (name = g_dir_read_name(dir))) {
        g_autofree char *path = g_build_filename(tmpdir, name, NULL);
        g_unlink(path);
    }
    g_rmdir(tmpdir);
    g_clear_pointer(&tmpdir, g_free);
}

static char *
socket_path(const char *name)
{
    return g_build_filename(tmpdir, name, NULL);
}

static char *
endpoint_for(const char *path)
{
    return g_strconcat("unix://", path, NULL);
}

static gboolean
wait_until(gboolean (*condition)(gpointer), gpointer data, gint64 timeout_usec)
{
    gint64 deadline = g_get_monotonic_time() + timeout_usec;

    while (!condition(data)) {
        if (g_get_monotonic_time() > deadline)
            return FALSE;
        g_usleep(5000);
    }
    return TRUE;
}

static void
assert_cri_error(const GError *error, int code, const char *endpoint, const char *method)
{
    g_autofree char *prefix = g_strdup_printf("%s: %s: ", endpoint, method);

    ck_assert_ptr_nonnull(error);
    ck_assert_msg(error->domain == PLEG_CRI_ERROR, "unexpected error domain: %s", error->message);
    ck_assert_msg(error->code == code, "expected code %d, got %d: %s", code, error->code,
                  error->message);
    ck_assert_msg(g_str_has_prefix(error->message, prefix), "\"%s\" does not start with \"%s\"",
                  error->message, prefix);
    ck_assert_msg(strlen(error->message) > strlen(prefix), "no details in \"%s\"", error->message);
}

/* ---- endpoints ---- */

START_TEST(test_endpoint_invalid)
{
    static const char *const invalid[] = {
        "",
        "tcp://127.0.0.1:1234",
        "npipe:////./pipe/containerd-containerd",
        "unix://",
        "unix:",
        "unix://relative/path.sock",
        "unix:relative.sock",
        "relative.sock",
        "/",
        "unix:///",
        "http://localhost/run/x.sock",
        "unix:///tmp/a?b.sock",
        "/tmp/a#b.sock",
        "unix:/tmp/100%.sock",
        /* One path, longer than sun_path's 108 bytes. */
        ("/tmp/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
         "aaaaaaaaaaaaaaaaaaaa.sock"),
    };

    for (gsize i = 0; i < G_N_ELEMENTS(invalid); i++) {
        g_autoptr(GError) error = NULL;
        g_autoptr(PlegCriClient) client = pleg_cri_client_new(invalid[i], 0, &error);
        g_autofree char *quoted = g_strdup_printf("\"%s\"", invalid[i]);

        g_autoptr(GError) check_error = NULL;

        ck_assert_msg(client == NULL, "endpoint \"%s\" was accepted", invalid[i]);
        ck_assert(g_error_matches(error, PLEG_CRI_ERROR, PLEG_CRI_ERROR_INVALID_ARGUMENT));
        ck_assert_msg(strstr(error->message, quoted), "\"%s\" does not name %s", error->message,
                      quoted);
        /* The check without a client says the same. */
        ck_assert(!pleg_cri_endpoint_check(invalid[i], &check_error));
        ck_assert_str_eq(check_error->message, error->message);
    }
}
END_TEST

START_TEST(test_endpoint_forms)
{
    static const char *const forms[] = {
        "unix:///run/pleg-test/cri.sock",
        "unix:/run/pleg-test/cri.sock",
        "/run/pleg-test/cri.sock",
    };

    for (gsize i = 0; i < G_N_ELEMENTS(forms); i++) {
        g_autoptr(GError) error = NULL;
        g_autofree char *target = NULL;
        g_autoptr(PlegCriClient) client = NULL;

        ck_assert(cri_endpoint_parse(forms[i], &target, &error));
        ck_assert_str_eq(target, "unix:/run/pleg-test/cri.sock");
        ck_assert(pleg_cri_endpoint_check(forms[i], &error));

        /* Lazy: nothing listens there and creating the client still succeeds. */
        client = pleg_cri_client_new(forms[i], 0, &error);
        ck_assert_ptr_nonnull(client);
        ck_assert_ptr_null(error);
        ck_assert_str_eq(pleg_cri_client_get_endpoint(client), forms[i]);
    }
}
END_TEST

/* ---- failures without a runtime ---- */

START_TEST(test_unavailable_missing_socket)
{
    g_autofree char *path = socket_path("missing.sock");
    g_autofree char *endpoint = endpoint_for(path);
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegCriClient) client = pleg_cri_client_new(endpoint, 5 * G_USEC_PER_SEC, &error);
    g_autofree char *name = NULL;
    gint64 start;

    ck_assert_ptr_nonnull(client);
    start = g_get_monotonic_time();
    ck_assert(!pleg_cri_client_version(client, &name, NULL, NULL, &error));
    ck_assert_int_lt(g_get_monotonic_time() - start, 5 * G_USEC_PER_SEC + G_USEC_PER_SEC / 2);
    ck_assert_ptr_null(name);
    assert_cri_error(error, PLEG_CRI_ERROR_UNAVAILABLE, endpoint, "Version");
}
END_TEST

START_TEST(test_unavailable_refused)
{
    g_autofree char *path = socket_path("refused.sock");
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegCriClient) client = NULL;
    g_autoptr(PlegRuntime) runtime = NULL;
    GPtrArray *sandboxes = NULL;
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    int fd;

    /* A socket file that nobody listens on: connect() is refused. */
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    g_strlcpy(address.sun_path, path, sizeof(address.sun_path));
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&address, sizeof(address)), 0);

    client = pleg_cri_client_new(path, 5 * G_USEC_PER_SEC, &error);
    ck_assert_ptr_nonnull(client);
    runtime = pleg_cri_client_as_runtime(client);
    ck_assert(!pleg_runtime_list_pod_sandboxes(runtime, &sandboxes, NULL, &error));
    ck_assert_ptr_null(sandboxes);
    assert_cri_error(error, PLEG_CRI_ERROR_UNAVAILABLE, path, "ListPodSandbox");
    close(fd);
}
END_TEST

/* ---- deadline and cancellation ---- */

START_TEST(test_deadline_exceeded)
{
    g_autofree char *path = socket_path("cri.sock");
    g_autofree char *endpoint = endpoint_for(path);
    g_autoptr(FakeCriServer) server = fake_cri_server_new(path);
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegCriClient) client = NULL;
    g_autoptr(PlegRuntime) runtime = NULL;
    PlegContainerStatus *status;

    fake_cri_server_set_hang(server, TRUE);
    client = pleg_cri_client_new(endpoint, 300 * 1000, &error);
    runtime = pleg_cri_client_as_runtime(client);
    status = pleg_runtime_container_status(runtime, "ctr-1", NULL, &error);
    ck_assert_ptr_null(status);
    assert_cri_error(error, PLEG_CRI_ERROR_DEADLINE_EXCEEDED, endpoint, "ContainerStatus");
}
END_TEST

typedef struct {
    FakeCriServer *server;
    GCancellable *cancellable;
    guint calls_before;
} CancelData;

static gboolean
server_saw_call(gpointer data)
{
    CancelData *cancel = data;
    return fake_cri_server_get_n_calls(cancel->server) > cancel->calls_before;
}

static gpointer
cancel_thread_main(gpointer data)
{
    CancelData *cancel = data;

    /* Cancel only once the call is really in flight on the server. */
    ck_assert(wait_until(server_saw_call, cancel, 20 * G_USEC_PER_SEC));
    g_cancellable_cancel(cancel->cancellable);
    return NULL;
}

START_TEST(test_cancel_from_other_thread)
{
    g_autofree char *path = socket_path("cri.sock");
    g_autofree char *endpoint = endpoint_for(path);
    g_autoptr(FakeCriServer) server = fake_cri_server_new(path);
    g_autoptr(GCancellable) cancellable = g_cancellable_new();
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegCriClient) client = pleg_cri_client_new(endpoint, 0, &error);
    CancelData cancel = {server, cancellable, 0};
    GThread *thread;
    gint64 start;

    fake_cri_server_set_hang(server, TRUE);
    thread = g_thread_new("cancel", cancel_thread_main, &cancel);
    start = g_get_monotonic_time();
    ck_assert(!pleg_cri_client_version(client, NULL, NULL, cancellable, &error));
    g_thread_join(thread);
    /* The deadline is the 2 minute default: returning at all before it shows the cancel. */
    ck_assert_int_lt(g_get_monotonic_time() - start, 60 * G_USEC_PER_SEC);
    assert_cri_error(error, PLEG_CRI_ERROR_CANCELLED, endpoint, "Version");
}
END_TEST

START_TEST(test_cancel_before_call)
{
    g_autofree char *path = socket_path("cri.sock");
    g_autofree char *endpoint = endpoint_for(path);
    g_autoptr(FakeCriServer) server = fake_cri_server_new(path);
    g_autoptr(GCancellable) cancellable = g_cancellable_new();
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegCriClient) client = pleg_cri_client_new(endpoint, 0, &error);
    g_autoptr(PlegRuntime) runtime = pleg_cri_client_as_runtime(client);
    GPtrArray *containers = NULL;

    g_cancellable_cancel(cancellable);
    ck_assert(!pleg_runtime_list_containers(runtime, NULL, &containers, cancellable, &error));
    ck_assert_ptr_null(containers);
    assert_cri_error(error, PLEG_CRI_ERROR_CANCELLED, endpoint, "ListContainers");
    ck_assert_uint_eq(fake_cri_server_get_n_calls(server), 0);
}
END_TEST

/* ---- concurrency ---- */

typedef struct {
    PlegRuntime *runtime;
    PlegCriClient *client;
    gboolean expect_success;
    guint iterations;
    gint successes;
    gint failures;
} WorkerData;

static gpointer
worker_main(gpointer data)
{
    WorkerData *w = data;

    for (guint i = 0; i < w->iterations; i++) {
        g_autoptr(GError) error = NULL;
        g_autoptr(GPtrArray) sandboxes = NULL;
        g_autoptr(GPtrArray) containers = NULL;
        g_autoptr(PlegPodSandboxStatus) sandbox_status = NULL;
        g_autoptr(PlegContainerStatus) container_status = NULL;
        g_autofree char *name = NULL;
        gboolean ok;

        ok = pleg_cri_client_version(w->client, &name, NULL, NULL, &error) &&
             pleg_runtime_list_pod_sandboxes(w->runtime, &sandboxes, NULL, &error) &&
             pleg_runtime_list_containers(w->runtime, "sb-a", &containers, NULL, &error) &&
             (sandbox_status = pleg_runtime_pod_sandbox_status(w->runtime, "sb-a", NULL, &error)) &&
             (container_status = pleg_runtime_container_status(w->runtime, "ctr-2", NULL, &error));
        if (ok && sandboxes->len == 2 && containers->len == 2 && container_status->exit_code == 7)
            g_atomic_int_inc(&w->successes);
        else
            g_atomic_int_inc(&w->failures);
    }
    return NULL;
}

static void
run_workers(PlegCriClient *client, guint iterations, WorkerData *workers, guint n_workers)
{
    g_autoptr(PlegRuntime) runtime = pleg_cri_client_as_runtime(client);
    GThread *threads[n_workers];

    for (guint i = 0; i < n_workers; i++) {
        workers[i] = (WorkerData){.runtime = runtime, .client = client, .iterations = iterations};
        threads[i] = g_thread_new("worker", worker_main, &workers[i]);
    }
    for (guint i = 0; i < n_workers; i++)
        g_thread_join(threads[i]);
}

START_TEST(test_concurrent_calls)
{
    g_autofree char *path = socket_path("cri.sock");
    g_autofree char *endpoint = endpoint_for(path);
    g_autoptr(FakeCriServer) server G_GNUC_UNUSED = fake_cri_server_new(path);
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegCriClient) client = pleg_cri_client_new(endpoint, 10 * G_USEC_PER_SEC, &error);
    WorkerData workers[4];

    run_workers(client, 20, workers, G_N_ELEMENTS(workers));
    for (guint i = 0; i < G_N_ELEMENTS(workers); i++) {
        ck_assert_int_eq(workers[i].failures, 0);
        ck_assert_int_eq(workers[i].successes, 20);
    }
}
END_TEST

START_TEST(test_concurrent_calls_unavailable)
{
    g_autofree char *path = socket_path("missing.sock");
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegCriClient) client = pleg_cri_client_new(path, 5 * G_USEC_PER_SEC, &error);
    WorkerData workers[4];

    run_workers(client, 10, workers, G_N_ELEMENTS(workers));
    for (guint i = 0; i < G_N_ELEMENTS(workers); i++) {
        ck_assert_int_eq(workers[i].successes, 0);
        ck_assert_int_eq(workers[i].failures, 10);
    }
}
END_TEST

/* ---- decoding ---- */

static const PlegPodSandbox *
find_sandbox(GPtrArray *sandboxes, const char *id)
{
    for (guint i = 0; i < sandboxes->len; i++) {
        const PlegPodSandbox *sandbox = sandboxes->pdata[i];
        if (g_str_equal(sandbox->id, id))
            return sandbox;
    }
    return NULL;
}

static const PlegContainer *
find_container(GPtrArray *containers, const char *id)
{
    for (guint i = 0; i < containers->len; i++) {
        const PlegContainer *container = containers->pdata[i];
        if (g_str_equal(container->id, id))
            return container;
    }
    return NULL;
}

START_TEST(test_version)
{
    g_autofree char *path = socket_path("cri.sock");
    g_autoptr(FakeCriServer) server = fake_cri_server_new(path);
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegCriClient) client = pleg_cri_client_new(path, 0, &error);
    g_autofree char *name = NULL, *version = NULL;
    g_autoptr(GBytes) request_bytes = NULL;
    Runtime__V1__VersionRequest *request;
    gsize size;
    const guint8 *data;

    ck_assert(pleg_cri_client_version(client, &name, &version, NULL, &error));
    ck_assert_str_eq(name, FAKE_CRI_RUNTIME_NAME);
    ck_assert_str_eq(version, FAKE_CRI_RUNTIME_VERSION);
    ck_assert(pleg_cri_client_version(client, NULL, NULL, NULL, &error));

    /* The request carries the CRI API version kubelet sends. */
    request_bytes = fake_cri_server_get_last_request(server, "Version");
    ck_assert_ptr_nonnull(request_bytes);
    data = g_bytes_get_data(request_bytes, &size);
    request = runtime__v1__version_request__unpack(NULL, size, data);
    ck_assert_ptr_nonnull(request);
    ck_assert_str_eq(request->version, "0.1.0");
    runtime__v1__version_request__free_unpacked(request, NULL);
}
END_TEST

START_TEST(test_list_pod_sandboxes)
{
    g_autofree char *path = socket_path("cri.sock");
    g_autoptr(FakeCriServer) server G_GNUC_UNUSED = fake_cri_server_new(path);
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegCriClient) client = pleg_cri_client_new(path, 0, &error);
    g_autoptr(PlegRuntime) runtime = pleg_cri_client_as_runtime(client);
    g_autoptr(GPtrArray) sandboxes = NULL;
    const PlegPodSandbox *a, *b;

    ck_assert(pleg_runtime_list_pod_sandboxes(runtime, &sandboxes, NULL, &error));
    ck_assert_uint_eq(sandboxes->len, 2);
    a = find_sandbox(sandboxes, "sb-a");
    b = find_sandbox(sandboxes, "sb-b");
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_str_eq(a->name, "pod-a");
    ck_assert_str_eq(a->uid, "uid-a");
    ck_assert_str_eq(a->namespace_, "default");
    ck_assert_uint_eq(a->attempt, 0);
    ck_assert_int_eq(a->state, PLEG_POD_SANDBOX_STATE_READY);
    ck_assert_int_gt(a->created_at_ns, 0);
    ck_assert_str_eq(b->namespace_, "kube-system");
    ck_assert_uint_eq(b->attempt, 1);
    ck_assert_int_eq(b->state, PLEG_POD_SANDBOX_STATE_NOTREADY);
}
END_TEST

/* One pod's sandboxes: kubelet's label selector first; a runtime whose sandboxes lack the label
 * answers with none, and then every sandbox is listed and matched on metadata.uid. */
START_TEST(test_list_pod_sandboxes_of_pod)
{
    g_autofree char *path = socket_path("cri.sock");
    g_autoptr(GError) error = NULL;
    g_autoptr(CriSim) sim = cri_sim_new(path, &error);
    g_autoptr(PlegCriClient) client = NULL;
    g_autoptr(PlegRuntime) runtime = NULL;
    g_autoptr(GPtrArray) labelled = NULL;
    g_autoptr(GPtrArray) unlabelled = NULL;
    g_autoptr(GPtrArray) gone = NULL;
    g_autoptr(GBytes) packed = NULL;
    Runtime__V1__ListPodSandboxRequest *request;
    static const char *const no_labels[] = {"app", "legacy", NULL};
    CriSimPodSpec legacy = {.uid = "uid-legacy", .labels = no_labels};

    ck_assert_msg(sim != NULL, "%s", error ? error->message : "");
    ck_assert(cri_sim_add_pod(sim, "uid-a", NULL, &error));
    ck_assert(cri_sim_add_pod(sim, "uid-b", NULL, &error));
    ck_assert(cri_sim_add_pod_full(sim, &legacy, NULL, &error));
    client = pleg_cri_client_new(path, 0, &error);
    runtime = pleg_cri_client_as_runtime(client);

    ck_assert(pleg_runtime_list_pod_sandboxes_of_pod(runtime, "uid-a", &labelled, NULL, &error));
    ck_assert_uint_eq(labelled->len, 1);
    ck_assert_str_eq(((PlegPodSandbox *)g_ptr_array_index(labelled, 0))->uid, "uid-a");
    ck_assert_uint_eq(cri_sim_get_n_calls(sim, "ListPodSandbox"), 1);
    packed = cri_sim_get_last_request(sim, "ListPodSandbox");
    request = runtime__v1__list_pod_sandbox_request__unpack(NULL, g_bytes_get_size(packed),
                                                            g_bytes_get_data(packed, NULL));
    ck_assert_ptr_nonnull(request);
    ck_assert_ptr_nonnull(request->filter);
    ck_assert_uint_eq(request->filter->n_label_selector, 1);
    ck_assert_str_eq(request->filter->label_selector[0]->key, "io.kubernetes.pod.uid");
    ck_assert_str_eq(request->filter->label_selector[0]->value, "uid-a");
    protobuf_c_message_free_unpacked(&request->base, NULL);

    ck_assert(
        pleg_runtime_list_pod_sandboxes_of_pod(runtime, "uid-legacy", &unlabelled, NULL, &error));
    ck_assert_uint_eq(unlabelled->len, 1);
    ck_assert_str_eq(((PlegPodSandbox *)g_ptr_array_index(unlabelled, 0))->uid, "uid-legacy");
    ck_assert_uint_eq(cri_sim_get_n_calls(sim, "ListPodSandbox"), 3);

    ck_assert(pleg_runtime_list_pod_sandboxes_of_pod(runtime, "uid-gone", &gone, NULL, &error));
    ck_assert_uint_eq(gone->len, 0);
}
END_TEST

START_TEST(test_list_containers)
{
    g_autofree char *path = socket_path("cri.sock");
    g_autoptr(FakeCriServer) server G_GNUC_UNUSED = fake_cri_server_new(path);
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegCriClient) client = pleg_cri_client_new(path, 0, &error);
    g_autoptr(PlegRuntime) runtime = pleg_cri_client_as_runtime(client);
    g_autoptr(GPtrArray) all = NULL;
    g_autoptr(GPtrArray) in_b = NULL;
    g_autoptr(GPtrArray) none = NULL;
    const PlegContainer *c1, *c2, *c3;

    ck_assert(pleg_runtime_list_containers(runtime, NULL, &all, NULL, &error));
    ck_assert_uint_eq(all->len, 3);
    c1 = find_container(all, "ctr-1");
    c2 = find_container(all, "ctr-2");
    c3 = find_container(all, "ctr-3");
    ck_assert(c1 && c2 && c3);
    ck_assert_str_eq(c1->pod_sandbox_id, "sb-a");
    ck_assert_str_eq(c1->name, "app");
    ck_assert_str_eq(c1->image, "docker.io/library/busybox:latest");
    ck_assert_str_eq(c1->image_ref, "sha256:0123456789abcdef");
    ck_assert_int_eq(c1->state, PLEG_CONTAINER_STATE_RUNNING);
    ck_assert_str_eq(c1->pod_uid_label, "uid-a");
    ck_assert_int_eq(c2->state, PLEG_CONTAINER_STATE_EXITED);
    ck_assert_uint_eq(c2->attempt, 2);
    ck_assert_int_eq(c3->state, PLEG_CONTAINER_STATE_CREATED);
    ck_assert_ptr_null(c3->pod_uid_label);

    /* The sandbox id becomes ContainerFilter.pod_sandbox_id. */
    ck_assert(pleg_runtime_list_containers(runtime, "sb-b", &in_b, NULL, &error));
    ck_assert_uint_eq(in_b->len, 1);
    ck_assert_str_eq(((PlegContainer *)in_b->pdata[0])->id, "ctr-3");
    ck_assert(pleg_runtime_list_containers(runtime, "sb-gone", &none, NULL, &error));
    ck_assert_uint_eq(none->len, 0);
}
END_TEST

START_TEST(test_pod_sandbox_status)
{
    g_autofree char *path = socket_path("cri.sock");
    g_autofree char *endpoint = endpoint_for(path);
    g_autoptr(FakeCriServer) server G_GNUC_UNUSED = fake_cri_server_new(path);
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegCriClient) client = pleg_cri_client_new(endpoint, 0, &error);
    g_autoptr(PlegRuntime) runtime = pleg_cri_client_as_runtime(client);
    g_autoptr(PlegPodSandboxStatus) a = NULL;
    g_autoptr(PlegPodSandboxStatus) b = NULL;
    PlegPodSandboxStatus *gone;

    a = pleg_runtime_pod_sandbox_status(runtime, "sb-a", NULL, &error);
    ck_assert_ptr_nonnull(a);
    ck_assert_str_eq(a->id, "sb-a");
    ck_assert_str_eq(a->name, "pod-a");
    ck_assert_str_eq(a->uid, "uid-a");
    ck_assert_str_eq(a->namespace_, "default");
    ck_assert_int_eq(a->state, PLEG_POD_SANDBOX_STATE_READY);
    ck_assert_int_gt(a->created_at_ns, 0);
    /* network.ip first, then additional_ips. */
    ck_assert_uint_eq(g_strv_length(a->ips), 2);
    ck_assert_str_eq(a->ips[0], "10.0.0.1");
    ck_assert_str_eq(a->ips[1], "fd00::1");

    b = pleg_runtime_pod_sandbox_status(runtime, "sb-b", NULL, &error);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(b->state, PLEG_POD_SANDBOX_STATE_NOTREADY);
    ck_assert_ptr_nonnull(b->ips);
    ck_assert_ptr_null(b->ips[0]);

    gone = pleg_runtime_pod_sandbox_status(runtime, "sb-gone", NULL, &error);
    ck_assert_ptr_null(gone);
    assert_cri_error(error, PLEG_CRI_ERROR_NOT_FOUND, endpoint, "PodSandboxStatus");
}
END_TEST

START_TEST(test_container_status)
{
    g_autofree char *path = socket_path("cri.sock");
    g_autofree char *endpoint = endpoint_for(path);
    g_autoptr(FakeCriServer) server G_GNUC_UNUSED = fake_cri_server_new(path);
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegCriClient) client = pleg_cri_client_new(endpoint, 0, &error);
    g_autoptr(PlegRuntime) runtime = pleg_cri_client_as_runtime(client);
    g_autoptr(PlegContainerStatus) exited = NULL;
    g_autoptr(PlegContainerStatus) running = NULL;
    PlegContainerStatus *gone;

    exited = pleg_runtime_container_status(runtime, "ctr-2", NULL, &error);
    ck_assert_ptr_nonnull(exited);
    ck_assert_str_eq(exited->id, "ctr-2");
    ck_assert_str_eq(exited->name, "init");
    ck_assert_uint_eq(exited->attempt, 2);
    ck_assert_int_eq(exited->state, PLEG_CONTAINER_STATE_EXITED);
    ck_assert_int_eq(exited->exit_code, 7);
    ck_assert_str_eq(exited->reason, "Error");
    ck_assert_ptr_null(exited->message);
    ck_assert_int_eq(exited->finished_at_ns, FAKE_CRI_FINISHED_AT_NS);
    ck_assert_int_gt(exited->started_at_ns, 0);
    ck_assert_str_eq(exited->image, "docker.io/library/busybox:latest");
    ck_assert_str_eq(exited->image_ref, "sha256:0123456789abcdef");

    running = pleg_runtime_container_status(runtime, "ctr-1", NULL, &error);
    ck_assert_ptr_nonnull(running);
    ck_assert_int_eq(running->state, PLEG_CONTAINER_STATE_RUNNING);
    ck_assert_int_eq(running->finished_at_ns, 0);
    ck_assert_ptr_null(running->reason);

    gone = pleg_runtime_container_status(runtime, "ctr-gone", NULL, &error);
    ck_assert_ptr_null(gone);
    assert_cri_error(error, PLEG_CRI_ERROR_NOT_FOUND, endpoint, "ContainerStatus");
}
END_TEST

/* One array of mixed queries: each gets its own status or error, in its own slot. */
START_TEST(test_get_statuses)
{
    g_autofree char *path = socket_path("cri.sock");
    g_autofree char *endpoint = endpoint_for(path);
    g_autoptr(FakeCriServer) server = fake_cri_server_new(path);
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegCriClient) client = pleg_cri_client_new(endpoint, 0, &error);
    g_autoptr(PlegRuntime) runtime = pleg_cri_client_as_runtime(client);
    PlegStatusQuery queries[] = {
        {.container_id = "ctr-2"},     {.pod_sandbox_id = "sb-a"}, {.container_id = "ctr-gone"},
        {.pod_sandbox_id = "sb-gone"}, {.container_id = "ctr-1"},  {.pod_sandbox_id = "sb-b"},
    };

    pleg_runtime_get_statuses(runtime, queries, G_N_ELEMENTS(queries), NULL);

    ck_assert_ptr_null(queries[0].error);
    ck_assert_str_eq(queries[0].container_status->id, "ctr-2");
    ck_assert_int_eq(queries[0].container_status->exit_code, 7);
    ck_assert_ptr_null(queries[1].error);
    ck_assert_str_eq(queries[1].pod_sandbox_status->id, "sb-a");
    ck_assert_str_eq(queries[1].pod_sandbox_status->ips[0], "10.0.0.1");
    ck_assert_ptr_null(queries[2].container_status);
    assert_cri_error(queries[2].error, PLEG_CRI_ERROR_NOT_FOUND, endpoint, "ContainerStatus");
    ck_assert_ptr_null(queries[3].pod_sandbox_status);
    assert_cri_error(queries[3].error, PLEG_CRI_ERROR_NOT_FOUND, endpoint, "PodSandboxStatus");
    ck_assert_str_eq(queries[4].container_status->id, "ctr-1");
    ck_assert_int_eq(queries[4].container_status->state, PLEG_CONTAINER_STATE_RUNNING);
    ck_assert_str_eq(queries[5].pod_sandbox_status->id, "sb-b");
    ck_assert_int_eq(queries[5].pod_sandbox_status->state, PLEG_POD_SANDBOX_STATE_NOTREADY);
    for (gsize i = 0; i < G_N_ELEMENTS(queries); i++) {
        ck_assert(!queries[i].pod_sandbox_status || !queries[i].container_status);
        pleg_status_query_clear(&queries[i]);
        ck_assert(!queries[i].pod_sandbox_status && !queries[i].container_status &&
                  !queries[i].error);
    }
    ck_assert_uint_eq(fake_cri_server_get_n_calls(server), G_N_ELEMENTS(queries));
}
END_TEST

typedef struct {
    PlegRuntime *runtime;
    PlegStatusQuery *queries;
    guint n_queries;
    GCancellable *cancellable;
} GetStatusesData;

static gpointer
get_statuses_main(gpointer data)
{
    GetStatusesData *d = data;

    pleg_runtime_get_statuses(d->runtime, d->queries, d->n_queries, d->cancellable);
    return NULL;
}

typedef struct {
    CriSim *sim;
    guint n;
} CallsWait;

static gboolean
container_status_calls_reached(gpointer data)
{
    CallsWait *w = data;

    return cri_sim_get_n_calls(w->sim, "ContainerStatus") >= w->n;
}

/* The queries are on the wire together, at most CRI_CALLS_IN_FLIGHT_MAX at a time: with a runtime
 * that never answers, exactly that many calls arrive; cancelling ends them all and the rest are
 * never sent. */
START_TEST(test_get_statuses_in_flight_together)
{
    g_autofree char *path = socket_path("sim.sock");
    g_autofree char *endpoint = endpoint_for(path);
    g_autoptr(GError) error = NULL;
    g_autoptr(CriSim) sim = cri_sim_new(path, &error);
    g_autoptr(PlegCriClient) client = pleg_cri_client_new(endpoint, 0, &error);
    g_autoptr(PlegRuntime) runtime = pleg_cri_client_as_runtime(client);
    g_autoptr(GCancellable) cancellable = g_cancellable_new();
    g_autoptr(GPtrArray) ids = g_ptr_array_new_with_free_func(g_free);
    PlegStatusQuery queries[CRI_CALLS_IN_FLIGHT_MAX + 8] = {{0}};
    GetStatusesData data = {runtime, queries, G_N_ELEMENTS(queries), cancellable};
    CallsWait wait = {sim, CRI_CALLS_IN_FLIGHT_MAX};
    GThread *thread;

    ck_assert_ptr_nonnull(sim);
    for (guint i = 0; i < G_N_ELEMENTS(queries); i++) {
        g_ptr_array_add(ids, g_strdup_printf("ctr-%u", i));
        queries[i].container_id = ids->pdata[i];
    }
    cri_sim_set_delay(sim, "ContainerStatus", -1);

    thread = g_thread_new("get-statuses", get_statuses_main, &data);
    ck_assert(wait_until(container_status_calls_reached, &wait, 30 * G_USEC_PER_SEC));
    g_cancellable_cancel(cancellable);
    g_thread_join(thread);

    ck_assert_uint_eq(cri_sim_get_n_calls(sim, "ContainerStatus"), CRI_CALLS_IN_FLIGHT_MAX);
    for (guint i = 0; i < G_N_ELEMENTS(queries); i++) {
        ck_assert_ptr_null(queries[i].container_status);
        assert_cri_error(queries[i].error, PLEG_CRI_ERROR_CANCELLED, endpoint, "ContainerStatus");
        pleg_status_query_clear(&queries[i]);
    }
}
END_TEST

/* A runtime that stops answering: an array longer than the in-flight window still ends after
 * one deadline, not one per window (the client's timeout is 1 s; one per window would be 3 s). */
START_TEST(test_get_statuses_one_deadline)
{
    g_autofree char *path = socket_path("sim.sock");
    g_autofree char *endpoint = endpoint_for(path);
    g_autoptr(GError) error = NULL;
    g_autoptr(CriSim) sim = cri_sim_new(path, &error);
    g_autoptr(PlegCriClient) client = pleg_cri_client_new(endpoint, G_USEC_PER_SEC, &error);
    g_autoptr(PlegRuntime) runtime = pleg_cri_client_as_runtime(client);
    PlegStatusQuery queries[2 * CRI_CALLS_IN_FLIGHT_MAX + 6] = {{0}};
    gint64 start;

    ck_assert_ptr_nonnull(sim);
    for (guint i = 0; i < G_N_ELEMENTS(queries); i++)
        queries[i].container_id = "ctr-hung";
    cri_sim_set_delay(sim, "ContainerStatus", -1);

    start = g_get_monotonic_time();
    pleg_runtime_get_statuses(runtime, queries, G_N_ELEMENTS(queries), NULL);
    ck_assert_int_lt(g_get_monotonic_time() - start, 2 * G_USEC_PER_SEC);
    for (guint i = 0; i < G_N_ELEMENTS(queries); i++) {
        assert_cri_error(queries[i].error, PLEG_CRI_ERROR_DEADLINE_EXCEEDED, endpoint,
                         "ContainerStatus");
        pleg_status_query_clear(&queries[i]);
    }
}
END_TEST

/* cri_channel_drive(): calls taken from a feed as places free up, handed back as each ends. */
typedef struct {
    CriUnaryCall calls[8];
    Runtime__V1__ContainerStatusRequest container_requests[8];
    Runtime__V1__PodSandboxStatusRequest sandbox_requests[8];
    guint n_calls;
    guint next;
    guint in_flight;
    guint max_in_flight;
    guint done_order[8];
    guint n_done;
} DriveFeed;

/* @n_containers ContainerStatus calls, then PodSandboxStatus calls up to @n_calls, all for ids
 * the runtime does not have. */
static void
drive_feed_init(DriveFeed *feed, guint n_calls, guint n_containers)
{
    memset(feed, 0, sizeof(*feed));
    feed->n_calls = n_calls;
    for (guint i = 0; i < n_calls; i++) {
        CriUnaryCall *call = &feed->calls[i];

        if (i < n_containers) {
            feed->container_requests[i] =
                (Runtime__V1__ContainerStatusRequest)RUNTIME__V1__CONTAINER_STATUS_REQUEST__INIT;
            feed->container_requests[i].container_id = "ctr-hung";
            call->method = "ContainerStatus";
            call->request = &feed->container_requests[i].base;
            call->response_descriptor = &runtime__v1__container_status_response__descriptor;
        } else {
            feed->sandbox_requests[i] =
                (Runtime__V1__PodSandboxStatusRequest)RUNTIME__V1__POD_SANDBOX_STATUS_REQUEST__INIT;
            feed->sandbox_requests[i].pod_sandbox_id = "sandbox-gone";
            call->method = "PodSandboxStatus";
            call->request = &feed->sandbox_requests[i].base;
            call->response_descriptor = &runtime__v1__pod_sandbox_status_response__descriptor;
        }
    }
}

static CriUnaryCall *
drive_feed_next(gpointer data)
{
    DriveFeed *feed = data;

    if (feed->next == feed->n_calls)
        return NULL;
    feed->in_flight++;
    feed->max_in_flight = MAX(feed->max_in_flight, feed->in_flight);
    return &feed->calls[feed->next++];
}

static void
drive_feed_done(CriUnaryCall *call, gpointer data)
{
    DriveFeed *feed = data;

    feed->in_flight--;
    feed->done_order[feed->n_done++] = (guint)(call - feed->calls);
    g_clear_pointer(&call->response, cri_message_free);
}

static const CriCallFeed drive_feed = {drive_feed_next, drive_feed_done};

/* Two calls that hang to their deadline hold two of three places: the six after them go through
 * the third, each handed back as it ends, before the hung ones end. */
START_TEST(test_drive_hung_call_holds_back_no_other)
{
    g_autofree char *path = socket_path("sim.sock");
    g_autoptr(GError) error = NULL;
    g_autoptr(CriSim) sim = cri_sim_new(path, &error);
    g_autoptr(CriChannel) channel = cri_channel_new(path, &error);
    DriveFeed feed;

    ck_assert_ptr_nonnull(sim);
    drive_feed_init(&feed, 8, 2);
    cri_sim_set_delay(sim, "ContainerStatus", -1);

    cri_channel_drive(channel, &drive_feed, &feed, 3, 2 * G_USEC_PER_SEC, NULL);

    ck_assert_uint_eq(feed.n_done, 8);
    ck_assert_uint_eq(feed.max_in_flight, 3);
    for (guint i = 0; i < 6; i++) {
        ck_assert_uint_eq(feed.done_order[i], 2 + i);
        assert_cri_error(feed.calls[2 + i].error, PLEG_CRI_ERROR_NOT_FOUND, path,
                         "PodSandboxStatus");
    }
    for (guint i = 0; i < 2; i++) {
        ck_assert_uint_lt(feed.done_order[6 + i], 2);
        assert_cri_error(feed.calls[i].error, PLEG_CRI_ERROR_DEADLINE_EXCEEDED, path,
                         "ContainerStatus");
    }
    ck_assert_uint_eq(cri_sim_get_n_calls(sim, "ContainerStatus"), 2);
    ck_assert_uint_eq(cri_sim_get_n_calls(sim, "PodSandboxStatus"), 6);
    for (guint i = 0; i < 8; i++)
        g_clear_error(&feed.calls[i].error);
}
END_TEST

/* Each call's deadline runs from its own start, not the drive's: with one place, two hung calls
 * take two deadlines one after the other (where cri_channel_call_many() would take one). */
START_TEST(test_drive_deadline_per_call)
{
    g_autofree char *path = socket_path("sim.sock");
    g_autoptr(GError) error = NULL;
    g_autoptr(CriSim) sim = cri_sim_new(path, &error);
    g_autoptr(CriChannel) channel = cri_channel_new(path, &error);
    const gint64 timeout_usec = 300 * 1000;
    DriveFeed feed;
    gint64 start;

    ck_assert_ptr_nonnull(sim);
    drive_feed_init(&feed, 2, 2);
    cri_sim_set_delay(sim, "ContainerStatus", -1);

    start = g_get_monotonic_time();
    cri_channel_drive(channel, &drive_feed, &feed, 1, timeout_usec, NULL);
    /* Well past one deadline; gRPC's timers may fire a few milliseconds early, so not 2x. */
    ck_assert_int_ge(g_get_monotonic_time() - start, 3 * timeout_usec / 2);
    ck_assert_uint_eq(feed.max_in_flight, 1);
    for (guint i = 0; i < 2; i++) {
        ck_assert_uint_eq(feed.done_order[i], i);
        assert_cri_error(feed.calls[i].error, PLEG_CRI_ERROR_DEADLINE_EXCEEDED, path,
                         "ContainerStatus");
        g_clear_error(&feed.calls[i].error);
    }
}
END_TEST

typedef struct {
    CriChannel *channel;
    DriveFeed *feed;
    GCancellable *cancellable;
} DriveData;

static gpointer
drive_main(gpointer data)
{
    DriveData *d = data;

    cri_channel_drive(d->channel, &drive_feed, d->feed, 2, 0, d->cancellable);
    return NULL;
}

/* Cancelling ends the calls in flight and fails the rest unsent; every call is handed back. */
START_TEST(test_drive_cancel)
{
    g_autofree char *path = socket_path("sim.sock");
    g_autoptr(GError) error = NULL;
    g_autoptr(CriSim) sim = cri_sim_new(path, &error);
    g_autoptr(CriChannel) channel = cri_channel_new(path, &error);
    g_autoptr(GCancellable) cancellable = g_cancellable_new();
    DriveFeed feed;
    DriveData data = {channel, &feed, cancellable};
    CallsWait wait = {sim, 2};
    GThread *thread;

    ck_assert_ptr_nonnull(sim);
    drive_feed_init(&feed, 5, 5);
    cri_sim_set_delay(sim, "ContainerStatus", -1);

    thread = g_thread_new("drive", drive_main, &data);
    ck_assert(wait_until(container_status_calls_reached, &wait, 30 * G_USEC_PER_SEC));
    g_cancellable_cancel(cancellable);
    g_thread_join(thread);

    ck_assert_uint_eq(cri_sim_get_n_calls(sim, "ContainerStatus"), 2);
    ck_assert_uint_eq(feed.n_done, 5);
    for (guint i = 0; i < 5; i++) {
        assert_cri_error(feed.calls[i].error, PLEG_CRI_ERROR_CANCELLED, path, "ContainerStatus");
        g_clear_error(&feed.calls[i].error);
    }
}
END_TEST

START_TEST(test_runtime_outlives_client)
{
    g_autofree char *path = socket_path("cri.sock");
    g_autoptr(FakeCriServer) server G_GNUC_UNUSED = fake_cri_server_new(path);
    g_autoptr(GError) error = NULL;
    PlegCriClient *client = pleg_cri_client_new(path, 0, &error);
    g_autoptr(PlegRuntime) runtime = pleg_cri_client_as_runtime(client);
    g_autoptr(GPtrArray) sandboxes = NULL;

    pleg_cri_client_unref(client);
    ck_assert(pleg_runtime_list_pod_sandboxes(runtime, &sandboxes, NULL, &error));
    ck_assert_uint_eq(sandboxes->len, 2);
}
END_TEST

START_TEST(test_unimplemented)
{
    g_autofree char *path = socket_path("cri.sock");
    g_autoptr(FakeCriServer) server G_GNUC_UNUSED = fake_cri_server_new(path);
    g_autoptr(GError) error = NULL;
    g_autoptr(CriChannel) channel = cri_channel_new(path, &error);
    Runtime__V1__StatusRequest request = RUNTIME__V1__STATUS_REQUEST__INIT;
    g_autoptr(ProtobufCMessage) response = NULL;

    response = cri_channel_call(channel, "Status", &request.base,
                                &runtime__v1__status_response__descriptor, G_USEC_PER_SEC * 5, NULL,
                                &error);
    ck_assert_ptr_null(response);
    assert_cri_error(error, PLEG_CRI_ERROR_UNIMPLEMENTED, path, "Status");
}
END_TEST

/* kubelet accepts answers up to 16 MiB where the C core default is 4 MiB. */
START_TEST(test_message_size_limit)
{
    g_autofree char *path = socket_path("cri.sock");
    g_autoptr(FakeCriServer) server = fake_cri_server_new(path);
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegCriClient) client = pleg_cri_client_new(path, 30 * G_USEC_PER_SEC, &error);
    g_autoptr(PlegRuntime) runtime = pleg_cri_client_as_runtime(client);
    g_autoptr(GPtrArray) containers = NULL;
    GPtrArray *too_big = NULL;

    fake_cri_server_set_padding(server, 10 * 1024 * 1024);
    ck_assert_msg(pleg_runtime_list_containers(runtime, NULL, &containers, NULL, &error), "%s",
                  error ? error->message : "");
    ck_assert_uint_eq(containers->len, 3);

    fake_cri_server_set_padding(server, PLEG_CRI_MAX_RECEIVE_BYTES + 1024);
    ck_assert(!pleg_runtime_list_containers(runtime, NULL, &too_big, NULL, &error));
    assert_cri_error(error, PLEG_CRI_ERROR_RESOURCE_EXHAUSTED, path, "ListContainers");
}
END_TEST

static void
add_item_id(const ProtobufCMessage *item, gpointer ids)
{
    const Runtime__V1__Container *container = (gconstpointer)item;

    g_ptr_array_add(ids, g_strdup(container->id));
    if (g_str_equal(container->id, "ctr-1")) {
        gsize longest = 0;

        for (size_t i = 0; i < container->n_labels; i++)
            longest = MAX(longest, strlen(container->labels[i]->value));
        for (size_t i = 0; i < container->n_annotations; i++)
            longest = MAX(longest, strlen(container->annotations[i]->value));
        ck_assert_uint_eq(longest, 1024 * 1024);
        ck_assert_str_eq(container->pod_sandbox_id, "sb-a");
    }
}

/* A listing decoded item by item from the received slices: an item larger than a slice (here
 * with a 1 MiB label, across many) is put together in the arena, whose pool's blocks the next
 * listings reuse. */
START_TEST(test_listing_item_by_item)
{
    g_autofree char *path = socket_path("cri.sock");
    g_autoptr(FakeCriServer) server = fake_cri_server_new(path);
    g_autoptr(GError) error = NULL;
    g_autoptr(CriChannel) channel = cri_channel_new(path, &error);
    CriArenaPool *pool = cri_channel_get_arena_pool(channel);
    Runtime__V1__ListContainersRequest request = RUNTIME__V1__LIST_CONTAINERS_REQUEST__INIT;
    guint64 made[3];

    fake_cri_server_set_padding(server, 1024 * 1024);
    for (guint round = 0; round < G_N_ELEMENTS(made); round++) {
        g_autoptr(GPtrArray) ids = g_ptr_array_new_with_free_func(g_free);
        g_autoptr(CriArena) arena = cri_arena_new(pool);
        CriUnaryCall call = {
            .method = "ListContainers",
            .request = &request.base,
            .response_descriptor = &runtime__v1__list_containers_response__descriptor,
            .arena = arena,
            .item_func = add_item_id,
            .item_data = ids,
        };

        cri_channel_call_many(channel, &call, 1, 30 * G_USEC_PER_SEC, NULL);
        ck_assert_msg(!call.error, "%s", call.error ? call.error->message : "");
        ck_assert_ptr_null(call.response);
        ck_assert_uint_eq(ids->len, 3);
        ck_assert_str_eq(ids->pdata[0], "ctr-1");
        ck_assert_str_eq(ids->pdata[2], "ctr-3");
        /* Each item was dropped once handed over. */
        ck_assert_uint_eq(cri_arena_get_used_bytes(arena), 0);
        g_clear_pointer(&arena, cri_arena_free);
        made[round] = cri_arena_pool_get_blocks_made(pool);
        ck_assert_uint_le(cri_arena_pool_get_cached_bytes(pool), CRI_ARENA_POOL_CAP_BYTES);
    }
    ck_assert_uint_eq(made[2], made[1]);
}
END_TEST

/* ---- server streams (internal API, used by the Evented PLEG) ---- */

START_TEST(test_stream_events)
{
    g_autofree char *path = socket_path("cri.sock");
    g_autoptr(FakeCriServer) server = fake_cri_server_new(path);
    g_autoptr(GError) error = NULL;
    g_autoptr(CriChannel) channel = cri_channel_new(path, &error);
    Runtime__V1__GetEventsRequest request = RUNTIME__V1__GET_EVENTS_REQUEST__INIT;
    g_autoptr(CriStream) stream = NULL;
    ProtobufCMessage *message = NULL;

    fake_cri_server_set_events(server, 3, FALSE);
    stream = cri_stream_start(channel, "GetContainerEvents", &request.base,
                              &runtime__v1__container_event_response__descriptor, 0, TRUE, &error);
    ck_assert_ptr_nonnull(stream);
    for (guint i = 0; i < 3; i++) {
        g_autoptr(Runtime__V1__ContainerEventResponse) event = NULL;
        g_autofree char *id = g_strdup_printf("ctr-event-%u", i);

        ck_assert(cri_stream_read(stream, &message, NULL, &error));
        ck_assert_ptr_nonnull(message);
        event = (Runtime__V1__ContainerEventResponse *)g_steal_pointer(&message);
        ck_assert_str_eq(event->container_id, id);
        ck_assert_int_eq(event->container_event_type,
                         RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STOPPED_EVENT);
        ck_assert_int_eq(event->created_at, 1000 + i);
    }
    /* Clean end, and it stays ended. */
    ck_assert(cri_stream_read(stream, &message, NULL, &error));
    ck_assert_ptr_null(message);
    ck_assert(cri_stream_read(stream, &message, NULL, &error));
    ck_assert_ptr_null(message);
}
END_TEST

START_TEST(test_stream_unimplemented)
{
    g_autofree char *path = socket_path("cri.sock");
    g_autoptr(FakeCriServer) server = fake_cri_server_new(path);
    g_autoptr(GError) error = NULL;
    g_autoptr(GError) again = NULL;
    g_autoptr(CriChannel) channel = cri_channel_new(path, &error);
    Runtime__V1__GetEventsRequest request = RUNTIME__V1__GET_EVENTS_REQUEST__INIT;
    g_autoptr(CriStream) stream = NULL;
    ProtobufCMessage *message = NULL;

    fake_cri_server_set_events_unimplemented(server, TRUE);
    stream = cri_stream_start(channel, "GetContainerEvents", &request.base,
                              &runtime__v1__container_event_response__descriptor, 0, FALSE, &error);
    ck_assert_ptr_nonnull(stream);
    ck_assert(!cri_stream_read(stream, &message, NULL, &error));
    ck_assert_ptr_null(message);
    assert_cri_error(error, PLEG_CRI_ERROR_UNIMPLEMENTED, path, "GetContainerEvents");
    ck_assert(!cri_stream_read(stream, &message, NULL, &again));
    ck_assert_int_eq(again->code, PLEG_CRI_ERROR_UNIMPLEMENTED);
}
END_TEST

typedef struct {
    CriStream *stream;
    GCancellable *cancellable;
} StreamCancelData;

static gpointer
stream_cancel_main(gpointer data)
{
    StreamCancelData *d = data;

    /* The reader is blocked (or about to be) on a stream that stays open. */
    g_usleep(G_USEC_PER_SEC / 20);
    if (d->cancellable)
        g_cancellable_cancel(d->cancellable);
    else
        cri_stream_cancel(d->stream);
    return NULL;
}

static void
check_stream_cancel(gboolean with_cancellable)
{
    g_autofree char *path = socket_path("cri.sock");
    g_autoptr(FakeCriServer) server = fake_cri_server_new(path);
    g_autoptr(GError) error = NULL;
    g_autoptr(CriChannel) channel = cri_channel_new(path, &error);
    g_autoptr(GCancellable) cancellable = with_cancellable ? g_cancellable_new() : NULL;
    Runtime__V1__GetEventsRequest request = RUNTIME__V1__GET_EVENTS_REQUEST__INIT;
    g_autoptr(CriStream) stream = NULL;
    g_autoptr(ProtobufCMessage) first = NULL;
    ProtobufCMessage *message = NULL;
    StreamCancelData data;
    GThread *thread;

    fake_cri_server_set_events(server, 1, TRUE);
    stream = cri_stream_start(channel, "GetContainerEvents", &request.base,
                              &runtime__v1__container_event_response__descriptor, 0, TRUE, &error);
    ck_assert(cri_stream_read(stream, &first, cancellable, &error));
    ck_assert_ptr_nonnull(first);

    data = (StreamCancelData){stream, cancellable};
    thread = g_thread_new("stream-cancel", stream_cancel_main, &data);
    ck_assert(!cri_stream_read(stream, &message, cancellable, &error));
    g_thread_join(thread);
    assert_cri_error(error, PLEG_CRI_ERROR_CANCELLED, path, "GetContainerEvents");
}

START_TEST(test_stream_cancel)
{
    check_stream_cancel(FALSE);
}
END_TEST

START_TEST(test_stream_cancellable)
{
    check_stream_cancel(TRUE);
}
END_TEST

/* Freeing a stream that is still open cancels it instead of blocking. */
START_TEST(test_stream_free_open)
{
    g_autofree char *path = socket_path("cri.sock");
    g_autoptr(FakeCriServer) server = fake_cri_server_new(path);
    g_autoptr(GError) error = NULL;
    CriChannel *channel = cri_channel_new(path, &error);
    Runtime__V1__GetEventsRequest request = RUNTIME__V1__GET_EVENTS_REQUEST__INIT;
    CriStream *stream;

    fake_cri_server_set_events(server, 0, TRUE);
    stream = cri_stream_start(channel, "GetContainerEvents", &request.base,
                              &runtime__v1__container_event_response__descriptor, 0, TRUE, &error);
    ck_assert_ptr_nonnull(stream);
    cri_channel_unref(channel); /* the stream keeps it */
    cri_stream_free(stream);
}
END_TEST

/* A stream that waits for the runtime is queued, not failed, while nothing listens. */
START_TEST(test_stream_wait_for_ready)
{
    g_autofree char *path = socket_path("late.sock");
    g_autoptr(GError) error = NULL;
    g_autoptr(CriChannel) channel = cri_channel_new(path, &error);
    Runtime__V1__GetEventsRequest request = RUNTIME__V1__GET_EVENTS_REQUEST__INIT;
    g_autoptr(CriStream) stream = NULL;
    g_autoptr(FakeCriServer) server = NULL;
    g_autoptr(ProtobufCMessage) message = NULL;

    stream = cri_stream_start(channel, "GetContainerEvents", &request.base,
                              &runtime__v1__container_event_response__descriptor, 0, TRUE, &error);
    ck_assert_ptr_nonnull(stream);

    server = fake_cri_server_new(path);
    fake_cri_server_set_events(server, 1, TRUE);
    ck_assert_msg(cri_stream_read(stream, &message, NULL, &error), "%s", error->message);
    ck_assert_ptr_nonnull(message);
    ck_assert_str_eq(((Runtime__V1__ContainerEventResponse *)message)->container_id, "ctr-event-0");
}
END_TEST

START_TEST(test_stream_cancel_unconnected)
{
    g_autofree char *path = socket_path("missing.sock");
    g_autoptr(GError) error = NULL;
    g_autoptr(CriChannel) channel = cri_channel_new(path, &error);
    Runtime__V1__GetEventsRequest request = RUNTIME__V1__GET_EVENTS_REQUEST__INIT;
    g_autoptr(CriStream) stream = NULL;
    ProtobufCMessage *message = NULL;

    stream = cri_stream_start(channel, "GetContainerEvents", &request.base,
                              &runtime__v1__container_event_response__descriptor, 0, TRUE, &error);
    ck_assert_ptr_nonnull(stream);
    cri_stream_cancel(stream);
    ck_assert(!cri_stream_read(stream, &message, NULL, &error));
    ck_assert_ptr_null(message);
    assert_cri_error(error, PLEG_CRI_ERROR_CANCELLED, path, "GetContainerEvents");
}
END_TEST

/* ---- reconnection ---- */

static gboolean
version_succeeds(gpointer data)
{
    g_autoptr(GError) error = NULL;

    return pleg_cri_client_version(data, NULL, NULL, NULL, &error);
}

START_TEST(test_reconnect_after_restart)
{
    g_autofree char *path = socket_path("cri.sock");
    g_autofree char *endpoint = endpoint_for(path);
    FakeCriServer *server = fake_cri_server_new(path);
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegCriClient) client = pleg_cri_client_new(endpoint, 5 * G_USEC_PER_SEC, &error);

    ck_assert(pleg_cri_client_version(client, NULL, NULL, NULL, &error));

    fake_cri_server_free(server);
    ck_assert(!pleg_cri_client_version(client, NULL, NULL, NULL, &error));
    assert_cri_error(error, PLEG_CRI_ERROR_UNAVAILABLE, endpoint, "Version");
    g_clear_error(&error);

    /* The channel retries on its own (backoff at most 3 s); calls succeed again soon. */
    server = fake_cri_server_new(path);
    ck_assert(wait_until(version_succeeds, client, 20 * G_USEC_PER_SEC));
    fake_cri_server_free(server);
}
END_TEST

static Suite *
cri_client_suite(void)
{
    Suite *s = suite_create("cri-client");
    TCase *endpoints = tcase_create("endpoints");
    TCase *failures = tcase_create("failures");
    TCase *calls = tcase_create("calls");
    TCase *streams = tcase_create("streams");

    tcase_add_checked_fixture(endpoints, setup, teardown);
    tcase_add_test(endpoints, test_endpoint_invalid);
    tcase_add_test(endpoints, test_endpoint_forms);
    suite_add_tcase(s, endpoints);

    tcase_add_checked_fixture(failures, setup, teardown);
    tcase_add_test(failures, test_unavailable_missing_socket);
    tcase_add_test(failures, test_unavailable_refused);
    tcase_add_test(failures, test_deadline_exceeded);
    tcase_add_test(failures, test_cancel_from_other_thread);
    tcase_add_test(failures, test_cancel_before_call);
    tcase_add_test(failures, test_concurrent_calls_unavailable);
    tcase_add_test(failures, test_unimplemented);
    tcase_add_test(failures, test_message_size_limit);
    tcase_add_test(failures, test_reconnect_after_restart);
    suite_add_tcase(s, failures);

    tcase_add_checked_fixture(calls, setup, teardown);
    tcase_add_test(calls, test_version);
    tcase_add_test(calls, test_list_pod_sandboxes);
    tcase_add_test(calls, test_list_pod_sandboxes_of_pod);
    tcase_add_test(calls, test_list_containers);
    tcase_add_test(calls, test_pod_sandbox_status);
    tcase_add_test(calls, test_container_status);
    tcase_add_test(calls, test_get_statuses);
    tcase_add_test(calls, test_get_statuses_in_flight_together);
    tcase_add_test(calls, test_get_statuses_one_deadline);
    tcase_add_test(calls, test_drive_hung_call_holds_back_no_other);
    tcase_add_test(calls, test_drive_deadline_per_call);
    tcase_add_test(calls, test_drive_cancel);
    tcase_add_test(calls, test_runtime_outlives_client);
    tcase_add_test(calls, test_concurrent_calls);
    tcase_add_test(calls, test_listing_item_by_item);
    suite_add_tcase(s, calls);

    tcase_add_checked_fixture(streams, setup, teardown);
    tcase_add_test(streams, test_stream_events);
    tcase_add_test(streams, test_stream_unimplemented);
    tcase_add_test(streams, test_stream_cancel);
    tcase_add_test(streams, test_stream_cancellable);
    tcase_add_test(streams, test_stream_free_open);
    tcase_add_test(streams, test_stream_wait_for_ready);
    tcase_add_test(streams, test_stream_cancel_unconnected);
    suite_add_tcase(s, streams);

    return s;
}

int
main(void)
{
    SRunner *runner = srunner_create(cri_client_suite());
    int failed;

    srunner_run_all(runner, CK_NORMAL);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
