/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd's durable state: a write-ahead log of the event lines it publishes, in --state-dir.
 *
 * DIR/state.jsonl (version 1) is JSON Lines: a header {"plegd_state":1,"instance":...,
 * "first_seq":N}, the records a compaction wrote ({"record":{...}}), then the event lines byte
 * for byte as published, their seqs consecutive.  A batch of lines is appended with one
 * write() and made durable with one fdatasync() by the writer thread before plegd publishes
 * it; the records (what the Generic PLEG diffs against after a restart) are derived from the
 * events.  When the file holds too many event lines it is rewritten (compacted) as
 * DIR/state.jsonl.tmp: header, records, the last ring_size lines; fsync, rename, fsync DIR.
 *
 * Nothing here stops plegd: a file that cannot be used is moved aside and a fresh history
 * starts; a failing write degrades the state to memory only, and every later batch (and a
 * timer) tries to rewrite the whole state from memory until the directory works again.
 *
 * Test hooks, read once by plegd_state_open():
 *  - PLEGD_STATE_CRASH_AT="STEP:N": the writer raise(SIGKILL)s the N-th time (1-based) it
 *    reaches STEP, one of append-before-write, append-torn (writes the first half of the
 *    batch's bytes, then dies), append-before-fsync, append-after-fsync (before the batch is
 *    handed back), compact-tmp-created, compact-tmp-written (before its fsync),
 *    compact-before-rename, compact-after-rename (before the fsync of DIR).  Writing a fresh
 *    file at open goes through the compaction steps too (in the opening thread).
 *  - PLEGD_STATE_COMPACT_EVERY=N: compact when the file holds more than N event lines,
 *    instead of max(2 * ring_size, PLEGD_STATE_MIN_COMPACT_LINES).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-glib/json-glib.h>

#include "plegd.h"

#define STATE_FILE "state.jsonl"
#define TMP_SUFFIX ".tmp"
#define BAD_SUFFIX ".bad-"

/* Upper bounds of plegd_state_commit_duration_seconds: a local disk's fdatasync() is well
 * under a millisecond to some tens of milliseconds. */
static const double commit_buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                        0.05,   0.1,   0.25,   0.5,   1,    2.5};

typedef enum {
    PROBLEM_CORRUPT,
    PROBLEM_FOREIGN_VERSION,
    PROBLEM_UNTRUSTED,
    PROBLEM_UNREADABLE,
    PROBLEM_UNWRITABLE,
    PROBLEM_WRITE,
    PROBLEM_VANISHED,
    PROBLEM_IN_USE,
    N_PROBLEMS,
} Problem;

static const char *const problem_names[N_PROBLEMS] = {
    [PROBLEM_CORRUPT] = "corrupt",       [PROBLEM_FOREIGN_VERSION] = "foreign_version",
    [PROBLEM_UNTRUSTED] = "untrusted",   [PROBLEM_UNREADABLE] = "unreadable",
    [PROBLEM_UNWRITABLE] = "unwritable", [PROBLEM_WRITE] = "write",
    [PROBLEM_VANISHED] = "vanished",
    [PROBLEM_IN_USE] = "in_use",
};

typedef enum {
    CRASH_NONE,
    CRASH_APPEND_BEFORE_WRITE,
    CRASH_APPEND_TORN,
    CRASH_APPEND_BEFORE_FSYNC,
    CRASH_APPEND_AFTER_FSYNC,
    CRASH_COMPACT_TMP_CREATED,
    CRASH_COMPACT_TMP_WRITTEN,
    CRASH_COMPACT_BEFORE_RENAME,
    CRASH_COMPACT_AFTER_RENAME,
    N_CRASH_STEPS,
} CrashStep;

static const char *const crash_step_names[N_CRASH_STEPS] = {
    [CRASH_APPEND_BEFORE_WRITE] = "append-before-write",
    [CRASH_APPEND_TORN] = "append-torn",
    [CRASH_APPEND_BEFORE_FSYNC] = "append-before-fsync",
    [CRASH_APPEND_AFTER_FSYNC] = "append-after-fsync",
    [CRASH_COMPACT_TMP_CREATED] = "compact-tmp-created",
    [CRASH_COMPACT_TMP_WRITTEN] = "compact-tmp-written",
    [CRASH_COMPACT_BEFORE_RENAME] = "compact-before-rename",
    [CRASH_COMPACT_AFTER_RENAME] = "compact-after-rename",
};

/* A line kept in memory: the last ring_size, for GET /events?since= after a restart and for
 * compactions. */
typedef struct {
    guint64 seq;
    GBytes *line;
    PlegdEventKey *key;
} TailLine;

/* What the records and the /events key need of an event, from a #PlegPodLifecycleEvent or
 * read back from its line.  Strings are borrowed. */
typedef struct {
    gint64 time_ns;
    PlegPodLifecycleEventType type;
    const char *pod_uid;
    const char *id;
    gboolean sandbox;
    const char *pod_namespace;
    const char *pod_name;
    const char *container_name;
    const char *image;
    guint32 attempt;
} EventValues;

typedef struct {
    GPtrArray *batch;
    PlegdStateCommit commit; /* its instance owned */
    PlegdStateCommittedFunc func;
    gpointer user_data;
    PlegdState *state;
} Committed;

typedef struct {
    GPtrArray *batch;
    PlegdStateCommittedFunc func;
    gpointer user_data;
} Queued;

struct _PlegdState {
    gatomicrefcount ref; /* plegd_state_free()'s and the writer thread's */
    char *dir;
    char *path;
    char *tmp_path;
    guint ring_size;
    guint64 compact_lines;
    GMainContext *context;
    PlegMetricsRegistry *metrics;
    PlegMetric *problems;
    PlegMetricSeries *durable_gauge;
    PlegMetricSeries *commit_duration;
    PlegMetricSeries *compactions;
    CrashStep crash_step;
    guint crash_n;
    guint crash_reached;

    /* The history being written: the load's, until a break replaces it (the writer, with the
     * lock held). */
    char *instance;
    guint64 first_seq;
    /* Set by the load, constant afterwards. */
    char *loaded_instance;
    guint64 loaded_first_seq;
    guint64 loaded_next_seq;
    gboolean resumed;
    char *start_note;     /* (nullable) what happened to a bad file at start */
    gboolean never_write; /* a bad file could not be moved aside: it is left alone */

    /* Main thread only. */
    guint64 commit_next_seq;
    guint64 main_renumber_base, main_renumber_first; /* the last break main was told of */
    gboolean closed;
    GThread *thread;

    /* Writer thread only (the loading thread before the writer starts). */
    int fd;                   /* state.jsonl for appending, -1 while degraded */
    int dir_fd;               /* DIR, flock()ed for the state's life; -1: none */
    guint64 file_events;      /* event lines in the file */
    gint64 last_attempt_usec; /* monotonic: the last recovery tried */
    /* Whether a restart would resume the history being written: every line published of it is
     * in the file.  A failure while it is breaks the history (break_history()). */
    gboolean history_on_disk;
    /* The last break: entries of seqs [renumber_base, renumber_first) were numbered in the
     * history it ended, and get seq - renumber_base + renumber_first. */
    guint64 renumber_base, renumber_first;

    GMutex lock;
    GCond cond;
    GQueue queue; /* Queued, oldest first */
    gboolean writing;
    gboolean stop;
    gboolean durable;
    char *failure;            /* (nullable) why not durable */
    gint64 degraded_since_ns; /* wall clock */
    /* Changed by the writer with the lock held, read by the others with it. */
    GHashTable *records; /* id -> PlegdStateRecord */
    GQueue tail;         /* TailLine, oldest first, at most ring_size */
};

