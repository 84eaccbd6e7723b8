/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-event-line: the instructions plegd spends on one event line, counted by callgrind.
 *
 *   bench-event-line [--lines=20000] [--valgrind=PATH] [--json=FILE]
 *
 * The benchmark runs itself under `valgrind --tool=callgrind --separate-threads=yes`, with
 * collection on only inside one function of the main thread, twice:
 *
 *   - "line": what plegd's main thread does for each PodLifecycleEvent, as main.c's on_event():
 *     plegd_events_publish() (the seq, the JSON line, the ring of /events) and
 *     plegd_output_write_bytes() (queued for the stdout writer, here writing to /dev/null);
 *   - "json": plegd_event_to_json_with_seq() alone, and the free of its line.
 *
 * The events cycle through ContainerStarted (started_at), ContainerDied (exit code, reason,
 * finished_at), ContainerRemoved and PodSync of pods with UUIDs and containers with 64-hex ids,
 * each with its identity (namespace, pod name, container name, attempt, image, sandbox); the ring is
 * full (plegd's default 10,000) before counting starts, so each line also evicts one.  The
 * count is callgrind's Ir (instructions executed in user space) over --lines lines, divided.
 *
 * Goal (issue "Relists at the CRI floor"): at most 5,000 instructions per line ("line").
 * Exits 1 when it is missed, 77 (skipped) when valgrind cannot be run.
 */
#include <errno.h>
#include <fcntl.h>
#include <json-glib/json-glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "perf-common.h"
#include "plegd.h"

#define GOAL_PER_LINE 5000.0
#define RING_SIZE     10000
#define WARM_LINES    (RING_SIZE + 1000)

/* ---- the child: formats lines, callgrind counting only inside measured_*() ---- */

typedef struct {
    char pod_uid[37];
    char container_id[65];
    char pod_namespace[16];
    char pod_name[40];
    char container_name[16];
    char image[48];
    PlegPodLifecycleEvent event;
} BenchEvent;

static void
bench_event_init(BenchEvent *be, guint i)
{
    static const PlegPodLifecycleEventType types[] = {
        PLEG_CONTAINER_STARTED,
        PLEG_CONTAINER_DIED,
        PLEG_CONTAINER_REMOVED,
        PLEG_POD_SYNC,
    };
    guint pod = i / 4;

    g_snprintf(be->pod_uid, sizeof(be->pod_uid), "%08x-5a1e-4c0d-9b7f-%012x", pod * 2654435761u,
               pod);
    for (guint k = 0; k < 64; k += 8)
        g_snprintf(be->container_id + k, 9, "%08x", (pod + k) * 2246822519u);
    /* Names as a cluster has them: a namespace of ~10 characters, a Deployment's pod (~30),
     * a container (~10) and an image reference (~40); every fifth container event is of a
     * sandbox, which has neither container name nor image. */
    g_snprintf(be->pod_namespace, sizeof(be->pod_namespace), "team-%05u", pod % 97);
    g_snprintf(be->pod_name, sizeof(be->pod_name), "checkout-api-7d9f8b6c5d-%05x", pod);
    g_snprintf(be->container_name, sizeof(be->container_name), "app-%06u", pod % 13);
    g_snprintf(be->image, sizeof(be->image), "registry.example.com/shop/checkout:v1.%u.%u",
               pod % 31, pod % 7);
    be->event = (PlegPodLifecycleEvent){
        .pod_uid = be->pod_uid,
        .type = types[i % 4],
        .container_id = be->container_id,
        .relist_source = i % 3 == 0 ? PLEG_RELIST_SOURCE_GLOBAL : PLEG_RELIST_SOURCE_EVENTED_PLEG,
        .time_ns = G_GINT64_CONSTANT(1795966735123456789) + (gint64)i * 1000003,
        .details =
            {
                .pod_namespace = be->pod_namespace,
                .pod_name = be->pod_name,
                .attempt = pod % 3,
                .sandbox = pod % 5 == 0,
            },
    };
    if (!be->event.details.sandbox && be->event.type != PLEG_POD_SYNC) {
        be->event.details.container_name = be->container_name;
        be->event.details.image = be->image;
    }
    if (be->event.type == PLEG_CONTAINER_STARTED && !be->event.details.sandbox)
        be->event.details.started_at_ns = be->event.time_ns - 400000000;
    if (be->event.type == PLEG_CONTAINER_DIED) {
        be->event.has_exit = TRUE;
        be->event.exit_code = (int)(i % 256);
        be->event.reason = (char *)"Error";
        be->event.finished_at_ns = be->event.time_ns - 250000000;
    }
}

static void
one_line(PlegdEvents *events, PlegdOutput *output, const PlegPodLifecycleEvent *event)
{
    g_autoptr(GBytes) line = plegd_events_publish(events, event, NULL);
    g_autoptr(GError) error = NULL;

    if (!plegd_output_write_bytes(output, line, &error)) {
        g_printerr("bench-event-line: %s\n", error->message);
        exit(2);
    }
}

/* The functions callgrind counts in: not inlined, so that --toggle-collect finds them. */
G_GNUC_NO_INLINE void measured_lines(PlegdEvents *events, PlegdOutput *output,
                                     const BenchEvent *bench, guint n_bench, guint lines);
G_GNUC_NO_INLINE void measured_json(const BenchEvent *bench, guint n_bench, guint lines);

G_GNUC_NO_INLINE void
measured_lines(PlegdEvents *events, PlegdOutput *output, const BenchEvent *bench, guint n_bench,
               guint lines)
{
    for (guint i = 0; i < lines; i++)
        one_line(events, output, &bench[i % n_bench].event);
}

G_GNUC_NO_INLINE void
measured_json(const BenchEvent *bench, guint n_bench, guint lines)
{
    for (guint i = 0; i < lines; i++)
        g_free(plegd_event_to_json_with_seq(&bench[i % n_bench].event, RING_SIZE + 1 + i));
}

static int
child(const char *mode, guint lines)
{
    g_autoptr(PlegMetricsRegistry) registry = pleg_metrics_registry_new();
    g_autoptr(PlegdEvents) events = plegd_events_new(RING_SIZE, 1, registry);
    guint n_bench = 4096;
    g_autofree BenchEvent *bench = g_new0(BenchEvent, n_bench);
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    PlegdOutput *output;

    if (fd < 0) {
        g_printerr("bench-event-line: /dev/null: %s\n", g_strerror(errno));
        return 2;
    }
    output = plegd_output_new(fd, G_MAXSIZE / 2, NULL, NULL, NULL);
    for (guint i = 0; i < n_bench; i++)
        bench_event_init(&bench[i], i);

    /* Fill the ring and warm every lazy initialisation (time zones, types) outside the count. */
    for (guint i = 0; i < WARM_LINES; i++)
        one_line(events, output, &bench[i % n_bench].event);
    if (g_str_equal(mode, "line"))
        measured_lines(events, output, bench, n_bench, lines);
    else
        measured_json(bench, n_bench, lines);

    plegd_output_flush(output, 60 * G_USEC_PER_SEC);
    plegd_output_free(output);
    close(fd);
    return 0;
}

/* ---- the parent: callgrind runs and their counts ---- */

/* Instructions per line of @mode, or a negative value when callgrind failed. */
static double
count_per_line(const char *valgrind, const char *self, const char *mode, guint lines)
{
    g_autofree char *mode_arg = g_strdup_printf("--child=%s", mode);
    g_autofree char *lines_arg = g_strdup_printf("--lines=%u", lines);
    const char *argv[] = {self, mode_arg, lines_arg, NULL};
    guint64 ir = perf_callgrind_count(
        valgrind, argv, g_str_equal(mode, "line") ? "measured_lines*" : "measured_json*");

    return ir > 0 ? (double)ir / lines : -1;
}

int
main(int argc, char **argv)
{
    g_autofree char *json_path = NULL;
    g_autofree char *valgrind = NULL;
    g_autofree char *child_mode = NULL;
    int lines = 20000;
    const GOptionEntry entries[] = {
        {"lines", 0, 0, G_OPTION_ARG_INT, &lines, "Lines counted", "N"},
        {"valgrind", 0, 0, G_OPTION_ARG_FILENAME, &valgrind, "valgrind to run", "PATH"},
        {"json", 0, 0, G_OPTION_ARG_FILENAME, &json_path, "Write the figures here", "FILE"},
        {"child", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &child_mode, NULL, NULL},
        {NULL},
    };
    g_autoptr(GOptionContext) context = g_option_context_new(NULL);
    g_autoptr(GError) error = NULL;
    double per_line, per_json;
    gboolean ok;

    g_option_context_add_main_entries(context, entries, NULL);
    if (!g_option_context_parse(context, &argc, &argv, &error)) {
        g_printerr("bench-event-line: %s\n", error->message);
        return 2;
    }
    if (lines < 1 || argc != 1) {
        g_printerr("usage: bench-event-line [--lines=N] [--valgrind=PATH] [--json=FILE]\n");
        return 2;
    }
    if (child_mode)
        return child(child_mode, (guint)lines);

    if (!valgrind)
        valgrind = g_find_program_in_path("valgrind");
    if (!valgrind) {
        g_printerr("bench-event-line: valgrind not found, skipping\n");
        return 77;
    }
    per_line = count_per_line(valgrind, argv[0], "line", (guint)lines);
    per_json = count_per_line(valgrind, argv[0], "json", (guint)lines);
    if (per_line < 0 || per_json < 0)
        return 2;

    ok = per_line <= GOAL_PER_LINE;
    printf("instructions per event line (publish + stdout queue): %.0f (goal <= %.0f)\n", per_line,
           GOAL_PER_LINE);
    printf("instructions per JSON text alone: %.0f\n", per_json);
    if (!ok)
        printf("GOAL MISSED: %.0f instructions per event line (goal <= %.0f)\n", per_line,
               GOAL_PER_LINE);

    if (json_path) {
        g_autoptr(JsonBuilder) builder = json_builder_new();
        g_autoptr(JsonGenerator) generator = json_generator_new();
        g_autoptr(JsonNode) root = NULL;

        json_builder_begin_object(builder);
        json_builder_set_member_name(builder, "benchmark");
        json_builder_add_string_value(builder, "event-line");
        json_builder_set_member_name(builder, "lines");
        json_builder_add_int_value(builder, lines);
        json_builder_set_member_name(builder, "instructions_per_line");
        json_builder_add_double_value(builder, per_line);
        json_builder_set_member_name(builder, "instructions_per_json");
        json_builder_add_double_value(builder, per_json);
        json_builder_set_member_name(builder, "goal_per_line");
        json_builder_add_double_value(builder, GOAL_PER_LINE);
        json_builder_set_member_name(builder, "goals_met");
        json_builder_add_boolean_value(builder, ok);
        json_builder_end_object(builder);
        root = json_builder_get_root(builder);
        json_generator_set_root(generator, root);
        json_generator_set_pretty(generator, TRUE);
        if (!json_generator_to_file(generator, json_path, &error)) {
            g_printerr("bench-event-line: %s\n", error->message);
            return 2;
        }
    }
    return ok ? 0 : 1;
}
