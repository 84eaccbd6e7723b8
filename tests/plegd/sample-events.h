/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The events plegd's tests build on the stack (only libpleg allocates real ones), and the names
 * of pod "web" in namespace "shop".
 */
#pragma once

#include <pleg/pleg.h>

/* A death with its exit (7, "Error"), and no names. */
static inline PlegPodLifecycleEvent
sample_died_event(void)
{
    return (PlegPodLifecycleEvent){
        .pod_uid = (char *)"uid-1",
        .type = PLEG_CONTAINER_DIED,
        .container_id = (char *)"c0ffee",
        .relist_source = PLEG_RELIST_SOURCE_POST_SYNC,
        .time_ns = G_GINT64_CONSTANT(1795966735123456789),
        .has_exit = TRUE,
        .exit_code = 7,
        .reason = (char *)"Error",
        .finished_at_ns = G_GINT64_CONSTANT(1795966734900000000),
    };
}

/* Container "nginx", attempt 3, of pod shop/web. */
static inline PlegEventDetails
sample_nginx_details(void)
{
    return (PlegEventDetails){
        .pod_namespace = (char *)"shop",
        .pod_name = (char *)"web",
        .container_name = (char *)"nginx",
        .attempt = 3,
        .image = (char *)"docker.io/library/nginx:1.27",
    };
}

/* The sandbox of pod shop/web, its second (attempt 1), with the name a runtime may give it. */
static inline PlegEventDetails
sample_sandbox_details(void)
{
    return (PlegEventDetails){
        .pod_namespace = (char *)"shop",
        .pod_name = (char *)"web",
        .container_name = (char *)"POD",
        .attempt = 1,
        .sandbox = TRUE,
    };
}