/* ---- entries and records ---- */

PlegdStateEntry *
plegd_state_entry_new(guint64 seq, GBytes *line, PlegPodLifecycleEvent *event)
{
    PlegdStateEntry *entry = g_new(PlegdStateEntry, 1);

    entry->seq = seq;
    entry->line = g_bytes_ref(line);
    entry->event = event ? pleg_pod_lifecycle_event_ref(event) : NULL;
    return entry;
}

void
plegd_state_entry_free(PlegdStateEntry *entry)
{
    if (!entry)
        return;
    g_bytes_unref(entry->line);
    pleg_pod_lifecycle_event_unref(entry->event);
    g_free(entry);
}

void
plegd_state_record_free(PlegdStateRecord *record)
{
    if (!record)
        return;
    g_free(record->pod_uid);
    g_free(record->id);
    g_free(record->pod_namespace);
    g_free(record->pod_name);
    g_free(record->container_name);
    g_free(record->image);
    g_free(record);
}

static PlegdStateRecord *
record_copy(const PlegdStateRecord *record)
{
    PlegdStateRecord *copy = g_new(PlegdStateRecord, 1);

    *copy = (PlegdStateRecord){
        .pod_uid = g_strdup(record->pod_uid),
        .id = g_strdup(record->id),
        .sandbox = record->sandbox,
        .state = record->state,
        .pod_namespace = g_strdup(record->pod_namespace),
        .pod_name = g_strdup(record->pod_name),
        .container_name = g_strdup(record->container_name),
        .image = g_strdup(record->image),
        .attempt = record->attempt,
    };
    return copy;
}

/* Called by the writer with the lock held (or before the writer starts). */
static void
records_apply(GHashTable *records, const EventValues *v)
{
    PlegdStateRecord *record;

    switch (v->type) {
    case PLEG_CONTAINER_STARTED:
    case PLEG_CONTAINER_DIED:
        break;
    case PLEG_CONTAINER_REMOVED:
        g_hash_table_remove(records, v->id);
        return;
    case PLEG_POD_SYNC:
    case PLEG_CONTAINER_CHANGED:
    default:
        return;
    }
    record = g_new0(PlegdStateRecord, 1);
    record->id = g_strdup(v->id);
    record->pod_uid = g_strdup(v->pod_uid);
    record->sandbox = v->sandbox;
    record->state = v->type == PLEG_CONTAINER_STARTED ? PLEG_CONTAINER_STATE_RUNNING
                                                      : PLEG_CONTAINER_STATE_EXITED;
    record->pod_namespace = g_strdup(v->pod_namespace);
    record->pod_name = g_strdup(v->pod_name);
    record->container_name = g_strdup(v->container_name);
    record->image = g_strdup(v->image);
    record->attempt = v->attempt;
    g_hash_table_replace(records, record->id, record);
}

static GHashTable *
records_new(void)
{
    return g_hash_table_new_full(g_str_hash, g_str_equal, NULL,
                                 (GDestroyNotify)plegd_state_record_free);
}

static void
tail_line_free(TailLine *tail_line)
{
    g_bytes_unref(tail_line->line);
    plegd_event_key_free(tail_line->key);
    g_free(tail_line);
}

/* Called by the writer with the lock held (or before the writer starts). */
static void
tail_push(PlegdState *state, guint64 seq, GBytes *line, PlegdEventKey *key)
{
    TailLine *tail_line = g_new(TailLine, 1);

    tail_line->seq = seq;
    tail_line->line = g_bytes_ref(line);
    tail_line->key = key;
    g_queue_push_tail(&state->tail, tail_line);
    while (g_queue_get_length(&state->tail) > state->ring_size)
        tail_line_free(g_queue_pop_head(&state->tail));
}

/* ---- reading lines ---- */

static const char *
string_member(JsonObject *object, const char *name, gboolean *ok)
{
    JsonNode *node = json_object_get_member(object, name);

    if (!node || JSON_NODE_HOLDS_NULL(node))
        return NULL;
    if (!JSON_NODE_HOLDS_VALUE(node) || json_node_get_value_type(node) != G_TYPE_STRING) {
        *ok = FALSE;
        return NULL;
    }
    return json_node_get_string(node);
}

/* @ret: untouched when absent. */
static void
int_member(JsonObject *object, const char *name, gint64 min, gint64 max, gint64 *ret, gboolean *ok)
{
    JsonNode *node = json_object_get_member(object, name);
    gint64 value;

    if (!node)
        return;
    if (!JSON_NODE_HOLDS_VALUE(node) || json_node_get_value_type(node) != G_TYPE_INT64) {
        *ok = FALSE;
        return;
    }
    value = json_node_get_int(node);
    if (value < min || value > max)
        *ok = FALSE;
    else
        *ret = value;
}

static void
bool_member(JsonObject *object, const char *name, gboolean *ret, gboolean *ok)
{
    JsonNode *node = json_object_get_member(object, name);

    if (!node)
        return;
    if (!JSON_NODE_HOLDS_VALUE(node) || json_node_get_value_type(node) != G_TYPE_BOOLEAN)
        *ok = FALSE;
    else
        *ret = json_node_get_boolean(node);
}

static gboolean
type_from_string(const char *text, PlegPodLifecycleEventType *ret_type)
{
    for (int t = PLEG_CONTAINER_STARTED; t <= PLEG_CONTAINER_CHANGED; t++) {
        if (g_strcmp0(text, pleg_pod_lifecycle_event_type_to_string(t)) == 0) {
            *ret_type = t;
            return TRUE;
        }
    }
    return FALSE;
}

/* The members of an event line; strings borrowed from @object.  Returns: (nullable): what is
 * wrong, static. */
static const char *
read_event(JsonObject *object, guint64 *ret_seq, EventValues *v)
{
    gboolean ok = TRUE;
    gint64 seq = 0, attempt = 0;
    const char *time_text, *type_text;
    g_autoptr(GError) error = NULL;

    int_member(object, "seq", 1, PLEGD_STATE_MAX_SEQ, &seq, &ok);
    if (!ok || seq == 0)
        return "no valid seq";
    time_text = string_member(object, "time", &ok);
    if (!time_text || !plegd_event_filter_parse_time("time", time_text, 0, &v->time_ns, &error))
        return "no valid time";
    type_text = string_member(object, "type", &ok);
    if (!type_from_string(type_text, &v->type))
        return "no valid type";
    v->pod_uid = string_member(object, "pod_uid", &ok);
    v->id = string_member(object, "container_id", &ok);
    v->pod_namespace = string_member(object, "namespace", &ok);
    v->pod_name = string_member(object, "pod", &ok);
    v->container_name = string_member(object, "container", &ok);
    v->image = string_member(object, "image", &ok);
    v->sandbox = FALSE;
    bool_member(object, "sandbox", &v->sandbox, &ok);
    int_member(object, "attempt", 0, G_MAXUINT32, &attempt, &ok);
    v->attempt = (guint32)attempt;
    if (!ok)
        return "a member of the wrong type";
    if (v->type != PLEG_POD_SYNC && !v->id)
        return "no container_id";
    *ret_seq = (guint64)seq;
    return NULL;
}

