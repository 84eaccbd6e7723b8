/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What every plugin host builds the same way, shared by libpleg's host and the test harness's
 * fake host (tests/harness/fake-host.c): the health-checker registry (pleg-health.c), the
 * plugins' statuses (pleg-status.c), the services table (pleg-services.c), and the CRI
 * GetContainerEvents stream behind the container_events_* services (lib/cri/cri-events.c).
 * They are built into a static library that libpleg and the harness link; G_GNUC_INTERNAL and
 * cri_* keep every symbol here out of libpleg's ABI (pleg_plugin_status_free() is libpleg's).
 */
#pragma once

#include <pleg/pleg-host.h>
#include <pleg/pleg-plugin.h>

#include "cri-private.h"

G_BEGIN_DECLS

/* ---- health checkers (pleg-health.c) ---- */

/* Checkers by id, in registration order.  A round takes its checkers under the registry's lock
 * and runs them without it: a checker that never returns holds back the rounds that run it and
 * whoever removes that checker, nothing else.  A round holds a reference on the registry, so
 * the registry outlives a round its owner no longer waits for.  A checker must not remove
 * checkers (removal waits for the removed checker's runs to end). */
typedef struct _PlegHealthRegistry PlegHealthRegistry;

G_GNUC_INTERNAL PlegHealthRegistry *pleg_health_registry_new(void);
G_GNUC_INTERNAL PlegHealthRegistry *pleg_health_registry_ref(PlegHealthRegistry *registry);
/* The last reference runs the destroy notify of every checker left.  NULL-safe. */
G_GNUC_INTERNAL void pleg_health_registry_unref(PlegHealthRegistry *registry);
/* @owner (nullable) tags the checker for pleg_health_registry_remove().  Returns its id (> 0). */
G_GNUC_INTERNAL guint pleg_health_registry_add(PlegHealthRegistry *registry, gconstpointer owner,
                                               PlegHealthKind kind, const char *name,
                                               PlegHealthCheckFunc func, gpointer user_data,
                                               GDestroyNotify destroy);
/* Removes the checker @id (when != 0) or every checker of @owner (when @id == 0): rounds that
 * have not reached it skip it, and it returns once no round runs it any more, after its
 * destroy notify. */
G_GNUC_INTERNAL void pleg_health_registry_remove(PlegHealthRegistry *registry, guint id,
                                                 gconstpointer owner);
/* One round, stopping at the first failure (see pleg_host_check_health()). */
G_GNUC_INTERNAL gboolean pleg_health_registry_run(PlegHealthRegistry *registry, PlegHealthKind kind,
                                                  PlegHealthProgressFunc progress,
                                                  gpointer progress_data, char **ret_checker,
                                                  GError **error);
/* Every checker of the round (see pleg_host_check_all()).  (transfer full) */
G_GNUC_INTERNAL GPtrArray *pleg_health_registry_run_all(PlegHealthRegistry *registry,
                                                        PlegHealthKind kind);
/* The checkers' names, comma-separated, in registration order.  (transfer full) */
G_GNUC_INTERNAL char *pleg_health_registry_get_names(PlegHealthRegistry *registry);

/* ---- plugins' statuses (pleg-status.c) ---- */

/* What each plugin last said of itself with set_status (ABI 1.2): a row per plugin, in the
 * order they were added, each with its name, state word, message and the wall-clock time of
 * the last change of state.  One lock, a leaf: plugins set their rows from their threads while
 * anyone reads copies.  Reference-counted like the health registry: a plugin abandoned by the
 * host (its stop never returned) may still set its status after the host is gone. */
typedef struct _PlegStatusBoard PlegStatusBoard;

G_GNUC_INTERNAL PlegStatusBoard *pleg_status_board_new(void);
G_GNUC_INTERNAL PlegStatusBoard *pleg_status_board_ref(PlegStatusBoard *board);
G_GNUC_INTERNAL void pleg_status_board_unref(PlegStatusBoard *board); /* NULL-safe */
/* A row for the plugin @owner, named @name, without a status yet. */
G_GNUC_INTERNAL void pleg_status_board_add(PlegStatusBoard *board, gconstpointer owner,
                                           const char *name);
/* Removes the row of @owner; nothing when it has none. */
G_GNUC_INTERNAL void pleg_status_board_remove(PlegStatusBoard *board, gconstpointer owner);
/* set_status of @owner's plugin (see pleg-plugin.h): FALSE, changing nothing, when @state is
 * not a valid state word.  Without a row of @owner (removed), nothing. */
G_GNUC_INTERNAL gboolean pleg_status_board_set(PlegStatusBoard *board, gconstpointer owner,
                                               const char *state, const char *message);
/* Forgets @owner's status; its row stays. */
G_GNUC_INTERNAL void pleg_status_board_clear(PlegStatusBoard *board, gconstpointer owner);
/* Copies of the rows with a status, in order; with @name, only that plugin's.
 * (transfer full) (element-type PlegPluginStatus) */
G_GNUC_INTERNAL GPtrArray *pleg_status_board_list(PlegStatusBoard *board, const char *name);

/* ---- the services table (pleg-services.c) ---- */

/* The services that each host gives its own way; pleg_services_init() puts them in the table
 * as they are.  Their PlegPluginHost points at the host's PlegServiceHost. */
typedef struct {
    gboolean (*feature_enabled)(PlegPluginHost *host, const char *gate);
    int (*request_relist)(PlegPluginHost *host, const char *pod_uid, PlegPluginRelistSource source);
    const char *(*get_runtime_endpoint)(PlegPluginHost *host);
    PlegContainerEventStream *(*container_events_open)(PlegPluginHost *host, GError **error);
    /* (nullable) sees each of the plugin's log records, GLIB_DOMAIN and PRIORITY filled in,
     * before GLib does. */
    void (*log_record)(PlegPluginHost *host, GLogLevelFlags level, const GLogField *fields,
                       gsize n_fields);
} PlegServiceHostFuncs;

/* What a plugin's PlegPluginHost points at: the first member of the host's state for that
 * plugin.  The other services use these fields: the plugin's context (get_main_context), the
 * registry its metrics go to, the registry its health checkers go to (as liveness checkers
 * owned by this PlegServiceHost; check_health is the registry's liveness round), the
 * GLIB_DOMAIN of log records that name none, and the board its status goes to (the row owned
 * by this PlegServiceHost, which the host adds). */
typedef struct {
    const PlegServiceHostFuncs *funcs;
    GMainContext *context;
    PlegMetricsRegistry *metrics;
    PlegHealthRegistry *health;
    const char *log_domain;
    PlegStatusBoard *status;
} PlegServiceHost;

/* Fills @services, ABI minor PLEG_PLUGIN_ABI_MINOR, for the plugin whose host is @base. */
G_GNUC_INTERNAL void pleg_services_init(PlegHostServices *services, PlegServiceHost *base);

G_END_DECLS
