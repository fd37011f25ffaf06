/*
 * fake_rocm_core.c - a stand-in for ROCm's librocm-core.so: the one function
 * amdsmi.amdsmi_get_rocm_version() calls.  FAKE_ROCM_VERSION ("6.4.1" by
 * default) is the version it reports; "fail" makes it answer an error.
 *
 * Build:  gcc -shared -fPIC -O1 -Wl,-soname,librocm-core.so -o librocm-core.so fake_rocm_core.c
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

EXPORT uint32_t getROCmVersion(uint32_t *major, uint32_t *minor, uint32_t *patch) {
    const char *v = getenv("FAKE_ROCM_VERSION");
    unsigned a = 6, b = 4, c = 1;
    if (major == NULL || minor == NULL || patch == NULL) return 1;
    if (v != NULL && *v != '\0') {
        if (strcmp(v, "fail") == 0 || sscanf(v, "%u.%u.%u", &a, &b, &c) != 3) return 1;
    }
    *major = a;
    *minor = b;
    *patch = c;
    return 0;
}