/* Returns: (nullable): what is wrong, static. */
static const char *
read_record(JsonObject *object, GHashTable *records)
{
    gboolean ok = TRUE;
    gint64 attempt = 0;
    const char *state_text;
    EventValues v = {0};

    v.pod_uid = string_member(object, "pod_uid", &ok);
    v.id = string_member(object, "id", &ok);
    v.pod_namespace = string_member(object, "namespace", &ok);
    v.pod_name = string_member(object, "pod", &ok);
    v.container_name = string_member(object, "container", &ok);
    v.image = string_member(object, "image", &ok);
    bool_member(object, "sandbox", &v.sandbox, &ok);
    int_member(object, "attempt", 0, G_MAXUINT32, &attempt, &ok);
    v.attempt = (guint32)attempt;
    state_text = string_member(object, "state", &ok);
    if (!ok || !v.id)
        return "a record without an id or with a member of the wrong type";
    if (g_strcmp0(state_text, "running") == 0)
        v.type = PLEG_CONTAINER_STARTED;
    else if (g_strcmp0(state_text, "exited") == 0)
        v.type = PLEG_CONTAINER_DIED;
    else
        return "a record whose state is neither running nor exited";
    records_apply(records, &v);
    return NULL;
}

static void
values_of_event(const PlegPodLifecycleEvent *event, EventValues *v)
{
    const PlegEventDetails *details = pleg_pod_lifecycle_event_get_details(event);

    *v = (EventValues){
        .time_ns = event->time_ns,
        .type = event->type,
        .pod_uid = event->pod_uid,
        .id = event->container_id,
        .sandbox = details->sandbox,
        .pod_namespace = details->pod_namespace,
        .pod_name = details->pod_name,
        .container_name = details->container_name,
        .image = details->image,
        .attempt = details->attempt,
    };
}

static PlegdEventKey *
key_of_values(const EventValues *v)
{
    return plegd_event_key_new_full(v->time_ns, v->type, v->sandbox, v->pod_namespace, v->pod_name,
                                    v->pod_uid, v->container_name);
}

/* ---- loading ---- */

typedef struct {
    Problem problem;
    char *why; /* what is wrong, for the log and describe */
} LoadFailure;

static gboolean
load_fail(LoadFailure *failure, Problem problem, char *why)
{
    failure->problem = problem;
    failure->why = why;
    return FALSE;
}

/* Checks that @fd may be trusted: a regular file of ours that no one else can write. */
static gboolean
check_trusted(int fd, LoadFailure *failure)
{
    struct stat st;

    if (fstat(fd, &st) < 0)
        return load_fail(failure, PROBLEM_UNREADABLE, g_strdup(g_strerror(errno)));
    if (!S_ISREG(st.st_mode))
        return load_fail(failure, PROBLEM_UNTRUSTED, g_strdup("not a regular file"));
    if (st.st_uid != geteuid())
        return load_fail(failure, PROBLEM_UNTRUSTED,
                         g_strdup_printf("owned by uid %u, not by plegd's uid %u", (guint)st.st_uid,
                                         (guint)geteuid()));
    if (st.st_mode & 022)
        return load_fail(failure, PROBLEM_UNTRUSTED,
                         g_strdup_printf("writable by group or others (mode %04o)",
                                         (guint)(st.st_mode & 07777)));
    return TRUE;
}

static gboolean
bad_line(LoadFailure *failure, Problem problem, guint line_no, const char *what)
{
    return load_fail(failure, problem, g_strdup_printf("line %u: %s", line_no, what));
}

/* Reads the file of @fd into @state (instance, first_seq, loaded_next_seq, records, tail,
 * file_events).  @ret_complete_len: the bytes up to the last newline. */
static gboolean
load_contents(PlegdState *state, const char *data, gsize len, gsize *ret_complete_len,
              LoadFailure *failure)
{
    g_autoptr(JsonParser) parser = json_parser_new_immutable();
    const char *end = data ? memrchr(data, '\n', len) : NULL;
    gsize complete = end ? (gsize)(end - data) + 1 : 0;
    guint64 next_seq = 0;
    gboolean have_events = FALSE;
    guint line_no = 0;

    if (len == 0)
        return load_fail(failure, PROBLEM_CORRUPT, g_strdup("empty (zero length)"));
    if (complete == 0)
        return load_fail(failure, PROBLEM_CORRUPT, g_strdup("line 1: no complete header"));

    for (gsize pos = 0; pos < complete;) {
        const char *line = data + pos;
        const char *nl = memchr(line, '\n', complete - pos);
        gsize line_len = (gsize)(nl - line);
        JsonObject *object;
        JsonNode *root;

        pos += line_len + 1;
        line_no++;
        if (line_len > PLEGD_STATE_MAX_LINE)
            return bad_line(failure, PROBLEM_CORRUPT, line_no, "a line longer than 1 MiB");
        if (!g_utf8_validate_len(line, line_len, NULL) ||
            !json_parser_load_from_data(parser, line, (gssize)line_len, NULL))
            return bad_line(failure, PROBLEM_CORRUPT, line_no, "not JSON");
        root = json_parser_get_root(parser);
        if (!root || !JSON_NODE_HOLDS_OBJECT(root))
            return bad_line(failure, PROBLEM_CORRUPT, line_no, "not a JSON object");
        object = json_node_get_object(root);

        if (line_no == 1) {
            gboolean ok = TRUE;
            gint64 version = 0, first_seq = 0;
            const char *instance;

            if (!json_object_has_member(object, "plegd_state"))
                return bad_line(failure, PROBLEM_CORRUPT, 1, "not a plegd state header");
            int_member(object, "plegd_state", G_MININT64, G_MAXINT64, &version, &ok);
            if (ok && version != PLEGD_STATE_VERSION)
                return load_fail(failure, PROBLEM_FOREIGN_VERSION,
                                 g_strdup_printf("version %" G_GINT64_FORMAT
                                                 ", this plegd reads version %d",
                                                 version, PLEGD_STATE_VERSION));
            instance = string_member(object, "instance", &ok);
            int_member(object, "first_seq", 1, PLEGD_STATE_MAX_SEQ, &first_seq, &ok);
            if (!ok || !instance || instance[0] == '\0' || first_seq == 0)
                return bad_line(failure, PROBLEM_CORRUPT, 1,
                                "a header without a valid "
                                "instance or first_seq");
            state->instance = g_strdup(instance);
            state->first_seq = (guint64)first_seq;
            next_seq = state->first_seq;
            continue;
        }

        if (json_object_has_member(object, "record")) {
            JsonNode *node = json_object_get_member(object, "record");
            const char *why;

            if (have_events)
                return bad_line(failure, PROBLEM_CORRUPT, line_no, "a record after events");
            if (!JSON_NODE_HOLDS_OBJECT(node))
                return bad_line(failure, PROBLEM_CORRUPT, line_no,
                                "a record that is not an "
                                "object");
            why = read_record(json_node_get_object(node), state->records);
            if (why)
                return bad_line(failure, PROBLEM_CORRUPT, line_no, why);
        } else {
            EventValues v = {0};
            guint64 seq = 0;
            const char *why = read_event(object, &seq, &v);
            g_autoptr(GBytes) bytes = NULL;

            if (why)
                return bad_line(failure, PROBLEM_CORRUPT, line_no, why);
            if (have_events ? seq != next_seq : seq < state->first_seq) {
                g_autofree char *what = g_strdup_printf(
                    "seq %" G_GUINT64_FORMAT " where %s%" G_GUINT64_FORMAT " was due", seq,
                    have_events ? "" : "at least ", next_seq);

                return bad_line(failure, PROBLEM_CORRUPT, line_no, what);
            }
            have_events = TRUE;
            next_seq = seq + 1;
            records_apply(state->records, &v);
            state->file_events++;
            /* The last ring_size lines are kept: tail_push() drops the oldest. */
            bytes = g_bytes_new(line, line_len + 1);
            tail_push(state, seq, bytes, key_of_values(&v));
        }
    }
    state->loaded_next_seq = next_seq;
    *ret_complete_len = complete;
    return TRUE;
}

