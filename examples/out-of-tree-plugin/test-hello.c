/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The hello plugin under test, as a plugin author tests theirs: the module as built, loaded with
 * GModule, started by libpleg-harness's fake host (which records what it does) with cri-sim, the
 * harness's fake CRI runtime, as the runtime endpoint.  Built only against the installed
 * libpleg and libpleg-harness (pkg-config).
 */
#include <check.h>
#include <glib/gstdio.h>
#include <gmodule.h>
#include <stdlib.h>
#include <string.h>

#include <pleg/harness/cri-sim.h>
#include <pleg/harness/fake-host.h>
#include <pleg/pleg-metrics.h>
#include <pleg/pleg-plugin.h>

#define SEC G_USEC_PER_SEC

static const PlegPluginDescriptor *
load_hello(void)
{
    g_autoptr(GError) error = NULL;
    GModule *module = g_module_open_full(HELLO_MODULE, G_MODULE_BIND_LOCAL, &error);
    gpointer symbol = NULL;

    ck_assert_msg(module, "%s", error ? error->message : "?");
    ck_assert(g_module_symbol(module, PLEG_PLUGIN_DESCRIPTOR_SYMBOL, &symbol));
    g_module_make_resident(module);
    return symbol;
}

typedef struct {
    char *dir;
    CriSim *sim;
    char *endpoint;
    FakeHost *host;
} Fixture;

static Fixture fx;

static void
setup(void)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *socket = NULL;

    fx.dir = g_dir_make_tmp("hello-test-XXXXXX", &error);
    ck_assert_msg(fx.dir, "%s", error ? error->message : "?");
    socket = g_build_filename(fx.dir, "cri.sock", NULL);
    fx.sim = cri_sim_new(socket, &error);
    ck_assert_msg(fx.sim, "%s", error ? error->message : "?");
    fx.endpoint = g_strconcat("unix://", socket, NULL);
    fx.host = fake_host_new();
    fake_host_set_runtime_endpoint(fx.host, fx.endpoint);
}

static void
teardown(void)
{
    g_clear_pointer(&fx.host, fake_host_free);
    g_clear_pointer(&fx.sim, cri_sim_free);
    g_rmdir(fx.dir);
    g_clear_pointer(&fx.dir, g_free);
    g_clear_pointer(&fx.endpoint, g_free);
}

static gboolean
ticked(G_GNUC_UNUSED gpointer data)
{
    g_autofree char *text = pleg_metrics_registry_expose(fake_host_get_metrics(fx.host));

    return strstr(text, "\npleg_hello_ticks_total 1\n") != NULL;
}

START_TEST(test_descriptor)
{
    const PlegPluginDescriptor *descriptor = load_hello();

    ck_assert_uint_eq(descriptor->abi_major, PLEG_PLUGIN_ABI_MAJOR);
    ck_assert_uint_le(descriptor->abi_minor, PLEG_PLUGIN_ABI_MINOR);
    ck_assert_str_eq(descriptor->name, "hello");
    ck_assert_str_eq(descriptor->feature_gate, "HelloPlugin");
}
END_TEST

START_TEST(test_runs)
{
    const PlegPluginDescriptor *descriptor = load_hello();
    const PlegHostServices *services = fake_host_get_services(fx.host);
    g_autoptr(GError) error = NULL;
    g_autofree char *checkers = NULL;
    g_autofree char *failed = NULL;

    ck_assert_msg(fake_host_start_plugin(fx.host, descriptor, &error), "%s",
                  error ? error->message : "?");

    /* Its health checker is registered and healthy, and it says it started. */
    checkers = fake_host_get_health_checker_names(fx.host);
    ck_assert_str_eq(checkers, "hello");
    ck_assert(services->check_health(services->host, &failed, &error));
    ck_assert_ptr_null(failed);
    ck_assert_uint_eq(fake_host_count_logs(fx.host, "PLUGIN", "hello"), 1);
    ck_assert_uint_eq(fake_host_count_logs(fx.host, "GLIB_DOMAIN", "pleg-hello"), 1);
    ck_assert_str_eq(services->get_runtime_endpoint(services->host), fx.endpoint);

    /* One tick a second, counted in its metric. */
    ck_assert_msg(fake_host_wait(fx.host, ticked, NULL, 5 * SEC), "no tick within 5 s");

    /* It never asks for a relist and never calls the runtime. */
    ck_assert_uint_eq(fake_host_get_relist_count(fx.host), 0);
    ck_assert_uint_eq(cri_sim_get_n_calls(fx.sim, NULL), 0);

    /* stop removes the checker; stopping again is harmless. */
    fake_host_stop_plugin(fx.host);
    g_free(checkers);
    checkers = fake_host_get_health_checker_names(fx.host);
    ck_assert_str_eq(checkers, "");
    fake_host_stop_plugin(fx.host);
}
END_TEST

int
main(void)
{
    Suite *suite = suite_create("hello");
    TCase *tc = tcase_create("plugin");
    SRunner *runner;
    int n_failed;

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_descriptor);
    tcase_add_test(tc, test_runs);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(suite, tc);

    runner = srunner_create(suite);
    srunner_run_all(runner, CK_NORMAL);
    n_failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return n_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
