/* test_cuda_ops.c - the GPU's layer norm, GELU, row softmax, bias rows, adds,
 * im2col and attention (plain and causal) (kernels/cuda/ops.cu) against
 * double-precision references written here, on random inputs of Whisper's
 * widths and odd ones, with masked (-inf) softmax entries and a fully masked
 * row.
 *
 * Needs a CUDA device: without one it prints why and exits 77 ("not run").
 */
#include "check.h"
#include "cuda_linear.h"
#include "cuda_ops.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x2545f4914f6cdd1dULL;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static float *to_dev(const float *h, size_t n) {
    sotto_err err = {0};
    float *d = sotto_cuda_malloc(sizeof(float) * (n ? n : 1), &err);
    if (d && n) sotto_cuda_copy(d, h, sizeof(float) * n, 1, NULL, &err);
    return d;
}

static void from_dev(float *h, const float *d, size_t n) {
    sotto_err err = {0};
    CHECK_MSG(sotto_cuda_sync(NULL, &err) == 0, "%s", err.msg);
    CHECK(sotto_cuda_copy(h, d, sizeof(float) * n, 0, NULL, &err) == 0);
}

static double max_abs_diff(const float *a, const double *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (e > m || e != e) m = e;
    }
    return m;
}

static void test_layer_norm(int n, int d) {
    size_t t = (size_t)n * d;
    float *x = malloc(sizeof(float) * t), *g = malloc(sizeof(float) * d), *b = malloc(sizeof(float) * d);
    float *y = malloc(sizeof(float) * t);
    double *ref = malloc(sizeof(double) * t);
    for (size_t i = 0; i < t; i++) x[i] = frand() * 4.0f + 1.5f; /* an offset, as activations have */
    for (int i = 0; i < d; i++) g[i] = 1.0f + frand() * 0.5f, b[i] = frand() * 0.1f;
    for (int r = 0; r < n; r++) {
        double s = 0, v = 0;
        for (int i = 0; i < d; i++) s += x[(size_t)r * d + i];
        double mean = s / d;
        for (int i = 0; i < d; i++) v += (x[(size_t)r * d + i] - mean) * (x[(size_t)r * d + i] - mean);
        double inv = 1.0 / sqrt(v / d + 1e-5);
        for (int i = 0; i < d; i++) ref[(size_t)r * d + i] = (x[(size_t)r * d + i] - mean) * inv * g[i] + b[i];
    }
    float *dx = to_dev(x, t), *dg = to_dev(g, d), *db = to_dev(b, d), *dy = to_dev(y, t);
    sotto_err err = {0};
    CHECK_MSG(sotto_cuda_layer_norm(dx, dy, n, d, dg, db, 1e-5f, NULL, &err) == 0, "%s", err.msg);
    from_dev(y, dy, t);
    double e = max_abs_diff(y, ref, t);
    CHECK_MSG(e < 2e-5, "layer_norm %dx%d: max abs error %.3g", n, d, e);
    printf("  layer_norm   %5d x %-5d max abs err %.2e\n", n, d, e);
    /* in place (y == x), as the CPU allows */
    CHECK(sotto_cuda_layer_norm(dx, dx, n, d, dg, db, 1e-5f, NULL, &err) == 0);
    from_dev(y, dx, t);
    CHECK_MSG(max_abs_diff(y, ref, t) < 2e-5, "layer_norm in place %dx%d", n, d);
    sotto_cuda_free(dx), sotto_cuda_free(dg), sotto_cuda_free(db), sotto_cuda_free(dy);
    free(x), free(g), free(b), free(y), free(ref);
}

static void test_gelu(size_t n) {
    float *x = malloc(sizeof(float) * n);
    double *ref = malloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++) x[i] = frand() * 8.0f;
    for (size_t i = 0; i < n; i++) ref[i] = 0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0)));
    float *dx = to_dev(x, n);
    sotto_err err = {0};
    CHECK_MSG(sotto_cuda_gelu(dx, n, NULL, &err) == 0, "%s", err.msg);
    from_dev(x, dx, n);
    double e = max_abs_diff(x, ref, n);
    CHECK_MSG(e < 4e-6, "gelu n=%zu: max abs error %.3g (inputs up to 8)", n, e);
    printf("  gelu         %-13zu max abs err %.2e\n", n, e);
    sotto_cuda_free(dx), free(x), free(ref);
}

