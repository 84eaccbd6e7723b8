/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plegd's durable state (examples/plegd/state.c) without plegd: batches committed and read back
 * after a reopen, a torn last line, each kind of bad file moved aside, compaction, a full
 * file system, a read-only and a deleted state directory, and the crash hook.
 *
 * Needs root: a mount namespace of its own (tmpfs for ENOSPC, a read-only bind mount) and
 * chown() to another user; without it the test fails, never skips.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plegd.h"

/* 2026-12-04T17:00:00Z */
#define T0_NS     G_GINT64_CONSTANT(1796403600000000000)
#define WAIT_USEC (10 * G_USEC_PER_SEC)
#define RING      100

typedef struct {
    char *tmp; /* the test's own directory */
    char *dir; /* the state directory, tmp/state (created by the state) */
    GMainContext *context;
    PlegMetricsRegistry *metrics;
    PlegdState *state;
    GPtrArray *lines; /* GBytes: every line committed, in seq order */
    GArray *times;    /* gint64: the time of each of lines */
    guint64 next_seq;
    char *broken_instance; /* the instance of the last history a batch broke into */
} Fixture;

static Fixture f;

static void
setup(void)
{
    f.tmp = g_dir_make_tmp("plegd-state-XXXXXX", NULL);
    ck_assert_ptr_nonnull(f.tmp);
    f.dir = g_build_filename(f.tmp, "state", NULL);
    f.context = g_main_context_new();
    g_main_context_push_thread_default(f.context);
    f.lines = g_ptr_array_new_with_free_func((GDestroyNotify)g_bytes_unref);
    f.times = g_array_new(FALSE, FALSE, sizeof(gint64));
}

static void
state_close(void)
{
    if (!f.state)
        return;
    ck_assert(plegd_state_close(f.state, WAIT_USEC));
    /* The callbacks still pending run (and free their batches). */
    while (g_main_context_iteration(f.context, FALSE))
        ;
    g_clear_pointer(&f.state, plegd_state_free);
    g_clear_pointer(&f.metrics, pleg_metrics_registry_unref);
}

static void
teardown(void)
{
    g_autofree char *command = NULL;

    state_close();
    g_main_context_pop_thread_default(f.context);
    g_main_context_unref(f.context);
    g_ptr_array_unref(f.lines);
    g_array_unref(f.times);
    g_free(f.broken_instance);
    command = g_strdup_printf("rm -rf '%s'", f.tmp);
    ck_assert_int_eq(system(command), 0);
    g_free(f.dir);
    g_free(f.tmp);
    memset(&f, 0, sizeof(f));
}

static void
state_open(guint ring_size)
{
    f.metrics = pleg_metrics_registry_new();
    f.state = plegd_state_open(f.dir, ring_size, f.metrics, f.context);
    ck_assert_ptr_nonnull(f.state);
    f.next_seq = plegd_state_get_next_seq(f.state);
}

static void
state_reopen(guint ring_size)
{
    state_close();
    state_open(ring_size);
}

static double
metric(const char *name, const char *reason)
{
    const char *const labels[] = {reason};

    return pleg_metric_get(pleg_metrics_lookup(f.metrics, name), reason ? labels : NULL);
}

/* The line plegd publishes for an event of container @id (a sandbox when @container is NULL)
 * of pod @pod, with an image of @image_len bytes. */
static GBytes *
make_line(guint64 seq, PlegPodLifecycleEventType type, const char *pod, const char *id,
          const char *container, gsize image_len)
{
    g_autofree char *uid = g_strconcat("uid-", pod, NULL);
    g_autofree char *image = NULL;
    PlegPodLifecycleEvent event;

    if (container)
        image = image_len ? g_strnfill(image_len, 'i') : g_strdup("nginx:1.25");
    event = (PlegPodLifecycleEvent){
        .pod_uid = uid,
        .type = type,
        .container_id = type == PLEG_POD_SYNC ? NULL : (char *)id,
        .time_ns = T0_NS + (gint64)seq,
        .details =
            {
                .pod_namespace = (char *)"shop",
                .pod_name = (char *)pod,
                .container_name = (char *)container,
                .image = image,
                .attempt = 1,
                .sandbox = type != PLEG_POD_SYNC && container == NULL,
            },
    };
    return plegd_event_to_line(&event, seq);
}

typedef struct {
    gboolean done;
    gboolean durable;
    guint n;
    char *instance; /* a new history's */
    guint64 first_seq, renumbered_from;
    GPtrArray *lines; /* the batch's lines as handed back */
} CommitResult;

static void
on_committed(GPtrArray *batch, const PlegdStateCommit *commit, gpointer user_data)
{
    CommitResult *result = user_data;

    result->done = TRUE;
    result->durable = commit->durable;
    result->n = batch->len;
    result->instance = g_strdup(commit->instance);
    result->first_seq = commit->first_seq;
    result->renumbered_from = commit->renumbered_from;
    result->lines = g_ptr_array_new_with_free_func((GDestroyNotify)g_bytes_unref);
    for (guint i = 0; i < batch->len; i++) {
        const PlegdStateEntry *entry = batch->pdata[i];

        /* Renumbered, the batch's seqs still follow each other, from the new first seq. */
        if (i > 0)
            ck_assert_uint_eq(entry->seq, ((const PlegdStateEntry *)batch->pdata[i - 1])->seq + 1);
        else if (commit->instance)
            ck_assert_uint_eq(entry->seq, commit->first_seq);
        g_ptr_array_add(result->lines, g_bytes_ref(entry->line));
    }
}

