#define _POSIX_C_SOURCE 200809L
#include "blas_env.h"

#include "log.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

const char *sotto_blas_corename(void) {
    const char *s = openblas_get_corename();
    return s ? s : "unknown";
}

void sotto_blas_check_coretype(char **argv) {
#if defined(__x86_64__)
    if (getenv("OPENBLAS_CORETYPE")) return;
    const char *core = sotto_blas_corename();
    static const char *const old[] = {"prescott", "core2", "penryn", "dunnington",
                                      "nehalem",  "atom",  "katmai", "coppermine",
                                      "northwood", "unknown"};
    int is_old = 0;
    for (size_t i = 0; i < sizeof old / sizeof old[0]; i++) is_old |= strcasecmp(core, old[i]) == 0;
    if (!is_old) return;
    __builtin_cpu_init();
    const char *want = NULL;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        want = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        want = "Haswell";
    if (!want) return;
    if (setenv("OPENBLAS_CORETYPE", want, 1) != 0) return;
    SOTTO_DEBUG("OpenBLAS chose %s kernels on a CPU with %s; restarting with OPENBLAS_CORETYPE=%s",
                core, want, want);
    execv("/proc/self/exe", argv);
    /* exec failed: go on with the slow kernels */
    SOTTO_WARN("could not re-execute with OPENBLAS_CORETYPE=%s; BLAS will be slow", want);
#else
    (void)argv;
#endif
}
