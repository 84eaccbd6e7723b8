/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plugin host (pleg-host.h): loader checks against broken plugin fixtures, feature gates,
 * required plugins, disabling, and embedding on a private GMainContext.  The PLEG reads the
 * in-process fake runtime (tests/core/fake-runtime.h).
 */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <sys/time.h>
#include <time.h>
#include <glib/gstdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pleg/pleg.h>

#include "fake-runtime.h"

#define WAIT_USEC        (10 * G_USEC_PER_SEC)
#define FAST_PERIOD_USEC (10 * 1000)

/* ---- log capture ---- */

static GMutex log_lock;
static GPtrArray *log_records; /* "domain\tmessage" */
static GPtrArray *debug_records; /* the same, at debug level */

static GLogWriterOutput
test_log_writer(GLogLevelFlags level, const GLogField *fields, gsize n_fields, gpointer data)
{
    const char *domain = "", *message = "";

    for (gsize i = 0; i < n_fields; i++) {
        if (g_str_equal(fields[i].key, "GLIB_DOMAIN") && fields[i].length < 0)
            domain = fields[i].value;
        else if (g_str_equal(fields[i].key, "MESSAGE") && fields[i].length < 0)
            message = fields[i].value;
    }
    g_mutex_lock(&log_lock);
    g_ptr_array_add((level & G_LOG_LEVEL_DEBUG) ? debug_records : log_records,
                    g_strdup_printf("%s\t%s", domain, message));
    g_mutex_unlock(&log_lock);
    return g_log_writer_default(level, fields, n_fields, data);
}

static gboolean
find_record(GPtrArray *records, const char *domain, const char *message)
{
    g_autofree char *record = g_strdup_printf("%s\t%s", domain, message);
    gboolean found = FALSE;

    g_mutex_lock(&log_lock);
    for (guint i = 0; i < records->len && !found; i++)
        found = g_str_equal(g_ptr_array_index(records, i), record);
    g_mutex_unlock(&log_lock);
    return found;
}

/* How many of @records are @message of @domain. */
static guint
count_records(GPtrArray *records, const char *domain, const char *message)
{
    g_autofree char *record = g_strdup_printf("%s\t%s", domain, message);
    guint n = 0;

    g_mutex_lock(&log_lock);
    for (guint i = 0; i < records->len; i++)
        n += g_str_equal(g_ptr_array_index(records, i), record);
    g_mutex_unlock(&log_lock);
    return n;
}

/* Logged above debug level. */
static gboolean
logged(const char *domain, const char *message)
{
    return find_record(log_records, domain, message);
}

static gboolean
logged_debug(const char *domain, const char *message)
{
    return find_record(debug_records, domain, message);
}

/* ---- plugin directories ---- */

static void
copy_file(const char *from, const char *to, mode_t mode)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *contents = NULL;
    gsize length;

    ck_assert_msg(g_file_get_contents(from, &contents, &length, &error), "%s", error->message);
    ck_assert_msg(g_file_set_contents(to, contents, length, &error), "%s", error->message);
    ck_assert_int_eq(chmod(to, mode), 0);
}

static char *
module_path(const char *dir, const char *name)
{
    g_autofree char *file = g_strdup_printf("libfixture-%s.so", name);

    return g_build_filename(dir, file, NULL);
}

/* Copies fixture @name (its .plugin file and its module) into @dir. */
static void
install_fixture_mode(const char *dir, const char *name, mode_t mode)
{
    g_autofree char *plugin_src = g_strdup_printf("%s/%s.plugin", FIXTURE_SRCDIR, name);
    g_autofree char *plugin_dst = g_strdup_printf("%s/%s.plugin", dir, name);
    g_autofree char *module_dst = module_path(dir, name);
    g_autofree char *module_src = module_path(FIXTURE_BUILDDIR, name);

    copy_file(plugin_src, plugin_dst, 0644);
    if (g_str_equal(name, "notso")) {
        g_autofree char *text = g_build_filename(FIXTURE_SRCDIR, "not-a-shared-object.txt", NULL);

        copy_file(text, module_dst, mode);
    } else if (g_file_test(module_src, G_FILE_TEST_EXISTS)) {
        copy_file(module_src, module_dst, mode);
    }
}

static void
install_fixture(const char *dir, const char *name)
{
    install_fixture_mode(dir, name, 0755);
}

static void
write_plugin_file(const char *dir, const char *file_name, const char *contents)
{
    g_autofree char *path = g_build_filename(dir, file_name, NULL);

    ck_assert(g_file_set_contents(path, contents, -1, NULL));
}

static void
remove_tree(const char *path)
{
    g_autoptr(GDir) dir = g_dir_open(path, 0, NULL);
    const char *name;

    if (dir) {
        while ((name = g_dir_read_name(dir))) {
            g_autofree char *child = g_build_filename(path, name, NULL);

            remove_tree(child);
        }
        g_rmdir(path);
    } else {
        g_unlink(path);
    }
}

/* Lines the fixture module at @path wrote to "<path>.log", or NULL when it never ran. */
static char *
fixture_log(const char *path)
{
    g_autofree char *log = g_strconcat(path, ".log", NULL);
    char *contents = NULL;

    if (!g_file_get_contents(log, &contents, NULL, NULL))
        return NULL;
    return contents;
}

static gboolean
module_mapped(const char *path)
{
    g_autofree char *maps = NULL;

    ck_assert(g_file_get_contents("/proc/self/maps", &maps, NULL, NULL));
    return strstr(maps, path) != NULL;
}

/* @text with "@DIR@" replaced by @dir. */
static char *
with_dir(const char *text, const char *dir)
{
    g_auto(GStrv) parts = g_strsplit(text, "@DIR@", -1);

    return g_strjoinv(dir, parts);
}

/* ---- a host on a private context ---- */

typedef struct {
    FakeRuntime *fake;
    PlegRuntime *runtime;
    PlegFeatureGates *gates;
    GMainContext *context;
    PlegHost *host;
    char *dir;
    char *plugin_dir; /* when set, used instead of dir */
    gint64 period_usec;
    const char *const *disabled;
    const char *const *required;

    guint relists;
    guint failed_relists;
    GPtrArray *events;
    gboolean callbacks_in_context;
} Env;

static Env *
env_new(void)
{
    Env *env = g_new0(Env, 1);

    env->fake = fake_runtime_new();
    env->runtime = fake_runtime_as_runtime(env->fake);
    env->gates = pleg_feature_gates_new();
    env->context = g_main_context_new();
    env->dir = g_dir_make_tmp("pleg-host-XXXXXX", NULL);
    ck_assert_ptr_nonnull(env->dir);
    env->period_usec = FAST_PERIOD_USEC;
    env->events = g_ptr_array_new_with_free_func(g_free);
    env->callbacks_in_context = TRUE;
    ck_assert(pleg_feature_gates_set(env->gates, PLEG_FEATURE_EVENTED_PLEG, TRUE, NULL));
    return env;
}

static void
env_free(Env *env)
{
    pleg_host_free(env->host);
    /* Let destroyed sources finalize. */
    while (g_main_context_iteration(env->context, FALSE))
        ;
    g_main_context_unref(env->context);
    pleg_runtime_unref(env->runtime);
    fake_runtime_free(env->fake);
    pleg_feature_gates_free(env->gates);
    remove_tree(env->dir);
    g_free(env->dir);
    g_free(env->plugin_dir);
    g_ptr_array_unref(env->events);
    g_free(env);
}

G_DEFINE_AUTOPTR_CLEANUP_FUNC(Env, env_free)

static void
on_event(PlegPodLifecycleEvent *event, gpointer user_data)
{
    Env *env = user_data;

    if (!g_main_context_is_owner(env->context) || g_main_context_default() == env->context)
        env->callbacks_in_context = FALSE;
    g_ptr_array_add(env->events,
                    g_strdup_printf("%s %s %s %s",
                                    pleg_pod_lifecycle_event_type_to_string(event->type),
                                    event->pod_uid, event->container_id ? event->container_id : "-",
                                    pleg_relist_source_to_string(event->relist_source)));
}

static void
on_relist(const GError *error, gint64 relist_time_ns, gpointer user_data)
{
    Env *env = user_data;

    if (!g_main_context_is_owner(env->context))
        env->callbacks_in_context = FALSE;
    if (error)
        env->failed_relists++;
    else
        env->relists++;
}

static void
env_create_host(Env *env)
{
    g_autoptr(GError) error = NULL;
    PlegHostConfig config;

    pleg_host_config_init(&config);
    config.runtime = env->runtime;
    config.plugin_dir = env->plugin_dir ? env->plugin_dir : env->dir;
    config.generic.relist_period_usec = env->period_usec;
    config.disabled_plugins = env->disabled;
    config.required_plugins = env->required;
    env->host = pleg_host_new(&config, env->gates, env->context, &error);
    ck_assert_msg(env->host != NULL, "%s", error ? error->message : "");
    pleg_host_add_event_callback(env->host, on_event, env, NULL);
    pleg_host_set_relist_callback(env->host, on_relist, env, NULL);
}

static void
env_start(Env *env)
{
    g_autoptr(GError) error = NULL;

    env_create_host(env);
    ck_assert_msg(pleg_host_start(env->host, &error), "%s", error ? error->message : "");
}

/* Iterates the host's context until @func holds or the deadline passes. */
static gboolean
env_wait(Env *env, gboolean (*func)(Env *env, gpointer data), gpointer data)
{
    gint64 deadline = g_get_monotonic_time() + WAIT_USEC;

    while (!func(env, data)) {
        if (g_get_monotonic_time() > deadline)
            return func(env, data);
        if (!g_main_context_iteration(env->context, FALSE))
            g_usleep(1000);
    }
    return TRUE;
}

static gboolean
relists_reached(Env *env, gpointer data)
{
    return env->relists >= GPOINTER_TO_UINT(data);
}

static void
drain(Env *env)
{
    while (g_main_context_iteration(env->context, FALSE))
        ;
}

static PlegPluginInfo *
find_info(PlegHost *host, const char *name)
{
    g_autoptr(GPtrArray) plugins = pleg_host_get_plugins(host);

    for (guint i = 0; i < plugins->len; i++) {
        PlegPluginInfo *info = g_ptr_array_index(plugins, i);

        if (g_str_equal(info->name, name))
            return info;
    }
    return NULL;
}

/* The PLEG relists on its period and reports healthy: the host runs on. */
static void
assert_host_runs(Env *env)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *checker = NULL;
    guint before = env->relists;

    ck_assert(env_wait(env, relists_reached, GUINT_TO_POINTER(before + 3)));
    ck_assert_msg(pleg_host_check_health(env->host, &checker, &error), "%s: %s",
                  checker ? checker : "", error ? error->message : "");
    ck_assert(env->callbacks_in_context);
}

/* ---- tests ---- */