static void test_softmax(int n, int d) {
    size_t t = (size_t)n * d;
    float *x = malloc(sizeof(float) * t);
    double *ref = malloc(sizeof(double) * t);
    for (size_t i = 0; i < t; i++) x[i] = frand() * 12.0f;
    for (int r = 0; r < n; r++) /* a causal-style mask: the last r % 5 entries */
        for (int i = d - r % 5; i < d && i >= 0; i++) x[(size_t)r * d + i] = -INFINITY;
    if (n > 2)
        for (int i = 0; i < d; i++) x[(size_t)(n - 1) * d + i] = -INFINITY; /* a fully masked row */
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * d;
        double m = -INFINITY, s = 0;
        for (int i = 0; i < d; i++) m = xr[i] > m ? xr[i] : m;
        for (int i = 0; i < d; i++) s += m == -INFINITY ? 0 : exp(xr[i] - m);
        for (int i = 0; i < d; i++) ref[(size_t)r * d + i] = m == -INFINITY ? 0 : exp(xr[i] - m) / s;
    }
    float *dx = to_dev(x, t);
    sotto_err err = {0};
    CHECK_MSG(sotto_cuda_softmax_rows(dx, n, d, NULL, &err) == 0, "%s", err.msg);
    from_dev(x, dx, t);
    double e = max_abs_diff(x, ref, t);
    CHECK_MSG(e < 1e-6, "softmax %dx%d: max abs error %.3g", n, d, e);
    printf("  softmax_rows %5d x %-5d max abs err %.2e\n", n, d, e);
    sotto_cuda_free(dx), free(x), free(ref);
}

static void test_bias(int n, int d) {
    size_t t = (size_t)n * d;
    float *x = malloc(sizeof(float) * t), *b = malloc(sizeof(float) * d);
    double *ref = malloc(sizeof(double) * t);
    for (size_t i = 0; i < t; i++) x[i] = frand();
    for (int i = 0; i < d; i++) b[i] = frand();
    for (size_t i = 0; i < t; i++) ref[i] = (double)(x[i] + b[i % d]);
    float *dx = to_dev(x, t), *dbias = to_dev(b, d);
    sotto_err err = {0};
    CHECK_MSG(sotto_cuda_add_bias_rows(dx, dbias, n, d, NULL, &err) == 0, "%s", err.msg);
    from_dev(x, dx, t);
    CHECK_MSG(max_abs_diff(x, ref, t) == 0, "add_bias_rows %dx%d differs", n, d);
    sotto_cuda_free(dx), sotto_cuda_free(dbias), free(x), free(b), free(ref);
}

/* nr rows x n_head heads over n_kv keys, heads interleaved in the columns
 * (strides wider than n_head * dh, as the engine's fused QKV buffers are). */
