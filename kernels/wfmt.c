/* wfmt.c - the weight-format table: names, block sizes, byte counts (linear.h).
 * Plain C with no BLAS or OpenMP, so the GPU checks can build it alone. */
#include "linear.h"

#include "sotto_err.h"

#include <string.h>

static const struct {
    const char *name;
    int block;
} fmt_info[SOTTO_WFMT_COUNT] = {
    [SOTTO_WFMT_F32] = {"f32", 1},  [SOTTO_WFMT_BF16] = {"bf16", 1}, [SOTTO_WFMT_Q8] = {"q8", 32},
    [SOTTO_WFMT_NF4] = {"nf4", 64}, [SOTTO_WFMT_NVFP4] = {"nvfp4", 16}, [SOTTO_WFMT_F16] = {"f16", 1},
};

const char *sotto_wfmt_name(sotto_wfmt fmt) {
    return (unsigned)fmt < SOTTO_WFMT_COUNT ? fmt_info[fmt].name : "?";
}

int sotto_wfmt_parse(const char *name, sotto_wfmt *out) {
    if (!name) return SOTTO_E_INVALID;
    for (int f = 0; f < SOTTO_WFMT_COUNT; f++)
        if (strcmp(name, fmt_info[f].name) == 0) {
            if (out) *out = (sotto_wfmt)f;
            return 0;
        }
    return SOTTO_E_INVALID;
}

int sotto_wfmt_block(sotto_wfmt fmt) {
    return (unsigned)fmt < SOTTO_WFMT_COUNT ? fmt_info[fmt].block : 0;
}

size_t sotto_wfmt_bytes(sotto_wfmt fmt, int32_t rows, int32_t cols) {
    int block = sotto_wfmt_block(fmt);
    if (block <= 0 || rows < 0 || cols < 0 || cols % block) return 0;
    size_t n = (size_t)rows * (size_t)cols;
    switch (fmt) {
    case SOTTO_WFMT_F32: return n * sizeof(float);
    case SOTTO_WFMT_F16:
    case SOTTO_WFMT_BF16: return n * sizeof(uint16_t);
    case SOTTO_WFMT_Q8: return n + n / 32 * sizeof(float);
    case SOTTO_WFMT_NF4: return n / 2 + n / 64 * sizeof(float);
    case SOTTO_WFMT_NVFP4: return n / 2 + n / 16;
    default: return 0;
    }
}

size_t sotto_wmat_bytes(const sotto_wmat *w) {
    if (w->fmt == SOTTO_WFMT_NF4 && w->nf4_dq) {
        size_t n = (size_t)w->rows * (size_t)w->cols, nb = n / 64;
        return n / 2 + nb + (nb + 255) / 256 * sizeof(float) + sizeof(float);
    }
    return sotto_wfmt_bytes(w->fmt, w->rows, w->cols);
}