START_TEST(test_good_plugin)
{
    g_autoptr(Env) env = env_new();
    g_autoptr(GError) error = NULL;
    g_autoptr(GPtrArray) plugins = NULL;
    g_autofree char *path = module_path(env->dir, "good");
    g_autofree char *sick = g_strconcat(path, ".sick", NULL);
    g_autofree char *checker = NULL;
    g_autofree char *log = NULL;
    PlegPluginInfo *info;

    install_fixture(env->dir, "good");
    env_start(env);

    plugins = pleg_host_get_plugins(env->host);
    ck_assert_uint_eq(plugins->len, 1);
    info = g_ptr_array_index(plugins, 0);
    ck_assert_str_eq(info->name, "good");
    ck_assert_str_eq(info->path, path);
    ck_assert_int_eq(info->state, PLEG_PLUGIN_STATE_RUNNING);
    ck_assert_str_eq(pleg_plugin_state_to_string(info->state), "running");
    ck_assert_ptr_null(info->error);
    ck_assert(module_mapped(path));
    /* Its gate, from its .plugin file, and nothing to explain. */
    ck_assert_str_eq(info->feature_gate, PLEG_FEATURE_EVENTED_PLEG);
    ck_assert_int_eq(info->reason, PLEG_PLUGIN_REASON_NONE);
    ck_assert_ptr_null(info->reason_message);

    /* init and start ran in the plugin's own context (the fixture fails otherwise), and the
     * event services answer UNIMPLEMENTED on an in-process runtime. */
    log = fixture_log(path);
    ck_assert_str_eq(log, "constructor\ninit\nendpoint:\nevents:pleg-cri-error-quark:12\n"
                          "gate:1\nstart\n");
    ck_assert_ptr_nonnull(
        pleg_metrics_lookup(pleg_host_get_metrics(env->host), "pleg_fixture_inits_total"));
    ck_assert(logged("pleg-good", "fixture good initialised"));

    assert_host_runs(env);

    /* The plugin's health checker runs after "pleg-dispatcher". */
    ck_assert(g_file_set_contents(sick, "", 0, NULL));
    ck_assert(!pleg_host_check_health(env->host, &checker, &error));
    ck_assert_str_eq(checker, "good");
    ck_assert_str_eq(error->message, "good is sick");
    g_clear_error(&error);
    g_unlink(sick);

    pleg_host_stop(env->host);
    pleg_host_stop(env->host);
    ck_assert_int_eq(info->state, PLEG_PLUGIN_STATE_STOPPED);
    g_clear_pointer(&log, g_free);
    log = fixture_log(path);
    ck_assert(g_str_has_suffix(log, "start\nstop\nfree\n"));
    /* Its checker went with it. */
    ck_assert(g_file_set_contents(sick, "", 0, NULL));
    ck_assert(pleg_host_check_health(env->host, NULL, NULL));
}
END_TEST

/* ---- plugins' statuses (set_status, ABI 1.2) ---- */

/* Whether @status is one set_status call of the "status" fixture: its state with its own
 * message ("starting" with its line, or "even"/"odd" with "<state> <n>" of that parity). */
static gboolean
status_consistent(const PlegPluginStatus *status)
{
    g_autofree char *prefix = g_strconcat(status->state, " ", NULL);
    guint64 n;

    if (!g_str_equal(status->name, "status") || status->since_unix_usec <= 0)
        return FALSE;
    if (g_str_equal(status->state, "starting"))
        return g_str_equal(status->message, "fixture status starting");
    if (!g_str_equal(status->state, "even") && !g_str_equal(status->state, "odd"))
        return FALSE;
    if (!g_str_has_prefix(status->message, prefix) ||
        !g_ascii_string_to_unsigned(status->message + strlen(prefix), 10, 0, G_MAXUINT64, &n, NULL))
        return FALSE;
    return (n % 2 == 1) == g_str_equal(status->state, "odd");
}

typedef struct {
    PlegHost *host;
    gint stop;
    gint reads; /* atomic: the test waits for the other reader's first */
    guint even, odd;
    char *bad; /* the first inconsistent copy */
} StatusReader;

static void
status_reader_check(StatusReader *reader, GPtrArray *statuses)
{
    const PlegPluginStatus *status;

    g_atomic_int_inc(&reader->reads);
    if (statuses->len != 1) {
        if (!reader->bad)
            reader->bad = g_strdup_printf("%u statuses", statuses->len);
        return;
    }
    status = g_ptr_array_index(statuses, 0);
    if (!status_consistent(status)) {
        if (!reader->bad)
            reader->bad =
                g_strdup_printf("%s: %s \"%s\"", status->name, status->state, status->message);
        return;
    }
    reader->even += g_str_equal(status->state, "even");
    reader->odd += g_str_equal(status->state, "odd");
}

static gpointer
status_reader_main(gpointer data)
{
    StatusReader *reader = data;

    while (!g_atomic_int_get(&reader->stop)) {
        g_autoptr(GPtrArray) statuses = pleg_host_get_plugin_statuses(reader->host);

        status_reader_check(reader, statuses);
    }
    return NULL;
}

/* A plugin sets its status from a thread of its own as fast as it can while two threads read
 * the host's copies: each copy is one call's state and message; the invalid words the fixture
 * also sets are ignored; a plugin that sets none is not listed; the status goes with stop. */
START_TEST(test_plugin_status)
{
    g_autoptr(Env) env = env_new();
    StatusReader other = {0}, mine = {0};
    gint64 deadline;
    GThread *thread;

    install_fixture(env->dir, "good");
    install_fixture(env->dir, "status");
    env_start(env);
    ck_assert_ptr_null(pleg_host_get_plugin_status(env->host, "good"));
    ck_assert_ptr_null(pleg_host_get_plugin_status(env->host, "nosuch"));

    other.host = env->host;
    thread = g_thread_new("status-reader", status_reader_main, &other);
    mine.host = env->host;
    deadline = g_get_monotonic_time() + WAIT_USEC;
    /* Until the other thread has read too: on a loaded machine it may not have run yet. */
    while ((mine.reads < 2000 || mine.even == 0 || mine.odd == 0 ||
            g_atomic_int_get(&other.reads) == 0) &&
           g_get_monotonic_time() < deadline) {
        g_autoptr(PlegPluginStatus) status = pleg_host_get_plugin_status(env->host, "status");
        g_autoptr(GPtrArray) statuses = g_ptr_array_new();

        if (status)
            g_ptr_array_add(statuses, status);
        status_reader_check(&mine, statuses);
    }
    g_atomic_int_set(&other.stop, TRUE);
    g_thread_join(thread);
    ck_assert_msg(!mine.bad && !other.bad, "inconsistent copy: %s",
                  mine.bad ? mine.bad : other.bad);
    ck_assert_msg(mine.even > 0 && mine.odd > 0, "%d reads: even %u, odd %u", mine.reads, mine.even,
                  mine.odd);
    ck_assert_int_gt(other.reads, 0);

    pleg_host_stop(env->host);
    {
        g_autoptr(GPtrArray) statuses = pleg_host_get_plugin_statuses(env->host);

        ck_assert_uint_eq(statuses->len, 0);
    }
    ck_assert_ptr_null(pleg_host_get_plugin_status(env->host, "status"));
    g_free(mine.bad);
    g_free(other.bad);
}
END_TEST

typedef struct {
    const char *name;
    void (*setup)(const char *dir);
    PlegHostError code;
    const char *module; /* the path in the message, relative to the plugin dir */
    const char *reason; /* @DIR@ is the plugin dir */
    const char *log;    /* what the module's code did, NULL: never opened */
} Broken;

static void
setup_nosymbol(const char *dir)
{
    install_fixture(dir, "nosymbol");
}

static void
setup_abimajor(const char *dir)
{
    install_fixture(dir, "abimajor");
}

static void
setup_abiminor(const char *dir)
{
    install_fixture(dir, "abiminor");
}

static void
setup_initfail(const char *dir)
{
    install_fixture(dir, "initfail");
}

static void
setup_startfail(const char *dir)
{
    install_fixture(dir, "startfail");
}

static void
setup_notso(const char *dir)
{
    install_fixture(dir, "notso");
}

static void
setup_group_writable(const char *dir)
{
    install_fixture_mode(dir, "good", 0775);
}

static void
setup_world_writable(const char *dir)
{
    install_fixture_mode(dir, "good", 0646);
}

static void
setup_mismatch(const char *dir)
{
    g_autofree char *module = module_path(FIXTURE_BUILDDIR, "good");
    g_autofree char *copy = module_path(dir, "good");
    g_autofree char *plugin_src = g_build_filename(FIXTURE_SRCDIR, "mismatch.plugin", NULL);
    g_autofree char *plugin_dst = g_build_filename(dir, "mismatch.plugin", NULL);

    copy_file(module, copy, 0755);
    copy_file(plugin_src, plugin_dst, 0644);
}

static void
setup_gate_mismatch(const char *dir)
{
    g_autofree char *module = module_path(FIXTURE_BUILDDIR, "good");
    g_autofree char *copy = module_path(dir, "good");

    copy_file(module, copy, 0755);
    write_plugin_file(dir, "good.plugin",
                      "[Plugin]\nName=good\nModule=libfixture-good.so\n"
                      "FeatureGate=SystemdWatchdog\n");
}

static void
setup_notregular(const char *dir)
{
    g_autofree char *plugin_src = g_build_filename(FIXTURE_SRCDIR, "notregular.plugin", NULL);
    g_autofree char *plugin_dst = g_build_filename(dir, "notregular.plugin", NULL);
    g_autofree char *subdir = g_build_filename(dir, "a-directory.so", NULL);

    copy_file(plugin_src, plugin_dst, 0644);
    ck_assert_int_eq(g_mkdir(subdir, 0755), 0);
}

static void
setup_missing_module(const char *dir)
{
    write_plugin_file(dir, "missing.plugin", "[Plugin]\nName=missing\nModule=libnothere.so\n");
}

static void
setup_duplicate(const char *dir)
{
    g_autofree char *plugin = g_build_filename(FIXTURE_SRCDIR, "startfail.plugin", NULL);
    g_autofree char *copy = g_build_filename(dir, "z-startfail-again.plugin", NULL);

    install_fixture(dir, "startfail");
    copy_file(plugin, copy, 0644);
}

static void
setup_bad_key_file(const char *dir)
{
    write_plugin_file(dir, "garbage.plugin", "this is no key file\n");
}

/* Bytes that would drive a terminal, and a line too long for a log. */
static void
setup_control_bytes(const char *dir)
{
    g_autoptr(GString) contents = g_string_new("[Plugin]\nName=ctl\n\x1b[2J\x07");

    for (int i = 0; i < 1000; i++)
        g_string_append(contents, "0123456789");
    g_string_append_c(contents, '\n');
    write_plugin_file(dir, "ctl.plugin", contents->str);
}

static void
setup_bad_name(const char *dir)
{
    write_plugin_file(dir, "upper.plugin", "[Plugin]\nName=Upper\nModule=libupper.so\n");
}

