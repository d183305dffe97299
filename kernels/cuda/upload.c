/* upload.c - host side of sotto_cuda_wmat_upload: the scales a kernel reads
 * (NF4 double quantization expanded to floats), f16 weights as f32, and the
 * code tables. */
#include "cuda_linear.h"

#include "cuda_internal.h"
#include "half.h"
#include "linear_internal.h"
#include "quant.h"

#include <stdlib.h>
#include <string.h>

sotto_cuda_wmat *sotto_cuda_wmat_upload(const sotto_wmat *w, sotto_err *err) {
    if (w->rows <= 0 || w->cols <= 0 || w->cols % sotto_wfmt_block(w->fmt)) {
        sotto_err_set(err, SOTTO_E_INVALID, "cuda: a %dx%d %s matrix is not uploadable", w->rows, w->cols,
                      sotto_wfmt_name(w->fmt));
        return NULL;
    }
    float tables[16 + 8 + 256];
    memcpy(tables, sotto_nf4_code, sizeof(float) * 16);
    memcpy(tables + 16, sotto_e2m1_mag, sizeof(float) * 8);
    for (int i = 0; i < 256; i++) tables[24 + i] = sotto_e4m3_decode((uint8_t)i);
    if (sotto__cuda_set_tables(tables, err)) return NULL;

    const size_t n = (size_t)w->rows * (size_t)w->cols;
    size_t data_bytes = 0, scale_bytes = 0;
    const void *scales = w->scales, *data = w->data;
    sotto_wfmt fmt = w->fmt;
    float *expanded = NULL;
    switch (w->fmt) {
    case SOTTO_WFMT_F32: data_bytes = n * 4; break;
    case SOTTO_WFMT_F16: /* the device kernels have no f16 path: held as the f32 it equals */
        expanded = malloc(n * sizeof(float));
        if (!expanded) {
            sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
            return NULL;
        }
        for (size_t i = 0; i < n; i++) expanded[i] = sotto_fp16_to_f32(((const uint16_t *)w->data)[i]);
        fmt = SOTTO_WFMT_F32, data = expanded, data_bytes = n * 4;
        break;
    case SOTTO_WFMT_BF16: data_bytes = n * 2; break;
    case SOTTO_WFMT_Q8: data_bytes = n, scale_bytes = n / 32 * sizeof(float); break;
    case SOTTO_WFMT_NF4:
        data_bytes = n / 2, scale_bytes = n / 64 * sizeof(float);
        if (w->nf4_dq) { /* one float per block, as the CPU decodes it */
            expanded = malloc(scale_bytes);
            if (!expanded) {
                sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
                return NULL;
            }
            for (size_t b = 0; b < n / 64; b++) expanded[b] = sotto__nf4_absmax(w, b);
            scales = expanded;
        }
        break;
    case SOTTO_WFMT_NVFP4: data_bytes = n / 2, scale_bytes = n / 16; break;
    default: sotto_err_set(err, SOTTO_E_INVALID, "cuda: unknown weight format"); return NULL;
    }
    sotto_cuda_wmat *d = sotto__cuda_wmat_new(fmt, w->rows, w->cols, w->global_scale, data, data_bytes,
                                              scales, scale_bytes, err);
    free(expanded);
    return d;
}