static void
reset_history(PlegdState *state)
{
    g_clear_pointer(&state->instance, g_free);
    g_hash_table_remove_all(state->records);
    g_queue_clear_full(&state->tail, (GDestroyNotify)tail_line_free);
    state->file_events = 0;
    state->first_seq = (guint64)g_get_real_time();
    state->loaded_next_seq = state->first_seq;
    state->instance = g_uuid_string_random();
    state->resumed = FALSE;
}

/* Loads an open state.jsonl; on success @fd is at its end, ready for appending. */
static gboolean
load_file(PlegdState *state, int fd, LoadFailure *failure)
{
    g_autoptr(GMappedFile) mapped = NULL;
    g_autoptr(GError) error = NULL;
    gsize len, complete = 0;

    if (!check_trusted(fd, failure))
        return FALSE;
    mapped = g_mapped_file_new_from_fd(fd, FALSE, &error);
    if (!mapped)
        return load_fail(failure, PROBLEM_UNREADABLE, g_strdup(error->message));
    len = g_mapped_file_get_length(mapped);
    if (!load_contents(state, g_mapped_file_get_contents(mapped), len, &complete, failure)) {
        g_hash_table_remove_all(state->records);
        g_queue_clear_full(&state->tail, (GDestroyNotify)tail_line_free);
        state->file_events = 0;
        return FALSE;
    }
    if (complete < len) {
        /* A crash in the middle of an append: the line was never published. */
        g_info("state: dropping the last %" G_GSIZE_FORMAT " bytes of %s, an append a crash "
               "cut short",
               len - complete, state->path);
        if (ftruncate(fd, (off_t)complete) < 0)
            return load_fail(failure, PROBLEM_UNREADABLE,
                             g_strdup_printf("cannot truncate it: %s", g_strerror(errno)));
    }
    if (lseek(fd, 0, SEEK_END) < 0)
        return load_fail(failure, PROBLEM_UNREADABLE, g_strdup(g_strerror(errno)));
    return TRUE;
}

/* Renames @state->path aside.  Returns: (transfer full) (nullable): where it went. */
static char *
move_aside(PlegdState *state, int *ret_errno)
{
    g_autoptr(GDateTime) now = g_date_time_new_now_utc();
    g_autofree char *stamp = g_date_time_format(now, "%Y%m%dT%H%M%SZ");

    for (guint i = 0; i < 100; i++) {
        g_autofree char *aside =
            i == 0 ? g_strconcat(state->path, BAD_SUFFIX, stamp, NULL)
                   : g_strdup_printf("%s" BAD_SUFFIX "%s.%u", state->path, stamp, i);

        if (renameat2(AT_FDCWD, state->path, AT_FDCWD, aside, RENAME_NOREPLACE) == 0)
            return g_steal_pointer(&aside);
        if (errno != EEXIST) {
            *ret_errno = errno;
            return NULL;
        }
    }
    *ret_errno = EEXIST;
    return NULL;
}

/* ---- writing ---- */

/* Counts a visit of @step, as crash_point() does.  Returns: whether to die now. */
static gboolean
crash_due(PlegdState *state, CrashStep step)
{
    return state->crash_step == step && ++state->crash_reached == state->crash_n;
}

static void
crash_point(PlegdState *state, CrashStep step)
{
    if (crash_due(state, step))
        raise(SIGKILL);
}

static gboolean
write_all(int fd, const char *data, gsize len, int *ret_errno)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            *ret_errno = errno;
            return FALSE;
        }
        data += n;
        len -= (gsize)n;
    }
    return TRUE;
}

static gboolean
fsync_dir(const char *dir, int *ret_errno)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int r;

    if (fd < 0) {
        *ret_errno = errno;
        return FALSE;
    }
    r = fsync(fd);
    if (r < 0)
        *ret_errno = errno;
    close(fd);
    return r == 0;
}

static void
append_json_line(GString *out, JsonBuilder *builder, JsonGenerator *generator)
{
    g_autoptr(JsonNode) root = json_builder_get_root(builder);
    g_autofree char *text = NULL;

    json_generator_set_root(generator, root);
    text = json_generator_to_data(generator, NULL);
    g_string_append(out, text);
    g_string_append_c(out, '\n');
    json_builder_reset(builder);
}

static void
add_string(JsonBuilder *builder, const char *name, const char *value)
{
    if (!value)
        return;
    json_builder_set_member_name(builder, name);
    json_builder_add_string_value(builder, value);
}

static gint
compare_records(gconstpointer a, gconstpointer b)
{
    const PlegdStateRecord *ra = *(PlegdStateRecord *const *)a;
    const PlegdStateRecord *rb = *(PlegdStateRecord *const *)b;

    return strcmp(ra->id, rb->id);
}

/* Sorted by id, so that a compaction of the same state writes the same bytes.  Called by the
 * writer (or before it starts) or with the lock held. */
static GPtrArray *
records_sorted(GHashTable *records, gboolean copy)
{
    GPtrArray *sorted = g_ptr_array_new_full(g_hash_table_size(records),
                                             copy ? (GDestroyNotify)plegd_state_record_free : NULL);
    GHashTableIter iter;
    gpointer value;

    g_hash_table_iter_init(&iter, records);
    while (g_hash_table_iter_next(&iter, NULL, &value))
        g_ptr_array_add(sorted, copy ? record_copy(value) : value);
    g_ptr_array_sort(sorted, compare_records);
    return sorted;
}

/* The whole state as a compaction writes it: header, records, the kept lines. */
static GString *
build_snapshot(PlegdState *state)
{
    g_autoptr(JsonBuilder) builder = json_builder_new_immutable();
    g_autoptr(JsonGenerator) generator = json_generator_new();
    g_autoptr(GPtrArray) records = records_sorted(state->records, FALSE);
    GString *out = g_string_sized_new(4096);

    json_builder_begin_object(builder);
    json_builder_set_member_name(builder, "plegd_state");
    json_builder_add_int_value(builder, PLEGD_STATE_VERSION);
    json_builder_set_member_name(builder, "instance");
    json_builder_add_string_value(builder, state->instance);
    json_builder_set_member_name(builder, "first_seq");
    json_builder_add_int_value(builder, (gint64)state->first_seq);
    json_builder_end_object(builder);
    append_json_line(out, builder, generator);

    for (guint i = 0; i < records->len; i++) {
        const PlegdStateRecord *record = records->pdata[i];

        json_builder_begin_object(builder);
        json_builder_set_member_name(builder, "record");
        json_builder_begin_object(builder);
        add_string(builder, "pod_uid", record->pod_uid);
        add_string(builder, "id", record->id);
        json_builder_set_member_name(builder, "sandbox");
        json_builder_add_boolean_value(builder, record->sandbox);
        json_builder_set_member_name(builder, "state");
        json_builder_add_string_value(
            builder, record->state == PLEG_CONTAINER_STATE_RUNNING ? "running" : "exited");
        add_string(builder, "namespace", record->pod_namespace);
        add_string(builder, "pod", record->pod_name);
        add_string(builder, "container", record->container_name);
        json_builder_set_member_name(builder, "attempt");
        json_builder_add_int_value(builder, record->attempt);
        add_string(builder, "image", record->image);
        json_builder_end_object(builder);
        json_builder_end_object(builder);
        append_json_line(out, builder, generator);
    }
    for (GList *l = state->tail.head; l; l = l->next) {
        const TailLine *tail_line = l->data;
        gsize size;
        const char *data = g_bytes_get_data(tail_line->line, &size);

        g_string_append_len(out, data, (gssize)size);
    }
    return out;
}

/* Rewrites state.jsonl from memory (tmp, fsync, rename, fsync DIR) and makes it the file
 * appended to.  Writer thread (or before it starts).  @ret_what: the step that failed. */
