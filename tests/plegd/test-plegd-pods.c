/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GET /pods against cri-sim: what plegd believes, from its pod cache.  Pods with containers in
 * each state show their names, IPs, sandboxes, states, exit codes, reasons and times; the
 * namespace filter selects (one value or several, OR); a bad or unknown parameter is 400 naming
 * it; HEAD has the headers only; a pod or container removed from the runtime leaves the answer;
 * a pod whose inspection fails is listed with the error.  Every wait polls /pods to a deadline.
 */
#include <json-glib/json-glib.h>
#include <signal.h>
#include <stdlib.h>

#include "cri-sim.h"
#include "plegd-runner.h"

/* 2026-01-01T00:00:00Z and the times of the pods made here, counted from it. */
#define T0_NS G_GINT64_CONSTANT(1767225600000000000)

/* gRPC's INTERNAL. */
#define GRPC_INTERNAL 13

typedef struct {
    char *dir;
    CriSim *sim;
    char *endpoint_arg;
    PlegdRunner *plegd;
    char *base;
} Fixture;

static Fixture fixture;

static gint64
deadline(void)
{
    return g_get_monotonic_time() + (g_getenv("PLEGD_TEST_WRAPPER") ? 120 : 30) * G_USEC_PER_SEC;
}

static void
setup(void)
{
    g_autofree char *path = NULL;
    g_autoptr(GError) error = NULL;

    fixture.dir = make_tmpdir();
    path = g_build_filename(fixture.dir, "cri.sock", NULL);
    fixture.sim = cri_sim_new(path, &error);
    ck_assert_msg(fixture.sim, "%s", error ? error->message : "");
    fixture.endpoint_arg = g_strdup_printf("--container-runtime-endpoint=unix://%s", path);
    fixture.plegd = plegd_runner_spawn(NULL, fixture.endpoint_arg, "--relist-period=100ms",
                                       "--metrics-bind-address=127.0.0.1:0");
    /* /pods on the socket: over TCP it answers 403 (test-plegd-security). */
    fixture.base = plegd_runner_get_api_url(fixture.plegd);
}

static void
teardown(void)
{
    g_clear_pointer(&fixture.plegd, plegd_runner_free);
    g_clear_pointer(&fixture.sim, cri_sim_free);
    g_clear_pointer(&fixture.base, g_free);
    remove_tmpdir(fixture.dir);
    g_clear_pointer(&fixture.dir, g_free);
    g_clear_pointer(&fixture.endpoint_arg, g_free);
}

/* ---- the runtime's side ---- */

static void
add_pod(const CriSimPodSpec *spec)
{
    g_autoptr(GError) error = NULL;

    ck_assert_msg(cri_sim_add_pod_full(fixture.sim, spec, NULL, &error), "%s",
                  error ? error->message : "");
}

static void
add_container(const CriSimContainerSpec *spec)
{
    g_autoptr(GError) error = NULL;

    ck_assert_msg(cri_sim_add_container_full(fixture.sim, spec, NULL, &error), "%s",
                  error ? error->message : "");
}

/* A ready pod @uid named @ns/@name with one running container "app" (id "@uid-app"). */
static void
add_running_pod(const char *uid, const char *ns, const char *name)
{
    g_autofree char *id = g_strconcat(uid, "-app", NULL);
    CriSimPodSpec pod = {.uid = uid, .namespace_ = ns, .name = name};
    CriSimContainerSpec container = {
        .id = id, .pod_uid = uid, .name = "app", .state = CRI_SIM_CONTAINER_RUNNING};

    add_pod(&pod);
    add_container(&container);
}

/* ---- plegd's side ---- */

/* GET (or HEAD) /pods@query: the status; the body and its type when asked. */
static guint
request_pods(const char *method, const char *query, char **ret_body, char **ret_type)
{
    g_autofree char *url = g_strconcat(fixture.base, "/pods", query, NULL);

    return http_request(method, url, ret_body, ret_type);
}

