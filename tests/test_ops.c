/* test_ops.c - the CPU backend's operations against naive double-precision
 * references, on random inputs of several shapes, odd ones included. These
 * are also the references that other backends' kernels are held to. */
#include "check.h"
#include "fastmath.h"
#include "linear.h"
#include "ops.h"
#include "threads.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static uint64_t g_rng = 12345;

static float frand(void) { /* uniform in [-1, 1) */
    g_rng = g_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((g_rng >> 40) / 8388608.0 - 1.0);
}

static float *rand_vec(size_t n, float scale) {
    float *v = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) v[i] = frand() * scale;
    return v;
}

static void test_linear(void) {
    const int shapes[][2] = {{1, 1}, {7, 13}, {33, 65}, {64, 16}, {384, 384}, {100, 1537}, {5, 3000}};
    const int ns[] = {1, 2, 3, 5, 16, 17, 40};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int rows = shapes[si][0], cols = shapes[si][1];
        float *W = rand_vec((size_t)rows * cols, 1.0f), *b = rand_vec((size_t)rows, 1.0f);
        sotto_wmat w = {.fmt = SOTTO_WFMT_F32, .rows = rows, .cols = cols, .data = W};
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            int n = ns[ni];
            float *x = rand_vec((size_t)n * cols, 1.0f);
            float *y = rand_vec((size_t)n * rows, 1.0f), *y0 = malloc(sizeof(float) * n * rows);
            for (int i = 0; i < n * rows; i++) y0[i] = y[i];
            double *ref = malloc(sizeof(double) * n * rows);
            for (int r = 0; r < n; r++)
                for (int j = 0; j < rows; j++) {
                    double s = b[j];
                    for (int c = 0; c < cols; c++) s += (double)W[(size_t)j * cols + c] * x[(size_t)r * cols + c];
                    ref[(size_t)r * rows + j] = s;
                }
            sotto_linear(&w, b, x, n, y);
            double e = check_rel_err(y, ref, (size_t)n * rows);
            CHECK_MSG(e < 2e-6, "linear %dx%d n=%d: rel err %g", rows, cols, n, e);
            /* accumulate variant: y0 + W x + b */
            for (int i = 0; i < n * rows; i++) ref[i] += y0[i];
            sotto_linear_acc(&w, b, x, n, y0);
            e = check_rel_err(y0, ref, (size_t)n * rows);
            CHECK_MSG(e < 2e-6, "linear_acc %dx%d n=%d: rel err %g", rows, cols, n, e);
            free(x), free(y), free(y0), free(ref);
        }
        free(W), free(b);
    }
}

static void test_fastmath(void) {
    double worst = 0;
    for (int i = 0; i <= 2000000; i++) {
        float x = -87.0f + 175.0f * (float)i / 2000000.0f;
        double ref = exp((double)x);
        double e = fabs(sotto_fast_expf(x) - ref) / ref;
        worst = e > worst ? e : worst;
    }
    CHECK_MSG(worst < 3e-7, "fast exp worst relative error %g", worst);
    CHECK(sotto_fast_expf(-INFINITY) == 0.0f);
    CHECK(sotto_fast_expf(-100.0f) == 0.0f);
    CHECK(sotto_fast_expf(0.0f) == 1.0f);
    worst = 0;
    double worst_c = 0, worst_g = 0;
    for (int i = 0; i <= 200000; i++) {
        float x = -6.0f + 12.0f * (float)i / 200000.0f;
        double e = fabs(sotto_fast_erff(x) - erf((double)x));
        worst = e > worst ? e : worst;
        double rc = erfc((double)x);
        e = fabs(sotto_fast_erfcf(x) - rc) / rc;
        worst_c = e > worst_c ? e : worst_c;
        double g = 0.5 * x * erfc(-x / sqrt(2.0));
        if (g != 0.0) {
            e = fabs(sotto_fast_gelu(x) - g) / fabs(g);
            worst_g = e > worst_g ? e : worst_g;
        }
    }
    CHECK_MSG(worst < 3e-7, "fast erf worst absolute error %g", worst);
    CHECK_MSG(worst_c < 5e-6, "fast erfc worst relative error %g", worst_c);
    CHECK_MSG(worst_g < 5e-6, "fast gelu worst relative error %g", worst_g);
    CHECK(sotto_fast_erff(20.0f) == 1.0f && sotto_fast_erff(-20.0f) == -1.0f);
}

