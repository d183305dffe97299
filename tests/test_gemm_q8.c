/* test_gemm_q8.c - the AVX512-VNNI GEMM on q8 weights (kernels/gemm_q8.c)
 * against a double-precision reference on random inputs.
 *
 * The reference quantizes x per row and block of 32 exactly as gemm_q8.h
 * says, with the q8 weight quantizer itself (sotto_quantize_rows), sums each
 * block's integer products exactly and scales them in double; the kernel
 * scales and sums blocks in fp32, so each output may differ by fp32
 * rounding over the blocks: |y - ref| <= (blocks + 2) * 2^-23 * sum |terms|.
 * Shapes cover tails (rows not a multiple of 32, n not a multiple of the
 * micro-kernel's 6 rows or the 60-row chunk), blocks of zeros, a block with
 * one large value, y overwritten and accumulated, an Inf or a NaN in x (its
 * row's outputs NaN, the others unchanged); cols that are not a
 * multiple of 32 are refused with y untouched. The activation quantization
 * itself is held to the unquantized product (relative RMS error under 1 %),
 * and sotto_linear's dispatch of a q8 matrix with more than
 * SOTTO_SKINNY_MAX_N rows (bias included) must give the kernel's numbers.
 * On a CPU without AVX512-VNNI the kernel is never used: the test says so
 * and exits 77, which ctest reports as skipped. */
