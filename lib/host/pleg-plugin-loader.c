/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plugin loader: trusted .plugin files, their gates, modules, descriptor checks, and
 * what became of each plugin.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pleg/pleg-host.h>

#include "pleg-host-private.h"
#include "pleg-plugin-abi.h"

const char *
pleg_plugin_state_to_string(PlegPluginState state)
{
    switch (state) {
    case PLEG_PLUGIN_STATE_DISABLED_GATE:
        return "disabled-gate";
    case PLEG_PLUGIN_STATE_DISABLED_BY_NAME:
        return "disabled-by-name";
    case PLEG_PLUGIN_STATE_FAILED:
        return "failed";
    case PLEG_PLUGIN_STATE_RUNNING:
        return "running";
    case PLEG_PLUGIN_STATE_STOPPED:
        return "stopped";
    }
    return "unknown";
}

void
pleg_plugin_entry_free(PluginEntry *entry)
{
    /* Its thread may still run plugin code that reaches the entry. */
    if (!entry || entry->abandoned)
        return;
    pleg_health_registry_unref(entry->base.health);
    if (entry->base.status) {
        pleg_status_board_remove(entry->base.status, &entry->base);
        pleg_status_board_unref(entry->base.status);
    }
    g_free(entry->info.name);
    g_free(entry->info.path);
    g_clear_error(&entry->info.error);
    g_free(entry->dir);
    g_free(entry->plugin_file);
    g_free(entry->info.feature_gate);
    g_free(entry->info.reason_message);
    g_free(entry->log_domain);
    g_clear_pointer(&entry->key_file, g_key_file_unref);
    g_free(entry);
}

static PlegPluginReason
reason_of_failure(PlegHostError code)
{
    switch (code) {
    case PLEG_HOST_ERROR_PLUGIN_FILE:
        return PLEG_PLUGIN_REASON_PLUGIN_FILE;
    case PLEG_HOST_ERROR_PLUGIN_OPEN:
        return PLEG_PLUGIN_REASON_OPEN;
    case PLEG_HOST_ERROR_PLUGIN_SYMBOL:
        return PLEG_PLUGIN_REASON_SYMBOL;
    case PLEG_HOST_ERROR_PLUGIN_ABI:
        return PLEG_PLUGIN_REASON_ABI;
    case PLEG_HOST_ERROR_PLUGIN_INIT:
        return PLEG_PLUGIN_REASON_INIT;
    case PLEG_HOST_ERROR_PLUGIN_START:
        return PLEG_PLUGIN_REASON_START;
    default:
        return PLEG_PLUGIN_REASON_CONFIG;
    }
}

/* The plugin is not loaded, for @reason; @message (transfer full) says it without the
 * "plugin NAME (PATH): " of the error. */
static void
set_reason(PluginEntry *entry, PlegPluginState state, PlegPluginReason reason, char *message)
{
    entry->info.state = state;
    entry->info.reason = reason;
    g_free(entry->info.reason_message);
    entry->info.reason_message = message;
}

void
pleg_plugin_entry_fail(PluginEntry *entry, PlegHostError code, const char *format, ...)
{
    g_autofree char *reason = NULL;
    g_autofree char *name = pleg_log_text(entry->info.name, -1, 0);
    g_autofree char *path = pleg_log_text(entry->info.path, -1, 4096);
    va_list args;

    va_start(args, format);
    reason = g_strdup_vprintf(format, args);
    va_end(args);

    /* Untrusted parts of @format's arguments (a .plugin file's bytes, a plugin's message) are
     * escaped by the callers; the name and path come from file names and Module=. */
    g_clear_error(&entry->info.error);
    entry->info.error =
        g_error_new(PLEG_HOST_ERROR, code, "plugin %s (%s): %s", name, path, reason);
    set_reason(entry, PLEG_PLUGIN_STATE_FAILED, reason_of_failure(code), g_steal_pointer(&reason));
}

static gboolean
valid_plugin_name(const char *name)
{
    if (!name || !*name)
        return FALSE;
    for (const char *p = name; *p; p++) {
        if (!g_ascii_islower(*p) && !g_ascii_isdigit(*p) && *p != '-')
            return FALSE;
    }
    return TRUE;
}

