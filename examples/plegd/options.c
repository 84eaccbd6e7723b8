/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd's options: the command line and the --config key file, with the feature gates that the
 * plugins of the plugin path declare.  Apart from main.c so that the fuzz target
 * (tests/fuzz/plegd-config.c) drives the same code.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "pleg-config.h"
#include "plegd.h"

#define DEFAULT_RUNTIME_REQUEST_TIMEOUT "2m"
#define DEFAULT_RELIST_PERIOD           "1s"
#define DEFAULT_RELIST_THRESHOLD        "3m"
#define DEFAULT_METRICS_BIND_ADDRESS    "127.0.0.1:10388"

/* Settings that the command line and the [plegd] group of --config share; a key of the group
 * is the long flag without its dashes, with the same syntax. */
typedef enum {
    SETTING_ENDPOINT,
    SETTING_TIMEOUT,
    SETTING_PERIOD,
    SETTING_THRESHOLD,
    SETTING_METRICS_ADDRESS,
    SETTING_PLUGIN_DIR,
    SETTING_DISABLE_PLUGINS,
    SETTING_REQUIRE_PLUGINS,
    SETTING_EVENTS_RING_SIZE,
    SETTING_EVENTS_MAX_CLIENTS,
    SETTING_MAX_STATUS_CALLS,
    SETTING_EVENTS_JOURNAL,
    SETTING_STATE_DIR,
    SETTING_VERBOSITY,
    SETTING_LOGGING_FORMAT,
    SETTING_SOCKET,
    SETTING_SOCKET_GROUP,
    SETTING_TCP_EVENTS,
    SETTING_TLS_CERT,
    SETTING_TLS_KEY,
    SETTING_CLIENT_CA,
    N_SETTINGS,
} SettingId;

static const char *const setting_names[N_SETTINGS] = {
    [SETTING_ENDPOINT] = "container-runtime-endpoint",
    [SETTING_TIMEOUT] = "runtime-request-timeout",
    [SETTING_PERIOD] = "relist-period",
    [SETTING_THRESHOLD] = "relist-threshold",
    [SETTING_METRICS_ADDRESS] = "metrics-bind-address",
    [SETTING_PLUGIN_DIR] = "plugin-dir",
    [SETTING_DISABLE_PLUGINS] = "disable-plugins",
    [SETTING_REQUIRE_PLUGINS] = "require-plugins",
    [SETTING_EVENTS_RING_SIZE] = "events-ring-size",
    [SETTING_EVENTS_MAX_CLIENTS] = "events-max-clients",
    [SETTING_MAX_STATUS_CALLS] = "max-status-calls-in-flight",
    [SETTING_EVENTS_JOURNAL] = "events-journal",
    [SETTING_STATE_DIR] = "state-dir",
    [SETTING_VERBOSITY] = "v",
    [SETTING_LOGGING_FORMAT] = "logging-format",
    [SETTING_SOCKET] = "socket",
    [SETTING_SOCKET_GROUP] = "socket-group",
    [SETTING_TCP_EVENTS] = "serve-events-over-tcp",
    [SETTING_TLS_CERT] = "tls-cert-file",
    [SETTING_TLS_KEY] = "tls-private-key-file",
    [SETTING_CLIENT_CA] = "client-ca-file",
};

#define CONFIG_GROUP       PLEGD_CONFIG_GROUP
#define CONFIG_GATES_GROUP "FeatureGates"

typedef struct {
    char *values[N_SETTINGS];         /* NULL: not set */
    const char *origins[N_SETTINGS]; /* the --config file a value came from, NULL: command line */
} Settings;

void
plegd_options_clear(PlegdOptions *options)
{
    g_clear_pointer(&options->endpoint, g_free);
    g_clear_pointer(&options->endpoint_origin, g_free);
    g_clear_object(&options->metrics_address);
    g_clear_pointer(&options->feature_gates, pleg_feature_gates_free);
    g_clear_pointer(&options->plugin_dir, g_free);
    g_clear_pointer(&options->plugin_dir_origin, g_free);
    g_clear_pointer(&options->state_dir, g_free);
    g_clear_pointer(&options->socket_path, g_free);
    g_clear_pointer(&options->tls_cert_file, g_free);
    g_clear_pointer(&options->tls_key_file, g_free);
    g_clear_pointer(&options->client_ca_file, g_free);
    g_clear_pointer(&options->disabled_plugins, g_strfreev);
    g_clear_pointer(&options->required_plugins, g_strfreev);
}

static void
settings_clear(Settings *settings)
{
    for (int i = 0; i < N_SETTINGS; i++)
        g_clear_pointer(&settings->values[i], g_free);
}
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(Settings, settings_clear)

static gboolean
bad_setting(GError **error, const Settings *settings, SettingId id, const char *why)
{
    const char *origin = settings->origins[id];
    g_autofree char *value = pleg_log_text(settings->values[id], -1, 0);
    /* A reason from GLib may quote the value again, raw ("“1\x1b[2J” is not..."). */
    g_autofree char *shown_why = pleg_log_text(why, -1, 1024);

    if (origin) {
        g_autofree char *shown_origin = pleg_log_text(origin, -1, 1024);

        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "invalid %s \"%s\" in [" CONFIG_GROUP "] of %s: %s", setting_names[id], value,
                    shown_origin, shown_why);
    } else {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "invalid --%s \"%s\": %s",
                    setting_names[id], value, shown_why);
    }
    return FALSE;
}

static gboolean
parse_period(const Settings *settings, SettingId id, const char *fallback, gint64 *ret_usec,
             GError **error)
{
    g_autoptr(GError) local_error = NULL;
    const char *text = settings->values[id] ?: fallback;
    gint64 usec;

    if (!pleg_duration_parse(text, &usec, &local_error)) {
        /* The reason names the value too ("... in duration \"X\""): say it once. */
        char *named = g_strrstr(local_error->message, " in duration \"");

        if (named)
            *named = '\0';
        return bad_setting(error, settings, id, local_error->message);
    }
    /* Durations are kept in microseconds: 999ns would silently become 0. */
    if (usec <= 0)
        return bad_setting(error, settings, id, "must be at least 1µs");
    *ret_usec = usec;
    return TRUE;
}