/* A FIFO with no writer: opening it must not block the host. */
static void
setup_fifo(const char *dir)
{
    g_autofree char *path = g_build_filename(dir, "fifo.plugin", NULL);

    ck_assert_int_eq(mkfifo(path, 0644), 0);
}

/* One byte past the largest .plugin file the loader maps. */
static void
setup_huge(const char *dir)
{
    g_autoptr(GString) contents = g_string_new("[Plugin]\nName=huge\nModule=libhuge.so\n");

    while (contents->len < 64 * 1024 + 1)
        g_string_append_c(contents, '#');
    g_string_truncate(contents, 64 * 1024 + 1);
    write_plugin_file(dir, "huge.plugin", contents->str);
}

/* The 225 bytes of setup_control_bytes()'s line that fit in PLEG_LOG_TEXT_MAX after GLib's
 * 26 bytes of "Key file contains line “" and the 5 control bytes. */
#define CTL_DIGITS "012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234"

static const Broken broken[] = {
    {"nosymbol", setup_nosymbol, PLEG_HOST_ERROR_PLUGIN_SYMBOL, "libfixture-nosymbol.so",
     "no symbol pleg_plugin_descriptor", "constructor\n"},
    {"abimajor", setup_abimajor, PLEG_HOST_ERROR_PLUGIN_ABI, "libfixture-abimajor.so",
     "ABI major 2, host speaks 1", "constructor\n"},
    {"abiminor", setup_abiminor, PLEG_HOST_ERROR_PLUGIN_ABI, "libfixture-abiminor.so",
     "ABI minor 3 is newer than the host's 2", "constructor\n"},
    {"initfail", setup_initfail, PLEG_HOST_ERROR_PLUGIN_INIT, "libfixture-initfail.so",
     "init failed: out of widgets", "constructor\ninit\n"},
    {"startfail", setup_startfail, PLEG_HOST_ERROR_PLUGIN_START, "libfixture-startfail.so",
     "start failed: cannot start widgets",
     "constructor\ninit\nendpoint:\nevents:pleg-cri-error-quark:12\ngate:1\nstart\nstop\nfree\n"},
    {"notso", setup_notso, PLEG_HOST_ERROR_PLUGIN_OPEN, "libfixture-notso.so",
     "cannot open the module: @DIR@/libfixture-notso.so: invalid ELF header", NULL},
    {"good", setup_group_writable, PLEG_HOST_ERROR_PLUGIN_FILE, "libfixture-good.so",
     "module writable by group or others (mode 0775)", NULL},
    {"good", setup_world_writable, PLEG_HOST_ERROR_PLUGIN_FILE, "libfixture-good.so",
     "module writable by group or others (mode 0646)", NULL},
    {"mismatch", setup_mismatch, PLEG_HOST_ERROR_PLUGIN_ABI, "libfixture-good.so",
     "descriptor name good does not match Name=mismatch of @DIR@/mismatch.plugin", "constructor\n"},
    {"good", setup_gate_mismatch, PLEG_HOST_ERROR_PLUGIN_ABI, "libfixture-good.so",
     "descriptor feature gate EventedPLEG does not match FeatureGate=SystemdWatchdog of "
     "@DIR@/good.plugin",
     "constructor\n"},
    {"notregular", setup_notregular, PLEG_HOST_ERROR_PLUGIN_FILE, "a-directory.so",
     "module not a regular file", NULL},
    {"missing", setup_missing_module, PLEG_HOST_ERROR_PLUGIN_FILE, "libnothere.so",
     "cannot stat the module: No such file or directory", NULL},
    {"startfail", setup_duplicate, PLEG_HOST_ERROR_CONFIG, "z-startfail-again.plugin",
     "another plugin is named startfail", NULL},
    {"garbage", setup_bad_key_file, PLEG_HOST_ERROR_CONFIG, "garbage.plugin",
     "cannot read the plugin file: Key file contains line “this is no key file” which is not a "
     "key-value pair, group, or comment",
     NULL},
    {"ctl", setup_control_bytes, PLEG_HOST_ERROR_CONFIG, "ctl.plugin",
     "cannot read the plugin file: Key file contains line “\\x1b[2J\\x07" CTL_DIGITS
     "... (10083 bytes in all)",
     NULL},
    {"upper", setup_bad_name, PLEG_HOST_ERROR_CONFIG, "upper.plugin",
     "invalid Name=Upper, want [a-z0-9-]+", NULL},
    {"fifo", setup_fifo, PLEG_HOST_ERROR_PLUGIN_FILE, "fifo.plugin",
     "plugin file not a regular file", NULL},
    {"huge", setup_huge, PLEG_HOST_ERROR_PLUGIN_FILE, "huge.plugin",
     "plugin file is 65537 bytes, more than a .plugin file's 65536", NULL},
};

/* The reason code the host gives a plugin that failed with @code. */
static PlegPluginReason
failure_reason(PlegHostError code)
{
    static const struct {
        PlegHostError code;
        PlegPluginReason reason;
    } reasons[] = {
        {PLEG_HOST_ERROR_CONFIG, PLEG_PLUGIN_REASON_CONFIG},
        {PLEG_HOST_ERROR_PLUGIN_FILE, PLEG_PLUGIN_REASON_PLUGIN_FILE},
        {PLEG_HOST_ERROR_PLUGIN_OPEN, PLEG_PLUGIN_REASON_OPEN},
        {PLEG_HOST_ERROR_PLUGIN_SYMBOL, PLEG_PLUGIN_REASON_SYMBOL},
        {PLEG_HOST_ERROR_PLUGIN_ABI, PLEG_PLUGIN_REASON_ABI},
        {PLEG_HOST_ERROR_PLUGIN_INIT, PLEG_PLUGIN_REASON_INIT},
        {PLEG_HOST_ERROR_PLUGIN_START, PLEG_PLUGIN_REASON_START},
    };

    for (gsize i = 0; i < G_N_ELEMENTS(reasons); i++) {
        if (reasons[i].code == code)
            return reasons[i].reason;
    }
    ck_abort_msg("no plugin fails with code %d", code);
    return PLEG_PLUGIN_REASON_NONE;
}

START_TEST(test_broken_plugin)
{
    const Broken *b = &broken[_i];
    g_autoptr(Env) env = env_new();
    g_autofree char *path = NULL;
    g_autofree char *reason = NULL;
    g_autofree char *expected = NULL;
    g_autofree char *ignoring = NULL;
    g_autofree char *log = NULL;
    g_autofree char *module = NULL;
    g_autoptr(GPtrArray) plugins = NULL;
    PlegPluginInfo *info = NULL;

    b->setup(env->dir);
    env_start(env);

    path = g_build_filename(env->dir, b->module, NULL);
    reason = with_dir(b->reason, env->dir);
    expected = g_strdup_printf("plugin %s (%s): %s", b->name, path, reason);

    plugins = pleg_host_get_plugins(env->host);
    for (guint i = 0; i < plugins->len; i++) {
        PlegPluginInfo *candidate = g_ptr_array_index(plugins, i);

        if (candidate->state == PLEG_PLUGIN_STATE_FAILED)
            info = candidate;
    }
    ck_assert_msg(info != NULL, "no failed plugin");
    ck_assert_str_eq(info->name, b->name);
    ck_assert_str_eq(pleg_plugin_state_to_string(info->state), "failed");
    ck_assert_ptr_nonnull(info->error);
    ck_assert_msg(g_error_matches(info->error, PLEG_HOST_ERROR, b->code), "code %d: %s",
                  info->error->code, info->error->message);
    ck_assert_str_eq(info->error->message, expected);
    /* The same reason as a code and in words, without the name and path. */
    ck_assert_int_eq(info->reason, failure_reason(b->code));
    ck_assert_str_eq(info->reason_message, reason);

    ignoring = g_strdup_printf("%s, ignoring", expected);
    /* The library logs at debug; the program (plegd) decides what the operator sees. */
    ck_assert_msg(logged_debug("pleg", ignoring), "not logged at debug: %s", ignoring);
    ck_assert_msg(!logged("pleg", ignoring), "logged above debug: %s", ignoring);

    /* What ran of the module's own code. */
    module = g_build_filename(env->dir, b->module, NULL);
    log = fixture_log(module);
    if (b->log)
        ck_assert_str_eq(log ? log : "(none)", b->log);
    else
        ck_assert_msg(log == NULL, "module code ran: %s", log);

    assert_host_runs(env);
}
END_TEST

/* An unknown key of [Plugin] is a warning above debug level, naming the file and the key
 * (escaped), once per key; the plugin loads as it would without it.  Localized keys are
 * translations of known ones, not unknown keys. */
START_TEST(test_unknown_plugin_key)
{
    g_autoptr(Env) env = env_new();
    g_autofree char *file = NULL;
    g_autofree char *typo = NULL;
    g_autofree char *escaped = NULL;
    guint n_unknown = 0;

    install_fixture(env->dir, "good");
    write_plugin_file(env->dir, "good.plugin",
                      "[Plugin]\nName=good\nModule=libfixture-good.so\nFeatureGate=EventedPLEG\n"
                      "Description=loader test fixture\nDescription[de]=Testmodul\n"
                      "Name[de]=gut\nFeatureGtae=EventedPLEG\nFeatureGtae=SystemdWatchdog\n"
                      "K\aey=1\n");
    env_start(env);
    ck_assert_int_eq(find_info(env->host, "good")->state, PLEG_PLUGIN_STATE_RUNNING);

    file = g_build_filename(env->dir, "good.plugin", NULL);
    typo = g_strdup_printf("warning: %s: unknown key FeatureGtae in [Plugin] (known: Name, Module, "
                           "FeatureGate, Description), ignoring",
                           file);
    escaped = g_strdup_printf("warning: %s: unknown key K\\x07ey in [Plugin] (known: Name, "
                              "Module, FeatureGate, Description), ignoring",
                              file);
    /* Once for the two lines that set FeatureGtae, and nothing about the other keys. */
    ck_assert_msg(logged("pleg", typo), "not logged above debug: %s", typo);
    ck_assert_uint_eq(count_records(log_records, "pleg", typo), 1);
    ck_assert_msg(logged("pleg", escaped), "not logged above debug: %s", escaped);
    g_mutex_lock(&log_lock);
    for (guint i = 0; i < log_records->len; i++) {
        const char *record = g_ptr_array_index(log_records, i);

        n_unknown += strstr(record, ": unknown key ") != NULL;
    }
    g_mutex_unlock(&log_lock);
    ck_assert_uint_eq(n_unknown, 2);
    assert_host_runs(env);
}
END_TEST

/* A .plugin file names the module a root host opens: one that another user owns or may write is
 * refused before anything is read from it, and no module is opened (its constructor would run
 * as root). */