static gboolean
compact(PlegdState *state, const char **ret_what, int *ret_errno)
{
    g_autoptr(GString) snapshot = build_snapshot(state);
    int fd;

    fd = open(state->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        *ret_what = "cannot create";
        *ret_errno = errno;
        return FALSE;
    }
    crash_point(state, CRASH_COMPACT_TMP_CREATED);
    if (!write_all(fd, snapshot->str, snapshot->len, ret_errno)) {
        *ret_what = "cannot write";
        goto fail;
    }
    crash_point(state, CRASH_COMPACT_TMP_WRITTEN);
    if (fsync(fd) < 0) {
        *ret_what = "cannot fsync";
        *ret_errno = errno;
        goto fail;
    }
    crash_point(state, CRASH_COMPACT_BEFORE_RENAME);
    if (rename(state->tmp_path, state->path) < 0) {
        *ret_what = "cannot rename over";
        *ret_errno = errno;
        goto fail;
    }
    crash_point(state, CRASH_COMPACT_AFTER_RENAME);
    if (!fsync_dir(state->dir, ret_errno)) {
        *ret_what = "cannot fsync the directory of";
        close(fd);
        return FALSE;
    }
    if (state->fd >= 0)
        close(state->fd);
    /* The file written is state.jsonl now, its offset at the end. */
    state->fd = fd;
    state->file_events = g_queue_get_length(&state->tail);
    pleg_metric_series_inc(state->compactions);
    return TRUE;

fail:
    close(fd);
    unlink(state->tmp_path);
    return FALSE;
}

static char *
format_time(gint64 unix_ns)
{
    char text[PLEG_TIME_RFC3339_SIZE];

    pleg_time_format_rfc3339_to_buffer(unix_ns, text);
    return g_strdup(text);
}

/* Writer thread (or before it starts).  Logs and counts the first failure only. */
static void
enter_degraded(PlegdState *state, Problem problem, const char *what, int err)
{
    g_autofree char *failure = NULL;
    gboolean was_durable;

    if (problem == PROBLEM_VANISHED)
        failure = g_strdup_printf("%s was deleted or replaced", state->path);
    else
        failure = g_strdup_printf("%s %s: %s", what, state->path, g_strerror(err));
    if (state->fd >= 0) {
        close(state->fd);
        state->fd = -1;
    }
    g_mutex_lock(&state->lock);
    was_durable = state->durable;
    state->durable = FALSE;
    g_free(state->failure);
    state->failure = g_strdup(failure);
    if (was_durable)
        state->degraded_since_ns = g_get_real_time() * 1000;
    g_mutex_unlock(&state->lock);
    state->last_attempt_usec = g_get_monotonic_time();
    if (!was_durable) {
        g_debug("state: still not durable: %s", failure);
        return;
    }
    {
        const char *const labels[] = {problem_names[problem]};

        pleg_metric_inc(state->problems, labels);
    }
    pleg_metric_series_set(state->durable_gauge, 0);
    plegd_log_warning("state: %s; events are published from memory, not durably, until the "
                      "state directory works again (retried with each batch, at least every "
                      "%d s)",
                      failure, (int)(PLEGD_STATE_RETRY_USEC / G_USEC_PER_SEC));
}

/* Writer thread: rewrites the whole state from memory; recreates DIR when it is gone. */
static gboolean
recover(PlegdState *state)
{
    const char *what = "cannot write";
    int err = 0;

    if (state->never_write)
        return FALSE;
    state->last_attempt_usec = g_get_monotonic_time();
    if (g_mkdir_with_parents(state->dir, 0700) < 0) {
        enter_degraded(state, PROBLEM_UNWRITABLE, "cannot create the directory of", errno);
        return FALSE;
    }
    if (!compact(state, &what, &err)) {
        enter_degraded(state, PROBLEM_WRITE, what, err);
        return FALSE;
    }
    g_mutex_lock(&state->lock);
    state->durable = TRUE;
    g_clear_pointer(&state->failure, g_free);
    g_mutex_unlock(&state->lock);
    state->history_on_disk = TRUE;
    pleg_metric_series_set(state->durable_gauge, 1);
    g_message("state: the state directory works again: %s is durable", state->path);
    return TRUE;
}

/* @line, a line of plegd's ({"seq":N,...), with @seq in place of N. */
static GBytes *
line_with_seq(GBytes *line, guint64 seq)
{
    static const char prefix[] = "{\"seq\":";
    gsize len;
    const char *data = g_bytes_get_data(line, &len);
    const char *rest = len > sizeof prefix - 1 && memcmp(data, prefix, sizeof prefix - 1) == 0
                           ? memchr(data, ',', len)
                           : NULL;
    GString *out;

    if (!rest) {
        g_critical("state: a line without its seq first cannot be renumbered");
        return g_bytes_ref(line);
    }
    out = g_string_sized_new(len + 8);
    g_string_append_printf(out, "%s%" G_GUINT64_FORMAT, prefix, seq);
    g_string_append_len(out, rest, (gssize)(data + len - rest));
    return g_string_free_to_bytes(out);
}

/* Writer thread: the entries of @batch numbered in a history that a break ended, renumbered in
 * the new one. */
static void
renumber(PlegdState *state, GPtrArray *batch)
{
    for (guint i = 0; state->renumber_first > 0 && i < batch->len; i++) {
        PlegdStateEntry *entry = batch->pdata[i];
        GBytes *line;

        if (entry->seq < state->renumber_base || entry->seq >= state->renumber_first)
            continue;
        entry->seq = entry->seq - state->renumber_base + state->renumber_first;
        line = line_with_seq(entry->line, entry->seq);
        g_bytes_unref(entry->line);
        entry->line = line;
    }
}

/* Writer thread: @batch cannot be made durable, and the history it belongs to is on disk up to
 * the event before it.  Were @batch published under that history and plegd killed before the
 * directory works again, the restart would resume that history at @batch's first seq and give
 * those seqs to other events: a client would take them for the ones it saw.  So @batch starts a
 * new history instead, whose seqs are far above (PLEGD_STATE_HISTORY_GAP): a client of the old
 * one gets 410 from either.  Sets @commit's instance, first_seq and renumbered_from. */
static void
break_history(PlegdState *state, GPtrArray *batch, PlegdStateCommit *commit)
{
    guint64 base = ((const PlegdStateEntry *)batch->pdata[0])->seq;
    guint64 first = MAX((guint64)g_get_real_time(), base + PLEGD_STATE_HISTORY_GAP);

    g_mutex_lock(&state->lock);
    g_free(state->instance);
    state->instance = g_uuid_string_random();
    state->first_seq = first;
    /* The old history's lines are not this one's. */
    g_queue_clear_full(&state->tail, (GDestroyNotify)tail_line_free);
    commit->instance = g_strdup(state->instance);
    g_mutex_unlock(&state->lock);
    commit->first_seq = first;
    commit->renumbered_from = base;
    state->renumber_base = base;
    state->renumber_first = first;
    state->history_on_disk = FALSE;
    plegd_log_warning("state: events from seq %" G_GUINT64_FORMAT " on cannot be made durable: "
                      "they start a new history (instance %s, seq %" G_GUINT64_FORMAT "), and "
                      "/events clients of the old one must relist",
                      base, commit->instance, first);
    renumber(state, batch);
}

