/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cri-ctl (tests/tools) against the in-process fake runtime: output formats, the requests it
 * builds, exit codes and error messages.
 */
#include <check.h>
#include <string.h>
#include <sys/wait.h>

#include <gio/gio.h>
#include <glib/gstdio.h>

#include "api.pb-c.h"
#include "fake-cri-server.h"

static char *tmpdir;
static char *socket_file;
static char *endpoint;
static FakeCriServer *server;

static void
setup(void)
{
    g_autoptr(GError) error = NULL;

    tmpdir = g_dir_make_tmp("pleg-cri-ctl-XXXXXX", &error);
    ck_assert_ptr_nonnull(tmpdir);
    socket_file = g_build_filename(tmpdir, "cri.sock", NULL);
    endpoint = g_strconcat("unix://", socket_file, NULL);
    server = fake_cri_server_new(socket_file);
}

static void
teardown(void)
{
    g_clear_pointer(&server, fake_cri_server_free);
    g_rmdir(tmpdir);
    g_clear_pointer(&tmpdir, g_free);
    g_clear_pointer(&socket_file, g_free);
    g_clear_pointer(&endpoint, g_free);
}

typedef struct {
    int exit_status;
    char *out;
    char *err;
} Result;

static void
result_clear(Result *result)
{
    g_free(result->out);
    g_free(result->err);
}
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(Result, result_clear)

/* Runs cri-ctl; a NULL-terminated argument list follows.  "@E" stands for the endpoint flag. */
static void
run_ctl(Result *result, ...)
{
    g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
    g_autoptr(GError) error = NULL;
    const char *arg;
    int wait_status;
    va_list args;

    g_ptr_array_add(argv, g_strdup(CRI_CTL_PATH));
    va_start(args, result);
    while ((arg = va_arg(args, const char *))) {
        if (g_str_equal(arg, "@E"))
            g_ptr_array_add(argv, g_strconcat("--endpoint=", endpoint, NULL));
        else
            g_ptr_array_add(argv, g_strdup(arg));
    }
    va_end(args);
    g_ptr_array_add(argv, NULL);

    *result = (Result){0};
    ck_assert_msg(g_spawn_sync(NULL, (char **)argv->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL,
                               &result->out, &result->err, &wait_status, &error),
                  "cannot run cri-ctl: %s", error ? error->message : "");
    ck_assert(WIFEXITED(wait_status));
    result->exit_status = WEXITSTATUS(wait_status);
}

static void
assert_ok(const Result *result, const char *expected_out)
{
    ck_assert_msg(result->exit_status == 0, "exit %d, stderr: %s", result->exit_status,
                  result->err);
    if (expected_out)
        ck_assert_str_eq(result->out, expected_out);
}

static gpointer
last_request(const char *method, const ProtobufCMessageDescriptor *descriptor)
{
    g_autoptr(GBytes) bytes = fake_cri_server_get_last_request(server, method);
    gsize size;
    const guint8 *data;
    ProtobufCMessage *message;

    ck_assert_msg(bytes != NULL, "no %s request", method);
    data = g_bytes_get_data(bytes, &size);
    message = protobuf_c_message_unpack(descriptor, NULL, size, data);
    ck_assert_ptr_nonnull(message);
    return message;
}

/* Looks a key up in any protobuf-c map (repeated entries with key and value strings). */
#define MAP_LOOKUP(entries, n_entries, wanted)                                                     \
    ({                                                                                             \
        const char *value_ = NULL;                                                                 \
        for (size_t i_ = 0; i_ < (n_entries); i_++)                                                \
            if (g_str_equal((entries)[i_]->key, (wanted)))                                         \
                value_ = (entries)[i_]->value;                                                     \
        value_;                                                                                    \
    })

START_TEST(test_version)
{
    g_auto(Result) r;

    run_ctl(&r, "@E", "version", NULL);
    assert_ok(&r, FAKE_CRI_RUNTIME_NAME " " FAKE_CRI_RUNTIME_VERSION "\n");
}
END_TEST

