/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cri-ctl: a small CRI client for test tooling (`cri-ctl --help`), on libpleg's internal CRI
 * transport.  Exit 0 on success, 1 when a CRI call fails ("cri-ctl: <Method>: <message>" on
 * stderr), 2 on a usage error.
 */
#include "pleg-config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pleg/pleg-util.h>

#include "cri-private.h"

#define DEFAULT_ENDPOINT "unix:///run/containerd/containerd.sock"
#define DEFAULT_TIMEOUT  "30s"

#define EXIT_USAGE 2

typedef struct {
    CriChannel *channel;
    gint64 timeout_usec;
} Ctl;

static char *opt_endpoint;
static char *opt_timeout;

static GOptionEntry global_entries[] = {
    {"endpoint", 0, 0, G_OPTION_ARG_STRING, &opt_endpoint,
     "CRI endpoint (default " DEFAULT_ENDPOINT ")", "E"},
    {"timeout", 0, 0, G_OPTION_ARG_STRING, &opt_timeout,
     "Deadline of each call, Go duration (default " DEFAULT_TIMEOUT ")", "DURATION"},
    {NULL},
};

/* ---- helpers ---- */

static int usage_error(const char *format, ...) G_GNUC_PRINTF(1, 2);

static int
usage_error(const char *format, ...)
{
    g_autofree char *message = NULL;
    va_list args;

    va_start(args, format);
    message = g_strdup_vprintf(format, args);
    va_end(args);
    g_printerr("cri-ctl: %s\n", message);
    return EXIT_USAGE;
}

static int
call_failed(const char *method, const GError *error)
{
    g_printerr("cri-ctl: %s: %s\n", method, error->message);
    return EXIT_FAILURE;
}

static gpointer
ctl_call(Ctl *ctl, const char *method, const ProtobufCMessage *request,
         const ProtobufCMessageDescriptor *response_descriptor, GError **error)
{
    return cri_channel_call(ctl->channel, method, request, response_descriptor, ctl->timeout_usec,
                            NULL, error);
}

/* "CONTAINER_RUNNING" -> "RUNNING", "SANDBOX_NOTREADY" -> "NOTREADY". */
static const char *
enum_name(const ProtobufCEnumDescriptor *descriptor, int value, const char *prefix)
{
    const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(descriptor, value);

    if (!v)
        return "UNKNOWN";
    return g_str_has_prefix(v->name, prefix) ? v->name + strlen(prefix) : v->name;
}

/* Connects once the options are known: globals may come before or after the command. */
static gboolean
ctl_setup(Ctl *ctl, GError **error)
{
    const char *timeout = opt_timeout ? opt_timeout : DEFAULT_TIMEOUT;

    if (!pleg_duration_parse(timeout, &ctl->timeout_usec, error)) {
        g_prefix_error(error, "--timeout: ");
        return FALSE;
    }
    if (ctl->timeout_usec <= 0) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "--timeout must be positive, not \"%s\"", timeout);
        return FALSE;
    }
    ctl->channel = cri_channel_new(opt_endpoint ? opt_endpoint : DEFAULT_ENDPOINT, error);
    return ctl->channel != NULL;
}

/* Parses the command's own options plus the global ones, leaves the positional arguments in
 * @argv and connects. */
static gboolean
parse_command_options(Ctl *ctl, const char *command, const char *parameters, GOptionEntry *entries,
                      int *argc, char ***argv, GError **error)
{
    g_autoptr(GOptionContext) context = g_option_context_new(parameters);
    g_autofree char *summary = g_strdup_printf("cri-ctl %s", command);

    g_option_context_set_summary(context, summary);
    if (entries)
        g_option_context_add_main_entries(context, entries, NULL);
    g_option_context_add_main_entries(context, global_entries, NULL);
    return g_option_context_parse(context, argc, argv, error) && ctl_setup(ctl, error);
}

