/* test_cuda_linear.c - the CUDA skinny GEMM (kernels/cuda/linear.cu) against
 * its plain-C twin sotto_linear_ref (scalar decode, double sums), for every
 * weight format (NF4 with and
 * without double quantization) on random inputs of several shapes, odd ones
 * included, with and without bias.
 *
 * Needs a CUDA device: without one it prints why and exits 77 ("not run"),
 * never 0. tests/gpu/check.sh runs it on the device machine.
 */
#include "check.h"
#include "cuda_linear.h"
#include "half.h"
#include "linear_internal.h"
#include "linear_ref.h"
#include "qmat.h"
#include "quant.h"

#include <stdint.h>
#include <stdlib.h>

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static void run_case(sotto_wfmt fmt, int dq, int rows, int cols, int n, int with_bias) {
    size_t nw = (size_t)rows * cols;
    float *src = malloc(sizeof(float) * nw), *x = malloc(sizeof(float) * (size_t)n * cols);
    float *bias = malloc(sizeof(float) * rows), *y_cpu = malloc(sizeof(float) * (size_t)n * rows);
    float *y_gpu = malloc(sizeof(float) * (size_t)n * rows), *mag = calloc((size_t)n * rows, sizeof(float));
    for (size_t i = 0; i < nw; i++) src[i] = frand() * 0.05f;
    for (size_t i = 0; i < (size_t)n * cols; i++) x[i] = frand();
    for (int i = 0; i < rows; i++) bias[i] = frand();
    test_qmat q;
    CHECK(test_qmat_make(&q, fmt, rows, cols, src, 0, dq) == 0);
    sotto_linear_ref(&q.w, with_bias ? bias : NULL, x, n, y_cpu, 0);
    /* error scale of each output: sum |w| |x| over the row (decoded weights) */
    float *wrow = malloc(sizeof(float) * cols);
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++) wrow[c] = sotto__wmat_get(&q.w, (size_t)r, c);
        for (int i = 0; i < n; i++) {
            double s = 0;
            for (int c = 0; c < cols; c++) s += fabs(wrow[c]) * fabs(x[(size_t)i * cols + c]);
            mag[(size_t)i * rows + r] = (float)s + 1e-6f;
        }
    }
    sotto_err err = {0};
    sotto_cuda_wmat *d = sotto_cuda_wmat_upload(&q.w, &err);
    CHECK_MSG(d != NULL, "%s", err.msg);
    float *dx = sotto_cuda_malloc(sizeof(float) * (size_t)n * cols, &err);
    float *dy = sotto_cuda_malloc(sizeof(float) * (size_t)n * rows, &err);
    float *db = sotto_cuda_malloc(sizeof(float) * rows, &err);
    if (d && dx && dy && db) {
        CHECK(sotto_cuda_copy(dx, x, sizeof(float) * (size_t)n * cols, 1, NULL, &err) == 0);
        CHECK(sotto_cuda_copy(db, bias, sizeof(float) * rows, 1, NULL, &err) == 0);
        CHECK_MSG(sotto_cuda_linear(d, with_bias ? db : NULL, dx, n, dy, NULL, &err) == 0, "%s", err.msg);
        CHECK(sotto_cuda_copy(y_gpu, dy, sizeof(float) * (size_t)n * rows, 0, NULL, &err) == 0);
        /* the accumulating form adds the same result to what y holds: run it
         * over y_gpu and expect twice (within rounding of one add) */
        CHECK_MSG(sotto_cuda_linear_acc_async(d, with_bias ? db : NULL, dx, n, dy, NULL, &err) == 0, "%s", err.msg);
        CHECK(sotto_cuda_sync(NULL, &err) == 0);
        float *y2 = malloc(sizeof(float) * (size_t)n * rows);
        CHECK(sotto_cuda_copy(y2, dy, sizeof(float) * (size_t)n * rows, 0, NULL, &err) == 0);
        double worst_acc = 0;
        for (size_t i = 0; i < (size_t)n * rows; i++)
            worst_acc = fmax(worst_acc, fabs((double)y2[i] - 2.0 * y_gpu[i]) / mag[i]);
        CHECK_MSG(worst_acc < 1e-6, "%s %dx%d n=%d: accumulate error %.3g", sotto_wfmt_name(fmt), rows, cols, n,
                  worst_acc);
        free(y2);
        double worst = 0;
        size_t at = 0;
        for (size_t i = 0; i < (size_t)n * rows; i++) {
            double e = fabs((double)y_gpu[i] - y_cpu[i]) / mag[i];
            if (e > worst || e != e) worst = e, at = i;
        }
        CHECK_MSG(worst < 2e-5, "%s%s %dx%d n=%d bias=%d: relative error %.3g at %zu (gpu %.9g cpu %.9g)",
                  sotto_wfmt_name(fmt), dq ? "+dq" : "", rows, cols, n, with_bias, worst, at, y_gpu[at],
                  y_cpu[at]);
        printf("  %-8s %6d x %-5d n=%-3d bias=%d  max rel err %.2e  (%zu device bytes)\n",
               dq ? "nf4+dq" : sotto_wfmt_name(fmt), rows, cols, n, with_bias, worst, sotto_cuda_wmat_bytes(d));
    }
    sotto_cuda_free(dx), sotto_cuda_free(dy), sotto_cuda_free(db);
    sotto_cuda_wmat_free(d);
    test_qmat_free(&q);
    free(src), free(x), free(bias), free(y_cpu), free(y_gpu), free(mag), free(wrow);
}

