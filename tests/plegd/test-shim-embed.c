/* SPDX-License-Identifier: Apache-2.0 */
/*
 * examples/shim-embed, the plugin host embedded in a program with its own GMainContext, against
 * the in-process fake CRI runtime of the CRI client tests: the events it prints, its exit after
 * the time it was given or on SIGINT, and with a plugin directory.
 */
#include <signal.h>
#include <stdlib.h>

#include "fake-cri-server.h"
#include "plegd-runner.h"

typedef struct {
    char *dir;
    char *endpoint;
    FakeCriServer *server;
} Fixture;

static Fixture fixture;

static void
setup(void)
{
    g_autofree char *path = NULL;

    fixture.dir = make_tmpdir();
    path = g_build_filename(fixture.dir, "cri.sock", NULL);
    fixture.endpoint = g_strconcat("unix://", path, NULL);
    fixture.server = fake_cri_server_new(path);
    ck_assert_ptr_nonnull(fixture.server);
}

static void
teardown(void)
{
    g_clear_pointer(&fixture.server, fake_cri_server_free);
    remove_tmpdir(fixture.dir);
    g_clear_pointer(&fixture.dir, g_free);
    g_clear_pointer(&fixture.endpoint, g_free);
}

static PlegdRunner *
spawn_shim(const char *seconds, const char *plugin_dir)
{
    const char *binary = g_getenv("SHIM_EMBED");
    const char *args[] = {fixture.endpoint, seconds, plugin_dir, NULL};

    ck_assert_msg(binary, "SHIM_EMBED must name the shim-embed binary");
    return plegd_runner_spawn_program(binary, NULL, -1, args);
}

/* What the first relist of the fake runtime yields; ctr-3 is CREATED and yields nothing. */
static const char *const expected_events[] = {
    "ContainerStarted uid-a default/pod-a sandbox sb-a global\n",
    "ContainerStarted uid-a default/pod-a app ctr-1 global\n",
    "ContainerDied uid-a default/pod-a init ctr-2 global\n",
    "ContainerDied uid-b kube-system/pod-b sandbox sb-b global\n",
};

static void
assert_events(const char *out)
{
    g_auto(GStrv) lines = g_strsplit(out, "\n", -1);

    for (gsize i = 0; i < G_N_ELEMENTS(expected_events); i++)
        ck_assert_msg(strstr(out, expected_events[i]), "no \"%s\" in:\n%s", expected_events[i],
                      out);
    /* Each once, and nothing else: the pods did not change. */
    ck_assert_msg(g_strv_length(lines) == G_N_ELEMENTS(expected_events) + 1, "%s", out);
    ck_assert_msg(!strstr(out, "ctr-3"), "%s", out);
}

START_TEST(test_runs_for_seconds)
{
    g_autoptr(PlegdRunner) shim = spawn_shim("2", "");
    g_autofree char *out = NULL;
    g_autofree char *err = NULL;

    ck_assert_int_eq(plegd_runner_wait_exit(shim), 0);
    out = plegd_runner_get_stdout(shim);
    err = plegd_runner_get_stderr(shim);
    assert_events(out);
    ck_assert_msg(strstr(err, "shim-embed: 4 events"), "%s", err);
    ck_assert_uint_gt(fake_cri_server_get_n_calls(fixture.server), 0);
}
END_TEST

START_TEST(test_sigint)
{
    g_autoptr(PlegdRunner) shim = spawn_shim("3600", "");
    g_autofree char *out = NULL;

    for (gsize i = 0; i < G_N_ELEMENTS(expected_events); i++)
        ck_assert(plegd_runner_wait_stdout(shim, expected_events[i]));
    ck_assert_int_eq(plegd_runner_stop(shim, SIGINT), 0);
    out = plegd_runner_get_stdout(shim);
    assert_events(out);
}
END_TEST

START_TEST(test_with_plugins)
{
    g_autofree char *plugin_dir = make_tmpdir();
    g_autoptr(PlegdRunner) shim = NULL;
    g_autofree char *out = NULL;

    copy_file(g_getenv("PLEG_HELLO_PLUGIN"), plugin_dir, "libpleg-hello.so");
    copy_file(g_getenv("PLEG_HELLO_PLUGIN_FILE"), plugin_dir, "hello.plugin");
    g_free(write_file(plugin_dir, "broken.plugin", "[Plugin]\nName=broken\nModule=libbroken.so\n"));
    g_free(write_file(plugin_dir, "libbroken.so", "this is not a shared object\n"));

    shim = spawn_shim("3600", plugin_dir);
    for (gsize i = 0; i < G_N_ELEMENTS(expected_events); i++)
        ck_assert(plegd_runner_wait_stdout(shim, expected_events[i]));
    ck_assert_int_eq(plegd_runner_stop(shim, SIGTERM), 0);
    out = plegd_runner_get_stdout(shim);
    assert_events(out);
    remove_tmpdir(plugin_dir);
}
END_TEST

START_TEST(test_usage)
{
    const char *binary = g_getenv("SHIM_EMBED");
    g_autoptr(PlegdRunner) shim =
        plegd_runner_spawn_program(binary, NULL, -1, (const char *const[]){"unix:///x", NULL});
    g_autofree char *err = NULL;

    ck_assert_int_eq(plegd_runner_wait_exit(shim), 2);
    err = plegd_runner_get_stderr(shim);
    ck_assert_msg(strstr(err, "usage: shim-embed"), "%s", err);
}
END_TEST

static Suite *
shim_embed_suite(void)
{
    Suite *suite = suite_create("shim-embed");
    TCase *tc = tcase_create("fake-cri");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_runs_for_seconds);
    tcase_add_test(tc, test_sigint);
    tcase_add_test(tc, test_with_plugins);
    tcase_add_test(tc, test_usage);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    SRunner *runner = srunner_create(shim_embed_suite());
    int n_failed;

    srunner_run_all(runner, CK_NORMAL);
    n_failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return n_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