static void test_attention_q(int nr, int n_kv, int n_head, int dh, int q_pos0) {
    int qs = n_head * dh + 3, kvs = n_head * dh + 5, os = n_head * dh + 1;
    size_t nq = (size_t)nr * qs, nk = (size_t)n_kv * kvs, no = (size_t)nr * os;
    float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nk), *v = malloc(sizeof(float) * nk);
    float *o = malloc(sizeof(float) * no);
    double *ref = calloc(no, sizeof(double)), *p = malloc(sizeof(double) * n_kv);
    for (size_t i = 0; i < nq; i++) q[i] = frand();
    for (size_t i = 0; i < nk; i++) k[i] = frand(), v[i] = frand();
    for (size_t i = 0; i < no; i++) o[i] = 12345.0f; /* columns outside the heads must stay */
    const double scale = 1.0 / sqrt((double)dh);
    for (int r = 0; r < nr; r++)
        for (int h = 0; h < n_head; h++) {
            double m = -INFINITY, sum = 0;
            /* causal: row r sits at position q_pos0 + r */
            const int nkr = q_pos0 >= 0 && q_pos0 + r + 1 < n_kv ? q_pos0 + r + 1 : n_kv;
            for (int i = 0; i < nkr; i++) {
                double s = 0;
                for (int d = 0; d < dh; d++)
                    s += (double)q[(size_t)r * qs + h * dh + d] * k[(size_t)i * kvs + h * dh + d];
                p[i] = s * scale;
                m = p[i] > m ? p[i] : m;
            }
            for (int i = 0; i < nkr; i++) sum += (p[i] = exp(p[i] - m));
            for (int d = 0; d < dh; d++) {
                double acc = 0;
                for (int i = 0; i < nkr; i++) acc += p[i] / sum * v[(size_t)i * kvs + h * dh + d];
                ref[(size_t)r * os + h * dh + d] = acc;
            }
        }
    for (int r = 0; r < nr; r++) ref[(size_t)r * os + os - 1] = 12345.0;
    float *dq = to_dev(q, nq), *dk = to_dev(k, nk), *dv = to_dev(v, nk), *dout = to_dev(o, no);
    sotto_err err = {0};
    if (q_pos0 < 0)
        CHECK_MSG(sotto_cuda_attention_rows(dq, qs, dk, dv, kvs, dout, os, nr, n_kv, n_head, dh, (float)scale, NULL, &err) == 0,
                  "%s", err.msg);
    else
        CHECK_MSG(sotto_cuda_attention_causal(dq, qs, dk, dv, kvs, dout, os, nr, n_kv, n_head, dh, (float)scale, q_pos0,
                                              NULL, &err) == 0,
                  "%s", err.msg);
    from_dev(o, dout, no);
    double e = max_abs_diff(o, ref, no);
    CHECK_MSG(e < 2e-5, "attention nr=%d n_kv=%d heads=%d dh=%d q_pos0=%d: max abs error %.3g", nr, n_kv, n_head, dh,
              q_pos0, e);
    printf("  attention    nr=%-3d n_kv=%-5d heads=%-2d dh=%-3d %s max abs err %.2e\n", nr, n_kv, n_head, dh,
           q_pos0 < 0 ? "      " : "causal", e);
    sotto_cuda_free(dq), sotto_cuda_free(dk), sotto_cuda_free(dv), sotto_cuda_free(dout);
    free(q), free(k), free(v), free(o), free(ref), free(p);
}

static void test_attention(int nr, int n_kv, int n_head, int dh) { test_attention_q(nr, n_kv, n_head, dh, -1); }

static void test_add(size_t n) {
    float *y = malloc(sizeof(float) * n), *x = malloc(sizeof(float) * n);
    double *ref = malloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++) y[i] = frand(), x[i] = frand(), ref[i] = (double)y[i] + x[i];
    float *dy = to_dev(y, n), *dx = to_dev(x, n);
    sotto_err err = {0};
    CHECK_MSG(sotto_cuda_add(dy, dx, n, NULL, &err) == 0, "%s", err.msg);
    from_dev(y, dy, n);
    double e = max_abs_diff(y, ref, n);
    CHECK_MSG(e < 1e-6, "add n=%zu: max abs error %.3g", n, e);
    printf("  add          n=%-8zu max abs err %.2e\n", n, e);
    sotto_cuda_free(dy), sotto_cuda_free(dx);
    free(y), free(x), free(ref);
}

/* im2col of a kernel-3 convolution with padding 1, as sotto_conv1d_k3 builds
 * it: exact copies, zeros at the edges. */
static void test_im2col(int t_in, int c_in, int stride) {
    const int t_out = (t_in - 1) / stride + 1, kc = c_in * 3;
    size_t nx = (size_t)t_in * c_in, nc = (size_t)t_out * kc;
    float *x = malloc(sizeof(float) * nx), *cols = malloc(sizeof(float) * nc);
    double *ref = malloc(sizeof(double) * nc);
    for (size_t i = 0; i < nx; i++) x[i] = frand();
    for (int t = 0; t < t_out; t++)
        for (int c = 0; c < c_in; c++)
            for (int j = 0; j < 3; j++) {
                int ti = t * stride - 1 + j;
                ref[(size_t)t * kc + c * 3 + j] = ti < 0 || ti >= t_in ? 0.0 : x[(size_t)ti * c_in + c];
            }
    float *dx = to_dev(x, nx), *dc = to_dev(cols, nc);
    sotto_err err = {0};
    CHECK_MSG(sotto_cuda_im2col_k3(dx, t_in, c_in, stride, dc, NULL, &err) == 0, "%s", err.msg);
    from_dev(cols, dc, nc);
    double e = max_abs_diff(cols, ref, nc);
    CHECK_MSG(e == 0, "im2col t_in=%d c_in=%d stride=%d: max abs error %.3g", t_in, c_in, stride, e);
    printf("  im2col       t_in=%-5d c_in=%-4d stride=%d max abs err %.2e\n", t_in, c_in, stride, e);
    sotto_cuda_free(dx), sotto_cuda_free(dc);
    free(x), free(cols), free(ref);
}