static gboolean
is_required(PlegHost *self, const char *name)
{
    return self->required_plugins &&
           g_strv_contains((const char *const *)self->required_plugins, name);
}

static PluginEntry *
find_plugin(PlegHost *self, const char *name)
{
    for (guint i = 0; i < self->plugins->len; i++) {
        PluginEntry *entry = g_ptr_array_index(self->plugins, i);

        if (g_str_equal(entry->info.name, name))
            return entry;
    }
    return NULL;
}

/* A file a root process may act on: a regular file owned by root (or by the user running the
 * host) and writable by nobody else, as NetworkManager's nm_utils_validate_plugin() checks.
 * Otherwise @what ("plugin file", "module") and the reason in @error. */
static gboolean
check_trusted(const struct stat *st, const char *what, GError **error)
{
    if (!S_ISREG(st->st_mode)) {
        g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_PLUGIN_FILE, "%s not a regular file",
                    what);
        return FALSE;
    }
    if (st->st_uid != 0 && st->st_uid != geteuid()) {
        g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_PLUGIN_FILE,
                    "%s owned by uid %u, not by root or uid %u", what, (unsigned)st->st_uid,
                    (unsigned)geteuid());
        return FALSE;
    }
    if (st->st_mode & (S_IWGRP | S_IWOTH)) {
        g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_PLUGIN_FILE,
                    "%s writable by group or others (mode %04o)", what,
                    (unsigned)(st->st_mode & 07777));
        return FALSE;
    }
    return TRUE;
}

/* A .plugin file is a few lines: anything larger is not one (and would be mapped whole). */
#define PLEG_PLUGIN_FILE_MAX_BYTES (64 * 1024)

/* Loads a .plugin file only when it passes check_trusted(): it names the module a root host
 * opens, so a file anyone else could write must not be read at all.  The checks are made on
 * the open file, so they hold for the bytes read. */
gboolean
pleg_load_trusted_key_file(GKeyFile *key_file, const char *path, GError **error)
{
    g_autoptr(GError) local_error = NULL;
    g_autoptr(GMappedFile) mapped = NULL;
    struct stat st;
    /* O_NONBLOCK: a FIFO in the plugin folder must not block the host in open(); it is then
     * refused as not a regular file. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);

    if (fd < 0) {
        int errsv = errno;

        g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                    "cannot read the plugin file: %s", g_strerror(errsv));
        return FALSE;
    }
    if (fstat(fd, &st) < 0 || !check_trusted(&st, "plugin file", error)) {
        if (error && !*error)
            g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                        "cannot read the plugin file: %s", g_strerror(errno));
        close(fd);
        return FALSE;
    }
    if (st.st_size > PLEG_PLUGIN_FILE_MAX_BYTES) {
        g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_PLUGIN_FILE,
                    "plugin file is %" G_GINT64_FORMAT " bytes, more than a .plugin file's %d",
                    (gint64)st.st_size, PLEG_PLUGIN_FILE_MAX_BYTES);
        close(fd);
        return FALSE;
    }
    mapped = g_mapped_file_new_from_fd(fd, FALSE, &local_error);
    close(fd);
    if (!mapped || !g_key_file_load_from_data(key_file, g_mapped_file_get_contents(mapped),
                                              g_mapped_file_get_length(mapped), G_KEY_FILE_NONE,
                                              &local_error)) {
        /* GLib quotes the offending line, whatever its bytes. */
        g_autofree char *why = pleg_log_text(local_error->message, -1, 0);

        g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_CONFIG,
                    "cannot read the plugin file: %s", why);
        return FALSE;
    }
    return TRUE;
}

/* The keys of [Plugin]: those read below, and Description, which doc/plugins.md documents for
 * people. */
static const char *const plugin_keys[] = {"Name", "Module", "FeatureGate", "Description", NULL};

/* An unknown key of [Plugin] is most likely a typo ("FeatureGtae=") that silently changes what
 * the host does with the plugin; it may also be a key of a newer libpleg.  Either way the file
 * still says what this loader needs: warn at message level, as an operator's warning (journald
 * priority 4; GLib's WARNING level means a bug), naming the file and the key.  A localized key,
 * Key[locale], counts as its Key. */