#include "check.h"
#include "gemm_q8.h"
#include "linear.h"
#include "quant.h"
#include "threads.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static unsigned g_seed = 4321;
static float frand(void) { /* uniform in [-1, 1) */
    g_seed = g_seed * 1103515245u + 12345u;
    return (float)((g_seed >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}

/* Random q8 weights: int8 in -127..127, one positive scale per 32. */
static void rand_q8(int rows, int cols, int8_t *wq, float *ws) {
    for (size_t i = 0; i < (size_t)rows * cols; i++) wq[i] = (int8_t)lrintf(frand() * 127.0f);
    for (size_t i = 0; i < (size_t)rows * (cols / 32); i++) ws[i] = (0.5f + 0.5f * (frand() + 1.0f)) / 127.0f;
}

/* x quantized as gemm_q8.h says: exactly as q8 weights are (one row of a q8 matrix). */
static void quant_ref(const float *x, int cols, int8_t *q, float *s) {
    sotto_wmat m = {0};
    m.fmt = SOTTO_WFMT_Q8;
    m.rows = 1;
    m.cols = cols;
    CHECK_EQ_INT(sotto_quantize_rows(&m, q, s, x, 0, 1), 0);
}

static void check_shape(int n, int rows, int cols, int accumulate) {
    const int nb = cols / 32;
    int8_t *wq = malloc((size_t)rows * cols), *xq = malloc((size_t)cols);
    float *ws = malloc(sizeof(float) * (size_t)rows * nb), *xs = malloc(sizeof(float) * (size_t)nb);
    float *x = malloc(sizeof *x * (size_t)n * cols);
    float *y = malloc(sizeof *y * (size_t)n * rows), *y0 = malloc(sizeof *y0 * (size_t)n * rows);
    if (!wq || !xq || !ws || !xs || !x || !y || !y0) {
        CHECK_MSG(0, "out of memory");
        return;
    }
    rand_q8(rows, cols, wq, ws);
    for (size_t i = 0; i < (size_t)n * cols; i++) x[i] = frand() * 3.0f;
    for (int i = 0; i < n; i += 3) memset(x + (size_t)i * cols, 0, sizeof(float) * 32); /* zero blocks */
    for (int i = 1; i < n; i += 5) x[(size_t)i * cols + cols - 1] = 1e4f;               /* one large value */
    for (size_t i = 0; i < (size_t)n * rows; i++) y0[i] = y[i] = frand();
    CHECK_EQ_INT(sotto_gemm_q8(wq, ws, rows, cols, x, n, y, accumulate), 0);
    double worst = 0.0, err2 = 0.0, ref2 = 0.0;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const float *xr = x + (size_t)i * cols;
        quant_ref(xr, cols, xq, xs);
        for (int j = 0; j < rows; j++) {
            double ref = accumulate ? y0[(size_t)i * rows + j] : 0.0, mag = fabs(ref), exact = 0.0;
            for (int b = 0; b < nb; b++) {
                long dot = 0;
                for (int k = 0; k < 32; k++)
                    dot += (long)wq[(size_t)j * cols + b * 32 + k] * xq[b * 32 + k];
                double t = (double)ws[(size_t)j * nb + b] * xs[b] * (double)dot;
                ref += t;
                mag += fabs(t);
                for (int k = 0; k < 32; k++) /* the unquantized product */
                    exact += (double)ws[(size_t)j * nb + b] * wq[(size_t)j * cols + b * 32 + k] * xr[b * 32 + k];
            }
            double got = y[(size_t)i * rows + j];
            double err = fabs(got - ref), bound = (nb + 2) * 0x1p-23 * mag + 1e-30;
            if (err / bound > worst) worst = err / bound;
            bad += err > bound;
            if (i % 5 != 1) { /* (not the rows with a planted large value) */
                double e = (got - (accumulate ? y0[(size_t)i * rows + j] : 0.0)) - exact;
                err2 += e * e;
                ref2 += exact * exact;
            }
        }
    }
    const double rel = sqrt(err2 / (ref2 + 1e-300));
    printf("  n %4d rows %4d cols %4d %s: worst error %.3f of the bound; activation quantization "
           "%.3f %% RMS\n", n, rows, cols, accumulate ? "y +=" : "y = ", worst, rel * 100);
    CHECK_MSG(bad == 0, "n %d rows %d cols %d: %d outputs off", n, rows, cols, bad);
    CHECK_MSG(rel < 0.01, "n %d rows %d cols %d: activation quantization error %.3f %%", n, rows, cols,
              rel * 100);
    free(wq);
    free(xq);
    free(ws);
    free(xs);
    free(x);
    free(y);
    free(y0);
}

/* cols not a multiple of 32: refused, y untouched. */
static void check_refused(void) {
    int8_t wq[4 * 40] = {0};
    float ws[4] = {1, 1, 1, 1}, x[3 * 40], y[3 * 4];
    for (int i = 0; i < 3 * 40; i++) x[i] = frand();
    for (int i = 0; i < 12; i++) y[i] = 7.0f;
    CHECK_EQ_INT(sotto_gemm_q8(wq, ws, 4, 40, x, 3, y, 0), -2);
    int same = 1;
    for (int i = 0; i < 12; i++) same &= y[i] == 7.0f;
    CHECK(same);
}

/* A row of x holding an Inf or a NaN (in any block, at any lane) makes that
 * row's outputs NaN, overwritten or accumulated; the other rows are unchanged. */
static void check_nonfinite(void) {
    const int n = 13, rows = 40, cols = 96;
    int8_t *wq = malloc((size_t)rows * cols);
    float *ws = malloc(sizeof *ws * rows * (cols / 32));
    float *x = malloc(sizeof *x * n * cols), *y = malloc(sizeof *y * n * rows),
          *y0 = malloc(sizeof *y0 * n * rows);
    rand_q8(rows, cols, wq, ws);
    for (int i = 0; i < n * cols; i++) x[i] = frand();
    CHECK_EQ_INT(sotto_gemm_q8(wq, ws, rows, cols, x, n, y0, 0), 0);
    const float bad[] = {INFINITY, -INFINITY, NAN};
    const int at[] = {0, 17, 31, 45, 95}; /* lanes 0 and 1 of a block, block tails, last column */
    for (int acc = 0; acc < 2; acc++)
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
            for (size_t a = 0; a < sizeof at / sizeof at[0]; a++) {
                const int r = (int)(3 + a + k) % n;
                float keep = x[(size_t)r * cols + at[a]];
                x[(size_t)r * cols + at[a]] = bad[k];
                for (int i = 0; i < n * rows; i++) y[i] = acc ? 1.0f : 0.0f;
                CHECK_EQ_INT(sotto_gemm_q8(wq, ws, rows, cols, x, n, y, acc), 0);
                int nan_row = 1, others = 1;
                for (int i = 0; i < n; i++)
                    for (int j = 0; j < rows; j++) {
                        float v = y[(size_t)i * rows + j], want = y0[(size_t)i * rows + j] + (acc ? 1.0f : 0.0f);
                        if (i == r) nan_row &= isnan(v);
                        else others &= v == want;
                    }
                CHECK_MSG(nan_row, "x[%d][%d] = %g: its row's outputs are not all NaN (acc %d)", r, at[a],
                          (double)bad[k], acc);
                CHECK_MSG(others, "x[%d][%d] = %g changed other rows (acc %d)", r, at[a], (double)bad[k], acc);
                x[(size_t)r * cols + at[a]] = keep;
            }
    free(wq);
    free(ws);
    free(x);
    free(y);
    free(y0);
}

/* sotto_linear on a q8 matrix with many rows of x takes the kernel, bias added. */
static void check_dispatch(void) {
    const int n = 40, rows = 70, cols = 96;
    int8_t *wq = malloc((size_t)rows * cols);
    float *ws = malloc(sizeof *ws * rows * (cols / 32));
    float *x = malloc(sizeof *x * n * cols), *b = malloc(sizeof *b * rows);
    float *y = malloc(sizeof *y * n * rows), *yk = malloc(sizeof *yk * n * rows);
    rand_q8(rows, cols, wq, ws);
    for (int i = 0; i < n * cols; i++) x[i] = frand();
    for (int j = 0; j < rows; j++) b[j] = frand();
    sotto_wmat m = {0};
    m.fmt = SOTTO_WFMT_Q8;
    m.rows = rows;
    m.cols = cols;
    m.data = wq;
    m.scales = ws;
    sotto_linear(&m, b, x, n, y);
    CHECK_EQ_INT(sotto_gemm_q8(wq, ws, rows, cols, x, n, yk, 0), 0);
    int same = 1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < rows; j++) same &= y[(size_t)i * rows + j] == yk[(size_t)i * rows + j] + b[j];
    CHECK_MSG(same, "sotto_linear (q8, %d rows of x) is not the q8 GEMM plus the bias", n);
    free(wq);
    free(ws);
    free(x);
    free(b);
    free(y);
    free(yk);
}

int main(void) {
    if (!sotto_gemm_q8_supported()) {
        printf("this CPU has no AVX512-VNNI (or SOTTO_Q8_GEMM=0): the q8 GEMM is never used; skipped\n");
        return 77;
    }
    sotto_threads_set(2);
    const int shapes[][3] = {{33, 17, 32},   {40, 32, 64},   {9, 31, 32},     {100, 70, 384},
                             {64, 96, 512},  {257, 130, 1024}, {1, 33, 32},   {5, 1, 96},
                             {130, 384, 1536}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int acc = 0; acc < 2; acc++) check_shape(shapes[s][0], shapes[s][1], shapes[s][2], acc);
    check_refused();
    check_nonfinite();
    check_dispatch();
    return check_report();
}