static gboolean
parse_count(const Settings *settings, SettingId id, guint fallback, guint min, guint max,
            guint *ret_value, GError **error)
{
    g_autoptr(GError) local_error = NULL;
    guint64 value;

    if (!settings->values[id]) {
        *ret_value = fallback;
        return TRUE;
    }
    if (!g_ascii_string_to_unsigned(settings->values[id], 10, min, max, &value, &local_error))
        return bad_setting(error, settings, id, local_error->message);
    *ret_value = (guint)value;
    return TRUE;
}

static gboolean
is_plugin_name(const char *name)
{
    if (name[0] == '\0')
        return FALSE;
    for (const char *c = name; *c; c++) {
        if (!g_ascii_islower(*c) && !g_ascii_isdigit(*c) && *c != '-')
            return FALSE;
    }
    return TRUE;
}

G_STATIC_ASSERT(PLEGD_EVENTS_JOURNAL_AUTO == 0 && PLEGD_EVENTS_JOURNAL_NO == 2);
G_STATIC_ASSERT(PLEGD_TCP_EVENTS_NO == 0 && PLEGD_TCP_EVENTS_LOOPBACK_UNAUTHENTICATED == 2);

/* One of @names, the first when unset: its index (the enum's value, in the same order). */
static gboolean
parse_choice(const Settings *settings, SettingId id, const char *const *names,
             const char *expected, int *ret_index, GError **error)
{
    const char *text = settings->values[id];

    for (int i = 0; names[i]; i++) {
        if (!text ? i == 0 : g_str_equal(text, names[i])) {
            *ret_index = i;
            return TRUE;
        }
    }
    return bad_setting(error, settings, id, expected);
}

static gboolean
parse_events_journal(const Settings *settings, PlegdEventsJournal *ret_mode, GError **error)
{
    /* PlegdEventsJournal's order. */
    static const char *const names[] = {"auto", "yes", "no", NULL};
    int index;

    if (!parse_choice(settings, SETTING_EVENTS_JOURNAL, names, "expected auto, yes or no", &index,
                      error))
        return FALSE;
    *ret_mode = (PlegdEventsJournal)index;
    return TRUE;
}

static gboolean
parse_tcp_events(const Settings *settings, PlegdTcpEvents *ret_mode, GError **error)
{
    /* PlegdTcpEvents' order. */
    static const char *const names[] = {"no", "tls", "loopback-unauthenticated", NULL};
    int index;

    if (!parse_choice(settings, SETTING_TCP_EVENTS, names,
                      "expected no, tls or loopback-unauthenticated", &index, error))
        return FALSE;
    *ret_mode = (PlegdTcpEvents)index;
    return TRUE;
}

/* A group name, or a number: chown(2) takes either, as the systemd unit's SocketGroup=. */
static gboolean
parse_socket_group(const Settings *settings, gint64 *ret_gid, GError **error)
{
    const char *text = settings->values[SETTING_SOCKET_GROUP];
    struct group entry, *found = NULL;
    char buffer[4096];
    guint64 number;
    int errsv;

    if (!text || text[0] == '\0') {
        *ret_gid = -1;
        return TRUE;
    }
    if (g_ascii_string_to_unsigned(text, 10, 0, G_MAXUINT32 - 1, &number, NULL)) {
        *ret_gid = (gint64)number;
        return TRUE;
    }
    errsv = getgrnam_r(text, &entry, buffer, sizeof buffer, &found);
    if (!found) {
        g_autofree char *why = errsv == 0 ? g_strdup("no such group")
                                          : g_strdup_printf("cannot look the group up: %s",
                                                            g_strerror(errsv));

        return bad_setting(error, settings, SETTING_SOCKET_GROUP, why);
    }
    *ret_gid = found->gr_gid;
    return TRUE;
}

/* "" turns the socket off; the default is PLEGD_DEFAULT_SOCKET. */
static gboolean
parse_socket(const Settings *settings, char **ret_path, GError **error)
{
    const char *text = settings->values[SETTING_SOCKET];

    if (!text) {
        *ret_path = g_strdup(PLEGD_DEFAULT_SOCKET);
        return TRUE;
    }
    if (text[0] == '\0') {
        *ret_path = NULL;
        return TRUE;
    }
    /* A relative one would depend on the directory plegd was started from. */
    if (!g_path_is_absolute(text))
        return bad_setting(error, settings, SETTING_SOCKET, "must be an absolute path");
    if (strlen(text) >= G_SIZEOF_MEMBER(struct sockaddr_un, sun_path))
        return bad_setting(error, settings, SETTING_SOCKET,
                           "longer than a unix socket's 107 bytes");
    *ret_path = g_strdup(text);
    return TRUE;
}

static gboolean
parse_logging_format(const Settings *settings, PlegdLogFormat *ret_format, GError **error)
{
    const char *text = settings->values[SETTING_LOGGING_FORMAT];

    if (!text || g_str_equal(text, "text"))
        *ret_format = PLEGD_LOG_FORMAT_TEXT;
    else if (g_str_equal(text, "json"))
        *ret_format = PLEGD_LOG_FORMAT_JSON;
    else
        return bad_setting(error, settings, SETTING_LOGGING_FORMAT, "expected text or json");
    return TRUE;
}

