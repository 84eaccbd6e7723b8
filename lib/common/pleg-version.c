/* SPDX-License-Identifier: Apache-2.0 */
/* The library's version at run time. */
#include "pleg-config.h"

#include <pleg/pleg-util.h>

const char *
pleg_get_version(void)
{
    return PLEG_VERSION;
}
