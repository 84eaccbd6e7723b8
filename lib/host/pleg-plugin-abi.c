/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plugin ABI 1.0 layout, frozen: a change that moves a slot of PlegPluginDescriptor or
 * PlegHostServices or renumbers a relist source no longer builds.
 * A new minor adds slots by taking them from the reserved arrays, so every assertion below stays
 * true for as long as major 1 lives; add the new minor's slots here when it is released.
 */
#include "pleg-plugin-abi.h"

#include "pleg/pleg-cri-client.h"
#include "pleg/pleg-generic.h"

#define ASSERT_SLOT(type, member, offset) G_STATIC_ASSERT(G_STRUCT_OFFSET(type, member) == (offset))

#if GLIB_SIZEOF_VOID_P == 8

ASSERT_SLOT(PlegPluginDescriptor, abi_major, 0);
ASSERT_SLOT(PlegPluginDescriptor, abi_minor, 4);
ASSERT_SLOT(PlegPluginDescriptor, size, 8);
ASSERT_SLOT(PlegPluginDescriptor, name, 16);
ASSERT_SLOT(PlegPluginDescriptor, description, 24);
ASSERT_SLOT(PlegPluginDescriptor, feature_gate, 32);
ASSERT_SLOT(PlegPluginDescriptor, init, 40);
ASSERT_SLOT(PlegPluginDescriptor, start, 48);
ASSERT_SLOT(PlegPluginDescriptor, stop, 56);
ASSERT_SLOT(PlegPluginDescriptor, free, 64);
ASSERT_SLOT(PlegPluginDescriptor, reserved, 72);
G_STATIC_ASSERT(sizeof(PlegPluginDescriptor) == 72 + 16 * 8);
G_STATIC_ASSERT(PLEG_PLUGIN_DESCRIPTOR_SIZE_1_0 == 72);

ASSERT_SLOT(PlegHostServices, size, 0);
ASSERT_SLOT(PlegHostServices, abi_minor, 4);
ASSERT_SLOT(PlegHostServices, host, 8);
ASSERT_SLOT(PlegHostServices, get_main_context, 16);
ASSERT_SLOT(PlegHostServices, feature_enabled, 24);
ASSERT_SLOT(PlegHostServices, request_relist, 32);
ASSERT_SLOT(PlegHostServices, metric_register, 40);
ASSERT_SLOT(PlegHostServices, metric_add, 48);
ASSERT_SLOT(PlegHostServices, metric_set, 56);
ASSERT_SLOT(PlegHostServices, metric_observe, 64);
ASSERT_SLOT(PlegHostServices, add_health_checker, 72);
ASSERT_SLOT(PlegHostServices, remove_health_checker, 80);
ASSERT_SLOT(PlegHostServices, check_health, 88);
ASSERT_SLOT(PlegHostServices, log, 96);
ASSERT_SLOT(PlegHostServices, get_runtime_endpoint, 104);
ASSERT_SLOT(PlegHostServices, container_events_open, 112);
ASSERT_SLOT(PlegHostServices, container_events_read, 120);
ASSERT_SLOT(PlegHostServices, container_events_cancel, 128);
ASSERT_SLOT(PlegHostServices, container_events_free, 136);
ASSERT_SLOT(PlegHostServices, container_event_free, 144);
G_STATIC_ASSERT(PLEG_HOST_SERVICES_SIZE_1_0 == 152);
/* ABI 1.1 */
ASSERT_SLOT(PlegHostServices, check_health_progress, 152);
/* ABI 1.2 */
ASSERT_SLOT(PlegHostServices, set_status, 160);
ASSERT_SLOT(PlegHostServices, reserved, 168);
G_STATIC_ASSERT(sizeof(PlegHostServices) == 168 + 22 * 8);

#endif

/* Plugins pass these numbers through request_relist as the Generic PLEG's own sources. */
G_STATIC_ASSERT((int)PLEG_PLUGIN_RELIST_SOURCE_EVENTED_PLEG == (int)PLEG_RELIST_SOURCE_EVENTED_PLEG);
G_STATIC_ASSERT((int)PLEG_PLUGIN_RELIST_SOURCE_POST_SYNC == (int)PLEG_RELIST_SOURCE_POST_SYNC);
G_STATIC_ASSERT((int)PLEG_PLUGIN_RELIST_SOURCE_POST_ALLOCATION ==
                (int)PLEG_RELIST_SOURCE_POST_ALLOCATION);

/* The CRI error domain's name, which plugins compare with, is PLEG_PLUGIN_CRI_ERROR_DOMAIN itself:
 * lib/cri/cri-channel.c makes the quark from that macro. */