static void
warn_unknown_keys(const PluginEntry *entry, GKeyFile *key_file)
{
    g_auto(GStrv) keys = g_key_file_get_keys(key_file, PLUGIN_GROUP, NULL, NULL);

    for (guint i = 0; keys && keys[i]; i++) {
        g_autofree char *key = g_strndup(keys[i], strcspn(keys[i], "["));
        g_autofree char *shown_file = NULL;
        g_autofree char *shown_key = NULL;
        g_autofree char *known = NULL;
        g_autofree char *message = NULL;
        gboolean seen = FALSE;
        GLogField fields[3];

        if (g_strv_contains(plugin_keys, key))
            continue;
        /* GKeyFile lists a key once for each line that sets it. */
        for (guint j = 0; j < i && !seen; j++)
            seen = g_str_equal(keys[j], keys[i]);
        if (seen)
            continue;

        shown_file = pleg_log_text(entry->plugin_file, -1, 4096);
        shown_key = pleg_log_text(keys[i], -1, 0);
        known = g_strjoinv(", ", (char **)plugin_keys);
        message = g_strdup_printf("warning: %s: unknown key %s in [" PLUGIN_GROUP "] (known: %s), "
                                  "ignoring",
                                  shown_file, shown_key, known);
        fields[0] = (GLogField){"GLIB_DOMAIN", G_LOG_DOMAIN, -1};
        fields[1] = (GLogField){"PRIORITY", "4", -1};
        fields[2] = (GLogField){"MESSAGE", message, -1};
        g_log_structured_array(G_LOG_LEVEL_MESSAGE, fields, G_N_ELEMENTS(fields));
    }
}

/* Reads the .plugin file: name, module path, gate.  FALSE when the entry failed. */
static gboolean
read_plugin_file(PlegHost *self, PluginEntry *entry)
{
    g_autoptr(GKeyFile) key_file = g_key_file_new();
    g_autoptr(GError) local_error = NULL;
    g_autofree char *name = NULL;
    g_autofree char *module = NULL;
    g_autofree char *gate = NULL;

    if (!pleg_load_trusted_key_file(key_file, entry->plugin_file, &local_error)) {
        pleg_plugin_entry_fail(entry, local_error->code, "%s", local_error->message);
        return FALSE;
    }
    warn_unknown_keys(entry, key_file);

    name = g_key_file_get_string(key_file, PLUGIN_GROUP, "Name", NULL);
    if (!name) {
        pleg_plugin_entry_fail(entry, PLEG_HOST_ERROR_CONFIG, "no Name in [" PLUGIN_GROUP "]");
        return FALSE;
    }
    if (!valid_plugin_name(name)) {
        g_autofree char *shown = pleg_log_text(name, -1, 0);

        pleg_plugin_entry_fail(entry, PLEG_HOST_ERROR_CONFIG, "invalid Name=%s, want [a-z0-9-]+",
                               shown);
        return FALSE;
    }
    g_free(entry->info.name);
    entry->info.name = g_strdup(name);

    if (find_plugin(self, name)) {
        pleg_plugin_entry_fail(entry, PLEG_HOST_ERROR_CONFIG, "another plugin is named %s", name);
        return FALSE;
    }

    module = g_key_file_get_string(key_file, PLUGIN_GROUP, "Module", NULL);
    if (!module || !*module) {
        pleg_plugin_entry_fail(entry, PLEG_HOST_ERROR_CONFIG, "no Module in [" PLUGIN_GROUP "]");
        return FALSE;
    }
    g_free(entry->info.path);
    entry->info.path =
        g_path_is_absolute(module) ? g_strdup(module) : g_build_filename(entry->dir, module, NULL);

    gate = g_key_file_get_string(key_file, PLUGIN_GROUP, "FeatureGate", NULL);
    if (gate && *gate)
        entry->info.feature_gate = g_steal_pointer(&gate);

    entry->log_domain = g_strdup_printf("pleg-%s", entry->info.name);
    entry->key_file = g_steal_pointer(&key_file);
    return TRUE;
}