static JsonNode *
get_pods(const char *query)
{
    g_autofree char *body = NULL;
    g_autofree char *type = NULL;
    g_autoptr(JsonParser) parser = json_parser_new();
    g_autoptr(GError) error = NULL;
    guint status = request_pods("GET", query, &body, &type);

    ck_assert_msg(status == 200, "GET /pods%s: %u %s", query, status, body);
    ck_assert_str_eq(type, "application/json");
    ck_assert_msg(g_str_has_suffix(body, "}\n"), "%s", body);
    ck_assert_msg(json_parser_load_from_data(parser, body, -1, &error), "%s: %s", error->message,
                  body);
    ck_assert(JSON_NODE_HOLDS_OBJECT(json_parser_get_root(parser)));
    return json_node_copy(json_parser_get_root(parser));
}

static JsonArray *
pods_of(JsonNode *root)
{
    JsonObject *object = json_node_get_object(root);

    ck_assert(json_object_has_member(object, "pods"));
    return json_object_get_array_member(object, "pods");
}

static const char *
string_or_dash(JsonObject *object, const char *name)
{
    if (!json_object_has_member(object, name) || json_object_get_null_member(object, name))
        return "-";
    return json_object_get_string_member(object, name);
}

/* g_ptr_array_sort() hands pointers to the elements. */
static int
compare_strings(gconstpointer a, gconstpointer b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* One line per pod: "NS/NAME UID ips=A,B sb=ID:STATE:ATTEMPT c=NAME:STATE[:EXIT[:REASON]] ...",
 * containers sorted by name; "NS/NAME UID error" for a pod whose inspection failed. */
static char *
summarize(JsonNode *root)
{
    JsonArray *pods = pods_of(root);
    g_autoptr(GString) text = g_string_new(NULL);

    for (guint i = 0; i < json_array_get_length(pods); i++) {
        JsonObject *pod = json_array_get_object_element(pods, i);
        JsonArray *ips = json_object_get_array_member(pod, "ips");
        JsonArray *sandboxes = json_object_get_array_member(pod, "sandboxes");
        JsonArray *containers = json_object_get_array_member(pod, "containers");
        g_autoptr(GPtrArray) lines = g_ptr_array_new_with_free_func(g_free);

        if (json_object_has_member(pod, "error")) {
            g_string_append_printf(text, "%s/%s %s error\n", string_or_dash(pod, "namespace"),
                                   string_or_dash(pod, "name"), string_or_dash(pod, "uid"));
            continue;
        }
        g_string_append_printf(text, "%s/%s %s ips=", string_or_dash(pod, "namespace"),
                               string_or_dash(pod, "name"), string_or_dash(pod, "uid"));
        for (guint j = 0; j < json_array_get_length(ips); j++)
            g_string_append_printf(text, "%s%s", j ? "," : "",
                                   json_array_get_string_element(ips, j));
        for (guint j = 0; j < json_array_get_length(sandboxes); j++) {
            JsonObject *sandbox = json_array_get_object_element(sandboxes, j);

            g_string_append_printf(text, " sb=%s:%s:%" G_GINT64_FORMAT,
                                   json_object_get_string_member(sandbox, "id"),
                                   json_object_get_string_member(sandbox, "state"),
                                   json_object_get_int_member(sandbox, "attempt"));
        }
        for (guint j = 0; j < json_array_get_length(containers); j++) {
            JsonObject *container = json_array_get_object_element(containers, j);
            GString *line = g_string_new(NULL);

            g_string_append_printf(line, " c=%s:%s", string_or_dash(container, "name"),
                                   json_object_get_string_member(container, "state"));
            if (json_object_has_member(container, "exit_code"))
                g_string_append_printf(line, ":%" G_GINT64_FORMAT,
                                       json_object_get_int_member(container, "exit_code"));
            if (json_object_has_member(container, "reason"))
                g_string_append_printf(line, ":%s",
                                       json_object_get_string_member(container, "reason"));
            g_ptr_array_add(lines, g_string_free(line, FALSE));
        }
        g_ptr_array_sort(lines, compare_strings);
        for (guint j = 0; j < lines->len; j++)
            g_string_append(text, lines->pdata[j]);
        g_string_append_c(text, '\n');
    }
    return g_string_free(g_steal_pointer(&text), FALSE);
}

/* Polls GET /pods@query until its summary is @expected; returns the document. */
static JsonNode *
wait_pods(const char *query, const char *expected)
{
    gint64 end = deadline();

    for (;;) {
        g_autoptr(JsonNode) root = get_pods(query);
        g_autofree char *summary = summarize(root);

        if (g_str_equal(summary, expected))
            return g_steal_pointer(&root);
        ck_assert_msg(g_get_monotonic_time() < end,
                      "GET /pods%s never showed:\n%s\nlast answer:\n%s", query, expected, summary);
        g_usleep(20 * 1000);
    }
}

static JsonObject *
find_pod(JsonNode *root, const char *uid)
{
    JsonArray *pods = pods_of(root);

    for (guint i = 0; i < json_array_get_length(pods); i++) {
        JsonObject *pod = json_array_get_object_element(pods, i);

        if (g_str_equal(json_object_get_string_member(pod, "uid"), uid))
            return pod;
    }
    ck_abort_msg("no pod %s", uid);
    return NULL;
}

static JsonObject *
find_container(JsonObject *pod, const char *name)
{
    JsonArray *containers = json_object_get_array_member(pod, "containers");

    for (guint i = 0; i < json_array_get_length(containers); i++) {
        JsonObject *container = json_array_get_object_element(containers, i);

        if (g_str_equal(string_or_dash(container, "name"), name))
            return container;
    }
    ck_abort_msg("no container %s", name);
    return NULL;
}

/* An RFC 3339 time that GLib reads. */
static void
assert_time(JsonObject *object, const char *name)
{
    const char *text = json_object_get_string_member(object, name);
    g_autoptr(GDateTime) time = text ? g_date_time_new_from_iso8601(text, NULL) : NULL;

    ck_assert_msg(time != NULL, "%s is not an RFC 3339 time: %s", name, text ? text : "(none)");
}

/* plegd exits cleanly (under $PLEGD_TEST_WRAPPER: without a leak or a memory error). */
static void
stop_plegd(void)
{
    ck_assert_int_eq(plegd_runner_stop(fixture.plegd, SIGTERM), 0);
}

/* ---- the tests ---- */

START_TEST(test_pods_states)
{
    CriSimPodSpec web = {.uid = "u-web",
                         .namespace_ = "shop",
                         .name = "web",
                         .attempt = 2,
                         .ip = "10.1.0.5",
                         .additional_ip = "fd00::5",
                         .created_at_ns = T0_NS + 1};
    CriSimPodSpec db = {.uid = "u-db", .namespace_ = "default", .name = "db", .not_ready = TRUE};
    CriSimContainerSpec containers[] = {
        {.id = "web-init",
         .pod_uid = "u-web",
         .name = "init",
         .state = CRI_SIM_CONTAINER_EXITED,
         .exit_code = 0,
         .reason = "Completed",
         .created_at_ns = T0_NS + 2,
         .started_at_ns = T0_NS + 3,
         .finished_at_ns = T0_NS + 4},
        {.id = "web-nginx",
         .pod_uid = "u-web",
         .name = "nginx",
         .image = "nginx:1.27",
         .attempt = 1,
         .state = CRI_SIM_CONTAINER_RUNNING,
         .created_at_ns = T0_NS + 5,
         .started_at_ns = T0_NS + 6 * G_GINT64_CONSTANT(1000000000)},
        {.id = "web-sidecar",
         .pod_uid = "u-web",
         .name = "sidecar",
         .state = CRI_SIM_CONTAINER_CREATED,
         .created_at_ns = T0_NS + 7},
        {.id = "web-probe",
         .pod_uid = "u-web",
         .name = "probe",
         .state = CRI_SIM_CONTAINER_EXITED,
         .exit_code = 137,
         .reason = "OOMKilled",
         .created_at_ns = T0_NS + 8,
         .finished_at_ns = T0_NS + 9},
        {.id = "web-ghost",
         .pod_uid = "u-web",
         .name = "ghost",
         .state = CRI_SIM_CONTAINER_UNKNOWN},
        {.id = "db-pg",
         .pod_uid = "u-db",
         .name = "pg",
         .state = CRI_SIM_CONTAINER_EXITED,
         .exit_code = 1,
         .reason = "Error"},
    };
    g_autoptr(JsonNode) root = NULL;
    JsonObject *pod, *sandbox, *container;
    JsonArray *ips, *sandboxes;

    add_pod(&web);
    add_pod(&db);
    for (guint i = 0; i < G_N_ELEMENTS(containers); i++)
        add_container(&containers[i]);
    add_running_pod("u-cart", "shop", "cart");

    /* Sorted by namespace, then name. */
    root = wait_pods("", "default/db u-db ips= sb=sb-u-db:notready:0 c=pg:exited:1:Error\n"
                         "shop/cart u-cart ips= sb=sb-u-cart:ready:0 c=app:running\n"
                         "shop/web u-web ips=10.1.0.5,fd00::5 sb=sb-u-web:ready:2"
                         " c=ghost:unknown c=init:exited:0:Completed c=nginx:running"
                         " c=probe:exited:137:OOMKilled c=sidecar:created\n");
    assert_time(json_node_get_object(root), "relisted_at");

    pod = find_pod(root, "u-web");
    assert_time(pod, "observed_at");
    ck_assert(!json_object_has_member(pod, "error"));
    ips = json_object_get_array_member(pod, "ips");
    ck_assert_uint_eq(json_array_get_length(ips), 2);
    sandboxes = json_object_get_array_member(pod, "sandboxes");
    ck_assert_uint_eq(json_array_get_length(sandboxes), 1);
    sandbox = json_array_get_object_element(sandboxes, 0);
    ck_assert_str_eq(json_object_get_string_member(sandbox, "created_at"),
                     "2026-01-01T00:00:00.000000001Z");

    container = find_container(pod, "nginx");
    ck_assert_str_eq(json_object_get_string_member(container, "id"), "web-nginx");
    ck_assert_str_eq(json_object_get_string_member(container, "image"), "nginx:1.27");
    ck_assert_int_eq(json_object_get_int_member(container, "attempt"), 1);
    ck_assert_str_eq(json_object_get_string_member(container, "created_at"),
                     "2026-01-01T00:00:00.000000005Z");
    ck_assert_str_eq(json_object_get_string_member(container, "started_at"),
                     "2026-01-01T00:00:06Z");
    /* Running: no exit code, reason or end. */
    ck_assert(!json_object_has_member(container, "exit_code"));
    ck_assert(!json_object_has_member(container, "reason"));
    ck_assert(!json_object_has_member(container, "finished_at"));

    container = find_container(pod, "init");
    ck_assert_int_eq(json_object_get_int_member(container, "exit_code"), 0);
    ck_assert_str_eq(json_object_get_string_member(container, "started_at"),
                     "2026-01-01T00:00:00.000000003Z");
    ck_assert_str_eq(json_object_get_string_member(container, "finished_at"),
                     "2026-01-01T00:00:00.000000004Z");
    ck_assert_str_eq(json_object_get_string_member(container, "image"),
                     "docker.io/library/busybox:latest");

    container = find_container(pod, "probe");
    ck_assert_int_eq(json_object_get_int_member(container, "exit_code"), 137);
    ck_assert_str_eq(json_object_get_string_member(container, "reason"), "OOMKilled");
    ck_assert_str_eq(json_object_get_string_member(container, "finished_at"),
                     "2026-01-01T00:00:00.000000009Z");

    /* Created, never started: neither a start nor an exit. */
    container = find_container(pod, "sidecar");
    ck_assert(!json_object_has_member(container, "started_at"));
    ck_assert(!json_object_has_member(container, "exit_code"));
    ck_assert_str_eq(json_object_get_string_member(container, "created_at"),
                     "2026-01-01T00:00:00.000000007Z");

    /* A not-ready sandbox without an address. */
    pod = find_pod(root, "u-db");
    ck_assert_uint_eq(json_array_get_length(json_object_get_array_member(pod, "ips")), 0);
    container = find_container(pod, "pg");
    assert_time(container, "finished_at");

    stop_plegd();
}
END_TEST

START_TEST(test_pods_namespace_filter)
{
    g_autoptr(JsonNode) all = NULL, alpha = NULL, two = NULL, none = NULL, escaped = NULL;

    add_running_pod("u-a1", "alpha", "one");
    add_running_pod("u-a2", "alpha", "two");
    add_running_pod("u-b1", "beta", "one");
    add_running_pod("u-c1", "gamma", "one");
    all = wait_pods("", "alpha/one u-a1 ips= sb=sb-u-a1:ready:0 c=app:running\n"
                        "alpha/two u-a2 ips= sb=sb-u-a2:ready:0 c=app:running\n"
                        "beta/one u-b1 ips= sb=sb-u-b1:ready:0 c=app:running\n"
                        "gamma/one u-c1 ips= sb=sb-u-c1:ready:0 c=app:running\n");

    alpha = wait_pods("?namespace=alpha", "alpha/one u-a1 ips= sb=sb-u-a1:ready:0 c=app:running\n"
                                          "alpha/two u-a2 ips= sb=sb-u-a2:ready:0 c=app:running\n");
    /* Repeated: any of them. */
    two = wait_pods("?namespace=gamma&namespace=alpha",
                    "alpha/one u-a1 ips= sb=sb-u-a1:ready:0 c=app:running\n"
                    "alpha/two u-a2 ips= sb=sb-u-a2:ready:0 c=app:running\n"
                    "gamma/one u-c1 ips= sb=sb-u-c1:ready:0 c=app:running\n");
    none = wait_pods("?namespace=delta", "");
    ck_assert_uint_eq(json_array_get_length(pods_of(none)), 0);
    /* Escapes decode as a form's do. */
    escaped =
        wait_pods("?namesp%61ce=b%65ta", "beta/one u-b1 ips= sb=sb-u-b1:ready:0 c=app:running\n");

    stop_plegd();
}
END_TEST

START_TEST(test_pods_bad_requests)
{
    g_autofree char *body = NULL;
    g_autofree char *type = NULL;
    g_autoptr(GString) many = g_string_new("?");

    ck_assert_uint_eq(request_pods("GET", "?nmespace=shop", &body, &type), 400);
    ck_assert_str_eq(type, "text/plain; charset=utf-8");
    ck_assert_msg(strstr(body, "unknown query parameter \"nmespace\" (/pods takes namespace)"),
                  "%s", body);
    g_clear_pointer(&body, g_free);

    ck_assert_uint_eq(request_pods("GET", "?namespace=shop&since=1", &body, NULL), 400);
    ck_assert_msg(strstr(body, "unknown query parameter \"since\""), "%s", body);
    g_clear_pointer(&body, g_free);

    ck_assert_uint_eq(request_pods("GET", "?namespace=", &body, NULL), 400);
    ck_assert_msg(strstr(body, "invalid namespace \"\": empty"), "%s", body);
    g_clear_pointer(&body, g_free);

    /* %00 would cut the value short: refused. */
    ck_assert_uint_eq(request_pods("GET", "?namespace=shop%00x", &body, NULL), 400);
    ck_assert_msg(strstr(body, "malformed query parameter \"namespace=shop%00x\""), "%s", body);
    g_clear_pointer(&body, g_free);

    /* A control character is shown escaped. */
    ck_assert_uint_eq(request_pods("GET", "?%1b%5b2J=1", &body, NULL), 400);
    ck_assert_msg(!strchr(body, '\x1b') && strstr(body, "unknown query parameter \"\\x1b[2J\""),
                  "%s", body);
    g_clear_pointer(&body, g_free);

    for (guint i = 0; i < 65; i++)
        g_string_append_printf(many, "%snamespace=ns%u", i ? "&" : "", i);
    ck_assert_uint_eq(request_pods("GET", many->str, &body, NULL), 400);
    ck_assert_msg(strstr(body, "too many filter values at namespace: at most 64"), "%s", body);
    g_clear_pointer(&body, g_free);

    /* GET and HEAD only, as every path of plegd's. */
    ck_assert_uint_eq(request_pods("POST", "", &body, NULL), 405);
    g_clear_pointer(&body, g_free);

    /* 64 are accepted. */
    g_string_truncate(many, strrchr(many->str, '&') - many->str);
    ck_assert_uint_eq(request_pods("GET", many->str, &body, NULL), 200);

    stop_plegd();
}
END_TEST

START_TEST(test_pods_head)
{
    g_autofree char *body = NULL;
    g_autofree char *type = NULL;
    g_autoptr(JsonNode) root = NULL;

    add_running_pod("u-web", "shop", "web");
    root = wait_pods("", "shop/web u-web ips= sb=sb-u-web:ready:0 c=app:running\n");

    ck_assert_uint_eq(request_pods("HEAD", "", &body, &type), 200);
    ck_assert_str_eq(type, "application/json");
    ck_assert_msg(!body || body[0] == '\0', "a body for HEAD: %s", body);
    g_clear_pointer(&body, g_free);
    g_clear_pointer(&type, g_free);

    /* A bad query is refused for HEAD as for GET. */
    ck_assert_uint_eq(request_pods("HEAD", "?nmespace=shop", &body, &type), 400);
    ck_assert_msg(!body || body[0] == '\0', "a body for HEAD: %s", body);

    stop_plegd();
}
END_TEST

START_TEST(test_pods_removed)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(JsonNode) root = NULL;
    CriSimContainerSpec job = {
        .id = "web-job", .pod_uid = "u-web", .name = "job", .state = CRI_SIM_CONTAINER_EXITED};

    add_running_pod("u-web", "shop", "web");
    add_container(&job);
    add_running_pod("u-cart", "shop", "cart");
    root = wait_pods("", "shop/cart u-cart ips= sb=sb-u-cart:ready:0 c=app:running\n"
                         "shop/web u-web ips= sb=sb-u-web:ready:0 c=app:running"
                         " c=job:exited:0\n");
    g_clear_pointer(&root, json_node_unref);

    /* A container removed leaves its pod. */
    ck_assert_msg(cri_sim_remove_container(fixture.sim, "web-job", &error), "%s", error->message);
    root = wait_pods("", "shop/cart u-cart ips= sb=sb-u-cart:ready:0 c=app:running\n"
                         "shop/web u-web ips= sb=sb-u-web:ready:0 c=app:running\n");
    g_clear_pointer(&root, json_node_unref);

    /* A pod removed leaves the list. */
    ck_assert_msg(cri_sim_remove_pod(fixture.sim, "u-cart", &error), "%s", error->message);
    root = wait_pods("", "shop/web u-web ips= sb=sb-u-web:ready:0 c=app:running\n");

    stop_plegd();
}
END_TEST