/* kubelet's pod sandbox config for a host-network pod, as far as these tests need it. */
typedef struct {
    Runtime__V1__PodSandboxConfig config;
    Runtime__V1__PodSandboxMetadata metadata;
    Runtime__V1__PodSandboxConfig__LabelsEntry labels[3];
    Runtime__V1__PodSandboxConfig__LabelsEntry *label_pointers[3];
    Runtime__V1__LinuxPodSandboxConfig linux_config;
    Runtime__V1__LinuxSandboxSecurityContext security_context;
    Runtime__V1__NamespaceOption namespaces;
} SandboxConfig;

static void
sandbox_config_init(SandboxConfig *s, const char *name, const char *namespace_, const char *uid)
{
    static const char *const keys[] = {
        "io.kubernetes.pod.uid",
        "io.kubernetes.pod.name",
        "io.kubernetes.pod.namespace",
    };
    const char *values[] = {uid, name, namespace_};

    runtime__v1__pod_sandbox_config__init(&s->config);
    runtime__v1__pod_sandbox_metadata__init(&s->metadata);
    runtime__v1__linux_pod_sandbox_config__init(&s->linux_config);
    runtime__v1__linux_sandbox_security_context__init(&s->security_context);
    runtime__v1__namespace_option__init(&s->namespaces);

    s->metadata.name = (char *)name;
    s->metadata.namespace_ = (char *)namespace_;
    s->metadata.uid = (char *)uid;
    s->metadata.attempt = 0;

    for (gsize i = 0; i < G_N_ELEMENTS(keys); i++) {
        runtime__v1__pod_sandbox_config__labels_entry__init(&s->labels[i]);
        s->labels[i].key = (char *)keys[i];
        s->labels[i].value = (char *)values[i];
        s->label_pointers[i] = &s->labels[i];
    }

    s->namespaces.network = RUNTIME__V1__NAMESPACE_MODE__NODE;
    s->namespaces.pid = RUNTIME__V1__NAMESPACE_MODE__POD;
    s->namespaces.ipc = RUNTIME__V1__NAMESPACE_MODE__POD;
    s->security_context.namespace_options = &s->namespaces;
    s->linux_config.security_context = &s->security_context;

    s->config.metadata = &s->metadata;
    s->config.n_labels = G_N_ELEMENTS(s->labels);
    s->config.labels = s->label_pointers;
    s->config.linux = &s->linux_config;
}

static gboolean
require_pod_flags(const char *command, const char *name_flag, const char *name,
                  const char *namespace_, const char *uid, GError **error)
{
    const char *missing = !name ? name_flag : !namespace_ ? "--namespace" : !uid ? "--uid" : NULL;

    if (missing) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_FAILED, "%s: %s is required", command,
                    missing);
        return FALSE;
    }
    return TRUE;
}

/* ---- commands ---- */

static int
cmd_version(Ctl *ctl, int argc, char **argv)
{
    Runtime__V1__VersionRequest request = RUNTIME__V1__VERSION_REQUEST__INIT;
    g_autoptr(Runtime__V1__VersionResponse) response = NULL;
    g_autoptr(GError) error = NULL;

    if (!parse_command_options(ctl, "version", "", NULL, &argc, &argv, &error))
        return usage_error("%s", error->message);
    if (argc != 1)
        return usage_error("version: unexpected argument \"%s\"", argv[1]);

    request.version = (char *)"0.1.0";
    response =
        ctl_call(ctl, "Version", &request.base, &runtime__v1__version_response__descriptor, &error);
    if (!response)
        return call_failed("Version", error);
    printf("%s %s\n", response->runtime_name, response->runtime_version);
    return EXIT_SUCCESS;
}