/* Writer thread: the batch's lines, records and keys into memory. */
static void
apply_batch(PlegdState *state, GPtrArray *batch)
{
    g_mutex_lock(&state->lock);
    for (guint i = 0; i < batch->len; i++) {
        const PlegdStateEntry *entry = batch->pdata[i];
        EventValues v = {0};
        g_autoptr(JsonParser) parser = NULL;

        if (entry->event) {
            values_of_event(entry->event, &v);
        } else {
            gsize len;
            const char *data = g_bytes_get_data(entry->line, &len);
            guint64 seq;
            JsonNode *root;

            parser = json_parser_new_immutable();
            if (len == 0 || !json_parser_load_from_data(parser, data, (gssize)len - 1, NULL) ||
                !(root = json_parser_get_root(parser)) || !JSON_NODE_HOLDS_OBJECT(root) ||
                read_event(json_node_get_object(root), &seq, &v)) {
                /* plegd's own lines always parse: a bug of the caller. */
                g_critical("state: the line of seq %" G_GUINT64_FORMAT " is not an event line",
                           entry->seq);
                continue;
            }
        }
        records_apply(state->records, &v);
        tail_push(state, entry->seq, entry->line, key_of_values(&v));
    }
    g_mutex_unlock(&state->lock);
}

/* Writer thread: @batch, which could not be written, goes into memory (a recovery writes it
 * with the rest), after a break when its history is on disk. */
static void
fail_batch(PlegdState *state, GPtrArray *batch, PlegdStateCommit *commit)
{
    if (state->history_on_disk)
        break_history(state, batch, commit);
    apply_batch(state, batch);
}

/* Writer thread.  Sets @commit (durable, and a break). */
static void
write_batch(PlegdState *state, GPtrArray *batch, PlegdStateCommit *commit)
{
    g_autoptr(GByteArray) buf = NULL;
    gint64 start;
    struct stat st_fd, st_path;
    int err = 0;

    renumber(state, batch);
    commit->durable = FALSE;
    if (batch->len == 0) {
        commit->durable = state->fd >= 0;
        return;
    }
    if (state->fd < 0 && !state->history_on_disk) {
        /* Degraded, the history in memory only: the batch joins it, and a recovery writes all. */
        apply_batch(state, batch);
        commit->durable = recover(state);
        return;
    }
    /* Degraded with the history on disk: the directory may work again before this batch. */
    if (state->fd < 0 && !recover(state)) {
        fail_batch(state, batch, commit);
        return;
    }

    buf = g_byte_array_new();
    for (guint i = 0; i < batch->len; i++) {
        const PlegdStateEntry *entry = batch->pdata[i];
        gsize len;
        const guint8 *data = g_bytes_get_data(entry->line, &len);

        g_byte_array_append(buf, data, (guint)len);
    }

    start = g_get_monotonic_time();
    crash_point(state, CRASH_APPEND_BEFORE_WRITE);
    if (crash_due(state, CRASH_APPEND_TORN)) {
        write_all(state->fd, (const char *)buf->data, buf->len / 2, &err);
        raise(SIGKILL);
    }
    if (!write_all(state->fd, (const char *)buf->data, buf->len, &err)) {
        enter_degraded(state, PROBLEM_WRITE, "cannot write", err);
        fail_batch(state, batch, commit);
        return;
    }
    crash_point(state, CRASH_APPEND_BEFORE_FSYNC);
    if (fdatasync(state->fd) < 0) {
        enter_degraded(state, PROBLEM_WRITE, "cannot fdatasync", errno);
        fail_batch(state, batch, commit);
        return;
    }
    pleg_metric_series_observe(state->commit_duration,
                               (double)(g_get_monotonic_time() - start) / G_USEC_PER_SEC);
    /* A file (or directory) deleted, or another file (a mount) in its place, takes writes
     * that no restart would read. */
    if (fstat(state->fd, &st_fd) < 0 || st_fd.st_nlink == 0 || stat(state->path, &st_path) < 0 ||
        st_fd.st_dev != st_path.st_dev || st_fd.st_ino != st_path.st_ino) {
        enter_degraded(state, PROBLEM_VANISHED, NULL, 0);
        /* Nothing a restart would read holds the history any more: no break needed. */
        state->history_on_disk = FALSE;
        apply_batch(state, batch);
        return;
    }
    crash_point(state, CRASH_APPEND_AFTER_FSYNC);
    apply_batch(state, batch);
    commit->durable = TRUE;
    state->file_events += batch->len;
    if (state->file_events > state->compact_lines) {
        const char *what = "cannot write";

        /* The batch is durable in the old file or the new one, whatever happens here. */
        if (!compact(state, &what, &err))
            enter_degraded(state, PROBLEM_WRITE, what, err);
    }
}

/* ---- the writer thread ---- */

static void state_unref(PlegdState *state);

static gboolean
committed_dispatch(gpointer data)
{
    Committed *committed = data;
    PlegdState *state = committed->state;

    /* Batches committed from now on are numbered in the new history; those committed before
     * are renumbered by the writer. */
    if (committed->commit.instance) {
        state->commit_next_seq = state->commit_next_seq - committed->commit.renumbered_from +
                                 committed->commit.first_seq;
        state->main_renumber_base = committed->commit.renumbered_from;
        state->main_renumber_first = committed->commit.first_seq;
    }
    committed->func(committed->batch, &committed->commit, committed->user_data);
    return G_SOURCE_REMOVE;
}

static void
committed_free(gpointer data)
{
    Committed *committed = data;

    g_ptr_array_unref(committed->batch);
    g_free((char *)committed->commit.instance);
    state_unref(committed->state);
    g_free(committed);
}

static void
queued_free(Queued *queued)
{
    g_clear_pointer(&queued->batch, g_ptr_array_unref);
    g_free(queued);
}

static void
hand_back(PlegdState *state, Queued *queued, const PlegdStateCommit *commit)
{
    Committed *committed = g_new(Committed, 1);
    g_autoptr(GSource) source = g_idle_source_new();

    committed->batch = g_steal_pointer(&queued->batch);
    committed->commit = *commit;
    g_atomic_ref_count_inc(&state->ref);
    committed->state = state;
    committed->func = queued->func;
    committed->user_data = queued->user_data;
    g_source_set_priority(source, G_PRIORITY_DEFAULT);
    g_source_set_static_name(source, "plegd-state-committed");
    g_source_set_callback(source, committed_dispatch, committed, committed_free);
    g_source_attach(source, state->context);
    queued_free(queued);
}

/* Batches the writer takes at most at once. */
#define MAX_GROUP_BATCHES 1024

static gpointer
writer_thread(gpointer data)
{
    PlegdState *state = data;
    g_autoptr(GPtrArray) group = g_ptr_array_new(); /* Queued, taken from the queue */

    g_mutex_lock(&state->lock);
    for (;;) {
        gboolean retry = FALSE;
        PlegdStateCommit commit = {0};

        while (!state->stop && g_queue_is_empty(&state->queue)) {
            if (!state->durable && !state->never_write) {
                gint64 deadline = state->last_attempt_usec + PLEGD_STATE_RETRY_USEC;

                if (!g_cond_wait_until(&state->cond, &state->lock, deadline)) {
                    retry = TRUE;
                    break;
                }
            } else {
                g_cond_wait(&state->cond, &state->lock);
            }
        }
        if (state->stop)
            break;
        if (!retry || !g_queue_is_empty(&state->queue)) {
            retry = FALSE;
            /* Every batch waiting goes in one write and one fdatasync(): after a slow sync, the
             * backlog is one group commit, not one sync a batch. */
            while (!g_queue_is_empty(&state->queue) && group->len < MAX_GROUP_BATCHES)
                g_ptr_array_add(group, g_queue_pop_head(&state->queue));
        }
        state->writing = TRUE;
        g_mutex_unlock(&state->lock);

        if (group->len > 0) {
            g_autoptr(GPtrArray) entries = g_ptr_array_new();

            for (guint i = 0; i < group->len; i++)
                g_ptr_array_extend(entries, ((Queued *)group->pdata[i])->batch, NULL, NULL);
            write_batch(state, entries, &commit);
            /* A new history is told once, with the first batch; the entries of the others are
             * renumbered already. */
            for (guint i = 0; i < group->len; i++) {
                hand_back(state, group->pdata[i], &commit);
                commit.instance = NULL;
            }
            g_ptr_array_set_size(group, 0);
        } else {
            recover(state);
        }

        g_mutex_lock(&state->lock);
        state->writing = FALSE;
        g_cond_broadcast(&state->cond);
    }
    g_mutex_unlock(&state->lock);
    if (state->fd >= 0) {
        close(state->fd);
        state->fd = -1;
    }
    state_unref(state);
    return NULL;
}

