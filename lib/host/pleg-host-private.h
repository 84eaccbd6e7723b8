/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals of the plugin host shared with the test harness (tests/harness/fake-host.c): the
 * CRI GetContainerEvents stream behind the container_events_* services.  Every symbol is cri_*,
 * so libpleg's version script keeps them inside.
 */
#pragma once

#include <pleg/pleg-plugin.h>

#include "cri-private.h"

G_BEGIN_DECLS

/* Starts GetContainerEvents on @channel, waiting for the channel to become ready rather than
 * failing fast; the first read reports whatever went wrong.  (transfer full) */
PlegContainerEventStream *cri_container_events_open(CriChannel *channel, GError **error);
gboolean cri_container_events_read(PlegContainerEventStream *stream, PlegContainerEvent **ret_event,
                                   GError **error);
void cri_container_events_cancel(PlegContainerEventStream *stream);
void cri_container_events_free(PlegContainerEventStream *stream);
void cri_container_event_free(PlegContainerEvent *event);

/* Decodes one wire message.  (transfer full) */
PlegContainerEvent *cri_decode_container_event(const Runtime__V1__ContainerEventResponse *message);

G_END_DECLS
