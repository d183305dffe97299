/* cpu_gate.h - whether an optional CPU kernel may run: the CPU has its
 * instructions and its environment variable does not turn it off ("0").
 * Decided once per process. Private to kernels/. */
#ifndef SOTTO_CPU_GATE_H
#define SOTTO_CPU_GATE_H

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* probe: the CPU feature test (__builtin_cpu_supports takes string literals
 * only, so each kernel writes its own); cached: the kernel's own cache,
 * initialised to -1. */
static inline int sotto_cpu_gate(atomic_int *cached, const char *env, int (*probe)(void)) {
    int v = atomic_load_explicit(cached, memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv(env);
        __builtin_cpu_init();
        v = !(e && !strcmp(e, "0")) && probe();
        atomic_store_explicit(cached, v, memory_order_relaxed);
    }
    return v;
}

#endif