/* A pod whose inspection fails is listed, with the error and the names its listing gave, until
 * it succeeds; a namespace filter finds it by them. */
START_TEST(test_pods_inspection_error)
{
    CriSimPodSpec broken = {.uid = "u-broken", .namespace_ = "shop", .name = "broken"};
    g_autoptr(JsonNode) root = NULL;
    JsonObject *pod;
    const char *text;

    add_running_pod("u-web", "shop", "web");
    root = wait_pods("", "shop/web u-web ips= sb=sb-u-web:ready:0 c=app:running\n");
    g_clear_pointer(&root, json_node_unref);

    cri_sim_set_fail(fixture.sim, "PodSandboxStatus", GRPC_INTERNAL, -1);
    add_pod(&broken);
    root = wait_pods("", "shop/broken u-broken error\n"
                         "shop/web u-web ips= sb=sb-u-web:ready:0 c=app:running\n");
    pod = find_pod(root, "u-broken");
    text = json_object_get_string_member(pod, "error");
    ck_assert_msg(text && text[0] != '\0', "an empty error");
    assert_time(pod, "observed_at");
    ck_assert_uint_eq(json_array_get_length(json_object_get_array_member(pod, "containers")), 0);
    g_clear_pointer(&root, json_node_unref);

    root = wait_pods("?namespace=shop", "shop/broken u-broken error\n"
                                        "shop/web u-web ips= sb=sb-u-web:ready:0 c=app:running\n");
    g_clear_pointer(&root, json_node_unref);
    root = wait_pods("?namespace=other", "");
    g_clear_pointer(&root, json_node_unref);

    cri_sim_set_fail(fixture.sim, "PodSandboxStatus", 0, 0);
    root = wait_pods("", "shop/broken u-broken ips= sb=sb-u-broken:ready:0\n"
                         "shop/web u-web ips= sb=sb-u-web:ready:0 c=app:running\n");

    stop_plegd();
}
END_TEST

static Suite *
plegd_pods_suite(void)
{
    Suite *suite = suite_create("plegd-pods");
    TCase *tc = tcase_create("pods");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_pods_states);
    tcase_add_test(tc, test_pods_namespace_filter);
    tcase_add_test(tc, test_pods_bad_requests);
    tcase_add_test(tc, test_pods_head);
    tcase_add_test(tc, test_pods_removed);
    tcase_add_test(tc, test_pods_inspection_error);
    suite_add_tcase(suite, tc);
    return suite;
}

int
main(void)
{
    SRunner *runner = srunner_create(plegd_pods_suite());
    int n_failed;

    srunner_run_all(runner, CK_NORMAL);
    n_failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return n_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