static void test_elementwise(void) {
    const int ns[] = {1, 3, 200};
    const int ds[] = {1, 7, 384, 1501};
    for (size_t a = 0; a < 3; a++)
        for (size_t bi = 0; bi < 4; bi++) {
            int n = ns[a], d = ds[bi];
            size_t sz = (size_t)n * d;
            float *x = rand_vec(sz, 4.0f), *g = rand_vec((size_t)d, 1.0f), *be = rand_vec((size_t)d, 1.0f);
            float *y = malloc(sizeof(float) * sz);
            double *ref = malloc(sizeof(double) * sz);
            /* layer norm */
            for (int r = 0; r < n; r++) {
                double m = 0, v = 0;
                for (int i = 0; i < d; i++) m += x[(size_t)r * d + i];
                m /= d;
                for (int i = 0; i < d; i++) v += pow(x[(size_t)r * d + i] - m, 2);
                v /= d;
                for (int i = 0; i < d; i++)
                    ref[(size_t)r * d + i] = (x[(size_t)r * d + i] - m) / sqrt(v + 1e-5) * g[i] + be[i];
            }
            sotto_layer_norm(x, y, n, d, g, be, 1e-5f);
            double e = check_rel_err(y, ref, sz);
            CHECK_MSG(e < 1e-5, "layer_norm n=%d d=%d: %g", n, d, e);
            /* GELU */
            for (size_t i = 0; i < sz; i++) {
                y[i] = x[i];
                ref[i] = 0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0)));
            }
            sotto_gelu(y, sz);
            e = check_rel_err(y, ref, sz);
            CHECK_MSG(e < 1e-6, "gelu n=%d d=%d: %g", n, d, e);
            /* softmax, with a masked entry */
            for (size_t i = 0; i < sz; i++) y[i] = x[i];
            if (d > 1) y[1] = -INFINITY;
            for (int r = 0; r < n; r++) {
                double m = -INFINITY, s = 0;
                for (int i = 0; i < d; i++) m = fmax(m, y[(size_t)r * d + i]);
                for (int i = 0; i < d; i++) s += exp(y[(size_t)r * d + i] - m);
                for (int i = 0; i < d; i++) ref[(size_t)r * d + i] = exp(y[(size_t)r * d + i] - m) / s;
            }
            sotto_softmax_rows(y, n, d);
            e = check_rel_err(y, ref, sz);
            CHECK_MSG(e < 5e-6, "softmax n=%d d=%d: %g", n, d, e); /* float sum over d terms */
            if (d > 1) CHECK(y[1] == 0.0f);
            free(x), free(g), free(be), free(y), free(ref);
        }
    /* log-softmax keeps -inf and normalises the rest */
    float v[5] = {1.0f, -INFINITY, 2.0f, 0.5f, -INFINITY};
    sotto_log_softmax(v, 5);
    double s = exp(v[0]) + exp(v[2]) + exp(v[3]);
    CHECK_NEAR(s, 1.0, 1e-6);
    CHECK(v[1] == -INFINITY && v[4] == -INFINITY);
    /* a vocabulary-sized row (the decoder's every step) against double libm */
    {
        const int V = 51864;
        float *row = malloc(sizeof(float) * V);
        double *lr = malloc(sizeof(double) * V);
        for (int i = 0; i < V; i++) row[i] = 12.0f * frand() - 4.0f;
        for (int i = 0; i < V; i += 97) row[i] = -INFINITY;
        double m = -INFINITY, sum = 0;
        for (int i = 0; i < V; i++) m = fmax(m, row[i]);
        for (int i = 0; i < V; i++) sum += exp((double)row[i] - m);
        double lse_ref = m + log(sum);
        for (int i = 0; i < V; i++) lr[i] = row[i] - lse_ref;
        float lse = sotto_log_softmax(row, V);
        CHECK_MSG(fabs(lse - lse_ref) < 2e-6, "log-softmax lse %.9g vs %.9g", lse, lse_ref);
        double worst = 0;
        int masked_ok = 1;
        for (int i = 0; i < V; i++) {
            if (i % 97 == 0) {
                masked_ok &= row[i] == -INFINITY;
                continue;
            }
            worst = fmax(worst, fabs(row[i] - lr[i]));
        }
        CHECK(masked_ok);
        CHECK_MSG(worst < 4e-6, "log-softmax over %d: max abs error %g", V, worst);
        free(row), free(lr);
    }
}