static int
cmd_status(Ctl *ctl, int argc, char **argv)
{
    Runtime__V1__StatusRequest request = RUNTIME__V1__STATUS_REQUEST__INIT;
    g_autoptr(Runtime__V1__StatusResponse) response = NULL;
    g_autoptr(GError) error = NULL;

    if (!parse_command_options(ctl, "status", "", NULL, &argc, &argv, &error))
        return usage_error("%s", error->message);
    if (argc != 1)
        return usage_error("status: unexpected argument \"%s\"", argv[1]);

    response =
        ctl_call(ctl, "Status", &request.base, &runtime__v1__status_response__descriptor, &error);
    if (!response)
        return call_failed("Status", error);
    for (size_t i = 0; response->status && i < response->status->n_conditions; i++) {
        const Runtime__V1__RuntimeCondition *c = response->status->conditions[i];

        printf("%s %s %s %s\n", c->type, c->status ? "true" : "false", c->reason, c->message);
    }
    return EXIT_SUCCESS;
}

static int
cmd_runp(Ctl *ctl, int argc, char **argv)
{
    g_autofree char *name = NULL, *namespace_ = NULL, *uid = NULL;
    GOptionEntry entries[] = {
        {"name", 0, 0, G_OPTION_ARG_STRING, &name, "Pod name", "N"},
        {"namespace", 0, 0, G_OPTION_ARG_STRING, &namespace_, "Pod namespace", "NS"},
        {"uid", 0, 0, G_OPTION_ARG_STRING, &uid, "Pod UID", "UID"},
        {NULL},
    };
    Runtime__V1__RunPodSandboxRequest request = RUNTIME__V1__RUN_POD_SANDBOX_REQUEST__INIT;
    g_autoptr(Runtime__V1__RunPodSandboxResponse) response = NULL;
    g_autoptr(GError) error = NULL;
    SandboxConfig config;

    if (!parse_command_options(ctl, "runp", "", entries, &argc, &argv, &error) ||
        !require_pod_flags("runp", "--name", name, namespace_, uid, &error))
        return usage_error("%s", error->message);
    if (argc != 1)
        return usage_error("runp: unexpected argument \"%s\"", argv[1]);

    sandbox_config_init(&config, name, namespace_, uid);
    request.config = &config.config;
    response = ctl_call(ctl, "RunPodSandbox", &request.base,
                        &runtime__v1__run_pod_sandbox_response__descriptor, &error);
    if (!response)
        return call_failed("RunPodSandbox", error);
    printf("%s\n", response->pod_sandbox_id);
    return EXIT_SUCCESS;
}