START_TEST(test_global_options_after_command)
{
    g_auto(Result) r;

    run_ctl(&r, "version", "@E", "--timeout=1m30s", NULL);
    assert_ok(&r, FAKE_CRI_RUNTIME_NAME " " FAKE_CRI_RUNTIME_VERSION "\n");
}
END_TEST

START_TEST(test_pods)
{
    g_auto(Result) r;

    run_ctl(&r, "@E", "pods", NULL);
    assert_ok(&r, "sb-a READY uid-a pod-a\n"
                  "sb-b NOTREADY uid-b pod-b\n");
}
END_TEST

START_TEST(test_ps)
{
    g_auto(Result) all;
    g_auto(Result) in_a;

    run_ctl(&all, "@E", "ps", NULL);
    assert_ok(&all, "ctr-1 RUNNING sb-a app\n"
                    "ctr-2 EXITED sb-a init\n"
                    "ctr-3 CREATED sb-b sidecar\n");
    run_ctl(&in_a, "@E", "ps", "--sandbox", "sb-b", NULL);
    assert_ok(&in_a, "ctr-3 CREATED sb-b sidecar\n");
}
END_TEST

START_TEST(test_inspect)
{
    g_auto(Result) r;
    g_autofree char *expected =
        g_strdup_printf("state=EXITED exit_code=7 reason=Error finished_at=%" G_GINT64_FORMAT "\n",
                        FAKE_CRI_FINISHED_AT_NS);

    run_ctl(&r, "@E", "inspect", "ctr-2", NULL);
    assert_ok(&r, expected);
}
END_TEST

START_TEST(test_inspect_not_found)
{
    g_auto(Result) r;
    g_autofree char *prefix =
        g_strdup_printf("cri-ctl: ContainerStatus: %s: ContainerStatus: ", endpoint);

    run_ctl(&r, "@E", "inspect", "ctr-gone", NULL);
    ck_assert_int_eq(r.exit_status, 1);
    ck_assert_str_eq(r.out, "");
    ck_assert_msg(g_str_has_prefix(r.err, prefix), "stderr: %s", r.err);
    ck_assert_msg(strstr(r.err, "not found"), "stderr: %s", r.err);
}
END_TEST

START_TEST(test_runp)
{
    g_auto(Result) r;
    Runtime__V1__RunPodSandboxRequest *request;
    const Runtime__V1__PodSandboxConfig *config;
    const Runtime__V1__NamespaceOption *namespaces;

    run_ctl(&r, "@E", "runp", "--name", "web", "--namespace", "team", "--uid", "u-123", NULL);
    assert_ok(&r, "sb-1\n");

    request = last_request("RunPodSandbox", &runtime__v1__run_pod_sandbox_request__descriptor);
    config = request->config;
    ck_assert_ptr_nonnull(config);
    ck_assert_str_eq(config->metadata->name, "web");
    ck_assert_str_eq(config->metadata->namespace_, "team");
    ck_assert_str_eq(config->metadata->uid, "u-123");
    ck_assert_uint_eq(config->metadata->attempt, 0);
    ck_assert_str_eq(MAP_LOOKUP(config->labels, config->n_labels, "io.kubernetes.pod.uid"),
                     "u-123");
    ck_assert_str_eq(MAP_LOOKUP(config->labels, config->n_labels, "io.kubernetes.pod.name"), "web");
    ck_assert_str_eq(MAP_LOOKUP(config->labels, config->n_labels, "io.kubernetes.pod.namespace"),
                     "team");
    namespaces = config->linux->security_context->namespace_options;
    ck_assert_int_eq(namespaces->network, RUNTIME__V1__NAMESPACE_MODE__NODE);
    ck_assert_int_eq(namespaces->pid, RUNTIME__V1__NAMESPACE_MODE__POD);
    ck_assert_int_eq(namespaces->ipc, RUNTIME__V1__NAMESPACE_MODE__POD);
    protobuf_c_message_free_unpacked(&request->base, NULL);
}
END_TEST