START_TEST(test_untrusted_plugin_file)
{
    static const struct {
        mode_t mode;
        uid_t uid;
        const char *reason;
    } cases[] = {
        {0646, 0, "plugin file writable by group or others (mode 0646)"},
        {0664, 0, "plugin file writable by group or others (mode 0664)"},
        {0644, 4242, "plugin file owned by uid 4242, not by root or uid 0"},
    };

    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autoptr(Env) env = env_new();
        g_autofree char *path = module_path(env->dir, "good");
        g_autofree char *plugin_file = g_build_filename(env->dir, "good.plugin", NULL);
        g_autoptr(GPtrArray) plugins = NULL;
        PlegPluginInfo *info;

        if (cases[i].uid != 0 && geteuid() != 0)
            continue; /* chown to another user needs root */
        install_fixture(env->dir, "good");
        ck_assert_int_eq(chmod(plugin_file, cases[i].mode), 0);
        if (cases[i].uid != 0)
            ck_assert_int_eq(chown(plugin_file, cases[i].uid, cases[i].uid), 0);
        env_start(env);

        plugins = pleg_host_get_plugins(env->host);
        ck_assert_uint_eq(plugins->len, 1);
        info = g_ptr_array_index(plugins, 0);
        ck_assert_int_eq(info->state, PLEG_PLUGIN_STATE_FAILED);
        ck_assert(g_error_matches(info->error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_PLUGIN_FILE));
        ck_assert_msg(g_str_has_suffix(info->error->message, cases[i].reason), "%s",
                      info->error->message);
        ck_assert_msg(strstr(info->error->message, "good.plugin"), "%s", info->error->message);
        ck_assert_ptr_null(fixture_log(path));
        ck_assert(!module_mapped(path));
        assert_host_runs(env);
    }
}
END_TEST

START_TEST(test_wrong_owner)
{
    g_autoptr(Env) env = env_new();
    g_autofree char *path = module_path(env->dir, "good");
    g_autofree char *expected = NULL;
    PlegPluginInfo *info;

    if (geteuid() != 0)
        return; /* chown to another user needs root */

    install_fixture(env->dir, "good");
    ck_assert_int_eq(chown(path, 4242, 4242), 0);
    env_start(env);

    info = find_info(env->host, "good");
    ck_assert_int_eq(info->state, PLEG_PLUGIN_STATE_FAILED);
    ck_assert(g_error_matches(info->error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_PLUGIN_FILE));
    expected =
        g_strdup_printf("plugin good (%s): module owned by uid 4242, not by root or uid 0", path);
    ck_assert_str_eq(info->error->message, expected);
    ck_assert_ptr_null(fixture_log(path));
    assert_host_runs(env);
}
END_TEST

typedef struct {
    const char *required;
    const char *fixture;
    gboolean gate;
    const char *message; /* @DIR@: the plugin dir */
    gboolean pleg_started;
} Required;

static const Required required_cases[] = {
    {"initfail", "initfail", TRUE,
     "required plugin initfail (@DIR@/libfixture-initfail.so): init failed: out of widgets", FALSE},
    {"startfail", "startfail", TRUE,
     "required plugin startfail (@DIR@/libfixture-startfail.so): start failed: cannot start "
     "widgets",
     TRUE},
    {"abimajor", "abimajor", TRUE,
     "required plugin abimajor (@DIR@/libfixture-abimajor.so): ABI major 2, host speaks 1", FALSE},
    {"nothere", "good", TRUE, "required plugin nothere was not found in @DIR@", FALSE},
    {"good", "good", FALSE, "required plugin good is disabled: feature gate EventedPLEG is off",
     FALSE},
};

START_TEST(test_required_plugin)
{
    const Required *r = &required_cases[_i];
    g_autoptr(Env) env = env_new();
    g_autoptr(GError) error = NULL;
    g_autofree char *expected = NULL;
    g_autofree char *good = module_path(env->dir, "good");
    g_autofree char *good_log = NULL;
    const char *required[] = {r->required, NULL};
    guint list_calls;

    install_fixture(env->dir, r->fixture);
    if (!g_str_equal(r->fixture, "good"))
        install_fixture(env->dir, "good");
    ck_assert(pleg_feature_gates_set(env->gates, PLEG_FEATURE_EVENTED_PLEG, r->gate, NULL));
    env->required = required;
    env_create_host(env);

    ck_assert(!pleg_host_start(env->host, &error));
    ck_assert_msg(g_error_matches(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_REQUIRED_PLUGIN), "%s",
                  error->message);
    expected = with_dir(r->message, env->dir);
    ck_assert_str_eq(error->message, expected);

    /* Everything was stopped: the good plugin too, and the PLEG does not run. */
    good_log = fixture_log(good);
    if (r->gate)
        ck_assert(g_str_has_suffix(good_log, "\nstop\nfree\n"));
    else
        ck_assert_ptr_null(good_log);
    ck_assert(pleg_host_check_health(env->host, NULL, NULL));
    list_calls = fake_runtime_get_call_count(env->fake, FAKE_OP_LIST_POD_SANDBOXES);
    if (!r->pleg_started)
        ck_assert_uint_eq(list_calls, 0);
    g_main_context_iteration(env->context, FALSE);
    g_usleep(5 * FAST_PERIOD_USEC);
    ck_assert_uint_eq(fake_runtime_get_call_count(env->fake, FAKE_OP_LIST_POD_SANDBOXES),
                      list_calls);
}
END_TEST

START_TEST(test_disabled_by_gate)
{
    g_autoptr(Env) env = env_new();
    g_autofree char *path = module_path(env->dir, "good");
    PlegPluginInfo *info;

    install_fixture(env->dir, "good");
    ck_assert(pleg_feature_gates_set(env->gates, PLEG_FEATURE_EVENTED_PLEG, FALSE, NULL));
    env_start(env);

    info = find_info(env->host, "good");
    ck_assert_int_eq(info->state, PLEG_PLUGIN_STATE_DISABLED_GATE);
    ck_assert_str_eq(pleg_plugin_state_to_string(info->state), "disabled-gate");
    ck_assert_ptr_null(info->error);
    ck_assert_str_eq(info->feature_gate, PLEG_FEATURE_EVENTED_PLEG);
    ck_assert_int_eq(info->reason, PLEG_PLUGIN_REASON_FEATURE_GATE_OFF);
    ck_assert_str_eq(info->reason_message, "feature gate EventedPLEG is off");
    /* Never opened: its constructor did not run and it is not mapped. */
    ck_assert_ptr_null(fixture_log(path));
    ck_assert(!module_mapped(path));
    assert_host_runs(env);
}
END_TEST

START_TEST(test_disabled_by_name)
{
    g_autoptr(Env) env = env_new();
    g_autofree char *path = module_path(env->dir, "good");
    g_autofree char *other = module_path(env->dir, "startfail");
    const char *disabled[] = {"startfail", "good", NULL};
    PlegPluginInfo *info;

    install_fixture(env->dir, "good");
    install_fixture(env->dir, "startfail");
    env->disabled = disabled;
    env_start(env);

    info = find_info(env->host, "good");
    ck_assert_int_eq(info->state, PLEG_PLUGIN_STATE_DISABLED_BY_NAME);
    ck_assert_str_eq(pleg_plugin_state_to_string(info->state), "disabled-by-name");
    ck_assert_ptr_null(info->error);
    ck_assert_int_eq(info->reason, PLEG_PLUGIN_REASON_DISABLED_BY_NAME);
    ck_assert_str_eq(info->reason_message, "disabled by name");
    ck_assert_int_eq(find_info(env->host, "startfail")->state, PLEG_PLUGIN_STATE_DISABLED_BY_NAME);
    ck_assert_ptr_null(fixture_log(path));
    ck_assert_ptr_null(fixture_log(other));
    ck_assert(!module_mapped(path));
    assert_host_runs(env);
}
END_TEST

/* plugin_dir as a search path: directories in order, a later plugin of the same name is a
 * duplicate and fails without being opened. */
START_TEST(test_plugin_search_path)
{
    g_autoptr(Env) env = env_new();
    g_autofree char *first = g_build_filename(env->dir, "first", NULL);
    g_autofree char *second = g_build_filename(env->dir, "second", NULL);
    g_autofree char *good = module_path(first, "good");
    g_autofree char *shadowed = module_path(second, "good");
    g_autofree char *plugin_file = g_build_filename(second, "good.plugin", NULL);
    g_autofree char *expected = NULL;
    g_autoptr(GPtrArray) plugins = NULL;
    PlegPluginInfo *info;

    ck_assert_int_eq(g_mkdir(first, 0755), 0);
    ck_assert_int_eq(g_mkdir(second, 0755), 0);
    install_fixture(first, "good");
    install_fixture(second, "good");
    install_fixture(second, "startfail");
    env->plugin_dir = g_strjoin(G_SEARCHPATH_SEPARATOR_S, first, second, NULL);
    env_start(env);

    plugins = pleg_host_get_plugins(env->host);
    ck_assert_uint_eq(plugins->len, 3);
    info = g_ptr_array_index(plugins, 0);
    ck_assert_str_eq(info->name, "good");
    ck_assert_str_eq(info->path, good);
    ck_assert_int_eq(info->state, PLEG_PLUGIN_STATE_RUNNING);

    info = g_ptr_array_index(plugins, 1);
    ck_assert_str_eq(info->name, "good");
    ck_assert_int_eq(info->state, PLEG_PLUGIN_STATE_FAILED);
    expected = g_strdup_printf("plugin good (%s): another plugin is named good", plugin_file);
    ck_assert_str_eq(info->error->message, expected);
    ck_assert(!module_mapped(shadowed));

    info = g_ptr_array_index(plugins, 2);
    ck_assert_str_eq(info->name, "startfail");
    ck_assert_int_eq(info->state, PLEG_PLUGIN_STATE_FAILED);
    assert_host_runs(env);
}
END_TEST

typedef enum {
    MODE_GATE_OFF,
    MODE_BY_NAME,
    MODE_ENABLED,
    MODE_N,
} Mode;

typedef struct {
    char *events;
    guint list_sandboxes;
    guint list_containers;
    guint relists;
    gboolean healthy;
} Outcome;

/* One scripted scenario; the PLEG period is long, relists after the first are driven by hand,
 * so that call counts are exact. */