static int
cmd_create(Ctl *ctl, int argc, char **argv)
{
    g_autofree char *pod_name = NULL, *namespace_ = NULL, *uid = NULL, *name = NULL;
    g_autofree char *image = NULL;
    GOptionEntry entries[] = {
        {"pod-name", 0, 0, G_OPTION_ARG_STRING, &pod_name, "Pod name", "N"},
        {"namespace", 0, 0, G_OPTION_ARG_STRING, &namespace_, "Pod namespace", "NS"},
        {"uid", 0, 0, G_OPTION_ARG_STRING, &uid, "Pod UID", "UID"},
        {"name", 0, 0, G_OPTION_ARG_STRING, &name, "Container name", "CNAME"},
        {"image", 0, 0, G_OPTION_ARG_STRING, &image, "Image", "IMG"},
        {NULL},
    };
    static const char *const label_keys[] = {
        "io.kubernetes.pod.uid",
        "io.kubernetes.pod.name",
        "io.kubernetes.pod.namespace",
        "io.kubernetes.container.name",
    };
    Runtime__V1__CreateContainerRequest request = RUNTIME__V1__CREATE_CONTAINER_REQUEST__INIT;
    Runtime__V1__ContainerConfig config = RUNTIME__V1__CONTAINER_CONFIG__INIT;
    Runtime__V1__ContainerMetadata metadata = RUNTIME__V1__CONTAINER_METADATA__INIT;
    Runtime__V1__ImageSpec image_spec = RUNTIME__V1__IMAGE_SPEC__INIT;
    Runtime__V1__LinuxContainerConfig linux_config = RUNTIME__V1__LINUX_CONTAINER_CONFIG__INIT;
    Runtime__V1__LinuxContainerSecurityContext security_context =
        RUNTIME__V1__LINUX_CONTAINER_SECURITY_CONTEXT__INIT;
    Runtime__V1__NamespaceOption namespaces = RUNTIME__V1__NAMESPACE_OPTION__INIT;
    Runtime__V1__ContainerConfig__LabelsEntry labels[G_N_ELEMENTS(label_keys)];
    Runtime__V1__ContainerConfig__LabelsEntry *label_pointers[G_N_ELEMENTS(label_keys)];
    g_autoptr(Runtime__V1__CreateContainerResponse) response = NULL;
    g_autoptr(GError) error = NULL;
    g_autofree char **options = NULL;
    SandboxConfig sandbox;
    char **command = NULL;
    int n_options = argc;

    /* Everything after "--" is the container's command, never options. */
    for (int i = 1; i < argc; i++) {
        if (g_str_equal(argv[i], "--")) {
            n_options = i;
            command = argv + i + 1;
            break;
        }
    }
    options = g_new0(char *, n_options + 1);
    memcpy(options, argv, n_options * sizeof(char *));
    argc = n_options;
    argv = options;

    if (!parse_command_options(ctl, "create", "SANDBOX_ID -- CMD [ARG...]", entries, &argc, &argv,
                               &error) ||
        !require_pod_flags("create", "--pod-name", pod_name, namespace_, uid, &error))
        return usage_error("%s", error->message);
    if (!name || !image)
        return usage_error("create: %s is required", !name ? "--name" : "--image");
    if (argc != 2)
        return usage_error("create: expected exactly one SANDBOX_ID");
    if (!command || !command[0])
        return usage_error("create: missing the container command after \"--\"");

    sandbox_config_init(&sandbox, pod_name, namespace_, uid);

    metadata.name = name;
    metadata.attempt = 0;
    image_spec.image = image;
    {
        const char *values[] = {uid, pod_name, namespace_, name};

        for (gsize i = 0; i < G_N_ELEMENTS(label_keys); i++) {
            runtime__v1__container_config__labels_entry__init(&labels[i]);
            labels[i].key = (char *)label_keys[i];
            labels[i].value = (char *)values[i];
            label_pointers[i] = &labels[i];
        }
    }
    /* As kubelet does for a host-network pod: node network, pod IPC, own PID namespace. */
    namespaces.network = RUNTIME__V1__NAMESPACE_MODE__NODE;
    namespaces.pid = RUNTIME__V1__NAMESPACE_MODE__CONTAINER;
    namespaces.ipc = RUNTIME__V1__NAMESPACE_MODE__POD;
    security_context.namespace_options = &namespaces;
    linux_config.security_context = &security_context;

    config.metadata = &metadata;
    config.image = &image_spec;
    config.n_command = g_strv_length(command);
    config.command = command;
    config.n_labels = G_N_ELEMENTS(labels);
    config.labels = label_pointers;
    config.linux = &linux_config;

    request.pod_sandbox_id = argv[1];
    request.config = &config;
    request.sandbox_config = &sandbox.config;
    response = ctl_call(ctl, "CreateContainer", &request.base,
                        &runtime__v1__create_container_response__descriptor, &error);
    if (!response)
        return call_failed("CreateContainer", error);
    printf("%s\n", response->container_id);
    return EXIT_SUCCESS;
}

/* start, rm, stopp, rmp: one id, an empty answer. */
static int
simple_id_call(Ctl *ctl, const char *command, const char *method, ProtobufCMessage *request,
               char **id_field, const ProtobufCMessageDescriptor *response_descriptor, int argc,
               char **argv)
{
    g_autoptr(ProtobufCMessage) response = NULL;
    g_autoptr(GError) error = NULL;

    if (!parse_command_options(ctl, command, "ID", NULL, &argc, &argv, &error))
        return usage_error("%s", error->message);
    if (argc != 2)
        return usage_error("%s: expected exactly one ID", command);

    *id_field = argv[1];
    response = ctl_call(ctl, method, request, response_descriptor, &error);
    if (!response)
        return call_failed(method, error);
    return EXIT_SUCCESS;
}