/* "a, b,c" -> {"a", "b", "c"}; empty items are skipped. */
static gboolean
parse_plugin_list(const Settings *settings, SettingId id, GStrv *ret_names, GError **error)
{
    g_auto(GStrv) items = NULL;
    g_autoptr(GStrvBuilder) names = g_strv_builder_new();

    if (!settings->values[id]) {
        *ret_names = NULL;
        return TRUE;
    }
    items = g_strsplit(settings->values[id], ",", -1);
    for (char **item = items; *item; item++) {
        g_strstrip(*item);
        if ((*item)[0] == '\0')
            continue;
        if (!is_plugin_name(*item)) {
            g_autofree char *shown = pleg_log_text(*item, -1, 0);
            g_autofree char *trimmed = g_strstrip(g_strdup(settings->values[id]));
            /* The value itself is named already. */
            g_autofree char *why =
                g_str_equal(trimmed, *item)
                    ? g_strdup("not a plugin name ([a-z0-9-]+)")
                    : g_strdup_printf("\"%s\" is not a plugin name ([a-z0-9-]+)", shown);

            return bad_setting(error, settings, id, why);
        }
        g_strv_builder_add(names, *item);
    }
    *ret_names = g_strv_builder_end(names);
    return TRUE;
}

/* GKeyFile keeps the last of two lines with the same key and says nothing: a setting written
 * twice (an edit appended instead of replacing) would change plegd silently.  Warns about each
 * repeated key of @contents, naming both lines. */
static void
warn_duplicate_keys(const char *path, const char *contents)
{
    g_autoptr(GHashTable) first_lines = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    g_auto(GStrv) lines = g_strsplit(contents, "\n", -1);
    g_autofree char *group = NULL;

    for (guint i = 0; lines[i]; i++) {
        g_autofree char *id = NULL;
        char *line = g_strstrip(lines[i]);
        char *eq;
        gpointer first;

        if (line[0] == '#' || line[0] == '\0')
            continue;
        if (line[0] == '[') {
            g_free(group);
            group = g_strdup(line);
            continue;
        }
        eq = strchr(line, '=');
        if (!group || !eq)
            continue; /* GKeyFile has refused the file already */
        *eq = '\0';
        g_strchomp(line);
        id = g_strdup_printf("%s %s", group, line);
        first = g_hash_table_lookup(first_lines, id);
        if (first) {
            g_autofree char *shown_path = pleg_log_text(path, -1, 1024);
            g_autofree char *shown_key = pleg_log_text(line, -1, 0);
            g_autofree char *shown_group = pleg_log_text(group, -1, 0);

            plegd_log_warning("--config %s: line %u sets %s in %s again (first on line %u); "
                              "the last one is used",
                              shown_path, i + 1, shown_key, shown_group, GPOINTER_TO_UINT(first));
        } else {
            g_hash_table_insert(first_lines, g_steal_pointer(&id), GUINT_TO_POINTER(i + 1));
        }
    }
}

/* GKeyFile reads "key[locale]=value" as a translation of key: a typo written so would be
 * neither a setting nor an unknown key (GLib leaves it out of the group's keys), and would
 * change nothing silently.  plegd has no translated settings: refuse any. */
static gboolean
check_no_localized_keys(const char *path, const char *contents, GError **error)
{
    g_auto(GStrv) lines = g_strsplit(contents, "\n", -1);

    for (guint i = 0; lines[i]; i++) {
        const char *line = lines[i];
        const char *eq = strchr(line, '=');
        const char *bracket = strchr(line, '[');

        while (g_ascii_isspace(*line))
            line++;
        if (*line == '#' || *line == '[' || !eq || !bracket || bracket > eq)
            continue;
        {
            g_autofree char *key = g_strndup(line, eq - line);
            g_autofree char *shown_path = pleg_log_text(path, -1, 1024);
            g_autofree char *shown_key = pleg_log_text(g_strchomp(key), -1, 0);

            g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                        "invalid --config \"%s\": line %u: \"%s\" is a localized key; plegd "
                        "has no localized settings",
                        shown_path, i + 1, shown_key);
            return FALSE;
        }
    }
    return TRUE;
}

/* GKeyFile unescapes \s \n \t \r and \\ in a string.  Any other escape, or a backslash that
 * ends the line, is refused here, naming the key: GLib 2.74 sets its error twice for a value
 * that has both, which warns (and traps under G_DEBUG=fatal-warnings). */
static gboolean
check_escapes(const char *shown, const char *key, const char *raw, GError **error)
{
    for (const char *p = raw; *p; p++) {
        if (*p != '\\')
            continue;
        p++;
        if (*p && strchr("sntr\\", *p))
            continue;

        g_autofree char *shown_key = pleg_log_text(key, -1, 0);

        if (!*p) {
            g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                        "invalid --config \"%s\": the value of \"%s\" ends with a lone backslash",
                        shown, shown_key);
        } else {
            g_autofree char *sequence = pleg_log_text(p, 1, 0);

            g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                        "invalid --config \"%s\": the value of \"%s\" has the escape \"\\%s\" "
                        "(known: \\s \\n \\t \\r \\\\)",
                        shown, shown_key, sequence);
        }
        return FALSE;
    }
    return TRUE;
}

/* A configuration file is a few dozen lines: anything larger is not one. */
#define CONFIG_MAX_BYTES (1024 * 1024)

/* A FIFO, a device (/dev/zero) or a huge file must fail at once, not block plegd or fill its
 * memory while its signals wait for the main loop. */
