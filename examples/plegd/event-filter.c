/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The filters of GET /events (type, namespace, pod, pod_uid, container, sandbox, since_time,
 * until_time) and the part of an event they look at.  Pure: no I/O, no main context.
 */
#include "plegd.h"

/* The string keys, in the order of PlegdEventKey's strings. */
enum {
    KEY_NAMESPACE,
    KEY_POD,
    KEY_POD_UID,
    KEY_CONTAINER,
    N_STRING_KEYS,
};

static const char *const string_keys[N_STRING_KEYS] = {"namespace", "pod", "pod_uid", "container"};

/* The event types a client may ask for: ContainerChanged is never delivered. */
static const PlegPodLifecycleEventType filter_types[] = {
    PLEG_CONTAINER_STARTED,
    PLEG_CONTAINER_DIED,
    PLEG_CONTAINER_REMOVED,
    PLEG_POD_SYNC,
};

#define SANDBOX_FALSE (1u << 0)
#define SANDBOX_TRUE  (1u << 1)

struct _PlegdEventFilter {
    gint64 now_ns;
    guint n_values;
    guint types;                       /* 1 << PlegPodLifecycleEventType; 0: any */
    guint sandbox;                     /* SANDBOX_*; 0: any */
    GPtrArray *strings[N_STRING_KEYS]; /* char *; NULL: any */
    gboolean has_since_time;
    gboolean has_until_time;
    gint64 since_ns;
    gint64 until_ns;
};

/* ---- the key ---- */

static gsize
string_size(const char *s)
{
    return s ? strlen(s) + 1 : 0;
}

static const char *
copy_string(char **cursor, const char *s)
{
    char *copy = *cursor;
    gsize size = string_size(s);

    if (!s)
        return NULL;
    memcpy(copy, s, size);
    *cursor += size;
    return copy;
}

PlegdEventKey *
plegd_event_key_new_full(gint64 time_ns, PlegPodLifecycleEventType type, gboolean sandbox,
                         const char *pod_namespace, const char *pod_name, const char *pod_uid,
                         const char *container_name)
{
    gsize size = sizeof(PlegdEventKey) + string_size(pod_namespace) + string_size(pod_name) +
                 string_size(pod_uid) + string_size(container_name);
    PlegdEventKey *key = g_malloc(size);
    char *cursor = (char *)(key + 1);

    key->time_ns = time_ns;
    key->type = type;
    key->sandbox = sandbox ? TRUE : FALSE;
    key->pod_namespace = copy_string(&cursor, pod_namespace);
    key->pod_name = copy_string(&cursor, pod_name);
    key->pod_uid = copy_string(&cursor, pod_uid);
    key->container_name = copy_string(&cursor, container_name);
    return key;
}

PlegdEventKey *
plegd_event_key_new(const PlegPodLifecycleEvent *event)
{
    const PlegEventDetails *details = pleg_pod_lifecycle_event_get_details(event);

    return plegd_event_key_new_full(event->time_ns, event->type, details->sandbox,
                                    details->pod_namespace, details->pod_name, event->pod_uid,
                                    details->container_name);
}

void
plegd_event_key_free(PlegdEventKey *key)
{
    g_free(key);
}

/* ---- parsing ---- */

/* now - @usec, in ns, without overflow. */
static gint64
before_now(gint64 now_ns, gint64 usec)
{
    if (usec < 0 && -usec > (G_MAXINT64 - now_ns) / 1000)
        return G_MAXINT64;
    return now_ns - usec * 1000;
}

/* RFC 3339's date-time (section 5.6), with the space its note allows, any case. */
#define RFC3339_PATTERN                                                                            \
    "^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?"                       \
    "([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"

/* Compiled once: a resumed plegd reads the time of every line of its state file, and a
 * compilation per call (g_regex_match_simple()) was a third of that load. */
static GRegex *
rfc3339_regex(void)
{
    static GRegex *regex;

    if (g_once_init_enter(&regex)) {
        GRegex *compiled = g_regex_new(RFC3339_PATTERN, G_REGEX_RAW | G_REGEX_OPTIMIZE, 0, NULL);

        g_assert(compiled);
        g_once_init_leave(&regex, compiled);
    }
    return regex;
}

