/* ivec.h - a growable array of token ids, private to the engine's .c files. */
#ifndef SOTTO_IVEC_H
#define SOTTO_IVEC_H

#include "sotto_err.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct ivec {
    int32_t *v;
    int n, cap;
} ivec;

static inline int ivec_push(ivec *a, const int32_t *x, int n) {
    if (a->n + n > a->cap) {
        int cap = a->cap ? a->cap : 256;
        while (cap < a->n + n) cap *= 2;
        int32_t *nv = realloc(a->v, sizeof(int32_t) * (size_t)cap);
        if (!nv) return SOTTO_E_NOMEM;
        a->v = nv;
        a->cap = cap;
    }
    if (n > 0) memcpy(a->v + a->n, x, sizeof(int32_t) * (size_t)n);
    a->n += n;
    return SOTTO_OK;
}

#endif
