/* The library's version (include/dcpvk/version.h is generated from cmake/version.h.in). */
#include "dcpvk/version.h"

const char *dcp_version(void) { return DCPVK_VERSION_STRING; }
