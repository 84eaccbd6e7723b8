/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals of libpleg's plugin host: the structures its files share (pleg-host.c,
 * pleg-host-health.c, pleg-host-services.c, pleg-plugin-thread.c, pleg-plugin-loader.c,
 * pleg-host-gates.c).  What the test harness shares with them is in pleg-services.h.
 * G_GNUC_INTERNAL keeps every symbol here out of libpleg's ABI.
 */
#pragma once

#include <pleg/pleg-host.h>
#include <pleg/pleg-plugin.h>

#include "pleg-services.h"

G_BEGIN_DECLS

/* ---- the host's own structures ---- */

#define PLUGIN_GROUP        "Plugin"
#define FEATURE_GATES_GROUP "FeatureGates"
/* A .plugin file declares a gate of its own in a group "[FeatureGate <Name>]". */
#define GATE_DECLARATION_PREFIX "FeatureGate "

typedef struct _PluginEntry PluginEntry;

/* An event callback: its channel of the Generic PLEG and the source that calls it. */
typedef struct {
    guint id;
    PlegEventChannel *channel;
    GSource *source;
} Subscription;

struct _PluginEntry {
    PlegServiceHost base; /* first: the plugin's PlegPluginHost points here */
    PlegPluginInfo info;  /* handed out by pleg_host_get_plugins() */
    PlegHost *host;
    char *dir; /* the plugin directory the .plugin file is in */
    char *plugin_file;
    char *log_domain;
    GKeyFile *key_file; /* the .plugin file, for its gate declarations */
    const PlegPluginDescriptor *descriptor;
    PlegHostServices services;

    GThread *thread;
    GMainContext *context;
    GMainLoop *loop;
    gpointer state;
    gboolean initialized;
    gboolean abandoned; /* its stop did not return in time: never freed (pleg-plugin-thread.c) */
};

/* How long the host waits for one plugin's stop and free before it abandons the plugin. */
#define PLEG_PLUGIN_STOP_TIMEOUT_USEC (5 * G_USEC_PER_SEC)

struct _PlegHost {
    GMainContext *context;
    PlegFeatureGates *gates;
    PlegFeatureGates *own_gates;
    char *endpoint;
    PlegCriClient *client;
    PlegRuntime *runtime;
    PlegMetricsRegistry *metrics;
    PlegGeneric *pleg;
    char *plugin_dir;
    GStrv disabled_plugins;
    GStrv required_plugins;

    PlegHealthRegistry *health;
    PlegStatusBoard *statuses; /* the plugins' set_status, a row per plugin given services */
    int pleg_running;
    gint64 relist_threshold_usec;
    gint64 liveness_window_usec; /* pleg_host_liveness_window() */
    PlegMetric *cri_streaming; /* kubelet_cri_streaming_enabled, with CRIListStreaming on */
    char *list_probe_interval_text;

    GPtrArray *subscriptions; /* Subscription, in the host's context's thread */
    GPtrArray *removed;       /* Subscription, removed from inside its callback */
    GSource *reaper;          /* unsubscribes the removed ones, after their dispatch */
    guint next_subscription_id;
    GPtrArray *plugins; /* PluginEntry, in load order */
    gboolean started;
    int n_abandoned; /* plugins whose stop did not return: the host is then never freed */
};

#define ENTRY(h) ((PluginEntry *)(h))

/* pleg-host-health.c */
/* How long the dispatcher may go without finishing a global relist before liveness fails. */
G_GNUC_INTERNAL gint64 pleg_host_liveness_window(gint64 relist_threshold_usec,
                                                 gint64 relist_period_usec,
                                                 gint64 runtime_request_timeout_usec);
/* Adds "pleg-dispatcher" (liveness), "first-relist", "runtime" and "pleg" (readiness). */
G_GNUC_INTERNAL void pleg_host_add_own_checkers(PlegHost *self);

/* pleg-host-services.c: the plugin's services, for its thread's context. */
G_GNUC_INTERNAL void pleg_host_init_services(PluginEntry *entry);

/* pleg-plugin-thread.c: the plugin's lifecycle calls, each run on its thread. */
G_GNUC_INTERNAL void pleg_plugin_entry_init(PluginEntry *entry);
G_GNUC_INTERNAL void pleg_plugin_entry_start(PluginEntry *entry);
G_GNUC_INTERNAL void pleg_plugin_entry_shutdown(PluginEntry *entry);

/* pleg-plugin-loader.c */
G_GNUC_INTERNAL void pleg_plugin_entry_free(PluginEntry *entry);
G_GNUC_INTERNAL G_GNUC_PRINTF(3, 4) void pleg_plugin_entry_fail(PluginEntry *entry,
                                                                PlegHostError code,
                                                                const char *format, ...);
G_GNUC_INTERNAL void pleg_host_load_plugins(PlegHost *self);
G_GNUC_INTERNAL gboolean pleg_host_check_required(PlegHost *self, gboolean started, GError **error);
G_GNUC_INTERNAL void pleg_host_report_failure(PlegHost *self, PluginEntry *entry);
G_GNUC_INTERNAL GPtrArray *pleg_list_plugin_files(const char *dir);
G_GNUC_INTERNAL int pleg_compare_file_names(gconstpointer a, gconstpointer b);
G_GNUC_INTERNAL gboolean pleg_load_trusted_key_file(GKeyFile *key_file, const char *path,
                                                    GError **error);

/* pleg-host-gates.c */
G_GNUC_INTERNAL gboolean pleg_declare_plugin_gates(PlegFeatureGates *gates, GKeyFile *key_file,
                                                   const char *file, gboolean check_only,
                                                   GError **error);

G_END_DECLS