/* A decoder step driven by row metadata: n rows, each with its own self
 * cache (different layer strides and positions) and a cross K/V shared by
 * pairs of rows; K/V appended at each row's position of layer `layer`,
 * then self- and cross-attention, against double-precision references. */
static void test_meta_step(int n, int n_head, int dh, int n_cross, int layer) {
    const int d = n_head * dh, C = 448, L = layer + 2;
    sotto_err err = {0};
    sotto_cuda_row *rows = calloc((size_t)n, sizeof *rows);
    float **self_k = calloc((size_t)n, sizeof(float *)), **self_v = calloc((size_t)n, sizeof(float *));
    float **hk = calloc((size_t)n, sizeof(float *)), **hv = calloc((size_t)n, sizeof(float *));
    int n_streams = (n + 1) / 2;
    float **ck = calloc((size_t)n_streams, sizeof(float *)), **cv = calloc((size_t)n_streams, sizeof(float *));
    float **hck = calloc((size_t)n_streams, sizeof(float *)), **hcv = calloc((size_t)n_streams, sizeof(float *));
    size_t cross_n = (size_t)L * n_cross * d;
    for (int s = 0; s < n_streams; s++) {
        hck[s] = malloc(sizeof(float) * cross_n), hcv[s] = malloc(sizeof(float) * cross_n);
        for (size_t i = 0; i < cross_n; i++) hck[s][i] = frand(), hcv[s][i] = frand();
        ck[s] = to_dev(hck[s], cross_n), cv[s] = to_dev(hcv[s], cross_n);
    }
    for (int i = 0; i < n; i++) {
        int seqs = 1 + i % 3, seq = i % seqs; /* states with 1..3 sequences */
        size_t lstride = (size_t)seqs * C * d, tot = (size_t)L * lstride;
        hk[i] = malloc(sizeof(float) * tot), hv[i] = malloc(sizeof(float) * tot);
        for (size_t j = 0; j < tot; j++) hk[i][j] = frand(), hv[i][j] = frand();
        self_k[i] = to_dev(hk[i], tot), self_v[i] = to_dev(hv[i], tot);
        rows[i] = (sotto_cuda_row){.self_k = self_k[i] + (size_t)seq * C * d, .self_v = self_v[i] + (size_t)seq * C * d,
                                   .cross_k = ck[i / 2], .cross_v = cv[i / 2],
                                   .self_layer_stride = (long long)lstride,
                                   .cross_layer_stride = (long long)n_cross * d,
                                   .pos = (i * 37) % (C - 1)};
        /* the host copy: shift to the row's sequence */
        hk[i] += (size_t)seq * C * d, hv[i] += (size_t)seq * C * d;
        rows[i].pad_ = seq; /* remembered to undo the shift */
    }
    size_t nq = (size_t)n * d;
    float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nq), *v = malloc(sizeof(float) * nq);
    float *o = malloc(sizeof(float) * nq), *o2 = malloc(sizeof(float) * nq);
    for (size_t i = 0; i < nq; i++) q[i] = frand(), k[i] = frand(), v[i] = frand();
    float *dq = to_dev(q, nq), *dk = to_dev(k, nq), *dv = to_dev(v, nq), *dout = to_dev(o, nq), *dout2 = to_dev(o, nq);
    sotto_cuda_row *drows = (sotto_cuda_row *)sotto_cuda_malloc(sizeof *rows * (size_t)n, &err);
    CHECK(drows && sotto_cuda_copy(drows, rows, sizeof *rows * (size_t)n, 1, NULL, &err) == 0);
    const float scale = 1.0f / sqrtf((float)dh);
    CHECK_MSG(sotto_cuda_kv_append(dk, dv, n, d, drows, layer, NULL, &err) == 0, "%s", err.msg);
    CHECK_MSG(sotto_cuda_attention_self(dq, dout, n, n_head, dh, drows, layer, C, scale, NULL, &err) == 0, "%s", err.msg);
    CHECK_MSG(sotto_cuda_attention_cross(dq, dout2, n, n_head, dh, drows, layer, n_cross, scale, NULL, NULL, &err) == 0,
              "%s", err.msg);
    /* the same cross-attention split over key chunks, through the scratch */
    float *o3 = malloc(sizeof(float) * nq), *dout3 = to_dev(o, nq);
    float *xpart = sotto_cuda_malloc(sizeof(float) * sotto_cuda_attention_cross_scratch(n, n_head, dh), &err);
    CHECK_MSG(xpart && sotto_cuda_attention_cross(dq, dout3, n, n_head, dh, drows, layer, n_cross, scale, xpart,
                                                  NULL, &err) == 0,
              "%s", err.msg);
    from_dev(o, dout, nq);
    from_dev(o2, dout2, nq);
    from_dev(o3, dout3, nq);
    double *ref = malloc(sizeof(double) * nq), *ref2 = malloc(sizeof(double) * nq);
    double *p = malloc(sizeof(double) * (n_cross > C ? n_cross : C));
    for (int i = 0; i < n; i++) {
        const sotto_cuda_row *r = &rows[i];
        float *K = hk[i] + (size_t)layer * r->self_layer_stride, *Vv = hv[i] + (size_t)layer * r->self_layer_stride;
        memcpy(K + (size_t)r->pos * d, k + (size_t)i * d, sizeof(float) * d); /* the append, on the host */
        memcpy(Vv + (size_t)r->pos * d, v + (size_t)i * d, sizeof(float) * d);
        for (int pass = 0; pass < 2; pass++) {
            const float *KK = pass ? hck[i / 2] + (size_t)layer * n_cross * d : K;
            const float *VV = pass ? hcv[i / 2] + (size_t)layer * n_cross * d : Vv;
            int nk = pass ? n_cross : r->pos + 1;
            double *out = pass ? ref2 : ref;
            for (int h = 0; h < n_head; h++) {
                double m = -INFINITY, sum = 0;
                for (int j = 0; j < nk; j++) {
                    double s = 0;
                    for (int c = 0; c < dh; c++) s += (double)q[(size_t)i * d + h * dh + c] * KK[(size_t)j * d + h * dh + c];
                    p[j] = s * scale;
                    m = p[j] > m ? p[j] : m;
                }
                for (int j = 0; j < nk; j++) sum += (p[j] = exp(p[j] - m));
                for (int c = 0; c < dh; c++) {
                    double acc = 0;
                    for (int j = 0; j < nk; j++) acc += p[j] / sum * VV[(size_t)j * d + h * dh + c];
                    out[(size_t)i * d + h * dh + c] = acc;
                }
            }
        }
    }
    double e1 = max_abs_diff(o, ref, nq), e2 = max_abs_diff(o2, ref2, nq), e4 = max_abs_diff(o3, ref2, nq);
    /* the appended rows landed where the host put them */
    double e3 = 0;
    for (int i = 0; i < n; i++) {
        const sotto_cuda_row *r = &rows[i];
        size_t off = (size_t)layer * r->self_layer_stride + (size_t)r->pos * d;
        float *back = malloc(sizeof(float) * d);
        CHECK(sotto_cuda_copy(back, r->self_k + off, sizeof(float) * d, 0, NULL, &err) == 0);
        for (int c = 0; c < d; c++) e3 = fmax(e3, fabs(back[c] - k[(size_t)i * d + c]));
        CHECK(sotto_cuda_copy(back, r->self_v + off, sizeof(float) * d, 0, NULL, &err) == 0);
        for (int c = 0; c < d; c++) e3 = fmax(e3, fabs(back[c] - v[(size_t)i * d + c]));
        free(back);
    }
    CHECK_MSG(e1 < 2e-5 && e2 < 2e-5 && e3 == 0 && e4 < 2e-5,
              "meta step n=%d heads=%d: self %.3g cross %.3g append %.3g cross split %.3g", n, n_head, e1, e2, e3, e4);
    printf("  meta step    n=%-3d heads=%-2d dh=%-3d cross=%-5d layer=%d max abs err self %.2e cross %.2e split %.2e\n",
           n, n_head, dh, n_cross, layer, e1, e2, e4);
    sotto_cuda_free(dout3), sotto_cuda_free(xpart), free(o3);
    for (int i = 0; i < n; i++) {
        sotto_cuda_free(self_k[i]), sotto_cuda_free(self_v[i]);
        free(hk[i] - (size_t)rows[i].pad_ * C * d), free(hv[i] - (size_t)rows[i].pad_ * C * d);
    }
    for (int s = 0; s < n_streams; s++) sotto_cuda_free(ck[s]), sotto_cuda_free(cv[s]), free(hck[s]), free(hcv[s]);
    sotto_cuda_free(dq), sotto_cuda_free(dk), sotto_cuda_free(dv), sotto_cuda_free(dout), sotto_cuda_free(dout2);
    sotto_cuda_free(drows);
    free(rows), free(self_k), free(self_v), free(hk), free(hv), free(ck), free(cv), free(hck), free(hcv);
    free(q), free(k), free(v), free(o), free(o2), free(ref), free(ref2), free(p);
}

