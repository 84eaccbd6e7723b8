/* SPDX-License-Identifier: Apache-2.0 */
#include "perf-common.h"

#include <glib/gstdio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

struct _PerfSim {
    GSubprocess *process;
    GDataInputStream *out;
    char *dir;
    char *endpoint;
};

static G_NORETURN void
die(const char *format, ...) G_GNUC_PRINTF(1, 2);

static void
die(const char *format, ...)
{
    va_list args;

    va_start(args, format);
    fputs("perf: ", stderr);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    va_end(args);
    exit(2);
}

void
perf_sim_run(PerfSim *sim, const char *command)
{
    g_autofree char *line = g_strconcat(command, "\n", NULL);
    g_autofree char *answer = NULL;

    if (!g_output_stream_write_all(g_subprocess_get_stdin_pipe(sim->process), line, strlen(line),
                                   NULL, NULL, NULL))
        die("cannot write to cri-sim");
    answer = g_data_input_stream_read_line(sim->out, NULL, NULL, NULL);
    if (!answer || !g_str_equal(answer, "ok"))
        die("cri-sim answered \"%s\" to \"%s\"", answer ? answer : "(nothing)", command);
}

PerfSim *
perf_sim_start(const char *cri_sim, const char *commands)
{
    PerfSim *sim = g_new0(PerfSim, 1);
    g_autoptr(GError) error = NULL;
    g_autofree char *socket_path = NULL;
    g_autofree char *ready = NULL;
    g_auto(GStrv) lines = NULL;

    sim->dir = g_dir_make_tmp("pleg-perf-XXXXXX", &error);
    if (!sim->dir)
        die("%s", error->message);
    socket_path = g_build_filename(sim->dir, "cri.sock", NULL);
    sim->process =
        g_subprocess_new(G_SUBPROCESS_FLAGS_STDIN_PIPE | G_SUBPROCESS_FLAGS_STDOUT_PIPE, &error,
                         cri_sim, "--socket", socket_path, NULL);
    if (!sim->process)
        die("%s", error->message);
    sim->out = g_data_input_stream_new(g_subprocess_get_stdout_pipe(sim->process));
    ready = g_data_input_stream_read_line(sim->out, NULL, NULL, NULL);
    if (!ready || !g_str_equal(ready, "ready"))
        die("cri-sim did not start");
    lines = g_strsplit(commands ? commands : "", "\n", -1);
    for (char **line = lines; *line; line++)
        if (**line)
            perf_sim_run(sim, *line);
    sim->endpoint = g_strconcat("unix://", socket_path, NULL);
    return sim;
}

const char *
perf_sim_get_endpoint(PerfSim *sim)
{
    return sim->endpoint;
}

void
perf_sim_stop(PerfSim *sim)
{
    g_output_stream_close(g_subprocess_get_stdin_pipe(sim->process), NULL, NULL);
    g_subprocess_wait(sim->process, NULL, NULL);
    g_object_unref(sim->out);
    g_object_unref(sim->process);
    g_rmdir(sim->dir);
    g_free(sim->dir);
    g_free(sim->endpoint);
    g_free(sim);
}

double
perf_cpu_ms(void)
{
    struct rusage usage;

    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_utime.tv_sec * 1e3 + usage.ru_utime.tv_usec / 1e3 +
           usage.ru_stime.tv_sec * 1e3 + usage.ru_stime.tv_usec / 1e3;
}

gint64
perf_minor_faults(void)
{
    struct rusage usage;

    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_minflt;
}

double
perf_status_kib(const char *field)
{
    g_autofree char *text = NULL;
    const char *line;

    if (!g_file_get_contents("/proc/self/status", &text, NULL, NULL))
        return 0;
    line = strstr(text, field);
    return line ? g_ascii_strtod(line + strlen(field), NULL) : 0;
}

char *
perf_run_child(const char *const *argv)
{
    g_autoptr(GError) error = NULL;
    char *out = NULL;
    int status;

    if (!g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_CHILD_INHERITS_STDIN, NULL, NULL, &out,
                      NULL, &status, &error) ||
        !g_spawn_check_wait_status(status, &error))
        die("%s %s: %s", argv[0], argv[1] ? argv[1] : "", error->message);
    return out;
}

static int
compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