/* Modelled on NetworkManager's nm_utils_validate_plugin(). */
static gboolean
check_module_file(PluginEntry *entry)
{
    g_autoptr(GError) local_error = NULL;
    struct stat st;

    if (stat(entry->info.path, &st) < 0) {
        int errsv = errno;

        pleg_plugin_entry_fail(entry, PLEG_HOST_ERROR_PLUGIN_FILE, "cannot stat the module: %s",
                               g_strerror(errsv));
        return FALSE;
    }
    if (!check_trusted(&st, "module", &local_error)) {
        pleg_plugin_entry_fail(entry, PLEG_HOST_ERROR_PLUGIN_FILE, "%s", local_error->message);
        return FALSE;
    }
    return TRUE;
}

static gboolean
check_descriptor(PluginEntry *entry, const PlegPluginDescriptor *descriptor)
{
    const gsize reserved_offset = G_STRUCT_OFFSET(PlegPluginDescriptor, reserved);

    /* abi_major, abi_minor and size are at the same place in every ABI version. */
    if (descriptor->abi_major != PLEG_PLUGIN_ABI_MAJOR) {
        pleg_plugin_entry_fail(entry, PLEG_HOST_ERROR_PLUGIN_ABI, "ABI major %u, host speaks %u",
                               descriptor->abi_major, PLEG_PLUGIN_ABI_MAJOR);
        return FALSE;
    }
    if (descriptor->abi_minor > PLEG_PLUGIN_ABI_MINOR) {
        pleg_plugin_entry_fail(entry, PLEG_HOST_ERROR_PLUGIN_ABI,
                               "ABI minor %u is newer than the host's %u", descriptor->abi_minor,
                               PLEG_PLUGIN_ABI_MINOR);
        return FALSE;
    }
    if (descriptor->size < PLEG_PLUGIN_DESCRIPTOR_SIZE_1_0) {
        pleg_plugin_entry_fail(entry, PLEG_HOST_ERROR_PLUGIN_ABI,
                               "descriptor size %u is smaller than the %u bytes of ABI %u.0",
                               descriptor->size, (unsigned)PLEG_PLUGIN_DESCRIPTOR_SIZE_1_0,
                               PLEG_PLUGIN_ABI_MAJOR);
        return FALSE;
    }
    if (!descriptor->name || !g_str_equal(descriptor->name, entry->info.name)) {
        g_autofree char *shown = pleg_log_text(descriptor->name, -1, 0);

        pleg_plugin_entry_fail(entry, PLEG_HOST_ERROR_PLUGIN_ABI,
                               "descriptor name %s does not match Name=%s of %s", shown,
                               entry->info.name, entry->plugin_file);
        return FALSE;
    }
    if (g_strcmp0(descriptor->feature_gate, entry->info.feature_gate) != 0) {
        g_autofree char *shown = pleg_log_text(descriptor->feature_gate ?: "(none)", -1, 0);
        g_autofree char *shown_file = pleg_log_text(entry->info.feature_gate ?: "", -1, 0);

        pleg_plugin_entry_fail(entry, PLEG_HOST_ERROR_PLUGIN_ABI,
                               "descriptor feature gate %s does not match FeatureGate=%s of %s",
                               shown, shown_file, entry->plugin_file);
        return FALSE;
    }
    for (gsize i = 0; i < G_N_ELEMENTS(descriptor->reserved) &&
                      reserved_offset + (i + 1) * sizeof(gpointer) <= descriptor->size;
         i++) {
        if (descriptor->reserved[i]) {
            pleg_plugin_entry_fail(entry, PLEG_HOST_ERROR_PLUGIN_ABI,
                                   "reserved descriptor fields are set");
            return FALSE;
        }
    }
    return TRUE;
}

