/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd's log writer.  Every GLib log record of the process passes here: plegd's, libpleg's,
 * the plugins' (the host's log service), GLib's and libsoup's own.  A record is kept when --v
 * (or G_MESSAGES_DEBUG) admits it, then goes to the journal natively when standard error is
 * journald's stream, else to standard error as one line of --logging-format.
 */
#include <errno.h>
#include <json-glib/json-glib.h>
#include <string.h>
#include <unistd.h>

#include "plegd.h"

/* Records held before plegd_log_start() beyond this many are written at once, as text. */
#define MAX_HELD_RECORDS 256

typedef struct {
    GLogLevelFlags level;
    gint64 time_usec;
    GLogField *fields;
    gsize n_fields;
} HeldRecord;

static struct {
    GMutex lock; /* one record at a time, whole, in order */
    gboolean started;
    PlegdLogFormat format;
    guint verbosity;
    gboolean journald;
    GLogLevelFlags always_fatal;
    GTimeZone *zone;
    GPtrArray *held; /* HeldRecord, until plegd_log_start() */
} logger;

/* Fields that GLib adds for itself or that the line shows in its own place. */
static const char *const hidden_fields[] = {
    "MESSAGE",   "PRIORITY",  "GLIB_DOMAIN", "GLIB_OLD_LOG_API",  "CODE_FILE",
    "CODE_LINE", "CODE_FUNC", "MESSAGE_ID",  "SYSLOG_IDENTIFIER",
};

static const char *const level_words[] = {
    "ERROR", "ERROR", "ERROR", "ERROR", "WARN", "NOTICE", "INFO", "DEBUG",
};

/* JSON keys of the record itself; a field that lowers to one of them is written in upper case. */
static const char *const json_keys[] = {"ts", "level", "logger", "caller", "msg", "v"};

/* The value of @key as text (a copy: a field's value need not end with a NUL), or NULL. */
static char *
field_dup(const GLogField *fields, gsize n_fields, const char *key)
{
    for (gsize i = 0; i < n_fields; i++) {
        if (!g_str_equal(fields[i].key, key) || !fields[i].value)
            continue;
        return fields[i].length < 0 ? g_strdup(fields[i].value)
                                    : g_strndup(fields[i].value, fields[i].length);
    }
    return NULL;
}

static gboolean
has_field(const GLogField *fields, gsize n_fields, const char *key)
{
    for (gsize i = 0; i < n_fields; i++) {
        if (g_str_equal(fields[i].key, key))
            return TRUE;
    }
    return FALSE;
}

/* The record's syslog priority: its PRIORITY field (plegd_log_warning() gives message-level
 * records priority 4), else what GLib gives its level. */
static int
record_priority(GLogLevelFlags level, const GLogField *fields, gsize n_fields)
{
    g_autofree char *priority = field_dup(fields, n_fields, "PRIORITY");

    if (priority && priority[0] >= '0' && priority[0] <= '7' && priority[1] == '\0')
        return priority[0] - '0';
    if (level & G_LOG_LEVEL_ERROR)
        return 3;
    if (level & (G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING))
        return 4;
    if (level & G_LOG_LEVEL_INFO)
        return 6;
    if (level & G_LOG_LEVEL_DEBUG)
        return 7;
    return 5;
}

/* The record's level word: its priority's, except for GLib's warning and critical levels, which
 * mean a bug (whatever the priority, 4 from GLib): ERROR, so that WARN is always something the
 * operator can fix. */
static const char *
level_word(GLogLevelFlags level, int priority)
{
    if (level & (G_LOG_LEVEL_ERROR | G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING))
        return "ERROR";
    return level_words[priority];
}

/* plegd's domain and the plugins' ("pleg-<name>", set by the host). */
static gboolean
is_operator_domain(const char *domain)
{
    return domain && (g_str_equal(domain, G_LOG_DOMAIN) || g_str_has_prefix(domain, "pleg-"));
}

static guint
verbosity_of(int priority, const char *domain)
{
    if (priority <= 5)
        return 0;
    if (priority == 6)
        return is_operator_domain(domain) ? 0 : PLEGD_LOG_V_INFO;
    if (is_operator_domain(domain) || g_strcmp0(domain, "pleg") == 0)
        return PLEGD_LOG_V_DEBUG;
    return PLEGD_LOG_V_TRACE;
}

guint
plegd_log_record_verbosity(GLogLevelFlags level, const GLogField *fields, gsize n_fields)
{
    g_autofree char *domain = field_dup(fields, n_fields, "GLIB_DOMAIN");

    return verbosity_of(record_priority(level, fields, n_fields), domain);
}

/* ---- text ---- */

/* Bytes that are not UTF-8 and control characters as \xNN (newline, return and tab as \n, \r,
 * \t); with @quoted, '"' and '\\' escaped too.  Without, backslashes stay: a message holds text
 * that its author escaped already (pleg_log_text()). */
