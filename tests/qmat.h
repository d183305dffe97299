/* qmat.h - a quantized weight matrix for the kernel tests: a sotto_wmat and
 * the buffers it points into, owned here (data, block scales, NF4's double
 * quantization). test_quant, test_tile_check and the GPU test
 * test_cuda_linear build their matrices with it. Header-only (static inline):
 * each test is one file.
 *
 * Buffers are allocated at exactly their sizes (sotto_wfmt_bytes), so that a
 * kernel reading past a matrix is caught by AddressSanitizer;
 * test_qmat_shorten cuts them shorter still, for the tests that must see
 * such a read reported. */
#ifndef SOTTO_TESTS_QMAT_H
#define SOTTO_TESTS_QMAT_H

#include "linear.h"
#include "quant.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct test_qmat {
    sotto_wmat w;        /* w.data and w.scales point at data and scales */
    void *data, *scales; /* owned */
    sotto_nf4_dq dq;     /* w.nf4_dq points here once double-quantized */
    uint8_t *codes;      /* owned: dq.codes */
    float *nested;       /* owned: dq.nested_absmax */
} test_qmat;

/* The bytes of n elements in fmt: element data and block scales
 * (together sotto_wfmt_bytes). */
static inline void test_qmat_bytes(sotto_wfmt fmt, size_t n, size_t *data, size_t *scales) {
    *scales = 0;
    switch (fmt) {
    case SOTTO_WFMT_F16:
    case SOTTO_WFMT_BF16: *data = n * 2; break;
    case SOTTO_WFMT_Q8: *data = n, *scales = n / 32 * sizeof(float); break;
    case SOTTO_WFMT_NF4: *data = n / 2, *scales = n / 64 * sizeof(float); break;
    case SOTTO_WFMT_NVFP4: *data = n / 2, *scales = n / 16; break;
    default: *data = n * sizeof(float); break;
    }
}

static inline void test_qmat_free(test_qmat *q) {
    free(q->data), free(q->scales), free(q->codes), free(q->nested);
    memset(q, 0, sizeof *q);
}

/* Zeroed buffers for [rows][cols] in fmt, and NVFP4's global scale from the
 * amax of src ([rows][cols]; NULL: none set). 0, or -1 out of memory. */
static inline int test_qmat_alloc(test_qmat *q, sotto_wfmt fmt, int rows, int cols, const float *src) {
    memset(q, 0, sizeof *q);
    q->w.fmt = fmt, q->w.rows = rows, q->w.cols = cols;
    const size_t n = (size_t)rows * (size_t)cols;
    size_t db, sb;
    test_qmat_bytes(fmt, n, &db, &sb);
    q->data = calloc(db ? db : 1, 1), q->scales = calloc(sb ? sb : 1, 1);
    q->w.data = q->data, q->w.scales = q->scales;
    if (!q->data || !q->scales) {
        test_qmat_free(q);
        return -1;
    }
    if (fmt == SOTTO_WFMT_NVFP4 && src) {
        float amax = 0;
        for (size_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(src[i]));
        q->w.global_scale = sotto_nvfp4_global_scale(amax);
    }
    return 0;
}

/* Quantizes src [rows][cols] into q, `chunk` rows per call (0: all at once),
 * with options o (NULL: round to nearest). sotto_quantize_rows' status. */
static inline int test_qmat_quantize(test_qmat *q, const float *src, int chunk,
                                     const sotto_quant_opts *o) {
    const int rows = q->w.rows, cols = q->w.cols;
    if (chunk <= 0) chunk = rows;
    for (int r = 0; r < rows; r += chunk) {
        const int nr = rows - r < chunk ? rows - r : chunk;
        const int rc = sotto_quantize_rows_opt(&q->w, q->data, q->scales, src + (size_t)r * cols, r,
                                               nr, o);
        if (rc) return rc;
    }
    return 0;
}

/* NF4's double quantization of the block scales (bitsandbytes'
 * compress_statistics): w.nf4_dq set. 0, or -1 (not NF4, out of memory). */
static inline int test_qmat_double_quant(test_qmat *q) {
    if (q->w.fmt != SOTTO_WFMT_NF4) return -1;
    const size_t nb = (size_t)q->w.rows * (size_t)q->w.cols / 64;
    q->codes = malloc(nb ? nb : 1);
    q->nested = malloc(sizeof(float) * ((nb + 255) / 256 + 1));
    if (!q->codes || !q->nested) return -1;
    sotto_nf4_double_quant(q->scales, nb, q->codes, q->nested, &q->dq.offset);
    q->dq.codes = q->codes, q->dq.nested_absmax = q->nested;
    q->w.nf4_dq = &q->dq;
    return 0;
}

/* alloc + quantize (+ double quantization when dq and NF4). 0 or non-zero. */
static inline int test_qmat_make(test_qmat *q, sotto_wfmt fmt, int rows, int cols, const float *src,
                                 int chunk, int dq) {
    if (test_qmat_alloc(q, fmt, rows, cols, src)) return -1;
    int rc = test_qmat_quantize(q, src, chunk, NULL);
    if (!rc && dq && fmt == SOTTO_WFMT_NF4) rc = test_qmat_double_quant(q);
    return rc;
}

/* Moves the data, the scales and (when double-quantized) the codes into
 * buffers short_data, short_scales and short_codes bytes shorter than their
 * contents, for the tests of reads past a matrix. 0, or -1. */
static inline int test_qmat_shorten(test_qmat *q, size_t short_data, size_t short_scales,
                                    size_t short_codes) {
    const size_t n = (size_t)q->w.rows * (size_t)q->w.cols, nb = n / 64;
    size_t db, sb;
    test_qmat_bytes(q->w.fmt, n, &db, &sb);
    if (short_data > db || short_scales > sb || (short_codes && (!q->codes || short_codes > nb)))
        return -1;
    const size_t dn = db - short_data, sn = sb - short_scales;
    void *d = malloc(dn ? dn : 1), *s = malloc(sn ? sn : 1);
    if (!d || !s) {
        free(d), free(s);
        return -1;
    }
    memcpy(d, q->data, db - short_data);
    memcpy(s, q->scales, sb - short_scales);
    free(q->data), free(q->scales);
    q->data = d, q->scales = s;
    q->w.data = d, q->w.scales = s;
    if (q->codes && short_codes) {
        uint8_t *c = malloc(nb - short_codes ? nb - short_codes : 1);
        if (!c) return -1;
        memcpy(c, q->codes, nb - short_codes);
        free(q->codes);
        q->codes = c, q->dq.codes = c;
    }
    return 0;
}

#endif
