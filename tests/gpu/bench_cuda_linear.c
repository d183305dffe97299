/* bench_cuda_linear.c - decode-step GEMV timings on the GPU, per weight
 * format, for the linear layers of tiny.en and of large-v3-turbo's shapes
 * (random weights: speed does not depend on their values). Prints one table:
 * microseconds per call at 1 and 16 input rows, effective weight bandwidth,
 * and each format's time relative to bf16 measured in the same run.
 *
 * Needs a CUDA device (exits 77 without one). Run by tests/gpu/check.sh.
 */
#include "bench_util.h"
#include "cuda_linear.h"
#include "quant.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


/* Microseconds per call of y = x W^T with n rows (mean of `iters` queued calls). */
static double time_us(sotto_cuda_wmat *d, const float *dx, float *dy, int n) {
    sotto_err err = {0};
    int iters = 200;
    for (int i = 0; i < 20; i++) sotto_cuda_linear_async(d, NULL, dx, n, dy, NULL, &err);
    sotto_cuda_sync(NULL, &err);
    double t0 = bench_now();
    for (int i = 0; i < iters; i++) sotto_cuda_linear_async(d, NULL, dx, n, dy, NULL, &err);
    if (sotto_cuda_sync(NULL, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return NAN;
    }
    return (bench_now() - t0) / iters * 1e6;
}

int main(void) {
    char name[256], why[256];
    if (!sotto_cuda_available(name, sizeof name, why, sizeof why)) {
        fprintf(stderr, "bench_cuda_linear: not run: %s\n", why);
        return 77;
    }
    static const struct {
        const char *model, *layer;
        int rows, cols;
    } L[] = {
        {"tiny.en", "attn q/k/v/o", 384, 384},   {"tiny.en", "mlp up", 1536, 384},
        {"tiny.en", "mlp down", 384, 1536},      {"tiny.en", "proj_out", 51864, 384},
        {"large-v3-turbo", "attn q/k/v/o", 1280, 1280}, {"large-v3-turbo", "mlp up", 5120, 1280},
        {"large-v3-turbo", "mlp down", 1280, 5120},     {"large-v3-turbo", "proj_out", 51866, 1280},
    };
    static const sotto_wfmt F[] = {SOTTO_WFMT_BF16, SOTTO_WFMT_Q8, SOTTO_WFMT_NF4, SOTTO_WFMT_NVFP4, SOTTO_WFMT_F32};
    printf("device: %s; fp32 activations, fp32 accumulation; random weights; 200 queued calls each\n\n", name);
    printf("| model | layer | rows x cols | format | MB | us n=1 | GB/s n=1 | vs bf16 n=1 | us n=16 | vs bf16 n=16 |\n");
    printf("|---|---|---|---|---:|---:|---:|---:|---:|---:|\n");
    sotto_err err = {0};
    for (size_t l = 0; l < sizeof L / sizeof L[0]; l++) {
        int rows = L[l].rows, cols = L[l].cols;
        size_t nw = (size_t)rows * cols;
        float *src = malloc(sizeof(float) * nw), *x = malloc(sizeof(float) * 16 * (size_t)cols);
        for (size_t i = 0; i < nw; i++) src[i] = bench_frand() * 0.05f;
        for (size_t i = 0; i < 16 * (size_t)cols; i++) x[i] = bench_frand();
        float *dx = sotto_cuda_malloc(sizeof(float) * 16 * (size_t)cols, &err);
        float *dy = sotto_cuda_malloc(sizeof(float) * 16 * (size_t)rows, &err);
        sotto_cuda_copy(dx, x, sizeof(float) * 16 * (size_t)cols, 1, NULL, &err);
        double base1 = 0, base16 = 0;
        for (size_t f = 0; f < sizeof F / sizeof F[0]; f++) {
            sotto_wmat w = {F[f], rows, cols, NULL, NULL, NULL, 1.0f};
            void *data = calloc(nw * 4 + 64, 1), *scales = calloc(nw + 64, 1);
            w.data = data, w.scales = scales;
            if (F[f] == SOTTO_WFMT_NVFP4) w.global_scale = sotto_nvfp4_global_scale(0.05f);
            sotto_quantize_rows(&w, data, scales, src, 0, rows);
            sotto_cuda_wmat *d = sotto_cuda_wmat_upload(&w, &err);
            if (!d) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            double t1 = time_us(d, dx, dy, 1), t16 = time_us(d, dx, dy, 16);
            if (F[f] == SOTTO_WFMT_BF16) base1 = t1, base16 = t16;
            double mb = sotto_cuda_wmat_bytes(d) / 1e6;
            printf("| %s | %s | %d x %d | %s | %.2f | %.1f | %.0f | %.2fx | %.1f | %.2fx |\n", L[l].model, L[l].layer,
                   rows, cols, sotto_wfmt_name(F[f]), mb, t1, mb * 1e3 / t1, t1 / base1,
                   t16, t16 / base16);
            sotto_cuda_wmat_free(d);
            free(data), free(scales);
        }
        sotto_cuda_free(dx), sotto_cuda_free(dy);
        free(src), free(x);
    }
    return 0;
}