static int
cmd_start(Ctl *ctl, int argc, char **argv)
{
    Runtime__V1__StartContainerRequest request = RUNTIME__V1__START_CONTAINER_REQUEST__INIT;

    return simple_id_call(ctl, "start", "StartContainer", &request.base, &request.container_id,
                          &runtime__v1__start_container_response__descriptor, argc, argv);
}

static int
cmd_rm(Ctl *ctl, int argc, char **argv)
{
    Runtime__V1__RemoveContainerRequest request = RUNTIME__V1__REMOVE_CONTAINER_REQUEST__INIT;

    return simple_id_call(ctl, "rm", "RemoveContainer", &request.base, &request.container_id,
                          &runtime__v1__remove_container_response__descriptor, argc, argv);
}

static int
cmd_stopp(Ctl *ctl, int argc, char **argv)
{
    Runtime__V1__StopPodSandboxRequest request = RUNTIME__V1__STOP_POD_SANDBOX_REQUEST__INIT;

    return simple_id_call(ctl, "stopp", "StopPodSandbox", &request.base, &request.pod_sandbox_id,
                          &runtime__v1__stop_pod_sandbox_response__descriptor, argc, argv);
}

static int
cmd_rmp(Ctl *ctl, int argc, char **argv)
{
    Runtime__V1__RemovePodSandboxRequest request = RUNTIME__V1__REMOVE_POD_SANDBOX_REQUEST__INIT;

    return simple_id_call(ctl, "rmp", "RemovePodSandbox", &request.base, &request.pod_sandbox_id,
                          &runtime__v1__remove_pod_sandbox_response__descriptor, argc, argv);
}

static int
cmd_stop(Ctl *ctl, int argc, char **argv)
{
    gint64 grace = 0;
    GOptionEntry entries[] = {
        {"grace", 0, 0, G_OPTION_ARG_INT64, &grace,
         "Seconds to wait before the runtime kills the container (default 0)", "SECONDS"},
        {NULL},
    };
    Runtime__V1__StopContainerRequest request = RUNTIME__V1__STOP_CONTAINER_REQUEST__INIT;
    g_autoptr(Runtime__V1__StopContainerResponse) response = NULL;
    g_autoptr(GError) error = NULL;

    if (!parse_command_options(ctl, "stop", "CID", entries, &argc, &argv, &error))
        return usage_error("%s", error->message);
    if (argc != 2)
        return usage_error("stop: expected exactly one CID");
    if (grace < 0)
        return usage_error("stop: --grace must not be negative");

    request.container_id = argv[1];
    request.timeout = grace;
    response = ctl_call(ctl, "StopContainer", &request.base,
                        &runtime__v1__stop_container_response__descriptor, &error);
    if (!response)
        return call_failed("StopContainer", error);
    return EXIT_SUCCESS;
}

