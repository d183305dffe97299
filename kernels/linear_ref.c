/* linear_ref.c - the scalar reference matmul and element decoder. */
#include "linear_ref.h"

#include "half.h"
#include "linear_internal.h"
#include "quant.h"

float sotto__wmat_get(const sotto_wmat *w, size_t row, int col) {
    const size_t i = row * (size_t)w->cols + (size_t)col; /* flat element index */
    switch (w->fmt) {
    case SOTTO_WFMT_F32: return ((const float *)w->data)[i];
    case SOTTO_WFMT_F16: return sotto_fp16_to_f32(((const uint16_t *)w->data)[i]);
    case SOTTO_WFMT_BF16: return sotto_bf16_to_f32(((const uint16_t *)w->data)[i]);
    case SOTTO_WFMT_Q8:
        return (float)((const int8_t *)w->data)[i] * ((const float *)w->scales)[i / 32];
    case SOTTO_WFMT_NF4: {
        uint8_t byte = ((const uint8_t *)w->data)[i / 2];
        uint8_t q = (i & 1) ? (byte & 15) : (byte >> 4); /* element 2k in the high nibble */
        return sotto_nf4_code[q] * sotto__nf4_absmax(w, i / 64);
    }
    case SOTTO_WFMT_NVFP4: {
        uint8_t byte = ((const uint8_t *)w->data)[i / 2];
        uint8_t q = (i & 1) ? (byte >> 4) : (byte & 15); /* element 2k in the low nibble */
        return sotto_e2m1_decode(q) * sotto__nvfp4_scale(w, i / 16);
    }
    default: return 0.0f;
    }
}

void sotto_linear_ref(const sotto_wmat *w, const float *bias, const float *x, int n, float *y,
                      int accumulate) {
    const int rows = w->rows, cols = w->cols;
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * cols;
        float *yr = y + (size_t)r * rows;
        for (int j = 0; j < rows; j++) {
            double s = bias ? (double)bias[j] : 0.0;
            for (int c = 0; c < cols; c++) s += (double)sotto__wmat_get(w, (size_t)j, c) * xr[c];
            yr[j] = accumulate ? (float)((double)yr[j] + s) : (float)s;
        }
    }
}

void sotto__permute_x(const float *x, int n, int cols, float *dst) {
    const int nc = cols / 32;
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * cols;
        float *dr = dst + (size_t)r * cols;
        for (int c = 0; c < nc; c++)
            for (int i = 0; i < 16; i++) {
                dr[c * 32 + i] = xr[c * 32 + 2 * i];
                dr[c * 32 + 16 + i] = xr[c * 32 + 2 * i + 1];
            }
        for (int c = nc * 32; c < cols; c++) dr[c] = xr[c];
    }
}
