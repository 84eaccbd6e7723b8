/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What plegd's HTTP files share (http.c, http-connections.c, http-health.c): the server's and a
 * connection's state, and the calls each makes into the others.  All in the server's context.
 */
#pragma once

#include <json-glib/json-glib.h>
#include <libsoup/soup.h>
#include <sys/types.h>

#include "plegd.h"

#define TEXT_CONTENT_TYPE "text/plain; charset=utf-8"
#define JSON_CONTENT_TYPE "application/json"

/* accept() failing (at the fd limit the listening socket stays readable) pauses accepting. */
#define ACCEPT_BACKOFF_MIN_MS 100
#define ACCEPT_BACKOFF_MAX_MS 1000

typedef struct _Connection Connection;
typedef struct _PlegdTls PlegdTls;

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
    GSource *accept_later; /* the first accept, or the next after one failed (a backoff) */
    guint backoff_ms;
    guint64 n_accept_errors; /* since the last log line */
    gint64 last_accept_log_usec;

    struct _HealthRound *rounds[N_ROUNDS]; /* by RoundKind: the round running, NULL: none */
    struct _RoundThreads *round_threads; /* shared with the rounds' threads */
    PlegMetric *health_waiters;          /* plegd_health_waiters{endpoint} */
    gboolean stopping;                   /* plegd_http_stop_accepting() was called */
    GPtrArray *readiness_infos; /* ReadinessInfo, plegd_http_add_readiness_info()'s */
    PlegdStatusConfig status_config; /* for /status; its strings owned */

    /* http-listeners.c */
    char *socket_path;                /* NULL: no unix socket */
    dev_t socket_dev;                 /* the socket file plegd made, to remove only that one */
    ino_t socket_ino;
    GSocketAddress *unix_stand_in_local; /* the local address libsoup gets for the socket's */
    PlegdTcpEvents tcp_events;

    PlegdTls *tls; /* http-tls.c; NULL: plain HTTP over TCP */
};

/* Which listener a connection came from. */
typedef enum {
    LISTENER_TCP,  /* --metrics-bind-address, plain HTTP */
    LISTENER_TLS,  /* --metrics-bind-address with --tls-cert-file */
    LISTENER_UNIX, /* --socket */
} ListenerKind;

struct _Connection {
    PlegdHttp *http;
    /* The socket's, and what libsoup serves (@connection or its TLS connection, NULL until
     * the handshake is done); both strong.  libsoup letting go of @stream is seen as its being
     * closed, never as its finalization: a TLS connection's last reference may be dropped by
     * one of glib-networking's threads. */
    GSocketConnection *connection;
    GIOStream *stream;
    GSocketAddress *remote;
    ListenerKind kind;
    char *peer; /* who, for debug logs: "IP:PORT", or the socket's peer credentials */
    GTlsConnection *handshaking;     /* strong while the TLS handshake runs */
    GCancellable *handshake_cancellable;
    GTlsCertificate *client_certificate; /* TLS: the client's, verified; NULL: none */
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
/* Accepts on every listening socket, from the next main loop iteration on: call after each
 * listener is added, before the main loop runs. */
gboolean plegd_http_start_accepting(PlegdHttp *http, GError **error);

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
/* plegd_http_accept_next() when @source (taken) fires. */
void plegd_http_accept_later(PlegdHttp *http, GSource *source);

/* Shuts @conn down, a stream or not: libsoup sees the end of the stream and finishes it. */
void plegd_http_close_connection(Connection *conn, const char *why);

/* http-tls.c */
/* A TLS server connection over @connection with the certificate and client CA in use. */
GTlsConnection *plegd_http_tls_wrap(PlegdHttp *http, GSocketConnection *connection,
                                    GError **error);
/* Why a certificate did not verify, in a few words. */
const char *plegd_http_describe_tls_errors(GTlsCertificateFlags flags);
void plegd_http_tls_clear(PlegdHttp *http);

/* http-listeners.c */
/* "pid=N uid=N gid=N" of the process at the other end of a unix socket (SO_PEERCRED). */
char *plegd_http_describe_unix_peer(GSocket *socket);
/* The local address handed to libsoup with a connection on the socket: libsoup 3.2 takes it
 * for an inet one (the URI of an HTTP/1.0 request without Host). */
GSocketAddress *plegd_http_get_unix_stand_in_local(PlegdHttp *http);
/* Removes the socket file when it is still plegd's. */
void plegd_http_remove_unix_socket(PlegdHttp *http);
/* Whether @conn may GET @path; otherwise @msg is answered 403 with a line saying where it is
 * served. */
gboolean plegd_http_check_access(PlegdHttp *http, Connection *conn, SoupServerMessage *msg,
                                 const char *path);
void plegd_http_socket_clear(PlegdHttp *http);
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