static void
append_escaped(GString *out, const char *text, gssize length, gboolean quoted)
{
    const char *p = text;
    const char *end = text + (length < 0 ? (gssize)strlen(text) : length);

    while (p < end) {
        gunichar c = g_utf8_get_char_validated(p, end - p);

        if (c == (gunichar)-1 || c == (gunichar)-2) {
            g_string_append_printf(out, "\\x%02x", (guchar)*p);
            p++;
            continue;
        }
        if (c == '\n')
            g_string_append(out, "\\n");
        else if (c == '\r')
            g_string_append(out, "\\r");
        else if (c == '\t')
            g_string_append(out, "\\t");
        else if (c < 0x20 || c == 0x7f)
            g_string_append_printf(out, "\\x%02x", c);
        else if (quoted && (c == '"' || c == '\\'))
            g_string_append_printf(out, "\\%c", (char)c);
        else
            g_string_append_len(out, p, g_utf8_next_char(p) - p);
        p = g_utf8_next_char(p);
    }
}

/* A value goes bare when it is not empty and has no space, quote, '=', backslash or control
 * character; else in double quotes, escaped. */
static void
append_value(GString *out, const char *value, gssize length)
{
    gsize n = length < 0 ? strlen(value) : (gsize)length;
    gboolean bare = n > 0;

    for (gsize i = 0; i < n && bare; i++) {
        guchar c = value[i];

        bare = c > ' ' && c != 0x7f && c != '"' && c != '=' && c != '\\';
    }
    if (bare && g_utf8_validate(value, n, NULL)) {
        g_string_append_len(out, value, n);
        return;
    }
    g_string_append_c(out, '"');
    append_escaped(out, value, n, TRUE);
    g_string_append_c(out, '"');
}

static gboolean
is_hidden(const char *key)
{
    if (key[0] == '_')
        return TRUE;
    for (gsize i = 0; i < G_N_ELEMENTS(hidden_fields); i++) {
        if (g_str_equal(key, hidden_fields[i]))
            return TRUE;
    }
    return FALSE;
}

/* Whether @message shows the field already as " key=" (the watchdog's records carry their
 * fields in MESSAGE for writers that print only MESSAGE). */
static gboolean
message_shows(const char *message, const char *lower_key)
{
    g_autofree char *pair = g_strdup_printf(" %s=", lower_key);

    return strstr(message, pair) != NULL;
}

/* "warning: " starts the MESSAGE of plegd's and libpleg's operator warnings, for writers that
 * show no level; the level word says it here. */
static const char *
shown_message(const char *message, int priority)
{
    if (priority == 4 && g_str_has_prefix(message, "warning: "))
        return message + strlen("warning: ");
    return message;
}

static void
format_text(GString *line, const char *word, int priority, const char *domain, const char *message,
            const GLogField *fields, gsize n_fields, GDateTime *time)
{
    g_autofree char *stamp = g_date_time_format(time, "%Y-%m-%dT%H:%M:%S.%f%:z");

    g_string_append_printf(line, "%s %s ", stamp, word);
    if (domain)
        g_string_append_printf(line, "%s: ", domain);
    append_escaped(line, shown_message(message, priority), -1, FALSE);
    for (gsize i = 0; i < n_fields; i++) {
        g_autofree char *key = NULL;

        if (is_hidden(fields[i].key) || !fields[i].value)
            continue;
        key = g_ascii_strdown(fields[i].key, -1);
        if (message_shows(message, key))
            continue;
        g_string_append_printf(line, " %s=", key);
        append_value(line, fields[i].value, fields[i].length);
    }
}

/* ---- JSON ---- */

static gboolean
is_json_key(const char *key)
{
    for (gsize i = 0; i < G_N_ELEMENTS(json_keys); i++) {
        if (g_str_equal(key, json_keys[i]))
            return TRUE;
    }
    return FALSE;
}

/* "main.c:123" from CODE_FILE and CODE_LINE, or NULL. */
static char *
caller_of(const GLogField *fields, gsize n_fields)
{
    g_autofree char *file = field_dup(fields, n_fields, "CODE_FILE");
    g_autofree char *line = field_dup(fields, n_fields, "CODE_LINE");
    g_autofree char *base = NULL;

    if (!file || !line)
        return NULL;
    base = g_path_get_basename(file);
    return g_strdup_printf("%s:%s", base, line);
}

