/* SPDX-License-Identifier: Apache-2.0 */
/* libpleg: include this header to get the whole public API. */
#pragma once

#include <pleg/pleg-types.h>
#include <pleg/pleg-runtime.h>
#include <pleg/pleg-cri-client.h>
#include <pleg/pleg-metrics.h>
#include <pleg/pleg-generic.h>
#include <pleg/pleg-util.h>
#include <pleg/pleg-plugin.h>
#include <pleg/pleg-host.h>
