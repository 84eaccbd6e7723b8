/* SPDX-License-Identifier: Apache-2.0 */
#include <stdlib.h>

#include "perf-bare.h"

static ProtobufCMessage *
call(CriChannel *channel, const char *method, const ProtobufCMessage *request,
     const ProtobufCMessageDescriptor *descriptor)
{
    g_autoptr(GError) error = NULL;
    ProtobufCMessage *answer =
        cri_channel_call(channel, method, request, descriptor, 60 * G_USEC_PER_SEC, NULL, &error);

    if (!answer) {
        g_printerr("bare client: %s: %s\n", method, error->message);
        exit(2);
    }
    return answer;
}

void
perf_bare_listing(CriChannel *channel)
{
    Runtime__V1__ListPodSandboxRequest sandboxes = RUNTIME__V1__LIST_POD_SANDBOX_REQUEST__INIT;
    Runtime__V1__ListContainersRequest containers = RUNTIME__V1__LIST_CONTAINERS_REQUEST__INIT;

    cri_message_free(call(channel, "ListPodSandbox", &sandboxes.base,
                          &runtime__v1__list_pod_sandbox_response__descriptor));
    cri_message_free(call(channel, "ListContainers", &containers.base,
                          &runtime__v1__list_containers_response__descriptor));
}