static void
run_scenario(Mode mode, Outcome *outcome)
{
    g_autoptr(Env) env = env_new();
    g_autoptr(GError) error = NULL;
    g_autofree char *path = module_path(env->dir, "good");
    const char *disabled[] = {"good", NULL};
    PlegGeneric *pleg;
    PlegPluginState expected_state[] = {
        [MODE_GATE_OFF] = PLEG_PLUGIN_STATE_DISABLED_GATE,
        [MODE_BY_NAME] = PLEG_PLUGIN_STATE_DISABLED_BY_NAME,
        [MODE_ENABLED] = PLEG_PLUGIN_STATE_RUNNING,
    };

    install_fixture(env->dir, "good");
    if (mode == MODE_GATE_OFF)
        ck_assert(pleg_feature_gates_set(env->gates, PLEG_FEATURE_EVENTED_PLEG, FALSE, NULL));
    if (mode == MODE_BY_NAME)
        env->disabled = disabled;
    env->period_usec = G_GINT64_CONSTANT(3600) * G_USEC_PER_SEC;

    fake_runtime_add_sandbox(env->fake, "sb-1", "uid-1", PLEG_POD_SANDBOX_STATE_READY);
    fake_runtime_add_container(env->fake, "ctr-1", "sb-1", PLEG_CONTAINER_STATE_RUNNING);
    fake_runtime_add_sandbox(env->fake, "sb-2", "uid-2", PLEG_POD_SANDBOX_STATE_READY);
    fake_runtime_add_container(env->fake, "ctr-2", "sb-2", PLEG_CONTAINER_STATE_CREATED);

    env_start(env);
    ck_assert_int_eq(find_info(env->host, "good")->state, expected_state[mode]);
    ck_assert(env_wait(env, relists_reached, GUINT_TO_POINTER(1)));
    pleg = pleg_host_get_pleg(env->host);

    fake_runtime_set_container_state(env->fake, "ctr-2", PLEG_CONTAINER_STATE_RUNNING);
    fake_runtime_exit_container(env->fake, "ctr-1", 137, "OOMKilled", 1700000000000000000);
    ck_assert(pleg_generic_relist(pleg, &error));
    fake_runtime_remove_container(env->fake, "ctr-1");
    fake_runtime_remove_sandbox(env->fake, "sb-1");
    ck_assert(pleg_generic_relist(pleg, &error));
    ck_assert(pleg_generic_relist_pod(pleg, "uid-2", PLEG_RELIST_SOURCE_POST_SYNC, &error));
    fake_runtime_fail(env->fake, FAKE_OP_CONTAINER_STATUS, "ctr-2", 1);
    fake_runtime_exit_container(env->fake, "ctr-2", 0, "Completed", 1700000000000000001);
    ck_assert(pleg_generic_relist(pleg, &error));
    ck_assert(pleg_generic_relist(pleg, &error));
    drain(env);

    ck_assert(env->callbacks_in_context);
    g_ptr_array_add(env->events, NULL);
    outcome->events = g_strjoinv("\n", (char **)env->events->pdata);
    outcome->list_sandboxes = fake_runtime_get_call_count(env->fake, FAKE_OP_LIST_POD_SANDBOXES);
    outcome->list_containers = fake_runtime_get_call_count(env->fake, FAKE_OP_LIST_CONTAINERS);
    outcome->relists = env->relists;
    outcome->healthy = pleg_host_check_health(env->host, NULL, NULL);

    if (mode == MODE_ENABLED)
        ck_assert(module_mapped(path));
    else
        ck_assert_ptr_null(fixture_log(path));
}

static int
compare_strings(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* @events ("Type uid id source" lines) grouped by pod uid, each pod's lines in their order: what
 * the PLEG promises is the order within a pod; pods of one relist are published as their
 * inspections finish, in parallel. */
static char *
events_by_pod(const char *events)
{
    g_auto(GStrv) lines = g_strsplit(events, "\n", -1);
    g_autoptr(GPtrArray) uids = g_ptr_array_new_with_free_func(g_free);
    g_autoptr(GString) out = g_string_new(NULL);

    for (char **line = lines; *line; line++) {
        g_auto(GStrv) fields = g_strsplit(*line, " ", 3);

        if (g_strv_length(fields) >= 2 &&
            !g_ptr_array_find_with_equal_func(uids, fields[1], g_str_equal, NULL))
            g_ptr_array_add(uids, g_strdup(fields[1]));
    }
    g_ptr_array_sort(uids, compare_strings);
    for (guint i = 0; i < uids->len; i++) {
        for (char **line = lines; *line; line++) {
            g_auto(GStrv) fields = g_strsplit(*line, " ", 3);

            if (g_strv_length(fields) >= 2 && g_str_equal(fields[1], uids->pdata[i]))
                g_string_append_printf(out, "%s\n", *line);
        }
    }
    return g_string_free(g_steal_pointer(&out), FALSE);
}

START_TEST(test_rest_runs_unchanged)
{
    Outcome outcomes[MODE_N] = {0};

    for (Mode mode = 0; mode < MODE_N; mode++)
        run_scenario(mode, &outcomes[mode]);

    /* The events themselves (in a relist, pods come in the PLEG's own order). */
    {
        g_auto(GStrv) lines = g_strsplit(outcomes[MODE_ENABLED].events, "\n", -1);
        g_autofree char *sorted = NULL;

        qsort(lines, g_strv_length(lines), sizeof(char *), compare_strings);
        sorted = g_strjoinv("\n", lines);
        ck_assert_str_eq(sorted, "ContainerDied uid-1 ctr-1 global\n"
                                 "ContainerDied uid-1 sb-1 global\n"
                                 "ContainerDied uid-2 ctr-2 global\n"
                                 "ContainerRemoved uid-1 ctr-1 global\n"
                                 "ContainerRemoved uid-1 sb-1 global\n"
                                 "ContainerStarted uid-1 ctr-1 global\n"
                                 "ContainerStarted uid-1 sb-1 global\n"
                                 "ContainerStarted uid-2 ctr-2 global\n"
                                 "ContainerStarted uid-2 sb-2 global");
    }
    for (Mode mode = 0; mode < MODE_N; mode++) {
        g_autofree char *events = events_by_pod(outcomes[mode].events);
        g_autofree char *enabled_events = events_by_pod(outcomes[MODE_ENABLED].events);

        ck_assert_str_eq(events, enabled_events);
        ck_assert_uint_eq(outcomes[mode].list_sandboxes, outcomes[MODE_ENABLED].list_sandboxes);
        ck_assert_uint_eq(outcomes[mode].list_containers, outcomes[MODE_ENABLED].list_containers);
        ck_assert_uint_eq(outcomes[mode].relists, 1);
        ck_assert(outcomes[mode].healthy);
    }
    for (Mode mode = 0; mode < MODE_N; mode++)
        g_free(outcomes[mode].events);
}
END_TEST

typedef struct {
    GMainContext *context;
    guint events;
    guint relists;
    gboolean in_context;
} Embedder;

static void
embed_event(PlegPodLifecycleEvent *event, gpointer user_data)
{
    Embedder *embedder = user_data;

    embedder->in_context &= g_main_context_is_owner(embedder->context);
    embedder->events++;
}

static void
embed_relist(const GError *error, gint64 relist_time_ns, gpointer user_data)
{
    Embedder *embedder = user_data;

    embedder->in_context &= g_main_context_is_owner(embedder->context);
    embedder->relists++;
}

START_TEST(test_embedding)
{
    g_autoptr(FakeRuntime) fake = fake_runtime_new();
    g_autoptr(PlegRuntime) runtime = fake_runtime_as_runtime(fake);
    g_autoptr(GMainContext) context = g_main_context_new();
    g_autoptr(PlegHost) host = NULL;
    g_autoptr(GError) error = NULL;
    g_autoptr(GPtrArray) plugins = NULL;
    Embedder embedder = {context, 0, 0, TRUE};
    gint64 deadline;
    PlegHostConfig config;

    fake_runtime_add_sandbox(fake, "sb-1", "uid-1", PLEG_POD_SANDBOX_STATE_READY);
    fake_runtime_add_container(fake, "ctr-1", "sb-1", PLEG_CONTAINER_STATE_RUNNING);

    pleg_host_config_init(&config);
    config.runtime = runtime;
    config.plugin_dir = "";
    config.generic.relist_period_usec = FAST_PERIOD_USEC;

    /* NULL context: the thread-default one at creation. */
    g_main_context_push_thread_default(context);
    host = pleg_host_new(&config, NULL, NULL, &error);
    g_main_context_pop_thread_default(context);
    ck_assert_ptr_nonnull(host);
    pleg_host_add_event_callback(host, embed_event, &embedder, NULL);
    pleg_host_set_relist_callback(host, embed_relist, &embedder, NULL);
    ck_assert(pleg_host_start(host, &error));
    plugins = pleg_host_get_plugins(host);
    ck_assert_uint_eq(plugins->len, 0);

    deadline = g_get_monotonic_time() + WAIT_USEC;
    while ((embedder.events < 2 || embedder.relists < 2) && g_get_monotonic_time() < deadline) {
        if (!g_main_context_iteration(context, FALSE))
            g_usleep(1000);
    }
    ck_assert_uint_ge(embedder.events, 2);
    ck_assert_uint_ge(embedder.relists, 2);
    ck_assert(embedder.in_context);
    ck_assert(pleg_host_check_health(host, NULL, NULL));
    ck_assert_ptr_nonnull(
        pleg_metrics_lookup(pleg_host_get_metrics(host), "kubelet_pleg_relist_duration_seconds"));

    pleg_host_stop(host);
    g_clear_pointer(&host, pleg_host_free);
    while (g_main_context_iteration(context, FALSE))
        ;
}
END_TEST

static gboolean
failed_relists_reached(Env *env, gpointer data)
{
    return env->failed_relists >= GPOINTER_TO_UINT(data);
}

START_TEST(test_health_pleg_first)
{
    g_autoptr(Env) env = env_new();
    g_autoptr(GError) error = NULL;
    g_autofree char *checker = NULL;
    guint failed, relists;
    FakeClock clock = {G_GINT64_CONSTANT(1700000000) * 1000000000};
    PlegHostConfig config;
    gint64 deadline;

    fake_runtime_fail(env->fake, FAKE_OP_LIST_POD_SANDBOXES, NULL, -1);
    pleg_host_config_init(&config);
    config.runtime = env->runtime;
    config.plugin_dir = env->dir;
    config.generic.relist_period_usec = FAST_PERIOD_USEC;
    config.generic.clock = fake_clock_now;
    config.generic.clock_data = &clock;
    env->host = pleg_host_new(&config, env->gates, env->context, &error);
    ck_assert_ptr_nonnull(env->host);
    pleg_host_set_relist_callback(env->host, on_relist, env, NULL);

    /* Not started: healthy. */
    ck_assert(pleg_host_check_health(env->host, NULL, NULL));
    ck_assert(pleg_host_start(env->host, &error));

    deadline = g_get_monotonic_time() + WAIT_USEC;
    while (env->failed_relists < 1 && g_get_monotonic_time() < deadline) {
        if (!g_main_context_iteration(env->context, FALSE))
            g_usleep(1000);
    }
    ck_assert_uint_ge(env->failed_relists, 1);

    /* The first relist finished and failed: not ready at once, and alive (a runtime not up yet
     * must not stop the watchdog heartbeat: the dispatcher's relists keep ending). */
    ck_assert(!pleg_host_check_readiness(env->host, &checker, &error));
    ck_assert_str_eq(checker, "first-relist");
    ck_assert_str_eq(error->message, "pleg has yet to be successful");
    ck_assert(g_error_matches(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_NOT_READY));
    g_clear_error(&error);
    g_clear_pointer(&checker, g_free);
    ck_assert(pleg_host_check_health(env->host, NULL, NULL));
    {
        g_autoptr(GPtrArray) results = pleg_host_check_all(env->host, PLEG_HEALTH_READINESS);
        const PlegHealthResult *result;

        ck_assert_uint_eq(results->len, 4);
        result = g_ptr_array_index(results, 0);
        ck_assert_str_eq(result->name, "pleg-dispatcher");
        ck_assert_ptr_null(result->error);
        result = g_ptr_array_index(results, 1);
        ck_assert_str_eq(result->name, "first-relist");
        ck_assert_str_eq(result->error->message, "pleg has yet to be successful");
        /* ... and the runtime's check names why, from the first failed relist on. */
        result = g_ptr_array_index(results, 2);
        ck_assert_str_eq(result->name, "runtime");
        ck_assert_ptr_nonnull(result->error);
        ck_assert_msg(g_str_has_prefix(result->error->message,
                                       "container runtime is not reachable: "),
                      "%s", result->error->message);
        /* kubelet's PLEG check leaves "pleg has yet to be successful" to first-relist. */
        result = g_ptr_array_index(results, 3);
        ck_assert_str_eq(result->name, "pleg");
        ck_assert_ptr_null(result->error);
    }

    /* Once a relist succeeds, every check passes. */
    fake_runtime_clear_faults(env->fake);
    ck_assert(env_wait(env, relists_reached, GUINT_TO_POINTER(1)));
    ck_assert(pleg_host_check_health(env->host, NULL, NULL));
    ck_assert(pleg_host_check_readiness(env->host, NULL, NULL));

    /* The runtime then goes away for longer than the threshold: kubelet's PLEG check fails
     * readiness with kubelet's message, after the runtime's own error; liveness holds, for the
     * dispatcher's relists keep ending (the watchdog heartbeat goes on). */
    failed = env->failed_relists;
    fake_runtime_fail(env->fake, FAKE_OP_LIST_POD_SANDBOXES, NULL, -1);
    ck_assert(env_wait(env, failed_relists_reached, GUINT_TO_POINTER(failed + 1)));
    fake_clock_advance(&clock, PLEG_DEFAULT_RELIST_THRESHOLD_USEC + G_USEC_PER_SEC);
    ck_assert(env_wait(env, failed_relists_reached, GUINT_TO_POINTER(failed + 2)));
    ck_assert_msg(pleg_host_check_health(env->host, &checker, &error), "%s: %s",
                  checker ? checker : "", error ? error->message : "");
    ck_assert(!pleg_host_check_readiness(env->host, &checker, &error));
    ck_assert_str_eq(checker, "runtime");
    g_clear_error(&error);
    g_clear_pointer(&checker, g_free);
    {
        g_autoptr(GPtrArray) results = pleg_host_check_all(env->host, PLEG_HEALTH_READINESS);
        const PlegHealthResult *result = g_ptr_array_index(results, 3);

        ck_assert_str_eq(result->name, "pleg");
        ck_assert_ptr_nonnull(result->error);
        ck_assert_str_eq(result->error->message,
                         "pleg was last seen active 3m1s ago; threshold is 3m0s");
        ck_assert(g_error_matches(result->error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_UNHEALTHY));
    }

    /* The runtime is back: ready again. */
    relists = env->relists;
    fake_runtime_clear_faults(env->fake);
    ck_assert(env_wait(env, relists_reached, GUINT_TO_POINTER(relists + 1)));
    ck_assert_msg(pleg_host_check_readiness(env->host, &checker, &error), "%s: %s",
                  checker ? checker : "", error ? error->message : "");
}
END_TEST

/* The wall clock as the process sees it, stepped by wall_step_usec: this executable exports
 * both (meson export_dynamic), so GLib's g_get_real_time() reads them as it would read a clock
 * that NTP stepped.  The monotonic clock is left alone. */
static gint64 wall_step_usec;

int
clock_gettime(clockid_t id, struct timespec *ts)
{
    static int (*real)(clockid_t, struct timespec *);
    int r;

    if (!real)
        real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    r = real(id, ts);
    if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE) && wall_step_usec) {
        gint64 usec = (gint64)ts->tv_sec * G_USEC_PER_SEC + ts->tv_nsec / 1000 + wall_step_usec;

        ts->tv_sec = usec / G_USEC_PER_SEC;
        ts->tv_nsec = (usec % G_USEC_PER_SEC) * 1000;
    }
    return r;
}