static void
format_json(GString *line, const char *word, int priority, const char *domain, const char *message,
            const GLogField *fields, gsize n_fields, gint64 time_usec)
{
    g_autoptr(JsonBuilder) builder = json_builder_new();
    g_autoptr(JsonGenerator) generator = json_generator_new();
    g_autoptr(JsonNode) root = NULL;
    g_autofree char *caller = caller_of(fields, n_fields);
    g_autofree char *msg = g_utf8_make_valid(shown_message(message, priority), -1);
    g_autofree char *text = NULL;

    json_builder_begin_object(builder);
    /* kubelet's JSON format: milliseconds since the epoch. */
    json_builder_set_member_name(builder, "ts");
    json_builder_add_double_value(builder, (double)time_usec / 1000.0);
    json_builder_set_member_name(builder, "level");
    json_builder_add_string_value(builder, word);
    if (domain) {
        g_autofree char *valid = g_utf8_make_valid(domain, -1);

        json_builder_set_member_name(builder, "logger");
        json_builder_add_string_value(builder, valid);
    }
    if (caller) {
        json_builder_set_member_name(builder, "caller");
        json_builder_add_string_value(builder, caller);
    }
    json_builder_set_member_name(builder, "msg");
    json_builder_add_string_value(builder, msg);
    /* As kubelet: an error has no verbosity. */
    if (!g_str_equal(word, "ERROR") && !g_str_equal(word, "WARN")) {
        json_builder_set_member_name(builder, "v");
        json_builder_add_int_value(builder, verbosity_of(priority, domain));
    }
    for (gsize i = 0; i < n_fields; i++) {
        g_autofree char *key = NULL;
        g_autofree char *value = NULL;

        if (is_hidden(fields[i].key) || !fields[i].value)
            continue;
        key = g_ascii_strdown(fields[i].key, -1);
        if (is_json_key(key)) {
            g_free(key);
            key = g_ascii_strup(fields[i].key, -1);
        }
        value = g_utf8_make_valid(fields[i].value, fields[i].length);
        json_builder_set_member_name(builder, key);
        json_builder_add_string_value(builder, value);
    }
    json_builder_end_object(builder);

    root = json_builder_get_root(builder);
    json_generator_set_root(generator, root);
    text = json_generator_to_data(generator, NULL);
    g_string_append(line, text);
}

char *
plegd_log_format_record(PlegdLogFormat format, GLogLevelFlags level, const GLogField *fields,
                        gsize n_fields, gint64 time_usec, GTimeZone *zone)
{
    g_autofree char *domain = field_dup(fields, n_fields, "GLIB_DOMAIN");
    g_autofree char *message = field_dup(fields, n_fields, "MESSAGE");
    int priority = record_priority(level, fields, n_fields);
    const char *word = level_word(level, priority);
    GString *line = g_string_new(NULL);

    if (!message)
        message = g_strdup("");
    if (format == PLEGD_LOG_FORMAT_JSON) {
        format_json(line, word, priority, domain, message, fields, n_fields, time_usec);
    } else {
        g_autoptr(GDateTime) utc = g_date_time_new_from_unix_utc(time_usec / G_USEC_PER_SEC);
        g_autoptr(GDateTime) exact = g_date_time_add(utc, time_usec % G_USEC_PER_SEC);
        g_autoptr(GTimeZone) local = zone ? NULL : g_time_zone_new_local();
        g_autoptr(GDateTime) time = g_date_time_to_timezone(exact, zone ? zone : local);

        format_text(line, word, priority, domain, message, fields, n_fields, time);
    }
    g_string_append_c(line, '\n');
    return g_string_free(line, FALSE);
}

/* ---- the writer ---- */

static void
write_stderr(const char *text)
{
    gsize left = strlen(text);

    while (left > 0) {
        gssize n = write(STDERR_FILENO, text, left);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return; /* nowhere left to say it */
        text += n;
        left -= n;
    }
}

/* Called with the lock held. */
static void
emit(PlegdLogFormat format, GLogLevelFlags level, const GLogField *fields, gsize n_fields,
     gint64 time_usec)
{
    g_autofree char *line = NULL;

    if (logger.journald &&
        g_log_writer_journald(level, fields, n_fields, NULL) == G_LOG_WRITER_HANDLED)
        return;
    line = plegd_log_format_record(format, level, fields, n_fields, time_usec, logger.zone);
    write_stderr(line);
}

/* Called with the lock held: whether --v or G_MESSAGES_DEBUG admits the record. */
static gboolean
admitted(GLogLevelFlags level, const GLogField *fields, gsize n_fields)
{
    g_autofree char *domain = field_dup(fields, n_fields, "GLIB_DOMAIN");
    int priority = record_priority(level, fields, n_fields);

    return verbosity_of(priority, domain) <= logger.verbosity ||
           !g_log_writer_default_would_drop(level & G_LOG_LEVEL_MASK, domain);
}

static void
held_record_free(HeldRecord *record)
{
    for (gsize i = 0; i < record->n_fields; i++) {
        g_free((char *)record->fields[i].key);
        g_free((gpointer)record->fields[i].value);
    }
    g_free(record->fields);
    g_free(record);
}