static gboolean
bad_time(GError **error, const char *name, const char *value)
{
    g_autofree char *shown = pleg_log_text(value, -1, 0);

    g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                "invalid %s \"%s\": expected an RFC 3339 time with its offset "
                "(2026-12-04T17:00:00Z) or a Go duration before now (10m, 1h30m; -5m is "
                "five minutes ahead)",
                name, shown);
    return FALSE;
}

gboolean
plegd_event_filter_parse_time(const char *name, const char *value, gint64 now_ns, gint64 *ret_ns,
                              GError **error)
{
    g_autoptr(GDateTime) datetime = NULL;
    g_autofree char *whole = NULL;
    g_autofree char *upper = NULL;
    const char *shown_value = value;
    const char *t, *dot;
    gint64 usec, secs, fraction_ns = 0;

    if (pleg_duration_parse(value, &usec, NULL)) {
        *ret_ns = before_now(now_ns, usec);
        return TRUE;
    }
    /* GLib reads ISO 8601, a superset (week dates, ordinal dates, basic format, a comma,
     * "+01"): only RFC 3339's date-time is let through to it, 't', 'z' and ' ' as 'T' and 'Z'. */
    if (!g_regex_match(rfc3339_regex(), value, 0, NULL))
        return bad_time(error, name, value);
    upper = g_ascii_strup(value, -1);
    t = strpbrk(upper, "T ");
    upper[t - upper] = 'T';
    value = upper;
    dot = strchr(t, '.');

    /* GLib keeps microseconds, through a double: the fraction is read here, to the nanosecond
     * an event's "time" shows, so that an event's own time selects it. */
    if (dot) {
        gsize n_digits = strspn(dot + 1, "0123456789");
        gint64 scale = 100000000;

        for (gsize i = 0; i < n_digits && i < 9; i++, scale /= 10)
            fraction_ns += (dot[1 + i] - '0') * scale;
        if (n_digits > 0)
            whole = g_strdup_printf("%.*s%s", (int)(dot - value), value, dot + 1 + n_digits);
    }
    /* No default time zone: RFC 3339 requires the offset. */
    datetime = g_date_time_new_from_iso8601(whole ? whole : value, NULL);
    if (!datetime)
        return bad_time(error, name, shown_value);
    secs = g_date_time_to_unix(datetime);
    /* An event's time is a gint64 of nanoseconds: 1677-09-21 to 2262-04-11. */
    if (secs <= G_MININT64 / 1000000000 || secs >= G_MAXINT64 / 1000000000) {
        g_autofree char *shown = pleg_log_text(shown_value, -1, 0);

        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "invalid %s \"%s\": out of range (a time between the years 1678 and 2261)",
                    name, shown);
        return FALSE;
    }
    *ret_ns = secs * G_GINT64_CONSTANT(1000000000) + fraction_ns;
    return TRUE;
}

/* ---- the filter ---- */

PlegdEventFilter *
plegd_event_filter_new(gint64 now_ns)
{
    PlegdEventFilter *filter = g_new0(PlegdEventFilter, 1);

    filter->now_ns = now_ns;
    return filter;
}

void
plegd_event_filter_free(PlegdEventFilter *filter)
{
    if (!filter)
        return;
    for (guint i = 0; i < N_STRING_KEYS; i++)
        g_clear_pointer(&filter->strings[i], g_ptr_array_unref);
    g_free(filter);
}

static gboolean
bad_value(GError **error, const char *name, const char *value, const char *expected)
{
    g_autofree char *shown = pleg_log_text(value, -1, 0);

    g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "invalid %s \"%s\": %s", name,
                shown, expected);
    return FALSE;
}

static gboolean
add_type(PlegdEventFilter *filter, const char *value, GError **error)
{
    for (gsize i = 0; i < G_N_ELEMENTS(filter_types); i++) {
        if (g_str_equal(value, pleg_pod_lifecycle_event_type_to_string(filter_types[i]))) {
            filter->types |= 1u << filter_types[i];
            return TRUE;
        }
    }
    return bad_value(error, "type", value,
                     "expected ContainerStarted, ContainerDied, ContainerRemoved or PodSync");
}

static gboolean
add_time(gboolean *has, gint64 *ret_ns, const char *name, const char *value, gint64 now_ns,
         GError **error)
{
    if (*has) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "query parameter \"%s\" given more than once", name);
        return FALSE;
    }
    if (!plegd_event_filter_parse_time(name, value, now_ns, ret_ns, error))
        return FALSE;
    *has = TRUE;
    return TRUE;
}