int
gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_REALTIME, &ts) < 0)
        return -1;
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

/* Issue 24.6: liveness ("pleg-dispatcher") is measured on the monotonic clock, as the PLEG's
 * own threshold is: the wall clock stepped an hour ahead (NTP at boot) while the runtime is not
 * up yet leaves plegd alive, where it used to fail /livez and stop the watchdog heartbeat at
 * once. */
START_TEST(test_health_grace_survives_wall_clock_step)
{
    g_autoptr(Env) env = env_new();
    g_autoptr(GError) error = NULL;
    g_autofree char *checker = NULL;
    PlegHostConfig config;
    gint64 before;

    fake_runtime_fail(env->fake, FAKE_OP_LIST_POD_SANDBOXES, NULL, -1);
    pleg_host_config_init(&config);
    config.runtime = env->runtime;
    config.plugin_dir = env->dir;
    config.generic.relist_period_usec = FAST_PERIOD_USEC;
    env->host = pleg_host_new(&config, env->gates, env->context, &error);
    ck_assert_ptr_nonnull(env->host);
    pleg_host_set_relist_callback(env->host, on_relist, env, NULL);
    ck_assert(pleg_host_start(env->host, &error));
    ck_assert(env_wait(env, failed_relists_reached, GUINT_TO_POINTER(1)));

    before = g_get_real_time();
    wall_step_usec = G_GINT64_CONSTANT(3600) * G_USEC_PER_SEC;
    ck_assert_int_ge(g_get_real_time() - before, G_GINT64_CONSTANT(3600) * G_USEC_PER_SEC); /* GLib sees the step */
    ck_assert_msg(pleg_host_check_health(env->host, &checker, &error), "%s: %s",
                  checker ? checker : "", error ? error->message : "");
    /* A step back neither. */
    wall_step_usec = -G_GINT64_CONSTANT(3600) * G_USEC_PER_SEC;
    ck_assert_msg(pleg_host_check_health(env->host, &checker, &error), "%s: %s",
                  checker ? checker : "", error ? error->message : "");
    wall_step_usec = 0;
}
END_TEST

/* The "runtime" checker fails while the last global relist could not reach the runtime, and
 * heals with the next good one. */
START_TEST(test_health_runtime_reachability)
{
    g_autoptr(Env) env = env_new();
    g_autoptr(GError) error = NULL;
    g_autofree char *checker = NULL;
    guint relists;

    env_start(env);
    ck_assert(env_wait(env, relists_reached, GUINT_TO_POINTER(1)));
    ck_assert(pleg_host_check_readiness(env->host, NULL, NULL));

    fake_runtime_fail(env->fake, FAKE_OP_LIST_POD_SANDBOXES, NULL, -1);
    ck_assert(env_wait(env, failed_relists_reached, GUINT_TO_POINTER(1)));
    ck_assert(!pleg_host_check_readiness(env->host, &checker, &error));
    ck_assert_str_eq(checker, "runtime");
    ck_assert_msg(g_str_has_prefix(error->message, "container runtime is not reachable: "), "%s",
                  error->message);
    /* The runtime's error is passed on, prefixed: its domain and code stay (the fake runtime
     * fails with G_IO_ERROR_FAILED; a CRI client with PLEG_CRI_ERROR). */
    ck_assert(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_FAILED));
    ck_assert(g_str_has_suffix(error->message, "injected failure"));
    g_clear_error(&error);
    /* Liveness, which the watchdog heartbeat follows: a runtime outage is not plegd's to fix. */
    ck_assert(pleg_host_check_health(env->host, NULL, NULL));

    relists = env->relists;
    fake_runtime_clear_faults(env->fake);
    ck_assert(env_wait(env, relists_reached, GUINT_TO_POINTER(relists + 1)));
    ck_assert(pleg_host_check_readiness(env->host, NULL, NULL));
}
END_TEST

/* A first relist stuck in the runtime: alive up to the liveness window from the start, so
 * that the watchdog heartbeat goes on during a slow start, then "pleg-dispatcher" fails: the
 * fake runtime's call honours no deadline, so the dispatcher is really stuck.  The window is
 * the period plus four request timeouts (10 ms + 4 x 1 min) here, more than the threshold
 * (3 min).  The plugins' checkers still run. */
START_TEST(test_health_slow_start)
{
    g_autoptr(Env) env = env_new();
    g_autoptr(GError) error = NULL;
    g_autofree char *checker = NULL;
    g_autofree char *path = module_path(env->dir, "good");
    g_autofree char *sick = g_strconcat(path, ".sick", NULL);
    FakeClock clock = {G_GINT64_CONSTANT(1700000000) * 1000000000};
    PlegHostConfig config;

    install_fixture(env->dir, "good");
    fake_runtime_block(env->fake, FAKE_OP_LIST_POD_SANDBOXES, NULL);
    pleg_host_config_init(&config);
    config.runtime = env->runtime;
    config.plugin_dir = env->dir;
    config.generic.relist_period_usec = FAST_PERIOD_USEC;
    config.generic.clock = fake_clock_now;
    config.generic.clock_data = &clock;
    config.runtime_request_timeout_usec = 60 * G_USEC_PER_SEC;
    env->host = pleg_host_new(&config, env->gates, env->context, &error);
    ck_assert_ptr_nonnull(env->host);
    ck_assert(pleg_host_start(env->host, &error));
    ck_assert(fake_runtime_wait_blocked(env->fake, WAIT_USEC));

    ck_assert(pleg_host_check_health(env->host, NULL, NULL));
    ck_assert(g_file_set_contents(sick, "", 0, NULL));
    ck_assert(!pleg_host_check_health(env->host, &checker, &error));
    ck_assert_str_eq(checker, "good");
    g_clear_error(&error);
    g_clear_pointer(&checker, g_free);
    g_unlink(sick);

    fake_clock_advance(&clock, FAST_PERIOD_USEC + 4 * 60 * G_USEC_PER_SEC);
    ck_assert(pleg_host_check_health(env->host, NULL, NULL));
    fake_clock_advance(&clock, 1000);
    ck_assert(!pleg_host_check_health(env->host, &checker, &error));
    ck_assert_str_eq(checker, "pleg-dispatcher");
    ck_assert_str_eq(error->message, "pleg dispatcher is stuck: no global relist has finished "
                                     "for 4m0.011s; the limit is 4m0.01s");
    ck_assert(g_error_matches(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_UNHEALTHY));

    fake_runtime_unblock(env->fake);
}
END_TEST

/* ---- RequestRelist and suspension through the host, removable event callbacks ---- */

static gboolean
has_event(Env *env, gpointer data)
{
    for (guint i = 0; i < env->events->len; i++) {
        if (g_str_equal(g_ptr_array_index(env->events, i), data))
            return TRUE;
    }
    return FALSE;
}