static void naive_attention(const float *q, const float *k, const float *v, int n_q, int n_kv,
                            int H, int dh, float scale, int causal, int q_pos0, double *out) {
    int d = H * dh;
    double *s = malloc(sizeof(double) * n_kv);
    for (int i = 0; i < n_q; i++)
        for (int h = 0; h < H; h++) {
            int nk = causal ? q_pos0 + i + 1 : n_kv;
            if (nk > n_kv) nk = n_kv;
            double m = -INFINITY, sum = 0;
            for (int j = 0; j < nk; j++) {
                double dot = 0;
                for (int c = 0; c < dh; c++) dot += (double)q[(size_t)i * d + h * dh + c] * k[(size_t)j * d + h * dh + c];
                s[j] = dot * scale;
                m = fmax(m, s[j]);
            }
            for (int j = 0; j < nk; j++) sum += (s[j] = exp(s[j] - m));
            for (int c = 0; c < dh; c++) {
                double o = 0;
                for (int j = 0; j < nk; j++) o += s[j] / sum * v[(size_t)j * d + h * dh + c];
                out[(size_t)i * d + h * dh + c] = o;
            }
        }
    free(s);
}

static void test_attention(void) {
    const int cases[][6] = {/* n_q, n_kv, H, dh, causal, q_pos0 */
                            {1, 1, 1, 8, 0, 0},     {3, 7, 2, 8, 0, 0},   {130, 200, 3, 16, 0, 0},
                            {5, 5, 2, 64, 1, 0},    {4, 10, 2, 8, 1, 6},  {1, 448, 6, 64, 1, 447},
                            {129, 129, 1, 32, 1, 0}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int n_q = cases[ci][0], n_kv = cases[ci][1], H = cases[ci][2], dh = cases[ci][3];
        int causal = cases[ci][4], p0 = cases[ci][5], d = H * dh;
        float *q = rand_vec((size_t)n_q * d, 1.0f), *k = rand_vec((size_t)n_kv * d, 1.0f);
        float *v = rand_vec((size_t)n_kv * d, 1.0f), *o = malloc(sizeof(float) * n_q * d);
        float *scratch = malloc(sizeof(float) * sotto_attention_scratch(n_q, n_kv));
        double *ref = malloc(sizeof(double) * n_q * d);
        float scale = 1.0f / sqrtf((float)dh);
        naive_attention(q, k, v, n_q, n_kv, H, dh, scale, causal, p0, ref);
        sotto_attention(q, d, k, v, d, o, d, n_q, n_kv, H, dh, scale, causal, p0, scratch);
        double e = check_rel_err(o, ref, (size_t)n_q * d);
        CHECK_MSG(e < 1e-5, "attention case %zu: %g", ci, e);
        if (!causal) { /* K transposed, its rows padded past n_kv as the state's are */
            const int kts = n_kv + 3;
            float *kt = rand_vec((size_t)d * kts, 1.0f);
            for (int j = 0; j < n_kv; j++)
                for (int c = 0; c < d; c++) kt[(size_t)c * kts + j] = k[(size_t)j * d + c];
            for (int c = 0; c < d; c++)
                for (int j = n_kv; j < kts; j++) kt[(size_t)c * kts + j] = NAN;
            sotto_attention_kt(q, d, kt, kts, v, d, o, d, n_q, n_kv, H, dh, scale, scratch);
            e = check_rel_err(o, ref, (size_t)n_q * d);
            CHECK_MSG(e < 1e-5, "attention_kt case %zu: %g", ci, e);
            free(kt);
        }
        free(q), free(k), free(v), free(o), free(scratch), free(ref);
    }
}

