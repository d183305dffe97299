/* bench_kernels.c - times sotto_linear for every weight format on the
 * matrix shapes of whisper-tiny, for decoder-like (n = 1, 5, 16 rows of x)
 * and encoder-like (n = 1500) calls, and prints milliseconds per call, GB/s
 * of weight bytes read and GFLOP/s.
 *
 *   bench_kernels [-t THREADS] [-q]     (-q: fewer repetitions, no n = 1500)
 */
#include "blas_env.h"
#include "linear.h"
#include "quant.h"
#include "threads.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ULL;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) / 8388608.0 - 1.0);
}

typedef struct {
    sotto_wmat w;
    void *data, *scales;
} bmat;

static int bmat_make(bmat *b, sotto_wfmt fmt, int rows, int cols, const float *src) {
    memset(b, 0, sizeof *b);
    b->w.fmt = fmt, b->w.rows = rows, b->w.cols = cols;
    size_t total = sotto_wfmt_bytes(fmt, rows, cols), n = (size_t)rows * cols;
    size_t dbytes = fmt == SOTTO_WFMT_F32    ? n * 4
                    : fmt == SOTTO_WFMT_BF16 || fmt == SOTTO_WFMT_F16 ? n * 2
                    : fmt == SOTTO_WFMT_Q8   ? n
                                             : n / 2;
    b->data = malloc(dbytes);
    b->scales = malloc(total - dbytes + 16);
    if (!b->data || !b->scales) return -1;
    b->w.data = b->data, b->w.scales = b->scales;
    if (fmt == SOTTO_WFMT_NVFP4) {
        float amax = 0;
        for (size_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(src[i]));
        b->w.global_scale = sotto_nvfp4_global_scale(amax);
    }
    return sotto_quantize_rows(&b->w, b->data, b->scales, src, 0, rows);
}

int main(int argc, char **argv) {
    sotto_blas_check_coretype(argv); /* OpenBLAS misdetects new CPUs as Prescott */
    int threads = 0, quick = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-t") == 0 && i + 1 < argc) threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "-q") == 0) quick = 1;
        else {
            fprintf(stderr, "usage: %s [-t THREADS] [-q]\n", argv[0]);
            return 2;
        }
    }
    threads = sotto_threads_set(threads);
    const int shapes[][2] = {{384, 384}, {1536, 384}, {384, 1536}, {51864, 384}};
    const char *what[] = {"attn q/k/v/o", "fc1", "fc2", "proj_out"};
    const int ns[] = {1, 5, 16, 1500};
    const double min_time = quick ? 0.05 : 0.3;
    printf("sotto_linear, %d thread(s), OpenBLAS core %s; GB/s counts weight bytes (data + "
           "scales) once per call\n",
           threads, sotto_blas_corename());
    printf("%-6s %5s  %-12s %11s %5s %10s %8s %9s\n", "format", "B/w", "matrix", "rows x cols", "n",
           "ms/call", "GB/s", "GFLOP/s");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int rows = shapes[s][0], cols = shapes[s][1];
        float *src = malloc(sizeof(float) * (size_t)rows * cols);
        for (size_t i = 0; i < (size_t)rows * cols; i++) src[i] = frand() * 0.05f;
        float *x = malloc(sizeof(float) * 1500 * (size_t)cols);
        float *y = malloc(sizeof(float) * 1500 * (size_t)rows);
        for (size_t i = 0; i < 1500 * (size_t)cols; i++) x[i] = frand();
        for (int f = 0; f < SOTTO_WFMT_COUNT; f++) {
            bmat b;
            if (bmat_make(&b, (sotto_wfmt)f, rows, cols, src)) {
                fprintf(stderr, "cannot build %s %dx%d\n", sotto_wfmt_name((sotto_wfmt)f), rows, cols);
                return 1;
            }
            const double bytes = (double)sotto_wmat_bytes(&b.w);
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                const int n = ns[ni];
                if (n == 1500 && (quick || rows > 4096)) continue; /* proj_out: decoder only */
                sotto_linear(&b.w, NULL, x, n, y); /* warm up */
                int reps = 0;
                double t0 = now_s(), t;
                do {
                    sotto_linear(&b.w, NULL, x, n, y);
                    reps++;
                    t = now_s() - t0;
                } while (t < min_time);
                const double per = t / reps;
                printf("%-6s %5.3f  %-12s %5d x %-5d %5d %10.4f %8.2f %9.2f\n",
                       sotto_wfmt_name((sotto_wfmt)f), bytes / ((double)rows * cols), what[s], rows,
                       cols, n, per * 1e3, bytes / per * 1e-9,
                       2.0 * n * (double)rows * cols / per * 1e-9);
                fflush(stdout);
            }
            free(b.data), free(b.scales);
        }
        free(src), free(x), free(y);
    }
    return 0;
}