gboolean
plegd_read_small_file(const char *path, const char *what, gsize max_bytes, char **ret_contents,
                      gsize *ret_length, struct stat *ret_st, GError **error)
{
    g_autoptr(GString) contents = NULL;
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    int errsv;

    if (fd < 0 || fstat(fd, &st) < 0) {
        errsv = errno;
        if (fd >= 0)
            close(fd);
        g_set_error_literal(error, G_FILE_ERROR, g_file_error_from_errno(errsv),
                            g_strerror(errsv));
        return FALSE;
    }
    if (!S_ISREG(st.st_mode) || (guint64)st.st_size > max_bytes) {
        if (!S_ISREG(st.st_mode))
            g_set_error_literal(error, G_FILE_ERROR, G_FILE_ERROR_INVAL, "not a regular file");
        else
            g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_FAILED,
                        "%" G_GINT64_FORMAT " bytes, more than a %s's %" G_GSIZE_FORMAT,
                        (gint64)st.st_size, what, max_bytes);
        close(fd);
        return FALSE;
    }
    contents = g_string_sized_new(st.st_size + 1);
    for (;;) {
        char buffer[8192];
        gssize n = read(fd, buffer, sizeof buffer);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            errsv = errno;
            close(fd);
            g_set_error_literal(error, G_FILE_ERROR, g_file_error_from_errno(errsv),
                                g_strerror(errsv));
            return FALSE;
        }
        if (n == 0)
            break;
        if (contents->len + n > max_bytes) {
            close(fd);
            g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_FAILED,
                        "more than a %s's %" G_GSIZE_FORMAT " bytes", what, max_bytes);
            return FALSE;
        }
        g_string_append_len(contents, buffer, n);
    }
    close(fd);
    *ret_length = contents->len;
    *ret_contents = g_string_free(g_steal_pointer(&contents), FALSE);
    if (ret_st)
        *ret_st = st;
    return TRUE;
}

/* GKeyFile reads a line only up to a NUL byte and drops the rest of it without a word: a value
 * would be cut.  A configuration file is text: refuse any NUL, naming its line. */
static gboolean
check_no_nul(const char *contents, gsize length, GError **error)
{
    const char *nul = memchr(contents, '\0', length);
    guint line = 1;

    if (!nul)
        return TRUE;
    for (const char *p = contents; p < nul; p++) {
        if (*p == '\n')
            line++;
    }
    g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "line %u has a NUL byte", line);
    return FALSE;
}

/* Reads every setting of the [plegd] group of @path into @settings, whatever the command line
 * sets: parse_values() checks them all, so that a bad value is an error even where a flag
 * wins.  @ret_key_file keeps the file for its [FeatureGates] group, applied once the plugins'
 * gates are registered. */
static gboolean
load_config_file(const char *path, Settings *settings, GKeyFile **ret_key_file, GError **error)
{
    g_autoptr(GKeyFile) key_file = g_key_file_new();
    g_autoptr(GError) local_error = NULL;
    g_autofree char *contents = NULL;
    g_autofree char *shown = pleg_log_text(path, -1, 1024);
    gsize length = 0;
    g_auto(GStrv) groups = NULL;
    g_auto(GStrv) keys = NULL;

    if (!plegd_read_small_file(path, "configuration file", CONFIG_MAX_BYTES, &contents, &length,
                               NULL, &local_error) ||
        !check_no_nul(contents, length, &local_error) ||
        !g_key_file_load_from_data(key_file, contents, length, G_KEY_FILE_NONE, &local_error)) {
        g_autofree char *why = pleg_log_text(local_error->message, -1, 1024);

        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "invalid --config \"%s\": %s",
                    shown, why);
        return FALSE;
    }
    warn_duplicate_keys(path, contents);
    if (!check_no_localized_keys(path, contents, error))
        return FALSE;

    /* Anything else is most likely a typo that would silently change nothing. */
    groups = g_key_file_get_groups(key_file, NULL);
    for (char **group = groups; *group; group++) {
        if (!g_str_equal(*group, CONFIG_GROUP) && !g_str_equal(*group, CONFIG_GATES_GROUP)) {
            g_autofree char *shown_group = pleg_log_text(*group, -1, 0);

            g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                        "invalid --config \"%s\": unknown group [%s] (expected [" CONFIG_GROUP
                        "] or [" CONFIG_GATES_GROUP "])",
                        shown, shown_group);
            return FALSE;
        }
    }

    keys = g_key_file_get_keys(key_file, CONFIG_GROUP, NULL, NULL);
    for (char **key = keys; key && *key; key++) {
        g_autofree char *raw = NULL;
        int id;

        for (id = 0; id < N_SETTINGS; id++) {
            if (g_str_equal(*key, setting_names[id]))
                break;
        }
        if (id == N_SETTINGS) {
            g_autofree char *shown_key = pleg_log_text(*key, -1, 0);

            g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                        "invalid --config \"%s\": unknown key \"%s\" in [" CONFIG_GROUP "]", shown,
                        shown_key);
            return FALSE;
        }
        raw = g_key_file_get_value(key_file, CONFIG_GROUP, *key, NULL);
        if (!check_escapes(shown, *key, raw, error))
            return FALSE;
        /* A key set on two lines is listed twice, with the last value both times. */
        g_free(settings->values[id]);
        settings->values[id] = g_key_file_get_string(key_file, CONFIG_GROUP, *key, &local_error);
        if (local_error) {
            g_clear_pointer(&settings->values[id], g_free);
            g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                        "invalid --config \"%s\": %s", shown, local_error->message);
            return FALSE;
        }
        settings->origins[id] = path;
    }

    *ret_key_file = g_steal_pointer(&key_file);
    return TRUE;
}

/* The gates, in order: built-in defaults, the gates the plugins of the plugin path declare (so
 * that the next two may name them), the file's [FeatureGates], each --feature-gates in the order
 * given.  kubelet's --feature-gates is a map flag: given again, it adds to what the earlier ones
 * set, and the last value of a gate wins. */
static gboolean
configure_gates(PlegFeatureGates *gates, const Settings *settings, const char *config_file,
                GKeyFile *key_file, const char *const *feature_gates, GError **error)
{
    g_autoptr(GError) local_error = NULL;
    g_autofree char *shown_config = pleg_log_text(config_file, -1, 1024);
    g_autofree char *exe_path = NULL;
    const char *plugin_dir = settings->values[SETTING_PLUGIN_DIR];
    const char *origin;

    /* The same search path run() gives the host: without --plugin-dir, the build tree's plugins
     * when this is the build tree's plegd. */
    if (!plugin_dir) {
        exe_path = plegd_get_exe_path();
        plugin_dir = plegd_default_plugin_dir(exe_path, &origin);
    }
    if (!pleg_feature_gates_register_plugins(gates, plugin_dir, &local_error)) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "invalid plugin feature gate: %s", local_error->message);
        return FALSE;
    }
    if (key_file && !pleg_feature_gates_load_key_file(gates, key_file, &local_error)) {
        /* The message names the group. */
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "invalid --config \"%s\": %s",
                    shown_config, local_error->message);
        return FALSE;
    }
    for (const char *const *flag = feature_gates; flag && *flag; flag++) {
        if (!pleg_feature_gates_parse(gates, *flag, &local_error)) {
            /* The reason names the item at fault, escaped and cut. */
            g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                        "invalid --feature-gates: %s", local_error->message);
            return FALSE;
        }
    }
    return TRUE;
}

