/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What plegd's HTTP files share (http.c, http-connections.c, http-health.c): the server's and a
 * connection's state, and the calls each makes into the others.  All in the server's context.
 */
#pragma once

#include <json-glib/json-glib.h>
#include <libsoup/soup.h>

#include "plegd.h"

#define TEXT_CONTENT_TYPE "text/plain; charset=utf-8"
#define JSON_CONTENT_TYPE "application/json"

/* accept() failing (at the fd limit the listening socket stays readable) pauses accepting. */
#define ACCEPT_BACKOFF_MIN_MS 100
#define ACCEPT_BACKOFF_MAX_MS 1000

typedef struct _Connection Connection;

/* The health rounds: one of each PlegHealthKind, and /status's, which runs both kinds. */
typedef enum {
    ROUND_LIVENESS = PLEG_HEALTH_LIVENESS,
    ROUND_READINESS = PLEG_HEALTH_READINESS,
    ROUND_STATUS,
    N_ROUNDS,
} RoundKind;

typedef struct {
    char *name;
    PlegdReadinessInfoFunc func;
    gpointer data;
} ReadinessInfo;

struct _PlegdHttp {
    SoupServer *server;
    GSocketListener *listener;
    GCancellable *cancellable;
    GMainContext *context; /* NULL until listening */
    PlegHost *host;
    PlegMetricsRegistry *metrics;
    PlegdEvents *events; /* NULL: no /events */
    gint64 idle_timeout_usec;

    /* The remote address handed to libsoup with each connection (it gives the same object back
     * with every message on it) -> Connection. */
    GHashTable *connections;

    gboolean accepting;
    GSocket *stand_in_peer; /* the other end of the stand-in listener's socket pair */
    GSource *accept_backoff;
    guint backoff_ms;
    guint64 n_accept_errors; /* since the last log line */
    gint64 last_accept_log_usec;

    struct _HealthRound *rounds[N_ROUNDS]; /* by RoundKind: the round running, NULL: none */
    struct _RoundThreads *round_threads; /* shared with the rounds' threads */
    PlegMetric *health_waiters;          /* plegd_health_waiters{endpoint} */
    gboolean stopping;                   /* plegd_http_stop_accepting() was called */
    GPtrArray *readiness_infos; /* ReadinessInfo, plegd_http_add_readiness_info()'s */
    PlegdStatusConfig status_config; /* for /status; its strings owned */
};

struct _Connection {
    PlegdHttp *http;
    GSocketConnection *connection; /* weak: libsoup holds it while it serves it */
    GSocketAddress *remote;
    GSource *timer;      /* the idle deadline; when closing, the end of lingering */
    GSource *idle_watch; /* between requests: whether the client closed (watch_idle()) */
    gint64 last_active_usec;
    gboolean busy;      /* from a request's headers to its answer */
    gboolean closing;   /* shut down, or lingering */
    gboolean streaming; /* answering /events: neither idle nor in the connection pool */
    goffset body_bytes; /* of the current request, when its length is not announced */

    struct _HealthWaiter *waiter; /* a health request waiting for its round, or NULL */

    GIOStream *stolen; /* taken from libsoup to answer a refused request ourselves */
    GSource *linger;
    gsize lingered_bytes;
};

/* http.c */
/* Sets @msg's answer; takes @body. */
void plegd_http_respond(SoupServerMessage *msg, guint status, const char *content_type, char *body);

/* http-connections.c */
void plegd_http_destroy_source(GSource **source);
/* The table's value destroy function (PlegdHttp.connections). */
void plegd_http_connection_free(gpointer data);
void plegd_http_touch(Connection *conn);
Connection *plegd_http_lookup_connection(PlegdHttp *http, SoupServerMessage *msg);
/* Between requests: closes the connection when its client closes its end. */
void plegd_http_watch_idle(Connection *conn);
/* Answers @status without reading the request body, then closes after lingering. */
void plegd_http_refuse(PlegdHttp *http, Connection *conn, SoupServerMessage *msg, guint status);
void plegd_http_accept_next(PlegdHttp *http);

/* http-health.c */
void plegd_http_health_init(PlegdHttp *http);
/* The server is going: rounds still running answer nobody. */
void plegd_http_health_detach(PlegdHttp *http);
void plegd_http_health_clear(PlegdHttp *http);
void plegd_http_handle_livez(PlegdHttp *http, SoupServerMessage *msg);
void plegd_http_handle_readyz(PlegdHttp *http, SoupServerMessage *msg);
/* Its connection is freed: it leaves its round unanswered. */
void plegd_http_health_waiter_lose_connection(struct _HealthWaiter *waiter);
/* It waited @waited_usec: answered 503 through libsoup and out of its round. */
void plegd_http_health_waiter_time_out(struct _HealthWaiter *waiter, gint64 waited_usec);
/* The ReadinessInfo array, freeing its items. */
GPtrArray *plegd_http_readiness_infos_new(void);
void plegd_http_handle_status(PlegdHttp *http, SoupServerMessage *msg);

/* status-http.c */
/* Answers /status from a status round's verdicts (PlegHealthResult), in the server's context. */
void plegd_status_respond(PlegdHttp *http, SoupServerMessage *msg, GPtrArray *liveness,
                          GPtrArray *readiness);

/* pods-http.c: JSON members as plegd writes them.  A string: %NULL is null, bytes that are not
 * UTF-8 become U+FFFD.  A time (Unix ns): RFC 3339, left out when 0 (CRI's "not set"). */
void plegd_json_add_string(JsonBuilder *builder, const char *name, const char *value);
void plegd_json_add_time(JsonBuilder *builder, const char *name, gint64 unix_ns);