static int
cmd_ps(Ctl *ctl, int argc, char **argv)
{
    g_autofree char *sandbox_id = NULL;
    GOptionEntry entries[] = {
        {"sandbox", 0, 0, G_OPTION_ARG_STRING, &sandbox_id, "Only this pod sandbox's containers",
         "SID"},
        {NULL},
    };
    Runtime__V1__ListContainersRequest request = RUNTIME__V1__LIST_CONTAINERS_REQUEST__INIT;
    Runtime__V1__ContainerFilter filter = RUNTIME__V1__CONTAINER_FILTER__INIT;
    g_autoptr(Runtime__V1__ListContainersResponse) response = NULL;
    g_autoptr(GError) error = NULL;

    if (!parse_command_options(ctl, "ps", "", entries, &argc, &argv, &error))
        return usage_error("%s", error->message);
    if (argc != 1)
        return usage_error("ps: unexpected argument \"%s\"", argv[1]);

    if (sandbox_id) {
        filter.pod_sandbox_id = sandbox_id;
        request.filter = &filter;
    }
    response = ctl_call(ctl, "ListContainers", &request.base,
                        &runtime__v1__list_containers_response__descriptor, &error);
    if (!response)
        return call_failed("ListContainers", error);
    for (size_t i = 0; i < response->n_containers; i++) {
        const Runtime__V1__Container *c = response->containers[i];

        printf("%s %s %s %s\n", c->id,
               enum_name(&runtime__v1__container_state__descriptor, c->state, "CONTAINER_"),
               c->pod_sandbox_id, c->metadata ? c->metadata->name : "");
    }
    return EXIT_SUCCESS;
}

static int
cmd_pods(Ctl *ctl, int argc, char **argv)
{
    Runtime__V1__ListPodSandboxRequest request = RUNTIME__V1__LIST_POD_SANDBOX_REQUEST__INIT;
    g_autoptr(Runtime__V1__ListPodSandboxResponse) response = NULL;
    g_autoptr(GError) error = NULL;

    if (!parse_command_options(ctl, "pods", "", NULL, &argc, &argv, &error))
        return usage_error("%s", error->message);
    if (argc != 1)
        return usage_error("pods: unexpected argument \"%s\"", argv[1]);

    response = ctl_call(ctl, "ListPodSandbox", &request.base,
                        &runtime__v1__list_pod_sandbox_response__descriptor, &error);
    if (!response)
        return call_failed("ListPodSandbox", error);
    for (size_t i = 0; i < response->n_items; i++) {
        const Runtime__V1__PodSandbox *s = response->items[i];

        printf("%s %s %s %s\n", s->id,
               enum_name(&runtime__v1__pod_sandbox_state__descriptor, s->state, "SANDBOX_"),
               s->metadata ? s->metadata->uid : "", s->metadata ? s->metadata->name : "");
    }
    return EXIT_SUCCESS;
}

static int
cmd_inspect(Ctl *ctl, int argc, char **argv)
{
    Runtime__V1__ContainerStatusRequest request = RUNTIME__V1__CONTAINER_STATUS_REQUEST__INIT;
    g_autoptr(Runtime__V1__ContainerStatusResponse) response = NULL;
    g_autoptr(GError) error = NULL;
    const Runtime__V1__ContainerStatus *status;

    if (!parse_command_options(ctl, "inspect", "CID", NULL, &argc, &argv, &error))
        return usage_error("%s", error->message);
    if (argc != 2)
        return usage_error("inspect: expected exactly one CID");

    request.container_id = argv[1];
    response = ctl_call(ctl, "ContainerStatus", &request.base,
                        &runtime__v1__container_status_response__descriptor, &error);
    if (!response)
        return call_failed("ContainerStatus", error);
    status = response->status;
    if (!status) {
        g_printerr("cri-ctl: ContainerStatus: %s: ContainerStatus: the runtime answered without "
                   "a status\n",
                   cri_channel_get_endpoint(ctl->channel));
        return EXIT_FAILURE;
    }
    printf("state=%s exit_code=%d reason=%s finished_at=%" G_GINT64_FORMAT "\n",
           enum_name(&runtime__v1__container_state__descriptor, status->state, "CONTAINER_"),
           status->exit_code, status->reason, (gint64)status->finished_at);
    return EXIT_SUCCESS;
}

