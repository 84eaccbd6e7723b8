/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The metrics any Prometheus exporter is expected to have, besides its own: the process
 * collector's process_* (read from /proc at each scrape, with the semantics of Prometheus'
 * client libraries), plegd_build_info, and plegd_plugin_state.
 */
#include <dirent.h>
#include <libsoup/soup.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "pleg-config.h"
#include "plegd.h"

gboolean
plegd_proc_stat_parse(const char *text, PlegdProcStat *ret_stat)
{
    /* Fields 3 on, after the command in parentheses, which may hold spaces and parentheses. */
    const char *end = text ? strrchr(text, ')') : NULL;
    g_auto(GStrv) fields = NULL;
    guint64 value[25] = {0};

    if (!end || end[1] != ' ')
        return FALSE;
    fields = g_strsplit(end + 2, " ", -1);
    /* fields[0] is field 3 (state); the last read is field 24 (rss). */
    if (g_strv_length(fields) < 22)
        return FALSE;
    for (guint field = 14; field <= 24; field++) {
        const char *word = fields[field - 3];

        if (field >= 16 && field <= 21)
            continue; /* cutime .. itrealvalue: not read */
        if (!g_ascii_string_to_unsigned(word, 10, 0, G_MAXUINT64, &value[field], NULL))
            return FALSE;
    }
    *ret_stat = (PlegdProcStat){
        .utime_ticks = value[14],
        .stime_ticks = value[15],
        .starttime_ticks = value[22],
        .vsize_bytes = value[23],
        .rss_pages = value[24],
    };
    return TRUE;
}

/* ---- process_*: Prometheus' process collector ---- */

typedef struct {
    GMutex lock; /* one collection at a time: the CPU counter is advanced by differences */
    double ticks_per_second;
    double page_bytes;
    PlegMetric *cpu_metric;
    PlegMetricSeries *cpu;
    PlegMetricSeries *open_fds;
    PlegMetricSeries *max_fds;
    PlegMetricSeries *virtual_memory;
    PlegMetricSeries *resident_memory;
} ProcessMetrics;

static void
process_metrics_free(gpointer data)
{
    ProcessMetrics *pm = data;

    g_mutex_clear(&pm->lock);
    g_free(pm);
}

/* Open file descriptors, the one reading the folder not counted; -1 when unreadable. */
static int
count_open_fds(void)
{
    DIR *dir = opendir("/proc/self/fd");
    struct dirent *entry;
    int n = 0;

    if (!dir)
        return -1;
    while ((entry = readdir(dir)))
        if (entry->d_name[0] != '.' && atoi(entry->d_name) != dirfd(dir))
            n++;
    closedir(dir);
    return n;
}

static gboolean
read_proc_stat(PlegdProcStat *ret_stat)
{
    g_autofree char *text = NULL;

    return g_file_get_contents("/proc/self/stat", &text, NULL, NULL) &&
           plegd_proc_stat_parse(text, ret_stat);
}

/* Each value read now; one that cannot be read keeps its last value (a scrape never fails
 * for it), which a debug message names. */
static void
collect_process(PlegMetricsRegistry *registry, gpointer data)
{
    ProcessMetrics *pm = data;
    PlegdProcStat stat;
    struct rlimit limit;
    int fds;

    g_mutex_lock(&pm->lock);
    if (read_proc_stat(&stat)) {
        double cpu = (double)(stat.utime_ticks + stat.stime_ticks) / pm->ticks_per_second;
        /* A counter is only ever added to: advance it to the kernel's total. */
        double shown = pleg_metric_get(pm->cpu_metric, NULL);

        if (cpu > shown)
            pleg_metric_series_add(pm->cpu, cpu - shown);
        pleg_metric_series_set(pm->virtual_memory, (double)stat.vsize_bytes);
        pleg_metric_series_set(pm->resident_memory, (double)stat.rss_pages * pm->page_bytes);
    } else {
        g_debug("process metrics: /proc/self/stat cannot be read, ignoring");
    }
    fds = count_open_fds();
    if (fds >= 0)
        pleg_metric_series_set(pm->open_fds, fds);
    else
        g_debug("process metrics: /proc/self/fd cannot be read, ignoring");
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0)
        pleg_metric_series_set(pm->max_fds, limit.rlim_cur == RLIM_INFINITY
                                                ? INFINITY
                                                : (double)limit.rlim_cur);
    g_mutex_unlock(&pm->lock);
}

/* Seconds since the epoch the system booted (btime of /proc/stat); 0 when unknown. */
static double
boot_time(void)
{
    g_autofree char *text = NULL;
    g_autofree char *number = NULL;
    const char *line;
    guint64 btime;

    if (!g_file_get_contents("/proc/stat", &text, NULL, NULL))
        return 0;
    line = strstr(text, "\nbtime ");
    if (!line)
        return 0;
    line += strlen("\nbtime ");
    number = g_strndup(line, strcspn(line, "\n"));
    if (!g_ascii_string_to_unsigned(number, 10, 1, G_MAXUINT64, &btime, NULL))
        return 0;
    return (double)btime;
}

