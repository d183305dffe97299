/* test_gemm_bf16.c - the AVX512-BF16 GEMM (kernels/gemm_bf16.c) against a
 * double-precision reference on random inputs.
 *
 * The reference rounds x to bf16 as the kernel does and sums bf16(x) * w in
 * double; the kernel sums in fp32, so each output may differ by the fp32
 * rounding of a cols-term sum: |y - ref| <= cols * 2^-23 * sum |x_k w_k|.
 * Shapes cover tails in every direction (rows not a multiple of 32, n not a
 * multiple of 8, odd cols, cols past one column block), y overwritten and
 * accumulated, and sotto_linear's dispatch of a bf16 matrix with more than
 * SOTTO_SKINNY_MAX_N rows (bias included) giving the kernel's numbers.
 * On a CPU without AVX512-BF16 the kernel is never used: the test says so
 * and exits 77, which ctest reports as skipped. */
#include "check.h"
#include "gemm_bf16.h"
#include "half.h"
#include "linear.h"
#include "threads.h"

#include <stdlib.h>

static unsigned g_seed = 12345;
static float frand(void) { /* uniform in [-1, 1) */
    g_seed = g_seed * 1103515245u + 12345u;
    return (float)((g_seed >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}

static int check_shape(int n, int rows, int cols, int accumulate) {
    uint16_t *w = malloc(sizeof *w * (size_t)rows * cols);
    float *x = malloc(sizeof *x * (size_t)n * cols);
    float *y = malloc(sizeof *y * (size_t)n * rows);
    float *y0 = malloc(sizeof *y0 * (size_t)n * rows);
    if (!w || !x || !y || !y0) return -1;
    for (size_t i = 0; i < (size_t)rows * cols; i++) w[i] = sotto_f32_to_bf16(frand() * 0.5f);
    for (size_t i = 0; i < (size_t)n * cols; i++) x[i] = frand() * 3.0f;
    for (size_t i = 0; i < (size_t)n * rows; i++) y0[i] = y[i] = frand();
    int rc = sotto_gemm_bf16(w, rows, cols, x, n, y, accumulate);
    CHECK_EQ_INT(rc, 0);
    double worst = 0.0;
    int bad = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < rows; j++) {
            double ref = accumulate ? y0[(size_t)i * rows + j] : 0.0, mag = fabs(ref);
            for (int k = 0; k < cols; k++) {
                double p = (double)sotto_bf16_to_f32(sotto_f32_to_bf16(x[(size_t)i * cols + k])) *
                           sotto_bf16_to_f32(w[(size_t)j * cols + k]);
                ref += p;
                mag += fabs(p);
            }
            double err = fabs(y[(size_t)i * rows + j] - ref), bound = (cols + 1) * 0x1p-23 * mag + 1e-30;
            if (err / bound > worst) worst = err / bound;
            bad += err > bound;
        }
    printf("  n %4d rows %4d cols %4d %s: worst error %.3f of the bound\n", n, rows, cols,
           accumulate ? "y +=" : "y = ", worst);
    CHECK_MSG(bad == 0, "n %d rows %d cols %d: %d outputs off", n, rows, cols, bad);
    free(w);
    free(x);
    free(y);
    free(y0);
    return 0;
}

/* sotto_linear on a bf16 matrix with many rows of x takes the kernel, bias added. */
static void check_dispatch(void) {
    const int n = 40, rows = 70, cols = 96;
    uint16_t *w = malloc(sizeof *w * rows * cols);
    float *x = malloc(sizeof *x * n * cols), *b = malloc(sizeof *b * rows);
    float *y = malloc(sizeof *y * n * rows), *yk = malloc(sizeof *yk * n * rows);
    for (int i = 0; i < rows * cols; i++) w[i] = sotto_f32_to_bf16(frand());
    for (int i = 0; i < n * cols; i++) x[i] = frand();
    for (int j = 0; j < rows; j++) b[j] = frand();
    sotto_wmat m = {0};
    m.fmt = SOTTO_WFMT_BF16;
    m.rows = rows;
    m.cols = cols;
    m.data = w;
    CHECK(sotto_linear_rounds_x_to_bf16(&m, n));
    CHECK(!sotto_linear_rounds_x_to_bf16(&m, 32)); /* decoder-sized: the fused fp32 kernel */
    sotto_linear(&m, b, x, n, y);
    CHECK_EQ_INT(sotto_gemm_bf16(w, rows, cols, x, n, yk, 0), 0);
    int same = 1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < rows; j++) same &= y[(size_t)i * rows + j] == yk[(size_t)i * rows + j] + b[j];
    CHECK_MSG(same, "sotto_linear (bf16, %d rows of x) is not the bf16 GEMM plus the bias", n);
    free(w);
    free(x);
    free(b);
    free(y);
    free(yk);
}

int main(void) {
    if (!sotto_gemm_bf16_supported()) {
        printf("this CPU has no AVX512-BF16 (or SOTTO_BF16_GEMM=0): the bf16 GEMM is never used; skipped\n");
        return 77;
    }
    sotto_threads_set(2);
    const int shapes[][3] = {{33, 17, 5},   {40, 32, 64},   {8, 1, 1},     {9, 31, 2},
                             {100, 70, 383}, {64, 96, 513},  {257, 130, 1030}, {1, 33, 7}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int acc = 0; acc < 2; acc++) check_shape(shapes[s][0], shapes[s][1], shapes[s][2], acc);
    check_dispatch();
    return check_report();
}
