/* bench_cuda_attention.c - decoder attention timings on the GPU: one query
 * row per stream and head against the cross-attention's 1500 encoder
 * positions or a self-attention cache, at tiny.en's and large-v3-turbo's
 * head shapes, for 1 and 16 rows (kernels/cuda/ops.cu). Prints microseconds
 * per call (mean of 200 queued calls) and the K/V bytes each call reads; then
 * the decoder step's cross-attention by row metadata (each row its own K/V)
 * with one block per head and row against the split over key chunks.
 *
 * Needs a CUDA device (exits 77 without one). Run by tests/gpu/check.sh.
 */
#include "bench_util.h"
#include "cuda_linear.h"
#include "cuda_ops.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>


static float *dev_random(size_t n, sotto_err *err) {
    float *h = malloc(sizeof(float) * n), *d = sotto_cuda_malloc(sizeof(float) * n, err);
    for (size_t i = 0; i < n; i++) h[i] = bench_frand();
    if (d && sotto_cuda_copy(d, h, sizeof(float) * n, 1, NULL, err)) d = NULL;
    free(h);
    return d;
}

int main(void) {
    char name[256], why[256];
    if (!sotto_cuda_available(name, sizeof name, why, sizeof why)) {
        fprintf(stderr, "bench_cuda_attention: not run: %s\n", why);
        return 77;
    }
    static const struct {
        const char *model, *kind;
        int heads, dh, n_kv;
    } C[] = {
        {"tiny.en", "cross", 6, 64, 1500},         {"tiny.en", "self, 224 cached", 6, 64, 224},
        {"large-v3-turbo", "cross", 20, 64, 1500}, {"large-v3-turbo", "self, 224 cached", 20, 64, 224},
    };
    printf("device: %s; fp32; random K/V; 200 queued calls each\n\n", name);
    printf("| model | attention | heads x dh | keys | K+V MB | us n=1 | us n=16 |\n|---|---|---|---:|---:|---:|---:|\n");
    sotto_err err = {0};
    for (size_t c = 0; c < sizeof C / sizeof C[0]; c++) {
        const int d = C[c].heads * C[c].dh, n_kv = C[c].n_kv;
        float *q = dev_random((size_t)16 * d, &err), *k = dev_random((size_t)n_kv * d, &err);
        float *v = dev_random((size_t)n_kv * d, &err), *o = dev_random((size_t)16 * d, &err);
        if (!q || !k || !v || !o) {
            fprintf(stderr, "bench_cuda_attention: %s\n", err.msg);
            return 1;
        }
        const float scale = 1.0f / sqrtf((float)C[c].dh);
        double us[2];
        const int rows[2] = {1, 16};
        for (int r = 0; r < 2; r++) {
            for (int i = 0; i < 20; i++)
                sotto_cuda_attention_rows(q, d, k, v, d, o, d, rows[r], n_kv, C[c].heads, C[c].dh, scale, NULL, &err);
            sotto_cuda_sync(NULL, &err);
            double t0 = bench_now();
            for (int i = 0; i < 200; i++)
                if (sotto_cuda_attention_rows(q, d, k, v, d, o, d, rows[r], n_kv, C[c].heads, C[c].dh, scale, NULL, &err))
                    break;
            if (err.code || sotto_cuda_sync(NULL, &err)) {
                fprintf(stderr, "bench_cuda_attention: %s\n", err.msg);
                return 1;
            }
            us[r] = (bench_now() - t0) / 200 * 1e6;
        }
        printf("| %s | %s | %d x %d | %d | %.2f | %.1f | %.1f |\n", C[c].model, C[c].kind, C[c].heads, C[c].dh, n_kv,
               2.0 * n_kv * d * sizeof(float) / 1e6, us[0], us[1]);
        sotto_cuda_free(q), sotto_cuda_free(k), sotto_cuda_free(v), sotto_cuda_free(o);
    }

    /* the decoder step's cross-attention: each row its own stream's K/V, by row metadata */
    printf("\nCross-attention of a decoder step (each row its own stream's 1500 positions):\n\n");
    printf("| model | heads x dh | rows | us, one block per head and row | us, split over key chunks | ratio |\n");
    printf("|---|---|---:|---:|---:|---:|\n");
    static const struct {
        const char *model;
        int heads, dh;
    } M[] = {{"tiny.en", 6, 64}, {"large-v3-turbo", 20, 64}};
    for (size_t c = 0; c < sizeof M / sizeof M[0]; c++)
        for (int n = 1; n <= 16; n *= 4) {
            const int d = M[c].heads * M[c].dh, n_kv = 1500;
            float *q = dev_random((size_t)n * d, &err), *o = dev_random((size_t)n * d, &err);
            float *kv = dev_random((size_t)n * 2 * n_kv * d, &err);
            float *xpart = sotto_cuda_malloc(sizeof(float) * sotto_cuda_attention_cross_scratch(n, M[c].heads, M[c].dh), &err);
            sotto_cuda_row *rows = calloc((size_t)n, sizeof *rows), *drows = sotto_cuda_malloc(sizeof *rows * (size_t)n, &err);
            if (!q || !o || !kv || !xpart || !rows || !drows) {
                fprintf(stderr, "bench_cuda_attention: %s\n", err.msg);
                return 1;
            }
            for (int i = 0; i < n; i++)
                rows[i] = (sotto_cuda_row){.cross_k = kv + (size_t)i * 2 * n_kv * d,
                                           .cross_v = kv + (size_t)i * 2 * n_kv * d + (size_t)n_kv * d,
                                           .cross_layer_stride = (long long)n_kv * d};
            sotto_cuda_copy(drows, rows, sizeof *rows * (size_t)n, 1, NULL, &err);
            const float scale = 1.0f / sqrtf((float)M[c].dh);
            double us[2];
            for (int split = 0; split < 2; split++) {
                float *scratch = split ? xpart : NULL;
                for (int i = 0; i < 20; i++)
                    sotto_cuda_attention_cross(q, o, n, M[c].heads, M[c].dh, drows, 0, n_kv, scale, scratch, NULL, &err);
                sotto_cuda_sync(NULL, &err);
                double t0 = bench_now();
                for (int i = 0; i < 200; i++)
                    if (sotto_cuda_attention_cross(q, o, n, M[c].heads, M[c].dh, drows, 0, n_kv, scale, scratch, NULL, &err))
                        break;
                if (err.code || sotto_cuda_sync(NULL, &err)) {
                    fprintf(stderr, "bench_cuda_attention: %s\n", err.msg);
                    return 1;
                }
                us[split] = (bench_now() - t0) / 200 * 1e6;
            }
            printf("| %s | %d x %d | %d | %.1f | %.1f | %.2fx |\n", M[c].model, M[c].heads, M[c].dh, n, us[0], us[1],
                   us[1] / us[0]);
            sotto_cuda_free(q), sotto_cuda_free(o), sotto_cuda_free(kv), sotto_cuda_free(xpart), sotto_cuda_free(drows);
            free(rows);
        }
    return 0;
}