/* A batch that broke into a new history: the state keeps only its lines, renumbered, and the
 * seqs go on from there. */
static void
follow_break(CommitResult *result)
{
    GArray *times = g_array_new(FALSE, FALSE, sizeof(gint64));

    ck_assert_uint_ge(result->first_seq, result->renumbered_from + PLEGD_STATE_HISTORY_GAP);
    g_array_append_vals(times, &g_array_index(f.times, gint64, f.times->len - result->n),
                        result->n);
    g_array_unref(f.times);
    f.times = times;
    g_ptr_array_set_size(f.lines, 0);
    g_ptr_array_extend(f.lines, result->lines, (GCopyFunc)(void (*)(void))g_bytes_ref, NULL);
    f.next_seq = f.next_seq - result->renumbered_from + result->first_seq;
    g_free(f.broken_instance);
    f.broken_instance = g_strdup(result->instance);
}

static gboolean
on_timeout(gpointer user_data)
{
    *(gboolean *)user_data = TRUE;
    return G_SOURCE_REMOVE;
}

/* Commits the events "TYPE:pod:id:container" ("-" for a sandbox's container; type S, D, R or P)
 * with images of @image_len bytes, and waits for the batch to come back.  Returns: whether it
 * was durable. */
static gboolean
commit_image(const char *const *events, gsize image_len)
{
    GPtrArray *batch = g_ptr_array_new_with_free_func((GDestroyNotify)plegd_state_entry_free);
    CommitResult result = {0};
    gboolean timed_out = FALSE;
    g_autoptr(GSource) timeout = g_timeout_source_new(WAIT_USEC / 1000);

    for (const char *const *e = events; *e; e++) {
        g_auto(GStrv) parts = g_strsplit(*e, ":", 4);
        PlegPodLifecycleEventType type = parts[0][0] == 'S'   ? PLEG_CONTAINER_STARTED
                                         : parts[0][0] == 'D' ? PLEG_CONTAINER_DIED
                                         : parts[0][0] == 'R' ? PLEG_CONTAINER_REMOVED
                                                              : PLEG_POD_SYNC;
        const char *container = strcmp(parts[3], "-") == 0 ? NULL : parts[3];
        g_autoptr(GBytes) line =
            make_line(f.next_seq, type, parts[1], parts[2], container, image_len);

        g_ptr_array_add(batch, plegd_state_entry_new(f.next_seq, line, NULL));
        g_ptr_array_add(f.lines, g_bytes_ref(line));
        g_array_append_val(f.times, ((gint64){T0_NS + (gint64)f.next_seq}));
        f.next_seq++;
    }
    plegd_state_commit(f.state, batch, on_committed, &result);
    g_source_set_callback(timeout, on_timeout, &timed_out, NULL);
    g_source_attach(timeout, f.context);
    while (!result.done && !timed_out)
        g_main_context_iteration(f.context, TRUE);
    g_source_destroy(timeout);
    ck_assert_msg(result.done, "the batch did not come back within %d s",
                  (int)(WAIT_USEC / G_USEC_PER_SEC));
    ck_assert_uint_eq(result.n, g_strv_length((char **)events));
    if (result.instance)
        follow_break(&result);
    g_free(result.instance);
    g_ptr_array_unref(result.lines);
    return result.durable;
}

static gboolean
commit(const char *const *events)
{
    return commit_image(events, 0);
}

#define EVENTS(...) ((const char *const[]){__VA_ARGS__, NULL})

static char *
state_path(void)
{
    return g_build_filename(f.dir, "state.jsonl", NULL);
}

static char *
read_state_file(gsize *ret_len)
{
    g_autofree char *path = state_path();
    char *contents = NULL;

    ck_assert(g_file_get_contents(path, &contents, ret_len, NULL));
    return contents;
}

typedef struct {
    GPtrArray *lines;
    GPtrArray *keys;
    guint64 first_seq;
    guint64 last_seq;
    guint n;
} Lines;

static void
collect_line(guint64 seq, GBytes *line, const PlegdEventKey *key, gpointer user_data)
{
    Lines *lines = user_data;

    if (lines->n == 0)
        lines->first_seq = seq;
    else
        ck_assert_uint_eq(seq, lines->last_seq + 1);
    lines->last_seq = seq;
    lines->n++;
    g_ptr_array_add(lines->lines, g_bytes_ref(line));
    g_ptr_array_add(lines->keys, plegd_event_key_new_full(key->time_ns, key->type, key->sandbox,
                                                          key->pod_namespace, key->pod_name,
                                                          key->pod_uid, key->container_name));
}

/* Asserts that the lines the state keeps are the last @n of f.lines, byte for byte, with
 * their seqs (the next seq is f.next_seq) and keys. */
