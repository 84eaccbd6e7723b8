/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the cri-sim tests share (test-cri-sim.c, test-cri-sim-control.c): a cri-sim on a socket
 * of a fresh folder with a CRI channel to it (setup/teardown, a checked fixture), and calls
 * through that channel with their answers asserted.
 */
#pragma once

#include <check.h>

#include "cri-private.h"
#include "cri-sim.h"
#include "api.pb-c.h"

#define TIMEOUT_MS    10000
#define CALL_TIMEOUT  (10 * G_USEC_PER_SEC)
#define STREAM_TIMEOUT (30 * G_USEC_PER_SEC)

extern char *tmpdir;
extern char *sock;
extern CriSim *sim;
extern CriChannel *channel;

void setup(void);
void teardown(void);
void assert_ok(gboolean ok, GError *error);
ProtobufCMessage *call(const char *method, const ProtobufCMessage *request, const ProtobufCMessageDescriptor *response, GError **error);
Runtime__V1__ListPodSandboxResponse *list_pods(const Runtime__V1__PodSandboxFilter *filter);
Runtime__V1__ListContainersResponse *list_containers(const Runtime__V1__ContainerFilter *filter);
Runtime__V1__ContainerStatus *container_status(const char *id, Runtime__V1__ContainerStatusResponse **ret_response);
gboolean version(GError **error);
CriStream *open_stream(void);
void open_streams(CriStream **streams, guint n);
Runtime__V1__ContainerEventResponse *read_event(CriStream *stream);
void assert_event(CriStream *stream, Runtime__V1__ContainerEventType type, const char *id);
void assert_clean_end(CriStream *stream);
void assert_stream_error(CriStream *stream, int code);