int main(void) {
    char name[256], why[256];
    if (!sotto_cuda_available(name, sizeof name, why, sizeof why)) {
        fprintf(stderr, "test_cuda_ops: not run: %s\n", why);
        return 77;
    }
    printf("device: %s\n", name);
    static const int widths[] = {1, 7, 33, 384, 1280, 1500, 5120, 51865};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
        int d = widths[i], n = d > 5000 ? 3 : 17;
        test_layer_norm(n, d);
        test_softmax(n, d);
        test_bias(n, d);
    }
    test_layer_norm(1500, 384);
    test_softmax(6 * 1500, 1500); /* encoder self-attention scores of one head group */
    test_attention(1, 1, 6, 64);
    test_attention(1, 7, 6, 64);
    test_attention(5, 448, 6, 64);    /* tiny: beams over the self-attention cache */
    test_attention(1, 1500, 6, 64);   /* tiny: cross-attention */
    test_attention(2, 1500, 20, 64);  /* large-v3-turbo: cross-attention */
    test_attention(3, 13000, 2, 96);  /* over 48 KB of scores: opt-in shared memory */
    test_attention_q(7, 7, 6, 64, 0);       /* a prompt from position 0 */
    test_attention_q(66, 70, 6, 64, 4);     /* a prompt after 4 cached tokens */
    test_attention_q(224, 224, 20, 64, 0);  /* large-v3-turbo's longest prompt */
    test_gelu(1);
    test_gelu(1000003);
    test_add(1);
    test_add(1500 * 384 + 7);
    test_im2col(3000, 80, 1);   /* conv1 of tiny */
    test_im2col(3000, 384, 2);  /* conv2 of tiny */
    test_im2col(3000, 128, 1);  /* conv1 of large-v3 */
    test_im2col(5, 3, 2);
    test_im2col(1, 1, 1);
    test_meta_step(1, 6, 64, 1500, 0);   /* tiny: one stream */
    test_meta_step(5, 6, 64, 1500, 3);   /* beams of several streams, a later layer */
    test_meta_step(16, 20, 64, 1500, 2); /* large-v3-turbo: 16 rows (no split: enough blocks) */
    test_meta_step(1, 20, 64, 1500, 1);  /* large-v3-turbo: one stream, split in 14 */
    test_meta_step(2, 4, 30, 1000, 1);   /* dh not a multiple of 4 (scalar K loads), split */
    test_meta_step(1, 6, 64, 100, 0);    /* two chunks of 50 */
    test_meta_step(3, 6, 64, 7, 0);      /* too few keys to split */
    return check_report();
}