/* Opens the module and checks the descriptor.  The module stays resident once it passed. */
static gboolean
open_module(PluginEntry *entry)
{
    g_autoptr(GError) local_error = NULL;
    GModule *module;
    gpointer symbol = NULL;

    module = g_module_open_full(entry->info.path, G_MODULE_BIND_LOCAL | G_MODULE_BIND_LAZY,
                                &local_error);
    if (!module) {
        pleg_plugin_entry_fail(entry, PLEG_HOST_ERROR_PLUGIN_OPEN, "cannot open the module: %s",
                               local_error->message);
        return FALSE;
    }

    if (!g_module_symbol(module, PLEG_PLUGIN_DESCRIPTOR_SYMBOL, &symbol)) {
        pleg_plugin_entry_fail(entry, PLEG_HOST_ERROR_PLUGIN_SYMBOL,
                               "no symbol " PLEG_PLUGIN_DESCRIPTOR_SYMBOL);
        g_module_close(module);
        return FALSE;
    }
    if (!symbol) {
        pleg_plugin_entry_fail(entry, PLEG_HOST_ERROR_PLUGIN_SYMBOL,
                               "symbol " PLEG_PLUGIN_DESCRIPTOR_SYMBOL " is NULL");
        g_module_close(module);
        return FALSE;
    }
    if (!check_descriptor(entry, symbol)) {
        g_module_close(module);
        return FALSE;
    }

    g_module_make_resident(module);
    entry->descriptor = symbol;
    return TRUE;
}

void
pleg_host_report_failure(PlegHost *self, PluginEntry *entry)
{
    if (entry->info.state != PLEG_PLUGIN_STATE_FAILED)
        return;
    /* The library logs at debug: the program decides what its operator sees (plegd logs each
     * plugin's state once, pleg_host_get_plugins() has the error). */
    if (is_required(self, entry->info.name))
        g_debug("%s", entry->info.error->message);
    else
        g_debug("%s, ignoring", entry->info.error->message);
}

GPtrArray *
pleg_list_plugin_files(const char *dir)
{
    g_autoptr(GPtrArray) files = g_ptr_array_new_with_free_func(g_free);
    g_autoptr(GError) local_error = NULL;
    g_autoptr(GDir) handle = NULL;
    const char *name;

    handle = g_dir_open(dir, 0, &local_error);
    if (!handle) {
        g_debug("plugin directory %s: %s, no plugins", dir, local_error->message);
        return g_steal_pointer(&files);
    }
    while ((name = g_dir_read_name(handle))) {
        if (g_str_has_suffix(name, ".plugin"))
            g_ptr_array_add(files, g_strdup(name));
    }
    return g_steal_pointer(&files);
}