START_TEST(test_create)
{
    g_auto(Result) r;
    Runtime__V1__CreateContainerRequest *request;
    const Runtime__V1__ContainerConfig *config;

    run_ctl(&r, "@E", "create", "sb-a", "--pod-name", "pod-a", "--namespace", "default", "--uid",
            "uid-a", "--name", "worker", "--image", "pleg-test:latest", "--", "sh", "-c", "exit 7",
            "--not-an-option", NULL);
    assert_ok(&r, "ctr-new-1\n");

    request = last_request("CreateContainer", &runtime__v1__create_container_request__descriptor);
    ck_assert_str_eq(request->pod_sandbox_id, "sb-a");
    config = request->config;
    ck_assert_str_eq(config->metadata->name, "worker");
    ck_assert_str_eq(config->image->image, "pleg-test:latest");
    ck_assert_uint_eq(config->n_command, 4);
    ck_assert_str_eq(config->command[0], "sh");
    ck_assert_str_eq(config->command[1], "-c");
    ck_assert_str_eq(config->command[2], "exit 7");
    ck_assert_str_eq(config->command[3], "--not-an-option");
    ck_assert_uint_eq(config->n_args, 0);
    ck_assert_str_eq(MAP_LOOKUP(config->labels, config->n_labels, "io.kubernetes.pod.uid"),
                     "uid-a");
    ck_assert_str_eq(MAP_LOOKUP(config->labels, config->n_labels, "io.kubernetes.pod.name"),
                     "pod-a");
    ck_assert_str_eq(MAP_LOOKUP(config->labels, config->n_labels, "io.kubernetes.pod.namespace"),
                     "default");
    ck_assert_str_eq(MAP_LOOKUP(config->labels, config->n_labels, "io.kubernetes.container.name"),
                     "worker");
    ck_assert_int_eq(config->linux->security_context->namespace_options->network,
                     RUNTIME__V1__NAMESPACE_MODE__NODE);
    ck_assert_str_eq(request->sandbox_config->metadata->uid, "uid-a");
    ck_assert_str_eq(request->sandbox_config->metadata->name, "pod-a");
    ck_assert_str_eq(request->sandbox_config->metadata->namespace_, "default");
    protobuf_c_message_free_unpacked(&request->base, NULL);
}
END_TEST

START_TEST(test_lifecycle)
{
    g_auto(Result) runp;
    g_auto(Result) create;
    g_auto(Result) start;
    g_auto(Result) running;
    g_auto(Result) stop;
    g_auto(Result) exited;
    g_auto(Result) rm;
    g_auto(Result) stopp;
    g_auto(Result) rmp;
    g_auto(Result) pods;
    Runtime__V1__StopContainerRequest *stop_request;

    run_ctl(&runp, "@E", "runp", "--name", "p", "--namespace", "n", "--uid", "u", NULL);
    assert_ok(&runp, "sb-1\n");
    run_ctl(&create, "@E", "create", "sb-1", "--pod-name", "p", "--namespace", "n", "--uid", "u",
            "--name", "c", "--image", "img", "--", "sleep", "1000", NULL);
    assert_ok(&create, "ctr-new-2\n");
    run_ctl(&start, "@E", "start", "ctr-new-2", NULL);
    assert_ok(&start, "");
    run_ctl(&running, "@E", "ps", "--sandbox", "sb-1", NULL);
    assert_ok(&running, "ctr-new-2 RUNNING sb-1 c\n");
    run_ctl(&stop, "@E", "stop", "ctr-new-2", "--grace", "5", NULL);
    assert_ok(&stop, "");
    stop_request = last_request("StopContainer", &runtime__v1__stop_container_request__descriptor);
    ck_assert_int_eq(stop_request->timeout, 5);
    protobuf_c_message_free_unpacked(&stop_request->base, NULL);
    run_ctl(&exited, "@E", "ps", "--sandbox", "sb-1", NULL);
    assert_ok(&exited, "ctr-new-2 EXITED sb-1 c\n");
    run_ctl(&rm, "@E", "rm", "ctr-new-2", NULL);
    assert_ok(&rm, "");
    run_ctl(&stopp, "@E", "stopp", "sb-1", NULL);
    assert_ok(&stopp, "");
    run_ctl(&rmp, "@E", "rmp", "sb-1", NULL);
    assert_ok(&rmp, "");
    run_ctl(&pods, "@E", "pods", NULL);
    assert_ok(&pods, "sb-a READY uid-a pod-a\n"
                     "sb-b NOTREADY uid-b pod-b\n");
}
END_TEST