static int
cmd_events(Ctl *ctl, int argc, char **argv)
{
    gint count = 0;
    GOptionEntry entries[] = {
        {"count", 0, 0, G_OPTION_ARG_INT, &count, "Stop after this many events (default: never)",
         "N"},
        {NULL},
    };
    Runtime__V1__GetEventsRequest request = RUNTIME__V1__GET_EVENTS_REQUEST__INIT;
    g_autoptr(CriStream) stream = NULL;
    g_autoptr(GError) error = NULL;

    if (!parse_command_options(ctl, "events", "", entries, &argc, &argv, &error))
        return usage_error("%s", error->message);
    if (argc != 1)
        return usage_error("events: unexpected argument \"%s\"", argv[1]);

    stream = cri_stream_start(ctl->channel, "GetContainerEvents", &request.base,
                              &runtime__v1__container_event_response__descriptor, ctl->timeout_usec,
                              FALSE, &error);
    if (!stream)
        return call_failed("GetContainerEvents", error);

    for (int n = 0; count <= 0 || n < count; n++) {
        g_autoptr(ProtobufCMessage) message = NULL;
        const Runtime__V1__ContainerEventResponse *event;

        if (!cri_stream_read(stream, &message, NULL, &error))
            return call_failed("GetContainerEvents", error);
        if (!message)
            break;
        event = (const Runtime__V1__ContainerEventResponse *)message;
        printf("%s %s %" G_GINT64_FORMAT "\n", event->container_id,
               enum_name(&runtime__v1__container_event_type__descriptor,
                         event->container_event_type, "CONTAINER_"),
               (gint64)event->created_at);
        fflush(stdout);
    }
    return EXIT_SUCCESS;
}

static const struct {
    const char *name;
    int (*run)(Ctl *ctl, int argc, char **argv);
    const char *usage;
} commands[] = {
    {"version", cmd_version,
     "version                                print runtime name and version"},
    {"status", cmd_status, "status                                 print runtime conditions"},
    {"runp", cmd_runp, "runp --name N --namespace NS --uid UID  run a host-network pod sandbox"},
    {"create", cmd_create,
     "create SID --pod-name N --namespace NS --uid UID --name CNAME --image IMG -- CMD [ARG...]"},
    {"start", cmd_start, "start CID"},
    {"stop", cmd_stop, "stop CID [--grace SECONDS]"},
    {"rm", cmd_rm, "rm CID"},
    {"stopp", cmd_stopp, "stopp SID"},
    {"rmp", cmd_rmp, "rmp SID"},
    {"ps", cmd_ps, "ps [--sandbox SID]                     <id> <STATE> <sandbox_id> <name>"},
    {"pods", cmd_pods, "pods                                   <id> <STATE> <uid> <name>"},
    {"inspect", cmd_inspect, "inspect CID                            state, exit code, reason"},
    {"events", cmd_events, "events [--count N]                     GetContainerEvents stream"},
};

int
main(int argc, char **argv)
{
    g_autoptr(GOptionContext) context = g_option_context_new("COMMAND [ARGS]");
    g_autoptr(GString) summary = g_string_new("Commands:");
    g_autoptr(GError) error = NULL;
    Ctl ctl = {0};
    int ret;

    for (gsize i = 0; i < G_N_ELEMENTS(commands); i++)
        g_string_append_printf(summary, "\n  %s", commands[i].usage);
    g_option_context_set_summary(context, summary->str);
    g_option_context_add_main_entries(context, global_entries, NULL);
    /* Stop at the command: what follows belongs to it. */
    g_option_context_set_strict_posix(context, TRUE);
    if (!g_option_context_parse(context, &argc, &argv, &error))
        return usage_error("%s", error->message);
    if (argc < 2)
        return usage_error("missing COMMAND (see --help)");

    for (gsize i = 0; i < G_N_ELEMENTS(commands); i++) {
        if (g_str_equal(argv[1], commands[i].name)) {
            ret = commands[i].run(&ctl, argc - 1, argv + 1);
            fflush(stdout);
            g_clear_pointer(&ctl.channel, cri_channel_unref);
            return ret;
        }
    }

    return usage_error("unknown command \"%s\" (see --help)", argv[1]);
}
