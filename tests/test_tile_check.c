/* test_tile_check.c - the tiles as the sanitized programs run them
 * (kernels/tile_check.h). In a SOTTO_SANITIZE build this test links the
 * uninstrumented copy of linear_{f32,q8,nf4,nvfp4}.c, attn_tiles.c,
 * eltwise_tiles.c and quant_tiles.c, as sotto-server does, and checks that
 *   1. that copy is the one linked, and it computes what the scalar reference
 *      does: every format (NF4 also double-quantized), n = 1..5 rows of x,
 *      rows and columns with tails; the row dequantizer likewise; and the
 *      attention tiles: the decoder's rows over K^T against a
 *      double-precision computation, and the softmax rows; the quantizers'
 *      rows of every format, dequantized, within its rounding of the source,
 *      and the scale search no worse than round-to-nearest; the layer norm,
 *      GELU and bias rows against double precision;
 *   2. a caller's short buffer is still reported by AddressSanitizer, from the
 *      region check in linear.c or ops_cpu.c before the tile runs: y, x, the
 *      weights, their scales, NF4's double-quantization codes, a dequantizer's
 *      destination, the attention's q, K^T, V, out and scores, a softmax's
 *      rows, a quantizer's source rows, destination, scales and importance
 *      weights, the layer norm's x, y and gamma, GELU's span, a bias, each
 *      one element short. Each case runs in a child process of its own
 *      (this program with --die CASE), which must exit non-zero with an ASan
 *      report whose stack names tile_check.h.
 * Without AddressSanitizer part 2 cannot run: after part 1 the test exits 77,
 * which ctest reports as skipped. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "linear.h"
#include "linear_internal.h"
#include "linear_ref.h"
#include "ops.h"
#include "qmat.h"
#include "quant.h"
#include "sotto_err.h"
#include "tile_check.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) & 0xffffff) / (float)0x1000000 * 2.0f - 1.0f;
}

/* A random matrix in fmt (NF4 double-quantized when dq), its buffers
 * allocated at exactly their sizes, less short_data / short_scales /
 * short_codes bytes at the end. */
static int tmat_make(test_qmat *t, sotto_wfmt fmt, int rows, int cols, int dq, size_t short_data,
                     size_t short_scales, size_t short_codes) {
    const size_t n = (size_t)rows * cols;
    float *src = malloc(sizeof(float) * n);
    if (!src) return -1;
    for (size_t i = 0; i < n; i++) src[i] = frand();
    size_t dbytes, sbytes;
    test_qmat_bytes(fmt, n, &dbytes, &sbytes);
    CHECK_EQ_INT(dbytes + sbytes, sotto_wfmt_bytes(fmt, rows, cols));
    int rc = test_qmat_make(t, fmt, rows, cols, src, 0, dq);
    free(src);
    return rc ? rc : test_qmat_shorten(t, short_data, short_scales, short_codes);
}

static const sotto_wfmt fmts[] = {SOTTO_WFMT_F32, SOTTO_WFMT_BF16, SOTTO_WFMT_Q8, SOTTO_WFMT_NF4,
                                  SOTTO_WFMT_NVFP4, SOTTO_WFMT_F16};

/* Part 1: the linked tiles against the scalar reference. */
static void check_values(void) {
    for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++)
        for (int dq = 0; dq <= (fmts[f] == SOTTO_WFMT_NF4); dq++) {
            const sotto_wfmt fmt = fmts[f];
            /* rows not a multiple of the tile's 4; f32, f16 and bf16 also with a column tail */
            const int rows = 37, cols = sotto_wfmt_block(fmt) > 1 ? 128 : 72;
            test_qmat t;
            CHECK_EQ_INT(tmat_make(&t, fmt, rows, cols, dq, 0, 0, 0), 0);
            for (int n = 1; n <= 5; n++) {
                float *x = malloc(sizeof(float) * n * cols), *y = malloc(sizeof(float) * n * rows),
                      *r = malloc(sizeof(float) * n * rows);
                for (int i = 0; i < n * cols; i++) x[i] = frand();
                sotto_linear(&t.w, NULL, x, n, y);
                sotto_linear_ref(&t.w, NULL, x, n, r, 0);
                double e = check_rel_err_f(y, r, (size_t)n * rows);
                CHECK_MSG(e < 1e-5, "%s%s n=%d: relative error %g", sotto_wfmt_name(fmt),
                          dq ? " (double-quantized)" : "", n, e);
                free(x), free(y), free(r);
            }
            float *dst = malloc(sizeof(float) * 5 * cols);
            sotto_wmat_dequantize_rows(&t.w, 30, 5, dst);
            int same = 1;
            for (int i = 0; i < 5; i++)
                for (int c = 0; c < cols; c++)
                    same &= dst[i * cols + c] == sotto__wmat_get(&t.w, (size_t)30 + i, c);
            CHECK_MSG(same, "%s: dequantized rows differ from the element reader",
                      sotto_wfmt_name(fmt));
            free(dst);
            test_qmat_free(&t);
        }
}

