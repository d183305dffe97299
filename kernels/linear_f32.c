/* linear_f32.c - skinny kernel of f32 weights (the other formats' are in
 * linear_{q8,nf4,nvfp4}.c). In the sanitized build the programs link these
 * four files uninstrumented; see kernels/tile_check.h. */
#include "linear_internal.h"
#include "tile_check.h"

#include <stdlib.h>
#include <string.h>

/* Chunk c (32 columns) of weight row `row` as two vectors. The shared tile
 * (linear_internal.h) dots each 4 weight rows with up to 4 rows of x at a
 * time, so a beam's rows reuse every weight load from registers. */
static inline __attribute__((always_inline)) void decode_f32(const sotto_wmat *w, size_t row,
                                                             int c, sotto_v16f *wv) {
    const float *p = (const float *)w->data + row * (size_t)w->cols + (size_t)c * 32;
    wv[0] = sotto_load16(p);
    wv[1] = sotto_load16(p + 16);
}

SOTTO__SKINNY_TILE(tile_f32, decode_f32, 2)
SOTTO__SKINNY_DRIVER(sotto__skinny_f32, tile_f32, 0, sotto__permute_x)

int sotto__tiles_instrumented(void) {
#ifdef SOTTO_TILE_CHECKS
    return 1;
#else
    return 0;
#endif
}