void
perf_stats_of(const void *samples, gsize stride, guint n, gsize offset, double *ret_median,
              double *ret_min, double *ret_max)
{
    g_autofree double *values = g_new(double, n);

    for (guint i = 0; i < n; i++)
        values[i] = *(const double *)((const char *)samples + i * stride + offset);
    perf_stats(values, n, ret_median, ret_min, ret_max);
}

void
perf_stats(double *values, guint n, double *ret_median, double *ret_min, double *ret_max)
{
    g_return_if_fail(n > 0);

    qsort(values, n, sizeof(double), compare_doubles);
    *ret_median = n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
    *ret_min = values[0];
    *ret_max = values[n - 1];
}

/* The main thread's instruction count in callgrind's output folder @dir (its "-01" file). */
static guint64
read_main_thread_ir(const char *dir)
{
    g_autoptr(GDir) listing = g_dir_open(dir, 0, NULL);
    const char *name;

    while (listing && (name = g_dir_read_name(listing))) {
        g_autofree char *path = NULL, *text = NULL;
        const char *summary;

        if (!g_str_has_suffix(name, "-01"))
            continue;
        path = g_build_filename(dir, name, NULL);
        if (!g_file_get_contents(path, &text, NULL, NULL))
            return 0;
        summary = strstr(text, "\nsummary: ");
        if (!summary)
            summary = strstr(text, "\ntotals: ");
        return summary ? g_ascii_strtoull(strchr(summary, ':') + 1, NULL, 10) : 0;
    }
    return 0;
}

guint64
perf_callgrind_count(const char *valgrind, const char *const *argv, const char *toggle_function)
{
    g_autofree char *dir = g_dir_make_tmp("perf-callgrind-XXXXXX", NULL);
    g_autofree char *out_arg = NULL, *toggle_arg = NULL, *err = NULL;
    g_autoptr(GPtrArray) args = g_ptr_array_new();
    g_autoptr(GError) error = NULL;
    guint64 ir = 0;
    int status;

    if (!dir) {
        fprintf(stderr, "perf: no temporary folder for callgrind\n");
        return 0;
    }
    out_arg = g_strdup_printf("--callgrind-out-file=%s/callgrind.out", dir);
    toggle_arg = g_strdup_printf("--toggle-collect=%s", toggle_function);
    g_ptr_array_add(args, (char *)valgrind);
    g_ptr_array_add(args, (char *)"--tool=callgrind");
    /* One file per thread: the count is the main thread's alone. */
    g_ptr_array_add(args, (char *)"--separate-threads=yes");
    g_ptr_array_add(args, (char *)"--collect-atstart=no");
    g_ptr_array_add(args, toggle_arg);
    g_ptr_array_add(args, out_arg);
    for (guint i = 0; argv[i]; i++)
        g_ptr_array_add(args, (char *)argv[i]);
    g_ptr_array_add(args, NULL);

    if (!g_spawn_sync(NULL, (char **)args->pdata, NULL, G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL,
                      NULL, &err, &status, &error) ||
        !g_spawn_check_wait_status(status, &error))
        fprintf(stderr, "perf: callgrind of %s: %s\n%s", argv[0], error->message, err ? err : "");
    else if (!(ir = read_main_thread_ir(dir)))
        fprintf(stderr, "perf: no main-thread count from callgrind in %s\n", dir);

    {
        g_autoptr(GDir) listing = g_dir_open(dir, 0, NULL);
        const char *name;

        while (listing && (name = g_dir_read_name(listing))) {
            g_autofree char *path = g_build_filename(dir, name, NULL);

            g_unlink(path);
        }
        g_rmdir(dir);
    }
    return ir;
}

void
perf_json_add_stat(JsonBuilder *builder, const char *name, double median, double min, double max)
{
    json_builder_set_member_name(builder, name);
    json_builder_begin_object(builder);
    json_builder_set_member_name(builder, "median");
    json_builder_add_double_value(builder, median);
    json_builder_set_member_name(builder, "min");
    json_builder_add_double_value(builder, min);
    json_builder_set_member_name(builder, "max");
    json_builder_add_double_value(builder, max);
    json_builder_end_object(builder);
}

gboolean
perf_json_write(JsonBuilder *builder, const char *path, GError **error)
{
    g_autoptr(JsonGenerator) generator = json_generator_new();
    g_autoptr(JsonNode) root = json_builder_get_root(builder);

    json_generator_set_root(generator, root);
    json_generator_set_pretty(generator, TRUE);
    return json_generator_to_file(generator, path, error);
}