/* Part 1 for the attention tiles: the decoder's rows over K^T and the
 * softmax rows against a plain double-precision computation. */
static void check_attention(void) {
    const int dh = 64, q_stride = 3 * 64, kt_stride = 80, v_stride = 2 * 64 + 8;
    static const int n_kvs[] = {1, 7, 37, 70};
    for (size_t t = 0; t < sizeof n_kvs / sizeof n_kvs[0]; t++)
        for (int nr = 1; nr <= 5; nr++) {
            const int n_kv = n_kvs[t];
            float *q = malloc(sizeof(float) * nr * q_stride), *kt = malloc(sizeof(float) * dh * kt_stride);
            float *v = malloc(sizeof(float) * n_kv * v_stride), *out = malloc(sizeof(float) * nr * dh);
            float *sc = malloc(sizeof(float) * nr * n_kv);
            double *ref = malloc(sizeof(double) * nr * dh), *p = malloc(sizeof(double) * n_kv);
            for (int i = 0; i < nr * q_stride; i++) q[i] = frand();
            for (int i = 0; i < dh * kt_stride; i++) kt[i] = frand();
            for (int i = 0; i < n_kv * v_stride; i++) v[i] = frand();
            const float scale = 0.125f;
            sotto_attention_rows_kt(q, q_stride, kt, kt_stride, v, v_stride, out, dh, nr, n_kv, dh,
                                    scale, sc);
            for (int r = 0; r < nr; r++) {
                double m = -1e300, sum = 0;
                for (int j = 0; j < n_kv; j++) {
                    double a = 0;
                    for (int c = 0; c < dh; c++) a += (double)q[r * q_stride + c] * kt[c * kt_stride + j];
                    p[j] = a * scale, m = p[j] > m ? p[j] : m;
                }
                for (int j = 0; j < n_kv; j++) p[j] = exp(p[j] - m), sum += p[j];
                for (int c = 0; c < dh; c++) {
                    double o = 0;
                    for (int j = 0; j < n_kv; j++) o += p[j] / sum * v[j * v_stride + c];
                    ref[r * dh + c] = o;
                }
            }
            double e = check_rel_err(out, ref, (size_t)nr * dh);
            CHECK_MSG(e < 1e-4, "attention rows over K^T, %d rows, %d keys: relative error %g", nr,
                      n_kv, e);
            /* the softmax rows: each sums to 1 and keeps the order of its inputs */
            for (int i = 0; i < nr * n_kv; i++) sc[i] = 4 * frand();
            float first = sc[0], second = n_kv > 1 ? sc[1] : 0;
            sotto_softmax_rows(sc, nr, n_kv);
            double tot = 0;
            for (int j = 0; j < n_kv; j++) tot += sc[j];
            CHECK_NEAR(tot, 1.0, 1e-5);
            if (n_kv > 1) CHECK((first > second) == (sc[0] > sc[1]) || first == second);
            free(q), free(kt), free(v), free(out), free(sc), free(ref), free(p);
        }
}

/* Part 1: the quantizers' tiles (the programs' copy): each format's rows,
 * dequantized, are within its rounding of the source (relative RMS error),
 * the scale search with importance weights never does worse on its own
 * measure than round-to-nearest, and non-finite input is refused. The values
 * themselves are checked against bitsandbytes' and compressed-tensors' vectors
 * by test_quant, on the instrumented copy. */