/* A shim asks the host, not the PLEG: a requested relist runs, a suspended pod's request is
 * held until it resumes, and resuming queues the one relist that publishes what changed. */
START_TEST(test_request_relist_and_suspend)
{
    g_autoptr(Env) env = env_new();

    fake_runtime_add_sandbox(env->fake, "sb-1", "uid-1", PLEG_POD_SANDBOX_STATE_READY);
    fake_runtime_add_container(env->fake, "ctr-1", "sb-1", PLEG_CONTAINER_STATE_RUNNING);
    /* No global relist but the first: only requests find what changes later. */
    env->period_usec = G_GINT64_CONSTANT(3600) * G_USEC_PER_SEC;
    env_start(env);
    ck_assert(env_wait(env, has_event, "ContainerStarted uid-1 ctr-1 global"));

    fake_runtime_exit_container(env->fake, "ctr-1", 1, "Error", 0);
    ck_assert_int_eq(pleg_host_request_relist(env->host, "uid-1", PLEG_RELIST_SOURCE_POST_SYNC),
                     PLEG_RELIST_REQUEST_QUEUED);
    ck_assert(env_wait(env, has_event, "ContainerDied uid-1 ctr-1 post_sync"));

    pleg_host_suspend_pod(env->host, "uid-1");
    fake_runtime_remove_container(env->fake, "ctr-1");
    ck_assert_int_eq(pleg_host_request_relist(env->host, "uid-1", PLEG_RELIST_SOURCE_POST_SYNC),
                     PLEG_RELIST_REQUEST_COALESCED);
    ck_assert(!has_event(env, "ContainerRemoved uid-1 ctr-1 post_sync"));
    pleg_host_resume_pod(env->host, "uid-1");
    ck_assert(env_wait(env, has_event, "ContainerRemoved uid-1 ctr-1 post_sync"));
}
END_TEST

typedef struct {
    PlegHost *host;
    guint id;
    guint calls;
    guint destroyed;
    gboolean remove_itself;
} Counter;

static void
count_event(PlegPodLifecycleEvent *event, gpointer user_data)
{
    Counter *counter = user_data;

    counter->calls++;
    if (counter->remove_itself)
        pleg_host_remove_event_callback(counter->host, counter->id);
}

static void
count_destroyed(gpointer user_data)
{
    ((Counter *)user_data)->destroyed++;
}

static gboolean
relisted_uid2(Env *env, gpointer data)
{
    return has_event(env, "ContainerStarted uid-2 ctr-2 global");
}

/* A removed callback is called no more and its destroy notify runs once, whether it was removed
 * from outside or from inside its own call; the other callbacks go on. */
START_TEST(test_remove_event_callback)
{
    g_autoptr(Env) env = env_new();
    Counter outside = {0}, inside = {.remove_itself = TRUE};
    guint calls;

    fake_runtime_add_sandbox(env->fake, "sb-1", "uid-1", PLEG_POD_SANDBOX_STATE_READY);
    fake_runtime_add_container(env->fake, "ctr-1", "sb-1", PLEG_CONTAINER_STATE_RUNNING);
    env_create_host(env);
    outside.host = inside.host = env->host;
    outside.id = pleg_host_add_event_callback(env->host, count_event, &outside, count_destroyed);
    inside.id = pleg_host_add_event_callback(env->host, count_event, &inside, count_destroyed);
    ck_assert_uint_gt(outside.id, 0);
    ck_assert_uint_ne(outside.id, inside.id);
    ck_assert(pleg_host_start(env->host, NULL));
    ck_assert(env_wait(env, has_event, "ContainerStarted uid-1 ctr-1 global"));
    /* Each callback has a channel of its own, filled one after the other by the PLEG: they all
     * hold the relist's events once a relist has been reported after it. */
    ck_assert(env_wait(env, relists_reached, GUINT_TO_POINTER(env->relists + 1)));
    drain(env);

    /* The sandbox and the container each gave an event: the self-removing one saw the first. */
    ck_assert_uint_eq(inside.calls, 1);
    ck_assert_uint_eq(inside.destroyed, 1);
    ck_assert_uint_ge(outside.calls, 2);
    ck_assert_uint_eq(outside.destroyed, 0);

    pleg_host_remove_event_callback(env->host, outside.id);
    ck_assert_uint_eq(outside.destroyed, 1);
    calls = outside.calls;

    fake_runtime_add_sandbox(env->fake, "sb-2", "uid-2", PLEG_POD_SANDBOX_STATE_READY);
    fake_runtime_add_container(env->fake, "ctr-2", "sb-2", PLEG_CONTAINER_STATE_RUNNING);
    ck_assert(env_wait(env, relisted_uid2, NULL));
    drain(env);
    ck_assert_uint_eq(outside.calls, calls);
    ck_assert_uint_eq(inside.calls, 1);

    g_clear_pointer(&env->host, pleg_host_free);
    ck_assert_uint_eq(outside.destroyed, 1);
    ck_assert_uint_eq(inside.destroyed, 1);
}
END_TEST

START_TEST(test_bad_endpoint)
{
    g_autoptr(GError) error = NULL;
    PlegHostConfig config;

    pleg_host_config_init(&config);
    config.runtime_endpoint = "tcp://127.0.0.1:1234";
    ck_assert_ptr_null(pleg_host_new(&config, NULL, NULL, &error));
    ck_assert(g_error_matches(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG));
    ck_assert_ptr_nonnull(strstr(error->message, "tcp://127.0.0.1:1234"));
}
END_TEST

static gboolean
load_gates(PlegFeatureGates *gates, const char *text, GError **error)
{
    g_autoptr(GKeyFile) key_file = g_key_file_new();

    ck_assert(g_key_file_load_from_data(key_file, text, -1, G_KEY_FILE_NONE, NULL));
    return pleg_feature_gates_load_key_file(gates, key_file, error);
}

START_TEST(test_feature_gates_key_file)
{
    g_autoptr(PlegFeatureGates) gates = pleg_feature_gates_new();
    g_autoptr(GError) error = NULL;

    ck_assert(load_gates(gates, "[Other]\nEventedPLEG=true\n", &error));
    ck_assert(!pleg_feature_gates_enabled(gates, PLEG_FEATURE_EVENTED_PLEG));
    ck_assert(load_gates(gates, "[FeatureGates]\n", &error));

    ck_assert(load_gates(gates,
                         "[FeatureGates]\nEventedPLEG=true\nKubeletWatchdogDiagnostics = true\n"
                         "SystemdWatchdog=false\n",
                         &error));
    ck_assert(pleg_feature_gates_enabled(gates, PLEG_FEATURE_EVENTED_PLEG));
    ck_assert(pleg_feature_gates_enabled(gates, PLEG_FEATURE_KUBELET_WATCHDOG_DIAGNOSTICS));
    ck_assert(!pleg_feature_gates_enabled(gates, PLEG_FEATURE_SYSTEMD_WATCHDOG));

    /* All or nothing: the valid line before the bad one is not applied. */
    ck_assert(
        !load_gates(gates, "[FeatureGates]\nSystemdWatchdog=true\nNoSuchGate=true\n", &error));
    ck_assert(g_error_matches(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG));
    ck_assert_str_eq(error->message, "[FeatureGates]: unrecognized feature gate: NoSuchGate");
    ck_assert(!pleg_feature_gates_enabled(gates, PLEG_FEATURE_SYSTEMD_WATCHDOG));
    g_clear_error(&error);

    ck_assert(
        !load_gates(gates, "[FeatureGates]\nSystemdWatchdog=true\nEventedPLEG=maybe\n", &error));
    ck_assert(g_error_matches(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG));
    ck_assert_str_eq(error->message, "[FeatureGates]: invalid value of EventedPLEG=maybe, err: "
                                     "not a boolean (want true or false)");
    ck_assert(!pleg_feature_gates_enabled(gates, PLEG_FEATURE_SYSTEMD_WATCHDOG));
    ck_assert(pleg_feature_gates_enabled(gates, PLEG_FEATURE_EVENTED_PLEG));
    g_clear_error(&error);

    /* A value cannot smuggle in a second gate. */
    ck_assert(
        !load_gates(gates, "[FeatureGates]\nEventedPLEG=false,SystemdWatchdog=true\n", &error));
    ck_assert_str_eq(error->message,
                     "[FeatureGates]: invalid value of EventedPLEG=false,SystemdWatchdog=true, "
                     "err: not a boolean (want true or false)");
    ck_assert(pleg_feature_gates_enabled(gates, PLEG_FEATURE_EVENTED_PLEG));
    g_clear_error(&error);

    ck_assert(!load_gates(gates, "[FeatureGates]\nEventedPLEG=\n", &error));
    ck_assert_str_eq(error->message, "[FeatureGates]: invalid value of EventedPLEG=, err: not a "
                                     "boolean (want true or false)");
}
END_TEST

/* ---- gates declared by .plugin files (issue 9) ---- */

/* The fixture "declared" brings ProbeGate (Alpha, off): registered from its file, it is off by
 * default, set by [FeatureGates] or --feature-gates syntax, and then enables the plugin. */
START_TEST(test_declared_gate)
{
    g_autoptr(Env) env = env_new();
    g_autofree char *path = module_path(env->dir, "declared");
    g_autoptr(GError) error = NULL;
    PlegFeatureStage stage = PLEG_FEATURE_GA;
    gboolean def = TRUE;
    PlegPluginInfo *info;

    install_fixture(env->dir, "declared");
    ck_assert(!pleg_feature_gates_parse(env->gates, "ProbeGate=true", NULL));
    ck_assert_msg(pleg_feature_gates_register_plugins(env->gates, env->dir, &error), "%s",
                  error->message);
    ck_assert(pleg_feature_gates_known(env->gates, "ProbeGate", &stage, &def));
    ck_assert_int_eq(stage, PLEG_FEATURE_ALPHA);
    ck_assert(!def);
    /* Reading the declarations ran no plugin code. */
    ck_assert_ptr_null(fixture_log(path));
    ck_assert(!module_mapped(path));

    ck_assert(load_gates(env->gates, "[FeatureGates]\nProbeGate=true\n", &error));
    ck_assert(pleg_feature_gates_enabled(env->gates, "ProbeGate"));
    env_start(env);
    info = find_info(env->host, "declared");
    ck_assert_msg(info->state == PLEG_PLUGIN_STATE_RUNNING, "%s",
                  info->error ? info->error->message : pleg_plugin_state_to_string(info->state));
    assert_host_runs(env);
}
END_TEST

START_TEST(test_declared_gate_default_off)
{
    g_autoptr(Env) env = env_new();
    g_autofree char *path = module_path(env->dir, "declared");
    PlegPluginInfo *info;

    install_fixture(env->dir, "declared");
    ck_assert(pleg_feature_gates_register_plugins(env->gates, env->dir, NULL));
    env_start(env);
    info = find_info(env->host, "declared");
    ck_assert_int_eq(info->state, PLEG_PLUGIN_STATE_DISABLED_GATE);
    ck_assert_ptr_null(fixture_log(path));
}
END_TEST