static void
assert_lines(guint n)
{
    Lines lines = {
        .lines = g_ptr_array_new_with_free_func((GDestroyNotify)g_bytes_unref),
        .keys = g_ptr_array_new_with_free_func((GDestroyNotify)plegd_event_key_free),
    };

    plegd_state_foreach_line(f.state, collect_line, &lines);
    ck_assert_uint_eq(lines.n, n);
    if (n > 0)
        ck_assert_uint_eq(lines.last_seq + 1, f.next_seq);
    for (guint i = 0; i < n; i++) {
        GBytes *expected = f.lines->pdata[f.lines->len - n + i];
        const PlegdEventKey *key = lines.keys->pdata[i];

        ck_assert_msg(g_bytes_equal(lines.lines->pdata[i], expected), "line %u differs", i);
        ck_assert_int_eq(key->time_ns, g_array_index(f.times, gint64, f.times->len - n + i));
        ck_assert_str_eq(key->pod_namespace, "shop");
        ck_assert_ptr_nonnull(key->pod_uid);
    }
    g_ptr_array_unref(lines.lines);
    g_ptr_array_unref(lines.keys);
}

/* Asserts the records: "id:state:container" ("-" for a sandbox; state running or exited),
 * sorted by id. */
static void
assert_records(const char *const *expected)
{
    g_autoptr(GPtrArray) records = plegd_state_get_records(f.state);
    guint n = g_strv_length((char **)expected);

    ck_assert_uint_eq(records->len, n);
    for (guint i = 0; i < n; i++) {
        const PlegdStateRecord *record = records->pdata[i];
        g_autofree char *got =
            g_strdup_printf("%s:%s:%s", record->id,
                            record->state == PLEG_CONTAINER_STATE_RUNNING  ? "running"
                            : record->state == PLEG_CONTAINER_STATE_EXITED ? "exited"
                                                                           : "?",
                            record->container_name ? record->container_name : "-");

        ck_assert_str_eq(got, expected[i]);
        ck_assert(record->sandbox == (record->container_name == NULL));
        ck_assert_str_eq(record->pod_namespace, "shop");
        ck_assert_uint_eq(record->attempt, 1);
        ck_assert_ptr_nonnull(record->pod_uid);
        if (record->sandbox)
            ck_assert_ptr_null(record->image);
        else
            ck_assert_ptr_nonnull(record->image);
    }
}

static void
assert_describe_starts(const char *prefix)
{
    g_autofree char *text = plegd_state_describe(f.state);

    ck_assert_msg(g_str_has_prefix(text, prefix), "describe: \"%s\", not \"%s...\"", text, prefix);
}

static void
assert_describe_contains(const char *part)
{
    g_autofree char *text = plegd_state_describe(f.state);

    ck_assert_msg(strstr(text, part), "describe: \"%s\" without \"%s\"", text, part);
}

/* The batches of most tests: sandbox s1 and container c1 start, c1 dies, c2 starts, the pod
 * syncs, c2 is removed.  Records left: s1 running, c1 exited. */
static void
commit_history(void)
{
    ck_assert(commit(EVENTS("S:web:s1:-", "S:web:c1:nginx")));
    ck_assert(commit(EVENTS("D:web:c1:nginx", "S:web:c2:sidecar", "P:web::-")));
    ck_assert(commit(EVENTS("R:web:c2:sidecar")));
}

static const char *const history_records[] = {"c1:exited:nginx", "s1:running:-", NULL};

/* ---- tests ---- */