int
pleg_compare_file_names(gconstpointer a, gconstpointer b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The gates of the .plugin file agree with the host's: what it declares is registered as
 * declared, and its FeatureGate is built in or registered. */
static gboolean
check_plugin_gates(PlegHost *self, PluginEntry *entry)
{
    g_autoptr(GError) local_error = NULL;

    if (!pleg_declare_plugin_gates(self->gates, entry->key_file, entry->plugin_file, TRUE,
                                   &local_error)) {
        pleg_plugin_entry_fail(entry, PLEG_HOST_ERROR_CONFIG, "%s: %s", entry->plugin_file,
                               local_error->message);
        return FALSE;
    }
    if (entry->info.feature_gate &&
        !pleg_feature_gates_known(self->gates, entry->info.feature_gate, NULL, NULL)) {
        pleg_plugin_entry_fail(
            entry, PLEG_HOST_ERROR_CONFIG,
            "FeatureGate=%s is not a known feature gate: neither built in nor declared "
            "in a [" GATE_DECLARATION_PREFIX "%s] group",
            entry->info.feature_gate, entry->info.feature_gate);
        return FALSE;
    }
    return TRUE;
}

static void
load_plugins_from(PlegHost *self, const char *dir)
{
    g_autoptr(GPtrArray) files = pleg_list_plugin_files(dir);

    g_ptr_array_sort(files, pleg_compare_file_names);
    for (guint i = 0; i < files->len; i++) {
        const char *file_name = g_ptr_array_index(files, i);
        PluginEntry *entry = g_new0(PluginEntry, 1);

        entry->host = self;
        entry->dir = g_strdup(dir);
        entry->plugin_file = g_build_filename(dir, file_name, NULL);
        entry->info.name = g_strndup(file_name, strlen(file_name) - strlen(".plugin"));
        entry->info.path = g_strdup(entry->plugin_file);
        entry->info.state = PLEG_PLUGIN_STATE_STOPPED;

        if (!read_plugin_file(self, entry)) {
            g_ptr_array_add(self->plugins, entry);
            pleg_host_report_failure(self, entry);
            continue;
        }
        g_ptr_array_add(self->plugins, entry);

        /* Both checks come before the module is opened: a disabled plugin runs no code. */
        if (self->disabled_plugins &&
            g_strv_contains((const char *const *)self->disabled_plugins, entry->info.name)) {
            set_reason(entry, PLEG_PLUGIN_STATE_DISABLED_BY_NAME,
                       PLEG_PLUGIN_REASON_DISABLED_BY_NAME, g_strdup("disabled by name"));
            g_debug("plugin %s disabled by name, not loaded", entry->info.name);
            continue;
        }
        if (!check_plugin_gates(self, entry)) {
            pleg_host_report_failure(self, entry);
            continue;
        }
        if (entry->info.feature_gate &&
            !pleg_feature_gates_enabled(self->gates, entry->info.feature_gate)) {
            set_reason(entry, PLEG_PLUGIN_STATE_DISABLED_GATE, PLEG_PLUGIN_REASON_FEATURE_GATE_OFF,
                       g_strdup_printf("feature gate %s is off", entry->info.feature_gate));
            g_debug("plugin %s disabled: feature gate %s is off, not loaded", entry->info.name,
                    entry->info.feature_gate);
            continue;
        }

        if (check_module_file(entry) && open_module(entry))
            pleg_plugin_entry_init(entry);
        pleg_host_report_failure(self, entry);
    }
}

/* plugin_dir is a search path, like GST_PLUGIN_PATH: directories separated by ':', searched in
 * order; a later plugin with a name already loaded fails as a duplicate. */
void
pleg_host_load_plugins(PlegHost *self)
{
    g_auto(GStrv) dirs = NULL;

    if (!self->plugin_dir || !*self->plugin_dir)
        return;

    dirs = g_strsplit(self->plugin_dir, G_SEARCHPATH_SEPARATOR_S, -1);
    for (guint i = 0; dirs[i]; i++) {
        if (*dirs[i])
            load_plugins_from(self, dirs[i]);
    }
}

/* Whether every required plugin is (still) on its way to running. */
gboolean
pleg_host_check_required(PlegHost *self, gboolean started, GError **error)
{
    if (!self->required_plugins)
        return TRUE;

    for (guint i = 0; self->required_plugins[i]; i++) {
        const char *name = self->required_plugins[i];
        PluginEntry *entry = find_plugin(self, name);

        if (!entry) {
            g_autofree char *dir = pleg_log_text(
                self->plugin_dir && *self->plugin_dir ? self->plugin_dir : "(no plugin directory)",
                -1, 4096);

            g_autofree char *shown = pleg_log_text(name, -1, 0);

            g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_REQUIRED_PLUGIN,
                        "required plugin %s was not found in %s", shown, dir);
            return FALSE;
        }
        switch (entry->info.state) {
        case PLEG_PLUGIN_STATE_FAILED:
            g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_REQUIRED_PLUGIN, "required %s",
                        entry->info.error->message);
            return FALSE;
        case PLEG_PLUGIN_STATE_DISABLED_GATE:
            g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_REQUIRED_PLUGIN,
                        "required plugin %s is disabled: feature gate %s is off", name,
                        entry->info.feature_gate);
            return FALSE;
        case PLEG_PLUGIN_STATE_DISABLED_BY_NAME:
            g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_REQUIRED_PLUGIN,
                        "required plugin %s is disabled by name", name);
            return FALSE;
        case PLEG_PLUGIN_STATE_RUNNING:
        case PLEG_PLUGIN_STATE_STOPPED:
            if (started && entry->info.state != PLEG_PLUGIN_STATE_RUNNING) {
                g_set_error(error, PLEG_HOST_ERROR, PLEG_HOST_ERROR_REQUIRED_PLUGIN,
                            "required plugin %s is not running", name);
                return FALSE;
            }
            break;
        }
    }
    return TRUE;
}