/* A file plegd reads again later (on SIGHUP): "" is none, a relative path would depend on the
 * directory plegd was started from. */
static gboolean
parse_file(const Settings *settings, SettingId id, char **ret_path, GError **error)
{
    const char *text = settings->values[id];

    *ret_path = NULL;
    if (!text || text[0] == '\0')
        return TRUE;
    if (!g_path_is_absolute(text))
        return bad_setting(error, settings, id, "must be an absolute path");
    *ret_path = g_strdup(text);
    return TRUE;
}

/* Parses each value of @settings into @parsed on its own, a default for each that is unset; what
 * depends on two settings is the caller's to check. */
static gboolean
parse_values(const Settings *settings, PlegdOptions *parsed, GError **error)
{
    g_autoptr(GError) local_error = NULL;
    const char *metrics_address =
        settings->values[SETTING_METRICS_ADDRESS] ?: DEFAULT_METRICS_BIND_ADDRESS;

    if (!parse_period(settings, SETTING_TIMEOUT, DEFAULT_RUNTIME_REQUEST_TIMEOUT,
                      &parsed->runtime_request_timeout_usec, error) ||
        !parse_period(settings, SETTING_PERIOD, DEFAULT_RELIST_PERIOD, &parsed->relist_period_usec,
                      error) ||
        !parse_period(settings, SETTING_THRESHOLD, DEFAULT_RELIST_THRESHOLD,
                      &parsed->relist_threshold_usec, error))
        return FALSE;

    if (metrics_address[0] != '\0' &&
        !plegd_parse_bind_address(metrics_address, &parsed->metrics_address, &local_error))
        return bad_setting(error, settings, SETTING_METRICS_ADDRESS, local_error->message);
    /* A relative one would depend on the directory plegd was started from ("/" under
     * systemd). */
    if (settings->values[SETTING_STATE_DIR] && settings->values[SETTING_STATE_DIR][0] &&
        !g_path_is_absolute(settings->values[SETTING_STATE_DIR]))
        return bad_setting(error, settings, SETTING_STATE_DIR, "must be an absolute path");

    return parse_plugin_list(settings, SETTING_DISABLE_PLUGINS, &parsed->disabled_plugins, error) &&
           parse_plugin_list(settings, SETTING_REQUIRE_PLUGINS, &parsed->required_plugins, error) &&
           parse_count(settings, SETTING_EVENTS_RING_SIZE, PLEGD_EVENTS_DEFAULT_RING_SIZE,
                       PLEGD_EVENTS_MIN_RING_SIZE, PLEGD_EVENTS_MAX_RING_SIZE,
                       &parsed->events_ring_size, error) &&
           parse_count(settings, SETTING_EVENTS_MAX_CLIENTS, PLEGD_EVENTS_DEFAULT_MAX_CLIENTS, 1,
                       PLEGD_EVENTS_MAX_MAX_CLIENTS, &parsed->events_max_clients, error) &&
           parse_count(settings, SETTING_MAX_STATUS_CALLS, PLEG_DEFAULT_MAX_STATUS_CALLS_IN_FLIGHT,
                       1, PLEGD_MAX_STATUS_CALLS_IN_FLIGHT_MAX, &parsed->max_status_calls_in_flight,
                       error) &&
           parse_events_journal(settings, &parsed->events_journal, error) &&
           parse_count(settings, SETTING_VERBOSITY, 0, 0, G_MAXINT32, &parsed->verbosity, error) &&
           parse_logging_format(settings, &parsed->logging_format, error) &&
           parse_socket(settings, &parsed->socket_path, error) &&
           parse_socket_group(settings, &parsed->socket_gid, error) &&
           parse_tcp_events(settings, &parsed->tcp_events, error) &&
           parse_file(settings, SETTING_TLS_CERT, &parsed->tls_cert_file, error) &&
           parse_file(settings, SETTING_TLS_KEY, &parsed->tls_key_file, error) &&
           parse_file(settings, SETTING_CLIENT_CA, &parsed->client_ca_file, error);
}

/* The TLS flags go together, on a TCP listener. */
static gboolean
check_tls(const Settings *settings, const PlegdOptions *parsed, GError **error)
{
    if (!parsed->tls_cert_file != !parsed->tls_key_file)
        return bad_setting(error, settings, parsed->tls_cert_file ? SETTING_TLS_CERT : SETTING_TLS_KEY,
                           "--tls-cert-file and --tls-private-key-file go together");
    if (parsed->client_ca_file && !parsed->tls_cert_file)
        return bad_setting(error, settings, SETTING_CLIENT_CA,
                           "needs --tls-cert-file and --tls-private-key-file");
    if (parsed->tls_cert_file && !parsed->metrics_address)
        return bad_setting(error, settings, SETTING_TLS_CERT,
                           "there is no TCP listener (--metrics-bind-address is empty)");
    if (parsed->tcp_events == PLEGD_TCP_EVENTS_TLS && !parsed->client_ca_file)
        return bad_setting(error, settings, SETTING_TCP_EVENTS,
                           "needs --client-ca-file (with --tls-cert-file and "
                           "--tls-private-key-file): the client certificates it serves");
    return TRUE;
}