/* sotto_cuda_wmat_dequant against the scalar reference's decoding of each
 * element (sotto__wmat_get): the same code tables and one or two float
 * multiplies, so the values must agree to the last bit or nearly. */
static void run_dequant(sotto_wfmt fmt, int dq, int rows, int cols) {
    size_t nw = (size_t)rows * cols;
    float *src = malloc(sizeof(float) * nw), *cpu = malloc(sizeof(float) * nw), *gpu = malloc(sizeof(float) * nw);
    for (size_t i = 0; i < nw; i++) src[i] = frand() * 0.05f;
    test_qmat q;
    CHECK(test_qmat_make(&q, fmt, rows, cols, src, 0, dq) == 0);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) cpu[(size_t)r * cols + c] = sotto__wmat_get(&q.w, (size_t)r, c);
    sotto_err err = {0};
    sotto_cuda_wmat *d = sotto_cuda_wmat_upload(&q.w, &err);
    float *dd = sotto_cuda_malloc(sizeof(float) * nw, &err);
    CHECK_MSG(d && dd, "%s", err.msg);
    if (d && dd) {
        CHECK_MSG(sotto_cuda_wmat_dequant(d, dd, NULL, &err) == 0, "%s", err.msg);
        CHECK(sotto_cuda_sync(NULL, &err) == 0);
        CHECK(sotto_cuda_copy(gpu, dd, sizeof(float) * nw, 0, NULL, &err) == 0);
        double worst = 0;
        for (size_t i = 0; i < nw; i++) {
            double e = fabs((double)gpu[i] - cpu[i]) / (fabs(cpu[i]) + 1e-30);
            if (e > worst || e != e) worst = e;
        }
        CHECK_MSG(worst < 1e-6, "dequant %s%s %dx%d: relative error %.3g", sotto_wfmt_name(fmt), dq ? "+dq" : "",
                  rows, cols, worst);
        printf("  dequant %-8s %6d x %-5d max rel err %.2e\n", dq ? "nf4+dq" : sotto_wfmt_name(fmt), rows, cols,
               worst);
    }
    sotto_cuda_free(dd);
    sotto_cuda_wmat_free(d);
    test_qmat_free(&q);
    free(src), free(cpu), free(gpu);
}

/* The bf16 path's conversions: a layer decoded to bf16 and activations
 * rounded to bf16 must equal include/half.h's rounding of the CPU's values
 * bit for bit (including ties, infinities and NaN). */
static void run_bf16(sotto_wfmt fmt, int dq, int rows, int cols) {
    size_t nw = (size_t)rows * cols;
    float *src = malloc(sizeof(float) * nw);
    uint16_t *want = malloc(2 * nw), *got = malloc(2 * nw);
    for (size_t i = 0; i < nw; i++) src[i] = frand() * 0.05f;
    test_qmat q;
    CHECK(test_qmat_make(&q, fmt, rows, cols, src, 0, dq) == 0);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            want[(size_t)r * cols + c] = sotto_f32_to_bf16(sotto__wmat_get(&q.w, (size_t)r, c));
    sotto_err err = {0};
    sotto_cuda_wmat *d = sotto_cuda_wmat_upload(&q.w, &err);
    uint16_t *dd = sotto_cuda_malloc(2 * nw, &err);
    size_t bad = 0;
    if (d && dd) {
        CHECK_MSG(sotto_cuda_wmat_dequant_bf16(d, dd, NULL, &err) == 0, "%s", err.msg);
        CHECK(sotto_cuda_sync(NULL, &err) == 0 && sotto_cuda_copy(got, dd, 2 * nw, 0, NULL, &err) == 0);
        for (size_t i = 0; i < nw; i++) bad += got[i] != want[i];
    }
    CHECK_MSG(d && dd && bad == 0, "dequant_bf16 %s %dx%d: %zu values differ", sotto_wfmt_name(fmt), rows, cols, bad);
    printf("  dequant_bf16 %-8s %6d x %-5d %zu values differ\n", dq ? "nf4+dq" : sotto_wfmt_name(fmt), rows, cols, bad);
    sotto_cuda_free(dd);
    sotto_cuda_wmat_free(d);
    test_qmat_free(&q);
    free(src), free(want), free(got);
}