/* ---- the state ---- */

static void
state_unref(PlegdState *state)
{
    if (!g_atomic_ref_count_dec(&state->ref))
        return;
    g_queue_clear_full(&state->queue, (GDestroyNotify)queued_free);
    g_queue_clear_full(&state->tail, (GDestroyNotify)tail_line_free);
    g_hash_table_unref(state->records);
    if (state->fd >= 0)
        close(state->fd);
    if (state->dir_fd >= 0)
        close(state->dir_fd);
    pleg_metrics_registry_unref(state->metrics);
    g_main_context_unref(state->context);
    g_mutex_clear(&state->lock);
    g_cond_clear(&state->cond);
    g_free(state->failure);
    g_free(state->start_note);
    g_free(state->instance);
    g_free(state->loaded_instance);
    g_free(state->dir);
    g_free(state->path);
    g_free(state->tmp_path);
    g_free(state);
}

static void
read_test_hooks(PlegdState *state)
{
    const char *crash_at = g_getenv("PLEGD_STATE_CRASH_AT");
    const char *compact_every = g_getenv("PLEGD_STATE_COMPACT_EVERY");

    if (crash_at) {
        g_auto(GStrv) parts = g_strsplit(crash_at, ":", 2);
        guint64 n = 0;

        for (int s = CRASH_NONE + 1; s < N_CRASH_STEPS && parts[0]; s++)
            if (strcmp(parts[0], crash_step_names[s]) == 0)
                state->crash_step = s;
        if (state->crash_step == CRASH_NONE || !parts[1] ||
            !g_ascii_string_to_unsigned(parts[1], 10, 1, G_MAXUINT, &n, NULL)) {
            g_autofree char *shown = pleg_log_text(crash_at, -1, 0);

            plegd_log_warning("ignoring PLEGD_STATE_CRASH_AT=\"%s\": expected STEP:N", shown);
            state->crash_step = CRASH_NONE;
        } else {
            state->crash_n = (guint)n;
        }
    }
    if (compact_every) {
        guint64 n = 0;

        if (g_ascii_string_to_unsigned(compact_every, 10, 1, G_MAXUINT64, &n, NULL)) {
            state->compact_lines = n;
        } else {
            g_autofree char *shown = pleg_log_text(compact_every, -1, 0);

            plegd_log_warning("ignoring PLEGD_STATE_COMPACT_EVERY=\"%s\": expected a number "
                              "of lines",
                              shown);
        }
    }
}

static void
register_metrics(PlegdState *state, PlegMetricsRegistry *metrics)
{
    static const char *const reason_label[] = {"reason", NULL};

    state->metrics = pleg_metrics_registry_ref(metrics);
    state->problems = pleg_metrics_register(
        metrics, PLEG_METRIC_COUNTER, "plegd_state_problems_total",
        "Problems of the state directory: a state file moved aside (corrupt, foreign_version, "
        "untrusted, unreadable), durability lost (unwritable, write, vanished), or the "
        "directory used by another plegd (in_use).",
        reason_label, NULL, 0);
    for (int i = 0; i < N_PROBLEMS; i++) {
        const char *const value[] = {problem_names[i]};

        pleg_metric_add(state->problems, value, 0);
    }
    state->durable_gauge = pleg_metric_get_series(
        pleg_metrics_register(metrics, PLEG_METRIC_GAUGE, "plegd_state_durable",
                              "1 while published events are written durably to the state "
                              "directory first, 0 while they are served from memory only.",
                              NULL, NULL, 0),
        NULL);
    state->commit_duration = pleg_metric_get_series(
        pleg_metrics_register(metrics, PLEG_METRIC_HISTOGRAM, "plegd_state_commit_duration_seconds",
                              "Time to write and fdatasync() one batch of event lines.", NULL,
                              commit_buckets, G_N_ELEMENTS(commit_buckets)),
        NULL);
    state->compactions = pleg_metric_get_series(
        pleg_metrics_register(metrics, PLEG_METRIC_COUNTER, "plegd_state_compactions_total",
                              "Rewrites of the state file (compactions and recoveries).", NULL,
                              NULL, 0),
        NULL);
    pleg_metric_series_add(state->compactions, 0);
}

/* A state.jsonl that cannot be used: moved aside, logged, counted, history restarted. */
static void
discard_file(PlegdState *state, const LoadFailure *failure)
{
    const char *const labels[] = {problem_names[failure->problem]};
    g_autofree char *aside = NULL;
    int err = 0;

    pleg_metric_inc(state->problems, labels);
    aside = move_aside(state, &err);
    reset_history(state);
    if (aside) {
        plegd_log_warning("state: %s was %s (%s): moved to %s; starting a fresh history "
                          "(instance %s, seq %" G_GUINT64_FORMAT ")",
                          state->path, problem_names[failure->problem], failure->why, aside,
                          state->instance, state->first_seq);
        state->start_note = g_strdup_printf("fresh: " STATE_FILE " was %s (%s), moved to %s",
                                            problem_names[failure->problem], failure->why, aside);
        return;
    }
    plegd_log_warning("state: %s was %s (%s), and cannot be moved aside: %s; leaving it alone "
                      "and serving events from memory only",
                      state->path, problem_names[failure->problem], failure->why, g_strerror(err));
    state->never_write = TRUE;
    state->durable = FALSE;
    state->degraded_since_ns = g_get_real_time() * 1000;
    state->failure =
        g_strdup_printf("%s was %s (%s) and cannot be moved aside: %s", state->path,
                        problem_names[failure->problem], failure->why, g_strerror(err));
}