static void check_quantizers(void) {
    const int rows = 6, cols = 192; /* 3 nf4 blocks, 12 nvfp4, 6 q8 per row */
    const size_t n = (size_t)rows * cols;
    const sotto_wfmt qf[] = {SOTTO_WFMT_BF16, SOTTO_WFMT_Q8, SOTTO_WFMT_NF4, SOTTO_WFMT_NVFP4,
                             SOTTO_WFMT_F16};
    const double bound[] = {0.005, 0.02, 0.15, 0.15, 0.0005};
    float *src = malloc(sizeof(float) * n), *back = malloc(sizeof(float) * n);
    float *h = malloc(sizeof(float) * cols);
    for (size_t i = 0; i < n; i++) src[i] = frand() * (i % 7 == 0 ? 3.0f : 1.0f);
    for (int c = 0; c < cols; c++) h[c] = 0.1f + fabsf(frand());
    for (size_t f = 0; f < sizeof qf / sizeof qf[0]; f++) {
        for (int search = 0; search <= 1; search++) {
            if (search && (f < 2 || f > 3)) continue; /* the search is for the 4-bit formats */
            test_qmat q;
            CHECK_EQ_INT(test_qmat_alloc(&q, qf[f], rows, cols, src), 0);
            sotto_quant_opts o = {search, h};
            CHECK_EQ_INT(test_qmat_quantize(&q, src, 0, &o), 0);
            sotto_wmat_dequantize_rows(&q.w, 0, rows, back);
            double e2 = 0, s2 = 0, we = 0;
            for (size_t i = 0; i < n; i++) {
                double d = (double)back[i] - src[i];
                e2 += d * d, s2 += (double)src[i] * src[i], we += h[i % cols] * d * d;
            }
            CHECK_MSG(sqrt(e2 / s2) < bound[f], "quantizer %s%s: relative RMS error %g",
                      sotto_wfmt_name(qf[f]), search ? " (search)" : "", sqrt(e2 / s2));
            if (f == 2 || f == 3) { /* the search's weighted error against round-to-nearest's */
                static double rtn_we;
                if (!search) rtn_we = we;
                else CHECK_MSG(we <= rtn_we * (1 + 1e-6), "%s: search error %g > round-to-nearest %g",
                               sotto_wfmt_name(qf[f]), we, rtn_we);
            }
            float keep = src[5];
            src[5] = NAN;
            CHECK_EQ_INT(test_qmat_quantize(&q, src, 0, &o), SOTTO_E_FORMAT);
            src[5] = keep;
            test_qmat_free(&q);
        }
    }
    free(src), free(back), free(h);
}

/* Part 1: the element-wise tiles (the programs' copy) against double
 * precision: layer norm rows, GELU (erf form), bias rows; widths with tails,
 * GELU also over the parallel split. */
static void check_eltwise(void) {
    static const int ds[] = {1, 7, 64, 385};
    for (size_t t = 0; t < sizeof ds / sizeof ds[0]; t++) {
        const int n = 3, d = ds[t];
        float *x = malloc(sizeof(float) * n * d), *y = malloc(sizeof(float) * n * d);
        float *g = malloc(sizeof(float) * d), *b = malloc(sizeof(float) * d);
        for (int i = 0; i < n * d; i++) x[i] = 3 * frand();
        for (int i = 0; i < d; i++) g[i] = frand(), b[i] = frand();
        sotto_layer_norm(x, y, n, d, g, b, 1e-5f);
        double worst = 0;
        for (int r = 0; r < n; r++) {
            double m = 0, v = 0;
            for (int i = 0; i < d; i++) m += x[r * d + i];
            m /= d;
            for (int i = 0; i < d; i++) v += (x[r * d + i] - m) * (x[r * d + i] - m);
            v /= d;
            for (int i = 0; i < d; i++) {
                double want = (x[r * d + i] - m) / sqrt(v + 1e-5) * g[i] + b[i];
                worst = fmax(worst, fabs(y[r * d + i] - want));
            }
        }
        CHECK_MSG(worst < 1e-4, "layer norm d=%d: max error %g", d, worst);
        memcpy(y, x, sizeof(float) * n * d);
        sotto_add_bias_rows(y, b, n, d);
        for (int i = 0; i < n * d; i++) CHECK(y[i] == x[i] + b[i % d]);
        free(x), free(y), free(g), free(b);
    }
    static const size_t ns[] = {5, 1000, 40000, 100003}; /* the last two in parallel */
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        float *x = malloc(sizeof(float) * ns[t]), *x0 = malloc(sizeof(float) * ns[t]);
        for (size_t i = 0; i < ns[t]; i++) x0[i] = x[i] = 6 * frand();
        sotto_gelu(x, ns[t]);
        double worst = 0;
        for (size_t i = 0; i < ns[t]; i++) {
            double want = 0.5 * x0[i] * (1 + erf(x0[i] / sqrt(2.0)));
            worst = fmax(worst, fabs(x[i] - want) / fmax(fabs(want), 1e-3));
        }
        CHECK_MSG(worst < 1e-4, "gelu n=%zu: max relative error %g", ns[t], worst);
        free(x), free(x0);
    }
}