static void run_to_bf16(void) {
    const size_t n = 100003;
    float *x = malloc(sizeof(float) * n);
    uint16_t *got = malloc(2 * n);
    for (size_t i = 0; i < n; i++) x[i] = frand() * 1e4f;
    x[0] = INFINITY, x[1] = -INFINITY, x[2] = NAN, x[3] = 0.0f, x[4] = -0.0f;
    x[5] = 1.00390625f;  /* exactly halfway between two bf16 values: to even */
    x[6] = 1.01171875f;  /* halfway, rounds up to even */
    x[7] = 3.4e38f;      /* rounds to infinity */
    sotto_err err = {0};
    float *dx = sotto_cuda_malloc(sizeof(float) * n, &err);
    uint16_t *dy = sotto_cuda_malloc(2 * n, &err);
    size_t bad = 0;
    if (dx && dy) {
        CHECK(sotto_cuda_copy(dx, x, sizeof(float) * n, 1, NULL, &err) == 0);
        CHECK_MSG(sotto_cuda_f32_to_bf16(dx, dy, n, NULL, &err) == 0, "%s", err.msg);
        CHECK(sotto_cuda_sync(NULL, &err) == 0 && sotto_cuda_copy(got, dy, 2 * n, 0, NULL, &err) == 0);
        for (size_t i = 0; i < n; i++) bad += got[i] != sotto_f32_to_bf16(x[i]);
    }
    CHECK_MSG(dx && dy && bad == 0, "f32_to_bf16: %zu values differ", bad);
    printf("  f32_to_bf16  n=%zu: %zu values differ\n", n, bad);
    sotto_cuda_free(dx), sotto_cuda_free(dy);
    free(x), free(got);
}

int main(void) {
    char name[256], why[256];
    if (!sotto_cuda_available(name, sizeof name, why, sizeof why)) {
        fprintf(stderr, "test_cuda_linear: not run: %s\n", why);
        return 77;
    }
    printf("device: %s\n", name);
    static const struct {
        int rows, cols;
    } shapes[] = {{1, 64}, {3, 128}, {384, 384}, {1536, 384}, {7, 1536}, {1280, 5120}, {51865, 384}, {257, 1024}};
    static const int ns[] = {1, 3, 8, 16, 32};
    for (int f = 0; f < SOTTO_WFMT_COUNT; f++)
        for (int dq = 0; dq <= (f == SOTTO_WFMT_NF4); dq++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
                    if (shapes[s].rows * (size_t)shapes[s].cols > 4000000 && ns[k] > 1) continue;
                    run_case((sotto_wfmt)f, dq, shapes[s].rows, shapes[s].cols, ns[k], (int)(k % 2));
                }
    /* odd shapes where the format allows them (f32, bf16: any cols) */
    run_case(SOTTO_WFMT_F32, 0, 5, 77, 3, 1);
    run_case(SOTTO_WFMT_BF16, 0, 33, 129, 9, 0);
    run_case(SOTTO_WFMT_BF16, 0, 1, 1, 1, 1);
    /* the encoder-sized path decodes whole layers for cuBLAS */
    for (int f = 0; f < SOTTO_WFMT_COUNT; f++)
        for (int dq = 0; dq <= (f == SOTTO_WFMT_NF4); dq++) {
            run_dequant((sotto_wfmt)f, dq, 384, 1536);
            run_dequant((sotto_wfmt)f, dq, 1280, 5120);
        }
    run_dequant(SOTTO_WFMT_F32, 0, 7, 77);
    run_dequant(SOTTO_WFMT_BF16, 0, 33, 129);
    for (int f = 0; f < SOTTO_WFMT_COUNT; f++)
        for (int dq = 0; dq <= (f == SOTTO_WFMT_NF4); dq++) run_bf16((sotto_wfmt)f, dq, 384, 1536);
    run_bf16(SOTTO_WFMT_F32, 0, 7, 77);
    run_to_bf16();
    return check_report();
}
