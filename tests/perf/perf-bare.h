/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The bare client of the benchmarks: the CRI calls libpleg makes, on the gRPC core and
 * protobuf-c alone, for a side-by-side figure.
 */
#pragma once

#include "cri-private.h"

G_BEGIN_DECLS

/* What a global relist asks the runtime when nothing changed: ListPodSandbox and ListContainers,
 * each answer unpacked whole with protobuf-c and freed.  Exits the benchmark with status 2 when a
 * call fails. */
void perf_bare_listing(CriChannel *channel);

G_END_DECLS