/* Part 2, in the child: the element-wise cases. */
static int die_eltwise(const char *what) {
    const int n = 3, d = 64;
    size_t sx = 0, sy = 0, sg = 0, sb = 0;
    int op = 0; /* 0 layer norm, 1 gelu, 2 bias rows */
    if (strcmp(what, "layernorm-x") == 0) sx = 1;
    else if (strcmp(what, "layernorm-y") == 0) sy = 1;
    else if (strcmp(what, "layernorm-gamma") == 0) sg = 1;
    else if (strcmp(what, "gelu") == 0) op = 1, sx = 1;
    else if (strcmp(what, "bias") == 0) op = 2, sb = 1;
    else return 2;
    float *x = calloc((size_t)n * d - sx, sizeof(float)), *y = calloc((size_t)n * d - sy, sizeof(float));
    float *g = calloc((size_t)d - sg, sizeof(float)), *b = calloc((size_t)d - sb, sizeof(float));
    if (op == 0) sotto_layer_norm(x, y, n, d, g, b, 1e-5f);
    else if (op == 1) sotto_gelu(x, (size_t)n * d);
    else sotto_add_bias_rows(y, b, n, d);
    free(x), free(y), free(g), free(b);
    return 0;
}

/* Part 2, in the child: the quantizers' cases (q8 and nf4 round-to-nearest,
 * nvfp4 with the scale search and importance). */
static int die_quant(const char *what) {
    const int rows = 4, cols = 128;
    const size_t n = (size_t)rows * cols;
    size_t ssrc = 0, sdst = 0, ssc = 0, sh = 0;
    sotto_wfmt fmt = SOTTO_WFMT_NF4;
    if (strcmp(what, "quant-src") == 0) ssrc = 1;
    else if (strcmp(what, "quant-dst") == 0) sdst = 1;
    else if (strcmp(what, "quant-scales") == 0) fmt = SOTTO_WFMT_Q8, ssc = 1;
    else if (strcmp(what, "quant-importance") == 0) fmt = SOTTO_WFMT_NVFP4, sh = 1;
    else return die_eltwise(what);
    float *src = calloc(n - ssrc, sizeof(float)), *h = calloc((size_t)cols - sh, sizeof(float));
    test_qmat q; /* destination and scales one byte short where asked */
    if (test_qmat_alloc(&q, fmt, rows, cols, NULL) || test_qmat_shorten(&q, sdst, ssc, 0)) return 3;
    q.w.global_scale = 1.0f;
    sotto_quant_opts o = {fmt == SOTTO_WFMT_NVFP4, h};
    test_qmat_quantize(&q, src, 0, &o);
    test_qmat_free(&q);
    free(src), free(h);
    return 0;
}

/* Part 2, in the child: the attention's cases. */
static int die_attention(const char *what) {
    const int nr = 3, n_kv = 37, dh = 64;
    size_t sq = 0, skt = 0, sv = 0, so = 0, ss = 0;
    int softmax = 0;
    if (strcmp(what, "attention-scores") == 0) ss = 1;
    else if (strcmp(what, "attention-out") == 0) so = 1;
    else if (strcmp(what, "attention-kt") == 0) skt = 1;
    else if (strcmp(what, "attention-v") == 0) sv = 1;
    else if (strcmp(what, "attention-q") == 0) sq = 1;
    else if (strcmp(what, "softmax") == 0) softmax = 1;
    else return die_quant(what);
    float *q = calloc((size_t)nr * dh - sq, sizeof(float)), *kt = calloc((size_t)dh * n_kv - skt, sizeof(float));
    float *v = calloc((size_t)n_kv * dh - sv, sizeof(float)), *out = malloc(sizeof(float) * ((size_t)nr * dh - so));
    float *sc = calloc((size_t)nr * n_kv - ss - softmax, sizeof(float));
    if (softmax) sotto_softmax_rows(sc, nr, n_kv);
    else sotto_attention_rows_kt(q, dh, kt, n_kv, v, dh, out, dh, nr, n_kv, dh, 0.125f, sc);
    free(q), free(kt), free(v), free(out), free(sc);
    return 0;
}