/* Gates the caller did not register: the plugin fails with a message that says what to do. */
START_TEST(test_declared_gate_not_registered)
{
    g_autoptr(Env) env = env_new();
    g_autofree char *path = module_path(env->dir, "declared");
    g_autofree char *expected = NULL;
    PlegPluginInfo *info;

    install_fixture(env->dir, "declared");
    env_start(env);
    info = find_info(env->host, "declared");
    ck_assert_int_eq(info->state, PLEG_PLUGIN_STATE_FAILED);
    expected = g_strdup_printf(
        "plugin declared (%s): %s/declared.plugin: declares feature gate ProbeGate, which the "
        "host's gates do not have: pleg_feature_gates_register_plugins() must run before the "
        "gates are parsed",
        path, env->dir);
    ck_assert_str_eq(info->error->message, expected);
    ck_assert_ptr_null(fixture_log(path));
    assert_host_runs(env);
}
END_TEST

/* pleg_host_new() without gates registers the declared ones itself, at their defaults. */
START_TEST(test_declared_gate_own_gates)
{
    g_autoptr(Env) env = env_new();
    g_autoptr(GError) error = NULL;
    g_autoptr(PlegHost) host = NULL;
    PlegHostConfig config;

    install_fixture(env->dir, "declared");
    pleg_host_config_init(&config);
    config.runtime = env->runtime;
    config.plugin_dir = env->dir;
    host = pleg_host_new(&config, NULL, env->context, &error);
    ck_assert_msg(host != NULL, "%s", error ? error->message : "");
    ck_assert(pleg_host_start(host, &error));
    ck_assert_int_eq(find_info(host, "declared")->state, PLEG_PLUGIN_STATE_DISABLED_GATE);
    pleg_host_stop(host);

    /* A bad declaration then fails pleg_host_new(). */
    write_plugin_file(env->dir, "bad.plugin",
                      "[Plugin]\nName=bad\nModule=libbad.so\n[FeatureGate BadGate]\nStage=Alpha\n"
                      "Default=maybe\n");
    ck_assert_ptr_null(pleg_host_new(&config, NULL, env->context, &error));
    ck_assert(g_error_matches(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG));
}
END_TEST

typedef struct {
    const char *contents; /* of x.plugin; "@" marks where the error names the file */
    const char *error;
} BadDeclaration;

static const BadDeclaration bad_declarations[] = {
    {"[Plugin]\nName=x\n[FeatureGate EventedPLEG]\nStage=Alpha\nDefault=false\n",
     "@: feature gate EventedPLEG is built in: @ may not redefine it"},
    {"[Plugin]\nName=x\n[FeatureGate XGate]\nStage=alpha\nDefault=false\n",
     "@: [FeatureGate XGate]: invalid Stage=alpha: want Stage=Alpha, Beta, GA or Deprecated"},
    {"[Plugin]\nName=x\n[FeatureGate XGate]\nDefault=false\n",
     "@: [FeatureGate XGate]: no Stage: want Stage=Alpha, Beta, GA or Deprecated"},
    {"[Plugin]\nName=x\n[FeatureGate XGate]\nStage=Beta\nDefault=yes\n",
     "@: [FeatureGate XGate]: invalid Default=yes: want Default=true or Default=false"},
    {"[Plugin]\nName=x\n[FeatureGate XGate]\nStage=Beta\n",
     "@: [FeatureGate XGate]: no Default: want Default=true or Default=false"},
    {"[Plugin]\nName=x\n[FeatureGate XGate]\nStage=Beta\nDefault=true\nDefualt=false\n",
     "@: [FeatureGate XGate]: unknown key Defualt (expected Stage and Default)"},
    {"[Plugin]\nName=x\n[FeatureGate x-gate]\nStage=Beta\nDefault=true\n",
     "@: invalid feature gate name \"x-gate\" declared by @: want an upper-case letter followed "
     "by letters and digits"},
    /* What the file says reaches the message escaped. */
    {"[Plugin]\nName=x\n[FeatureGate XGate]\nStage=\x1b[31mAlpha\nDefault=false\n",
     "@: [FeatureGate XGate]: invalid Stage=\\x1b[31mAlpha: want Stage=Alpha, Beta, GA or "
     "Deprecated"},
    {"[Plugin]\nName=x\n[FeatureGate XGate]\nStage=Beta\nDefault=\x1b[31mfalse\n",
     "@: [FeatureGate XGate]: invalid Default=\\x1b[31mfalse: want Default=true or "
     "Default=false"},
    {"[Plugin]\nName=x\n[FeatureGate XGate]\nStage=Beta\nDefault=true\nK\x07y=1\n",
     "@: [FeatureGate XGate]: unknown key K\\x07y (expected Stage and Default)"},
    /* declared.plugin (read first) has ProbeGate as Alpha, off. */
    {"[Plugin]\nName=x\n[FeatureGate ProbeGate]\nStage=Beta\nDefault=true\n",
     "@: feature gate ProbeGate is declared differently: Alpha, default false by "
     "%/declared.plugin; Beta, default true by @"},
};

START_TEST(test_declared_gate_errors)
{
    const BadDeclaration *bad = &bad_declarations[_i];
    g_autoptr(Env) env = env_new();
    g_autoptr(GError) error = NULL;
    g_autofree char *file = NULL;
    g_auto(GStrv) parts = NULL;
    g_autofree char *expected = NULL;
    g_auto(GStrv) dir_parts = NULL;

    install_fixture(env->dir, "declared");
    write_plugin_file(env->dir, "x.plugin", bad->contents);
    file = g_build_filename(env->dir, "x.plugin", NULL);
    parts = g_strsplit(bad->error, "@", -1);
    expected = g_strjoinv(file, parts);
    dir_parts = g_strsplit(expected, "%", -1);
    g_free(expected);
    expected = g_strjoinv(env->dir, dir_parts);

    ck_assert(!pleg_feature_gates_register_plugins(env->gates, env->dir, &error));
    ck_assert(g_error_matches(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG));
    ck_assert_str_eq(error->message, expected);
}
END_TEST

/* Two plugins may share a gate when they declare it alike; a plugin without a declaration may
 * use a gate another one declares. */
START_TEST(test_declared_gate_shared)
{
    g_autoptr(Env) env = env_new();
    g_autoptr(GError) error = NULL;
    PlegPluginInfo *info;

    install_fixture(env->dir, "declared");
    write_plugin_file(env->dir, "also.plugin",
                      "[Plugin]\nName=also\nModule=libnothing.so\nFeatureGate=ProbeGate\n"
                      "[FeatureGate ProbeGate]\nStage=Alpha\nDefault=false\n");
    write_plugin_file(env->dir, "user.plugin",
                      "[Plugin]\nName=user\nModule=libnothing.so\nFeatureGate=ProbeGate\n");
    write_plugin_file(env->dir, "stray.plugin",
                      "[Plugin]\nName=stray\nModule=libnothing.so\nFeatureGate=NobodysGate\n");
    ck_assert_msg(pleg_feature_gates_register_plugins(env->gates, env->dir, &error), "%s",
                  error->message);
    env_start(env);
    ck_assert_int_eq(find_info(env->host, "also")->state, PLEG_PLUGIN_STATE_DISABLED_GATE);
    ck_assert_int_eq(find_info(env->host, "user")->state, PLEG_PLUGIN_STATE_DISABLED_GATE);
    info = find_info(env->host, "stray");
    ck_assert_int_eq(info->state, PLEG_PLUGIN_STATE_FAILED);
    ck_assert(g_str_has_suffix(info->error->message,
                               ": FeatureGate=NobodysGate is not a known feature gate: neither "
                               "built in nor declared in a [FeatureGate NobodysGate] group"));
}
END_TEST

START_TEST(test_restart)
{
    g_autoptr(Env) env = env_new();
    g_autoptr(GError) error = NULL;
    g_autofree char *path = module_path(env->dir, "good");
    g_autofree char *log = NULL;

    install_fixture(env->dir, "good");
    env_start(env);
    pleg_host_stop(env->host);
    ck_assert(pleg_host_start(env->host, &error));
    ck_assert_int_eq(find_info(env->host, "good")->state, PLEG_PLUGIN_STATE_RUNNING);
    assert_host_runs(env);
    pleg_host_stop(env->host);
    log = fixture_log(path);
    /* The module stayed resident: one constructor, two lifecycles. */
    ck_assert_str_eq(log, "constructor\ninit\nendpoint:\nevents:pleg-cri-error-quark:12\ngate:1\n"
                          "start\nstop\nfree\ninit\nendpoint:\nevents:pleg-cri-error-quark:12\n"
                          "gate:1\nstart\nstop\nfree\n");
}
END_TEST

static Suite *
host_suite(void)
{
    Suite *s = suite_create("host");
    TCase *tc = tcase_create("loader");

    tcase_add_test(tc, test_good_plugin);
    tcase_add_test(tc, test_plugin_status);
    tcase_add_loop_test(tc, test_broken_plugin, 0, G_N_ELEMENTS(broken));
    tcase_add_test(tc, test_wrong_owner);
    tcase_add_test(tc, test_untrusted_plugin_file);
    tcase_add_test(tc, test_unknown_plugin_key);
    tcase_add_loop_test(tc, test_required_plugin, 0, G_N_ELEMENTS(required_cases));
    tcase_add_test(tc, test_disabled_by_gate);
    tcase_add_test(tc, test_disabled_by_name);
    tcase_add_test(tc, test_plugin_search_path);
    tcase_add_test(tc, test_rest_runs_unchanged);
    tcase_add_test(tc, test_restart);
    suite_add_tcase(s, tc);

    tc = tcase_create("host");
    tcase_add_test(tc, test_embedding);
    tcase_add_test(tc, test_health_pleg_first);
    tcase_add_test(tc, test_health_grace_survives_wall_clock_step);
    tcase_add_test(tc, test_health_slow_start);
    tcase_add_test(tc, test_health_runtime_reachability);
    tcase_add_test(tc, test_request_relist_and_suspend);
    tcase_add_test(tc, test_remove_event_callback);
    tcase_add_test(tc, test_bad_endpoint);
    tcase_add_test(tc, test_feature_gates_key_file);
    tcase_add_test(tc, test_declared_gate);
    tcase_add_test(tc, test_declared_gate_default_off);
    tcase_add_test(tc, test_declared_gate_not_registered);
    tcase_add_test(tc, test_declared_gate_own_gates);
    tcase_add_loop_test(tc, test_declared_gate_errors, 0, G_N_ELEMENTS(bad_declarations));
    tcase_add_test(tc, test_declared_gate_shared);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *runner = srunner_create(host_suite());
    int failed;

    log_records = g_ptr_array_new_with_free_func(g_free);
    debug_records = g_ptr_array_new_with_free_func(g_free);
    g_log_set_writer_func(test_log_writer, NULL, NULL);

    srunner_run_all(runner, CK_ENV);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
