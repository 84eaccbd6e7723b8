/* SPDX-License-Identifier: Apache-2.0 */
/* Sizes of the plugin ABI 1.0 structures up to their reserved slots: what a 1.0 plugin or host
 * must at least provide.  Frozen in pleg-plugin-abi.c; they never change within major 1. */
#pragma once

#include "pleg/pleg-plugin.h"

#define PLEG_PLUGIN_DESCRIPTOR_SIZE_1_0 (9 * GLIB_SIZEOF_VOID_P)
#define PLEG_HOST_SERVICES_SIZE_1_0 (8 + 18 * GLIB_SIZEOF_VOID_P)