START_TEST(test_fresh)
{
    gint64 before = g_get_real_time(), after;
    g_autofree char *contents = NULL;
    g_autofree char *header = NULL;
    struct stat st;
    gsize len;

    state_open(RING);
    after = g_get_real_time();
    ck_assert_int_eq(stat(f.dir, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0700);
    ck_assert(!plegd_state_is_resumed(f.state));
    ck_assert(plegd_state_is_durable(f.state));
    ck_assert(g_uuid_string_is_valid(plegd_state_get_instance(f.state)));
    ck_assert_uint_ge(plegd_state_get_first_seq(f.state), (guint64)before);
    ck_assert_uint_le(plegd_state_get_first_seq(f.state), (guint64)after);
    ck_assert_uint_eq(plegd_state_get_next_seq(f.state), plegd_state_get_first_seq(f.state));
    assert_lines(0);
    assert_records((const char *const[]){NULL});
    assert_describe_starts("durable in ");
    ck_assert_double_eq(metric("plegd_state_durable", NULL), 1);

    /* Written at once: the header alone. */
    contents = read_state_file(&len);
    header = g_strdup_printf(
        "{\"plegd_state\":1,\"instance\":\"%s\",\"first_seq\":%" G_GUINT64_FORMAT "}\n",
        plegd_state_get_instance(f.state), plegd_state_get_first_seq(f.state));
    ck_assert_str_eq(contents, header);
}
END_TEST

START_TEST(test_commit_reopen)
{
    g_autofree char *instance = NULL;
    g_autofree char *contents = NULL;
    g_autoptr(GString) expected = NULL;
    guint64 first_seq;
    gsize len;

    state_open(RING);
    instance = g_strdup(plegd_state_get_instance(f.state));
    first_seq = plegd_state_get_first_seq(f.state);
    commit_history();
    ck_assert_double_eq(metric("plegd_state_problems_total", "write"), 0);
    ck_assert_uint_eq(
        pleg_metric_get_count(pleg_metrics_lookup(f.metrics, "plegd_state_commit_duration_seconds"),
                              NULL),
        3);
    assert_records(history_records);

    /* The file: the header, then the lines byte for byte. */
    contents = read_state_file(&len);
    expected = g_string_new(NULL);
    g_string_append_printf(
        expected, "{\"plegd_state\":1,\"instance\":\"%s\",\"first_seq\":%" G_GUINT64_FORMAT "}\n",
        instance, first_seq);
    for (guint i = 0; i < f.lines->len; i++) {
        gsize size;
        const char *data = g_bytes_get_data(f.lines->pdata[i], &size);

        g_string_append_len(expected, data, (gssize)size);
    }
    ck_assert_str_eq(contents, expected->str);

    state_reopen(RING);
    ck_assert(plegd_state_is_resumed(f.state));
    ck_assert_str_eq(plegd_state_get_instance(f.state), instance);
    ck_assert_uint_eq(plegd_state_get_first_seq(f.state), first_seq);
    ck_assert_uint_eq(plegd_state_get_next_seq(f.state), first_seq + 6);
    assert_lines(6);
    assert_records(history_records);
    assert_describe_starts("durable in ");
    assert_describe_contains("resumed at seq");

    /* The history goes on, and a smaller ring keeps the last lines only. */
    ck_assert(commit(EVENTS("D:web:s1:-")));
    state_reopen(4);
    ck_assert_uint_eq(plegd_state_get_next_seq(f.state), first_seq + 7);
    assert_lines(4);
    assert_records(EVENTS("c1:exited:nginx", "s1:exited:-"));
}
END_TEST

START_TEST(test_torn_last_line)
{
    g_autofree char *path = state_path();
    g_autofree char *before = NULL;
    g_autofree char *after = NULL;
    gsize before_len, after_len;
    guint64 next_seq;
    FILE *file;

    state_open(RING);
    commit_history();
    next_seq = f.next_seq;
    state_close();
    before = read_state_file(&before_len);
    /* Half of a line, as a crash in the middle of an append leaves it. */
    file = fopen(path, "a");
    ck_assert_ptr_nonnull(file);
    fputs("{\"seq\":", file);
    fclose(file);

    state_open(RING);
    ck_assert(plegd_state_is_resumed(f.state));
    ck_assert_uint_eq(plegd_state_get_next_seq(f.state), next_seq);
    assert_lines(6);
    ck_assert_double_eq(metric("plegd_state_problems_total", "corrupt"), 0);
    after = read_state_file(&after_len);
    ck_assert_uint_eq(after_len, before_len);
    ck_assert_str_eq(after, before);

    /* Appends go after the last complete line. */
    ck_assert(commit(EVENTS("S:cart:c3:redis")));
    state_reopen(RING);
    ck_assert(plegd_state_is_resumed(f.state));
    assert_lines(7);
    assert_records(EVENTS("c1:exited:nginx", "c3:running:redis", "s1:running:-"));
}
END_TEST

/* The bad files: how each is made from a good state.jsonl, the reason, and a part of the
 * description. */
typedef enum {
    BAD_CORRUPT_MIDDLE,
    BAD_ZERO_LENGTH,
    BAD_GARBAGE_HEADER,
    BAD_FUTURE_VERSION,
    BAD_SEQ_GAP,
    BAD_WRONG_OWNER,
    BAD_GROUP_WRITABLE,
    BAD_DIRECTORY,
    BAD_SEQ_PAST_2_53,
    BAD_LONG_LINE,
    N_BAD,
} Bad;

static const struct {
    const char *reason;
    const char *why;
} bad_cases[N_BAD] = {
    [BAD_CORRUPT_MIDDLE] = {"corrupt", "line 3: not JSON"},
    [BAD_ZERO_LENGTH] = {"corrupt", "zero length"},
    [BAD_GARBAGE_HEADER] = {"corrupt", "line 1: not JSON"},
    [BAD_FUTURE_VERSION] = {"foreign_version", "version 2"},
    [BAD_SEQ_GAP] = {"corrupt", "line 4: seq"},
    [BAD_WRONG_OWNER] = {"untrusted", "owned by uid 65534"},
    [BAD_GROUP_WRITABLE] = {"untrusted", "writable by group or others"},
    [BAD_DIRECTORY] = {"unreadable", "Is a directory"},
    [BAD_SEQ_PAST_2_53] = {"corrupt", "line 1: a header without a valid"},
    [BAD_LONG_LINE] = {"corrupt", "line 2: a line longer than 1 MiB"},
};

/* Replaces line @n (1-based) of the state file with @text. */
static void
replace_line(guint n, const char *text)
{
    g_autofree char *path = state_path();
    g_autofree char *contents = NULL;
    g_auto(GStrv) lines = NULL;
    g_autofree char *joined = NULL;
    gsize len;

    contents = read_state_file(&len);
    lines = g_strsplit(contents, "\n", -1);
    ck_assert_uint_gt(g_strv_length(lines), n);
    g_free(lines[n - 1]);
    lines[n - 1] = g_strdup(text);
    joined = g_strjoinv("\n", lines);
    ck_assert(g_file_set_contents_full(path, joined, -1, G_FILE_SET_CONTENTS_NONE, 0600, NULL));
}

static guint
count_bad_files(void)
{
    g_autoptr(GDir) dir = g_dir_open(f.dir, 0, NULL);
    const char *name;
    guint n = 0;

    while ((name = g_dir_read_name(dir)))
        if (g_str_has_prefix(name, "state.jsonl.bad-"))
            n++;
    return n;
}

START_TEST(test_bad_file)
{
    Bad bad = (Bad)_i;
    g_autofree char *path = state_path();
    g_autofree char *old_instance = NULL;
    g_autofree char *why = NULL;
    guint64 old_last_seq;

    state_open(RING);
    commit_history();
    old_instance = g_strdup(plegd_state_get_instance(f.state));
    old_last_seq = f.next_seq - 1;
    state_close();

    switch (bad) {
    case BAD_CORRUPT_MIDDLE:
        replace_line(3, "{\"seq\":");
        break;
    case BAD_ZERO_LENGTH:
        ck_assert_int_eq(truncate(path, 0), 0);
        break;
    case BAD_GARBAGE_HEADER:
        replace_line(1, "\x01garbage");
        break;
    case BAD_FUTURE_VERSION: {
        g_autofree char *header = g_strdup_printf(
            "{\"plegd_state\":2,\"instance\":\"%s\",\"first_seq\":1,\"more\":[]}", old_instance);

        replace_line(1, header);
        break;
    }
    case BAD_SEQ_GAP: {
        g_autoptr(GBytes) line =
            make_line(old_last_seq + 5, PLEG_CONTAINER_STARTED, "web", "x", "x", 0);
        g_autofree char *text = g_strndup(g_bytes_get_data(line, NULL), g_bytes_get_size(line) - 1);

        replace_line(4, text);
        break;
    }
    case BAD_WRONG_OWNER:
        /* nobody */
        ck_assert_int_eq(chown(path, 65534, 65534), 0);
        break;
    case BAD_GROUP_WRITABLE:
        ck_assert_int_eq(chmod(path, 0620), 0);
        break;
    case BAD_DIRECTORY:
        ck_assert_int_eq(unlink(path), 0);
        ck_assert_int_eq(mkdir(path, 0700), 0);
        break;
    case BAD_SEQ_PAST_2_53: {
        /* A history that would run past what a double holds exactly (a file from the future,
         * or edited): its seqs would overflow, or be misread by every JSON consumer. */
        g_autofree char *header = g_strdup_printf(
            "{\"plegd_state\":1,\"instance\":\"%s\",\"first_seq\":%" G_GINT64_FORMAT "}",
            old_instance, G_MAXINT64 - 4);

        replace_line(1, header);
        break;
    }
    case BAD_LONG_LINE: {
        g_autofree char *text = g_strnfill(PLEGD_STATE_MAX_LINE + 1, 'x');

        replace_line(2, text);
        break;
    }
    case N_BAD:
    default:
        g_assert_not_reached();
    }

    g_ptr_array_set_size(f.lines, 0);
    g_array_set_size(f.times, 0);
    state_open(RING);
    ck_assert(!plegd_state_is_resumed(f.state));
    ck_assert(plegd_state_is_durable(f.state));
    ck_assert_str_ne(plegd_state_get_instance(f.state), old_instance);
    ck_assert_uint_gt(plegd_state_get_first_seq(f.state), old_last_seq);
    ck_assert_uint_eq(plegd_state_get_next_seq(f.state), plegd_state_get_first_seq(f.state));
    assert_lines(0);
    assert_records((const char *const[]){NULL});
    ck_assert_double_eq(metric("plegd_state_problems_total", bad_cases[bad].reason), 1);
    ck_assert_uint_eq(count_bad_files(), 1);
    why = g_strdup_printf("fresh: state.jsonl was %s (", bad_cases[bad].reason);
    assert_describe_contains(why);
    assert_describe_contains(bad_cases[bad].why);
    assert_describe_contains("moved to ");

    /* The fresh history is durable and resumes. */
    ck_assert(commit(EVENTS("S:new:s9:-")));
    state_reopen(RING);
    ck_assert(plegd_state_is_resumed(f.state));
    assert_lines(1);
    ck_assert_double_eq(metric("plegd_state_problems_total", bad_cases[bad].reason), 0);
}
END_TEST

/* A second state on the same directory (a second plegd) neither reads nor writes it: it serves
 * a history of its own from memory, and the first goes on. */
START_TEST(test_in_use)
{
    g_autoptr(PlegMetricsRegistry) metrics = pleg_metrics_registry_new();
    PlegdState *second;
    g_autofree char *text = NULL;

    state_open(RING);
    commit_history();
    second = plegd_state_open(f.dir, RING, metrics, f.context);
    ck_assert(!plegd_state_is_resumed(second));
    ck_assert(!plegd_state_is_durable(second));
    ck_assert_str_ne(plegd_state_get_instance(second), plegd_state_get_instance(f.state));
    text = plegd_state_describe(second);
    ck_assert_msg(strstr(text, "in use by another plegd"), "%s", text);
    {
        g_autofree char *exposed = pleg_metrics_registry_expose(metrics);

        ck_assert_msg(strstr(exposed, "plegd_state_problems_total{reason=\"in_use\"} 1"), "%s",
                      exposed);
    }
    ck_assert(plegd_state_close(second, WAIT_USEC));
    plegd_state_free(second);

    /* The first was not disturbed, and resumes as usual. */
    ck_assert(commit(EVENTS("D:web:c1:nginx")));
    state_reopen(RING);
    ck_assert(plegd_state_is_resumed(f.state));
    ck_assert_uint_eq(plegd_state_get_next_seq(f.state), f.next_seq);
}
END_TEST

START_TEST(test_compaction)
{
    g_autoptr(GPtrArray) records_before = NULL;
    g_autofree char *contents = NULL;
    g_auto(GStrv) file_lines = NULL;
    guint64 next_seq;
    gsize len;

    g_setenv("PLEGD_STATE_COMPACT_EVERY", "5", TRUE);
    state_open(3);
    /* 1 for the fresh file. */
    ck_assert_double_eq(metric("plegd_state_compactions_total", NULL), 1);
    ck_assert(commit(EVENTS("S:web:s1:-", "S:web:c1:nginx", "S:web:c2:sidecar")));
    ck_assert_double_eq(metric("plegd_state_compactions_total", NULL), 1);
    /* 6 lines in the file: compacted to the records and the last 3. */
    ck_assert(commit(EVENTS("D:web:c1:nginx", "S:cart:s2:-", "S:cart:c3:redis")));
    ck_assert_double_eq(metric("plegd_state_compactions_total", NULL), 2);
    contents = read_state_file(&len);
    file_lines = g_strsplit(contents, "\n", -1);
    /* header, 5 records, 3 lines, "" after the last newline */
    ck_assert_uint_eq(g_strv_length(file_lines), 10);
    ck_assert(g_str_has_prefix(file_lines[1], "{\"record\":{"));
    ck_assert(g_str_has_prefix(file_lines[5], "{\"record\":{"));
    ck_assert(g_str_has_prefix(file_lines[6], "{\"seq\":"));
    ck_assert(commit(EVENTS("R:web:c2:sidecar", "D:cart:c3:redis")));
    ck_assert(commit(EVENTS("R:cart:c3:redis")));
    assert_lines(3);
    records_before = plegd_state_get_records(f.state);
    next_seq = f.next_seq;

    state_reopen(3);
    ck_assert(plegd_state_is_resumed(f.state));
    ck_assert_uint_eq(plegd_state_get_next_seq(f.state), next_seq);
    assert_lines(3);
    assert_records(EVENTS("c1:exited:nginx", "s1:running:-", "s2:running:-"));
    {
        g_autoptr(GPtrArray) records_after = plegd_state_get_records(f.state);

        ck_assert_uint_eq(records_after->len, records_before->len);
        for (guint i = 0; i < records_after->len; i++) {
            const PlegdStateRecord *a = records_after->pdata[i];
            const PlegdStateRecord *b = records_before->pdata[i];

            ck_assert_str_eq(a->id, b->id);
            ck_assert_str_eq(a->pod_uid, b->pod_uid);
            ck_assert_str_eq(a->pod_name, b->pod_name);
            ck_assert_pstr_eq(a->container_name, b->container_name);
            ck_assert_pstr_eq(a->image, b->image);
            ck_assert_int_eq(a->state, b->state);
        }
    }
    g_unsetenv("PLEGD_STATE_COMPACT_EVERY");
}
END_TEST

/* A tmpfs of @size_kib at tmp/mnt; the state directory inside it. */
static void
mount_tmpfs(guint size_kib)
{
    g_autofree char *mnt = g_build_filename(f.tmp, "mnt", NULL);
    g_autofree char *options = g_strdup_printf("size=%uk,mode=0700", size_kib);

    ck_assert_int_eq(mkdir(mnt, 0700), 0);
    ck_assert_msg(mount("tmpfs", mnt, "tmpfs", 0, options) == 0, "mount tmpfs: %s",
                  g_strerror(errno));
    g_free(f.dir);
    f.dir = g_build_filename(mnt, "state", NULL);
}

static void
umount_tmpfs(void)
{
    g_autofree char *mnt = g_build_filename(f.tmp, "mnt", NULL);

    state_close();
    ck_assert_int_eq(umount2(mnt, MNT_DETACH), 0);
}

/* Fills the file system of @path until ENOSPC. */
static void
fill(const char *path)
{
    static const char block[4096];
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

    ck_assert_int_ge(fd, 0);
    for (;;) {
        ssize_t n = write(fd, block, sizeof(block));

        if (n < 0) {
            ck_assert_int_eq(errno, ENOSPC);
            break;
        }
    }
    close(fd);
}

START_TEST(test_enospc)
{
    g_autofree char *filler = g_build_filename(f.tmp, "mnt", "filler", NULL);
    const char *const big[] = {"S:big:c10:a", "S:big:c11:b", "S:big:c12:c", "S:big:c13:d",
                               "S:big:c14:e", "S:big:c15:f", "S:big:c16:g", "S:big:c17:h",
                               "S:big:c18:i", "S:big:c19:j", NULL};
    guint64 next_seq;

    mount_tmpfs(256);
    state_open(RING);
    commit_history();
    fill(filler);

    /* 10 lines of > 1 KiB: more than the page the file's last one has room in.  They cannot
     * be made durable: they start a new history, far above the old one's seqs. */
    ck_assert(!commit_image(big, 1500));
    ck_assert_ptr_nonnull(f.broken_instance);
    ck_assert_str_ne(f.broken_instance, plegd_state_get_instance(f.state));
    ck_assert(!plegd_state_is_durable(f.state));
    assert_describe_starts("not durable: cannot write ");
    assert_describe_contains(g_strerror(ENOSPC));
    assert_describe_contains("serving from memory since ");
    ck_assert_double_eq(metric("plegd_state_problems_total", "write"), 1);
    ck_assert_double_eq(metric("plegd_state_durable", NULL), 0);
    /* Still full: still degraded, counted once. */
    ck_assert(!commit_image(EVENTS("D:big:c10:a"), 1500));
    ck_assert_double_eq(metric("plegd_state_problems_total", "write"), 1);

    ck_assert_int_eq(unlink(filler), 0);
    ck_assert(commit(EVENTS("D:big:c11:b")));
    ck_assert(plegd_state_is_durable(f.state));
    assert_describe_starts("durable in ");
    ck_assert_double_eq(metric("plegd_state_durable", NULL), 1);
    ck_assert(commit(EVENTS("D:big:c12:c")));
    next_seq = f.next_seq;

    /* The new history, the events published while degraded included. */
    state_reopen(RING);
    ck_assert(plegd_state_is_resumed(f.state));
    ck_assert_str_eq(plegd_state_get_instance(f.state), f.broken_instance);
    ck_assert_uint_eq(plegd_state_get_next_seq(f.state), next_seq);
    assert_lines(f.lines->len);
    {
        g_autoptr(GPtrArray) records = plegd_state_get_records(f.state);

        /* c1, s1 and c10 to c19 */
        ck_assert_uint_eq(records->len, 12);
    }
    umount_tmpfs();
}
END_TEST

/* Killed while the directory is full: the restart resumes the old history from disk, where
 * the events published from memory are not.  Their seqs were given in the new history, far
 * above: the old one, resumed, never gives them again. */
START_TEST(test_crash_while_degraded)
{
    g_autofree char *filler = g_build_filename(f.tmp, "mnt", "filler", NULL);
    const char *const big[] = {"S:big:c10:a", "S:big:c11:b", "S:big:c12:c", "S:big:c13:d",
                               "S:big:c14:e", "S:big:c15:f", "S:big:c16:g", "S:big:c17:h",
                               "S:big:c18:i", "S:big:c19:j", NULL};
    g_autofree char *old_instance = NULL;
    guint64 old_next_seq, lowest_published;

    mount_tmpfs(256);
    state_open(RING);
    commit_history();
    old_instance = g_strdup(plegd_state_get_instance(f.state));
    old_next_seq = f.next_seq;
    fill(filler);
    ck_assert(!commit_image(big, 1500));
    ck_assert(!commit_image(EVENTS("D:big:c10:a"), 1500));
    lowest_published = f.next_seq - 11;
    ck_assert_uint_ge(lowest_published, old_next_seq + PLEGD_STATE_HISTORY_GAP);

    /* Still full at the restart. */
    state_reopen(RING);
    ck_assert(plegd_state_is_resumed(f.state));
    ck_assert_str_eq(plegd_state_get_instance(f.state), old_instance);
    /* The lines of the failed write that reached the file whole are the old history's, as
     * they were before the renumbering: the same events. */
    ck_assert_uint_ge(plegd_state_get_next_seq(f.state), old_next_seq);
    ck_assert_uint_le(plegd_state_get_next_seq(f.state), old_next_seq + 10);
    /* The resumed history reaches the seqs given while degraded only after some 2^32 more
     * events. */
    ck_assert_uint_ge(lowest_published - plegd_state_get_next_seq(f.state),
                      PLEGD_STATE_HISTORY_GAP - 10);
    umount_tmpfs();
}
END_TEST

START_TEST(test_read_only)
{
    guint64 next_seq;

    /* A file system cannot be remounted read-only while the writer holds state.jsonl open for
     * writing (EBUSY): the state directory is bind-mounted read-only over itself instead; the
     * appends still reach the file through the writer's descriptor, a compaction fails. */
    g_setenv("PLEGD_STATE_COMPACT_EVERY", "3", TRUE);
    mount_tmpfs(1024);
    state_open(RING);
    ck_assert(commit(EVENTS("S:web:s1:-", "S:web:c1:nginx")));
    ck_assert_msg(mount(f.dir, f.dir, NULL, MS_BIND, NULL) == 0, "bind: %s", g_strerror(errno));
    ck_assert_msg(mount(NULL, f.dir, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) == 0,
                  "remount ro: %s", g_strerror(errno));

    /* Durable in the file, but the compaction it calls for fails. */
    ck_assert(commit(EVENTS("D:web:c1:nginx", "S:web:c2:sidecar")));
    ck_assert(!plegd_state_is_durable(f.state));
    assert_describe_contains(g_strerror(EROFS));
    ck_assert_double_eq(metric("plegd_state_problems_total", "write"), 1);
    ck_assert(!commit(EVENTS("R:web:c1:nginx")));

    /* That batch broke into a new history: its lines and the next are all it keeps. */
    ck_assert_ptr_nonnull(f.broken_instance);
    ck_assert_int_eq(umount2(f.dir, 0), 0);
    ck_assert(commit(EVENTS("D:web:c2:sidecar")));
    ck_assert(plegd_state_is_durable(f.state));
    next_seq = f.next_seq;

    state_reopen(RING);
    ck_assert(plegd_state_is_resumed(f.state));
    ck_assert_str_eq(plegd_state_get_instance(f.state), f.broken_instance);
    ck_assert_uint_eq(plegd_state_get_next_seq(f.state), next_seq);
    assert_lines(2);
    assert_records(EVENTS("c2:exited:sidecar", "s1:running:-"));
    g_unsetenv("PLEGD_STATE_COMPACT_EVERY");
    umount_tmpfs();
}
END_TEST

START_TEST(test_vanished)
{
    g_autofree char *command = g_strdup_printf("rm -rf '%s'", f.dir);
    struct stat st;
    guint64 next_seq;

    state_open(RING);
    commit_history();
    ck_assert_int_eq(system(command), 0);

    ck_assert(!commit(EVENTS("S:cart:c3:redis")));
    ck_assert_double_eq(metric("plegd_state_problems_total", "vanished"), 1);
    assert_describe_starts("not durable: ");
    assert_describe_contains("deleted");
    ck_assert_int_eq(stat(f.dir, &st), -1);

    /* The next batch recreates the directory and writes everything from memory. */
    ck_assert(commit(EVENTS("D:cart:c3:redis")));
    ck_assert(plegd_state_is_durable(f.state));
    ck_assert_int_eq(stat(f.dir, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0700);
    next_seq = f.next_seq;

    state_reopen(RING);
    ck_assert(plegd_state_is_resumed(f.state));
    ck_assert_uint_eq(plegd_state_get_next_seq(f.state), next_seq);
    assert_lines(8);
    assert_records(EVENTS("c1:exited:nginx", "c3:exited:redis", "s1:running:-"));
}
END_TEST

/* PLEGD_STATE_CRASH_AT in a child that commits batches of 2 lines and tells on a pipe how
 * many came back durable: after the kill, the file loads and holds at least those. */
static const char *const crash_steps[] = {
    "append-before-write:2",   "append-torn:2",          "append-before-fsync:2",
    "append-after-fsync:2",    "compact-tmp-created:2",  "compact-tmp-written:2",
    "compact-before-rename:2", "compact-after-rename:2",
};

START_TEST(test_crash_at)
{
    int fds[2];
    pid_t pid;
    int status;
    guint8 acked = 0, byte;
    guint64 first_seq;

    ck_assert_int_eq(pipe(fds), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        g_setenv("PLEGD_STATE_CRASH_AT", crash_steps[_i], TRUE);
        g_setenv("PLEGD_STATE_COMPACT_EVERY", "5", TRUE);
        state_open(RING);
        if (write(fds[1], &(guint8){0}, 1) != 1)
            _exit(3);
        for (guint i = 0; i < 6; i++) {
            if (!commit(EVENTS("S:web:s1:-", "D:web:s1:-")))
                _exit(4);
            if (write(fds[1], &(guint8){1}, 1) != 1)
                _exit(3);
        }
        _exit(0);
    }
    close(fds[1]);
    while (read(fds[0], &byte, 1) == 1)
        acked += byte;
    close(fds[0]);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                  "the child was not killed at %s (status %d)", crash_steps[_i], status);

    state_open(RING);
    ck_assert(plegd_state_is_resumed(f.state));
    ck_assert(plegd_state_is_durable(f.state));
    first_seq = plegd_state_get_first_seq(f.state);
    /* Every batch handed back durable is there; the one the kill cut may be, whole or in
     * part. */
    ck_assert_uint_ge(plegd_state_get_next_seq(f.state), first_seq + 2 * acked);
    ck_assert_uint_le(plegd_state_get_next_seq(f.state), first_seq + 2 * acked + 2);
    ck_assert_double_eq(metric("plegd_state_problems_total", "corrupt"), 0);
}
END_TEST

static Suite *
state_suite(void)
{
    Suite *suite = suite_create("plegd-state");
    TCase *tc = tcase_create("state");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_fresh);
    tcase_add_test(tc, test_commit_reopen);
    tcase_add_test(tc, test_torn_last_line);
    tcase_add_loop_test(tc, test_bad_file, 0, N_BAD);
    tcase_add_test(tc, test_in_use);
    tcase_add_test(tc, test_compaction);
    tcase_add_test(tc, test_enospc);
    tcase_add_test(tc, test_crash_while_degraded);
    tcase_add_test(tc, test_read_only);
    tcase_add_test(tc, test_vanished);
    tcase_add_loop_test(tc, test_crash_at, 0, G_N_ELEMENTS(crash_steps));
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    SRunner *runner;
    int n_failed;

    /* CI counts a skip as a failure, and so does this: without root there is no mount
     * namespace and no chown(). */
    if (geteuid() != 0) {
        g_printerr("test-plegd-state: needs root (a mount namespace, chown)\n");
        return EXIT_FAILURE;
    }
    /* Made while the process has one thread (unshare() refuses a process whose threads share
     * its filesystem information). */
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
        g_printerr("test-plegd-state: a private mount namespace: %s\n", g_strerror(errno));
        return EXIT_FAILURE;
    }
    runner = srunner_create(state_suite());
    srunner_set_fork_status(runner, CK_FORK);
    srunner_run_all(runner, CK_NORMAL);
    n_failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return n_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