/* Part 2, in the child: one short buffer, then the call that must be reported. */
static int die(const char *what) {
    const int rows = 37, n = 3;
    sotto_wfmt fmt = SOTTO_WFMT_F32;
    size_t sd = 0, ss = 0, sc = 0, sx = 0, sy = 0;
    int dq = 0, dequant = 0;
    if (strcmp(what, "y") == 0) sy = 1;
    else if (strcmp(what, "x") == 0) sx = 1;
    else if (strcmp(what, "weights") == 0) sd = 4;
    else if (strcmp(what, "q8-scales") == 0) fmt = SOTTO_WFMT_Q8, ss = 4;
    else if (strcmp(what, "nf4-scales") == 0) fmt = SOTTO_WFMT_NF4, ss = 4;
    else if (strcmp(what, "nf4-codes") == 0) fmt = SOTTO_WFMT_NF4, dq = 1, sc = 1;
    else if (strcmp(what, "nvfp4-weights") == 0) fmt = SOTTO_WFMT_NVFP4, sd = 1;
    else if (strcmp(what, "f16-weights") == 0) fmt = SOTTO_WFMT_F16, sd = 2;
    else if (strcmp(what, "dequant-dst") == 0) fmt = SOTTO_WFMT_NF4, dequant = 1;
    else return die_attention(what);
    const int cols = 128;
    test_qmat t;
    if (tmat_make(&t, fmt, rows, cols, dq, sd, ss, sc)) return 3;
    if (dequant) {
        float *dst = malloc(sizeof(float) * (4 * cols - 1));
        sotto_wmat_dequantize_rows(&t.w, 33, 4, dst);
        free(dst);
    } else {
        float *x = calloc((size_t)n * cols - sx, sizeof(float));
        float *y = malloc(sizeof(float) * ((size_t)n * rows - sy));
        sotto_linear(&t.w, NULL, x, n, y);
        free(x), free(y);
    }
    test_qmat_free(&t);
    return 0; /* not reported: the parent fails the case */
}

#ifdef SOTTO_TILE_CHECKS
static void check_reported(const char *self, const char *what) {
    char path[] = "/tmp/sotto-tile-check-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 2);
        execl(self, self, "--die", what, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    char buf[16384] = {0};
    lseek(fd, 0, SEEK_SET);
    ssize_t got = read(fd, buf, sizeof buf - 1);
    (void)got;
    close(fd), unlink(path);
    const int failed = WIFEXITED(st) ? WEXITSTATUS(st) != 0 : 1;
    CHECK_MSG(failed && strstr(buf, "ERROR: AddressSanitizer") && strstr(buf, "tile_check.h"),
              "%s one element short: exit status %d, no ASan report from tile_check.h:\n%.2000s",
              what, st, buf);
    fprintf(stderr, "  %s one element short: %s\n", what,
                failed && strstr(buf, "tile_check.h") ? "reported by the region check" : "MISSED");
}

#endif

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--die") == 0) return die(argv[2]);
    check_values();
    check_attention();
    check_quantizers();
    check_eltwise();
#ifdef SOTTO_TILE_CHECKS
    CHECK_MSG(!sotto__tiles_instrumented(),
              "the instrumented tiles are linked: this test must see the programs' copy");
    static const char *cases[] = {"y",          "x",         "weights",       "q8-scales",
                                  "nf4-scales", "nf4-codes", "nvfp4-weights", "dequant-dst",
                                  "attention-scores", "attention-out", "attention-kt",
                                  "attention-v", "attention-q", "softmax", "quant-src",
                                  "quant-dst", "quant-scales", "quant-importance",
                                  "layernorm-x", "layernorm-y", "layernorm-gamma", "gelu", "bias",
                                  "f16-weights"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_reported("/proc/self/exe", cases[i]);
    return check_report();
#else
    int rc = check_report();
    if (rc) return rc;
    fprintf(stderr, "no AddressSanitizer in this build: the contract checks cannot run (skipped)\n");
    return 77;
#endif
}