static void
load(PlegdState *state)
{
    LoadFailure failure = {0};
    const char *what = "cannot write";
    int err = 0;
    int fd;

    if (g_mkdir_with_parents(state->dir, 0700) < 0) {
        reset_history(state);
        enter_degraded(state, PROBLEM_UNWRITABLE, "cannot create the directory of", errno);
        return;
    }
    /* One plegd a state directory: a second would resume the same history and give the same
     * seqs to its own events, and its load could cut an append of the first short. */
    state->dir_fd = open(state->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (state->dir_fd >= 0 && flock(state->dir_fd, LOCK_EX | LOCK_NB) < 0) {
        const char *const labels[] = {problem_names[PROBLEM_IN_USE]};
        int errsv = errno;

        reset_history(state);
        state->never_write = TRUE;
        state->durable = FALSE;
        state->degraded_since_ns = g_get_real_time() * 1000;
        state->failure = g_strdup_printf("%s is in use by another plegd (%s): this one keeps "
                                         "no state",
                                         state->dir, g_strerror(errsv));
        pleg_metric_inc(state->problems, labels);
        plegd_log_warning("state: %s is in use by another plegd: this one neither reads nor "
                          "writes it, and serves a history of its own from memory",
                          state->dir);
        return;
    }
    if (unlink(state->tmp_path) < 0 && errno != ENOENT)
        g_debug("state: cannot remove %s: %s", state->tmp_path, g_strerror(errno));

    fd = open(state->path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);
    if (fd < 0 && errno == EROFS)
        fd = open(state->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);
    if (fd < 0 && errno != ENOENT) {
        failure.problem = errno == ELOOP ? PROBLEM_UNTRUSTED : PROBLEM_UNREADABLE;
        failure.why = g_strdup(errno == ELOOP ? "a symbolic link" : g_strerror(errno));
        discard_file(state, &failure);
    } else if (fd >= 0) {
        int flags = fcntl(fd, F_GETFL);

        if (load_file(state, fd, &failure)) {
            state->resumed = TRUE;
            if ((flags & O_ACCMODE) == O_RDWR && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0) {
                state->fd = fd;
                return;
            }
            /* Loaded from a read-only file system: plegd resumes, not durably. */
            close(fd);
            enter_degraded(state, PROBLEM_UNWRITABLE, "cannot open for writing", EROFS);
            return;
        }
        close(fd);
        discard_file(state, &failure);
    } else {
        reset_history(state);
    }
    g_free(failure.why);
    if (state->never_write)
        return;
    if (!compact(state, &what, &err))
        enter_degraded(state, PROBLEM_UNWRITABLE, what, err);
}

PlegdState *
plegd_state_open(const char *dir, guint ring_size, PlegMetricsRegistry *metrics,
                 GMainContext *context)
{
    PlegdState *state;

    g_return_val_if_fail(dir != NULL, NULL);
    g_return_val_if_fail(ring_size > 0, NULL);
    state = g_new0(PlegdState, 1);
    g_atomic_ref_count_init(&state->ref);
    state->dir = g_strdup(dir);
    state->path = g_build_filename(dir, STATE_FILE, NULL);
    state->tmp_path = g_strconcat(state->path, TMP_SUFFIX, NULL);
    state->ring_size = ring_size;
    state->compact_lines = MAX((guint64)ring_size * 2, PLEGD_STATE_MIN_COMPACT_LINES);
    state->context = context ? g_main_context_ref(context) : g_main_context_ref_thread_default();
    state->fd = -1;
    state->dir_fd = -1;
    state->durable = TRUE;
    state->records = records_new();
    g_mutex_init(&state->lock);
    g_cond_init(&state->cond);
    g_queue_init(&state->queue);
    g_queue_init(&state->tail);
    register_metrics(state, metrics);
    read_test_hooks(state);

    load(state);
    state->history_on_disk = state->resumed || state->durable;
    state->loaded_instance = g_strdup(state->instance);
    state->loaded_first_seq = state->first_seq;
    pleg_metric_series_set(state->durable_gauge, state->durable ? 1 : 0);
    state->commit_next_seq = state->loaded_next_seq;
    if (state->resumed)
        g_info("state: resumed %s: instance %s, next seq %" G_GUINT64_FORMAT ", %u records, "
               "%u lines kept",
               state->path, state->instance, state->loaded_next_seq,
               g_hash_table_size(state->records), g_queue_get_length(&state->tail));
    state->thread =
        g_thread_new("plegd-state", writer_thread, (g_atomic_ref_count_inc(&state->ref), state));
    return state;
}

gboolean
plegd_state_is_resumed(PlegdState *state)
{
    return state->resumed;
}

const char *
plegd_state_get_instance(PlegdState *state)
{
    return state->loaded_instance;
}

guint64
plegd_state_get_first_seq(PlegdState *state)
{
    return state->loaded_first_seq;
}

guint64
plegd_state_get_next_seq(PlegdState *state)
{
    return state->loaded_next_seq;
}

GPtrArray *
plegd_state_get_records(PlegdState *state)
{
    GPtrArray *records;

    g_mutex_lock(&state->lock);
    records = records_sorted(state->records, TRUE);
    g_mutex_unlock(&state->lock);
    return records;
}

void
plegd_state_foreach_line(PlegdState *state, PlegdStateLineFunc func, gpointer user_data)
{
    g_mutex_lock(&state->lock);
    for (GList *l = state->tail.head; l; l = l->next) {
        const TailLine *tail_line = l->data;

        func(tail_line->seq, tail_line->line, tail_line->key, user_data);
    }
    g_mutex_unlock(&state->lock);
}

void
plegd_state_commit(PlegdState *state, GPtrArray *batch, PlegdStateCommittedFunc func,
                   gpointer user_data)
{
    Queued *queued;

    g_return_if_fail(!state->closed);
    g_return_if_fail(func != NULL);
    for (guint i = 0; i < batch->len; i++) {
        const PlegdStateEntry *entry = batch->pdata[i];
        guint64 seq = entry->seq;

        /* Numbered before the caller was told of the last break: the writer renumbers it. */
        if (seq >= state->main_renumber_base && seq < state->main_renumber_first)
            seq = seq - state->main_renumber_base + state->main_renumber_first;
        if (seq != state->commit_next_seq) {
            g_critical("plegd_state_commit: seq %" G_GUINT64_FORMAT " where %" G_GUINT64_FORMAT
                       " was due; batch dropped",
                       seq, state->commit_next_seq);
            state->commit_next_seq -= i;
            g_ptr_array_unref(batch);
            return;
        }
        state->commit_next_seq++;
    }
    queued = g_new(Queued, 1);
    queued->batch = batch;
    queued->func = func;
    queued->user_data = user_data;
    g_mutex_lock(&state->lock);
    g_queue_push_tail(&state->queue, queued);
    g_cond_broadcast(&state->cond);
    g_mutex_unlock(&state->lock);
}

gboolean
plegd_state_is_durable(PlegdState *state)
{
    gboolean durable;

    g_mutex_lock(&state->lock);
    durable = state->durable;
    g_mutex_unlock(&state->lock);
    return durable;
}

char *
plegd_state_describe(PlegdState *state)
{
    char *text;

    g_mutex_lock(&state->lock);
    if (state->durable) {
        if (state->start_note)
            text = g_strdup_printf("durable in %s (%s)", state->dir, state->start_note);
        else if (state->resumed)
            text = g_strdup_printf("durable in %s (resumed at seq %" G_GUINT64_FORMAT ")",
                                   state->dir, state->loaded_next_seq);
        else
            text = g_strdup_printf("durable in %s (fresh history from seq %" G_GUINT64_FORMAT ")",
                                   state->dir, state->first_seq);
    } else {
        g_autofree char *since = format_time(state->degraded_since_ns);

        text =
            g_strdup_printf("not durable: %s; serving from memory since %s", state->failure, since);
    }
    g_mutex_unlock(&state->lock);
    return text;
}

gboolean
plegd_state_close(PlegdState *state, gint64 timeout_usec)
{
    gint64 deadline = g_get_monotonic_time() + timeout_usec;
    gboolean flushed, stuck;

    if (state->closed)
        return TRUE;
    state->closed = TRUE;
    g_mutex_lock(&state->lock);
    while (!g_queue_is_empty(&state->queue) || state->writing) {
        if (!g_cond_wait_until(&state->cond, &state->lock, deadline))
            break;
    }
    flushed = g_queue_is_empty(&state->queue) && !state->writing;
    stuck = state->writing;
    state->stop = TRUE;
    g_cond_broadcast(&state->cond);
    g_mutex_unlock(&state->lock);

    if (stuck) {
        g_debug("state: the writer is stuck in a write or fdatasync, leaving it behind");
        g_thread_unref(state->thread);
    } else {
        g_thread_join(state->thread);
    }
    state->thread = NULL;
    return flushed;
}

void
plegd_state_free(PlegdState *state)
{
    if (!state)
        return;
    plegd_state_close(state, 0);
    state_unref(state);
}