static void
register_process_metrics(PlegMetricsRegistry *registry)
{
    ProcessMetrics *pm = g_new0(ProcessMetrics, 1);
    long ticks = sysconf(_SC_CLK_TCK);
    long page = sysconf(_SC_PAGESIZE);
    PlegMetric *start;
    PlegdProcStat stat;
    double btime;

    g_mutex_init(&pm->lock);
    pm->ticks_per_second = ticks > 0 ? (double)ticks : 100;
    pm->page_bytes = page > 0 ? (double)page : 4096;
#define GAUGE(name, help)                                                                          \
    pleg_metric_get_series(                                                                        \
        pleg_metrics_register(registry, PLEG_METRIC_GAUGE, (name), (help), NULL, NULL, 0), NULL)
    pm->cpu_metric = pleg_metrics_register(registry, PLEG_METRIC_COUNTER,
                                           "process_cpu_seconds_total",
                                           "CPU time plegd has used, user and system, in seconds.",
                                           NULL, NULL, 0);
    pm->cpu = pleg_metric_get_series(pm->cpu_metric, NULL);
    pm->open_fds = GAUGE("process_open_fds", "File descriptors plegd has open.");
    pm->max_fds = GAUGE("process_max_fds",
                        "The most file descriptors plegd may open (its soft RLIMIT_NOFILE).");
    pm->virtual_memory = GAUGE("process_virtual_memory_bytes",
                               "plegd's virtual memory size in bytes.");
    pm->resident_memory = GAUGE("process_resident_memory_bytes",
                                "plegd's resident memory size in bytes.");
#undef GAUGE
    start = pleg_metrics_register(registry, PLEG_METRIC_GAUGE, "process_start_time_seconds",
                                  "When plegd started, in seconds since the Unix epoch.", NULL,
                                  NULL, 0);
    /* Constant for the process: when the system booted plus when, after that, it started. */
    btime = boot_time();
    if (btime > 0 && read_proc_stat(&stat))
        pleg_metric_set(start, NULL, btime + (double)stat.starttime_ticks / pm->ticks_per_second);
    else
        g_debug("process metrics: the start time cannot be read, ignoring");
    pleg_metrics_registry_add_collector(registry, collect_process, pm, process_metrics_free);
}

/* ---- plegd_build_info ---- */

static void
register_build_info(PlegMetricsRegistry *registry)
{
    static const char *const labels[] = {"version", "libpleg_version", "glib_version",
                                         "libsoup_version", NULL};
    g_autofree char *glib = g_strdup_printf("%u.%u.%u", glib_major_version, glib_minor_version,
                                            glib_micro_version);
    g_autofree char *soup =
        g_strdup_printf("%u.%u.%u", soup_get_major_version(), soup_get_minor_version(),
                        soup_get_micro_version());
    PlegMetric *info = pleg_metrics_register(
        registry, PLEG_METRIC_GAUGE, "plegd_build_info",
        "Always 1: its labels are the versions of plegd and of the libpleg, GLib and libsoup it "
        "runs with.",
        labels, NULL, 0);

    pleg_metric_set(info, (const char *const[]){PLEG_VERSION, pleg_get_version(), glib, soup},
                    1);
}

void
plegd_exporter_metrics_register(PlegMetricsRegistry *registry)
{
    g_return_if_fail(registry != NULL);

    register_process_metrics(registry);
    register_build_info(registry);
}

/* ---- plegd_plugin_state ---- */

static const PlegPluginState plugin_states[] = {
    PLEG_PLUGIN_STATE_RUNNING,       PLEG_PLUGIN_STATE_STOPPED, PLEG_PLUGIN_STATE_FAILED,
    PLEG_PLUGIN_STATE_DISABLED_GATE, PLEG_PLUGIN_STATE_DISABLED_BY_NAME,
};

void
plegd_plugin_state_metrics_set(PlegMetricsRegistry *registry, GPtrArray *plugins)
{
    static const char *const labels[] = {"plugin", "state", NULL};
    PlegMetric *metric;

    g_return_if_fail(registry != NULL && plugins != NULL);

    metric = pleg_metrics_register(
        registry, PLEG_METRIC_GAUGE, "plegd_plugin_state",
        "1 for the state each plugin found is in (running, stopped, failed, disabled-gate, "
        "disabled-by-name), 0 for the others.",
        labels, NULL, 0);
    for (guint i = 0; i < plugins->len; i++) {
        const PlegPluginInfo *info = plugins->pdata[i];
        /* A name from a file name may hold any bytes: label values are UTF-8. */
        g_autofree char *name = pleg_log_text(info->name, -1, 0);

        for (gsize s = 0; s < G_N_ELEMENTS(plugin_states); s++)
            pleg_metric_set(metric,
                            (const char *const[]){name,
                                                  pleg_plugin_state_to_string(plugin_states[s])},
                            info->state == plugin_states[s] ? 1 : 0);
    }
}