/* What --serve-events-over-tcp asks of the TCP listener. */
static gboolean
check_tcp_events(const Settings *settings, const PlegdOptions *parsed, GError **error)
{
    GInetAddress *host;

    if (parsed->tcp_events == PLEGD_TCP_EVENTS_NO)
        return TRUE;
    if (!parsed->metrics_address)
        return bad_setting(error, settings, SETTING_TCP_EVENTS,
                           "there is no TCP listener (--metrics-bind-address is empty)");
    host = g_inet_socket_address_get_address(parsed->metrics_address);
    if (parsed->tcp_events == PLEGD_TCP_EVENTS_LOOPBACK_UNAUTHENTICATED &&
        !g_inet_address_get_is_loopback(host)) {
        g_autofree char *shown = g_inet_address_to_string(host);
        g_autofree char *why = g_strdup_printf(
            "--metrics-bind-address must be a loopback address (127.0.0.0/8 or [::1]), not %s",
            shown);

        return bad_setting(error, settings, SETTING_TCP_EVENTS, why);
    }
    return TRUE;
}

/* The host checks the endpoint it is given, and main.c names the file when it came from there.
 * One of @file_settings that a flag of @flag_settings overrides never reaches the host: check
 * it here, in the same words, with libpleg's own check (no gRPC). */
static gboolean
check_overridden_endpoint(const Settings *file_settings, const Settings *flag_settings,
                          GError **error)
{
    g_autoptr(GError) local_error = NULL;
    g_autofree char *shown_origin = NULL;

    if (!file_settings->values[SETTING_ENDPOINT] || !flag_settings->values[SETTING_ENDPOINT])
        return TRUE;
    if (pleg_cri_endpoint_check(file_settings->values[SETTING_ENDPOINT], &local_error))
        return TRUE;
    /* The reason names the endpoint. */
    shown_origin = pleg_log_text(file_settings->origins[SETTING_ENDPOINT], -1, 1024);
    g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                "invalid container-runtime-endpoint in [" CONFIG_GROUP "] of %s: %s", shown_origin,
                local_error->message);
    return FALSE;
}

/* GOption converts text arguments from the locale's encoding and fails with a G_CONVERT_ERROR
 * that names no argument: name the first that does not convert. */
static gboolean
bad_argument_encoding(int argc, char **argv, const char *why, GError **error)
{
    for (int i = 1; i < argc; i++) {
        g_autofree char *text = g_locale_to_utf8(argv[i], -1, NULL, NULL, NULL);

        if (!text) {
            g_autofree char *shown = pleg_log_text(argv[i], -1, 0);

            g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                        "invalid argument \"%s\": %s", shown, why);
            return FALSE;
        }
    }
    g_set_error_literal(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, why);
    return FALSE;
}

/* A test hook's positive number, at most @max. */
static gboolean
parse_hook_number(const char *flag, const char *text, guint64 max, guint64 *ret_value,
                  GError **error)
{
    g_autoptr(GError) local_error = NULL;

    if (!g_ascii_string_to_unsigned(text, 10, 1, max, ret_value, &local_error)) {
        g_autofree char *shown = pleg_log_text(text, -1, 0);
        g_autofree char *why = pleg_log_text(local_error->message, -1, 0);

        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "invalid --%s \"%s\": %s",
                    flag, shown, why);
        return FALSE;
    }
    return TRUE;
}