START_TEST(test_events)
{
    g_auto(Result) r;
    g_auto(Result) unimplemented;

    fake_cri_server_set_events(server, 2, FALSE);
    run_ctl(&r, "@E", "events", NULL);
    assert_ok(&r, "ctr-event-0 STOPPED_EVENT 1000\n"
                  "ctr-event-1 STOPPED_EVENT 1001\n");

    fake_cri_server_set_events_unimplemented(server, TRUE);
    run_ctl(&unimplemented, "@E", "events", NULL);
    ck_assert_int_eq(unimplemented.exit_status, 1);
    ck_assert_msg(g_str_has_prefix(unimplemented.err, "cri-ctl: GetContainerEvents: "), "%s",
                  unimplemented.err);
}
END_TEST

START_TEST(test_unavailable)
{
    g_autofree char *missing = g_build_filename(tmpdir, "missing.sock", NULL);
    g_autofree char *flag = g_strconcat("--endpoint=", missing, NULL);
    g_autofree char *prefix =
        g_strdup_printf("cri-ctl: ListPodSandbox: %s: ListPodSandbox: ", missing);
    g_auto(Result) r;

    run_ctl(&r, flag, "--timeout=5s", "pods", NULL);
    ck_assert_int_eq(r.exit_status, 1);
    ck_assert_msg(g_str_has_prefix(r.err, prefix), "stderr: %s", r.err);
}
END_TEST

START_TEST(test_usage_errors)
{
    static const char *const cases[][6] = {
        {"@E", NULL},
        {"@E", "no-such-command", NULL},
        {"--endpoint=tcp://127.0.0.1:1", "version", NULL},
        {"@E", "--timeout=soon", "version", NULL},
        {"@E", "version", "extra", NULL},
        {"@E", "runp", "--name", "x", NULL},
        {"@E", "start", NULL},
        {"@E", "ps", "--bogus", NULL},
    };

    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_auto(Result) r;

        run_ctl(&r, cases[i][0], cases[i][1], cases[i][2], cases[i][3], cases[i][4], NULL);
        ck_assert_msg(r.exit_status == 2, "case %zu: exit %d", i, r.exit_status);
        ck_assert_msg(g_str_has_prefix(r.err, "cri-ctl: "), "case %zu: stderr: %s", i, r.err);
    }
}
END_TEST

static Suite *
cri_ctl_suite(void)
{
    Suite *s = suite_create("cri-ctl");
    TCase *tc = tcase_create("commands");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_version);
    tcase_add_test(tc, test_global_options_after_command);
    tcase_add_test(tc, test_pods);
    tcase_add_test(tc, test_ps);
    tcase_add_test(tc, test_inspect);
    tcase_add_test(tc, test_inspect_not_found);
    tcase_add_test(tc, test_runp);
    tcase_add_test(tc, test_create);
    tcase_add_test(tc, test_lifecycle);
    tcase_add_test(tc, test_events);
    tcase_add_test(tc, test_unavailable);
    tcase_add_test(tc, test_usage_errors);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *runner = srunner_create(cri_ctl_suite());
    int failed;

    srunner_run_all(runner, CK_NORMAL);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