static void
hold(GLogLevelFlags level, const GLogField *fields, gsize n_fields, gint64 time_usec)
{
    HeldRecord *record = g_new0(HeldRecord, 1);

    record->level = level;
    record->time_usec = time_usec;
    record->n_fields = n_fields;
    record->fields = g_new0(GLogField, n_fields);
    for (gsize i = 0; i < n_fields; i++) {
        record->fields[i].key = g_strdup(fields[i].key);
        record->fields[i].length = fields[i].length;
        if (!fields[i].value)
            continue;
        record->fields[i].value = fields[i].length < 0
                                      ? g_strdup(fields[i].value)
                                      : g_memdup2(fields[i].value, fields[i].length);
    }
    g_ptr_array_add(logger.held, record);
}

/* Called with the lock held. */
static void
release_held(void)
{
    if (!logger.held)
        return;
    for (guint i = 0; i < logger.held->len; i++) {
        HeldRecord *record = g_ptr_array_index(logger.held, i);

        if (admitted(record->level, record->fields, record->n_fields))
            emit(logger.format, record->level, record->fields, record->n_fields, record->time_usec);
    }
    g_clear_pointer(&logger.held, g_ptr_array_unref);
}

static GLogWriterOutput
log_writer(GLogLevelFlags level, const GLogField *fields, gsize n_fields, gpointer user_data)
{
    gint64 now = g_get_real_time();
    gboolean fatal;

    /* As g_log_writer_default(): G_DEBUG=fatal-warnings makes warnings and criticals abort
     * (g_logv() aborts by itself for the old API). */
    if ((level & logger.always_fatal) && !has_field(fields, n_fields, "GLIB_OLD_LOG_API"))
        level |= G_LOG_FLAG_FATAL;
    fatal = (level & (G_LOG_FLAG_FATAL | G_LOG_LEVEL_ERROR)) != 0;

    g_mutex_lock(&logger.lock);
    if (!logger.started && !fatal && logger.held && logger.held->len < MAX_HELD_RECORDS) {
        hold(level, fields, n_fields, now);
        g_mutex_unlock(&logger.lock);
        return G_LOG_WRITER_HANDLED;
    }
    /* What ends the process, or floods it before the options are read, is said at once. */
    release_held();
    if (admitted(level, fields, n_fields))
        emit(logger.format, level, fields, n_fields, now);
    g_mutex_unlock(&logger.lock);

    if (level & G_LOG_FLAG_FATAL)
        abort();
    return G_LOG_WRITER_HANDLED;
}

/* GLib's warning level means a bug (and aborts under G_DEBUG=fatal-warnings), its error level
 * aborts: an operator's warning or error is message level with the journal priority given.
 * (g_log_structured() would add a PRIORITY of its own.) */
static void
log_operator(const char *priority, const char *prefix, const char *format, va_list args)
{
    g_autofree char *message = g_strdup_vprintf(format, args);
    g_autofree char *text = g_strconcat(prefix, message, NULL);
    const GLogField fields[] = {
        {"GLIB_DOMAIN", G_LOG_DOMAIN, -1},
        {"PRIORITY", priority, -1},
        {"MESSAGE", text, -1},
    };

    g_log_structured_array(G_LOG_LEVEL_MESSAGE, fields, G_N_ELEMENTS(fields));
}

void
plegd_log_warning(const char *format, ...)
{
    va_list args;

    va_start(args, format);
    log_operator("4", "warning: ", format, args);
    va_end(args);
}

void
plegd_log_error(const char *format, ...)
{
    va_list args;

    va_start(args, format);
    log_operator("3", "", format, args);
    va_end(args);
}

void
plegd_log_init(void)
{
    GLogLevelFlags always_fatal;

    /* GLib has no getter: set and restore. */
    always_fatal = g_log_set_always_fatal(G_LOG_FATAL_MASK);
    g_log_set_always_fatal(always_fatal);

    logger.always_fatal = always_fatal & (G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING);
    logger.format = PLEGD_LOG_FORMAT_TEXT;
    logger.verbosity = 0;
    logger.journald = g_log_writer_is_journald(STDERR_FILENO);
    logger.zone = g_time_zone_new_local();
    logger.held = g_ptr_array_new_with_free_func((GDestroyNotify)held_record_free);
    /* Standard output carries the events: GLib's fallback for a record logged while writing
     * one must not go there. */
    g_log_writer_default_set_use_stderr(TRUE);
    g_log_set_writer_func(log_writer, NULL, NULL);
}

void
plegd_log_start(PlegdLogFormat format, guint verbosity)
{
    g_mutex_lock(&logger.lock);
    logger.format = format;
    logger.verbosity = verbosity;
    logger.started = TRUE;
    release_held();
    g_mutex_unlock(&logger.lock);
}