gboolean
plegd_options_parse(int *argc, char ***argv, PlegdOptions *ret_options, GError **error)
{
    g_auto(Settings) settings = {0};
    g_autofree char *config_file = NULL;
    g_auto(GStrv) feature_gates = NULL;
    g_autofree char *http_idle_timeout = NULL;
    g_autofree char *stdout_max_backlog = NULL;
    g_autofree char *journal_max_queue = NULL;
    g_autofree char *events_first_seq = NULL;
    guint64 journal_queue = 0;
    gboolean version = FALSE;
    const GOptionEntry entries[] = {
        {"config", 0, 0, G_OPTION_ARG_FILENAME, &config_file,
         "Read settings from this key file (see below)", "FILE"},
        {"container-runtime-endpoint", 0, 0, G_OPTION_ARG_STRING,
         &settings.values[SETTING_ENDPOINT],
         "CRI endpoint (default " PLEG_DEFAULT_CRI_ENDPOINT ")", "ENDPOINT"},
        {"runtime-request-timeout", 0, 0, G_OPTION_ARG_STRING, &settings.values[SETTING_TIMEOUT],
         "Deadline of each CRI call (default " DEFAULT_RUNTIME_REQUEST_TIMEOUT ")", "DURATION"},
        {"relist-period", 0, 0, G_OPTION_ARG_STRING, &settings.values[SETTING_PERIOD],
         "Time between global relists (default " DEFAULT_RELIST_PERIOD ")", "DURATION"},
        {"relist-threshold", 0, 0, G_OPTION_ARG_STRING, &settings.values[SETTING_THRESHOLD],
         "PLEG health threshold (default " DEFAULT_RELIST_THRESHOLD ")", "DURATION"},
        {"metrics-bind-address", 0, 0, G_OPTION_ARG_STRING,
         &settings.values[SETTING_METRICS_ADDRESS],
         "Serve /metrics, /livez, /readyz and /healthz over TCP here (/events, /pods and /status "
         "only with --serve-events-over-tcp); \"\" disables, port 0 picks a free port "
         "(default " DEFAULT_METRICS_BIND_ADDRESS ")",
         "IP:PORT"},
        {"socket", 0, 0, G_OPTION_ARG_FILENAME, &settings.values[SETTING_SOCKET],
         "Serve the whole API (/events, /pods, /status, /metrics, /livez, /readyz, /healthz) on a "
         "unix socket here, mode 0660; \"\" disables (default " PLEGD_DEFAULT_SOCKET ")",
         "PATH"},
        {"socket-group", 0, 0, G_OPTION_ARG_STRING, &settings.values[SETTING_SOCKET_GROUP],
         "The group whose members may connect to --socket (default: plegd's own group)", "GROUP"},
        {"serve-events-over-tcp", 0, 0, G_OPTION_ARG_STRING, &settings.values[SETTING_TCP_EVENTS],
         "Serve /events, /pods and /status on --metrics-bind-address too: no (403 naming the "
         "socket), tls (to clients with a certificate signed by --client-ca-file), or "
         "loopback-unauthenticated (any local user and host-network pod can read them) "
         "(default no)",
         "no|tls|loopback-unauthenticated"},
        {"tls-cert-file", 0, 0, G_OPTION_ARG_FILENAME, &settings.values[SETTING_TLS_CERT],
         "Serve HTTPS on --metrics-bind-address with this certificate (PEM, then its chain); "
         "read again on SIGHUP",
         "FILE"},
        {"tls-private-key-file", 0, 0, G_OPTION_ARG_FILENAME, &settings.values[SETTING_TLS_KEY],
         "The private key of --tls-cert-file (PEM; not accessible by others)", "FILE"},
        {"client-ca-file", 0, 0, G_OPTION_ARG_FILENAME, &settings.values[SETTING_CLIENT_CA],
         "Verify client certificates against these CAs (PEM); read again on SIGHUP", "FILE"},
        {"feature-gates", 0, 0, G_OPTION_ARG_STRING_ARRAY, &feature_gates,
         "Feature gates, e.g. EventedPLEG=true; given again, adds to the gates set before",
         "NAME=BOOL,..."},
        {"plugin-dir", 0, 0, G_OPTION_ARG_FILENAME, &settings.values[SETTING_PLUGIN_DIR],
         "Load plugins from DIR (several: DIR1:DIR2, searched in order); \"\" loads none (default: libpleg's plugin directory)", "DIR"},
        {"disable-plugins", 0, 0, G_OPTION_ARG_STRING, &settings.values[SETTING_DISABLE_PLUGINS],
         "Do not load these plugins", "NAME,..."},
        {"require-plugins", 0, 0, G_OPTION_ARG_STRING, &settings.values[SETTING_REQUIRE_PLUGINS],
         "Exit when one of these plugins does not start", "NAME,..."},
        {"events-ring-size", 0, 0, G_OPTION_ARG_STRING,
         &settings.values[SETTING_EVENTS_RING_SIZE],
         "Events kept for GET /events?since=SEQ; a client lagging further is disconnected "
         "(default " G_STRINGIFY(PLEGD_EVENTS_DEFAULT_RING_SIZE) ")",
         "N"},
        {"events-max-clients", 0, 0, G_OPTION_ARG_STRING,
         &settings.values[SETTING_EVENTS_MAX_CLIENTS],
         "GET /events streams served at once, apart from the 64 other connections (default " G_STRINGIFY(
             PLEGD_EVENTS_DEFAULT_MAX_CLIENTS) ")",
         "N"},
        {"max-status-calls-in-flight", 0, 0, G_OPTION_ARG_STRING,
         &settings.values[SETTING_MAX_STATUS_CALLS],
         "PodSandboxStatus and ContainerStatus calls a relist keeps in flight at most (default " G_STRINGIFY(
             PLEG_DEFAULT_MAX_STATUS_CALLS_IN_FLIGHT) ")",
         "N"},
        {"events-journal", 0, 0, G_OPTION_ARG_STRING, &settings.values[SETTING_EVENTS_JOURNAL],
         "Send each event to the systemd journal too, with fields (PLEG_TYPE, POD_NAMESPACE, "
         "...): auto (when run by systemd), yes or no (default auto)",
         "auto|yes|no"},
        {"state-dir", 0, 0, G_OPTION_ARG_FILENAME, &settings.values[SETTING_STATE_DIR],
         "Keep the events and what the PLEG knows in DIR, so that a restart resumes where it "
         "stopped (created 0700 when missing; default: none, nothing survives a restart)",
         "DIR"},
        {"v", 0, 0, G_OPTION_ARG_STRING, &settings.values[SETTING_VERBOSITY],
         "Log verbosity, as kubelet's: 0 shows plegd's and its plugins' info and every "
         "notice, warning and error; " G_STRINGIFY(PLEGD_LOG_V_INFO) " adds other info; "
         G_STRINGIFY(PLEGD_LOG_V_DEBUG) " adds the debug of plegd, libpleg and the plugins; "
         G_STRINGIFY(PLEGD_LOG_V_TRACE) " all debug (default 0)",
         "N"},
        {"logging-format", 0, 0, G_OPTION_ARG_STRING, &settings.values[SETTING_LOGGING_FORMAT],
         "Log lines on stderr: text or json, one object per line; under the journal records go "
         "to it with their fields whatever the format (default text)",
         "text|json"},
        {"version", 0, 0, G_OPTION_ARG_NONE, &version, "Print the version and exit", NULL},
        /* Test hooks: limits that tests cannot wait for or fill at their defaults. */
        {"http-idle-timeout", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &http_idle_timeout,
         "Close HTTP connections idle for this long", "DURATION"},
        {"stdout-max-backlog", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &stdout_max_backlog,
         "Exit when this many bytes of events wait for the reader of stdout", "BYTES"},
        {"journal-max-queue", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &journal_max_queue,
         "Drop events when this many wait to be sent to the journal", "N"},
        {"events-first-seq", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &events_first_seq,
         "The first seq of a fresh history, in place of the clock (tests that count from 1)",
         "N"},
        {NULL},
    };
    g_autoptr(GOptionContext) context = g_option_context_new(NULL);
    g_autoptr(PlegFeatureGates) gates = pleg_feature_gates_new();
    g_autoptr(GKeyFile) config_key_file = NULL;
    g_autoptr(GError) local_error = NULL;
    g_auto(PlegdOptions) parsed = {0};

    g_option_context_set_summary(
        context, "Runs libpleg's plugin host (the Generic PLEG and its plugins) against a CRI "
                 "runtime and prints each PodLifecycleEvent as a JSON line on stdout.");
    g_option_context_set_description(
        context,
        "--config FILE is a key file: its [plegd] group takes the long options above without "
        "their\ndashes (e.g. relist-period=500ms, disable-plugins=evented), its [FeatureGates] "
        "group\nName=true|false lines.  The command line wins over the file; --feature-gates is "
        "applied\nafter [FeatureGates], each one in the order given (the last value of a gate "
        "wins).  Gates\nthat plugins declare in their .plugin files (in the plugin directory) "
        "can be set like the\nbuilt-in ones.\n"
        "Logs go to stderr, or to the journal when stderr is journald's; G_MESSAGES_DEBUG=\n"
        "DOMAIN,... also shows the info and debug records of the domains it names, whatever --v.\n"
        "Durations use Go syntax: 500ms, 1s, 3m, 1h30m.");
    g_option_context_add_main_entries(context, entries, NULL);
    if (!g_option_context_parse(context, argc, argv, &local_error)) {
        /* GOption's messages quote the argument in full. */
        g_autofree char *why = pleg_log_text(local_error->message, -1, 1024);

        if (local_error->domain != G_OPTION_ERROR)
            return bad_argument_encoding(*argc, *argv, why, error);
        g_set_error_literal(error, local_error->domain, local_error->code, why);
        return FALSE;
    }
    if (*argc > 1) {
        g_autofree char *shown = pleg_log_text((*argv)[1], -1, 0);

        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_FAILED, "unexpected argument \"%s\"",
                    shown);
        return FALSE;
    }
    if (version) {
        ret_options->version = TRUE;
        return TRUE;
    }

    if (config_file) {
        g_auto(Settings) file_settings = {0};
        g_auto(PlegdOptions) file_options = {0};

        /* Each value of the file is checked, also where a flag wins over it, as kubelet decodes
         * its whole config file before the flags apply; what depends on two settings is
         * checked once the flags won. */
        if (!load_config_file(config_file, &file_settings, &config_key_file, error) ||
            !parse_values(&file_settings, &file_options, error) ||
            !check_overridden_endpoint(&file_settings, &settings, error))
            return FALSE;
        for (int id = 0; id < N_SETTINGS; id++) {
            if (settings.values[id])
                continue; /* the command line wins */
            settings.values[id] = g_steal_pointer(&file_settings.values[id]);
            settings.origins[id] = file_settings.origins[id];
        }
    }
    if (!configure_gates(gates, &settings, config_file, config_key_file,
                         (const char *const *)feature_gates, error))
        return FALSE;

    if (!parse_values(&settings, &parsed, error) || !check_tcp_events(&settings, &parsed, error) ||
        !check_tls(&settings, &parsed, error))
        return FALSE;
    if (settings.values[SETTING_SOCKET_GROUP] && settings.values[SETTING_SOCKET_GROUP][0] &&
        !parsed.socket_path)
        return bad_setting(error, &settings, SETTING_SOCKET_GROUP,
                           "there is no socket (--socket is empty)");
    /* A threshold shorter than the period would report a healthy PLEG unhealthy between relists. */
    if (parsed.relist_threshold_usec < parsed.relist_period_usec) {
        /* Name what was set: the threshold, or the period when the threshold is the default. */
        if (!settings.values[SETTING_THRESHOLD])
            return bad_setting(error, &settings, SETTING_PERIOD,
                               "must not be longer than --relist-threshold (default "
                               DEFAULT_RELIST_THRESHOLD ")");
        return bad_setting(error, &settings, SETTING_THRESHOLD,
                           "must not be shorter than --relist-period");
    }
    for (char **name = parsed.required_plugins; name && *name; name++) {
        if (parsed.disabled_plugins &&
            g_strv_contains((const char *const *)parsed.disabled_plugins, *name)) {
            g_autofree char *why =
                g_strdup_printf("plugin %s is also in disable-plugins", *name);

            return bad_setting(error, &settings, SETTING_REQUIRE_PLUGINS, why);
        }
    }

    if (http_idle_timeout &&
        (!pleg_duration_parse(http_idle_timeout, &parsed.http_idle_timeout_usec, &local_error) ||
         parsed.http_idle_timeout_usec <= 0)) {
        g_autofree char *shown = pleg_log_text(http_idle_timeout, -1, 0);

        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "invalid --http-idle-timeout \"%s\": %s", shown,
                    local_error ? local_error->message : "must be a positive duration");
        return FALSE;
    }
    if ((stdout_max_backlog &&
         !parse_hook_number("stdout-max-backlog", stdout_max_backlog, G_MAXSIZE,
                            &parsed.stdout_max_backlog, error)) ||
        (journal_max_queue && !parse_hook_number("journal-max-queue", journal_max_queue,
                                                 G_MAXUINT, &journal_queue, error)) ||
        (events_first_seq && !parse_hook_number("events-first-seq", events_first_seq, G_MAXINT64,
                                                &parsed.events_first_seq, error)))
        return FALSE;
    parsed.journal_max_queue = (guint)journal_queue;

    parsed.endpoint = g_strdup(settings.values[SETTING_ENDPOINT] ?: PLEG_DEFAULT_CRI_ENDPOINT);
    parsed.endpoint_origin = g_strdup(settings.origins[SETTING_ENDPOINT]);
    parsed.plugin_dir = g_steal_pointer(&settings.values[SETTING_PLUGIN_DIR]);
    /* "" turns a state directory of the file off. */
    if (settings.values[SETTING_STATE_DIR] && settings.values[SETTING_STATE_DIR][0])
        parsed.state_dir = g_steal_pointer(&settings.values[SETTING_STATE_DIR]);
    if (settings.origins[SETTING_PLUGIN_DIR])
        parsed.plugin_dir_origin =
            g_strdup_printf("plugin-dir in [" CONFIG_GROUP "] of %s", settings.origins[SETTING_PLUGIN_DIR]);
    parsed.feature_gates = g_steal_pointer(&gates);
    *ret_options = parsed;
    memset(&parsed, 0, sizeof parsed);
    return TRUE;
}