static gboolean
add_value(PlegdEventFilter *filter, const char *name, const char *value, GError **error)
{
    gsize length = strlen(value);
    gint key = -1;

    for (gint i = 0; i < N_STRING_KEYS; i++) {
        if (g_str_equal(name, string_keys[i]))
            key = i;
    }
    if (key < 0 && !g_str_equal(name, "type") && !g_str_equal(name, "sandbox") &&
        !g_str_equal(name, "since_time") && !g_str_equal(name, "until_time")) {
        g_autofree char *shown = pleg_log_text(name, -1, 0);

        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_UNKNOWN_OPTION,
                    "unknown query parameter \"%s\"", shown);
        return FALSE;
    }
    if (length == 0)
        return bad_value(error, name, value, "empty (give the key once for each value)");
    if (length > PLEGD_EVENTS_FILTER_MAX_VALUE) {
        g_autofree char *why = g_strdup_printf("%" G_GSIZE_FORMAT " bytes, at most %u accepted",
                                               length, PLEGD_EVENTS_FILTER_MAX_VALUE);

        return bad_value(error, name, value, why);
    }
    if (filter->n_values == PLEGD_EVENTS_FILTER_MAX_VALUES) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "too many filter values at %s: at most %u in one request", name,
                    PLEGD_EVENTS_FILTER_MAX_VALUES);
        return FALSE;
    }

    if (key >= 0) {
        if (!filter->strings[key])
            filter->strings[key] = g_ptr_array_new_with_free_func(g_free);
        g_ptr_array_add(filter->strings[key], g_strdup(value));
        return TRUE;
    }
    if (g_str_equal(name, "type"))
        return add_type(filter, value, error);
    if (g_str_equal(name, "sandbox")) {
        if (g_str_equal(value, "true"))
            filter->sandbox |= SANDBOX_TRUE;
        else if (g_str_equal(value, "false"))
            filter->sandbox |= SANDBOX_FALSE;
        else
            return bad_value(error, name, value, "expected true or false");
        return TRUE;
    }
    if (g_str_equal(name, "since_time"))
        return add_time(&filter->has_since_time, &filter->since_ns, name, value, filter->now_ns,
                        error);
    return add_time(&filter->has_until_time, &filter->until_ns, name, value, filter->now_ns, error);
}

gboolean
plegd_event_filter_add(PlegdEventFilter *filter, const char *name, const char *value,
                       GError **error)
{
    if (!add_value(filter, name, value, error))
        return FALSE;
    filter->n_values++;
    return TRUE;
}

gboolean
plegd_event_filter_is_empty(const PlegdEventFilter *filter)
{
    return filter->n_values == 0;
}

gboolean
plegd_event_filter_get_since_time(const PlegdEventFilter *filter, gint64 *ret_ns)
{
    if (filter->has_since_time)
        *ret_ns = filter->since_ns;
    return filter->has_since_time;
}

gboolean
plegd_event_filter_get_until_time(const PlegdEventFilter *filter, gint64 *ret_ns)
{
    if (filter->has_until_time)
        *ret_ns = filter->until_ns;
    return filter->has_until_time;
}

static gboolean
any_equal(const GPtrArray *values, const char *s)
{
    if (!s)
        return FALSE;
    for (guint i = 0; i < values->len; i++) {
        if (strcmp(values->pdata[i], s) == 0)
            return TRUE;
    }
    return FALSE;
}

gboolean
plegd_event_filter_match(const PlegdEventFilter *filter, const PlegdEventKey *key)
{
    const char *strings[N_STRING_KEYS] = {key->pod_namespace, key->pod_name, key->pod_uid,
                                          key->container_name};

    if (filter->types && !(filter->types & (1u << key->type)))
        return FALSE;
    if (filter->sandbox && !(filter->sandbox & (key->sandbox ? SANDBOX_TRUE : SANDBOX_FALSE)))
        return FALSE;
    if (filter->has_since_time && key->time_ns < filter->since_ns)
        return FALSE;
    for (guint i = 0; i < N_STRING_KEYS; i++) {
        if (filter->strings[i] && !any_equal(filter->strings[i], strings[i]))
            return FALSE;
    }
    return TRUE;
}