static void test_attention_rows(void) {
    const int cases[][4] = {/* nr, n_kv, dh, H (to make strides) */
                            {1, 1, 8, 1}, {3, 17, 64, 2}, {5, 1500, 64, 6}, {2, 9, 20, 3},
                            /* either side of the sgemm path (256 keys), odd head sizes */
                            {4, 255, 30, 2}, {1, 256, 64, 2}, {3, 257, 20, 3}, {1, 1500, 128, 2},
                            /* the transposed path's row groups of 4, key blocks of 32,
                               heads of 64 + a tail */
                            {8, 33, 64, 2}, {9, 1499, 64, 6}, {6, 31, 80, 2}, {7, 64, 16, 4}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int nr = cases[ci][0], n_kv = cases[ci][1], dh = cases[ci][2], H = cases[ci][3];
        int d = H * dh, h = H - 1; /* test the last head's columns */
        float *q = rand_vec((size_t)nr * d, 1.0f), *k = rand_vec((size_t)n_kv * d, 1.0f);
        float *v = rand_vec((size_t)n_kv * d, 1.0f), *o = rand_vec((size_t)nr * d, 1.0f);
        float *s = malloc(sizeof(float) * nr * n_kv);
        double *ref = malloc(sizeof(double) * nr * d);
        float scale = 1.0f / sqrtf((float)dh);
        naive_attention(q, k, v, nr, n_kv, H, dh, scale, 0, 0, ref);
        sotto_attention_rows(q + h * dh, d, k + h * dh, v + h * dh, d, o + h * dh, d, nr, n_kv, dh,
                             scale, s);
        double num = 0, den = 1e-30;
        for (int r = 0; r < nr; r++)
            for (int c = 0; c < dh; c++) {
                double ref_v = ref[(size_t)r * d + h * dh + c];
                num = fmax(num, fabs(o[(size_t)r * d + h * dh + c] - ref_v));
                den = fmax(den, fabs(ref_v));
            }
        CHECK_MSG(num / den < 1e-5, "attention_rows case %zu: %g", ci, num / den);
        /* K transposed (the CPU's cross-attention cache), rows padded with
           NaN past n_kv: only the head's columns of out change */
        const int kts = n_kv + 5;
        float *kt = malloc(sizeof(float) * (size_t)d * kts);
        for (int c = 0; c < d; c++)
            for (int j = 0; j < kts; j++)
                kt[(size_t)c * kts + j] = j < n_kv ? k[(size_t)j * d + c] : NAN;
        float *o2 = rand_vec((size_t)nr * d, 1.0f), *o2_before = malloc(sizeof(float) * nr * d);
        memcpy(o2_before, o2, sizeof(float) * nr * d);
        sotto_attention_rows_kt(q + h * dh, d, kt + (size_t)h * dh * kts, kts, v + h * dh, d,
                                o2 + h * dh, d, nr, n_kv, dh, scale, s);
        num = 0, den = 1e-30;
        int others_kept = 1;
        for (int r = 0; r < nr; r++)
            for (int c = 0; c < d; c++) {
                size_t i = (size_t)r * d + c;
                if (c < h * dh) {
                    others_kept &= o2[i] == o2_before[i];
                    continue;
                }
                num = fmax(num, fabs(o2[i] - ref[i]));
                den = fmax(den, fabs(ref[i]));
            }
        CHECK_MSG(num / den < 1e-5, "attention_rows_kt case %zu: %g", ci, num / den);
        CHECK_MSG(others_kept, "attention_rows_kt case %zu wrote outside its head", ci);
        free(kt), free(o2), free(o2_before);
        free(q), free(k), free(v), free(o), free(s), free(ref);
    }
}

static void test_conv(void) {
    const int cases[][4] = {{1, 1, 1, 1}, {10, 3, 4, 1}, {11, 3, 4, 2}, {3000, 80, 16, 1}, {301, 17, 9, 2}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int t_in = cases[ci][0], c_in = cases[ci][1], c_out = cases[ci][2], stride = cases[ci][3];
        int t_out = (t_in + 2 - 3) / stride + 1;
        float *x = rand_vec((size_t)t_in * c_in, 1.0f), *w = rand_vec((size_t)c_out * c_in * 3, 1.0f);
        float *b = rand_vec((size_t)c_out, 1.0f), *y = malloc(sizeof(float) * t_out * c_out);
        float *cols = malloc(sizeof(float) * t_out * c_in * 3);
        double *ref = malloc(sizeof(double) * t_out * c_out);
        for (int t = 0; t < t_out; t++)
            for (int o = 0; o < c_out; o++) {
                double s = b[o];
                for (int c = 0; c < c_in; c++)
                    for (int j = 0; j < 3; j++) {
                        int ti = t * stride - 1 + j;
                        if (ti >= 0 && ti < t_in)
                            s += (double)w[((size_t)o * c_in + c) * 3 + j] * x[(size_t)ti * c_in + c];
                    }
                ref[(size_t)t * c_out + o] = s;
            }
        sotto_conv1d_k3(x, t_in, c_in, w, b, c_out, stride, y, cols);
        double e = check_rel_err(y, ref, (size_t)t_out * c_out);
        CHECK_MSG(e < 2e-6, "conv case %zu: %g", ci, e);
        free(x), free(w), free(b), free(y), free(cols), free(ref);
    }
}

int main(void) {
    for (int threads = 1; threads <= 2; threads++) {
        sotto_threads_set(threads);
        test_linear();
        test_elementwise();
        test_attention();
        test_attention_rows();
        test_conv();
    }
    test_fastmath();
    return check_report();
}
